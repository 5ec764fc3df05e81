// Row-wise F32 kernels: RMS_NORM (one block per row, fused with the residual ADD before it, the
// MUL after it and the next matvec's activation quantizer), MUL / ADD with broadcast, SWIGLU
// (optionally quantizing) and SCALE (one thread per element). Every tensor is addressed
// through its strides.
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

// RMS_NORM: one block per row; rows of up to k_norm_vpt * k_norm_threads elements are held in
// registers (8192: every model dimension Ember meets).
constexpr int k_norm_threads = 1024;
constexpr int k_norm_vpt     = 8;

// RMS_NORM, with fusions that each save a launch and a pass over the row:
// - ADD: the residual ADD before the norm (src = a + b, written for its other readers, and
//   the norm's input): p.src is the ADD's result, p.a and p.b its operands (same shapes).
// - FUSED: the MUL that follows (mul = norm * w, w broadcast as in MUL's binary_kernel); the
//   norm is still written for its other readers.
// - QX: the quantized copy of the MUL's result (cu_quantize_warp); needs ne[0] % 32 == 0: a warp
//   then holds 32 consecutive elements in each step.
struct norm_args {
    cu_tensor a, b, src, dst, w, mul;
    float     eps;
    int8_t *  xq;
    float2 *  xds;
};

// Element i of a normalized row (nv): the norm, with FUSED the MUL's product by the weight wv,
// with QX its quantized copy (flat index row_off + i).
template <bool FUSED, bool QX>
__device__ __forceinline__ void norm_out(const norm_args & p, float * y, float * z, int64_t row_off, int64_t i, float nv, float wv) {
    y[i]     = nv;
    float zv = nv;
    if constexpr (FUSED) {
        zv   = nv * wv;
        z[i] = zv;
    }
    if constexpr (QX) cu_quantize_warp(zv, row_off + i, p.xq, p.xds);
}

template <bool ADD, bool FUSED, bool QX>
__global__ void __launch_bounds__(k_norm_threads) rms_norm_kernel(norm_args p) {
    cu_pdl_begin();
    const cu_tensor & dst = p.dst;
    const int64_t     row = blockIdx.x;
    const int64_t i1 = row % dst.ne[1], i2 = (row / dst.ne[1]) % dst.ne[2], i3 = row / (dst.ne[1] * dst.ne[2]);
    float *       x  = at(p.src, 0, i1, i2, i3);
    float *       y  = at(dst, 0, i1, i2, i3);
    const int64_t n  = dst.ne[0];
    const int64_t wn = FUSED ? p.w.ne[0] : 1;
    const float * wr = FUSED ? at(p.w, 0, i1 % p.w.ne[1], i2 % p.w.ne[2], i3 % p.w.ne[3]) : nullptr;
    float *       z  = FUSED ? at(p.mul, 0, i1, i2, i3) : nullptr;
    const int     t  = threadIdx.x;
    // Rows of up to k_norm_vpt elements per thread stay in registers: every load of the row
    // (and of the MUL's weights) is issued before the first store, which the compiler must
    // otherwise assume aliases them (a per-element loop waited ~600 ns per element pair: the
    // 4096-wide norm of an 8B model took 16 us).
    const bool regs = n <= static_cast<int64_t>(k_norm_vpt) * k_norm_threads;
    float      v[k_norm_vpt], wv[k_norm_vpt] = {};
    float      ss = 0.0f;
    if (regs) {
#pragma unroll
        for (int u = 0; u < k_norm_vpt; u++) {
            const int64_t i = t + static_cast<int64_t>(u) * k_norm_threads;
            if constexpr (ADD) v[u] = i < n ? __ldg(at(p.a, 0, i1, i2, i3) + i) + __ldg(at(p.b, 0, i1, i2, i3) + i) : 0.0f;
            else v[u] = i < n ? x[i] : 0.0f;
            if constexpr (FUSED) wv[u] = i < n ? __ldg(wr + (wn == n ? i : i % wn)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < k_norm_vpt; u++) {
            ss += v[u] * v[u];
            const int64_t i = t + static_cast<int64_t>(u) * k_norm_threads;
            if constexpr (ADD) {
                if (i < n) x[i] = v[u];  // the sum, for the ADD's other readers
            }
        }
    } else if constexpr (ADD) {
        const float * xa = at(p.a, 0, i1, i2, i3);
        const float * xb = at(p.b, 0, i1, i2, i3);
        for (int64_t i = t; i < n; i += k_norm_threads) {
            const float s = xa[i] + xb[i];
            x[i]          = s;  // read back below by this same thread
            ss += s * s;
        }
    } else {
        for (int64_t i = t; i < n; i += k_norm_threads) ss += x[i] * x[i];
    }
    __shared__ float part[k_norm_threads / 32];
    ss = cu_warp_sum(ss);
    if (t % 32 == 0) part[t / 32] = ss;
    __syncthreads();
    if (t < 32) {
        float s = t < k_norm_threads / 32 ? part[t] : 0.0f;
        s       = cu_warp_sum(s);
        if (t == 0) part[0] = s;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(part[0] / static_cast<float>(n) + p.eps);
    if (regs) {
#pragma unroll
        for (int u = 0; u < k_norm_vpt; u++) {
            const int64_t i = t + static_cast<int64_t>(u) * k_norm_threads;
            if (i >= n) break;  // with QX (n % 32 == 0) the same for the whole warp
            norm_out<FUSED, QX>(p, y, z, row * n, i, v[u] * scale, wv[u]);
        }
        return;
    }
    // Long rows: four elements per thread per step, all loads before the stores.
    for (int64_t i0 = t; i0 < n; i0 += 4 * static_cast<int64_t>(k_norm_threads)) {
        float xv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t i = i0 + u * static_cast<int64_t>(k_norm_threads);
            xv[u]           = i < n ? x[i] : 0.0f;
            if constexpr (FUSED) wv[u] = i < n ? wr[wn == n ? i : i % wn] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t i = i0 + u * static_cast<int64_t>(k_norm_threads);
            if (i >= n) break;
            norm_out<FUSED, QX>(p, y, z, row * n, i, xv[u] * scale, wv[u]);
        }
    }
}

template <bool IS_MUL>
__global__ void binary_kernel(cu_tensor a, cu_tensor b, cu_tensor dst, int64_t n) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        int64_t i0, i1, i2, i3;
        unflatten(idx, dst.ne, i0, i1, i2, i3);
        const float x = *at(a, i0, i1, i2, i3);
        const float y = *at(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        *at(dst, i0, i1, i2, i3) = IS_MUL ? x * y : x + y;
    }
}

template <bool QX>
__global__ void swiglu_kernel(cu_tensor g, cu_tensor u, cu_tensor dst, int64_t n, int8_t * xq, float2 * xds) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        int64_t i0, i1, i2, i3;
        unflatten(idx, dst.ne, i0, i1, i2, i3);
        const float x = *at(g, i0, i1, i2, i3);
        const float z = x / (1.0f + expf(-x)) * *at(u, i0, i1, i2, i3);
        *at(dst, i0, i1, i2, i3) = z;
        if constexpr (QX) cu_quantize_warp(z, idx, xq, xds);
    }
}

// SWIGLU over contiguous tensors (prefill): flat indices, no per-element 64-bit divisions.
__global__ void swiglu_flat_kernel(const float * g, const float * u, float * dst, int64_t n) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        const float x = g[idx];
        dst[idx]      = x / (1.0f + expf(-x)) * u[idx];
    }
}

__global__ void scale_kernel(cu_tensor src, cu_tensor dst, float s, int64_t n) {
    cu_pdl_begin();
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
    return ember_cuda_rms_norm_fused(ctx, nullptr, dst, nullptr, false);
}

bool ember_cuda_can_fuse_rms_norm_mul(const ember_tensor * norm, const ember_tensor * mul) {
    if (norm->op != EMBER_OP_RMS_NORM || mul->op != EMBER_OP_MUL || mul->src[0] != norm || mul->src[1] == norm) return false;
    if (mul->type != EMBER_TYPE_F32 || !mul->src[1] || mul->src[1]->type != EMBER_TYPE_F32) return false;
    for (int i = 0; i < 4; i++) {
        if (mul->ne[i] != norm->ne[i] || mul->src[1]->ne[i] <= 0) return false;
    }
    return ember_nrows(norm) <= 0x7fffffff;
}

bool ember_cuda_can_fuse_add_rms_norm(const ember_tensor * add, const ember_tensor * norm) {
    if (add->op != EMBER_OP_ADD || norm->op != EMBER_OP_RMS_NORM || norm->src[0] != add || add->type != EMBER_TYPE_F32) return false;
    for (int j = 0; j < 2; j++) {
        const ember_tensor * s = add->src[j];
        if (!s || s->type != EMBER_TYPE_F32) return false;
        for (int i = 0; i < 4; i++) {
            if (s->ne[i] != add->ne[i]) return false;  // no broadcast
        }
    }
    return ember_nrows(norm) <= 0x7fffffff;
}

ember_status ember_cuda_rms_norm_fused(ember_cuda_ctx & ctx, ember_tensor * add, ember_tensor * norm, ember_tensor * mul, bool qx) {
    const int64_t rows = ember_nrows(norm);
    if (rows > 0x7fffffff) return EMBER_ERR_UNSUPPORTED;
    norm_args p;
    p.dst = cu_desc(norm);
    p.src = cu_desc(norm->src[0]);
    p.a = p.b = p.w = p.mul = p.dst;
    if (add) {
        p.a = cu_desc(add->src[0]);
        p.b = cu_desc(add->src[1]);
    }
    if (mul) {
        p.w   = cu_desc(mul->src[1]);
        p.mul = cu_desc(mul);
    }
    p.eps = ember_get_op_param_f32(norm, 0);
    p.xq  = nullptr;
    p.xds = nullptr;
    const ember_tensor * qt = mul ? mul : norm;
    if (qx && qt->ne[0] % 32 == 0 && qt->nb[0] == sizeof(float) && qt->nb[1] == qt->ne[0] * sizeof(float)) {
        void * xds = nullptr;
        ember_cuda_qx_buffer(ctx, qt, &p.xq, &xds);
        p.xds = static_cast<float2 *>(xds);
    }
    qx = p.xq != nullptr;
    const unsigned g = static_cast<unsigned>(rows);
    // (ADD, FUSED, QX): the combinations the stream asks for.
    if (add && mul && qx) cu_launch(ctx, rms_norm_kernel<true, true, true>, g, k_norm_threads, 0, p);
    else if (add && mul) cu_launch(ctx, rms_norm_kernel<true, true, false>, g, k_norm_threads, 0, p);
    else if (add) cu_launch(ctx, rms_norm_kernel<true, false, false>, g, k_norm_threads, 0, p);
    else if (mul && qx) cu_launch(ctx, rms_norm_kernel<false, true, true>, g, k_norm_threads, 0, p);
    else if (mul) cu_launch(ctx, rms_norm_kernel<false, true, false>, g, k_norm_threads, 0, p);
    else cu_launch(ctx, rms_norm_kernel<false, false, false>, g, k_norm_threads, 0, p);
    const ember_status st = ember_cuda_check_launch(add ? "add + rms_norm" : mul ? "rms_norm + mul" : "rms_norm");
    if (st == EMBER_OK && qx) ember_cuda_qx_set_valid(ctx, qt, p.xq);
    return st;
}

ember_status ember_cuda_mul(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    cu_launch(ctx, binary_kernel<true>, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n);
    return ember_cuda_check_launch("mul");
}

ember_status ember_cuda_add(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    cu_launch(ctx, binary_kernel<false>, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n);
    return ember_cuda_check_launch("add");
}

ember_status ember_cuda_swiglu(ember_cuda_ctx & ctx, ember_tensor * dst) {
    return ember_cuda_swiglu_fused(ctx, dst, false);
}

ember_status ember_cuda_swiglu_fused(ember_cuda_ctx & ctx, ember_tensor * dst, bool qx) {
    const int64_t n   = ember_nelements(dst);
    int8_t *      xq  = nullptr;
    void *        xds = nullptr;
    if (qx && dst->ne[0] % 32 == 0 && ember_is_contiguous(dst)) ember_cuda_qx_buffer(ctx, dst, &xq, &xds);
    if (xq) {
        cu_launch(ctx, swiglu_kernel<true>, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n, xq,
                                                                           static_cast<float2 *>(xds));
    } else if (ember_is_contiguous(dst) && ember_is_contiguous(dst->src[0]) && ember_is_contiguous(dst->src[1]) &&
               ember_nelements(dst->src[0]) == n && ember_nelements(dst->src[1]) == n) {
        cu_launch(ctx, swiglu_flat_kernel, elem_blocks(n), k_threads, 0, static_cast<const float *>(dst->src[0]->data),
                                                                         static_cast<const float *>(dst->src[1]->data),
                                                                         static_cast<float *>(dst->data), n);
    } else {
        cu_launch(ctx, swiglu_kernel<false>, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n,
                                                                            nullptr, nullptr);
    }
    const ember_status st = ember_cuda_check_launch("swiglu");
    if (st == EMBER_OK && xq) ember_cuda_qx_set_valid(ctx, dst, xq);
    return st;
}

ember_status ember_cuda_scale(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const int64_t n = ember_nelements(dst);
    cu_launch(ctx, scale_kernel, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst), ember_get_op_param_f32(dst, 0), n);
    return ember_cuda_check_launch("scale");
}
