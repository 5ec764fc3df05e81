// The decode norm in the product before it (ember_cuda_mul_mat_vec_norm, ops-matvec-q.cu): the
// device code its producers (mvr_norm_kernel, mvk_norm_kernel; mvx_norm_kernel in
// ops-matvec-ext.cu) and readers (the kernels' NS forms) share.
#ifndef EMBER_CUDA_MATVEC_NORM_CUH
#define EMBER_CUDA_MATVEC_NORM_CUH

#include "cuda-common.cuh"
#include "cuda-ops.h"

// What the end of a norm-in-product block reads and writes (mvn_block_end).
struct mvn_out {
    const float * res;  // the ADD's other operand (n floats)
    float *       sum;  // the ADD's result (n floats)
    const float * nw;   // the MUL's weights (n floats)
    int8_t *      oq;   // out: int8 copy of nw * sum (n values)
    float2 *      ods;  // (d, d sum q) per 32
    float *       osq;  // sum of sum^2 per 32
};

constexpr int k_mvn_rows = 32, k_mvn_max_warps = 16;

// The end of a norm-in-product block (every thread calls it): each lane's NT row sums (rows
// (32 / NT) t + lane / NT, t < NT, shared with the NT lanes of the same lane / NT) summed over those
// lanes and over the block's warps in shared memory; then warp 0, lane r holding row row0 + r:
// the residual added, the ADD's floats written, the block of 32 quantized as cu_quantize_quad
// does (q from the unrounded d; d kept in float), and its sum of squares.
template <int NT>
__device__ __forceinline__ void mvn_block_end(const float (&acc)[NT], const mvn_out & o, int64_t row0, int lane, int wi, int nw) {
    __shared__ float part[k_mvn_max_warps][k_mvn_rows + 1];
    // Warp 0's residual and MUL weight requested before the barrier: their round trip overlaps
    // the wait for the block's slowest warp instead of following it.
    const int64_t r   = row0 + lane;
    const float   res = wi == 0 ? o.res[r] : 0.0f, nwr = wi == 0 ? o.nw[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = acc[t];
#pragma unroll
        for (int k = 1; k < NT; k <<= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (lane % NT == 0) part[wi][(k_mvn_rows / NT) * t + lane / NT] = v;
    }
    __syncthreads();
    if (wi != 0) return;
    // The warps' parts fetched together, then summed in warp order (a loop over nw waited one
    // shared-memory load per warp: ~500 cycles on the token's critical path for 16 warps).
    float pv[k_mvn_max_warps];
#pragma unroll
    for (int k = 0; k < k_mvn_max_warps; k++) pv[k] = k < nw ? part[k][lane] : 0.0f;
    float y = 0.0f;
#pragma unroll
    for (int k = 0; k < k_mvn_max_warps; k++) {
        if (k < nw) y += pv[k];
    }
    const float s = res + y;
    o.sum[r]      = s;
    const float v = s * nwr;
    const float d  = cu_warp_absmax(v) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int   q  = static_cast<int>(roundf(__fmul_rn(v, id)));
    const int   sq = cu_warp_sum_int(q);
    const float ss = cu_warp_sum(s * s);
    o.oq[r]        = static_cast<int8_t>(q);
    if (lane == 0) {
        o.ods[blockIdx.x] = make_float2(d, d * static_cast<float>(sq));
        o.osq[blockIdx.x] = ss;
    }
}

// The scale a reader of a norm-in-product copy applies (ember_cuda_norm_scale; the NS forms of
// mvr_kernel, mvk_kernel, mvp6_kernel): every lane sums its share of the partial sums in one fixed
// order; called after a warp's main loop (L1 hits but for an SM's first warp, nothing waiting).
__device__ __forceinline__ float mv_norm_scale(const ember_cuda_norm_scale & ns, int lane) {
    float s = 0.0f;
    for (int i = lane; i < ns.n; i += 32) s += __ldg(ns.nsq + i);
    return 1.0f / sqrtf(cu_warp_sum(s) / ns.k + ns.eps);
}

// Warps of a producer block: the nsl slices of a row spread evenly over at most k_mvn_max_warps
// (8 or 4 at most measured slower: H200 tg128 8B Q4_0 584.0 -> 558.7 / 497.2, 1B 1931.0 ->
// 1886.5 / 1702.2).
inline int mvn_warps(int nsl) {
    const int per = (nsl + k_mvn_max_warps - 1) / k_mvn_max_warps;
    return (nsl + per - 1) / per;
}

// The producer for Ember's INT4 / NF4 weights in the ext layout (ops-matvec-ext.cu):
// n / 32 blocks over w (2-D) and x's 8-bit copy (xq, xds), the block ends into o.
ember_status ember_cuda_mvx_norm_launch(ember_cuda_ctx & ctx, const ember_tensor * w, const int8_t * xq, const float2 * xds, const mvn_out & o);

#endif  // EMBER_CUDA_MATVEC_NORM_CUH
