// The decode norm done by block 0 of the integer matvec that reads its quantized copy
// (ember_cuda_mv_norm, cuda-ops.h; EMBER_CUDA_NORM_IN_MV=1): what rms_norm_dec_kernel does for
// one row, without a launch of its own in the step's dependent chain. Included by the matvec
// kernels that take it (mvr_kernel, ops-matvec-q.cu).
//
// Block 0 (after the launch's dependency wait: the rows it reads are complete) sums the ADD,
// writes the sum row when the ADD's other readers need it, holds the row in shared memory
// (n floats: the launch's dynamic shared memory), reduces the squares, then writes the float
// rows asked for and the int8 copy with cu_quantize_warp's arithmetic. Then one release store of
// flag = (serial << 8) | k. The other blocks wait for that value with acquire loads before
// their first x load, and read x with coherent loads (not the read-only path: x is written
// during the launch). The value is new every range (serial counts graph_computes), so no block
// ever sees a stale flag as ready, and nothing resets it.
#ifndef EMBER_CUDA_MV_NORM_CUH
#define EMBER_CUDA_MV_NORM_CUH

#include "cuda-common.cuh"
#include "cuda-ops.h"

constexpr int k_mv_norm_threads = 128;  // the matvec block's threads (k_rp_warps warps)

// The launch's dynamic shared memory for the norm's row.
inline size_t mv_norm_smem_bytes(const ember_cuda_mv_norm & p) {
    return static_cast<size_t>(p.n) * sizeof(float);
}

// At a matvec launch over x: whether it takes the pending decode norm (ctx.norm_defer). able:
// this launch's kernel has an NM form and the launch is one column of one batch. Taken: *nm
// holds its arguments, *smem the NM kernel's dynamic shared memory (> 0) and the context is
// cleared; a pending norm of this x that cannot be taken is launched now (ember_cuda_norm_flush);
// otherwise *smem is 0. EMBER_OK, or the flush's error.
inline ember_status mv_norm_take(ember_cuda_ctx & ctx, const void * x, bool able, ember_cuda_mv_norm * nm, size_t * smem) {
    *smem = 0;
    if (!ctx.norm_pending || ctx.norm_mul != x) return EMBER_OK;
    if (!able) return ember_cuda_norm_flush(ctx);
    *nm              = ctx.norm_defer;
    *smem            = mv_norm_smem_bytes(*nm);
    ctx.norm_pending = false;
    ctx.norm_mul     = nullptr;
    return EMBER_OK;
}

__device__ __forceinline__ unsigned long long mv_norm_ready_value(const ember_cuda_mv_norm & p) {
    const unsigned long long serial = *reinterpret_cast<const volatile unsigned long long *>(p.serial);
    return serial << 8 | static_cast<unsigned long long>(p.k & 0xff);
}

// Every thread of every block calls it once, after cu_pdl_begin() and before any x load;
// leader: this is block 0. p.n % (4 * k_mv_norm_threads) == 0 (every lane of a warp in every
// step: the shuffles of the quantizer), blockDim.x == k_mv_norm_threads.
__device__ __forceinline__ void mv_norm_prologue(const ember_cuda_mv_norm & p, bool leader) {
    const unsigned long long ready = mv_norm_ready_value(p);
    const int                t     = threadIdx.x;
    if (!leader) {
        if (t == 0) {
            for (;;) {
                unsigned long long v;
                asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p.flag) : "memory");
                if (v == ready) break;
                __nanosleep(64);
            }
        }
        __syncthreads();
        return;
    }
    extern __shared__ float4 mv_norm_row[];
    const int                n4 = p.n / 4;
    const float4 *           a4 = reinterpret_cast<const float4 *>(p.a);
    const float4 *           b4 = reinterpret_cast<const float4 *>(p.b);
    float                    ss = 0.0f;
    for (int i = t; i < n4; i += k_mv_norm_threads) {
        float4 v = a4[i];
        if (b4) {
            const float4 u = b4[i];
            v              = make_float4(v.x + u.x, v.y + u.y, v.z + u.z, v.w + u.w);
        }
        if (p.sum) reinterpret_cast<float4 *>(p.sum)[i] = v;  // for the ADD's other readers
        mv_norm_row[i] = v;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float    tot   = cu_block_sum<k_mv_norm_threads>(ss, t);
    const float    scale = 1.0f / sqrtf(tot / static_cast<float>(p.n) + p.eps);
    const float4 * w4    = reinterpret_cast<const float4 *>(p.w);
    float2 *       xds   = static_cast<float2 *>(p.xds);
    for (int i = t; i < n4; i += k_mv_norm_threads) {  // lanes i .. i + 7 (i % 8 == 0) hold a block of 32
        const float4 v  = mv_norm_row[i];
        const float4 wv = __ldg(w4 + i);
        const float4 nv = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
        const float4 zv = make_float4(nv.x * wv.x, nv.y * wv.y, nv.z * wv.z, nv.w * wv.w);
        if (p.y) reinterpret_cast<float4 *>(p.y)[i] = nv;
        if (p.z) reinterpret_cast<float4 *>(p.z)[i] = zv;
        const cu_q8_quad qv = cu_quantize_quad(zv);  // rms_norm_dec_kernel's quantizer
        reinterpret_cast<char4 *>(p.xq)[i] = qv.q;
        if (t % 8 == 0) xds[i / 8] = cu_q8_ds(qv);
    }
    __syncthreads();  // the block's own x loads follow; and every store before the release
    if (t == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p.flag), "l"(ready) : "memory");
    }
}

#endif  // EMBER_CUDA_MV_NORM_CUH
