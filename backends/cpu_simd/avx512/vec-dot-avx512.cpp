// AVX-512 dot products and row converters: the shared x86 body (avx2/vec-dot-x86.h) compiled
// with AVX-512 BW/VL + VNNI (its int8 products become vpdpbusd), plus 512-bit kernels for the
// hottest cells: F32 / F16 / BF16, and Q8_0 / Q4_0 / Q4_K, which handle two 32-weight blocks
// per register and convert four blocks' fp16 scales at once.
#include "backends/cpu_simd/avx2/vec-dot-x86.h"

namespace {

static inline float hsum512(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

static void vd_f32_512(int64_t n, float * s, const void * vx, const void * vy) {
    const float * x  = static_cast<const float *>(vx);
    const float * y  = static_cast<const float *>(vy);
    __m512        a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t       i  = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {  // masked tail
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        a1                = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a1);
    }
    *s = hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static inline __m512 load16_f16(const ember_half * p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
static inline __m512 load16_bf16(const ember_bf16 * p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

template <typename T, __m512 (*Load)(const T *, __mmask16)>
static inline void vd_half_512(int64_t n, float * s, const void * vx, const void * vy) {
    const T *       x    = static_cast<const T *>(vx);
    const T *       y    = static_cast<const T *>(vy);
    const __mmask16 full = 0xffff;
    __m512          a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t         i  = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(Load(x + i, full), Load(y + i, full), a0);
        a1 = _mm512_fmadd_ps(Load(x + i + 16, full), Load(y + i + 16, full), a1);
        a2 = _mm512_fmadd_ps(Load(x + i + 32, full), Load(y + i + 32, full), a2);
        a3 = _mm512_fmadd_ps(Load(x + i + 48, full), Load(y + i + 48, full), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(Load(x + i, full), Load(y + i, full), a0);
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        a1                = _mm512_fmadd_ps(Load(x + i, m), Load(y + i, m), a1);
    }
    *s = hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static void vd_f16_512(int64_t n, float * s, const void * vx, const void * vy) {
    vd_half_512<ember_half, load16_f16>(n, s, vx, vy);
}
static void vd_bf16_512(int64_t n, float * s, const void * vx, const void * vy) {
    vd_half_512<ember_bf16, load16_bf16>(n, s, vx, vy);
}

// d_x * d_y of four consecutive blocks whose fp16 scale opens each block, as 4 floats. The
// halves are picked out of whole-register loads with one word permute per side (word
// inserts would cost one shuffle each). BX is 18 bytes (Q4_0: 4 blocks in 72 bytes, the
// scales within the first 64) or 34 bytes (Q8_0: within the first 128).
template <typename BX> static inline __m128i halves4(const BX * x) {
    constexpr int w = static_cast<int>(sizeof(BX) / 2);  // block stride in words
    static_assert(sizeof(BX) % 2 == 0 && 3 * w < 64, "scales4: unsupported block size");
    const __m512i idx = _mm512_setr_epi32(0 | w << 16, 2 * w | 3 * w << 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    if (3 * w < 32) return _mm512_castsi512_si128(_mm512_permutexvar_epi16(idx, _mm512_loadu_si512(x)));
    const __m512i lo = _mm512_loadu_si512(x);
    const __m512i hi = _mm512_loadu_si512(reinterpret_cast<const char *>(x) + 64);
    return _mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi));
}

template <typename BX, typename BY> static inline __m128 scales4(const BX * x, const BY * y) {
    return _mm_mul_ps(_mm_cvtph_ps(halves4(x)), _mm_cvtph_ps(halves4(y)));
}

// Scale of block 2k over lanes 0..7 and of block 2k + 1 over lanes 8..15.
static inline __m512 spread2(__m128 d4, int k) {
    const __m512i idx = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                         2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(d4));
}

static inline __m512i load2x32(const int8_t * a, const int8_t * b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b)), 1);
}

// s8 x s8 (b in [-127, 127]) products of 64 bytes, summed by 4 into 16 int32 lanes.
static inline __m512i dot64_s8s8(__m512i a, __m512i b) {
    const __mmask64 neg = _mm512_movepi8_mask(a);
    const __m512i   bs  = _mm512_mask_sub_epi8(b, neg, _mm512_setzero_si512(), b);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(a), bs);
}

static void vd_q8_0_512(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q8_0 * x  = static_cast<const ember_block_q8_0 *>(vx);
    const ember_block_q8_0 * y  = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb = n / EMBER_QK8_0;
    __m512                   a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t                  i  = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m128  d4 = scales4(x + i, y + i);
        const __m512i p0 = dot64_s8s8(load2x32(x[i].qs, x[i + 1].qs), load2x32(y[i].qs, y[i + 1].qs));
        const __m512i p1 = dot64_s8s8(load2x32(x[i + 2].qs, x[i + 3].qs), load2x32(y[i + 2].qs, y[i + 3].qs));
        a0               = _mm512_fmadd_ps(spread2(d4, 0), _mm512_cvtepi32_ps(p0), a0);
        a1               = _mm512_fmadd_ps(spread2(d4, 1), _mm512_cvtepi32_ps(p1), a1);
    }
    float sum = hsum512(_mm512_add_ps(a0, a1));
    if (i < nb) {
        float tail;
        vd_q8_0((nb - i) * EMBER_QK8_0, &tail, x + i, y + i);
        sum += tail;
    }
    *s = sum;
}

// Levels of two Q4_0 blocks as unsigned nibbles, in weight order: [a low, a high, b low, b high].
static inline __m512i q4_0_nibbles2(const uint8_t * a, const uint8_t * b) {
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a)));
    v         = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i *>(b)));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
}

// (q - 8) . y = q . y - 8 * sum(y): two vpdpbusd on unsigned q, no sign juggling.
static void vd_q4_0_512(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q4_0 * x     = static_cast<const ember_block_q4_0 *>(vx);
    const ember_block_q8_0 * y     = static_cast<const ember_block_q8_0 *>(vy);
    const int64_t            nb    = n / EMBER_QK4_0;
    const __m512i            eight = _mm512_set1_epi8(8);
    __m512                   a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t                  i  = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m128  d4  = scales4(x + i, y + i);
        const __m512i y0  = load2x32(y[i].qs, y[i + 1].qs);
        const __m512i y1  = load2x32(y[i + 2].qs, y[i + 3].qs);
        const __m512i q0  = q4_0_nibbles2(x[i].qs, x[i + 1].qs);
        const __m512i q1  = q4_0_nibbles2(x[i + 2].qs, x[i + 3].qs);
        const __m512i p0  = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, y0);
        const __m512i p1  = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, y1);
        const __m512i m0  = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, y0);
        const __m512i m1  = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, y1);
        a0                = _mm512_fmadd_ps(spread2(d4, 0), _mm512_cvtepi32_ps(_mm512_sub_epi32(p0, m0)), a0);
        a1                = _mm512_fmadd_ps(spread2(d4, 1), _mm512_cvtepi32_ps(_mm512_sub_epi32(p1, m1)), a1);
    }
    float sum = hsum512(_mm512_add_ps(a0, a1));
    if (i < nb) {
        float tail;
        vd_q4_0((nb - i) * EMBER_QK4_0, &tail, x + i, y + i);
        sum += tail;
    }
    *s = sum;
}

// Q4_K with 64 weights per register: [low nibbles of 32 bytes | high nibbles of the same 32
// bytes] is sub-blocks 2j and 2j + 1, matching 64 contiguous activations. Exact integer sums
// per super-block and the reference's float steps (k_step), as the 256-bit kernel.
static void vd_q4_k_512(int64_t n, float * s, const void * vx, const void * vy) {
    const ember_block_q4_k * x   = static_cast<const ember_block_q4_k *>(vx);
    const ember_block_q8_k * y   = static_cast<const ember_block_q8_k *>(vy);
    const int64_t            nb  = n / EMBER_QK_K;
    const __m512i            m4  = _mm512_set1_epi8(0x0f);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i ms   = _mm256_cvtepu8_epi16(k4_scales_mins(x[ib].scales));  // 8 scales, 8 mins (int16)
        const __m256i bs   = load_bsums(y[ib]);
        const __m128i q8s  = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i summ = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), q8s);
        const __m512i sc   = _mm512_zextsi256_si512(ms);
        __m512i       acc  = _mm512_setzero_si512();
        for (int j = 0; j < 4; j += 2) {  // 128 weights: sub-blocks 2j .. 2j + 3
            const __m512i b  = _mm512_loadu_si512(x[ib].qs + 32 * j);
            const __m512i lo = _mm512_and_si512(b, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
            const __m512i q0 = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));  // sub-blocks 2j, 2j + 1
            const __m512i q1 = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));  // 2j + 2, 2j + 3
            const __m512i p0 = _mm512_maddubs_epi16(q0, _mm512_loadu_si512(y[ib].qs + 64 * j));
            const __m512i p1 = _mm512_maddubs_epi16(q1, _mm512_loadu_si512(y[ib].qs + 64 * j + 64));
            // int16 scale 2j over the first 256 bits, 2j + 1 over the last; then 2j + 2, 2j + 3
            const __m512i s0 = _mm512_permutexvar_epi16(
                _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * j)), _mm256_set1_epi16(static_cast<short>(2 * j + 1)), 1), sc);
            const __m512i s1 = _mm512_permutexvar_epi16(
                _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * j + 2)), _mm256_set1_epi16(static_cast<short>(2 * j + 3)), 1), sc);
            acc = _mm512_dpwssd_epi32(acc, p0, s0);
            acc = _mm512_dpwssd_epi32(acc, p1, s1);
        }
        const int32_t isum = _mm512_reduce_add_epi32(acc);
        sum                = k_step(sum, h2f(x[ib].d) * y[ib].d, isum, h2f(x[ib].dmin) * y[ib].d, hsum_epi32_128(summ));
    }
    *s = sum;
}

}  // namespace

void ember_cpu_register_avx512_vec_dot(ember_cpu_kernel_table * t) {
    x86_register_vec_dot(t);
    auto cell = [t](ember_type ty) -> ember_cpu_type_kernels & { return t->types[ember_type_cell(ty)]; };
    cell(EMBER_TYPE_F32).vec_dot  = vd_f32_512;
    cell(EMBER_TYPE_F16).vec_dot  = vd_f16_512;
    cell(EMBER_TYPE_BF16).vec_dot = vd_bf16_512;
    cell(EMBER_TYPE_Q8_0).vec_dot = vd_q8_0_512;
    cell(EMBER_TYPE_Q4_0).vec_dot = vd_q4_0_512;
    cell(EMBER_TYPE_Q4_K).vec_dot = vd_q4_k_512;
}
