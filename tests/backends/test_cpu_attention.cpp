// The tiled CPU attention (ops-attention-tiled.cpp, the op the stream runs) against the
// one-pair-at-a-time reference kernel (ember_cpu_attn in ops-attention.cpp), with every kernel
// table this build and CPU have (scalar, avx2, avx512...), over cache types, GQA ratios, query
// and key counts that are not multiples of the tiles, causal / holed / no masks, fully hidden
// rows, strided K/V views and 1-3 threads; and the tables' vector exp against std::exp.
#include <doctest/doctest.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "attn-test-util.h"
#include "backend-test-util.h"
#include "backends/cpu_simd/cpu-ops.h"
#include "backends/cpu_simd/kernels.h"

using namespace ember_test;

namespace {

enum mask_kind { MASK_NONE, MASK_CAUSAL, MASK_HOLES };

struct attn_case {
    ember_type tk, tv;
    int64_t    d, n_head_kv, group, n_tokens, n_kv;
    mask_kind  mask;
    int        n_threads;
    float      scale;
    bool       strided;  // K/V are views of every other cell of a larger cache
};

std::string describe(const attn_case & c) {
    return std::string(ember_type_get_name(c.tk)) + "/" + ember_type_get_name(c.tv) + " d=" + std::to_string(c.d) +
           " kv_heads=" + std::to_string(c.n_head_kv) + " group=" + std::to_string(c.group) +
           " tokens=" + std::to_string(c.n_tokens) + " n_kv=" + std::to_string(c.n_kv) +
           " mask=" + std::to_string((int) c.mask) + " threads=" + std::to_string(c.n_threads) +
           " scale=" + std::to_string(c.scale) + (c.strided ? " strided" : "");
}

// Builds the case, runs the reference once and the tiled op with every table.
void check_case(const attn_case & c, uint32_t seed) {
    CAPTURE(describe(c));
    const int64_t  n_head = c.n_head_kv * c.group;
    cpu_graph      G(1);
    ember_tensor * q = G.g.new_tensor(EMBER_TYPE_F32, c.d, n_head, c.n_tokens);
    ember_tensor * k_src, *v_src, *k, *v;
    if (c.strided) {
        k_src = G.g.new_tensor(c.tk, c.d, c.n_head_kv, 2 * c.n_kv);
        v_src = G.g.new_tensor(c.tv, c.d, c.n_head_kv, 2 * c.n_kv);
        const int64_t ne[4] = {c.d, c.n_head_kv, c.n_kv, 1};
        size_t        nbk[4] = {k_src->nb[0], k_src->nb[1], 2 * k_src->nb[2], 2 * k_src->nb[2] * c.n_kv};
        size_t        nbv[4] = {v_src->nb[0], v_src->nb[1], 2 * v_src->nb[2], 2 * v_src->nb[2] * c.n_kv};
        k                    = ember_view_strided(G.g, k_src, ne, nbk, k_src->nb[2]);  // odd cells
        v                    = ember_view_strided(G.g, v_src, ne, nbv, v_src->nb[2]);
    } else {
        k = k_src = G.g.new_tensor(c.tk, c.d, c.n_head_kv, c.n_kv);
        v = v_src = G.g.new_tensor(c.tv, c.d, c.n_head_kv, c.n_kv);
    }
    ember_tensor * mask = c.mask == MASK_NONE ? nullptr : G.g.new_tensor(EMBER_TYPE_F32, c.n_kv, c.n_tokens);
    ember_tensor * out  = ember_attn(G.g, q, k, v, mask, c.scale);
    G.g.build_forward(out);
    G.alloc();
    REQUIRE(ember_cpu_supports_attn(out));

    set_floats(q, random_f32(ember_nelements(q), seed + 1, -2.0f, 2.0f));
    set_floats(k_src, random_f32(ember_nelements(k_src), seed + 2, -2.0f, 2.0f));
    set_floats(v_src, random_f32(ember_nelements(v_src), seed + 3));
    std::vector<bool> hidden_row(c.n_tokens, false);  // every key hidden: the output must be 0
    if (mask) {
        std::vector<float>                    mf(c.n_kv * c.n_tokens, 0.0f);
        std::mt19937                          rng(seed + 4);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (int64_t t = 0; t < c.n_tokens; t++) {
            for (int64_t j = 0; j < c.n_kv; j++) {
                float & m = mf[t * c.n_kv + j];
                if (c.mask == MASK_CAUSAL) {
                    if (j > c.n_kv - c.n_tokens + t) m = -INFINITY;
                } else {
                    const float x = u(rng);
                    m             = x < 0.3f ? -INFINITY : x < 0.4f ? -2.0f * x : 0.0f;
                    if (t == 1 || (t > 2 && t % 7 == 0 && j < c.n_kv / 2)) m = -INFINITY;  // whole rows, half rows
                }
            }
            bool all = true;
            for (int64_t j = 0; j < c.n_kv; j++) all = all && mf[t * c.n_kv + j] == -INFINITY;
            hidden_row[t] = all;
        }
        set_floats(mask, mf);
    }

    attn_op_runner ref;
    REQUIRE(ref.run(out, nullptr, 1) == EMBER_OK);
    const std::vector<float> want = get_f32(out);
    double                   wmax = 0.0;
    for (float x : want) wmax = std::fmax(wmax, std::fabs(x));

    for (int isa = 0; isa < EMBER_CPU_ISA_COUNT; isa++) {
        const ember_cpu_kernel_table * kt = ember_cpu_kernels_for((ember_cpu_isa) isa);
        if (!kt) continue;
        CAPTURE(kt->name);
        std::vector<float> poison(want.size(), NAN);  // every output must be written
        ember_tensor_set(out, poison.data(), 0, poison.size() * sizeof(float));
        attn_op_runner tiled;
        REQUIRE(tiled.run(out, kt, c.n_threads) == EMBER_OK);
        const std::vector<float> got = get_f32(out);
        double                   err = 0.0;
        for (size_t i = 0; i < got.size(); i++) {
            const double e = std::fabs((double) got[i] - (double) want[i]);
            err            = std::isnan(e) ? INFINITY : std::fmax(err, e);
        }
        CHECK(err <= 1e-5 * std::fmax(wmax, 1e-3));
        for (int64_t t = 0; t < c.n_tokens; t++) {
            if (!hidden_row[t]) continue;
            for (int64_t i = 0; i < c.d * n_head; i++) REQUIRE(got[t * c.d * n_head + i] == 0.0f);
        }
    }
}

}  // namespace

TEST_CASE("[cpu attn] tiled attention matches the reference kernel with every kernel table") {
    const ember_type types[][2] = {
        {EMBER_TYPE_F16, EMBER_TYPE_F16},   {EMBER_TYPE_F32, EMBER_TYPE_F32},        {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0},
        {EMBER_TYPE_Q4_0, EMBER_TYPE_F16},  {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E4M3}, {EMBER_TYPE_F32, EMBER_TYPE_F16},
    };
    const int64_t tokens[] = {1, 5, 64, 130};
    const int64_t kvs[]    = {1, 37, 64, 129, 600, 200, 65, 300};
    uint32_t      seed     = 1000;
    int           ci       = 0;
    for (const auto & tp : types) {
        const bool float_types = ember_type_get_traits(tp[0])->block_size == 1 && ember_type_get_traits(tp[1])->block_size == 1;
        for (int64_t group : {1, 2, 3, 4}) {
            for (int64_t nt : tokens) {
                attn_case c;
                c.tk        = tp[0];
                c.tv        = tp[1];
                c.d         = float_types && ci % 3 == 1 ? 40 : 64;
                c.n_head_kv = ci % 2 == 0 ? 2 : 1;
                c.group     = group;
                c.n_tokens  = nt;
                c.n_kv      = kvs[ci % 8];
                if (nt == 130 && c.n_kv < 129) c.n_kv = 129 + ci % 5;  // a causal prefill over the whole cache
                c.mask      = (mask_kind) (ci % 3 == 0 ? MASK_CAUSAL : ci % 3 == 1 ? MASK_HOLES : MASK_NONE);
                if (nt >= 64 && ci % 2 == 0) c.mask = MASK_CAUSAL;
                c.n_threads = 1 + ci % 3;
                c.scale     = ci % 4 == 3 ? 0.5f : 1.0f / std::sqrt((float) c.d);
                c.strided   = ci % 5 == 2;
                check_case(c, seed += 10);
                ci++;
            }
        }
    }
}

TEST_CASE("[cpu attn] decode splits the keys across threads and merges them") {
    // One (kv head, token) pair for 2 or 3 threads: the keys are split into chunks.
    for (int threads : {2, 3}) {
        for (int64_t n_kv : {31, 64, 97, 600}) {
            for (mask_kind m : {MASK_NONE, MASK_HOLES}) {
                attn_case c{EMBER_TYPE_F16, EMBER_TYPE_F16, 64, 1, 4, 1, n_kv, m, threads, 0.125f, false};
                check_case(c, 7000 + (uint32_t) n_kv);
                c.n_head_kv = 3;  // 3 pairs for 2 threads
                c.n_tokens  = 2;
                check_case(c, 7100 + (uint32_t) n_kv);
            }
        }
    }
    // two tokens, the second with every key hidden; keys split over 3 threads, strided K/V
    attn_case c{EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, 64, 1, 2, 2, 300, MASK_HOLES, 3, 0.125f, true};
    check_case(c, 7300);
}

TEST_CASE("[cpu attn] vector exp of every kernel table") {
    std::vector<float> x;
    for (int i = 0; i <= 20000; i++) x.push_back(-100.0f + 0.0055f * (float) i);  // [-100, 10]
    x.push_back(-INFINITY);
    x.push_back(0.0f);
    x.push_back(-87.49f);
    x.push_back(-87.51f);
    int tested = 0;
    for (int isa = 0; isa < EMBER_CPU_ISA_COUNT; isa++) {
        const ember_cpu_kernel_table * kt = ember_cpu_kernels_for((ember_cpu_isa) isa);
        if (!kt || !kt->attn.exp) continue;
        CAPTURE(kt->name);
        tested++;
        for (int64_t n : {(int64_t) x.size(), (int64_t) 13, (int64_t) 5}) {  // with tails
            std::vector<float> y(n, -1.0f);
            kt->attn.exp(n, x.data(), y.data());
            double worst = 0.0;
            for (int64_t i = 0; i < n; i++) {
                if (x[i] < -87.5f) {
                    REQUIRE(y[i] == 0.0f);
                    continue;
                }
                const double e = std::exp((double) x[i]);
                worst          = std::fmax(worst, std::fabs(y[i] - e) / e);
            }
            CHECK(worst < 3e-7);
        }
    }
    if (tested == 0) MESSAGE("no kernel table with a vector exp on this CPU");
}
