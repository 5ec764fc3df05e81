// The planar Q6_K layout, made at upload by the Vulkan and CUDA backends
// (EMBER_TENSOR_FLAG_VK_REPACKED, EMBER_TENSOR_FLAG_CUDA_REPACKED): the GGUF layout's 210-byte
// super-blocks leave every field only 2-byte aligned, so a decode kernel cannot read a lane's
// quants with 16-byte loads. A row of a multiple of 2048 weights is cut into segments of 8
// super-blocks (1680 bytes: rows start on 16 bytes, so segments do too), each holding its 8
// super-blocks field by field:
//
//   bytes    0 .. 1023: ql, 128 per super-block, as in the GGUF block;
//   bytes 1024 .. 1535: qh, 64 per super-block, as in the GGUF block;
//   bytes 1536 .. 1663: the 16 int8 scales per super-block, permuted so that the 4 scales of
//                       decode unit j = 2h + g (half h, 16-weight group g of each 32) are word j:
//                       byte 4j + k = GGUF scale 8h + 2k + g;
//   bytes 1664 .. 1679: the 8 f16 d.
//
// Same bytes, same size, same row stride; the tensor keeps its type. The device sides:
// backends/vulkan/shaders/q6p.glsl, backends/cuda/cuda-common.cuh (cu_q6p_*). Header-only, so
// the CUDA module (a separate shared library) and libember share one copy.
#ifndef EMBER_Q6K_PLANAR_H
#define EMBER_Q6K_PLANAR_H

#include <cstddef>
#include <cstdint>
#include <cstring>

constexpr int64_t k_q6p_seg_weights = 2048;  // weights per segment (8 super-blocks)
constexpr size_t  k_q6p_seg_bytes   = 1680;  // bytes per segment
constexpr size_t  k_q6p_ql = 0, k_q6p_qh = 1024, k_q6p_sc = 1536, k_q6p_d = 1664;  // field offsets in a segment

// The planar byte (from the segment's scale field of one super-block) of GGUF scale s (0..15).
constexpr size_t ember_q6p_scale_pos(size_t s) { return 4 * (2 * (s >> 3) + (s & 1)) + ((s >> 1) & 3); }

namespace ember_q6p_detail {

constexpr size_t k_sb = 210;  // Q6_K super-block bytes: ql[128], qh[64], scales[16], d

// One segment, GGUF <-> planar.
template <bool to_planar> inline void segment(const uint8_t * src, uint8_t * dst) {
    for (size_t b = 0; b < 8; b++) {
        const size_t ql = k_q6p_ql + 128 * b, qh = k_q6p_qh + 64 * b, sc = k_q6p_sc + 16 * b, d = k_q6p_d + 2 * b;
        if (to_planar) {
            const uint8_t * g = src + b * k_sb;
            std::memcpy(dst + ql, g, 128);
            std::memcpy(dst + qh, g + 128, 64);
            for (size_t s = 0; s < 16; s++) dst[sc + ember_q6p_scale_pos(s)] = g[192 + s];
            std::memcpy(dst + d, g + 208, 2);
        } else {
            uint8_t * g = dst + b * k_sb;
            std::memcpy(g, src + ql, 128);
            std::memcpy(g + 128, src + qh, 64);
            for (size_t s = 0; s < 16; s++) g[192 + s] = src[sc + ember_q6p_scale_pos(s)];
            std::memcpy(g + 208, src + d, 2);
        }
    }
}

template <bool to_planar> inline void convert(int64_t nrows, int64_t ne0, const void * src, void * dst) {
    const size_t    nseg = static_cast<size_t>(nrows) * static_cast<size_t>(ne0 / k_q6p_seg_weights);
    const uint8_t * s    = static_cast<const uint8_t *>(src);
    uint8_t *       d    = static_cast<uint8_t *>(dst);
    for (size_t i = 0; i < nseg; i++) segment<to_planar>(s + i * k_q6p_seg_bytes, d + i * k_q6p_seg_bytes);
}

}  // namespace ember_q6p_detail

// nrows rows of ne0 Q6_K weights (ne0 a multiple of 2048): GGUF layout -> planar, and back.
// src and dst do not overlap.
inline void ember_q6p_pack(int64_t nrows, int64_t ne0, const void * src, void * dst) {
    ember_q6p_detail::convert<true>(nrows, ne0, src, dst);
}
inline void ember_q6p_unpack(int64_t nrows, int64_t ne0, const void * src, void * dst) {
    ember_q6p_detail::convert<false>(nrows, ne0, src, dst);
}

#endif  // EMBER_Q6K_PLANAR_H
