// Ember's own weight types (INT4, INT4_G32, NF4, FP8 with block and row scales) as model
// weights on the CUDA backend: converted to the CUDA ext layout at upload (cuda-repack.h) and
// read by ops-matvec-ext.cu's decode matvec, prefill dequantizer and GET_ROWS. Each graph runs
// on the CPU and on the GPU with the same seeded data and the results are compared by NMSE.
// Skips with a message when there is no CUDA device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "backends/cuda/cuda-repack.h"
#include "cuda-test-util.h"
#include "graph.h"

namespace {

const ember_type k_types[] = {EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4,         EMBER_TYPE_FP8_E4M3,
                              EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};

bool fp8(ember_type t) {
    return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 || t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW;
}

// Decode tolerance. FP8: x rounded to F16 for the tensor cores (mvx_fp8_mma_kernel: NMSE ~1e-7;
// with EMBER_CUDA_FP8_MMA=0 float activations on both sides, only the summation order differs).
// INT4 / NF4: the CPU and the GPU round x to the same 8-bit blocks; NF4's GPU codebook is
// round(127 NF4[q]) (a weight moves by at most 0.4% of its block's absmax: NMSE ~2e-5 over many
// rows; a single row's NMSE is one sample and can be 50 times that: 7e-4 was seen at n = 1).
double mv_tol(ember_type t, int64_t n = 2, bool fp8_mma = true) {
    return fp8(t) ? (fp8_mma ? 1e-6 : 1e-8) : t == EMBER_TYPE_NF4 ? (n == 1 ? 3e-3 : 2e-4) : 1e-4;
}

// Widths: the smallest whole number of blocks above one 16-byte chunk per lane step, one not a
// multiple of 256, a model width plus a few blocks (chunk count not a multiple of 128).
std::vector<int64_t> widths(ember_type t) {
    const int64_t b = ember_type_get_traits(t)->block_size;
    return {b * 3, 4096 + b * 5, 2048};
}
int64_t b3(ember_type t) {
    return ember_type_get_traits(t)->block_size * 3;
}

}  // namespace

TEST_SUITE("backends") {

// Host only (no GPU): NF4's ext layout (cuda-repack.h) against the GGUF bytes, weight by weight:
// each block's quant words unzipped (weights i .. i + 3 in a word's low 16 bits, 32 + i .. 35 + i
// in its high 16), the group headers and absmax bytes in their arrays; and the readback.
TEST_CASE("[cuda] NF4 in the CUDA ext layout: each weight's nibble, the headers, the round trip") {
    CHECK(ember_cuda_nf4_unzip(0x76543210u) == 0x75316420u);
    CHECK(ember_cuda_nf4_zip(0x75316420u) == 0x76543210u);
    const int64_t nb = 260, ng = 2, rows = 3, k = 64 * nb;  // two groups a row: 256 + 4 blocks
    const size_t  rsz = ember_row_size(EMBER_TYPE_NF4, k);
    REQUIRE(rsz == static_cast<size_t>(ng * 8 + nb * 33));
    std::vector<uint8_t> gguf(rsz * rows), lay(gguf.size()), back(gguf.size());
    std::mt19937         rng(7);
    for (uint8_t & b : gguf) b = static_cast<uint8_t>(rng());
    ember_cuda_repack(EMBER_TYPE_NF4, rows, k, gguf.data(), lay.data());
    const uint8_t * q = lay.data(), *hd = q + rows * nb * 32, *aq = hd + rows * ng * 8;
    int             bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t * row = gguf.data() + r * rsz;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * hg  = row + (b / 256) * (8 + 256 * 33);  // the block's group header
            const uint8_t * blk = hg + 8 + (b % 256) * 33;
            if (b % 256 == 0) bad += std::memcmp(hd + 8 * (r * ng + b / 256), hg, 8) != 0;
            bad += aq[r * nb + b] != blk[0];
            for (int i = 0; i < 64; i++) {
                const int j = i % 32, want = (blk[1 + j] >> (i < 32 ? 0 : 4)) & 0xf;
                uint32_t  w;
                std::memcpy(&w, q + 32 * (r * nb + b) + 4 * (j / 4), 4);
                bad += static_cast<int>((w >> (16 * (i / 32) + 4 * (j % 4))) & 0xf) != want;
            }
        }
    }
    CHECK(bad == 0);
    ember_cuda_unrepack(EMBER_TYPE_NF4, rows, k, lay.data(), back.data());
    CHECK(back == gguf);
}

TEST_CASE("[cuda] ember types in the CUDA ext layout: decode matvec") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (const ember_type t : k_types) {
        // FP8: on tensor cores (the default on sm_80+) and through the float products ("0"). NF4:
        // through mvx_kernel (the default, "0") and on tensor cores (EMBER_CUDA_NF4_MMA=1).
        const bool nf4 = t == EMBER_TYPE_NF4;
        for (const char * mma : {"1", "0"}) {
            if (!fp8(t) && !nf4 && mma[0] != '1') continue;
            const char * var = nf4 ? "EMBER_CUDA_NF4_MMA" : "EMBER_CUDA_FP8_MMA";
            set_env(var, mma);
            const std::string tn = std::string(ember_type_get_name(t)) + (fp8(t) || nf4 ? std::string(" mma ") + mma : "");
            const bool        on = mma[0] != '0';
            // Rows: one per warp with a block tail (67), a single row, two per warp (from 4096) with
            // a warp tail (4100). INT4 rows of more than 128 16-byte chunks (4096 + 5 blocks) are
            // shared by 2 or 4 warps of a block (mvx_kernel KS); INT4 / NF4 rows of at most 64
            // chunks (k = 2048, 3 blocks) take two rows a warp whatever n (U = 2).
            for (int64_t n : {67, 1, 4100}) {
                for (int64_t k : widths(t)) {
                    for (int64_t m : {1, 3}) {
                        // (n = 4100 for the two wider k: two rows per warp, rows split over warps or not.)
                        if (n == 4100 && (m == 3 || k == b3(t))) continue;
                        check_runs("ext matvec " + tn + " k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m),
                              [=](case_ctx & c) { return ember_mul_mat(c.g, c.weight_leaf(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f)); },
                              mv_tol(t, n, on));
                    }
                }
            }
            check_runs("ext matvec batched broadcast " + tn, [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.weight_leaf(t, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
            }, mv_tol(t, 2, on));
            // x columns not 16-byte aligned (a view one float in): FP8's scalar x loads.
            check_runs("ext matvec of an unaligned x view " + tn, [=](case_ctx & c) {
                ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 513, 2);
                const int64_t  ne[4] = {512, 2, 1, 1};
                const size_t   nb[4] = {4, a->nb[1], a->nb[1] * 2, a->nb[1] * 2};
                return ember_mul_mat(c.g, c.weight_leaf(t, 512, 40), ember_view_strided(c.g, a, ne, nb, 4));
            }, mv_tol(t, 2, on));
            set_env(var, "");
        }
    }
    // NF4's two-row warps of long rows take U = 2 capped for 6 blocks an SM by default; U = 4 at
    // EMBER_CUDA_EXT_NF4_U2=0, uncapped at EMBER_CUDA_EXT_NF4_OCC=0 (rows past 64 chunks: the short
    // rows keep their own form). INT4's of 65-128 chunks (one warp a row, KS = 1) take U = 2 by
    // default, U = 4 at EMBER_CUDA_EXT_INT4_U2=0: widths 4096 and 2048 + 5 blocks.
    struct ext_form {
        ember_type  t;
        const char *var, *value, *name;
    };
    for (const ext_form & f : {ext_form{EMBER_TYPE_NF4, "EMBER_CUDA_EXT_NF4_U2", "0", "U=4"}, ext_form{EMBER_TYPE_NF4, "EMBER_CUDA_EXT_NF4_OCC", "0", "uncapped"},
                               ext_form{EMBER_TYPE_INT4, "EMBER_CUDA_EXT_INT4_U2", "0", "U=4"}}) {
        set_env(f.var, f.value);
        const int64_t              b  = ember_type_get_traits(f.t)->block_size;
        const std::vector<int64_t> ks = f.t == EMBER_TYPE_INT4 ? std::vector<int64_t>{4096, 2048 + 5 * b} : widths(f.t);
        for (int64_t k : ks) {
            if (k == b3(f.t)) continue;
            check_runs(std::string("ext matvec ") + ember_type_get_name(f.t) + " " + f.name + " k=" + std::to_string(k) + " n=4100", [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.weight_leaf(f.t, k, 4100), c.rand_leaf(EMBER_TYPE_F32, k, 1, 1, -3.0f, 3.0f));
            }, mv_tol(f.t, 4100, true));
        }
        set_env(f.var, "");
    }
    // NF4 rows of more than 256 blocks: a second group header mid-row.
    for (const char * mma : {"0", "1"}) {
        set_env("EMBER_CUDA_NF4_MMA", mma);
        check_runs(std::string("ext matvec nf4 two groups mma ") + mma, [](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_NF4, 64 * 260, 70), c.rand_leaf(EMBER_TYPE_F32, 64 * 260, 2));
        }, mv_tol(EMBER_TYPE_NF4));
    }
    set_env("EMBER_CUDA_NF4_MMA", "");
}

TEST_CASE("[cuda] ember types in the CUDA ext layout: grouped matvecs, fused x, graph replay") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        // NF4 also on tensor cores (EMBER_CUDA_NF4_MMA=1).
        for (const char * mma : {"0", "1"}) {
            if (t != EMBER_TYPE_NF4 && mma[0] == '1') continue;
            set_env("EMBER_CUDA_NF4_MMA", mma);
            const std::string tn = std::string(ember_type_get_name(t)) + (mma[0] == '1' ? " mma" : "");
            // Q, K, V over one x (unequal rows, one above 4096: a group launch), their outputs
            // consumed in between as in a model, then gate and up over a normed x.
            check_runs("ext grouped matvecs " + tn, [=](case_ctx & c) {
                ember_tensor * x   = c.rand_leaf(EMBER_TYPE_F32, 512, 1);
                ember_tensor * q   = ember_mul_mat(c.g, c.weight_leaf(t, 512, 4160), x);
                ember_tensor * k   = ember_mul_mat(c.g, c.weight_leaf(t, 512, 72), x);
                ember_tensor * v   = ember_mul_mat(c.g, c.weight_leaf(t, 512, 136), x);
                ember_tensor * sum = ember_add(c.g, ember_add(c.g, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 4160, 64), q),
                                                              ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 72, 64), k)),
                                               ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 136, 64), v));
                return sum;
            }, fp8(t) ? 1e-6 : 2e-4);
            // A layer: RMS_NORM + MUL (its kernel writes the 8-bit x), gate and up (one launch),
            // SWIGLU, down, residual; twice with new weights (converted again) on a replayed graph.
            check_runs("ext decode layer " + tn, [=](case_ctx & c) {
                ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
                ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 1024, 1));
                ember_tensor * gt = ember_mul_mat(c.g, c.weight_leaf(t, 1024, 512), h);
                ember_tensor * up = ember_mul_mat(c.g, c.weight_leaf(t, 1024, 512), h);
                return ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, 512, 1024), ember_swiglu(c.g, gt, up)));
            }, fp8(t) ? 1e-6 : 1e-3, {31, 32});
            set_env("EMBER_CUDA_NF4_MMA", "");
        }
    }
}

TEST_CASE("[cuda] ember types in the CUDA ext layout: prefill, get_rows, readback") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        const std::string tn = ember_type_get_name(t);
        const int64_t     k  = 3 * ember_type_get_traits(t)->block_size * (t == EMBER_TYPE_INT4 ? 1 : 4);
        // cuBLAS on the weights dequantized to F16 (the CPU rounds x to the weight's
        // vec_dot_type, the GPU to F16); a batched weight: the second matrix's rows follow.
        check_runs("ext prefill " + tn + " k=" + std::to_string(k), [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, k, 40, 2), c.rand_leaf(EMBER_TYPE_F32, k, 24, 2));
        }, fp8(t) ? 1e-5 : 1e-3);
        check_runs("ext get_rows " + tn, [=](case_ctx & c) {
            return ember_get_rows(c.g, c.weight_leaf(t, k, 9), c.i32_leaf({8, 0, 3, 3}));
        }, 1e-12);

        // Upload (converted), readback of the GGUF bytes, a partial write, a partial read.
        for (int64_t kk : {k, ember_type_get_traits(t)->block_size * 260}) {
            CAPTURE(tn);
            CAPTURE(kk);
            ember_device * dev = cuda_device();
            ember_graph    g;
            ember_tensor * w = g.new_tensor(t, kk, 5);
            w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            ember_buffer * buf = nullptr;
            REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), ember_nbytes(w), &buf) == EMBER_OK);
            ember_buffer_place_tensor(buf, w, 0);
            std::vector<float> v(static_cast<size_t>(kk * 5));
            for (size_t i = 0; i < v.size(); i++) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 97));
            std::vector<uint8_t> bytes(ember_nbytes(w));
            for (int r = 0; r < 5; r++) ember_type_get_traits(t)->from_float(v.data() + r * kk, bytes.data() + r * w->nb[1], kk);
            ember_tensor_set(w, bytes.data(), 0, bytes.size());
            CHECK((w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) != 0);
            std::vector<uint8_t> back(bytes.size());
            ember_tensor_get(w, back.data(), 0, back.size());
            CHECK(back == bytes);
            std::vector<uint8_t> row1(w->nb[1]);
            for (size_t i = 0; i < row1.size(); i++) row1[i] = static_cast<uint8_t>(i * 7 + 3);
            ember_tensor_set(w, row1.data(), w->nb[1], row1.size());
            std::memcpy(bytes.data() + w->nb[1], row1.data(), row1.size());
            ember_tensor_get(w, back.data(), 0, back.size());
            CHECK(back == bytes);
            std::vector<uint8_t> part(w->nb[1]);
            ember_tensor_get(w, part.data(), 2 * w->nb[1], part.size());
            CHECK(std::memcmp(part.data(), bytes.data() + 2 * w->nb[1], part.size()) == 0);
            ember_buffer_free(buf);
        }
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
