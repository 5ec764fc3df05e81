#include "cpu-profile.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

bool ember_cpu_profile_enabled() {
    static const bool on = [] {
        const char * v = std::getenv("EMBER_PROFILE");
        return v && *v && std::strcmp(v, "0") != 0;
    }();
    return on;
}

void ember_cpu_profile::print() const {
    if (n_calls == 0) return;
    const double per = 1e3 * (double) n_calls;  // ns -> us per call
    std::fprintf(stderr, "ember: cpu profile: %lld graph_compute calls, %d threads; times in us per call\n",
                 (long long) n_calls, n_threads);
    std::fprintf(stderr, "  %-9s %6s %8s %10s %10s %10s\n", "op", "nodes", "barriers", "compute0", "compute*", "barrier*");
    double  sum_c0 = 0, sum_c = 0, sum_b = 0;
    int64_t n_barriers = 0;
    for (int op = 0; op < EMBER_OP_COUNT; op++) {
        int64_t c0 = th[0].compute_ns[op], c = 0, b = 0, n = th[0].nodes[op];
        for (int t = 0; t < n_threads && t < EMBER_CPU_PROFILE_MAX_THREADS; t++) {
            c += th[t].compute_ns[op];
            b += th[t].barrier_ns[op];
        }
        if (n == 0) continue;
        const int nt = n_threads > 0 ? n_threads : 1;
        std::fprintf(stderr, "  %-9s %6.1f %8.1f %10.2f %10.2f %10.2f\n", ember_op_name((ember_op) op), n / (double) n_calls,
                     th[0].barriers[op] / (double) n_calls, c0 / per, c / per / nt, b / per / nt);
        n_barriers += th[0].barriers[op];
        sum_c0 += c0 / per;
        sum_c += c / per / nt;
        sum_b += b / per / nt;
    }
    std::fprintf(stderr, "  %-9s %6s %8.1f %10.2f %10.2f %10.2f   (compute0: thread 0; *: mean over threads)\n", "all", "",
                 n_barriers / (double) n_calls, sum_c0, sum_c, sum_b);
    std::fprintf(stderr, "  graph_compute wall %.2f us, node loop %.2f us, outside the loop (checks, wake, join) %.2f us\n",
                 total_ns / per, loop_ns / per, (total_ns - loop_ns) / per);
}
