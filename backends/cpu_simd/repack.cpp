// R16 repacking (layouts in repack.h) and its portable product.
//
// Every R16 layout is a list of segments of the original block: a segment is a byte range of
// the block stored for the 16 rows side by side in `width`-byte lanes (2 for fp16 scales, 4
// for everything a 32-bit lane reads), optionally with each byte XOR-ed. Repacking and
// unrepacking walk the same list, so they are inverse by construction.
#include "repack.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant/blocks.h"

namespace {

constexpr int64_t R = EMBER_CPU_REPACK_ROWS;

struct segment {
    int     off, len, width;
    uint8_t flip;
};

struct layout {
    int     block_bytes;  // bytes of one block of the type
    int     block_elems;  // weights per block
    int     n_seg;
    segment seg[4];
};

// The layouts of repack.h, in the order the kernels read them.
const layout * layout_of(ember_type type) {
    static const layout q4_0 = {18, 32, 2, {{0, 2, 2, 0}, {2, 16, 4, 0}}};
    static const layout q8_0 = {34, 32, 2, {{0, 2, 2, 0}, {2, 32, 4, 0x80}}};
    static const layout q4_k = {144, 256, 4, {{0, 2, 2, 0}, {2, 2, 2, 0}, {4, 12, 4, 0}, {16, 128, 4, 0}}};
    static const layout q6_k = {210, 256, 4, {{208, 2, 2, 0}, {192, 16, 4, 0}, {0, 128, 4, 0}, {128, 64, 4, 0}}};
    switch (type) {
        case EMBER_TYPE_Q4_0: return &q4_0;
        case EMBER_TYPE_Q8_0: return &q8_0;
        case EMBER_TYPE_Q4_K: return &q4_k;
        case EMBER_TYPE_Q6_K: return &q6_k;
        default: return nullptr;
    }
}

// One group's block column: 16 plain blocks (row r's at rows[r]) <-> R16 bytes at col. Lanes
// move as whole 2- or 4-byte words (the XOR applied to every byte of a word at once).
template <bool TO_R16>
void column(const layout & L, uint8_t * const * rows, uint8_t * col) {
    size_t pos = 0;
    for (int s = 0; s < L.n_seg; s++) {
        const segment & g  = L.seg[s];
        const int       nc = g.len / g.width;
        if (g.width == 4) {
            const uint32_t flip = 0x01010101u * g.flip;
            for (int c = 0; c < nc; c++) {
                uint8_t * lanes = col + pos + static_cast<size_t>(c) * R * 4;
                for (int64_t r = 0; r < R; r++) {
                    uint8_t * plain = rows[r] + g.off + c * 4;
                    uint32_t  v;
                    if (TO_R16) {
                        std::memcpy(&v, plain, 4);
                        v ^= flip;
                        std::memcpy(lanes + r * 4, &v, 4);
                    } else {
                        std::memcpy(&v, lanes + r * 4, 4);
                        v ^= flip;
                        std::memcpy(plain, &v, 4);
                    }
                }
            }
        } else {  // width 2: fp16 scales, never flipped
            for (int c = 0; c < nc; c++) {
                uint8_t * lanes = col + pos + static_cast<size_t>(c) * R * 2;
                for (int64_t r = 0; r < R; r++) {
                    uint8_t * plain = rows[r] + g.off + c * 2;
                    if (TO_R16) {
                        std::memcpy(lanes + r * 2, plain, 2);
                    } else {
                        std::memcpy(plain, lanes + r * 2, 2);
                    }
                }
            }
        }
        pos += static_cast<size_t>(g.len) * R;
    }
}

// ng groups of 16 rows of k weights: plain rows at `plain`, R16 groups at `packed`.
void groups(const layout & L, int64_t k, int64_t ng, uint8_t * plain, uint8_t * packed, bool to_r16) {
    const int64_t nb       = k / L.block_elems;
    const size_t  row_size = static_cast<size_t>(nb) * L.block_bytes;
    for (int64_t g = 0; g < ng; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t * rows[R];
            for (int64_t r = 0; r < R; r++) rows[r] = plain + (g * R + r) * row_size + b * L.block_bytes;
            uint8_t * col = packed + g * R * row_size + b * R * L.block_bytes;
            if (to_r16) {
                column<true>(L, rows, col);
            } else {
                column<false>(L, rows, col);
            }
        }
    }
}

// Read at every call (model loads are rare), so a program may switch it between loads.
bool repack_enabled() {
    const char * v = std::getenv("EMBER_CPU_REPACK");
    return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace

bool ember_cpu_repack_wanted(ember_type type, const int64_t ne[4]) {
    const layout * L = layout_of(type);
    if (!L) return false;
    if (ne[2] != 1 || ne[3] != 1 || ne[1] <= 0 || ne[1] % R != 0 || ne[0] <= 0 || ne[0] % L->block_elems != 0) return false;
    if (!ember_cpu_kernels()->of(type).gemv_r16) return false;
    return repack_enabled();
}

bool ember_cpu_repack_has_layout(ember_type type) {
    return layout_of(type) != nullptr;
}

void ember_cpu_repack(ember_type type, int64_t k, int64_t n, const void * src, void * dst) {
    const layout * L = layout_of(type);
    if (!L) return;
    // Group by group through a copy, so src may equal dst (repacking in place).
    const size_t         group = ember_row_size(type, k) * R;
    std::vector<uint8_t> tmp(group);
    for (int64_t g = 0; g < n / R; g++) {
        std::memcpy(tmp.data(), static_cast<const uint8_t *>(src) + g * group, group);
        groups(*L, k, 1, tmp.data(), static_cast<uint8_t *>(dst) + g * group, true);
    }
}

void ember_cpu_unrepack(ember_type type, int64_t k, int64_t ng, const void * src, void * dst) {
    const layout * L = layout_of(type);
    if (!L) return;
    groups(*L, k, ng, static_cast<uint8_t *>(dst), const_cast<uint8_t *>(static_cast<const uint8_t *>(src)), false);
}

void ember_cpu_unrepack_row(ember_type type, int64_t k, const void * group, int64_t r, void * dst) {
    const layout * L = layout_of(type);
    if (!L || r < 0 || r >= R) return;
    const int64_t   nb = k / L->block_elems;
    const uint8_t * in = static_cast<const uint8_t *>(group);
    uint8_t *       out = static_cast<uint8_t *>(dst);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t * col = in + b * R * L->block_bytes;
        uint8_t *       blk = out + b * L->block_bytes;
        size_t          pos = 0;
        for (int s = 0; s < L->n_seg; s++) {
            const segment & g = L->seg[s];
            for (int c = 0; c < g.len / g.width; c++) {
                const uint8_t * lane = col + pos + (static_cast<size_t>(c) * R + r) * g.width;
                for (int j = 0; j < g.width; j++) blk[g.off + c * g.width + j] = lane[j] ^ g.flip;
            }
            pos += static_cast<size_t>(g.len) * R;
        }
    }
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
                            const void * x, const ember_cpu_q8_sum *, float * y) {
    const size_t              rs     = ember_row_size(type, k);
    const ember_vec_dot_fn    vd     = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR)->of(type).vec_dot;
    std::vector<uint8_t>      plain(rs * R);
    for (int64_t g = 0; g < ng; g++) {
        ember_cpu_unrepack(type, k, 1, static_cast<const uint8_t *>(w) + g * group_stride, plain.data());
        for (int64_t r = 0; r < R; r++) vd(k, &y[g * R + r], plain.data() + r * rs, x);
    }
}
