// AVX2 (+ FMA) row helpers of the element-wise ops (kernels.h, ember_cpu_vec_kernels): the
// AVX-512 file's scheme on 8 lanes; tails go through a small buffer, so any n works and nothing
// is read or written past the row.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu_simd/avx2/exp-avx2.h"
#include "backends/cpu_simd/kernels.h"

namespace {

// The last n - i (< 8) elements of x, zero-padded.
static inline __m256 load_tail(const float * x, int64_t left) {
    float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = 0; k < left; k++) buf[k] = x[k];
    return _mm256_loadu_ps(buf);
}
static inline void store_tail(float * y, __m256 v, int64_t left) {
    float buf[8];
    _mm256_storeu_ps(buf, v);
    for (int64_t k = 0; k < left; k++) y[k] = buf[k];
}

static double sum_sq_avx2(int64_t n, const float * x) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int64_t i  = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256  v  = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0               = _mm256_fmadd_pd(lo, lo, a0);
        a1               = _mm256_fmadd_pd(hi, hi, a1);
    }
    if (i < n) {
        const __m256  v  = load_tail(x + i, n - i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0               = _mm256_fmadd_pd(lo, lo, a0);
        a1               = _mm256_fmadd_pd(hi, hi, a1);
    }
    const __m256d a = _mm256_add_pd(a0, a1);
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static void scale_avx2(int64_t n, const float * x, float s, float * y) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t      i  = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    if (i < n) store_tail(y + i, _mm256_mul_ps(load_tail(x + i, n - i), vs), n - i);
}

static inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void swiglu_avx2(int64_t n, const float * g, const float * u, float * y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) store_tail(y + i, swiglu8(load_tail(g + i, n - i), load_tail(u + i, n - i)), n - i);
}

}  // namespace

void ember_cpu_register_avx2_vec_ops(ember_cpu_kernel_table * t) {
    t->vec.sum_sq = sum_sq_avx2;
    t->vec.scale  = scale_avx2;
    t->vec.swiglu = swiglu_avx2;
}
