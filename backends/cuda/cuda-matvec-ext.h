// Ember's own weight types (INT4, INT4_G32, NF4, FP8_E4M3/E5M2 and their _ROW forms) in the
// CUDA ext layout (cuda-repack.h): the decode matvec, the F16 dequantizer of the prefill GEMM
// and GET_ROWS (ops-matvec-ext.cu). Host-only C++.
#ifndef EMBER_CUDA_MATVEC_EXT_H
#define EMBER_CUDA_MATVEC_EXT_H

#include "cuda-ops.h"

// Whether t's memory holds an ext-layout weight (flagged EMBER_TENSOR_FLAG_CUDA_REPACKED, of
// an Ember type).
bool ember_cuda_ext_layout(const ember_tensor * t);

// Whether the decode matvec of weight w (ext layout) reads x as floats (FP8), not the 8-bit copy.
bool ember_cuda_ext_float_x(const ember_tensor * w);

// Whether type t's decode matvec reads a norm-in-product copy of x and has its producer
// (mvx_kernel NS, mvx_norm_kernel: INT4, NF4).
bool ember_cuda_ext_has_ns(ember_type t);

// The decode norm in the product before it for FP8 weights (ember_cuda_mul_mat_vec_norm):
// fp8_norm_type, the types with the producer (block-scaled E4M3 / E5M2); fp8_ns_reader_here,
// whether FP8 products on the current device read an FP8 producer's copy (the tensor-core kernel,
// sm_80+, for plain products and units); the producer's launch: w's rows (a multiple of 16) times
// x's floats plus res into sum, nw times that into ov, each 16 rows' sum of squares of sum into
// osq (EMBER_ERR_UNSUPPORTED where the tensor-core kernel does not run).
bool         ember_cuda_fp8_norm_type(ember_type t);
bool         ember_cuda_fp8_ns_reader_here();
ember_status ember_cuda_mvx_fp8_norm_launch(ember_cuda_ctx & ctx, const ember_tensor * w, const float * x, const float * res, float * sum,
                                            const float * nw, float * ov, float * osq);

// The gate / up products of a decode FFN with their SWIGLU for block-scaled FP8 on tensor cores
// (mvx_fp8_glu_kernel; ember_cuda_mul_mat_vec_glu): fp8_glu_ok, whether wg and wu (2-D, ext layout)
// are of one FP8 type and shape with rows a multiple of 32 (EMBER_CUDA_MV_GLU_FP8=0: never); the
// launch over x's floats xf (one column), or an FP8 producer's copy with its norm's scale ns,
// writing silu(g) u to h and the gate / up sums to g / u where not null (EMBER_ERR_UNSUPPORTED
// where the tensor-core kernel does not run).
bool         ember_cuda_mvx_fp8_glu_ok(const ember_tensor * wg, const ember_tensor * wu);
ember_status ember_cuda_mvx_fp8_glu_launch(ember_cuda_ctx & ctx, const ember_tensor * wg, const ember_tensor * wu, const float * xf,
                                           const ember_cuda_norm_scale * ns, float * g, float * u, float * h);

// The decode matvec of dst = MUL_MAT(w, x) for a weight in the ext layout; several dsts (up to
// three, 2-D weights of one type and width over the same 2-D x, as
// ember_cuda_mul_mat_vec_q_can_group allows) run in one launch. With units (units[m].mm ==
// dsts[m], each ember_cuda_mv_unit_ok) their RoPE and cache writes are done by the store.
bool         ember_cuda_mul_mat_vec_ext_supported(const ember_tensor * dst);
ember_status ember_cuda_mul_mat_vec_ext(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units = nullptr);

// Rows [g0, g0 + rows) of the whole tensor w (ext layout; rows counted over all its matrices)
// to F16, rows of ne[0] elements at out.
ember_status ember_cuda_ext_dequant_f16(ember_cuda_ctx & ctx, const ember_tensor * w, int64_t g0, int64_t rows, void * out);

// GET_ROWS from a 2-D table in the ext layout (F32 result).
ember_status ember_cuda_ext_get_rows(ember_cuda_ctx & ctx, ember_tensor * dst);

#endif  // EMBER_CUDA_MATVEC_EXT_H
