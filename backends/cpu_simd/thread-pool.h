// A persistent thread pool for one CPU stream: n_threads - 1 workers are created once, spin
// briefly after each task and then sleep (a futex on Linux, a condition variable elsewhere);
// the calling thread works as thread 0. run() and barrier() allocate nothing.
#ifndef EMBER_CPU_THREAD_POOL_H
#define EMBER_CPU_THREAD_POOL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

// One task, run by every thread of the pool: ith in [0, nth).
typedef void (*ember_thread_task_fn)(void * arg, int ith, int nth);

class ember_thread_pool {
  public:
    explicit ember_thread_pool(int n_threads);  // n_threads >= 1
    ~ember_thread_pool();
    ember_thread_pool(const ember_thread_pool &)             = delete;
    ember_thread_pool & operator=(const ember_thread_pool &) = delete;

    int  n_threads() const { return n_threads_; }
    // Runs fn(arg, ith, n_threads) on all threads, the caller as ith 0, and returns when every
    // thread has finished. One run at a time (not reentrant).
    void run(ember_thread_task_fn fn, void * arg);
    // Inside a task: returns once all n_threads threads have reached it.
    void barrier();

  private:
    void worker_main(int ith);
    void sleep_while(uint32_t seen);  // blocks while generation_ == seen (may return early)
    void wake_all();

    int                      n_threads_;
    std::vector<std::thread> workers_;
    ember_thread_task_fn     fn_  = nullptr;
    void *                   arg_ = nullptr;
#if !defined(__linux__)
    std::mutex              mutex_;
    std::condition_variable cv_;
#endif

    alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per run() (and at stop); the futex word
    std::atomic<bool>                 stop_{false};
    alignas(64) std::atomic<int>      n_sleeping_{0};
    alignas(64) std::atomic<int>      n_done_{0};
    alignas(64) std::atomic<int>      n_barrier_{0};
    alignas(64) std::atomic<int>      n_barrier_passed_{0};
};

#endif  // EMBER_CPU_THREAD_POOL_H
