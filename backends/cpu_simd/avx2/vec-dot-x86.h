// x86 dot products and row converters, one body for two instruction sets: included by
// avx2/vec-dot-avx2.cpp (AVX2 + FMA + F16C) and avx512/vec-dot-avx512.cpp (the same plus
// AVX-512 BW/VL + VNNI, which turns the int8 products into vpdpbusd and the Q5 bit expansion
// into one mask move). Everything here is `static`, so each including file gets its own copy
// compiled with its own flags (kernels.h: nothing with external linkage in ISA files).
//
// Arithmetic: every block's integer sum is exact, as in quant/ref; only the float
// accumulation across blocks differs (vector lanes, fused multiply-adds). The converters
// (from_float / to_float) are bit-identical to the reference, so every ISA computes the same
// activations and the same KV cache:
//   - Q8_0 / Q8_1 round half away from zero (roundf), done exactly as trunc + |rest| >= 0.5;
//   - Q8_K rounds half to even (nearest_int), its scale is the FIRST value of largest magnitude;
//   - Q4_0 computes x * id + 8.5 in two roundings: never let the compiler fuse them (see
//     no_fuse below), and its scale is also the first value of largest magnitude;
//   - F16 NaNs are re-encoded by the scalar routine (F16C keeps payload bits the reference drops).
#ifndef EMBER_CPU_X86_VEC_DOT_BODY_H
#define EMBER_CPU_X86_VEC_DOT_BODY_H

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm512_undefined_* idiom (GCC
// bug 105593, fixed in 12.3); the warning points into the header, so silence it there only.
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#endif

#include <cstdint>
#include <cstring>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#    define EMBER_X86_VNNI 1
#else
#    define EMBER_X86_VNNI 0
#endif

namespace {

//
// Helpers
//

static inline float h2f(ember_half h) { return _cvtsh_ss(h); }  // exact for every non-NaN half

// ember_float_to_half without the call: F16C rounds to nearest even exactly as it does (also
// on overflow to inf and for subnormals); only a NaN's payload differs, so NaNs take the call.
static inline ember_half f2h(float f) {
    return f == f ? static_cast<ember_half>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) : ember_float_to_half(f);
}

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s        = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s        = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum_epi32_128(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s         = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s         = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

// Sums of 4 products of u8 x s8 bytes into 8 int32 lanes. Without VNNI, pairs go through a
// saturating int16 sum: callers keep |u * s| pairs below 2^15 (u <= 127, or s small).
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if EMBER_X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The same for s8 x s8, with b in [-127, 127] (activations): |a| as u8 times b signed by a.
static inline __m256i dot_s8s8(__m256i a, __m256i b) {
    return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// acc + pairwise int16 products summed into int32 lanes.
static inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if EMBER_X86_VNNI
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// 16 bytes of nibbles -> 32 bytes: low nibbles (weights 0..15) then high nibbles (16..31).
static inline __m256i nibbles32(const uint8_t * p) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

// Bit j of the little-endian uint32 at p -> byte j: 0xff where set, 0 elsewhere.
static inline __m256i bits32_to_bytes(const uint8_t * p) {
    uint32_t x;
    std::memcpy(&x, p, sizeof(x));
#if EMBER_X86_VNNI
    return _mm256_movm_epi8(x);
#else
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i       b    = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(x)), shuf);
    b                  = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
#endif
}

// Bit `bit` (0..7) of every byte, moved to bit `to` (0..7).
static inline __m256i byte_bit(__m256i v, int bit, int to) {
    const __m256i b = _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(1 << bit)));
    return bit >= to ? _mm256_srli_epi16(b, bit - to) : _mm256_slli_epi16(b, to - bit);
}

// Byte shuffle that, applied to a register whose two 128-bit lanes both hold the same 8 int16
// values, broadcasts value i over the low lane and value i + 1 over the high lane (i even).
static inline __m256i pair_shuffle(int i) {
    const char a = static_cast<char>(2 * i), b = static_cast<char>(2 * i + 1);
    const char c = static_cast<char>(2 * i + 2), d = static_cast<char>(2 * i + 3);
    return _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b,  //
                            c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d);
}

// An optimisation barrier: the value goes through a register unchanged, so a multiply before
// it and an add after it cannot be fused into one rounding.
static inline __m256 no_fuse(__m256 v) {
    __asm__("" : "+x"(v));
    return v;
}

static inline float no_fuse(float v) {
    __asm__("" : "+x"(v));
    return v;
}

// s + (dx * isum - dm * msum), rounded step by step as quant/ref writes it (K-quant super-blocks:
// the exact integer sums make every ISA give the reference's bits).
static inline float k_step(float s, float dx, int32_t isum, float dm, int32_t msum) {
    const float a = no_fuse(dx * static_cast<float>(isum));
    const float b = no_fuse(dm * static_cast<float>(msum));
    return s + (a - b);
}
static inline float k_step(float s, float dx, int32_t isum) { return s + no_fuse(dx * static_cast<float>(isum)); }

static inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// Largest |x| over n floats (n a multiple of 8); NaNs are skipped as std::fmax skips them
// (max_ps returns its second operand when either is NaN).
static inline float absmax(const float * x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + i)), m);
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    r        = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r        = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// The first x[i] with |x[i]| == amax (amax > 0 and attained): the reference's signed maximum.
static inline float first_with_abs(const float * x, int n, float amax) {
    const __m256 a = _mm256_set1_ps(amax);
    for (int i = 0; i < n; i += 8) {
        const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + i)), a, _CMP_EQ_OQ));
        if (m) return x[i + __builtin_ctz(static_cast<unsigned>(m))];
    }
    return 0.0f;
}

// roundf (half away from zero), exactly: v - trunc(v) is exact in float.
static inline __m256 round_away(__m256 v) {
    const __m256 t    = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 rest = abs_ps(_mm256_sub_ps(v, t));
    const __m256 one  = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(rest, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

// 32 int32 (four registers, in order) -> 32 saturated int8, in order.
static inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b);
    const __m256i cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

//
// Float types
//
static void vd_f32(int64_t n, float * s, const void * vx, const void * vy) {
    const float * x = static_cast<const float *>(vx);
    const float * y = static_cast<const float *>(vy);
    __m256        a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t       i  = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16(const ember_half * p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
static inline __m256 load_bf16(const ember_bf16 * p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline float bf2f(ember_bf16 h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float          f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

static void vd_f16(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_half * x = static_cast<const ember_half *>(vx);
    const ember_half * y = static_cast<const ember_half *>(vy);
    __m256             a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t            i  = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(x + i + 8), load_f16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(x + i + 24), load_f16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += h2f(x[i]) * h2f(y[i]);
    *s = sum;
}

static void vd_bf16(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_bf16 * x = static_cast<const ember_bf16 *>(vx);
    const ember_bf16 * y = static_cast<const ember_bf16 *>(vy);
    __m256             a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t            i  = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), load_bf16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(x + i + 16), load_bf16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(x + i + 24), load_bf16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += bf2f(x[i]) * bf2f(y[i]);
    *s = sum;
}

static void to_f16(const void * vx, float * y, int64_t n) {
    const ember_half * x = static_cast<const ember_half *>(vx);
    int64_t            i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16(x + i));
    for (; i < n; i++) y[i] = ember_half_to_float(x[i]);
}

static void from_f16(const float * x, void * vy, int64_t n) {
    ember_half * y = static_cast<ember_half *>(vy);
    int64_t      i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int64_t j = i; j < i + 8; j++) y[j] = ember_float_to_half(x[j]);
        }
    }
    for (; i < n; i++) y[i] = ember_float_to_half(x[i]);
}

static void to_bf16(const void * vx, float * y, int64_t n) {
    const ember_bf16 * x = static_cast<const ember_bf16 *>(vx);
    int64_t            i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16(x + i));
    for (; i < n; i++) y[i] = bf2f(x[i]);
}

// Round to nearest even on the bits; NaNs keep their top bits with the quiet bit set.
static void from_bf16(const float * x, void * vy, int64_t n) {
    ember_bf16 * y = static_cast<ember_bf16 *>(vy);
    int64_t      i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            const __m256  v   = _mm256_loadu_ps(x + i + 8 * h);
            const __m256i b   = _mm256_castps_si256(v);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
            const __m256i rnd = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
            const __m256i qn  = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
            r[h] = _mm256_blendv_epi8(rnd, qn, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
        }
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), p);
    }
    for (; i < n; i++) y[i] = ember_float_to_bf16(x[i]);
}

//
// 32-weight blocks against Q8_0 / Q8_1
//
static void vd_q8_0(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q8_0 * x  = static_cast<const ember_block_q8_0 *>(vx);
    const ember_block_q8_0 * y  = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb = n / EMBER_QK8_0;
    __m256                   a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t                  i  = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = dot_s8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[i].qs)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        const __m256i p1 = dot_s8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[i + 1].qs)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i + 1].qs)));
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p0), a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), _mm256_cvtepi32_ps(p1), a1);
    }
    for (; i < nb; i++) {
        const __m256i p = dot_s8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[i].qs)),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), a0);
    }
    *s = hsum_ps(_mm256_add_ps(a0, a1));
}

// (q - 8) . y = q . y - 8 * sum(y) on the unsigned nibbles: no sign juggling. Without VNNI
// the two int16 pair sums (at most 2 * 15 * 127 and 2 * 8 * 127) subtract before widening.
static inline __m256i q4_0_dot(const ember_block_q4_0 & x, const ember_block_q8_0 & y) {
    const __m256i q  = nibbles32(x.qs);
    const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y.qs));
#if EMBER_X86_VNNI
    return _mm256_sub_epi32(dot_u8s8(q, yq), dot_u8s8(_mm256_set1_epi8(8), yq));
#else
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, yq), _mm256_maddubs_epi16(_mm256_set1_epi8(8), yq));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

static void vd_q4_0(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q4_0 * x  = static_cast<const ember_block_q4_0 *>(vx);
    const ember_block_q8_0 * y  = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb = n / EMBER_QK4_0;
    __m256                   a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t                  i  = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = q4_0_dot(x[i], y[i]);
        const __m256i p1 = q4_0_dot(x[i + 1], y[i + 1]);
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p0), a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), _mm256_cvtepi32_ps(p1), a1);
    }
    for (; i < nb; i++) {
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(q4_0_dot(x[i], y[i])), a0);
    }
    *s = hsum_ps(_mm256_add_ps(a0, a1));
}

static void vd_q4_1(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q4_1 * x    = static_cast<const ember_block_q4_1 *>(vx);
    const ember_block_q8_1 * y    = static_cast<const ember_block_q8_1 *>(vy);
    const int64_t            nb   = n / EMBER_QK4_1;
    __m256                   acc  = _mm256_setzero_ps();
    float                    summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i p = dot_u8s8(nibbles32(x[i].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        acc             = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

// Q5_0 levels minus 16, as int8: the low nibble, minus 16 where bit 4 is clear.
static inline __m256i q5_0_levels(const ember_block_q5_0 & x) {
    const __m256i hi = _mm256_andnot_si256(bits32_to_bytes(x.qh), _mm256_set1_epi8(static_cast<char>(0xf0)));
    return _mm256_or_si256(nibbles32(x.qs), hi);
}

static void vd_q5_0(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q5_0 * x   = static_cast<const ember_block_q5_0 *>(vx);
    const ember_block_q8_0 * y   = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb  = n / EMBER_QK5_0;
    __m256                   acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i p = dot_s8s8(q5_0_levels(x[i]), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        acc             = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

static void vd_q5_1(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q5_1 * x    = static_cast<const ember_block_q5_1 *>(vx);
    const ember_block_q8_1 * y    = static_cast<const ember_block_q8_1 *>(vy);
    const int64_t            nb   = n / EMBER_QK5_1;
    __m256                   acc  = _mm256_setzero_ps();
    float                    summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i hi = _mm256_and_si256(bits32_to_bytes(x[i].qh), _mm256_set1_epi8(0x10));
        const __m256i q  = _mm256_or_si256(nibbles32(x[i].qs), hi);
        const __m256i p  = dot_u8s8(q, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        acc              = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

static inline __m256i iq4nl_table() {
    static const int8_t kv[16] = EMBER_IQ4NL_VALUES;
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kv)));
}

static void vd_iq4_nl(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_iq4_nl * x   = static_cast<const ember_block_iq4_nl *>(vx);
    const ember_block_q8_0 *   y   = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t              nb  = n / EMBER_QK4_NL;
    const __m256i              tab = iq4nl_table();
    __m256                     acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i v = _mm256_shuffle_epi8(tab, nibbles32(x[i].qs));
        const __m256i p = dot_s8s8(v, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[i].qs)));
        acc             = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[i].d) * h2f(x[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

//
// K-quants and IQ4_XS against Q8_K. Per super-block the integer sums are exact; the 16-weight
// sub-block types multiply pairs of int16 partial sums by their scale with madd, so each
// register of 32 weights covers two sub-blocks: the low lane one, the high lane the next.
//
static inline __m256i load_q8(const int8_t * p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }

// 16 int16 bsums of a Q8_K block.
static inline __m256i load_bsums(const ember_block_q8_k & y) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y.bsums));
}

// sum over 128 weights (4 registers of 32 levels q, unsigned, pair sums below 2^15 with s8)
// of scale(sub-block) * q * y. sc16: 16 int16 scales (one per 16 weights) of the whole
// super-block; `half` picks which 8 of them these 128 weights use.
static inline __m256i dot128_sub16(const __m256i * q, const int8_t * y, __m256i sc16, int half, __m256i acc) {
    const __m256i sch = half == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    for (int k = 0; k < 4; k++) {
        const __m256i p16 = _mm256_maddubs_epi16(q[k], load_q8(y + 32 * k));
        acc               = madd_acc(acc, p16, _mm256_shuffle_epi8(sch, pair_shuffle(2 * k)));
    }
    return acc;
}

static void vd_q2_k(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q2_k * x   = static_cast<const ember_block_q2_k *>(vx);
    const ember_block_q8_k * y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb  = n / EMBER_QK_K;
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m128i sc8  = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x[ib].scales));
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
        const __m256i m16  = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
        const __m256i summ = _mm256_madd_epi16(m16, load_bsums(y[ib]));
        __m256i       sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[ib].qs + 32 * h));
            __m256i       q[4];
            for (int k = 0; k < 4; k++) q[k] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), _mm256_set1_epi8(3));
            sumi = dot128_sub16(q, y[ib].qs + 128 * h, sc16, h, sumi);
        }
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi), h2f(x[ib].dmin) * y[ib].d, hsum_epi32(summ));
    }
    *s = sum;
}

// Q3_K's 16 scales minus 32 (signed bytes), in sub-block order.
static inline __m128i q3k_scales(const uint8_t * scales) {
    uint32_t aux[3];
    std::memcpy(aux, scales, 12);
    const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const uint32_t u0 = (aux[0] & m4) | ((aux[2] & m2) << 4);
    const uint32_t u1 = (aux[1] & m4) | (((aux[2] >> 2) & m2) << 4);
    const uint32_t u2 = ((aux[0] >> 4) & m4) | (((aux[2] >> 4) & m2) << 4);
    const uint32_t u3 = ((aux[1] >> 4) & m4) | (((aux[2] >> 6) & m2) << 4);
    return _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(u0), static_cast<int>(u1), static_cast<int>(u2), static_cast<int>(u3)),
                        _mm_set1_epi8(32));
}

// sum_j (s_j - 32) * sum_i (q_i - 4) y_i = sum_j (s_j - 32) (sum_i q_i y_i - 4 bsums_j), q in 0..7.
static void vd_q3_k(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q3_k * x   = static_cast<const ember_block_q3_k *>(vx);
    const ember_block_q8_k * y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb  = n / EMBER_QK_K;
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i sc16  = _mm256_cvtepi8_epi16(q3k_scales(x[ib].scales));
        const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[ib].hmask));
        __m256i       sumi  = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_bsums(y[ib])), 2);
        sumi                = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[ib].qs + 32 * h));
            __m256i       q[4];
            for (int k = 0; k < 4; k++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), _mm256_set1_epi8(3));
                q[k]             = _mm256_or_si256(lo, byte_bit(hmask, 4 * h + k, 2));
            }
            sumi = dot128_sub16(q, y[ib].qs + 128 * h, sc16, h, sumi);
        }
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi));
    }
    *s = sum;
}

// Q4_K / Q5_K: the 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a super-block.
static inline __m128i k4_scales_mins(const uint8_t * scales) {
    uint32_t u[4];
    std::memcpy(u, scales, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3]              = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mn = u[1] & m1;
    u[1]              = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2]              = mn;
    u[0] &= m1;
    return _mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]), static_cast<int>(u[3]));
}

// sum over one super-block of sc_j * q * y for Q4_K / Q5_K levels given 64 at a time by
// `levels(j, lo, hi)` (sub-blocks 2j and 2j + 1), plus the mins' sum m_j * bsums.
template <typename Levels>
static inline void k4_superblock(const uint8_t * scales, const ember_block_q8_k & y, Levels levels, __m256i & sumi,
                                 __m128i & summ) {
    const __m256i ms   = _mm256_cvtepu8_epi16(k4_scales_mins(scales));
    const __m256i bs   = load_bsums(y);
    const __m128i q8s  = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    summ               = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), q8s);
    const __m128i sc   = _mm256_castsi256_si128(ms);
    const __m256i sc2  = _mm256_set_m128i(sc, sc);
    __m256i       acc  = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        levels(j, lo, hi);
        const __m256i p0 = _mm256_maddubs_epi16(lo, load_q8(y.qs + 64 * j));
        const __m256i p1 = _mm256_maddubs_epi16(hi, load_q8(y.qs + 64 * j + 32));
        // broadcast scale 2j over both lanes, then 2j + 1
        const __m256i s0 = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16(static_cast<short>((4 * j) | (4 * j + 1) << 8)));
        const __m256i s1 = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16(static_cast<short>((4 * j + 2) | (4 * j + 3) << 8)));
        acc              = madd_acc(acc, p0, s0);
        acc              = madd_acc(acc, p1, s1);
    }
    sumi = acc;
}

static void vd_q4_k(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q4_k * x   = static_cast<const ember_block_q4_k *>(vx);
    const ember_block_q8_k * y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb  = n / EMBER_QK_K;
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t * qs = x[ib].qs;
        __m256i         sumi;
        __m128i         summ;
        k4_superblock(x[ib].scales, y[ib],
                      [qs](int j, __m256i & lo, __m256i & hi) {
                          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * j));
                          lo              = _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
                          hi              = _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0f));
                      },
                      sumi, summ);
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi), h2f(x[ib].dmin) * y[ib].d, hsum_epi32_128(summ));
    }
    *s = sum;
}

static void vd_q5_k(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q5_k * x    = static_cast<const ember_block_q5_k *>(vx);
    const ember_block_q8_k * y    = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb   = n / EMBER_QK_K;
    float                    sum  = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t * qs = x[ib].qs;
        const __m256i   qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[ib].qh));
        __m256i         sumi;
        __m128i         summ;
        k4_superblock(x[ib].scales, y[ib],
                      [qs, qh](int j, __m256i & lo, __m256i & hi) {
                          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * j));
                          lo = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi8(0x0f)), byte_bit(qh, 2 * j, 4));
                          hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0f)),
                                               byte_bit(qh, 2 * j + 1, 4));
                      },
                      sumi, summ);
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi), h2f(x[ib].dmin) * y[ib].d, hsum_epi32_128(summ));
    }
    *s = sum;
}

// sum_j sc_j (sum_i q_i y_i - 32 bsums_j), q in 0..63 unsigned.
static void vd_q6_k(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q6_k * x   = static_cast<const ember_block_q6_k *>(vx);
    const ember_block_q8_k * y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb  = n / EMBER_QK_K;
    const __m256i            m4  = _mm256_set1_epi8(0x0f);
    const __m256i            m3  = _mm256_set1_epi8(0x30);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x[ib].scales)));
        __m256i       sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_bsums(y[ib])), 5));
        for (int h = 0; h < 2; h++) {
            const uint8_t * ql = x[ib].ql + 64 * h;
            const __m256i   a  = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
            const __m256i   b  = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
            const __m256i   hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[ib].qh + 32 * h));
            __m256i         q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m3));
            q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m3));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(hb, m3));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m3));
            sumi = dot128_sub16(q, y[ib].qs + 128 * h, sc16, h, sumi);
        }
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi));
    }
    *s = sum;
}

static void vd_iq4_xs(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_iq4_xs * x   = static_cast<const ember_block_iq4_xs *>(vx);
    const ember_block_q8_k *   y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t              nb  = n / EMBER_QK_K;
    const __m256i              tab = iq4nl_table();
    float                      sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const int ls = ((x[ib].scales_l[j / 2] >> (4 * (j % 2))) & 0xf) | ((x[ib].scales_h >> (2 * j)) & 3) << 4;
            const __m256i v   = _mm256_shuffle_epi8(tab, nibbles32(x[ib].qs + 16 * j));
            const __m256i yq  = load_q8(y[ib].qs + 32 * j);
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yq, v));
            sumi              = madd_acc(sumi, p16, _mm256_set1_epi16(static_cast<short>(ls - 32)));
        }
        sum = k_step(sum, h2f(x[ib].d) * y[ib].d, hsum_epi32(sumi));
    }
    *s = sum;
}

//
// Quantizers and dequantizers of the 32-weight types (bit-identical to quant/ref)
//

// 32 floats -> 4 registers of int32: roundf(x * id).
static inline void q8_levels(const float * x, float id, __m256i * q) {
    const __m256 vid = _mm256_set1_ps(id);
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid)));
}

static void from_q8_0(const float * x, void * vy, int64_t n) {
    ember_block_q8_0 * y = static_cast<ember_block_q8_0 *>(vy);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const float * xb = x + i * EMBER_QK8_0;
        const float   d  = absmax(xb, EMBER_QK8_0) / 127.0f;
        const float   id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d           = f2h(d);
        __m256i q[4];
        q8_levels(xb, id, q);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[i].qs), pack_i8(q[0], q[1], q[2], q[3]));
    }
}

static void from_q8_1(const float * x, void * vy, int64_t n) {
    ember_block_q8_1 * y = static_cast<ember_block_q8_1 *>(vy);
    for (int64_t i = 0; i < n / EMBER_QK8_1; i++) {
        const float * xb = x + i * EMBER_QK8_1;
        const float   d  = absmax(xb, EMBER_QK8_1) / 127.0f;
        const float   id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d           = f2h(d);
        __m256i q[4];
        q8_levels(xb, id, q);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[i].qs), pack_i8(q[0], q[1], q[2], q[3]));
        const int sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        y[i].s        = f2h(static_cast<float>(sum) * d);
    }
}

static void to_q8_0(const void * vx, float * y, int64_t n) {
    const ember_block_q8_0 * x = static_cast<const ember_block_q8_0 *>(vx);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d));
        for (int k = 0; k < 4; k++) {
            const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(x[i].qs + 8 * k));
            _mm256_storeu_ps(y + i * EMBER_QK8_0 + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
        }
    }
}

// d = (first value of largest magnitude) / -8, q = min(15, trunc(x * id + 8.5)).
static void from_q4_0(const float * x, void * vy, int64_t n) {
    ember_block_q4_0 * y = static_cast<ember_block_q4_0 *>(vy);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const float * xb   = x + i * EMBER_QK4_0;
        const float   amax = absmax(xb, EMBER_QK4_0);
        const float   max  = amax > 0.0f ? first_with_abs(xb, EMBER_QK4_0, amax) : 0.0f;
        const float   d    = max / -8.0f;
        const float   id   = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d             = f2h(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i      q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_add_ps(no_fuse(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), vid)), _mm256_set1_ps(8.5f));
            q[k]           = _mm256_cvttps_epi32(_mm256_min_ps(v, _mm256_set1_ps(15.0f)));
        }
        const __m256i b  = pack_i8(q[0], q[1], q[2], q[3]);  // levels 0..31 in order, each 0..15
        const __m128i lo = _mm256_castsi256_si128(b);
        const __m128i hi = _mm256_extracti128_si256(b, 1);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(y[i].qs), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
    }
}

static void to_q4_0(const void * vx, float * y, int64_t n) {
    const ember_block_q4_0 * x = static_cast<const ember_block_q4_0 *>(vx);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const __m256  d = _mm256_set1_ps(h2f(x[i].d));
        const __m256i q = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        float *       o  = y + i * EMBER_QK4_0;
        _mm256_storeu_ps(o, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(o + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(o + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}

// Q8_K: the first value of largest magnitude maps to -127; q = min(127, nearest_int(x * iscale))
// (ties to even), d = 1 / iscale, bsums per 16.
static void from_q8_k(const float * x, void * vy, int64_t n) {
    ember_block_q8_k * y = static_cast<ember_block_q8_k *>(vy);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      xb   = x + ib * EMBER_QK_K;
        ember_block_q8_k & b    = y[ib];
        const float        amax = absmax(xb, EMBER_QK_K);
        if (amax == 0.0f) {
            std::memset(&b, 0, sizeof(b));
            continue;
        }
        const float  iscale = -127.0f / first_with_abs(xb, EMBER_QK_K, amax);
        const __m256 vis    = _mm256_set1_ps(iscale);
        __m256i      sums[16];
        for (int g = 0; g < 8; g++) {  // 32 weights per step
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 32 * g + 8 * k), vis);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                        _mm256_set1_epi32(127));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(b.qs + 32 * g), pack_i8(q[0], q[1], q[2], q[3]));
            sums[2 * g]     = _mm256_add_epi32(q[0], q[1]);
            sums[2 * g + 1] = _mm256_add_epi32(q[2], q[3]);
        }
        for (int g = 0; g < 16; g += 4) {  // four group sums at a time
            const __m256i t01 = _mm256_hadd_epi32(sums[g], sums[g + 1]);
            const __m256i t23 = _mm256_hadd_epi32(sums[g + 2], sums[g + 3]);
            const __m256i u   = _mm256_hadd_epi32(t01, t23);
            const __m128i r   = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
            _mm_storel_epi64(reinterpret_cast<__m128i *>(b.bsums + g), _mm_packs_epi32(r, r));
        }
        b.d = 1.0f / iscale;
    }
}

// Registers everything above into t.
static void x86_register_vec_dot(ember_cpu_kernel_table * t) {
    auto cell = [t](ember_type ty) -> ember_cpu_type_kernels & { return t->types[ember_type_cell(ty)]; };
    cell(EMBER_TYPE_F32).vec_dot    = vd_f32;
    cell(EMBER_TYPE_F16).vec_dot    = vd_f16;
    cell(EMBER_TYPE_F16).to_float   = to_f16;
    cell(EMBER_TYPE_F16).from_float = from_f16;
    cell(EMBER_TYPE_BF16).vec_dot    = vd_bf16;
    cell(EMBER_TYPE_BF16).to_float   = to_bf16;
    cell(EMBER_TYPE_BF16).from_float = from_bf16;
    cell(EMBER_TYPE_Q4_0).vec_dot    = vd_q4_0;
    cell(EMBER_TYPE_Q4_0).to_float   = to_q4_0;
    cell(EMBER_TYPE_Q4_0).from_float = from_q4_0;
    cell(EMBER_TYPE_Q4_1).vec_dot    = vd_q4_1;
    cell(EMBER_TYPE_Q5_0).vec_dot    = vd_q5_0;
    cell(EMBER_TYPE_Q5_1).vec_dot    = vd_q5_1;
    cell(EMBER_TYPE_Q8_0).vec_dot    = vd_q8_0;
    cell(EMBER_TYPE_Q8_0).to_float   = to_q8_0;
    cell(EMBER_TYPE_Q8_0).from_float = from_q8_0;
    cell(EMBER_TYPE_Q8_1).from_float = from_q8_1;
    cell(EMBER_TYPE_Q2_K).vec_dot    = vd_q2_k;
    cell(EMBER_TYPE_Q3_K).vec_dot    = vd_q3_k;
    cell(EMBER_TYPE_Q4_K).vec_dot    = vd_q4_k;
    cell(EMBER_TYPE_Q5_K).vec_dot    = vd_q5_k;
    cell(EMBER_TYPE_Q6_K).vec_dot    = vd_q6_k;
    cell(EMBER_TYPE_Q8_K).from_float = from_q8_k;
    cell(EMBER_TYPE_IQ4_NL).vec_dot  = vd_iq4_nl;
    cell(EMBER_TYPE_IQ4_XS).vec_dot  = vd_iq4_xs;
}

}  // namespace

#endif  // EMBER_CPU_X86_VEC_DOT_BODY_H
