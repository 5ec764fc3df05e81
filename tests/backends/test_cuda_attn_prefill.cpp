// The tensor-core prefill attention (fa_mma_kernel, backends/cuda/ops-attention-prefill-mma.cuh;
// the default for F16 caches at head size 64 / 128; EMBER_CUDA_FA_MMA=0: fa_kernel) against the
// CPU: F16 caches at head sizes 64 and 128, the 1B layer's shape (32 / 8 heads, 512 tokens,
// causal), token counts that leave ragged row blocks (17, 45, 130) and ragged key tiles, a cached
// prefix (fewer tokens than keys), GQA groups of 1, 4 and 8, rows that see no key (zeros), a whole
// block of rows that sees none (no tile visible), finite random mask values, a sliding window
// (leading tiles hidden) and no mask. Each case also runs with the switch off (fa_kernel, exact to
// f32): the default must launch the new kernel (its launch counter) and the switch off must not,
// and the two results must differ by the f16 rounding, so a dispatch that silently fell back fails
// here. Shapes and types the kernel does not take (Q8_0 caches, head size 96) must fall back to
// fa_kernel. Compiled only with the CUDA backend; skips with a message when there is no CUDA
// device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "backends/cuda/cuda-ops.h"  // ember_cuda_fa_mma_launches
#include "graph.h"

#include "cuda-test-util.h"

namespace {

enum prefill_mask { k_no_mask, k_causal, k_hidden_rows, k_bias, k_window, k_hidden_block };

struct prefill_shape {
    int64_t      d, n_head, n_head_kv, n_tok, n_kv;
    prefill_mask mk;
};

// Token t sits at position n_kv - n_tok + t and sees the keys up to it (causal), with more
// hidden: k_hidden_rows every key of tokens 3, 8, 13, ..; k_hidden_block every key of tokens
// 16 .. 31 (with a GQA group of 4, rows 64 .. 127: one whole block of the kernel); k_window the
// keys more than 70 before the token (whole 64-key tiles for the later blocks). k_bias: the
// visible keys get random values in [-3, 1).
ember_tensor * prefill_attn(case_ctx & c, ember_type t, const prefill_shape & s) {
    ember_tensor * q    = c.rand_leaf(EMBER_TYPE_F32, s.d, s.n_head, s.n_tok, -2.0f, 2.0f);
    ember_tensor * k    = c.rand_leaf(t, s.d, s.n_head_kv, s.n_kv, -2.0f, 2.0f);
    ember_tensor * v    = c.rand_leaf(t, s.d, s.n_head_kv, s.n_kv);
    ember_tensor * mask = nullptr;
    if (s.mk != k_no_mask) {
        std::vector<float>                    mv(static_cast<size_t>(s.n_kv * s.n_tok), 0.0f);
        std::uniform_real_distribution<float> u(-3.0f, 1.0f);
        for (int64_t tt = 0; tt < s.n_tok; tt++) {
            const int64_t pos = s.n_kv - s.n_tok + tt;
            for (int64_t j = 0; j < s.n_kv; j++) {
                float x = j > pos ? -INFINITY : 0.0f;
                if (s.mk == k_hidden_rows && tt % 5 == 3) x = -INFINITY;
                if (s.mk == k_hidden_block && tt >= 16 && tt < 32) x = -INFINITY;
                if (s.mk == k_window && j < pos - 70) x = -INFINITY;
                if (s.mk == k_bias && x == 0.0f) x = u(c.rng);
                mv[static_cast<size_t>(tt * s.n_kv + j)] = x;
            }
        }
        mask = c.f32_leaf(mv, s.n_kv, s.n_tok);
    }
    return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(s.d)));
}

std::string prefill_name(ember_type t, const prefill_shape & s) {
    return std::string("prefill attn ") + ember_type_get_name(t) + " d=" + std::to_string(s.d) + " heads " + std::to_string(s.n_head) +
           "/" + std::to_string(s.n_head_kv) + " n_tok=" + std::to_string(s.n_tok) + " n_kv=" + std::to_string(s.n_kv) + " mask " +
           std::to_string(static_cast<int>(s.mk));
}

// Whether every output of the tokens for which `hidden` holds is exactly zero.
template <typename F> bool zero_tokens(const std::vector<float> & y, const prefill_shape & s, F hidden) {
    const size_t row = static_cast<size_t>(s.d * s.n_head);
    bool         ok  = true;
    for (int64_t tt = 0; tt < s.n_tok; tt++) {
        if (!hidden(tt)) continue;
        for (size_t i = 0; i < row; i++) ok = ok && y[static_cast<size_t>(tt) * row + i] == 0.0f;
    }
    return ok;
}

}  // namespace

TEST_SUITE("backends") {
TEST_CASE("[cuda] prefill attention on tensor cores (fa_mma_kernel)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    env_clear           clear{{"EMBER_CUDA_FA_MMA"}};
    const prefill_shape shapes[] = {
        {64, 32, 8, 512, 512, k_causal},     // the 1B layer at pp512
        {128, 32, 8, 200, 200, k_causal},    // the 8B layer's heads
        {128, 32, 8, 45, 300, k_causal},     // a prefix of 255 keys already cached
        {64, 8, 8, 130, 130, k_causal},      // GQA group 1 (64 tokens a block)
        {128, 16, 2, 17, 17, k_causal},      // group 8, one ragged tile
        {64, 8, 2, 45, 300, k_hidden_rows},  // rows with no key: zeros
        {64, 8, 2, 45, 45, k_hidden_block},  // a block with no visible tile: zeros
        {128, 8, 2, 130, 130, k_bias},       // finite mask values
        {64, 4, 4, 17, 80, k_bias},          // group 1, bias, a tile and a ragged one
        {128, 8, 2, 64, 260, k_window},      // sliding window: leading tiles hidden
        {64, 32, 8, 33, 70, k_no_mask},      // no mask
        {128, 8, 1, 17, 45, k_no_mask},      // no mask, group 8
    };
    for (const prefill_shape & s : shapes) {
        const std::string what = prefill_name(EMBER_TYPE_F16, s);
        CAPTURE(what);
        const builder            build = [=](case_ctx & c) { return prefill_attn(c, EMBER_TYPE_F16, s); };
        const std::vector<float> want  = run_on(ember_registry_cpu_device(), build, 23);
        const long long          n0    = ember_cuda_fa_mma_launches();
        const std::vector<float> got   = run_on(cuda_device(), build, 23);  // the default: fa_mma_kernel
        const long long          n1    = ember_cuda_fa_mma_launches();
        const std::vector<float> off   = run_on_cuda_with("EMBER_CUDA_FA_MMA", "0", build, 23);  // fa_kernel
        CHECK(n1 > n0);                                // the default launched the tensor-core kernel
        CHECK(ember_cuda_fa_mma_launches() == n1);     // and the switch off did not
        REQUIRE(got.size() == want.size());
        REQUIRE(off.size() == want.size());
        bool finite = true;
        for (float x : got) finite = finite && std::isfinite(x);
        CHECK(finite);
        const double e = nmse(got, want), e_off = nmse(off, want), e_pair = nmse(got, off);
        CAPTURE(e);
        CAPTURE(e_off);
        CAPTURE(e_pair);
        CHECK(e < 1e-6);        // Q, K, V and P rounded to f16, as the decode tensor-core kernel (its bound)
        CHECK(e_off < 1e-8);    // fa_kernel: f32
        CHECK(e_pair > 1e-11);  // the f16 rounding shows: not fa_kernel's results
        if (s.mk == k_hidden_rows) CHECK(zero_tokens(got, s, [](int64_t tt) { return tt % 5 == 3; }));
        if (s.mk == k_hidden_block) CHECK(zero_tokens(got, s, [](int64_t tt) { return tt >= 16 && tt < 32; }));
    }
    // What the kernel does not take stays on fa_kernel: a Q8_0 cache, head size 96.
    const struct {
        ember_type    t;
        prefill_shape s;
    } fallbacks[] = {{EMBER_TYPE_Q8_0, {128, 8, 2, 45, 100, k_causal}}, {EMBER_TYPE_F16, {96, 8, 2, 45, 100, k_causal}}};
    for (const auto & f : fallbacks) {
        const std::string what = prefill_name(f.t, f.s);
        CAPTURE(what);
        const builder            build = [=](case_ctx & c) { return prefill_attn(c, f.t, f.s); };
        const std::vector<float> want  = run_on(ember_registry_cpu_device(), build, 29);
        const long long          n0    = ember_cuda_fa_mma_launches();
        const std::vector<float> got   = run_on(cuda_device(), build, 29);
        CHECK(ember_cuda_fa_mma_launches() == n0);
        REQUIRE(got.size() == want.size());
        const double e = nmse(got, want);
        CAPTURE(e);
        CHECK(e < 1e-8);
    }
}
}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
