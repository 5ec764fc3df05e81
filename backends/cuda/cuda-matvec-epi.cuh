// The store of a decode matvec unit (ember_cuda_mv_unit, cuda-ops.h): the RoPE over pairs of
// its rows and the copy of the (rotated) rows into a KV cache, done by the warp that sums the
// rows. Shared by the kernels with epilogues: mvr_kernel / mvk_kernel (ops-matvec-q.cu) and
// mvx_kernel (ops-matvec-ext.cu, Ember's own weight types).
#ifndef EMBER_CUDA_MATVEC_EPI_CUH
#define EMBER_CUDA_MATVEC_EPI_CUH

#include <cmath>

#include "cuda-common.cuh"
#include "cuda-ops.h"

// What a matrix of a group does with its rows besides storing them (ember_cuda_mv_unit: the
// nodes after a Q/K/V projection fused into its store): RoPE over pairs of rows (R == 2: a
// warp's two rows are a rotated pair) and/or a copy of the (rotated) rows into row idx[col]
// of a KV cache of F32/F16/BF16 elements. The arithmetic is rope_kernel's and
// set_rows_kernel's, so the fused and separate paths give the same bits.
struct mv_epi {
    int           rope = -1;  // -1: none, else EMBER_ROPE_NORMAL or EMBER_ROPE_NEOX
    int           hd   = 0;   // head size (= n_rot)
    float         theta_scale = 1.0f, freq_scale = 1.0f;
    const char *  pos     = nullptr;  // I32 position of each column
    int64_t       pos_nb0 = 0;
    const float * ff      = nullptr;  // frequency factors or nullptr
    char *        ry      = nullptr;  // rope result: element (dim, head, col) at dim 4 + head ry_nb1 + col ry_nb2
    int64_t       ry_nb1 = 0, ry_nb2 = 0;
    bool          write_y = true;  // the plain product too (mv_group::y)
    char *        cache   = nullptr;  // SET_ROWS destination or nullptr
    int           cache_type = 0;
    int64_t       cache_nb1 = 0, cache_rows = 0;
    const char *  idx     = nullptr;  // I32 cache row of each column
    int64_t       idx_nb0 = 0;
};

// The weight rows of a warp whose first row (in the plain order) is row0: row0 + r, or with a
// fused NEOX RoPE (R == 2) the pair (head hd + j, head hd + j + hd / 2) of pair index row0 / 2.
template <int R> __device__ __forceinline__ void mv_rows(int64_t row0, int neox_hd, int64_t (&rows)[R]) {
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = row0 + r;
    if (R == 2 && neox_hd > 0) {
        const int64_t p = row0 / 2, half = neox_hd / 2;
        rows[0]         = (p / half) * neox_hd + p % half;
        rows[R - 1]     = rows[0] + half;
    }
}

// The 4 rows of a warp of the Q / K / V halves forms (mv_halves_meet): two RoPE pairs, of logical
// rows l0 and l0 + 2 (mv_rows).
__device__ __forceinline__ void mv_halves_rows(int64_t l0, int neox_hd, int64_t (&rows)[4]) {
#pragma unroll
    for (int p = 0; p < 2; p++) {
        int64_t rp[2];
        mv_rows<2>(l0 + 2 * p, neox_hd, rp);
        rows[2 * p]     = rp[0];
        rows[2 * p + 1] = rp[1];
    }
}

// Lane 0's store of a warp's R row sums s (rows `rows` of n) for column col, through e.
template <int R>
__device__ __forceinline__ void mv_store_epi(const mv_epi & e, char * y_data, int64_t y_nb1, int64_t n, int64_t col, const int64_t (&rows)[R],
                                             float (&s)[R], int * err) {
    if (e.write_y) {
        float * yc = reinterpret_cast<float *>(y_data + col * y_nb1);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (rows[r] < n) yc[rows[r]] = s[r];
        }
    }
    if (R == 2 && e.rope >= 0 && rows[R - 1] < n) {
        const int32_t p    = *reinterpret_cast<const int32_t *>(e.pos + col * e.pos_nb0);
        const int64_t dim0 = rows[0] % e.hd, head = rows[0] / e.hd;
        const int     i    = static_cast<int>(e.rope == EMBER_ROPE_NEOX ? dim0 : dim0 / 2);
        const float   th   = e.freq_scale * ((static_cast<float>(p) * powf(e.theta_scale, static_cast<float>(i))) / (e.ff ? e.ff[i] : 1.0f));
        float         sn, cs;
        sincosf(th, &sn, &cs);
        const float x0 = s[0], x1 = s[R - 1];
        s[0]           = x0 * cs - x1 * sn;
        s[R - 1]       = x0 * sn + x1 * cs;
        if (e.ry) {
            char * ry = e.ry + head * e.ry_nb1 + col * e.ry_nb2;
#pragma unroll
            for (int r = 0; r < R; r++) *reinterpret_cast<float *>(ry + (rows[r] % e.hd) * 4) = s[r];
        }
    }
    if (e.cache) {
        const int32_t id = *reinterpret_cast<const int32_t *>(e.idx + col * e.idx_nb0);
        if (id < 0 || id >= e.cache_rows) {
            cu_set_error(err, EMBER_ERR_INTERNAL);
            return;
        }
        char * row = e.cache + id * e.cache_nb1;
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (rows[r] >= n) continue;
            if (e.cache_type == EMBER_TYPE_F16) {
                cu_encoder<EMBER_TYPE_F16>::block(&s[r], row + rows[r] * 2);
            } else if (e.cache_type == EMBER_TYPE_BF16) {
                cu_encoder<EMBER_TYPE_BF16>::block(&s[r], row + rows[r] * 2);
            } else {
                cu_encoder<EMBER_TYPE_F32>::block(&s[r], row + rows[r] * 4);
            }
        }
    }
}

// Lane 0's store of matrix m (0, 1 or 2) of a launch's three through epi[m]: a select chain on m,
// so the parameters are read in place, never copied to a local array.
template <int R>
__device__ __forceinline__ void mv_store_epi_of3(const mv_epi (&epi)[3], int m, char * y_data, int64_t y_nb1, int64_t n, int64_t col,
                                                 const int64_t (&rows)[R], float (&s)[R], int * err) {
    if (m == 0) mv_store_epi<R>(epi[0], y_data, y_nb1, n, col, rows, s, err);
    else if (m == 1) mv_store_epi<R>(epi[1], y_data, y_nb1, n, col, rows, s, err);
    else mv_store_epi<R>(epi[2], y_data, y_nb1, n, col, rows, s, err);
}

// The epilogue of unit u (ember_cuda_mv_unit) for its matrix.
inline mv_epi mv_epi_of(const ember_cuda_mv_unit & u) {
    mv_epi e;
    e.write_y = u.write_mm;
    if (u.rope) {
        const ember_tensor * pos = u.rope->src[1];
        const ember_tensor * ff  = u.rope->src[2];
        e.rope        = u.rope->op_params[1];
        e.hd          = static_cast<int>(u.rope->ne[0]);
        e.theta_scale = powf(ember_get_op_param_f32(u.rope, 2), -2.0f / static_cast<float>(u.rope->op_params[0]));
        e.freq_scale  = ember_get_op_param_f32(u.rope, 3);
        e.pos         = static_cast<const char *>(pos->data);
        e.pos_nb0     = static_cast<int64_t>(pos->nb[0]);
        e.ff          = ff ? static_cast<const float *>(ff->data) : nullptr;
        e.ry          = u.write_rope ? static_cast<char *>(u.rope->data) : nullptr;
        e.ry_nb1      = static_cast<int64_t>(u.rope->nb[1]);
        e.ry_nb2      = static_cast<int64_t>(u.rope->nb[2]);
    }
    if (u.set_rows) {
        const ember_tensor * idx = u.set_rows->src[2];
        e.cache      = static_cast<char *>(u.set_rows->data);
        e.cache_type = u.set_rows->type;
        e.cache_nb1  = static_cast<int64_t>(u.set_rows->nb[1]);
        e.cache_rows = u.set_rows->ne[1];
        e.idx        = static_cast<const char *>(idx->data);
        e.idx_nb0    = static_cast<int64_t>(idx->nb[0]);
    }
    return e;
}

#endif  // EMBER_CUDA_MATVEC_EPI_CUH
