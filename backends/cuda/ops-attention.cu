// ATTN (see backends/cpu_simd/ops-attention.cpp): a simple, correct kernel. One block of
// k_warps warps per (query head, token); each warp walks keys j = warp, warp + k_warps, ...
// with its own online softmax (lane l holds dims l, l + 32, ... of q and of the accumulator),
// then the warps' partial results are merged in shared memory. K/V elements are read through
// the cache type's element reader. Keys whose mask is -INF are skipped; a row with every key
// hidden gives zeros.
//
// Decode (few query rows, so few blocks for 132 SMs): the keys are also split across
// gridDim.y blocks (flash-decoding); each writes its unnormalized partial result with its max
// and sum to scratch memory, and a second kernel merges them.
#include <algorithm>
#include <cmath>

#include "cuda-common.cuh"

namespace {

constexpr int k_warps = 4;
constexpr int k_per_lane = EMBER_CUDA_ATTN_MAX_D / 32;

// Partial results of a split: per (query row, split) d floats of accumulator, then M and S.
template <int TK, int TV>
__global__ void __launch_bounds__(32 * k_warps) attn_kernel(cu_tensor q, cu_tensor k, cu_tensor v, cu_tensor mask, bool has_mask,
                                                            cu_tensor dst, float scale, int64_t group, float * part) {
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
        attn_kernel<TK, TV><<<grid, 32 * k_warps, 0, ctx.stream>>>(cu_desc(q), cu_desc(k), cu_desc(dst->src[2]), md, mask != nullptr,
                                                                   cu_desc(dst), ember_get_op_param_f32(dst, 0), group, part);
        if (part) {
            attn_merge_kernel<<<static_cast<unsigned>(rows), 128, 0, ctx.stream>>>(part, static_cast<int>(n_split), q->ne[0], q->ne[1],
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

ember_status ember_cuda_attn(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * q = dst->src[0];
    if (q->ne[0] > EMBER_CUDA_ATTN_MAX_D || q->ne[1] * q->ne[2] > 0x7fffffff) return EMBER_ERR_UNSUPPORTED;
    if (q->ne[1] * q->ne[2] == 0) return EMBER_OK;
    if (!ember_cuda_type_has_elem(dst->src[1]->type) || !ember_cuda_type_has_elem(dst->src[2]->type)) return EMBER_ERR_UNSUPPORTED;
    ember_status st = EMBER_OK;
    cu_dispatch_elem_type(dst->src[1]->type, attn_k_launch{ctx, dst, st});
    if (st != EMBER_OK) return st;
    return ember_cuda_check_launch("attn");
}
