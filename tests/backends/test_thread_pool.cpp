// The persistent thread pool, and results that do not depend on the number of threads.
#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "backend-test-util.h"
#include "backends/cpu_simd/thread-pool.h"

using namespace ember_test;

namespace {

struct count_task {
    std::vector<int> per_thread;
    std::atomic<int> total{0};
};

void count_run(void * arg, int ith, int) {
    count_task * t = static_cast<count_task *>(arg);
    t->per_thread[ith]++;
    t->total.fetch_add(1);
}

struct barrier_task {
    ember_thread_pool *           pool;
    std::vector<std::atomic<int>> round;
    std::atomic<int>              errors{0};
    int                           n_rounds;
    explicit barrier_task(int n) : round(n) {}
};

// Each round every thread publishes its round number, and after a barrier checks that every
// other thread did too.
void barrier_run(void * arg, int ith, int nth) {
    barrier_task * t = static_cast<barrier_task *>(arg);
    for (int r = 1; r <= t->n_rounds; r++) {
        t->round[ith].store(r);
        t->pool->barrier();
        for (int j = 0; j < nth; j++)
            if (t->round[j].load() < r) t->errors.fetch_add(1);
        t->pool->barrier();
    }
}

std::vector<uint8_t> run_block(int n_threads) {
    cpu_graph   G(n_threads);
    block_graph b = build_block(G);
    REQUIRE(G.compute() == EMBER_OK);
    std::vector<uint8_t> out = get_bytes(b.out);
    std::vector<uint8_t> f16 = get_bytes(b.out_f16);
    std::vector<uint8_t> kc  = get_bytes(b.k_cache);
    std::vector<uint8_t> vc  = get_bytes(b.v_cache);
    out.insert(out.end(), f16.begin(), f16.end());
    out.insert(out.end(), kc.begin(), kc.end());
    out.insert(out.end(), vc.begin(), vc.end());
    return out;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[thread_pool] every thread runs each task once") {
    for (int n : {1, 2, 3, 8}) {
        CAPTURE(n);
        ember_thread_pool pool(n);
        CHECK(pool.n_threads() == n);
        count_task t;
        t.per_thread.assign(n, 0);
        for (int i = 0; i < 500; i++) pool.run(count_run, &t);
        CHECK(t.total.load() == 500 * n);
        for (int c : t.per_thread) CHECK(c == 500);
    }
}

TEST_CASE("[thread_pool] barrier holds every thread until all arrive") {
    for (int n : {2, 3, 8}) {
        CAPTURE(n);
        ember_thread_pool pool(n);
        barrier_task      t(n);
        t.pool     = &pool;
        t.n_rounds = 200;
        pool.run(barrier_run, &t);
        pool.run(barrier_run, &t);  // and again, after the workers went idle
        CHECK(t.errors.load() == 0);
    }
}

TEST_CASE("[thread_pool] sleeping workers wake for the next task") {
    ember_thread_pool pool(3);
    count_task        t;
    t.per_thread.assign(3, 0);
    pool.run(count_run, &t);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin phase
    pool.run(count_run, &t);
    CHECK(t.total.load() == 6);
}

TEST_CASE("[cpu] results are identical for 1, 2, 3 and 8 threads") {
    const std::vector<uint8_t> ref = run_block(1);
    for (int n : {2, 3, 8}) {
        CAPTURE(n);
        CHECK(run_block(n) == ref);
    }
}

TEST_CASE("[cpu] many consecutive computes and set_n_threads") {
    cpu_graph   G(3);
    block_graph b = build_block(G);
    REQUIRE(G.compute() == EMBER_OK);
    const std::vector<uint8_t> ref = get_bytes(b.out);
    for (int i = 0; i < 100; i++) {
        REQUIRE(G.compute() == EMBER_OK);
        REQUIRE(get_bytes(b.out) == ref);
    }
    for (int n : {1, 4, 2, 0, 8}) {
        CAPTURE(n);
        G.stream->iface.set_n_threads(G.stream, n);
        for (int i = 0; i < 5; i++) {
            REQUIRE(G.compute() == EMBER_OK);
            CHECK(get_bytes(b.out) == ref);
        }
    }
}

}  // TEST_SUITE
