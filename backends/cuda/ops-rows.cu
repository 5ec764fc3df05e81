// Row conversion kernels: GET_ROWS (dequantize table rows to F32), SET_ROWS (encode F32 rows
// into a cache), CPY (any decodable type to any encodable type). One thread per 32-element
// chunk when a side is quantized, else one thread per element.
#include <algorithm>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-ext.h"

namespace {

constexpr int      k_threads    = 256;
constexpr unsigned k_max_blocks = 65535u * 16u;

unsigned grid_for(int64_t n) {
    const unsigned b = cu_blocks(n, k_threads);
    return b < k_max_blocks ? b : k_max_blocks;
}

__device__ __forceinline__ char * row_at(const cu_tensor & t, int64_t i1, int64_t i2, int64_t i3) {
    return t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ void unflatten_row(const cu_tensor & t, int64_t r, int64_t & i1, int64_t & i2, int64_t & i3) {
    i1 = r % t.ne[1];
    i2 = (r / t.ne[1]) % t.ne[2];
    i3 = r / (t.ne[1] * t.ne[2]);
}

//
// GET_ROWS
//
template <int T>
__global__ void get_rows_kernel(cu_tensor table, cu_tensor ids, cu_tensor dst, int64_t n_chunks_row, int64_t n_items, int * err) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / n_chunks_row;
        const int64_t c = idx % n_chunks_row;
        int64_t       i1, i2, i3;
        unflatten_row(dst, r, i1, i2, i3);
        const int32_t id = *reinterpret_cast<const int32_t *>(ids.data + i1 * ids.nb[0] + i2 * ids.nb[1] + i3 * ids.nb[2]);
        float *       y  = reinterpret_cast<float *>(row_at(dst, i1, i2, i3)) + 32 * c;
        if (id < 0 || id >= table.ne[1]) {
            for (int j = 0; j < 32; j++) y[j] = 0.0f;
            cu_set_error(err, EMBER_ERR_INTERNAL);
            continue;
        }
        float v[32];
        cu_codec<T>::chunk(table.data + id * table.nb[1], c, v);
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = v[j];
    }
}

// Float tables whose rows are not whole chunks: one thread per element.
template <int T>
__global__ void get_rows_elem_kernel(cu_tensor table, cu_tensor ids, cu_tensor dst, int64_t n_items, int * err) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / dst.ne[0];
        const int64_t i = idx % dst.ne[0];
        int64_t       i1, i2, i3;
        unflatten_row(dst, r, i1, i2, i3);
        const int32_t id = *reinterpret_cast<const int32_t *>(ids.data + i1 * ids.nb[0] + i2 * ids.nb[1] + i3 * ids.nb[2]);
        float *       y  = reinterpret_cast<float *>(row_at(dst, i1, i2, i3));
        if (id < 0 || id >= table.ne[1]) {
            y[i] = 0.0f;
            cu_set_error(err, EMBER_ERR_INTERNAL);
            continue;
        }
        y[i] = cu_codec<T>::elem(table.data + id * table.nb[1], i);
    }
}

// A table in the CUDA layout (cuda-repack.h; 2-D, Q4_0 or Q8_0).
template <int T>
__global__ void get_rows_rp_kernel(cu_tensor table, cu_tensor ids, cu_tensor dst, int64_t n_chunks_row, int64_t n_items, int * err) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / n_chunks_row;
        const int64_t c = idx % n_chunks_row;
        int64_t       i1, i2, i3;
        unflatten_row(dst, r, i1, i2, i3);
        const int32_t id = *reinterpret_cast<const int32_t *>(ids.data + i1 * ids.nb[0] + i2 * ids.nb[1] + i3 * ids.nb[2]);
        float *       y  = reinterpret_cast<float *>(row_at(dst, i1, i2, i3)) + 32 * c;
        if (id < 0 || id >= table.ne[1]) {
            for (int j = 0; j < 32; j++) y[j] = 0.0f;
            cu_set_error(err, EMBER_ERR_INTERNAL);
            continue;
        }
        float v[32];
        cu_rp_chunk<T>(table.data, table.ne[1] * n_chunks_row, id * n_chunks_row + c, v);
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = v[j];
    }
}

struct get_rows_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    template <int T> void operator()() const {
        const cu_tensor table = cu_desc(dst->src[0]), ids = cu_desc(dst->src[1]), out = cu_desc(dst);
        const int64_t   rows  = ember_nrows(dst);
        if constexpr (T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_Q8_0) {
            if (dst->src[0]->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) {  // supports(): 2-D table
                const int64_t nc = dst->ne[0] / 32;
                cu_launch(ctx, get_rows_rp_kernel<T>, grid_for(rows * nc), k_threads, 0, table, ids, out, nc, rows * nc, ctx.d_error);
                return;
            }
        }
        if constexpr (T == EMBER_TYPE_Q6_K) {
            if (dst->src[0]->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) {  // the planar layout (rows of 2048 k)
                const int64_t nc = dst->ne[0] / 32;
                cu_launch(ctx, get_rows_kernel<CU_Q6_K_PLANAR>, grid_for(rows * nc), k_threads, 0, table, ids, out, nc, rows * nc, ctx.d_error);
                return;
            }
        }
        if (dst->ne[0] % 32 == 0) {
            const int64_t nc = dst->ne[0] / 32;
            cu_launch(ctx, get_rows_kernel<T>, grid_for(rows * nc), k_threads, 0, table, ids, out, nc, rows * nc, ctx.d_error);
        } else {
            if constexpr (T == EMBER_TYPE_F32 || T == EMBER_TYPE_F16 || T == EMBER_TYPE_BF16) {
                cu_launch(ctx, get_rows_elem_kernel<T>, grid_for(rows * dst->ne[0]), k_threads, 0, table, ids, out, rows * dst->ne[0], ctx.d_error);
            }
        }
    }
};

//
// SET_ROWS: source row i goes to destination row idx[i]; when an index repeats, only its last
// occurrence writes (as the serial CPU loop leaves it).
//
// SM: the indices are first copied to shared memory (up to k_set_rows_smem of them), and each
// block marks there once which rows a later duplicate overwrites: a check that the indices
// strictly increase (the usual case: a prompt's positions), and only if they do not, a scan
// of the later indices per row. Before, every encoder block of every row scanned every later
// index (O(rows^2 * blocks): 33-50 us for a 512-row SET_ROWS of an F16 cache on an H100 / H200,
// 12% of a 1B pp512 step).
// V: values per item for the one-value types (F32 / F16 / BF16 caches with 16-byte aligned
// rows): 8 floats loaded as two float4, their encodings stored as 16-byte words; 1 otherwise.
constexpr int64_t k_set_rows_smem = 8192;

// One SET_ROWS, or two of one type and index tensor (a layer's K and V cache writes) in one
// launch: blocks [0, split) write a, the others b.
struct set_rows_args {
    cu_tensor dst, rows;
    int64_t   blocks_row, n_items;
};

// V floats from x (16-byte aligned), encoded as type T (one value a block) into dst (16-byte
// aligned): the encoders' bytes, stored as 16-byte words.
template <int T, int V>
__device__ __forceinline__ void set_rows_store_vec(const float * x, char * dst) {
    constexpr int es = T == EMBER_TYPE_F32 ? 4 : 2;
    static_assert(cu_encoder<T>::QK == 1 && V % 4 == 0 && (V * es) % 16 == 0, "one-value types, whole 16-byte words");
    float f[V];
#pragma unroll
    for (int j = 0; j < V; j += 4) *reinterpret_cast<float4 *>(f + j) = *reinterpret_cast<const float4 *>(x + j);
    alignas(16) char buf[V * es];
#pragma unroll
    for (int j = 0; j < V; j++) cu_encoder<T>::block(f + j, buf + j * es);
#pragma unroll
    for (int j = 0; j < V * es; j += 16) *reinterpret_cast<uint4 *>(dst + j) = *reinterpret_cast<const uint4 *>(buf + j);
}

template <int T, bool SM, int V>
__global__ void set_rows_kernel(set_rows_args a0, set_rows_args a1, unsigned split, const char * idx, int64_t idx_nb0, int * err) {
    cu_pdl_begin();
    constexpr int       QK     = cu_encoder<T>::QK;
    const bool          second = blockIdx.x >= split;
    const set_rows_args a      = second ? a1 : a0;
    const int64_t       bid    = second ? blockIdx.x - split : blockIdx.x;
    const int64_t       nblk   = second ? gridDim.x - split : split;
    const int64_t       m      = a.rows.ne[1];
    extern __shared__ int32_t sidx[];  // [m] indices, then [m] bytes: 1 where a later row has the same index
    uint8_t *                 slater = reinterpret_cast<uint8_t *>(sidx + m);
    if constexpr (SM) {
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) sidx[j] = *reinterpret_cast<const int32_t *>(idx + j * idx_nb0);
        __syncthreads();
        int unordered = 0;
        for (int64_t j = threadIdx.x; j + 1 < m; j += blockDim.x) unordered |= sidx[j] >= sidx[j + 1];
        const bool scan = __syncthreads_or(unordered) != 0;  // else every index differs
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
            bool later = false;
            for (int64_t j = i + 1; scan && j < m && !later; j++) later = sidx[j] == sidx[i];
            slater[i] = later;
        }
        __syncthreads();
    }
    for (int64_t it = bid * blockDim.x + threadIdx.x; it < a.n_items; it += nblk * blockDim.x) {
        const int64_t i  = it / a.blocks_row;
        const int64_t b  = it % a.blocks_row;
        const int32_t id = SM ? sidx[i] : *reinterpret_cast<const int32_t *>(idx + i * idx_nb0);
        if (id < 0 || id >= a.dst.ne[1]) {
            if (b == 0) cu_set_error(err, EMBER_ERR_INTERNAL);
            continue;
        }
        bool later = false;
        if constexpr (SM) {
            later = slater[i] != 0;
        } else {
            for (int64_t j = i + 1; j < m && !later; j++) later = *reinterpret_cast<const int32_t *>(idx + j * idx_nb0) == id;
        }
        if (later) continue;
        const float * x = reinterpret_cast<const float *>(a.rows.data + i * a.rows.nb[1]) + b * QK * V;
        if constexpr (V > 1) {
            set_rows_store_vec<T, V>(x, a.dst.data + id * a.dst.nb[1] + b * V * a.dst.nb[0]);
        } else {
            cu_encoder<T>::block(x, a.dst.data + id * a.dst.nb[1] + b * a.dst.nb[0]);
        }
    }
}

// A few rows into a quantized cache (a decode step's K and V): one warp per 32-value block
// (cu_encode_warp), lanes scanning the later indices together. The thread-per-block kernel
// above took 5.0 us a layer on an 8B token's critical path with a Q8_0 cache (H200 trace at
// depth 4096: 2 blocks, 32 busy threads each walking its block twice). Warps [0, items0)
// write a0, the others a1.
constexpr int64_t k_set_rows_warp_max = 64;  // rows of a SET_ROWS taking it, at most

// EMBER_CUDA_SET_ROWS_WARP=0: the thread-per-block kernel for every SET_ROWS. Read at every
// launch (tests switch it; graphs replay without calling here).
bool set_rows_warp_on() {
    return ember_cuda_env_on("EMBER_CUDA_SET_ROWS_WARP");
}

template <int T>
__global__ void set_rows_warp_kernel(set_rows_args a0, set_rows_args a1, int64_t items0, const char * idx, int64_t idx_nb0, int * err) {
    cu_pdl_begin();
    const int64_t       w      = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int           lane   = static_cast<int>(threadIdx.x % 32);
    const bool          second = w >= items0;
    const set_rows_args a      = second ? a1 : a0;
    const int64_t       it     = second ? w - items0 : w;
    if (it >= a.n_items) return;  // the whole warp
    const int64_t i  = it / a.blocks_row;
    const int64_t b  = it % a.blocks_row;
    const int32_t id = *reinterpret_cast<const int32_t *>(idx + i * idx_nb0);
    if (id < 0 || id >= a.dst.ne[1]) {
        if (b == 0 && lane == 0) cu_set_error(err, EMBER_ERR_INTERNAL);
        return;
    }
    bool later = false;
    for (int64_t j = i + 1 + lane; j < a.rows.ne[1]; j += 32) later |= *reinterpret_cast<const int32_t *>(idx + j * idx_nb0) == id;
    if (__any_sync(0xffffffffu, later)) return;  // a later row writes this one
    const float x = reinterpret_cast<const float *>(a.rows.data + i * a.rows.nb[1])[b * 32 + lane];
    cu_encode_warp<T>(x, a.dst.data + id * a.dst.nb[1] + b * a.dst.nb[0]);
}

// Whether a SET_ROWS can take 8-value items (set_rows_store_vec): a one-value cache type, rows
// of a multiple of 8 values, source and destination rows contiguous and 16-byte aligned.
bool set_rows_vec_ok(const ember_tensor * d) {
    if (!d) return true;
    const ember_tensor * r  = d->src[1];
    const size_t         es = d->type == EMBER_TYPE_F32 ? 4 : 2;
    return (d->type == EMBER_TYPE_F32 || d->type == EMBER_TYPE_F16 || d->type == EMBER_TYPE_BF16) && d->ne[0] % 8 == 0 &&
           d->nb[0] == es && r->nb[0] == sizeof(float) && reinterpret_cast<uintptr_t>(d->data) % 16 == 0 && d->nb[1] % 16 == 0 &&
           reinterpret_cast<uintptr_t>(r->data) % 16 == 0 && r->nb[1] % 16 == 0;
}

struct set_rows_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    ember_tensor *   dst2;  // or nullptr: same type, same index tensor and row count as dst
    template <int T> void operator()() const {
        constexpr int        QK   = cu_encoder<T>::QK;
        const ember_tensor * rows = dst->src[1];
        const ember_tensor * idx  = dst->src[2];
        const char *         ip   = static_cast<const char *>(idx->data);
        const int64_t        in   = static_cast<int64_t>(idx->nb[0]);
        if constexpr (cu_has_warp_encoder<T>()) {
            if (rows->ne[1] <= k_set_rows_warp_max && set_rows_warp_on()) {
                const set_rows_args a = args<T>(dst, 1), b = dst2 ? args<T>(dst2, 1) : a;
                if (a.n_items == 0 && (!dst2 || b.n_items == 0)) return;
                const int64_t  items  = a.n_items + (dst2 ? b.n_items : 0);
                const unsigned blocks = static_cast<unsigned>((items * 32 + k_threads - 1) / k_threads);
                cu_launch(ctx, set_rows_warp_kernel<T>, blocks, k_threads, 0, a, b, a.n_items, ip, in, ctx.d_error);
                return;
            }
        }
        if constexpr (QK == 1) {
            if (rows->ne[1] <= k_set_rows_smem && set_rows_vec_ok(dst) && set_rows_vec_ok(dst2)) {
                go<T, true, 8>(ip, in);
                return;
            }
        }
        if (rows->ne[1] <= k_set_rows_smem) {
            go<T, true, 1>(ip, in);
        } else {
            go<T, false, 1>(ip, in);
        }
    }
    template <int T> static set_rows_args args(const ember_tensor * d, int v) {
        set_rows_args a;
        a.dst        = cu_desc(d);
        a.rows       = cu_desc(d->src[1]);
        a.blocks_row = d->ne[0] / (cu_encoder<T>::QK * v);
        a.n_items    = a.blocks_row * d->src[1]->ne[1];
        return a;
    }
    template <int T, bool SM, int V> void go(const char * ip, int64_t in) const {
        const set_rows_args a = args<T>(dst, V), b = dst2 ? args<T>(dst2, V) : a;
        if (a.n_items == 0 && (!dst2 || b.n_items == 0)) return;
        const unsigned na = grid_for(a.n_items), nb = dst2 ? grid_for(b.n_items) : 0;
        const size_t   smem = SM ? static_cast<size_t>(dst->src[1]->ne[1]) * (sizeof(int32_t) + 1) : 0;
        cu_launch(ctx, set_rows_kernel<T, SM, V>, na + nb, k_threads, smem, a, b, na, ip, in, ctx.d_error);
    }
};

//
// CPY: chunks of 32 (decoded with the source codec, encoded with the destination encoder) or,
// between float types with odd rows, single elements.
//
template <int TS, int TD>
__global__ void cpy_chunk_kernel(cu_tensor src, cu_tensor dst, int64_t n_chunks_row, int64_t n_items) {
    cu_pdl_begin();
    constexpr int QK = cu_encoder<TD>::QK;
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / n_chunks_row;
        const int64_t c = idx % n_chunks_row;
        int64_t       i1, i2, i3;
        unflatten_row(dst, r, i1, i2, i3);
        float v[32];
        cu_codec<TS>::chunk(row_at(src, i1, i2, i3), c, v);
        char * y = row_at(dst, i1, i2, i3) + (32 * c / QK) * dst.nb[0];
#pragma unroll
        for (int j = 0; j < 32; j += QK) cu_encoder<TD>::block(v + j, y + (j / QK) * dst.nb[0]);
    }
}

template <int TS, int TD>
__global__ void cpy_elem_kernel(cu_tensor src, cu_tensor dst, int64_t n_items) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / dst.ne[0];
        const int64_t i = idx % dst.ne[0];
        int64_t       i1, i2, i3;
        unflatten_row(dst, r, i1, i2, i3);
        const float v = cu_codec<TS>::elem(row_at(src, i1, i2, i3), i);
        cu_encoder<TD>::block(&v, row_at(dst, i1, i2, i3) + i * dst.nb[0]);
    }
}

template <int TS> struct cpy_dst_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    template <int TD> void operator()() const {
        const int64_t rows = ember_nrows(dst);
        if (dst->ne[0] % 32 == 0) {
            const int64_t nc = dst->ne[0] / 32;
            cu_launch(ctx, cpy_chunk_kernel<TS, TD>, grid_for(rows * nc), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst), nc, rows * nc);
        } else {
            if constexpr ((TS == EMBER_TYPE_F32 || TS == EMBER_TYPE_F16 || TS == EMBER_TYPE_BF16) && cu_encoder<TD>::QK == 1) {
                cu_launch(ctx, cpy_elem_kernel<TS, TD>, grid_for(rows * dst->ne[0]), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst),
                                                                                               rows * dst->ne[0]);
            }
        }
    }
};

struct cpy_src_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    template <int TS> void operator()() const { cu_dispatch_encode_type(dst->type, cpy_dst_launch<TS>{ctx, dst}); }
};

__global__ void __launch_bounds__(256) copy16_kernel(const uint4 * __restrict__ src, uint4 * __restrict__ dst, int64_t n) {
    cu_pdl_begin();
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t       i      = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride), d = __ldcs(src + i + 3 * stride);
        __stcs(dst + i, a);
        __stcs(dst + i + stride, b);
        __stcs(dst + i + 2 * stride, c);
        __stcs(dst + i + 3 * stride, d);
    }
    for (; i < n; i += stride) __stcs(dst + i, __ldcs(src + i));
}

bool is_float_type(ember_type t) {
    return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_BF16;
}

struct scatter_args {
    const char *     base;
    ember_cuda_piece p[k_cuda_scatter_max];
    int              n;
};

// One block, the pieces in order (a barrier between them): decode inputs are a few KiB.
__global__ void __launch_bounds__(256) scatter_kernel(scatter_args a) {
    cu_pdl_begin();
    for (int k = 0; k < a.n; k++) {
        const char *   src  = a.base + a.p[k].at;
        char *         dst  = static_cast<char *>(a.p[k].dst);
        const uint32_t size = a.p[k].size;
        if (((reinterpret_cast<uintptr_t>(dst) | size) & 3) == 0) {  // (src: 256-byte ring offsets)
            for (uint32_t i = threadIdx.x; i < size / 4; i += blockDim.x) reinterpret_cast<int *>(dst)[i] = reinterpret_cast<const int *>(src)[i];
        } else {
            for (uint32_t i = threadIdx.x; i < size; i += blockDim.x) dst[i] = src[i];
        }
        __syncthreads();
    }
}

// Pieces that do not overlap, of whole aligned words (scatter_flat_ok): every piece's first 256
// words loaded before any is stored (one memory round trip for a decode step's inputs, where
// scatter_kernel waits for one a piece), longer pieces' rest after.
__global__ void __launch_bounds__(256) scatter_flat_kernel(scatter_args a) {
    cu_pdl_begin();
    const uint32_t t = threadIdx.x;
    int            v[k_cuda_scatter_max];
#pragma unroll
    for (int k = 0; k < k_cuda_scatter_max; k++) {
        v[k] = k < a.n && t < a.p[k].size / 4 ? reinterpret_cast<const int *>(a.base + a.p[k].at)[t] : 0;
    }
#pragma unroll
    for (int k = 0; k < k_cuda_scatter_max; k++) {
        if (k < a.n && t < a.p[k].size / 4) static_cast<int *>(a.p[k].dst)[t] = v[k];
    }
    for (int k = 0; k < a.n; k++) {
        const int * src = reinterpret_cast<const int *>(a.base + a.p[k].at);
        int *       dst = static_cast<int *>(a.p[k].dst);
        for (uint32_t i = t + 256; i < a.p[k].size / 4; i += 256) dst[i] = src[i];
    }
}

// Whether scatter_flat_kernel may copy the pieces: whole words at word addresses (the ring
// offsets are 256-byte aligned), no two destinations overlapping (then their order is moot).
bool scatter_flat_ok(const ember_cuda_piece * p, int n) {
    for (int k = 0; k < n; k++) {
        if (((reinterpret_cast<uintptr_t>(p[k].dst) | p[k].size | p[k].at) & 3) != 0) return false;
        const char * a = static_cast<const char *>(p[k].dst);
        for (int j = 0; j < k; j++) {
            const char * b = static_cast<const char *>(p[j].dst);
            if (a < b + p[j].size && b < a + p[k].size) return false;
        }
    }
    return true;
}

}  // namespace

// ctx.scatter_flat (default; EMBER_CUDA_SCATTER_FLAT=0: off; read at stream creation):
// scatter_flat_kernel where it may run. H200 kernel trace (tg32, critical path): 1B Q4_0 5.5 ->
// 4.3 us a token, 8B Q4_0 11.6 -> 10.9; tg128 level (2070.7 -> 2066.3, 593.7 -> 594.2: within the
// runs' spread). Its cases in the two queued-input GPU tests passed there (session 39).
ember_status ember_cuda_scatter(ember_cuda_ctx & ctx, const char * base, const ember_cuda_piece * pieces, int n) {
    if (n < 1 || n > k_cuda_scatter_max) return EMBER_ERR_INVALID_ARG;
    scatter_args a;
    a.base = base;
    a.n    = n;
    for (int k = 0; k < n; k++) a.p[k] = pieces[k];
    if (ctx.scatter_flat && scatter_flat_ok(pieces, n)) {
        cu_launch(ctx, scatter_flat_kernel, 1, 256, 0, a);
    } else {
        cu_launch(ctx, scatter_kernel, 1, 256, 0, a);
    }
    ctx.scatter_launch = ctx.n_launch;
    return ember_cuda_check_launch("queued inputs (scatter)");
}

bool ember_cuda_type_has_chunks(ember_type t) {
    switch (t) {
        case EMBER_TYPE_F32: case EMBER_TYPE_F16: case EMBER_TYPE_BF16: case EMBER_TYPE_Q4_0: case EMBER_TYPE_Q4_1:
        case EMBER_TYPE_Q5_0: case EMBER_TYPE_Q5_1: case EMBER_TYPE_Q8_0: case EMBER_TYPE_Q2_K: case EMBER_TYPE_Q3_K:
        case EMBER_TYPE_Q4_K: case EMBER_TYPE_Q5_K: case EMBER_TYPE_Q6_K: case EMBER_TYPE_IQ4_NL: case EMBER_TYPE_IQ4_XS:
        case EMBER_TYPE_INT4: case EMBER_TYPE_INT4_G32: case EMBER_TYPE_NF4: case EMBER_TYPE_FP8_E4M3: case EMBER_TYPE_FP8_E5M2:
        case EMBER_TYPE_FP8_E4M3_ROW: case EMBER_TYPE_FP8_E5M2_ROW:
            return true;
        default: return false;
    }
}

// The KV cache types (cu_dispatch_encode_type / cu_dispatch_elem_type).
bool ember_cuda_type_has_encoder(ember_type t) {
    return is_float_type(t) || t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
}

bool ember_cuda_type_has_elem(ember_type t) {
    return is_float_type(t) || t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
}

bool ember_cuda_supports_cpy(const ember_tensor * dst) {
    const ember_type ts = dst->src[0]->type, td = dst->type;
    if (!ember_cuda_type_has_chunks(ts) || !ember_cuda_type_has_encoder(td)) return false;
    if (dst->ne[0] % 32 == 0) return true;
    return is_float_type(ts) && is_float_type(td);
}

ember_status ember_cuda_get_rows(ember_cuda_ctx & ctx, ember_tensor * dst) {
    if (ember_nelements(dst) == 0) return EMBER_OK;
    if (ember_cuda_ext_layout(dst->src[0])) return ember_cuda_ext_get_rows(ctx, dst);  // Ember's types, CUDA layout
    if (!cu_dispatch_chunk_type(dst->src[0]->type, get_rows_launch{ctx, dst})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("get_rows");
}

ember_status ember_cuda_set_rows(ember_cuda_ctx & ctx, ember_tensor * dst) {
    return ember_cuda_set_rows_pair(ctx, dst, nullptr);
}

bool ember_cuda_set_rows_can_pair(const ember_tensor * a, const ember_tensor * b) {
    return a->op == EMBER_OP_SET_ROWS && b->op == EMBER_OP_SET_ROWS && a->type == b->type && a->src[2] == b->src[2] &&
           a->src[1]->ne[1] == b->src[1]->ne[1] && a->src[1]->ne[2] * a->src[1]->ne[3] == 1 && b->src[1]->ne[2] * b->src[1]->ne[3] == 1 &&
           a->ne[2] * a->ne[3] == 1 && b->ne[2] * b->ne[3] == 1;
}

ember_status ember_cuda_set_rows_pair(ember_cuda_ctx & ctx, ember_tensor * a, ember_tensor * b) {
    if (!cu_dispatch_encode_type(a->type, set_rows_launch{ctx, a, b})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("set_rows");
}

ember_status ember_cuda_cpy(ember_cuda_ctx & ctx, ember_tensor * dst) {
    if (ember_nelements(dst) == 0) return EMBER_OK;
    if (!ember_cuda_supports_cpy(dst)) return EMBER_ERR_UNSUPPORTED;
    const ember_tensor * src = dst->src[0];
    if (src->type == dst->type && ember_is_contiguous(src) && ember_is_contiguous(dst)) {
        // The same bytes. The chunk kernel (a thread per 32 values, strided) moved ~0.5 TB/s on
        // an H200, an eighth of a plain copy, and ember_device_copy_bandwidth measures through
        // this op; through it a cudaMemcpyAsync (a memcpy node in the replayed CUDA graph)
        // measured 2.7 TB/s where the same copy on a plain stream measures 4.2 (likely the copy
        // engines rather than the SMs). So: 16-byte words over a grid-stride loop, four loads in
        // flight per thread.
        const size_t n = ember_nbytes(dst);
        if (reinterpret_cast<uintptr_t>(src->data) % 16 == 0 && reinterpret_cast<uintptr_t>(dst->data) % 16 == 0 && n % 16 == 0) {
            const int64_t  words  = static_cast<int64_t>(n / 16);
            const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(2048, (words + 255) / 256));
            cu_launch(ctx, copy16_kernel, blocks, 256, 0, static_cast<const uint4 *>(src->data), static_cast<uint4 *>(dst->data), words);
            return ember_cuda_check_launch("cpy");
        }
        if (ctx.skip_now) return EMBER_OK;
        const cudaError_t e = cudaMemcpyAsync(dst->data, src->data, n, cudaMemcpyDeviceToDevice, ctx.stream);
        return e == cudaSuccess ? EMBER_OK : ember_cuda_check_launch("cpy");
    }
    if (!cu_dispatch_chunk_type(dst->src[0]->type, cpy_src_launch{ctx, dst})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("cpy");
}
