// MUL_MAT for few columns (decode): fused dequantize + matrix-vector product, one warp per
// weight row, k_rows rows per block; grid.y walks the columns of x, grid.z the batch
// matrices. Quantized rows are read 32 weights (one chunk) per lane step, float rows one
// element per lane step (coalesced). Activations stay F32 (the CPU rounds them to the
// weight's vec_dot_type first; the difference is within the conformance tolerances).
// This is the generic path, for the types without an integer kernel in ops-matvec-q.cu (or,
// for Ember's own types, in ops-matvec-ext.cu).
#include <atomic>
#include <climits>
#include <utility>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-ext.h"

namespace {

constexpr int k_rows = 4;

struct mv_args {
    const char * w;
    int64_t      w_nb1, w_nb2, w_nb3;
    int64_t      bcast2, bcast3;
    cu_tensor    x;
    cu_tensor    y;
    int64_t      k, n;
};

template <int T, bool CHUNKED>
__global__ void __launch_bounds__(32 * k_rows) matvec_kernel(mv_args a) {
    cu_pdl_begin();
    const int64_t row = static_cast<int64_t>(blockIdx.x) * k_rows + threadIdx.y;
    if (row >= a.n) return;
    const int64_t col = blockIdx.y;
    const int64_t i2  = blockIdx.z % a.x.ne[2];
    const int64_t i3  = blockIdx.z / a.x.ne[2];
    const int     lane = threadIdx.x;
    const char *  wr   = a.w + row * a.w_nb1 + (i2 / a.bcast2) * a.w_nb2 + (i3 / a.bcast3) * a.w_nb3;
    const float * xc   = reinterpret_cast<const float *>(a.x.data + col * a.x.nb[1] + i2 * a.x.nb[2] + i3 * a.x.nb[3]);
    float         sum  = 0.0f;
    if constexpr (CHUNKED) {
        const int64_t nc = a.k / 32;
        for (int64_t c = lane; c < nc; c += 32) {
            float v[32];
            cu_codec<T>::chunk(wr, c, v);
            const float * xs = xc + 32 * c;
#pragma unroll
            for (int j = 0; j < 32; j++) sum += v[j] * xs[j];
        }
    } else {
        for (int64_t i = lane; i < a.k; i += 32) sum += cu_codec<T>::elem(wr, i) * xc[i];
    }
    sum = cu_warp_sum(sum);
    if (lane == 0) {
        float * yc = reinterpret_cast<float *>(a.y.data + col * a.y.nb[1] + i2 * a.y.nb[2] + i3 * a.y.nb[3]);
        yc[row]    = sum;
    }
}

struct matvec_launch {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    template <int T> void operator()() const {
        const ember_tensor * w = dst->src[0];
        const ember_tensor * x = dst->src[1];
        mv_args              a;
        a.w      = static_cast<const char *>(w->data);
        a.w_nb1  = static_cast<int64_t>(w->nb[1]);
        a.w_nb2  = static_cast<int64_t>(w->nb[2]);
        a.w_nb3  = static_cast<int64_t>(w->nb[3]);
        a.bcast2 = x->ne[2] / w->ne[2];
        a.bcast3 = x->ne[3] / w->ne[3];
        a.x      = cu_desc(x);
        a.y      = cu_desc(dst);
        a.k      = w->ne[0];
        a.n      = w->ne[1];
        const dim3 grid(cu_blocks(a.n, k_rows), static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
        const dim3 block(32, k_rows);
        constexpr bool is_float = T == EMBER_TYPE_F32 || T == EMBER_TYPE_F16 || T == EMBER_TYPE_BF16;
        if constexpr (is_float) {
            cu_launch(ctx, matvec_kernel<T, false>, grid, block, 0, a);
        } else {
            cu_launch(ctx, matvec_kernel<T, true>, grid, block, 0, a);
        }
    }
};

// F16 / BF16 rows with 16-byte loads (EMBER_CUDA_F16_WIDE=1; the generic kernel above reads one
// 2-byte element a lane step, its load after the PDL wait): each warp takes R rows, its lanes
// consecutive 16-byte chunks of 8 weights (a warp load covers 512 contiguous bytes), U chunks of
// each row in flight per lane, the first ones requested before cu_pdl_begin() (weights only); x's
// 8 floats of a chunk (two 16-byte loads) serve the R rows. Products and sums in float (x not
// rounded to the weight's type, as the generic kernel). 2-D weights and x (one matrix; columns
// on grid.y), rows of a multiple of 8 weights, weights' and x's rows 16-byte aligned.
constexpr int k_mvh_rows = 2, k_mvh_u = 4;

// Up to k_mvh_group matrices over one x in one launch (Q, K, V; gate, up: EMBER_CUDA_F16_GROUP):
// matrix m's blocks start at blk[m] (blk[m] = INT_MAX past the last matrix).
constexpr int k_mvh_group = 3;

struct mvh_args {
    const char * w[k_mvh_group];
    int64_t      w_nb1[k_mvh_group];
    char *       y[k_mvh_group];
    int64_t      y_nb1[k_mvh_group];
    int64_t      n[k_mvh_group];
    int          blk[k_mvh_group];  // blk[0] = 0
    const char * x;
    int64_t      x_nb1;
    int          nchunk;  // 8-weight chunks a row (every matrix's)
};

// A member of a's matrices by a runtime index, without indexing the parameter arrays (selects).
template <typename V> __device__ __forceinline__ V mvh_pick(const V (&v)[k_mvh_group], int m) {
    return m == 0 ? v[0] : m == 1 ? v[1] : v[2];
}

// Sum over a chunk: w's 8 weights (4 words of two) times x's 8 floats.
template <int T> __device__ __forceinline__ float2 mvh_pair(uint32_t v) {
    if constexpr (T == EMBER_TYPE_F16) {
        return __half22float2(*reinterpret_cast<const __half2 *>(&v));
    } else {  // BF16: the high half word is the second weight
        return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
    }
}
template <int T> __device__ __forceinline__ float mvh_dot8(const uint4 & w, const float4 & x0, const float4 & x1, float acc) {
    const float2 a = mvh_pair<T>(w.x), b = mvh_pair<T>(w.y), c = mvh_pair<T>(w.z), d = mvh_pair<T>(w.w);
    acc            = fmaf(a.x, x0.x, acc);
    acc            = fmaf(a.y, x0.y, acc);
    acc            = fmaf(b.x, x0.z, acc);
    acc            = fmaf(b.y, x0.w, acc);
    acc            = fmaf(c.x, x1.x, acc);
    acc            = fmaf(c.y, x1.y, acc);
    acc            = fmaf(d.x, x1.z, acc);
    acc            = fmaf(d.y, x1.w, acc);
    return acc;
}

template <int T, int R, int U>
__global__ void __launch_bounds__(32 * k_rows) mvh_kernel(const mvh_args a) {
    const int     lane = threadIdx.x % 32;
    const int     bx   = static_cast<int>(blockIdx.x);
    const int     m    = (bx >= a.blk[1]) + (bx >= a.blk[2]);
    const int64_t n    = mvh_pick(a.n, m);
    const int64_t row0 = (static_cast<int64_t>(bx - mvh_pick(a.blk, m)) * k_rows + threadIdx.x / 32) * R;
    if (row0 >= n) return;
    const char *  wm   = mvh_pick(a.w, m);
    const int64_t w_nb1 = mvh_pick(a.w_nb1, m);
    const uint4 * wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = reinterpret_cast<const uint4 *>(wm + (row0 + r < n ? row0 + r : n - 1) * w_nb1);  // tail: read, discard
    const int nchunk = a.nchunk;
    uint4     w[U][R];
    const auto load = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int  c  = c0 + 32 * u;
            const bool ok = c < nchunk;
#pragma unroll
            for (int r = 0; r < R; r++) w[u][r] = ok ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
        }
    };
    load(lane);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    const float4 * xc     = reinterpret_cast<const float4 *>(a.x + static_cast<int64_t>(blockIdx.y) * a.x_nb1);
    float          acc[R] = {};
    for (int c0 = lane; c0 < nchunk; c0 += 32 * U) {
        if (c0 != lane) load(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= nchunk) continue;
            const float4 x0 = __ldg(xc + 2 * c), x1 = __ldg(xc + 2 * c + 1);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = mvh_dot8<T>(w[u][r], x0, x1, acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = cu_warp_sum(acc[r]);
    if (lane != 0) return;
    float * yc = reinterpret_cast<float *>(mvh_pick(a.y, m) + static_cast<int64_t>(blockIdx.y) * mvh_pick(a.y_nb1, m));
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r < n) yc[row0 + r] = acc[r];
    }
}

// mvh_kernel's forms (EMBER_CUDA_F16_FORM, measuring, session 67): rows a warp and chunks of
// each row in flight a lane; 0 (the default) 2 and 4, 1: 1 and 4, 2: 1 and 8, 3: 4 and 2.
struct mvh_form {
    int rows, u;
};
constexpr mvh_form k_mvh_forms[] = {{k_mvh_rows, k_mvh_u}, {1, 4}, {1, 8}, {4, 2}};
constexpr int      k_mvh_nforms  = static_cast<int>(sizeof(k_mvh_forms) / sizeof(k_mvh_forms[0]));
using mvh_fn = void (*)(mvh_args);
template <int T, size_t... F> mvh_fn mvh_form_kernel(int form, std::index_sequence<F...>) {
    static const mvh_fn kernels[] = {mvh_kernel<T, k_mvh_forms[F].rows, k_mvh_forms[F].u>...};
    return kernels[form];
}
// mvh_kernel of weight type t (F16 / BF16) in form `form` (< k_mvh_nforms).
mvh_fn mvh_kernel_for(ember_type t, int form) {
    constexpr auto forms = std::make_index_sequence<k_mvh_nforms>();
    return t == EMBER_TYPE_F16 ? mvh_form_kernel<EMBER_TYPE_F16>(form, forms) : mvh_form_kernel<EMBER_TYPE_BF16>(form, forms);
}

// EMBER_CUDA_F16_WIDE: 1 (default) F16 / BF16 decode products through mvh_kernel where its
// conditions hold (mvh_ok); 0 the generic kernel. H200 tg128 1B F16 855.8 against 526.8, 8B 191.3
// against 142.8 (session 67). Read at every call (tests switch it).
bool f16_wide() {
    return ember_cuda_env_choice("EMBER_CUDA_F16_WIDE", 1, {0, 1}) == 1;
}
std::atomic<long long> mvh_launches{0};  // (ember_cuda_mv_f16_wide_launches)

bool mvh_ok(const ember_tensor * dst) {
    const ember_tensor * w = dst->src[0];
    const ember_tensor * x = dst->src[1];
    const auto a16 = [](const void * p, size_t nb) { return ((reinterpret_cast<uintptr_t>(p) | nb) & 15) == 0; };
    return (w->type == EMBER_TYPE_F16 || w->type == EMBER_TYPE_BF16) && x->type == EMBER_TYPE_F32 && dst->type == EMBER_TYPE_F32 &&
           w->ne[0] % 8 == 0 && w->ne[0] / 8 < INT32_MAX && w->ne[2] * w->ne[3] == 1 && x->ne[2] * x->ne[3] == 1 &&
           w->nb[0] == 2 && x->nb[0] == sizeof(float) && dst->nb[0] == sizeof(float) && a16(w->data, w->nb[1]) &&
           a16(x->data, x->nb[1]) && f16_wide();
}

// EMBER_CUDA_F16_GROUP=1 (measuring, session 67): F16 / BF16 products over one x (Q, K, V; gate,
// up) in one launch (ember_cuda_mul_mat_vec_f16_group).
bool f16_group() {
    return ember_cuda_env_choice("EMBER_CUDA_F16_GROUP", 0, {0, 1}) == 1;
}

// dsts[0..nd): products mvh_ok takes, over one x, weights of one type and width.
ember_status mvh_launch(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd) {
    const ember_tensor * w0 = dsts[0]->src[0];
    const ember_tensor * x  = dsts[0]->src[1];
    mvh_args             a;
    a.x      = static_cast<const char *>(x->data);
    a.x_nb1  = static_cast<int64_t>(x->nb[1]);
    a.nchunk = static_cast<int>(w0->ne[0] / 8);
    const int  form        = ember_cuda_env_choice("EMBER_CUDA_F16_FORM", 0, {0, 1, 2, 3});  // (k_mvh_forms)
    const int  rows_a_warp = k_mvh_forms[form].rows;
    int64_t    blocks      = 0;
    for (int m = 0; m < k_mvh_group; m++) {
        a.blk[m] = m < nd ? static_cast<int>(blocks) : INT_MAX;
        if (m >= nd) {
            a.w[m] = nullptr, a.y[m] = nullptr, a.w_nb1[m] = a.y_nb1[m] = a.n[m] = 0;
            continue;
        }
        const ember_tensor * w = dsts[m]->src[0];
        a.w[m]                 = static_cast<const char *>(w->data);
        a.w_nb1[m]             = static_cast<int64_t>(w->nb[1]);
        a.y[m]                 = static_cast<char *>(dsts[m]->data);
        a.y_nb1[m]             = static_cast<int64_t>(dsts[m]->nb[1]);
        a.n[m]                 = w->ne[1];
        blocks += cu_blocks(a.n[m], k_rows * rows_a_warp);
    }
    if (blocks > INT_MAX) return EMBER_ERR_UNSUPPORTED;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(x->ne[1]), 1);
    cu_launch(ctx, mvh_kernel_for(w0->type, form), grid, 32 * k_rows, 0, a);
    mvh_launches.fetch_add(1, std::memory_order_relaxed);
    return ember_cuda_check_launch("mul_mat (matvec f16 / bf16, 16-byte loads)");
}

}  // namespace

long long ember_cuda_mv_f16_wide_launches() {
    return mvh_launches.load(std::memory_order_relaxed);
}

// Whether b can share a's launch (ember_cuda_mul_mat_vec_f16_group): both F16 / BF16 products
// mvh_kernel takes (mvh_ok), over the same x, with weights of one type and width, neither
// writing x or the other's memory (EMBER_CUDA_F16_GROUP=1).
bool ember_cuda_mul_mat_vec_f16_can_group(const ember_tensor * a, const ember_tensor * b) {
    if (a->op != EMBER_OP_MUL_MAT || b->op != EMBER_OP_MUL_MAT || a == b || a->src[1] != b->src[1] || b->src[0] == a) return false;
    if (a->src[0]->type != b->src[0]->type || a->src[0]->ne[0] != b->src[0]->ne[0] || !mvh_ok(a) || !mvh_ok(b) || !f16_group()) return false;
    const ember_tensor * x = a->src[1];
    if (x->ne[1] > EMBER_CUDA_MATVEC_MAX_COLS) return false;
    return !ember_cuda_overlaps(a, x) && !ember_cuda_overlaps(b, x) && !ember_cuda_overlaps(a, b);
}

ember_status ember_cuda_mul_mat_vec_f16_group(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd) {
    if (nd < 1 || nd > k_mvh_group) return EMBER_ERR_INVALID_ARG;
    ctx.qx_valid = false;  // (as ember_cuda_mul_mat_vec before its one-product launch)
    return mvh_launch(ctx, dsts, nd);
}

ember_status ember_cuda_mul_mat_vec(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * x = dst->src[1];
    if (x->ne[1] > 65535 || x->ne[2] * x->ne[3] > 65535) return EMBER_ERR_UNSUPPORTED;
    if (ember_nelements(dst) == 0) return EMBER_OK;
    // Ember's types in the CUDA ext layout: ops-matvec-ext.cu (the only reader of that layout).
    if (ember_cuda_ext_layout(dst->src[0])) {
        return ember_cuda_mul_mat_vec_ext_supported(dst) ? ember_cuda_mul_mat_vec_ext(ctx, &dst, 1) : EMBER_ERR_UNSUPPORTED;
    }
    if (ember_cuda_mul_mat_vec_q_supported(dst)) return ember_cuda_mul_mat_vec_q(ctx, dst);
    if (dst->src[0]->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) return EMBER_ERR_UNSUPPORTED;  // only the kernel above reads it
    ctx.qx_valid = false;
    if (mvh_ok(dst)) return mvh_launch(ctx, &dst, 1);
    if (!cu_dispatch_chunk_type(dst->src[0]->type, matvec_launch{ctx, dst})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("mul_mat (matvec)");
}
