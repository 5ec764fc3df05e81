// MUL_MAT for few columns (decode): fused dequantize + matrix-vector product, one warp per
// weight row, k_rows rows per block; grid.y walks the columns of x, grid.z the batch
// matrices. Quantized rows are read 32 weights (one chunk) per lane step, float rows one
// element per lane step (coalesced). Activations stay F32 (the CPU rounds them to the
// weight's vec_dot_type first; the difference is within the conformance tolerances).
// This is the generic path, for the types without an integer kernel in ops-matvec-q.cu (or,
// for Ember's own types, in ops-matvec-ext.cu).
#include "cuda-common.cuh"
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

}  // namespace

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
    if (!cu_dispatch_chunk_type(dst->src[0]->type, matvec_launch{ctx, dst})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("mul_mat (matvec)");
}
