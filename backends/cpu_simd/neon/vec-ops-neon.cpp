// NEON row helpers of the F32 element-wise ops (kernels.h, ember_cpu_vec_kernels): sum of
// squares in double lanes, scale, and SwiGLU with neon-exp.h's exp (within about 2 ulp of
// expf; the clamping gives inf / 0 at the ends, so silu's limits come out as the scalar
// loop's). Any n; tails one element at a time (or through a padded copy), nothing read or
// written past the row.
#include <arm_neon.h>
#include <stdint.h>

#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"
#include "backends/cpu_simd/neon/neon-exp.h"

namespace {

double sum_sq_neon(int64_t n, const float * x) {
    float64x2_t a0 = vdupq_n_f64(0.0), a1 = a0, a2 = a0, a3 = a0;
    int64_t     i  = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        const float64x2_t d0 = vcvt_f64_f32(vget_low_f32(v0)), d1 = vcvt_high_f64_f32(v0);
        const float64x2_t d2 = vcvt_f64_f32(vget_low_f32(v1)), d3 = vcvt_high_f64_f32(v1);
        a0                   = vfmaq_f64(a0, d0, d0);
        a1                   = vfmaq_f64(a1, d1, d1);
        a2                   = vfmaq_f64(a2, d2, d2);
        a3                   = vfmaq_f64(a3, d3, d3);
    }
    double ss = vaddvq_f64(vaddq_f64(vaddq_f64(a0, a1), vaddq_f64(a2, a3)));
    for (; i < n; i++) ss += static_cast<double>(x[i]) * x[i];
    return ss;
}

void scale_neon(int64_t n, const float * x, float s, float * y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(x + i), s));
        vst1q_f32(y + i + 4, vmulq_n_f32(vld1q_f32(x + i + 4), s));
    }
    for (; i < n; i++) y[i] = x[i] * s;
}

inline float32x4_t swiglu4(float32x4_t g, float32x4_t u) {
    const float32x4_t e = exp4(vnegq_f32(g));
    return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

void swiglu_neon(int64_t n, const float * g, const float * u, float * y) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, swiglu4(vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) {
        float tg[4] = {0, 0, 0, 0}, tu[4] = {0, 0, 0, 0};
        for (int64_t k = i; k < n; k++) tg[k - i] = g[k], tu[k - i] = u[k];
        vst1q_f32(tg, swiglu4(vld1q_f32(tg), vld1q_f32(tu)));
        for (int64_t k = i; k < n; k++) y[k] = tg[k - i];
    }
}

}  // namespace

void ember_cpu_register_neon_vec_ops(ember_cpu_kernel_table * t) {
    t->vec.sum_sq = sum_sq_neon;
    t->vec.scale  = scale_neon;
    t->vec.swiglu = swiglu_neon;
}
