// MUL_MAT: y[n, m] = sum_k W[k, n] * x[k, m], with llama.cpp arithmetic: each column of x is
// first converted to the weight type's vec_dot_type (F32 stays F32, F16 rounds to F16,
// Q4_0/Q8_0 quantize to Q8_0), then the kernel table's vec_dot (or gemm) gives each output.
//
// W [k, n, w2, w3] (any type with vec_dot), x F32 [k, m, x2, x3] -> y F32 [n, m, x2, x3];
// W's batch dims broadcast over x's (x2 % w2 == 0, x3 % w3 == 0).
//
// Every kernel comes from the active table (ember_cpu_kernels()), so the ISA files' vec_dot,
// from_float and gemm cells are used as soon as they are registered. Phases:
//   1. the columns of x are converted to vec_dot_type, split across threads;
//   2a. one column per matrix (decode): the output rows are cut into chunks of about
//       k_chunk_bytes of weights, handed out dynamically by ember_cpu_claim_chunk (a static
//       split leaves one thread waiting whenever the other is slowed or preempted; measured
//       with EMBER_PROFILE=1 as milliseconds of barrier wait per 1B-model token); each row is
//       one vec_dot (a few rows per step, so the activation stays in L1). With at most
//       k_private_cols columns every thread converts all of them into its own slice of the
//       work buffer (a few microseconds at most), so decode needs no barrier inside the node;
//   2b. several columns (prefill): the output is cut into tiles of rows x columns sized for
//       L2, handed out dynamically through an atomic counter at the start of the work buffer;
//       a tile is one call of the type's gemm cell when it has one, else vec_dot per output.
// Weight rows are addressed through nb[1..3] only (row-group types have rows of
// ember_row_size bytes, not ne0 / block_size blocks).
// Weights flagged EMBER_TENSOR_FLAG_CPU_REPACKED (repack.h) are in 16-row groups: decode
// chunks are whole groups for the type's gemv_r16 kernel (with the column's block sums next
// to the converted column), and prefill turns each tile's groups back into plain rows in a
// per-thread area after the converted columns before the usual GEMM.
#include <atomic>
#include <new>

#include "cpu-ops.h"
#include "kernels.h"
#include "repack.h"

namespace {

// The tile counter lives in the first cache line of the work buffer; the converted columns
// follow it.
constexpr size_t k_header = EMBER_CPU_CACHE_LINE;

// Prefill tiles: rows x columns per tile. Rows are a multiple of the gemm kernels' row group
// (16) so only the last tile of a matrix has a partial group; columns are chosen so one
// tile's converted activations stay in L2 (see cols_per_tile).
constexpr int64_t k_tile_rows        = 128;
constexpr int64_t k_tile_cols_max    = 128;
constexpr size_t  k_tile_x_bytes_max = 256 * 1024;
// Below this many columns the gemm kernels (which repack weight rows per tile) lose to
// plain vec_dot calls.
constexpr int64_t k_gemm_min_cols = 4;
// Decode chunks: big enough that taking one (an atomic add) costs little next to streaming its
// weights, small enough that a matrix has several per thread.
constexpr size_t  k_chunk_bytes      = 32 * 1024;
constexpr int64_t k_chunks_per_thread = 4;
// Decode with at most this many columns converts them privately per thread (no barrier).
constexpr int64_t k_private_cols = 4;

bool private_columns(const ember_tensor * x) {
    return x->ne[1] == 1 && ember_nrows(x) <= k_private_cols;
}

// Rows per decode chunk for n rows of row_bytes bytes: a multiple of `unit` (4, or 16 for
// repacked groups).
int64_t rows_per_chunk(int64_t n, size_t row_bytes, int nth, int64_t unit) {
    int64_t r = row_bytes > 0 ? static_cast<int64_t>(k_chunk_bytes / row_bytes) : n;
    const int64_t even = (n + nth * k_chunks_per_thread - 1) / (nth * k_chunks_per_thread);
    if (r > even) r = even;
    r = (r + unit - 1) / unit * unit;
    return r < unit ? unit : r;
}

bool repacked(const ember_tensor * w) {
    return (w->flags & EMBER_TENSOR_FLAG_CPU_REPACKED) != 0;
}

// Q8_0 activations of repacked weights come with their block sums (ember_cpu_q8_sums); Q8_K
// has its own.
bool needs_sums(const ember_tensor * w) {
    return repacked(w) && ember_type_get_traits(w->type)->vec_dot_type == EMBER_TYPE_Q8_0;
}

// Bytes of block sums after a converted column (repacked decode).
size_t sums_size(const ember_tensor * w) {
    return needs_sums(w) ? ember_cpu_pad(static_cast<size_t>(w->ne[0] / 32) * sizeof(ember_cpu_q8_sum)) : 0;
}

// Bytes of one thread's area after the shared converted columns (repacked weights): an
// unrepacked tile (prefill) or the block sums of every column (decode without private
// columns).
size_t thread_area_size(const ember_tensor * w, const ember_tensor * x) {
    if (!repacked(w)) return 0;
    const size_t tile = ember_cpu_pad(k_tile_rows * w->nb[1]);
    const size_t sums = sums_size(w) * (size_t) ember_nrows(x);
    return tile > sums ? tile : sums;
}

int64_t cols_per_tile(int64_t m, size_t col_bytes) {
    int64_t c = col_bytes > 0 ? static_cast<int64_t>(k_tile_x_bytes_max / col_bytes) : k_tile_cols_max;
    if (c > k_tile_cols_max) c = k_tile_cols_max;
    if (c < 8) c = 8;
    return c < m ? c : m;
}

// vec_dot over a tile: rows [r0, r1) x columns [0, nc).
void tile_vec_dot(ember_vec_dot_fn vec_dot, int64_t k, int64_t r0, int64_t r1, int64_t nc, const char * w,
                  size_t w_stride, const char * x, size_t x_stride, float * y, size_t y_stride) {
    for (int64_t c = 0; c < nc; c++) {
        const char * xc = x + c * x_stride;
        float *      yc = y + c * y_stride;
        for (int64_t r = r0; r < r1; r++) vec_dot(k, &yc[r], w + r * w_stride, xc);
    }
}

}  // namespace

bool ember_cpu_supports_mul_mat(const ember_tensor * dst) {
    const ember_cpu_kernel_table * kt = ember_cpu_kernels();
    const ember_type_traits *      tw = ember_type_get_traits(dst->src[0]->type);
    if (!tw || !kt->of(dst->src[0]->type).vec_dot) return false;
    if (repacked(dst->src[0]) && !kt->of(dst->src[0]->type).gemv_r16) return false;
    if (tw->vec_dot_type != EMBER_TYPE_F32 && !kt->of(tw->vec_dot_type).from_float) return false;
    return dst->src[1]->type == EMBER_TYPE_F32 && dst->type == EMBER_TYPE_F32;
}

bool ember_cpu_mul_mat_private(const ember_tensor * dst) {
    return private_columns(dst->src[1]);
}

// The tile counter, then one vec_dot_type row per column of x (in thread slots, one set per
// thread, when the columns are converted privately).
size_t ember_cpu_mul_mat_work_size(const ember_tensor * dst, int n_threads) {
    const ember_tensor * w  = dst->src[0];
    const ember_tensor * x  = dst->src[1];
    const ember_type     vt = ember_type_get_traits(w->type)->vec_dot_type;
    if (vt == EMBER_TYPE_F32) return k_header;  // x rows are used as they are
    const size_t cols = ember_row_size(vt, x->ne[0]) * (size_t) ember_nrows(x);
    if (private_columns(x)) return ember_cpu_slots_size(ember_cpu_pad(cols) + sums_size(w) * (size_t) ember_nrows(x), n_threads);
    return k_header + ember_cpu_pad(cols) + (size_t) (n_threads > 0 ? n_threads : 1) * thread_area_size(w, x);
}

void ember_cpu_mul_mat(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *           w       = dst->src[0];
    const ember_tensor *           x       = dst->src[1];
    const ember_cpu_kernel_table * kt      = ember_cpu_kernels();
    const ember_cpu_type_kernels & kw      = kt->of(w->type);
    const ember_type               vt      = ember_type_get_traits(w->type)->vec_dot_type;
    const int64_t                  k       = w->ne[0];
    const int64_t                  n       = w->ne[1];
    const int64_t                  m       = x->ne[1];
    const int64_t                  x2      = x->ne[2];
    const int64_t                  x3      = x->ne[3];
    const bool                     convert = vt != EMBER_TYPE_F32;
    const size_t                   rs      = convert ? ember_row_size(vt, k) : 0;  // bytes of one converted column
    const bool                     priv    = private_columns(x);
    char *                         xconv   = priv ? ember_cpu_thread_slot(p->wdata, p->wsize, p->ith, p->nth)
                                                  : static_cast<char *>(p->wdata) + k_header;
    const int64_t                  bcast2  = x2 / w->ne[2];
    const int64_t                  bcast3  = x3 / w->ne[3];
    const bool                     prefill = m > 1;
    std::atomic<int64_t> *         counter = static_cast<std::atomic<int64_t> *>(p->wdata);

    // Phase 1: convert the columns of x, split across threads (or all of them by every thread,
    // privately). The prefill tile counter is reset here: every thread has left the previous
    // node (the stream's barrier), and the barrier below publishes the reset before any thread
    // takes a tile.
    if (prefill && p->ith == 0) new (p->wdata) std::atomic<int64_t>(p->nth);
    if (convert) {
        const ember_from_float_fn from_float = kt->of(vt).from_float;
        int64_t                   c0 = 0, c1 = ember_nrows(x);
        if (!priv) ember_cpu_split_rows(ember_nrows(x), p->ith, p->nth, &c0, &c1);
        for (int64_t ic = c0; ic < c1; ic++) {
            const int64_t i3 = ic / (m * x2);
            const int64_t i2 = (ic / m) % x2;
            const int64_t i1 = ic % m;
            from_float((const float *) ember_cpu_row(x, i1, i2, i3), xconv + ic * rs, k);
        }
    }
    if ((convert && !priv) || prefill) ember_cpu_barrier(p);

    // Column i1 of matrix (i2, i3) as the kernels read it, and the stride between columns.
    auto xcol = [&](int64_t i1, int64_t i2, int64_t i3) -> const char * {
        return convert ? xconv + ((i3 * x2 + i2) * m + i1) * rs : ember_cpu_row(x, i1, i2, i3);
    };
    const size_t x_stride = convert ? rs : x->nb[1];
    const size_t w_stride = w->nb[1];
    const size_t y_stride = dst->nb[1] / sizeof(float);

    if (!prefill) {
        // Phase 2a: chunks of output rows, matrix major, taken dynamically (thread ith starts
        // with chunk ith).
        const ember_vec_dot_fn vec_dot  = kw.vec_dot;
        const bool             r16      = repacked(w);
        int64_t                rc       = rows_per_chunk(n, w_stride, p->nth, r16 ? EMBER_CPU_REPACK_ROWS : 4);
        // Block sums of each converted column, after the columns (repacked weights only).
        ember_cpu_q8_sum *     sums     = nullptr;
        if (needs_sums(w)) {
            char * at = priv ? xconv + ember_cpu_pad(rs * (size_t) ember_nrows(x))
                             : static_cast<char *>(p->wdata) + k_header + ember_cpu_pad(rs * (size_t) ember_nrows(x)) +
                                   (size_t) p->ith * thread_area_size(w, x);
            sums = reinterpret_cast<ember_cpu_q8_sum *>(at);
            for (int64_t ic = 0; ic < ember_nrows(x); ic++) ember_cpu_q8_sums(k, xconv + ic * rs, sums + ic * (k / 32));
        }
        while (x2 * x3 * ((n + rc - 1) / rc) > EMBER_CPU_MAX_CHUNKS - p->nth) rc *= 2;
        const int64_t          n_rc     = (n + rc - 1) / rc;
        const int64_t          n_chunks = x2 * x3 * n_rc;
        for (int64_t t = p->ith; t < n_chunks; t = ember_cpu_claim_chunk(p)) {
            const int64_t batch = t / n_rc;
            const int64_t i2    = batch % x2;
            const int64_t i3    = batch / x2;
            const int64_t r0    = (t % n_rc) * rc;
            const int64_t r1    = r0 + rc < n ? r0 + rc : n;
            const char *  wm    = ember_cpu_row(w, 0, i2 / bcast2, i3 / bcast3);
            const char *  xc    = xcol(0, i2, i3);
            float *       y     = (float *) ember_cpu_row(dst, 0, i2, i3);
            if (r16) {
                const int64_t ic = i3 * x2 + i2;
                kw.gemv_r16(k, wm + r0 * w_stride, EMBER_CPU_REPACK_ROWS * w_stride, (r1 - r0) / EMBER_CPU_REPACK_ROWS, xc,
                            sums ? sums + ic * (k / 32) : nullptr, y + r0);
                continue;
            }
            int64_t       r     = r0;
            for (; r + 4 <= r1; r += 4) {
                vec_dot(k, &y[r + 0], wm + (r + 0) * w_stride, xc);
                vec_dot(k, &y[r + 1], wm + (r + 1) * w_stride, xc);
                vec_dot(k, &y[r + 2], wm + (r + 2) * w_stride, xc);
                vec_dot(k, &y[r + 3], wm + (r + 3) * w_stride, xc);
            }
            for (; r < r1; r++) vec_dot(k, &y[r], wm + r * w_stride, xc);
        }
        return;
    }

    // Phase 2b: tiles, column block major (consecutive tiles share their activations); row
    // block major for repacked weights (consecutive tiles share the unrepacked rows, which
    // each thread keeps until its next tile needs other rows).
    const ember_gemm_fn gemm    = m >= k_gemm_min_cols ? kw.gemm : nullptr;
    const int64_t       tc      = cols_per_tile(m, convert ? rs : (size_t) k * sizeof(float));
    const int64_t       n_rb    = (n + k_tile_rows - 1) / k_tile_rows;
    const int64_t       n_cb    = (m + tc - 1) / tc;
    const int64_t       n_tiles = x2 * x3 * n_cb * n_rb;
    const bool    r16      = repacked(w);
    int64_t       unpacked = -1;  // row block (with its batch) in this thread's unrepack area
    for (int64_t t = p->ith; t < n_tiles; t = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t rb    = r16 ? (t / n_cb) % n_rb : t % n_rb;
        const int64_t cb    = r16 ? t % n_cb : (t / n_rb) % n_cb;
        const int64_t batch = t / (n_rb * n_cb);
        const int64_t i2    = batch % x2;
        const int64_t i3    = batch / x2;
        const int64_t r0    = rb * k_tile_rows;
        const int64_t nr    = n - r0 < k_tile_rows ? n - r0 : k_tile_rows;
        const int64_t c0    = cb * tc;
        const int64_t nc    = m - c0 < tc ? m - c0 : tc;
        const char *  wm    = ember_cpu_row(w, r0, i2 / bcast2, i3 / bcast3);
        const char *  xc    = xcol(c0, i2, i3);
        float *       y     = (float *) ember_cpu_row(dst, c0, i2, i3) + r0;
        if (r16) {
            char * plain = static_cast<char *>(p->wdata) + k_header + ember_cpu_pad(rs * (size_t) ember_nrows(x)) +
                           (size_t) p->ith * thread_area_size(w, x);
            const int64_t key = batch * n_rb + rb;
            if (key != unpacked) ember_cpu_unrepack(w->type, k, nr / EMBER_CPU_REPACK_ROWS, wm, plain);
            unpacked = key;
            wm       = plain;
        }
        if (gemm) {
            gemm(k, nr, nc, wm, w_stride, xc, x_stride, y, y_stride);
        } else {
            tile_vec_dot(kw.vec_dot, k, 0, nr, nc, wm, w_stride, xc, x_stride, y, y_stride);
        }
    }
}
