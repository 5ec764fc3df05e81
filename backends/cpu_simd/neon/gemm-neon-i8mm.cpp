// Prefill GEMM tiles with the Armv8.6 int8 matrix-multiply extension (SMMLA, vmmlaq_s32): the
// `gemm` cells of the 32-weight types whose activations are Q8_0 (Q4_0, Q5_0, Q8_0, IQ4_NL),
// compiled with -march=armv8.2-a+i8mm (CMakeLists.txt) and registered only when the CPU
// reports it (HWCAP2_I8MM, kernels.cpp).
//
// SMMLA multiplies a 2 x 8 int8 matrix (two weight rows, 8 levels each) by an 8 x 2 one (two
// activation columns) into the 2 x 2 int32 lanes [r0.c0, r0.c1, r1.c0, r1.c1]; four of them
// cover a 32-weight block. A tile is up to 4 rows x 4 columns (2 x 2 such products): per block
// the weight levels of a row pair are interleaved 8 bytes per row (zip of 64-bit lanes), as
// are the activations of a column pair, so each 2 x 2 product is 4 SMMLA from zero; the exact
// int32 block sums are then scaled by d_w d_x and added into float lanes, as vec_dot does per
// block (only the float summation order across blocks differs). Rows and columns past nr / nc
// reuse the last real one (computed, never stored).
#if !defined(__ARM_FEATURE_MATMUL_INT8)
#    error "compile this file with -march=armv8.2-a+i8mm"
#endif
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"
#include "quant/blocks.h"

namespace {

// The 32 signed levels of block b of a weight row, as two vectors (weights 0..15, 16..31), and
// its scale.
struct q4_0_w {
    static inline void load(const uint8_t * row, int64_t b, int8x16_t & lo, int8x16_t & hi, float & d) {
        const ember_block_q4_0 & blk = reinterpret_cast<const ember_block_q4_0 *>(row)[b];
        const uint8x16_t         q   = vld1q_u8(blk.qs);
        const int8x16_t          v8  = vdupq_n_s8(8);
        lo                           = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), v8);
        hi                           = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), v8);
        d                            = neon_h2f(blk.d);
    }
};

// Q5_0: bit 4 of weight j is bit j of the little-endian qh; levels are 0..31 - 16.
struct q5_0_w {
    static inline void load(const uint8_t * row, int64_t b, int8x16_t & lo, int8x16_t & hi, float & d) {
        static const uint8_t     k_idx0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
        static const uint8_t     k_idx1[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
        static const uint8_t     k_bit[16]  = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const ember_block_q5_0 & blk        = reinterpret_cast<const ember_block_q5_0 *>(row)[b];
        uint32_t                 bits;
        memcpy(&bits, blk.qh, sizeof(bits));
        const uint8x16_t v   = vreinterpretq_u8_u32(vdupq_n_u32(bits));
        const uint8x16_t bit = vld1q_u8(k_bit);
        const uint8x16_t b4  = vdupq_n_u8(0x10);
        const uint8x16_t h0  = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(k_idx0)), bit), b4);
        const uint8x16_t h1  = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(k_idx1)), bit), b4);
        const uint8x16_t q   = vld1q_u8(blk.qs);
        const int8x16_t  off = vdupq_n_s8(16);
        lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), h0)), off);
        hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), h1)), off);
        d  = neon_h2f(blk.d);
    }
};

// IQ4_NL: the nibbles index the 16-entry non-linear codebook (one TBL).
struct iq4_nl_w {
    static inline void load(const uint8_t * row, int64_t b, int8x16_t & lo, int8x16_t & hi, float & d) {
        static const int8_t        k_values[16] = EMBER_IQ4NL_VALUES;
        const ember_block_iq4_nl & blk          = reinterpret_cast<const ember_block_iq4_nl *>(row)[b];
        const int8x16_t            values       = vld1q_s8(k_values);
        const uint8x16_t           q            = vld1q_u8(blk.qs);
        lo = vqtbl1q_s8(values, vandq_u8(q, vdupq_n_u8(0x0f)));
        hi = vqtbl1q_s8(values, vshrq_n_u8(q, 4));
        d  = neon_h2f(blk.d);
    }
};

struct q8_0_w {
    static inline void load(const uint8_t * row, int64_t b, int8x16_t & lo, int8x16_t & hi, float & d) {
        const ember_block_q8_0 & blk = reinterpret_cast<const ember_block_q8_0 *>(row)[b];
        lo                           = vld1q_s8(blk.qs);
        hi                           = vld1q_s8(blk.qs + 16);
        d                            = neon_h2f(blk.d);
    }
};

// Two 32-level rows (a: lo/hi halves, b: lo/hi halves) interleaved 8 bytes per row: the 4
// SMMLA operands of the block.
inline void interleave(int8x16_t alo, int8x16_t ahi, int8x16_t blo, int8x16_t bhi, int8x16_t out[4]) {
    const int64x2_t al = vreinterpretq_s64_s8(alo), ah = vreinterpretq_s64_s8(ahi);
    const int64x2_t bl = vreinterpretq_s64_s8(blo), bh = vreinterpretq_s64_s8(bhi);
    out[0]             = vreinterpretq_s8_s64(vzip1q_s64(al, bl));
    out[1]             = vreinterpretq_s8_s64(vzip2q_s64(al, bl));
    out[2]             = vreinterpretq_s8_s64(vzip1q_s64(ah, bh));
    out[3]             = vreinterpretq_s8_s64(vzip2q_s64(ah, bh));
}

inline int32x4_t mmla4(const int8x16_t a[4], const int8x16_t b[4]) {
    int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), a[0], b[0]);
    s           = vmmlaq_s32(s, a[1], b[1]);
    s           = vmmlaq_s32(s, a[2], b[2]);
    return vmmlaq_s32(s, a[3], b[3]);
}

// RP row pairs x CP column pairs (each 1 or 2) starting at rows w[0..2RP) and columns x[0..2CP).
template <class W, int RP, int CP>
void tile(int64_t nb, const uint8_t * const * w, const uint8_t * const * x, float32x4_t acc[2][2]) {
    for (int a = 0; a < RP; a++)
        for (int c = 0; c < CP; c++) acc[a][c] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t wa[2][4], xb[2][4];
        float     dw[4], dx[4];
        for (int a = 0; a < RP; a++) {
            int8x16_t l0, h0, l1, h1;
            W::load(w[2 * a], b, l0, h0, dw[2 * a]);
            W::load(w[2 * a + 1], b, l1, h1, dw[2 * a + 1]);
            interleave(l0, h0, l1, h1, wa[a]);
        }
        for (int c = 0; c < CP; c++) {
            int8x16_t l0, h0, l1, h1;
            q8_0_w::load(x[2 * c], b, l0, h0, dx[2 * c]);
            q8_0_w::load(x[2 * c + 1], b, l1, h1, dx[2 * c + 1]);
            interleave(l0, h0, l1, h1, xb[c]);
        }
        for (int a = 0; a < RP; a++) {
            // lanes [r0 c0, r0 c1, r1 c0, r1 c1]
            const float32x4_t da = {dw[2 * a], dw[2 * a], dw[2 * a + 1], dw[2 * a + 1]};
            for (int c = 0; c < CP; c++) {
                const float32x4_t dc = {dx[2 * c], dx[2 * c + 1], dx[2 * c], dx[2 * c + 1]};
                acc[a][c] = vfmaq_f32(acc[a][c], vcvtq_f32_s32(mmla4(wa[a], xb[c])), vmulq_f32(da, dc));
            }
        }
    }
}

template <class W>
void gemm_q(int64_t k, int64_t nr, int64_t nc, const void * wv, size_t ws, const void * xv, size_t xs, float * y,
            size_t ys) {
    const uint8_t * wp = static_cast<const uint8_t *>(wv);
    const uint8_t * xp = static_cast<const uint8_t *>(xv);
    const int64_t   nb = k / 32;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const int64_t   mr = nr - r0 < 4 ? nr - r0 : 4;
        const uint8_t * w[4];
        for (int i = 0; i < 4; i++) w[i] = wp + static_cast<size_t>(r0 + (i < mr ? i : mr - 1)) * ws;
        for (int64_t c0 = 0; c0 < nc; c0 += 4) {
            const int64_t   mc = nc - c0 < 4 ? nc - c0 : 4;
            const uint8_t * x[4];
            for (int i = 0; i < 4; i++) x[i] = xp + static_cast<size_t>(c0 + (i < mc ? i : mc - 1)) * xs;
            float32x4_t acc[2][2];
            const int   rp = mr > 2 ? 2 : 1, cp = mc > 2 ? 2 : 1;
            if (rp == 2 && cp == 2) {
                tile<W, 2, 2>(nb, w, x, acc);
            } else if (rp == 2) {
                tile<W, 2, 1>(nb, w, x, acc);
            } else if (cp == 2) {
                tile<W, 1, 2>(nb, w, x, acc);
            } else {
                tile<W, 1, 1>(nb, w, x, acc);
            }
            for (int a = 0; a < rp; a++) {
                for (int c = 0; c < cp; c++) {
                    float v[4];
                    vst1q_f32(v, acc[a][c]);
                    for (int l = 0; l < 4; l++) {
                        const int64_t r = 2 * a + (l >> 1), col = 2 * c + (l & 1);
                        if (r < mr && col < mc) y[static_cast<size_t>(c0 + col) * ys + static_cast<size_t>(r0 + r)] = v[l];
                    }
                }
            }
        }
    }
}

}  // namespace

void ember_cpu_register_neon_gemm_i8mm(ember_cpu_kernel_table * t) {
    t->types[EMBER_TYPE_Q4_0].gemm   = gemm_q<q4_0_w>;
    t->types[EMBER_TYPE_Q5_0].gemm   = gemm_q<q5_0_w>;
    t->types[EMBER_TYPE_Q8_0].gemm   = gemm_q<q8_0_w>;
    t->types[EMBER_TYPE_IQ4_NL].gemm = gemm_q<iq4_nl_w>;
}
