// AVX-512 VNNI decode products over R16-repacked weights (layouts in ../repack.h): one row
// per 32-bit lane, so a block column of 16 rows is 4 (Q4_0) or 8 (Q8_0) vpdpbusd with the
// activation broadcast 4 bytes at a time; no horizontal sums until the 16 results are stored.
//
// vpdpbusd multiplies unsigned by signed bytes. Q4_0 nibbles are unsigned levels 0..15 and
// Q8_0 R16 stores q + 128, so both compute sum(level * x) and subtract OFF * sum(x) (OFF = 8
// or 128; sum(x) comes precomputed per block): the exact integer dot product of vec_dot.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"

namespace {

constexpr int R = 16;

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

}  // namespace

void ember_cpu_register_avx512_gemv_r16(ember_cpu_kernel_table * t) {
    t->types[ember_type_cell(EMBER_TYPE_Q4_0)].gemv_r16 = gemv_q4_0_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q8_0)].gemv_r16 = gemv_q8_0_r16;
}
