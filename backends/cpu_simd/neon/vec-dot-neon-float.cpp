// NEON kernels of the float types: F32 and F16 dot products (float accumulators; the reference
// sums in double, so these agree up to float summation error), and the F16 conversions, which
// are bit-identical to quant/ref/ref-float.cpp (the FPU converts with round-to-nearest-even;
// NaNs are rewritten as the reference writes them).
#include <arm_neon.h>
#include <stdint.h>

#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"

namespace {

void vec_dot_f32(int64_t n, float * s, const void * vx, const void * vy) {
    const float * x = static_cast<const float *>(vx);
    const float * y = static_cast<const float *>(vy);
    float32x4_t   a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t       i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

// 8 halves as two float vectors (exact).
inline void load_h8(const ember_half * p, float32x4_t & lo, float32x4_t & hi) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    lo                  = vcvt_f32_f16(vget_low_f16(h));
    hi                  = vcvt_high_f32_f16(h);
}

void vec_dot_f16(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_half * x = static_cast<const ember_half *>(vx);
    const ember_half * y = static_cast<const ember_half *>(vy);
    float32x4_t        a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t            i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t x0, x1, x2, x3, y0, y1, y2, y3;
        load_h8(x + i, x0, x1);
        load_h8(x + i + 8, x2, x3);
        load_h8(y + i, y0, y1);
        load_h8(y + i + 8, y2, y3);
        a0 = vfmaq_f32(a0, x0, y0);
        a1 = vfmaq_f32(a1, x1, y1);
        a2 = vfmaq_f32(a2, x2, y2);
        a3 = vfmaq_f32(a3, x3, y3);
    }
    for (; i + 8 <= n; i += 8) {
        float32x4_t x0, x1, y0, y1;
        load_h8(x + i, x0, x1);
        load_h8(y + i, y0, y1);
        a0 = vfmaq_f32(a0, x0, y0);
        a1 = vfmaq_f32(a1, x1, y1);
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) sum += neon_h2f(x[i]) * neon_h2f(y[i]);
    *s = sum;
}

// 4 halves -> floats. The FPU sets the quiet bit of a signalling NaN; the reference keeps the
// payload as it is (sign | 0x7f800000 | mantissa << 13), so infinities and NaNs take that path.
inline float32x4_t h4_to_f32(uint16x4_t h) {
    const float32x4_t f       = vcvt_f32_f16(vreinterpret_f16_u16(h));
    const uint32x4_t  w       = vmovl_u16(h);
    const uint32x4_t  special = vceqq_u32(vandq_u32(w, vdupq_n_u32(0x7c00u)), vdupq_n_u32(0x7c00u));
    const uint32x4_t  bits    = vorrq_u32(vorrq_u32(vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x8000u)), 16),
                                                    vdupq_n_u32(0x7f800000u)),
                                          vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x3ffu)), 13));
    return vbslq_f32(special, vreinterpretq_f32_u32(bits), f);
}

// 4 floats -> halves, round to nearest even (overflow to infinity, subnormals kept, as the
// reference). A NaN becomes sign | 0x7e00 as in the reference, whatever its payload.
inline uint16x4_t f32_to_h4(float32x4_t v) {
    const uint16x4_t h     = vreinterpret_u16_f16(vcvt_f16_f32(v));
    const uint16x4_t nan   = vmovn_u32(vmvnq_u32(vceqq_f32(v, v)));
    const uint16x4_t canon = vorr_u16(vand_u16(h, vdup_n_u16(0x8000u)), vdup_n_u16(0x7e00u));
    return vbsl_u16(nan, canon, h);
}

void to_float_f16(const void * src, float * dst, int64_t n) {
    const ember_half * h = static_cast<const ember_half *>(src);
    int64_t            i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t v = vld1q_u16(h + i);
        vst1q_f32(dst + i, h4_to_f32(vget_low_u16(v)));
        vst1q_f32(dst + i + 4, h4_to_f32(vget_high_u16(v)));
    }
    if (i < n) {  // the last 1..7: through a zero-padded copy
        ember_half tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float      out[8];
        memcpy(tmp, h + i, static_cast<size_t>(n - i) * sizeof(ember_half));
        vst1q_f32(out, h4_to_f32(vld1_u16(tmp)));
        vst1q_f32(out + 4, h4_to_f32(vld1_u16(tmp + 4)));
        memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(float));
    }
}

void from_float_f16(const float * src, void * dst, int64_t n) {
    ember_half * h = static_cast<ember_half *>(dst);
    int64_t      i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_u16(h + i, vcombine_u16(f32_to_h4(vld1q_f32(src + i)), f32_to_h4(vld1q_f32(src + i + 4))));
    }
    if (i < n) {
        float      tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        ember_half out[8];
        memcpy(tmp, src + i, static_cast<size_t>(n - i) * sizeof(float));
        vst1q_u16(out, vcombine_u16(f32_to_h4(vld1q_f32(tmp)), f32_to_h4(vld1q_f32(tmp + 4))));
        memcpy(h + i, out, static_cast<size_t>(n - i) * sizeof(ember_half));
    }
}

}  // namespace

void ember_cpu_register_neon_float(ember_cpu_kernel_table * t) {
    t->types[EMBER_TYPE_F32].vec_dot    = vec_dot_f32;
    t->types[EMBER_TYPE_F16].vec_dot    = vec_dot_f16;
    t->types[EMBER_TYPE_F16].to_float   = to_float_f16;
    t->types[EMBER_TYPE_F16].from_float = from_float_f16;
}
