// Reference codecs of the non-linear 4-bit quants IQ4_NL (32-weight blocks, Q8_0 activations)
// and IQ4_XS (256-weight super-blocks with 6-bit sub-block scales, Q8_K activations). Both map
// a 4-bit index to a value of the fixed grid EMBER_IQ4NL_VALUES.
//
// from_float follows llama.cpp's quantize_iq4_nl / quantize_iq4_xs (what llama-quantize runs;
// with no importance matrix the weights are x^2) step by step, in the same float arithmetic, so
// that a row quantized here has llama-quantize's bytes (checked against the tiny-llama F32 /
// IQ4_NL / IQ4_XS fixtures). Note: llama.cpp's quantize_row_iq4_nl_ref, used for activations
// only, searches differently (no scale candidates); llama-quantize's files are the target here.
#include <cmath>
#include <cstring>

#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds in this file (they would change which candidate scale wins).
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

constexpr int8_t kValues[16] = EMBER_IQ4NL_VALUES;
constexpr int    kNumTry     = 7;       // scale candidates (values[0] + k) / max, k = -7..7
constexpr float  kGroupEps   = 1e-15f;  // below this a group counts as all zero

// Index of the grid value nearest to v; on a tie (v exactly at a midpoint) the upper one.
// Compares 2v with the sum of neighbouring values, both exact in float, so a midpoint is never
// misjudged by rounding; NaN gives 0.
inline int best_index(float v) {
    const float v2  = v + v;
    int         idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (v2 >= static_cast<float>(kValues[j - 1] + kValues[j])) idx = j;
    }
    return idx;
}

// Scale of one 32-weight group (weights x^2), choosing the indices in L: the value of largest
// magnitude first maps onto the grid end (d = max / 127); that choice's least-squares scale
// is the one to beat, and 15 more candidates 1 / id, id = (k - 127) / max for k = -7..7, each
// score their least-squares scale and replace the best when strictly better. L keeps the
// indices of the first choice (the caller recomputes them against the stored scale). An
// all-zero group gets scale 0 and L = 0.
float group_scale(const float * x, uint8_t * L) {
    float weight[32];
    for (int j = 0; j < 32; j++) weight[j] = x[j] * x[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max  = x[j];
        }
    }
    if (amax < kGroupEps) {
        std::memset(L, 0, 32);
        return 0.0f;
    }
    float d     = -max / static_cast<float>(kValues[0]);
    float id    = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = best_index(id * x[j]);
        L[j]        = static_cast<uint8_t>(l);
        const float q = kValues[l];
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
    }
    d          = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kNumTry; itry <= kNumTry; itry++) {
        id    = static_cast<float>(itry + kValues[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = kValues[best_index(id * x[j])];
            sumqx += weight[j] * q * x[j];
            sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d    = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Packs 32 indices as Q4_0 packs its nibbles: byte j holds index j (low) and j + 16 (high).
inline void pack_nibbles(const uint8_t * L, uint8_t * qs) {
    for (int j = 0; j < 16; j++) qs[j] = static_cast<uint8_t>(L[j] | L[j + 16] << 4);
}

// IQ4_XS's 6-bit scale of sub-block j (0..63, stored offset by 32).
inline int xs_scale(const ember_block_iq4_xs & b, int j) {
    return (b.scales_l[j / 2] >> (4 * (j % 2)) & 0xf) | (b.scales_h >> (2 * j) & 3) << 4;
}

// sum over 32 weights of grid value * activation, exact.
inline int32_t dot32(const uint8_t * qs, const int8_t * q8) {
    int32_t sum = 0;
    for (int j = 0; j < 16; j++) sum += kValues[qs[j] & 0xf] * q8[j] + kValues[qs[j] >> 4] * q8[j + 16];
    return sum;
}

}  // namespace

//
// IQ4_NL
//
void ember_ref_to_float_IQ4_NL(const void * src, float * dst, int64_t n) {
    const ember_block_iq4_nl * b = static_cast<const ember_block_iq4_nl *>(src);
    for (int64_t i = 0; i < n / EMBER_QK4_NL; i++) {
        const float d = ember_half_to_float(b[i].d);
        float *     y = dst + i * EMBER_QK4_NL;
        for (int j = 0; j < 16; j++) {
            y[j]      = d * static_cast<float>(kValues[b[i].qs[j] & 0xf]);
            y[j + 16] = d * static_cast<float>(kValues[b[i].qs[j] >> 4]);
        }
    }
}

// d = group_scale (stored as f16); the indices are then the nearest grid values of x / d
// with the unrounded d (x * 0 when d is 0, i.e. index 8, value 1, for an all-zero block).
void ember_ref_from_float_IQ4_NL(const float * src, void * dst, int64_t n) {
    ember_block_iq4_nl * b = static_cast<ember_block_iq4_nl *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK4_NL; i++) {
        const float * x = src + i * EMBER_QK4_NL;
        uint8_t       L[32];
        const float   d  = group_scale(x, L);
        b[i].d           = ember_float_to_half(d);
        const float id   = d != 0.0f ? 1 / d : 0.0f;
        for (int j = 0; j < 32; j++) L[j] = static_cast<uint8_t>(best_index(id * x[j]));
        pack_nibbles(L, b[i].qs);
    }
}

// Per block: s += (d_x * d_y) * sum(value[q_x] * q_y), the sum exact.
void ember_ref_vec_dot_IQ4_NL(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_iq4_nl * a   = static_cast<const ember_block_iq4_nl *>(x);
    const ember_block_q8_0 *   b   = static_cast<const ember_block_q8_0 *>(y);
    float                      sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK4_NL; i++) {
        const float d = ember_half_to_float(b[i].d) * ember_half_to_float(a[i].d);
        sum += d * static_cast<float>(dot32(a[i].qs, b[i].qs));
    }
    *s = sum;
}

//
// IQ4_XS
//
void ember_ref_to_float_IQ4_XS(const void * src, float * dst, int64_t n) {
    const ember_block_iq4_xs * b = static_cast<const ember_block_iq4_xs *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float d = ember_half_to_float(b[ib].d);
        for (int j = 0; j < 8; j++) {
            const float     dl = d * static_cast<float>(xs_scale(b[ib], j) - 32);
            const uint8_t * qs = b[ib].qs + 16 * j;
            float *         y  = dst + ib * EMBER_QK_K + 32 * j;
            for (int l = 0; l < 16; l++) {
                y[l]      = dl * static_cast<float>(kValues[qs[l] & 0xf]);
                y[l + 16] = dl * static_cast<float>(kValues[qs[l] >> 4]);
            }
        }
    }
}

// Per super-block: each 32-weight sub-block gets group_scale. The scale of largest magnitude,
// kept with its sign, maps to -32: d = scale_max / -32 (stored as f16; -0 for an all-zero
// super-block, as ggml writes it) and ls_j = clamp(round(scale_j / d), -32, 31) + 32. The
// indices are the nearest grid values of x / (d * (ls_j - 32)), with the unrounded d.
void ember_ref_from_float_IQ4_XS(const float * src, void * dst, int64_t n) {
    ember_block_iq4_xs * blocks = static_cast<ember_block_iq4_xs *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *        x = src + ib * EMBER_QK_K;
        ember_block_iq4_xs & b = blocks[ib];
        uint8_t              L[EMBER_QK_K];
        float                scales[8];
        float                max_scale = 0, amax_scale = 0;
        for (int j = 0; j < 8; j++) {
            scales[j]     = group_scale(x + 32 * j, L + 32 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax_scale) {
                amax_scale = a;
                max_scale  = scales[j];
            }
        }
        const float d  = -max_scale / 32;
        const float id = d != 0.0f ? 1 / d : 0.0f;
        b.d            = ember_float_to_half(d);
        b.scales_h     = 0;
        std::memset(b.scales_l, 0, sizeof(b.scales_l));
        for (int j = 0; j < 8; j++) {
            const int   l   = ember_ref_clamp_int(ember_ref_nearest_int(id * scales[j]), -32, 31);
            const float dl  = d * static_cast<float>(l);
            const float idl = dl != 0.0f ? 1 / dl : 0.0f;
            for (int i = 32 * j; i < 32 * (j + 1); i++) L[i] = static_cast<uint8_t>(best_index(idl * x[i]));
            const int code = l + 32;
            b.scales_l[j / 2] = static_cast<uint8_t>(b.scales_l[j / 2] | (code & 0xf) << (4 * (j % 2)));
            b.scales_h        = static_cast<uint16_t>(b.scales_h | (code >> 4) << (2 * j));
        }
        for (int j = 0; j < 8; j++) pack_nibbles(L + 32 * j, b.qs + 16 * j);
    }
}

// Per super-block an exact integer sum, sum_j (ls_j - 32) * sum_{i in j} value[q_i] * y_i (at
// most 256 * 32 * 127 * 127 < 2^31), then s += (d_x * d_y) * sumi.
void ember_ref_vec_dot_IQ4_XS(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_iq4_xs * a   = static_cast<const ember_block_iq4_xs *>(x);
    const ember_block_q8_k *   b   = static_cast<const ember_block_q8_k *>(y);
    float                      sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int32_t sumi = 0;
        for (int j = 0; j < 8; j++) sumi += (xs_scale(a[ib], j) - 32) * dot32(a[ib].qs + 16 * j, b[ib].qs + 32 * j);
        sum += (ember_half_to_float(a[ib].d) * b[ib].d) * static_cast<float>(sumi);
    }
    *s = sum;
}
