// NEON quantizers of the activation types (Q8_0, Q8_1, Q8_K) and the KV-cache codecs (Q8_0,
// Q4_0 both ways). Bit-identical to the scalar reference (quant/ref/): the same float
// operations in the same order, one per lane, and the same rounding (FCVTAS for roundf: ties
// away from zero; FCVTNS for nearest_int: ties to even; FCVTZU for the truncating casts).
// Block scales are stored through ember_float_to_half, as the reference does.
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"

// A fused multiply-add would round once where the reference rounds twice.
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

// max |x| over 32 floats; NaNs are ignored as std::fmax ignores them (FMAXNM).
inline float absmax32(const float * x) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < 32; j += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + j)));
    return vmaxnmvq_f32(m);
}

// round(x * id), ties away from zero, for 32 floats, as 32 int8 (the reference's
// static_cast<int8_t>(std::roundf(x * id)); |x * id| <= 127 here).
inline void round32(const float * x, float id, int8_t * q) {
    const float32x4_t vid = vdupq_n_f32(id);
    for (int j = 0; j < 32; j += 16) {
        const int32x4_t i0 = vcvtaq_s32_f32(vmulq_f32(vld1q_f32(x + j), vid));
        const int32x4_t i1 = vcvtaq_s32_f32(vmulq_f32(vld1q_f32(x + j + 4), vid));
        const int32x4_t i2 = vcvtaq_s32_f32(vmulq_f32(vld1q_f32(x + j + 8), vid));
        const int32x4_t i3 = vcvtaq_s32_f32(vmulq_f32(vld1q_f32(x + j + 12), vid));
        const int16x8_t h0 = vcombine_s16(vqmovn_s32(i0), vqmovn_s32(i1));
        const int16x8_t h1 = vcombine_s16(vqmovn_s32(i2), vqmovn_s32(i3));
        vst1q_s8(q + j, vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1)));
    }
}

// d = max|x| / 127, q = round(x / d).
void from_float_q8_0(const float * src, void * dst, int64_t n) {
    ember_block_q8_0 * b = static_cast<ember_block_q8_0 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const float * x  = src + i * EMBER_QK8_0;
        const float   d  = absmax32(x) / 127.0f;
        const float   id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d           = ember_float_to_half(d);
        round32(x, id, b[i].qs);
    }
}

// As Q8_0, plus s = half(d * sum(q)) from the unrounded d.
void from_float_q8_1(const float * src, void * dst, int64_t n) {
    ember_block_q8_1 * b = static_cast<ember_block_q8_1 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK8_1; i++) {
        const float * x  = src + i * EMBER_QK8_1;
        const float   d  = absmax32(x) / 127.0f;
        const float   id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d           = ember_float_to_half(d);
        round32(x, id, b[i].qs);
        const int16x8_t s16 = vaddq_s16(vpaddlq_s8(vld1q_s8(b[i].qs)), vpaddlq_s8(vld1q_s8(b[i].qs + 16)));
        const int       sum = vaddlvq_s16(s16);
        b[i].s              = ember_float_to_half(static_cast<float>(sum) * d);
    }
}

void to_float_q8_0(const void * src, float * dst, int64_t n) {
    const ember_block_q8_0 * b = static_cast<const ember_block_q8_0 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const float32x4_t d = vdupq_n_f32(neon_h2f(b[i].d));
        float *           y = dst + i * EMBER_QK8_0;
        for (int j = 0; j < 32; j += 16) {
            const int8x16_t q  = vld1q_s8(b[i].qs + j);
            const int16x8_t q0 = vmovl_s8(vget_low_s8(q));
            const int16x8_t q1 = vmovl_high_s8(q);
            vst1q_f32(y + j, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q0)))));
            vst1q_f32(y + j + 4, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(q0))));
            vst1q_f32(y + j + 8, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q1)))));
            vst1q_f32(y + j + 12, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(q1))));
        }
    }
}

// The signed value of largest magnitude among x[0..n) (the first one on ties, 0 when all are
// 0 or NaN), as the reference's scan with a strict comparison; n a multiple of 4.
inline float signed_absmax(const float * x, int n, float & amax) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < n; j += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + j)));
    amax = vmaxnmvq_f32(m);
    if (amax == 0.0f) return 0.0f;
    const float32x4_t va = vdupq_n_f32(amax);
    for (int j = 0; j < n; j += 4) {
        if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + j)), va)) != 0) {
            for (int l = j; l < j + 4; l++) {
                if (__builtin_fabsf(x[l]) == amax) return x[l];
            }
        }
    }
    return 0.0f;  // not reached: amax is one of the |x|
}

// d = (signed value of largest magnitude) / -8; q = min(15, trunc(x / d + 8.5)).
void from_float_q4_0(const float * src, void * dst, int64_t n) {
    ember_block_q4_0 * b = static_cast<ember_block_q4_0 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const float * x = src + i * EMBER_QK4_0;
        float         amax;
        const float   max = signed_absmax(x, EMBER_QK4_0, amax);
        const float   d   = max / -8.0f;
        const float   id  = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d            = ember_float_to_half(d);
        const float32x4_t vid = vdupq_n_f32(id), half = vdupq_n_f32(8.5f), top = vdupq_n_f32(15.0f);
        uint8_t           q[EMBER_QK4_0];
        for (int j = 0; j < EMBER_QK4_0; j += 8) {
            // FMINNM: a NaN gives 15, as std::fmin(15, NaN)
            const uint32x4_t l0 = vcvtq_u32_f32(vminnmq_f32(top, vaddq_f32(vmulq_f32(vld1q_f32(x + j), vid), half)));
            const uint32x4_t l1 = vcvtq_u32_f32(vminnmq_f32(top, vaddq_f32(vmulq_f32(vld1q_f32(x + j + 4), vid), half)));
            vst1_u8(q + j, vmovn_u16(vcombine_u16(vmovn_u32(l0), vmovn_u32(l1))));
        }
        const uint8x16_t lo = vld1q_u8(q);
        const uint8x16_t hi = vld1q_u8(q + 16);
        vst1q_u8(b[i].qs, vorrq_u8(lo, vshlq_n_u8(hi, 4)));
    }
}

void to_float_q4_0(const void * src, float * dst, int64_t n) {
    const ember_block_q4_0 * b = static_cast<const ember_block_q4_0 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const float32x4_t d  = vdupq_n_f32(neon_h2f(b[i].d));
        const uint8x16_t  q  = vld1q_u8(b[i].qs);
        const int8x16_t   v8 = vdupq_n_s8(8);
        const int8x16_t   lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), v8);
        const int8x16_t   hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), v8);
        float *           y  = dst + i * EMBER_QK4_0;
        const int8x16_t   parts[2] = {lo, hi};
        for (int h = 0; h < 2; h++) {
            const int16x8_t q0 = vmovl_s8(vget_low_s8(parts[h]));
            const int16x8_t q1 = vmovl_high_s8(parts[h]);
            float *         o  = y + 16 * h;
            vst1q_f32(o, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q0)))));
            vst1q_f32(o + 4, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(q0))));
            vst1q_f32(o + 8, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q1)))));
            vst1q_f32(o + 12, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(q1))));
        }
    }
}

// The signed value of largest magnitude, max, maps to -127: iscale = -127 / max, q =
// min(127, nearest_int(x * iscale)), d = 1 / iscale; bsums[j] = sum of the 16 levels of group j.
void from_float_q8_k(const float * src, void * dst, int64_t n) {
    ember_block_q8_k * blocks = static_cast<ember_block_q8_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      x = src + ib * EMBER_QK_K;
        ember_block_q8_k & b = blocks[ib];
        float              amax;
        const float        max = signed_absmax(x, EMBER_QK_K, amax);
        if (amax == 0.0f) {
            memset(&b, 0, sizeof(b));
            continue;
        }
        const float       iscale = -127.0f / max;
        const float32x4_t vis    = vdupq_n_f32(iscale);
        const int32x4_t   top    = vdupq_n_s32(127);
        for (int j = 0; j < EMBER_QK_K; j += 16) {
            int32x4_t l[4];
            for (int k = 0; k < 4; k++) l[k] = vminq_s32(top, vcvtnq_s32_f32(vmulq_f32(vis, vld1q_f32(x + j + 4 * k))));
            const int16x8_t h0 = vcombine_s16(vqmovn_s32(l[0]), vqmovn_s32(l[1]));
            const int16x8_t h1 = vcombine_s16(vqmovn_s32(l[2]), vqmovn_s32(l[3]));
            vst1q_s8(b.qs + j, vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1)));
            b.bsums[j / 16] = static_cast<int16_t>(vaddvq_s16(vaddq_s16(h0, h1)));
        }
        b.d = 1.0f / iscale;
    }
}

}  // namespace

void ember_cpu_register_neon_quantize(ember_cpu_kernel_table * t) {
    t->types[EMBER_TYPE_Q8_0].from_float = from_float_q8_0;
    t->types[EMBER_TYPE_Q8_0].to_float   = to_float_q8_0;
    t->types[EMBER_TYPE_Q8_1].from_float = from_float_q8_1;
    t->types[EMBER_TYPE_Q8_K].from_float = from_float_q8_k;
    t->types[EMBER_TYPE_Q4_0].from_float = from_float_q4_0;
    t->types[EMBER_TYPE_Q4_0].to_float   = to_float_q4_0;
}
