// Reference codec of NF4 (docs/quant-types.md): QLoRA's 4-bit NormalFloat with blocks of 64
// weights and double-quantized block scales, as bitsandbytes' quantize_4bit(quant_type="nf4",
// blocksize=64, compress_statistics=True) defines them:
//   w = NF4[q] * absmax,  absmax = DYN[absmax_q] * scale2 + offset
// where NF4 is the 16-value codebook below, DYN is bitsandbytes' create_dynamic_map(signed=True)
// (256 values in [-1, 1]), and scale2 / offset are fp32. bitsandbytes takes offset as the mean
// absmax of the whole tensor and one scale2 per 256 absmaxes; here both live in the row-group
// header, one pair per group of up to 256 blocks of a row, so that every row is self-contained
// (rows can be dequantized, sliced and written one at a time).
//
// Encoding: absmax = max |x| per block; offset = mean of the group's absmaxes; scale2 = max
// |absmax - offset| over the group; absmax_q = the DYN entry nearest (absmax - offset) / scale2.
// Each weight then takes the NF4 entry nearest x / absmax' where absmax' is the dequantized
// scale the reader will use (bitsandbytes picks the 4-bit codes against the exact absmax
// before compressing it; this never does worse and decodes identically). Nearest means least
// |difference| in float; ties go to the lower index.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/ref/ref.h"
#include "quant/types.h"

// No fused multiply-adds: DYN's values and DYN * scale2 + offset round as written.
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace {

constexpr int     k_block        = 64;
constexpr int64_t k_group_blocks = EMBER_REF_GROUP_BLOCKS_NF4;  // 256
constexpr size_t  k_header       = EMBER_REF_GROUP_HEADER_NF4;  // fp32 scale2, fp32 offset
static_assert(k_header == 2 * sizeof(float), "NF4 group header: scale2 and offset");

// bitsandbytes' NF4 codebook (functional.py get_4bit_type("nf4")), index order.
constexpr float k_nf4[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};
constexpr int k_nf4_zero = 7;

// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), in the
// float32 arithmetic torch uses: for i = 0..6, boundaries = linspace(0.1, 1, 2^i + 1) (ATen:
// step = (1 - 0.1) / (steps - 1); the first half start + step * j, the second end - step *
// (steps - 1 - j)), means of neighbours (b[j] + b[j+1]) / 2, times +-float(10^(i - 6)); then
// 0 and 1; 256 values, sorted. Index 127 is 0.
struct dynamic_map {
    float v[256];
    dynamic_map() {
        int n = 0;
        for (int i = 0; i < 7; i++) {
            const int   steps = (1 << i) + 1;
            const float start = 0.1f, end = 1.0f;
            const float step  = (end - start) / static_cast<float>(steps - 1);
            float       b[65];
            for (int j = 0; j < steps; j++) {
                b[j] = j < steps / 2 ? start + step * static_cast<float>(j)
                                     : end - step * static_cast<float>(steps - 1 - j);
            }
            const float scale = static_cast<float>(std::pow(10.0, i - 6));
            for (int j = 0; j + 1 < steps; j++) {
                const float mean = (b[j] + b[j + 1]) / 2.0f;
                v[n++]           = scale * mean;
                v[n++]           = -(scale * mean);
            }
        }
        v[n++] = 0.0f;
        v[n++] = 1.0f;
        std::sort(v, v + n);  // n == 256
    }
};

const float * dyn() {
    static const dynamic_map m;
    return m.v;
}
constexpr int k_dyn_zero = 127;

// Index of the entry of the sorted table t[n] nearest v; ties to the lower index; NaN -> `nan`.
int nearest_sorted(const float * t, int n, float v, int nan) {
    if (std::isnan(v)) return nan;
    const int hi = static_cast<int>(std::lower_bound(t, t + n, v) - t);  // first t[hi] >= v
    if (hi == 0) return 0;
    if (hi == n) return n - 1;
    return v - t[hi - 1] <= t[hi] - v ? hi - 1 : hi;
}

inline int nearest_nf4(float v) { return nearest_sorted(k_nf4, 16, v, k_nf4_zero); }

inline float block_absmax(float dyn_v, float scale2, float offset) { return dyn_v * scale2 + offset; }

// Number of row groups and blocks of a row of n weights.
inline int64_t row_blocks(int64_t n) { return n / k_block; }

}  // namespace

void ember_ref_from_float_NF4(const float * src, void * dst, int64_t n) {
    const float * D  = dyn();
    uint8_t *     p  = static_cast<uint8_t *>(dst);
    const int64_t nb = row_blocks(n);
    float         absmax[k_group_blocks];
    for (int64_t g0 = 0; g0 < nb; g0 += k_group_blocks) {
        const int64_t gb = std::min(k_group_blocks, nb - g0);
        double        sum = 0.0;
        for (int64_t j = 0; j < gb; j++) {
            const float * x = src + (g0 + j) * k_block;
            float         a = 0.0f;
            for (int i = 0; i < k_block; i++) a = std::fmax(a, std::fabs(x[i]));
            absmax[j] = a;
            sum += a;
        }
        const float offset = static_cast<float>(sum / static_cast<double>(gb));
        float       scale2 = 0.0f;
        for (int64_t j = 0; j < gb; j++) scale2 = std::fmax(scale2, std::fabs(absmax[j] - offset));
        std::memcpy(p, &scale2, sizeof(float));
        std::memcpy(p + sizeof(float), &offset, sizeof(float));
        ember_block_nf4 * b = reinterpret_cast<ember_block_nf4 *>(p + k_header);
        for (int64_t j = 0; j < gb; j++) {
            const int   aq = scale2 > 0.0f ? nearest_sorted(D, 256, (absmax[j] - offset) / scale2, k_dyn_zero) : k_dyn_zero;
            const float s  = block_absmax(D[aq], scale2, offset);
            const float is = s != 0.0f ? 1.0f / s : 0.0f;
            const float * x = src + (g0 + j) * k_block;
            b[j].absmax_q   = static_cast<uint8_t>(aq);
            for (int i = 0; i < k_block / 2; i++) {
                // x / s as x * (1 / s): one more rounding, but the choice only moves at exact
                // midpoints between codebook entries
                const int lo = is != 0.0f ? nearest_nf4(x[i] * is) : k_nf4_zero;
                const int hi = is != 0.0f ? nearest_nf4(x[i + k_block / 2] * is) : k_nf4_zero;
                b[j].qs[i]   = static_cast<uint8_t>(lo | hi << 4);
            }
        }
        p += k_header + static_cast<size_t>(gb) * sizeof(ember_block_nf4);
    }
}

void ember_ref_to_float_NF4(const void * src, float * dst, int64_t n) {
    const float *   D  = dyn();
    const uint8_t * p  = static_cast<const uint8_t *>(src);
    const int64_t   nb = row_blocks(n);
    for (int64_t g0 = 0; g0 < nb; g0 += k_group_blocks) {
        const int64_t gb = std::min(k_group_blocks, nb - g0);
        float         scale2, offset;
        std::memcpy(&scale2, p, sizeof(float));
        std::memcpy(&offset, p + sizeof(float), sizeof(float));
        const ember_block_nf4 * b = reinterpret_cast<const ember_block_nf4 *>(p + k_header);
        for (int64_t j = 0; j < gb; j++) {
            const float s = block_absmax(D[b[j].absmax_q], scale2, offset);
            float *     y = dst + (g0 + j) * k_block;
            for (int i = 0; i < k_block / 2; i++) {
                y[i]               = k_nf4[b[j].qs[i] & 0x0f] * s;
                y[i + k_block / 2] = k_nf4[b[j].qs[i] >> 4] * s;
            }
        }
        p += k_header + static_cast<size_t>(gb) * sizeof(ember_block_nf4);
    }
}

// y: Q8_0, two 32-blocks per NF4 block (low nibbles with the first, high with the second).
void ember_ref_vec_dot_NF4(int64_t n, float * s, const void * x, const void * y) {
    const float *            D   = dyn();
    const uint8_t *          p   = static_cast<const uint8_t *>(x);
    const ember_block_q8_0 * q8  = static_cast<const ember_block_q8_0 *>(y);
    const int64_t            nb  = row_blocks(n);
    float                    sum = 0.0f;
    for (int64_t g0 = 0; g0 < nb; g0 += k_group_blocks) {
        const int64_t gb = std::min(k_group_blocks, nb - g0);
        float         scale2, offset;
        std::memcpy(&scale2, p, sizeof(float));
        std::memcpy(&offset, p + sizeof(float), sizeof(float));
        const ember_block_nf4 * b = reinterpret_cast<const ember_block_nf4 *>(p + k_header);
        for (int64_t j = 0; j < gb; j++) {
            const ember_block_q8_0 & ya = q8[2 * (g0 + j)];
            const ember_block_q8_0 & yb = q8[2 * (g0 + j) + 1];
            float                    sa = 0.0f, sb = 0.0f;
            for (int i = 0; i < k_block / 2; i++) {
                sa += k_nf4[b[j].qs[i] & 0x0f] * static_cast<float>(ya.qs[i]);
                sb += k_nf4[b[j].qs[i] >> 4] * static_cast<float>(yb.qs[i]);
            }
            const float ab = block_absmax(D[b[j].absmax_q], scale2, offset);
            sum += ab * (sa * ember_half_to_float(ya.d) + sb * ember_half_to_float(yb.d));
        }
        p += k_header + static_cast<size_t>(gb) * sizeof(ember_block_nf4);
    }
    *s = sum;
}

// The tables, for tests and the documentation.
float ember_ref_nf4_value(int q) { return k_nf4[q & 15]; }
float ember_ref_nf4_dynamic_value(int q) { return dyn()[q & 255]; }
