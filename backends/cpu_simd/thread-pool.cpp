#include "thread-pool.h"

#if defined(__linux__)
#    include <linux/futex.h>
#    include <sys/syscall.h>
#    include <unistd.h>

#    include <climits>
#endif

#if defined(__x86_64__) || defined(__i386__)
#    include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#elif defined(__aarch64__) || defined(__arm__)
static inline void cpu_relax() { __asm__ __volatile__("yield"); }
#else
static inline void cpu_relax() {}
#endif

// Spin iterations before a worker sleeps (roughly 0.1-1 ms: covers the gap between graphs of
// one decode step, not a user's pause between requests). Every k_yield_every spins the thread
// yields, so that oversubscribed pools (more threads than cores) still make progress.
static constexpr int k_spin_before_sleep = 1 << 14;
static constexpr int k_yield_every       = 64;

static inline void spin_pause(int & spins) {
    if (++spins % k_yield_every == 0) {
        std::this_thread::yield();
    } else {
        cpu_relax();
    }
}

ember_thread_pool::ember_thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back(&ember_thread_pool::worker_main, this, i);
}

ember_thread_pool::~ember_thread_pool() {
    stop_.store(true);
    generation_.fetch_add(1);
    wake_all();
    for (std::thread & t : workers_) t.join();
}

//
// Sleeping. A worker announces itself in n_sleeping_ before it re-checks the generation and
// sleeps; run() bumps the generation before it reads n_sleeping_. Both are seq_cst, so either
// run() sees the sleeper and wakes it, or the sleeper sees the new generation and does not sleep.
//
#if defined(__linux__)
// A futex wakes all sleepers at once without a shared mutex to re-acquire: with a condition
// variable, 15 woken workers queue on the mutex one by one (about 1 ms measured on 16 cores).
void ember_thread_pool::sleep_while(uint32_t seen) {
    static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be a plain uint32_t");
    n_sleeping_.fetch_add(1);
    if (generation_.load() == seen) {
        syscall(SYS_futex, reinterpret_cast<uint32_t *>(&generation_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    }
    n_sleeping_.fetch_sub(1);
}

void ember_thread_pool::wake_all() {
    if (n_sleeping_.load() == 0) return;
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&generation_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
#else
void ember_thread_pool::sleep_while(uint32_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    n_sleeping_.fetch_add(1);
    cv_.wait(lock, [&] { return generation_.load() != seen; });
    n_sleeping_.fetch_sub(1);
}

void ember_thread_pool::wake_all() {
    if (n_sleeping_.load() == 0) return;
    { std::lock_guard<std::mutex> lock(mutex_); }
    cv_.notify_all();
}
#endif

void ember_thread_pool::worker_main(int ith) {
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen   = 0;
        int      spins = 0;
        while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
            if (spins < k_spin_before_sleep) {
                spin_pause(spins);
            } else {
                sleep_while(seen);
            }
        }
        if (stop_.load()) return;
        seen = gen;
        fn_(arg_, ith, n_threads_);
        n_done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void ember_thread_pool::run(ember_thread_task_fn fn, void * arg) {
    if (n_threads_ == 1) {
        fn(arg, 0, 1);
        return;
    }
    // Every worker finished the previous task before the last run() returned, so these plain
    // writes race with nothing; the generation bump publishes them.
    fn_  = fn;
    arg_ = arg;
    n_done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1);
    wake_all();

    fn(arg, 0, n_threads_);

    const int n_workers = n_threads_ - 1;
    int       spins     = 0;
    while (n_done_.load(std::memory_order_acquire) != n_workers) spin_pause(spins);
}

void ember_thread_pool::barrier() {
    if (n_threads_ == 1) return;
    const int passed = n_barrier_passed_.load(std::memory_order_relaxed);
    if (n_barrier_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
        // Last to arrive: reset and release the others.
        n_barrier_.store(0, std::memory_order_relaxed);
        n_barrier_passed_.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    int spins = 0;
    while (n_barrier_passed_.load(std::memory_order_acquire) == passed) spin_pause(spins);
}
