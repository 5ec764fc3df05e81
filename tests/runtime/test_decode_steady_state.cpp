// Decoding a token of a known shape allocates nothing and reuses its graph; a context runs
// the requested number of CPU threads. (This file replaces operator new for test-runtime.)
#include <doctest/doctest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "ember.h"
#include "runtime/context.h"
#include "support/data-path.h"
#include "support/tiny-model.h"

namespace {
std::atomic<bool>     g_counting{false};
std::atomic<uint64_t> g_allocs{0};

int count_threads() {
    int   n = 0;
    DIR * d = opendir("/proc/self/task");
    if (!d) return -1;
    while (dirent * e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// count_threads() once it is `want`, or after 2 s: a joined thread can stay listed in
// /proc/self/task for a moment after pthread_join returns (the kernel wakes the joiner before it
// reaps the task), which failed a loaded CI run once.
int count_threads_settled(int want) {
    int n = count_threads();
    for (int i = 0; i < 2000 && n != want; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        n = count_threads();
    }
    return n;
}
}  // namespace

// gcc cannot see that these replace the global operators and warns about malloc/free pairs.
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Every plain form is replaced, so each allocation and its release use the same pair
// (malloc/free); the aligned forms keep the library's own pair.
namespace {
void * counted_alloc(size_t n) noexcept {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
}  // namespace

void * operator new(size_t n) {
    if (void * p = counted_alloc(n)) return p;
    throw std::bad_alloc();
}
void * operator new[](size_t n) {
    if (void * p = counted_alloc(n)) return p;
    throw std::bad_alloc();
}
void * operator new(size_t n, const std::nothrow_t &) noexcept { return counted_alloc(n); }
void * operator new[](size_t n, const std::nothrow_t &) noexcept { return counted_alloc(n); }
void   operator delete(void * p) noexcept { std::free(p); }
void   operator delete[](void * p) noexcept { std::free(p); }
void   operator delete(void * p, size_t) noexcept { std::free(p); }
void   operator delete[](void * p, size_t) noexcept { std::free(p); }
void   operator delete(void * p, const std::nothrow_t &) noexcept { std::free(p); }
void   operator delete[](void * p, const std::nothrow_t &) noexcept { std::free(p); }

TEST_SUITE("runtime") {

TEST_CASE("[decode] a decode step of a known shape allocates nothing and rebuilds no graph") {
    for (int32_t wtype : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        for (int32_t ctk : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
            CAPTURE(wtype);
            CAPTURE(ctk);
            tiny_model_spec spec;
            spec.weight_type = wtype;
            spec.n_ctx_train = 512;
            spec.n_embd      = 128;  // head_dim 32: a whole Q8_0 block per head
            const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());

            ember_model * model = nullptr;
            REQUIRE(ember_model_load(path.c_str(), nullptr, &model) == EMBER_OK);
            ember_context_params cp = ember_context_default_params();
            cp.n_threads            = 2;
            cp.type_k = cp.type_v = ctk;
            ember_context * ctx   = nullptr;
            REQUIRE(ember_context_create(model, &cp, &ctx) == EMBER_OK);

            std::vector<int32_t> prompt{1, 5, 9, 13, 17, 21, 25, 29};
            ember_batch          b = ember_batch_one(prompt.data(), static_cast<int32_t>(prompt.size()));
            REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
            int32_t tok = 3;
            b           = ember_batch_one(&tok, 1);
            REQUIRE(ember_decode(ctx, &b) == EMBER_OK);  // first use of the one-token shape

            const uint64_t builds = ctx->n_graph_builds;
            g_allocs              = 0;
            g_counting            = true;
            ember_status st       = EMBER_OK;
            for (int i = 0; i < 32 && st == EMBER_OK; i++) {
                tok = (tok * 7 + 1) % 128;
                st  = ember_decode(ctx, &b);
                if (st == EMBER_OK) tok = static_cast<int32_t>(ember_get_logits_ith(ctx, -1)[0] > 0 ? 4 : 5);
            }
            g_counting = false;
            CHECK(st == EMBER_OK);
            CHECK_MESSAGE(g_allocs.load() == 0, "heap allocations during 32 decode steps: ", g_allocs.load());
            CHECK(ctx->n_graph_builds == builds);
            CHECK(ember_kv_cache_used(ctx) == 8 + 1 + 32);

            ember_context_free(ctx);
            ember_model_free(model);
        }
    }
}

TEST_CASE("[decode] a context runs n_threads CPU threads (the caller's plus workers)") {
    tiny_model_spec   spec;
    const std::string path  = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
    ember_model *     model = nullptr;
    REQUIRE(ember_model_load(path.c_str(), nullptr, &model) == EMBER_OK);
    for (int32_t n : {1, 3}) {
        CAPTURE(n);
        const int            before = count_threads();
        ember_context_params cp     = ember_context_default_params();
        cp.n_threads                = n;
        ember_context * ctx         = nullptr;
        REQUIRE(ember_context_create(model, &cp, &ctx) == EMBER_OK);
        int32_t     tok = 1;
        ember_batch b   = ember_batch_one(&tok, 1);
        REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
        CHECK(count_threads() - before == n - 1);
        CHECK(ember_context_n_threads(ctx) == n);
        ember_context_free(ctx);
        CHECK(count_threads_settled(before) == before);  // workers are joined
    }
    ember_model_free(model);
}

}  // TEST_SUITE
