// AVX2 (+ FMA) attention tiles (the `attn` cells of kernels.h): the scheme of
// avx512/attn-avx512.cpp on 8-lane registers. qk and pv are 4 x 2 ymm register tiles (4 keys
// or 4 head elements by 16 queries; 16 registers leave no room for wider ones).
//
// exp: exp8 of exp-avx2.h.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backends/cpu_simd/avx2/exp-avx2.h"
#include "backends/cpu_simd/kernels.h"

namespace {

void exp_avx2(int64_t n, const float * x, float * y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t k = i; k < n; k++) buf[k - i] = x[k];
        _mm256_storeu_ps(buf, exp8(_mm256_loadu_ps(buf)));
        for (int64_t k = i; k < n; k++) y[k] = buf[k - i];
    }
}

// JR keys x 16 queries.
template <int JR>
static inline void qk_tile(int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, float * s,
                           size_t lds) {
    __m256 acc[JR][2];
    for (int a = 0; a < JR; a++) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i++) {
        const __m256 q0 = _mm256_loadu_ps(qt + i * ldq);
        const __m256 q1 = _mm256_loadu_ps(qt + i * ldq + 8);
        for (int a = 0; a < JR; a++) {
            const __m256 kv = _mm256_broadcast_ss(k + a * ldk + i);
            acc[a][0]       = _mm256_fmadd_ps(kv, q0, acc[a][0]);
            acc[a][1]       = _mm256_fmadd_ps(kv, q1, acc[a][1]);
        }
    }
    for (int a = 0; a < JR; a++) {
        _mm256_storeu_ps(s + a * lds, acc[a][0]);
        _mm256_storeu_ps(s + a * lds + 8, acc[a][1]);
    }
}

void qk_avx2(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, int64_t nl, float * s,
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

void softmax_avx2(int64_t nk, int64_t nl, float * s, size_t lds, const float * mask, size_t ldm, float * m,
                  float * l_sum, float * alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int64_t l = 0; l < nl; l += 8) {
        const __m256 m_old = _mm256_loadu_ps(m + l);
        __m256       mx    = m_old;
        for (int64_t j = 0; j < nk; j++) {
            __m256 x = _mm256_loadu_ps(s + j * lds + l);
            if (mask) {
                x = _mm256_add_ps(x, _mm256_loadu_ps(mask + j * ldm + l));
                _mm256_storeu_ps(s + j * lds + l, x);
            }
            mx = _mm256_max_ps(mx, x);
        }
        // queries with nothing visible yet subtract 0 instead of -INF (no -INF - -INF)
        const __m256 ref = _mm256_andnot_ps(_mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ), mx);
        __m256       sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < nk; j++) {
            const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * lds + l), ref));
            _mm256_storeu_ps(s + j * lds + l, p);
            sum = _mm256_add_ps(sum, p);
        }
        const __m256 a = exp8(_mm256_sub_ps(m_old, ref));
        _mm256_storeu_ps(alpha + l, a);
        _mm256_storeu_ps(l_sum + l, _mm256_fmadd_ps(_mm256_loadu_ps(l_sum + l), a, sum));
        _mm256_storeu_ps(m + l, mx);
    }
}

// IR head elements x 16 queries.
template <int IR>
static inline void pv_tile(int64_t nk, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
                           float * acc, size_t lda) {
    __m256       c[IR][2];
    const __m256 a0 = _mm256_loadu_ps(alpha), a1 = _mm256_loadu_ps(alpha + 8);
    for (int r = 0; r < IR; r++) {
        c[r][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * lda), a0);
        c[r][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * lda + 8), a1);
    }
    for (int64_t j = 0; j < nk; j++) {
        const __m256 p0 = _mm256_loadu_ps(p + j * ldp);
        const __m256 p1 = _mm256_loadu_ps(p + j * ldp + 8);
        for (int r = 0; r < IR; r++) {
            const __m256 vv = _mm256_broadcast_ss(v + j * ldv + r);
            c[r][0]         = _mm256_fmadd_ps(vv, p0, c[r][0]);
            c[r][1]         = _mm256_fmadd_ps(vv, p1, c[r][1]);
        }
    }
    for (int r = 0; r < IR; r++) {
        _mm256_storeu_ps(acc + r * lda, c[r][0]);
        _mm256_storeu_ps(acc + r * lda + 8, c[r][1]);
    }
}

void pv_avx2(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
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

void ember_cpu_register_avx2_attn(ember_cpu_kernel_table * t) {
    t->attn.qk      = qk_avx2;
    t->attn.softmax = softmax_avx2;
    t->attn.pv      = pv_avx2;
    t->attn.exp     = exp_avx2;
}
