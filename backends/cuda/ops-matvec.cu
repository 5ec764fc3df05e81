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
#include "cuda-matvec-epi.cuh"
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

// What an F16 / BF16 launch's stores do besides writing y (EMBER_CUDA_F16_FUSE, the default):
// MVH_EPI, a layer's Q / K / V units (ember_cuda_mv_unit: each warp's two rows a RoPE pair, the
// rotated rows written into the KV cache, cuda-matvec-epi.cuh); MVH_GLU, a decode FFN's gate and up
// products with their SWIGLU (each warp gate's row r and up's row r, silu(g) u written).
enum mvh_mode { MVH_PLAIN = 0, MVH_EPI = 1, MVH_GLU = 2 };

struct mvh_fuse {
    mv_epi  epi[k_mvh_group];
    int     neox_hd[k_mvh_group] = {0, 0, 0};  // MVH_EPI: head size of a NEOX RoPE unit (its pairs' rows hd / 2 apart), else 0
    int *   err = nullptr;                      // MVH_EPI: a cache index out of range
    float * g = nullptr, * u = nullptr;         // MVH_GLU: gate's and up's floats, or nullptr (not stored)
    float * h = nullptr;                        // MVH_GLU: silu(g) u
};

// The body of the kernels below: R rows a warp (MVH_EPI, MVH_GLU: 2), U chunks of each row in
// flight a lane; f only for the fused modes.
template <int T, int R, int U, int MODE> __device__ __forceinline__ void mvh_body(const mvh_args & a, const mvh_fuse * f) {
    static_assert(MODE == MVH_PLAIN || R == 2, "the fused stores take a warp's rows as a pair");
    const int     lane = threadIdx.x % 32;
    const int     bx   = static_cast<int>(blockIdx.x);
    const int     m    = MODE == MVH_GLU ? 0 : (bx >= a.blk[1]) + (bx >= a.blk[2]);
    const int64_t n    = mvh_pick(a.n, m);
    // MVH_GLU: one hidden unit a warp (gate's row and up's); else R consecutive rows (a NEOX pair's
    // two rows hd / 2 apart: mv_rows).
    const int64_t row0 = (static_cast<int64_t>(bx - mvh_pick(a.blk, m)) * k_rows + threadIdx.x / 32) * (MODE == MVH_GLU ? 1 : R);
    if (row0 >= n) return;
    int64_t rows[R];
    if constexpr (MODE == MVH_EPI) {
        mv_rows<2>(row0, mvh_pick(f->neox_hd, m), rows);
    } else {
#pragma unroll
        for (int r = 0; r < R; r++) rows[r] = MODE == MVH_GLU ? row0 : row0 + r;
    }
    const uint4 * wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int     mr = MODE == MVH_GLU ? r : m;  // (MVH_GLU: row 0 gate's, row 1 up's)
        const int64_t rr = rows[r] < n ? rows[r] : n - 1;  // tail: read, discard
        wr[r]            = reinterpret_cast<const uint4 *>(mvh_pick(a.w, mr) + rr * mvh_pick(a.w_nb1, mr));
    }
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
    if constexpr (MODE == MVH_GLU) {  // (one column: ember_cuda_mv_f16_glu_ok)
        const float g = acc[0], u = acc[1];
        if (f->g) f->g[row0] = g;
        if (f->u) f->u[row0] = u;
        f->h[row0] = g / (1.0f + expf(-g)) * u;  // swiglu_flat_kernel's arithmetic
    } else if constexpr (MODE == MVH_EPI) {
        mv_store_epi_of3<2>(f->epi, m, mvh_pick(a.y, m), mvh_pick(a.y_nb1, m), n, blockIdx.y, rows, acc, f->err);
    } else {
        float * yc = reinterpret_cast<float *>(mvh_pick(a.y, m) + static_cast<int64_t>(blockIdx.y) * mvh_pick(a.y_nb1, m));
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (rows[r] < n) yc[rows[r]] = acc[r];
        }
    }
}

template <int T, int R, int U>
__global__ void __launch_bounds__(32 * k_rows) mvh_kernel(const mvh_args a) {
    mvh_body<T, R, U, MVH_PLAIN>(a, nullptr);
}

// The fused modes (EMBER_CUDA_F16_FUSE): two rows a warp, four chunks of each in flight a lane.
struct mvh_fused_args {
    mvh_args a;
    mvh_fuse f;
};
using mvh_fn_fused_t = void (*)(mvh_fused_args);
template <int T, int MODE>
__global__ void __launch_bounds__(32 * k_rows) mvh_fused_kernel(const mvh_fused_args p) {
    mvh_body<T, 2, k_mvh_u, MODE>(p.a, &p.f);
}

// mvh_kernel's forms (EMBER_CUDA_F16_FORM, session 67): rows a warp and chunks of each row in
// flight a lane; 0: 2 and 4 (the fused forms' shape), 1 (the default since session 69): 1 and 4,
// 2: 1 and 8, 3: 4 and 2. H100 tg128 (session 69, with the fusions): 8B F16 175.3 at 0, 177.9 at
// 1, 176.1 at 3; 1B 855.0 / 857.5 / 850.8 (the O and down launches 28.0 -> 26.9 us each on 8B).
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

// EMBER_CUDA_F16_GROUP: 1 (default) F16 / BF16 products over one x (Q, K, V; gate, up) in one
// launch (ember_cuda_mul_mat_vec_f16_group; with EMBER_CUDA_F16_FUSE, the units' launch), 0 each
// its own.
bool f16_group() {
    return ember_cuda_env_choice("EMBER_CUDA_F16_GROUP", 1, {0, 1}) == 1;
}

// EMBER_CUDA_F16_FUSE: 1 (default) a layer's F16 / BF16 Q / K / V products with their RoPE and KV
// cache writes in one launch (ember_cuda_mul_mat_vec_f16_units), and the FFN's gate / up products
// with their SWIGLU (ember_cuda_mul_mat_vec_f16_glu): three launches a layer fewer; 0 not. H100
// tg128 1B F16 734.5 -> 865.0 with EMBER_CUDA_F16_GROUP=1 (session 68, both off before). Read at
// every call (tests switch it).
bool f16_fuse() {
    return ember_cuda_env_choice("EMBER_CUDA_F16_FUSE", 1, {0, 1}) == 1;
}
// EMBER_CUDA_F16_GLU_MOVE=1 (testing): the gate / up launch's SWIGLU into scratch memory wherever
// only F16 / BF16 products read it, not only where its memory is over x's.
bool f16_glu_move_always() {
    return ember_cuda_env_choice("EMBER_CUDA_F16_GLU_MOVE", 0, {0, 1}) == 1;
}
std::atomic<long long> mvh_fused_launches{0};  // (ember_cuda_mv_f16_fused_launches)
std::atomic<long long> mvh_glu_moved{0};       // gate / up launches whose SWIGLU went to scratch (ember_cuda_mv_f16_glu_moved)

// a's matrices: dsts[0..nd), products mvh_ok takes over one x, weights of one type and width,
// rows_a_warp rows a warp. Returns the launch's blocks (> INT_MAX: too many).
// x's floats: at its memory, or where an F16 gate / up launch left them (ctx.h_t).
int64_t mvh_fill(const ember_cuda_ctx & ctx, mvh_args & a, ember_tensor * const * dsts, int nd, int rows_a_warp) {
    const ember_tensor * w0 = dsts[0]->src[0];
    const ember_tensor * x  = dsts[0]->src[1];
    const bool           hx = ctx.h_t && ctx.h_t == x && ctx.h_graph == ctx.graph_now;
    a.x                     = static_cast<const char *>(hx ? ctx.h_buf : x->data);
    a.x_nb1                 = static_cast<int64_t>(x->nb[1]);
    a.nchunk                = static_cast<int>(w0->ne[0] / 8);
    int64_t blocks          = 0;
    for (int m = 0; m < k_mvh_group; m++) {
        a.blk[m] = m < nd && blocks <= INT_MAX ? static_cast<int>(blocks) : INT_MAX;
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
    return blocks;
}

// dsts[0..nd): products mvh_ok takes, over one x, weights of one type and width.
ember_status mvh_launch(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd) {
    const ember_tensor * w0 = dsts[0]->src[0];
    const ember_tensor * x  = dsts[0]->src[1];
    mvh_args             a;
    const int            form   = ember_cuda_env_choice("EMBER_CUDA_F16_FORM", 1, {0, 1, 2, 3});  // (k_mvh_forms)
    const int64_t        blocks = mvh_fill(ctx, a, dsts, nd, k_mvh_forms[form].rows);
    if (blocks > INT_MAX) return EMBER_ERR_UNSUPPORTED;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(x->ne[1]), 1);
    cu_launch(ctx, mvh_kernel_for(w0->type, form), grid, 32 * k_rows, 0, a);
    mvh_launches.fetch_add(1, std::memory_order_relaxed);
    return ember_cuda_check_launch("mul_mat (matvec f16 / bf16, 16-byte loads)");
}

template <int MODE> mvh_fn_fused_t mvh_fused_for(ember_type t) {
    return t == EMBER_TYPE_F16 ? mvh_fused_kernel<EMBER_TYPE_F16, MODE> : mvh_fused_kernel<EMBER_TYPE_BF16, MODE>;
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

long long ember_cuda_mv_f16_fused_launches() {
    return mvh_fused_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_mv_f16_glu_moved() {
    return mvh_glu_moved.load(std::memory_order_relaxed);
}

bool ember_cuda_mv_f16_fuse_on(const ember_tensor * mm) {
    return mm && mm->op == EMBER_OP_MUL_MAT && mm->src[1]->ne[1] <= EMBER_CUDA_MATVEC_MAX_COLS && mvh_ok(mm) && f16_fuse();
}

bool ember_cuda_mv_f16_unit_ok(const ember_cuda_mv_unit & u) {
    return ember_cuda_mv_f16_fuse_on(u.mm) && ember_cuda_mv_unit_shape_ok(u);
}

// As ember_cuda_mul_mat_vec_f16_can_group without the memory checks (the unit planner checks
// what the units really write).
bool ember_cuda_mul_mat_vec_f16_can_share(const ember_tensor * a, const ember_tensor * b) {
    if (a->op != EMBER_OP_MUL_MAT || b->op != EMBER_OP_MUL_MAT || a == b || a->src[1] != b->src[1] || b->src[0] == a) return false;
    return a->src[0]->type == b->src[0]->type && a->src[0]->ne[0] == b->src[0]->ne[0] && ember_cuda_mv_f16_fuse_on(a) &&
           ember_cuda_mv_f16_fuse_on(b) && f16_group();
}

ember_status ember_cuda_mul_mat_vec_f16_units(ember_cuda_ctx & ctx, const ember_cuda_mv_unit * units, int nd) {
    if (nd < 1 || nd > k_mvh_group) return EMBER_ERR_INVALID_ARG;
    ember_tensor * dsts[k_mvh_group];
    for (int m = 0; m < nd; m++) {
        if (!ember_cuda_mv_f16_unit_ok(units[m]) || (m > 0 && !ember_cuda_mul_mat_vec_f16_can_share(units[0].mm, units[m].mm))) {
            return EMBER_ERR_INTERNAL;  // (the planner asked the same hooks)
        }
        dsts[m] = units[m].mm;
    }
    mvh_fused_args p;
    const int64_t  blocks = mvh_fill(ctx, p.a, dsts, nd, 2);
    if (blocks > INT_MAX) return EMBER_ERR_UNSUPPORTED;
    for (int m = 0; m < nd; m++) {
        const ember_tensor * r = units[m].rope;
        p.f.epi[m]             = mv_epi_of(units[m]);
        p.f.neox_hd[m]         = r && r->op_params[1] == EMBER_ROPE_NEOX ? static_cast<int>(r->ne[0]) : 0;
    }
    p.f.err      = ctx.d_error;
    ctx.qx_valid = false;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(dsts[0]->src[1]->ne[1]), 1);
    cu_launch(ctx, mvh_fused_for<MVH_EPI>(dsts[0]->src[0]->type), grid, 32 * k_rows, 0, p);
    mvh_fused_launches.fetch_add(1, std::memory_order_relaxed);
    return ember_cuda_check_launch("mul_mat units (matvec f16 / bf16 with RoPE and cache writes)");
}

bool ember_cuda_mv_f16_glu_ok(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu) {
    if (!gate || !up || !glu || glu->op != EMBER_OP_SWIGLU || glu->src[0] != gate || glu->src[1] != up || gate == up) return false;
    if (!ember_cuda_mv_f16_fuse_on(gate) || !ember_cuda_mv_f16_fuse_on(up) || gate->src[1] != up->src[1]) return false;
    const ember_tensor * wg = gate->src[0];
    const ember_tensor * wu = up->src[0];
    const ember_tensor * x  = gate->src[1];
    const int64_t        n  = wg->ne[1];
    if (wg->type != wu->type || wg->ne[0] != wu->ne[0] || wu->ne[1] != n || n > INT_MAX / 2 || x->ne[1] * x->ne[2] * x->ne[3] != 1) return false;
    const auto vec_ok = [n](const ember_tensor * t) {  // one contiguous F32 row of n
        return t->type == EMBER_TYPE_F32 && t->ne[0] == n && ember_nelements(t) == n && t->nb[0] == sizeof(float) && t->data;
    };
    return vec_ok(gate) && vec_ok(up) && vec_ok(glu) && !ember_cuda_overlaps(gate, x) && !ember_cuda_overlaps(up, x);
}

ember_status ember_cuda_mul_mat_vec_f16_glu(ember_cuda_ctx & ctx, ember_tensor * gate, ember_tensor * up, ember_tensor * glu, bool store_gu,
                                            bool h_scratch_ok) {
    if (!ember_cuda_mv_f16_glu_ok(gate, up, glu)) return EMBER_ERR_UNSUPPORTED;
    ember_tensor * dsts[2] = {gate, up};
    mvh_fused_args p;
    mvh_fill(ctx, p.a, dsts, 2, 2);  // (the matrices; the kernel takes one hidden unit a warp from matrix 0's blocks)
    const int64_t n = gate->ne[0];
    p.f.g           = store_gu ? static_cast<float *>(gate->data) : nullptr;
    p.f.u           = store_gu ? static_cast<float *>(up->data) : nullptr;
    p.f.h           = static_cast<float *>(glu->data);
    // glu's memory over x's (placed there once up has read x): a block would write silu(g) u over
    // the x another still reads. Then into scratch slot 2, where its readers find it (mvh_fill).
    // (x itself in slot 2, another such launch's result: read there, x's memory unread, nothing to move.)
    const bool x_in_h = p.a.x != static_cast<const char *>(gate->src[1]->data);
    const bool over_x = !x_in_h && (ember_cuda_overlaps(glu, gate->src[1]) || (h_scratch_ok && f16_glu_move_always()));
    if (over_x) {
        void * buf = h_scratch_ok ? ember_cuda_scratch(ctx, 2, static_cast<size_t>(n) * sizeof(float)) : nullptr;
        if (!buf) return EMBER_ERR_UNSUPPORTED;  // (or recording with slot 2 too small: the plain launches)
        p.f.h = static_cast<float *>(buf);
    }
    ctx.qx_valid = false;
    cu_launch(ctx, mvh_fused_for<MVH_GLU>(gate->src[0]->type), static_cast<unsigned>(cu_blocks(n, k_rows)), 32 * k_rows, 0, p);
    mvh_fused_launches.fetch_add(1, std::memory_order_relaxed);
    const ember_status st = ember_cuda_check_launch("mul_mat x 2 + swiglu (decode, F16 / BF16 gate / up with the SWIGLU)");
    if (st == EMBER_OK && over_x) {
        mvh_glu_moved.fetch_add(1, std::memory_order_relaxed);
        ctx.h_t     = glu;
        ctx.h_buf   = p.f.h;
        ctx.h_graph = ctx.graph_now;
    }
    return st;
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
