// The decode norm in the product before it (ember_cuda_mul_mat_vec_norm, ops-matvec-q.cu): the
// device code its producers (mvr_norm_kernel, mvk_norm_kernel; mvx_norm_kernel in
// ops-matvec-ext.cu) and readers (the kernels' NS forms) share; and the end of the gate / up
// launch with its SWIGLU (mvg_block_end: mvr_glu_kernel, mvx_glu_kernel), a reader of such copies.
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
//
// SPLIT (the producers' SPLIT forms, ember_cuda_mvn_split): the group's 32 rows are two blocks'
// (blockIdx.x = 2 group + half),
// each summing half of the row's slices. Warp 0 of each stores its 32 sums to sp.part, fences and
// counts itself in sp.count[group]; the second to count adds the other's sums to its own (a + b
// is the same bits either way round), sets the count back to zero and goes on as above.
struct mvn_split {
    float * part;   // 64 floats a group: its two halves' row sums
    int *   count;  // a group's arrivals, zero between launches
};
template <int NT, bool SPLIT = false>
__device__ __forceinline__ void mvn_block_end(const float (&acc)[NT], const mvn_out & o, int64_t row0, int lane, int wi, int nw,
                                              const mvn_split & sp = {}) {
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
    const unsigned grp = SPLIT ? blockIdx.x >> 1 : blockIdx.x;  // (the group: its ods / osq entry)
    if constexpr (SPLIT) {
        const unsigned half = blockIdx.x & 1;
        __stcg(sp.part + 64 * grp + 32 * half + lane, y);
        __threadfence();
        __syncwarp();
        int last = 0;
        if (lane == 0) last = atomicAdd(sp.count + grp, 1) == 1;
        if (!__shfl_sync(0xffffffffu, last, 0)) return;
        __threadfence();
        y += __ldcg(sp.part + 64 * grp + 32 * (1 - half) + lane);
        if (lane == 0) sp.count[grp] = 0;
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
        o.ods[grp] = make_float2(d, d * static_cast<float>(sq));
        o.osq[grp] = ss;
    }
}

// The scale a reader of a norm-in-product copy applies (ember_cuda_norm_scale; the NS forms of
// mvr_kernel, mvk_kernel, mvp6_kernel, mvx_kernel after a warp's main loop; mvx_fp8_mma_kernel
// before its first span): every lane sums its share of the partial sums (lane, lane + 32, ...)
// in that order, requesting 8 before adding any (one round trip per 8; the adds of 0 past the
// end leave the nonnegative sum as it is).
__device__ __forceinline__ float mv_norm_scale(const ember_cuda_norm_scale & ns, int lane) {
    float s = 0.0f;
    for (int i0 = lane; i0 < ns.n; i0 += 8 * 32) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = i0 + 32 * k < ns.n ? __ldg(ns.nsq + i0 + 32 * k) : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) s += v[k];
    }
    return 1.0f / sqrtf(cu_warp_sum(s) / ns.k + ns.eps);
}

// The end of a Q / K / V launch in the halves form (EMBER_CUDA_MV_Q4_HALVES, _EXT_INT4_HALVES:
// mvr_halves_kernel, mvx_int4_halves_kernel): warps 2 pg and
// 2 pg + 1 (hf = 0, 1) hold a lane's partial sums of the same 4 rows over the two halves of the
// row. Each warp sums its lanes; the second half's lane 0 hands its 4 sums to the first half's
// through shared memory behind the pair's named barrier (1 + pg, 64 threads). True in the one
// thread that stores (the first half's lane 0), s then the rows' sums times the norm's scale (NS).
template <bool NS>
__device__ __forceinline__ bool mv_halves_meet(float (&s)[4], int pg, int hf, int lane, const ember_cuda_norm_scale & ns) {
    __shared__ float red[2][4];
#pragma unroll
    for (int r = 0; r < 4; r++) s[r] = cu_warp_sum(s[r]);
    if (hf == 1 && lane == 0) {
#pragma unroll
        for (int r = 0; r < 4; r++) red[pg][r] = s[r];
    }
    if (pg == 0) asm volatile("bar.sync 1, 64;" ::: "memory");
    else asm volatile("bar.sync 2, 64;" ::: "memory");
    if (hf == 1) return false;
    float sc = 1.0f;
    if constexpr (NS) sc = mv_norm_scale(ns, lane);
    if (lane != 0) return false;
#pragma unroll
    for (int r = 0; r < 4; r++) s[r] = (s[r] + red[pg][r]) * sc;
    return true;
}

// What the end of a gate / up block with its SWIGLU writes (mvg_block_end; ember_cuda_mul_mat_vec_glu).
struct mvg_out {
    float *  g;    // or nullptr: the gate rows
    float *  u;    // or nullptr: the up rows
    float *  h;    // silu(g) u
    int8_t * hq;   // h's 8-bit copy (cu_quantize_warp's values and (d, d sum q))
    float2 * hds;
};

// The slices [first, end) of a SPLIT decode-norm producer's block 2 g + h over rows of nsl slices
// (two blocks a group of 32 rows, ember_cuda_mvn_split): its half. (The producers take 0 and nsl
// without SPLIT in their own expressions, so their one-block code stays as it was.)
__device__ __forceinline__ int2 mvn_half(int nsl) {
    const int nh = (nsl + 1) / 2, first = static_cast<int>(blockIdx.x & 1) * nh;
    return make_int2(first, min(nsl, first + nh));
}

// The slice loop of a block whose rows come in two halves (mvr_glu_kernel, mvx_glu_kernel: the gate
// rows and the up rows; mvr_norm_kernel, mvx_norm_kernel: rows 4 t + lane / 8 for t < 4 and t >= 4,
// PIPE unused there: it measured slower, PERF-NOTES session 40): warp wi takes
// slices wi, wi + nw, ... of nsl (8 chunks each; lane j % 8's chunk c = 8 sl + j, c < nchunk:
// fetch(c) loads its x, sum(0) / sum(1) add the first / second half's products). load(sl, part)
// requests slice sl's first half (part 1), second half (2) or both (3); the caller requested the
// first slice. PIPE: the next slice's first half requested once this one's first half is summed,
// its second half after the second (a slice's loads wait behind half a slice's arithmetic); else
// the next slice's loads follow the whole slice. sl0: the first slice (the row's slices sl0 .. nsl
// - 1; a SPLIT producer's half, mvn_half). first_done (not with PIPE): the caller also summed the
// warp's first slice (mvx_norm_kernel DEC, over its looked-up bytes), so the loop starts at the
// warp's second and requests each slice it takes.
template <bool PIPE, typename Load, typename Fetch, typename Sum>
__device__ __forceinline__ void mvg_slices(int wi, int nw, int nsl, int j, int nchunk, const Load & load, const Fetch & fetch, const Sum & sum,
                                           int sl0 = 0, bool first_done = false) {
    for (int sl = sl0 + wi + (first_done ? nw : 0); sl < nsl; sl += nw) {
        if (!PIPE && (first_done || sl != sl0 + wi)) load(sl, 3);
        const int  c    = 8 * sl + j;
        const bool in   = c < nchunk;
        const bool more = PIPE && sl + nw < nsl;
        if (in) fetch(c);
        if (in) sum(0);
        if (more) load(sl + nw, 1);
        if (in) sum(1);
        if (more) load(sl + nw, 2);
    }
}

// The end of a gate / up block of 32 hidden units (mvr_glu_kernel, mvx_glu_kernel: NT = 8;
// mvk_glu_kernel: NT = 4; every thread calls it): each lane's 2 NT row sums (gate rows
// (32 / NT) t + lane / NT in acc[t], up rows in acc[NT + t], t < NT) summed over the NT lanes of
// the same lane / NT and over the block's warps in shared memory; then warp 0, lane r holding
// unit row0 + r: the norm's scale where x is a norm-in-product copy (NS), the gate and up floats
// where asked, silu(g) u and its 8-bit block as the SWIGLU kernel makes them.
template <int W, bool NS, int NT = 8>
__device__ __forceinline__ void mvg_block_end(const float (&acc)[2 * NT], const mvg_out & o, const ember_cuda_norm_scale & ns, int64_t row0, int lane,
                                              int wi, int nw) {
    const int        ro = lane / NT, j = lane % NT;
    __shared__ float part[W][2 * 32 + 1];  // gate row r in part[.][r], up row r in part[.][32 + r]
    float            sc = 1.0f;
    if (NS && wi == 0) sc = mv_norm_scale(ns, lane);  // its loads in flight while the block meets
#pragma unroll
    for (int t = 0; t < 2 * NT; t++) {
        float v = acc[t];
#pragma unroll
        for (int k = 1; k < NT; k <<= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (j == 0) part[wi][(t < NT ? 0 : 32) + (32 / NT) * (t % NT) + ro] = v;
    }
    __syncthreads();
    if (wi != 0) return;
    float pg[W], pu[W];
#pragma unroll
    for (int k = 0; k < W; k++) {
        pg[k] = k < nw ? part[k][lane] : 0.0f;
        pu[k] = k < nw ? part[k][32 + lane] : 0.0f;
    }
    float g = 0.0f, u = 0.0f;
#pragma unroll
    for (int k = 0; k < W; k++) {
        if (k < nw) {
            g += pg[k];
            u += pu[k];
        }
    }
    if constexpr (NS) {
        g *= sc;
        u *= sc;
    }
    const int64_t r = row0 + lane;
    if (o.g) o.g[r] = g;
    if (o.u) o.u[r] = u;
    const float z = g / (1.0f + expf(-g)) * u;  // swiglu_flat_q_kernel's arithmetic
    o.h[r]        = z;
    cu_quantize_warp(z, r, o.hq, o.hds);
}

// Warps of a producer block: the nsl slices of a row spread evenly over at most k_mvn_max_warps
// (8 or 4 at most measured slower: H200 tg128 8B Q4_0 584.0 -> 558.7 / 497.2, 1B 1931.0 ->
// 1886.5 / 1702.2).
inline int mvn_warps(int nsl) {
    const int per = (nsl + k_mvn_max_warps - 1) / k_mvn_max_warps;
    return (nsl + per - 1) / per;
}

// Whether a decode-norm producer over weights of type t, `groups` groups of 32 rows, rows of nsl
// slices, runs in two blocks a group (SPLIT; EMBER_CUDA_MVN_SPLIT, ops-matvec-ext.cu). If so, sp is
// the stream's partial sums and counts, thr a block's threads, and the launch is counted (tests:
// ember_cuda_mvn_split_launches); the caller launches 2 groups blocks of the SPLIT form.
bool ember_cuda_mvn_split(const ember_cuda_ctx & ctx, ember_type t, int64_t groups, int nsl, mvn_split & sp, int & thr);

// The producer for Ember's INT4 / NF4 weights in the ext layout (ops-matvec-ext.cu):
// n / 32 blocks over w (2-D) and x's 8-bit copy (xq, xds), the block ends into o.
ember_status ember_cuda_mvx_norm_launch(ember_cuda_ctx & ctx, const ember_tensor * w, const int8_t * xq, const float2 * xds, const mvn_out & o);

// The gate / up launch with its SWIGLU for INT4 / NF4 weights in the ext layout (ops-matvec-ext.cu,
// mvx_glu_kernel): wg, wu 2-D INT4 or NF4 of one shape (type_ok), rows a multiple of 32; x's 8-bit copy
// (ns: a norm-in-product copy and its scale, or nullptr); warps 8 or 4 a block; the ends into o.
bool         ember_cuda_mvx_glu_type_ok(const ember_tensor * wg, const ember_tensor * wu);
ember_status ember_cuda_mvx_glu_launch(ember_cuda_ctx & ctx, const ember_tensor * wg, const ember_tensor * wu, const int8_t * xq, const float2 * xds,
                                       const ember_cuda_norm_scale * ns, const mvg_out & o, int warps);

#endif  // EMBER_CUDA_MATVEC_NORM_CUH
