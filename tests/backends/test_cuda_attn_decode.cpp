// Decode attention (backends/cuda/ops-attention-decode.cu) timed on its own at model shapes:
// a chain of 32 ATTN nodes (one per layer, each with its own K/V cache of 4096 keys, the next
// layer's query is this layer's output), so the time per node is the kernel and its split
// merge, with the K/V bytes read from memory (32 layers of caches do not fit the L2). Prints
// microseconds per layer and the K/V bytes per second for each cache type, for comparing the
// quantized caches with F16 (issue 6: within 5% at 4k context) without a whole model.
//
// Off unless EMBER_ATTN_DEC_BENCH=1 (it takes a few seconds); skips without a CUDA device.
// EMBER_ATTN_DEC_BENCH_KV=4096 sets the keys; EMBER_ATTN_DEC_BENCH_ONLY="8B q8_0" times only the
// shapes (8B, 1B) and types (their names) it names (F16 runs anyway: the others' reference). The kernel's switches (EMBER_CUDA_ATTN_DEC_FAST,
// EMBER_CUDA_ATTN_DEC_BLOCKS) are read once per process: compare them across runs.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend-test-util.h"
#include "backend.h"
#include "graph.h"

namespace {

struct attn_shape {
    const char * name;
    int64_t      d, heads, kv_heads;
};

// Seconds per run of a chain of n_layer ATTN nodes over caches of n_kv keys of type kv.
double time_chain(ember_device * dev, const attn_shape & s, ember_type kv, int64_t n_kv, int n_layer, bool & finite) {
    ember_graph    g;
    ember_tensor * q    = g.new_tensor(EMBER_TYPE_F32, s.d, s.heads, 1);
    ember_tensor * mask = g.new_tensor(EMBER_TYPE_F32, n_kv, 1);
    std::vector<ember_tensor *> ks, vs;
    ember_tensor *              x = q;
    for (int l = 0; l < n_layer; l++) {
        ks.push_back(g.new_tensor(kv, s.d, s.kv_heads, n_kv));
        vs.push_back(g.new_tensor(kv, s.d, s.kv_heads, n_kv));
        x = ember_attn(g, x, ks.back(), vs.back(), mask, 1.0f / std::sqrt(static_cast<float>(s.d)));
    }
    g.build_forward(x);

    ember_buffer * buf = ember_test::place_graph(g, dev);
    buf->iface.clear(buf, 0);

    // One random cache (values in [-1, 1) encoded as kv), copied into every layer's K and V.
    std::mt19937                          rng(42);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float>                    f(static_cast<size_t>(s.d));
    std::vector<uint8_t>                  bytes(ember_nbytes(ks[0]));
    const int64_t                         rows = s.kv_heads * n_kv;
    for (int64_t r = 0; r < rows; r++) {
        for (float & v : f) v = u(rng);
        ember_type_get_traits(kv)->from_float(f.data(), bytes.data() + r * ks[0]->nb[1], s.d);
    }
    for (int l = 0; l < n_layer; l++) {
        ember_tensor_set(ks[l], bytes.data(), 0, bytes.size());
        ember_tensor_set(vs[l], bytes.data(), 0, bytes.size());
    }
    std::vector<float> qv(static_cast<size_t>(s.d * s.heads));
    for (float & v : qv) v = u(rng);
    ember_tensor_set(q, qv.data(), 0, qv.size() * sizeof(float));

    ember_stream_params sp{};
    sp.n_threads     = 2;
    ember_stream * st = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &st) == EMBER_OK);
    const int32_t n_nodes = static_cast<int32_t>(g.nodes.size());
    for (int i = 0; i < 3; i++) REQUIRE(st->iface.graph_compute(st, &g, 0, n_nodes) == EMBER_OK);  // warm-up, graph capture
    st->iface.synchronize(st);
    const int  reps = 20;
    const auto t0   = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; i++) REQUIRE(st->iface.graph_compute(st, &g, 0, n_nodes) == EMBER_OK);
    st->iface.synchronize(st);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;

    std::vector<float> out(static_cast<size_t>(ember_nelements(x)));
    ember_tensor_get(x, out.data(), 0, out.size() * sizeof(float));
    finite = true;
    for (float v : out) finite = finite && std::isfinite(v);
    ember_stream_free(st);
    ember_buffer_free(buf);
    return sec;
}

}  // namespace

TEST_CASE("[cuda] decode attention timing at model shapes (EMBER_ATTN_DEC_BENCH=1)") {
    ember_device * dev = ember_registry_find_device("cuda");
    if (!dev) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const char * on = std::getenv("EMBER_ATTN_DEC_BENCH");
    if (!on || std::strcmp(on, "1") != 0) {
        MESSAGE("skipped: set EMBER_ATTN_DEC_BENCH=1 to time decode attention");
        return;
    }
    const char *  kv_env = std::getenv("EMBER_ATTN_DEC_BENCH_KV");
    const int64_t n_kv   = kv_env && std::atoll(kv_env) > 0 ? std::atoll(kv_env) : 4096;
    const int     layers = 32;
    const char *  fast   = std::getenv("EMBER_CUDA_ATTN_DEC_FAST");
    const char *  only   = std::getenv("EMBER_ATTN_DEC_BENCH_ONLY");
    const auto    chosen = [&](const char * name) { return !only || std::strstr(only, name); };
    for (const attn_shape & s : {attn_shape{"8B", 128, 32, 8}, attn_shape{"1B", 64, 32, 8}}) {
        if (!chosen(s.name)) continue;
        double f16_us = 0;
        for (ember_type kv : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_Q4_0}) {
            if (kv != EMBER_TYPE_F16 && !chosen(ember_type_get_name(kv))) continue;
            bool         finite = false;
            const double us     = 1e6 * time_chain(dev, s, kv, n_kv, layers, finite) / layers;
            CHECK(finite);
            const double kv_bytes = 2.0 * s.kv_heads * n_kv * ember_row_size(kv, s.d);
            if (kv == EMBER_TYPE_F16) f16_us = us;
            std::printf("attn decode %s d=%lld n_kv=%lld %-9s FAST=%s: %7.2f us/layer, %6.0f GB/s of K/V, %.3f of F16's time\n", s.name,
                        static_cast<long long>(s.d), static_cast<long long>(n_kv), ember_type_get_name(kv), fast ? fast : "default", us,
                        kv_bytes / (us * 1e-6) / 1e9, f16_us > 0 ? us / f16_us : 0.0);
        }
    }
}

#endif  // EMBER_HAVE_CUDA
