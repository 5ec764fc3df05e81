// The vector exp of the NEON attention and element-wise kernels (static inline: each file gets
// its own copy, see backends/cpu_simd/kernels.h).
//
// exp: x = n ln2 + r with n = round(x log2 e) and a two-part ln2 (Cody-Waite), so |r| <= ln2/2;
// e^r from the Cephes expf polynomial (relative error ~1e-7 on that range), then times 2^n as
// two exact power-of-two factors (2^(n/2) 2^(n - n/2): each a normal float for every n of
// the clamped range, so the result rounds once, to inf or a subnormal as expf does). The
// attention exp forces x below -87.5 (and -INF, NaN) to exactly 0, so masked keys weigh
// nothing at all.
#ifndef EMBER_CPU_NEON_EXP_H
#define EMBER_CPU_NEON_EXP_H

#include <arm_neon.h>

// e^x for x in [-104, 89] (the callers clamp; NaN propagates through vminq / vmaxq).
static inline float32x4_t exp4_core(float32x4_t x) {
    const float32x4_t n  = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t       r  = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r                    = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p        = vdupq_n_f32(1.9875691500e-4f);
    p                    = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p                    = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p                    = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p                    = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p                    = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p                    = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t   ni = vcvtq_s32_f32(n);  // exact: n is an integer in [-151, 129]
    const int32x4_t   n1 = vshrq_n_s32(ni, 1);
    const int32x4_t   n2 = vsubq_s32(ni, n1);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

// e^x of any x: clamped first (e^89 overflows to inf, e^-104 is 0 after rounding).
static inline float32x4_t exp4(float32x4_t x) {
    return exp4_core(vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f)));
}

// The attention exp: x < -87.5, -INF and NaN give exactly 0.
static inline float32x4_t exp4_attn(float32x4_t x) {
    const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(-87.5f));
    return vreinterpretq_f32_u32(vandq_u32(keep, vreinterpretq_u32_f32(exp4(x))));
}

#endif  // EMBER_CPU_NEON_EXP_H
