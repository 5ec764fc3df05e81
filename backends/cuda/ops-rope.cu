// ROPE (see backends/cpu_simd/ops-rope.cpp for the exact definition): one thread per rotated
// pair or per copied tail element. theta_i = pos * theta_scale^i is computed with powf here
// (the CPU builds it up by repeated multiplication), equal up to float rounding.
#include "cuda-common.cuh"

namespace {

__global__ void rope_kernel(cu_tensor src, cu_tensor dst, const char * pos, int64_t pos_nb0, const float * ff,
                            int32_t n_rot, int32_t mode, float theta_scale, float freq_scale, int64_t n_items) {
    cu_pdl_begin();
    const int64_t head_dim = dst.ne[0];
    const int32_t half     = n_rot / 2;
    const int64_t tail     = head_dim - n_rot;
    const int64_t per_row  = half + tail;
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t row = idx / per_row;
        const int64_t e   = idx % per_row;
        const int64_t ih  = row % dst.ne[1];
        const int64_t it  = row / dst.ne[1];
        const float * x   = reinterpret_cast<const float *>(src.data + ih * src.nb[1] + it * src.nb[2]);
        float *       y   = reinterpret_cast<float *>(dst.data + ih * dst.nb[1] + it * dst.nb[2]);
        if (e >= half) {
            const int64_t i = n_rot + (e - half);
            y[i]            = x[i];
            continue;
        }
        const int32_t i  = static_cast<int32_t>(e);
        const int32_t p  = *reinterpret_cast<const int32_t *>(pos + it * pos_nb0);
        const float   th = freq_scale * ((static_cast<float>(p) * powf(theta_scale, static_cast<float>(i))) / (ff ? ff[i] : 1.0f));
        float         s, c;
        sincosf(th, &s, &c);
        const int64_t stride_i = mode == EMBER_ROPE_NEOX ? 1 : 2;
        const int64_t offset   = mode == EMBER_ROPE_NEOX ? half : 1;
        const float   x0       = x[i * stride_i];
        const float   x1       = x[i * stride_i + offset];
        y[i * stride_i]          = x0 * c - x1 * s;
        y[i * stride_i + offset] = x0 * s + x1 * c;
    }
}

}  // namespace

ember_status ember_cuda_rope(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * src        = dst->src[0];
    const ember_tensor * pos        = dst->src[1];
    const ember_tensor * ff         = dst->src[2];
    const int32_t        n_rot      = dst->op_params[0];
    const int32_t        mode       = dst->op_params[1];
    const float          freq_base  = ember_get_op_param_f32(dst, 2);
    const float          freq_scale = ember_get_op_param_f32(dst, 3);
    const float          theta_scale = powf(freq_base, -2.0f / static_cast<float>(n_rot));
    const int64_t        per_row    = n_rot / 2 + (dst->ne[0] - n_rot);
    const int64_t        n_items    = per_row * dst->ne[1] * dst->ne[2];
    if (n_items == 0) return EMBER_OK;
    unsigned blocks = cu_blocks(n_items, 256);
    if (blocks > 65535u * 16u) blocks = 65535u * 16u;
    cu_launch(ctx, rope_kernel, blocks, 256, 0, cu_desc(src), cu_desc(dst), static_cast<const char *>(pos->data),
                                                static_cast<int64_t>(pos->nb[0]), ff ? static_cast<const float *>(ff->data) : nullptr,
                                                n_rot, mode, theta_scale, freq_scale, n_items);
    return ember_cuda_check_launch("rope");
}
