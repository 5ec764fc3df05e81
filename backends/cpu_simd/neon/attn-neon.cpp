// NEON attention tiles (the `attn` cells of kernels.h): queries in the 4 lanes of a q register,
// 16 queries (4 registers) per tile column.
//
// qk and pv are register tiles of 4 x 4 accumulators (4 keys or 4 head elements by 16
// queries): the K (V) values of 4 consecutive head elements (keys) are one load, and each
// feeds 4 FMLA-by-element, so a step of 4 head elements (keys) is 4 + 16 loads for 64 FMAs.
// softmax works on one 4-query vector at a time: a max pass and an exp pass down the key rows,
// with neon-exp.h's exp (x below -87.5, -INF and NaN give exactly 0: masked keys weigh nothing).
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>

#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"
#include "backends/cpu_simd/neon/neon-exp.h"

namespace {

void exp_neon(int64_t n, const float * x, float * y) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp4_attn(vld1q_f32(x + i)));
    if (i < n) {
        float t[4] = {0, 0, 0, 0};
        for (int64_t k = i; k < n; k++) t[k - i] = x[k];
        vst1q_f32(t, exp4_attn(vld1q_f32(t)));
        for (int64_t k = i; k < n; k++) y[k] = t[k - i];
    }
}

// acc[a][b] += k[a][i..i+3] (lane by lane) * qt rows i..i+3, for JR keys x 16 queries.
template <int JR>
inline void qk_tile(int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, float * s, size_t lds) {
    float32x4_t acc[JR][4];
    for (int a = 0; a < JR; a++)
        for (int b = 0; b < 4; b++) acc[a][b] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
        float32x4_t kv[JR];
        for (int a = 0; a < JR; a++) kv[a] = vld1q_f32(k + a * ldk + i);
#define EMBER_QK_STEP(LANE)                                                                        \
    {                                                                                              \
        const float * qr = qt + (i + LANE) * ldq;                                                  \
        float32x4_t   q[4];                                                                        \
        for (int b = 0; b < 4; b++) q[b] = vld1q_f32(qr + 4 * b);                                  \
        for (int a = 0; a < JR; a++)                                                               \
            for (int b = 0; b < 4; b++) acc[a][b] = vfmaq_laneq_f32(acc[a][b], q[b], kv[a], LANE); \
    }
        EMBER_QK_STEP(0)
        EMBER_QK_STEP(1)
        EMBER_QK_STEP(2)
        EMBER_QK_STEP(3)
#undef EMBER_QK_STEP
    }
    for (; i < d; i++) {
        float32x4_t q[4];
        for (int b = 0; b < 4; b++) q[b] = vld1q_f32(qt + i * ldq + 4 * b);
        for (int a = 0; a < JR; a++)
            for (int b = 0; b < 4; b++) acc[a][b] = vfmaq_n_f32(acc[a][b], q[b], k[a * ldk + i]);
    }
    for (int a = 0; a < JR; a++)
        for (int b = 0; b < 4; b++) vst1q_f32(s + a * lds + 4 * b, acc[a][b]);
}

void qk_neon(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, int64_t nl, float * s,
             size_t lds) {
    for (int64_t l = 0; l < nl; l += 16) {
        int64_t j = 0;
        for (; j + 4 <= nk; j += 4) qk_tile<4>(d, k + j * ldk, ldk, qt + l, ldq, s + j * lds + l, lds);
        switch (nk - j) {
            case 3: qk_tile<3>(d, k + j * ldk, ldk, qt + l, ldq, s + j * lds + l, lds); break;
            case 2: qk_tile<2>(d, k + j * ldk, ldk, qt + l, ldq, s + j * lds + l, lds); break;
            case 1: qk_tile<1>(d, k + j * ldk, ldk, qt + l, ldq, s + j * lds + l, lds); break;
            default: break;
        }
    }
}

void softmax_neon(int64_t nk, int64_t nl, float * s, size_t lds, const float * mask, size_t ldm, float * m,
                  float * l_sum, float * alpha) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    for (int64_t l = 0; l < nl; l += 4) {
        const float32x4_t m_old = vld1q_f32(m + l);
        float32x4_t       mx    = m_old;
        for (int64_t j = 0; j < nk; j++) {
            float32x4_t x = vld1q_f32(s + j * lds + l);
            if (mask) {
                x = vaddq_f32(x, vld1q_f32(mask + j * ldm + l));
                vst1q_f32(s + j * lds + l, x);
            }
            mx = vmaxq_f32(mx, x);
        }
        // queries with nothing visible yet subtract 0 instead of -INF (no -INF - -INF)
        const float32x4_t ref = vbslq_f32(vceqq_f32(mx, ninf), vdupq_n_f32(0.0f), mx);
        float32x4_t       sum = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < nk; j++) {
            const float32x4_t p = exp4_attn(vsubq_f32(vld1q_f32(s + j * lds + l), ref));
            vst1q_f32(s + j * lds + l, p);
            sum = vaddq_f32(sum, p);
        }
        const float32x4_t a = exp4_attn(vsubq_f32(m_old, ref));
        vst1q_f32(alpha + l, a);
        vst1q_f32(l_sum + l, vfmaq_f32(sum, vld1q_f32(l_sum + l), a));
        vst1q_f32(m + l, mx);
    }
}

// c[r][b] = acc * alpha + sum_j v[j][i + r] * p[j], for IR head elements x 16 queries.
template <int IR>
inline void pv_tile(int64_t nk, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
                    float * acc, size_t lda) {
    float32x4_t c[IR][4];
    for (int b = 0; b < 4; b++) {
        const float32x4_t a = vld1q_f32(alpha + 4 * b);
        for (int r = 0; r < IR; r++) c[r][b] = vmulq_f32(vld1q_f32(acc + r * lda + 4 * b), a);
    }
    for (int64_t j = 0; j < nk; j++) {
        float32x4_t pj[4];
        for (int b = 0; b < 4; b++) pj[b] = vld1q_f32(p + j * ldp + 4 * b);
        if constexpr (IR == 4) {
            const float32x4_t vv = vld1q_f32(v + j * ldv);
            for (int b = 0; b < 4; b++) {
                c[0][b] = vfmaq_laneq_f32(c[0][b], pj[b], vv, 0);
                c[1][b] = vfmaq_laneq_f32(c[1][b], pj[b], vv, 1);
                c[2][b] = vfmaq_laneq_f32(c[2][b], pj[b], vv, 2);
                c[3][b] = vfmaq_laneq_f32(c[3][b], pj[b], vv, 3);
            }
        } else {
            for (int r = 0; r < IR; r++) {
                const float vr = v[j * ldv + r];
                for (int b = 0; b < 4; b++) c[r][b] = vfmaq_n_f32(c[r][b], pj[b], vr);
            }
        }
    }
    for (int r = 0; r < IR; r++)
        for (int b = 0; b < 4; b++) vst1q_f32(acc + r * lda + 4 * b, c[r][b]);
}

void pv_neon(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
             int64_t nl, float * acc, size_t lda) {
    for (int64_t l = 0; l < nl; l += 16) {
        int64_t i = 0;
        for (; i + 4 <= d; i += 4) pv_tile<4>(nk, v + i, ldv, p + l, ldp, alpha + l, acc + i * lda + l, lda);
        switch (d - i) {
            case 3: pv_tile<3>(nk, v + i, ldv, p + l, ldp, alpha + l, acc + i * lda + l, lda); break;
            case 2: pv_tile<2>(nk, v + i, ldv, p + l, ldp, alpha + l, acc + i * lda + l, lda); break;
            case 1: pv_tile<1>(nk, v + i, ldv, p + l, ldp, alpha + l, acc + i * lda + l, lda); break;
            default: break;
        }
    }
}

}  // namespace

void ember_cpu_register_neon_attn(ember_cpu_kernel_table * t) {
    t->attn.qk      = qk_neon;
    t->attn.softmax = softmax_neon;
    t->attn.pv      = pv_neon;
    t->attn.exp     = exp_neon;
}
