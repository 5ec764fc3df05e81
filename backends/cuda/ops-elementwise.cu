// Row-wise F32 kernels: RMS_NORM (one block per row), MUL / ADD with broadcast, SWIGLU and
// SCALE (one thread per element). Every tensor is addressed through its strides.
#include "cuda-common.cuh"

namespace {

// Element (i0, i1, i2, i3) of flat index idx over extents ne.
__device__ __forceinline__ void unflatten(int64_t idx, const int64_t * ne, int64_t & i0, int64_t & i1, int64_t & i2, int64_t & i3) {
    i0 = idx % ne[0];
    idx /= ne[0];
    i1 = idx % ne[1];
    idx /= ne[1];
    i2 = idx % ne[2];
    i3 = idx / ne[2];
}

__device__ __forceinline__ float * at(const cu_tensor & t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<float *>(t.data + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
}

constexpr int k_norm_threads = 256;

__global__ void rms_norm_kernel(cu_tensor src, cu_tensor dst, float eps) {
    const int64_t row = blockIdx.x;
    const int64_t i1 = row % dst.ne[1], i2 = (row / dst.ne[1]) % dst.ne[2], i3 = row / (dst.ne[1] * dst.ne[2]);
    const float * x  = at(src, 0, i1, i2, i3);
    float *       y  = at(dst, 0, i1, i2, i3);
    const int64_t n  = dst.ne[0];
    float         ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
    __shared__ float part[k_norm_threads / 32];
    ss = cu_warp_sum(ss);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        v       = cu_warp_sum(v);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float mean  = part[0] / static_cast<float>(n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * scale;
}

template <bool IS_MUL>
__global__ void binary_kernel(cu_tensor a, cu_tensor b, cu_tensor dst, int64_t n) {
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        int64_t i0, i1, i2, i3;
        unflatten(idx, dst.ne, i0, i1, i2, i3);
        const float x = *at(a, i0, i1, i2, i3);
        const float y = *at(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        *at(dst, i0, i1, i2, i3) = IS_MUL ? x * y : x + y;
    }
}

__global__ void swiglu_kernel(cu_tensor g, cu_tensor u, cu_tensor dst, int64_t n) {
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        int64_t i0, i1, i2, i3;
        unflatten(idx, dst.ne, i0, i1, i2, i3);
        const float x = *at(g, i0, i1, i2, i3);
        *at(dst, i0, i1, i2, i3) = x / (1.0f + expf(-x)) * *at(u, i0, i1, i2, i3);
    }
}

__global__ void scale_kernel(cu_tensor src, cu_tensor dst, float s, int64_t n) {
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        int64_t i0, i1, i2, i3;
        unflatten(idx, dst.ne, i0, i1, i2, i3);
        *at(dst, i0, i1, i2, i3) = *at(src, i0, i1, i2, i3) * s;
    }
}

constexpr int      k_threads    = 256;
constexpr unsigned k_max_blocks = 65535u * 16u;

unsigned elem_blocks(int64_t n) {
    const unsigned b = cu_blocks(n, k_threads);
    return b < k_max_blocks ? b : k_max_blocks;
}

}  // namespace

ember_status ember_cuda_rms_norm(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t rows = ember_nrows(dst);
    if (rows > 0x7fffffff) return EMBER_ERR_UNSUPPORTED;
    rms_norm_kernel<<<static_cast<unsigned>(rows), k_norm_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), cu_desc(dst),
                                                                                    ember_get_op_param_f32(dst, 0));
    return ember_cuda_check_launch("rms_norm");
}

ember_status ember_cuda_mul(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    binary_kernel<true><<<elem_blocks(n), k_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n);
    return ember_cuda_check_launch("mul");
}

ember_status ember_cuda_add(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    binary_kernel<false><<<elem_blocks(n), k_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n);
    return ember_cuda_check_launch("add");
}

ember_status ember_cuda_swiglu(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    swiglu_kernel<<<elem_blocks(n), k_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n);
    return ember_cuda_check_launch("swiglu");
}

ember_status ember_cuda_scale(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    scale_kernel<<<elem_blocks(n), k_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), cu_desc(dst), ember_get_op_param_f32(dst, 0), n);
    return ember_cuda_check_launch("scale");
}
