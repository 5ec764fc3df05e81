// A reused graph allocates nothing: global operator new is replaced here by a counting
// version (counting only while g_counting is set).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "backend-test-util.h"

static std::atomic<bool> g_counting{false};
static std::atomic<int>  g_allocs{0};

static void * counted_alloc(std::size_t size) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1);
    void * p = std::malloc(size ? size : 1);
    if (!p) throw std::bad_alloc();
    return p;
}

void * operator new(std::size_t size) { return counted_alloc(size); }
void * operator new[](std::size_t size) { return counted_alloc(size); }
void * operator new(std::size_t size, const std::nothrow_t &) noexcept {
    try {
        return counted_alloc(size);
    } catch (...) {
        return nullptr;
    }
}
void * operator new[](std::size_t size, const std::nothrow_t &) noexcept {
    try {
        return counted_alloc(size);
    } catch (...) {
        return nullptr;
    }
}
// Out of line, so that GCC does not pair the free() with a visible operator new and warn.
__attribute__((noinline)) static void counted_free(void * p) { std::free(p); }

void operator delete(void * p) noexcept { counted_free(p); }
void operator delete[](void * p) noexcept { counted_free(p); }
void operator delete(void * p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void * p, std::size_t) noexcept { counted_free(p); }

using namespace ember_test;

TEST_SUITE("backends") {

TEST_CASE("[cpu] a reused graph computes without allocating") {
    for (int n_threads : {1, 4}) {
        CAPTURE(n_threads);
        cpu_graph   G(n_threads);
        block_graph b = build_block(G);
        REQUIRE(G.compute() == EMBER_OK);  // first run: the work buffer grows here

        g_allocs.store(0);
        g_counting.store(true);
        const ember_status st1 = G.compute();
        const ember_status st2 = G.compute();
        g_counting.store(false);
        CHECK(st1 == EMBER_OK);
        CHECK(st2 == EMBER_OK);
        CHECK(g_allocs.load() == 0);
        (void) b;
    }
}

}  // TEST_SUITE
