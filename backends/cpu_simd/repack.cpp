// R16 repacking (layouts in repack.h) and its portable product.
#include "repack.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant/blocks.h"

namespace {

constexpr int64_t R = EMBER_CPU_REPACK_ROWS;

// Bytes of one group's block column, and of its 4-byte lanes' part.
constexpr size_t k_q4_col = R * sizeof(ember_block_q4_0);  // 288
constexpr size_t k_q8_col = R * sizeof(ember_block_q8_0);  // 544

// Read at every call (model loads are rare), so a program may switch it between loads.
bool repack_enabled() {
    const char * v = std::getenv("EMBER_CPU_REPACK");
    return !(v && std::strcmp(v, "0") == 0);
}

// Moves one block column between 16 plain blocks and the R16 layout. n_lanes is 4 (Q4_0) or
// 8 (Q8_0); flip is XOR-ed into every byte (0x80 turns int8 into int8 + 128 and back).
template <typename B>
void col_to_r16(const B * const * rows, int64_t b, uint8_t * out, int n_lanes, uint8_t flip) {
    ember_half * d = reinterpret_cast<ember_half *>(out);
    uint8_t *    q = out + R * sizeof(ember_half);
    for (int64_t r = 0; r < R; r++) {
        const B & blk = rows[r][b];
        d[r]          = blk.d;
        for (int c = 0; c < n_lanes; c++) {
            for (int j = 0; j < 4; j++) q[(c * R + r) * 4 + j] = static_cast<uint8_t>(blk.qs[4 * c + j] ^ flip);
        }
    }
}

template <typename B>
void col_from_r16(const uint8_t * in, int64_t b, B * const * rows, int n_lanes, uint8_t flip) {
    const ember_half * d = reinterpret_cast<const ember_half *>(in);
    const uint8_t *    q = in + R * sizeof(ember_half);
    for (int64_t r = 0; r < R; r++) {
        B & blk = rows[r][b];
        blk.d   = d[r];
        for (int c = 0; c < n_lanes; c++) {
            for (int j = 0; j < 4; j++) {
                const uint8_t v = static_cast<uint8_t>(q[(c * R + r) * 4 + j] ^ flip);
                std::memcpy(&blk.qs[4 * c + j], &v, 1);
            }
        }
    }
}

template <typename B>
void repack_groups(int64_t k, int64_t ng, const uint8_t * src, uint8_t * dst, bool to_r16, int n_lanes, uint8_t flip) {
    const int64_t nb       = k / 32;
    const size_t  row_size = static_cast<size_t>(nb) * sizeof(B);
    const size_t  col      = R * sizeof(B);
    for (int64_t g = 0; g < ng; g++) {
        if (to_r16) {
            const B * rows[R];
            for (int64_t r = 0; r < R; r++) rows[r] = reinterpret_cast<const B *>(src + (g * R + r) * row_size);
            uint8_t * out = dst + g * R * row_size;
            for (int64_t b = 0; b < nb; b++) col_to_r16(rows, b, out + b * col, n_lanes, flip);
        } else {
            B * rows[R];
            for (int64_t r = 0; r < R; r++) rows[r] = reinterpret_cast<B *>(dst + (g * R + r) * row_size);
            const uint8_t * in = src + g * R * row_size;
            for (int64_t b = 0; b < nb; b++) col_from_r16(in + b * col, b, rows, n_lanes, flip);
        }
    }
}

}  // namespace

bool ember_cpu_repack_wanted(ember_type type, const int64_t ne[4]) {
    if (type != EMBER_TYPE_Q4_0 && type != EMBER_TYPE_Q8_0) return false;
    if (ne[2] != 1 || ne[3] != 1 || ne[1] <= 0 || ne[1] % R != 0 || ne[0] <= 0 || ne[0] % 32 != 0) return false;
    if (!ember_cpu_kernels()->of(type).gemv_r16) return false;
    return repack_enabled();
}

void ember_cpu_repack(ember_type type, int64_t k, int64_t n, const void * src, void * dst) {
    // Group by group through a copy, so src may equal dst (repacking in place).
    const size_t         group = ember_row_size(type, k) * R;
    std::vector<uint8_t> tmp(group);
    for (int64_t g = 0; g < n / R; g++) {
        std::memcpy(tmp.data(), static_cast<const uint8_t *>(src) + g * group, group);
        uint8_t * d = static_cast<uint8_t *>(dst) + g * group;
        if (type == EMBER_TYPE_Q4_0) repack_groups<ember_block_q4_0>(k, 1, tmp.data(), d, true, 4, 0);
        if (type == EMBER_TYPE_Q8_0) repack_groups<ember_block_q8_0>(k, 1, tmp.data(), d, true, 8, 0x80);
    }
}

void ember_cpu_unrepack(ember_type type, int64_t k, int64_t ng, const void * src, void * dst) {
    const uint8_t * s = static_cast<const uint8_t *>(src);
    uint8_t *       d = static_cast<uint8_t *>(dst);
    if (type == EMBER_TYPE_Q4_0) repack_groups<ember_block_q4_0>(k, ng, s, d, false, 4, 0);
    if (type == EMBER_TYPE_Q8_0) repack_groups<ember_block_q8_0>(k, ng, s, d, false, 8, 0x80);
}

void ember_cpu_q8_sums(int64_t k, const void * x, ember_cpu_q8_sum * out) {
    const ember_block_q8_0 * b = static_cast<const ember_block_q8_0 *>(x);
    for (int64_t i = 0; i < k / 32; i++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += b[i].qs[j];
        out[i].d = ember_half_to_float(b[i].d);
        out[i].s = s;
    }
}

void ember_cpu_gemv_r16_ref(ember_type type, int64_t k, const void * w, size_t group_stride, int64_t ng,
                            const void * x, const ember_cpu_q8_sum * xs, float * y) {
    const int64_t            nb   = k / 32;
    const bool               q4   = type == EMBER_TYPE_Q4_0;
    const size_t             col  = q4 ? k_q4_col : k_q8_col;
    const int                nl   = q4 ? 4 : 8;
    const int32_t            off  = q4 ? 8 : 128;
    const ember_block_q8_0 * xb   = static_cast<const ember_block_q8_0 *>(x);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t * gp = static_cast<const uint8_t *>(w) + g * group_stride;
        for (int64_t r = 0; r < R; r++) {
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *    c  = gp + b * col;
                const ember_half * d  = reinterpret_cast<const ember_half *>(c);
                const uint8_t *    q  = c + R * sizeof(ember_half);
                int32_t            is = 0;
                for (int l = 0; l < nl; l++) {
                    for (int j = 0; j < 4; j++) {
                        const int32_t v = q[(l * R + r) * 4 + j];
                        if (q4) {
                            is += (v & 15) * xb[b].qs[4 * l + j] + (v >> 4) * xb[b].qs[16 + 4 * l + j];
                        } else {
                            is += v * xb[b].qs[4 * l + j];
                        }
                    }
                }
                is -= off * xs[b].s;
                sum += ember_half_to_float(d[r]) * xs[b].d * static_cast<float>(is);
            }
            y[g * R + r] = sum;
        }
    }
}
