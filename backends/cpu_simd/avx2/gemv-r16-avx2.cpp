// AVX2 decode products over R16-repacked weights (layouts in ../repack.h). A 256-bit register
// holds 8 of a group's 16 row lanes, so every group is two halves (rows 0..7 at bytes 0..31
// of each 64-byte lane row, rows 8..15 at bytes 32..63), each with its own accumulator; the
// activation is broadcast 4 bytes at a time as in the AVX-512 kernels.
//
// Without vpdpbusd, u8 x s8 products go through vpmaddubsw, whose int16 pair sums SATURATE.
// Every sum below is kept exact by a bound (|x| <= 128 for Q8_K activations, <= 127 for Q8_0):
//   Q4_0 / Q4_K: levels <= 15, a pair <= 2*15*128 = 3840; 8 pairs added as int16 <= 30720.
//   Q6_K: levels <= 63, a pair <= 2*63*128 = 16128; 2 pairs added as int16 <= 32256.
//   Q8_0: the stored q + 128 (up to 255) would saturate (2*255*127 > 32767), so the +128 is
//         undone (xor 0x80) and |q| (<= 128, unsigned) meets x signed by q (|x| <= 127, as
//         the Q8_0 quantizer's d = max|x| / 127 gives): a pair <= 2*128*127 = 32512.
// The K-quant scales then multiply the int16 pair sums directly (vpmaddwd with the scale in
// both halves of the lane), which also widens them to int32: no vpmulld.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu_simd/kernels.h"
#include "quant/blocks.h"

namespace {

constexpr int R = 16;
// Block columns ahead to prefetch: the AVX-512 kernels' distances (same layouts, same streams).
constexpr int k_pf_q4_0 = 2, k_pf_q8_0 = 1, k_pf_q4_k = 1, k_pf_q6_k = 1;

// Asks for the `bytes` bytes at p (a coming block column).
static inline void prefetch(const uint8_t * p, int bytes) {
    for (int i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char *>(p + i), _MM_HINT_T0);
}

static inline __m256i load(const uint8_t * p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }

// 8 fp16 row scales.
static inline __m256 load_ph(const uint8_t * p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

static inline __m256i bcast4(const int8_t * p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Two int16 values in every 32-bit lane (a low, b high), for vpmaddwd against int16 pairs.
static inline __m256i pair16(int32_t a, int32_t b) {
    return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(b) << 16) | (static_cast<uint32_t>(a) & 0xffffu)));
}

// vpshufb patterns: byte j of each 32-bit lane into both of its int16 halves, as the low
// byte (zero-extended) or the high byte (then an arithmetic shift sign-extends it).
// 0x80 + j keeps bit 7, so the other bytes stay zero.
static inline __m256i lane_byte_lo(int j) {
    return _mm256_add_epi8(_mm256_setr_epi8(0, -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12, -128,
                                            0, -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12, -128),
                           _mm256_set1_epi8(static_cast<char>(j)));
}
static inline __m256i lane_byte_hi(int j) {
    return _mm256_add_epi8(_mm256_setr_epi8(-128, 0, -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12,
                                            -128, 0, -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12),
                           _mm256_set1_epi8(static_cast<char>(j)));
}

static void gemv_q4_0_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum * xs, float * y) {
    const int64_t            nb   = k / 32;
    const ember_block_q8_0 * xb   = static_cast<const ember_block_q8_0 *>(x);
    const __m256i            m4   = _mm256_set1_epi8(0x0f);
    const __m256i            ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp     = static_cast<const uint8_t *>(w) + g * group_stride;
        __m256          acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c = gp + b * (R * 18);
            prefetch(c + k_pf_q4_0 * (R * 18), R * 18);
            const int8_t * xq  = xb[b].qs;
            const __m256   dx  = _mm256_set1_ps(xs[b].d);
            const __m256i  off = _mm256_set1_epi32(8 * xs[b].s);
            for (int h = 0; h < 2; h++) {
                __m256i s16 = _mm256_setzero_si256();  // 8 pair sums per int16: exact (header)
                for (int i = 0; i < 4; i++) {
                    const __m256i v = load(c + 32 + 64 * i + 32 * h);
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), bcast4(xq + 4 * i)));
                    s16 = _mm256_add_epi16(
                        s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), bcast4(xq + 16 + 4 * i)));
                }
                const __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), off);
                acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(load_ph(c + 16 * h), dx), _mm256_cvtepi32_ps(is), acc[h]);
            }
        }
        _mm256_storeu_ps(y + g * R, acc[0]);
        _mm256_storeu_ps(y + g * R + 8, acc[1]);
    }
}

static void gemv_q8_0_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum * xs, float * y) {
    const int64_t            nb   = k / 32;
    const ember_block_q8_0 * xb   = static_cast<const ember_block_q8_0 *>(x);
    const __m256i            flip = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i            ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp     = static_cast<const uint8_t *>(w) + g * group_stride;
        __m256          acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c = gp + b * (R * 34);
            prefetch(c + k_pf_q8_0 * (R * 34), R * 34);
            const int8_t *  xq = xb[b].qs;
            const uint8_t * q  = c + 32;
            const __m256    dx = _mm256_set1_ps(xs[b].d);
            for (int h = 0; h < 2; h++) {
                __m256i is = _mm256_setzero_si256();
                for (int i = 0; i < 8; i++) {
                    const __m256i v = _mm256_xor_si256(load(q + 64 * i + 32 * h), flip);  // the plain int8 q
                    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(bcast4(xq + 4 * i), v));
                    is              = _mm256_add_epi32(is, _mm256_madd_epi16(p, ones));
                }
                acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(load_ph(c + 16 * h), dx), _mm256_cvtepi32_ps(is), acc[h]);
            }
        }
        _mm256_storeu_ps(y + g * R, acc[0]);
        _mm256_storeu_ps(y + g * R + 8, acc[1]);
    }
}

// Q4_K: int16 pair sums per 32-weight sub-block, times the 6-bit scale decoded for 8 rows at
// once; the mins times the activation's sub-block sums likewise.
static void gemv_q4_k_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum *, float * y) {
    const int64_t            nb  = k / 256;
    const ember_block_q8_k * xb  = static_cast<const ember_block_q8_k *>(x);
    const __m256i            m4  = _mm256_set1_epi8(0x0f);
    const __m256i            m6  = _mm256_set1_epi8(0x3f);
    const __m256i            m30 = _mm256_set1_epi8(0x30);
    const __m256i            lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i            pat[4] = {lane_byte_lo(0), lane_byte_lo(1), lane_byte_lo(2), lane_byte_lo(3)};
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp     = static_cast<const uint8_t *>(w) + g * group_stride;
        __m256          acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c = gp + b * (R * 144);
            prefetch(c + k_pf_q4_k * (R * 144), R * 144);
            const int8_t *  xq = xb[b].qs;
            const uint8_t * qs = c + 256;
            int32_t         bsb[8];  // activation sums per 32-weight sub-block (|.| <= 4096)
            for (int j = 0; j < 8; j++) bsb[j] = xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1];
            // Mins come as bytes; even bytes (sub-blocks 0, 2) and odd ones (1, 3) meet their sums.
            const __m256i be03 = pair16(bsb[0], bsb[2]), bo03 = pair16(bsb[1], bsb[3]);
            const __m256i be47 = pair16(bsb[4], bsb[6]), bo47 = pair16(bsb[5], bsb[7]);
            const __m256  dy   = _mm256_set1_ps(xb[b].d);
            for (int h = 0; h < 2; h++) {
                // Scales decoded first, so each sub-block's sums go into `is` as soon as they exist.
                const __m256i A    = load(c + 64 + 32 * h);
                const __m256i B    = load(c + 128 + 32 * h);
                const __m256i C    = load(c + 192 + 32 * h);
                const __m256i sc03 = _mm256_and_si256(A, m6);
                const __m256i mn03 = _mm256_and_si256(B, m6);
                const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(C, m4), _mm256_and_si256(_mm256_srli_epi16(A, 2), m30));
                const __m256i mn47 =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(C, 4), m4), _mm256_and_si256(_mm256_srli_epi16(B, 2), m30));
                __m256i is = _mm256_setzero_si256();
                for (int j = 0; j < 4; j++) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high)
                    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();  // 8 pair sums per int16: exact
                    for (int cc = 0; cc < 8; cc++) {
                        const __m256i v = load(qs + (8 * j + cc) * 64 + 32 * h);
                        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), bcast4(xq + 64 * j + 4 * cc)));
                        hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                                       bcast4(xq + 64 * j + 32 + 4 * cc)));
                    }
                    // sub-block s's scale is byte s % 4 of sc03 (s < 4) or sc47
                    const __m256i sl = _mm256_shuffle_epi8(j < 2 ? sc03 : sc47, pat[(2 * j) % 4]);
                    const __m256i sh = _mm256_shuffle_epi8(j < 2 ? sc03 : sc47, pat[(2 * j + 1) % 4]);
                    is = _mm256_add_epi32(is, _mm256_add_epi32(_mm256_madd_epi16(lo, sl), _mm256_madd_epi16(hi, sh)));
                }
                __m256i ms = _mm256_madd_epi16(_mm256_and_si256(mn03, lo8), be03);
                ms         = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_srli_epi16(mn03, 8), bo03));
                ms         = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_and_si256(mn47, lo8), be47));
                ms         = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_srli_epi16(mn47, 8), bo47));
                acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(load_ph(c + 16 * h), dy), _mm256_cvtepi32_ps(is), acc[h]);
                acc[h] = _mm256_fnmadd_ps(_mm256_mul_ps(load_ph(c + 32 + 16 * h), dy), _mm256_cvtepi32_ps(ms), acc[h]);
            }
        }
        _mm256_storeu_ps(y + g * R, acc[0]);
        _mm256_storeu_ps(y + g * R + 8, acc[1]);
    }
}

// Q6_K: 6-bit levels assembled from ql / qh per lane (0..63), int16 sums of two pairs times
// the int8 sub-block scale, minus 32 * sum(scale * bsum) for the levels' offset.
static void gemv_q6_k_r16(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                          const ember_cpu_q8_sum *, float * y) {
    const int64_t            nb     = k / 256;
    const ember_block_q8_k * xb     = static_cast<const ember_block_q8_k *>(x);
    const __m256i            m4     = _mm256_set1_epi8(0x0f);
    const __m256i            m30    = _mm256_set1_epi8(0x30);
    const __m256i            pat[4] = {lane_byte_hi(0), lane_byte_hi(1), lane_byte_hi(2), lane_byte_hi(3)};
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp     = static_cast<const uint8_t *>(w) + g * group_stride;
        __m256          acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * c = gp + b * (R * 210);
            prefetch(c + k_pf_q6_k * (R * 210), R * 210);
            const int8_t *  xq = xb[b].qs;
            const int16_t * bs = xb[b].bsums;
            const uint8_t * ql = c + 32 + 256;
            const uint8_t * qh = ql + 2048;
            const __m256    dy = _mm256_set1_ps(xb[b].d);
            for (int hr = 0; hr < 2; hr++) {  // rows 8 * hr ..
                __m256i sc[4];
                for (int i = 0; i < 4; i++) sc[i] = load(c + 32 + 64 * i + 32 * hr);
                // The scale of sub-block idx (weights 16 * idx ..), sign-extended into both int16 halves.
                auto scale = [&](int idx) { return _mm256_srai_epi16(_mm256_shuffle_epi8(sc[idx / 4], pat[idx % 4]), 8); };
                __m256i is = _mm256_setzero_si256();
                for (int hu = 0; hu < 4; hu++) {  // weights 128 * h .., lane columns 4u .. 4u + 3
                    const int     h      = hu / 2, u = hu % 2;  // sub-blocks 8h + 2t + u (t < 4)
                    const __m256i sct[4] = {scale(8 * h + u), scale(8 * h + 2 + u), scale(8 * h + 4 + u), scale(8 * h + 6 + u)};
                    for (int cc = 4 * u; cc < 4 * u + 4; cc += 2) {  // two lane columns: 2 pairs per int16
                        __m256i s16[4];                               // [t]: weights 128h + 32t + 4cc ..
                        for (int e = 0; e < 2; e++) {
                            const __m256i  A  = load(ql + (16 * h + cc + e) * 64 + 32 * hr);
                            const __m256i  Bq = load(ql + (16 * h + 8 + cc + e) * 64 + 32 * hr);
                            const __m256i  H  = load(qh + (8 * h + cc + e) * 64 + 32 * hr);
                            const __m256i  q1 = _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
                            const __m256i  q2 = _mm256_or_si256(_mm256_and_si256(Bq, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
                            const __m256i  q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m4), _mm256_and_si256(H, m30));
                            const __m256i  q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(Bq, 4), m4),
                                                                _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
                            const int8_t * yb = xq + 128 * h + 4 * (cc + e);
                            const __m256i  p1 = _mm256_maddubs_epi16(q1, bcast4(yb));
                            const __m256i  p2 = _mm256_maddubs_epi16(q2, bcast4(yb + 32));
                            const __m256i  p3 = _mm256_maddubs_epi16(q3, bcast4(yb + 64));
                            const __m256i  p4 = _mm256_maddubs_epi16(q4, bcast4(yb + 96));
                            if (e == 0) {
                                s16[0] = p1, s16[1] = p2, s16[2] = p3, s16[3] = p4;
                            } else {
                                s16[0] = _mm256_add_epi16(s16[0], p1), s16[1] = _mm256_add_epi16(s16[1], p2);
                                s16[2] = _mm256_add_epi16(s16[2], p3), s16[3] = _mm256_add_epi16(s16[3], p4);
                            }
                        }
                        for (int t = 0; t < 4; t++) is = _mm256_add_epi32(is, _mm256_madd_epi16(s16[t], sct[t]));
                    }
                }
                // sum over sub-blocks of scale * bsum: even bytes (sub-blocks 4i, 4i + 2), odd ones.
                __m256i corr = _mm256_setzero_si256();
                for (int i = 0; i < 4; i++) {
                    const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(sc[i], 8), 8);
                    const __m256i odd  = _mm256_srai_epi16(sc[i], 8);
                    corr = _mm256_add_epi32(corr, _mm256_madd_epi16(even, pair16(bs[4 * i], bs[4 * i + 2])));
                    corr = _mm256_add_epi32(corr, _mm256_madd_epi16(odd, pair16(bs[4 * i + 1], bs[4 * i + 3])));
                }
                is     = _mm256_sub_epi32(is, _mm256_slli_epi32(corr, 5));
                acc[hr] = _mm256_fmadd_ps(_mm256_mul_ps(load_ph(c + 16 * hr), dy), _mm256_cvtepi32_ps(is), acc[hr]);
            }
        }
        _mm256_storeu_ps(y + g * R, acc[0]);
        _mm256_storeu_ps(y + g * R + 8, acc[1]);
    }
}

}  // namespace

void ember_cpu_register_avx2_gemv_r16(ember_cpu_kernel_table * t) {
    t->types[ember_type_cell(EMBER_TYPE_Q4_0)].gemv_r16 = gemv_q4_0_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q8_0)].gemv_r16 = gemv_q8_0_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q4_K)].gemv_r16 = gemv_q4_k_r16;
    t->types[ember_type_cell(EMBER_TYPE_Q6_K)].gemv_r16 = gemv_q6_k_r16;
}
