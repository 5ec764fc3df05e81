// The tensor-core prefill GEMM for quantized weights (backends/cuda/ops-matmul-q.cu): MUL_MAT
// with many columns, every quantized weight type, in the CUDA layout (weights flagged at upload:
// Q4_0 / Q8_0 converted, Ember's types in the ext layout, Q6_K rows of a multiple of 2048 planar:
// its own case below) and in the GGUF layout, both tile shapes of the mma.sync kernel (EMBER_CUDA_MMQ_TILE) and the wgmma
// kernel of Hopper (EMBER_CUDA_MMQ_WG, ops-matmul-wgmma.cu), token counts and row counts that are
// not multiples of the tiles, widths with an odd number of 32-weight chunks (a half k step), and
// a batched weight broadcast over x's ne[2]. Compared with the CPU by NMSE, and with the old
// dequantize + cuBLAS path on the GPU (EMBER_CUDA_MMQ=1 against 0; same F16 operands, F32 sums: only the
// summation order differs), also with k split in parts (EMBER_CUDA_MMQ_SPLIT), and the wgmma kernel's
// forms (EMBER_CUDA_MMQ_EW, EMBER_CUDA_MMQ_WS, EMBER_CUDA_MMQ_WIDE), and its k splits merged in a thread block cluster
// against the reduce kernel's (EMBER_CUDA_MMQ_CLUSTER: the same bits). Skips with a message when there is no CUDA device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "backends/cuda/cuda-ops.h"  // ember_cuda_mmq_q6p_launches
#include "cuda-test-util.h"
#include "graph.h"
#include "quant/blocks.h"
#include "quant/types.h"

namespace {

const ember_type k_types[] = {EMBER_TYPE_Q4_0,   EMBER_TYPE_Q4_1,     EMBER_TYPE_Q5_0,     EMBER_TYPE_Q5_1,     EMBER_TYPE_Q8_0,
                              EMBER_TYPE_Q2_K,   EMBER_TYPE_Q3_K,     EMBER_TYPE_Q4_K,     EMBER_TYPE_Q5_K,     EMBER_TYPE_Q6_K,
                              EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS,   EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4,
                              EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};

struct shape {
    int64_t k, n, m;
};

// Per type: an odd chunk count where the block allows it (3 blocks), rows not a multiple of 64
// or 128 (odd: scalar stores), tokens from below one tile to several tiles with a tail.
// NF4 in the GGUF layout: 4 blocks, not 3 (cu_codec<NF4> reads a row's fp32 header, so its
// rows, 8 + 33 per block bytes, must be 4-byte aligned).
std::vector<shape> shapes(ember_type t) {
    const int64_t b  = ember_type_get_traits(t)->block_size;
    const int64_t kb = b * (b >= 128 ? 4 : 8);
    const int64_t ko = b * (t == EMBER_TYPE_NF4 ? 4 : 3);
    return {{ko, 201, 130}, {kb, 200, 600}, {kb, 72, 9}, {ko, 136, 17}};
}

// Restores an environment switch at scope exit.
struct env_guard {
    const char * name;
    std::string  restore;
    env_guard(const char * n, const char * v, const char * back) : name(n), restore(back) { set_env(n, v); }
    ~env_guard() { set_env(name, restore.c_str()); }
};

// The GEMM's forms as the tests name them: tile "64" / "128" the mma.sync kernel
// (EMBER_CUDA_MMQ_TILE, EMBER_CUDA_MMQ_WG=0); "wg" the wgmma kernel on Hopper (elsewhere the
// mma.sync kernel again), "wg-ew" its EMBER_CUDA_MMQ_EW form, "wg-ws" the warp-specialized kernel
// (EMBER_CUDA_MMQ_WS), "wg-wide" the 256-token one (EMBER_CUDA_MMQ_WIDE). Set for a scope.
const char * const k_forms[] = {"64", "128", "wg", "wg-ew", "wg-ws", "wg-wide"};
struct form_guard {
    explicit form_guard(const std::string & f)
        : tile("EMBER_CUDA_MMQ_TILE", f.rfind("wg", 0) == 0 ? "0" : f.c_str(), "0"),
          wg("EMBER_CUDA_MMQ_WG", f.rfind("wg", 0) == 0 ? "1" : "0", "1"),
          ew("EMBER_CUDA_MMQ_EW", f == "wg-ew" ? "1" : "0", "0"),
          ws("EMBER_CUDA_MMQ_WS", f == "wg-ws" ? "1" : "0", "0"),
          wide("EMBER_CUDA_MMQ_WIDE", f == "wg-wide" ? "1" : "0", "") {}
    env_guard tile, wg, ew, ws, wide;
};

// A 300-row weight of type t and width k (in its CUDA layout, or the GGUF one) times 257 tokens:
// rows and tokens past the tiles.
builder gemm_300x257(ember_type t, int64_t k, bool cuda_layout) {
    return [=](case_ctx & c) {
        ember_tensor * w = cuda_layout ? c.weight_leaf(t, k, 300) : c.rand_leaf(t, k, 300, 1);
        return ember_mul_mat(c.g, w, c.rand_leaf(EMBER_TYPE_F32, k, 257, 1, -3.0f, 3.0f));
    };
}

// build's output on the GPU with switch `name` set to `value` for the run (then `back` again).
std::vector<float> run_with(const char * name, const char * value, const char * back, const builder & build, uint32_t seed) {
    env_guard g(name, value, back);
    return run_on(cuda_device(), build, seed);
}

// The distance between f16 neighbours at |v| (normal or subnormal).
double half_ulp(float v) {
    const double a = std::fabs(static_cast<double>(v));
    return a < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, std::ilogb(a) - 10);
}

// Weights decoded exactly: n rows of k weights of type t (`bytes`, the GGUF layout) times the
// identity (k tokens, token j picking weight j), so each output is one weight as the kernels
// decoded it to f16. Compared bit for bit (zeros of either sign alike: the sums lose the sign)
// with the reference value rounded to f16 once, or with `ulps` > 0 within that many f16 ulps of
// it (types whose f16 decode rounds twice), for every form of the tensor-core GEMM, both layouts,
// and dequantize + cuBLAS (EMBER_CUDA_MMQ=0).
void check_decoded_exactly(ember_type t, const std::vector<uint8_t> & bytes, int64_t k, int64_t n, int ulps = 0) {
    const size_t rb = ember_row_size(t, k);
    REQUIRE(bytes.size() == rb * static_cast<size_t>(n));
    std::vector<float> w(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; r++) ember_type_get_traits(t)->to_float(bytes.data() + r * rb, w.data() + r * k, k);
    std::vector<float> want(static_cast<size_t>(k * n));  // y[token j][row r] = w[r][j]
    for (int64_t j = 0; j < k; j++) {
        for (int64_t r = 0; r < n; r++) want[j * n + r] = ember_half_to_float(ember_float_to_half(w[r * k + j]));
    }
    std::vector<float> eye(static_cast<size_t>(k * k), 0.0f);
    for (int64_t j = 0; j < k; j++) eye[j * k + j] = 1.0f;
    for (bool cuda_layout : {true, false}) {
        const builder build = [&](case_ctx & c) {
            ember_tensor * wt = c.g.new_tensor(t, k, n);
            if (cuda_layout) wt->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            c.leaves.push_back({wt, bytes});
            return ember_mul_mat(c.g, wt, c.f32_leaf(eye, k, k));
        };
        std::vector<std::string> forms(std::begin(k_forms), std::end(k_forms));
        forms.push_back("cublas");
        for (const std::string & f : forms) {
            const bool               cublas = f == "cublas";
            form_guard               fg(cublas ? "wg" : f);
            env_guard                on("EMBER_CUDA_MMQ", cublas ? "0" : "1", "");
            const std::vector<float> got = run_on(cuda_device(), build, 1);
            REQUIRE(got.size() == want.size());
            int64_t bad = 0, first = -1;
            for (size_t i = 0; i < want.size(); i++) {
                const bool near = ulps > 0 && std::fabs(static_cast<double>(got[i]) - want[i]) <= ulps * half_ulp(want[i]);
                if (std::memcmp(&got[i], &want[i], 4) != 0 && !(got[i] == 0.0f && want[i] == 0.0f) && !near) {
                    if (first < 0) first = static_cast<int64_t>(i);
                    bad++;
                }
            }
            CAPTURE(std::string(ember_type_get_name(t)) + (cuda_layout ? " cuda layout " : " gguf layout ") + f);
            CAPTURE(first);
            CAPTURE(first < 0 ? 0.0f : got[static_cast<size_t>(first)]);
            CAPTURE(first < 0 ? 0.0f : want[static_cast<size_t>(first)]);
            CHECK(bad == 0);
        }
    }
}

}  // namespace

TEST_SUITE("backends") {

// The wgmma kernel's tile for a product's shape (host logic: runs without a GPU). Unset, the
// 256-token tile where its blocks and k splits fill three quarters of a 132-SM H100, else the
// 128-token one; EMBER_CUDA_MMQ_WIDE=1 / =0 force either.
TEST_CASE("[cuda] prefill GEMM on tensor cores: the wide tile chosen by shape") {
    env_guard w("EMBER_CUDA_MMQ_WIDE", "", "");
    CHECK(ember_cuda_mmq_wg_tile_tokens(8192, 512, 2048 / 32, 132) == 256);   // 1B gate / up: 64 x 2 tiles
    CHECK(ember_cuda_mmq_wg_tile_tokens(2048, 512, 8192 / 32, 132) == 256);   // 1B down: 32 tiles x 8 splits
    CHECK(ember_cuda_mmq_wg_tile_tokens(2048, 512, 2048 / 32, 132) == 256);   // 1B Q / O: 32 x 4
    CHECK(ember_cuda_mmq_wg_tile_tokens(512, 512, 2048 / 32, 132) == 128);    // 1B K / V: 8 x 4 = 32 blocks
    CHECK(ember_cuda_mmq_wg_tile_tokens(1024, 512, 4096 / 32, 132) == 256);   // 8B K / V: 16 x 8
    CHECK(ember_cuda_mmq_wg_tile_tokens(14336, 512, 4096 / 32, 132) == 256);  // 8B gate / up
    CHECK(ember_cuda_mmq_wg_tile_tokens(2048, 40, 2048 / 32, 132) == 128);    // a short prompt
    set_env("EMBER_CUDA_MMQ_WIDE", "1");
    CHECK(ember_cuda_mmq_wg_tile_tokens(512, 40, 2048 / 32, 132) == 256);
    set_env("EMBER_CUDA_MMQ_WIDE", "0");
    CHECK(ember_cuda_mmq_wg_tile_tokens(8192, 512, 2048 / 32, 132) == 128);
}

// The harness's large leaves are encoded on several threads (quantize_rows, cuda-test-util.h):
// the same bytes as one row after another. Host only.
TEST_CASE("[cuda] test harness: large leaves encoded on several threads, the same bytes") {
    for (ember_type t : {EMBER_TYPE_Q4_K, EMBER_TYPE_INT4, EMBER_TYPE_NF4}) {
        const int64_t      ne0 = 2048, rows = 1031;  // 2.1M values: past k_leaf_memo_min, rows not a multiple of the threads
        std::vector<float> v(static_cast<size_t>(ne0 * rows));
        std::mt19937       rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float & x : v) x = u(rng);
        const size_t         rb = ember_row_size(t, ne0);
        std::vector<uint8_t> one(rb * rows), many(rb * rows);
        for (int64_t r = 0; r < rows; r++) ember_type_get_traits(t)->from_float(v.data() + r * ne0, one.data() + r * rb, ne0);
        quantize_rows(t, v.data(), many.data(), ne0, rows, rb);
        CAPTURE(ember_type_get_name(t));
        CHECK(one == many);
    }
}

TEST_CASE("[cuda] prefill GEMM on tensor cores, quantized weights: every type, odd shapes, both tiles") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    env_guard on("EMBER_CUDA_MMQ", "1", "");
    for (ember_type t : k_types) {
        const std::string tn = ember_type_get_name(t);
        for (const char * tile : k_forms) {  // (form_guard)
            form_guard fg(tile);
            for (bool cuda_layout : {true, false}) {
                for (const shape & s : shapes(t)) {
                    const std::string what = "mmq " + tn + (cuda_layout ? " cuda layout" : " gguf layout") + " tile " + tile +
                                             " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n) + " m=" + std::to_string(s.m);
                    // The CPU rounds activations to the weight's vec_dot_type (Q8_0, Q8_K...), the GPU to F16.
                    check_case(what, [=](case_ctx & c) {
                        ember_tensor * w = cuda_layout ? c.weight_leaf(t, s.k, s.n) : c.rand_leaf(t, s.k, s.n);
                        return ember_mul_mat(c.g, w, c.rand_leaf(EMBER_TYPE_F32, s.k, s.m, 1, -3.0f, 3.0f));
                    }, 1e-3);
                }
            }
        }
        // A weight batched over ne[2], broadcast over x's ne[2] (each weight matrix twice).
        check_case("mmq batched broadcast " + tn, [=](case_ctx & c) {
            const int64_t k = ember_type_get_traits(t)->block_size * 2;
            return ember_mul_mat(c.g, c.weight_leaf(t, k, 72, 2), c.rand_leaf(EMBER_TYPE_F32, k, 70, 4, -3.0f, 3.0f));
        }, 1e-3);
    }
}

TEST_CASE("[cuda] prefill GEMM on tensor cores agrees with dequantize + cuBLAS") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        const int64_t b = ember_type_get_traits(t)->block_size;
        // 20-24 k steps of 64 (41 chunks for 32-weight blocks; NF4: 20 blocks, 4-byte aligned rows)
        const int64_t k = t == EMBER_TYPE_NF4 ? 64 * 20 : b * ((1300 + b - 1) / b);
        for (const char * tile : k_forms) {
            for (const char * split : {"1", "3", "0"}) {
                for (bool cuda_layout : {false, true}) {  // (the CUDA layouts: Q4_0 / Q8_0's, Ember's types' ext layout)
                    form_guard    fg(tile);
                    env_guard     gs("EMBER_CUDA_MMQ_SPLIT", split, "0");
                    const builder build = gemm_300x257(t, k, cuda_layout);
                    const std::vector<float> got = run_with("EMBER_CUDA_MMQ", "1", "", build, 7);
                    const std::vector<float> old = run_with("EMBER_CUDA_MMQ", "0", "", build, 7);
                    REQUIRE(got.size() == old.size());
                    const double      e    = nmse(got, old);
                    const std::string what = std::string(ember_type_get_name(t)) + " tile " + tile + " split " + split +
                                             (cuda_layout ? " cuda layout" : " gguf layout");
                    CAPTURE(what);
                    CAPTURE(e);
                    CHECK(e < 1e-9);
                }
            }
        }
    }
}

// Planar Q6_K (rows of a multiple of 2048 weights converted at upload; Q4_K_M's V and down
// products): the tensor-core kernels read it with the planar codec through the GGUF layout's
// addressing. Every tile and form against the CPU, and against dequantize + cuBLAS (its F16
// operands are the same values) and EMBER_CUDA_MMQ_Q6P=0 (which sends it there): rows of one
// and three segments (k 2048, 6144), 300 rows, 257 tokens.
TEST_CASE("[cuda] prefill GEMM on tensor cores: planar Q6_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (int64_t k : {2048, 6144}) {
        for (const char * tile : k_forms) {
            form_guard    fg(tile);
            const builder build = gemm_300x257(EMBER_TYPE_Q6_K, k, true);
            const std::string what = std::string("planar q6_k k=") + std::to_string(k) + " tile " + tile;
            {
                env_guard on("EMBER_CUDA_MMQ", "1", "");
                check_case(what, build, 1e-3, 7);
            }
            const long long          n0  = ember_cuda_mmq_q6p_launches();
            const std::vector<float> got = run_with("EMBER_CUDA_MMQ", "1", "", build, 7);
            const long long          n1  = ember_cuda_mmq_q6p_launches();
            const std::vector<float> old = run_with("EMBER_CUDA_MMQ", "0", "", build, 7);
            std::vector<float>       off;
            {
                env_guard on("EMBER_CUDA_MMQ", "1", "");
                off = run_with("EMBER_CUDA_MMQ_Q6P", "0", "", build, 7);
            }
            REQUIRE(got.size() == old.size());
            CAPTURE(what);
            CHECK(nmse(got, old) < 1e-9);
            CHECK(off == old);  // the switch off: dequantize + cuBLAS exactly
            // The kernel ran on, and only on, the planar weight (its launch counter; at k = 2048
            // most forms sum in cuBLAS's order: the same bits, H100 session 62).
            CHECK(n1 > n0);
            CHECK(ember_cuda_mmq_q6p_launches() == n1);
        }
    }
}

// Block FP8 weights decoded exactly: the kernels' F16 weights (the ext layout's codec decodes in
// f16 arithmetic: codes to f16 pairs, times the E8M0 scale as an f16 power of two, or through
// floats where f16 cannot hold the scale) are the reference value code x 2^(e - 127) rounded to
// f16 once. Every finite code with every block exponent from 2^-45 (products below f16's
// subnormals, the float path) to the largest no code overflows f16 at: 256 rows of 256 codes in
// order, block b of row r at exponent e_lo + (r + 32 b) mod the range (check_decoded_exactly).
TEST_CASE("[cuda] prefill GEMM on tensor cores: FP8 weights decoded exactly, every code and block scale") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    constexpr int64_t k = 256, n = 256;
    for (ember_type t : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        const bool e4m3 = t == EMBER_TYPE_FP8_E4M3;
        const int  e_lo = 127 - 45, e_hi = e4m3 ? 127 + 7 : 127;  // 448 x 2^7, 57344 x 2^0: within f16
        std::vector<uint8_t> bytes(static_cast<size_t>(n * (k / 32) * 33));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t b = 0; b < k / 32; b++) {
                uint8_t * blk = bytes.data() + (r * (k / 32) + b) * 33;
                blk[0]        = static_cast<uint8_t>(e_lo + (r + 32 * b) % (e_hi - e_lo + 1));
                for (int i = 0; i < 32; i++) {
                    const int  c      = static_cast<int>(32 * b + i);
                    const bool finite = e4m3 ? (c & 0x7f) != 0x7f : (c & 0x7c) != 0x7c;
                    blk[1 + i]        = static_cast<uint8_t>(finite ? c : 0);
                }
            }
        }
        check_decoded_exactly(t, bytes, k, n);
    }
}

// INT4 weights decoded exactly: blocks with an integer zero point of at most 1024 in magnitude
// and a finite d decode in f16 arithmetic (cu_ext_h2<INT4>::decode: levels minus the zero point,
// exact, times d rounded once), the others through floats; both must be the reference d (q - z)
// rounded to f16 once. Every (d, z) pair of the lists below whose weights stay finite in f16 (d
// subnormal to large, both signs; z integers from -1024 to 1024, -0, fractions, integers past
// 1024), every level, INT4 and INT4_G32 (check_decoded_exactly).
TEST_CASE("[cuda] prefill GEMM on tensor cores: INT4 weights decoded exactly, integer and fractional zero points") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const float d_list[] = {0x1p-24f, 0x1p-20f, 0x1p-14f, 0x1.554p-9f, 0x1.8p-3f, 1.0f, 0x1.ffcp+0f, 3.1415f, 29.0f, 63.0f,
                            -0x1p-24f, -0x1.2p-5f, -1.0f, -60.0f, 1000.0f, -2000.0f};
    const float z_list[] = {-1024.0f, -1000.0f, -17.0f, -1.0f, -0.0f, 0.0f, 1.0f, 7.0f, 8.0f, 15.0f, 16.0f, 600.0f, 1024.0f,
                            0.5f, 7.25f, -3.5f, 1025.0f, -1500.0f, 2047.0f};
    std::vector<std::pair<ember_half, ember_half>> dz;  // pairs with every weight finite in f16
    for (float d : d_list) {
        for (float z : z_list) {
            const ember_half dh = ember_float_to_half(d), zh = ember_float_to_half(z);
            const float      dd = ember_half_to_float(dh), zz = ember_half_to_float(zh);
            bool             ok = true;
            for (int q = 0; q < 16; q++) ok = ok && std::fabs(dd * (static_cast<float>(q) - zz)) < 65504.0f;
            if (ok) dz.push_back({dh, zh});
        }
    }
    REQUIRE(dz.size() > 150);
    constexpr int64_t k = 256, n = 256;
    for (ember_type t : {EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32}) {
        const int64_t        g = ember_type_get_traits(t)->block_size, bb = 4 + g / 2, nb = k / g;
        std::vector<uint8_t> bytes(static_cast<size_t>(n * nb * bb));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *  blk = bytes.data() + (r * nb + b) * bb;
                const auto p   = dz[static_cast<size_t>(r * nb + b) % dz.size()];
                std::memcpy(blk, &p.first, 2);
                std::memcpy(blk + 2, &p.second, 2);
                for (int64_t i = 0; i < g / 2; i++) {  // every level, shifted by row and block
                    const int lo = static_cast<int>((2 * i + r + b) % 16), hi = static_cast<int>((2 * i + 1 + 3 * r) % 16);
                    blk[4 + i]   = static_cast<uint8_t>(lo | hi << 4);
                }
            }
        }
        check_decoded_exactly(t, bytes, k, n);
    }
}

// The block-32, IQ4 and 2- / 3-bit K types the GGUF layout's codec decodes in f16 arithmetic
// (cu_codec_h2): Q5_0 and IQ4_NL exactly (an exact product rounded once, as the float decoder's),
// Q4_1 / Q5_1 (q d + m as one fma, where the float decoder rounds the sum before f16) within an
// f16 ulp, IQ4_XS and Q3_K (the sub-block scale rounded to f16 first) within two, Q2_K too with a
// zero dmin (its min term, which may nearly cancel the level's, is held to the CPU by the
// every-type case's NMSE). Blocks with scales from f16's subnormals to large, both signs, every
// level and fifth / third bit, every sub-block scale (check_decoded_exactly).
TEST_CASE("[cuda] prefill GEMM on tensor cores: Q4_1 / Q5_0 / Q5_1 / IQ4_NL / IQ4_XS / Q2_K / Q3_K weights decoded in f16") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const float d_list[] = {0x1p-24f, 0x1p-17f, 0x1p-14f, 0x1.554p-9f, 0x1.8p-3f, 1.0f, 3.1415f, -0x1p-20f, -0x1.2p-5f, -1.0f, 7.0f};
    const float m_list[] = {0.0f, -0x1p-14f, 0.37f, -2.5f, 0x1p-20f, 11.0f};
    constexpr int64_t k = 256, n = 256;
    std::mt19937 rng(5);
    for (ember_type t : {EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS, EMBER_TYPE_Q2_K,
                         EMBER_TYPE_Q3_K}) {
        // where d is (Q2_K: d, then dmin; the others d first), its factor (the sub-block scales
        // reach 32 for IQ4_XS and Q3_K, 15 for Q2_K: large weights stay finite)
        const size_t doff = t == EMBER_TYPE_Q2_K ? offsetof(ember_block_q2_k, d) : t == EMBER_TYPE_Q3_K ? offsetof(ember_block_q3_k, d) : 0;
        const float  dmul = t == EMBER_TYPE_IQ4_XS || t == EMBER_TYPE_Q3_K ? 0.125f : 1.0f;
        const size_t         rb = ember_row_size(t, k);
        std::vector<uint8_t> bytes(rb * n);
        for (uint8_t & b : bytes) b = static_cast<uint8_t>(rng());  // levels, fifth bits, IQ4_XS scales
        const int64_t bs = static_cast<int64_t>(ember_type_get_traits(t)->type_size), nb = static_cast<int64_t>(rb) / bs;
        for (int64_t r = 0; r < n; r++) {
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *        blk = bytes.data() + r * rb + b * bs;
                const int64_t    i   = r * nb + b;
                const ember_half d   = ember_float_to_half(d_list[i % 11] * dmul);
                const ember_half m   = ember_float_to_half(m_list[(i / 11) % 6]);
                const ember_half z   = ember_float_to_half(0.0f);
                std::memcpy(blk + doff, &d, 2);
                if (t == EMBER_TYPE_Q4_1 || t == EMBER_TYPE_Q5_1) std::memcpy(blk + 2, &m, 2);
                if (t == EMBER_TYPE_Q2_K) std::memcpy(blk + offsetof(ember_block_q2_k, dmin), &z, 2);
            }
        }
        CAPTURE(ember_type_get_name(t));
        const bool exact = t == EMBER_TYPE_Q5_0 || t == EMBER_TYPE_IQ4_NL;
        check_decoded_exactly(t, bytes, k, n, exact ? 0 : t == EMBER_TYPE_Q4_1 || t == EMBER_TYPE_Q5_1 ? 1 : 2);
    }
}

// NF4 weights decoded exactly: the ext layout's codec makes each block's 16 values NF4[q] absmax
// as float products rounded once to f16 and looks the codes up in them (cu_nf4_h2_make /
// cu_nf4_h2_lookup, byte permutes over two tables, each code's half chosen by its bit 3): the
// reference NF4[q] absmax rounded to f16 once, bit for bit. Every code at every position, every
// absmax_q, absmaxes of both signs from f16's subnormals (scale2 1e-6) to 60000, an offset that
// makes some of them zero or the offset alone (check_decoded_exactly).
TEST_CASE("[cuda] prefill GEMM on tensor cores: NF4 weights decoded exactly, every code and absmax") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const float scale2_list[] = {1e-6f, 3e-4f, 0.01f, 0.37f, 1.0f, 5.5f, 123.0f, 60000.0f, -2.0f, 0.0f};
    const float offset_list[] = {0.0f, 0x1p-20f, -0.25f, 1.5f, -7.0f};
    constexpr int64_t k = 256, n = 256;  // a row: one group, 4 blocks of 64
    const size_t      rb = ember_row_size(EMBER_TYPE_NF4, k);
    REQUIRE(rb == 8 + 4 * 33);
    std::vector<uint8_t> bytes(rb * n);
    std::mt19937         rng(11);
    for (int64_t r = 0; r < n; r++) {
        uint8_t *   row    = bytes.data() + r * rb;
        const float scale2 = scale2_list[r % 10], offset = offset_list[(r / 10) % 5] * (scale2 > 100.0f ? 0.0f : 1.0f);
        std::memcpy(row, &scale2, 4);
        std::memcpy(row + 4, &offset, 4);
        for (int64_t b = 0; b < 4; b++) {
            uint8_t * blk = row + 8 + b * 33;
            blk[0]        = static_cast<uint8_t>((4 * r + b) % 256);  // every absmax_q
            for (int i = 0; i < 32; i++) {  // every code at every position over the rows
                const int lo = static_cast<int>((i + r + 5 * b) % 16), hi = static_cast<int>(rng() % 16);
                blk[1 + i]   = static_cast<uint8_t>(lo | hi << 4);
            }
        }
    }
    check_decoded_exactly(EMBER_TYPE_NF4, bytes, k, n);
}

TEST_CASE("[cuda] prefill GEMM on tensor cores: k splits merged in a cluster give the reduce kernel's bits") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // The wgmma kernel's splits add up each other's sums through distributed shared memory
    // (EMBER_CUDA_MMQ_CLUSTER=1) in the order mmq_reduce_kernel adds the partial sums it reads
    // from global memory (=0, the default): the same floats, bit for bit. Every cluster size (2-8
    // splits), tokens and rows past the tile (257, 300), both layouts. (Not Hopper: both runs are
    // the mma.sync kernel's reduce.)
    env_guard on("EMBER_CUDA_MMQ", "1", "");
    env_guard gw("EMBER_CUDA_MMQ_WG", "1", "1");
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_K, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3}) {
        const int64_t k = 128 * 36;  // 36 k steps of the wide form (72 of the other): up to 8 splits of at least 4 steps
        for (const char * split : {"2", "3", "5", "8", "0"}) {
            for (int v = 0; v < 4; v++) {
                const bool    cuda_layout = v % 2 == 1;
                const char *  wide        = v / 2 == 1 ? "1" : "0";  // 128 x 256 tiles (EMBER_CUDA_MMQ_WIDE) or 128 x 128
                env_guard     gd("EMBER_CUDA_MMQ_WIDE", wide, "");
                env_guard     gs("EMBER_CUDA_MMQ_SPLIT", split, "0");
                const builder build = gemm_300x257(t, k, cuda_layout);
                const std::vector<float> merged  = run_with("EMBER_CUDA_MMQ_CLUSTER", "1", "", build, 11);
                const std::vector<float> reduced = run_with("EMBER_CUDA_MMQ_CLUSTER", "0", "", build, 11);
                CAPTURE(std::string(ember_type_get_name(t)) + " split " + split + (cuda_layout ? " cuda layout" : " gguf layout") +
                        " wide " + wide);
                REQUIRE(merged.size() == reduced.size());
                REQUIRE(merged.size() == static_cast<size_t>(300 * 257));
                size_t differ = 0;
                for (size_t i = 0; i < merged.size(); i++) differ += std::memcmp(&merged[i], &reduced[i], sizeof(float)) != 0;
                CHECK(differ == 0);
            }
        }
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
