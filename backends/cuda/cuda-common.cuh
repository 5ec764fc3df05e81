// Device-side helpers shared by the CUDA kernels: launch checks, tensor addressing and the
// type codecs (dequantize 32 weights at a time, read one element, encode one block). The
// arithmetic follows quant/ref/*.cpp (x = d * q forms, same operand order); results match
// the CPU up to float rounding (nvcc contracts a * b + c into FMAs).
#ifndef EMBER_CUDA_COMMON_CUH
#define EMBER_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <stdint.h>

#include <utility>

#include "cuda-fp8.h"
#include "cuda-ops.h"
#include "q6k-planar.h"
#include "quant/blocks.h"

// Flat tensor description passed to kernels by value (ember_tensor holds host pointers to
// its sources, so kernels get these instead).
struct cu_tensor {
    char *  data;
    int64_t ne[4];
    int64_t nb[4];
};

inline cu_tensor cu_desc(const ember_tensor * t) {
    cu_tensor d;
    d.data = static_cast<char *>(t->data);
    for (int i = 0; i < 4; i++) {
        d.ne[i] = t->ne[i];
        d.nb[i] = static_cast<int64_t>(t->nb[i]);
    }
    return d;
}

// Grid size for n items of `per_block` each, clamped to what a 1-D grid takes.
inline unsigned cu_blocks(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > 0x7fffffff) b = 0x7fffffff;
    return static_cast<unsigned>(b);
}

// Programmatic dependent launch (Hopper and later; no-ops below sm_90). Every kernel of this
// backend is launched by cu_launch, which lets it start while the previous kernel of the stream
// still runs (when ctx.pdl): its blocks become resident as the previous kernel's blocks have all
// started, and its launch latency and prologue hide behind that kernel's tail. So every kernel
// calls cu_pdl_begin() before its first access to memory another kernel may write or read (all
// of it, except weights): griddepcontrol.wait returns once the previous grid has completed and
// its writes are visible. Then launch_dependents lets the next kernel start in turn. The decode
// matvecs issue their first weight loads before cu_pdl_begin(), so weight streaming overlaps
// the small kernels before them (norms, RoPE, attention).
__device__ __forceinline__ void cu_pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// cp.async (sm_80+): a copy from global to shared memory that lands later, at a wait for its
// group (cu_cp_commit closes a group, cu_cp_wait<N> returns once at most N groups are pending);
// below sm_80 plain copies that land at once (commit and wait do nothing). 16-byte copies go
// .cg (past L1), 8- and 4-byte ones .ca. The kernels' pipelines that use them: decode and
// prefill attention (K / V tiles), the streaming matvec (ops-matvec-q.cu).
__device__ __forceinline__ void cu_cp16(void * dst, const void * src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#else
    *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
#endif
}
// 16 bytes with an L2 cache policy (pol: evict-first for streamed weights, as the register
// kernels' __ldcs). Careful: on the H200 (CUDA 13, sm_90) kernels with these copies stopped with
// "an illegal instruction was encountered" when they also had a __syncthreads or chose between
// hinted and plain copies at run time (PERF-NOTES, sessions 35-36); the streaming matvec (no
// barrier, the policy fixed) runs. Any new user runs its GPU test before it becomes a default.
__device__ __forceinline__ void cu_cp16_hint(void * dst, const void * src, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "l"(pol) : "memory");
#else
    (void) pol;
    *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
#endif
}
__device__ __forceinline__ void cu_cp8(void * dst, const void * src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(src) : "memory");
#else
    *static_cast<uint2 *>(dst) = *static_cast<const uint2 *>(src);
#endif
}
__device__ __forceinline__ void cu_cp4(void * dst, const void * src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
#else
    *static_cast<uint32_t *>(dst) = *static_cast<const uint32_t *>(src);
#endif
}
__device__ __forceinline__ void cu_cp_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cu_cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// The SM count of a device (cached per device; 132, an H100/H200's, when it cannot be read).
inline int cu_sm_count(int device) {
    static std::atomic<int> n_sm[64];
    if (device < 0 || device >= 64) return 132;
    int sms = n_sm[device].load(std::memory_order_relaxed);
    if (sms > 0) return sms;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
        cudaGetLastError();
        sms = 132;
    }
    n_sm[device].store(sms, std::memory_order_relaxed);
    return sms;
}

// The major number of a device's compute capability (cached per device; 0 when it cannot be
// read: no feature of any generation is assumed).
inline int cu_cc_major(int device) {
    static std::atomic<int> cc[64];  // major + 1 (0: not read yet)
    if (device < 0 || device >= 64) return 0;
    const int known = cc[device].load(std::memory_order_relaxed);
    if (known > 0) return known - 1;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 0) {
        cudaGetLastError();
        major = 0;
    }
    cc[device].store(major + 1, std::memory_order_relaxed);
    return major;
}

// Starts moving the 128-byte line at p into L2 (no register written).
__device__ __forceinline__ void cu_prefetch_l2(const void * p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// __ldcs(p) (a streaming 16-byte load) whose L2 request is widened to the PF-byte segment around
// it (PTX's .L2::128B / .L2::256B prefetch size: the rest of the segment comes into L2 with it);
// PF = 0: __ldcs. Issued in program order (volatile), as a weight load before a PDL wait must be.
template <int PF> __device__ __forceinline__ uint4 cu_ldcs_pf(const uint4 * p) {
    static_assert(PF == 0 || PF == 128 || PF == 256, "PTX prefetch sizes: 128 or 256 bytes");
    if constexpr (PF == 0) {
        return __ldcs(p);
    } else {
        uint4 v;
        if constexpr (PF == 128) {
            asm volatile("ld.global.cs.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
        } else {
            asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
        }
        return v;
    }
}

// kernel<<<grid, block, smem, ctx.stream>>>(args...), with the programmatic-serialization
// attribute when ctx.pdl, and in thread block clusters of `cluster` blocks when that is more
// than one (sm_90+; the grid a multiple of it in each dimension). Errors are left for
// ember_cuda_check_launch (cudaGetLastError).
template <typename... P, typename... A>
inline void cu_launch_cluster(const ember_cuda_ctx & ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, dim3 cluster, A &&... args) {
    if (ctx.skip_now) return;  // EMBER_CUDA_SKIP (measuring only)
    ctx.n_launch++;
    if (ctx.carve) ember_cuda_carve_apply(ctx.carve, reinterpret_cast<const void *>(kernel));  // EMBER_CUDA_CARVE (measuring)
    cudaLaunchAttribute attr[2];
    unsigned            n = 0;
    if (cluster.x * cluster.y * cluster.z > 1) {
        if (ctx.capturing) {
            const uint64_t v = (ctx.n_launch - ctx.capture_launch0) << 24 ^ uint64_t{cluster.x} << 16 ^ uint64_t{cluster.y} << 8 ^ cluster.z;
            ctx.cluster_sig  = (ctx.cluster_sig ^ v) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
        }
        attr[n].id               = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x;
        attr[n].val.clusterDim.y = cluster.y;
        attr[n].val.clusterDim.z = cluster.z;
        n++;
    }
    if (ctx.pdl) {
        attr[n].id                                         = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim            = grid;
    cfg.blockDim           = block;
    cfg.dynamicSmemBytes   = smem;
    cfg.stream             = ctx.stream;
    cfg.attrs              = attr;
    cfg.numAttrs           = n;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

template <typename... P, typename... A>
inline void cu_launch(const ember_cuda_ctx & ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A &&... args) {
    cu_launch_cluster(ctx, kernel, grid, block, smem, dim3(1, 1, 1), std::forward<A>(args)...);
}

// Records a data error (e.g. a row index out of range) for the stream to report.
__device__ __forceinline__ void cu_set_error(int * err, int status) {
    atomicCAS(err, 0, status);
}

__device__ __forceinline__ float cu_half(ember_half h) {
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float cu_bf16(ember_bf16 h) {
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// quant/types.cpp's ember_float_to_bf16: round to nearest even, NaN kept quiet.
__device__ __forceinline__ ember_bf16 cu_to_bf16(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<ember_bf16>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<ember_bf16>(x >> 16);
}

__device__ __forceinline__ ember_half cu_to_half(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

// The float of an integer |v| < 2^22 (a dp4a sum): its bits added under the exponent of
// 1.5 * 2^23, minus that (exact; an integer add and a float add where I2F issues at a quarter
// of the rate).
__device__ __forceinline__ float cu_int_float(int v) {
    return __int_as_float(0x4b400000 + v) - 12582912.0f;
}
// dp4a of unsigned bytes (a) with signed bytes (b): 4-bit quants' high nibbles used in place
// (a & 0xf0f0f0f0, the sum 16 times theirs), a shift a word less than moving them down.
__device__ __forceinline__ int cu_dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// The integer dots of 16 bytes of 4-bit quants with int8 activations: the low nibbles with xlo
// (.x) and the high nibbles, used in place, with xhi (.y: 16 times their dot). Q4_K takes the
// two apart (two sub-blocks); cu_dot_q4 adds them.
__device__ __forceinline__ int2 cu_dot_q4_halves(const uint4 & w, const int4 & xlo, const int4 & xhi) {
    int lo = 0, hi = 0;
    lo = cu_dp4a_us(w.x & 0x0f0f0f0fu, xlo.x, lo);
    hi = cu_dp4a_us(w.x & 0xf0f0f0f0u, xhi.x, hi);
    lo = cu_dp4a_us(w.y & 0x0f0f0f0fu, xlo.y, lo);
    hi = cu_dp4a_us(w.y & 0xf0f0f0f0u, xhi.y, hi);
    lo = cu_dp4a_us(w.z & 0x0f0f0f0fu, xlo.z, lo);
    hi = cu_dp4a_us(w.z & 0xf0f0f0f0u, xhi.z, hi);
    lo = cu_dp4a_us(w.w & 0x0f0f0f0fu, xlo.w, lo);
    hi = cu_dp4a_us(w.w & 0xf0f0f0f0u, xhi.w, hi);
    return make_int2(lo, hi);
}
// The integer dot of 32 4-bit quants (16 bytes: weight i in byte i % 16's low nibble for i < 16,
// its high nibble above) with 32 int8 activations (xlo: those of weights 0-15, xhi: 16-31), the
// high nibbles' sum shifted down once. Q4_0 and INT4.
__device__ __forceinline__ int cu_dot_q4(const uint4 & w, const int4 & xlo, const int4 & xhi) {
    const int2 s = cu_dot_q4_halves(w, xlo, xhi);
    return s.x + (s.y >> 4);
}

__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Warp-wide reductions in one REDUX instruction on sm_80+ (five dependent shuffles before:
// ~25 cycles each, on the critical path of every latency-bound decode launch that ends in a
// quantized copy or a merge). Same results as the shuffle forms: an int max / sum is exact in
// any order, and a float's order is its bits' order as a signed integer once the negative
// values' magnitude bits are flipped. NaN is not expected (cu_warp_max_fast's callers hold
// maxima of finite scores or -INFINITY).
__device__ __forceinline__ int cu_warp_max_int(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}
__device__ __forceinline__ int cu_warp_sum_int(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
#endif
}
// The warp's maximum of |v| as the shuffle form over fmaxf gives it (NaN lanes count as 0): the
// bits of a non-negative float order as ints. The quantized copies' block scale.
__device__ __forceinline__ float cu_warp_absmax(float v) {
    const float a = fabsf(v);
    return __int_as_float(cu_warp_max_int(a == a ? __float_as_int(a) : 0));
}
__device__ __forceinline__ float cu_warp_max_fast(float v) {
    const int i = __float_as_int(v), key = i >= 0 ? i : i ^ 0x7fffffff;
    const int m = cu_warp_max_int(key);
    return __int_as_float(m >= 0 ? m : m ^ 0x7fffffff);
}

// The integer matvec's quantized activations (ops-matvec-q.cu), made by the kernel that
// produces x instead of a separate launch (the fused RMS_NORM, SWIGLU, decode attention): each
// lane holds element idx of a block of 32 (flat index in x, rows of ne[0] % 32 == 0; every lane
// of the warp calls it), quantized with quantize_x_kernel's arithmetic.
__device__ __forceinline__ void cu_quantize_warp(float z, int64_t idx, int8_t * xq, float2 * xds) {
    const float d    = cu_warp_absmax(z) / 127.0f;
    const float id   = d != 0.0f ? 1.0f / d : 0.0f;
    const int   q    = static_cast<int>(roundf(__fmul_rn(z, id)));
    const int   sq   = cu_warp_sum_int(q);
    xq[idx] = static_cast<int8_t>(q);
    if (threadIdx.x % 32 == 0) {
        const float dh = __half2float(__float2half_rn(d));
        xds[idx / 32]  = make_float2(dh, dh * static_cast<float>(sq));
    }
}

// The sum of v over a block of THREADS threads (every thread calls it with t = threadIdx.x; all
// get the sum): warp sums, then the warps' sums added in warp order (one fixed order: the same
// bits every run). The decode norm (rms_norm_dec_kernel).
template <int THREADS> __device__ __forceinline__ float cu_block_sum(float v, int t) {
    __shared__ float part[THREADS / 32];
    v = cu_warp_sum(v);
    if (t % 32 == 0) part[t / 32] = v;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int k = 0; k < THREADS / 32; k++) tot += part[k];
    return tot;
}

// cu_quantize_warp's arithmetic over the 8 lanes that hold a block of 32 values, 4 a lane
// (lanes 8 j .. 8 j + 7; every lane of the warp calls it): the lane's 4 int8 values, the block's
// scale d and its sum of q (the same in all 8 lanes); the copy keeps (d, d sum q) as cu_q8_ds
// makes it. The decode norm's quantized copy (rms_norm_dec_kernel).
struct cu_q8_quad {
    char4 q;
    float d;
    int   sq;
};
__device__ __forceinline__ cu_q8_quad cu_quantize_quad(const float4 & z) {
    float amax = fmaxf(fmaxf(fabsf(z.x), fabsf(z.y)), fmaxf(fabsf(z.z), fabsf(z.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d  = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int   q0 = static_cast<int>(roundf(__fmul_rn(z.x, id))), q1 = static_cast<int>(roundf(__fmul_rn(z.y, id)));
    const int   q2 = static_cast<int>(roundf(__fmul_rn(z.z, id))), q3 = static_cast<int>(roundf(__fmul_rn(z.w, id)));
    int         sq = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    return {make_char4(static_cast<signed char>(q0), static_cast<signed char>(q1), static_cast<signed char>(q2), static_cast<signed char>(q3)), d, sq};
}
// A block's (d, d sum q) as the quantized copy keeps it: d rounded through half.
__device__ __forceinline__ float2 cu_q8_ds(const cu_q8_quad & v) {
    const float dh = __half2float(__float2half_rn(v.d));
    return make_float2(dh, dh * static_cast<float>(v.sq));
}

// Tensor-core building blocks (sm_80+), for the tensor-core prefill (ops-matmul-q.cu) and decode
// attention (ops-attention-decode-mma.cuh): a shared-memory address for ldmatrix; four 8x8 f16
// matrices by ldmatrix (rows given by lanes 8 i .. 8 i + 7 for matrix i), transposed or not; and
// one mma.m16n8k16 f16 x f16 -> f32 accumulating into c. The product is not volatile (no side
// effects), so the compiler may schedule it around the (volatile, ordered) fragment loads.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t cu_smem_addr(const void * p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cu_ldsm_x4(uint32_t (&r)[4], uint32_t p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(p));
}
__device__ __forceinline__ void cu_ldsm_x4_t(uint32_t (&r)[4], uint32_t p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(p));
}
// 2^x by the special-function unit (ex2.approx: ~2 ulp; 2^-INF = 0): one instruction where
// exp2f's full-precision path took several per probability (the attention kernels' softmax).
__device__ __forceinline__ float cu_exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void cu_mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// The IQ4_NL / IQ4_XS grid.
__device__ __forceinline__ int cu_iq4nl_value(int q) {
    const int8_t v[16] = EMBER_IQ4NL_VALUES;
    return v[q];
}

//
// Chunk dequantizers: weights [32 c, 32 c + 32) of a row, for every type whose block size
// divides 256 into chunks of 32 (block-32 types: one block; K-quants: sub-chunk c % 8 of
// super-block c / 8). Float types read 32 consecutive elements.
//
template <int T> struct cu_codec;

template <> struct cu_codec<EMBER_TYPE_F32> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        // Scalar loads: a view's rows need not be 16-byte aligned.
        const float * p = reinterpret_cast<const float *>(row) + c * 32;
#pragma unroll
        for (int i = 0; i < 32; i++) y[i] = p[i];
    }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) { return reinterpret_cast<const float *>(row)[i]; }
};

template <> struct cu_codec<EMBER_TYPE_F16> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_half * p = reinterpret_cast<const ember_half *>(row) + c * 32;
#pragma unroll
        for (int i = 0; i < 32; i++) y[i] = cu_half(p[i]);
    }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) { return cu_half(reinterpret_cast<const ember_half *>(row)[i]); }
};

template <> struct cu_codec<EMBER_TYPE_BF16> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_bf16 * p = reinterpret_cast<const ember_bf16 *>(row) + c * 32;
#pragma unroll
        for (int i = 0; i < 32; i++) y[i] = cu_bf16(p[i]);
    }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) { return cu_bf16(reinterpret_cast<const ember_bf16 *>(row)[i]); }
};

template <> struct cu_codec<EMBER_TYPE_Q4_0> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q4_0 * b = reinterpret_cast<const ember_block_q4_0 *>(row) + c;
        const float              d = cu_half(b->d);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b->qs[j];
            y[j]        = d * ((q & 0x0f) - 8);
            y[j + 16]   = d * ((q >> 4) - 8);
        }
    }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) {
        const ember_block_q4_0 * b = reinterpret_cast<const ember_block_q4_0 *>(row) + i / 32;
        const int                j = static_cast<int>(i % 32);
        const int                q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
        return cu_half(b->d) * (q - 8);
    }
};

template <> struct cu_codec<EMBER_TYPE_Q4_1> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q4_1 * b = reinterpret_cast<const ember_block_q4_1 *>(row) + c;
        const float              d = cu_half(b->d), m = cu_half(b->m);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b->qs[j];
            y[j]        = static_cast<float>(q & 0x0f) * d + m;
            y[j + 16]   = static_cast<float>(q >> 4) * d + m;
        }
    }
};

// Q5_0 / Q5_1: qh is a little-endian uint32 at a 2-byte-aligned address.
__device__ __forceinline__ uint32_t cu_load_qh(const uint8_t * qh) {
    return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
           static_cast<uint32_t>(qh[3]) << 24;
}

template <> struct cu_codec<EMBER_TYPE_Q5_0> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q5_0 * b = reinterpret_cast<const ember_block_q5_0 *>(row) + c;
        const float              d = cu_half(b->d);
        const uint32_t           h = cu_load_qh(b->qh);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q0 = (b->qs[j] & 0x0f) | static_cast<int>((h >> j & 1u) << 4);
            const int q1 = (b->qs[j] >> 4) | static_cast<int>((h >> (j + 16) & 1u) << 4);
            y[j]         = static_cast<float>(q0 - 16) * d;
            y[j + 16]    = static_cast<float>(q1 - 16) * d;
        }
    }
};

template <> struct cu_codec<EMBER_TYPE_Q5_1> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q5_1 * b = reinterpret_cast<const ember_block_q5_1 *>(row) + c;
        const float              d = cu_half(b->d), m = cu_half(b->m);
        const uint32_t           h = cu_load_qh(b->qh);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q0 = (b->qs[j] & 0x0f) | static_cast<int>((h >> j & 1u) << 4);
            const int q1 = (b->qs[j] >> 4) | static_cast<int>((h >> (j + 16) & 1u) << 4);
            y[j]         = static_cast<float>(q0) * d + m;
            y[j + 16]    = static_cast<float>(q1) * d + m;
        }
    }
};

template <> struct cu_codec<EMBER_TYPE_Q8_0> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q8_0 * b = reinterpret_cast<const ember_block_q8_0 *>(row) + c;
        const float              d = cu_half(b->d);
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = d * b->qs[j];
    }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) {
        const ember_block_q8_0 * b = reinterpret_cast<const ember_block_q8_0 *>(row) + i / 32;
        return cu_half(b->d) * b->qs[i % 32];
    }
};

template <> struct cu_codec<EMBER_TYPE_IQ4_NL> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_iq4_nl * b = reinterpret_cast<const ember_block_iq4_nl *>(row) + c;
        const float                d = cu_half(b->d);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            y[j]      = d * static_cast<float>(cu_iq4nl_value(b->qs[j] & 0xf));
            y[j + 16] = d * static_cast<float>(cu_iq4nl_value(b->qs[j] >> 4));
        }
    }
};

// The 2-bit field of weight i (0..255) in the Q2_K / Q3_K packing.
__device__ __forceinline__ int cu_level_2bit(const uint8_t * qs, int i) {
    const int half = i / 128, r = i % 128;
    return qs[32 * half + r % 32] >> (2 * (r / 32)) & 3;
}

template <> struct cu_codec<EMBER_TYPE_Q2_K> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q2_k * b   = reinterpret_cast<const ember_block_q2_k *>(row) + c / 8;
        const int                s   = static_cast<int>(c % 8);
        const float              d   = cu_half(b->d);
        const float              min = cu_half(b->dmin);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int   j  = 2 * s + h;  // 16-weight sub-block
            const float dl = d * static_cast<float>(b->scales[j] & 0xf);
            const float ml = min * static_cast<float>(b->scales[j] >> 4);
#pragma unroll
            for (int l = 0; l < 16; l++) y[16 * h + l] = dl * static_cast<float>(cu_level_2bit(b->qs, 16 * j + l)) - ml;
        }
    }
};

__device__ __forceinline__ int cu_q3k_scale(const uint8_t * scales, int j) {
    const int lo = j < 8 ? scales[j] & 0xf : scales[j - 8] >> 4;
    const int hi = scales[8 + j % 4] >> (2 * (j / 4)) & 3;
    return lo | hi << 4;
}

template <> struct cu_codec<EMBER_TYPE_Q3_K> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q3_k * b = reinterpret_cast<const ember_block_q3_k *>(row) + c / 8;
        const int                s = static_cast<int>(c % 8);
        const float              d = cu_half(b->d);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int   j  = 2 * s + h;
            const float dl = d * static_cast<float>(cu_q3k_scale(b->scales, j) - 32);
#pragma unroll
            for (int l = 0; l < 16; l++) {
                const int i  = 16 * j + l;
                const int hi = b->hmask[i % 32] >> (i / 32) & 1;
                y[16 * h + l] = dl * static_cast<float>(cu_level_2bit(b->qs, i) - (hi ? 0 : 4));
            }
        }
    }
};

__device__ __forceinline__ void cu_k4_scale_min(const uint8_t * q, int j, int & sc, int & m) {
    if (j < 4) {
        sc = q[j] & 63;
        m  = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4;
        m  = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

template <> struct cu_codec<EMBER_TYPE_Q4_K> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q4_k * b = reinterpret_cast<const ember_block_q4_k *>(row) + c / 8;
        const int                s = static_cast<int>(c % 8);  // sub-block of 32
        int                      sc, m;
        cu_k4_scale_min(b->scales, s, sc, m);
        const float     dl  = cu_half(b->d) * static_cast<float>(sc);
        const float     ml  = cu_half(b->dmin) * static_cast<float>(m);
        const uint8_t * qs  = b->qs + 32 * (s / 2);
        const int       sh  = (s % 2) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) y[l] = dl * static_cast<float>(qs[l] >> sh & 0xf) - ml;
    }
};

template <> struct cu_codec<EMBER_TYPE_Q5_K> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q5_k * b = reinterpret_cast<const ember_block_q5_k *>(row) + c / 8;
        const int                s = static_cast<int>(c % 8);
        int                      sc, m;
        cu_k4_scale_min(b->scales, s, sc, m);
        const float     dl = cu_half(b->d) * static_cast<float>(sc);
        const float     ml = cu_half(b->dmin) * static_cast<float>(m);
        const uint8_t * qs = b->qs + 32 * (s / 2);
        const int       sh = (s % 2) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = (qs[l] >> sh & 0xf) | (b->qh[l] >> s & 1) << 4;  // weight 32 s + l: bit s of qh[l]
            y[l]        = dl * static_cast<float>(q) - ml;
        }
    }
};

template <> struct cu_codec<EMBER_TYPE_Q6_K> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_q6_k * b    = reinterpret_cast<const ember_block_q6_k *>(row) + c / 8;
        const int                s    = static_cast<int>(c % 8);
        const int                half = s / 4, g = s % 4;  // weights 128 half + 32 g + l
        const uint8_t *          ql   = b->ql + 64 * half + 32 * (g & 1);
        const uint8_t *          qh   = b->qh + 32 * half;
        const float              d    = cu_half(b->d);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int lo = g < 2 ? (ql[l] & 0x0f) : (ql[l] >> 4);
            const int q  = (lo | (qh[l] >> (2 * g) & 3) << 4) - 32;
            const int i  = 32 * s + l;
            y[l]         = d * static_cast<float>(b->scales[i / 16]) * static_cast<float>(q);
        }
    }
};

template <> struct cu_codec<EMBER_TYPE_IQ4_XS> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const ember_block_iq4_xs * b  = reinterpret_cast<const ember_block_iq4_xs *>(row) + c / 8;
        const int                  j  = static_cast<int>(c % 8);
        const int                  ls = (b->scales_l[j / 2] >> (4 * (j % 2)) & 0xf) | (b->scales_h >> (2 * j) & 3) << 4;
        const float                dl = cu_half(b->d) * static_cast<float>(ls - 32);
        const uint8_t *            qs = b->qs + 16 * j;
#pragma unroll
        for (int l = 0; l < 16; l++) {
            y[l]      = dl * static_cast<float>(cu_iq4nl_value(qs[l] & 0xf));
            y[l + 16] = dl * static_cast<float>(cu_iq4nl_value(qs[l] >> 4));
        }
    }
};

//
// Ember's own types (docs/quant-types.md, quant/ref/ref-{int4,nf4,fp8}.cpp).
//
// INT4 / INT4_G32: w = d * (q - z) per group of G weights; run j of 32 in a group packs
// weight 32 j + i in the low nibble of qs[16 j + i] and 32 j + 16 + i in the high one.
// A chunk's 16 bytes of levels (w, Q4_0's nibble order) and its group's d | z << 16 (f16 bits) as
// floats (also the ext layout's codec, cuda-mmq.h).
__device__ __forceinline__ void cu_int4_floats(const uint32_t (&w)[4], uint32_t dz, float * y) {
    const float d = cu_half(static_cast<ember_half>(dz & 0xffffu));
    const float z = cu_half(static_cast<ember_half>(dz >> 16));
#pragma unroll
    for (int i = 0; i < 16; i++) {  // byte i: weights i (low nibble) and i + 16 (high)
        const uint32_t b = (w[i / 4] >> (8 * (i % 4))) & 0xffu;
        y[i]             = d * (static_cast<float>(b & 0x0fu) - z);
        y[i + 16]        = d * (static_cast<float>(b >> 4) - z);
    }
}
// Chunk c's levels and d | z << 16 from the GGUF layout (68- / 20-byte blocks: 4-byte aligned).
template <int G> __device__ __forceinline__ void cu_int4_load(const char * row, int64_t c, uint32_t (&w)[4], uint32_t & dz) {
    constexpr int    runs = G / 32;
    const uint32_t * b    = reinterpret_cast<const uint32_t *>(row + (c / runs) * (4 + G / 2));
    dz                    = b[0];
#pragma unroll
    for (int q = 0; q < 4; q++) w[q] = b[1 + 4 * (c % runs) + q];
}
template <int G> __device__ __forceinline__ void cu_int4_chunk(const char * row, int64_t c, float * y) {
    uint32_t w[4], dz;
    cu_int4_load<G>(row, c, w, dz);
    cu_int4_floats(w, dz, y);
}
template <> struct cu_codec<EMBER_TYPE_INT4> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_int4_chunk<128>(row, c, y); }
};
template <> struct cu_codec<EMBER_TYPE_INT4_G32> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_int4_chunk<32>(row, c, y); }
};

// FP8 codes to float, exactly (OCP E4M3: bias 7, S.1111.111 is NaN, no infinities; E5M2 is
// the top byte of an IEEE half).
__device__ __forceinline__ float cu_fp8_e4m3(uint32_t c) {
    const uint32_t s = (c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
    if ((c & 0x7fu) == 0x7fu) return __uint_as_float(0x7fc00000u | s);
    if (e == 0) return __uint_as_float(s) + (s ? -1.0f : 1.0f) * static_cast<float>(m) * 0x1p-9f;
    return __uint_as_float(s | (e + 120u) << 23 | m << 20);
}
__device__ __forceinline__ float cu_fp8_e5m2(uint32_t c) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(c << 8)));
}
template <bool E4M3> __device__ __forceinline__ float cu_fp8(uint32_t c) {
    if constexpr (E4M3) return cu_fp8_e4m3(c);
    else return cu_fp8_e5m2(c);
}

// Four FP8 codes as two f16 pairs (codes 0, 1 in lo) whose values times cu_fp8_half_post are the
// codes': E4M3 by the hardware conversion on sm_89+ (exact; NaN codes give NaN), else by bit
// moves (cu_fp8x4_half_bits: E4M3 as value / 256).
template <bool E4M3> __device__ __forceinline__ void cu_fp8x4_half(uint32_t w, uint32_t & lo, uint32_t & hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if constexpr (E4M3) {
        const unsigned short w0 = static_cast<unsigned short>(w & 0xffffu), w1 = static_cast<unsigned short>(w >> 16);
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(w0));
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(w1));
        return;
    }
#endif
    cu_fp8x4_half_bits<E4M3>(w, lo, hi);
}
template <bool E4M3> __device__ __forceinline__ constexpr float cu_fp8_half_post() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return 1.0f;
#else
    return E4M3 ? 256.0f : 1.0f;
#endif
}

// Block FP8: 33-byte blocks, an E8M0 exponent e (scale 2^(e - 127), 255 = NaN) and 32 codes.
template <bool E4M3> __device__ __forceinline__ void cu_fp8_block_chunk(const char * row, int64_t c, float * y) {
    const uint8_t * b = reinterpret_cast<const uint8_t *>(row) + c * 33;
    const float     s = b[0] == 255 ? __uint_as_float(0x7fc00000u) : ldexpf(1.0f, static_cast<int>(b[0]) - 127);
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = cu_fp8<E4M3>(b[1 + i]) * s;
}
// One element (KV caches): code * scale, as to_float_blocks (lut[q] * s).
template <bool E4M3> __device__ __forceinline__ float cu_fp8_block_elem(const char * row, int64_t i) {
    const uint8_t * b = reinterpret_cast<const uint8_t *>(row) + (i / 32) * 33;
    return cu_fp8<E4M3>(b[1 + i % 32]) * cu_fp8_e8m0_scale(b[0]);
}
template <> struct cu_codec<EMBER_TYPE_FP8_E4M3> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_fp8_block_chunk<true>(row, c, y); }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) { return cu_fp8_block_elem<true>(row, i); }
};
template <> struct cu_codec<EMBER_TYPE_FP8_E5M2> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_fp8_block_chunk<false>(row, c, y); }
    static __device__ __forceinline__ float elem(const char * row, int64_t i) { return cu_fp8_block_elem<false>(row, i); }
};

// Row FP8: [fp32 scale][codes], the scale at the (4-byte-aligned) row start.
template <bool E4M3> __device__ __forceinline__ void cu_fp8_row_chunk(const char * row, int64_t c, float * y) {
    const float     s = *reinterpret_cast<const float *>(row);
    const uint8_t * q = reinterpret_cast<const uint8_t *>(row) + 4 + 32 * c;
#pragma unroll
    for (int i = 0; i < 32; i++) y[i] = cu_fp8<E4M3>(q[i]) * s;
}
template <> struct cu_codec<EMBER_TYPE_FP8_E4M3_ROW> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_fp8_row_chunk<true>(row, c, y); }
};
template <> struct cu_codec<EMBER_TYPE_FP8_E5M2_ROW> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) { cu_fp8_row_chunk<false>(row, c, y); }
};

// NF4: groups of up to 256 blocks of 64 weights, each group led by an 8-byte header (fp32
// scale2, fp32 offset); a block's absmax is dyn[absmax_q] * scale2 + offset, weight i of the
// block NF4[low nibble of qs[i]] * absmax and weight 32 + i NF4[high nibble]. The tables are
// those of quant/ref/ref-nf4.cpp, the dynamic map computed at compile time by the same float
// arithmetic (tests compare GET_ROWS with the CPU).
struct cu_nf4_values {
    float v[16];
};
constexpr cu_nf4_values cu_nf4_codebook = {
    {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, -0.18477343022823334f,
     -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
     0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f}};
static __constant__ cu_nf4_values cu_nf4_table = cu_nf4_codebook;  // (the kernels' copy; constexpr checks read cu_nf4_codebook)

// The codebook in shared memory, for lookups whose index differs across a warp's lanes: constant
// memory serializes a warp's distinct addresses (up to 16 reads a lookup), shared memory serves
// the 16 words from 16 banks at once. The same floats as cu_nf4_table. A kernel that reads it
// fills it first: every thread calls cu_nf4_smem_fill (blocks of 16 threads or more), then a barrier.
static __shared__ float cu_nf4_smem[16];
__device__ __forceinline__ void cu_nf4_smem_fill() {
    if (threadIdx.x < 16) cu_nf4_smem[threadIdx.x] = cu_nf4_table.v[threadIdx.x];
}

struct cu_nf4_dyn_values {
    float v[256];
};
constexpr cu_nf4_dyn_values cu_make_nf4_dyn() {
    cu_nf4_dyn_values r{};
    // static_cast<float>(std::pow(10.0, i - 6)), as the reference
    const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    int          n        = 0;
    for (int i = 0; i < 7; i++) {
        const int   steps = (1 << i) + 1;
        const float start = 0.1f, end = 1.0f;
        const float step  = (end - start) / static_cast<float>(steps - 1);
        float       b[65] = {};
        for (int j = 0; j < steps; j++) {
            b[j] = j < steps / 2 ? start + step * static_cast<float>(j) : end - step * static_cast<float>(steps - 1 - j);
        }
        const float scale = static_cast<float>(pow10[i]);
        for (int j = 0; j + 1 < steps; j++) {
            const float mean = (b[j] + b[j + 1]) / 2.0f;
            r.v[n++]         = scale * mean;
            r.v[n++]         = -(scale * mean);
        }
    }
    r.v[n++] = 0.0f;
    r.v[n++] = 1.0f;
    for (int i = 1; i < 256; i++) {  // insertion sort
        const float x = r.v[i];
        int         j = i - 1;
        while (j >= 0 && r.v[j] > x) {
            r.v[j + 1] = r.v[j];
            j--;
        }
        r.v[j + 1] = x;
    }
    return r;
}
static __constant__ cu_nf4_dyn_values cu_nf4_dyn = cu_make_nf4_dyn();
template <> struct cu_codec<EMBER_TYPE_NF4> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const int64_t   blk = c / 2, g = blk / 256;
        const char *    hdr = row + g * (8 + 256 * 33);
        // Rows of an odd number of 33-byte blocks put the next row's header off 4-byte
        // alignment: its floats are read byte by byte (a float load there is a sticky
        // misaligned-address fault).
        const auto      f32 = [](const char * p) {
            const uint8_t * u = reinterpret_cast<const uint8_t *>(p);
            return __uint_as_float(static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 | static_cast<uint32_t>(u[2]) << 16 |
                                   static_cast<uint32_t>(u[3]) << 24);
        };
        const float     scale2 = f32(hdr);
        const float     offset = f32(hdr + 4);
        const uint8_t * b      = reinterpret_cast<const uint8_t *>(hdr + 8) + (blk % 256) * 33;
        const float     s      = __fadd_rn(__fmul_rn(cu_nf4_dyn.v[b[0]], scale2), offset);  // as the CPU: no FMA
        const int       sh     = (c % 2) * 4;
#pragma unroll
        for (int i = 0; i < 32; i++) y[i] = cu_nf4_table.v[(b[1 + i] >> sh) & 0xf] * s;
    }
};

//
// Encoders (destination types of SET_ROWS and CPY): 32 floats -> one block, or one element.
//
template <int T> struct cu_encoder;

template <> struct cu_encoder<EMBER_TYPE_F32> {
    static constexpr int QK = 1;
    static __device__ __forceinline__ void block(const float * x, char * dst) { *reinterpret_cast<float *>(dst) = x[0]; }
};
template <> struct cu_encoder<EMBER_TYPE_F16> {
    static constexpr int QK = 1;
    static __device__ __forceinline__ void block(const float * x, char * dst) { *reinterpret_cast<ember_half *>(dst) = cu_to_half(x[0]); }
};
template <> struct cu_encoder<EMBER_TYPE_BF16> {
    static constexpr int QK = 1;
    static __device__ __forceinline__ void block(const float * x, char * dst) { *reinterpret_cast<ember_bf16 *>(dst) = cu_to_bf16(x[0]); }
};

// ember_ref_from_float_Q8_0: d = max|x| / 127, q = round(x / d).
template <> struct cu_encoder<EMBER_TYPE_Q8_0> {
    static constexpr int QK = 32;
    static __device__ __forceinline__ void block(const float * x, char * dst) {
        ember_block_q8_0 * b    = reinterpret_cast<ember_block_q8_0 *>(dst);
        float              amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d  = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d           = cu_to_half(d);
        for (int j = 0; j < 32; j++) b->qs[j] = static_cast<int8_t>(roundf(__fmul_rn(x[j], id)));
    }
};

// ember_ref_from_float_Q4_0: d = (signed value of largest magnitude) / -8.
template <> struct cu_encoder<EMBER_TYPE_Q4_0> {
    static constexpr int QK = 32;
    static __device__ __forceinline__ void block(const float * x, char * dst) {
        ember_block_q4_0 * b    = reinterpret_cast<ember_block_q4_0 *>(dst);
        float              amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max  = x[j];
            }
        }
        const float d  = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d           = cu_to_half(d);
        for (int j = 0; j < 16; j++) {
            const float   x0 = __fmul_rn(x[j], id);
            const float   x1 = __fmul_rn(x[j + 16], id);
            const uint8_t q0 = static_cast<uint8_t>(fminf(15.0f, __fadd_rn(x0, 8.5f)));
            const uint8_t q1 = static_cast<uint8_t>(fminf(15.0f, __fadd_rn(x1, 8.5f)));
            b->qs[j]         = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
};

// FP8_E4M3 / FP8_E5M2 (KV caches): ember_ref_from_float_FP8_*, bit for bit (cuda-fp8.h).
template <> struct cu_encoder<EMBER_TYPE_FP8_E4M3> {
    static constexpr int QK = 32;
    static __device__ __forceinline__ void block(const float * x, char * dst) {
        ember_block_fp8 * b = reinterpret_cast<ember_block_fp8 *>(dst);
        cu_fp8_encode_block<true>(x, &b->e, b->qs);
    }
};
template <> struct cu_encoder<EMBER_TYPE_FP8_E5M2> {
    static constexpr int QK = 32;
    static __device__ __forceinline__ void block(const float * x, char * dst) {
        ember_block_fp8 * b = reinterpret_cast<ember_block_fp8 *>(dst);
        cu_fp8_encode_block<false>(x, &b->e, b->qs);
    }
};

// One 32-value block encoded by a warp, lane j holding x[j]: the same bits as cu_encoder<T>::block
// (the maxima are order-free, the rest is the same arithmetic per value). A decode step's
// SET_ROWS into a quantized KV cache (a few blocks per row) then costs one round trip and a
// few shuffles instead of one thread walking 32 values twice (set_rows_warp_kernel).
template <int T> __host__ __device__ constexpr bool cu_has_warp_encoder() {
    return T == EMBER_TYPE_Q8_0 || T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E5M2;
}
template <int T> __device__ __forceinline__ void cu_encode_warp(float x, char * dst) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    if constexpr (T == EMBER_TYPE_Q8_0) {
        ember_block_q8_0 * b    = reinterpret_cast<ember_block_q8_0 *>(dst);
        const float        amax = cu_warp_max(fmaxf(0.0f, fabsf(x)));  // NaN counts as 0, as fmaxf in the loop
        const float        d    = amax / 127.0f;
        const float        id   = d != 0.0f ? 1.0f / d : 0.0f;
        if (lane == 0) b->d = cu_to_half(d);
        b->qs[lane] = static_cast<int8_t>(roundf(__fmul_rn(x, id)));
    } else if constexpr (T == EMBER_TYPE_Q4_0) {
        // The first value of the largest magnitude (the serial loop's strict comparison).
        float a = fabsf(x);
        if (!(a > 0.0f)) a = 0.0f;  // NaN never wins; nor does a zero (the loop keeps max = +0)
        int j = lane;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ao = __shfl_xor_sync(0xffffffffu, a, o);
            const int   jo = __shfl_xor_sync(0xffffffffu, j, o);
            if (ao > a || (ao == a && jo < j)) a = ao, j = jo;
        }
        const float xj  = __shfl_sync(0xffffffffu, x, j);
        const float max = a > 0.0f ? xj : 0.0f;
        const float d   = max / -8.0f;
        const float id  = d != 0.0f ? 1.0f / d : 0.0f;
        ember_block_q4_0 * b = reinterpret_cast<ember_block_q4_0 *>(dst);
        if (lane == 0) b->d = cu_to_half(d);
        const unsigned q  = static_cast<uint8_t>(fminf(15.0f, __fadd_rn(__fmul_rn(x, id), 8.5f)));
        const unsigned hi = __shfl_down_sync(0xffffffffu, q, 16);
        if (lane < 16) b->qs[lane] = static_cast<uint8_t>(q | (hi << 4));
    } else {
        constexpr bool    E4M3 = T == EMBER_TYPE_FP8_E4M3;
        ember_block_fp8 * b    = reinterpret_cast<ember_block_fp8 *>(dst);
        const uint32_t    u    = cu_fp8_bits(x);
        const uint32_t    au   = u & 0x7fffffffu;
        uint32_t          amax = au < 0x7f800000u ? au : 0u;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const uint32_t e = cu_fp8_block_exponent<E4M3>(amax);
        if (lane == 0) b->e = static_cast<uint8_t>(e);
        const uint32_t sign = (u >> 24) & 0x80u;
        if (au > 0x7f800000u) {
            b->qs[lane] = static_cast<uint8_t>(sign | 0x7fu);  // NaN
        } else {
            const float s = cu_fp8_pow2(127 - static_cast<int>(e));
            b->qs[lane]   = static_cast<uint8_t>(cu_fp8_encode_abs<E4M3>(__fmul_rn(cu_fp8_float(au), s), sign));
        }
    }
}

//
// Type dispatch: calls F.template operator()<T>() for the run-time type t; false when t has
// no codec here.
//
// The type among Ts that t is (the first match; f is not called when t is none of them).
template <ember_type... Ts, typename F> inline bool cu_dispatch_among(ember_type t, F && f) {
    return ((t == Ts && (f.template operator()<Ts>(), true)) || ...);
}

// Types with a chunk codec (weights: cu_codec<T>).
template <typename F> inline bool cu_dispatch_chunk_type(ember_type t, F && f) {
    return cu_dispatch_among<EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0,
                             EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K,
                             EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS, EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4,
                             EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW>(t, f);
}

// The KV cache types: those with an element reader (read by ATTN) are those with an encoder
// (written by SET_ROWS / CPY).
template <typename F> inline bool cu_dispatch_elem_type(ember_type t, F && f) {
    return cu_dispatch_among<EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3,
                             EMBER_TYPE_FP8_E5M2>(t, f);
}
template <typename F> inline bool cu_dispatch_encode_type(ember_type t, F && f) {
    return cu_dispatch_elem_type(t, f);
}

// The CUDA weight layout (cuda-repack.h, EMBER_TENSOR_FLAG_CUDA_REPACKED), Q4_0 and Q8_0:
// dequantizes global block `blk` (row r, block b: r * blocks per row + b) of a tensor of
// `nblk` blocks in all, as cu_codec<T>::chunk does for the GGUF block.
template <int T> __device__ __forceinline__ void cu_rp_chunk(const char * base, int64_t nblk, int64_t blk, float * y) {
    static_assert(T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_Q8_0, "CUDA layout: Q4_0 and Q8_0 only");
    constexpr int QB = T == EMBER_TYPE_Q4_0 ? 16 : 32;
    union {
        uint4   v[QB / 16];
        uint8_t b[QB];
    } q;
    const uint4 * qp = reinterpret_cast<const uint4 *>(base + blk * QB);
#pragma unroll
    for (int i = 0; i < QB / 16; i++) q.v[i] = qp[i];
    const float d = cu_half(reinterpret_cast<const ember_half *>(base + nblk * QB)[blk]);
    if constexpr (T == EMBER_TYPE_Q4_0) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            y[j]      = d * ((q.b[j] & 0x0f) - 8);
            y[j + 16] = d * ((q.b[j] >> 4) - 8);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = d * static_cast<int8_t>(q.b[j]);
    }
}


//
// Chunk dequantizers to F16 pairs, for the prefill operands (the tensor-core GEMM's shared-memory
// tiles, ops-matmul-q.cu, and the F16 copies for cuBLAS, ops-matmul.cu; both use these, so the
// two paths multiply the same F16 weights): h[i] holds weights 2i and 2i + 1 of the chunk as a
// half2 (low half first). The default rounds cu_codec<T>::chunk's floats; Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS decode in half2 arithmetic: a level q (0..255) is
// placed under the F16 exponent of 1024 by a byte permute (0x6400 | q is 1024 + q exactly), 1024 +
// offset is subtracted (exact), and one multiply (or fma) by the F16 scale rounds once. Q4_0, Q5_0,
// Q8_0 and IQ4_NL give the same bits as the float decoder rounded to F16 (d * q is exact in
// float); Q4_1 / Q5_1 round q d + m once where the float decoder rounds twice; the K-quants and
// IQ4_XS round the sub-block scale d * sc (and min) to F16 first, within an F16 ulp of the float
// decoder (where q d sc and m d min do not nearly cancel).
//
__device__ __forceinline__ __half2 cu_h2_bits(uint32_t u) {
    return *reinterpret_cast<const __half2 *>(&u);
}
__device__ __forceinline__ uint32_t cu_h2_u32(__half2 h) {
    return *reinterpret_cast<const uint32_t *>(&h);
}
// Two floats rounded to an f16 pair (lo in the low half: an mma operand register, or two
// consecutive halves in memory).
__device__ __forceinline__ uint32_t cu_pack_h2(float lo, float hi) {
    return cu_h2_u32(__floats2half2_rn(lo, hi));
}

// NW words of FP8 codes (4 a word) of one block with E8M0 exponent e as f16 pairs r[2 j] (codes 0,
// 1 of word j), r[2 j + 1] (codes 2, 3): each code's value times 2^(e - 127) rounded once to f16.
// The codes to f16 pairs (cu_fp8x4_half, exact), then one __hmul2 by the scale (times
// cu_fp8_half_post) as an f16 power of two: a power-of-two product rounded once, the bits the
// float product (exact in float) rounded to f16 has. Scales f16 cannot hold (below 2^-24, above
// 2^15, e = 255's NaN) through floats. Shared by the decode attention over FP8 caches and the
// prefill GEMM's FP8 weight tiles (cu_ext_h2).
template <bool E4M3, int NW> __device__ __forceinline__ void cu_fp8_words_h2(const uint32_t * q, uint32_t e, uint32_t * r) {
    const float   post = cu_fp8_half_post<E4M3>();  // the f16 bits' value times post is the code's
    const float   sc   = cu_fp8_e8m0_scale(e);
    const float   m    = post * sc;
    const bool    hm   = m >= 0x1p-24f && m <= 0x1p15f;  // an f16 (NaN: no)
    const __half2 m2   = __float2half2_rn(m);
#pragma unroll
    for (int j = 0; j < NW; j++) {
        uint32_t lo, hi;
        cu_fp8x4_half<E4M3>(q[j], lo, hi);
        if (hm) {
            r[2 * j]     = cu_h2_u32(__hmul2(cu_h2_bits(lo), m2));
            r[2 * j + 1] = cu_h2_u32(__hmul2(cu_h2_bits(hi), m2));
        } else {
            const float2 a = __half22float2(cu_h2_bits(lo)), c = __half22float2(cu_h2_bits(hi));
            r[2 * j]       = cu_pack_h2(a.x * post * sc, a.y * post * sc);
            r[2 * j + 1]   = cu_pack_h2(c.x * post * sc, c.y * post * sc);
        }
    }
}

// Bytes 0, 1 (sel 0x4140) or 2, 3 (0x4342) of u as the low bytes of two F16 of exponent 1024.
template <uint32_t SEL> __device__ __forceinline__ __half2 cu_h2_levels(uint32_t u) {
    return cu_h2_bits(__byte_perm(u, 0x64646464u, SEL));
}

// Four level bytes t minus `off`, times d (or times d plus m): h[0..1].
__device__ __forceinline__ void cu_h2_bytes(uint32_t t, __half2 off, __half2 d, uint32_t * h) {
    h[0] = cu_h2_u32(__hmul2(__hsub2(cu_h2_levels<0x4140>(t), off), d));
    h[1] = cu_h2_u32(__hmul2(__hsub2(cu_h2_levels<0x4342>(t), off), d));
}
__device__ __forceinline__ void cu_h2_bytes_fma(uint32_t t, __half2 off, __half2 d, __half2 m, uint32_t * h) {
    h[0] = cu_h2_u32(__hfma2(__hsub2(cu_h2_levels<0x4140>(t), off), d, m));
    h[1] = cu_h2_u32(__hfma2(__hsub2(cu_h2_levels<0x4342>(t), off), d, m));
}

// Four bytes of 4-bit levels (low nibbles of w >> sh) minus `off`, times d: h[0..1].
__device__ __forceinline__ void cu_h2_nibbles(uint32_t w, int sh, __half2 off, __half2 d, uint32_t * h) {
    cu_h2_bytes((w >> sh) & 0x0f0f0f0fu, off, d, h);
}

// The 4 bytes at p (2-byte aligned) as a little-endian word.
__device__ __forceinline__ uint32_t cu_load_u32_a2(const uint8_t * p) {
    const uint16_t * q = reinterpret_cast<const uint16_t *>(p);
    return static_cast<uint32_t>(q[0]) | static_cast<uint32_t>(q[1]) << 16;
}

// Each has fetch (the chunk's bytes into registers: `raw`) and decode (raw to F16 pairs), so a
// kernel can issue the loads of its next chunk, work, and decode after they arrived
// (cu_chunk_h2 below does both). The default's raw is only the address: decode loads and
// decodes through floats.
// The 32 bytes at p (2-byte aligned) as 8 little-endian words: 8 aligned loads, or 9 from the
// 4-byte boundary below p and a funnel shift each (not 16 two-byte loads).
__device__ __forceinline__ void cu_load_32b_a2(const uint8_t * p, uint32_t (&w)[8]) {
    if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) {
        const uint32_t * q = reinterpret_cast<const uint32_t *>(p);
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = q[i];
    } else {
        const uint32_t * q = reinterpret_cast<const uint32_t *>(p - 2);
        uint32_t         a[9];
#pragma unroll
        for (int i = 0; i < 9; i++) a[i] = q[i];
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = __funnelshift_r(a[i], a[i + 1], 16);
    }
}

template <int T> struct cu_codec_h2 {
    struct raw {
        const char * row;
        int64_t      c;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        r.row = row;
        r.c   = c;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        float v[32];
        cu_codec<T>::chunk(r.row, r.c, v);
#pragma unroll
        for (int i = 0; i < 16; i++) h[i] = cu_h2_u32(__floats2half2_rn(v[2 * i], v[2 * i + 1]));
    }
};

// 16 bytes of 4-bit levels, byte j holding weights j (low nibble) and j + 16 (high), as (q - (off
// - 1024)) d: Q4_0 (off 1032), INT4 in the ext layout (1024 + z, cuda-mmq.h).
__device__ __forceinline__ void cu_q4_h2(const uint32_t (&w)[4], __half dh, __half2 off, uint32_t (&h)[16]) {
    const __half2 d = __half2half2(dh);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        cu_h2_nibbles(w[q], 0, off, d, h + 2 * q);
        cu_h2_nibbles(w[q], 4, off, d, h + 8 + 2 * q);
    }
}

// INT4 / INT4_G32 (d (q - z), Q4_0's nibble order) in f16 arithmetic where z is an integer of at
// most 1024 in magnitude and d finite (AWQ-style zero points are integers): 1024 + z subtracted
// from the levels (both exact: q - z is an integer of at most 1039 in magnitude), one multiply by
// d rounded once. The float decoder's d (q - z) is exact in float (11 by 11 bits) and rounded once
// to f16: the same bits. false (h untouched) for other blocks (a fractional z, an infinite or NaN
// d or z): the caller decodes them through floats. dz: d | z << 16 (f16 bits).
__device__ __forceinline__ bool cu_int4_h2(const uint32_t (&w)[4], uint32_t dz, uint32_t (&h)[16]) {
    const float z = __half2float(__ushort_as_half(static_cast<unsigned short>(dz >> 16)));
    if (z != rintf(z) || fabsf(z) > 1024.0f || (dz & 0x7c00u) == 0x7c00u) return false;
    cu_q4_h2(w, __ushort_as_half(static_cast<unsigned short>(dz & 0xffffu)), __float2half2_rn(1024.0f + z), h);
    return true;
}

// Q4_0: levels 8 below.
__device__ __forceinline__ void cu_q4_0_h2(const uint32_t (&w)[4], __half dh, uint32_t (&h)[16]) {
    cu_q4_h2(w, dh, cu_h2_bits(0x64086408u), h);  // 1032: 1024 + 8
}

// Q8_0: 32 signed bytes, flipped to 0..255 (x ^ 0x80 = x + 128).
__device__ __forceinline__ void cu_q8_0_h2(const uint32_t (&w)[8], __half dh, uint32_t (&h)[16]) {
    const __half2 d = __half2half2(dh), off = cu_h2_bits(0x64806480u);  // 1152: 1024 + 128
#pragma unroll
    for (int q = 0; q < 8; q++) {
        cu_h2_bytes(w[q] ^ 0x80808080u, off, d, h + 2 * q);
    }
}

// The block-32 types with their levels in NW words after a 2-byte scale (18 and 34 bytes: 2-byte aligned).
template <int NW> struct cu_raw_b32 {
    uint32_t w[NW];
    uint16_t d;
};

template <> struct cu_codec_h2<EMBER_TYPE_Q4_0> {
    using raw = cu_raw_b32<4>;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q4_0 * b = reinterpret_cast<const ember_block_q4_0 *>(row) + c;
#pragma unroll
        for (int q = 0; q < 4; q++) r.w[q] = cu_load_u32_a2(b->qs + 4 * q);
        r.d = b->d;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_q4_0_h2(r.w, __ushort_as_half(r.d), h); }
};

template <> struct cu_codec_h2<EMBER_TYPE_Q8_0> {
    using raw = cu_raw_b32<8>;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q8_0 * b = reinterpret_cast<const ember_block_q8_0 *>(row) + c;
#pragma unroll
        for (int q = 0; q < 8; q++) r.w[q] = cu_load_u32_a2(reinterpret_cast<const uint8_t *>(b->qs) + 4 * q);
        r.d = b->d;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_q8_0_h2(r.w, __ushort_as_half(r.d), h); }
};

// Q4_K: sub-block s's 32 levels are the low (s even) or high nibbles of qs[32 (s / 2) ..];
// x = (d sc) q - (dmin m) as one F16 fma.
template <> struct cu_codec_h2<EMBER_TYPE_Q4_K> {
    struct raw {
        uint32_t w[8];
        __half2  dl, ml;  // d sc, -dmin m
        int      sh;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q4_k * b  = reinterpret_cast<const ember_block_q4_k *>(row) + c / 8;
        const int                s  = static_cast<int>(c % 8);
        const uint8_t *          qs = b->qs + 32 * (s / 2);
        int                      sc, m;
        uint32_t                 dm;  // d | dmin << 16
        if ((reinterpret_cast<uintptr_t>(b) & 15) == 0) {
            // 16-byte aligned blocks (the rows of a 16-byte aligned matrix: 144-byte blocks):
            // the levels in two 16-byte loads, d and dmin in one word, the scales in three.
            const uint4 * q4 = reinterpret_cast<const uint4 *>(qs);
            const uint4   lo = q4[0], hi = q4[1];
            r.w[0] = lo.x, r.w[1] = lo.y, r.w[2] = lo.z, r.w[3] = lo.w;
            r.w[4] = hi.x, r.w[5] = hi.y, r.w[6] = hi.z, r.w[7] = hi.w;
            const uint32_t * hw = reinterpret_cast<const uint32_t *>(b);
            dm                  = hw[0];
            const uint32_t w0 = hw[1], w1 = hw[2], w2 = hw[3];  // scales[0..3], [4..7], [8..11]
            const int      sh = 8 * (s % 4);
            if (s < 4) {
                sc = (w0 >> sh) & 63;
                m  = (w1 >> sh) & 63;
            } else {
                sc = ((w2 >> sh) & 0xf) | ((w0 >> (sh + 6)) & 3) << 4;
                m  = ((w2 >> (sh + 4)) & 0xf) | ((w1 >> (sh + 6)) & 3) << 4;
            }
        } else {
            cu_load_32b_a2(qs, r.w);
            cu_k4_scale_min(b->scales, s, sc, m);
            dm = static_cast<uint32_t>(b->d) | static_cast<uint32_t>(b->dmin) << 16;
        }
        const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dm & 0xffff)));
        const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(dm >> 16)));
        r.dl = __float2half2_rn(d * static_cast<float>(sc));
        r.ml = __float2half2_rn(-dmin * static_cast<float>(m));
        r.sh = (s % 2) * 4;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        const __half2 off = cu_h2_bits(0x64006400u);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            cu_h2_bytes_fma((r.w[q] >> r.sh) & 0x0f0f0f0fu, off, r.dl, r.ml, h + 2 * q);
        }
    }
};

// Q2_K / Q3_K: chunk s is weights 32 s + l (l < 32) of the block, whose low 2 bits are bits
// 2 (s % 4), 2 (s % 4) + 1 of qs[32 (s / 4) + l] (a shift and a mask a word of four); the chunk's
// first 16 weights are sub-block 2 s, the rest 2 s + 1, each with its own scale.
// Q2_K: q d sc - dmin m as one fma of the level by d sc and -dmin m rounded to f16 first (as Q4_K:
// within an f16 ulp of the float decoder where the two terms do not nearly cancel).
template <> struct cu_codec_h2<EMBER_TYPE_Q2_K> {
    struct raw {
        uint32_t w[8];
        __half2  dl[2], ml[2];  // per sub-block: d sc, -dmin m
        int      sh;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q2_k * b = reinterpret_cast<const ember_block_q2_k *>(row) + c / 8;  // 84 bytes
        const int                s = static_cast<int>(c % 8);
        cu_load_32b_a2(b->qs + 32 * (s / 4), r.w);
        const float d = cu_half(b->d), dmin = cu_half(b->dmin);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int sc = b->scales[2 * s + k];
            r.dl[k]      = __float2half2_rn(d * static_cast<float>(sc & 0xf));
            r.ml[k]      = __float2half2_rn(-dmin * static_cast<float>(sc >> 4));
        }
        r.sh = 2 * (s % 4);
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        const __half2 off = cu_h2_bits(0x64006400u);  // 1024
#pragma unroll
        for (int q = 0; q < 8; q++) cu_h2_bytes_fma((r.w[q] >> r.sh) & 0x03030303u, off, r.dl[q / 4], r.ml[q / 4], h + 2 * q);
    }
};
// Q3_K: the level's third bit is bit s of hmask[l], the level 4 below: (q - 4) d (sc - 32) with
// d (sc - 32) rounded to f16 first, then one exact-level multiply rounding once (within an f16 ulp
// of the float decoder, as IQ4_XS).
template <> struct cu_codec_h2<EMBER_TYPE_Q3_K> {
    struct raw {
        uint32_t w[8], hm[8];
        __half2  dl[2];  // per sub-block: d (sc - 32)
        int      sh, s;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q3_k * b = reinterpret_cast<const ember_block_q3_k *>(row) + c / 8;  // 110 bytes: 2-byte aligned
        const int                s = static_cast<int>(c % 8);
        cu_load_32b_a2(b->qs + 32 * (s / 4), r.w);
        cu_load_32b_a2(b->hmask, r.hm);
        const float d = cu_half(b->d);
#pragma unroll
        for (int k = 0; k < 2; k++) r.dl[k] = __float2half2_rn(d * static_cast<float>(cu_q3k_scale(b->scales, 2 * s + k) - 32));
        r.sh = 2 * (s % 4);
        r.s  = s;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        const __half2 off = cu_h2_bits(0x64046404u);  // 1028: 1024 + 4
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const uint32_t t = ((r.w[q] >> r.sh) & 0x03030303u) | ((r.hm[q] >> r.s) & 0x01010101u) << 2;
            cu_h2_bytes(t, off, r.dl[q / 4], h + 2 * q);
        }
    }
};

// Q6_K: chunk s = 4 half + g: low nibbles of ql[64 half + 32 (g & 1) + l] (high nibbles for
// g >= 2), bits 2g, 2g + 1 of qh[32 half + l] above them, level - 32 times d scales[2s + l / 16].
template <> struct cu_codec_h2<EMBER_TYPE_Q6_K> {
    struct raw {
        uint32_t ql[8], qh[8];
        __half2  d0, d1;
        int      sl, sh;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q6_k * b    = reinterpret_cast<const ember_block_q6_k *>(row) + c / 8;  // 210 bytes: 2-byte aligned
        const int                s    = static_cast<int>(c % 8);
        const int                half = s / 4, g = s % 4;
        cu_load_32b_a2(b->ql + 64 * half + 32 * (g & 1), r.ql);
        cu_load_32b_a2(b->qh + 32 * half, r.qh);
        const uint16_t sc2 = *reinterpret_cast<const uint16_t *>(b->scales + 2 * s);  // scales[2s], [2s + 1]
        const float    d   = cu_half(b->d);
        r.d0               = __float2half2_rn(d * static_cast<float>(static_cast<int8_t>(sc2 & 0xff)));
        r.d1               = __float2half2_rn(d * static_cast<float>(static_cast<int8_t>(sc2 >> 8)));
        r.sl               = g < 2 ? 0 : 4;
        r.sh               = 2 * g;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        const __half2 off = cu_h2_bits(0x64206420u);  // 1056: 1024 + 32
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const uint32_t t = ((r.ql[q] >> r.sl) & 0x0f0f0f0fu) | ((r.qh[q] >> r.sh & 0x03030303u) << 4);
            cu_h2_bytes(t, off, q < 4 ? r.d0 : r.d1, h + 2 * q);
        }
    }
};

// INT4 / INT4_G32 in the GGUF layout: cu_int4_h2, else through floats.
template <int G> struct cu_int4_gguf_h2 {
    struct raw {
        uint32_t w[4];
        uint32_t dz;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) { cu_int4_load<G>(row, c, r.w, r.dz); }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        if (cu_int4_h2(r.w, r.dz, h)) return;
        float v[32];
        cu_int4_floats(r.w, r.dz, v);
#pragma unroll
        for (int i = 0; i < 16; i++) h[i] = cu_pack_h2(v[2 * i], v[2 * i + 1]);
    }
};
template <> struct cu_codec_h2<EMBER_TYPE_INT4> : cu_int4_gguf_h2<128> {};
template <> struct cu_codec_h2<EMBER_TYPE_INT4_G32> : cu_int4_gguf_h2<32> {};

// Q4_1 / Q5_0 / Q5_1: Q4_0's nibble order; Q5's fifth bits (bit i of qh: weight i) spread to bit
// 4 of the level bytes four at a time (a multiply puts bit b of the 4-bit field at bit 8 b + 4:
// no two partial products meet, so no carries). Q5_0 (q - 16) d: the same bits as the float
// decoder (an exact product rounded once); Q4_1 / Q5_1 q d + m as one f16 fma (rounded once where
// the float decoder rounds the sum, then to f16: within an f16 ulp of it).
__host__ __device__ constexpr uint32_t cu_q5_bits(uint32_t qh, int first) {  // bits first .. first + 3 at bit 4 of each byte
    return (((qh >> first) & 0xfu) * 0x02040810u) & 0x10101010u;
}
constexpr bool cu_q5_bits_ok() {
    for (uint32_t x = 0; x < 16; x++) {
        uint32_t want = 0;
        for (int b = 0; b < 4; b++) want |= ((x >> b) & 1u) << (8 * b + 4);
        if (cu_q5_bits(x << 7 | 0x7fu | 0xffff0000u << 4, 7) != want) return false;  // (neighbouring bits set: masked)
    }
    return true;
}
static_assert(cu_q5_bits_ok(), "cu_q5_bits: the fifth bits' spread");
template <bool HAS_QH, bool HAS_M> struct cu_q45_raw {
    uint32_t w[4];
    uint32_t qh;    // (HAS_QH)
    uint32_t d, m;  // f16 bits (m: HAS_M)
};
template <bool HAS_QH, bool HAS_M>
__device__ __forceinline__ void cu_q45_h2(const cu_q45_raw<HAS_QH, HAS_M> & r, uint32_t (&h)[16]) {
    const __half2 d   = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.d)));
    const __half2 m   = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.m)));
    const __half2 off = cu_h2_bits(HAS_M ? 0x64006400u : 0x64106410u);  // 1024, or 1040: 1024 + 16 (Q5_0)
#pragma unroll
    for (int q = 0; q < 4; q++) {
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            uint32_t t = (r.w[q] >> (4 * hi)) & 0x0f0f0f0fu;
            if constexpr (HAS_QH) t |= cu_q5_bits(r.qh, 16 * hi + 4 * q);
            if constexpr (HAS_M) cu_h2_bytes_fma(t, off, d, m, h + 8 * hi + 2 * q);
            else cu_h2_bytes(t, off, d, h + 8 * hi + 2 * q);
        }
    }
}
// Q4_1 / Q5_1: (d, m) in the block's first word, Q5_1's qh in the next, then the levels (20- /
// 24-byte blocks: 4-byte aligned).
template <bool HAS_QH> struct cu_q45m_codec_h2 {
    using raw = cu_q45_raw<HAS_QH, true>;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const uint32_t * p  = reinterpret_cast<const uint32_t *>(row + c * (HAS_QH ? 24 : 20));
        const uint32_t   dm = p[0];
        r.qh                = HAS_QH ? p[1] : 0u;
#pragma unroll
        for (int q = 0; q < 4; q++) r.w[q] = p[(HAS_QH ? 2 : 1) + q];
        r.d = dm & 0xffffu, r.m = dm >> 16;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_q45_h2(r, h); }
};
static_assert(sizeof(ember_block_q4_1) == 20 && sizeof(ember_block_q5_1) == 24, "Q4_1 / Q5_1 block sizes");
template <> struct cu_codec_h2<EMBER_TYPE_Q4_1> : cu_q45m_codec_h2<false> {};
template <> struct cu_codec_h2<EMBER_TYPE_Q5_1> : cu_q45m_codec_h2<true> {};
template <> struct cu_codec_h2<EMBER_TYPE_Q5_0> {
    using raw = cu_q45_raw<true, false>;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q5_0 * b = reinterpret_cast<const ember_block_q5_0 *>(row) + c;  // 22 bytes: 2-byte aligned
#pragma unroll
        for (int q = 0; q < 4; q++) r.w[q] = cu_load_u32_a2(b->qs + 4 * q);
        r.qh = cu_load_u32_a2(b->qh);
        r.d = b->d, r.m = 0;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_q45_h2(r, h); }
};

// Q5_K: Q4_K's levels with bit s of qh[l] as bit 4 of level l of sub-block s; (d sc) q - (dmin m)
// as one f16 fma, as Q4_K.
template <> struct cu_codec_h2<EMBER_TYPE_Q5_K> {
    struct raw {
        uint32_t w[8], qh[8];
        __half2  dl, ml;  // d sc, -dmin m
        int      sh, s;
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_q5_k * b = reinterpret_cast<const ember_block_q5_k *>(row) + c / 8;  // 176 bytes
        const int                s = static_cast<int>(c % 8);
        cu_load_32b_a2(b->qs + 32 * (s / 2), r.w);
        cu_load_32b_a2(b->qh, r.qh);
        int sc, m;
        cu_k4_scale_min(b->scales, s, sc, m);
        r.dl = __float2half2_rn(cu_half(b->d) * static_cast<float>(sc));
        r.ml = __float2half2_rn(-cu_half(b->dmin) * static_cast<float>(m));
        r.sh = (s % 2) * 4;
        r.s  = s;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        const __half2 off = cu_h2_bits(0x64006400u);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const uint32_t t = ((r.w[q] >> r.sh) & 0x0f0f0f0fu) | ((r.qh[q] >> r.s) & 0x01010101u) << 4;
            cu_h2_bytes_fma(t, off, r.dl, r.ml, h + 2 * q);
        }
    }
};

// PTX prmt in its generic form: a selector nibble with bit 3 set gives the sign of the byte its
// low 3 bits select, replicated (__byte_perm masks bit 3 away: one more instruction a selector).
// Also NF4's sign tables (ops-matvec-ext.cu).
__device__ __forceinline__ uint32_t cu_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Sign tables for cu_prmt lookups of a 16-entry int8 grid (IQ4 below, NF4's int8 codebook in
// ops-matvec-ext.cu): the magnitudes of entries 0..7 (negative) in n0, n1 and entries 8..15 in p0,
// p1, 4 bytes a word. cu_sign_tables_entry is entry q as the two lookups' difference gives it;
// cu_sign_tables_clear that no byte has its sign bit set (the zeros of the sign mode need it).
constexpr uint32_t cu_pack4(int a, int b, int c, int d) {
    return static_cast<uint32_t>(static_cast<uint8_t>(a)) | static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8 |
           static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24;
}
constexpr int cu_sign_tables_entry(uint32_t n0, uint32_t n1, uint32_t p0, uint32_t p1, int q) {
    const uint32_t t = q < 8 ? (q % 8 < 4 ? n0 : n1) : (q % 8 < 4 ? p0 : p1);
    const int      b = static_cast<int>((t >> (8 * (q % 4))) & 0xffu);
    return q < 8 ? -b : b;
}
constexpr bool cu_sign_tables_clear(uint32_t n0, uint32_t n1, uint32_t p0, uint32_t p1) {
    return ((n0 | n1 | p0 | p1) & 0x80808080u) == 0;
}

// IQ4_NL / IQ4_XS: the grid looked up four codes at a time (a word's low or high 16 bits as a byte
// permute's selector: bytes j, j + 1 of qs give weights j, j + 16, j + 1, j + 17) in two tables
// of magnitudes whose sign bits are clear: the negative entries' (codes 0..7) and the positive
// ones' (8..15). A selector nibble with bit 3 set gives the sign of the byte it selects, 0 here, so
// the negative lookup is 0 for codes 8..15 and the positive one (codes ^ 8) 0 for codes 0..7.
// Both go under the f16 exponent of 1024 and one is subtracted from the other: the grid value,
// exact. Times the scale: IQ4_NL d, the float decoder's exact product rounded once (the same bits);
// IQ4_XS d (ls - 32) rounded to f16 first (within an f16 ulp of the float decoder, as the K-quants).
constexpr uint32_t k_iq4_n0 = cu_pack4(127, 104, 83, 65), k_iq4_n1 = cu_pack4(49, 35, 22, 10);
constexpr uint32_t k_iq4_p0 = cu_pack4(1, 13, 25, 38), k_iq4_p1 = cu_pack4(53, 69, 89, 113);
constexpr bool     cu_iq4_tables_ok() {
    constexpr int v[16] = EMBER_IQ4NL_VALUES;
    if (!cu_sign_tables_clear(k_iq4_n0, k_iq4_n1, k_iq4_p0, k_iq4_p1)) return false;
    for (int q = 0; q < 16; q++) {
        if (cu_sign_tables_entry(k_iq4_n0, k_iq4_n1, k_iq4_p0, k_iq4_p1, q) != v[q]) return false;
    }
    return true;
}
static_assert(cu_iq4_tables_ok(), "the IQ4 sign tables disagree with EMBER_IQ4NL_VALUES");
// 16 bytes of codes (IQ4_NL's, or an IQ4_XS sub-block's), times d: h[16].
__device__ __forceinline__ void cu_iq4_h2(const uint32_t (&w)[4], __half2 d, uint32_t (&h)[16]) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint32_t wx = w[q] ^ 0x88888888u;
#pragma unroll
        for (int k = 0; k < 2; k++) {  // bytes 4q + 2k, 4q + 2k + 1: weights j, j + 16, j + 1, j + 17 (j = 4q + 2k)
            const uint32_t n  = cu_prmt(k_iq4_n0, k_iq4_n1, w[q] >> (16 * k));
            const uint32_t p  = cu_prmt(k_iq4_p0, k_iq4_p1, wx >> (16 * k));
            const __half2  lo = __hsub2(cu_h2_levels<0x4240>(p), cu_h2_levels<0x4240>(n));  // weights j, j + 1
            const __half2  hi = __hsub2(cu_h2_levels<0x4341>(p), cu_h2_levels<0x4341>(n));  // j + 16, j + 17
            h[2 * q + k]      = cu_h2_u32(__hmul2(lo, d));
            h[8 + 2 * q + k]  = cu_h2_u32(__hmul2(hi, d));
        }
    }
}
template <> struct cu_codec_h2<EMBER_TYPE_IQ4_NL> {
    using raw = cu_raw_b32<4>;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_iq4_nl * b = reinterpret_cast<const ember_block_iq4_nl *>(row) + c;  // 18 bytes: 2-byte aligned
#pragma unroll
        for (int q = 0; q < 4; q++) r.w[q] = cu_load_u32_a2(b->qs + 4 * q);
        r.d = b->d;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        cu_iq4_h2(r.w, __half2half2(__ushort_as_half(r.d)), h);
    }
};
template <> struct cu_codec_h2<EMBER_TYPE_IQ4_XS> {
    struct raw {
        uint32_t w[4];
        __half2  dl;  // d (ls - 32)
    };
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const ember_block_iq4_xs * b  = reinterpret_cast<const ember_block_iq4_xs *>(row) + c / 8;  // 136 bytes
        const int                  j  = static_cast<int>(c % 8);
#pragma unroll
        for (int q = 0; q < 4; q++) r.w[q] = cu_load_u32_a2(b->qs + 16 * j + 4 * q);
        const int ls = (b->scales_l[j / 2] >> (4 * (j % 2)) & 0xf) | (b->scales_h >> (2 * j) & 3) << 4;
        r.dl         = __float2half2_rn(cu_half(b->d) * static_cast<float>(ls - 32));
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_iq4_h2(r.w, r.dl, h); }
};

// NF4 in f16 without a per-weight multiply: the block's 16 values NF4[q] s, each a float product
// rounded once to f16 (the float decoder's bits: it rounds the same product by __floats2half2_rn),
// made once a chunk (16 multiplies by immediates, 8 packs) and held as two byte tables, the
// values' low bytes (lo) and high bytes (hi), entries 4i .. 4i + 3 in word i. Four codes (the low
// 16 bits of a word, nibble j: weight j) are looked up by byte permutes: entries 0..7 with the
// codes as the selector (a code of 8 or more, bit 3 set, gives a sign byte there: discarded),
// entries 8..15 with bit 3 cleared, one permute picking each byte's half by bit 3, one pairing the
// low and high bytes: 12 instructions for 4 weights, none of them a shared-memory read (the float
// decoder reads the codebook from shared memory a weight).
struct cu_nf4_h2_table {
    uint32_t lo[4], hi[4];
};
// Entry pairs 4I, 4I + 1 and 4I + 2, 4I + 3 (the codebook's values as compile-time constants:
// device code may read a constexpr array's elements only in constant expressions).
template <int I> __device__ __forceinline__ void cu_nf4_h2_make_word(float s, cu_nf4_h2_table & t) {
    constexpr float v0 = cu_nf4_codebook.v[4 * I], v1 = cu_nf4_codebook.v[4 * I + 1];
    constexpr float v2 = cu_nf4_codebook.v[4 * I + 2], v3 = cu_nf4_codebook.v[4 * I + 3];
    const uint32_t  a  = cu_h2_u32(__floats2half2_rn(v0 * s, v1 * s));
    const uint32_t  b  = cu_h2_u32(__floats2half2_rn(v2 * s, v3 * s));
    t.lo[I]            = __byte_perm(a, b, 0x6420);
    t.hi[I]            = __byte_perm(a, b, 0x7531);
}
__device__ __forceinline__ cu_nf4_h2_table cu_nf4_h2_make(float s) {
    cu_nf4_h2_table t;
    cu_nf4_h2_make_word<0>(s, t);
    cu_nf4_h2_make_word<1>(s, t);
    cu_nf4_h2_make_word<2>(s, t);
    cu_nf4_h2_make_word<3>(s, t);
    return t;
}
// Codes j = 0..3 in v's low 16 bits: weights (0, 1) in h[0], (2, 3) in h[1].
__device__ __forceinline__ void cu_nf4_h2_lookup(const cu_nf4_h2_table & t, uint32_t v, uint32_t * h) {
    const uint32_t v7  = v & 0x7777u;
    const uint32_t sel = ((v >> 1) & 0x4444u) | 0x3210u;  // byte j: j, or 4 + j where code j >= 8
    const uint32_t lo  = __byte_perm(cu_prmt(t.lo[0], t.lo[1], v), cu_prmt(t.lo[2], t.lo[3], v7), sel);
    const uint32_t hi  = __byte_perm(cu_prmt(t.hi[0], t.hi[1], v), cu_prmt(t.hi[2], t.hi[3], v7), sel);
    h[0]               = __byte_perm(lo, hi, 0x5140);
    h[1]               = __byte_perm(lo, hi, 0x7362);
}

// Q6_K weights in the planar layout (backends/common/q6k-planar.h, EMBER_TENSOR_FLAG_CUDA_REPACKED):
// not an ember_type, the template argument of the chunk codecs (cu_codec, cu_codec_h2) for such
// weights, which keep their type. Rows stay where they were; chunk c of a row is sub-chunk
// s = c % 8 (half s / 4, g = s % 4: weights 128 half + 32 g + l) of super-block kb = c / 8,
// slot b = kb % 8 of segment kb / 8. Its levels are 32 bytes of ql and 32 of qh, 16-byte
// aligned; its two scales (GGUF 2s and 2s + 1) are planar bytes 8 half + g and 8 half + 4 + g.
constexpr int CU_Q6_K_PLANAR = 1 << 20;

struct cu_q6p_at {
    const uint8_t * ql;  // the chunk's 32 bytes of ql (low nibbles for g < 2, high ones after)
    const uint8_t * qh;  // its 32 bytes of qh (bits 2g, 2g + 1)
    const int8_t *  sc;  // its first scale; the second is 4 bytes further
    const ember_half * d;
    int              g;
};
__device__ __forceinline__ cu_q6p_at cu_q6p_locate(const char * row, int64_t c) {
    const int64_t   kb   = c / 8;
    const int       s    = static_cast<int>(c % 8), half = s / 4, g = s % 4, b = static_cast<int>(kb % 8);
    const uint8_t * seg  = reinterpret_cast<const uint8_t *>(row) + (kb / 8) * static_cast<int64_t>(k_q6p_seg_bytes);
    cu_q6p_at       at;
    at.ql = seg + k_q6p_ql + 128 * b + 64 * half + 32 * (g & 1);
    at.qh = seg + k_q6p_qh + 64 * b + 32 * half;
    at.sc = reinterpret_cast<const int8_t *>(seg + k_q6p_sc + 16 * b + 8 * half + g);
    at.d  = reinterpret_cast<const ember_half *>(seg + k_q6p_d + 2 * b);
    at.g  = g;
    return at;
}

// As cu_codec<EMBER_TYPE_Q6_K>::chunk: the same floats (d sc, then times the level).
template <> struct cu_codec<CU_Q6_K_PLANAR> {
    static __device__ __forceinline__ void chunk(const char * row, int64_t c, float * y) {
        const cu_q6p_at at = cu_q6p_locate(row, c);
        const float     d  = cu_half(*at.d);
        const float     d0 = d * static_cast<float>(at.sc[0]), d1 = d * static_cast<float>(at.sc[4]);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int lo = at.g < 2 ? (at.ql[l] & 0x0f) : (at.ql[l] >> 4);
            const int q  = (lo | (at.qh[l] >> (2 * at.g) & 3) << 4) - 32;
            y[l]         = (l < 16 ? d0 : d1) * static_cast<float>(q);
        }
    }
};

// As cu_codec_h2<EMBER_TYPE_Q6_K> (the same raw and decode), the levels in four 16-byte loads.
template <> struct cu_codec_h2<CU_Q6_K_PLANAR> {
    using raw = cu_codec_h2<EMBER_TYPE_Q6_K>::raw;
    static __device__ __forceinline__ void fetch(const char * row, int64_t c, raw & r) {
        const cu_q6p_at at = cu_q6p_locate(row, c);
        const uint4 *   l4 = reinterpret_cast<const uint4 *>(at.ql);
        const uint4 *   h4 = reinterpret_cast<const uint4 *>(at.qh);
        const uint4     l0 = l4[0], l1 = l4[1], h0 = h4[0], h1 = h4[1];
        r.ql[0] = l0.x, r.ql[1] = l0.y, r.ql[2] = l0.z, r.ql[3] = l0.w, r.ql[4] = l1.x, r.ql[5] = l1.y, r.ql[6] = l1.z, r.ql[7] = l1.w;
        r.qh[0] = h0.x, r.qh[1] = h0.y, r.qh[2] = h0.z, r.qh[3] = h0.w, r.qh[4] = h1.x, r.qh[5] = h1.y, r.qh[6] = h1.z, r.qh[7] = h1.w;
        const float d = cu_half(*at.d);
        r.d0          = __float2half2_rn(d * static_cast<float>(at.sc[0]));
        r.d1          = __float2half2_rn(d * static_cast<float>(at.sc[4]));
        r.sl          = at.g < 2 ? 0 : 4;
        r.sh          = 2 * at.g;
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) { cu_codec_h2<EMBER_TYPE_Q6_K>::decode(r, h); }
};

// A whole chunk: fetch, then decode.
template <int T> __device__ __forceinline__ void cu_chunk_h2(const char * row, int64_t c, uint32_t (&h)[16]) {
    typename cu_codec_h2<T>::raw r;
    cu_codec_h2<T>::fetch(row, c, r);
    cu_codec_h2<T>::decode(r, h);
}

// The CUDA layout's chunk (cu_rp_chunk) as F16 pairs: 16-byte loads of the levels.
template <int T> struct cu_rp_h2 {
    static_assert(T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_Q8_0, "CUDA layout: Q4_0 and Q8_0 only");
    static constexpr int QB = T == EMBER_TYPE_Q4_0 ? 16 : 32;
    struct raw {
        union {
            uint4    v[QB / 16];
            uint32_t w[QB / 4];
        } q;
        uint16_t d;
    };
    static __device__ __forceinline__ void fetch(const char * base, int64_t nblk, int64_t blk, raw & r) {
        const uint4 * qp = reinterpret_cast<const uint4 *>(base + blk * QB);
#pragma unroll
        for (int i = 0; i < QB / 16; i++) r.q.v[i] = qp[i];
        r.d = reinterpret_cast<const ember_half *>(base + nblk * QB)[blk];
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        if constexpr (T == EMBER_TYPE_Q4_0) cu_q4_0_h2(r.q.w, __ushort_as_half(r.d), h);
        else cu_q8_0_h2(r.q.w, __ushort_as_half(r.d), h);
    }
};

template <int T> __device__ __forceinline__ void cu_rp_chunk_h2(const char * base, int64_t nblk, int64_t blk, uint32_t (&h)[16]) {
    typename cu_rp_h2<T>::raw r;
    cu_rp_h2<T>::fetch(base, nblk, blk, r);
    cu_rp_h2<T>::decode(r, h);
}

// The coalesced store of the prefill dequantizers (ops-matmul.cu, ops-matvec-ext.cu): each lane
// holds one decoded 32-weight chunk h as F16 pairs (when `valid`), the warp's 32 chunks being
// 2 KiB contiguous in the F16 output from chunk `base` on; they go through the warp's shared
// buffer sbuf (32 * 4 uint4) and out as 16-byte stores by consecutive lanes, `left` chunks at most.
__device__ __forceinline__ void cu_warp_store_h2_chunks(uint4 * sbuf, int lane, const uint32_t (&h)[16], bool valid, __half * out,
                                                        int64_t base, int64_t left) {
    if (valid) {
#pragma unroll
        for (int q = 0; q < 4; q++) sbuf[lane * 4 + q] = make_uint4(h[4 * q], h[4 * q + 1], h[4 * q + 2], h[4 * q + 3]);
    }
    __syncwarp();
    const int n4 = 4 * static_cast<int>(left < 32 ? left : 32);
    uint4 *   o  = reinterpret_cast<uint4 *>(out + base * 32);
    for (int q = lane; q < n4; q += 32) o[q] = sbuf[q];
    __syncwarp();
}

// The same for a chunk decoded to floats (v), rounded to F16.
__device__ __forceinline__ void cu_warp_store_f16_chunks(uint4 * sbuf, int lane, const float * v, bool valid, __half * out, int64_t base,
                                                         int64_t left) {
    uint32_t h[16] = {};
    if (valid) {
#pragma unroll
        for (int i = 0; i < 16; i++) h[i] = cu_h2_u32(__floats2half2_rn(v[2 * i], v[2 * i + 1]));
    }
    cu_warp_store_h2_chunks(sbuf, lane, h, valid, out, base, left);
}

#endif  // EMBER_CUDA_COMMON_CUH
