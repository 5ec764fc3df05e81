// The tensor-core prefill GEMM for quantized weights, shared by its two kernels: mma.sync tiles
// (ops-matmul-q.cu, sm_80 and later) and wgmma tiles (ops-matmul-wgmma.cu, sm_90a: Hopper).
#ifndef EMBER_CUDA_MMQ_H
#define EMBER_CUDA_MMQ_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

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
