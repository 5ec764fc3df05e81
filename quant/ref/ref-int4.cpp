// Reference codecs of Ember's INT4 types (docs/quant-types.md): 4-bit integers q in 0..15 in
// groups of 128 (INT4) or 32 (INT4_G32) weights, with an fp16 scale d and an fp16 zero-point z
// per group: w = d * (q - z). Activations are Q8_1.
//
// Quantization (AWQ-style): per group, minimise the importance-weighted squared error
//   E = sum_i imp_i * (x_i - d * (q_i - z))^2
// where imp is the importance vector (mean squared activation of each input column, as in
// llama.cpp's imatrix): for a linear layer this is the expected output error the group causes,
// taken column by column. Without importance every weight counts the same (imp_i = 1: the
// plain mean squared error). Negative or NaN importances count as 0; a group whose
// importances are all 0 falls back to uniform weights.
//   1. Candidates: plain min/max rounding (d = (max - min) / 15, z = round(-min / d)), then a
//      grid of clipping ratios r = 1, 0.95, ..., 0.5 (AWQ's auto_clip: the range is clipped to
//      [-r amax, r amax] around zero, intersected with [min, max]) with d = (hi - lo) / 15 and
//      both z = -lo / d (the clipped range maps onto the 16 levels) and its nearest integer
//      (a level sits on 0 exactly). A grid twice as fine gained < 1% in error at half the speed.
//   2. Refinement from the best candidate: with the levels q fixed, the weighted least-squares
//      (d, m) of x ~ d * q + m gives d and z = -m / d; the levels are then re-chosen. Kept while
//      it lowers E, at most k_refine times.
// Every candidate is scored exactly as stored: d and z rounded to fp16, each q the nearest
// level clamp(round(x / d + z), 0, 15) for that (d, z).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds: the dequantized values must round as written.
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

constexpr int k_grid   = 10;  // clipping ratios 1 - 0.5 * i / k_grid, i = 0..k_grid
constexpr int k_refine = 4;

// Block layout shared by both group sizes: d, z, then G / 2 bytes of nibbles.
struct int4_view {
    uint8_t * p;
    void      set(ember_half d, ember_half z) {
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &z, 2);
    }
};

inline float half_round(float v) { return ember_half_to_float(ember_float_to_half(v)); }

// Nearest level of x for (d, z) (both as stored); d == 0: every level dequantizes to 0.
inline int level(float x, float id, float z) {
    float v = x * id + z;
    v       = v > -1.0f ? v : -1.0f;  // NaN -> -1; keeps nearest_int in range
    v       = v < 16.0f ? v : 16.0f;
    return ember_ref_clamp_int(ember_ref_nearest_int(v), 0, 15);
}

struct candidate {
    float d = 0, z = 0;  // as stored (fp16 values)
    float err = INFINITY;
};

// Scores (d, z) after fp16 rounding into c (the error of its levels, not written: fill_levels
// writes the winner's). xc is x with non-finite values replaced by 0 (their weight w is 0):
// they take a level but no part in the error. The error is summed in float, in 8 interleaved
// partial sums (element i into sum i % 8, added pairwise at the end), so the loop runs on vector
// registers instead of one chain of dependent additions: candidates differ by far more than its
// rounding. G is a multiple of 32. With GCC / Clang the loop is written with vector types of 8
// (the compiler does not vectorize the selects and the ordered sums by itself; on x86 compiled
// for AVX2 where the CPU has it), the same sums as the scalar loop below.
struct score_in {
    float d, z, id, zz;
};
score_in score_setup(float d_in, float z_in) {
    score_in s;
    s.d  = half_round(d_in);
    s.z  = half_round(z_in);
    s.id = s.d != 0.0f ? 1.0f / s.d : 0.0f;
    s.zz = s.d != 0.0f ? s.z : -1.0f;  // d == 0: x * 0 - 1 is -1 or NaN, both level 0
    return s;
}

#if EMBER_REF_SEARCH_VEC
EMBER_REF_SEARCH_TARGET void score_parts_vec(const float * x, const float * xc, const float * w, int G, const score_in & s,
                                             float * part) {
    typedef ember_ref_v8f v8f;
    const v8f vzero = {}, vid = vzero + s.id, vzz = vzero + s.zz, vz = vzero + s.z, vd = vzero + s.d;
    const v8f lo = vzero - 1.0f, hi = vzero + 16.0f, top = vzero + 15.0f;
    v8f       acc = vzero;
    for (int i = 0; i < G; i += 8) {
        v8f xv, wv, cv;
        std::memcpy(&xv, x + i, sizeof(xv));
        std::memcpy(&wv, w + i, sizeof(wv));
        std::memcpy(&cv, xc + i, sizeof(cv));
        // clamp(nearest_int(v), 0, 15) as a float: v clamped to [-1, 16] (NaN -> -1; keeps the
        // rounding in range) and rounded, then clamped
        v8f l = ember_ref_v8_level(xv * vid + vzz, lo, hi);
        l     = l > vzero ? l : vzero;
        l     = l < top ? l : top;
        const v8f e = cv - vd * (l - vz);
        acc += wv * e * e;
    }
    for (int k = 0; k < 8; k++) part[k] = acc[k];
}
#endif

float score(const float * x, const float * xc, const float * w, int G, float d_in, float z_in, candidate & c) {
    const score_in s = score_setup(d_in, z_in);
    float          part[8];
#if EMBER_REF_SEARCH_VEC
    if (ember_ref_vector_search_on()) {
        score_parts_vec(x, xc, w, G, s, part);
    } else
#endif
    {
        for (float & p : part) p = 0.0f;
        for (int i = 0; i < G; i++) {
            const int   l   = level(x[i], s.id, s.zz);
            const float deq = s.d * (static_cast<float>(l) - s.z);
            const float e   = xc[i] - deq;
            part[i % 8] += w[i] * e * e;
        }
    }
    const float err = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    c.d   = s.d;
    c.z   = s.z;
    c.err = std::isnan(err) ? INFINITY : err;
    return c.err;
}

// The levels of candidate c (as score made them) into q.
void fill_levels(const float * x, int G, const candidate & c, uint8_t * q) {
    const score_in s = score_setup(c.d, c.z);  // c.d, c.z are fp16 values: the same again
    for (int i = 0; i < G; i++) q[i] = static_cast<uint8_t>(level(x[i], s.id, s.zz));
}

// The search of the file comment for one group of G weights; q receives the levels.
void quantize_group(const float * x, const float * imp, int G, ember_half & dh, ember_half & zh, uint8_t * q) {
    float  w[128], xc[128];
    double wsum = 0.0;
    for (int i = 0; i < G; i++) {
        const float v = imp ? imp[i] : 1.0f;
        w[i]          = v > 0.0f && v <= FLT_MAX ? v : 0.0f;
        wsum += w[i];
    }
    if (!(wsum > 0.0)) {
        for (int i = 0; i < G; i++) w[i] = 1.0f;
    }
    for (int i = 0; i < G; i++) {  // NaN / inf: clamped to an end of the range, not scored
        const bool finite = std::fabs(x[i]) <= FLT_MAX;
        xc[i]             = finite ? x[i] : 0.0f;
        if (!finite) w[i] = 0.0f;
    }

    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int i = 0; i < G; i++) {
        if (!(std::fabs(x[i]) <= FLT_MAX)) continue;  // NaN / inf take no part in the range
        mn = std::fmin(mn, x[i]);
        mx = std::fmax(mx, x[i]);
    }
    if (mn > mx) mn = mx = 0.0f;  // nothing finite
    if (mn == mx) {
        // Constant group: d = the value, z = -1, q = 0 gives d * 1 = the value (fp16-rounded).
        dh = ember_float_to_half(mx);
        zh = ember_float_to_half(mx != 0.0f ? -1.0f : 0.0f);
        std::memset(q, 0, static_cast<size_t>(G));
        return;
    }

    candidate best, c;
    score(x, xc, w, G, 0.0f, 0.0f, best);  // all zero: the fallback every candidate must beat
    const float amax = std::fmax(-mn, mx);
    {   // plain min/max rounding: integer zero-point
        const float d = (mx - mn) / 15.0f;
        if (score(x, xc, w, G, d, std::nearbyint(-mn / half_round(d)), c) < best.err) best = c;
    }
    for (int i = 0; i <= k_grid; i++) {
        const float r  = 1.0f - 0.5f * static_cast<float>(i) / k_grid;
        const float lo = std::fmax(mn, -r * amax);
        const float hi = std::fmin(mx, r * amax);
        if (!(hi > lo)) continue;
        const float d = (hi - lo) / 15.0f;
        const float dr = half_round(d);
        if (dr == 0.0f) continue;
        // z = -lo / d puts lo on level 0; its integer neighbour keeps a level on 0 exactly
        for (const float z : {-lo / dr, std::nearbyint(-lo / dr)}) {
            if (score(x, xc, w, G, d, z, c) < best.err) best = c;
        }
    }
    fill_levels(x, G, best, q);  // the best candidate's levels (the refinement starts from them)
    for (int it = 0; it < k_refine && best.err > 0.0f; it++) {
        double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < G; i++) {
            const double wi = w[i], qi = q[i];
            sw += wi;
            sq += wi * qi;
            sqq += wi * qi * qi;
            sx += wi * xc[i];
            sqx += wi * qi * xc[i];
        }
        const double det = sw * sqq - sq * sq;
        if (!(det > 0.0)) break;
        const double a = (sw * sqx - sq * sx) / det;
        const double m = (sqq * sx - sq * sqx) / det;
        if (!(a > 0.0)) break;
        if (!(score(x, xc, w, G, static_cast<float>(a), static_cast<float>(-m / a), c) < best.err)) break;
        best = c;
        fill_levels(x, G, best, q);
    }
    dh = ember_float_to_half(best.d);  // exact: best.d is an fp16 value
    zh = ember_float_to_half(best.z);
}

// Block size in bytes for group size G.
constexpr size_t block_bytes(int G) { return 4 + static_cast<size_t>(G) / 2; }

// Packs G levels: in each 32-run j, byte 16 j + i holds weight 32 j + i (low) and 32 j + 16 + i (high).
void pack(const uint8_t * q, int G, uint8_t * qs) {
    for (int j = 0; j < G / 32; j++) {
        for (int i = 0; i < 16; i++) qs[16 * j + i] = static_cast<uint8_t>(q[32 * j + i] | q[32 * j + 16 + i] << 4);
    }
}

void quantize_rows(int G, const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * imp) {
    uint8_t * out = static_cast<uint8_t *>(dst);
    uint8_t   q[128];
    for (int64_t r = 0; r < nrows; r++) {
        for (int64_t g = 0; g < n_per_row / G; g++) {
            ember_half d, z;
            quantize_group(src + r * n_per_row + g * G, imp ? imp + g * G : nullptr, G, d, z, q);
            int4_view b{out};
            b.set(d, z);
            pack(q, G, out + 4);
            out += block_bytes(G);
        }
    }
}

void to_float_groups(int G, const void * src, float * dst, int64_t n) {
    const uint8_t * b = static_cast<const uint8_t *>(src);
    for (int64_t g = 0; g < n / G; g++, b += block_bytes(G)) {
        ember_half dh, zh;
        std::memcpy(&dh, b, 2);
        std::memcpy(&zh, b + 2, 2);
        const float     d  = ember_half_to_float(dh);
        const float     z  = ember_half_to_float(zh);
        const uint8_t * qs = b + 4;
        float *         y  = dst + g * G;
        for (int j = 0; j < G / 32; j++) {
            for (int i = 0; i < 16; i++) {
                y[32 * j + i]      = d * (static_cast<float>(qs[16 * j + i] & 0x0f) - z);
                y[32 * j + 16 + i] = d * (static_cast<float>(qs[16 * j + i] >> 4) - z);
            }
        }
    }
}

// y: Q8_1 (G / 32 blocks per group). d (q - z) . d8 q8 = d d8 (sum q q8 - z sum q8); sum q8 is
// taken from the integers (exact), not from Q8_1's fp16 s, so this is the dot product of the
// dequantized operands up to float rounding.
void vec_dot_groups(int G, int64_t n, float * s, const void * x, const void * y) {
    const uint8_t *          b   = static_cast<const uint8_t *>(x);
    const ember_block_q8_1 * q8  = static_cast<const ember_block_q8_1 *>(y);
    float                    sum = 0.0f;
    for (int64_t g = 0; g < n / G; g++, b += block_bytes(G)) {
        ember_half dh, zh;
        std::memcpy(&dh, b, 2);
        std::memcpy(&zh, b + 2, 2);
        const float     d  = ember_half_to_float(dh);
        const double    z  = ember_half_to_float(zh);
        const uint8_t * qs = b + 4;
        for (int j = 0; j < G / 32; j++) {
            const ember_block_q8_1 & yb   = q8[g * (G / 32) + j];
            int32_t                  sumi = 0, sumy = 0;
            for (int i = 0; i < 16; i++) {
                sumi += (qs[16 * j + i] & 0x0f) * yb.qs[i] + (qs[16 * j + i] >> 4) * yb.qs[16 + i];
                sumy += yb.qs[i] + yb.qs[16 + i];
            }
            sum += d * ember_half_to_float(yb.d) * static_cast<float>(sumi - z * sumy);
        }
    }
    *s = sum;
}

}  // namespace

void ember_ref_quantize_INT4(const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * imp) {
    quantize_rows(128, src, dst, nrows, n_per_row, imp);
}
void ember_ref_from_float_INT4(const float * src, void * dst, int64_t n) { quantize_rows(128, src, dst, 1, n, nullptr); }
void ember_ref_to_float_INT4(const void * src, float * dst, int64_t n) { to_float_groups(128, src, dst, n); }
void ember_ref_vec_dot_INT4(int64_t n, float * s, const void * x, const void * y) { vec_dot_groups(128, n, s, x, y); }

void ember_ref_quantize_INT4_G32(const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * imp) {
    quantize_rows(32, src, dst, nrows, n_per_row, imp);
}
void ember_ref_from_float_INT4_G32(const float * src, void * dst, int64_t n) { quantize_rows(32, src, dst, 1, n, nullptr); }
void ember_ref_to_float_INT4_G32(const void * src, float * dst, int64_t n) { to_float_groups(32, src, dst, n); }
void ember_ref_vec_dot_INT4_G32(int64_t n, float * s, const void * x, const void * y) { vec_dot_groups(32, n, s, x, y); }

static_assert(sizeof(ember_block_int4) == block_bytes(128), "INT4 block: d, z, 64 bytes of nibbles");
static_assert(sizeof(ember_block_int4_g32) == block_bytes(32), "INT4_G32 block: d, z, 16 bytes of nibbles");
