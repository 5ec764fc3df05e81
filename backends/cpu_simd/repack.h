// Weights repacked at load for the CPU decode kernels ("R16" layouts).
//
// A decode matmul reads every weight once per token, so on a CPU it runs at the speed of its
// inner loop as much as at the speed of memory. Row-by-row dot products spend most of that
// loop on things that do not scale with the weights: horizontal sums, per-block scale
// shuffles, reloading the activation. Interleaving 16 rows puts one row in each 32-bit lane
// of a 512-bit register: a block of the activation is broadcast 4 bytes at a time, the
// products of 16 rows accumulate side by side, and the 16 row scales are one fp16 load.
//
// Layouts (same size as the original rows, so the tensor keeps its shape, strides and byte
// count; a group of 16 rows occupies the bytes of those 16 rows):
//   Q4_0 R16, per group and block column b (288 bytes): d[16] (fp16 scale of each row), then
//            qs[c][r][j] = byte 4c + j of row r's block (c < 4, j < 4): in a lane, the low
//            nibbles are weights 4c..4c+3 and the high nibbles weights 16+4c..16+4c+3.
//   Q8_0 R16, per group and block column b (544 bytes): d[16], then
//            qs[c][r][j] = (byte 4c + j of row r's block) + 128 as an unsigned byte (c < 8).
//   Q4_K R16, per group and super-block column (2304 bytes): d[16], dmin[16], then the 12
//            scale bytes as [3][16][4] and the 128 qs bytes as [32][16][4] (lane bytes
//            qs[4c..4c+3]: low nibbles sub-block 2(c/8), high nibbles sub-block 2(c/8)+1).
//   Q6_K R16, per group and super-block column (3360 bytes): d[16], then the 16 int8 scales
//            as [4][16][4], ql as [32][16][4] and qh as [16][16][4].
// (repack.cpp describes each layout as a list of such segments.)
//
// Repacked tensors carry EMBER_TENSOR_FLAG_CPU_REPACKED; only the CPU backend's MUL_MAT and
// GET_ROWS read them (the scheduler keeps their nodes on the CPU). Prefill turns a tile's groups back
// into plain rows (ember_cpu_unrepack) and runs the ordinary GEMM on them.
// EMBER_CPU_REPACK=0 in the environment turns repacking off.
#ifndef EMBER_CPU_REPACK_H
#define EMBER_CPU_REPACK_H

#include <cstddef>
#include <cstdint>

#include "kernels.h"
#include "tensor.h"

constexpr int64_t EMBER_CPU_REPACK_ROWS = 16;

// True when a weight of this type and shape would be repacked for the active kernel table:
// a 2-D matrix of Q4_0, Q8_0, Q4_K or Q6_K with a multiple of 16 rows, a gemv_r16 kernel for
// the type in the active table, and EMBER_CPU_REPACK not 0.
bool ember_cpu_repack_wanted(ember_type type, const int64_t ne[4]);

// Writes the R16 layout of a [k, n] matrix of contiguous rows (n a multiple of 16) to dst
// (ember_row_size(type, k) * n bytes; dst may be src, for repacking in place, but must not
// overlap it otherwise).
void ember_cpu_repack(ember_type type, int64_t k, int64_t n, const void * src, void * dst);

// The inverse for ng groups starting at group pointer src: 16 * ng plain rows at dst.
void ember_cpu_unrepack(ember_type type, int64_t k, int64_t ng, const void * src, void * dst);

// Row r (< 16) of the group at `group`, as a plain row of k weights at dst (GET_ROWS of a
// repacked table: tied embeddings).
void ember_cpu_unrepack_row(ember_type type, int64_t k, const void * group, int64_t r, void * dst);

// Block scales and sums of a Q8_0 column (k / 32 entries), as the Q4_0 / Q8_0 gemv_r16
// kernels take them (the K-quant kernels read Q8_K's own bsums and get nullptr).
void ember_cpu_q8_sums(int64_t k, const void * x, ember_cpu_q8_sum * out);

// Whether the type has an R16 layout at all (whatever the kernels).
bool ember_cpu_repack_has_layout(ember_type type);

// The portable R16 product (the oracle the SIMD kernels are tested against): each group
// unrepacked, then the scalar table's vec_dot per row. xs is unused.
void ember_cpu_gemv_r16_ref(ember_type type, int64_t k, const void * w, size_t group_stride, int64_t ng,
                            const void * x, const ember_cpu_q8_sum * xs, float * y);

#endif  // EMBER_CPU_REPACK_H
