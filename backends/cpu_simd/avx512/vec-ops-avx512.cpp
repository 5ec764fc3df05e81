// AVX-512 row helpers of the element-wise ops (kernels.h, ember_cpu_vec_kernels). Tails use
// masked loads and stores, so any n works and nothing is read past the row.

// GCC 12 reports the _mm512_undefined_*() operands inside its own intrinsic headers as
// uninitialized (a false positive of the headers, not of this file).
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "../kernels.h"

namespace {

inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << left) - 1);
}

double sum_sq_512(int64_t n, const float * x) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0;
    int64_t i  = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v  = _mm512_loadu_ps(x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0               = _mm512_fmadd_pd(lo, lo, a0);
        a1               = _mm512_fmadd_pd(hi, hi, a1);
    }
    if (i < n) {
        const __m512  v  = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0               = _mm512_fmadd_pd(lo, lo, a0);
        a1               = _mm512_fmadd_pd(hi, hi, a1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

void scale_512(int64_t n, const float * x, float s, float * y) {
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    }
}

// exp(x): Cephes expf's reduction and polynomial; 2^n applied with scalef, which saturates to
// inf / 0 without clamping (so silu's limits come out right: g / inf = -0, g / 1 = g).
inline __m512 exp_512(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r        = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p        = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p        = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p        = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p        = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p        = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p        = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

void swiglu_512(int64_t n, const float * g, const float * u, float * y) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m  = tail_mask(n - i);
        const __m512    vg = _mm512_maskz_loadu_ps(m, g + i);
        const __m512    vu = _mm512_maskz_loadu_ps(m, u + i);
        const __m512    e  = exp_512(_mm512_sub_ps(_mm512_setzero_ps(), vg));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_div_ps(vg, _mm512_add_ps(one, e)), vu));
    }
}

}  // namespace

void ember_cpu_register_avx512_vec_ops(ember_cpu_kernel_table * t) {
    t->vec.sum_sq = sum_sq_512;
    t->vec.scale  = scale_512;
    t->vec.swiglu = swiglu_512;
}
