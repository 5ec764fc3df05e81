// ATTN (see backends/cpu_simd/ops-attention.cpp): a simple, correct kernel. One block of
// k_warps warps per (query head, token); each warp walks keys j = warp, warp + k_warps, ...
// with its own online softmax (lane l holds dims l, l + 32, ... of q and of the accumulator),
// then the warps' partial results are merged in shared memory. K/V elements are read through
// the cache type's element reader (cu_codec<T>::elem: F32, F16, BF16, Q8_0, Q4_0, FP8_E4M3,
// FP8_E5M2; any K/V pair). Keys whose mask is -INF are skipped; a row with every key hidden
// gives zeros.
//
// Decode (few query rows, so few blocks for 132 SMs): the keys are also split across
// gridDim.y blocks (flash-decoding); each writes its unnormalized partial result with its max
// and sum to scratch memory, and a second kernel merges them.
//
// Prefill (at least k_fa_min_tokens query tokens, head size 64, 96 or 128, K and V of one
// type): fa_kernel, a tiled flash attention in FP32 on the CUDA cores. The kernel above walks
// every key once per (query row, warp) from global memory, with a warp reduction and an exp per
// key: O(rows * n_kv) dependent steps. Here a block takes 16 (or 32) query rows of one KV head
// (the tokens x the heads of its GQA group, so each K/V tile serves all of them), stages 32
// keys and values at a time in shared memory as floats, and each warp keeps 4 (or 8) rows'
// online softmax and accumulators in registers: lane = key for Q.K, lane = output dims for
// P.V. Key tiles that every row of the block hides (the causal upper triangle) are skipped
// without loading K or V; the next tile's mask (and F16 K/V) is loaded while the current one
// is computed. H100, pp512, attention per layer: 1B shape 729 -> 120 us, 8B shape 750 -> 228 us
// (pp512 1B 27.3k -> 60.6k t/s, 8B 8.0k -> 11.5k). EMBER_CUDA_FA=0: the old kernel. The
// products on tensor cores (mma) for F16 caches at head size 64 / 128: fa_mma_kernel
// (ops-attention-prefill-mma.cuh; on its own on an H100: 1B pp512 117.5 -> 23.6 us, 8B 211.7 ->
// 31.8 us), the default where it applies (EMBER_CUDA_FA_MMA=0: fa_kernel).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda-common.cuh"
#include "cuda-env.h"

namespace {

constexpr int k_warps = 4;
constexpr int k_per_lane = EMBER_CUDA_ATTN_MAX_D / 32;

// Partial results of a split: per (query row, split) d floats of accumulator, then M and S.
template <int TK, int TV>
__global__ void __launch_bounds__(32 * k_warps) attn_kernel(cu_tensor q, cu_tensor k, cu_tensor v, cu_tensor mask, bool has_mask,
                                                            cu_tensor dst, float scale, int64_t group, float * part) {
    cu_pdl_begin();
    const int64_t n_head = q.ne[1];
    const int64_t ih     = blockIdx.x % n_head;
    const int64_t it     = blockIdx.x / n_head;
    const int64_t ik     = ih / group;
    const int64_t d      = q.ne[0];
    const int64_t n_kv   = k.ne[2];
    const int     lane   = threadIdx.x % 32;
    const int     warp   = threadIdx.x / 32;

    const float * qr = reinterpret_cast<const float *>(q.data + ih * q.nb[1] + it * q.nb[2]);
    const float * mr = has_mask ? reinterpret_cast<const float *>(mask.data + it * mask.nb[1]) : nullptr;

    float qv[k_per_lane], acc[k_per_lane];
#pragma unroll
    for (int u = 0; u < k_per_lane; u++) {
        const int64_t i = lane + 32 * u;
        qv[u]           = i < d ? qr[i] : 0.0f;
        acc[u]          = 0.0f;
    }
    float         M     = -INFINITY, S = 0.0f;
    const int64_t chunk = (n_kv + gridDim.y - 1) / gridDim.y;
    const int64_t j0    = chunk * blockIdx.y;
    const int64_t j1    = j0 + chunk < n_kv ? j0 + chunk : n_kv;
    for (int64_t j = j0 + warp; j < j1; j += k_warps) {
        const float mv = mr ? mr[j] : 0.0f;
        if (mv == -INFINITY) continue;
        const char * kr = k.data + ik * k.nb[1] + j * k.nb[2];
        float        s  = 0.0f;
#pragma unroll
        for (int u = 0; u < k_per_lane; u++) {
            const int64_t i = lane + 32 * u;
            if (i < d) s += qv[u] * cu_codec<TK>::elem(kr, i);
        }
        s = cu_warp_sum(s) * scale + mv;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            ms = expf(M - s);
            M  = s;
        } else {
            vs = expf(s - M);
        }
        const char * vr = v.data + ik * v.nb[1] + j * v.nb[2];
#pragma unroll
        for (int u = 0; u < k_per_lane; u++) {
            const int64_t i = lane + 32 * u;
            if (i < d) acc[u] = acc[u] * ms + vs * cu_codec<TV>::elem(vr, i);
        }
        S = S * ms + vs;
    }

    // Merge the warps: rescale each to the common maximum.
    __shared__ float sM[k_warps], sS[k_warps];
    __shared__ float sacc[k_warps][EMBER_CUDA_ATTN_MAX_D];
    if (lane == 0) {
        sM[warp] = M;
        sS[warp] = S;
    }
#pragma unroll
    for (int u = 0; u < k_per_lane; u++) sacc[warp][lane + 32 * u] = acc[u];
    __syncthreads();
    float Mg = -INFINITY;
    for (int w = 0; w < k_warps; w++) Mg = fmaxf(Mg, sM[w]);
    float Sg = 0.0f;
    float wscale[k_warps];
    for (int w = 0; w < k_warps; w++) {
        wscale[w] = sM[w] == -INFINITY ? 0.0f : expf(sM[w] - Mg);
        Sg += sS[w] * wscale[w];
    }
    if (part) {  // one split of several: unnormalized, with its max and sum
        float * pr = part + (static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y) * (d + 2);
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float a = 0.0f;
            for (int w = 0; w < k_warps; w++) a += sacc[w][i] * wscale[w];
            pr[i] = a;
        }
        if (threadIdx.x == 0) {
            pr[d]     = Mg;
            pr[d + 1] = Sg;
        }
        return;
    }
    const float inv = Sg > 0.0f ? 1.0f / Sg : 0.0f;
    float *     y   = reinterpret_cast<float *>(dst.data + ih * dst.nb[1] + it * dst.nb[2]);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < k_warps; w++) a += sacc[w][i] * wscale[w];
        y[i] = a * inv;
    }
}

// Merges the n_split partial results of each query row (one block per row).
__global__ void attn_merge_kernel(const float * part, int n_split, int64_t d, int64_t n_head, cu_tensor dst) {
    cu_pdl_begin();
    const int64_t row = blockIdx.x;
    const float * pr  = part + row * n_split * (d + 2);
    float         Mg  = -INFINITY;
    for (int s = 0; s < n_split; s++) Mg = fmaxf(Mg, pr[s * (d + 2) + d]);
    float Sg = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float m = pr[s * (d + 2) + d];
        if (m != -INFINITY) Sg += pr[s * (d + 2) + d + 1] * expf(m - Mg);
    }
    const float inv = Sg > 0.0f ? 1.0f / Sg : 0.0f;
    float *     y   = reinterpret_cast<float *>(dst.data + (row % n_head) * dst.nb[1] + (row / n_head) * dst.nb[2]);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = pr[s * (d + 2) + d];
            if (m != -INFINITY) a += pr[s * (d + 2) + i] * expf(m - Mg);
        }
        y[i] = a * inv;
    }
}

constexpr int k_fa_warps      = 4;
constexpr int k_fa_keys       = 32;  // keys per tile: one per lane
constexpr int k_fa_min_tokens = 16;

// k_fa_rpw query rows per warp (4; 8 with EMBER_CUDA_FA_RPW=8: each K/V tile serves twice the
// rows, but about twice the registers, so fewer blocks per SM), k_fa_warps * k_fa_rpw per block.
constexpr size_t fa_smem_bytes(int d, int rpw) {
    return sizeof(float) * (static_cast<size_t>(k_fa_warps * rpw) * (d + 4) + static_cast<size_t>(k_fa_keys) * (d + 4) +
                            static_cast<size_t>(k_fa_keys) * d + static_cast<size_t>(k_fa_warps) * rpw * k_fa_keys);
}

__device__ __forceinline__ float4 fa_h4(uint2 a) {
    const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&a.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&a.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Mask values of keys j0 + lane for a warp's rows (-INF past n_kv and for rows past the end).
template <int R>
__device__ __forceinline__ void fa_load_mask(float (&mv)[R], const float * const (&mrow)[R], const bool (&rvalid)[R], int64_t j0, int lane,
                                             int64_t n_kv) {
    const int64_t j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < R; rr++) {
        float x = -INFINITY;
        if (rvalid[rr] && j < n_kv) x = mrow[rr] ? mrow[rr][j] : 0.0f;
        mv[rr] = x;
    }
}

// A thread's share of an F16 K/V tile starting at key j0 (zeros past n_kv): 4 halves at dims
// i.. of keys kk0, kk0 + KS, ... (D / 4 divides the block size: i is the same for every load,
// so one address and one stride serve them all, which keeps the registers down).
template <int D, int LPT>
__device__ __forceinline__ void fa_load_kv(uint2 (&kp)[LPT], uint2 (&vp)[LPT], const cu_tensor & k, const cu_tensor & v, int64_t ik,
                                           int64_t j0, int64_t n_kv) {
    constexpr int KS = 32 * k_fa_warps / (D / 4);
    static_assert(32 * k_fa_warps % (D / 4) == 0, "D / 4 must divide the block size");
    const int     kk0 = threadIdx.x / (D / 4), i = 4 * (threadIdx.x % (D / 4));
    const char *  kb  = k.data + ik * k.nb[1] + (j0 + kk0) * k.nb[2] + 2 * i;
    const char *  vb  = v.data + ik * v.nb[1] + (j0 + kk0) * v.nb[2] + 2 * i;
#pragma unroll
    for (int t = 0; t < LPT; t++) {
        kp[t] = vp[t] = make_uint2(0u, 0u);
        if (j0 + kk0 + t * KS < n_kv) {
            kp[t] = *reinterpret_cast<const uint2 *>(kb + t * KS * k.nb[2]);
            vp[t] = *reinterpret_cast<const uint2 *>(vb + t * KS * v.nb[2]);
        }
    }
}

// Rows of a block: r = row0 + i over (token, head of the group) pairs, token-major, so a
// block covers k_fa_rows / group consecutive tokens. Blocks start from the last rows: under a
// causal mask those see the most keys, and running them first evens out the tail.
// VEC (F16 caches with 8-byte aligned rows): K/V tiles read 4 halves per load.
template <int TK, int TV, int NPL, int RPW, bool VEC>
__global__ void __launch_bounds__(32 * k_fa_warps) fa_kernel(cu_tensor q, cu_tensor k, cu_tensor v, cu_tensor mask, bool has_mask,
                                                             cu_tensor dst, float scale, int group) {
    cu_pdl_begin();
    constexpr int k_fa_rpw  = RPW;
    constexpr int k_fa_rows = k_fa_warps * k_fa_rpw;
    constexpr int D  = 32 * NPL;
    constexpr int DP = D + 4;  // padded rows: a float4 read by 8 lanes 4 * DP floats apart hits 8 bank groups
    extern __shared__ float4 fa_smem[];
    float * sq = reinterpret_cast<float *>(fa_smem);  // [k_fa_rows][DP], scaled
    float * sk = sq + k_fa_rows * DP;                  // [k_fa_keys][DP]
    float * sv = sk + k_fa_keys * DP;                  // [k_fa_keys][D]
    float * sp = sv + k_fa_keys * D;                   // [k_fa_warps][k_fa_rpw][k_fa_keys]

    const int     lane   = threadIdx.x % 32;
    const int     warp   = threadIdx.x / 32;
    const int64_t n_kv   = k.ne[2];
    const int64_t ik     = blockIdx.y;
    const int64_t n_rows = q.ne[2] * group;
    const int64_t row0   = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * k_fa_rows;

    for (int idx = threadIdx.x; idx < k_fa_rows * D; idx += blockDim.x) {
        const int     r  = idx / D, i = idx % D;
        const int64_t gr = row0 + r;
        float         x  = 0.0f;
        if (gr < n_rows) {
            const int64_t it = gr / group, ih = ik * group + gr % group;
            x                = reinterpret_cast<const float *>(q.data + ih * q.nb[1] + it * q.nb[2])[i] * scale;
        }
        sq[r * DP + i] = x;
    }

    float         m[k_fa_rpw], l[k_fa_rpw], o[k_fa_rpw][NPL];
    const float * mrow[k_fa_rpw];
    bool          rvalid[k_fa_rpw];
#pragma unroll
    for (int rr = 0; rr < k_fa_rpw; rr++) {
        const int64_t gr = row0 + warp * k_fa_rpw + rr;
        rvalid[rr]       = gr < n_rows;
        mrow[rr]         = has_mask && rvalid[rr] ? reinterpret_cast<const float *>(mask.data + (gr / group) * mask.nb[1]) : nullptr;
        m[rr]            = -INFINITY;
        l[rr]            = 0.0f;
#pragma unroll
        for (int u = 0; u < NPL; u++) o[rr][u] = 0.0f;
    }
    float * pw = sp + warp * k_fa_rpw * k_fa_keys;

    // Software pipeline: the mask values of the next tile (and with VEC its K/V, 4 halves per
    // uint2, k_fa_lpt per thread) are loaded into registers before the current tile is computed,
    // so their latency overlaps the math instead of stalling the block at its barriers.
    constexpr int k_fa_lpt = VEC ? k_fa_keys * D / 4 / (32 * k_fa_warps) : 1;
    static_assert(!VEC || k_fa_keys * D / 4 % (32 * k_fa_warps) == 0, "whole K/V tile loads per thread");
    uint2 kp[k_fa_lpt], vp[k_fa_lpt];
    float mv[k_fa_rpw];
    fa_load_mask<k_fa_rpw>(mv, mrow, rvalid, 0, lane, n_kv);
    if constexpr (VEC) fa_load_kv<D, k_fa_lpt>(kp, vp, k, v, ik, 0, n_kv);

    for (int64_t j0 = 0; j0 < n_kv; j0 += k_fa_keys) {
        float mc[k_fa_rpw];
        bool  any = false;
#pragma unroll
        for (int rr = 0; rr < k_fa_rpw; rr++) {
            mc[rr] = mv[rr];
            any    = any || mv[rr] != -INFINITY;
        }
        const bool warp_any = __any_sync(0xffffffffu, any);
        // Also the barrier after the previous tile's reads of sk/sv (and sq's first fill).
        const bool block_any = __syncthreads_or(warp_any);
        const bool more      = j0 + k_fa_keys < n_kv;
        if (more) fa_load_mask<k_fa_rpw>(mv, mrow, rvalid, j0 + k_fa_keys, lane, n_kv);
        if (!block_any) {
            if constexpr (VEC) {
                if (more) fa_load_kv<D, k_fa_lpt>(kp, vp, k, v, ik, j0 + k_fa_keys, n_kv);
            }
            continue;
        }
        if constexpr (VEC) {
#pragma unroll
            for (int t = 0; t < k_fa_lpt; t++) {
                const int idx = threadIdx.x + t * 32 * k_fa_warps;
                const int kk = idx / (D / 4), i = 4 * (idx % (D / 4));
                *reinterpret_cast<float4 *>(sk + kk * DP + i) = fa_h4(kp[t]);
                *reinterpret_cast<float4 *>(sv + kk * D + i)  = fa_h4(vp[t]);
            }
            if (more) fa_load_kv<D, k_fa_lpt>(kp, vp, k, v, ik, j0 + k_fa_keys, n_kv);
        } else {
            for (int idx = threadIdx.x; idx < k_fa_keys * D; idx += blockDim.x) {
                const int     kk = idx / D, i = idx % D;
                const int64_t jj = j0 + kk;
                float         kx = 0.0f, vx = 0.0f;
                if (jj < n_kv) {
                    kx = cu_codec<TK>::elem(k.data + ik * k.nb[1] + jj * k.nb[2], i);
                    vx = cu_codec<TV>::elem(v.data + ik * v.nb[1] + jj * v.nb[2], i);
                }
                sk[kk * DP + i] = kx;
                sv[kk * D + i]  = vx;
            }
        }
        __syncthreads();
        if (!warp_any) continue;

        float         s[k_fa_rpw];
#pragma unroll
        for (int rr = 0; rr < k_fa_rpw; rr++) s[rr] = 0.0f;
        const float * kr = sk + lane * DP;
        const float * qw = sq + warp * k_fa_rpw * DP;
#pragma unroll 4
        for (int i = 0; i < D; i += 4) {
            const float4 kx = *reinterpret_cast<const float4 *>(kr + i);
#pragma unroll
            for (int rr = 0; rr < k_fa_rpw; rr++) {
                const float4 qx = *reinterpret_cast<const float4 *>(qw + rr * DP + i);
                s[rr] += qx.x * kx.x + qx.y * kx.y + qx.z * kx.z + qx.w * kx.w;
            }
        }
#pragma unroll
        for (int rr = 0; rr < k_fa_rpw; rr++) {
            const float x  = s[rr] + mc[rr];  // -INF where hidden
            const float mn = fmaxf(m[rr], cu_warp_max(x));
            float       alpha = 1.0f, p = 0.0f;
            if (mn != -INFINITY) {
                alpha = expf(m[rr] - mn);  // 0 on the first visible tile (m = -INF)
                p     = expf(x - mn);
            }
            m[rr] = mn;
            l[rr] = l[rr] * alpha + p;  // per lane; summed over the warp at the end
#pragma unroll
            for (int u = 0; u < NPL; u++) o[rr][u] *= alpha;
            pw[rr * k_fa_keys + lane] = p;
        }
        __syncwarp();
#pragma unroll 2
        for (int jj = 0; jj < k_fa_keys; jj += 4) {
            float vx[4][NPL];
#pragma unroll
            for (int t = 0; t < 4; t++) {
#pragma unroll
                for (int u = 0; u < NPL; u++) vx[t][u] = sv[(jj + t) * D + lane + 32 * u];
            }
#pragma unroll
            for (int rr = 0; rr < k_fa_rpw; rr++) {
                const float4 p4 = *reinterpret_cast<const float4 *>(pw + rr * k_fa_keys + jj);
#pragma unroll
                for (int u = 0; u < NPL; u++) o[rr][u] += p4.x * vx[0][u] + p4.y * vx[1][u] + p4.z * vx[2][u] + p4.w * vx[3][u];
            }
        }
        __syncwarp();
    }

#pragma unroll
    for (int rr = 0; rr < k_fa_rpw; rr++) {
        if (!rvalid[rr]) continue;  // the same for the whole warp
        const float   L   = cu_warp_sum(l[rr]);
        const float   inv = L > 0.0f ? 1.0f / L : 0.0f;
        const int64_t gr  = row0 + warp * k_fa_rpw + rr;
        const int64_t it = gr / group, ih = ik * group + gr % group;
        float *       y  = reinterpret_cast<float *>(dst.data + ih * dst.nb[1] + it * dst.nb[2]);
#pragma unroll
        for (int u = 0; u < NPL; u++) y[lane + 32 * u] = o[rr][u] * inv;
    }
}

bool fa_enabled() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_FA");
    return on;
}

int fa_rows_per_warp() {
    static const int rpw = [] {
        const char * e = std::getenv("EMBER_CUDA_FA_RPW");
        return e && std::strcmp(e, "8") == 0 ? 8 : 4;
    }();
    return rpw;
}

template <int TK, int TV, int NPL, int RPW, bool VEC> ember_status fa_launch(ember_cuda_ctx & ctx, ember_tensor * dst) {
    constexpr int        k_fa_rows = k_fa_warps * RPW;
    const ember_tensor * q    = dst->src[0];
    const ember_tensor * k    = dst->src[1];
    const ember_tensor * mask = dst->src[3];
    const int64_t        group = q->ne[1] / k->ne[1];
    const size_t         smem  = fa_smem_bytes(32 * NPL, RPW);
    // Above 48 KiB of shared memory needs the opt-in, once per kernel and device.
    static std::atomic<uint64_t> attr{0};
    const uint64_t               bit = ctx.device < 64 ? uint64_t(1) << ctx.device : 0;
    if (!bit || !(attr.load() & bit)) {
        if (cudaFuncSetAttribute(fa_kernel<TK, TV, NPL, RPW, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
            cudaSuccess) {
            cudaGetLastError();
            return EMBER_ERR_UNSUPPORTED;
        }
        attr.fetch_or(bit);
    }
    const int64_t n_blocks = (q->ne[2] * group + k_fa_rows - 1) / k_fa_rows;
    const dim3    grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(k->ne[1]));
    cu_launch(ctx, fa_kernel<TK, TV, NPL, RPW, VEC>, grid, 32 * k_fa_warps, smem, cu_desc(q), cu_desc(k), cu_desc(dst->src[2]),
                                                                        mask ? cu_desc(mask) : cu_tensor{}, mask != nullptr, cu_desc(dst),
                                                                        ember_get_op_param_f32(dst, 0), static_cast<int>(group));
    return EMBER_OK;
}

// The prefill kernel for caches whose K and V have the same type (F16, BF16, F32, Q8_0, Q4_0,
// FP8_E4M3, FP8_E5M2): a mixed pair takes the simple kernel (fewer instantiations to compile).
struct fa_k_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    ember_status &   st;
    template <int TK> void operator()() const {
        if (fa_rows_per_warp() == 4) {
            go<TK, 4>();
        } else {
            go<TK, 8>();
        }
    }
    template <int TK, int RPW> void go() const {
        const ember_tensor * k   = dst->src[1];
        const ember_tensor * v   = dst->src[2];
        const int64_t        d   = dst->src[0]->ne[0];
        const bool           vec = TK == EMBER_TYPE_F16 && (d == 64 || d == 128) && reinterpret_cast<uintptr_t>(k->data) % 8 == 0 &&
                         reinterpret_cast<uintptr_t>(v->data) % 8 == 0 && k->nb[1] % 8 == 0 && k->nb[2] % 8 == 0 && v->nb[1] % 8 == 0 &&
                         v->nb[2] % 8 == 0;
        if (vec) {
            go2<TK, RPW, TK == EMBER_TYPE_F16>();  // (head size 64 or 128: see fa_load_kv)
        } else {
            go2<TK, RPW, false>();
        }
    }
    template <int TK, int RPW, bool VEC> void go2() const {
        switch (dst->src[0]->ne[0]) {
            case 64: st = fa_launch<TK, TK, 2, RPW, VEC>(ctx, dst); break;
            case 96: st = fa_launch<TK, TK, 3, RPW, false>(ctx, dst); break;
            case 128: st = fa_launch<TK, TK, 4, RPW, VEC>(ctx, dst); break;
            default: st = EMBER_ERR_UNSUPPORTED;
        }
    }
};

#include "ops-attention-prefill-mma.cuh"

template <int TK> struct attn_v_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    ember_status &   st;
    template <int TV> void operator()() const {
        const ember_tensor * q     = dst->src[0];
        const ember_tensor * k     = dst->src[1];
        const ember_tensor * mask  = dst->src[3];
        const int64_t        group = q->ne[1] / k->ne[1];
        const cu_tensor      md    = mask ? cu_desc(mask) : cu_tensor{};
        const int64_t        rows  = q->ne[1] * q->ne[2];
        const int64_t        n_kv  = k->ne[2];
        // Split the keys when the rows alone leave most SMs idle: about 4 blocks per SM, at
        // least 64 keys per split.
        int64_t n_split = 1;
        if (rows < 512 && n_kv >= 128) {
            n_split = std::min<int64_t>((512 + rows - 1) / rows, n_kv / 64);
            n_split = std::max<int64_t>(1, std::min<int64_t>(n_split, 64));
        }
        float * part = nullptr;
        if (n_split > 1) {
            part = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(rows * n_split * (q->ne[0] + 2)) * sizeof(float)));
            if (!part) {
                st = EMBER_ERR_OOM;
                return;
            }
        }
        const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(n_split));
        cu_launch(ctx, attn_kernel<TK, TV>, grid, 32 * k_warps, 0, cu_desc(q), cu_desc(k), cu_desc(dst->src[2]), md, mask != nullptr,
                                                                   cu_desc(dst), ember_get_op_param_f32(dst, 0), group, part);
        if (part) {
            cu_launch(ctx, attn_merge_kernel, static_cast<unsigned>(rows), 128, 0, part, static_cast<int>(n_split), q->ne[0], q->ne[1],
                                                                                 cu_desc(dst));
        }
    }
};

struct attn_k_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    ember_status &   st;
    template <int TK> void operator()() const { cu_dispatch_elem_type(dst->src[2]->type, attn_v_launch<TK>{ctx, dst, st}); }
};

}  // namespace

ember_status ember_cuda_attn(ember_cuda_ctx & ctx, ember_tensor * dst, const ember_tensor * qx_of) {
    const ember_tensor * q = dst->src[0];
    // Cache writes left for this node (ctx.kv_attn): only the decode kernels take them (they
    // launch them first where they cannot); every other path launches them now.
    if (ctx.kv_attn && (ctx.kv_attn != dst || q->ne[2] >= k_fa_min_tokens || q->ne[1] * q->ne[2] == 0)) {
        const ember_status fs = ember_cuda_kv_flush(ctx);
        if (fs != EMBER_OK) return fs;
    }
    if (q->ne[0] > EMBER_CUDA_ATTN_MAX_D || q->ne[1] * q->ne[2] > 0x7fffffff) return EMBER_ERR_UNSUPPORTED;
    if (q->ne[1] * q->ne[2] == 0) return EMBER_OK;
    if (!ember_cuda_type_has_elem(dst->src[1]->type) || !ember_cuda_type_has_elem(dst->src[2]->type)) return EMBER_ERR_UNSUPPORTED;
    ember_status st = EMBER_OK;
    const ember_tensor * k = dst->src[1];
    const int64_t        d = q->ne[0];
    // The tiled prefill kernel: enough tokens, a head size it has, K and V of the same head
    // size, whole GQA groups, and a grid it can launch.
    if (fa_enabled() && q->ne[2] >= k_fa_min_tokens && (d == 64 || d == 96 || d == 128) && k->ne[0] == d && dst->src[2]->ne[0] == d &&
        dst->src[2]->type == k->type && k->ne[1] > 0 && q->ne[1] % k->ne[1] == 0 && k->ne[1] <= 65535 && q->ne[2] * (q->ne[1] / k->ne[1]) < (int64_t(1) << 30)) {
        if (fa_mma_enabled(ctx)) {  // on tensor cores where it takes the types and shapes
            st = fa_mma_attn(ctx, dst);
            if (st == EMBER_OK) return ember_cuda_check_launch("attn (tensor-core prefill)");
            if (st != EMBER_ERR_UNSUPPORTED) return st;
            st = EMBER_OK;  // fa_kernel
        }
        cu_dispatch_elem_type(k->type, fa_k_launch{ctx, dst, st});
        if (st == EMBER_OK) return ember_cuda_check_launch("attn (tiled prefill)");
        if (st != EMBER_ERR_UNSUPPORTED) return st;
        st = EMBER_OK;  // fall back to the simple kernel
    }
    if (q->ne[2] < k_fa_min_tokens) {  // decode: ops-attention-decode.cu, when it takes these shapes
        st = ember_cuda_attn_decode(ctx, dst, qx_of);
        if (st != EMBER_ERR_UNSUPPORTED) return st;
        st = ember_cuda_kv_flush(ctx);  // the plain kernel below does not write them
        if (st != EMBER_OK) return st;
    }
    cu_dispatch_elem_type(dst->src[1]->type, attn_k_launch{ctx, dst, st});
    if (st != EMBER_OK) return st;
    return ember_cuda_check_launch("attn");
}

long long ember_cuda_fa_mma_launches() {
    return fa_mma_launch_count.load(std::memory_order_relaxed);
}
