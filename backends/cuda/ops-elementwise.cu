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

// RMS_NORM, and with FUSED the MUL that follows it (mul = norm * w, w broadcast as in MUL's
// binary_kernel): one launch instead of two; the norm is still written for its other readers.
template <bool FUSED>
__global__ void rms_norm_kernel(cu_tensor src, cu_tensor dst, float eps, cu_tensor w, cu_tensor mul) {
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
    // Four elements per thread per step, all loads before the stores: the stores may alias
    // the inputs as far as the compiler knows, so a plain loop would wait for each load.
    const int64_t wn = FUSED ? w.ne[0] : 1;
    const float * wr = FUSED ? at(w, 0, i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]) : nullptr;
    float *       z  = FUSED ? at(mul, 0, i1, i2, i3) : nullptr;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * static_cast<int64_t>(blockDim.x)) {
        float xv[4], wv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
            xv[u]           = i < n ? x[i] : 0.0f;
            if constexpr (FUSED) wv[u] = i < n ? wr[wn == n ? i : i % wn] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
            if (i >= n) break;
            const float v = xv[u] * scale;
            y[i]          = v;
            if constexpr (FUSED) z[i] = v * wv[u];
        }
    }
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
    const cu_tensor d = cu_desc(dst);
    rms_norm_kernel<false><<<static_cast<unsigned>(rows), k_norm_threads, 0, ctx.stream>>>(cu_desc(dst->src[0]), d,
                                                                                           ember_get_op_param_f32(dst, 0), d, d);
    return ember_cuda_check_launch("rms_norm");
}

bool ember_cuda_can_fuse_rms_norm_mul(const ember_tensor * norm, const ember_tensor * mul) {
    if (norm->op != EMBER_OP_RMS_NORM || mul->op != EMBER_OP_MUL || mul->src[0] != norm || mul->src[1] == norm) return false;
    if (mul->type != EMBER_TYPE_F32 || !mul->src[1] || mul->src[1]->type != EMBER_TYPE_F32) return false;
    for (int i = 0; i < 4; i++) {
        if (mul->ne[i] != norm->ne[i] || mul->src[1]->ne[i] <= 0) return false;
    }
    return ember_nrows(norm) <= 0x7fffffff;
}

ember_status ember_cuda_rms_norm_mul(ember_cuda_ctx & ctx, ember_tensor * norm, ember_tensor * mul) {
    const int64_t rows = ember_nrows(norm);
    rms_norm_kernel<true><<<static_cast<unsigned>(rows), k_norm_threads, 0, ctx.stream>>>(
        cu_desc(norm->src[0]), cu_desc(norm), ember_get_op_param_f32(norm, 0), cu_desc(mul->src[1]), cu_desc(mul));
    return ember_cuda_check_launch("rms_norm + mul");
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
