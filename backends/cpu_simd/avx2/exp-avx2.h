// exp over 8 floats for the AVX2 files (attention tiles, SwiGLU): the same Cody-Waite
// reduction and Cephes polynomial as the AVX-512 files (relative error ~1e-7); 2^n is built in
// the exponent bits, so x is clamped to [-87.5, 88.5] first and results below -87.5 (and -INF,
// NaN) are forced to exactly 0. Included only by avx2/ files (compiled with AVX2 + FMA):
// everything here is static.
#ifndef EMBER_CPU_AVX2_EXP_H
#define EMBER_CPU_AVX2_EXP_H

#include <immintrin.h>

static inline __m256 exp8(__m256 x) {
    const __m256 lo   = _mm256_set1_ps(-87.5f);
    const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);  // false for -INF and NaN
    const __m256 xc   = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.5f));
    const __m256 n    = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r          = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r                 = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p          = _mm256_set1_ps(1.9875691500e-4f);
    p                 = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p                 = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p                 = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p                 = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p                 = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p                 = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // n in [-126, 128]: 2^n as (n + 127) << 23, split in two factors so n = 128 stays finite
    const __m256i ni  = _mm256_cvtps_epi32(n);
    const __m256i n1  = _mm256_srai_epi32(ni, 1);
    const __m256  s1  = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256  s2  = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, n1), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), keep);
}

#endif  // EMBER_CPU_AVX2_EXP_H
