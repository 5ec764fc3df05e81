// AVX-512 VNNI decode products over R16-repacked weights (layouts in ../repack.h): one row
// per 32-bit lane, so a block column of 16 rows is 4 (Q4_0) or 8 (Q8_0) vpdpbusd with the
// activation broadcast 4 bytes at a time; no horizontal sums until the 16 results are stored.
//
// vpdpbusd multiplies unsigned by signed bytes. Q4_0 nibbles are unsigned levels 0..15 and
// Q8_0 R16 stores q + 128, so both compute sum(level * x) and subtract OFF * sum(x) (OFF = 8
// or 128; sum(x) comes precomputed per block): the exact integer dot product of vec_dot.

// GCC 12 reports the _mm512_undefined_*() operands inside its own intrinsic headers as
// uninitialized (a false positive of the headers, not of this file).
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"

namespace {

constexpr int R = 16;
// Block columns ahead to prefetch, per type: measured from DRAM on Zen 4 (2 threads); Q6_K
// needs it most (its three interleaved streams leave the hardware prefetcher behind: 10 GB/s
// without, 40 with).
constexpr int k_pf_q4_0 = 4, k_pf_q8_0 = 2, k_pf_q4_k = 2, k_pf_q6_k = 2;

// Asks for the `bytes` bytes at p (a coming block column).
static inline void prefetch(const uint8_t * p, int bytes) {
    for (int i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char *>(p + i), _MM_HINT_T0);
}

static inline __m512i bcast4(const int8_t * p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// y[r] for one group: acc = sum_b (d_w[r] * d_x[b]) * isum[b][r].
static void gemv_q4_0_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum * xs, float * y) {
    const int64_t            nb = k / 32;
    const ember_block_q8_0 * xb = static_cast<const ember_block_q8_0 *>(x);
    const __m512i            m4 = _mm512_set1_epi8(0x0f);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp   = static_cast<const uint8_t *>(w) + g * group_stride;
        __m512          acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int64_t         b    = 0;
        auto            step = [&](int64_t ib, __m512 & acc) {
            const uint8_t * c  = gp + ib * (R * 18);
            prefetch(c + k_pf_q4_0 * (R * 18), R * 18);
            const int8_t *  xq = xb[ib].qs;
            const __m512    dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c)));
            const __m512i   v0 = _mm512_loadu_si512(c + 32);
            const __m512i   v1 = _mm512_loadu_si512(c + 96);
            const __m512i   v2 = _mm512_loadu_si512(c + 160);
            const __m512i   v3 = _mm512_loadu_si512(c + 224);
            __m512i         lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v0, m4), bcast4(xq + 0));
            __m512i         hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), bcast4(xq + 16));
            lo                 = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v1, m4), bcast4(xq + 4));
            hi                 = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4), bcast4(xq + 20));
            lo                 = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v2, m4), bcast4(xq + 8));
            hi                 = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v2, 4), m4), bcast4(xq + 24));
            lo                 = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v3, m4), bcast4(xq + 12));
            hi                 = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v3, 4), m4), bcast4(xq + 28));
            const __m512i is   = _mm512_sub_epi32(_mm512_add_epi32(lo, hi), _mm512_set1_epi32(8 * xs[ib].s));
            acc                = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xs[ib].d)), _mm512_cvtepi32_ps(is), acc);
        };
        for (; b + 2 <= nb; b += 2) {
            step(b, acc0);
            step(b + 1, acc1);
        }
        if (b < nb) step(b, acc0);
        _mm512_storeu_ps(y + g * R, _mm512_add_ps(acc0, acc1));
    }
}

static void gemv_q8_0_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum * xs, float * y) {
    const int64_t            nb = k / 32;
    const ember_block_q8_0 * xb = static_cast<const ember_block_q8_0 *>(x);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp   = static_cast<const uint8_t *>(w) + g * group_stride;
        __m512          acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int64_t         b    = 0;
        auto            step = [&](int64_t ib, __m512 & acc) {
            const uint8_t * c  = gp + ib * (R * 34);
            prefetch(c + k_pf_q8_0 * (R * 34), R * 34);
            const int8_t *  xq = xb[ib].qs;
            const __m512    dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c)));
            const uint8_t * q  = c + 32;
            __m512i         s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(q + 0), bcast4(xq + 0));
            __m512i         s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(q + 64), bcast4(xq + 4));
            s0                 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(q + 128), bcast4(xq + 8));
            s1                 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(q + 192), bcast4(xq + 12));
            s0                 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(q + 256), bcast4(xq + 16));
            s1                 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(q + 320), bcast4(xq + 20));
            s0                 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(q + 384), bcast4(xq + 24));
            s1                 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(q + 448), bcast4(xq + 28));
            const __m512i is   = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(128 * xs[ib].s));
            acc                = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xs[ib].d)), _mm512_cvtepi32_ps(is), acc);
        };
        for (; b + 2 <= nb; b += 2) {
            step(b, acc0);
            step(b + 1, acc1);
        }
        if (b < nb) step(b, acc0);
        _mm512_storeu_ps(y + g * R, _mm512_add_ps(acc0, acc1));
    }
}

// Byte i of each 32-bit lane, unsigned / sign-extended.
static inline __m512i lane_u8(__m512i v, int i) {
    return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(8 * i)), _mm512_set1_epi32(0xff));
}
static inline __m512i lane_s8(__m512i v, int i) {
    return _mm512_sra_epi32(_mm512_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * i)), _mm_cvtsi32_si128(24));
}

// Q4_K: sub-block j's integer sums per lane (s[j]), then sum_j sc_j * s[j] and
// sum_j m_j * bsum_j with the 6-bit scales and mins decoded for 16 rows at once.
static void gemv_q4_k_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum *, float * y) {
    const int64_t            nb  = k / 256;
    const ember_block_q8_k * xb  = static_cast<const ember_block_q8_k *>(x);
    const __m512i            m4  = _mm512_set1_epi8(0x0f);
    const __m512i            m6  = _mm512_set1_epi8(0x3f);
    const __m512i            m30 = _mm512_set1_epi8(0x30);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp  = static_cast<const uint8_t *>(w) + g * group_stride;
        __m512          acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c  = gp + b * (R * 144);
            prefetch(c + k_pf_q4_k * (R * 144), R * 144);
            const int8_t *  xq = xb[b].qs;
            const uint8_t * qs = c + 256;
            __m512i         s[8];
            for (int j = 0; j < 4; j++) {
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                for (int cc = 0; cc < 8; cc++) {
                    const __m512i v = _mm512_loadu_si512(qs + (8 * j + cc) * 64);
                    lo              = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, m4), bcast4(xq + 64 * j + 4 * cc));
                    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), bcast4(xq + 64 * j + 32 + 4 * cc));
                }
                s[2 * j]     = lo;
                s[2 * j + 1] = hi;
            }
            const __m512i A    = _mm512_loadu_si512(c + 64);
            const __m512i B    = _mm512_loadu_si512(c + 128);
            const __m512i C    = _mm512_loadu_si512(c + 192);
            const __m512i sc03 = _mm512_and_si512(A, m6);
            const __m512i mn03 = _mm512_and_si512(B, m6);
            const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(C, m4), _mm512_and_si512(_mm512_srli_epi32(A, 2), m30));
            const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(C, 4), m4), _mm512_and_si512(_mm512_srli_epi32(B, 2), m30));
            __m512i       is = _mm512_setzero_si512(), ms = _mm512_setzero_si512();
            for (int j = 0; j < 4; j++) {
                is = _mm512_add_epi32(is, _mm512_mullo_epi32(s[j], lane_u8(sc03, j)));
                is = _mm512_add_epi32(is, _mm512_mullo_epi32(s[4 + j], lane_u8(sc47, j)));
                ms = _mm512_add_epi32(ms, _mm512_mullo_epi32(lane_u8(mn03, j), _mm512_set1_epi32(xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1])));
                ms = _mm512_add_epi32(ms, _mm512_mullo_epi32(lane_u8(mn47, j), _mm512_set1_epi32(xb[b].bsums[8 + 2 * j] + xb[b].bsums[9 + 2 * j])));
            }
            const __m512 dy   = _mm512_set1_ps(xb[b].d);
            const __m512 dw   = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c)));
            const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + 32)));
            acc               = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy), _mm512_cvtepi32_ps(is), acc);
            acc               = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(ms), acc);
        }
        _mm512_storeu_ps(y + g * R, acc);
    }
}

// Q6_K: 6-bit levels assembled from ql / qh per lane (0..63), their sums per 16-weight
// sub-block, minus 32 * bsum, times the int8 sub-block scale.
static void gemv_q6_k_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum *, float * y) {
    const int64_t            nb  = k / 256;
    const ember_block_q8_k * xb  = static_cast<const ember_block_q8_k *>(x);
    const __m512i            m4  = _mm512_set1_epi8(0x0f);
    const __m512i            m30 = _mm512_set1_epi8(0x30);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp  = static_cast<const uint8_t *>(w) + g * group_stride;
        __m512          acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c  = gp + b * (R * 210);
            prefetch(c + k_pf_q6_k * (R * 210), R * 210);
            const int8_t *  xq = xb[b].qs;
            const int16_t * bs = xb[b].bsums;
            const uint8_t * ql = c + 32 + 256;
            const uint8_t * qh = ql + 2048;
            __m512i         sc[4];
            for (int i = 0; i < 4; i++) sc[i] = _mm512_loadu_si512(c + 32 + 64 * i);
            __m512i is = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++) {
                __m512i s[8];  // [t * 2 + u]: weights 128h + 32t + 16u ..
                for (int i = 0; i < 8; i++) s[i] = _mm512_setzero_si512();
                for (int cc = 0; cc < 8; cc++) {
                    const __m512i A  = _mm512_loadu_si512(ql + (16 * h + cc) * 64);
                    const __m512i Bq = _mm512_loadu_si512(ql + (16 * h + 8 + cc) * 64);
                    const __m512i H  = _mm512_loadu_si512(qh + (8 * h + cc) * 64);
                    const __m512i q1 = _mm512_or_si512(_mm512_and_si512(A, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
                    const __m512i q2 = _mm512_or_si512(_mm512_and_si512(Bq, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
                    const __m512i q3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(A, 4), m4), _mm512_and_si512(H, m30));
                    const __m512i q4 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(Bq, 4), m4), _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
                    const int     u  = cc / 4;
                    const int8_t * yb = xq + 128 * h + 4 * cc;
                    s[0 + u] = _mm512_dpbusd_epi32(s[0 + u], q1, bcast4(yb));
                    s[2 + u] = _mm512_dpbusd_epi32(s[2 + u], q2, bcast4(yb + 32));
                    s[4 + u] = _mm512_dpbusd_epi32(s[4 + u], q3, bcast4(yb + 64));
                    s[6 + u] = _mm512_dpbusd_epi32(s[6 + u], q4, bcast4(yb + 96));
                }
                for (int i = 0; i < 8; i++) {
                    const int idx = 8 * h + i;  // i = 2t + u: scale of weights 16 * idx ..
                    const __m512i v = _mm512_sub_epi32(s[i], _mm512_set1_epi32(32 * bs[idx]));
                    is = _mm512_add_epi32(is, _mm512_mullo_epi32(v, lane_s8(sc[idx / 4], idx % 4)));
                }
            }
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(c)));
            acc             = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb[b].d)), _mm512_cvtepi32_ps(is), acc);
        }
        _mm512_storeu_ps(y + g * R, acc);
    }
}

}  // namespace

void ember_cpu_register_avx512_gemv_r16(ember_cpu_kernel_table * t) {
    t->types[ember_type_cell(EMBER_TYPE_Q4_0)].gemv_r16 = gemv_q4_0_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q8_0)].gemv_r16 = gemv_q8_0_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q4_K)].gemv_r16 = gemv_q4_k_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q6_K)].gemv_r16 = gemv_q6_k_r16;
}
