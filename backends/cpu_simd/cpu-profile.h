// Opt-in timing of the CPU stream (EMBER_PROFILE=1 in the environment): per op type, the time
// threads spend in kernels and waiting at the barrier that ends each node, plus the time of
// graph_compute outside the node loop (checks, thread wake-up and join). The totals are printed
// to stderr, per graph_compute call ("per token" in a decode loop), when the stream is freed.
// Off, it costs one predictable branch per node.
#ifndef EMBER_CPU_PROFILE_H
#define EMBER_CPU_PROFILE_H

#include <chrono>
#include <cstdint>

#include "backend.h"

// Nanoseconds on a monotonic clock.
inline int64_t ember_cpu_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// True when EMBER_PROFILE is set to a value other than "0" (read once).
bool ember_cpu_profile_enabled();

constexpr int EMBER_CPU_PROFILE_MAX_THREADS = 64;  // threads beyond this are not timed

struct ember_cpu_profile {
    struct alignas(64) per_thread {
        int64_t compute_ns[EMBER_OP_COUNT] = {};  // in kernels, by op type
        int64_t barrier_ns[EMBER_OP_COUNT] = {};  // waiting at the barrier after nodes of that type
        int64_t nodes[EMBER_OP_COUNT]      = {};
        int64_t barriers[EMBER_OP_COUNT]   = {};  // nodes of that type that ended with a barrier
    };
    per_thread th[EMBER_CPU_PROFILE_MAX_THREADS];
    int64_t    n_calls    = 0;  // graph_compute calls
    int64_t    total_ns   = 0;  // wall time of graph_compute calls, thread 0's view
    int64_t    loop_ns    = 0;  // of which thread 0 spent in the node loop
    int        n_threads  = 0;  // most threads seen

    // Prints the per-call averages to stderr.
    void print() const;
};

#endif  // EMBER_CPU_PROFILE_H
