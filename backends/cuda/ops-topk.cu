// TOP_K on CUDA (ops.def): the k <= EMBER_CUDA_TOPK_MAX_K largest values of each row and their
// indices, so that a decode step can send k ids and values to the host instead of the logits.
//
// Order: one 64-bit key per element, as on the CPU (ops-topk.cpp): the float as an unsigned
// integer that sorts like it (every NaN on top, -0 folded onto +0), then the inverted index, so
// equal values put the lower index first and all keys of a row differ. The top k of a set of
// distinct keys is unique, so the result is the CPU's bit for bit.
//
// Two launches over a row of n values:
//   1. grid (rows, n / k_seg): each block finds the best keys of a 2048-value segment. Each warp
//      keeps a sorted list of 32 or 64 keys in registers (one or two per lane), loads its 128
//      values at once and takes them 64 at a time; a ballot against the list's k-th key skips
//      them at once, a few new keys are inserted one by one, more are sorted (bitonic, by
//      shuffles) and merged (the max of the list and the reversed new keys is bitonic and holds
//      the top; one bitonic merge sorts it). The block's 16 warps then merge their lists (a tree).
//   2. grid (rows): one block merges the segment lists of its row (skipping those that cannot
//      improve it) and writes k ids and values.
// A decode row of 128256 logits is 63 blocks of the first kernel, so the work spreads over the
// GPU instead of one SM streaming half a megabyte.
#include "cuda-common.cuh"

namespace {

typedef unsigned long long tk_key_t;

// Latency, not bandwidth, bounds this op (a decode row is 0.5 MB, in L2): each warp's work is a
// chain of dependent shuffles, so many warps with short chains, and every load issued up front.
constexpr int     k_tk_warps   = 16;
constexpr int     k_tk_threads = 32 * k_tk_warps;
constexpr int64_t k_tk_seg     = 2048;  // values per block of the first kernel: 128 per warp
constexpr int     k_tk_unroll  = 4;     // chunks of 32 loaded before any is processed (even: taken in pairs)
constexpr int     k_tk_insert  = 6;     // new keys in a chunk pair up to which inserting beats sort + merge
constexpr int     k_tk_batch   = 4;     // segment lists a warp of the second kernel loads at once

__device__ __forceinline__ tk_key_t tk_key(float v, uint32_t i) {
    uint32_t b = __float_as_uint(v);
    if ((b & 0x7FFFFFFFu) == 0) b = 0;  // -0 == +0
    uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) ord = 0xFFFFFFFFu;  // NaN above +inf
    return static_cast<tk_key_t>(ord) << 32 | (0xFFFFFFFFu - i);
}

__device__ __forceinline__ tk_key_t kmax(tk_key_t a, tk_key_t b) { return a > b ? a : b; }
__device__ __forceinline__ tk_key_t kmin(tk_key_t a, tk_key_t b) { return a < b ? a : b; }

// Sorts the warp's 32 keys (one per lane) in descending order across the lanes.
__device__ __forceinline__ tk_key_t warp_sort32(tk_key_t x, int lane) {
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
        const bool desc = (lane & size) == 0;  // runs alternate so that each pair of runs is bitonic
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const tk_key_t o     = __shfl_xor_sync(0xffffffffu, x, stride);
            const bool     lower = (lane & stride) == 0;
            x                    = lower == desc ? kmax(x, o) : kmin(x, o);
        }
    }
    return x;
}

template <int R> __device__ __forceinline__ void warp_bitonic_merge(tk_key_t (&v)[R], int lane);

// Sorts 64 keys (element r * 32 + lane in c[r]) in descending order: the two halves sorted
// at once in opposite directions (~ reverses the order of keys), then one bitonic merge.
__device__ __forceinline__ void warp_sort64(tk_key_t (&c)[2], int lane) {
    c[0] = warp_sort32(c[0], lane);
    c[1] = ~warp_sort32(~c[1], lane);
    warp_bitonic_merge<2>(c, lane);
}

// A bitonic sequence of 32 R keys (element r * 32 + lane in v[r]) into descending order.
template <int R> __device__ __forceinline__ void warp_bitonic_merge(tk_key_t (&v)[R], int lane) {
    if (R == 2) {
        const tk_key_t hi = kmax(v[0], v[R - 1]), lo = kmin(v[0], v[R - 1]);
        v[0]              = hi;
        v[R - 1]          = lo;
    }
#pragma unroll
    for (int stride = 16; stride > 0; stride >>= 1) {
        const bool lower = (lane & stride) == 0;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const tk_key_t o = __shfl_xor_sync(0xffffffffu, v[r], stride);
            v[r]             = lower ? kmax(v[r], o) : kmin(v[r], o);
        }
    }
}

// L = the best 32 R keys of L and M, both sorted descending.
template <int R> __device__ __forceinline__ void warp_merge_lists(tk_key_t (&L)[R], const tk_key_t (&M)[R], int lane) {
    if (R == 1) {
        L[0] = kmax(L[0], __shfl_sync(0xffffffffu, M[0], 31 - lane));
    } else {
        const tk_key_t m1 = __shfl_sync(0xffffffffu, M[R - 1], 31 - lane);
        const tk_key_t m0 = __shfl_sync(0xffffffffu, M[0], 31 - lane);
        L[0]              = kmax(L[0], m1);
        L[R - 1]          = kmax(L[R - 1], m0);
    }
    warp_bitonic_merge<R>(L, lane);
}

// Inserts x (better than the list's k-th key, so not already in it) into the sorted list L.
template <int R> __device__ __forceinline__ void warp_insert(tk_key_t (&L)[R], tk_key_t x, int lane) {
    tk_key_t prev[R];
    prev[0] = __shfl_up_sync(0xffffffffu, L[0], 1);
    if (lane == 0) prev[0] = ~0ull;
    if (R == 2) {
        const tk_key_t last0 = __shfl_sync(0xffffffffu, L[0], 31);
        prev[R - 1]          = __shfl_up_sync(0xffffffffu, L[R - 1], 1);
        if (lane == 0) prev[R - 1] = last0;
    }
#pragma unroll
    for (int r = 0; r < R; r++) L[r] = L[r] > x ? L[r] : (prev[r] > x ? x : prev[r]);
}

// The list's k-th key (k - 1 < 32 R), in every lane.
template <int R> __device__ __forceinline__ tk_key_t warp_kth(const tk_key_t (&L)[R], int k) {
    const tk_key_t v = ((k - 1) >> 5) == 0 ? L[0] : L[R - 1];
    return __shfl_sync(0xffffffffu, v, (k - 1) & 31);
}

// The best keys of x[i0, i1) into L (sorted, padded with 0 keys, which no value has).
template <int R> __device__ __forceinline__ void warp_scan(const float * x, int64_t i0, int64_t i1, int k, tk_key_t (&L)[R], int lane) {
#pragma unroll
    for (int r = 0; r < R; r++) L[r] = 0;
    tk_key_t thr = 0;
    for (int64_t base = i0; base < i1; base += 32 * k_tk_unroll) {
        float v[k_tk_unroll];
#pragma unroll
        for (int u = 0; u < k_tk_unroll; u++) {
            const int64_t i = base + u * 32 + lane;
            v[u]            = i < i1 ? x[i] : 0.0f;
        }
        // Chunks in pairs: 64 keys sorted at once cost less than two sorts and two merges.
#pragma unroll
        for (int u = 0; u < k_tk_unroll; u += 2) {
            const int64_t i0k  = base + u * 32 + lane, i1k = i0k + 32;
            tk_key_t      c[2] = {i0k < i1 ? tk_key(v[u], static_cast<uint32_t>(i0k)) : 0,
                                  i1k < i1 ? tk_key(v[u + 1], static_cast<uint32_t>(i1k)) : 0};
            unsigned      m0 = __ballot_sync(0xffffffffu, c[0] > thr), m1 = __ballot_sync(0xffffffffu, c[1] > thr);
            const int     n_new = __popc(m0) + __popc(m1);
            if (n_new == 0) continue;
            if (n_new <= k_tk_insert) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    unsigned mask = h == 0 ? m0 : m1;
                    while (mask) {
                        const int src = __ffs(mask) - 1;
                        mask &= mask - 1;
                        const tk_key_t y = __shfl_sync(0xffffffffu, c[h], src);
                        if (y > thr) {  // the list may have moved past it
                            warp_insert<R>(L, y, lane);
                            thr = warp_kth<R>(L, k);
                        }
                    }
                }
            } else {
                c[0] = c[0] > thr ? c[0] : 0;
                c[1] = c[1] > thr ? c[1] : 0;
                warp_sort64(c, lane);
                // The best 32 R of the 64 are all a list of 32 R can take.
                tk_key_t M[R];
                M[0] = c[0];
                if (R == 2) M[R - 1] = c[1];
                warp_merge_lists<R>(L, M, lane);
                thr = warp_kth<R>(L, k);
            }
        }
    }
}

__device__ __forceinline__ int64_t row_offset(const cu_tensor & t, int64_t r) {
    const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
    return i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

// Merges the k_tk_warps lists of a block (warp w's in L) into warp 0's L, as a tree: at each
// level the warps at odd multiples of `step` hand their list to the warp `step` below.
template <int R> __device__ __forceinline__ void block_merge(tk_key_t (&L)[R], tk_key_t (*sh)[32 * R], int warp, int lane) {
#pragma unroll
    for (int step = 1; step < k_tk_warps; step <<= 1) {
        if (warp % (2 * step) == step) {
#pragma unroll
            for (int r = 0; r < R; r++) sh[warp][r * 32 + lane] = L[r];
        }
        __syncthreads();  // each slot is written at one level only, so one barrier per level
        if (warp % (2 * step) == 0) {
            tk_key_t M[R];
#pragma unroll
            for (int r = 0; r < R; r++) M[r] = sh[warp + step][r * 32 + lane];
            warp_merge_lists<R>(L, M, lane);
        }
    }
}

// Kernel 1: block (row, segment) writes its segment's best 32 R keys to part.
template <int R> __global__ void __launch_bounds__(k_tk_threads) topk_segment_kernel(cu_tensor a, int k, int n_seg, tk_key_t * part) {
    __shared__ tk_key_t sh[k_tk_warps][32 * R];
    cu_pdl_begin();
    const int     lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row  = blockIdx.x;
    const int64_t seg  = blockIdx.y;
    const float * x    = reinterpret_cast<const float *>(a.data + row_offset(a, row));
    const int64_t n    = a.ne[0];
    const int64_t s0   = seg * k_tk_seg;
    const int64_t s1   = s0 + k_tk_seg < n ? s0 + k_tk_seg : n;
    const int64_t per  = ((s1 - s0 + k_tk_warps - 1) / k_tk_warps + 31) / 32 * 32;
    const int64_t w0   = s0 + warp * per < s1 ? s0 + warp * per : s1;
    const int64_t w1   = w0 + per < s1 ? w0 + per : s1;
    tk_key_t      L[R];
    warp_scan<R>(x, w0, w1, k, L, lane);
    block_merge<R>(L, sh, warp, lane);
    if (warp == 0) {
        tk_key_t * out = part + (row * n_seg + seg) * 32 * R;
#pragma unroll
        for (int r = 0; r < R; r++) out[r * 32 + lane] = L[r];
    }
}

// Kernel 2: block (row) merges the row's segment lists and writes k ids, then k values.
template <int R>
__global__ void __launch_bounds__(k_tk_threads) topk_final_kernel(cu_tensor a, cu_tensor dst, int k, int n_seg, const tk_key_t * part) {
    __shared__ tk_key_t sh[k_tk_warps][32 * R];
    cu_pdl_begin();
    const int        lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t    row  = blockIdx.x;
    const tk_key_t * in   = part + row * n_seg * 32 * R;
    tk_key_t         L[R];
#pragma unroll
    for (int r = 0; r < R; r++) L[r] = 0;
    // Lists s = warp, warp + k_tk_warps, ...: a batch of loads in flight, then the merges; a
    // list whose best key does not beat the k-th so far is skipped.
    for (int s0 = warp; s0 < n_seg; s0 += k_tk_warps * k_tk_batch) {
        tk_key_t M[k_tk_batch][R];
#pragma unroll
        for (int b = 0; b < k_tk_batch; b++) {
            const int s = s0 + b * k_tk_warps;
#pragma unroll
            for (int r = 0; r < R; r++) M[b][r] = s < n_seg ? in[static_cast<int64_t>(s) * 32 * R + r * 32 + lane] : 0;
        }
#pragma unroll
        for (int b = 0; b < k_tk_batch; b++) {
            const tk_key_t best = __shfl_sync(0xffffffffu, M[b][0], 0);
            if (best > warp_kth<R>(L, k)) warp_merge_lists<R>(L, M[b], lane);
        }
    }
    block_merge<R>(L, sh, warp, lane);
    if (warp == 0) {
        const char * x   = a.data + row_offset(a, row);
        int32_t *    out = reinterpret_cast<int32_t *>(dst.data + row_offset(dst, row));
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int e = r * 32 + lane;
            if (e < k) {
                const uint32_t id = 0xFFFFFFFFu - static_cast<uint32_t>(L[r]);
                out[e]            = static_cast<int32_t>(id);
                out[k + e]        = reinterpret_cast<const int32_t *>(x)[id];  // the value's bits
            }
        }
    }
}

template <int R> void launch_top_k(ember_cuda_ctx & ctx, const ember_tensor * a, ember_tensor * dst, int k, int64_t rows, int n_seg, tk_key_t * part) {
    cu_launch(ctx, topk_segment_kernel<R>, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(n_seg)), dim3(k_tk_threads), 0,
              cu_desc(a), k, n_seg, part);
    cu_launch(ctx, topk_final_kernel<R>, dim3(static_cast<unsigned>(rows)), dim3(k_tk_threads), 0, cu_desc(a), cu_desc(dst), k, n_seg,
              static_cast<const tk_key_t *>(part));
}

}  // namespace

bool ember_cuda_supports_top_k(const ember_tensor * dst) {
    const ember_tensor * a = dst->src[0];
    const int32_t        k = dst->op_params[0];
    const int64_t        n_seg = (a->ne[0] + k_tk_seg - 1) / k_tk_seg;
    return dst->type == EMBER_TYPE_I32 && a->type == EMBER_TYPE_F32 && k >= 1 && k <= EMBER_CUDA_TOPK_MAX_K && k <= a->ne[0] &&
           a->ne[0] <= INT32_MAX && n_seg <= 65535 && ember_nrows(a) <= INT32_MAX && dst->ne[0] == 2 * static_cast<int64_t>(k);
}

ember_status ember_cuda_top_k(ember_cuda_ctx & ctx, ember_tensor * dst) {
    if (!ember_cuda_supports_top_k(dst)) return EMBER_ERR_UNSUPPORTED;
    const ember_tensor * a     = dst->src[0];
    const int            k     = dst->op_params[0];
    const int64_t        rows  = ember_nrows(a);
    const int            n_seg = static_cast<int>((a->ne[0] + k_tk_seg - 1) / k_tk_seg);
    const int            R     = k <= 32 ? 1 : 2;
    if (rows == 0) return EMBER_OK;
    // Segment lists: scratch slot 1 (slot 0 may hold the matvecs' quantized activations).
    tk_key_t * part = static_cast<tk_key_t *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(rows) * n_seg * 32 * R * sizeof(tk_key_t)));
    if (!part) return EMBER_ERR_OOM;  // also while recording a CUDA graph: the stream runs this eagerly once
    if (R == 1) launch_top_k<1>(ctx, a, dst, k, rows, n_seg, part);
    else launch_top_k<2>(ctx, a, dst, k, rows, n_seg, part);
    return ember_cuda_check_launch("top_k");
}
