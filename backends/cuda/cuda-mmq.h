// The tensor-core prefill GEMM for quantized weights, shared by its two kernels: mma.sync tiles
// (ops-matmul-q.cu, sm_80 and later) and wgmma tiles (ops-matmul-wgmma.cu, sm_90a: Hopper).
#ifndef EMBER_CUDA_MMQ_H
#define EMBER_CUDA_MMQ_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

#include "cuda-ops.h"

// Where the weight matrix's rows are (one matrix of a possibly batched weight), the
// activations and the output.
struct mmq_args {
    const char *   w;      // GGUF layout: the matrix's first row
    int64_t        w_nb1;  // its row stride
    const char *   base;   // CUDA layout: the tensor's data
    int64_t        nblk;   // CUDA layout: blocks in the whole tensor
    int64_t        g0;     // CUDA layout: the matrix's first row, counted over the tensor
    int64_t        cbytes; // bytes per 32 weights (prefetch addresses)
    int64_t        nc;     // 32-weight chunks per row (k / 32)
    int64_t        k, n, m;
    const __half * x;      // [m][k]
    float *        y;      // y[t * ldy + r]
    int64_t        ldy;
    bool           y2;     // float2 stores are aligned
    int            kper;   // k steps of 64 per split (blockIdx.z): all of them when there is one split
    float *        part;   // several splits: split z's sums at part + z m n, rows of n
};

#ifdef __CUDACC__
// What both kernels do per weight chunk and per output pair. A thread's weight row is `row`
// (GGUF layout: its byte offset from a.w; CUDA layout: its first block), chunk c of it.

// The chunk's bytes into r (WC: cu_codec_h2<T> for the GGUF layout, cu_rp_h2<T> for the CUDA one).
template <typename WC, bool RP>
__device__ __forceinline__ void mmq_fetch_chunk(const mmq_args & a, int64_t row, int c, typename WC::raw & r) {
    if constexpr (RP) WC::fetch(a.base, a.nblk, row + c, r);
    else WC::fetch(a.w + row, c, r);
}

// The address of the chunk's first bytes (for an L2 prefetch).
template <bool RP> __device__ __forceinline__ const char * mmq_chunk_addr(const mmq_args & a, int64_t row, int c) {
    return RP ? a.base + (row + c) * a.cbytes : a.w + row + c * a.cbytes;
}

// Where a block's sums go: y itself, or split blockIdx.z's slot of the partial sums.
struct mmq_out {
    float * y;
    int64_t ldy;
    bool    y2;  // float2 stores are aligned
};
__device__ __forceinline__ mmq_out mmq_output(const mmq_args & a) {
    if (gridDim.z > 1) return {a.part + blockIdx.z * a.m * a.n, a.n, a.n % 2 == 0};
    return {a.y, a.ldy, a.y2};
}

// Rows r and r + 1 of token t (t < m), as far as they exist.
__device__ __forceinline__ void mmq_store_pair(const mmq_out & o, int64_t n, int t, int r, float v0, float v1) {
    float * yt = o.y + static_cast<int64_t>(t) * o.ldy;
    if (o.y2 && r + 1 < n) {
        *reinterpret_cast<float2 *>(yt + r) = make_float2(v0, v1);
    } else {
        if (r < n) yt[r] = v0;
        if (r + 1 < n) yt[r + 1] = v1;
    }
}
#endif

// Raises a kernel's dynamic shared-memory limit (above the 48 KiB default) once per device;
// `done` is that kernel's own set of devices (ops-matmul-q.cu).
bool ember_cuda_allow_smem(const void * kernel, std::atomic<uint64_t> & done, int device, int bytes);

// The wgmma kernel's tile: 128 weight rows x 128 tokens per block, k in steps of 64.
constexpr int k_mmq_wg_rows = 128, k_mmq_wg_tokens = 128;

// Whether this device runs the wgmma kernel: a Hopper GPU and a module built with sm_90a code
// (EMBER_CUDA_ARCHS holding 90); asked once per device by a one-thread probe kernel (false
// while the stream captures a graph, then asked again later).
bool ember_cuda_mmq_wg_available(ember_cuda_ctx & ctx);

// Launches the wgmma kernel over `grid` (rows / 128, tokens / 128, splits) for weight type t, in
// the CUDA layout when rp; EMBER_ERR_UNSUPPORTED when it has no kernel for that type.
ember_status ember_cuda_mmq_wg_launch(ember_cuda_ctx & ctx, int t, bool rp, const mmq_args & a, dim3 grid);

#endif  // EMBER_CUDA_MMQ_H
