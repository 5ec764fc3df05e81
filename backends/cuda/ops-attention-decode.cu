// ATTN for decode (a few query tokens against the KV cache): the keys of one KV head are cut
// into splits, and a block of k_dec_threads threads takes one split of one KV head for every
// query row that reads that head (the GQA group's heads x the tokens), so each K/V element is
// read from memory once per step, not once per query head.
//
// A block walks its split 32 keys at a time: the 32 K rows and V rows are dequantized into
// shared memory by all threads at once (every load of a tile is in flight together: one memory
// round trip per tile instead of one per key as in ops-attention.cu's attn_kernel, which took
// ~10 us per layer at any context), then thread (row, key) computes a score from shared memory,
// each warp keeps the online softmax of its rows, and thread (row, dims) accumulates P.V.
// Several splits' unnormalized results, maxima and sums go to scratch memory and a second
// kernel merges them; one split writes the output directly.
//
// Used when the head size is a multiple of 32 (up to EMBER_CUDA_ATTN_MAX_D), K and V share it
// and their type (mixed caches take the simple kernel: one instantiation per type, not per pair),
// the query rows of a block fit the registers (rows * d <= k_dec_threads * k_dec_acc) and the
// K/V types are cache types (cu_dispatch_elem_type; each has a chunk decoder); else
// ops-attention.cu's kernels run. EMBER_CUDA_ATTN_DEC=0: off.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda-common.cuh"

namespace {

constexpr int k_dec_threads = 128;
constexpr int k_dec_keys    = 32;  // keys per tile
constexpr int k_dec_acc     = 16;  // accumulator floats per thread: rows * d <= 2048
constexpr int k_dec_rows    = 32;  // query rows per block, at most

struct dec_args {
    cu_tensor q, k, v, mask, dst;
    bool      has_mask;
    float     scale;
    int       group;    // query heads per KV head
    int       n_rows;   // query rows of a block: group * tokens
    int       n_split;  // splits of the keys
    int       split_keys;
    float *   part;     // n_split > 1: per (query row, split) d floats, then M and S
};

// Shared memory: K tile [32][d + 1] (the +1 keeps lanes of one key column on distinct banks),
// V tile [32][d], q [rows][d], scores/probabilities [rows][32], M / S / rescale per row.
inline size_t dec_smem_bytes(int d, int rows) {
    return sizeof(float) * (static_cast<size_t>(k_dec_keys) * (d + 1) + static_cast<size_t>(k_dec_keys) * d + static_cast<size_t>(rows) * d +
                            static_cast<size_t>(rows) * k_dec_keys + 3 * static_cast<size_t>(rows));
}

template <int TK, int TV>
__global__ void __launch_bounds__(k_dec_threads) attn_dec_kernel(dec_args a) {
    extern __shared__ float sm[];
    const int d      = static_cast<int>(a.q.ne[0]);
    const int nc     = d / 32;  // chunks of 32 per row
    const int rows   = a.n_rows;
    float *   sK     = sm;                                 // [32][d + 1]
    float *   sV     = sK + k_dec_keys * (d + 1);          // [32][d]
    float *   sQ     = sV + k_dec_keys * d;                // [rows][d]
    float *   sP     = sQ + rows * d;                      // [rows][32]
    float *   sM     = sP + rows * k_dec_keys;             // [rows]
    float *   sS     = sM + rows;                          // [rows]
    float *   sR     = sS + rows;                          // [rows]: rescale of the accumulators
    const int ik     = blockIdx.x;                         // KV head
    const int split  = blockIdx.y;
    const int tid    = threadIdx.x;
    const int lane   = tid % 32, warp = tid / 32;
    const int64_t n_kv = a.k.ne[2];
    const int64_t j0   = static_cast<int64_t>(split) * a.split_keys;
    const int64_t j1   = j0 + a.split_keys < n_kv ? j0 + a.split_keys : n_kv;
    // Query row r: head ik * group + r % group of token r / group.
    const auto q_head = [&](int r) { return static_cast<int64_t>(ik) * a.group + r % a.group; };
    const auto q_tok  = [&](int r) { return static_cast<int64_t>(r / a.group); };

    cu_pdl_begin();
    for (int i = tid; i < rows * d; i += k_dec_threads) {
        const int r = i / d, e = i % d;
        sQ[i]       = reinterpret_cast<const float *>(a.q.data + q_head(r) * a.q.nb[1] + q_tok(r) * a.q.nb[2])[e] * a.scale;
    }
    for (int r = tid; r < rows; r += k_dec_threads) {
        sM[r] = -INFINITY;
        sS[r] = 0.0f;
    }
    // Accumulators: thread tid owns the (row, dim) pairs tid, tid + 128, ... of rows x d.
    float acc[k_dec_acc];
#pragma unroll
    for (int u = 0; u < k_dec_acc; u++) acc[u] = 0.0f;

    for (int64_t jt = j0; jt < j1; jt += k_dec_keys) {
        const int nk = static_cast<int>(j1 - jt < k_dec_keys ? j1 - jt : k_dec_keys);
        __syncthreads();  // the previous tile is used up
        // K and V rows of the tile: item = (key, chunk), each a 32-value chunk.
        for (int it = tid; it < k_dec_keys * nc; it += k_dec_threads) {
            const int key = it / nc, c = it % nc;
            float     yk[32], yv[32];
            if (key < nk) {
                cu_codec<TK>::chunk(a.k.data + ik * a.k.nb[1] + (jt + key) * a.k.nb[2], c, yk);
                cu_codec<TV>::chunk(a.v.data + ik * a.v.nb[1] + (jt + key) * a.v.nb[2], c, yv);
            } else {
#pragma unroll
                for (int e = 0; e < 32; e++) yk[e] = yv[e] = 0.0f;
            }
#pragma unroll
            for (int e = 0; e < 32; e++) {
                sK[key * (d + 1) + 32 * c + e] = yk[e];
                sV[key * d + 32 * c + e]       = yv[e];
            }
        }
        __syncthreads();
        // Scores: thread (row, key) pairs; lanes are keys, so a warp reads one q row (broadcast)
        // and 32 K rows (distinct banks thanks to the padding).
        for (int it = tid; it < rows * k_dec_keys; it += k_dec_threads) {
            const int r = it / k_dec_keys, key = it % k_dec_keys;
            float     s = -INFINITY;
            if (key < nk) {
                const float mv = a.has_mask ? reinterpret_cast<const float *>(a.mask.data + q_tok(r) * a.mask.nb[1])[jt + key] : 0.0f;
                if (mv != -INFINITY) {
                    const float * qr = sQ + r * d;
                    const float * kr = sK + key * (d + 1);
                    float         t  = 0.0f;
                    for (int e = 0; e < d; e++) t += qr[e] * kr[e];
                    s = t + mv;
                }
            }
            sP[it] = s;
        }
        __syncthreads();
        // Online softmax per row: warp w takes rows w, w + 4, ...; lane = key.
        for (int r = warp; r < rows; r += k_dec_threads / 32) {
            const float s  = sP[r * k_dec_keys + lane];
            const float mt = cu_warp_max(s);
            const float mo = sM[r];
            const float mn = fmaxf(mo, mt);
            const float p  = mn == -INFINITY ? 0.0f : expf(s - mn);  // s = -INF gives 0
            const float ps = cu_warp_sum(p);
            sP[r * k_dec_keys + lane] = p;
            if (lane == 0) {
                const float f = mo == -INFINITY ? 0.0f : expf(mo - mn);
                sR[r]         = f;
                sS[r]         = sS[r] * f + ps;
                sM[r]         = mn;
            }
        }
        __syncthreads();
        // P.V: thread tid's pairs (row, dim); consecutive threads read consecutive V dims.
#pragma unroll
        for (int u = 0; u < k_dec_acc; u++) {
            const int i = tid + u * k_dec_threads;
            if (i >= rows * d) break;
            const int     r  = i / d, e = i % d;
            const float * pr = sP + r * k_dec_keys;
            float         s  = acc[u] * sR[r];
            for (int key = 0; key < nk; key++) s += pr[key] * sV[key * d + e];
            acc[u] = s;
        }
    }
    __syncthreads();
    // Out: the normalized rows (one split), or the split's partial result.
#pragma unroll
    for (int u = 0; u < k_dec_acc; u++) {
        const int i = tid + u * k_dec_threads;
        if (i >= rows * d) break;
        const int r = i / d, e = i % d;
        if (a.part) {
            const int64_t row = q_tok(r) * a.q.ne[1] + q_head(r);  // the merge kernel's row order
            float *       pr  = a.part + (row * a.n_split + split) * (d + 2);
            pr[e]             = acc[u];
            if (e == 0) {
                pr[d]     = sM[r];
                pr[d + 1] = sS[r];
            }
        } else {
            const float S = sS[r];
            float *     y = reinterpret_cast<float *>(a.dst.data + q_head(r) * a.dst.nb[1] + q_tok(r) * a.dst.nb[2]);
            y[e]          = S > 0.0f ? acc[u] / S : 0.0f;
        }
    }
}

// Merges the splits of each query row (one block per row): rescales each split to the row's
// maximum; splits whose keys were all hidden (M = -INF) count for nothing.
__global__ void attn_dec_merge_kernel(const float * part, int n_split, int64_t d, int64_t n_head, cu_tensor dst) {
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
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = pr[s * (d + 2) + d];
            if (m != -INFINITY) acc += pr[s * (d + 2) + i] * expf(m - Mg);
        }
        y[i] = acc * inv;
    }
}

template <int TK> struct dec_v_launch {
    ember_cuda_ctx & ctx;
    dec_args &       a;
    dim3             grid;
    size_t           smem;
    ember_status &   st;
    template <int TV> void operator()() const {
        // Above 48 KiB of shared memory (head size 256, large GQA groups) the kernel must opt in.
        if (smem > 48 * 1024 &&
            cudaFuncSetAttribute(attn_dec_kernel<TK, TV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) {
            cudaGetLastError();
            st = EMBER_ERR_UNSUPPORTED;
            return;
        }
        cu_launch(ctx, attn_dec_kernel<TK, TV>, grid, k_dec_threads, smem, a);
        st = EMBER_OK;
    }
};

struct dec_k_launch {
    ember_cuda_ctx & ctx;
    dec_args &       a;
    dim3             grid;
    size_t           smem;
    ember_status &   st;
    template <int T> void operator()() const { dec_v_launch<T>{ctx, a, grid, smem, st}.template operator()<T>(); }
};

bool dec_enabled() {
    static const bool on = [] {
        const char * e = std::getenv("EMBER_CUDA_ATTN_DEC");
        return !(e && std::strcmp(e, "0") == 0);
    }();
    return on;
}

}  // namespace

ember_status ember_cuda_attn_decode(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * q    = dst->src[0];
    const ember_tensor * k    = dst->src[1];
    const ember_tensor * v    = dst->src[2];
    const ember_tensor * mask = dst->src[3];
    const int64_t        d    = q->ne[0];
    if (!dec_enabled() || d % 32 != 0 || d > EMBER_CUDA_ATTN_MAX_D || k->ne[0] != d || v->ne[0] != d || k->ne[1] <= 0 ||
        q->ne[1] % k->ne[1] != 0 || q->ne[3] != 1 || k->ne[2] != v->ne[2] || k->ne[1] > 65535 || k->type != v->type) {
        return EMBER_ERR_UNSUPPORTED;
    }
    const int64_t group = q->ne[1] / k->ne[1];
    const int64_t rows  = group * q->ne[2];
    if (rows > k_dec_rows || rows * d > static_cast<int64_t>(k_dec_threads) * k_dec_acc) return EMBER_ERR_UNSUPPORTED;
    const int64_t n_kv = k->ne[2];
    dec_args      a;
    a.q        = cu_desc(q);
    a.k        = cu_desc(k);
    a.v        = cu_desc(v);
    a.mask     = mask ? cu_desc(mask) : cu_tensor{};
    a.has_mask = mask != nullptr;
    a.dst      = cu_desc(dst);
    a.scale    = ember_get_op_param_f32(dst, 0);
    a.group    = static_cast<int>(group);
    a.n_rows   = static_cast<int>(rows);
    // Splits: about two blocks per SM over the KV heads, each split a whole number of tiles.
    const int64_t tiles   = std::max<int64_t>(1, (n_kv + k_dec_keys - 1) / k_dec_keys);
    int64_t       n_split = std::min<int64_t>(tiles, std::max<int64_t>(1, 264 / k->ne[1]));
    n_split               = std::min<int64_t>(n_split, 65535);
    const int64_t per     = (tiles + n_split - 1) / n_split;
    n_split               = (tiles + per - 1) / per;
    a.n_split             = static_cast<int>(n_split);
    a.split_keys          = static_cast<int>(per * k_dec_keys);
    a.part                = nullptr;
    if (n_split > 1) {
        a.part = static_cast<float *>(
            ember_cuda_scratch(ctx, 1, static_cast<size_t>(q->ne[1] * q->ne[2] * n_split * (d + 2)) * sizeof(float)));
        if (!a.part) return EMBER_ERR_OOM;
    }
    const size_t smem = dec_smem_bytes(static_cast<int>(d), static_cast<int>(rows));
    const dim3   grid(static_cast<unsigned>(k->ne[1]), static_cast<unsigned>(n_split));
    ember_status st = EMBER_ERR_UNSUPPORTED;
    cu_dispatch_elem_type(k->type, dec_k_launch{ctx, a, grid, smem, st});  // KV cache types: all have chunk()
    if (st != EMBER_OK) return st;
    if (n_split > 1) {
        cu_launch(ctx, attn_dec_merge_kernel, static_cast<unsigned>(q->ne[1] * q->ne[2]), 128, 0, static_cast<const float *>(a.part),
                  static_cast<int>(n_split), d, q->ne[1], cu_desc(dst));
    }
    return ember_cuda_check_launch("attn (decode)");
}
