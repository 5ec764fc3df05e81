// Reference codecs of the K-quants Q2_K, Q3_K, Q4_K and Q5_K (ggml layouts; Q6_K and Q8_K live
// in ref-q6_k.cpp). Their dot products take Q8_K activations.
//
// from_float follows llama.cpp's reference quantizers (what llama-quantize runs when no
// importance matrix is given) step by step, in the same float arithmetic, so that a row
// quantized here has the bytes llama-quantize writes for it (checked against the tiny-llama
// F32 / Q2_K / Q3_K_M / Q4_K_M / Q5_K_M fixtures). Keep every expression's operand order: a
// reordered sum or a fused multiply-add can pick a different candidate scale.
#include <atomic>
#include <cmath>
#include <cstring>

#include "quant/ref/ref-k-common.h"
#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds in this file (a -march with FMA would otherwise let the compiler fuse
// the weighted sums of the scale searches and change which candidate wins).
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

using namespace ember_ref_k;

#if EMBER_REF_SEARCH_VEC
// make_qkx2_quants' candidate search, 8 candidates at a time: lane k of each vector is
// candidate is0 + k, and every lane sums its weights in the reference's order (i = 0 .. n - 1,
// each expression's operands as there), so each candidate gets the reference's bits; they are
// then taken in candidate order with the same strict comparison. A better candidate changes
// min, which the later candidates use, so the search restarts after it (3.9 passes of 8 per
// group on random weights, against 21 / 16 candidates one at a time). One candidate at a time,
// the search waits on the latency of its chains of dependent float additions (3 sums, then the
// error): Q4_K took ~60 ns of CPU time a weight (8B Q4_K_M ~90 s of a device call on 14 threads).
EMBER_REF_SEARCH_TARGET float search_qkx2_vec(int n, int nmax, const float * x, const float * weights, uint8_t * L, float * the_min,
                                              float rmin, float rdelta, int nstep, bool use_mad, float min, float max, float sum_w,
                                              float sum_x, float scale, float best_error) {
    ember_ref_v8f       lev[32];  // the levels of x[i] in the lanes, as floats
    const ember_ref_v8f vzero = {}, vsw = vzero + sum_w, vsx = vzero + sum_x, vtop = vzero + static_cast<float>(nmax);
    for (int is0 = 0; is0 <= nstep;) {
        ember_ref_v8f iscale;
        for (int k = 0; k < 8; k++) iscale[k] = (rmin + rdelta * static_cast<float>(is0 + k) + static_cast<float>(nmax)) / (max - min);
        ember_ref_v8f sum_l = vzero, sum_l2 = vzero, sum_xl = vzero;
        for (int i = 0; i < n; i++) {
            const ember_ref_v8f fl = ember_ref_v8_level(iscale * (x[i] - min), vzero, vtop);  // clamp(nearest_int(.), 0, nmax)
            lev[i]                 = fl;
            const float w          = weights[i];
            sum_l += w * fl;
            sum_l2 += w * fl * fl;
            sum_xl += w * fl * x[i];
        }
        const ember_ref_v8f D          = vsw * sum_l2 - sum_l * sum_l;
        ember_ref_v8f       this_scale = (vsw * sum_xl - vsx * sum_l) / D;
        ember_ref_v8f       this_min   = (sum_l2 * vsx - sum_l * sum_xl) / D;
        const ember_ref_v8i pos        = this_min > 0;
        this_scale                     = pos ? sum_xl / sum_l2 : this_scale;
        this_min                       = pos ? vzero : this_min;
        ember_ref_v8f cur_error        = vzero;
        for (int i = 0; i < n; i++) {
            ember_ref_v8f diff = this_scale * lev[i] + this_min - x[i];
            // |diff| by its bits (casts between vector types keep them), or diff^2
            diff = use_mad ? (ember_ref_v8f)((ember_ref_v8i)diff & 0x7fffffff) : diff * diff;
            cur_error += weights[i] * diff;
        }
        // The reference's candidates after a better one use its min (iscale over max - min and
        // the levels of x - min): the lanes past an update are recomputed from there.
        int next = is0 + 8;
        for (int k = 0; k < 8 && is0 + k <= nstep; k++) {
            if (!(D[k] > 0)) continue;
            if (cur_error[k] < best_error) {
                for (int i = 0; i < n; i++) L[i] = static_cast<uint8_t>(lev[i][k]);
                best_error = cur_error[k];
                scale      = this_scale[k];
                min        = this_min[k];
                next       = is0 + k + 1;
                break;
            }
        }
        is0 = next;
    }
    *the_min = -min;
    return scale;
}
#endif

// Scale and min of one group of n weights for levels [0, nmax], x ~ scale * l - the_min,
// minimising the weighted error (llama.cpp's make_qkx2_quants). The range starts as
// [min(0, min x), max x]; then nstep + 1 candidate step sizes (nmax + rmin + rdelta * k over
// the range) each get the weighted least-squares scale and min of their levels (min clamped to
// <= 0), and replace the best so far when their weighted error (|e| with use_mad, e^2 otherwise)
// is strictly smaller. Writes the levels to L; Laux is scratch of n levels. Returns the scale;
// the_min receives the (non-negative) offset to subtract.
float make_qkx2_quants(int n, int nmax, const float * x, const float * weights, uint8_t * L, float * the_min,
                       uint8_t * Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min   = x[0];
    float max   = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale     = static_cast<float>(nmax) / (max - min);
    float scale      = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i]        = static_cast<uint8_t>(clamp_int(l, 0, nmax));
        float diff  = scale * static_cast<float>(L[i]) + min - x[i];
        diff        = use_mad ? std::fabs(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
#if EMBER_REF_SEARCH_VEC
    if (n <= 32 && ember_ref_vector_search_on()) {
        return search_qkx2_vec(n, nmax, x, weights, L, the_min, rmin, rdelta, nstep, use_mad, min, max, sum_w, sum_x, scale, best_error);
    }
#endif
    for (int is = 0; is <= nstep; is++) {
        iscale      = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i]     = static_cast<uint8_t>(l);
            const float w  = weights[i];
            const float fl = static_cast<float>(l);
            sum_l += w * fl;
            sum_l2 += w * fl * fl;
            sum_xl += w * fl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min   = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min   = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
                diff       = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale      = this_scale;
                min        = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// Scale of one group of n weights for signed levels [-nmax, nmax - 1] (llama.cpp's
// make_q3_quants with do_rmse): the signed value of largest magnitude maps to -nmax, then up
// to 5 passes move single levels to the value that the least-squares scale of the others asks
// for, keeping a move when it raises sumlx^2 / suml2 (weights x^2). Writes the levels offset by
// nmax to L; an all-zero group gets L = 0 (not offset) and scale 0.
float make_q3_quants(int n, int nmax, const float * x, int8_t * L) {
    float       amax;
    const float max = signed_absmax(n, x, amax);
    if (amax < kGroupEps) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = -static_cast<float>(nmax) / max;
    float       sumlx  = 0;
    float       suml2  = 0;
    for (int i = 0; i < n; i++) {
        const int l = signed_level(iscale, x[i], nmax);
        L[i]        = static_cast<int8_t>(l);
        add_x2_weighted(x[i], l, sumlx, suml2);
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w   = x[i] * x[i];
            const float li  = static_cast<float>(L[i]);
            float       slx = sumlx - w * x[i] * li;
            if (slx > 0) {
                float sl2   = suml2 - w * li * li;
                int   new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    const float nl = static_cast<float>(new_l);
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i]  = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; i++) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 256 2-bit levels as Q2_K / Q3_K store their low bits: in each half of 128 weights,
// weight l + 32 k goes to bits 2k..2k+1 of byte l.
template <typename T> void pack_2bit(const T * L, uint8_t * qs) {
    for (int j = 0; j < EMBER_QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
        }
    }
}

// The 2-bit field of weight i in the Q2_K / Q3_K packing.
inline int level_2bit(const uint8_t * qs, int i) {
    const int half = i / 128, r = i % 128;
    return qs[32 * half + r % 32] >> (2 * (r / 32)) & 3;
}

// Q3_K's 6-bit scale j (0..63, stored offset by 32).
inline int q3k_scale(const uint8_t * scales, int j) {
    const int lo = j < 8 ? scales[j] & 0xf : scales[j - 8] >> 4;
    const int hi = scales[8 + j % 4] >> (2 * (j / 4)) & 3;
    return lo | hi << 4;
}

// Q4_K / Q5_K's 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4).
inline void k4_scale_min(const uint8_t * q, int j, int & sc, int & m) {
    if (j < 4) {
        sc = q[j] & 63;
        m  = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4;
        m  = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

// Inverse of k4_scale_min: writes all 12 bytes.
inline void k4_pack_scales(const uint8_t * ls, const uint8_t * lm, uint8_t * q) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j]     = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = static_cast<uint8_t>((ls[j] & 0xf) | (lm[j] & 0xf) << 4);
            q[j - 4] = static_cast<uint8_t>(q[j - 4] | (ls[j] >> 4) << 6);
            q[j]     = static_cast<uint8_t>(q[j] | (lm[j] >> 4) << 6);
        }
    }
}

// The 6-bit code of a non-negative value v against inv = 63 / max: nearest, at most 63. Like
// the reference, a negative rounding wraps through uint8_t (and so saturates at 63).
inline uint8_t code6(float inv, float v) {
    const uint8_t l = static_cast<uint8_t>(nearest_int(inv * v));
    return l < 63 ? l : 63;
}

// Q4_K / Q5_K quantizer shared body: 8 sub-blocks of 32 with weights av_x + |x| (av_x the
// sub-block's RMS), make_qkx2_quants per sub-block, scales and mins coded against their maxima
// (d = max_scale / 63, dmin = max_min / 63), then the levels recomputed against the stored
// d * sc and dmin * m. Returns the 256 levels in L.
void quantize_k4(const float * x, int nmax, float rmin, float rdelta, int nstep, ember_half & d_out,
                 ember_half & dmin_out, uint8_t * scales_out, uint8_t * L) {
    uint8_t Laux[32];
    float   weights[32];
    float   mins[8];
    float   scales[8];
    float   max_scale = 0;  // the mins are subtracted, so scales are (normally) positive
    float   max_min   = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min   = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t     ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = code6(inv_scale, scales[j]);
        lm[j] = code6(inv_min, mins[j]);
    }
    k4_pack_scales(ls, lm, scales_out);
    d_out    = ember_float_to_half(max_scale / 63.0f);
    dmin_out = ember_float_to_half(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(scales_out, j, sc, m);
        const float d = ember_half_to_float(d_out) * static_cast<float>(sc);
        if (d == 0.0f) continue;
        const float dm = ember_half_to_float(dmin_out) * static_cast<float>(m);
        for (int ii = 0; ii < 32; ii++) {
            L[32 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
        }
    }
}

// Levels of a Q4_K / Q5_K block in weight order: each 64 weights share 32 bytes of qs (low
// nibbles first); for Q5_K bit 4 of weight i is bit i / 32 of qh[i % 32].
inline void k4_unpack(const uint8_t * qs, const uint8_t * qh, int * q) {
    for (int i = 0; i < EMBER_QK_K; i++) {
        const int byte = qs[32 * (i / 64) + i % 32];
        q[i]           = (i % 64) < 32 ? byte & 0xf : byte >> 4;
        if (qh) q[i] |= (qh[i % 32] >> (i / 32) & 1) << 4;
    }
}

// Dequantizes a Q4_K / Q5_K block from its unpacked levels: d * sc * q - dmin * m.
inline void k4_to_float(ember_half dh, ember_half dminh, const uint8_t * scales, const int * q, float * y) {
    const float d   = ember_half_to_float(dh);
    const float min = ember_half_to_float(dminh);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(scales, j, sc, m);
        const float dl = d * static_cast<float>(sc);
        const float ml = min * static_cast<float>(m);
        for (int i = 32 * j; i < 32 * (j + 1); i++) y[i] = dl * static_cast<float>(q[i]) - ml;
    }
}

// Dot product of a Q4_K / Q5_K block with a Q8_K block: exact integer sums of sc_j * q * y and
// of m_j * bsums (at most 256 * 63 * 31 * 127 < 2^31), then
// (d_x d_y) * sum_sc - (dmin_x d_y) * sum_m.
inline float k4_dot(ember_half dh, ember_half dminh, const uint8_t * scales, const int * q, const ember_block_q8_k & b) {
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(scales, j, sc, m);
        int32_t sub = 0;
        for (int i = 32 * j; i < 32 * (j + 1); i++) sub += q[i] * b.qs[i];
        sumi += sc * sub;
        summ += m * (b.bsums[2 * j] + b.bsums[2 * j + 1]);
    }
    return (ember_half_to_float(dh) * b.d) * static_cast<float>(sumi) -
           (ember_half_to_float(dminh) * b.d) * static_cast<float>(summ);
}

}  // namespace

// The switch of every reference quantizer's vector search (quant/ref/ref.h): the K-quants here
// and in ref-q6_k.cpp, INT4's scoring in ref-int4.cpp.
namespace {
std::atomic<bool> g_vector_search_off{false};
}  // namespace

void ember_ref_vector_search(bool on) { g_vector_search_off.store(!on, std::memory_order_relaxed); }

bool ember_ref_vector_search_on() {
#if EMBER_REF_SEARCH_VEC
    static const bool cpu = EMBER_REF_SEARCH_CPU_OK();  // (after the CPU model is known: not in a static initializer)
    return cpu && !g_vector_search_off.load(std::memory_order_relaxed);
#else
    return false;
#endif
}

//
// Q2_K
//
void ember_ref_to_float_Q2_K(const void * src, float * dst, int64_t n) {
    const ember_block_q2_k * b = static_cast<const ember_block_q2_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float d   = ember_half_to_float(b[ib].d);
        const float min = ember_half_to_float(b[ib].dmin);
        float *     y   = dst + ib * EMBER_QK_K;
        for (int j = 0; j < 16; j++) {
            const float dl = d * static_cast<float>(b[ib].scales[j] & 0xf);
            const float ml = min * static_cast<float>(b[ib].scales[j] >> 4);
            for (int i = 16 * j; i < 16 * (j + 1); i++) y[i] = dl * static_cast<float>(level_2bit(b[ib].qs, i)) - ml;
        }
    }
}

// Per super-block: each 16-weight sub-block gets a scale and min from make_qkx2_quants
// (levels 0..3, weights |x|, mean absolute error, 16 candidates from nmax - 0.5 in steps of 0.1).
// Both are coded in 4 bits against their maxima: scales[j] = round(15 scale_j / max_scale) |
// round(15 min_j / max_min) << 4, d = max_scale / 15, dmin = max_min / 15. The levels are then
// recomputed against the stored d * sc and dmin * m (sub-blocks whose stored scale is 0 keep
// their search's levels).
void ember_ref_from_float_Q2_K(const float * src, void * dst, int64_t n) {
    ember_block_q2_k * blocks = static_cast<ember_block_q2_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      x = src + ib * EMBER_QK_K;
        ember_block_q2_k & b = blocks[ib];
        uint8_t            L[EMBER_QK_K];
        uint8_t            Laux[16];
        float              weights[16];
        float              mins[16];
        float              scales[16];
        float              max_scale = 0;  // the mins are subtracted, so scales are (normally) positive
        float              max_min   = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
            b.d = ember_float_to_half(max_scale / 15.0f);
        } else {
            for (int j = 0; j < 16; j++) b.scales[j] = 0;
            b.d = ember_float_to_half(0.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++) {
                b.scales[j] = static_cast<uint8_t>(b.scales[j] | nearest_int(iscale * mins[j]) << 4);
            }
            b.dmin = ember_float_to_half(max_min / 15.0f);
        } else {
            b.dmin = ember_float_to_half(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = ember_half_to_float(b.d) * static_cast<float>(b.scales[j] & 0xf);
            if (d == 0.0f) continue;
            const float dm = ember_half_to_float(b.dmin) * static_cast<float>(b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                L[16 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
            }
        }
        pack_2bit(L, b.qs);
    }
}

// Per super-block: an exact integer sum of sc_j * q * y (at most 256 * 15 * 3 * 127) and of
// m_j * bsums_j, then (d_x d_y) * sum_sc - (dmin_x d_y) * sum_m.
void ember_ref_vec_dot_Q2_K(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q2_k * a   = static_cast<const ember_block_q2_k *>(x);
    const ember_block_q8_k * b   = static_cast<const ember_block_q8_k *>(y);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sub = 0;
            for (int i = 16 * j; i < 16 * (j + 1); i++) sub += level_2bit(a[ib].qs, i) * b[ib].qs[i];
            sumi += (a[ib].scales[j] & 0xf) * sub;
            summ += (a[ib].scales[j] >> 4) * b[ib].bsums[j];
        }
        sum += (ember_half_to_float(a[ib].d) * b[ib].d) * static_cast<float>(sumi) -
               (ember_half_to_float(a[ib].dmin) * b[ib].d) * static_cast<float>(summ);
    }
    *s = sum;
}

//
// Q3_K
//
void ember_ref_to_float_Q3_K(const void * src, float * dst, int64_t n) {
    const ember_block_q3_k * b = static_cast<const ember_block_q3_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float d = ember_half_to_float(b[ib].d);
        float *     y = dst + ib * EMBER_QK_K;
        for (int j = 0; j < 16; j++) {
            const float dl = d * static_cast<float>(q3k_scale(b[ib].scales, j) - 32);
            for (int i = 16 * j; i < 16 * (j + 1); i++) {
                const int hi = b[ib].hmask[i % 32] >> (i / 32) & 1;
                y[i]         = dl * static_cast<float>(level_2bit(b[ib].qs, i) - (hi ? 0 : 4));
            }
        }
    }
}

// Per super-block: each 16-weight sub-block gets a signed scale from make_q3_quants (levels
// -4..3). The scale of largest magnitude, kept with its sign, maps to -32: d = scale_max / -32
// and s_j = clamp(round(-32 scale_j / scale_max), -32, 31) + 32. The levels are then recomputed
// against the stored d * (s_j - 32), clamped to -4..3 (a sub-block whose stored scale is 0 keeps
// its search's levels).
void ember_ref_from_float_Q3_K(const float * src, void * dst, int64_t n) {
    ember_block_q3_k * blocks = static_cast<ember_block_q3_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        const float *      x = src + ib * EMBER_QK_K;
        ember_block_q3_k & b = blocks[ib];
        int8_t             L[EMBER_QK_K];
        float              scales[16];
        for (int j = 0; j < 16; j++) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
        float       amax;
        const float max_scale = signed_absmax(16, scales, amax);
        std::memset(b.scales, 0, sizeof(b.scales));
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    b.scales[j] = static_cast<uint8_t>(l & 0xf);
                } else {
                    b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | (l & 0xf) << 4);
                }
                b.scales[j % 4 + 8] = static_cast<uint8_t>(b.scales[j % 4 + 8] | (l >> 4) << (2 * (j / 4)));
            }
            b.d = ember_float_to_half(1 / iscale);
        } else {
            b.d = ember_float_to_half(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = ember_half_to_float(b.d) * static_cast<float>(q3k_scale(b.scales, j) - 32);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++) {
                L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
            }
        }
        // the high bit of weight i goes to bit i / 32 of hmask[i % 32]; the low 2 bits as Q2_K
        std::memset(b.hmask, 0, sizeof(b.hmask));
        for (int i = 0; i < EMBER_QK_K; i++) {
            if (L[i] > 3) {
                b.hmask[i % 32] = static_cast<uint8_t>(b.hmask[i % 32] | 1 << (i / 32));
                L[i] = static_cast<int8_t>(L[i] - 4);
            }
        }
        pack_2bit(L, b.qs);
    }
}

// Per super-block an exact integer sum, sum_j (s_j - 32) * sum_{i in j} (q_i - 4) * y_i (at most
// 256 * 32 * 4 * 127 in magnitude), then s += (d_x * d_y) * sumi.
void ember_ref_vec_dot_Q3_K(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q3_k * a   = static_cast<const ember_block_q3_k *>(x);
    const ember_block_q8_k * b   = static_cast<const ember_block_q8_k *>(y);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sub = 0;
            for (int i = 16 * j; i < 16 * (j + 1); i++) {
                const int hi = a[ib].hmask[i % 32] >> (i / 32) & 1;
                sub += (level_2bit(a[ib].qs, i) - (hi ? 0 : 4)) * b[ib].qs[i];
            }
            sumi += (q3k_scale(a[ib].scales, j) - 32) * sub;
        }
        sum += (ember_half_to_float(a[ib].d) * b[ib].d) * static_cast<float>(sumi);
    }
    *s = sum;
}

//
// Q4_K
//
void ember_ref_to_float_Q4_K(const void * src, float * dst, int64_t n) {
    const ember_block_q4_k * b = static_cast<const ember_block_q4_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int q[EMBER_QK_K];
        k4_unpack(b[ib].qs, nullptr, q);
        k4_to_float(b[ib].d, b[ib].dmin, b[ib].scales, q, dst + ib * EMBER_QK_K);
    }
}

// See quantize_k4: levels 0..15, 21 candidates from nmax - 1 in steps of 0.1.
void ember_ref_from_float_Q4_K(const float * src, void * dst, int64_t n) {
    ember_block_q4_k * blocks = static_cast<ember_block_q4_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        ember_block_q4_k & b = blocks[ib];
        uint8_t            L[EMBER_QK_K];
        quantize_k4(src + ib * EMBER_QK_K, 15, -1.0f, 0.1f, 20, b.d, b.dmin, b.scales, L);
        for (int j = 0; j < EMBER_QK_K; j += 64) {
            for (int l = 0; l < 32; l++) b.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
        }
    }
}

void ember_ref_vec_dot_Q4_K(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q4_k * a   = static_cast<const ember_block_q4_k *>(x);
    const ember_block_q8_k * b   = static_cast<const ember_block_q8_k *>(y);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int q[EMBER_QK_K];
        k4_unpack(a[ib].qs, nullptr, q);
        sum += k4_dot(a[ib].d, a[ib].dmin, a[ib].scales, q, b[ib]);
    }
    *s = sum;
}

//
// Q5_K
//
void ember_ref_to_float_Q5_K(const void * src, float * dst, int64_t n) {
    const ember_block_q5_k * b = static_cast<const ember_block_q5_k *>(src);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int q[EMBER_QK_K];
        k4_unpack(b[ib].qs, b[ib].qh, q);
        k4_to_float(b[ib].d, b[ib].dmin, b[ib].scales, q, dst + ib * EMBER_QK_K);
    }
}

// See quantize_k4: levels 0..31, 16 candidates from nmax - 0.5 in steps of 0.1.
void ember_ref_from_float_Q5_K(const float * src, void * dst, int64_t n) {
    ember_block_q5_k * blocks = static_cast<ember_block_q5_k *>(dst);
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        ember_block_q5_k & b = blocks[ib];
        uint8_t            L[EMBER_QK_K];
        quantize_k4(src + ib * EMBER_QK_K, 31, -0.5f, 0.1f, 15, b.d, b.dmin, b.scales, L);
        std::memset(b.qh, 0, sizeof(b.qh));
        for (int i = 0; i < EMBER_QK_K; i++) {
            if (L[i] > 15) b.qh[i % 32] = static_cast<uint8_t>(b.qh[i % 32] | 1 << (i / 32));
        }
        for (int j = 0; j < EMBER_QK_K; j += 64) {
            for (int l = 0; l < 32; l++) {
                b.qs[j / 2 + l] = static_cast<uint8_t>((L[j + l] & 0xf) | (L[j + l + 32] & 0xf) << 4);
            }
        }
    }
}

void ember_ref_vec_dot_Q5_K(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q5_k * a   = static_cast<const ember_block_q5_k *>(x);
    const ember_block_q8_k * b   = static_cast<const ember_block_q8_k *>(y);
    float                    sum = 0.0f;
    for (int64_t ib = 0; ib < n / EMBER_QK_K; ib++) {
        int q[EMBER_QK_K];
        k4_unpack(a[ib].qs, a[ib].qh, q);
        sum += k4_dot(a[ib].d, a[ib].dmin, a[ib].scales, q, b[ib]);
    }
    *s = sum;
}
