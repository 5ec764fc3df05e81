// Weight unpacking for the prefill GEMM kernels (avx2/gemm-avx2.cpp, avx512/gemm-avx512.cpp).
//
// Included ONLY by ISA files: everything here is `static` (internal linkage), so each ISA
// file gets its own copy compiled with its own flags and nothing leaks between them (see the
// rules in kernels.h). The loops are written to vectorize.
//
// The GEMM kernels share one arithmetic for every integer type: a weight is
//     scale[sub-block] * (level - OFF) - min[sub-block]
// with level an unsigned byte, OFF a per-type constant and sub-blocks of S = 16 or 32 weights.
// The activation is Q8_0 or Q8_K (signed bytes with a float scale per 32 / 256), so one
// sub-block contributes
//     scale * dx * (sum(level * xq) - OFF * sum(xq)) - min * dx * sum(xq),
// where sum(level * xq) is one unsigned x signed byte dot product (VNNI vpdpbusd, or
// vpmaddubsw + vpmaddwd). The integer part equals the reference vec_dot's integer sum exactly;
// only the float scaling is applied per sub-block instead of per block, which changes the
// result by float rounding only.
//
// An unpacker turns kc weights of one row, starting at element e0 (a multiple of the type's
// block size), into kc levels and kc / S scales (and mins), written with a stride.
#ifndef EMBER_CPU_GEMM_UNPACK_H
#define EMBER_CPU_GEMM_UNPACK_H

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"

namespace {

typedef void (*gemm_unpack_fn)(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float * mn,
                               int stride);

static inline float gu_half(ember_half h) { return _cvtsh_ss(h); }

// Q4_0: S = 32, OFF = 8.
static void gu_q4_0(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    const ember_block_q4_0 * b = reinterpret_cast<const ember_block_q4_0 *>(row) + e0 / 32;
    for (int ib = 0; ib < kc / 32; ib++) {
        sc[ib * stride] = gu_half(b[ib].d);
        uint8_t * l     = lev + ib * 32;
        for (int j = 0; j < 16; j++) {
            l[j]      = b[ib].qs[j] & 0x0f;
            l[j + 16] = b[ib].qs[j] >> 4;
        }
    }
}

// Q5_0: S = 32, OFF = 16.
static void gu_q5_0(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    const ember_block_q5_0 * b = reinterpret_cast<const ember_block_q5_0 *>(row) + e0 / 32;
    for (int ib = 0; ib < kc / 32; ib++) {
        sc[ib * stride] = gu_half(b[ib].d);
        uint32_t h;
        std::memcpy(&h, b[ib].qh, 4);
        uint8_t * l = lev + ib * 32;
        for (int j = 0; j < 16; j++) {
            l[j]      = static_cast<uint8_t>((b[ib].qs[j] & 0x0f) | ((h >> j & 1u) << 4));
            l[j + 16] = static_cast<uint8_t>((b[ib].qs[j] >> 4) | ((h >> (j + 16) & 1u) << 4));
        }
    }
}

// Q8_0: S = 32, OFF = 128 (level = q + 128).
static void gu_q8_0(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    const ember_block_q8_0 * b = reinterpret_cast<const ember_block_q8_0 *>(row) + e0 / 32;
    for (int ib = 0; ib < kc / 32; ib++) {
        sc[ib * stride] = gu_half(b[ib].d);
        uint8_t * l     = lev + ib * 32;
        for (int j = 0; j < 32; j++) l[j] = static_cast<uint8_t>(b[ib].qs[j] ^ 0x80);
    }
}

// IQ4_NL: S = 32, OFF = 128 (level = grid value + 128, in 1..241).
static void gu_iq4_nl(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    static const int8_t            grid[16] = EMBER_IQ4NL_VALUES;
    const ember_block_iq4_nl * b        = reinterpret_cast<const ember_block_iq4_nl *>(row) + e0 / 32;
    for (int ib = 0; ib < kc / 32; ib++) {
        sc[ib * stride] = gu_half(b[ib].d);
        uint8_t * l     = lev + ib * 32;
        for (int j = 0; j < 16; j++) {
            l[j]      = static_cast<uint8_t>(grid[b[ib].qs[j] & 0x0f] + 128);
            l[j + 16] = static_cast<uint8_t>(grid[b[ib].qs[j] >> 4] + 128);
        }
    }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4).
static inline void gu_k4_scale_min(const uint8_t * q, int j, int & sc, int & m) {
    if (j < 4) {
        sc = q[j] & 63;
        m  = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4;
        m  = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

// Q4_K: S = 32, OFF = 0, mins.
static void gu_q4_k(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float * mn, int stride) {
    const ember_block_q4_k * b = reinterpret_cast<const ember_block_q4_k *>(row) + e0 / 256;
    for (int ib = 0; ib < kc / 256; ib++) {
        const float d    = gu_half(b[ib].d);
        const float dmin = gu_half(b[ib].dmin);
        for (int j = 0; j < 8; j++) {
            int s, m;
            gu_k4_scale_min(b[ib].scales, j, s, m);
            sc[(ib * 8 + j) * stride] = d * static_cast<float>(s);
            mn[(ib * 8 + j) * stride] = dmin * static_cast<float>(m);
        }
        uint8_t * l = lev + ib * 256;
        for (int h = 0; h < 4; h++) {
            const uint8_t * q = b[ib].qs + 32 * h;
            for (int i = 0; i < 32; i++) {
                l[64 * h + i]      = q[i] & 0x0f;
                l[64 * h + 32 + i] = q[i] >> 4;
            }
        }
    }
}

// Q5_K: S = 32, OFF = 0, mins.
static void gu_q5_k(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float * mn, int stride) {
    const ember_block_q5_k * b = reinterpret_cast<const ember_block_q5_k *>(row) + e0 / 256;
    for (int ib = 0; ib < kc / 256; ib++) {
        const float d    = gu_half(b[ib].d);
        const float dmin = gu_half(b[ib].dmin);
        for (int j = 0; j < 8; j++) {
            int s, m;
            gu_k4_scale_min(b[ib].scales, j, s, m);
            sc[(ib * 8 + j) * stride] = d * static_cast<float>(s);
            mn[(ib * 8 + j) * stride] = dmin * static_cast<float>(m);
        }
        uint8_t * l = lev + ib * 256;
        for (int h = 0; h < 4; h++) {
            const uint8_t * q = b[ib].qs + 32 * h;
            for (int i = 0; i < 32; i++) {
                const uint8_t hb = b[ib].qh[i];
                l[64 * h + i]      = static_cast<uint8_t>((q[i] & 0x0f) | ((hb >> (2 * h) & 1) << 4));
                l[64 * h + 32 + i] = static_cast<uint8_t>((q[i] >> 4) | ((hb >> (2 * h + 1) & 1) << 4));
            }
        }
    }
}

// Q6_K: S = 16, OFF = 32.
static void gu_q6_k(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    const ember_block_q6_k * b = reinterpret_cast<const ember_block_q6_k *>(row) + e0 / 256;
    for (int ib = 0; ib < kc / 256; ib++) {
        const float d = gu_half(b[ib].d);
        for (int j = 0; j < 16; j++) sc[(ib * 16 + j) * stride] = d * static_cast<float>(b[ib].scales[j]);
        for (int half = 0; half < 2; half++) {
            const uint8_t * ql = b[ib].ql + half * 64;
            const uint8_t * qh = b[ib].qh + half * 32;
            uint8_t *       o  = lev + ib * 256 + half * 128;
            for (int l = 0; l < 32; l++) {
                o[l]      = static_cast<uint8_t>((ql[l] & 0x0f) | (qh[l] & 3) << 4);
                o[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4);
                o[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4);
                o[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4);
            }
        }
    }
}

// Q3_K: S = 16, OFF = 4 (level = low 2 bits + 4 * high bit).
static void gu_q3_k(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float *, int stride) {
    const ember_block_q3_k * b = reinterpret_cast<const ember_block_q3_k *>(row) + e0 / 256;
    for (int ib = 0; ib < kc / 256; ib++) {
        const float     d  = gu_half(b[ib].d);
        const uint8_t * s8 = b[ib].scales;
        for (int j = 0; j < 16; j++) {
            const int lo = j < 8 ? s8[j] & 0xf : s8[j - 8] >> 4;
            const int hi = s8[8 + j % 4] >> (2 * (j / 4)) & 3;
            sc[(ib * 16 + j) * stride] = d * static_cast<float>((lo | hi << 4) - 32);
        }
        for (int half = 0; half < 2; half++) {
            const uint8_t * q = b[ib].qs + 32 * half;
            uint8_t *       o = lev + ib * 256 + half * 128;
            for (int s = 0; s < 4; s++) {
                const int sh = 4 * half + s;  // bit of hmask for weights 32 * sh .. 32 * sh + 31
                for (int l = 0; l < 32; l++) {
                    o[32 * s + l] =
                        static_cast<uint8_t>((q[l] >> (2 * s) & 3) | ((b[ib].hmask[l] >> sh & 1) << 2));
                }
            }
        }
    }
}

// Q2_K: S = 16, OFF = 0, mins.
static void gu_q2_k(const uint8_t * row, int64_t e0, int kc, uint8_t * lev, float * sc, float * mn, int stride) {
    const ember_block_q2_k * b = reinterpret_cast<const ember_block_q2_k *>(row) + e0 / 256;
    for (int ib = 0; ib < kc / 256; ib++) {
        const float d    = gu_half(b[ib].d);
        const float dmin = gu_half(b[ib].dmin);
        for (int j = 0; j < 16; j++) {
            sc[(ib * 16 + j) * stride] = d * static_cast<float>(b[ib].scales[j] & 0xf);
            mn[(ib * 16 + j) * stride] = dmin * static_cast<float>(b[ib].scales[j] >> 4);
        }
        for (int half = 0; half < 2; half++) {
            const uint8_t * q = b[ib].qs + 32 * half;
            uint8_t *       o = lev + ib * 256 + half * 128;
            for (int s = 0; s < 4; s++) {
                for (int l = 0; l < 32; l++) o[32 * s + l] = static_cast<uint8_t>(q[l] >> (2 * s) & 3);
            }
        }
    }
}

// Activation side, per column and sub-block: the float scale, -OFF * sum(xq) and (for types
// with mins) dx * sum(xq). XK: Q8_K activations (bsums per 16), else Q8_0 (sums computed).
static inline const int8_t * gu_xq(const char * col, int64_t e, bool xk) {
    return reinterpret_cast<const int8_t *>(xk ? col + (e / 256) * sizeof(ember_block_q8_k) + 4 + e % 256
                                               : col + (e / 32) * sizeof(ember_block_q8_0) + 2);
}

static void gu_xmeta(const char * col, int64_t e0, int nsb, int S, int off, bool xk, float * xd, int32_t * xc,
                     float * xs) {
    for (int b = 0; b < nsb; b++) {
        const int64_t e = e0 + static_cast<int64_t>(b) * S;
        int32_t       sum;
        float         d;
        if (xk) {
            const ember_block_q8_k * blk = reinterpret_cast<const ember_block_q8_k *>(col) + e / 256;
            const int                j   = static_cast<int>(e % 256) / 16;
            sum                          = S == 16 ? blk->bsums[j] : blk->bsums[j] + blk->bsums[j + 1];
            d                            = blk->d;
        } else {
            const ember_block_q8_0 * blk = reinterpret_cast<const ember_block_q8_0 *>(col) + e / 32;
            sum                          = 0;
            for (int i = 0; i < 32; i++) sum += blk->qs[i];
            d = gu_half(blk->d);
        }
        xd[b] = d;
        xc[b] = -off * sum;
        if (xs) xs[b] = d * static_cast<float>(sum);
    }
}

}  // namespace

#endif  // EMBER_CPU_GEMM_UNPACK_H
