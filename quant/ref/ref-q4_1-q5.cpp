// Reference codecs of the 32-element legacy quants Q4_1, Q5_0, Q5_1 and of Q8_1, the activation
// type of Q4_1 / Q5_1 dot products (ggml layouts and rounding).
//
// from_float follows llama.cpp's reference quantizers (the ones llama-quantize runs when no
// importance matrix is given), so a row quantized here has llama-quantize's bytes (checked
// against the tiny-llama F32 / Q4_1 / Q5_0 / Q5_1 fixtures). The legacy quantizers round by
// truncating v + 0.5 (not to nearest even): keep that.
#include <cfloat>
#include <cmath>

#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds: d * q + m must round twice, as ggml's generic code writes it.
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

// Bit 4 of each of the 32 levels, as the little-endian uint32 qh of Q5_0 / Q5_1: bit j is
// weight j's.
inline void store_qh(uint8_t * qh, uint32_t bits) {
    for (int k = 0; k < 4; k++) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

inline uint32_t load_qh(const uint8_t * qh) {
    return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
           static_cast<uint32_t>(qh[3]) << 24;
}

// The 32 levels of a Q5 block (0..31), in weight order.
inline void q5_unpack(const uint8_t * qs, const uint8_t * qh, int * q) {
    const uint32_t h = load_qh(qh);
    for (int j = 0; j < 16; j++) {
        q[j]      = (qs[j] & 0x0f) | static_cast<int>((h >> j & 1u) << 4);
        q[j + 16] = (qs[j] >> 4) | static_cast<int>((h >> (j + 16) & 1u) << 4);
    }
}

// Packs 32 levels (0..31): low nibbles as in Q4_0, bit 4 into qh.
inline void q5_pack(const int * q, uint8_t * qs, uint8_t * qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
        h |= static_cast<uint32_t>(q[j] >> 4 & 1) << j;
        h |= static_cast<uint32_t>(q[j + 16] >> 4 & 1) << (j + 16);
    }
    store_qh(qh, h);
}

// Minimum and maximum of a block (the asymmetric quants span [min, max]).
inline void min_max(const float * x, int n, float & mn, float & mx) {
    mn = FLT_MAX;
    mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
}

// Levels of an asymmetric block: trunc((x - min) / d + 0.5), at most qmax.
inline int asym_level(float x, float mn, float id, int qmax) {
    const int l = static_cast<int>((x - mn) * id + 0.5f);  // >= 0: x >= min
    return l < qmax ? l : qmax;
}

}  // namespace

//
// Q4_1
//
void ember_ref_to_float_Q4_1(const void * src, float * dst, int64_t n) {
    const ember_block_q4_1 * b = static_cast<const ember_block_q4_1 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK4_1; i++) {
        const float d = ember_half_to_float(b[i].d);
        const float m = ember_half_to_float(b[i].m);
        float *     y = dst + i * EMBER_QK4_1;
        for (int j = 0; j < EMBER_QK4_1 / 2; j++) {
            y[j]                   = static_cast<float>(b[i].qs[j] & 0x0f) * d + m;
            y[j + EMBER_QK4_1 / 2] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
        }
    }
}

// d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)).
void ember_ref_from_float_Q4_1(const float * src, void * dst, int64_t n) {
    ember_block_q4_1 * b = static_cast<ember_block_q4_1 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK4_1; i++) {
        const float * x = src + i * EMBER_QK4_1;
        float         mn, mx;
        min_max(x, EMBER_QK4_1, mn, mx);
        const float d  = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        b[i].m         = ember_float_to_half(mn);
        for (int j = 0; j < EMBER_QK4_1 / 2; j++) {
            const int q0 = asym_level(x[j], mn, id, 15);
            const int q1 = asym_level(x[j + EMBER_QK4_1 / 2], mn, id, 15);
            b[i].qs[j]   = static_cast<uint8_t>(q0 | q1 << 4);
        }
    }
}

// Per block: s += (d_x * d_y) * sum(q_x * q_y) + m_x * s_y, where s_y = d_y * sum(q_y)
// stands for the min times the activations' sum.
void ember_ref_vec_dot_Q4_1(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q4_1 * a   = static_cast<const ember_block_q4_1 *>(x);
    const ember_block_q8_1 * b   = static_cast<const ember_block_q8_1 *>(y);
    float                    sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK4_1; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < EMBER_QK4_1 / 2; j++) {
            sumi += (a[i].qs[j] & 0x0f) * b[i].qs[j];
            sumi += (a[i].qs[j] >> 4) * b[i].qs[j + EMBER_QK4_1 / 2];
        }
        sum += (ember_half_to_float(a[i].d) * ember_half_to_float(b[i].d)) * static_cast<float>(sumi) +
               ember_half_to_float(a[i].m) * ember_half_to_float(b[i].s);
    }
    *s = sum;
}

//
// Q5_0
//
void ember_ref_to_float_Q5_0(const void * src, float * dst, int64_t n) {
    const ember_block_q5_0 * b = static_cast<const ember_block_q5_0 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK5_0; i++) {
        const float d = ember_half_to_float(b[i].d);
        int         q[EMBER_QK5_0];
        q5_unpack(b[i].qs, b[i].qh, q);
        for (int j = 0; j < EMBER_QK5_0; j++) dst[i * EMBER_QK5_0 + j] = static_cast<float>(q[j] - 16) * d;
    }
}

// As Q4_0 with 5 bits: d = (signed value of largest magnitude) / -16, q = min(31,
// trunc(x / d + 16.5)).
void ember_ref_from_float_Q5_0(const float * src, void * dst, int64_t n) {
    ember_block_q5_0 * b = static_cast<ember_block_q5_0 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK5_0; i++) {
        const float * x    = src + i * EMBER_QK5_0;
        float         amax = 0.0f;
        float         max  = 0.0f;
        for (int j = 0; j < EMBER_QK5_0; j++) {
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max  = x[j];
            }
        }
        const float d  = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        int q[EMBER_QK5_0];
        for (int j = 0; j < EMBER_QK5_0; j++) {
            const int l = static_cast<int>(x[j] * id + 16.5f);  // >= 0: |x * id| <= 16
            q[j]        = l < 31 ? l : 31;
        }
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

void ember_ref_vec_dot_Q5_0(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q5_0 * a   = static_cast<const ember_block_q5_0 *>(x);
    const ember_block_q8_0 * b   = static_cast<const ember_block_q8_0 *>(y);
    float                    sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK5_0; i++) {
        int q[EMBER_QK5_0];
        q5_unpack(a[i].qs, a[i].qh, q);
        int32_t sumi = 0;
        for (int j = 0; j < EMBER_QK5_0; j++) sumi += (q[j] - 16) * b[i].qs[j];
        sum += (ember_half_to_float(a[i].d) * ember_half_to_float(b[i].d)) * static_cast<float>(sumi);
    }
    *s = sum;
}

//
// Q5_1
//
void ember_ref_to_float_Q5_1(const void * src, float * dst, int64_t n) {
    const ember_block_q5_1 * b = static_cast<const ember_block_q5_1 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK5_1; i++) {
        const float d = ember_half_to_float(b[i].d);
        const float m = ember_half_to_float(b[i].m);
        int         q[EMBER_QK5_1];
        q5_unpack(b[i].qs, b[i].qh, q);
        for (int j = 0; j < EMBER_QK5_1; j++) dst[i * EMBER_QK5_1 + j] = static_cast<float>(q[j]) * d + m;
    }
}

// d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5) (at most 31).
void ember_ref_from_float_Q5_1(const float * src, void * dst, int64_t n) {
    ember_block_q5_1 * b = static_cast<ember_block_q5_1 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK5_1; i++) {
        const float * x = src + i * EMBER_QK5_1;
        float         mn, mx;
        min_max(x, EMBER_QK5_1, mn, mx);
        const float d  = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        b[i].m         = ember_float_to_half(mn);
        int q[EMBER_QK5_1];
        for (int j = 0; j < EMBER_QK5_1; j++) q[j] = asym_level(x[j], mn, id, 31);
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

void ember_ref_vec_dot_Q5_1(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q5_1 * a   = static_cast<const ember_block_q5_1 *>(x);
    const ember_block_q8_1 * b   = static_cast<const ember_block_q8_1 *>(y);
    float                    sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK5_1; i++) {
        int q[EMBER_QK5_1];
        q5_unpack(a[i].qs, a[i].qh, q);
        int32_t sumi = 0;
        for (int j = 0; j < EMBER_QK5_1; j++) sumi += q[j] * b[i].qs[j];
        sum += (ember_half_to_float(a[i].d) * ember_half_to_float(b[i].d)) * static_cast<float>(sumi) +
               ember_half_to_float(a[i].m) * ember_half_to_float(b[i].s);
    }
    *s = sum;
}

//
// Q8_1
//
void ember_ref_to_float_Q8_1(const void * src, float * dst, int64_t n) {
    const ember_block_q8_1 * b = static_cast<const ember_block_q8_1 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK8_1; i++) {
        const float d = ember_half_to_float(b[i].d);
        for (int j = 0; j < EMBER_QK8_1; j++) dst[i * EMBER_QK8_1 + j] = d * b[i].qs[j];
    }
}

// As Q8_0 (d = max|x| / 127, q = round(x / d), ties away from zero), plus s = half(d * sum(q))
// from the unrounded d.
void ember_ref_from_float_Q8_1(const float * src, void * dst, int64_t n) {
    ember_block_q8_1 * b = static_cast<ember_block_q8_1 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK8_1; i++) {
        const float * x    = src + i * EMBER_QK8_1;
        float         amax = 0.0f;
        for (int j = 0; j < EMBER_QK8_1; j++) amax = std::fmax(amax, std::fabs(x[j]));
        const float d  = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        int sum        = 0;
        for (int j = 0; j < EMBER_QK8_1; j++) {
            b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
            sum += b[i].qs[j];
        }
        b[i].s = ember_float_to_half(static_cast<float>(sum) * d);
    }
}
