// AVX2 (+ FMA, F16C) prefill GEMM tiles (the `gemm` cells of kernels.h).
//
// The scheme of avx512/gemm-avx512.cpp on 8-lane registers: 8 weight rows are unpacked to
// byte levels (gemm-unpack.h) and interleaved 4 bytes per row, a broadcast 4-byte group of
// an activation column meets all 8 rows in one vpmaddubsw + vpmaddwd, and the int32 lanes
// are the 8 outputs. vpmaddubsw saturates at 16 bits, so the types whose levels reach 255
// (Q8_0, IQ4_NL: OFF = 128) keep signed levels and use |w| x sign(x, w) instead (at most
// 2 x 127 x 127 per pair); the others (levels <= 63) cannot overflow.
//
// F32 / F16: 4 x 3 register tiles of 8-float dot products, reduced at the end.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu_simd/gemm-unpack.h"
#include "backends/cpu_simd/kernels.h"

namespace {

constexpr int kRG = 8;    // rows per group (ymm lanes)
constexpr int kKC = 512;  // k elements per chunk (a multiple of 256 and 32)
constexpr int kCC = 128;  // columns per pass over the activation sums
constexpr int kNC = 4;    // columns per micro tile

struct w_panel {
    alignas(32) uint8_t q[kKC * kRG];  // [kc / 4][8 rows][4 levels]
    alignas(32) float sc[kKC / 16 * kRG];
    alignas(32) float mn[kKC / 16 * kRG];
    alignas(32) uint8_t lev[kRG][kKC];
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

// 8 x 8 transpose of 32-bit elements: r[i] holds row i; afterwards r[j] holds column j.
static inline void transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i]     = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 2; q++) {
        u[4 * q + 0] = _mm256_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
        u[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
        u[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        u[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
    // u[4 q + j], 128-bit lane L: column 4 L + j of rows 4 q .. 4 q + 3.
    for (int j = 0; j < 4; j++) {
        r[j]     = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

static void pack_rows(gemm_unpack_fn unpack, int S, bool flip, const uint8_t * w, size_t ws, int nrr, int64_t e0,
                      int kc, w_panel & p) {
    const int kc32 = (kc + 31) & ~31;
    const int nsb  = kc / S;
    for (int r = 0; r < kRG; r++) {
        if (r < nrr) {
            unpack(w + r * ws, e0, kc, p.lev[r], p.sc + r, p.mn + r, kRG);
            if (flip) {  // OFF = 128: back to the signed values
                for (int i = 0; i < kc; i++) p.lev[r][i] ^= 0x80;
            }
            if (kc32 > kc) std::memset(p.lev[r] + kc, 0, kc32 - kc);
        } else {
            std::memset(p.lev[r], 0, kc32);
            for (int b = 0; b < nsb; b++) {
                p.sc[b * kRG + r] = 0.0f;
                p.mn[b * kRG + r] = 0.0f;
            }
        }
    }
    for (int g0 = 0; g0 < kc32; g0 += 32) {
        __m256i r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_load_si256(reinterpret_cast<const __m256i *>(p.lev[i] + g0));
        transpose8(r);
        for (int i = 0; i < 8; i++) _mm256_store_si256(reinterpret_cast<__m256i *>(p.q + (g0 + 4 * i) * kRG), r[i]);
    }
}

static inline __m256 maskload8(const float * p, int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));
}

static inline void maskstore8(float * p, int n, __m256 v) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx), v);
}

// 8 rows x N columns over nsb sub-blocks of the chunk starting at e0. SIGNED: the panel holds
// signed levels (OFF = 128 types), multiplied as |w| x sign(x, w).
template <int N, int S, bool MIN, bool XK, bool SIGNED>
static void micro(int nsb, int64_t e0, const w_panel & p, const x_meta & xm, int cm, const char * x, size_t xs,
                  float * y, size_t ys, int nrr, bool accumulate) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256        acc[N];
    for (int j = 0; j < N; j++) acc[j] = accumulate ? maskload8(y + j * ys, nrr) : _mm256_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const int64_t e = e0 + static_cast<int64_t>(b) * S;
        const size_t  xo =
            XK ? (e / 256) * sizeof(ember_block_q8_k) + 4 + e % 256 : (e / 32) * sizeof(ember_block_q8_0) + 2;
        __m256i ia[N];
        for (int j = 0; j < N; j++) ia[j] = _mm256_set1_epi32(xm.c[cm + j][b]);
        for (int g = 0; g < S / 4; g++) {
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i *>(p.q + (b * S + 4 * g) * kRG));
            const __m256i wa = SIGNED ? _mm256_sign_epi8(wv, wv) : wv;
            for (int j = 0; j < N; j++) {
                __m256i xv = _mm256_set1_epi32(load_i32(x + j * xs + xo + 4 * g));
                if (SIGNED) xv = _mm256_sign_epi8(xv, wv);
                ia[j] = _mm256_add_epi32(ia[j], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), ones));
            }
        }
        const __m256 sc = _mm256_load_ps(p.sc + b * kRG);
        __m256       mn = _mm256_setzero_ps();
        if (MIN) mn = _mm256_load_ps(p.mn + b * kRG);
        for (int j = 0; j < N; j++) {
            const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(ia[j]), _mm256_set1_ps(xm.d[cm + j][b]));
            acc[j]         = _mm256_fmadd_ps(f, sc, acc[j]);
            if (MIN) acc[j] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(xm.s[cm + j][b]), acc[j]);
        }
    }
    for (int j = 0; j < N; j++) {
        if (nrr == kRG) {
            _mm256_storeu_ps(y + j * ys, acc[j]);
        } else {
            maskstore8(y + j * ys, nrr, acc[j]);
        }
    }
}

template <int S, int OFF, bool MIN, bool XK>
static void gemm_q(gemm_unpack_fn unpack, int64_t k, int64_t nr, int64_t nc, const void * w, size_t ws, const void * x,
                   size_t xs, float * y, size_t ys) {
    constexpr bool SIGNED = OFF == 128;
    typedef void (*micro_fn)(int, int64_t, const w_panel &, const x_meta &, int, const char *, size_t, float *, size_t,
                             int, bool);
    static const micro_fn tails[kNC] = {
        nullptr,
        micro<1, S, MIN, XK, SIGNED>,
        micro<2, S, MIN, XK, SIGNED>,
        micro<3, S, MIN, XK, SIGNED>,
    };
    w_panel         p;
    x_meta          xm;
    const uint8_t * wb = static_cast<const uint8_t *>(w);
    const char *    xb = static_cast<const char *>(x);
    for (int64_t e0 = 0; e0 < k; e0 += kKC) {
        const int  kc  = static_cast<int>(k - e0 < kKC ? k - e0 : kKC);
        const int  nsb = kc / S;
        const bool acc = e0 > 0;
        for (int64_t c0 = 0; c0 < nc; c0 += kCC) {
            const int ncc = static_cast<int>(nc - c0 < kCC ? nc - c0 : kCC);
            for (int c = 0; c < ncc; c++) {
                gu_xmeta(xb + (c0 + c) * xs, e0, nsb, S, SIGNED ? 0 : OFF, XK, xm.d[c], xm.c[c],
                         MIN ? xm.s[c] : nullptr);
            }
            for (int64_t r0 = 0; r0 < nr; r0 += kRG) {
                const int nrr = static_cast<int>(nr - r0 < kRG ? nr - r0 : kRG);
                pack_rows(unpack, S, SIGNED, wb + r0 * ws, ws, nrr, e0, kc, p);
                int c = 0;
                for (; c + kNC <= ncc; c += kNC) {
                    micro<kNC, S, MIN, XK, SIGNED>(nsb, e0, p, xm, c, xb + (c0 + c) * xs, xs, y + (c0 + c) * ys + r0,
                                                   ys, nrr, acc);
                }
                if (c < ncc) {
                    tails[ncc - c](nsb, e0, p, xm, c, xb + (c0 + c) * xs, xs, y + (c0 + c) * ys + r0, ys, nrr, acc);
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
static inline __m256 load8(const char * p, int64_t i) {
    if (F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 2 * i)));
    return _mm256_loadu_ps(reinterpret_cast<const float *>(p) + i);
}

static inline float hsum8(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b        = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b        = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static inline float scalar_at(const char * p, int64_t i, bool f16) {
    if (f16) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return _cvtsh_ss(h);
    }
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
}

template <int RM, int RN, bool F16>
static void tile_f(int64_t k, const char * w, size_t ws, const char * x, size_t xs, float * y, size_t ys) {
    __m256 acc[RM][RN];
    for (int r = 0; r < RM; r++) {
        for (int j = 0; j < RN; j++) acc[r][j] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 xv[RN];
        for (int j = 0; j < RN; j++) xv[j] = load8<F16>(x + j * xs, i);
        for (int r = 0; r < RM; r++) {
            const __m256 wv = load8<F16>(w + r * ws, i);
            for (int j = 0; j < RN; j++) acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < RM; r++) {
        for (int j = 0; j < RN; j++) {
            float s = hsum8(acc[r][j]);
            for (int64_t t = i; t < k; t++) s += scalar_at(w + r * ws, t, F16) * scalar_at(x + j * xs, t, F16);
            y[j * ys + r] = s;
        }
    }
}

typedef void (*tile_f_fn)(int64_t, const char *, size_t, const char *, size_t, float *, size_t);

template <bool F16>
static void gemm_f(int64_t k, int64_t nr, int64_t nc, const void * w, size_t ws, const void * x, size_t xs, float * y,
                   size_t ys) {
    static const tile_f_fn tiles[4][3] = {
        {tile_f<1, 1, F16>, tile_f<1, 2, F16>, tile_f<1, 3, F16>},
        {tile_f<2, 1, F16>, tile_f<2, 2, F16>, tile_f<2, 3, F16>},
        {tile_f<3, 1, F16>, tile_f<3, 2, F16>, tile_f<3, 3, F16>},
        {tile_f<4, 1, F16>, tile_f<4, 2, F16>, tile_f<4, 3, F16>},
    };
    const char * wb = static_cast<const char *>(w);
    const char * xb = static_cast<const char *>(x);
    for (int64_t r = 0; r < nr; r += 4) {
        const int rm = static_cast<int>(nr - r < 4 ? nr - r : 4);
        for (int64_t c = 0; c < nc; c += 3) {
            const int rn = static_cast<int>(nc - c < 3 ? nc - c : 3);
            tiles[rm - 1][rn - 1](k, wb + r * ws, ws, xb + c * xs, xs, y + c * ys + r, ys);
        }
    }
}

}  // namespace

void ember_cpu_register_avx2_gemm(ember_cpu_kernel_table * t) {
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
