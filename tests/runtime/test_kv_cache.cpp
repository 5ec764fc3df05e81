// The KV cache's cell bookkeeping: slots, sequences, removal, sharing, masks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "runtime/kv-cache.h"

namespace {

// A cache of n cells over CPU memory (one layer, tiny rows).
struct cpu_cache {
    ember_kv_cache kv;
    explicit cpu_cache(uint32_t n) {
        std::vector<ember_buffer_type *> bufts{ember_device_buffer_type(ember_registry_cpu_device())};
        kv.init(n, 1, 32, 32, EMBER_TYPE_F16, EMBER_TYPE_Q8_0, bufts);
    }
};

void add(ember_kv_cache & kv, std::vector<int32_t> pos, int32_t seq) {
    std::vector<int32_t> cells, seqs(pos.size(), seq);
    REQUIRE(kv.find_slots(static_cast<uint32_t>(pos.size()), cells));
    kv.occupy(cells.data(), pos.data(), seqs.data(), static_cast<uint32_t>(pos.size()));
}

}  // namespace

TEST_SUITE("runtime") {

TEST_CASE("[kv_cache] tensors are laid out per layer in the cache type") {
    cpu_cache c(64);
    CHECK(c.kv.size() == 64);
    CHECK(c.kv.k_l[0].type == EMBER_TYPE_F16);
    CHECK(c.kv.v_l[0].type == EMBER_TYPE_Q8_0);
    CHECK(c.kv.k_l[0].ne[1] == 64);
    CHECK(c.kv.v_l[0].nb[1] == ember_row_size(EMBER_TYPE_Q8_0, 32));
    CHECK(c.kv.k_l[0].data != nullptr);
}

TEST_CASE("[kv_cache] slots, positions and sequences") {
    cpu_cache c(300);
    ember_kv_cache & kv = c.kv;
    CHECK(kv.seq_pos_max(0) == -1);
    add(kv, {0, 1, 2, 3}, 0);
    add(kv, {0, 1}, 1);
    CHECK(kv.used() == 6);
    CHECK(kv.seq_pos_max(0) == 3);
    CHECK(kv.seq_pos_max(1) == 1);
    CHECK(kv.n_kv() == 256);  // padded so graphs are reused

    SUBCASE("removing a tail frees cells and lowers the max position") {
        kv.seq_rm(0, 2, -1);
        CHECK(kv.used() == 4);
        CHECK(kv.seq_pos_max(0) == 1);
        CHECK(kv.seq_pos_max(1) == 1);
    }
    SUBCASE("removing all sequences in a range") {
        kv.seq_rm(-1, 1, 2);
        CHECK(kv.used() == 4);
        CHECK(kv.seq_pos_max(1) == 0);
    }
    SUBCASE("copy shares cells without using new ones") {
        kv.seq_cp(0, 2, 0, 2);
        CHECK(kv.used() == 6);
        CHECK(kv.seq_pos_max(2) == 1);
        kv.seq_rm(0, -1, -1);  // cells shared with 2 stay
        CHECK(kv.used() == 4);
        CHECK(kv.seq_pos_max(2) == 1);
    }
    SUBCASE("clear") {
        kv.clear();
        CHECK(kv.used() == 0);
        CHECK(kv.seq_pos_max(0) == -1);
        CHECK(kv.n_kv() == 256);
    }
    SUBCASE("a full cache refuses slots") {
        std::vector<int32_t> cells;
        CHECK(kv.find_slots(294, cells));
        CHECK_FALSE(kv.find_slots(295, cells));
    }
    SUBCASE("freed cells are reused first") {
        kv.seq_rm(0, 0, 1);
        std::vector<int32_t> cells;
        REQUIRE(kv.find_slots(1, cells));
        CHECK(cells[0] == 0);
    }
}

TEST_CASE("[kv_cache] the attended range grows in padded steps") {
    cpu_cache c(600);
    std::vector<int32_t> pos(257);
    for (int i = 0; i < 257; i++) pos[i] = i;
    add(c.kv, pos, 0);
    CHECK(c.kv.n_kv() == 512);
    c.kv.seq_rm(0, 200, -1);
    CHECK(c.kv.n_kv() == 256);
}

TEST_CASE("[kv_cache] the padding from EMBER_KV_PAD (measuring), read at init") {
    struct env_pad {  // set for this case, removed however it ends
        explicit env_pad(const char * v) { setenv("EMBER_KV_PAD", v, 1); }
        ~env_pad() { unsetenv("EMBER_KV_PAD"); }
    };
    {
        env_pad  e("128");
        cpu_cache c(600);
        CHECK(c.kv.pad == 128);
        add(c.kv, {0, 1, 2}, 0);
        CHECK(c.kv.n_kv() == 128);
        std::vector<int32_t> pos(127);
        for (int i = 0; i < 127; i++) pos[i] = 3 + i;
        add(c.kv, pos, 0);  // 130 cells
        CHECK(c.kv.n_kv() == 256);
    }
    for (const char * bad : {"100", "1024", "128x", "", "-128"}) {
        CAPTURE(bad);
        env_pad  e(bad);
        cpu_cache c(600);
        CHECK(c.kv.pad == EMBER_KV_PAD);  // not one of the sizes: the default
    }
    cpu_cache c(100);  // unset; a cache smaller than the padding attends all of it
    CHECK(c.kv.pad == EMBER_KV_PAD);
    add(c.kv, {0}, 0);
    CHECK(c.kv.n_kv() == 100);
}

TEST_CASE("[kv_cache] mask: own sequence, causal, nothing else") {
    cpu_cache c(8);
    add(c.kv, {0, 1, 2}, 0);
    add(c.kv, {0, 1}, 1);
    std::vector<float>   mask(8 * 2);
    std::vector<int32_t> pos{1, 5}, seq{0, 1};
    c.kv.fill_mask(mask.data(), 8, pos.data(), seq.data(), 2);
    // token 0: seq 0 at pos 1 sees cells 0,1 (pos 0,1), not 2 (pos 2) nor seq 1's cells
    CHECK(mask[0] == 0.0f);
    CHECK(mask[1] == 0.0f);
    CHECK(std::isinf(mask[2]));
    CHECK(std::isinf(mask[3]));
    CHECK(std::isinf(mask[7]));
    // token 1: seq 1 at pos 5 sees cells 3, 4 only
    CHECK(std::isinf(mask[8 + 0]));
    CHECK(mask[8 + 3] == 0.0f);
    CHECK(mask[8 + 4] == 0.0f);
    CHECK(std::isinf(mask[8 + 5]));
}

}  // TEST_SUITE
