// The CUDA weight layout (EMBER_TENSOR_FLAG_CUDA_REPACKED): Q4_0 and Q8_0 weight matrices are
// converted when they are uploaded whole (cuda-backend.cpp, set_tensor of a tensor flagged
// EMBER_TENSOR_FLAG_WEIGHT) from GGUF's array of 18- or 34-byte blocks into two arrays:
//
//   quants: row r (of R = ne1 ne2 ne3 rows, nb = ne0 / 32 blocks each), block b at byte
//           (r nb + b) QB, QB = 16 (Q4_0) or 32 (Q8_0): each block's qs bytes as in GGUF
//   scales: the blocks' ember_half d, in the same order, from byte R nb QB
//
// The size is unchanged. Every row of quants starts at a multiple of 16 bytes, so the decode
// matvec reads weights with 16-byte coalesced loads (a block's 2-byte scale broke that in the
// GGUF layout). Host-only C++; the device side reads it in cuda-common.cuh (cu_rp_*).
//
// Ember's own types (the "ext" layout, read by ops-matvec-ext.cu), R rows of k weights, all arrays row-major over (row, block), each from the end
// of the one before it (the first 16-byte aligned and a multiple of 16 bytes long):
//
//   INT4 / INT4_G32 (G = 128 / 32, nb = k / G): quants nb G/2 bytes per row (each block's qs),
//                   then the blocks' (d, z) fp16 pairs, 4 bytes each
//   NF4 (nb = k / 64, ng = ceil(nb / 256)): quants 32 bytes per block, then the group headers
//                   (fp32 scale2, fp32 offset; 8 bytes each, ng per row), then the absmax_q bytes;
//                   each 4-byte word of a block's quants holds the nibbles of weights i .. i + 3
//                   (low half) and 32 + i .. 35 + i (high half), i = 0, 4, .., 28 (its GGUF qs
//                   word's nibbles unzipped: ember_cuda_nf4_unzip)
//   FP8_E4M3 / FP8_E5M2 (nb = k / 32): quants 32 bytes per block, then the exponent bytes e
//   FP8_E4M3_ROW / FP8_E5M2_ROW: the k codes of each row, then the fp32 row scales
//
// EMBER_CUDA_EXT_MV=0 leaves these types in their GGUF layout (the generic, slow matvec).
//
// Q6_K weights with rows of a multiple of 2048 weights take the planar Q6_K layout shared with
// the Vulkan backend (backends/common/q6k-planar.h): each 2048-weight segment of a row field by
// field, rows where they were (read by mvp6_kernel, ops-matvec-q.cu, and by cu_codec /
// cu_codec_h2<CU_Q6_K_PLANAR>, cuda-common.cuh). EMBER_CUDA_Q6P=0 leaves them in the GGUF
// layout (mv6_kernel).
#ifndef EMBER_CUDA_REPACK_H
#define EMBER_CUDA_REPACK_H

#include <cstddef>
#include <cstdint>

#include "tensor.h"

// Quant bytes per 32-weight block in the CUDA layout, or 0 when the type is not repacked.
int ember_cuda_repack_qbytes(ember_type t);

// Whether t is one of Ember's types that have the ext layout (the type alone; EMBER_CUDA_EXT_MV
// is not consulted). constexpr: the tensor-core prefill's launch dispatch asks it of its kernels'
// type argument (cuda-mmq.h, mmq_reads).
constexpr bool ember_cuda_repack_is_ext(ember_type t) {
    switch (t) {
        case EMBER_TYPE_INT4:
        case EMBER_TYPE_INT4_G32:
        case EMBER_TYPE_NF4:
        case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E5M2:
        case EMBER_TYPE_FP8_E4M3_ROW:
        case EMBER_TYPE_FP8_E5M2_ROW: return true;
        default: return false;
    }
}

// Whether a whole-tensor upload of t is converted: a contiguous, non-view weight of a
// repacked type (Q6_K: rows of a multiple of 2048; EMBER_CUDA_REPACK=0 turns the conversion
// off, for comparisons).
bool ember_cuda_repack_wanted(const ember_tensor * t);

// NF4's quant words in the ext layout: a GGUF word (bytes i .. i + 3 of a block's qs, nibbles
// low to high L0 H0 L1 H1 L2 H2 L3 H3, Lj = weight i + j, Hj = weight 32 + i + j) holds its
// nibbles as L0 L1 L2 L3 H0 H1 H2 H3, so a byte-permute table lookup of its low (high) 16 bits
// gives the block's weights i .. i + 3 (32 + i .. 35 + i) in activation order, ready for dp4a
// (ops-matvec-ext.cu, nf4_lookup). zip is the inverse (the readback).
uint32_t ember_cuda_nf4_unzip(uint32_t gguf_word);
uint32_t ember_cuda_nf4_zip(uint32_t ext_word);

// GGUF bytes -> CUDA layout and back, for `rows` rows of k weights (src and dst distinct).
void ember_cuda_repack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst);
void ember_cuda_unrepack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst);

#endif  // EMBER_CUDA_REPACK_H
