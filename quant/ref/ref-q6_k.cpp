// Reference codecs of the K-quant Q6_K and of its activation type Q8_K (ggml layouts).
//
// from_float follows llama.cpp's reference quantizer step by step, in the same float
// arithmetic, so that a row quantized here has the bytes llama-quantize writes for it (checked
// against the tiny-llama F32 / Q6_K fixture pair). Keep every expression's operand order: a
// reordered sum or a fused multiply-add can pick a different sub-block scale.
#include <cmath>
#include <cstring>

#include "quant/ref/ref-k-common.h"
#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds in this file (a -march with FMA would otherwise let the compiler fuse
// the weighted sums of the scale search and change which candidate scale wins).
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

using namespace ember_ref_k;

constexpr int kSubBlock = 16;                      // weights per Q6_K scale
constexpr int kNumSub   = EMBER_QK_K / kSubBlock;  // 16 scales per super-block

#if EMBER_REF_SEARCH_VEC
// make_qx_quants_rmse1's 18 later candidates, 8 at a time (lane k: candidate is0 + k of
// -9..9 without 0): each lane sums in the scalar loop's order and operands, so each candidate
// gets its bits; they are then taken in candidate order with the same comparison. The
// candidates do not depend on each other here (max is fixed), so three passes do all 18. The
// level, clamp(nearest_int(v), -nmax, nmax - 1), as a float (ember_ref_v8_level).
EMBER_REF_SEARCH_TARGET float search_qx_rmse1_vec(int n, int nmax, const float * x, int8_t * L, float max, float scale, float best) {
    const ember_ref_v8f vzero = {}, vlo = vzero - static_cast<float>(nmax), vhi = vzero + static_cast<float>(nmax - 1);
    ember_ref_v8f       lev[kSubBlock];
    static const int    cand[24] = {-9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0};  // (lanes 18-23 unused)
    for (int c0 = 0; c0 < 18; c0 += 8) {
        ember_ref_v8f iscale;
        for (int k = 0; k < 8; k++) iscale[k] = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(cand[c0 + k])) / max;
        ember_ref_v8f sumlx = vzero, suml2 = vzero;
        for (int i = 0; i < n; i++) {
            const ember_ref_v8f fl = ember_ref_v8_level(iscale * x[i], vlo, vhi);
            lev[i]                 = fl;
            const float w          = x[i] * x[i];  // add_x2_weighted's sums
            sumlx += w * x[i] * fl;
            suml2 += w * fl * fl;
        }
        for (int k = 0; k < 8 && c0 + k < 18; k++) {
            if (suml2[k] > 0.0f && sumlx[k] * sumlx[k] > best * suml2[k]) {
                for (int i = 0; i < n; i++) L[i] = static_cast<int8_t>(nmax + static_cast<int>(lev[i][k]));
                scale = sumlx[k] / suml2[k];
                best  = scale * sumlx[k];
            }
        }
    }
    return scale;
}
#endif

// Scale of one group of n weights for signed levels [-nmax, nmax - 1], chosen to minimise the
// error weighted by x^2 (llama.cpp's make_qx_quants with rmse_type 1 and no importance
// weights). Writes the levels, offset by nmax, to L. The first candidate maps the signed
// value of largest magnitude to -nmax; 18 more candidate step sizes nmax +- 0.1 k (k = 1..9)
// are tried, each scored by the least-squares scale of its levels, and a candidate replaces
// the best so far only when strictly better.
float make_qx_quants_rmse1(int n, int nmax, const float * x, int8_t * L) {
    float       amax;
    const float max = signed_absmax(n, x, amax);
    if (amax < kGroupEps) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -static_cast<float>(nmax) / max;
    float sumlx  = 0.0f;
    float suml2  = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = signed_level(iscale, x[i], nmax);
        L[i]        = static_cast<int8_t>(l + nmax);
        add_x2_weighted(x[i], l, sumlx, suml2);
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best  = scale * sumlx;
#if EMBER_REF_SEARCH_VEC
    if (n <= kSubBlock && ember_ref_vector_search_on()) return search_qx_rmse1_vec(n, nmax, x, L, max, scale, best);
#endif
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) add_x2_weighted(x[i], signed_level(iscale, x[i], nmax), sumlx, suml2);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = static_cast<int8_t>(nmax + signed_level(iscale, x[i], nmax));
            scale = sumlx / suml2;
            best  = scale * sumlx;
        }
    }
    return scale;
}

// The 256 levels of a Q6_K block minus 32 (so -32..31), in weight order: see the layout in
// quant/blocks.h. Each 128-weight half packs weights l, l + 32, l + 64, l + 96 into ql[l],
// ql[l + 32] (low and high nibbles) and qh[l] (2 bits each).
inline void q6k_unpack(const ember_block_q6_k & b, int8_t * q) {
    for (int half = 0; half < 2; half++) {
        const uint8_t * ql = b.ql + half * 64;
        const uint8_t * qh = b.qh + half * 32;
        int8_t *        o  = q + half * 128;
        for (int l = 0; l < 32; l++) {
            o[l]      = static_cast<int8_t>(((ql[l] & 0x0f) | (qh[l] & 3) << 4) - 32);
            o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4) - 32);
            o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
            o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32);
        }
    }
}

}  // namespace

//
// Q6_K
//
void ember_ref_to_float_Q6_K(const void * src, float * dst, int64_t n) {
    const ember_block_q6_k * b = static_cast<const ember_block_q6_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float d = ember_half_to_float(b[ib].d);
        float *     y = dst + ib * EMBER_QK_K;
        int8_t      q[EMBER_QK_K];
        q6k_unpack(b[ib], q);
        for (int j = 0; j < kNumSub; j++) {
            const float ds = d * static_cast<float>(b[ib].scales[j]);  // (d * scale) * q, as ggml
            for (int i = j * kSubBlock; i < (j + 1) * kSubBlock; i++) y[i] = ds * static_cast<float>(q[i]);
        }
    }
}

// Per super-block: each 16-weight sub-block gets its own float scale (make_qx_quants above,
// levels -32..31). The scale of largest magnitude, kept with its sign, maps to int8 -128:
// d = scale_max / -128 (stored as f16) and scales[j] = min(127, round(scales_j * -128 /
// scale_max)). The levels are then recomputed against the stored d * scales[j], clamped to
// -32..31; a sub-block whose stored scale is 0 keeps the levels of its own scale search (they
// dequantize to 0 either way, but the bytes must match). An all-zero super-block is all zero.
void ember_ref_from_float_Q6_K(const float * src, void * dst, int64_t n) {
    ember_block_q6_k * blocks = static_cast<ember_block_q6_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      x = src + ib * EMBER_QK_K;
        ember_block_q6_k & b = blocks[ib];
        int8_t             L[EMBER_QK_K];
        float              scales[kNumSub];
        for (int j = 0; j < kNumSub; j++) {
            scales[j] = make_qx_quants_rmse1(kSubBlock, 32, x + j * kSubBlock, L + j * kSubBlock);
        }
        float       max_abs_scale;
        const float max_scale = signed_absmax(kNumSub, scales, max_abs_scale);
        if (max_abs_scale < kGroupEps) {
            std::memset(&b, 0, sizeof(b));
            continue;
        }
        const float iscale = -128.0f / max_scale;
        b.d                = ember_float_to_half(1.0f / iscale);
        for (int j = 0; j < kNumSub; j++) {
            const int s = nearest_int(iscale * scales[j]);  // >= -128: |scales[j]| <= |max_scale|
            b.scales[j] = static_cast<int8_t>(s < 127 ? s : 127);
        }
        const float dh = ember_half_to_float(b.d);
        for (int j = 0; j < kNumSub; j++) {
            const float d = dh * static_cast<float>(b.scales[j]);
            if (d == 0.0f) continue;
            for (int i = j * kSubBlock; i < (j + 1) * kSubBlock; i++) {
                L[i] = static_cast<int8_t>(clamp_int(nearest_int(x[i] / d), -32, 31) + 32);
            }
        }
        // pack: see the layout in quant/blocks.h
        for (int half = 0; half < 2; half++) {
            const int8_t * Lh = L + half * 128;
            uint8_t *      ql = b.ql + half * 64;
            uint8_t *      qh = b.qh + half * 32;
            for (int l = 0; l < 32; l++) {
                ql[l]      = static_cast<uint8_t>((Lh[l] & 0x0f) | (Lh[l + 64] & 0x0f) << 4);
                ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0x0f) | (Lh[l + 96] & 0x0f) << 4);
                qh[l]      = static_cast<uint8_t>((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

// Per super-block an exact integer sum, sum_j scales[j] * sum_{i in j} (q_i - 32) * y_i (at most
// 256 * 128 * 32 * 127 < 2^31 in magnitude), then one float multiply-add:
// s += (d_x * d_y) * sumi.
void ember_ref_vec_dot_Q6_K(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q6_k * a   = static_cast<const ember_block_q6_k *>(x);
    const ember_block_q8_k * b   = static_cast<const ember_block_q8_k *>(y);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int8_t q[EMBER_QK_K];
        q6k_unpack(a[ib], q);
        int32_t sumi = 0;
        for (int j = 0; j < kNumSub; j++) {
            int32_t sub = 0;
            for (int i = j * kSubBlock; i < (j + 1) * kSubBlock; i++) sub += q[i] * b[ib].qs[i];
            sumi += a[ib].scales[j] * sub;
        }
        sum += (ember_half_to_float(a[ib].d) * b[ib].d) * static_cast<float>(sumi);
    }
    *s = sum;
}

//
// Q8_K
//
void ember_ref_to_float_Q8_K(const void * src, float * dst, int64_t n) {
    const ember_block_q8_k * b = static_cast<const ember_block_q8_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        for (int i = 0; i < EMBER_QK_K; i++) dst[ib * EMBER_QK_K + i] = b[ib].d * static_cast<float>(b[ib].qs[i]);
    }
}

// The signed value of largest magnitude, max, maps to -127: iscale = -127 / max, q =
// min(127, round(x * iscale)) (ties to even), d = 1 / iscale (so d < 0 when max > 0).
// bsums[j] = sum of the 16 levels of group j. An all-zero block is all zero.
void ember_ref_from_float_Q8_K(const float * src, void * dst, int64_t n) {
    ember_block_q8_k * blocks = static_cast<ember_block_q8_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      x = src + ib * EMBER_QK_K;
        ember_block_q8_k & b = blocks[ib];
        float              amax;
        const float        max = signed_absmax(EMBER_QK_K, x, amax);
        if (amax == 0.0f) {
            std::memset(&b, 0, sizeof(b));  // ggml leaves bsums unwritten here; zero is their value
            continue;
        }
        const float iscale = -127.0f / max;
        for (int i = 0; i < EMBER_QK_K; i++) {
            const int q = nearest_int(iscale * x[i]);  // in [-127, 127]: |x| <= |max|
            b.qs[i]     = static_cast<int8_t>(q < 127 ? q : 127);
        }
        for (int j = 0; j < kNumSub; j++) {
            int sum = 0;
            for (int i = j * kSubBlock; i < (j + 1) * kSubBlock; i++) sum += b.qs[i];
            b.bsums[j] = static_cast<int16_t>(sum);
        }
        b.d = 1.0f / iscale;
    }
}
