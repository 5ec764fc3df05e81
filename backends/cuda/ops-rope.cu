// ROPE (see backends/cpu_simd/ops-rope.cpp for the exact definition): one thread per rotated
// pair or per copied tail element. theta_i = pos * theta_scale^i is computed with powf here
// (the CPU builds it up by repeated multiplication), equal up to float rounding.
#include "cuda-common.cuh"

namespace {

struct rope_args {
    cu_tensor     src, dst;
    const char *  pos;
    int64_t       pos_nb0;
    const float * ff;
    int32_t       n_rot, mode;
    float         theta_scale, freq_scale;
    int64_t       n_items;
};

// Blocks [0, split) take a0, the others a1 (two ROPE nodes in one launch: Q and K of a layer).
__global__ void rope_kernel(rope_args a0, rope_args a1, unsigned split) {
    cu_pdl_begin();
    const bool      second = blockIdx.x >= split;
    const rope_args a      = second ? a1 : a0;
    const int64_t   bid    = second ? blockIdx.x - split : blockIdx.x;
    const int64_t   nblk   = second ? gridDim.x - split : split;
    const cu_tensor & src = a.src;
    const cu_tensor & dst = a.dst;
    const int64_t head_dim = dst.ne[0];
    const int32_t half     = a.n_rot / 2;
    const int64_t tail     = head_dim - a.n_rot;
    const int64_t per_row  = half + tail;
    for (int64_t idx = bid * blockDim.x + threadIdx.x; idx < a.n_items; idx += nblk * blockDim.x) {
        const int64_t row = idx / per_row;
        const int64_t e   = idx % per_row;
        const int64_t ih  = row % dst.ne[1];
        const int64_t it  = row / dst.ne[1];
        const float * x   = reinterpret_cast<const float *>(src.data + ih * src.nb[1] + it * src.nb[2]);
        float *       y   = reinterpret_cast<float *>(dst.data + ih * dst.nb[1] + it * dst.nb[2]);
        if (e >= half) {
            const int64_t i = a.n_rot + (e - half);
            y[i]            = x[i];
            continue;
        }
        const int32_t i  = static_cast<int32_t>(e);
        const int32_t p  = *reinterpret_cast<const int32_t *>(a.pos + it * a.pos_nb0);
        const float   th = a.freq_scale * ((static_cast<float>(p) * powf(a.theta_scale, static_cast<float>(i))) / (a.ff ? a.ff[i] : 1.0f));
        float         s, c;
        sincosf(th, &s, &c);
        const int64_t stride_i = a.mode == EMBER_ROPE_NEOX ? 1 : 2;
        const int64_t offset   = a.mode == EMBER_ROPE_NEOX ? half : 1;
        const float   x0       = x[i * stride_i];
        const float   x1       = x[i * stride_i + offset];
        y[i * stride_i]          = x0 * c - x1 * s;
        y[i * stride_i + offset] = x0 * s + x1 * c;
    }
}

rope_args rope_args_of(const ember_tensor * dst) {
    const ember_tensor * pos = dst->src[1];
    const ember_tensor * ff  = dst->src[2];
    rope_args            a;
    a.src         = cu_desc(dst->src[0]);
    a.dst         = cu_desc(dst);
    a.pos         = static_cast<const char *>(pos->data);
    a.pos_nb0     = static_cast<int64_t>(pos->nb[0]);
    a.ff          = ff ? static_cast<const float *>(ff->data) : nullptr;
    a.n_rot       = dst->op_params[0];
    a.mode        = dst->op_params[1];
    a.theta_scale = powf(ember_get_op_param_f32(dst, 2), -2.0f / static_cast<float>(a.n_rot));
    a.freq_scale  = ember_get_op_param_f32(dst, 3);
    a.n_items     = (a.n_rot / 2 + (dst->ne[0] - a.n_rot)) * dst->ne[1] * dst->ne[2];
    return a;
}

unsigned rope_blocks(int64_t n_items) {
    unsigned blocks = cu_blocks(n_items, 256);
    return blocks > 65535u * 16u ? 65535u * 16u : blocks;
}

}  // namespace

ember_status ember_cuda_rope(ember_cuda_ctx & ctx, ember_tensor * dst) {
    return ember_cuda_rope_pair(ctx, dst, nullptr);
}

// ROPE `a` and, when not null, `b` (independent: b neither reads nor writes a's memory) in one
// launch.
ember_status ember_cuda_rope_pair(ember_cuda_ctx & ctx, ember_tensor * a, ember_tensor * b) {
    const rope_args ra = rope_args_of(a);
    const rope_args rb = b ? rope_args_of(b) : ra;
    if (ra.n_items == 0 && (!b || rb.n_items == 0)) return EMBER_OK;
    const unsigned na = rope_blocks(ra.n_items), nb = b ? rope_blocks(rb.n_items) : 0;
    cu_launch(ctx, rope_kernel, na + nb, 256, 0, ra, rb, na);
    return ember_cuda_check_launch("rope");
}
