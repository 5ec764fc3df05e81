// AVX-512 kernels of Ember's own weight types (docs/quant-types.md), registered over the AVX2
// ones (avx2/ember-types-avx2.cpp): INT4 / INT4_G32 against Q8_1, NF4 against Q8_0, the FP8
// types against F32, and the FP8 converters. Only F/BW/VL/DQ/VNNI (the required AVX-512 level).
//
// Arithmetic, against the scalar reference (quant/ref/ref-int4.cpp, ref-nf4.cpp, ref-fp8.cpp):
//   - INT4: per 32-run, d * d8 * (sum q q8 - z * sum q8). The integer sums are exact (vpdpbusd
//     on the unsigned nibbles, and on a vector of ones for sum q8: taken from the integers, as the
//     reference does, not from Q8_1's s). The lanes keep partial sums of 4 products each, and
//     sumi - z * sumy is one fused multiply-add per lane: exact, as every term fits 24 bits.
//   - NF4: the 16-entry codebook is one zmm (vpermps on the nibbles), times the int8 activations
//     converted to float; the block scale DYN[absmax_q] * scale2 + offset rounds twice, as written.
//   - FP8: codes are decoded exactly by bit moves into fp16 and vcvtph2ps (E5M2 is the upper
//     byte of an fp16; E4M3 becomes an fp16 2^-8 times its value, NaN codes an fp16 NaN), so
//     only the float summation order differs from the reference. to_float and from_float are
//     bit-identical to it (the scaling by powers of two is exact; rounding is to nearest even).
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#endif

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"
#include "quant/ref/ref.h"  // the NF4 tables, copied at registration

namespace {

// Filled once by the registration function (called from kernels.cpp's thread-safe init).
alignas(64) float g_nf4[16];  // NF4 codebook
float             g_dyn[256];   // NF4 second-level map (bitsandbytes' dynamic map)
float             g_e8m0[256];  // 2^(e - 127); e = 255: NaN

static inline float h2f(ember_half h) { return _cvtsh_ss(h); }

static inline uint32_t ld32(const void * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

static inline float ld_f32(const void * p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

// a * b + c with two roundings (the reference's block scale): the empty asm keeps the
// compiler from fusing them.
static inline float mul_add_unfused(float a, float b, float c) {
    float p = a * b;
    __asm__("" : "+x"(p));
    return p + c;
}

static inline __m512i load256_pair(const void * a, const void * b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i *>(a))),
                              _mm256_loadu_si256(static_cast<const __m256i *>(b)), 1);
}

//
// INT4 (groups of 128): one block = 4 runs of 32 = two zmm of (nibble, int8) pairs.
//
static void vd_int4(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_int4 * x  = static_cast<const ember_block_int4 *>(vx);
    const ember_block_q8_1 * y  = static_cast<const ember_block_q8_1 *>(vy);
    const int64_t            nb = n / 128;
    const __m512i            m4   = _mm512_set1_epi8(0x0F);
    const __m512i            ones = _mm512_set1_epi8(1);
    // qwords of [lo run0, hi run0, lo run1, hi run1] and of runs 2, 3 (lo: 0..7, hi: 8..15)
    const __m512i sel01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i sel23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    // lanes of the 4 scales d * d8_j (at 0, 2, 4, 6 of the converted Q8_1 headers)
    const __m512i idx01 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx23 = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m512i zero  = _mm512_setzero_si512();
    __m512        acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const ember_block_int4 & b  = x[i];
        const ember_block_q8_1 * yb = y + 4 * i;
        const __m512i            v  = _mm512_loadu_si512(b.qs);
        const __m512i            lo = _mm512_and_si512(v, m4);
        const __m512i            hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        const __m512i            w01 = _mm512_permutex2var_epi64(lo, sel01, hi);
        const __m512i            w23 = _mm512_permutex2var_epi64(lo, sel23, hi);
        const __m512i            y01 = load256_pair(yb[0].qs, yb[1].qs);
        const __m512i            y23 = load256_pair(yb[2].qs, yb[3].qs);
        const __m512 si01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, w01, y01));
        const __m512 sy01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, y01));
        const __m512 si23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, w23, y23));
        const __m512 sy23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, y23));
        const __m256 yh   = _mm256_cvtph_ps(_mm_setr_epi32(static_cast<int>(ld32(&yb[0])), static_cast<int>(ld32(&yb[1])),
                                                           static_cast<int>(ld32(&yb[2])), static_cast<int>(ld32(&yb[3]))));
        const __m512 dd   = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(h2f(b.d)), yh));
        const __m512 z    = _mm512_set1_ps(h2f(b.z));
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx01, dd), _mm512_fnmadd_ps(z, sy01, si01), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx23, dd), _mm512_fnmadd_ps(z, sy23, si23), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

//
// INT4_G32: four blocks per step (two zmm), their fp16 headers converted together.
//
static void vd_int4_g32(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_int4_g32 * x  = static_cast<const ember_block_int4_g32 *>(vx);
    const ember_block_q8_1 *     y  = static_cast<const ember_block_q8_1 *>(vy);
    const int64_t                nb = n / 32;
    const __m512i                m4   = _mm512_set1_epi8(0x0F);
    const __m512i                ones = _mm512_set1_epi8(1);
    const __m512i                zero = _mm512_setzero_si512();
    // F = [d0 z0 d1 z1 d2 z2 d3 z3 | d0d80 . d1d81 . d2d82 . d3d83 .]
    const __m512i iz01 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i iz23 = _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m512i id01 = _mm512_set_epi32(10, 10, 10, 10, 10, 10, 10, 10, 8, 8, 8, 8, 8, 8, 8, 8);
    const __m512i id23 = _mm512_set_epi32(14, 14, 14, 14, 14, 14, 14, 14, 12, 12, 12, 12, 12, 12, 12, 12);
    __m512        acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t       i    = 0;
    for (; i + 4 <= nb; i += 4) {
        const ember_block_int4_g32 * b  = x + i;
        const ember_block_q8_1 *     yb = y + i;
        const __m256 wf = _mm256_cvtph_ps(_mm_setr_epi32(static_cast<int>(ld32(&b[0])), static_cast<int>(ld32(&b[1])),
                                                         static_cast<int>(ld32(&b[2])), static_cast<int>(ld32(&b[3]))));
        const __m256 yf = _mm256_cvtph_ps(_mm_setr_epi32(static_cast<int>(ld32(&yb[0])), static_cast<int>(ld32(&yb[1])),
                                                         static_cast<int>(ld32(&yb[2])), static_cast<int>(ld32(&yb[3]))));
        const __m512 F  = _mm512_insertf32x8(_mm512_castps256_ps512(wf), _mm256_mul_ps(wf, yf), 1);
        // [q0, q0, q1, q1] in 128-bit lanes, then the high nibbles in lanes 1 and 3
        const __m512i u01 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[0].qs)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[1].qs))), 1);
        const __m512i u23 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[2].qs)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[3].qs))), 1);
        const __m512i w01 = _mm512_and_si512(_mm512_mask_srli_epi16(u01, 0xFF00FF00u, u01, 4), m4);
        const __m512i w23 = _mm512_and_si512(_mm512_mask_srli_epi16(u23, 0xFF00FF00u, u23, 4), m4);
        const __m512i y01 = load256_pair(yb[0].qs, yb[1].qs);
        const __m512i y23 = load256_pair(yb[2].qs, yb[3].qs);
        const __m512  si01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, w01, y01));
        const __m512  sy01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, y01));
        const __m512  si23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, w23, y23));
        const __m512  sy23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, y23));
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(id01, F),
                               _mm512_fnmadd_ps(_mm512_permutexvar_ps(iz01, F), sy01, si01), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(id23, F),
                               _mm512_fnmadd_ps(_mm512_permutexvar_ps(iz23, F), sy23, si23), acc1);
    }
    __m256 acc = _mm256_add_ps(_mm512_castps512_ps256(_mm512_add_ps(acc0, acc1)),
                               _mm512_extractf32x8_ps(_mm512_add_ps(acc0, acc1), 1));
    for (; i < nb; i++) {  // 0..3 blocks left: one 256-bit step each
        const ember_block_int4_g32 & b  = x[i];
        const ember_block_q8_1 &     yb = y[i];
        const __m128i q  = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs));
        const __m256i w  = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
        const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(yb.qs));
        const __m256  si = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, yv));
        const __m256  sy = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), yv));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b.d) * h2f(yb.d)), _mm256_fnmadd_ps(_mm256_set1_ps(h2f(b.z)), sy, si), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h        = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h        = _mm_add_ss(h, _mm_movehdup_ps(h));
    *s       = _mm_cvtss_f32(h);
}

//
// NF4: one 64-block per step, the codebook in one zmm.
//
static void vd_nf4(int64_t n, float * s, const void * vx, const void * vy) {
    const uint8_t *          p   = static_cast<const uint8_t *>(vx);
    const ember_block_q8_0 * q8  = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb  = n / 64;
    const __m512             tab = _mm512_load_ps(g_nf4);
    __m512                   acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += EMBER_REF_GROUP_BLOCKS_NF4) {
        const int64_t           gb     = nb - g0 < EMBER_REF_GROUP_BLOCKS_NF4 ? nb - g0 : EMBER_REF_GROUP_BLOCKS_NF4;
        const float             scale2 = ld_f32(p);
        const float             offset = ld_f32(p + 4);
        const ember_block_nf4 * b      = reinterpret_cast<const ember_block_nf4 *>(p + EMBER_REF_GROUP_HEADER_NF4);
        for (int64_t j = 0; j < gb; j++) {
            const ember_block_q8_0 & ya = q8[2 * (g0 + j)];
            const ember_block_q8_0 & yb = q8[2 * (g0 + j) + 1];
            const __m512i ia  = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[j].qs)));
            const __m512i ib  = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[j].qs + 16)));
            // vpermps reads the low 4 bits of each index: the low nibble as is, the high after a shift
            const __m512 wa0 = _mm512_permutexvar_ps(ia, tab);
            const __m512 wa1 = _mm512_permutexvar_ps(ib, tab);
            const __m512 wb0 = _mm512_permutexvar_ps(_mm512_srli_epi32(ia, 4), tab);
            const __m512 wb1 = _mm512_permutexvar_ps(_mm512_srli_epi32(ib, 4), tab);
            const __m512 ya0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(ya.qs))));
            const __m512 ya1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(ya.qs + 16))));
            const __m512 yb0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(yb.qs))));
            const __m512 yb1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(yb.qs + 16))));
            const __m512 sa  = _mm512_fmadd_ps(wa1, ya1, _mm512_mul_ps(wa0, ya0));
            const __m512 sb  = _mm512_fmadd_ps(wb1, yb1, _mm512_mul_ps(wb0, yb0));
            const float  ab  = mul_add_unfused(g_dyn[b[j].absmax_q], scale2, offset);
            acc0 = _mm512_fmadd_ps(sa, _mm512_set1_ps(ab * h2f(ya.d)), acc0);
            acc1 = _mm512_fmadd_ps(sb, _mm512_set1_ps(ab * h2f(yb.d)), acc1);
        }
        p += EMBER_REF_GROUP_HEADER_NF4 + static_cast<size_t>(gb) * sizeof(ember_block_nf4);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

//
// FP8
//

// 32 codes -> 32 floats (two zmm). E5M2: the code is the upper byte of an fp16. E4M3: the code
// shifted into an fp16's exponent and mantissa reads as 2^-8 times its value (subnormals too);
// the callers multiply by 256 (exact). S.1111.111 (NaN) lands on fp16 0x3f80 (or 0xbf80) and
// gets the exponent bit 0x4000 that makes it an fp16 NaN: h + 0x80 reaches 0x4000 only there.
template <bool E4M3>
static inline void fp8_decode32(const uint8_t * q, __m512 & f0, __m512 & f1) {
    const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(q)));
    __m512i       h;
    if (E4M3) {
        h = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(static_cast<short>(0xBF80)));
        h = _mm512_ternarylogic_epi32(h, _mm512_add_epi16(h, _mm512_set1_epi16(0x80)), _mm512_set1_epi16(0x4000),
                                      0xF8);  // h | ((h + 0x80) & 0x4000)
    } else {
        h = _mm512_slli_epi16(v, 8);
    }
    f0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    f1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

template <bool E4M3>
static void vd_fp8(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_fp8 * b  = static_cast<const ember_block_fp8 *>(vx);
    const float *           y  = static_cast<const float *>(vy);
    const int64_t           nb = n / 32;
    const __m512            k  = _mm512_set1_ps(E4M3 ? 256.0f : 1.0f);
    __m512                  acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t                 i    = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512 f0, f1, f2, f3;
        fp8_decode32<E4M3>(b[i].qs, f0, f1);
        fp8_decode32<E4M3>(b[i + 1].qs, f2, f3);
        const float * yi = y + 32 * i;
        __m512 s0 = _mm512_fmadd_ps(f1, _mm512_loadu_ps(yi + 16), _mm512_mul_ps(f0, _mm512_loadu_ps(yi)));
        __m512 s1 = _mm512_fmadd_ps(f3, _mm512_loadu_ps(yi + 48), _mm512_mul_ps(f2, _mm512_loadu_ps(yi + 32)));
        if (E4M3) {
            s0 = _mm512_mul_ps(s0, k);
            s1 = _mm512_mul_ps(s1, k);
        }
        acc0 = _mm512_fmadd_ps(s0, _mm512_set1_ps(g_e8m0[b[i].e]), acc0);
        acc1 = _mm512_fmadd_ps(s1, _mm512_set1_ps(g_e8m0[b[i + 1].e]), acc1);
    }
    if (i < nb) {
        __m512 f0, f1;
        fp8_decode32<E4M3>(b[i].qs, f0, f1);
        const float * yi = y + 32 * i;
        __m512        s0 = _mm512_fmadd_ps(f1, _mm512_loadu_ps(yi + 16), _mm512_mul_ps(f0, _mm512_loadu_ps(yi)));
        if (E4M3) s0 = _mm512_mul_ps(s0, k);
        acc0 = _mm512_fmadd_ps(s0, _mm512_set1_ps(g_e8m0[b[i].e]), acc0);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Per-row scale: [fp32 scale][n codes].
template <bool E4M3>
static void vd_fp8_row(int64_t n, float * s, const void * vx, const void * vy) {
    const uint8_t * p     = static_cast<const uint8_t *>(vx);
    const uint8_t * q     = p + 4;
    const float *   y     = static_cast<const float *>(vy);
    const float     scale = ld_f32(p);
    __m512          a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t         i  = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 f0, f1, f2, f3;
        fp8_decode32<E4M3>(q + i, f0, f1);
        fp8_decode32<E4M3>(q + i + 32, f2, f3);
        a0 = _mm512_fmadd_ps(f0, _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(f1, _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(f2, _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(f3, _mm512_loadu_ps(y + i + 48), a3);
    }
    if (i < n) {  // n is a multiple of 32
        __m512 f0, f1;
        fp8_decode32<E4M3>(q + i, f0, f1);
        a0 = _mm512_fmadd_ps(f0, _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(f1, _mm512_loadu_ps(y + i + 16), a1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    if (E4M3) sum *= 256.0f;
    *s = sum * scale;
}

// to_float: FP8(code) * scale, one rounding as in the reference (E4M3's * 256 is exact).
template <bool E4M3>
static inline void fp8_store32(const uint8_t * q, __m512 sc, float * dst) {
    __m512 f0, f1;
    fp8_decode32<E4M3>(q, f0, f1);
    if (E4M3) {
        f0 = _mm512_mul_ps(f0, _mm512_set1_ps(256.0f));
        f1 = _mm512_mul_ps(f1, _mm512_set1_ps(256.0f));
    }
    _mm512_storeu_ps(dst, _mm512_mul_ps(f0, sc));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(f1, sc));
}

template <bool E4M3>
static void to_fp8(const void * src, float * dst, int64_t n) {
    const ember_block_fp8 * b = static_cast<const ember_block_fp8 *>(src);
    for (int64_t i = 0; i < n / 32; i++) fp8_store32<E4M3>(b[i].qs, _mm512_set1_ps(g_e8m0[b[i].e]), dst + 32 * i);
}

template <bool E4M3>
static void to_fp8_row(const void * src, float * dst, int64_t n) {
    const uint8_t * p  = static_cast<const uint8_t *>(src);
    const __m512    sc = _mm512_set1_ps(ld_f32(p));
    for (int64_t i = 0; i < n; i += 32) fp8_store32<E4M3>(p + 4 + i, sc, dst + i);
}

// The OCP formats, as quant/ref/ref-fp8.cpp's fp8_format.
template <bool E4M3>
struct fmt {
    static constexpr int     mbits    = E4M3 ? 3 : 2;
    static constexpr int     bias     = E4M3 ? 7 : 15;
    static constexpr int     emin     = 1 - bias;
    static constexpr float   max      = E4M3 ? 448.0f : 57344.0f;
    static constexpr int     max_exp2 = E4M3 ? 9 : 16;  // frexp(max): max = 0.875 * 2^max_exp2
    static constexpr int     max_code = E4M3 ? 0x7e : 0x7b;
    static constexpr int     nan_code = 0x7f;
};

// Nearest code of 16 floats, ties to even, saturating (the reference's encode): with E the
// binade of |v| (at least the smallest normal one), q = rne(|v| * 2^(mbits - E)) is exact to
// compute, and the code is ((E + bias) << mbits) + q - 2^mbits, a mantissa carry moving into
// the exponent by itself.
template <bool E4M3>
static inline __m128i fp8_encode16(__m512 v) {
    using F                = fmt<E4M3>;
    const __m512i bits     = _mm512_castps_si512(v);
    const __m512i sign     = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
    const __m512i abits    = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __m512  a        = _mm512_castsi512_ps(abits);
    const __m512i E        = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(abits, 23), _mm512_set1_epi32(127)),
                                              _mm512_set1_epi32(F::emin));
    const __m512  mul      = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127 + F::mbits), E), 23));
    const __m512i q        = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i       code     = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(E, F::mbits), q),
                                              _mm512_set1_epi32((F::bias << F::mbits) - (1 << F::mbits)));
    code                   = _mm512_min_epi32(code, _mm512_set1_epi32(F::max_code));
    const __mmask16 big    = _mm512_cmp_ps_mask(a, _mm512_set1_ps(F::max), _CMP_GE_OQ);  // inf too
    const __mmask16 nan    = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    code                   = _mm512_mask_mov_epi32(code, big, _mm512_set1_epi32(F::max_code));
    code                   = _mm512_mask_mov_epi32(code, nan, _mm512_set1_epi32(F::nan_code));
    return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// Largest |x| over the finite values of 32 floats (zero if none).
static inline __m512 finite_abs_max(__m512 m, __m512 x) {
    const __m512    a  = _mm512_abs_ps(x);
    const __mmask16 ok = _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ);
    return _mm512_mask_max_ps(m, ok, m, a);
}

static inline double pow2d(int k) {  // k in the normal double range
    const uint64_t u = static_cast<uint64_t>(1023 + k) << 52;
    double         d;
    std::memcpy(&d, &u, 8);
    return d;
}

static inline float pow2f(int k) {  // k in [-127, 127]; 2^-127 is subnormal
    const uint32_t u = k >= -126 ? static_cast<uint32_t>(127 + k) << 23 : 0x00400000u;
    float          f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The reference's block_exponent: the smallest k with amax <= max * 2^k, stored as k + 127.
template <bool E4M3>
static inline uint8_t block_exponent(float amax) {
    using F = fmt<E4M3>;
    if (!(amax > 0.0f)) return 127;
    const uint32_t u  = ld32(&amax);
    const int      ef = static_cast<int>(u >> 23);
    // frexp: amax in [2^(exp2 - 1), 2^exp2)
    const int exp2 = ef != 0 ? ef - 126 : (32 - __builtin_clz(u & 0x7fffffu)) - 149;
    int       k    = exp2 - F::max_exp2 - 1;
    while (!(static_cast<double>(amax) <= static_cast<double>(F::max) * pow2d(k))) k++;
    int e = k + 127;
    if (e < 0) e = 0;
    if (e > 254) e = 254;
    return static_cast<uint8_t>(e);
}

template <bool E4M3>
static void from_fp8(const float * src, void * dst, int64_t n) {
    ember_block_fp8 * b = static_cast<ember_block_fp8 *>(dst);
    for (int64_t i = 0; i < n / 32; i++) {
        const __m512  x0 = _mm512_loadu_ps(src + 32 * i);
        const __m512  x1 = _mm512_loadu_ps(src + 32 * i + 16);
        const float   am = _mm512_reduce_max_ps(finite_abs_max(finite_abs_max(_mm512_setzero_ps(), x0), x1));
        const uint8_t e  = block_exponent<E4M3>(am);
        const __m512  sc = _mm512_set1_ps(pow2f(127 - e));  // exact scaling, as ldexp
        b[i].e           = e;
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b[i].qs), fp8_encode16<E4M3>(_mm512_mul_ps(x0, sc)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b[i].qs + 16), fp8_encode16<E4M3>(_mm512_mul_ps(x1, sc)));
    }
}

// Per-row: scale = amax / max (FLT_MIN at least, 1 for an all-zero row), codes of x / scale.
template <bool E4M3>
static void from_fp8_row(const float * src, void * dst, int64_t n) {
    uint8_t * p = static_cast<uint8_t *>(dst);
    __m512    m = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) m = finite_abs_max(m, _mm512_loadu_ps(src + i));
    const float amax  = _mm512_reduce_max_ps(m);
    float       scale = amax > 0.0f ? amax / fmt<E4M3>::max : 1.0f;
    if (scale < FLT_MIN) scale = FLT_MIN;
    std::memcpy(p, &scale, 4);
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p + 4 + i), fp8_encode16<E4M3>(_mm512_div_ps(_mm512_loadu_ps(src + i), sc)));
    }
}

static void init_tables() {
    for (int i = 0; i < 16; i++) g_nf4[i] = ember_ref_nf4_value(i);
    for (int i = 0; i < 256; i++) g_dyn[i] = ember_ref_nf4_dynamic_value(i);
    for (int e = 0; e < 255; e++) g_e8m0[e] = pow2f(e - 127);
    g_e8m0[255] = __builtin_nanf("");
}

}  // namespace

void ember_cpu_register_avx512_ember_types(ember_cpu_kernel_table * t) {
    init_tables();
    constexpr int32_t c_int4 = ember_type_cell(EMBER_TYPE_INT4), c_g32 = ember_type_cell(EMBER_TYPE_INT4_G32),
                      c_nf4 = ember_type_cell(EMBER_TYPE_NF4), c_e4 = ember_type_cell(EMBER_TYPE_FP8_E4M3),
                      c_e5 = ember_type_cell(EMBER_TYPE_FP8_E5M2), c_e4r = ember_type_cell(EMBER_TYPE_FP8_E4M3_ROW),
                      c_e5r = ember_type_cell(EMBER_TYPE_FP8_E5M2_ROW);
    t->types[c_int4].vec_dot   = vd_int4;
    t->types[c_g32].vec_dot    = vd_int4_g32;
    t->types[c_nf4].vec_dot    = vd_nf4;
    t->types[c_e4].vec_dot     = vd_fp8<true>;
    t->types[c_e4].to_float    = to_fp8<true>;
    t->types[c_e4].from_float  = from_fp8<true>;
    t->types[c_e5].vec_dot     = vd_fp8<false>;
    t->types[c_e5].to_float    = to_fp8<false>;
    t->types[c_e5].from_float  = from_fp8<false>;
    t->types[c_e4r].vec_dot    = vd_fp8_row<true>;
    t->types[c_e4r].to_float   = to_fp8_row<true>;
    t->types[c_e4r].from_float = from_fp8_row<true>;
    t->types[c_e5r].vec_dot    = vd_fp8_row<false>;
    t->types[c_e5r].to_float   = to_fp8_row<false>;
    t->types[c_e5r].from_float = from_fp8_row<false>;
}
