// AVX2 kernels of Ember's own weight types (docs/quant-types.md): INT4 / INT4_G32 against Q8_1,
// NF4 against Q8_0, the FP8 types against F32, and the FP8 converters. The AVX-512 table starts
// from these and overwrites them with avx512/ember-types-avx512.cpp.
//
// Arithmetic, against the scalar reference (quant/ref/ref-int4.cpp, ref-nf4.cpp, ref-fp8.cpp):
//   - INT4: per 32-run, d * d8 * (sum q q8 - z * sum q8), the integer sums exact (sum q8 from
//     the integers, as the reference does, not from Q8_1's s); lanes keep partial sums of 4
//     products, and sumi - z * sumy is one fused multiply-add per lane (exact: every term
//     fits 24 bits).
//   - NF4: codebook lookups with two vpermps (8 entries each) and a blend on bit 3, times the
//     int8 activations converted to float; the block scale DYN[absmax_q] * scale2 + offset
//     rounds twice, as written.
//   - FP8: exact decoding by bit moves into fp16 and vcvtph2ps (see fp8_decode16), so only the
//     float summation order differs; to_float and from_float are bit-identical to the reference.
#include <immintrin.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"
#include "quant/ref/ref.h"  // the NF4 tables, copied at registration

namespace {

// Filled once by the registration function (called from kernels.cpp's thread-safe init).
alignas(32) float g_nf4[16];  // NF4 codebook
float             g_dyn[256];   // NF4 second-level map
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

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s        = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s        = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s        = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s        = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// a * b + c with two roundings (the reference's NF4 block scale): the empty asm keeps the
// compiler from fusing them.
static inline float mul_add_unfused(float a, float b, float c) {
    float p = a * b;
    __asm__("" : "+x"(p));
    return p + c;
}

//
// INT4 / INT4_G32: one 32-run per step. Returns the 8 lanes of d * d8 * (sumi - z * sumy).
//
static inline __m256 int4_run(const uint8_t * qs, const ember_block_q8_1 & yb, float d, __m256 z, __m256 acc) {
    const __m256i m4    = _mm256_set1_epi8(0x0F);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones  = _mm256_set1_epi16(1);
    const __m128i q     = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
    const __m256i w     = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
    const __m256i yv    = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(yb.qs));
    // maddubs: 15 * 127 * 2 and 127 * 2 fit int16 with no saturation
    const __m256 si = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(w, yv), ones));
    const __m256 sy = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, yv), ones));
    return _mm256_fmadd_ps(_mm256_set1_ps(d * h2f(yb.d)), _mm256_fnmadd_ps(z, sy, si), acc);
}

static void vd_int4(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_int4 * x    = static_cast<const ember_block_int4 *>(vx);
    const ember_block_q8_1 * y    = static_cast<const ember_block_q8_1 *>(vy);
    __m256                   acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 128; i++) {
        const float  d = h2f(x[i].d);
        const __m256 z = _mm256_set1_ps(h2f(x[i].z));
        acc0           = int4_run(x[i].qs, y[4 * i], d, z, acc0);
        acc1           = int4_run(x[i].qs + 16, y[4 * i + 1], d, z, acc1);
        acc0           = int4_run(x[i].qs + 32, y[4 * i + 2], d, z, acc0);
        acc1           = int4_run(x[i].qs + 48, y[4 * i + 3], d, z, acc1);
    }
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

static void vd_int4_g32(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_int4_g32 * x    = static_cast<const ember_block_int4_g32 *>(vx);
    const ember_block_q8_1 *     y    = static_cast<const ember_block_q8_1 *>(vy);
    const int64_t                nb   = n / 32;
    __m256                       acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t                      i    = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = int4_run(x[i].qs, y[i], h2f(x[i].d), _mm256_set1_ps(h2f(x[i].z)), acc0);
        acc1 = int4_run(x[i + 1].qs, y[i + 1], h2f(x[i + 1].d), _mm256_set1_ps(h2f(x[i + 1].z)), acc1);
    }
    if (i < nb) acc0 = int4_run(x[i].qs, y[i], h2f(x[i].d), _mm256_set1_ps(h2f(x[i].z)), acc0);
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

//
// NF4: codebook halves t0 = NF4[0..7], t1 = NF4[8..15]; vpermps reads the low 3 bits of an
// index, blendv picks the half by bit 3 (moved to the sign bit).
//
static inline __m256 nf4_lookup(__m256 t0, __m256 t1, __m256i idx, __m256i bit3_at_sign) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, idx), _mm256_permutevar8x32_ps(t1, idx),
                            _mm256_castsi256_ps(bit3_at_sign));
}

static inline __m256 i8x8_to_ps(const int8_t * p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}

static void vd_nf4(int64_t n, float * s, const void * vx, const void * vy) {
    const uint8_t *          p    = static_cast<const uint8_t *>(vx);
    const ember_block_q8_0 * q8   = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb   = n / 64;
    const __m256             t0   = _mm256_load_ps(g_nf4);
    const __m256             t1   = _mm256_load_ps(g_nf4 + 8);
    __m256                   acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += EMBER_REF_GROUP_BLOCKS_NF4) {
        const int64_t           gb     = nb - g0 < EMBER_REF_GROUP_BLOCKS_NF4 ? nb - g0 : EMBER_REF_GROUP_BLOCKS_NF4;
        const float             scale2 = ld_f32(p);
        const float             offset = ld_f32(p + 4);
        const ember_block_nf4 * b      = reinterpret_cast<const ember_block_nf4 *>(p + EMBER_REF_GROUP_HEADER_NF4);
        for (int64_t j = 0; j < gb; j++) {
            const ember_block_q8_0 & ya = q8[2 * (g0 + j)];
            const ember_block_q8_0 & yb = q8[2 * (g0 + j) + 1];
            __m256                   sa = _mm256_setzero_ps(), sb = _mm256_setzero_ps();
            for (int k = 0; k < 32; k += 8) {
                const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(b[j].qs + k)));
                const __m256  wl  = nf4_lookup(t0, t1, idx, _mm256_slli_epi32(idx, 28));
                const __m256  wh  = nf4_lookup(t0, t1, _mm256_srli_epi32(idx, 4), _mm256_slli_epi32(idx, 24));
                sa                = _mm256_fmadd_ps(wl, i8x8_to_ps(ya.qs + k), sa);
                sb                = _mm256_fmadd_ps(wh, i8x8_to_ps(yb.qs + k), sb);
            }
            const float ab = mul_add_unfused(g_dyn[b[j].absmax_q], scale2, offset);
            acc0           = _mm256_fmadd_ps(sa, _mm256_set1_ps(ab * h2f(ya.d)), acc0);
            acc1           = _mm256_fmadd_ps(sb, _mm256_set1_ps(ab * h2f(yb.d)), acc1);
        }
        p += EMBER_REF_GROUP_HEADER_NF4 + static_cast<size_t>(gb) * sizeof(ember_block_nf4);
    }
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

//
// FP8
//

// 16 codes -> 16 floats. E5M2: the code is the upper byte of an fp16. E4M3: the code shifted
// into an fp16's exponent and mantissa reads as 2^-8 times its value (subnormals too); the
// callers multiply by 256 (exact). S.1111.111 (NaN) lands on fp16 0x3f80 (0xbf80) and gets
// the exponent bit 0x4000 that makes it an fp16 NaN: h + 0x80 reaches 0x4000 only there.
template <bool E4M3>
static inline void fp8_decode16(const uint8_t * q, __m256 & f0, __m256 & f1) {
    const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q)));
    __m256i       h;
    if (E4M3) {
        h = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
        h = _mm256_or_si256(h, _mm256_and_si256(_mm256_add_epi16(h, _mm256_set1_epi16(0x80)), _mm256_set1_epi16(0x4000)));
    } else {
        h = _mm256_slli_epi16(v, 8);
    }
    f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Sum of 32 codes times 32 floats, in 8 lanes (2^-8 too small for E4M3).
template <bool E4M3>
static inline __m256 fp8_dot32(const uint8_t * q, const float * y) {
    __m256 f0, f1, f2, f3;
    fp8_decode16<E4M3>(q, f0, f1);
    fp8_decode16<E4M3>(q + 16, f2, f3);
    const __m256 a = _mm256_fmadd_ps(f1, _mm256_loadu_ps(y + 8), _mm256_mul_ps(f0, _mm256_loadu_ps(y)));
    const __m256 b = _mm256_fmadd_ps(f3, _mm256_loadu_ps(y + 24), _mm256_mul_ps(f2, _mm256_loadu_ps(y + 16)));
    return _mm256_add_ps(a, b);
}

template <bool E4M3>
static void vd_fp8(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_fp8 * b    = static_cast<const ember_block_fp8 *>(vx);
    const float *           y    = static_cast<const float *>(vy);
    __m256                  acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t           nb   = n / 32;
    int64_t                 i    = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256 s0 = fp8_dot32<E4M3>(b[i].qs, y + 32 * i);
        __m256 s1 = fp8_dot32<E4M3>(b[i + 1].qs, y + 32 * i + 32);
        if (E4M3) {
            s0 = _mm256_mul_ps(s0, _mm256_set1_ps(256.0f));
            s1 = _mm256_mul_ps(s1, _mm256_set1_ps(256.0f));
        }
        acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(g_e8m0[b[i].e]), acc0);
        acc1 = _mm256_fmadd_ps(s1, _mm256_set1_ps(g_e8m0[b[i + 1].e]), acc1);
    }
    if (i < nb) {
        __m256 s0 = fp8_dot32<E4M3>(b[i].qs, y + 32 * i);
        if (E4M3) s0 = _mm256_mul_ps(s0, _mm256_set1_ps(256.0f));
        acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(g_e8m0[b[i].e]), acc0);
    }
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

template <bool E4M3>
static void vd_fp8_row(int64_t n, float * s, const void * vx, const void * vy) {
    const uint8_t * p     = static_cast<const uint8_t *>(vx);
    const float *   y     = static_cast<const float *>(vy);
    const float     scale = ld_f32(p);
    __m256          acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t         i    = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm256_add_ps(acc0, fp8_dot32<E4M3>(p + 4 + i, y + i));
        acc1 = _mm256_add_ps(acc1, fp8_dot32<E4M3>(p + 4 + i + 32, y + i + 32));
    }
    if (i < n) acc0 = _mm256_add_ps(acc0, fp8_dot32<E4M3>(p + 4 + i, y + i));  // n is a multiple of 32
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    if (E4M3) sum *= 256.0f;
    *s = sum * scale;
}

// to_float: FP8(code) * scale, one rounding as in the reference (E4M3's * 256 is exact).
template <bool E4M3>
static inline void fp8_store16(const uint8_t * q, __m256 sc, float * dst) {
    __m256 f0, f1;
    fp8_decode16<E4M3>(q, f0, f1);
    if (E4M3) {
        f0 = _mm256_mul_ps(f0, _mm256_set1_ps(256.0f));
        f1 = _mm256_mul_ps(f1, _mm256_set1_ps(256.0f));
    }
    _mm256_storeu_ps(dst, _mm256_mul_ps(f0, sc));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(f1, sc));
}

template <bool E4M3>
static void to_fp8(const void * src, float * dst, int64_t n) {
    const ember_block_fp8 * b = static_cast<const ember_block_fp8 *>(src);
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 sc = _mm256_set1_ps(g_e8m0[b[i].e]);
        fp8_store16<E4M3>(b[i].qs, sc, dst + 32 * i);
        fp8_store16<E4M3>(b[i].qs + 16, sc, dst + 32 * i + 16);
    }
}

template <bool E4M3>
static void to_fp8_row(const void * src, float * dst, int64_t n) {
    const uint8_t * p  = static_cast<const uint8_t *>(src);
    const __m256    sc = _mm256_set1_ps(ld_f32(p));
    for (int64_t i = 0; i < n; i += 16) fp8_store16<E4M3>(p + 4 + i, sc, dst + i);
}

// The OCP formats, as quant/ref/ref-fp8.cpp's fp8_format.
template <bool E4M3>
struct fmt {
    static constexpr int   mbits    = E4M3 ? 3 : 2;
    static constexpr int   bias     = E4M3 ? 7 : 15;
    static constexpr int   emin     = 1 - bias;
    static constexpr float max      = E4M3 ? 448.0f : 57344.0f;
    static constexpr int   max_exp2 = E4M3 ? 9 : 16;  // frexp(max): max = 0.875 * 2^max_exp2
    static constexpr int   max_code = E4M3 ? 0x7e : 0x7b;
    static constexpr int   nan_code = 0x7f;
};

// Nearest code of 8 floats (int32 lanes), ties to even, saturating (the reference's encode):
// with E the binade of |v| (at least the smallest normal one), q = rne(|v| * 2^(mbits - E)) is
// exact to compute, and the code is ((E + bias) << mbits) + q - 2^mbits, a mantissa carry
// moving into the exponent by itself.
template <bool E4M3>
static inline __m256i fp8_encode8(__m256 v) {
    using F             = fmt<E4M3>;
    const __m256i bits  = _mm256_castps_si256(v);
    const __m256i sign  = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
    const __m256i abits = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256  a     = _mm256_castsi256_ps(abits);
    const __m256i E     = _mm256_max_epi32(_mm256_sub_epi32(_mm256_srli_epi32(abits, 23), _mm256_set1_epi32(127)),
                                           _mm256_set1_epi32(F::emin));
    const __m256  mul   = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127 + F::mbits), E), 23));
    const __m256  r     = _mm256_round_ps(_mm256_mul_ps(a, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i       code  = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(E, F::mbits), _mm256_cvttps_epi32(r)),
                                           _mm256_set1_epi32((F::bias << F::mbits) - (1 << F::mbits)));
    code                = _mm256_min_epi32(code, _mm256_set1_epi32(F::max_code));
    const __m256 big    = _mm256_cmp_ps(a, _mm256_set1_ps(F::max), _CMP_GE_OQ);  // inf too
    const __m256 nan    = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(F::max_code), _mm256_castps_si256(big));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(F::nan_code), _mm256_castps_si256(nan));
    return _mm256_or_si256(code, sign);
}

// 32 codes (int32 lanes 0..255, in four vectors) -> 32 bytes in order.
static inline void store_codes32(uint8_t * dst, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    const __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    // packs work per 128-bit lane: dwords come out as c0lo c1lo c2lo c3lo | c0hi c1hi c2hi c3hi
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// Largest |x| over the finite values (zero if none).
static inline __m256 finite_abs_max(__m256 m, __m256 x) {
    const __m256 a  = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const __m256 ok = _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ);
    return _mm256_max_ps(m, _mm256_and_ps(a, ok));
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
        const float * x = src + 32 * i;
        __m256        x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8), x2 = _mm256_loadu_ps(x + 16),
               x3 = _mm256_loadu_ps(x + 24);
        const __m256  m  = finite_abs_max(finite_abs_max(finite_abs_max(finite_abs_max(_mm256_setzero_ps(), x0), x1), x2), x3);
        const uint8_t e  = block_exponent<E4M3>(hmax(m));
        const __m256  sc = _mm256_set1_ps(pow2f(127 - e));  // exact scaling, as ldexp
        b[i].e           = e;
        store_codes32(b[i].qs, fp8_encode8<E4M3>(_mm256_mul_ps(x0, sc)), fp8_encode8<E4M3>(_mm256_mul_ps(x1, sc)),
                      fp8_encode8<E4M3>(_mm256_mul_ps(x2, sc)), fp8_encode8<E4M3>(_mm256_mul_ps(x3, sc)));
    }
}

// Per-row: scale = amax / max (FLT_MIN at least, 1 for an all-zero row), codes of x / scale.
template <bool E4M3>
static void from_fp8_row(const float * src, void * dst, int64_t n) {
    uint8_t * p = static_cast<uint8_t *>(dst);
    __m256    m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) m = finite_abs_max(m, _mm256_loadu_ps(src + i));
    const float amax  = hmax(m);
    float       scale = amax > 0.0f ? amax / fmt<E4M3>::max : 1.0f;
    if (scale < FLT_MIN) scale = FLT_MIN;
    std::memcpy(p, &scale, 4);
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 32) {
        store_codes32(p + 4 + i, fp8_encode8<E4M3>(_mm256_div_ps(_mm256_loadu_ps(src + i), sc)),
                      fp8_encode8<E4M3>(_mm256_div_ps(_mm256_loadu_ps(src + i + 8), sc)),
                      fp8_encode8<E4M3>(_mm256_div_ps(_mm256_loadu_ps(src + i + 16), sc)),
                      fp8_encode8<E4M3>(_mm256_div_ps(_mm256_loadu_ps(src + i + 24), sc)));
    }
}

static void init_tables() {
    for (int i = 0; i < 16; i++) g_nf4[i] = ember_ref_nf4_value(i);
    for (int i = 0; i < 256; i++) g_dyn[i] = ember_ref_nf4_dynamic_value(i);
    for (int e = 0; e < 255; e++) g_e8m0[e] = pow2f(e - 127);
    g_e8m0[255] = __builtin_nanf("");
}

}  // namespace

void ember_cpu_register_avx2_ember_types(ember_cpu_kernel_table * t) {
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
