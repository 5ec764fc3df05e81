// MUL_MAT for few columns (decode) with integer dot products, for the weight types that
// carry most of a model's bytes: Q4_0, Q5_0, Q8_0, the K-quants (Q2_K .. Q6_K), IQ4_NL / IQ4_XS.
//
// The design of llama.cpp's mmvq (ggml-cuda/mmvq.cu), written anew:
// - The activations are quantized once per matvec to 8-bit blocks of 32 (d = max|x| / 127,
//   as the CPU's Q8_0 activations), stored as separate arrays: int8 values (so lanes read
//   4-byte words) and a float2 (d, d * sum q) per block. Consecutive matvecs over the same
//   activations (Q/K/V, gate/up) reuse the quantized copy.
// - A block of 128 threads computes `R` rows; its threads split each row's weight blocks
//   between them so that consecutive lanes read consecutive 4-byte words of a weight block
//   (a warp reads 144 contiguous bytes of Q4_0 per load instruction, not 32 scattered
//   18-byte blocks), and the R rows share each activation word a thread loads.
// - Dot products are __dp4a over 4 weights at a time: one instruction per 4 multiply-adds,
//   which keeps the kernel memory-bound on HBM (float dequantize + FMA would not be).
// Weight blocks are mostly 2-byte aligned (18, 22, 34, 210 bytes), so words are assembled
// from two 16-bit loads; Q4_K (144 bytes) uses 4-byte loads. That caps the kernel near half
// the memory bandwidth, so Q4_0 and Q8_0 model weights are converted at upload to the CUDA
// layout (cuda-repack.h: quants and scales in separate arrays) and read by mvr_kernel below
// with 16-byte loads; other Q4_0/Q8_0 tensors (and EMBER_CUDA_REPACK=0) use the GGUF path.
// Q6_K model weights with rows of a multiple of 2048 take the planar layout (mvp6_kernel).
// The quantized x is made by quantize_x_kernel, or by the kernel that produced x (the fused
// RMS_NORM + MUL and SWIGLU in ops-elementwise.cu), which marks it valid for the next matvec.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-epi.cuh"
#include "cuda-matvec-ext.h"
#include "cuda-matvec-norm.cuh"
#include "cuda-repack.h"

namespace {

constexpr int k_threads = 128;

// Read-only loads (the non-coherent path): weights and the quantized x never change during a
// kernel.
__device__ __forceinline__ int ld_b2(const uint8_t * p) {  // 4 bytes at a 2-byte-aligned address
    const unsigned short * q = reinterpret_cast<const unsigned short *>(p);
    return static_cast<int>(static_cast<uint32_t>(__ldg(q)) | static_cast<uint32_t>(__ldg(q + 1)) << 16);
}
__device__ __forceinline__ int ld_b4(const void * p) {
    return __ldg(reinterpret_cast<const int *>(p));
}

// Per type: QK weights per block, BYTES per block, QI 4-byte words of quants per block, VDR
// words per thread per block, and the partial dot product of one thread (words kqs ..
// kqs + VDR - 1 of the block) with the quantized activations of the block (xq: the block's
// first activation, xds: its first (d, s) pair).
template <int T> struct mvq;

template <> struct mvq<EMBER_TYPE_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, QI = 4, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q4_0 * b    = reinterpret_cast<const ember_block_q4_0 *>(blk);
        int                      sumi = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int v = ld_b2(b->qs + 4 * (kqs + i));
            sumi        = __dp4a(v & 0x0f0f0f0f, ld_b4(xq + 4 * (kqs + i)), sumi);
            sumi        = __dp4a((v >> 4) & 0x0f0f0f0f, ld_b4(xq + 16 + 4 * (kqs + i)), sumi);
        }
        const float2 ds = xds[0];
        // This thread covers 8 VDR of the 32 weights: its share of the -8 offset.
        return cu_half(b->d) * (ds.x * static_cast<float>(sumi) - (8.0f * VDR / QI) * ds.y);
    }
};

template <> struct mvq<EMBER_TYPE_Q5_0> {
    static constexpr int QK = 32, BYTES = 22, QI = 4, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q5_0 * b    = reinterpret_cast<const ember_block_q5_0 *>(blk);
        const int                qh   = ld_b2(b->qh);
        int                      sumi = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int j  = kqs + i;
            const int vl = ld_b2(b->qs + 4 * j);
            const int vh = static_cast<int>(static_cast<uint32_t>(qh) >> (4 * j));
            // Bit k of vh (weight 4 j + k) to bit 8 k + 4; bit 16 + k (weight 16 + 4 j + k) likewise.
            int v0 = vl & 0x0f0f0f0f;
            v0 |= (vh << 4) & 0x00000010;
            v0 |= (vh << 11) & 0x00001000;
            v0 |= (vh << 18) & 0x00100000;
            v0 |= (vh << 25) & 0x10000000;
            int v1 = (vl >> 4) & 0x0f0f0f0f;
            v1 |= (vh >> 12) & 0x00000010;
            v1 |= (vh >> 5) & 0x00001000;
            v1 |= (vh << 2) & 0x00100000;
            v1 |= (vh << 9) & 0x10000000;
            sumi = __dp4a(v0, ld_b4(xq + 4 * j), sumi);
            sumi = __dp4a(v1, ld_b4(xq + 16 + 4 * j), sumi);
        }
        const float2 ds = xds[0];
        return cu_half(b->d) * (ds.x * static_cast<float>(sumi) - (16.0f * VDR / QI) * ds.y);
    }
};

template <> struct mvq<EMBER_TYPE_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, QI = 8, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q8_0 * b    = reinterpret_cast<const ember_block_q8_0 *>(blk);
        const uint8_t *          qs   = reinterpret_cast<const uint8_t *>(b->qs);
        int                      sumi = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) sumi = __dp4a(ld_b2(qs + 4 * (kqs + i)), ld_b4(xq + 4 * (kqs + i)), sumi);
        return cu_half(b->d) * xds[0].x * static_cast<float>(sumi);
    }
};

// Q4_K: word kqs of the 128 quant bytes lies in group g = kqs / 8 of 32 bytes, whose low
// nibbles are sub-block 2 g and high nibbles sub-block 2 g + 1 (32 weights each). Q5_K (Q5): the
// same with a fifth bit from qh[l] (l the byte of the group's 32), bit 2 g for the low nibbles'
// sub-block, 2 g + 1 for the high ones'.
template <bool Q5> struct mvq_k45 {
    using block = std::conditional_t<Q5, ember_block_q5_k, ember_block_q4_k>;
    static constexpr int QK = 256, BYTES = sizeof(block), QI = 32, VDR = 2, ALIGN = 4;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const block *   b  = reinterpret_cast<const block *>(blk);
        const int       g  = kqs / 8;
        const int       o  = 4 * (kqs % 8);
        const uint8_t * q  = b->qs + 32 * g + o;
        const int       s0 = 2 * g, s1 = 2 * g + 1;
        int             sum0 = 0, sum1 = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int v  = ld_b4(q + 4 * i);
            int       lo = v & 0x0f0f0f0f, hi = (v >> 4) & 0x0f0f0f0f;
            if constexpr (Q5) {
                const int h = ld_b4(b->qh + o + 4 * i);
                lo |= ((h >> s0) & 0x01010101) << 4;
                hi |= ((h >> s1) & 0x01010101) << 4;
            }
            sum0 = __dp4a(lo, ld_b4(xq + 32 * s0 + o + 4 * i), sum0);
            sum1 = __dp4a(hi, ld_b4(xq + 32 * s1 + o + 4 * i), sum1);
        }
        int sc0, m0, sc1, m1;
        cu_k4_scale_min(b->scales, s0, sc0, m0);
        cu_k4_scale_min(b->scales, s1, sc1, m1);
        const float2 ds0 = xds[s0], ds1 = xds[s1];
        const float  d = cu_half(b->d), dmin = cu_half(b->dmin);
        // This thread covers 4 VDR of each sub-block's 32 weights: that share of the mins.
        return d * (static_cast<float>(sc0) * ds0.x * static_cast<float>(sum0) + static_cast<float>(sc1) * ds1.x * static_cast<float>(sum1)) -
               dmin * (static_cast<float>(m0) * ds0.y + static_cast<float>(m1) * ds1.y) * (4.0f * VDR / 32.0f);
    }
};
template <> struct mvq<EMBER_TYPE_Q4_K> : mvq_k45<false> {};
template <> struct mvq<EMBER_TYPE_Q5_K> : mvq_k45<true> {};

// Q2_K / Q3_K: word kqs of qs lies in half h = kqs / 8 at byte o = 4 (kqs % 8) of its 32; bits
// 2 k of its bytes are weights 128 h + 32 k + o + (0..3) (k = 0..3: four x blocks), in sub-block
// 8 h + 2 k + o / 16 of 16 weights (a thread's 4 VDR bytes stay in one: o is a multiple of 8).
template <> struct mvq<EMBER_TYPE_Q2_K> {
    static constexpr int QK = 256, BYTES = 84, QI = 16, VDR = 2, ALIGN = 4;
    // d sc q - dmin m per weight: the levels' sums by sub-block, and x's own sums there (a dp4a
    // of ones) for the mins, whose 16-weight sub-blocks the 32-value x blocks' sums do not give.
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q2_k * b = reinterpret_cast<const ember_block_q2_k *>(blk);
        const int                h = kqs / 8;
        const int                o = 4 * (kqs % 8);
        int                      v[VDR];
#pragma unroll
        for (int i = 0; i < VDR; i++) v[i] = ld_b4(b->qs + 32 * h + o + 4 * i);
        float sd = 0.0f, sm = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int8_t * x  = xq + 128 * h + 32 * k + o;
            int            sq = 0, sx = 0;
#pragma unroll
            for (int i = 0; i < VDR; i++) {
                const int xv = ld_b4(x + 4 * i);
                sq           = __dp4a((v[i] >> (2 * k)) & 0x03030303, xv, sq);
                sx           = __dp4a(0x01010101, xv, sx);
            }
            const int   sc = b->scales[8 * h + 2 * k + o / 16];
            const float xd = xds[4 * h + k].x;
            sd += xd * static_cast<float>((sc & 0xf) * sq);
            sm += xd * static_cast<float>((sc >> 4) * sx);
        }
        return cu_half(b->d) * sd - cu_half(b->dmin) * sm;
    }
};
// Q3_K: the level's third bit is bit 4 h + k of hmask[o + byte], the level 4 below.
template <> struct mvq<EMBER_TYPE_Q3_K> {
    static constexpr int QK = 256, BYTES = 110, QI = 16, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q3_k * b = reinterpret_cast<const ember_block_q3_k *>(blk);
        const int                h = kqs / 8;
        const int                o = 4 * (kqs % 8);
        int                      v[VDR], m[VDR];
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            v[i] = ld_b2(b->qs + 32 * h + o + 4 * i);
            m[i] = ld_b2(b->hmask + o + 4 * i);
        }
        float sd = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int8_t * x  = xq + 128 * h + 32 * k + o;
            int            sq = 0;
#pragma unroll
            for (int i = 0; i < VDR; i++) {
                const int lev = ((v[i] >> (2 * k)) & 0x03030303) | ((m[i] >> (4 * h + k)) & 0x01010101) << 2;
                sq            = __dp4a(static_cast<int>(__vsub4(lev, 0x04040404)), ld_b4(x + 4 * i), sq);
            }
            sd += xds[4 * h + k].x * static_cast<float>((cu_q3k_scale(b->scales, 8 * h + 2 * k + o / 16) - 32) * sq);
        }
        return cu_half(b->d) * sd;
    }
};

// IQ4_NL / IQ4_XS: 16 bytes of codes, byte l holding weights l (low nibble) and l + 16 (high),
// their grid values integers: a word's low and high 16 bits as cu_prmt selectors through the
// sign tables (cu_iq4_h2's), weights l, l + 16, l + 1, l + 17 in a lookup's bytes, x's bytes put in
// that order by one permute each; the positive and negative sums' difference is exact.
__device__ __forceinline__ int iq4_dot8(int v, int xa, int xb) {
    const uint32_t u  = static_cast<uint32_t>(v), ux = u ^ 0x88888888u;
    const int      x0 = static_cast<int>(__byte_perm(xa, xb, 0x5140)), x1 = static_cast<int>(__byte_perm(xa, xb, 0x7362));
    int            s = 0;
    s                = __dp4a(static_cast<int>(cu_prmt(k_iq4_p0, k_iq4_p1, ux)), x0, s);
    s                = __dp4a(static_cast<int>(cu_prmt(k_iq4_p0, k_iq4_p1, ux >> 16)), x1, s);
    int n            = 0;
    n                = __dp4a(static_cast<int>(cu_prmt(k_iq4_n0, k_iq4_n1, u)), x0, n);
    n                = __dp4a(static_cast<int>(cu_prmt(k_iq4_n0, k_iq4_n1, u >> 16)), x1, n);
    return s - n;
}
template <> struct mvq<EMBER_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BYTES = 18, QI = 4, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_iq4_nl * b    = reinterpret_cast<const ember_block_iq4_nl *>(blk);
        int                        sumi = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int l = 4 * (kqs + i);
            sumi += iq4_dot8(ld_b2(b->qs + l), ld_b4(xq + l), ld_b4(xq + 16 + l));
        }
        return cu_half(b->d) * xds[0].x * static_cast<float>(sumi);
    }
};
// IQ4_XS: sub-block j = kqs / 4 of 32 weights (16 bytes of qs), scale d (ls_j - 32).
template <> struct mvq<EMBER_TYPE_IQ4_XS> {
    static constexpr int QK = 256, BYTES = 136, QI = 32, VDR = 2, ALIGN = 4;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_iq4_xs * b    = reinterpret_cast<const ember_block_iq4_xs *>(blk);
        const int                  j    = kqs / 4;
        int                        sumi = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int l = 4 * (kqs % 4 + i);
            sumi += iq4_dot8(ld_b4(b->qs + 16 * j + l), ld_b4(xq + 32 * j + l), ld_b4(xq + 32 * j + 16 + l));
        }
        const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xf) | ((b->scales_h >> (2 * j)) & 3) << 4;
        return cu_half(b->d) * static_cast<float>(ls - 32) * xds[j].x * static_cast<float>(sumi);
    }
};

// Q6_K: word kqs of ql lies in half h = kqs / 16 at byte o = 4 (kqs % 16) of that half's 64;
// its low nibbles are weights 128 h + o + (0..3) and its high nibbles the weights 64 further,
// with their top 2 bits in qh[32 h + o % 32] at bits 2 (o / 32) and 2 (o / 32 + 2).
template <> struct mvq<EMBER_TYPE_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, QI = 32, VDR = 2, ALIGN = 2;
    static __device__ __forceinline__ float dot(const char * blk, const int8_t * xq, const float2 * xds, int kqs) {
        const ember_block_q6_k * b  = reinterpret_cast<const ember_block_q6_k *>(blk);
        const int                h  = kqs / 16;
        const int                o  = 4 * (kqs % 16);
        const int                g  = o / 32;
        const int                l0 = o % 32;
        const int                ia = 128 * h + 32 * g + l0;  // first weight of the low nibbles
        const int                ib = ia + 64;                // ... of the high nibbles
        int                      suma = 0, sumb = 0;
#pragma unroll
        for (int i = 0; i < VDR; i++) {
            const int vl = ld_b2(b->ql + 64 * h + o + 4 * i);
            const int vh = ld_b2(b->qh + 32 * h + l0 + 4 * i);
            const int qa = __vsub4((vl & 0x0f0f0f0f) | ((vh >> (2 * g)) & 0x03030303) << 4, 0x20202020);
            const int qb = __vsub4(((vl >> 4) & 0x0f0f0f0f) | ((vh >> (2 * g + 4)) & 0x03030303) << 4, 0x20202020);
            suma         = __dp4a(qa, ld_b4(xq + ia + 4 * i), suma);
            sumb         = __dp4a(qb, ld_b4(xq + ib + 4 * i), sumb);
        }
        // The 4 VDR weights of each nibble half share one 16-weight scale (l0 is a multiple of 8).
        const float sa = static_cast<float>(b->scales[ia / 16]), sb = static_cast<float>(b->scales[ib / 16]);
        return cu_half(b->d) * (sa * xds[ia / 32].x * static_cast<float>(suma) + sb * xds[ib / 32].x * static_cast<float>(sumb));
    }
};

// x (F32, any strides) -> per vector v = col + ne1 (i2 + ne2 i3): k int8 values at xq + v k
// and k / 32 (d, d * sum q) pairs at xds + v k / 32. 8 threads per block of 32, 4 values each.
__global__ void __launch_bounds__(256) quantize_x_kernel(cu_tensor x, int64_t k, int8_t * xq, float2 * xds) {
    cu_pdl_begin();
    const int64_t i     = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    const int64_t v     = blockIdx.y;
    const int64_t col   = v % x.ne[1];
    const int64_t i2    = (v / x.ne[1]) % x.ne[2];
    const int64_t i3    = v / (x.ne[1] * x.ne[2]);
    const bool    valid = i < k;  // k is a multiple of 32: a group of 8 lanes is all in or all out
    float         f[4]  = {0.0f, 0.0f, 0.0f, 0.0f};
    if (valid) {
        const float * xr = reinterpret_cast<const float *>(x.data + col * x.nb[1] + i2 * x.nb[2] + i3 * x.nb[3]) + i;
#pragma unroll
        for (int j = 0; j < 4; j++) f[j] = xr[j];
    }
    float amax = fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3])));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // As the CPU's Q8_0 activations: the scale rounded to half, values rounded with the
    // unrounded one.
    const float d  = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int         q[4], sum = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        q[j] = static_cast<int>(roundf(__fmul_rn(f[j], id)));
        sum += q[j];
    }
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!valid) return;
    const int packed = (q[0] & 0xff) | (q[1] & 0xff) << 8 | (q[2] & 0xff) << 16 | (q[3] & 0xff) << 24;
    *reinterpret_cast<int *>(xq + v * k + i) = packed;
    if (threadIdx.x % 8 == 0) {
        const float dh       = __half2float(__float2half_rn(d));
        xds[v * (k / 32) + i / 32] = make_float2(dh, dh * static_cast<float>(sum));
    }
}

// Up to k_mv_group 2-D weight matrices over the same x in one launch (Q, K, V; gate, up):
// matrix m takes blocks [blk0[m], blk0[m + 1]) of grid.x, and its rows go to y[m] (rows of
// y_nb1 bytes per column). One launch and one grid drain instead of three.
constexpr int k_mv_group = 3;

struct mv_group {
    int     nmat = 1;
    int     blk0[k_mv_group + 1] = {};
    const void * w[k_mv_group]  = {};  // weights (quants; mvr: the scales follow at wd[m])
    const unsigned short * wd[k_mv_group] = {};
    int64_t n[k_mv_group]       = {};
    char *  y[k_mv_group]       = {};
    int64_t y_nb1[k_mv_group]   = {};
    int     neox_hd[k_mv_group] = {};  // NEOX RoPE fused: the head size (rows paired hd / 2 apart), else 0
    bool    has_epi             = false;
    mv_epi  epi[k_mv_group];
};

// The matrix of this block: an indexed load from the parameter bank (m is uniform across the
// block, so it is a uniform-register index). A select chain here compiled into a jump table per
// field (~8 dependent uniform instructions and an indexed branch each) before a warp's first
// weight load.
template <typename T> __device__ __forceinline__ T mv_pick(const T (&v)[k_mv_group], int m) {
    return v[m];
}
__device__ __forceinline__ int mv_which(const mv_group & g, int bx) {
    return g.nmat > 2 && bx >= g.blk0[2] ? 2 : g.nmat > 1 && bx >= g.blk0[1] ? 1 : 0;
}

// The store of matrix m of a group with epilogues (a select chain on m: the parameters are
// read in place, never copied to a local array).
template <int R>
__device__ __forceinline__ void mv_store_group(const mv_group & g, int m, int64_t n, int64_t col, const int64_t (&rows)[R], float (&s)[R],
                                               int * err) {
    if (m == 0) {
        mv_store_epi<R>(g.epi[0], g.y[0], g.y_nb1[0], n, col, rows, s, err);
    } else if (m == 1) {
        mv_store_epi<R>(g.epi[1], g.y[1], g.y_nb1[1], n, col, rows, s, err);
    } else {
        mv_store_epi<R>(g.epi[2], g.y[2], g.y_nb1[2], n, col, rows, s, err);
    }
}

// The end of a warp's rows (mvr_kernel, mvk_kernel): the lanes' partial sums reduced, lane 0 storing them through the
// group's epilogues (epi) or plainly into the column's output yc (rows past n dropped).
template <int R>
__device__ __forceinline__ void mv_finish(const float (&acc)[R], int lane, bool epi, const mv_group & g, int m, int64_t n, int64_t col,
                                          const int64_t (&rows)[R], float * yc, int * err) {
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = cu_warp_sum(acc[r]);
    if (lane != 0) return;
    if (epi) {
        mv_store_group<R>(g, m, n, col, rows, s, err);
        return;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (rows[r] < n) yc[rows[r]] = s[r];
    }
}

struct mvq_args {
    const char *   w;
    int64_t        w_nb1, w_nb2, w_nb3;
    int64_t        bcast2, bcast3;
    const int8_t * xq;
    const float2 * xds;
    int64_t        x_ne1, x_ne2;
    cu_tensor      y;
    int64_t        k, n, nblk;
    bool           grouped;  // several matrices (mv_group; mvk_kernel only); 2-D weights and x
    mv_group       grp;
    int *          err;  // data errors of the fused SET_ROWS (a cache row out of range)
    ember_cuda_norm_scale ns;  // the NS kernels' norm
};

// The batch position of a GGUF-layout matvec block (blockIdx.z over x's dims 2 and 3: i2, i3),
// the start of the weight matrix it reads (w of matrix 0, broadcast over those dims) and its
// column's quantized x.
struct mvq_batch {
    int64_t        i2 = 0, i3 = 0;
    const char *   w;
    const int8_t * xq;
    const float2 * xds;
};
__device__ __forceinline__ mvq_batch mvq_batch_of(const mvq_args & a, const char * w) {
    mvq_batch b;
    if (gridDim.z > 1) {  // batched: 64-bit divisions only here
        b.i2 = blockIdx.z % a.x_ne2;
        b.i3 = blockIdx.z / a.x_ne2;
        w += (b.i2 / a.bcast2) * a.w_nb2 + (b.i3 / a.bcast3) * a.w_nb3;
    }
    b.w             = w;
    const int64_t v = blockIdx.y + a.x_ne1 * blockIdx.z;
    b.xq            = a.xq + v * a.k;
    b.xds           = a.xds + v * (a.k / 32);
    return b;
}

template <int T, int R>
__global__ void __launch_bounds__(k_threads) mvq_kernel(mvq_args a) {
    using D                = mvq<T>;
    constexpr int tpb      = D::QI / D::VDR;   // threads per weight block
    constexpr int per_iter = k_threads / tpb;  // weight blocks per iteration of the block
    const int     tid      = threadIdx.x;
    const int64_t row0     = static_cast<int64_t>(blockIdx.x) * R;
    const int64_t col      = blockIdx.y;
    const mvq_batch bp = mvq_batch_of(a, a.w);
    const int64_t   i2 = bp.i2, i3 = bp.i3;
    const char *    wb  = bp.w;
    const int8_t *  xq  = bp.xq;
    const float2 *  xds = bp.xds;
    const char *   wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = wb + (row0 + r < a.n ? row0 + r : a.n - 1) * a.w_nb1;  // tail rows: read, discard
    // The block's weight rows into L2 while the kernel that makes x finishes.
#pragma unroll
    for (int r = 0; r < R; r++) {
        for (int64_t o = 128 * tid; o < a.nblk * D::BYTES; o += 128 * k_threads) cu_prefetch_l2(wr[r] + o);
    }
    cu_pdl_begin();
    float     acc[R] = {};
    const int kqs    = D::VDR * (tid % tpb);
    const int nblk = static_cast<int>(a.nblk);
#pragma unroll 2
    for (int kb = tid / tpb; kb < nblk; kb += per_iter) {
        const int8_t * xqb  = xq + static_cast<int64_t>(kb) * D::QK;
        const float2 * xdsb = xds + kb * (D::QK / 32);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] += D::dot(wr[r] + static_cast<int64_t>(kb) * D::BYTES, xqb, xdsb, kqs);
    }
    __shared__ float part[k_threads / 32][R];
    const int        warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float s = cu_warp_sum(acc[r]);
        if (lane == 0) part[warp][r] = s;
    }
    __syncthreads();
    if (tid < R && row0 + tid < a.n) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < k_threads / 32; w++) s += part[w][tid];
        float * yc   = reinterpret_cast<float *>(a.y.data + col * a.y.nb[1] + i2 * a.y.nb[2] + i3 * a.y.nb[3]);
        yc[row0 + tid] = s;
    }
}

// Weights in the CUDA layout (cuda-repack.h): each warp computes R rows on its own, its
// lanes reading consecutive 16-byte chunks of a row's quants (a warp load covers 512
// contiguous bytes) and the chunks' 2-byte scales from the separate scale array; U chunks
// per lane and row are loaded before any is used, so each lane has U R 16-byte loads in
// flight. A chunk is one Q4_0 block (32 weights) or half a Q8_0 block (16 weights). No
// shared memory and no block-wide reduction: a warp shuffle sums each row.
template <int T> struct mvr;

template <> struct mvr<EMBER_TYPE_Q4_0> {
    static constexpr int CPB = 1;  // chunks per block
    // x of the chunk: its 32 int8 values as two int4, and the block's (d, d sum q).
    struct xs {
        int4   lo, hi;
        float2 ds;
    };
    static __device__ __forceinline__ xs load_x(const int8_t * xq, const float2 * xds, int c) {
        const int4 * p = reinterpret_cast<const int4 *>(xq + 32 * c);
        return {__ldg(p), __ldg(p + 1), __ldg(xds + c)};
    }
    // The high nibbles used in place (cu_dot_q4) and the sum to float by the exponent trick. Exact.
    static __device__ __forceinline__ float dot(const uint4 & w, float dw, const xs & x) {
        return dw * (x.ds.x * cu_int_float(cu_dot_q4(w, x.lo, x.hi)) - 8.0f * x.ds.y);
    }
};

template <> struct mvr<EMBER_TYPE_Q8_0> {
    static constexpr int CPB = 2;
    struct xs {
        int4  v;
        float d;
    };
    static __device__ __forceinline__ xs load_x(const int8_t * xq, const float2 * xds, int c) {
        return {__ldg(reinterpret_cast<const int4 *>(xq + 16 * c)), __ldg(xds + c / 2).x};
    }
    static __device__ __forceinline__ float dot(const uint4 & w, float dw, const xs & x) {
        int s = 0;
        s     = __dp4a(static_cast<int>(w.x), x.v.x, s);
        s     = __dp4a(static_cast<int>(w.y), x.v.y, s);
        s     = __dp4a(static_cast<int>(w.z), x.v.z, s);
        s     = __dp4a(static_cast<int>(w.w), x.v.w, s);
        return dw * x.d * cu_int_float(s);
    }
};

struct mvr_args {
    const uint4 *          wq;      // quants, rows of nchunk 16-byte chunks
    const unsigned short * wd;      // scales (ember_half), rows of nb
    int64_t                n;       // rows of one weight matrix
    int64_t                w_ne2;   // weight matrices per i3
    int64_t                bcast2, bcast3;
    const int8_t *         xq;
    const float2 *         xds;
    int64_t                x_ne1, x_ne2;
    cu_tensor              y;
    int                    nchunk, nb;
    bool                   grouped;  // several matrices (mv_group); 2-D weights and x
    mv_group               grp;
    int *                  err;  // data errors of the fused SET_ROWS (a cache row out of range)
    ember_cuda_norm_scale  ns;   // mvr_kernel NS: the norm (x is mvr_norm_kernel's copy)
};

// The batch position of a CUDA-layout matvec block (blockIdx.z over x's dims 2 and 3), the
// weight matrix it reads (broadcast over those dims) and its column's quantized x.
struct mvr_batch {
    int64_t        i2 = 0, i3 = 0, wm = 0;
    const int8_t * xq;
    const float2 * xds;
};
__device__ __forceinline__ mvr_batch mvr_batch_of(const mvr_args & a) {
    mvr_batch b;
    if (gridDim.z > 1) {
        b.i2 = blockIdx.z % a.x_ne2;
        b.i3 = blockIdx.z / a.x_ne2;
        b.wm = b.i2 / a.bcast2 + (b.i3 / a.bcast3) * a.w_ne2;
    }
    const int64_t v = blockIdx.y + a.x_ne1 * blockIdx.z;
    b.xq            = a.xq + v * a.nb * 32;
    b.xds           = a.xds + v * a.nb;
    return b;
}

constexpr int k_rp_warps = 4;  // warps per block of the CUDA-layout kernel

// The two-rows-per-warp kernels (mvr_kernel R = 2: the Q/K/V launch with its RoPE pairs;
// mvk_kernel R = 2: Q4_K from 4096 rows) at 100+ registers fit 4 blocks of 128 threads per SM.
// Capped at 80 registers 6 fit. mvk_kernel gains everywhere (H200 tg128 8B Q4_K_M 364.9 ->
// 397.8, 1B 1340.2 -> 1392.9); mvr_kernel's Q4_0 form spills at 80 (1B Q4_0 1600.0 -> 1578.0,
// its 384-block Q/K/V launch one wave either way), so it takes the cap only when its grid is
// more than one wave uncapped (8B: 768 blocks against 528 places; 494.8 -> 501.0).
// EMBER_CUDA_MV_PAIR_OCC=0: never capped.
constexpr int k_mv_pair_blocks = 6, k_mv_pair_blocks_uncapped = 4;
bool mv_pair_capped() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_PAIR_OCC");
    return on;
}
// mvr_kernel's two-row launch over `grid` takes the cap: more than one wave uncapped.
bool mvr_pair_capped(const ember_cuda_ctx & ctx, const dim3 & grid) {
    const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    return mv_pair_capped() && blocks > static_cast<int64_t>(k_mv_pair_blocks_uncapped) * cu_sm_count(ctx.device);
}

// P: rows longer than one step (32 U chunks) load step s + 1 while step s is computed (two
// register buffers), so a lane always has U R loads in flight, not only at each step's start.
// MINB: blocks per SM the registers must allow (k_mv_pair_blocks for the two-row kernels).
// NS: x is mvr_norm_kernel's copy, the norm's scale still to apply (mvr_args ns): each warp sums
// the norm's partial sums of squares in one fixed order and scales its rows' sums before the store.
template <int T, int R, int U, bool P, int MINB = 0, bool NS = false>
__global__ void __launch_bounds__(32 * k_rp_warps, MINB) mvr_kernel(mvr_args a) {
    using D                 = mvr<T>;
    const int     lane      = threadIdx.x % 32;
    // The matrix of this block (locals: writing to `a` would copy the parameters to the stack).
    const int     m         = a.grouped ? mv_which(a.grp, blockIdx.x) : 0;
    const int     bx        = a.grouped ? blockIdx.x - a.grp.blk0[m] : blockIdx.x;
    const uint4 * wq_base   = a.grouped ? static_cast<const uint4 *>(mv_pick(a.grp.w, m)) : a.wq;
    const unsigned short * wd_base = a.grouped ? mv_pick(a.grp.wd, m) : a.wd;
    const int64_t n         = a.grouped ? mv_pick(a.grp.n, m) : a.n;
    char *        y_data    = a.grouped ? mv_pick(a.grp.y, m) : a.y.data;
    const int64_t y_nb1     = a.grouped ? mv_pick(a.grp.y_nb1, m) : a.y.nb[1];
    const int64_t row0 = (static_cast<int64_t>(bx) * k_rp_warps + threadIdx.x / 32) * R;
    if (row0 >= n) return;  // no block-wide synchronization below
    int64_t rows[R];
    mv_rows<R>(row0, a.grouped ? mv_pick(a.grp.neox_hd, m) : 0, rows);
    const int64_t   col = blockIdx.y;
    const mvr_batch bp  = mvr_batch_of(a);
    const int64_t   i2 = bp.i2, i3 = bp.i3, wm = bp.wm;
    const int8_t *  xq  = bp.xq;
    const float2 *  xds = bp.xds;
    const uint4 *          wq[R];
    const unsigned short * wd[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t g = wm * n + (rows[r] < n ? rows[r] : n - 1);  // tail rows: read, discard
        wq[r]           = wq_base + g * a.nchunk;
        wd[r]           = wd_base + g * a.nb;
    }
    float acc[R] = {};
    uint4 w[P ? 2 : 1][U][R];
    float dw[P ? 2 : 1][U][R];
    const auto load = [&](int b, int c0) {  // b: a constant after inlining (register arrays)
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int  c  = c0 + 32 * u;
            const bool ok = c < a.nchunk;
#pragma unroll
            for (int r = 0; r < R; r++) {
                w[b][u][r]  = ok ? __ldcs(wq[r] + c) : make_uint4(0, 0, 0, 0);
                dw[b][u][r] = ok ? __half2float(__ushort_as_half(__ldg(wd[r] + c / D::CPB))) : 0.0f;
            }
        }
    };
    const auto math = [&](int b, int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c < a.nchunk) {
                const typename D::xs x = D::load_x(xq, xds, c);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += D::dot(w[b][u][r], dw[b][u][r], x);
            }
        }
    };
    load(0, lane);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    if constexpr (P) {
        for (int c0 = lane; c0 < a.nchunk; c0 += 64 * U) {
            load(1, c0 + 32 * U);
            math(0, c0);
            if (c0 + 32 * U >= a.nchunk) break;
            load(0, c0 + 64 * U);
            math(1, c0 + 32 * U);
        }
    } else {
        for (int c0 = lane; c0 < a.nchunk; c0 += 32 * U) {
            if (c0 != lane) load(0, c0);
            math(0, c0);
        }
    }
    if constexpr (NS) {
        const float sc = mv_norm_scale(a.ns, lane);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] *= sc;
    }
    mv_finish<R>(acc, lane, a.grouped && a.grp.has_epi, a.grp, m, n, col, rows,
                 reinterpret_cast<float *>(y_data + col * y_nb1 + i2 * a.y.nb[2] + i3 * a.y.nb[3]), a.err);
}

// The store of a halves-form warp pair's 4 row sums s (mv_halves_meet), logical rows l0 .. l0 + 3
// of group matrix m: two RoPE pairs through the group's epilogues.
__device__ __forceinline__ void mv_halves_store(const mv_group & g, int m, int64_t n, int64_t col, int64_t l0, const float (&s)[4], int * err) {
    int64_t rows[4];
    mv_halves_rows(l0, mv_pick(g.neox_hd, m), rows);
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const int64_t rp[2] = {rows[2 * p], rows[2 * p + 1]};
        float         sp[2] = {s[2 * p], s[2 * p + 1]};
        mv_store_group<2>(g, m, n, col, rp, sp, err);
    }
}

// Q4_0 Q / K / V units of rows of 128 chunks (4096 weights; the 8B shape) with every weight
// requested before the PDL wait in 80 registers without a spill (EMBER_CUDA_MV_Q4_HALVES=1,
// measuring): mvr_kernel<Q4_0, 2, 4> loads its two rows whole before the wait too, but its 4 chunks
// of x a lane after it spill at the 80-register cap. Here a block's 8 rows (the same grid) go to
// two pairs of warps; warp w takes rows 4 (w / 2) .. + 3 (two RoPE pairs) over half of each row,
// chunks 64 (w % 2) + lane + 32 u (u < 2), so each x load serves 4 rows; the second half's warp
// hands its 4 sums to the first's through shared memory. Units over one column of x only.
template <bool NS>
__global__ void __launch_bounds__(32 * k_rp_warps, k_mv_pair_blocks) mvr_halves_kernel(mvr_args a) {
    using D = mvr<EMBER_TYPE_Q4_0>;
    const int     lane = threadIdx.x % 32, wi = threadIdx.x / 32, pg = wi / 2, hf = wi % 2;
    const int     m    = mv_which(a.grp, blockIdx.x);
    const int64_t n    = mv_pick(a.grp.n, m);
    const int64_t l0   = static_cast<int64_t>(blockIdx.x - a.grp.blk0[m]) * (2 * k_rp_warps) + 4 * pg;  // the warp's first logical row
    if (l0 >= n) return;  // both warps of the pair
    uint4 w[2][4];
    float dw[2][4];
    {
        const uint4 *          wq = static_cast<const uint4 *>(mv_pick(a.grp.w, m));
        const unsigned short * wd = mv_pick(a.grp.wd, m);
        int64_t                rows[4];
        mv_halves_rows(l0, mv_pick(a.grp.neox_hd, m), rows);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t g = rows[r] < n ? rows[r] : n - 1;  // (tail rows: read, discard)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int c = 64 * hf + lane + 32 * u;
                w[u][r]     = __ldcs(wq + g * a.nchunk + c);
                dw[u][r]    = __half2float(__ushort_as_half(__ldg(wd + g * a.nb + c)));
            }
        }
    }
    cu_pdl_begin();  // (weights only before it)
    const int64_t col = blockIdx.y;
    float         s[4] = {};
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const D::xs x = D::load_x(a.xq + col * a.nb * 32, a.xds + col * a.nb, 64 * hf + lane + 32 * u);
#pragma unroll
        for (int r = 0; r < 4; r++) s[r] += D::dot(w[u][r], dw[u][r], x);
    }
    if (mv_halves_meet<NS>(s, pg, hf, lane, a.ns)) mv_halves_store(a.grp, m, n, col, l0, s, a.err);
}

// Rows longer than one warp step (32 U chunks; the FFN down product: 14336 weights = 448 Q4_0
// chunks, 3.5 steps): the KS warps of a block share one row, each loading its contiguous KS-th
// of the chunks in one step where it fits, so no warp waits on a chain of steps (mvr_kernel's
// P buffer held two steps in 96 registers: 8B down product at ~1.4 TB/s); the parts meet in
// shared memory. Plain products only (no group, no epilogue). EMBER_CUDA_MV_SPLIT=0: off.
template <int T, int KS>
__global__ void __launch_bounds__(32 * k_rp_warps) mvr_split_kernel(mvr_args a) {
    using D                  = mvr<T>;
    constexpr int U          = 4;
    constexpr int rows_block = k_rp_warps / KS;
    const int     lane = threadIdx.x % 32, wi = threadIdx.x / 32, part = wi % KS;
    const int64_t n    = a.n;
    const int64_t row  = static_cast<int64_t>(blockIdx.x) * rows_block + wi / KS;
    const int64_t   col = blockIdx.y;
    const mvr_batch bp  = mvr_batch_of(a);
    const int64_t   i2 = bp.i2, i3 = bp.i3, wm = bp.wm;
    const int8_t *         xq  = bp.xq;
    const float2 *         xds = bp.xds;
    const int64_t          g   = wm * n + (row < n ? row : n - 1);  // rows past n: read, discard (no early return: __syncthreads)
    const uint4 *          wq  = a.wq + g * a.nchunk;
    const unsigned short * wd  = a.wd + g * a.nb;
    const int              per = (a.nchunk + KS - 1) / KS;
    const int              c_begin = part * per, c_end = min(a.nchunk, c_begin + per);
    uint4                  w[U];
    float                  dw[U];
    const auto             load = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int  c  = c0 + 32 * u;
            const bool ok = c < c_end;
            w[u]          = ok ? __ldcs(wq + c) : make_uint4(0, 0, 0, 0);
            dw[u]         = ok ? __half2float(__ushort_as_half(__ldg(wd + c / D::CPB))) : 0.0f;
        }
    };
    load(c_begin + lane);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float acc = 0.0f;
    for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
        if (c0 != c_begin + lane) load(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c < c_end) acc += D::dot(w[u], dw[u], D::load_x(xq, xds, c));
        }
    }
    __shared__ float parts[k_rp_warps];
    acc = cu_warp_sum(acc);
    if (lane == 0) parts[wi] = acc;
    __syncthreads();
    if (part == 0 && lane == 0 && row < n) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k++) sum += parts[wi + k];
        reinterpret_cast<float *>(a.y.data + col * a.y.nb[1] + i2 * a.y.nb[2] + i3 * a.y.nb[3])[row] = sum;
    }
}

struct mvn_args {
    const uint4 *          wq;  // quants, rows of nchunk 16-byte chunks (CUDA layout)
    const unsigned short * wd;  // scales, rows of nb
    int                    nchunk, nb;
    const int8_t *         xq;  // the product's quantized x
    const float2 *         xds;
    mvn_out                out;
    mvn_split              split;  // SPLIT
};

struct mvk_norm_args {
    const char *   w;  // Q4_K (Q5_K) rows, w_nb1 bytes apart (16-byte aligned)
    int64_t        w_nb1;
    int            nblk;  // 256-weight blocks a row
    const int8_t * xq;
    const float2 * xds;
    mvn_out        out;
    mvn_split      split;  // SPLIT
};

// The decode norm in the product before it (EMBER_CUDA_MV_NORM, ember_cuda_mul_mat_vec_norm): a
// matvec y = W x whose result only the residual ADD s = res + y reads, then RMS_NORM and MUL by
// nw, the MUL read only by integer matvecs. A block owns 32 whole rows of W (one quantization
// block of the result), so no block waits for another: it writes s and the int8 copy of nw * s,
// which does not depend on the norm's scale (a block's int8 values are the same for any positive
// scale of its 32 values; only d scales), and the block's sum of squares of s. The readers
// (mvr_kernel NS) sum those n / 32 partial sums and scale their rows' sums. No norm launch, and
// nothing of the norm between the two products on the token's critical path.
// The block's warps split the row length, not the rows: warp w takes slices w, w + nw, ... of 8
// 16-byte chunks; lane l takes chunk l % 8 of a slice in rows 4 t + l / 8 (t = 0..7), so each of
// its x loads serves 8 rows and each warp load covers 4 rows' 128 contiguous bytes.
// The scales are kept as loaded (no instruction needs a load's value before the product) and the
// loop is mvg_slices' (x loaded once a slice): H200 8B Q4_0 7.07 -> 6.54 us a launch, measured
// together with mvr_glu_kernel's SEP change, so the two were not split. The next slice's loads
// in two halves (mvg_slices' PIPE: the 8B down product's 4 slices a warp) lost: 8B Q4_0 tg128
// 668.3 -> 662.0, INT4 671.6 -> 661.9 (session 40; session 34's second register buffer lost too).
// SPLIT: two blocks a group of 32 rows (ember_cuda_mvn_split, mvn_half, mvn_block_end SPLIT).
template <int T, bool SPLIT = false>
__global__ void __launch_bounds__(32 * k_mvn_max_warps, 1) mvr_norm_kernel(mvn_args a) {
    using D                      = mvr<T>;
    const int              lane  = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int              ro    = lane / 8, j = lane % 8;
    const int64_t          row0  = static_cast<int64_t>(blockIdx.x >> (SPLIT ? 1 : 0)) * k_mvn_rows;
    const int              nall  = (a.nchunk + 7) / 8;
    const int              sl0   = SPLIT ? mvn_half(nall).x : 0;  // this block's slices: sl0 .. nsl - 1
    const int              nsl   = SPLIT ? mvn_half(nall).y : nall;
    const uint4 *          wq    = a.wq + (row0 + ro) * a.nchunk;
    const unsigned short * wd    = a.wd + (row0 + ro) * a.nb;
    const int64_t          qstep = 4 * static_cast<int64_t>(a.nchunk), dstep = 4 * static_cast<int64_t>(a.nb);
    uint4                  w[8];
    unsigned short         dw[8];
    const auto             load = [&](int sl, int) {  // (mvg_slices' part: both halves without PIPE)
        const int  c  = 8 * sl + j;
        const bool ok = c < a.nchunk;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            w[t]  = ok ? __ldcs(wq + t * qstep + c) : make_uint4(0, 0, 0, 0);
            dw[t] = ok ? __ldg(wd + t * dstep + c / D::CPB) : static_cast<unsigned short>(0);
        }
    };
    if (sl0 + wi < nsl) load(sl0 + wi, 3);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float          acc[8] = {};
    typename D::xs x{};
    mvg_slices<false>(
        wi, nw, nsl, j, a.nchunk, load, [&](int c) { x = D::load_x(a.xq, a.xds, c); },
        [&](int h) {
#pragma unroll
            for (int t = 4 * h; t < 4 * h + 4; t++) acc[t] += D::dot(w[t], __half2float(__ushort_as_half(dw[t])), x);
        },
        sl0);
    mvn_block_end<8, SPLIT>(acc, a.out, row0, lane, wi, nw, a.split);
}

// The gate and up products of a decode FFN with its SWIGLU (EMBER_CUDA_MV_GLU,
// ember_cuda_mul_mat_vec_glu): a block owns 32 hidden units, their 32 gate rows and 32 up rows,
// so silu(g) u and its 8-bit block (the down product's x) are made in the block: no SWIGLU
// launch, no counter between blocks, one barrier. mvr_norm_kernel's layout with twice the rows:
// warp w takes slices w, w + nw, ... of 8 16-byte chunks; lane l takes chunk l % 8 of a slice in
// rows 4 t + l / 8 (t = 0..7) of both matrices, so each x load serves 16 rows and each warp load
// covers 4 rows' 128 contiguous bytes.
struct mvg_args {
    const uint4 *          gq;  // gate quants (CUDA layout), rows of nchunk 16-byte chunks
    const uint4 *          uq;  // up quants
    const unsigned short * gd;  // their scales, rows of nb
    const unsigned short * ud;
    int                    nchunk, nb;
    const int8_t *         xq;  // x's 8-bit copy
    const float2 *         xds;
    ember_cuda_norm_scale  ns;  // NS: x is a norm-in-product copy
    mvg_out                out;
};

// W warps a block: 8 (2 blocks an SM) where the grid is one wave so, else 4 (4 blocks an SM: the
// 8B shape's 448 blocks in one wave; 127-128 registers either way).
// EG (mv_glu_early_both false: 4 warps a block by default, EMBER_CUDA_MV_GLU_EARLY=1 always): only
// the gate rows' loads before the PDL wait, the up rows' after it. The block's whole first slice
// before the wait (128 KB an SM for the 1B shape) slowed the separate norm kernel the launch then
// overlapped (2.43 -> 2.81 us) more than it saved: H200 tg128 1B Q4_0 2124.8 -> 2159.2, 1B Q8_0
// 1626.5 -> 1638.7 (gate only; one build, two runs a side; session 39). Since the norm went into
// the O producer, the whole slice early gains at 8 warps (mv_glu_early_both).
template <int T, bool NS, bool EG, int W, bool SEP>
__global__ void __launch_bounds__(32 * W, 16 / W) mvr_glu_kernel(mvg_args a) {
    using D                       = mvr<T>;
    constexpr bool         PIPE   = W == 4;
    const int              lane   = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int              ro     = lane / 8, j = lane % 8;
    const int64_t          row0   = static_cast<int64_t>(blockIdx.x) * 32;
    const int              nsl    = (a.nchunk + 7) / 8;
    const uint4 *          gq     = a.gq + (row0 + ro) * a.nchunk;
    const uint4 *          uq     = a.uq + (row0 + ro) * a.nchunk;
    const unsigned short * gd     = a.gd + (row0 + ro) * a.nb;
    const unsigned short * ud     = a.ud + (row0 + ro) * a.nb;
    const int64_t          qstep  = 4 * static_cast<int64_t>(a.nchunk), dstep = 4 * static_cast<int64_t>(a.nb);
    uint4                  w[16];
    // SEP (4 warps; chosen in mvg_launch): the rows' scale bits as loaded, each in a register of
    // its own, so no instruction needs a load's value before the product does. Session 39's form,
    // kept for 8 warps (the separate registers spill there: 36-76 bytes, the 1B launch 5.57 -> 5.73
    // us), merges the gate's and the up's halves into the 8 words dw; each merge waits for its
    // load, so with PIPE the next slice's loads stalled the warp: H200 8B Q4_0 20.34 -> 17.46 us a
    // launch, tg128 616.8 -> 668.3 (session 40).
    unsigned short         dg[8] = {}, du[8] = {};
    uint32_t               dw[8] = {};
    const auto             load = [&](int sl, int part) {  // part 1: the gate rows, 2: the up rows, 3: both
        const int  c  = 8 * sl + j;
        const bool ok = c < a.nchunk;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            if (part & 1) {
                const unsigned short g = ok ? __ldg(gd + t * dstep + c / D::CPB) : static_cast<unsigned short>(0);
                w[t]                   = ok ? __ldcs(gq + t * qstep + c) : make_uint4(0, 0, 0, 0);
                if constexpr (SEP) dg[t] = g;
                else dw[t] = PIPE ? (dw[t] & 0xffff0000u) | g : g;  // (PIPE: the up scale of the slice before still in use)
            }
            if (part & 2) {
                const unsigned short u = ok ? __ldg(ud + t * dstep + c / D::CPB) : static_cast<unsigned short>(0);
                w[8 + t]               = ok ? __ldcs(uq + t * qstep + c) : make_uint4(0, 0, 0, 0);
                if constexpr (SEP) du[t] = u;
                else dw[t] = (dw[t] & 0xffffu) | static_cast<uint32_t>(u) << 16;
            }
        }
    };
    const auto scale = [&](int h, int t) {  // row t's scale, of the gate (h = 0) or the up rows (1)
        const unsigned short b = SEP ? (h == 0 ? dg[t] : du[t]) : static_cast<unsigned short>(dw[t] >> (16 * h));
        return __half2float(__ushort_as_half(b));
    };
    // Weights only before waiting for the kernel that makes x: all of the first slice, or (EG)
    // its gate rows only, the up rows after the wait.
    if (wi < nsl) load(wi, EG ? 1 : 3);
    cu_pdl_begin();
    if (EG && wi < nsl) load(wi, 2);
    // PIPE (4 warps: the 8B shape's 16 slices over 4 warps): the next slice's gate rows requested
    // as soon as this one's gate rows are summed, its up rows after this one's up rows, so a
    // slice's loads wait behind half a slice's arithmetic, not a round trip. Without it the next
    // slice's loads follow the whole slice (8 warps: 1B Q8_0's 16 slices; that form measured
    // 1595.4 -> 1638.7 there, the pipelined one 1600.1 -> 1599.9 in a later call).
    float          acc[16] = {};
    typename D::xs x{};
    mvg_slices<PIPE>(
        wi, nw, nsl, j, a.nchunk, load, [&](int c) { x = D::load_x(a.xq, a.xds, c); },
        [&](int h) {  // h = 0: the gate rows, 1: the up rows
#pragma unroll
            for (int t = 0; t < 8; t++) acc[8 * h + t] += D::dot(w[8 * h + t], scale(h, t), x);
        });
    mvg_block_end<W, NS>(acc, a.out, a.ns, row0, lane, wi, nw);
}

// A streaming matvec (mvs_launch says where it runs): mvr_kernel's product of rows of exactly
// 32 U chunks (Q4_0 / Q8_0 rows 2048 or 4096 wide), one row a warp, on a resident grid whose
// warps stream rows through a ring of S stages of shared memory each (cp.async, one row a
// stage), so S rows a warp are in flight and no block retires and relaunches per row (the 1B
// gate/up launch: 2048 blocks of 8 rows, each one memory round trip); x of the lane's chunks is
// held in registers for every row. Rows are mvr_kernel's (the group's blocks of rpb rows), the
// arithmetic the same: the same bits.
constexpr int k_mvs_warps = 8;
template <int T, int U, int S, bool NS>
__global__ void __launch_bounds__(32 * k_mvs_warps) mvr_stream_kernel(mvr_args a, int items, int stage, int lrpb) {
    using D = mvr<T>;
    extern __shared__ __align__(16) unsigned char mvs_sm[];
    const int       lane = threadIdx.x % 32, wi = threadIdx.x / 32;
    const int       gw = blockIdx.x * k_mvs_warps + wi, nwarps = gridDim.x * k_mvs_warps;
    const int       mine = gw < items ? (items - 1 - gw) / nwarps + 1 : 0;
    unsigned char * ring = mvs_sm + static_cast<size_t>(wi) * S * stage;
    constexpr int   qbytes = 32 * U * 16;
    const int       spieces = a.nb * 2 / 16;  // the row's scales in 16-byte pieces
    uint64_t        pol     = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
    const auto item_of = [&](int k, int & m, int64_t & row, int64_t & n) {
        const int i  = gw + k * nwarps, vb = i >> lrpb;  // 1 << lrpb: rows of one of the launch's (virtual) blocks
        m            = a.grouped ? mv_which(a.grp, vb) : 0;
        row          = (static_cast<int64_t>(vb - (a.grouped ? a.grp.blk0[m] : 0)) << lrpb) + (i & ((1 << lrpb) - 1));
        n            = a.grouped ? mv_pick(a.grp.n, m) : a.n;
    };
    const auto issue = [&](int k) {
        if (k < mine) {
            int     m;
            int64_t row, n;
            item_of(k, m, row, n);
            if (row < n) {
                const uint4 *          wq = (a.grouped ? static_cast<const uint4 *>(mv_pick(a.grp.w, m)) : a.wq) + row * a.nchunk;
                const unsigned short * wd = (a.grouped ? mv_pick(a.grp.wd, m) : a.wd) + row * a.nb;
                unsigned char *        st = ring + (k % S) * stage;
#pragma unroll
                for (int u = 0; u < U; u++) cu_cp16_hint(st + (lane + 32 * u) * 16, wq + lane + 32 * u, pol);
                for (int p = lane; p < spieces; p += 32) cu_cp16_hint(st + qbytes + 16 * p, reinterpret_cast<const uint4 *>(wd) + p, pol);
            }
        }
        cu_cp_commit();
    };
#pragma unroll
    for (int k = 0; k < S; k++) issue(k);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    typename D::xs x[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = D::load_x(a.xq, a.xds, lane + 32 * u);
    float sc = 1.0f;
    if constexpr (NS) sc = mv_norm_scale(a.ns, lane);
    for (int k = 0; k < mine; k++) {
        cu_cp_wait<S - 1>();
        __syncwarp();
        const unsigned char * st  = ring + (k % S) * stage;
        float                 acc = 0.0f;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int   c  = lane + 32 * u;
            const uint4 w  = *reinterpret_cast<const uint4 *>(st + 16 * c);
            const float dw = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(st + qbytes + 2 * (c / D::CPB))));
            acc += D::dot(w, dw, x[u]);
        }
        __syncwarp();
        issue(k + S);
        int     m;
        int64_t row, n;
        item_of(k, m, row, n);
        if constexpr (NS) acc *= sc;
        const float sum = cu_warp_sum(acc);
        if (lane == 0 && row < n) reinterpret_cast<float *>(a.grouped ? mv_pick(a.grp.y, m) : a.y.data)[row] = sum;
    }
}

// Q4_K in its GGUF layout already suits 16-byte loads (144-byte blocks; qs at byte 16): the
// same warp-per-rows scheme as mvr_kernel, a lane's chunk being 16 bytes of one 32-byte group
// of qs (16 weights of each of its two sub-blocks), with the block's 16-byte header (d, dmin,
// packed scales) loaded alongside (8 lanes share it through L1).
//
// A warp's chunks start on a block, so a lane's chunks c all have c % 8 == lane % 8: the same
// group g = (lane % 8) / 2 of every block, hence the same two sub-blocks 2g, 2g + 1 and the same
// bytes of the packed scales (k4_lane). Their 6-bit scales and mins come out of the header by
// byte permutes with the lane's selectors, two values a word, and every small integer becomes a
// float by the exponent trick (k4_f, cu_int_float) instead of a conversion instruction (I2F and
// F2F issue at a quarter of the rate of the integer and float pipes: the kernel spent 8 of them a
// chunk and row and read the 8B shape's Q4_K matrices at ~2.4 TB/s where Q4_0's ran at ~3.9;
// H200 tg128 8B Q4_K_M 420.1 -> 461.3 t/s).
struct k4_lane {
    uint32_t sel_pair;  // the lane's two scale bytes b0, b0 + 1 into bytes 0 and 2
    uint32_t sel_lo;    // the low-bits source: the same bytes of the first word (j < 4) or of h.w (j >= 4)
    uint32_t sh_hi;     // 0 (j < 4: the 6 bits are in one byte) or 2 (j >= 4: the top 2 bits are bits 6-7 of y / z)
    uint32_t sh_m;      // 0 or 4: the mins' low 4 bits are the high nibble of h.w's byte for j >= 4
    int      g;         // the lane's group of qs (32 bytes: sub-blocks 2g, 2g + 1)
    int      xoff;      // the chunk's x offset within its block: 64 g (+ 16 for the second half with QW = 1)
};
// QW: 16-byte words of qs a lane's chunk has: 1 (half a group: lanes 2g, 2g + 1 of each 8) or 2
// (the whole group: lane g of each 4).
template <int QW> __device__ __forceinline__ k4_lane k4_lane_of(int lane) {
    const int      g  = QW == 1 ? (lane % 8) / 2 : lane % 4;
    const uint32_t b0 = 2 * (g & 1), hi = g >= 2;
    k4_lane        l;
    l.sel_pair = b0 | (b0 + 1) << 8;
    l.sel_lo   = hi ? (b0 + 4) | (b0 + 5) << 8 : l.sel_pair;
    l.sh_hi    = hi ? 2 : 0;
    l.sh_m     = hi ? 4 : 0;
    l.g        = g;
    l.xoff     = 64 * g + (QW == 1 ? 16 * (lane % 2) : 0);
    return l;
}
// The float of a small non-negative integer in bits 0-7 (byte 0) or 16-23 (byte 2) of v: the
// byte under the exponent of 2^23, minus 2^23 (exact; one byte permute and a subtraction).
template <int BYTE> __device__ __forceinline__ float k4_f(uint32_t v) {
    return __int_as_float(static_cast<int>(__byte_perm(v, 0x4b000000u, 0x7440u | BYTE))) - 8388608.0f;
}
// One row's chunk: q its QW words of quant bytes (16 weights of each of sub-blocks 2g / 2g + 1
// a word), h its block's header, x the lane's activation bytes (xlo[k]: sub-block 2g's 16 of
// word k, xhi[k]: 2g + 1's) and ds the two sub-blocks' (d, d sum q) pairs.
// (k4_scaled: the sub-blocks' scales and mins applied to their integer sums s0, s1.)
template <int QW> __device__ __forceinline__ float k4_scaled(const uint4 & h, const k4_lane & l, int s0, int s1, const float4 & ds);
template <int QW>
__device__ __forceinline__ float k4_chunk(const uint4 (&q)[QW], const uint4 & h, const k4_lane & l, const int4 (&xlo)[QW], const int4 (&xhi)[QW],
                                          const float4 & ds) {
    // The high nibbles in place (cu_dot_q4_halves: .y is 16 times their sum).
    int2 sh = cu_dot_q4_halves(q[0], xlo[0], xhi[0]);
    if constexpr (QW == 2) {
        const int2 s2 = cu_dot_q4_halves(q[1], xlo[1], xhi[1]);
        sh.x += s2.x;
        sh.y += s2.y;
    }
    return k4_scaled<QW>(h, l, sh.x, sh.y >> 4, ds);
}
// Q5_K's chunk (mvk_kernel Q5): Q4_K's with each level's fifth bit from qh (the QW words of the
// qh bytes at the chunk's positions; bit 2 g for sub-block 2 g, 2 g + 1 for 2 g + 1) put above
// its nibble: levels 0..31, both halves' sums plain.
template <int QW>
__device__ __forceinline__ float k5_chunk(const uint4 (&q)[QW], const uint4 (&qh)[QW], const uint4 & h, const k4_lane & l, const int4 (&xlo)[QW],
                                          const int4 (&xhi)[QW], const float4 & ds) {
    const int b0 = 2 * l.g;
    int       s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < QW; k++) {
        const uint32_t w[4] = {q[k].x, q[k].y, q[k].z, q[k].w}, m[4] = {qh[k].x, qh[k].y, qh[k].z, qh[k].w};
        const int      xl[4] = {xlo[k].x, xlo[k].y, xlo[k].z, xlo[k].w}, xh[4] = {xhi[k].x, xhi[k].y, xhi[k].z, xhi[k].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s0 = cu_dp4a_us((w[i] & 0x0f0f0f0fu) | ((m[i] >> b0) & 0x01010101u) << 4, xl[i], s0);
            s1 = cu_dp4a_us(((w[i] >> 4) & 0x0f0f0f0fu) | ((m[i] >> (b0 + 1)) & 0x01010101u) << 4, xh[i], s1);
        }
    }
    return k4_scaled<QW>(h, l, s0, s1, ds);
}
// The block of the rows mvk_body / mvk_norm_kernel read: Q4_K, Q5_K (Q5) or IQ4_XS (XS).
template <bool Q5, bool XS>
using mvk_block_t = std::conditional_t<XS, ember_block_iq4_xs, std::conditional_t<Q5, ember_block_q5_k, ember_block_q4_k>>;
// IQ4_XS's chunk (mvk_kernel XS, QW = 2): the lane's 32 bytes of qs are sub-block 2 g's 16 (q[0])
// and 2 g + 1's (q[1]), each byte weights i (low nibble) and i + 16 (high) of its sub-block
// (iq4_dot8); x's words: xlo[0] / xlo[1] 2 g's weights 0-15 / 16-31, xhi[0] / xhi[1] 2 g + 1's. h
// holds the block's first 8 bytes: h.x = d | scales_h << 16, h.y = scales_l (ls_j: the nibble j % 2
// of byte j / 2, bits 2 j, 2 j + 1 of scales_h above it); the same sums as mvq<IQ4_XS> (emulated
// on the host against the dequantized weights: relative 2e-7 over a 4096-wide row).
__device__ __forceinline__ float xs_chunk(const uint4 (&q)[2], const uint4 & h, const k4_lane & l, const int4 (&xlo)[2], const int4 (&xhi)[2],
                                          const float4 & ds) {
    const uint32_t w0[4] = {q[0].x, q[0].y, q[0].z, q[0].w}, w1[4] = {q[1].x, q[1].y, q[1].z, q[1].w};
    const int      a0[4] = {xlo[0].x, xlo[0].y, xlo[0].z, xlo[0].w}, b0[4] = {xlo[1].x, xlo[1].y, xlo[1].z, xlo[1].w};
    const int      a1[4] = {xhi[0].x, xhi[0].y, xhi[0].z, xhi[0].w}, b1[4] = {xhi[1].x, xhi[1].y, xhi[1].z, xhi[1].w};
    int            s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 += iq4_dot8(static_cast<int>(w0[i]), a0[i], b0[i]);
        s1 += iq4_dot8(static_cast<int>(w1[i]), a1[i], b1[i]);
    }
    const int   g   = l.g;
    const int   ls0 = static_cast<int>(((h.y >> (8 * g)) & 0xfu) | ((h.x >> (16 + 4 * g)) & 3u) << 4);
    const int   ls1 = static_cast<int>(((h.y >> (8 * g + 4)) & 0xfu) | ((h.x >> (18 + 4 * g)) & 3u) << 4);
    const float d   = cu_half(static_cast<ember_half>(h.x & 0xffffu));
    return d * (static_cast<float>(ls0 - 32) * ds.x * cu_int_float(s0) + static_cast<float>(ls1 - 32) * ds.z * cu_int_float(s1));
}
template <int QW> __device__ __forceinline__ float k4_scaled(const uint4 & h, const k4_lane & l, int s0, int s1, const float4 & ds) {
    // Sub-block j's scale: j < 4: y's byte j & 63; j >= 4: (w's byte j-4 & 15) | (y's byte j-4 >> 6) << 4.
    // Its min: the same with z for y and w's high nibble. Two values a word, in bytes 0 and 2.
    const uint32_t sc = (__byte_perm(h.y, h.w, l.sel_lo) & 0x000f000fu) | ((__byte_perm(h.y, 0u, l.sel_pair) >> l.sh_hi) & 0x00300030u);
    const uint32_t mn = ((__byte_perm(h.z, h.w, l.sel_lo) >> l.sh_m) & 0x000f000fu) | ((__byte_perm(h.z, 0u, l.sel_pair) >> l.sh_hi) & 0x00300030u);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2 *>(&h.x));  // d, dmin
    // QW = 1: this lane covers 16 of each sub-block's 32 weights, half of the mins' term.
    constexpr float mins = QW == 2 ? 1.0f : 0.5f;
    return dm.x * (k4_f<0>(sc) * ds.x * cu_int_float(s0) + k4_f<2>(sc) * ds.z * cu_int_float(s1)) - dm.y * (k4_f<0>(mn) * ds.y + k4_f<2>(mn) * ds.w) * mins;
}

// A Q4_K block header from its 4 lanes' words (each lane of a 4-lane group holds word lane % 4,
// hw): the header-word trick of mvk_glu_kernel.
__device__ __forceinline__ uint4 k4_header_of(uint32_t hw) {
    return make_uint4(__shfl_sync(0xffffffffu, hw, 0, 4), __shfl_sync(0xffffffffu, hw, 1, 4), __shfl_sync(0xffffffffu, hw, 2, 4),
                      __shfl_sync(0xffffffffu, hw, 3, 4));
}

// R rows a warp, U chunks of each in flight per lane; QW 16-byte words of qs a chunk (k4_lane_of).
// NS: x is a norm-in-product copy, the norm's scale still to apply (mvq_args ns).
// (The body's blocks are blockIdx.x - boff: mvk_p6_kernel runs it on the first blocks of its grid.)
// Q5: Q5_K rows (176-byte blocks: the 16-byte header, qh's 32 bytes, then qs), each chunk's qh
// bytes loaded beside its qs (k5_chunk).
// XS (QW = 2): IQ4_XS rows (136-byte blocks, 8-byte aligned: the 8-byte header, then qs), a lane's
// 32 bytes of qs in 8-byte loads, the header's 8 bytes in h.x / h.y (xs_chunk).
template <int R, int U, int QW, bool NS, bool Q5 = false, bool XS = false>
__device__ __forceinline__ void mvk_body(const mvq_args & a, unsigned boff) {
    static_assert(!XS || (QW == 2 && !Q5), "IQ4_XS: whole 32-byte groups a lane");
    using block         = mvk_block_t<Q5, XS>;
    constexpr int BYTES = sizeof(block);
    constexpr int QS    = offsetof(block, qs);
    constexpr int CPB   = 8 / QW;  // a block's chunks
    constexpr int CSH   = QW == 1 ? 3 : 2;  // chunk c (>= 0) is in block c >> CSH
    const int     lane  = threadIdx.x % 32;
    // The matrix of this block (locals: writing to `a` would copy the parameters to the stack).
    const int     m      = a.grouped ? mv_which(a.grp, blockIdx.x - boff) : 0;
    const int     bx     = a.grouped ? blockIdx.x - boff - a.grp.blk0[m] : blockIdx.x - boff;
    const char *  w_base = a.grouped ? static_cast<const char *>(mv_pick(a.grp.w, m)) : a.w;
    const int64_t w_nb1  = a.grouped ? a.nblk * BYTES : a.w_nb1;
    const int64_t n      = a.grouped ? mv_pick(a.grp.n, m) : a.n;
    char *        y_data = a.grouped ? mv_pick(a.grp.y, m) : a.y.data;
    const int64_t y_nb1  = a.grouped ? mv_pick(a.grp.y_nb1, m) : a.y.nb[1];
    const int64_t row0   = (static_cast<int64_t>(bx) * k_rp_warps + threadIdx.x / 32) * R;
    if (row0 >= n) return;
    int64_t rows[R];
    mv_rows<R>(row0, a.grouped ? mv_pick(a.grp.neox_hd, m) : 0, rows);
    const int64_t col = blockIdx.y;
    const mvq_batch bp = mvq_batch_of(a, w_base);
    const int64_t   i2 = bp.i2, i3 = bp.i3;
    const k4_lane   l   = k4_lane_of<QW>(lane);
    const int8_t *  xq  = bp.xq + l.xoff;
    const float4 *  xds = reinterpret_cast<const float4 *>(bp.xds) + l.g;  // (d, d sum q) of sub-blocks 2g, 2g + 1
    const int       qoff = 16 * QW * (lane % CPB);                        // the chunk's qs bytes in its block
    const char *   wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = bp.w + (rows[r] < n ? rows[r] : n - 1) * w_nb1 + QS + qoff;
    const int nchunk = static_cast<int>(a.nblk) * CPB;
    float     acc[R] = {};
    uint4     q[U][R][QW], h[U][R];
    uint4     qh[U][R][Q5 ? QW : 1];                                          // (Q5)
    constexpr int QH    = Q5 ? static_cast<int>(offsetof(ember_block_q5_k, qh)) : 0;
    const int     qhoff = QH + (QW == 1 ? 16 * (lane % 2) : 0) - QS - qoff;  // (Q5) the chunk's qh bytes from its qs
    const auto load = [&](int c0) {  // c0 % CPB == lane % CPB: chunk c0 + 32 u is in block (c0 >> CSH) + 32 u / CPB
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int  c  = c0 + 32 * u;
            const bool ok = c < nchunk;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const char * blk = wr[r] + static_cast<int64_t>(c >> CSH) * BYTES;  // this lane's quant bytes
                if constexpr (XS) {
#pragma unroll
                    for (int k = 0; k < QW; k++) {
                        const uint2 lo = ok ? __ldcs(reinterpret_cast<const uint2 *>(blk) + 2 * k) : make_uint2(0, 0);
                        const uint2 hi = ok ? __ldcs(reinterpret_cast<const uint2 *>(blk) + 2 * k + 1) : make_uint2(0, 0);
                        q[u][r][k]     = make_uint4(lo.x, lo.y, hi.x, hi.y);
                    }
                    const uint2 hd = ok ? __ldg(reinterpret_cast<const uint2 *>(blk - QS - qoff)) : make_uint2(0, 0);
                    h[u][r]        = make_uint4(hd.x, hd.y, 0, 0);
                } else {
#pragma unroll
                    for (int k = 0; k < QW; k++) q[u][r][k] = ok ? __ldcs(reinterpret_cast<const uint4 *>(blk) + k) : make_uint4(0, 0, 0, 0);
                    h[u][r] = ok ? __ldg(reinterpret_cast<const uint4 *>(blk - QS - qoff)) : make_uint4(0, 0, 0, 0);
                }
                if constexpr (Q5) {
#pragma unroll
                    for (int k = 0; k < QW; k++) qh[u][r][k] = ok ? __ldcs(reinterpret_cast<const uint4 *>(blk + qhoff) + k) : make_uint4(0, 0, 0, 0);
                }
            }
        }
    };
    load(lane);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    for (int c0 = lane; c0 < nchunk; c0 += 32 * U) {
        if (c0 != lane) load(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= nchunk) continue;
            const int      b  = c >> CSH;
            const int4 *   xb = reinterpret_cast<const int4 *>(xq + 256 * static_cast<int64_t>(b));
            int4           xlo[QW], xhi[QW];
#pragma unroll
            for (int k = 0; k < QW; k++) {
                xlo[k] = __ldg(xb + k);
                xhi[k] = __ldg(xb + 2 + k);
            }
            const float4 ds = __ldg(xds + 4 * static_cast<int64_t>(b));
#pragma unroll
            for (int r = 0; r < R; r++) {
                if constexpr (XS) acc[r] += xs_chunk(q[u][r], h[u][r], l, xlo, xhi, ds);
                else if constexpr (Q5) acc[r] += k5_chunk<QW>(q[u][r], qh[u][r], h[u][r], l, xlo, xhi, ds);
                else acc[r] += k4_chunk<QW>(q[u][r], h[u][r], l, xlo, xhi, ds);
            }
        }
    }
    if constexpr (NS) {
        const float sc = mv_norm_scale(a.ns, lane);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] *= sc;
    }
    mv_finish<R>(acc, lane, a.grouped && a.grp.has_epi, a.grp, m, n, col, rows,
                 reinterpret_cast<float *>(y_data + col * y_nb1 + i2 * a.y.nb[2] + i3 * a.y.nb[3]), a.err);
}
template <int R, int U, int MINB = 0, int QW = 1, bool NS = false, bool Q5 = false, bool XS = false>
__global__ void __launch_bounds__(32 * k_rp_warps, MINB) mvk_kernel(mvq_args a) {
    mvk_body<R, U, QW, NS, Q5, XS>(a, 0);
}

// mvr_norm_kernel for Q4_K weights (16-byte-aligned rows; EMBER_CUDA_MV_NORM_Q4K=0: off): a
// block owns 32 whole rows; its warps split the row length in slices of one 256-weight block;
// lane l takes the 32-byte group l % 4 of a slice (mvk_kernel's QW = 2 chunk, its header decode
// and x loads) in rows 8 t + l / 4 (t = 0..3), so each x load serves 4 rows and each warp load
// covers 8 rows' 128 bytes of qs. The end as mvr_norm_kernel's (mvn_block_end).
// SPLIT: two blocks a group of 32 rows (ember_cuda_mvn_split, mvn_half, mvn_block_end SPLIT).
// Q5: Q5_K rows (176-byte blocks; a lane's 32 bytes of qs with the block's 32 qh bytes, k5_chunk).
// XS: IQ4_XS rows (136-byte blocks; 8-byte loads, xs_chunk).
template <int MINB = 1, bool SPLIT = false, bool Q5 = false, bool XS = false>
__global__ void __launch_bounds__(32 * k_mvn_max_warps, MINB) mvk_norm_kernel(mvk_norm_args a) {
    using block         = mvk_block_t<Q5, XS>;
    constexpr int BYTES = sizeof(block);
    constexpr int QS    = offsetof(block, qs);
    constexpr int QH    = Q5 ? static_cast<int>(offsetof(ember_block_q5_k, qh)) : 0;
    const int     lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int     ro   = lane / 4;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x >> (SPLIT ? 1 : 0)) * k_mvn_rows;
    const k4_lane l    = k4_lane_of<2>(lane);
    const char *  wr   = a.w + (row0 + ro) * a.w_nb1 + QS + 32 * l.g;  // this lane's qs in block 0 of its first row
    const int64_t rstep = 8 * a.w_nb1;
    uint4         q[4][2], h[4];
    uint4         qh[4][Q5 ? 2 : 1];  // (Q5)
    const auto    load = [&](int b) {
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const char * blk = wr + t * rstep + static_cast<int64_t>(b) * BYTES;
            if constexpr (XS) {  // (8-byte aligned)
                const uint2 * p = reinterpret_cast<const uint2 *>(blk);
                const uint2   a0 = __ldcs(p), a1 = __ldcs(p + 1), a2 = __ldcs(p + 2), a3 = __ldcs(p + 3);
                const uint2   hd = __ldg(reinterpret_cast<const uint2 *>(blk - QS - 32 * l.g));
                q[t][0]          = make_uint4(a0.x, a0.y, a1.x, a1.y);
                q[t][1]          = make_uint4(a2.x, a2.y, a3.x, a3.y);
                h[t]             = make_uint4(hd.x, hd.y, 0, 0);
                continue;
            }
            q[t][0]          = __ldcs(reinterpret_cast<const uint4 *>(blk));
            q[t][1]          = __ldcs(reinterpret_cast<const uint4 *>(blk) + 1);
            h[t]             = __ldg(reinterpret_cast<const uint4 *>(blk - QS - 32 * l.g));
            if constexpr (Q5) {
                qh[t][0] = __ldcs(reinterpret_cast<const uint4 *>(blk - QS - 32 * l.g + QH));
                qh[t][1] = __ldcs(reinterpret_cast<const uint4 *>(blk - QS - 32 * l.g + QH) + 1);
            }
        }
    };
    // (slices: 256-weight blocks; SPLIT: this block's half, mvn_half)
    const int b0 = SPLIT ? mvn_half(a.nblk).x + wi : wi, b1 = SPLIT ? mvn_half(a.nblk).y : a.nblk;
    if (b0 < b1) load(b0);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float acc[4] = {};
    for (int b = b0; b < b1; b += nw) {
        if (b != b0) load(b);
        const int4 * xb = reinterpret_cast<const int4 *>(a.xq + 256 * static_cast<int64_t>(b) + l.xoff);
        int4         xlo[2], xhi[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            xlo[k] = __ldg(xb + k);
            xhi[k] = __ldg(xb + 2 + k);
        }
        const float4 ds = __ldg(reinterpret_cast<const float4 *>(a.xds) + 4 * static_cast<int64_t>(b) + l.g);
#pragma unroll
        for (int t = 0; t < 4; t++) {
            if constexpr (XS) acc[t] += xs_chunk(q[t], h[t], l, xlo, xhi, ds);
            else if constexpr (Q5) acc[t] += k5_chunk<2>(q[t], qh[t], h[t], l, xlo, xhi, ds);
            else acc[t] += k4_chunk<2>(q[t], h[t], l, xlo, xhi, ds);
        }
    }
    mvn_block_end<4, SPLIT>(acc, a.out, row0, lane, wi, nw, a.split);
}

// The gate / up launch with its SWIGLU for Q4_K weights (16-byte-aligned rows;
// EMBER_CUDA_MV_GLU_Q4K=0: not): mvk_norm_kernel's layout over both matrices. A block of W warps
// owns 32 hidden units; warps split the row in slices of one 256-weight block; lane l takes the
// 32-byte group l % 4 of a slice in rows 8 t + l / 4 (t < 4) of the gate and of the up matrix
// (mvk_kernel's QW = 2 chunk), so each x load serves 8 rows. The 16-byte block header (d, dmin, the
// 12 bytes of 6-bit scales and mins) is the same for the 4 lanes of a row: each loads its word
// l % 4 and takes the other three from its neighbours by shuffles when it uses them (1 register a
// row, not 4: the 8 rows' 32-byte chunks, 64 registers, then fit the 128 of 4 blocks an SM). The
// gate rows' loads before the PDL wait, the up rows' after it; the next slice's loads follow half a
// slice's arithmetic (mvg_slices' PIPE: the 8B shape's 16 slices over 4 warps; the 1B shape's 8
// over 8 warps are one a warp, so there it never runs). The end: mvg_block_end with 4 rows a lane.
struct mvk_glu_args {
    const char *          gw;  // gate rows (Q4_K), w_nb1 bytes apart (16-byte aligned)
    const char *          uw;  // up rows
    int64_t               w_nb1;
    int                   nblk;  // 256-weight blocks a row
    const int8_t *        xq;    // x's 8-bit copy
    const float2 *        xds;
    ember_cuda_norm_scale ns;  // NS: x is a norm-in-product copy
    mvg_out               out;
};

// x's words of block b for a gate / up lane (mvk_glu_kernel, mvk5_glu_kernel: k4_lane_of<2>'s
// group), as mvk_body loads them.
__device__ __forceinline__ void k4_glu_fetch_x(const mvk_glu_args & a, int b, const k4_lane & l, int4 (&xlo)[2], int4 (&xhi)[2], float4 & ds) {
    const int4 * xb = reinterpret_cast<const int4 *>(a.xq + 256 * static_cast<int64_t>(b) + l.xoff);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        xlo[k] = __ldg(xb + k);
        xhi[k] = __ldg(xb + 2 + k);
    }
    ds = __ldg(reinterpret_cast<const float4 *>(a.xds) + 4 * static_cast<int64_t>(b) + l.g);
}

// EB (mv_glu_early_both: 8 warps a block by default, as mvr_glu_kernel's EG off): the first
// slice's up rows requested before the PDL wait too, not after it.
// XS (EMBER_CUDA_MV_GLU_IQ4XS, session 69): IQ4_XS rows (136-byte blocks, 8-byte aligned; mvk_body's
// XS loads and xs_chunk): a lane's 32 bytes of qs in four 8-byte loads, and of the block's 8-byte
// header (d, scales_h, scales_l) word l.g % 2, the other taken from a neighbour by a shuffle.
template <bool NS, int W, bool EB = false, bool XS = false>
__global__ void __launch_bounds__(32 * W, 16 / W) mvk_glu_kernel(mvk_glu_args a) {
    constexpr int  BYTES = XS ? static_cast<int>(sizeof(ember_block_iq4_xs)) : 144;
    constexpr int  QS    = XS ? static_cast<int>(offsetof(ember_block_iq4_xs, qs)) : 16;
    constexpr bool PIPE  = true;  // (both warp counts: unpipelined, the 8-warp form spills 36-44 bytes)
    const int      lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int64_t  row0 = static_cast<int64_t>(blockIdx.x) * 32;
    const k4_lane  l    = k4_lane_of<2>(lane);
    const int64_t  off  = (row0 + lane / 4) * a.w_nb1 + QS + 32 * l.g;  // this lane's qs in block 0 of its first row
    const char *   gr   = a.gw + off;
    const char *   ur   = a.uw + off;
    const int64_t  rstep = 8 * a.w_nb1;
    uint4          q[8][2];  // rows t < 4: the gate's, 4 + t: the up's
    uint32_t       hw[8];    // word l.g of each row's block header
    const auto     load = [&](int b, int part) {  // part 1: the gate rows, 2: the up rows, 3: both
#pragma unroll
        for (int t = 0; t < 4; t++) {
#pragma unroll
            for (int m = 0; m < 2; m++) {
                if (!(part >> m & 1)) continue;
                const char * blk = (m == 0 ? gr : ur) + t * rstep + static_cast<int64_t>(b) * BYTES;
                if constexpr (XS) {  // (8-byte aligned)
                    const uint2 * p  = reinterpret_cast<const uint2 *>(blk);
                    const uint2   a0 = __ldcs(p), a1 = __ldcs(p + 1), a2 = __ldcs(p + 2), a3 = __ldcs(p + 3);
                    q[4 * m + t][0]  = make_uint4(a0.x, a0.y, a1.x, a1.y);
                    q[4 * m + t][1]  = make_uint4(a2.x, a2.y, a3.x, a3.y);
                    hw[4 * m + t]    = __ldg(reinterpret_cast<const uint32_t *>(blk - QS - 32 * l.g) + (l.g & 1));
                    continue;
                }
                q[4 * m + t][0]  = __ldcs(reinterpret_cast<const uint4 *>(blk));
                q[4 * m + t][1]  = __ldcs(reinterpret_cast<const uint4 *>(blk) + 1);
                hw[4 * m + t]    = __ldg(reinterpret_cast<const uint32_t *>(blk - 16 - 32 * l.g) + l.g);
            }
        }
    };
    if (wi < a.nblk) load(wi, EB ? 3 : 1);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    if (!EB && wi < a.nblk) load(wi, 2);
    float  acc[8] = {};
    int4   xlo[2], xhi[2];
    float4 ds;
    // (slices are whole blocks: mvg_slices' chunk c = 8 b, always inside the row)
    mvg_slices<PIPE>(
        wi, nw, a.nblk, 0, 8 * a.nblk, load,
        [&](int c) { k4_glu_fetch_x(a, c / 8, l, xlo, xhi, ds); },
        [&](int h) {  // h = 0: the gate rows, 1: the up rows
#pragma unroll
            for (int t = 4 * h; t < 4 * h + 4; t++) {
                if constexpr (XS) {
                    const uint4 hd = make_uint4(__shfl_sync(0xffffffffu, hw[t], 0, 4), __shfl_sync(0xffffffffu, hw[t], 1, 4), 0u, 0u);
                    acc[t] += xs_chunk(q[t], hd, l, xlo, xhi, ds);
                } else {
                    acc[t] += k4_chunk<2>(q[t], k4_header_of(hw[t]), l, xlo, xhi, ds);
                }
            }
        });
    mvg_block_end<W, NS, 4>(acc, a.out, a.ns, row0, lane, wi, nw);
}

// The gate / up launch with its SWIGLU for Q5_K weights (EMBER_CUDA_MV_GLU_Q5K, the default since session
// 70; written in 69): mvk_glu_kernel's layout but 4 rows a lane, not 8. A lane needs the
// whole 32 bytes of its row's qh beside its 32 bytes of qs (k5_chunk), so 8 rows would hold 128
// registers of weights alone. Warps 2 h and 2 h + 1 split the block's 32 units: warp parity p takes
// rows 8 t + l / 4 for t = 2 p, 2 p + 1 of the gate and of the up matrix (NT = 4's rows, the other
// two t left zero for mvg_block_end), and the warps of one parity split the row's slices (nw even:
// the launch's threads 32 min(W, 2 nblk)). Each x load serves 4 rows.
template <bool NS, int W, bool EB = false>
__global__ void __launch_bounds__(32 * W, 16 / W) mvk5_glu_kernel(mvk_glu_args a) {
    using block          = ember_block_q5_k;
    constexpr int  BYTES = sizeof(block);
    constexpr int  QS    = offsetof(block, qs);
    constexpr int  QH    = offsetof(block, qh);
    constexpr bool PIPE  = true;
    const int      lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int      p = wi & 1, wh = wi >> 1, nwh = nw >> 1;
    const int64_t  row0 = static_cast<int64_t>(blockIdx.x) * 32;
    const k4_lane  l    = k4_lane_of<2>(lane);
    const int64_t  off  = (row0 + 16 * p + lane / 4) * a.w_nb1;  // block 0 of this lane's first row
    const char *   gr   = a.gw + off;
    const char *   ur   = a.uw + off;
    const int64_t  rstep = 8 * a.w_nb1;
    uint4          q[4][2], qh[4][2];  // i = 2 m + tt: matrix m (0 gate, 1 up), row 8 (2 p + tt) + l / 4
    uint32_t       hw[4];              // word l.g of each row's block header
    const auto     load = [&](int b, int part) {  // part 1: the gate rows, 2: the up rows, 3: both
#pragma unroll
        for (int m = 0; m < 2; m++) {
            if (!(part >> m & 1)) continue;
#pragma unroll
            for (int tt = 0; tt < 2; tt++) {
                const char * blk = (m == 0 ? gr : ur) + tt * rstep + static_cast<int64_t>(b) * BYTES;
                q[2 * m + tt][0]  = __ldcs(reinterpret_cast<const uint4 *>(blk + QS + 32 * l.g));
                q[2 * m + tt][1]  = __ldcs(reinterpret_cast<const uint4 *>(blk + QS + 32 * l.g) + 1);
                qh[2 * m + tt][0] = __ldcs(reinterpret_cast<const uint4 *>(blk + QH));
                qh[2 * m + tt][1] = __ldcs(reinterpret_cast<const uint4 *>(blk + QH) + 1);
                hw[2 * m + tt]    = __ldg(reinterpret_cast<const uint32_t *>(blk) + l.g);
            }
        }
    };
    if (wh < a.nblk) load(wh, EB ? 3 : 1);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    if (!EB && wh < a.nblk) load(wh, 2);
    float  acc[8] = {};  // mvg_block_end's NT = 4 rows: gate t in acc[t], up t in acc[4 + t]
    int4   xlo[2], xhi[2];
    float4 ds;
    mvg_slices<PIPE>(
        wh, nwh, a.nblk, 0, 8 * a.nblk, load,
        [&](int c) { k4_glu_fetch_x(a, c / 8, l, xlo, xhi, ds); },
        [&](int m) {  // m = 0: the gate rows, 1: the up rows
#pragma unroll
            for (int tt = 0; tt < 2; tt++) {
                const float v = k5_chunk<2>(q[2 * m + tt], qh[2 * m + tt], k4_header_of(hw[2 * m + tt]), l, xlo, xhi, ds);
                if (p == 0) acc[4 * m + tt] += v;
                else acc[4 * m + 2 + tt] += v;
            }
        });
    mvg_block_end<W, NS, 4>(acc, a.out, a.ns, row0, lane, wi, nw);
}

// Word k of the 16 levels of group grp (0..3, compile-time once unrolled) of a 64-weight Q6_K
// unit, as 4 bytes 0..63: lo / hi are its ql words for weights + 0 / + 32 (low nibbles: groups 0
// and 1, high nibbles: 2 and 3), qh its top-bit word (bits 0-1, 2-3, 4-5, 6-7 for groups 0..3).
// mv6_kernel (GGUF layout) and mvp6_kernel (planar) decode the same units.
__device__ __forceinline__ uint32_t q6_unit_levels(int grp, uint32_t lo, uint32_t hi, uint32_t qh) {
    if (grp == 0) return (lo & 0x0f0f0f0fu) | ((qh << 4) & 0x30303030u);
    if (grp == 1) return (hi & 0x0f0f0f0fu) | ((qh << 2) & 0x30303030u);
    if (grp == 2) return ((lo >> 4) & 0x0f0f0f0fu) | (qh & 0x30303030u);
    return ((hi >> 4) & 0x0f0f0f0fu) | ((qh >> 2) & 0x30303030u);
}

// Q6_K in its GGUF layout: 210-byte blocks leave every field only 2-byte aligned, so 16-byte
// loads cannot pick a lane's quants out of global memory (mvq_kernel's 2-byte loads kept the
// 8B model's 431 MB output matrix near 0.5 TB/s, a quarter of a decode token). But a row of a
// multiple of 8 blocks (1680 bytes) starts 16-byte aligned: each warp copies its row into shared
// memory with coalesced 16-byte loads, k6_seg blocks at a time, the next segment's loads in
// flight while the current one is decoded from shared memory. A lane decodes units of 64
// weights: unit u of a block is half h = u / 2, group g = u % 2 of it, i.e. ql bytes
// 64 h + 16 g .. + 15 (low nibbles: weights 128 h + 16 g + i, high: + 64), ql bytes 32 further
// (weights + 32 and + 96), and qh bytes 32 h + 16 g .. + 15 (their top two bits, bits 0-1, 2-3,
// 4-5, 6-7 for the four groups of 16 weights), with scales 8 h + g + {0, 2, 4, 6}.
constexpr int k6_seg    = 16;                    // blocks per segment
constexpr int k6_seg_u4 = k6_seg * 210 / 16;     // its 16-byte chunks (210)
constexpr int k6_loads  = (k6_seg_u4 + 31) / 32;  // chunks per lane (7)

// 16 bytes at shared-memory offset off (2-byte aligned; odd: off % 4 == 2) as four words.
__device__ __forceinline__ void k6_read16(const unsigned char * s, int off, bool odd, uint32_t (&w)[4]) {
    const uint32_t * p = reinterpret_cast<const uint32_t *>(s + (off & ~3));
    if (!odd) {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = p[k];
        return;
    }
    uint32_t a[5];
#pragma unroll
    for (int k = 0; k < 5; k++) a[k] = p[k];
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = __funnelshift_r(a[k], a[k + 1], 16);
}

// KS = 4: rows longer than a segment (the FFN down product of Q4_K_M, 56 blocks) are shared by
// the 4 warps of a block, each taking whole 8-block groups (so its part starts 16-byte aligned),
// one segment each where the row allows; the parts meet in shared memory.
// RW (KS = 1): rows per warp, consecutive, their segments one stream (the next one's loads in
// flight while the current one is decoded, across rows too): a row of one segment (the output
// matrix: 2048 or 4096 weights) no longer waits for its loads with nothing else in flight.
template <int KS, int RW = 1>
__global__ void __launch_bounds__(32 * k_rp_warps) mv6_kernel(mvq_args a) {
    static_assert(KS == 1 || RW == 1, "mv6_kernel: rows per warp with KS = 1 only");
    __shared__ __align__(16) unsigned char seg[k_rp_warps][k6_seg_u4 * 16 + 16];
    const int     lane = threadIdx.x % 32, wi = threadIdx.x / 32;
    const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (k_rp_warps / KS) + wi / KS) * RW;
    if (KS == 1 && row0 >= a.n) return;  // warp-level synchronization only below
    const int     nrow = KS == 1 ? static_cast<int>(min(static_cast<int64_t>(RW), a.n - row0)) : 1;
    const int64_t row = row0 < a.n ? row0 : a.n - 1;  // KS > 1: rows past n read, not stored
    const int64_t col = blockIdx.y;
    const mvq_batch bp = mvq_batch_of(a, a.w);
    const int64_t   i2 = bp.i2, i3 = bp.i3;
    const char *    wb  = bp.w;
    const int8_t *  xq  = bp.xq;
    const float2 *  xds = bp.xds;
    const int      per  = KS == 1 ? static_cast<int>(a.nblk) : (static_cast<int>(a.nblk) / 8 + KS - 1) / KS * 8;  // blocks per part
    const int      b0   = (wi % KS) * per;  // this warp's first block of the row
    const int      nblk = max(0, min(static_cast<int>(a.nblk) - b0, per));
    const char *   src  = wb + row * a.w_nb1 + static_cast<int64_t>(b0) * 210;  // rows: a multiple of 16 bytes apart
    const int      nseg = (nblk + k6_seg - 1) / k6_seg;
    const int      nstep = nrow * nseg;  // (row, segment) in turn
    uint4          buf[k6_loads];
    const auto     load = [&](int t) {
        const int     sg = t % nseg;
        const int     n4 = min(k6_seg, nblk - sg * k6_seg) * 210 / 16;  // a multiple of 8 blocks: whole chunks
        const uint4 * p  = reinterpret_cast<const uint4 *>(src + (t / nseg) * a.w_nb1) + static_cast<int64_t>(sg) * k6_seg_u4;
#pragma unroll
        for (int k = 0; k < k6_loads; k++) {
            const int j = lane + 32 * k;
            buf[k]      = j < n4 ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
        }
    };
    if (nstep > 0) load(0);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    unsigned char * sm  = seg[wi];
    float           acc = 0.0f;
    float *         yc  = reinterpret_cast<float *>(a.y.data + col * a.y.nb[1] + i2 * a.y.nb[2] + i3 * a.y.nb[3]);
    if (KS == 1 && nstep == 0) {  // empty rows
        if (lane == 0) {
            for (int r = 0; r < nrow; r++) yc[row0 + r] = 0.0f;
        }
        return;
    }
    for (int t = 0; t < nstep; t++) {
        const int sg = t % nseg;
#pragma unroll
        for (int k = 0; k < k6_loads; k++) {
            const int j = lane + 32 * k;
            if (j < k6_seg_u4) reinterpret_cast<uint4 *>(sm)[j] = buf[k];
        }
        __syncwarp();
        if (t + 1 < nstep) load(t + 1);
        const int nb = min(k6_seg, nblk - sg * k6_seg);
        for (int u = lane; u < 4 * nb; u += 32) {
            const int  b = u >> 2, h = (u >> 1) & 1, g = u & 1;
            const int  base = 210 * b;
            const bool odd  = (b & 1) != 0;
            uint32_t   lo[4], hi[4], qh[4];
            k6_read16(sm, base + 64 * h + 16 * g, odd, lo);
            k6_read16(sm, base + 64 * h + 32 + 16 * g, odd, hi);
            k6_read16(sm, base + 128 + 32 * h + 16 * g, odd, qh);
            const int8_t * sc = reinterpret_cast<const int8_t *>(sm + base + 192 + 8 * h + g);
            const float    d  = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(sm + base + 208)));
            const int64_t  kb = b0 + static_cast<int64_t>(sg) * k6_seg + b;
            const int8_t * xb = xq + 256 * kb + 128 * h + 16 * g;
            const float2 * xd = xds + 8 * kb + 4 * h;
            float          part = 0.0f;
#pragma unroll
            for (int grp = 0; grp < 4; grp++) {
                const int4 xv   = __ldg(reinterpret_cast<const int4 *>(xb + 32 * grp));
                const int  xw[4] = {xv.x, xv.y, xv.z, xv.w};
                int        dot = 0, sx = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    dot = __dp4a(static_cast<int>(q6_unit_levels(grp, lo[k], hi[k], qh[k])), xw[k], dot);
                    sx  = __dp4a(0x01010101, xw[k], sx);
                }
                // quants are q - 32: the 32 x sum(x) of the 16 weights comes off
                part += static_cast<float>(sc[2 * grp]) * __ldg(&xd[grp].x) * static_cast<float>(dot - 32 * sx);
            }
            acc += d * part;
        }
        __syncwarp();
        if (KS == 1 && sg == nseg - 1) {  // the row's last segment
            const float sum = cu_warp_sum(acc);
            if (lane == 0) yc[row0 + t / nseg] = sum;
            acc = 0.0f;
        }
    }
    if constexpr (KS > 1) {
        acc = cu_warp_sum(acc);
        __shared__ float parts[k_rp_warps];
        if (lane == 0) parts[wi] = acc;
        __syncthreads();
        if (wi % KS == 0 && lane == 0 && row0 < a.n) {
            float sum = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++) sum += parts[wi + k];
            yc[row0] = sum;
        }
    }
}

// A lane's decode unit of a planar Q6_K segment (mvp6_kernel, mvp6_norm_kernel): lane = 4 b + 2 h
// + g is super-block b of the segment, half h, group g (64 weights): its low and high nibbles and
// its two-bit planes (three 16-byte loads), its 4 scales (one word) and the word of d it shares.
struct q6p_lane {
    int b, h, g;
};
__device__ __forceinline__ q6p_lane q6p_lane_of(int lane) {
    return {lane >> 2, (lane >> 1) & 1, lane & 1};
}
__device__ __forceinline__ void q6p_load_unit(const char * seg, const q6p_lane & l, int lane, uint4 & lo, uint4 & hi, uint4 & qh, uint32_t & sw,
                                              uint32_t & dw) {
    lo = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_ql + 128 * l.b + 64 * l.h + 16 * l.g));
    hi = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_ql + 128 * l.b + 64 * l.h + 32 + 16 * l.g));
    qh = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_qh + 64 * l.b + 32 * l.h + 16 * l.g));
    sw = __ldcs(reinterpret_cast<const unsigned int *>(seg + k_q6p_sc + 16 * l.b + 4 * (lane & 3)));
    dw = __ldcs(reinterpret_cast<const unsigned int *>(seg + k_q6p_d + 4 * (l.b >> 1)));
}
// The unit's x in segment s: its 4 groups' 16 bytes, their blocks' d and 32 times their sums.
struct q6p_x {
    int4  xv[4];
    float xs[4];
    int   x32[4];
};
__device__ __forceinline__ void q6p_load_x(const int8_t * xq, const float2 * xds, int s, const q6p_lane & l, q6p_x & x) {
    const int64_t  kb = 8 * static_cast<int64_t>(s) + l.b;  // super-block of the row
    const int8_t * xb = xq + 256 * kb + 128 * l.h + 16 * l.g;
    const float2 * xd = xds + 8 * kb + 4 * l.h;
#pragma unroll
    for (int grp = 0; grp < 4; grp++) {
        x.xv[grp]  = __ldg(reinterpret_cast<const int4 *>(xb + 32 * grp));
        x.xs[grp]  = __ldg(&xd[grp].x);
        x.x32[grp] = 32 * __dp4a(0x01010101, x.xv[grp].w, __dp4a(0x01010101, x.xv[grp].z, __dp4a(0x01010101, x.xv[grp].y, __dp4a(0x01010101, x.xv[grp].x, 0))));
    }
}
// The unit's product with x: d times the sum over its 4 groups of scale x d_x x (sum(q x) - 32 sum(x)).
__device__ __forceinline__ float q6p_unit_dot(const uint4 & lo, const uint4 & hi, const uint4 & qh, uint32_t sw, uint32_t dw, const q6p_x & x,
                                              const q6p_lane & l) {
    const uint32_t l4[4] = {lo.x, lo.y, lo.z, lo.w};
    const uint32_t h4[4] = {hi.x, hi.y, hi.z, hi.w};
    const uint32_t q4[4] = {qh.x, qh.y, qh.z, qh.w};
    float          pt    = 0.0f;
#pragma unroll
    for (int grp = 0; grp < 4; grp++) {
        const int xw[4] = {x.xv[grp].x, x.xv[grp].y, x.xv[grp].z, x.xv[grp].w};
        int       dot   = -x.x32[grp];
#pragma unroll
        for (int k = 0; k < 4; k++) dot = __dp4a(static_cast<int>(q6_unit_levels(grp, l4[k], h4[k], q4[k])), xw[k], dot);
        pt += static_cast<float>(static_cast<int8_t>(sw >> (8 * grp))) * x.xs[grp] * static_cast<float>(dot);
    }
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>((l.b & 1) ? dw >> 16 : dw & 0xffffu)));
    return d * pt;
}

// Q6_K weights in the planar layout (backends/common/q6k-planar.h, EMBER_TENSOR_FLAG_CUDA_REPACKED):
// every field a lane reads is aligned, so there is no shared-memory staging (mv6_kernel's). A
// warp takes one 2048-weight segment of RW consecutive rows. Lane u is one decode unit (super-
// block b = u / 4 of the segment, half h = (u / 2) % 2, group g = u % 2: 64 weights) and reads
// its low and high nibbles and its two-bit planes as three 16-byte loads, its 4 scales as one
// word (planar scale word 2h + g of the super-block) and d from the segment's d words. The
// unit's x is loaded once per segment and serves the RW rows. KS warps share a row (segments
// part, part + KS, ...; KS = the row's segments, up to 8), their sums meeting in shared memory.
// The first segment's weights are loaded before waiting for the kernel that makes x.
// The 6-bit levels q (0..63) go into the dot products as they are; each 16-weight group is
// corrected once: sum((q - 32) x) = sum(q x) - 32 sum(x).
constexpr int k_q6p_max_warps = 8;

// NS: x is a norm-in-product copy, the norm's scale still to apply (mvq_args ns). bi: the body's
// block (blockIdx.x; mvk_p6_kernel runs it on the last blocks of its grid).
// mvp6_rows: the RW rows from row0 by this warp, part `part` of ks (its slot wi of the block's
// shared sums when ks > 1: every warp of the block calls it then).
template <int RW, bool NS>
__device__ __forceinline__ void mvp6_rows(const mvq_args & a, int ks, int part, int wi, int64_t row0) {
    const int       lane = threadIdx.x % 32;
    const int       nseg = static_cast<int>(a.nblk / 8);
    const q6p_lane  l    = q6p_lane_of(lane);
    const mvq_batch bp = mvq_batch_of(a, a.w);
    const char *    wr[RW];
#pragma unroll
    for (int r = 0; r < RW; r++) wr[r] = bp.w + min(row0 + r, a.n - 1) * a.w_nb1;  // past the last row: read, not stored
    uint4      lo[RW], hi[RW], qh[RW];
    uint32_t   sw[RW], dw[RW];
    // (q6p_load_unit's loads written out: through it the compiler scheduled this kernel differently,
    // scripts/cubin-diff.sh. So RW = 4 and 1 keep the machine code that was measured; RW = 2, only
    // at EMBER_CUDA_Q6P_ROWS=2, came out rescheduled by q6p_load_x / q6p_unit_dot, the same size
    // and arithmetic.)
    const auto load = [&](int s) {
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const char * seg = wr[r] + static_cast<int64_t>(s) * static_cast<int64_t>(k_q6p_seg_bytes);
            lo[r]            = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_ql + 128 * l.b + 64 * l.h + 16 * l.g));
            hi[r]            = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_ql + 128 * l.b + 64 * l.h + 32 + 16 * l.g));
            qh[r]            = __ldcs(reinterpret_cast<const uint4 *>(seg + k_q6p_qh + 64 * l.b + 32 * l.h + 16 * l.g));
            sw[r]            = __ldcs(reinterpret_cast<const unsigned int *>(seg + k_q6p_sc + 16 * l.b + 4 * (lane & 3)));
            dw[r]            = __ldcs(reinterpret_cast<const unsigned int *>(seg + k_q6p_d + 4 * (l.b >> 1)));
        }
    };
    if (part < nseg) load(part);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float acc[RW] = {};
    for (int s = part; s < nseg; s += ks) {
        q6p_x x;
        q6p_load_x(bp.xq, bp.xds, s, l, x);
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] += q6p_unit_dot(lo[r], hi[r], qh[r], sw[r], dw[r], x, l);
        if (s + ks < nseg) load(s + ks);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) acc[r] = cu_warp_sum(acc[r]);
    if constexpr (NS) {
        const float sc = mv_norm_scale(a.ns, lane);
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] *= sc;
    }
    if (ks > 1) {  // (uniform) every warp gets here
        __shared__ float parts[k_q6p_max_warps][RW];
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RW; r++) parts[wi][r] = acc[r];
        }
        __syncthreads();
        if (part == 0) {
#pragma unroll
            for (int r = 0; r < RW; r++) {
                float t = 0.0f;
                for (int p = 0; p < ks; p++) t += parts[wi + p][r];
                acc[r] = t;
            }
        }
    }
    if (lane == 0 && part == 0) {
        if (a.grp.has_epi) {  // a unit (2-D, one column): the rows into their KV cache row too (V: no RoPE)
            int64_t rows[RW];
#pragma unroll
            for (int r = 0; r < RW; r++) rows[r] = row0 + r;
            mv_store_epi<RW>(a.grp.epi[0], a.y.data, a.y.nb[1], a.n, blockIdx.y, rows, acc, a.err);
            return;
        }
        float * yc = reinterpret_cast<float *>(a.y.data + blockIdx.y * a.y.nb[1] + bp.i2 * a.y.nb[2] + bp.i3 * a.y.nb[3]);
#pragma unroll
        for (int r = 0; r < RW; r++) {
            if (row0 + r < a.n) yc[row0 + r] = acc[r];
        }
    }
}
template <int RW, bool NS>
__device__ __forceinline__ void mvp6_body(const mvq_args & a, int ks, unsigned bi) {
    const int wi = threadIdx.x / 32, nw = blockDim.x / 32;
    mvp6_rows<RW, NS>(a, ks, wi % ks, wi, (static_cast<int64_t>(bi) * (nw / ks) + wi / ks) * RW);
}
template <int RW, bool NS = false>
__global__ void __launch_bounds__(32 * k_q6p_max_warps) mvp6_kernel(mvq_args a, int ks) {
    mvp6_body<RW, NS>(a, ks, blockIdx.x);
}

// Q4_K_M's Q / K / V units of a layer whose V is planar Q6_K (half the layers), in one launch
// instead of two (EMBER_CUDA_MV_K4P6=0: not): blocks [0, nb4) are mvk_kernel's (R = 2, U = 1,
// QW = 2) over the Q4_K group a4, the rest mvp6_kernel's (RW = 4) over V's a6, with ks warps a
// row; 4 warps a block for both. 128 registers (mvp6's), so 4 blocks an SM: the launcher takes it
// where the grid fits one wave (the 1B shape, where the two launches cost Q/K 4.2 + V 3.3 us a
// layer against 4.4 for an all-Q4_K layer's one).
// Q5: the units are Q5_K's (Q5_K_M's layers with V in Q6_K; EMBER_CUDA_MV_K4P6_Q5K).
template <bool NS, bool Q5 = false>
__global__ void __launch_bounds__(32 * k_rp_warps) mvk_p6_kernel(mvq_args a4, mvq_args a6, int ks, unsigned nb4) {
    if (blockIdx.x < nb4) mvk_body<2, 1, 2, NS, Q5>(a4, 0);
    else mvp6_body<4, NS>(a6, ks, blockIdx.x - nb4);
}

// V's row `row` by one warp when its rows are two segments (the 8B shape's): both segments'
// loads before any arithmetic (one memory round trip a row, not two), then mvp6_rows' sums at
// RW = 1, KS = 1 in its order (the same bits).
template <bool NS>
__device__ __forceinline__ void mvp6_row_seg2(const mvq_args & a, int64_t row) {
    const int       lane = threadIdx.x % 32;
    const q6p_lane  l    = q6p_lane_of(lane);
    const mvq_batch bp   = mvq_batch_of(a, a.w);
    const char *    wr   = bp.w + row * a.w_nb1;
    uint4           lo[2], hi[2], qh[2];
    uint32_t        sw[2], dw[2];
#pragma unroll
    for (int s = 0; s < 2; s++) q6p_load_unit(wr + s * static_cast<int64_t>(k_q6p_seg_bytes), l, lane, lo[s], hi[s], qh[s], sw[s], dw[s]);
    cu_pdl_begin();
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < 2; s++) {
        q6p_x x;
        q6p_load_x(bp.xq, bp.xds, s, l, x);
        acc += q6p_unit_dot(lo[s], hi[s], qh[s], sw[s], dw[s], x, l);
    }
    acc = cu_warp_sum(acc);
    if constexpr (NS) acc *= mv_norm_scale(a.ns, lane);
    if (lane == 0) {
        const int64_t rows[1] = {row};
        float         v[1]    = {acc};
        mv_store_epi<1>(a.grp.epi[0], a.y.data, a.y.nb[1], a.n, blockIdx.y, rows, v, a.err);
    }
}

// The same units where that grid is over one wave (the 8B shape: Q / K's 640 blocks and V's 128
// at 128 registers against 4 an SM): mvk_kernel's capped launch as it is (R = 2, U = 1, QW = 2:
// 80 registers, 6 blocks an SM) on its last nb4 blocks, and V's rows on the places of that wave
// left, nbv blocks of 4 warps first in the grid (placed first: their chains of one or two rows
// start first; last in the grid, 8B Q4_K_M 613.9 against 618.0, the launch 8.61 us a layer in
// the trace against 7.91): V warp w takes rows w, w + 4 nbv, ..., each alone, all its segments
// (mvp6_rows at RW = 1, KS = 1: 63 registers; SEG2: rows of two segments, mvp6_row_seg2). (V's
// rows by a fifth warp of each block spilled ~150 bytes: 25 warps an SM leave 72 registers a
// thread; after a warp's Q4_K rows ~90.) PF: a V warp's rows after its first requested into L2
// before the PDL wait (a bulk prefetch each; weights only). H200 tg128 8B Q4_K_M, one build, two
// runs a side, against the two launches (Q / K 6.14 + V 3.97 us a layer in the trace): 603.9 ->
// 610.2 (mvp6_rows, 9.32 us; its prefetch 609.6); in a later call 599.1 -> 606.9 (SEG2, 8.96 us)
// -> 608.5 (SEG2 and PF, 8.64 us: the default). (The Q / K rows' second step requested into L2
// the same way, mvk_body PF2, lost: 617.6 -> 614.0, session 51.)
// (Not for Q5_K's units: mvk_body Q5 spills 108-124 bytes at this launch's 80-register cap.)
template <bool NS, bool SEG2, bool PF>
__global__ void __launch_bounds__(32 * k_rp_warps, k_mv_pair_blocks)
    mvk_v6_kernel(const __grid_constant__ mvq_args a4, const __grid_constant__ mvq_args a6, unsigned nb4) {
    const unsigned nbv = gridDim.x - nb4;
    if (blockIdx.x >= nbv) {
        mvk_body<2, 1, 2, NS>(a4, nbv);
        return;
    }
    const int64_t nvw = static_cast<int64_t>(nbv) * k_rp_warps;
    const int64_t w   = static_cast<int64_t>(blockIdx.x) * k_rp_warps + threadIdx.x / 32;
    if constexpr (PF) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        const int64_t  row   = w + nvw * (1 + threadIdx.x % 32);
        const unsigned bytes = static_cast<unsigned>(a6.nblk / 8 * k_q6p_seg_bytes);
        if (row < a6.n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a6.w + row * a6.w_nb1), "r"(bytes) : "memory");
#endif
    }
    for (int64_t row = w; row < a6.n; row += nvw) {
        if constexpr (SEG2) mvp6_row_seg2<NS>(a6, row);
        else mvp6_rows<1, NS>(a6, 1, 0, 0, row);
    }
}

// The decode norm in the product before it for planar Q6_K weights (EMBER_CUDA_MV_NORM_Q6K=0:
// not; Q4_K_M's Q6_K down products, whose norms otherwise keep their own launch):
// mvr_norm_kernel's contract, mvp6_kernel's decode. A block owns 32 whole
// rows in 8 groups of 4; warp w takes row group w % 8 and segments w / 8, w / 8 + W / 8, ... (W = 8
// or 16: whole row groups a warp), each lane one decode unit of the 4 rows (mvp6_kernel RW = 4);
// the next segment's loads follow the current one's arithmetic. Each warp's 4 row sums go to
// the lanes of those rows, so the block's end is mvn_block_end with one row a lane.
struct mvp6_norm_args {
    const char *   w;  // planar Q6_K rows, w_nb1 bytes apart
    int64_t        w_nb1;
    int            nseg;  // 2048-weight segments a row
    const int8_t * xq;
    const float2 * xds;
    mvn_out        out;
};

__global__ void __launch_bounds__(32 * 16, 1) mvp6_norm_kernel(mvp6_norm_args a) {
    constexpr int  RW   = 4;
    const int      lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int      rg = wi % 8, sstep = nw / 8;  // nw: 8 or 16
    const int64_t  row0 = static_cast<int64_t>(blockIdx.x) * k_mvn_rows;
    const q6p_lane l    = q6p_lane_of(lane);
    const char *   wr   = a.w + (row0 + RW * rg) * a.w_nb1;
    uint4          lo[RW], hi[RW], qh[RW];
    uint32_t       sw[RW], dw[RW];
    const auto     load = [&](int s) {
#pragma unroll
        for (int r = 0; r < RW; r++) {
            q6p_load_unit(wr + r * a.w_nb1 + static_cast<int64_t>(s) * static_cast<int64_t>(k_q6p_seg_bytes), l, lane, lo[r], hi[r], qh[r], sw[r], dw[r]);
        }
    };
    const int s0 = wi / 8;
    if (s0 < a.nseg) load(s0);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float acc[RW] = {};
    for (int s = s0; s < a.nseg; s += sstep) {
        q6p_x x;
        q6p_load_x(a.xq, a.xds, s, l, x);
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] += q6p_unit_dot(lo[r], hi[r], qh[r], sw[r], dw[r], x, l);
        if (s + sstep < a.nseg) load(s + sstep);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) acc[r] = cu_warp_sum(acc[r]);
    // lane l holds row l's part of this warp: its sum where row l is in the warp's group, else 0
    const int   rl     = lane - RW * rg;
    const float mine[1] = {rl == 0 ? acc[0] : rl == 1 ? acc[1] : rl == 2 ? acc[2] : rl == 3 ? acc[3] : 0.0f};
    mvn_block_end<1>(mine, a.out, row0, lane, wi, nw);
}

// The scales of a Q4_0/Q8_0 weight in the CUDA layout (cuda-repack.h): after all rows' quants.
const unsigned short * rp_scales(const ember_tensor * w) {
    return reinterpret_cast<const unsigned short *>(static_cast<const char *>(w->data) +
                                                    ember_nrows(w) * (w->ne[0] / 32) * ember_cuda_repack_qbytes(w->type));
}

// Fills the group part of a launch over dsts[0 .. nd) (nd > 1: 2-D weights of one type, the
// same x; or units with epilogues) for `per_block` rows per block; returns grid.x.
inline unsigned mv_group_fill(mv_group & g, ember_tensor * const * dsts, int nd, int per_block, bool rp, const ember_cuda_mv_unit * units) {
    g.nmat      = nd;
    g.has_epi   = units != nullptr;
    unsigned bx = 0;
    for (int m = 0; m < nd; m++) {
        if (units) {
            g.epi[m]     = mv_epi_of(units[m]);
            g.neox_hd[m] = g.epi[m].rope == EMBER_ROPE_NEOX ? g.epi[m].hd : 0;
        }
        const ember_tensor * w = dsts[m]->src[0];
        g.blk0[m]              = static_cast<int>(bx);
        g.w[m]                 = w->data;
        if (rp) g.wd[m] = rp_scales(w);
        g.n[m]     = w->ne[1];
        g.y[m]     = static_cast<char *>(dsts[m]->data);
        g.y_nb1[m] = static_cast<int64_t>(dsts[m]->nb[1]);
        bx += cu_blocks(w->ne[1], per_block);
    }
    g.blk0[nd] = static_cast<int>(bx);
    return bx;
}

// EMBER_CUDA_MV_PIPE=0: no second register buffer for Q4_0 rows longer than one step
// (mvr_kernel P). Q8_0 runs without it: H200 8B tg128 Q4_0 329 -> 343 t/s with it, Q8_0
// 257 -> 244 (one call).
bool mv_pipe() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_PIPE");
    return on;
}

// EMBER_CUDA_MV_SPLIT=0: long rows on one warp each (mvr_kernel, P for Q4_0) instead of
// mvr_split_kernel.
bool mv_split() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_SPLIT");
    return on;
}

// Rows of at most 64 chunks (2 a lane; the 1B shape's Q4_0 products from 2048 wide) in the CUDA
// layout: two rows a warp with U = 2 instead of one row with U = 4, of whose load slots two stay
// empty. Twice the weight bytes in flight per warp, x and the warp's prologue shared by two rows;
// capped at 64 registers (k_mv_short_blocks blocks an SM; 78 uncapped). H200 tg128 1B Q4_0 1819
// -> 1892 (uncapped 1852); the gate/up launch 8.0 -> 6.3 us in the trace. EMBER_CUDA_MV_SHORT=0:
// the rule of mv_rows_per_warp for them too. (Two rows a warp only in launches of more than one
// wave, keeping the 1B O product at one row: 1B Q4_0 1892 -> 1825, 1B Q4_K_M 1688 -> 1667;
// session 29, dropped.)
constexpr int k_mv_short_blocks = 8;
bool mv_short_rows() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_SHORT");
    return on;
}
// Whether a matvec launch over dsts (one or a group of matrices, every column of x) at one row a
// warp (k_rp_warps rows a block) fits one wave of `per_sm` blocks an SM.
bool mv_one_wave(const ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, int per_sm) {
    const ember_tensor * x    = dsts[0]->src[1];
    int64_t              rows = 0;
    for (int m = 0; m < nd; m++) rows += dsts[m]->src[0]->ne[1];
    return static_cast<int64_t>(cu_blocks(rows, k_rp_warps)) * x->ne[1] * x->ne[2] * x->ne[3] <=
           static_cast<int64_t>(per_sm) * cu_sm_count(ctx.device);
}

// The short-row rule (mv_short_rows) for a launch of rows of nchunk chunks (Q4_0 / Q8_0 / Q4_K).
bool mv_short_launch(int64_t nchunk) {
    return nchunk <= 32 * 2 && mv_short_rows();
}

// Rows per warp: 2 when a fused RoPE pairs them. Otherwise 1 for the CUDA layout (Q4_0/Q8_0):
// more warps, and more loads in flight, beat two rows sharing their x loads (H200 tg128: 8B Q4_0
// 334 -> 339, 1B 1020 -> 1042); but 2 from 4096 rows for Q4_K (8B Q4_K_M 248 -> 270: its block
// headers are shared by the pair). EMBER_CUDA_MV_PAIR=1: the Q4_K rule for every type.
inline int mv_rows_per_warp(ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units) {
    for (int m = 0; units && m < nd; m++) {
        if (units[m].rope) return 2;
    }
    static const bool pair = [] {
        const char * e = std::getenv("EMBER_CUDA_MV_PAIR");
        return e && std::strcmp(e, "1") == 0;
    }();
    if (!pair && (dsts[0]->src[0]->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED)) return 1;
    int64_t n = 0;
    for (int m = 0; m < nd; m++) n = std::max<int64_t>(n, dsts[m]->src[0]->ne[1]);
    return n >= 4096 ? 2 : 1;
}

// Where mvr_stream_kernel runs: by default the launches of one or two rows a warp of 2048 weights
// (the 1B shape's gate/up and O products; one column, no epilogue, scale rows 16-byte aligned,
// sm_80+) with 2 stages. H200 tg128 (EMBER_CUDA_MV_STREAM=2 against =0, one build): 1B Q4_0
// 1970.2 / 1971.0 -> 2024.0 / 2026.5 (+2.8%), 1B Q8_0 1479.9 -> 1577.3 (+6.6%); 4 stages 1963.1 /
// 1967.7, 3 blocks an SM 2008.4 (1B Q4_0). The same bits as mvr_kernel ("[cuda] the streaming
// matvec", run on the H200). EMBER_CUDA_MV_STREAM=0: never; =2 or 4: also rows of 4096 weights
// with that many stages (8B Q4_0 588.5 -> 534.7 / 579.9: slower than mvr_kernel's 7168 blocks
// there). EMBER_CUDA_MV_STREAM_BPS=b (1-4, default 2): its blocks an SM. Read at every call
// (tests switch it).
constexpr bool k_mvs_default = true;
template <int T, int U, int S, bool NS> bool mvs_launch_s(ember_cuda_ctx & ctx, const mvr_args & a, int items, int rpb) {
    const int    stage = 32 * U * 16 + a.nb * 2;
    const size_t smem  = static_cast<size_t>(k_mvs_warps) * S * stage;
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(mvr_stream_kernel<T, U, S, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const int      bps    = ember_cuda_env_choice("EMBER_CUDA_MV_STREAM_BPS", 2, {1, 2, 3, 4});
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((items + k_mvs_warps - 1) / k_mvs_warps, int64_t{bps} * cu_sm_count(ctx.device)));
    cu_launch(ctx, mvr_stream_kernel<T, U, S, NS>, blocks, 32 * k_mvs_warps, smem, a, items, stage, rpb == 8 ? 3 : 2);
    return true;
}
template <int T, int U, bool NS> bool mvs_launch_u(ember_cuda_ctx & ctx, const mvr_args & a, int s, int items, int rpb) {
    return s == 2 ? mvs_launch_s<T, U, 2, NS>(ctx, a, items, rpb) : mvs_launch_s<T, U, 4, NS>(ctx, a, items, rpb);
}
// rpb: rows of one of the grid's blocks (the group's blocks: mv_group_fill's per_block)
template <int T, bool NS> bool mvs_launch(ember_cuda_ctx & ctx, const dim3 & grid, const mvr_args & a, int rpb) {
    // rows of 2048 or 4096 weights (Q4_0: 64 / 128 chunks; Q8_0: 128 / 256)
    constexpr int U0 = T == EMBER_TYPE_Q4_0 ? 2 : 4;
    int           s  = ember_cuda_env_choice("EMBER_CUDA_MV_STREAM", -1, {-1, 0, 2, 4});
    if (s < 0) s = k_mvs_default && a.nchunk == 32 * U0 ? 2 : 0;  // the default: rows of 2048 weights only
    if (s == 0 || ctx.cc_major < 8 || grid.y != 1 || grid.z != 1 || (a.nchunk != 32 * U0 && a.nchunk != 64 * U0) || (a.nb * 2) % 16 != 0 ||
        (rpb != 4 && rpb != 8)) {
        return false;
    }
    if (a.grouped) {
        if (a.grp.has_epi) return false;
        for (int m = 0; m < a.grp.nmat; m++) {
            if (reinterpret_cast<uintptr_t>(a.grp.wd[m]) % 16 != 0) return false;
        }
    } else if (reinterpret_cast<uintptr_t>(a.wd) % 16 != 0) {
        return false;
    }
    const int items = static_cast<int>(grid.x) * rpb;
    return a.nchunk == 32 * U0 ? mvs_launch_u<T, U0, NS>(ctx, a, s, items, rpb) : mvs_launch_u<T, 2 * U0, NS>(ctx, a, s, items, rpb);
}

// Q4_0 units 4096 wide through mvr_halves_kernel (every weight requested before the PDL wait,
// without mvr_kernel<Q4_0, 2, 4>'s 64-byte spill; EMBER_CUDA_MV_Q4_HALVES=0: that kernel). H200
// tg128 8B Q4_0 664.5 -> 677.0 (session 56). Read at every launch (the tests run both forms in one
// process). (Its Q4_K form, EMBER_CUDA_MV_K4_HALVES, lost: 8B Q4_K_M 0.982; removed.)
bool mv_q4_halves() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_Q4_HALVES", 1, {0, 1}) == 1;
}
std::atomic<long long> mv_halves_launches{0};  // (ember_cuda_mv_halves_launches)

// The launch of mvr_kernel's NS form (x is mvr_norm_kernel's copy): the same rows per warp as
// below, never the split or pipelined kernels.
template <int T>
void launch_rp_ns(ember_cuda_ctx & ctx, const dim3 & grid, const mvr_args & a, bool short_rows, int r) {
    if ((short_rows || r == 1) && mvs_launch<T, true>(ctx, grid, a, k_rp_warps * r)) return;
    if (short_rows) {
        cu_launch(ctx, mvr_kernel<T, 2, 2, false, k_mv_short_blocks, true>, grid, 32 * k_rp_warps, 0, a);
    } else if (r == 2) {
        if (mvr_pair_capped(ctx, grid)) {
            cu_launch(ctx, mvr_kernel<T, 2, 4, false, k_mv_pair_blocks, true>, grid, 32 * k_rp_warps, 0, a);
        } else {
            cu_launch(ctx, mvr_kernel<T, 2, 4, false, 0, true>, grid, 32 * k_rp_warps, 0, a);
        }
    } else {
        cu_launch(ctx, mvr_kernel<T, 1, 4, false, 0, true>, grid, 32 * k_rp_warps, 0, a);
    }
}

template <int T>
ember_status launch_rp(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units, const int8_t * xq,
                       const float2 * xds, bool ns) {
    ember_tensor *       dst = dsts[0];
    const ember_tensor * w   = dst->src[0];
    const ember_tensor * x   = dst->src[1];
    const int            qb  = ember_cuda_repack_qbytes(w->type);
    const int64_t        nb  = w->ne[0] / 32;
    mvr_args             a;
    a.wq      = static_cast<const uint4 *>(w->data);
    a.wd      = rp_scales(w);
    a.n       = w->ne[1];
    a.w_ne2   = w->ne[2];
    a.bcast2  = x->ne[2] / w->ne[2];
    a.bcast3  = x->ne[3] / w->ne[3];
    a.xq      = xq;
    a.xds     = xds;
    a.x_ne1   = x->ne[1];
    a.x_ne2   = x->ne[2];
    a.y       = cu_desc(dst);
    a.nchunk  = static_cast<int>(nb * qb / 16);
    a.nb      = static_cast<int>(nb);
    a.grouped = nd > 1 || units;
    a.err     = ctx.d_error;
    // Short rows (at most 2 chunks a lane: the 1B shape's 2048 Q4_0 weights are 64 chunks): two
    // rows a warp, U = 2 (no dead load slots), capped at 64 registers for 8 blocks an SM.
    const bool     short_rows = mv_short_launch(a.nchunk);
    const int      r          = short_rows ? 2 : mv_rows_per_warp(dsts, nd, units);
    const unsigned bx = a.grouped ? mv_group_fill(a.grp, dsts, nd, k_rp_warps * r, true, units) : cu_blocks(a.n, k_rp_warps * r);
    const dim3     grid(bx, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
    constexpr bool pipe_type = T == EMBER_TYPE_Q4_0;  // the P kernel only where it measured faster
    if constexpr (T == EMBER_TYPE_Q4_0) {
        if (units && r == 2 && !short_rows && a.nchunk == 128 && grid.y * grid.z == 1 && mv_q4_halves()) {
            if (ns) {
                a.ns = ctx.qx_norm;
                cu_launch(ctx, mvr_halves_kernel<true>, grid, 32 * k_rp_warps, 0, a);
            } else {
                cu_launch(ctx, mvr_halves_kernel<false>, grid, 32 * k_rp_warps, 0, a);
            }
            mv_halves_launches.fetch_add(1, std::memory_order_relaxed);
            return ember_cuda_check_launch("mul_mat (matvec q4_0 units in halves)");
        }
    }
    if (ns) {
        a.ns = ctx.qx_norm;
        launch_rp_ns<T>(ctx, grid, a, short_rows, r);
    } else if ((short_rows || r == 1) && mvs_launch<T, false>(ctx, grid, a, k_rp_warps * r)) {
        // mvr_stream_kernel (mvs_launch: by default rows 2048 wide)
    } else if (short_rows) {
        cu_launch(ctx, mvr_kernel<T, 2, 2, false, k_mv_short_blocks>, grid, 32 * k_rp_warps, 0, a);
    } else if (r == 1 && !a.grouped && a.nchunk > 32 * 4 && mv_split()) {
        // one step per warp where the row allows: 2 warps per row up to 256 chunks, else 4
        const int  ks = a.nchunk > 2 * 32 * 4 ? 4 : 2;
        const dim3 gs(cu_blocks(a.n, k_rp_warps / ks), grid.y, grid.z);
        if (ks == 4) cu_launch(ctx, mvr_split_kernel<T, 4>, gs, 32 * k_rp_warps, 0, a);
        else cu_launch(ctx, mvr_split_kernel<T, 2>, gs, 32 * k_rp_warps, 0, a);
    } else if (r == 2) {
        if (mvr_pair_capped(ctx, grid)) {
            cu_launch(ctx, mvr_kernel<T, 2, 4, false, k_mv_pair_blocks>, grid, 32 * k_rp_warps, 0, a);
        } else {
            cu_launch(ctx, mvr_kernel<T, 2, 4, false>, grid, 32 * k_rp_warps, 0, a);
        }
    } else if (pipe_type && a.nchunk > 32 * 4 && mv_pipe()) {
        cu_launch(ctx, mvr_kernel<T, 1, 4, pipe_type>, grid, 32 * k_rp_warps, 0, a);
    } else {
        cu_launch(ctx, mvr_kernel<T, 1, 4, false>, grid, 32 * k_rp_warps, 0, a);
    }
    return ember_cuda_check_launch("mul_mat (matvec q, cuda layout)");
}

// Rows per block: EMBER_CUDA_MV_ROWS (1, 2 or 4) for experiments, else 4 (on an H100, 4 rows
// beat 2 by 3% on the 8B shape and 7% on the 1B one, and 1 row lost 5-15%).
int rows_per_block() {
    static const int r = ember_cuda_env_choice("EMBER_CUDA_MV_ROWS", 4, {1, 2, 4});
    return r;
}

// EMBER_CUDA_Q4K_WIDE=0: Q4_K through mvq_kernel (2-byte-word loads) instead of mvk_kernel.
const bool k_q4k_wide = ember_cuda_env_on("EMBER_CUDA_Q4K_WIDE");
// EMBER_CUDA_Q5K_WIDE: 1 (default) Q5_K through mvk_kernel Q5 (16-byte loads of qs, qh and the
// header, Q4_K's lanes; also in groups, Q / K / V units and as a reader of the norm-in-product
// copy); 0: mvq_kernel (4-byte loads), alone. H200 tg128 (session 66, one build, two runs a side,
// alone in both): 1B Q5_K_M 1196.9 -> 1412.9, 8B 263.6 -> 387.2. Read at every call (tests switch it).
bool q5k_wide() {
    return ember_cuda_env_choice("EMBER_CUDA_Q5K_WIDE", 1, {0, 1}) == 1;
}

// EMBER_CUDA_IQ4XS_WIDE: 1 (default) IQ4_XS through mvk_kernel XS (Q4_K's lanes and host paths:
// groups, Q / K / V units, the norm-in-product copy; its 136-byte blocks 8-byte aligned: 8-byte
// loads); 0 mvq_kernel (4-byte loads, alone). H200 tg128 1B IQ4_XS 1741.3 against 1375.4, 8B 507.3
// against 350.9 (session 67). Read at every call (tests switch it).
bool iq4xs_wide() {
    return ember_cuda_env_choice("EMBER_CUDA_IQ4XS_WIDE", 1, {0, 1}) == 1;
}

template <int T> bool aligned_for(const ember_tensor * w) {
    const uintptr_t m = mvq<T>::ALIGN - 1;
    return (reinterpret_cast<uintptr_t>(w->data) & m) == 0 && (w->nb[1] & m) == 0 && (w->nb[2] & m) == 0 && (w->nb[3] & m) == 0;
}

// EMBER_CUDA_Q6K_WIDE=0: Q6_K through mvq_kernel instead of mv6_kernel.
const bool k_q6k_wide = ember_cuda_env_on("EMBER_CUDA_Q6K_WIDE");

// mv6_kernel's rows per warp for rows of at most one segment (EMBER_CUDA_Q6K_ROWS=1|2|4).
int q6k_rows_per_warp() {
    static const int rw = ember_cuda_env_choice("EMBER_CUDA_Q6K_ROWS", 2, {1, 2, 4});
    return rw;
}

// mvp6_kernel's rows per warp (EMBER_CUDA_Q6P_ROWS=1|2|4).
int q6p_rows_per_warp() {
    static const int rw = ember_cuda_env_choice("EMBER_CUDA_Q6P_ROWS", 4, {1, 2, 4});
    return rw;
}

// Q4_K decode chunks of 32 bytes of qs a lane (mvk_kernel QW = 2; EMBER_CUDA_Q4K_WIDE=0: 16, the
// form before). Read at every launch, not once: the tests run both forms in one process (a
// replayed graph does not come here).
bool q4k_wide() {
    return ember_cuda_env_on("EMBER_CUDA_Q4K_WIDE");
}

// Q6_K weights whose rows start 16-byte aligned (a multiple of 8 blocks): mv6_kernel.
// Every row of w starts 16-byte aligned (16-byte loads of whole rows).
// Whether w's data and row / matrix strides are multiples of `bytes` (a power of two).
bool rows_aligned(const ember_tensor * w, uintptr_t bytes) {
    return ((reinterpret_cast<uintptr_t>(w->data) | w->nb[1] | w->nb[2] | w->nb[3]) & (bytes - 1)) == 0;
}
bool rows_aligned16(const ember_tensor * w) {
    return rows_aligned(w, 16);
}

bool q6k_wide_ok(const ember_tensor * w) {
    return k_q6k_wide && w->type == EMBER_TYPE_Q6_K && w->ne[0] % 256 == 0 && rows_aligned16(w);
}

// Q4_0 / Q8_0 weights in the CUDA layout: the kernels with groups and epilogues (mvr_kernel).
bool rp_q4q8(const ember_tensor * w) {
    return (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) && (w->type == EMBER_TYPE_Q4_0 || w->type == EMBER_TYPE_Q8_0);
}

// Q4_K rows of one U = 4 step (65-128 16-byte chunks: 4096 weights) one a warp when the launch
// fits one wave at that (mvk_kernel<1, 4> / wide <1, 2, 8, 2>: 64 / 62 registers, k_q4k_one_blocks
// blocks an SM): each warp waits for one step of loads instead of two (two rows, U = 2). The 8B
// shape's O product (1024 blocks): 4.2 -> 3.3 us on the critical path, H200 tg128 8B Q4_K_M
// 465.8 -> 468.1 / 467.7. Not for
// launches of several waves: the gate/up product (7168 blocks) took 20.8 -> 22.1 us that way.
// EMBER_CUDA_Q4K_ONE=0: two rows a warp for them too.
constexpr int k_q4k_one_blocks = 8;
bool q4k_one_step() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_Q4K_ONE");
    return on;
}

// Q4_K weights whose rows are 16-byte aligned: mvk_kernel.
bool q4k_wide_ok(const ember_tensor * w) {
    return k_q4k_wide && w->type == EMBER_TYPE_Q4_K && rows_aligned16(w);
}
bool q5k_wide_ok(const ember_tensor * w) {
    return w->type == EMBER_TYPE_Q5_K && rows_aligned16(w) && q5k_wide();
}
bool iq4xs_wide_ok(const ember_tensor * w) {
    return w->type == EMBER_TYPE_IQ4_XS && rows_aligned(w, 8) && iq4xs_wide();
}
// The types Q4_K's kernels take besides Q4_K (mvk_kernel Q5 / XS, mvk_norm_kernel): groups of
// one type, units, the norm-in-product copy, as Q4_K's wide form.
bool mvk_other_ok(const ember_tensor * w) {
    return q5k_wide_ok(w) || iq4xs_wide_ok(w);
}

// The launch arguments of the matvec dst (its weight's blocks of qk weights) over x's copy.
mvq_args mvq_args_of(const ember_cuda_ctx & ctx, ember_tensor * dst, int64_t qk, const int8_t * xq, const float2 * xds) {
    const ember_tensor * w = dst->src[0];
    const ember_tensor * x = dst->src[1];
    mvq_args             a;
    a.w      = static_cast<const char *>(w->data);
    a.w_nb1  = static_cast<int64_t>(w->nb[1]);
    a.w_nb2  = static_cast<int64_t>(w->nb[2]);
    a.w_nb3  = static_cast<int64_t>(w->nb[3]);
    a.bcast2 = x->ne[2] / w->ne[2];
    a.bcast3 = x->ne[3] / w->ne[3];
    a.xq     = xq;
    a.xds    = xds;
    a.x_ne1  = x->ne[1];
    a.x_ne2  = x->ne[2];
    a.y      = cu_desc(dst);
    a.k      = w->ne[0];
    a.n      = w->ne[1];
    a.nblk   = w->ne[0] / qk;
    a.err    = ctx.d_error;
    return a;
}

// ns: x is a norm-in-product copy (ctx.qx_ns): only the NS forms of mvk_kernel (wide) and
// mvp6_kernel read it.
template <int T>
ember_status launch(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units, const int8_t * xq,
                    const float2 * xds, bool ns) {
    ember_tensor *       dst = dsts[0];
    const ember_tensor * w   = dst->src[0];
    const ember_tensor * x   = dst->src[1];
    mvq_args             a   = mvq_args_of(ctx, dst, mvq<T>::QK, xq, xds);
    a.grouped = nd > 1 || units;  // only mvk_kernel takes groups and epilogues (ember_cuda_mul_mat_vec_q_can_group)
    if constexpr (T == EMBER_TYPE_Q4_K) {
        if (q4k_wide_ok(w)) {
            // rows of at most 64 chunks (2048 weights): two a warp, as mvr_kernel's short rows
            int rk = mv_short_launch(a.nblk * 8) ? 2 : mv_rows_per_warp(dsts, nd, units);
            // rows of one U = 4 step (65-128 chunks) in a launch that fits one wave one a warp
            // (q4k_one_step: the 8B shape's O product)
            if (rk == 2 && !units && a.nblk * 8 > 32 * 2 && a.nblk * 8 <= 32 * 4 && q4k_one_step() &&
                mv_one_wave(ctx, dsts, nd, k_q4k_one_blocks)) {
                rk = 1;
            }
            const unsigned bx = a.grouped ? mv_group_fill(a.grp, dsts, nd, k_rp_warps * rk, false, units) : cu_blocks(a.n, k_rp_warps * rk);
            const dim3     gk(bx, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            // q4k_wide: a lane's chunk a whole group of qs (32 bytes), half the chunks' header work
            const bool wide = q4k_wide();
            if (ns) {
                a.ns = ctx.qx_norm;
                if (rk == 2 && mv_pair_capped()) cu_launch(ctx, mvk_kernel<2, 1, k_mv_pair_blocks, 2, true>, gk, 32 * k_rp_warps, 0, a);
                else if (rk == 2) cu_launch(ctx, mvk_kernel<2, 1, 0, 2, true>, gk, 32 * k_rp_warps, 0, a);
                else cu_launch(ctx, mvk_kernel<1, 2, k_q4k_one_blocks, 2, true>, gk, 32 * k_rp_warps, 0, a);
            } else if (rk == 2 && mv_pair_capped()) {
                if (wide) cu_launch(ctx, mvk_kernel<2, 1, k_mv_pair_blocks, 2>, gk, 32 * k_rp_warps, 0, a);
                else cu_launch(ctx, mvk_kernel<2, 2, k_mv_pair_blocks>, gk, 32 * k_rp_warps, 0, a);
            } else if (rk == 2) {
                if (wide) cu_launch(ctx, mvk_kernel<2, 1, 0, 2>, gk, 32 * k_rp_warps, 0, a);
                else cu_launch(ctx, mvk_kernel<2, 2>, gk, 32 * k_rp_warps, 0, a);
            } else {
                if (wide) cu_launch(ctx, mvk_kernel<1, 2, k_q4k_one_blocks, 2>, gk, 32 * k_rp_warps, 0, a);
                else cu_launch(ctx, mvk_kernel<1, 4>, gk, 32 * k_rp_warps, 0, a);
            }
            return ember_cuda_check_launch("mul_mat (matvec q4_k, 16-byte loads)");
        }
    }
    if constexpr (T == EMBER_TYPE_Q5_K || T == EMBER_TYPE_IQ4_XS) {
        // Two rows a warp (a fused RoPE's pairs), a lane's chunk a whole group (Q4_K's wide form);
        // groups and units as Q4_K's (mv_group_fill), NS over the norm-in-product copy.
        if (mvk_other_ok(w)) {
            constexpr bool q5 = T == EMBER_TYPE_Q5_K;
            const unsigned bx = a.grouped ? mv_group_fill(a.grp, dsts, nd, k_rp_warps * 2, false, units) : cu_blocks(a.n, k_rp_warps * 2);
            const dim3     gk(bx, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            if (ns) {
                a.ns = ctx.qx_norm;
                cu_launch(ctx, mvk_kernel<2, 1, 0, 2, true, q5, !q5>, gk, 32 * k_rp_warps, 0, a);
            } else {
                cu_launch(ctx, mvk_kernel<2, 1, 0, 2, false, q5, !q5>, gk, 32 * k_rp_warps, 0, a);
            }
            return ember_cuda_check_launch(q5 ? "mul_mat (matvec q5_k, 16-byte loads)" : "mul_mat (matvec iq4_xs, 8-byte loads)");
        }
    }
    if constexpr (T == EMBER_TYPE_Q6_K) {
        if (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) {  // the planar layout (cuda-repack.h)
            // Alone (no group); as a unit without RoPE (Q4_K_M's V in Q6_K, its cache write in the store).
            if (nd > 1 || (units && units[0].rope)) return EMBER_ERR_INTERNAL;
            if (units) {
                a.grp.has_epi = true;
                a.grp.epi[0]  = mv_epi_of(units[0]);
            }
            const int  nseg = static_cast<int>(a.nblk / 8);
            const int  ks   = std::min(nseg, k_q6p_max_warps);
            const int  nw   = ks * std::max(1, 4 / ks);  // warps per block: 4, or one per segment
            const int  rw   = q6p_rows_per_warp();
            const dim3 gp(cu_blocks(a.n, (nw / ks) * rw), static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            if (ns) {
                a.ns = ctx.qx_norm;
                if (rw == 1) cu_launch(ctx, mvp6_kernel<1, true>, gp, 32 * nw, 0, a, ks);
                else if (rw == 2) cu_launch(ctx, mvp6_kernel<2, true>, gp, 32 * nw, 0, a, ks);
                else cu_launch(ctx, mvp6_kernel<4, true>, gp, 32 * nw, 0, a, ks);
            } else if (rw == 1) {
                cu_launch(ctx, mvp6_kernel<1>, gp, 32 * nw, 0, a, ks);
            } else if (rw == 2) {
                cu_launch(ctx, mvp6_kernel<2>, gp, 32 * nw, 0, a, ks);
            } else {
                cu_launch(ctx, mvp6_kernel<4>, gp, 32 * nw, 0, a, ks);
            }
            return ember_cuda_check_launch("mul_mat (matvec q6_k, planar layout)");
        }
    }
    if (a.grouped || ns) return EMBER_ERR_INTERNAL;
    if constexpr (T == EMBER_TYPE_Q6_K) {
        if (q6k_wide_ok(w)) {
            // rows of more than one segment: 4 warps per row (mv6_kernel KS)
            const bool split = a.nblk > k6_seg && mv_split();
            const int  rw    = split ? 1 : q6k_rows_per_warp();
            const dim3 g6(cu_blocks(a.n, split ? 1 : k_rp_warps * rw), static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            if (split) cu_launch(ctx, mv6_kernel<4>, g6, 32 * k_rp_warps, 0, a);
            else if (rw == 4) cu_launch(ctx, mv6_kernel<1, 4>, g6, 32 * k_rp_warps, 0, a);
            else if (rw == 2) cu_launch(ctx, mv6_kernel<1, 2>, g6, 32 * k_rp_warps, 0, a);
            else cu_launch(ctx, mv6_kernel<1>, g6, 32 * k_rp_warps, 0, a);
            return ember_cuda_check_launch("mul_mat (matvec q6_k, rows through shared memory)");
        }
    }
    const int  r = rows_per_block();
    const dim3 grid(cu_blocks(a.n, r), static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
    switch (r) {
        case 1: cu_launch(ctx, mvq_kernel<T, 1>, grid, k_threads, 0, a); break;
        case 4: cu_launch(ctx, mvq_kernel<T, 4>, grid, k_threads, 0, a); break;
        default: cu_launch(ctx, mvq_kernel<T, 2>, grid, k_threads, 0, a); break;
    }
    return ember_cuda_check_launch("mul_mat (matvec q)");
}

template <typename F> bool dispatch_q(ember_type t, F && f) {
    return cu_dispatch_among<EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_K,
                             EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS>(t, f);
}

// EMBER_CUDA_MV_K4P6: 1 (default; session 43: 1B Q4_K_M 2087.6 -> 2163.8 tg128) Q4_K units and
// one planar Q6_K unit (Q4_K_M's Q, K and V) in one launch (mvk_p6_kernel) where it fits one
// wave; 0 two launches. Read at every call (tests switch it).
bool mv_k4p6() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_K4P6", 1, {0, 1}) == 1;
}
// EMBER_CUDA_MV_K4P6_Q5K: 1 (default) the same for Q5_K units with a planar Q6_K one (Q5_K_M's
// layers with V in Q6_K: mvk_p6_kernel Q5, where it fits one wave, the 1B shape; not mvk_v6_kernel,
// whose cap would spill mvk_body Q5); 0 two launches. H200 tg128 1B Q5_K_M 1808.3 against 1753.3
// (session 67). Read at every call (tests switch it).
bool mv_k4p6_q5k() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_K4P6_Q5K", 1, {0, 1}) == 1;
}
// A unit weight launch_k4p6 takes beside a planar Q6_K one: Q4_K, or Q5_K with its switch.
bool k4p6_partner_ok(const ember_tensor * w) {
    return q4k_wide_ok(w) || (q5k_wide_ok(w) && mv_k4p6_q5k());
}
std::atomic<long long> k4p6_launches{0};  // (ember_cuda_mv_k4p6_launches)
// EMBER_CUDA_MV_K4V: 1 (default) where mvk_p6_kernel's grid is over one wave (8B), V's rows on the
// places the Q4_K units' capped launch leaves in its wave (mvk_v6_kernel) instead of V's own
// launch; 2 that in place of mvk_p6_kernel too (H200 tg128 1B Q4_K_M 2187.6 -> 2189.3, its trace
// +4.6 us a token: not the default); 0 never. Read at every call (tests switch it).
int mv_k4v() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_K4V", 1, {0, 1, 2});
}
// EMBER_CUDA_MV_K4V_SEG2=0: V rows of two segments through mvp6_rows (a round trip a segment), not
// mvp6_row_seg2; EMBER_CUDA_MV_K4V_PF=0: the V warps' later rows not requested into L2 first.
bool mv_k4v_seg2() {
    return ember_cuda_env_on("EMBER_CUDA_MV_K4V_SEG2");
}
bool mv_k4v_pf() {
    return ember_cuda_env_on("EMBER_CUDA_MV_K4V_PF");
}
// EMBER_CUDA_MV_K4V_BLOCKS=1: one V block (tests: V warps of several rows each).
int64_t mv_k4v_blocks() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_K4V_BLOCKS", 0, {1}) == 1 ? 1 : INT64_MAX;
}
std::atomic<long long> k4v6_launches{0};  // (ember_cuda_mv_k4v6_launches)
bool q6p_unit_w(const ember_tensor * w) {  // (the planar layout: rows of whole 2048-weight segments)
    return w->type == EMBER_TYPE_Q6_K && (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED);
}

// The placed copy is a norm-in-product copy: its readers apply the norm's scale, from the partial
// sums of squares nsq (one per `per` of the n rows) and the norm's eps.
static void qx_set_norm(ember_cuda_ctx & ctx, const ember_tensor * norm, const float * nsq, int64_t n, int per) {
    ctx.qx_ns       = true;
    ctx.qx_norm.nsq = nsq;
    ctx.qx_norm.n   = static_cast<int>(n / per);
    ctx.qx_norm.k   = static_cast<float>(n);
    ctx.qx_norm.eps = ember_get_op_param_f32(norm, 0);
}

// Units over one x whose matrices are Q4_K and planar Q6_K (sharing a launch by default,
// EMBER_CUDA_MV_K4P6: ember_cuda_mul_mat_vec_q_can_share): with one planar Q6_K unit (V, no RoPE),
// mvk_p6_kernel where its grid fits one wave, else mvk_v6_kernel (EMBER_CUDA_MV_K4V); otherwise
// the Q4_K units' launch and each Q6_K unit's own, as with EMBER_CUDA_MV_K4P6=0. (V rows of more
// than 4 segments, 10240 wide and up, leave mvk_p6_kernel out: its blocks are 4 warps.)
ember_status launch_k4p6(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units, const int8_t * xq,
                         const float2 * xds, bool ns) {
    ember_tensor *     d4[k_mv_group];
    ember_cuda_mv_unit u4[k_mv_group];
    int                n4 = 0, n6 = 0, i6[k_mv_group];
    int                t4 = EMBER_TYPE_COUNT;  // the other units' type: Q4_K, or Q5_K (EMBER_CUDA_MV_K4P6_Q5K)
    for (int m = 0; m < nd; m++) {
        const ember_tensor * w = dsts[m]->src[0];
        if (q6p_unit_w(w) && !units[m].rope) {
            i6[n6++] = m;
        } else if (k4p6_partner_ok(w) && (t4 == EMBER_TYPE_COUNT || t4 == w->type)) {
            t4       = w->type;
            d4[n4]   = dsts[m];
            u4[n4++] = units[m];
        } else {
            return EMBER_ERR_INTERNAL;  // (can_share let no other mix through)
        }
    }
    const bool q5 = t4 == EMBER_TYPE_Q5_K;
    // One launch for both: one planar Q6_K unit (V) and Q4_K units in mvk_kernel's unit form at two
    // rows a warp (rows of at most 64 chunks, or a RoPE's pairs), over one column of x.
    const ember_tensor * x    = dsts[0]->src[1];
    bool                 both = n6 == 1 && n4 >= 1 && x->ne[1] * x->ne[2] * x->ne[3] == 1 && (q5 || q4k_wide());
    mvq_args             a4, a6;
    if (both) {
        a4         = mvq_args_of(ctx, d4[0], 256, xq, xds);
        a4.grouped = true;
        both       = mv_short_launch(a4.nblk * 8) || mv_rows_per_warp(d4, n4, u4) == 2;
    }
    if (both) {
        const unsigned nb4 = mv_group_fill(a4.grp, d4, n4, k_rp_warps * 2, false, u4);
        a6                 = mvq_args_of(ctx, dsts[i6[0]], 256, xq, xds);
        a6.grouped         = false;
        a6.grp.has_epi     = true;
        a6.grp.epi[0]      = mv_epi_of(units[i6[0]]);
        if (ns) a4.ns = a6.ns = ctx.qx_norm;
        const int k4v = mv_k4v();
        // mvk_p6_kernel: mvp6_kernel's warps a block (4 here too: ks a divisor of 4) and one wave of
        // 4 blocks an SM.
        const int ks = std::min(static_cast<int>(a6.nblk / 8), k_q6p_max_warps);
        if (k4v != 2 && q6p_rows_per_warp() == 4 && k_rp_warps % ks == 0) {
            const unsigned nb6 = cu_blocks(a6.n, (k_rp_warps / ks) * 4);
            if (static_cast<int64_t>(nb4) + nb6 <= 4 * static_cast<int64_t>(cu_sm_count(ctx.device))) {
                const auto kernel = ns ? (q5 ? mvk_p6_kernel<true, true> : mvk_p6_kernel<true>) : (q5 ? mvk_p6_kernel<false, true> : mvk_p6_kernel<false>);
                cu_launch(ctx, kernel, nb4 + nb6, 32 * k_rp_warps, 0, a4, a6, ks, nb4);
                k4p6_launches.fetch_add(1, std::memory_order_relaxed);
                return ember_cuda_check_launch("mul_mat (matvec units, q4_k and planar q6_k)");
            }
        }
        // mvk_v6_kernel: V's rows on the places mvk_kernel's capped launch leaves in its wave, with
        // at least one place left.
        const int64_t left = static_cast<int64_t>(k_mv_pair_blocks) * cu_sm_count(ctx.device) - nb4;
        const int64_t nbv  = std::min<int64_t>({left, cu_blocks(a6.n, k_rp_warps), mv_k4v_blocks()});  // (at most a row a warp)
        if (k4v != 0 && mv_pair_capped() && nbv >= 1 && !q5) {  // (Q5_K: the two launches)
            const unsigned nb   = nb4 + static_cast<unsigned>(nbv);
            const bool     seg2 = a6.nblk == 16 && mv_k4v_seg2(), pf = mv_k4v_pf();
            const auto     go   = [&](auto kernel) { cu_launch(ctx, kernel, nb, 32 * k_rp_warps, 0, a4, a6, nb4); };
            if (ns && seg2 && pf) go(mvk_v6_kernel<true, true, true>);
            else if (ns && seg2) go(mvk_v6_kernel<true, true, false>);
            else if (ns && pf) go(mvk_v6_kernel<true, false, true>);
            else if (ns) go(mvk_v6_kernel<true, false, false>);
            else if (seg2 && pf) go(mvk_v6_kernel<false, true, true>);
            else if (seg2) go(mvk_v6_kernel<false, true, false>);
            else if (pf) go(mvk_v6_kernel<false, false, true>);
            else go(mvk_v6_kernel<false, false, false>);
            k4v6_launches.fetch_add(1, std::memory_order_relaxed);
            return ember_cuda_check_launch("mul_mat (matvec units, q4_k and planar q6_k rows in its wave's places left)");
        }
    }
    if (n4 > 0) {
        const ember_status st = q5 ? launch<EMBER_TYPE_Q5_K>(ctx, d4, n4, u4, xq, xds, ns) : launch<EMBER_TYPE_Q4_K>(ctx, d4, n4, u4, xq, xds, ns);
        if (st != EMBER_OK) return st;
    }
    for (int i = 0; i < n6; i++) {
        const ember_status st = launch<EMBER_TYPE_Q6_K>(ctx, dsts + i6[i], 1, units + i6[i], xq, xds, ns);
        if (st != EMBER_OK) return st;
    }
    return EMBER_OK;
}

struct aligned_probe {
    const ember_tensor * w;
    bool &               ok;
    template <int T> void operator()() const { ok = aligned_for<T>(w) && w->ne[0] % mvq<T>::QK == 0; }
};

struct launch_probe {
    ember_cuda_ctx &           ctx;
    ember_tensor * const *     dsts;
    int                        nd;
    const ember_cuda_mv_unit * units;  // or nullptr: plain stores
    const int8_t *         xq;
    const float2 *         xds;
    bool                   ns;  // x is mvr_norm_kernel's copy: only mvr_kernel NS reads it
    ember_status &         st;
    template <int T> void operator()() const {
        if constexpr (T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_Q8_0) {
            if (dsts[0]->src[0]->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) {
                st = launch_rp<T>(ctx, dsts, nd, units, xq, xds, ns);
                return;
            }
        }
        st = launch<T>(ctx, dsts, nd, units, xq, xds, ns);
    }
};

}  // namespace

long long ember_cuda_mv_k4p6_launches() {
    return k4p6_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_mv_k4v6_launches() {
    return k4v6_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_mv_halves_launches() {
    return mv_halves_launches.load(std::memory_order_relaxed);
}

bool ember_cuda_mul_mat_vec_q_supported(const ember_tensor * dst) {
    const ember_tensor * w  = dst->src[0];
    const ember_tensor * x  = dst->src[1];
    bool                 ok = (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) != 0;  // aligned by construction
    if (!ok && (!dispatch_q(w->type, aligned_probe{w, ok}) || !ok)) return false;
    // Quantized x vectors on grid.y of the quantizer.
    return x->ne[1] * x->ne[2] * x->ne[3] <= 65535 && x->ne[2] * x->ne[3] <= 65535 && w->ne[0] / 32 < INT32_MAX;
}

// Scratch slot 0 holds the quantized x: nv k int8 values, then (from a 256-byte boundary)
// nv k / 32 (d, d sum q) pairs.
void ember_cuda_qx_buffer(ember_cuda_ctx & ctx, const ember_tensor * x, int8_t ** xq, void ** xds) {
    const int64_t k   = x->ne[0];
    const int64_t nv  = x->ne[1] * x->ne[2] * x->ne[3];
    const size_t  qb  = static_cast<size_t>(nv * k);
    const size_t  off = (qb + 255) / 256 * 256;
    const size_t  len = off + static_cast<size_t>(nv * (k / 32)) * sizeof(float2);
    char *        buf = static_cast<char *>(ember_cuda_scratch(ctx, 0, len));
    *xq               = buf ? reinterpret_cast<int8_t *>(buf) : nullptr;
    *xds              = buf ? static_cast<void *>(buf + off) : nullptr;
}

// Whether the valid quantized copy is that of x (same memory, shape and strides).
static bool qx_of(const ember_cuda_ctx & ctx, const ember_tensor * x) {
    if (!ctx.qx_valid || ctx.qx_data != x->data) return false;
    for (int i = 0; i < 4; i++) {
        if (ctx.qx_ne[i] != x->ne[i] || ctx.qx_nb[i] != static_cast<int64_t>(x->nb[i])) return false;
    }
    return true;
}
// ... and in slot 0 at xq (the copy a kernel or the quantizer made there).
static bool qx_is(const ember_cuda_ctx & ctx, const ember_tensor * x, const int8_t * xq) {
    return !ctx.qx_placed && ctx.qx_buf == xq && qx_of(ctx, x);
}
// ... and mvr_norm_kernel's (ctx.qx_ns).
static bool qx_ns_is(const ember_cuda_ctx & ctx, const ember_tensor * x) {
    return ctx.qx_ns && qx_of(ctx, x);
}
bool ember_cuda_qx_is_ns(const ember_cuda_ctx & ctx, const ember_tensor * x) {
    return qx_ns_is(ctx, x);
}

void ember_cuda_qx_set_valid(ember_cuda_ctx & ctx, const ember_tensor * x, const int8_t * xq) {
    ctx.qx_valid  = true;
    ctx.qx_ns     = false;
    ctx.qx_f32    = false;
    ctx.qx_placed = false;
    ctx.qx_data  = x->data;
    ctx.qx_buf   = xq;
    for (int i = 0; i < 4; i++) {
        ctx.qx_ne[i] = x->ne[i];
        ctx.qx_nb[i] = static_cast<int64_t>(x->nb[i]);
    }
}

// x's copy made by a kernel at xq / xds outside slot 0 (mvr_norm_kernel's in slot 1, mvr_glu_kernel's
// in slot 2): ember_cuda_quantized_x hands it out as it is.
static void qx_set_placed(ember_cuda_ctx & ctx, const ember_tensor * x, const int8_t * xq, const float2 * xds) {
    ember_cuda_qx_set_valid(ctx, x, xq);
    ctx.qx_placed = true;
    ctx.qx_ds     = xds;
}

// Whether b can share a's launch (ember_cuda_mul_mat_vec_q_group): both integer matvecs over
// the same x (one 2-D x: decode) with 2-D weights of one type and width, in the CUDA layout
// (Q4_0 / Q8_0) or Q4_K with aligned rows, b not reading a.
bool ember_cuda_mul_mat_vec_q_can_group(const ember_tensor * a, const ember_tensor * b) {
    if (!ember_cuda_mul_mat_vec_q_can_share(a, b) || a->src[0]->type != b->src[0]->type) return false;  // (mixed: units only)
    const ember_tensor * x = a->src[1];
    return !ember_cuda_overlaps(a, x) && !ember_cuda_overlaps(b, x) && !ember_cuda_overlaps(a, b);
}

// The shape and type conditions of ember_cuda_mul_mat_vec_q_can_group, without its memory
// checks (units check the memory they really write: ember_cuda_mv_unit).
bool ember_cuda_mul_mat_vec_q_can_share(const ember_tensor * a, const ember_tensor * b) {
    if (a->op != EMBER_OP_MUL_MAT || b->op != EMBER_OP_MUL_MAT || a->src[1] != b->src[1] || b->src[0] == a) return false;
    const ember_tensor * wa = a->src[0];
    const ember_tensor * wb = b->src[0];
    const ember_tensor * x  = a->src[1];
    // Q4_K with planar Q6_K (Q4_K_M's Q, K and V): units of one launch (launch_k4p6), EMBER_CUDA_MV_K4P6=0: not
    const bool k4p6 = wa->type != wb->type && mv_k4p6() &&
                      ((k4p6_partner_ok(wa) && q6p_unit_w(wb)) || (q6p_unit_w(wa) && k4p6_partner_ok(wb)));
    if ((wa->type != wb->type && !k4p6) || wa->ne[0] != wb->ne[0] || wa->ne[2] * wa->ne[3] != 1 || wb->ne[2] * wb->ne[3] != 1 ||
        x->ne[2] * x->ne[3] != 1 || x->ne[1] > EMBER_CUDA_MATVEC_MAX_COLS) {
        return false;
    }
    if (k4p6) return ember_cuda_mul_mat_vec_q_supported(a) && ember_cuda_mul_mat_vec_q_supported(b);
    const bool rp = rp_q4q8(wa) && rp_q4q8(wb);
    if (ember_cuda_ext_layout(wa) || ember_cuda_ext_layout(wb)) {  // Ember's types: ops-matvec-ext.cu
        return ember_cuda_mul_mat_vec_ext_supported(a) && ember_cuda_mul_mat_vec_ext_supported(b) && ember_cuda_ext_layout(wa) &&
               ember_cuda_ext_layout(wb);
    }
    if (!rp && !(q4k_wide_ok(wa) && q4k_wide_ok(wb)) && !(mvk_other_ok(wa) && mvk_other_ok(wb))) return false;  // (one type: above)
    return ember_cuda_mul_mat_vec_q_supported(a) && ember_cuda_mul_mat_vec_q_supported(b);
}

// Whether the store of mm can do the work of `rope` (over a reshape of mm) and/or `set_rows`
// (of the rotated rows, or of mm's rows): mm a decode matvec of mvr_kernel / mvk_kernel / mvx_kernel (the
// kernels with epilogues), 2-D, one x column when a cache row is written (two columns with
// one index would race; the separate SET_ROWS keeps the last), RoPE over whole heads.
bool ember_cuda_mv_unit_ok(const ember_cuda_mv_unit & u) {
    const ember_tensor * mm = u.mm;
    if (!mm || mm->op != EMBER_OP_MUL_MAT || !ember_cuda_mul_mat_vec_q_supported(mm)) return false;
    const ember_tensor * w = mm->src[0];
    // Q6_K in the planar layout: units without RoPE only (mvp6_kernel's rows are not RoPE pairs;
    // Q4_K_M's V products, whose cache write then needs no launch of its own).
    const bool q6p = q6p_unit_w(w) && !u.rope;
    if (!rp_q4q8(w) && !q4k_wide_ok(w) && !mvk_other_ok(w) && !q6p && !(ember_cuda_ext_layout(w) && ember_cuda_mul_mat_vec_ext_supported(mm))) {
        return false;
    }
    return ember_cuda_mv_unit_shape_ok(u);
}

// The conditions of ember_cuda_mv_unit_ok that hold for any kernel with epilogues (the shapes of
// mm, its RoPE and its cache write), without the weight type's (F16 / BF16 units: ops-matvec.cu).
bool ember_cuda_mv_unit_shape_ok(const ember_cuda_mv_unit & u) {
    const ember_tensor * mm = u.mm;
    if (!mm || mm->op != EMBER_OP_MUL_MAT) return false;
    const ember_tensor * w = mm->src[0];
    const ember_tensor * x = mm->src[1];
    if (w->ne[2] * w->ne[3] != 1 || x->ne[2] * x->ne[3] != 1 || x->ne[1] > EMBER_CUDA_MATVEC_MAX_COLS) return false;
    if (mm->nb[0] != 4 || mm->nb[1] != static_cast<size_t>(4 * mm->ne[0])) return false;
    const ember_tensor * rows_src = mm;
    if (u.rope) {
        const ember_tensor * r  = u.rope;
        const ember_tensor * v  = r->src[0];
        const int64_t        hd = r->ne[0];
        if (r->op != EMBER_OP_ROPE || v->data != mm->data || r->type != EMBER_TYPE_F32 || v->type != EMBER_TYPE_F32) return false;
        if (r->op_params[1] != EMBER_ROPE_NORMAL && r->op_params[1] != EMBER_ROPE_NEOX) return false;
        if (r->op_params[0] != hd || hd % 2 != 0 || hd <= 0 || mm->ne[0] % hd != 0) return false;
        if (v->ne[0] != hd || v->ne[1] * hd != mm->ne[0] || v->ne[2] != mm->ne[1] || v->ne[3] != 1) return false;
        if (v->nb[0] != 4 || v->nb[1] != static_cast<size_t>(4 * hd) || v->nb[2] != mm->nb[1]) return false;
        if (r->nb[0] != 4 || r->ne[1] != v->ne[1] || r->ne[2] != v->ne[2] || r->ne[3] != 1) return false;
        if (r->src[1]->type != EMBER_TYPE_I32 || (r->src[2] && r->src[2]->type != EMBER_TYPE_F32)) return false;
        rows_src = r;
    } else if (!u.write_mm && !u.set_rows) {
        return false;
    }
    if (u.rope && !u.write_rope && !u.set_rows) return false;
    if (u.set_rows) {
        const ember_tensor * sr   = u.set_rows;
        const ember_tensor * rows = sr->src[1];
        if (sr->op != EMBER_OP_SET_ROWS || x->ne[1] != 1 || sr->src[2]->type != EMBER_TYPE_I32) return false;
        if (sr->type != EMBER_TYPE_F16 && sr->type != EMBER_TYPE_F32 && sr->type != EMBER_TYPE_BF16) return false;
        if (sr->src[0]->type != sr->type || sr->ne[0] != mm->ne[0] || sr->nb[0] != (sr->type == EMBER_TYPE_F32 ? 4u : 2u)) return false;
        // The rows are mm's or the rope's, as one contiguous vector per column.
        if (rows->data != rows_src->data || rows->ne[0] != mm->ne[0] || rows->ne[1] != mm->ne[1] || rows->nb[0] != 4 ||
            rows->nb[1] != static_cast<size_t>(4 * mm->ne[0]) || (u.rope && u.rope->nb[1] != static_cast<size_t>(4 * u.rope->ne[0]))) {
            return false;
        }
    }
    return true;
}

// Units over one x in one launch (up to k_mv_group; the caller checked the hazards).
ember_status ember_cuda_mul_mat_vec_q_units(ember_cuda_ctx & ctx, const ember_cuda_mv_unit * units, int nd) {
    if (nd < 1 || nd > k_mv_group) return EMBER_ERR_INVALID_ARG;
    ember_tensor * dsts[k_mv_group];
    for (int m = 0; m < nd; m++) dsts[m] = units[m].mm;
    return ember_cuda_mul_mat_vec_q_run(ctx, dsts, nd, units);
}

ember_status ember_cuda_mul_mat_vec_q_group(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd) {
    return ember_cuda_mul_mat_vec_q_run(ctx, dsts, nd, nullptr);
}

// The 8-bit copy of x in scratch slot 0 (ember_cuda_qx_buffer), made now unless the copy there
// is still x's: the previous matvec's, or the one the fused RMS_NORM + MUL or SWIGLU that made x
// wrote (valid while x is the same tensor and nothing wrote over it since).
ember_status ember_cuda_quantized_x(ember_cuda_ctx & ctx, const ember_tensor * x, int8_t ** xq_out, float2 ** xds_out, bool ns_ok) {
    if (ctx.qx_placed && qx_of(ctx, x)) {  // a kernel's copy outside slot 0 (ember_cuda_qx_set_placed)
        if (ctx.qx_ns && !ns_ok) {  // mvr_norm_kernel's copy: x's floats were never written
            std::fprintf(stderr, "ember: cuda: a matvec without the norm's scale reads the norm-in-product copy of x\n");
            return EMBER_ERR_INTERNAL;
        }
        if (ctx.qx_f32) {  // an FP8 producer's: no 8-bit values (ember_cuda_mv_norm_pair_ok)
            std::fprintf(stderr, "ember: cuda: an 8-bit matvec reads an FP8 norm-in-product copy of x\n");
            return EMBER_ERR_INTERNAL;
        }
        *xq_out  = static_cast<int8_t *>(const_cast<void *>(ctx.qx_buf));
        *xds_out = static_cast<float2 *>(const_cast<void *>(ctx.qx_ds));
        return EMBER_OK;
    }
    int8_t * xq  = nullptr;
    void *   xdv = nullptr;
    ember_cuda_qx_buffer(ctx, x, &xq, &xdv);
    if (!xq) return EMBER_ERR_OOM;
    float2 * xds = static_cast<float2 *>(xdv);
    if (!qx_is(ctx, x, xq)) {
        const int64_t k  = x->ne[0];
        const int64_t nv = x->ne[1] * x->ne[2] * x->ne[3];
        const dim3    grid(cu_blocks(k / 4, 256), static_cast<unsigned>(nv));
        cu_launch(ctx, quantize_x_kernel, grid, 256, 0, cu_desc(x), k, xq, xds);
        const ember_status st = ember_cuda_check_launch("mul_mat (quantize x)");
        if (st != EMBER_OK) return st;
        ember_cuda_qx_set_valid(ctx, x, xq);
    }
    *xq_out  = xq;
    *xds_out = xds;
    return EMBER_OK;
}

ember_status ember_cuda_mul_mat_vec_q_run(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units) {
    if (nd < 1 || nd > k_mv_group) return EMBER_ERR_INVALID_ARG;
    if (ember_cuda_ext_layout(dsts[0]->src[0])) return ember_cuda_mul_mat_vec_ext(ctx, dsts, nd, units);
    const ember_tensor * x   = dsts[0]->src[1];
    int8_t *             xq  = nullptr;
    float2 *             xds = nullptr;
    const bool           ns  = qx_ns_is(ctx, x);
    const ember_status   qs  = ember_cuda_quantized_x(ctx, x, &xq, &xds, true);
    if (qs != EMBER_OK) return qs;
    ember_status st = EMBER_OK;
    bool         mixed = false;  // Q4_K units with a planar Q6_K one (ember_cuda_mul_mat_vec_q_can_share, EMBER_CUDA_MV_K4P6)
    for (int m = 1; m < nd; m++) mixed = mixed || dsts[m]->src[0]->type != dsts[0]->src[0]->type;
    if (mixed) {
        if (!units) return EMBER_ERR_INTERNAL;  // (can_group never mixes types)
        st = launch_k4p6(ctx, dsts, nd, units, xq, xds, ns);
    } else if (!dispatch_q(dsts[0]->src[0]->type, launch_probe{ctx, dsts, nd, units, xq, xds, ns, st})) {
        return EMBER_ERR_UNSUPPORTED;  // a type without a kernel here (the callers check first) must not pass as done
    }
    ember_cuda_qx_after_matvecs(ctx, x, dsts, nd, units);
    return st;
}

void ember_cuda_qx_after_matvecs(ember_cuda_ctx & ctx, const ember_tensor * x, ember_tensor * const * dsts, int nd,
                                 const ember_cuda_mv_unit * units) {
    for (int m = 0; m < nd; m++) {  // a result written over x would make the copy stale
        if (ember_cuda_overlaps(dsts[m], x)) ctx.qx_valid = false;
        if (units && (ember_cuda_overlaps(units[m].rope, x) || ember_cuda_overlaps(units[m].set_rows, x))) ctx.qx_valid = false;
    }
}

ember_status ember_cuda_mul_mat_vec_q(ember_cuda_ctx & ctx, ember_tensor * dst) {
    return ember_cuda_mul_mat_vec_q_group(ctx, &dst, 1);
}

// The decode norm in the product before it (mvr_norm_kernel; cuda-backend.cpp finds the nodes).
// EMBER_CUDA_MV_NORM_Q4K: 1 (default) Q4_K and Q5_K weights (mvk_norm_kernel) make the
// norm-in-product copy too, and Q4_K / Q5_K (mvk_kernel NS) and planar Q6_K (mvp6_kernel NS:
// Q4_K_M's V units) products read it (H200 tg128 8B Q4_K_M 504.0 -> 516.0); 0: Q4_0 / Q8_0 only.
// (Q5_K only in Q4_K's kernel: EMBER_CUDA_Q5K_WIDE.) Read at every call (tests switch it).
static bool mv_norm_q4k() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM_Q4K", 1, {0, 1}) == 1;
}

// EMBER_CUDA_MV_NORM_EXT: 1 (default) Ember's INT4 / NF4 weights in the ext layout make the copy
// (mvx_norm_kernel, ops-matvec-ext.cu) and their products read it (mvx_kernel NS); H200 tg128 8B
// INT4 563.1 -> 588.3, 8B NF4 381.0 -> 392.4 (one build, two runs each); 0: off. FP8 products read
// x's floats, never this 8-bit copy (their own producer: EMBER_CUDA_MV_NORM_FP8). Read at every
// call (tests switch it).
static bool mv_norm_ext() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM_EXT", 1, {0, 1}) == 1;
}
// EMBER_CUDA_MV_NORM_Q6K: 1 (default) planar Q6_K weights make the copy too (mvp6_norm_kernel:
// Q4_K_M's Q6_K down products), 0 not. H200 tg128 (session 42, one build, two runs a side, both
// at EMBER_CUDA_MV_GLU_Q4K=2): 8B Q4_K_M 568.3 -> 605.0 (+6.5%), 1B 2087.2 -> 2087.7. Read at
// every call (tests switch it).
static bool mv_norm_q6k() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM_Q6K", 1, {0, 1}) == 1;
}
static bool mvn_q6p_ok(const ember_tensor * w) {
    return q6p_unit_w(w) && w->ne[0] % 2048 == 0 && mv_norm_q6k();
}
static bool mvn_ext_ok(const ember_tensor * w) {
    return ember_cuda_ext_layout(w) && ember_cuda_ext_has_ns(w->type) && mv_norm_ext();
}
// EMBER_CUDA_MV_NORM_FP8: 1 (default) block-scaled FP8 weights make a copy too (mvx_fp8_norm_kernel,
// on tensor cores: the MUL's weights times the ADD's floats as floats, no 8-bit values) and FP8
// products read it (mvx_fp8_mma_kernel NS, mvx_fp8_glu_kernel NS); 0 neither. H200 tg128 against
// =0 (session 44, one build, two runs a side, after the span loop's scale loads were mended): 1B
// FP8 E4M3 1417.2 -> 1496.0 (+5.6%), 8B 365.8 -> 385.8 (+5.5%); session 43's form lost on 8B
// (341.2 -> 337.5). Read at every call (tests switch it).
static bool mv_norm_fp8() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM_FP8", 1, {0, 1}) == 1;
}
static bool mvn_fp8_ok(const ember_tensor * w) {
    return ember_cuda_ext_layout(w) && ember_cuda_fp8_norm_type(w->type) && mv_norm_fp8();
}

// A planar Q6_K product of more rows than this (a vocabulary-sized output matrix, 431 MB for the
// 8B shape) does not read the copy: it streams at the bandwidth limit from its first wave, which
// starts early on the SMs the one-block norm kernel leaves free, so the fused norm saved less than
// its NS form lost (H200 8B Q4_0, the last down product fused before the Q6_K output: output
// 97.7 -> 105.9 us, the norm and split down product's 15.1 us -> the producer's 7.9).
constexpr int64_t k_mvn_q6p_max_rows = 32768;
// EMBER_CUDA_MV_NORM_Q6P_ROWS=65536|131072|262144 (measuring): that many rows instead (the 1B / 8B
// output matrices' 128256 take the copy at 131072 and up). Read at every plan.
static int64_t mvn_q6p_max_rows() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM_Q6P_ROWS", k_mvn_q6p_max_rows, {32768, 65536, 131072, 262144});
}

bool ember_cuda_mv_norm_reader_ok(const ember_tensor * mm) {
    if (mm->op != EMBER_OP_MUL_MAT) return false;
    const ember_tensor * w = mm->src[0];
    if (mvn_ext_ok(w)) return ember_cuda_mul_mat_vec_ext_supported(mm);
    if (ember_cuda_ext_float_x(w)) {  // FP8 (mvx_fp8_mma_kernel NS; a vocabulary-sized output not, as planar Q6_K's below)
        return mv_norm_fp8() && ember_cuda_fp8_ns_reader_here() && ember_cuda_mul_mat_vec_ext_supported(mm) &&
               ember_nelements(mm->src[1]) == mm->src[1]->ne[0] && w->ne[1] <= k_mvn_q6p_max_rows;
    }
    if (!ember_cuda_mul_mat_vec_q_supported(mm)) return false;
    if (rp_q4q8(w)) return true;
    const bool q6p = q6p_unit_w(w) && w->ne[1] <= mvn_q6p_max_rows();
    return mv_norm_q4k() && (q4k_wide_ok(w) || mvk_other_ok(w) || q6p);
}

bool ember_cuda_mv_norm_pair_ok(const ember_tensor * producer, const ember_tensor * reader) {
    return ember_cuda_ext_float_x(producer->src[0]) == ember_cuda_ext_float_x(reader->src[0]);
}

bool ember_cuda_mv_norm_ok(const ember_tensor * mm, const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul) {
    const ember_tensor * w = mm->src[0];
    const ember_tensor * x = mm->src[1];
    const bool           q4k = (q4k_wide_ok(w) || mvk_other_ok(w)) && w->ne[0] % 256 == 0 && mv_norm_q4k();  // (and Q5_K / IQ4_XS)
    const bool           ext = mvn_ext_ok(w) || mvn_fp8_ok(w);
    if (ext ? !ember_cuda_mul_mat_vec_ext_supported(mm) : !(rp_q4q8(w) || q4k || mvn_q6p_ok(w)) || !ember_cuda_mul_mat_vec_q_supported(mm)) return false;
    if (w->ne[2] * w->ne[3] != 1) return false;
    const int64_t n = w->ne[1];
    if (n % k_mvn_rows != 0 || n > (int64_t{1} << 24) || x->ne[1] * x->ne[2] * x->ne[3] != 1 || w->ne[0] % 32 != 0) return false;
    const auto vec_ok = [n](const ember_tensor * t) {  // one contiguous F32 row of n, 4-byte aligned
        return t && t->type == EMBER_TYPE_F32 && t->ne[0] == n && ember_nelements(t) == n && t->nb[0] == sizeof(float) && t->data &&
               (reinterpret_cast<uintptr_t>(t->data) & 3) == 0;
    };
    const ember_tensor * res = add->src[0] == mm ? add->src[1] : add->src[0];
    return (add->src[0] == mm) != (add->src[1] == mm) && vec_ok(mm) && vec_ok(add) && vec_ok(res) && vec_ok(norm) && vec_ok(mul) &&
           vec_ok(mul->src[1]) && norm->src[0] == add && mul->src[0] == norm;
}


// mvk_norm_kernel's form for Q4_K, Q5_K (q5) or IQ4_XS (xs) rows.
template <bool SPLIT> static auto mvk_norm_kernel_for(bool q5, bool xs) {
    return q5 ? mvk_norm_kernel<1, SPLIT, true> : xs ? mvk_norm_kernel<1, SPLIT, false, true> : mvk_norm_kernel<1, SPLIT>;
}

// Scratch slot 1 holds the copy (slot 0 holds the product's own x, read by the same kernel); its
// readers (the next launch) run before anything else uses slot 1 (the decode attention's splits).
// any_size false (EMBER_CUDA_MV_NORM=1): only where the grid fills 3/4 of the SMs, the rule of
// session 32, when the 1B shape's 64 blocks (of 132 SMs) measured slower than the norm's own
// launch (H200 tg128 1B Q4_0 1957.7 -> 1929.9). Since the gate / up launch reads the copy too
// (session 39) the 1B shape gains: 2186.5 -> 2349.7 (session 41), so any size is the default.
ember_status ember_cuda_mul_mat_vec_norm(ember_cuda_ctx & ctx, ember_tensor * mm, ember_tensor * add, ember_tensor * norm, ember_tensor * mul,
                                         bool any_size) {
    if (!ember_cuda_mv_norm_ok(mm, add, norm, mul) || qx_ns_is(ctx, mm->src[1])) return EMBER_ERR_UNSUPPORTED;
    const ember_tensor * w   = mm->src[0];
    const int64_t        n   = w->ne[1];
    if (!any_size && 4 * (n / k_mvn_rows) < 3 * static_cast<int64_t>(cu_sm_count(ctx.device))) return EMBER_ERR_UNSUPPORTED;
    const float * res = static_cast<const float *>((add->src[0] == mm ? add->src[1] : add->src[0])->data);
    const float * nw  = static_cast<const float *>(mul->src[1]->data);
    if (ember_cuda_ext_float_x(w)) {  // FP8 (mv_norm_ok: mvn_fp8_ok): a float copy, sums of squares per 16 rows
        float * ov = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(n + n / 16) * sizeof(float)));
        if (!ov) return EMBER_ERR_UNSUPPORTED;
        float *            osq = ov + n;
        const ember_status st  = ember_cuda_mvx_fp8_norm_launch(ctx, w, static_cast<const float *>(mm->src[1]->data), res,
                                                                 static_cast<float *>(add->data), nw, ov, osq);
        if (st != EMBER_OK) return st;
        const ember_status ls = ember_cuda_check_launch("mul_mat + add + rms_norm + mul (decode, fp8, norm in the product)");
        if (ls != EMBER_OK) return ls;
        qx_set_placed(ctx, mul, nullptr, nullptr);
        ctx.qx_buf = ov;
        ctx.qx_f32 = true;
        qx_set_norm(ctx, norm, osq, n, 16);
        return EMBER_OK;
    }
    const size_t         qb  = (static_cast<size_t>(n) + 255) / 256 * 256;
    const size_t         db  = (static_cast<size_t>(n / 32) * sizeof(float2) + 255) / 256 * 256;
    char *               buf = static_cast<char *>(ember_cuda_scratch(ctx, 1, qb + db + static_cast<size_t>(n / 32) * sizeof(float)));
    if (!buf) return EMBER_ERR_UNSUPPORTED;  // (recording and slot 1 too small: the plain launches)
    int8_t *           xq  = nullptr;
    float2 *           xds = nullptr;
    const ember_status qs  = ember_cuda_quantized_x(ctx, mm->src[1], &xq, &xds);
    if (qs != EMBER_OK) return qs;
    mvn_out o;
    o.res = res;
    o.sum = static_cast<float *>(add->data);
    o.nw  = nw;
    o.oq  = reinterpret_cast<int8_t *>(buf);
    o.ods = reinterpret_cast<float2 *>(buf + qb);
    o.osq = reinterpret_cast<float *>(buf + qb + db);
    // Warps: the slices (8 chunks; Q4_K: a 256-weight block) spread evenly (mvn_warps).
    const unsigned blocks = static_cast<unsigned>(n / k_mvn_rows);
    if (ember_cuda_ext_layout(w)) {
        const ember_status es = ember_cuda_mvx_norm_launch(ctx, w, xq, xds, o);
        if (es != EMBER_OK) return es;
    } else if (w->type == EMBER_TYPE_Q4_K || w->type == EMBER_TYPE_Q5_K || w->type == EMBER_TYPE_IQ4_XS) {
        const bool    q5 = w->type == EMBER_TYPE_Q5_K, xs = w->type == EMBER_TYPE_IQ4_XS;
        mvk_norm_args a;
        a.w     = static_cast<const char *>(w->data);
        a.w_nb1 = static_cast<int64_t>(w->nb[1]);
        a.nblk  = static_cast<int>(w->ne[0] / 256);
        a.xq    = xq;
        a.xds   = xds;
        a.out   = o;
        int thr = 0;
        if (ember_cuda_mvn_split(ctx, EMBER_TYPE_Q4_K, static_cast<int64_t>(blocks), a.nblk, a.split, thr)) {  // (Q5_K / IQ4_XS: Q4_K's rule)
            cu_launch(ctx, mvk_norm_kernel_for<true>(q5, xs), 2 * blocks, thr, 0, a);
        } else {
            cu_launch(ctx, mvk_norm_kernel_for<false>(q5, xs), blocks, 32 * mvn_warps(a.nblk), 0, a);
        }
    } else if (w->type == EMBER_TYPE_Q6_K) {  // planar (mv_norm_ok: mvn_q6p_ok)
        mvp6_norm_args a;
        a.w     = static_cast<const char *>(w->data);
        a.w_nb1 = static_cast<int64_t>(w->nb[1]);
        a.nseg  = static_cast<int>(w->ne[0] / 2048);
        a.xq    = xq;
        a.xds   = xds;
        a.out   = o;
        cu_launch(ctx, mvp6_norm_kernel, blocks, 32 * (a.nseg >= 2 ? 16 : 8), 0, a);
    } else {
        const int nb = static_cast<int>(w->ne[0] / 32);
        mvn_args  a;
        a.wq     = static_cast<const uint4 *>(w->data);
        a.wd     = rp_scales(w);
        a.nchunk = nb * ember_cuda_repack_qbytes(w->type) / 16;
        a.nb     = nb;
        a.xq     = xq;
        a.xds    = xds;
        a.out    = o;
        const int nsl = (a.nchunk + 7) / 8;
        int       thr = 0;
        if (ember_cuda_mvn_split(ctx, w->type, static_cast<int64_t>(blocks), nsl, a.split, thr)) {
            if (w->type == EMBER_TYPE_Q4_0) cu_launch(ctx, mvr_norm_kernel<EMBER_TYPE_Q4_0, true>, 2 * blocks, thr, 0, a);
            else cu_launch(ctx, mvr_norm_kernel<EMBER_TYPE_Q8_0, true>, 2 * blocks, thr, 0, a);
        } else if (w->type == EMBER_TYPE_Q4_0) {
            cu_launch(ctx, mvr_norm_kernel<EMBER_TYPE_Q4_0>, blocks, 32 * mvn_warps(nsl), 0, a);
        } else {
            cu_launch(ctx, mvr_norm_kernel<EMBER_TYPE_Q8_0>, blocks, 32 * mvn_warps(nsl), 0, a);
        }
    }
    const ember_status st = ember_cuda_check_launch("mul_mat + add + rms_norm + mul (decode, norm in the product)");
    if (st != EMBER_OK) return st;
    qx_set_placed(ctx, mul, o.oq, o.ods);
    qx_set_norm(ctx, norm, o.osq, n, 32);
    return EMBER_OK;
}

// EMBER_CUDA_MV_GLU: the gate / up products with their SWIGLU in one launch (mvr_glu_kernel): 1
// (default) where its grid is one wave (a block per 32 hidden units, 2 an SM of 8 warps or 4 of
// 4), 2 always, 0 never. H200 tg128 (default against =0, one build, two runs a side):
// 1B Q4_0 2075.7 -> 2159.2 (+4.0%), 1B Q8_0 1595.4 -> 1638.7 (+2.7%); kernel trace 1B Q4_0: the
// stream kernel's 7.18 us a layer and the SWIGLU's 1.87 -> 5.94, the norm before it 2.43 -> 3.00,
// GPU time a token 469.4 -> 444.6 us. The 8B shape's 448 blocks at 8 warps (1.7 waves, two
// slices a warp one after the other) lost, 594.8 -> 549.4; at 4 warps (4 an SM: one wave) with
// the next slice's loads pipelined, 8B Q4_0 595.3 -> 630.8 (+6.0%); 8B Q8_0 (8 slices a warp)
// 407.8 -> 419.8 (+3.0%, session 40). Read at every call (tests switch it).
static int mv_glu_mode() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_GLU", 1, {0, 1, 2});
}
bool ember_cuda_mv_glu_on() {
    return mv_glu_mode() != 0;
}
// INT4 / NF4 weights in the ext layout too (mvx_glu_kernel, ops-matvec-ext.cu; EMBER_CUDA_MV_GLU_EXT=0:
// not; EMBER_CUDA_MV_GLU_NF4=0: not NF4). H200 tg128 (one build, two runs a side): 1B INT4 2074.3 ->
// 2261.3 (+9.0%), 8B INT4 627.2 -> 671.1 (+7.0%) (session 40); 1B NF4 1574.5 -> 1821.2 (+15.7%), 8B
// NF4 410.7 -> 449.3 (+9.4%) (session 42). Read at every call (tests switch it).
static bool mv_glu_ext() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_GLU_EXT", 1, {0, 1}) == 1;
}
// Q4_K weights too (mvk_glu_kernel): both matrices Q4_K of one shape, rows of whole 256-weight
// blocks, 16-byte aligned (mvk_kernel's). EMBER_CUDA_MV_GLU_Q4K: 2 (default) at every width (the
// 8B shape: 16 slices over 4 warps, pipelined; the 1B shape: 8 slices, one a warp), 1 only where
// every warp of the launch has one slice of the row (session 41's default, before the GPU test
// had run the multi-slice forms; it passed in session 42), 0 never. H200 tg128 against =0
// (session 41, one build, two runs a side): 1B Q4_K_M 1907.8 -> 2093.7 (+9.7%), 8B Q4_K_M 540.0
// -> 567.8 (+5.1%). Read at every call (tests switch it).
static int mv_glu_q4k_mode() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_GLU_Q4K", 2, {0, 1, 2});
}
static bool mv_glu_q4k(const ember_tensor * wg, const ember_tensor * wu) {
    return mv_glu_q4k_mode() != 0 && q4k_wide_ok(wg) && q4k_wide_ok(wu) && wg->ne[0] == wu->ne[0] && wg->ne[0] % 256 == 0 &&
           wg->nb[1] == wu->nb[1];
}

// Q5_K weights too (mvk5_glu_kernel; session 69, measured in session 70: H100 tg128 1B Q5_K_M
// +8.1%, 8B +2.5%): both matrices Q5_K of one shape in Q4_K's kernels (q5k_wide_ok), rows of whole
// 256-weight blocks. EMBER_CUDA_MV_GLU_Q5K: 1 (default) at every width, 0 never. Read at every call.
static bool mv_glu_q5k(const ember_tensor * wg, const ember_tensor * wu) {
    return ember_cuda_env_choice("EMBER_CUDA_MV_GLU_Q5K", 1, {0, 1}) == 1 && q5k_wide_ok(wg) && q5k_wide_ok(wu) && wg->ne[0] == wu->ne[0] &&
           wg->ne[0] % 256 == 0 && wg->nb[1] == wu->nb[1];
}
// IQ4_XS weights too (mvk_glu_kernel XS; session 69, measured in session 70: H100 tg128 1B IQ4_XS
// +6.7%): both matrices IQ4_XS of one shape in Q4_K's kernels (iq4xs_wide_ok), rows of whole
// 256-weight blocks. EMBER_CUDA_MV_GLU_IQ4XS: 1 (default) at every width, as Q4_K; 0 never. Read at
// every call.
static bool mv_glu_iq4xs(const ember_tensor * wg, const ember_tensor * wu) {
    return ember_cuda_env_choice("EMBER_CUDA_MV_GLU_IQ4XS", 1, {0, 1}) == 1 && iq4xs_wide_ok(wg) && iq4xs_wide_ok(wu) &&
           wg->ne[0] == wu->ne[0] && wg->ne[0] % 256 == 0 && wg->nb[1] == wu->nb[1];
}

bool ember_cuda_mv_glu_ok(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu) {
    if (!gate || !up || !glu || glu->op != EMBER_OP_SWIGLU || glu->src[0] != gate || glu->src[1] != up || gate == up) return false;
    if (!ember_cuda_mul_mat_vec_q_can_group(gate, up)) return false;
    const ember_tensor * wg = gate->src[0];
    const ember_tensor * wu = up->src[0];
    const ember_tensor * x  = gate->src[1];
    const bool rp  = rp_q4q8(wg) && rp_q4q8(wu) && wg->type == wu->type;
    const bool ext = mv_glu_ext() && ember_cuda_mvx_glu_type_ok(wg, wu);
    const bool k4  = mv_glu_q4k(wg, wu) || mv_glu_iq4xs(wg, wu) || mv_glu_q5k(wg, wu);
    const bool f8  = ember_cuda_mvx_fp8_glu_ok(wg, wu);  // block-scaled FP8 (mvx_fp8_glu_kernel)
    if (!rp && !ext && !k4 && !f8) return false;
    const int64_t n = wg->ne[1];
    if (wu->ne[1] != n || n % 32 != 0 || n > (int64_t{1} << 24) || wg->ne[0] % 32 != 0 || x->ne[1] * x->ne[2] * x->ne[3] != 1) return false;
    const auto vec_ok = [n](const ember_tensor * t) {  // one contiguous F32 row of n, 4-byte aligned
        return t->type == EMBER_TYPE_F32 && t->ne[0] == n && ember_nelements(t) == n && t->nb[0] == sizeof(float) && t->data &&
               (reinterpret_cast<uintptr_t>(t->data) & 3) == 0;
    };
    // No memory checks beyond can_group's: the kernel reads the weights and x's 8-bit copy (scratch),
    // never x's, gate's or up's floats, so glu may be placed over any of them (the allocator puts
    // it over gate's or x's memory once they are read for the last time). It writes gate's and
    // up's floats only when something else reads them, and then glu is not over them.
    return vec_ok(gate) && vec_ok(up) && vec_ok(glu);
}

// Whether the gate / up launch requests its first slice's up rows before the PDL wait too, not
// only its gate rows (mvr_glu_kernel EG off, mvk_glu_kernel EB). EMBER_CUDA_MV_GLU_EARLY=1: never,
// =2: always; by default where a block has 8 warps (the grid one wave at 2 an SM: the 1B shape),
// whose O producer before it leaves room for the weights to stream in beside it: H200 tg128
// (session 54, one build, two runs a side) 1B Q4_K_M 2180.5 -> 2210.1, 1B Q4_0 2369.6 -> 2384.2
// (the 1B Q4_K_M trace: the gate / up launch 6.18 -> 4.14 us a layer, the O producer before it
// 4.04 -> 5.26); at 4 warps (the 8B shape's 448 blocks) 8B Q4_K_M 617.6 -> 611.7, so not there.
static bool mv_glu_early_both(int warps) {
    const int e = ember_cuda_env_choice("EMBER_CUDA_MV_GLU_EARLY", 0, {0, 1, 2});
    return e == 2 || (e == 0 && warps == 8);
}

template <int T, int W, bool SEP> void mvg_launch_w(ember_cuda_ctx & ctx, unsigned blocks, const mvg_args & a, bool ns, bool eg) {
    const unsigned threads = 32 * std::min(W, (a.nchunk + 7) / 8);
    if (ns && eg) cu_launch(ctx, mvr_glu_kernel<T, true, true, W, SEP>, blocks, threads, 0, a);
    else if (ns) cu_launch(ctx, mvr_glu_kernel<T, true, false, W, SEP>, blocks, threads, 0, a);
    else if (eg) cu_launch(ctx, mvr_glu_kernel<T, false, true, W, SEP>, blocks, threads, 0, a);
    else cu_launch(ctx, mvr_glu_kernel<T, false, false, W, SEP>, blocks, threads, 0, a);
}
// SEP at 4 warps, Q4_0 and Q8_0 (EMBER_CUDA_MV_GLU_SEP=0: the merged words). Q8_0's 8B launch
// with SEP (session 41, one build, two runs a side): 31.27 -> 30.53 us a layer, GPU time a token
// 2260.9 -> 2249.8 us, tg128 426.3 -> 427.6 (within the spread). Read at every call (tests switch it).
template <int T> void mvg_launch(ember_cuda_ctx & ctx, unsigned blocks, int w, const mvg_args & a, bool ns, bool eg) {
    const bool sep = ember_cuda_env_on("EMBER_CUDA_MV_GLU_SEP");
    if (w == 8) mvg_launch_w<T, 8, false>(ctx, blocks, a, ns, eg);
    else if (sep) mvg_launch_w<T, 4, true>(ctx, blocks, a, ns, eg);
    else mvg_launch_w<T, 4, false>(ctx, blocks, a, ns, eg);
}

// The copy of glu goes to scratch slot 2 (slot 0 may hold x's copy, read by the same kernel; slot 1
// a norm-in-product copy, read by it too, or written by the down product's norm after it).
ember_status ember_cuda_mul_mat_vec_glu(ember_cuda_ctx & ctx, ember_tensor * gate, ember_tensor * up, ember_tensor * glu, bool store_gu) {
    if (!ember_cuda_mv_glu_ok(gate, up, glu)) return EMBER_ERR_UNSUPPORTED;
    const ember_tensor * wg  = gate->src[0];
    const ember_tensor * wu  = up->src[0];
    const ember_tensor * x   = gate->src[1];
    const int64_t        n   = wg->ne[1];
    const int            mode = mv_glu_mode();
    // FP8 (mvx_fp8_glu_kernel: 8 hidden units a block, 16 rows, as its plain products) at any
    // size: it reads x's floats (or an FP8 producer's float copy), makes no 8-bit copy.
    if (mode != 0 && ember_cuda_mvx_fp8_glu_ok(wg, wu)) {
        const bool ns = qx_ns_is(ctx, x);
        if (ns && !ctx.qx_f32) return EMBER_ERR_INTERNAL;  // (pair_ok: only an FP8 producer's copy reaches FP8 readers)
        const ember_status fs = ember_cuda_mvx_fp8_glu_launch(ctx, wg, wu, ns ? static_cast<const float *>(ctx.qx_buf) : static_cast<const float *>(x->data),
                                                              ns ? &ctx.qx_norm : nullptr, store_gu ? static_cast<float *>(gate->data) : nullptr,
                                                              store_gu ? static_cast<float *>(up->data) : nullptr, static_cast<float *>(glu->data));
        if (fs != EMBER_OK) return fs;
        ctx.qx_valid = false;  // (glu may be over x's memory; no 8-bit copy of it is made)
        return ember_cuda_check_launch("mul_mat x 2 + swiglu (decode, FP8 gate / up with the SWIGLU)");
    }
    const int64_t        sms  = cu_sm_count(ctx.device);
    // 8 warps a block while 2 blocks an SM hold the grid, else 4 (4 an SM; EMBER_CUDA_MV_GLU_W4=0:
    // never, the launch then only at EMBER_CUDA_MV_GLU=2 where 2 an SM do not hold it).
    const bool           w4ok  = ember_cuda_env_on("EMBER_CUDA_MV_GLU_W4");
    const int            warps = n / 32 <= 2 * sms || !w4ok ? 8 : 4;
    const bool           wave  = n / 32 <= (warps == 8 ? 2 : 4) * sms;
    if (mode == 0 || (mode == 1 && !wave)) return EMBER_ERR_UNSUPPORTED;
    // (Q4_K at EMBER_CUDA_MV_GLU_Q4K=1: only where each warp has one slice, mv_glu_q4k_mode)
    if (wg->type == EMBER_TYPE_Q4_K && mv_glu_q4k_mode() == 1 && wg->ne[0] / 256 > warps) return EMBER_ERR_UNSUPPORTED;
    const size_t         qb  = (static_cast<size_t>(n) + 255) / 256 * 256;
    char *               buf = static_cast<char *>(ember_cuda_scratch(ctx, 2, qb + static_cast<size_t>(n / 32) * sizeof(float2)));
    if (!buf) return EMBER_ERR_UNSUPPORTED;  // (recording and slot 2 too small: the plain launches)
    const bool         ns  = qx_ns_is(ctx, x);
    int8_t *           xq  = nullptr;
    float2 *           xds = nullptr;
    const ember_status qs  = ember_cuda_quantized_x(ctx, x, &xq, &xds, true);
    if (qs != EMBER_OK) return qs;
    mvg_out o;
    o.g   = store_gu ? static_cast<float *>(gate->data) : nullptr;
    o.u   = store_gu ? static_cast<float *>(up->data) : nullptr;
    o.h   = static_cast<float *>(glu->data);
    o.hq  = reinterpret_cast<int8_t *>(buf);
    o.hds = reinterpret_cast<float2 *>(buf + qb);
    const unsigned blocks = static_cast<unsigned>(n / 32);
    if (ember_cuda_ext_layout(wg)) {  // INT4 / NF4 (mv_glu_ok: not with EMBER_CUDA_MV_GLU_EXT=0)
        const ember_status es = ember_cuda_mvx_glu_launch(ctx, wg, wu, xq, xds, ns ? &ctx.qx_norm : nullptr, o, warps);
        if (es != EMBER_OK) return es;
    } else if (wg->type == EMBER_TYPE_Q4_K || wg->type == EMBER_TYPE_IQ4_XS || wg->type == EMBER_TYPE_Q5_K) {  // (mv_glu_ok: mv_glu_q4k, _iq4xs, _q5k)
        mvk_glu_args a;
        a.gw    = static_cast<const char *>(wg->data);
        a.uw    = static_cast<const char *>(wu->data);
        a.w_nb1 = static_cast<int64_t>(wg->nb[1]);
        a.nblk  = static_cast<int>(wg->ne[0] / 256);
        a.xq    = xq;
        a.xds   = xds;
        if (ns) a.ns = ctx.qx_norm;
        a.out                  = o;
        const unsigned threads = 32 * std::min(warps, a.nblk);
        // (mv_glu_early_both: the up rows' first loads before the wait too, mvk_glu_kernel EB)
        using glu_fn                     = void (*)(mvk_glu_args);
        static constexpr glu_fn forms[8] = {mvk_glu_kernel<false, 4>,       mvk_glu_kernel<false, 8>,      mvk_glu_kernel<true, 4>,
                                            mvk_glu_kernel<true, 8>,        mvk_glu_kernel<false, 4, true>, mvk_glu_kernel<false, 8, true>,
                                            mvk_glu_kernel<true, 4, true>, mvk_glu_kernel<true, 8, true>};
        static constexpr glu_fn forms_xs[8] = {mvk_glu_kernel<false, 4, false, true>, mvk_glu_kernel<false, 8, false, true>,
                                               mvk_glu_kernel<true, 4, false, true>,  mvk_glu_kernel<true, 8, false, true>,
                                               mvk_glu_kernel<false, 4, true, true>,  mvk_glu_kernel<false, 8, true, true>,
                                               mvk_glu_kernel<true, 4, true, true>,   mvk_glu_kernel<true, 8, true, true>};
        static constexpr glu_fn forms_q5[8] = {mvk5_glu_kernel<false, 4>,       mvk5_glu_kernel<false, 8>,      mvk5_glu_kernel<true, 4>,
                                               mvk5_glu_kernel<true, 8>,        mvk5_glu_kernel<false, 4, true>, mvk5_glu_kernel<false, 8, true>,
                                               mvk5_glu_kernel<true, 4, true>, mvk5_glu_kernel<true, 8, true>};
        const bool eb = mv_glu_early_both(warps);
        const int  f  = (eb ? 4 : 0) + (ns ? 2 : 0) + (warps == 8 ? 1 : 0);
        if (wg->type == EMBER_TYPE_Q5_K) {  // (two warps a slice's place: even warp counts)
            cu_launch(ctx, forms_q5[f], blocks, 32 * std::min(warps, 2 * a.nblk), 0, a);
        } else {
            cu_launch(ctx, wg->type == EMBER_TYPE_IQ4_XS ? forms_xs[f] : forms[f], blocks, threads, 0, a);
        }
    } else {
        const int nb = static_cast<int>(wg->ne[0] / 32);
        mvg_args  a;
        a.gq     = static_cast<const uint4 *>(wg->data);
        a.uq     = static_cast<const uint4 *>(wu->data);
        a.gd     = rp_scales(wg);
        a.ud     = rp_scales(wu);
        a.nchunk = nb * ember_cuda_repack_qbytes(wg->type) / 16;
        a.nb     = nb;
        a.xq     = xq;
        a.xds    = xds;
        if (ns) a.ns = ctx.qx_norm;
        a.out         = o;
        const bool eg = !mv_glu_early_both(warps);
        if (wg->type == EMBER_TYPE_Q4_0) {
            mvg_launch<EMBER_TYPE_Q4_0>(ctx, blocks, warps, a, ns, eg);
        } else {
            mvg_launch<EMBER_TYPE_Q8_0>(ctx, blocks, warps, a, ns, eg);
        }
    }
    const ember_status st = ember_cuda_check_launch("mul_mat x 2 + swiglu (decode, gate / up with the SWIGLU)");
    if (st != EMBER_OK) return st;
    qx_set_placed(ctx, glu, o.hq, o.hds);
    return EMBER_OK;
}
