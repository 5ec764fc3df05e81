// Runs a CPU attention kernel directly (no graph, no stream): the reference kernel
// (ember_cpu_attn) or the tiled one with a given kernel table, on a pool of n threads with its
// own 64-byte-aligned work buffer, as the stream would. Used by test_cpu_attention.cpp and, on
// one thread (qemu-user), by test_cpu_neon.cpp.
#ifndef EMBER_TESTS_ATTN_TEST_UTIL_H
#define EMBER_TESTS_ATTN_TEST_UTIL_H

#include <atomic>
#include <climits>
#include <cstdint>
#include <vector>

#include "backends/cpu_simd/cpu-ops.h"
#include "backends/cpu_simd/kernels.h"

namespace ember_test {

struct attn_op_runner {
    const ember_cpu_kernel_table * kt  = nullptr;  // nullptr: the reference kernel
    ember_tensor *                 dst = nullptr;
    ember_cpu_compute_params       p{};
    std::atomic<int>               error{0};
    std::atomic<int>               stop_at{INT_MAX};

    static void task(void * arg, int ith, int nth) {
        attn_op_runner *         r = static_cast<attn_op_runner *>(arg);
        ember_cpu_compute_params p = r->p;
        p.ith                      = ith;
        p.nth                      = nth;
        if (r->kt) {
            ember_cpu_attn_tiled_with(&p, r->dst, r->kt);
        } else {
            ember_cpu_attn(&p, r->dst);
        }
    }

    ember_status run(ember_tensor * out, const ember_cpu_kernel_table * table, int n_threads = 1) {
        ember_thread_pool pool(n_threads);
        const size_t      ws = table ? ember_cpu_attn_tiled_work_size(out, n_threads)
                                     : ember_cpu_attn_work_size(out, n_threads);
        std::vector<double> buf(ws / sizeof(double) + 16);  // 8-byte aligned at least
        char *              w = reinterpret_cast<char *>(buf.data());
        w += (64 - reinterpret_cast<uintptr_t>(w) % 64) % 64;
        kt        = table;
        dst       = out;
        p.wdata   = w;
        p.wsize   = ws;
        p.pool    = &pool;
        p.node    = 0;
        p.error   = &error;
        p.stop_at = &stop_at;
        pool.run(task, this);
        return static_cast<ember_status>(error.load());
    }
};

}  // namespace ember_test

#endif  // EMBER_TESTS_ATTN_TEST_UTIL_H
