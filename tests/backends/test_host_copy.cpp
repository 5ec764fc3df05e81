// ember_host_copier (backends/common/host-copy.h): large copies split over helper threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "host-copy.h"

namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t             x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v[i] = static_cast<uint8_t>(x);
    }
    return v;
}

}  // namespace

// Every size (below the split threshold, whole chunks, a partial last chunk, one byte past a
// chunk) with 0, 1 and 3 helpers, sleeping (spin 0) or polling: the bytes arrive, nothing
// around them is written, and copies after one another reuse the helpers.
TEST_CASE("[host-copy] copies of every size with and without helpers") {
    for (const int helpers : {0, 1, 3}) {
        for (const int spin : {0, 2000}) {
            CAPTURE(helpers);
            CAPTURE(spin);
            ember_host_copier cp(helpers, spin);
            CHECK(cp.helpers() == helpers);
            uint32_t seed = 1;
            for (const size_t n : {size_t(0), size_t(1), size_t(1000), ember_host_copier::k_min_split - 1, ember_host_copier::k_min_split,
                                   4 * ember_host_copier::k_chunk + 1, size_t(513024), size_t(3) << 20}) {
                CAPTURE(n);
                const std::vector<uint8_t> src = pattern(n, seed++);
                std::vector<uint8_t>       dst(n + 64, 0xA5);
                cp.copy(dst.data() + 32, src.data(), n);
                CHECK(std::equal(src.begin(), src.end(), dst.begin() + 32));
                bool guard = true;
                for (size_t i = 0; i < 32; i++) guard = guard && dst[i] == 0xA5 && dst[n + 32 + i] == 0xA5;
                CHECK(guard);
            }
        }
    }
}

// The helpers do take part: over enough large copies some chunks are theirs (polling helpers
// are at the job within microseconds; each copy here is 64 chunks).
TEST_CASE("[host-copy] helpers share the work") {
    ember_host_copier          cp(2, 100000);
    const std::vector<uint8_t> src = pattern(2 << 20, 7);
    std::vector<uint8_t>       dst(src.size());
    for (int i = 0; i < 500 && cp.helper_chunks() == 0; i++) {
        std::memset(dst.data(), 0, dst.size());
        cp.copy(dst.data(), src.data(), src.size());
        REQUIRE(dst == src);
    }
    CHECK(cp.helper_chunks() > 0);
}

// The helper count a backend asks for: the variable's count (at most 16), else the default
// (4 on hosts of 16+ cores, 2 on 8+, 0 on smaller ones or for a CPU device); a value that is not a
// count keeps the default.
TEST_CASE("[host-copy] helper count from the environment") {
    const char * var  = "EMBER_TEST_COPY_THREADS";
    const unsigned cores = std::thread::hardware_concurrency();
    const int      dflt  = cores >= 16 ? 4 : cores >= 8 ? 2 : 0;
    unsetenv(var);
    CHECK(ember_host_copier::helpers_wanted(var, false) == dflt);
    CHECK(ember_host_copier::helpers_wanted(var, true) == 0);
    setenv(var, "3", 1);
    CHECK(ember_host_copier::helpers_wanted(var, true) == 3);
    setenv(var, "0", 1);
    CHECK(ember_host_copier::helpers_wanted(var, false) == 0);
    setenv(var, "40", 1);
    CHECK(ember_host_copier::helpers_wanted(var, false) == 16);
    for (const char * bad : {"abc", "2x", "-1", ""}) {
        setenv(var, bad, 1);
        CHECK(ember_host_copier::helpers_wanted(var, false) == dflt);
    }
    unsetenv(var);
}
