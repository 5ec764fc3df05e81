// AVX-512 (F/BW/VL/DQ + VNNI) prefill GEMM tiles (the `gemm` cells of kernels.h).
//
// Integer types: 16 weight rows at a time are unpacked to unsigned byte levels (see
// gemm-unpack.h) and interleaved 4 bytes per row, so one zmm holds 4 consecutive levels of
// each of the 16 rows. A 4-byte group of an activation column is broadcast and one vpdpbusd
// adds its dot product with all 16 rows: the int32 lanes are the 16 outputs, no horizontal
// sums. A micro tile is 16 rows x 8 columns; per sub-block the integer sums are converted
// once and scaled into float accumulators. Unpacking is paid once per 16 rows and up to 128
// columns; the activation sums (for the level offset and the K-quant mins) once per column
// and chunk.
//
// F32 / F16: 4 x 4 register tiles of 16-float dot products, reduced at the end.

// GCC 12 reports the _mm512_undefined_*() operands inside its own intrinsic headers as
// uninitialized (a false positive of the headers, not of this file).
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu_simd/gemm-unpack.h"
#include "backends/cpu_simd/kernels.h"

namespace {

constexpr int kRG = 16;   // rows per group (zmm lanes)
constexpr int kKC = 512;  // k elements per chunk (a multiple of 256 and 64)
constexpr int kCC = 128;  // columns per pass over the activation sums
constexpr int kNC = 8;    // columns per micro tile

struct w_panel {
    alignas(64) uint8_t q[kKC * kRG];  // [kc / 4][16 rows][4 levels]
    alignas(64) float sc[kKC / 16 * kRG];
    alignas(64) float mn[kKC / 16 * kRG];
    alignas(64) uint8_t lev[kRG][kKC];  // unpacked levels, row-major (scratch)
};

struct x_meta {
    float   d[kCC][kKC / 16];
    int32_t c[kCC][kKC / 16];
    float   s[kCC][kKC / 16];
};

static inline int32_t load_i32(const void * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// 16 x 16 transpose of 32-bit elements: r[i] holds row i; afterwards r[j] holds column j.
static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i]     = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 4; q++) {
        u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
        u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
        u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
    // u[4 q + j], 128-bit lane L: column 4 L + j of rows 4 q .. 4 q + 3.
    for (int j = 0; j < 4; j++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
        const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
        r[j]             = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[8 + j]         = _mm512_shuffle_i32x4(v0, v2, 0xdd);
        r[4 + j]         = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + j]        = _mm512_shuffle_i32x4(v1, v3, 0xdd);
    }
}

// Unpacks rows [0, nrr) of the group (the rest are zero) for elements [e0, e0 + kc) and
// interleaves them into p.q.
static void pack_rows(gemm_unpack_fn unpack, int S, bool has_min, const uint8_t * w, size_t ws, int nrr, int64_t e0,
                      int kc, w_panel & p) {
    const int kc64 = (kc + 63) & ~63;
    const int nsb  = kc / S;
    for (int r = 0; r < kRG; r++) {
        if (r < nrr) {
            unpack(w + r * ws, e0, kc, p.lev[r], p.sc + r, p.mn + r, kRG);
            if (kc64 > kc) std::memset(p.lev[r] + kc, 0, kc64 - kc);
        } else {
            std::memset(p.lev[r], 0, kc64);
            for (int b = 0; b < nsb; b++) {
                p.sc[b * kRG + r] = 0.0f;
                p.mn[b * kRG + r] = 0.0f;
            }
        }
    }
    (void) has_min;
    for (int g0 = 0; g0 < kc64; g0 += 64) {
        __m512i r[16];
        for (int i = 0; i < 16; i++) r[i] = _mm512_load_si512(p.lev[i] + g0);
        transpose16(r);
        for (int i = 0; i < 16; i++) _mm512_store_si512(p.q + (g0 + 4 * i) * kRG, r[i]);
    }
}

// 16 rows x N columns over nsb sub-blocks of the chunk starting at e0.
template <int N, int S, bool MIN, bool XK>
static void micro(int nsb, int64_t e0, const w_panel & p, const x_meta & xm, int cm, const char * x, size_t xs,
                  float * y, size_t ys, __mmask16 mask, bool accumulate) {
    __m512 acc[N];
    for (int j = 0; j < N; j++) {
        acc[j] = accumulate ? _mm512_maskz_loadu_ps(mask, y + j * ys) : _mm512_setzero_ps();
    }
    for (int b = 0; b < nsb; b++) {
        __m512i w[S / 4];
        for (int g = 0; g < S / 4; g++) w[g] = _mm512_load_si512(p.q + (b * S + 4 * g) * kRG);
        const __m512  sc = _mm512_load_ps(p.sc + b * kRG);
        __m512        mn = _mm512_setzero_ps();
        if (MIN) mn = _mm512_load_ps(p.mn + b * kRG);
        const int64_t e = e0 + static_cast<int64_t>(b) * S;
        const size_t  xo =
            XK ? (e / 256) * sizeof(ember_block_q8_k) + 4 + e % 256 : (e / 32) * sizeof(ember_block_q8_0) + 2;
        for (int j = 0; j < N; j++) {
            const char * xp = x + j * xs + xo;
            __m512i      ia = _mm512_set1_epi32(xm.c[cm + j][b]);
            for (int g = 0; g < S / 4; g++) ia = _mm512_dpbusd_epi32(ia, w[g], _mm512_set1_epi32(load_i32(xp + 4 * g)));
            const __m512 f = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xffff, ia), _mm512_set1_ps(xm.d[cm + j][b]));
            acc[j]         = _mm512_fmadd_ps(f, sc, acc[j]);
            if (MIN) acc[j] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xm.s[cm + j][b]), acc[j]);
        }
    }
    for (int j = 0; j < N; j++) _mm512_mask_storeu_ps(y + j * ys, mask, acc[j]);
}


template <int S, int OFF, bool MIN, bool XK>
static void gemm_q(gemm_unpack_fn unpack, int64_t k, int64_t nr, int64_t nc, const void * w, size_t ws, const void * x,
                   size_t xs, float * y, size_t ys) {
    w_panel                p;
    x_meta                 xm;
    const uint8_t *        wb = static_cast<const uint8_t *>(w);
    const char *           xb = static_cast<const char *>(x);
    for (int64_t e0 = 0; e0 < k; e0 += kKC) {
        const int  kc  = static_cast<int>(k - e0 < kKC ? k - e0 : kKC);
        const int  nsb = kc / S;
        const bool acc = e0 > 0;
        for (int64_t c0 = 0; c0 < nc; c0 += kCC) {
            const int ncc = static_cast<int>(nc - c0 < kCC ? nc - c0 : kCC);
            for (int c = 0; c < ncc; c++) {
                gu_xmeta(xb + (c0 + c) * xs, e0, nsb, S, OFF, XK, xm.d[c], xm.c[c], MIN ? xm.s[c] : nullptr);
            }
            for (int64_t r0 = 0; r0 < nr; r0 += kRG) {
                const int       nrr  = static_cast<int>(nr - r0 < kRG ? nr - r0 : kRG);
                const __mmask16 mask = static_cast<__mmask16>((1u << nrr) - 1);
                pack_rows(unpack, S, MIN, wb + r0 * ws, ws, nrr, e0, kc, p);
                int c = 0;
                for (; c + kNC <= ncc; c += kNC) {
                    micro<kNC, S, MIN, XK>(nsb, e0, p, xm, c, xb + (c0 + c) * xs, xs, y + (c0 + c) * ys + r0, ys,
                                           mask, acc);
                }
                // Column tails one at a time: the 2-column instantiation computed zeros when built
                // at -O2 with AddressSanitizer (GCC 12; not understood yet, see the issue note),
                // and one column per call costs little next to the full 8-column tiles.
                for (; c < ncc; c++) {
                    micro<1, S, MIN, XK>(nsb, e0, p, xm, c, xb + (c0 + c) * xs, xs, y + (c0 + c) * ys + r0, ys, mask, acc);
                }
            }
        }
    }
}

#define EMBER_GEMM_Q(name, S, OFF, MIN, XK, unpack)                                                                \
    static void name(int64_t k, int64_t nr, int64_t nc, const void * w, size_t ws, const void * x, size_t xs,       \
                     float * y, size_t ys) {                                                                        \
        gemm_q<S, OFF, MIN, XK>(unpack, k, nr, nc, w, ws, x, xs, y, ys);                                            \
    }

EMBER_GEMM_Q(gemm_q4_0, 32, 8, false, false, gu_q4_0)
EMBER_GEMM_Q(gemm_q5_0, 32, 16, false, false, gu_q5_0)
EMBER_GEMM_Q(gemm_q8_0, 32, 128, false, false, gu_q8_0)
EMBER_GEMM_Q(gemm_iq4_nl, 32, 128, false, false, gu_iq4_nl)
EMBER_GEMM_Q(gemm_q4_k, 32, 0, true, true, gu_q4_k)
EMBER_GEMM_Q(gemm_q5_k, 32, 0, true, true, gu_q5_k)
EMBER_GEMM_Q(gemm_q6_k, 16, 32, false, true, gu_q6_k)
EMBER_GEMM_Q(gemm_q3_k, 16, 4, false, true, gu_q3_k)
EMBER_GEMM_Q(gemm_q2_k, 16, 0, true, true, gu_q2_k)

#undef EMBER_GEMM_Q

//
// F32 / F16
//
template <bool F16>
static inline __m512 load16(const char * p, int64_t i) {
    if (F16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 2 * i)));
    return _mm512_loadu_ps(reinterpret_cast<const float *>(p) + i);
}

template <bool F16>
static inline __m512 load16_tail(const char * p, int64_t i, __mmask16 m) {
    if (F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float *>(p) + i);
}

// Sum of the 16 lanes (not _mm512_reduce_add_ps: GCC 12 warns about its undefined operand).
static inline float hsum16(__m512 v) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_maskz_extractf32x8_ps(0xff, v, 1));
    __m128       b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b              = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b              = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

template <int RM, int RN, bool F16>
static void tile_f(int64_t k, const char * w, size_t ws, const char * x, size_t xs, float * y, size_t ys) {
    __m512 acc[RM][RN];
    for (int r = 0; r < RM; r++) {
        for (int j = 0; j < RN; j++) acc[r][j] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 xv[RN];
        for (int j = 0; j < RN; j++) xv[j] = load16<F16>(x + j * xs, i);
        for (int r = 0; r < RM; r++) {
            const __m512 wv = load16<F16>(w + r * ws, i);
            for (int j = 0; j < RN; j++) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    if (i < k) {
        const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
        __m512          xv[RN];
        for (int j = 0; j < RN; j++) xv[j] = load16_tail<F16>(x + j * xs, i, m);
        for (int r = 0; r < RM; r++) {
            const __m512 wv = load16_tail<F16>(w + r * ws, i, m);
            for (int j = 0; j < RN; j++) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < RM; r++) {
        for (int j = 0; j < RN; j++) y[j * ys + r] = hsum16(acc[r][j]);
    }
}

typedef void (*tile_f_fn)(int64_t, const char *, size_t, const char *, size_t, float *, size_t);

template <bool F16>
static void gemm_f(int64_t k, int64_t nr, int64_t nc, const void * w, size_t ws, const void * x, size_t xs, float * y,
                   size_t ys) {
    static const tile_f_fn tiles[4][4] = {
        {tile_f<1, 1, F16>, tile_f<1, 2, F16>, tile_f<1, 3, F16>, tile_f<1, 4, F16>},
        {tile_f<2, 1, F16>, tile_f<2, 2, F16>, tile_f<2, 3, F16>, tile_f<2, 4, F16>},
        {tile_f<3, 1, F16>, tile_f<3, 2, F16>, tile_f<3, 3, F16>, tile_f<3, 4, F16>},
        {tile_f<4, 1, F16>, tile_f<4, 2, F16>, tile_f<4, 3, F16>, tile_f<4, 4, F16>},
    };
    const char * wb = static_cast<const char *>(w);
    const char * xb = static_cast<const char *>(x);
    for (int64_t r = 0; r < nr; r += 4) {
        const int rm = static_cast<int>(nr - r < 4 ? nr - r : 4);
        for (int64_t c = 0; c < nc; c += 4) {
            const int rn = static_cast<int>(nc - c < 4 ? nc - c : 4);
            tiles[rm - 1][rn - 1](k, wb + r * ws, ws, xb + c * xs, xs, y + c * ys + r, ys);
        }
    }
}

}  // namespace

void ember_cpu_register_avx512_gemm(ember_cpu_kernel_table * t) {
    t->types[ember_type_cell(EMBER_TYPE_F32)].gemm    = gemm_f<false>;
    t->types[ember_type_cell(EMBER_TYPE_F16)].gemm    = gemm_f<true>;
    t->types[ember_type_cell(EMBER_TYPE_Q4_0)].gemm   = gemm_q4_0;
    t->types[ember_type_cell(EMBER_TYPE_Q5_0)].gemm   = gemm_q5_0;
    t->types[ember_type_cell(EMBER_TYPE_Q8_0)].gemm   = gemm_q8_0;
    t->types[ember_type_cell(EMBER_TYPE_IQ4_NL)].gemm = gemm_iq4_nl;
    t->types[ember_type_cell(EMBER_TYPE_Q2_K)].gemm   = gemm_q2_k;
    t->types[ember_type_cell(EMBER_TYPE_Q3_K)].gemm   = gemm_q3_k;
    t->types[ember_type_cell(EMBER_TYPE_Q4_K)].gemm   = gemm_q4_k;
    t->types[ember_type_cell(EMBER_TYPE_Q5_K)].gemm   = gemm_q5_k;
    t->types[ember_type_cell(EMBER_TYPE_Q6_K)].gemm   = gemm_q6_k;
}
