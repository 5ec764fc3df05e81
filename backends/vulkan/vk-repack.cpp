#include "vk-repack.h"

#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t k_sb    = 210;       // Q6_K super-block bytes: ql[128], qh[64], scales[16], d
constexpr size_t k_seg_b = 8 * k_sb;  // a segment: 8 super-blocks

// Planar byte of GGUF scale s (shaders/q6p.glsl): unit j = 2h + g holds its 4 scales in word j.
constexpr size_t sc_pos(size_t s) { return 4 * (2 * (s >> 3) + (s & 1)) + ((s >> 1) & 3); }

// One segment, GGUF (g) <-> planar (p).
template <bool to_planar> void segment(const uint8_t * src, uint8_t * dst) {
    for (size_t b = 0; b < 8; b++) {
        const uint8_t * gs = to_planar ? src + b * k_sb : nullptr;
        uint8_t *       gd = to_planar ? nullptr : dst + b * k_sb;
        const size_t    ql = 128 * b, qh = 1024 + 64 * b, sc = 1536 + 16 * b, d = 1664 + 2 * b;
        if (to_planar) {
            std::memcpy(dst + ql, gs, 128);
            std::memcpy(dst + qh, gs + 128, 64);
            for (size_t s = 0; s < 16; s++) dst[sc + sc_pos(s)] = gs[192 + s];
            std::memcpy(dst + d, gs + 208, 2);
        } else {
            std::memcpy(gd, src + ql, 128);
            std::memcpy(gd + 128, src + qh, 64);
            for (size_t s = 0; s < 16; s++) gd[192 + s] = src[sc + sc_pos(s)];
            std::memcpy(gd + 208, src + d, 2);
        }
    }
}

template <bool to_planar> void convert(int64_t nrows, int64_t ne0, const void * src, void * dst) {
    const size_t    nseg = static_cast<size_t>(nrows) * static_cast<size_t>(ne0 / 2048);
    const uint8_t * s    = static_cast<const uint8_t *>(src);
    uint8_t *       d    = static_cast<uint8_t *>(dst);
    for (size_t i = 0; i < nseg; i++) segment<to_planar>(s + i * k_seg_b, d + i * k_seg_b);
}

}  // namespace

bool ember_vk_repack_wanted(const ember_tensor * t) {
    const char * v   = std::getenv("EMBER_VULKAN_REPACK");  // (read at each upload: the tests switch it)
    const bool   off = v && std::strcmp(v, "0") == 0;
    if (off || !(t->flags & EMBER_TENSOR_FLAG_WEIGHT) || t->view_src || t->type != EMBER_TYPE_Q6_K) return false;
    return t->ne[0] > 0 && t->ne[0] % 2048 == 0 && ember_nelements(t) > 0 && ember_is_contiguous(t);
}

void ember_vk_repack_q6k(int64_t nrows, int64_t ne0, const void * src, void * dst) { convert<true>(nrows, ne0, src, dst); }

void ember_vk_unrepack_q6k(int64_t nrows, int64_t ne0, const void * src, void * dst) { convert<false>(nrows, ne0, src, dst); }
