// The decode RMS_NORM (one row: the residual ADD before it, the MUL by the norm weight after it
// and the quantized copy the next integer matvec reads), as a block-wide device function: the
// body of rms_norm_dec_kernel (ops-elementwise.cu, 256 threads) and of block 0 of a matvec that
// takes the norm into its own launch (mvr_kernel with NORM, ops-matvec-q.cu, 128 threads: the
// norm's launch and grid boundary leave the token's dependent chain; the other blocks wait for
// block 0's flag instead, EMBER_CUDA_NORM_FUSE=1).
#ifndef EMBER_CUDA_NORM_DEC_CUH
#define EMBER_CUDA_NORM_DEC_CUH

#include "cuda-common.cuh"

// RMS_NORM, with fusions that each save a launch and a pass over the row:
// - ADD: the residual ADD before the norm (src = a + b, written for its other readers, and
//   the norm's input): p.src is the ADD's result, p.a and p.b its operands (same shapes).
// - FUSED: the MUL that follows (mul = norm * w, w broadcast as in MUL's binary_kernel); the
//   norm is still written for its other readers.
// - QX: the quantized copy of the MUL's result (cu_quantize_warp); needs ne[0] % 32 == 0: a warp
//   then holds 32 consecutive elements in each step.
struct norm_args {
    cu_tensor a, b, src, dst, w, mul;
    float     eps;
    int8_t *  xq;
    float2 *  xds;
    // rms_norm_dec_kernel: store the RMS_NORM's / the MUL's rows, else only the quantized copy
    // (the stream decides: cuda-backend.cpp; H200 tg128 1B Q4_0 1671-1684 against 1617 with
    // both stored, EMBER_CUDA_NORM_STORE=1; 8B level)
    bool      wy, wz;
    // A fused norm's flag to clear (the previous one's: its matvec grid has completed once this
    // kernel's wait returns), or nullptr.
    int *     reset;
    // A fused norm's second copy of xq / xds (or nullptr): memory only its matvec launch reads,
    // so that launch may read it through the L1 (the first copy's lines may sit in an SM's L1
    // from the kernel before, still running beside it).
    int8_t *  xq2;
    float2 *  xds2;
};

// The norm a matvec launch takes into its block 0 (mvr_kernel with NORM): its arguments, the row
// width, and the flag block 0 sets once the quantized copy is stored (the other blocks spin on
// it), cleared by the next norm of the step (norm_args::reset).
struct norm_fuse {
    norm_args p;  // p.xq2 / p.xds2: this launch's own copy of x (ember_cuda_norm_take)
    int       n;
    int *     flag;
};

__device__ __forceinline__ int cu_ld_acquire(const int * p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ int cu_ld_relaxed(const int * p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
constexpr unsigned k_norm_poll_ns = 100;  // sleep between polls of a fused norm's flag
__device__ __forceinline__ void cu_st_release(int * p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Row `row` of the decode norm over TH threads, NV float4 per thread: element 4 (t + TH k) + j
// is thread t's float4 k, so a quantization block of 32 is 8 lanes. The norm weights are loaded
// before the wait for the previous kernel (cu_pdl_begin), the row after it.
template <int TH, int NV, bool ADD, bool QX>
__device__ __forceinline__ void norm_dec_row(const norm_args & p, int n, int64_t row) {
    const int      t  = threadIdx.x;
    float4         wv[NV], v[NV];
    const float4 * w4 = reinterpret_cast<const float4 *>(p.w.data);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + TH * k);
        wv[k]       = i < n ? __ldg(w4 + i / 4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // weights: before the wait
    }
    cu_pdl_begin();
    if (p.reset && row == 0 && t == 0) *p.reset = 0;
    const auto rowp = [&](const cu_tensor & x) { return reinterpret_cast<float4 *>(x.data + row * x.nb[1]); };
    float4 *   src  = rowp(p.src);
    float      ss   = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + TH * k);
        if (i < n) {
            if constexpr (ADD) {
                const float4 a = rowp(p.a)[i / 4], b = rowp(p.b)[i / 4];
                v[k]           = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
            } else {
                v[k] = src[i / 4];
            }
        } else {
            v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + TH * k);
        if constexpr (ADD) {
            if (i < n) src[i / 4] = v[k];  // the sum, for the ADD's other readers
        }
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    __shared__ float part[TH / 32];
    ss = cu_warp_sum(ss);
    if (t % 32 == 0) part[t / 32] = ss;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int k = 0; k < TH / 32; k++) tot += part[k];
    const float scale = 1.0f / sqrtf(tot / static_cast<float>(n) + p.eps);
    float4 *    y     = rowp(p.dst);
    float4 *    z     = rowp(p.mul);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        // Lanes past n hold zeros and still take part in the shuffles (whole 8-lane groups:
        // with QX n % 32 == 0); only their stores are dropped.
        const int    i  = 4 * (t + TH * k);
        const bool   in = i < n;
        const float4 nv = make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale);
        const float4 zv = make_float4(nv.x * wv[k].x, nv.y * wv[k].y, nv.z * wv[k].z, nv.w * wv[k].w);
        if (in && p.wy) y[i / 4] = nv;
        if (in && p.wz) z[i / 4] = zv;
        if constexpr (QX) {
            // cu_quantize_warp's arithmetic over the 8 lanes that hold a block of 32
            float amax = fmaxf(fmaxf(fabsf(zv.x), fabsf(zv.y)), fmaxf(fabsf(zv.z), fabsf(zv.w)));
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float d  = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            const int   q0 = static_cast<int>(roundf(__fmul_rn(zv.x, id))), q1 = static_cast<int>(roundf(__fmul_rn(zv.y, id)));
            const int   q2 = static_cast<int>(roundf(__fmul_rn(zv.z, id))), q3 = static_cast<int>(roundf(__fmul_rn(zv.w, id)));
            int         sq = q0 + q1 + q2 + q3;
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
            const int64_t e = row * n + i;
            if (!in) continue;
            const char4 q4 =
                make_char4(static_cast<signed char>(q0), static_cast<signed char>(q1), static_cast<signed char>(q2), static_cast<signed char>(q3));
            reinterpret_cast<char4 *>(p.xq + e)[0] = q4;
            if (p.xq2) reinterpret_cast<char4 *>(p.xq2 + e)[0] = q4;
            if (t % 8 == 0) {
                const float  dh = __half2float(__float2half_rn(d));
                const float2 ds = make_float2(dh, dh * static_cast<float>(sq));
                p.xds[e / 32]   = ds;
                if (p.xds2) p.xds2[e / 32] = ds;
            }
        }
    }
}

// (ops-elementwise.cu) A matvec launch over the quantized copy xq takes the pending norm
// (ember_cuda_ctx::norm_pending) into its block 0: false when none is pending for xq.
struct ember_cuda_ctx;
bool ember_cuda_norm_take(ember_cuda_ctx & ctx, const int8_t * xq, norm_fuse * out);

#endif  // EMBER_CUDA_NORM_DEC_CUH
