// AVX-512 attention tiles (the `attn` cells of kernels.h): queries in the 16 lanes of a zmm.
//
// qk and pv are register tiles of 4 x 4 zmm accumulators (4 keys or 4 head elements by 64
// queries): per step 4 query-vector loads and 4 broadcast K/V scalars feed 16 FMAs. softmax
// works on one 16-query vector at a time: a max pass and an exp pass down the key rows.
//
// exp: x = n ln2 + r with n = round(x log2 e) and a two-part ln2 (Cody-Waite), so |r| <= ln2/2
// is exact enough; e^r from the Cephes expf polynomial (relative error ~1e-7 on that range),
// then scalef by 2^n. Below -87.5 (e^-87.5 ~ 1e-38, the bottom of the normal range) the
// result is forced to exactly 0, so masked keys (-INF) weigh nothing at all.
// GCC 12 reports the _mm512_undefined_*() operands inside its own intrinsic headers as
// uninitialized (a false positive of the headers, not of this file).
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backends/cpu_simd/kernels.h"

namespace {

static inline __m512 exp16(__m512 x) {
    const __m512 n  = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512       r  = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r               = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p        = _mm512_set1_ps(1.9875691500e-4f);
    p               = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p               = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p               = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p               = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p               = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p               = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512 y  = _mm512_scalef_ps(p, n);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.5f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, y);
}

void exp_avx512(int64_t n, const float * x, float * y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16) ((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

// JR keys x NV query vectors.
template <int JR, int NV>
static inline void qk_tile(int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, float * s,
                           size_t lds) {
    __m512 acc[JR][NV];
    for (int a = 0; a < JR; a++)
        for (int b = 0; b < NV; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i++) {
        __m512 q[NV];
        for (int b = 0; b < NV; b++) q[b] = _mm512_loadu_ps(qt + i * ldq + 16 * b);
        for (int a = 0; a < JR; a++) {
            const __m512 kv = _mm512_set1_ps(k[a * ldk + i]);
            for (int b = 0; b < NV; b++) acc[a][b] = _mm512_fmadd_ps(kv, q[b], acc[a][b]);
        }
    }
    for (int a = 0; a < JR; a++)
        for (int b = 0; b < NV; b++) _mm512_storeu_ps(s + a * lds + 16 * b, acc[a][b]);
}

template <int NV>
static inline void qk_cols(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, float * s,
                           size_t lds) {
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4) qk_tile<4, NV>(d, k + j * ldk, ldk, qt, ldq, s + j * lds, lds);
    switch (nk - j) {
        case 3: qk_tile<3, NV>(d, k + j * ldk, ldk, qt, ldq, s + j * lds, lds); break;
        case 2: qk_tile<2, NV>(d, k + j * ldk, ldk, qt, ldq, s + j * lds, lds); break;
        case 1: qk_tile<1, NV>(d, k + j * ldk, ldk, qt, ldq, s + j * lds, lds); break;
        default: break;
    }
}

void qk_avx512(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, int64_t nl, float * s,
               size_t lds) {
    int64_t l = 0;
    for (; l + 64 <= nl; l += 64) qk_cols<4>(nk, d, k, ldk, qt + l, ldq, s + l, lds);
    switch ((nl - l) / 16) {
        case 3: qk_cols<3>(nk, d, k, ldk, qt + l, ldq, s + l, lds); break;
        case 2: qk_cols<2>(nk, d, k, ldk, qt + l, ldq, s + l, lds); break;
        case 1: qk_cols<1>(nk, d, k, ldk, qt + l, ldq, s + l, lds); break;
        default: break;
    }
}

void softmax_avx512(int64_t nk, int64_t nl, float * s, size_t lds, const float * mask, size_t ldm, float * m,
                    float * l_sum, float * alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t l = 0; l < nl; l += 16) {
        const __m512 m_old = _mm512_loadu_ps(m + l);
        __m512       mx    = m_old;
        for (int64_t j = 0; j < nk; j++) {
            __m512 x = _mm512_loadu_ps(s + j * lds + l);
            if (mask) {
                x = _mm512_add_ps(x, _mm512_loadu_ps(mask + j * ldm + l));
                _mm512_storeu_ps(s + j * lds + l, x);
            }
            mx = _mm512_max_ps(mx, x);
        }
        // queries with nothing visible yet subtract 0 instead of -INF (no -INF - -INF)
        const __m512 ref = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
        __m512       sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < nk; j++) {
            const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j * lds + l), ref));
            _mm512_storeu_ps(s + j * lds + l, p);
            sum = _mm512_add_ps(sum, p);
        }
        const __m512 a = exp16(_mm512_sub_ps(m_old, ref));
        _mm512_storeu_ps(alpha + l, a);
        _mm512_storeu_ps(l_sum + l, _mm512_fmadd_ps(_mm512_loadu_ps(l_sum + l), a, sum));
        _mm512_storeu_ps(m + l, mx);
    }
}

// IR head elements x NV query vectors.
template <int IR, int NV>
static inline void pv_tile(int64_t nk, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
                           float * acc, size_t lda) {
    __m512 c[IR][NV];
    for (int b = 0; b < NV; b++) {
        const __m512 a = _mm512_loadu_ps(alpha + 16 * b);
        for (int r = 0; r < IR; r++) c[r][b] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * lda + 16 * b), a);
    }
    for (int64_t j = 0; j < nk; j++) {
        __m512 pj[NV];
        for (int b = 0; b < NV; b++) pj[b] = _mm512_loadu_ps(p + j * ldp + 16 * b);
        for (int r = 0; r < IR; r++) {
            const __m512 vv = _mm512_set1_ps(v[j * ldv + r]);
            for (int b = 0; b < NV; b++) c[r][b] = _mm512_fmadd_ps(vv, pj[b], c[r][b]);
        }
    }
    for (int r = 0; r < IR; r++)
        for (int b = 0; b < NV; b++) _mm512_storeu_ps(acc + r * lda + 16 * b, c[r][b]);
}

template <int NV>
static inline void pv_cols(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp,
                           const float * alpha, float * acc, size_t lda) {
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) pv_tile<4, NV>(nk, v + i, ldv, p, ldp, alpha, acc + i * lda, lda);
    switch (d - i) {
        case 3: pv_tile<3, NV>(nk, v + i, ldv, p, ldp, alpha, acc + i * lda, lda); break;
        case 2: pv_tile<2, NV>(nk, v + i, ldv, p, ldp, alpha, acc + i * lda, lda); break;
        case 1: pv_tile<1, NV>(nk, v + i, ldv, p, ldp, alpha, acc + i * lda, lda); break;
        default: break;
    }
}

void pv_avx512(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
               int64_t nl, float * acc, size_t lda) {
    int64_t l = 0;
    for (; l + 64 <= nl; l += 64) pv_cols<4>(nk, d, v, ldv, p + l, ldp, alpha + l, acc + l, lda);
    switch ((nl - l) / 16) {
        case 3: pv_cols<3>(nk, d, v, ldv, p + l, ldp, alpha + l, acc + l, lda); break;
        case 2: pv_cols<2>(nk, d, v, ldv, p + l, ldp, alpha + l, acc + l, lda); break;
        case 1: pv_cols<1>(nk, d, v, ldv, p + l, ldp, alpha + l, acc + l, lda); break;
        default: break;
    }
}

}  // namespace

void ember_cpu_register_avx512_attn(ember_cpu_kernel_table * t) {
    t->attn.qk      = qk_avx512;
    t->attn.softmax = softmax_avx512;
    t->attn.pv      = pv_avx512;
    t->attn.exp     = exp_avx512;
}
