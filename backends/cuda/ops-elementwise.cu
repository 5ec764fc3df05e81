// Row-wise F32 kernels: RMS_NORM (one block per row, fused with the residual ADD before it, the
// MUL after it and the next matvec's activation quantizer), MUL / ADD with broadcast, SWIGLU
// (optionally quantizing) and SCALE (one thread per element). Every tensor is addressed
// through its strides.
#include <cstdlib>
#include <cstring>

#include "cuda-common.cuh"
#include "cuda-env.h"

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
    // rms_norm_dec_kernel: store the RMS_NORM's / the MUL's rows, else only the quantized copy
    // (the stream decides: cuda-backend.cpp; H200 tg128 1B Q4_0 1671-1684 against 1617 with
    // both stored, EMBER_CUDA_NORM_STORE=1; 8B level)
    bool      wy, wz;
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

// Decode rows (RMS_NORM + MUL, optionally with the residual ADD before it and the quantized
// copy after it) of contiguous F32 rows of n <= 1024 NV elements, n % 4 == 0, and a 1-D weight:
// 256 threads, NV float4 per thread. rms_norm_kernel's 1024 threads x 62 registers take a whole
// SM's register file, so in a decode step that block could start only once some SM had drained
// every block of the matvec before it (H200 trace: 6-9 us per norm on the critical path); this
// one fits beside a matvec's blocks, and loads its weights before waiting for that matvec.
// Element 4 (t + 256 k) + j is lane t % 32's float4 k: a quantization block of 32 is 8 lanes.
constexpr int k_norm_dec_threads = 256;

template <int NV, bool ADD, bool QX>
__global__ void __launch_bounds__(k_norm_dec_threads) rms_norm_dec_kernel(norm_args p, int n) {
    const int     t   = threadIdx.x;
    const int64_t row = blockIdx.x;
    float4        wv[NV], v[NV];
    const float4 * w4 = reinterpret_cast<const float4 *>(p.w.data);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + k_norm_dec_threads * k);
        wv[k]       = i < n ? __ldg(w4 + i / 4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // weights: before the wait
    }
    cu_pdl_begin();
    const auto rowp = [&](const cu_tensor & x) { return reinterpret_cast<float4 *>(x.data + row * x.nb[1]); };
    float4 *   src  = rowp(p.src);
    float      ss   = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + k_norm_dec_threads * k);
        if (i < n) {
            if constexpr (ADD) {
                const float4 a = rowp(p.a)[i / 4], b = rowp(p.b)[i / 4];
                v[k]           = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
            } else {
                v[k] = src[i / 4];
            }
        } else {
            v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * (t + k_norm_dec_threads * k);
        if constexpr (ADD) {
            if (i < n) src[i / 4] = v[k];  // the sum, for the ADD's other readers
        }
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    const float tot   = cu_block_sum<k_norm_dec_threads>(ss, t);
    const float scale = 1.0f / sqrtf(tot / static_cast<float>(n) + p.eps);
    float4 *    y     = rowp(p.dst);
    float4 *    z     = rowp(p.mul);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        // Lanes past n hold zeros and still take part in the shuffles (whole 8-lane groups:
        // with QX n % 32 == 0); only their stores are dropped.
        const int    i  = 4 * (t + k_norm_dec_threads * k);
        const bool   in = i < n;
        const float4 nv = make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale);
        const float4 zv = make_float4(nv.x * wv[k].x, nv.y * wv[k].y, nv.z * wv[k].z, nv.w * wv[k].w);
        if (in && p.wy) y[i / 4] = nv;
        if (in && p.wz) z[i / 4] = zv;
        if constexpr (QX) {
            const cu_q8_quad qv = cu_quantize_quad(zv);  // the 8 lanes that hold a block of 32
            const int64_t    e  = row * n + i;
            if (!in) continue;
            reinterpret_cast<char4 *>(p.xq + e)[0] = qv.q;
            if (t % 8 == 0) p.xds[e / 32] = cu_q8_ds(qv);
        }
    }
}

// EMBER_CUDA_NORM_PROBE=empty (measuring only: results are wrong): the decode norm's launch with
// no work but the wait, to split a norm's cost on the token's critical path into the launch
// and dependency (this against EMBER_CUDA_SKIP=norm) and the kernel's own work (the default
// against this). H200, tg128 (session 21): 8B Q4_0 527.1 default, 533.9 empty, 570.7 skipped;
// 1B 1615 / 1696 / 1877. So a norm costs the token its launch in the dependent chain far more
// than its work (the next matvec's first weight loads overlap that work).
__global__ void norm_probe_empty_kernel() {
    cu_pdl_begin();
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

// SWIGLU over contiguous tensors (a decode step's FFN) with the quantized copy of its result
// for the down product: flat indices, no per-element 64-bit divisions (swiglu_kernel<true>
// spent ~3.5 us per 1B layer on unflatten). n % 32 == 0, so each warp's 32 values are one block.
__global__ void swiglu_flat_q_kernel(const float * g, const float * u, float * dst, int64_t n, int8_t * xq, float2 * xds) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n; idx += (int64_t) gridDim.x * blockDim.x) {
        const float x = g[idx];
        const float z = x / (1.0f + expf(-x)) * u[idx];
        dst[idx]      = z;
        cu_quantize_warp(z, idx, xq, xds);
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

// The same 4 values a thread (n % 4 == 0, 16-byte aligned rows): float4 loads and stores, where
// the one-value kernel moved ~1.8 TB/s on an H200 (27 us for a 1B pp512 layer's 512 x 8192).
__global__ void swiglu_flat4_kernel(const float4 * g, const float4 * u, float4 * dst, int64_t n4) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n4; idx += (int64_t) gridDim.x * blockDim.x) {
        const float4 x = g[idx], y = u[idx];
        float4       z;
        z.x      = x.x / (1.0f + expf(-x.x)) * y.x;
        z.y      = x.y / (1.0f + expf(-x.y)) * y.y;
        z.z      = x.z / (1.0f + expf(-x.z)) * y.z;
        z.w      = x.w / (1.0f + expf(-x.w)) * y.w;
        dst[idx] = z;
    }
}

// SWIGLU for the prefill product after it (ember_cuda_swiglu_xh): 8 values a thread, their F16
// (the product's converted x: the bits convert_x8_kernel makes of the F32 result) to xh, the F32
// rows only with STORE. Saves the product's conversion launch and, without STORE, the F32 rows'
// write and read back (1B pp512 layer: 16 MB each way).
template <bool STORE>
__global__ void swiglu_xh_kernel(const float4 * g, const float4 * u, float4 * dst, uint4 * xh, int64_t n8) {
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n8; idx += (int64_t) gridDim.x * blockDim.x) {
        const float4 x0 = g[2 * idx], x1 = g[2 * idx + 1], y0 = u[2 * idx], y1 = u[2 * idx + 1];
        const float  x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const float  y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
        float        z[8];
#pragma unroll
        for (int j = 0; j < 8; j++) z[j] = x[j] / (1.0f + expf(-x[j])) * y[j];
        if constexpr (STORE) {
            dst[2 * idx]     = make_float4(z[0], z[1], z[2], z[3]);
            dst[2 * idx + 1] = make_float4(z[4], z[5], z[6], z[7]);
        }
        xh[idx] = make_uint4(cu_pack_h2(z[0], z[1]), cu_pack_h2(z[2], z[3]), cu_pack_h2(z[4], z[5]), cu_pack_h2(z[6], z[7]));
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

// EMBER_CUDA_NORM_PROBE=empty: norm_probe_empty_kernel instead of the decode norm.
static bool norm_probe_empty() {
    static const bool on = [] {
        const char * e = std::getenv("EMBER_CUDA_NORM_PROBE");
        return e && !std::strcmp(e, "empty");
    }();
    return on;
}

// rms_norm_dec_kernel with nv (1, 2, 4 or 8) float4 per thread, one block per row.
template <bool ADD, bool QX>
static void launch_norm_dec(ember_cuda_ctx & ctx, unsigned rows, int nv, const norm_args & p, int64_t n) {
    if (norm_probe_empty()) {
        cu_launch(ctx, norm_probe_empty_kernel, rows, k_norm_dec_threads, 0);
        return;
    }
    const auto kernel = nv == 1 ? rms_norm_dec_kernel<1, ADD, QX> : nv == 2 ? rms_norm_dec_kernel<2, ADD, QX>
                      : nv == 4 ? rms_norm_dec_kernel<4, ADD, QX> : rms_norm_dec_kernel<8, ADD, QX>;
    cu_launch(ctx, kernel, rows, k_norm_dec_threads, 0, p, static_cast<int>(n));
}

// Whether rms_norm_dec_kernel takes this RMS_NORM + MUL (+ ADD before it): rows of contiguous
// F32 (each tensor's rows nb[1] apart, 16-byte aligned), at most 8192 wide, n % 4 == 0, a 1-D
// weight of the row's length, and rows addressed by dim 1 only. EMBER_CUDA_NORM_DEC=0: off.
static bool norm_dec_ok(const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul) {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_NORM_DEC");
    const int64_t n = norm->ne[0];
    if (!on || n % 4 != 0 || n > 8192 || norm->ne[2] * norm->ne[3] != 1) return false;
    const ember_tensor * w = mul->src[1];
    if (w->ne[0] != n || ember_nelements(w) != n) return false;
    const auto rows_ok = [&](const ember_tensor * x) {
        return x->type == EMBER_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[0] == n && x->ne[1] == norm->ne[1] &&
               ((reinterpret_cast<uintptr_t>(x->data) | x->nb[1]) & 15) == 0;
    };
    if (!rows_ok(norm) || !rows_ok(norm->src[0]) || !rows_ok(mul) || (reinterpret_cast<uintptr_t>(w->data) & 15) != 0) return false;
    return !add || (rows_ok(add->src[0]) && rows_ok(add->src[1]));
}

ember_status ember_cuda_rms_norm_fused(ember_cuda_ctx & ctx, ember_tensor * add, ember_tensor * norm, ember_tensor * mul, bool qx, bool store_norm,
                                       bool store_mul) {
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
    // The RMS_NORM's rows are the result without a MUL; the MUL's are the only copy without qx.
    p.wy = store_norm || !mul;
    p.wz = store_mul || !qx || !mul;
    const unsigned g = static_cast<unsigned>(rows);
    if (mul && norm_dec_ok(add, norm, mul)) {
        const int64_t n  = norm->ne[0];
        const int     nv = n <= 1024 ? 1 : n <= 2048 ? 2 : n <= 4096 ? 4 : 8;
        if (add && qx) launch_norm_dec<true, true>(ctx, g, nv, p, n);
        else if (add) launch_norm_dec<true, false>(ctx, g, nv, p, n);
        else if (qx) launch_norm_dec<false, true>(ctx, g, nv, p, n);
        else launch_norm_dec<false, false>(ctx, g, nv, p, n);
        const ember_status st = ember_cuda_check_launch(add ? "add + rms_norm + mul (decode)" : "rms_norm + mul (decode)");
        if (st == EMBER_OK && qx) ember_cuda_qx_set_valid(ctx, qt, p.xq);
        return st;
    }
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

// EMBER_CUDA_SWIGLU_FLAT=0: the quantizing SWIGLU through swiglu_kernel<true> (unflattened indices).
static const bool k_swiglu_flat_q = ember_cuda_env_on("EMBER_CUDA_SWIGLU_FLAT");

// EMBER_CUDA_SWIGLU_VEC=0: the one-value prefill SWIGLU (read once, at load).
static const bool k_swiglu_vec = ember_cuda_env_on("EMBER_CUDA_SWIGLU_VEC");

static bool aligned16(const void * p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

ember_status ember_cuda_swiglu_xh(ember_cuda_ctx & ctx, ember_tensor * dst, bool store) {
    const int64_t n = ember_nelements(dst);
    if (n % 8 != 0 || !aligned16(dst->data) || !aligned16(dst->src[0]->data) || !aligned16(dst->src[1]->data)) return EMBER_ERR_UNSUPPORTED;
    void * xh = ember_cuda_scratch(ctx, 0, static_cast<size_t>(n) * 2);
    if (!xh) return EMBER_ERR_UNSUPPORTED;
    const float4 * g = static_cast<const float4 *>(dst->src[0]->data);
    const float4 * u = static_cast<const float4 *>(dst->src[1]->data);
    if (store) {
        cu_launch(ctx, swiglu_xh_kernel<true>, elem_blocks(n / 8), k_threads, 0, g, u, static_cast<float4 *>(dst->data), static_cast<uint4 *>(xh), n / 8);
    } else {
        cu_launch(ctx, swiglu_xh_kernel<false>, elem_blocks(n / 8), k_threads, 0, g, u, static_cast<float4 *>(dst->data), static_cast<uint4 *>(xh), n / 8);
    }
    const ember_status st = ember_cuda_check_launch("swiglu (with the product's 16-bit x)");
    if (st != EMBER_OK) return st;
    ctx.qx_valid = false;  // slot 0 holds the 16-bit copy now
    ember_cuda_xh_made(ctx, dst, xh, false);
    return EMBER_OK;
}

ember_status ember_cuda_swiglu_fused(ember_cuda_ctx & ctx, ember_tensor * dst, bool qx) {
    const int64_t n   = ember_nelements(dst);
    int8_t *      xq  = nullptr;
    void *        xds = nullptr;
    if (qx && dst->ne[0] % 32 == 0 && ember_is_contiguous(dst)) ember_cuda_qx_buffer(ctx, dst, &xq, &xds);
    const bool flat = ember_is_contiguous(dst) && ember_is_contiguous(dst->src[0]) && ember_is_contiguous(dst->src[1]) &&
                      ember_nelements(dst->src[0]) == n && ember_nelements(dst->src[1]) == n;
    if (xq && flat && k_swiglu_flat_q) {
        cu_launch(ctx, swiglu_flat_q_kernel, elem_blocks(n), k_threads, 0, static_cast<const float *>(dst->src[0]->data),
                  static_cast<const float *>(dst->src[1]->data), static_cast<float *>(dst->data), n, xq, static_cast<float2 *>(xds));
    } else if (xq) {
        cu_launch(ctx, swiglu_kernel<true>, elem_blocks(n), k_threads, 0, cu_desc(dst->src[0]), cu_desc(dst->src[1]), cu_desc(dst), n, xq,
                                                                           static_cast<float2 *>(xds));
    } else if (flat && n % 4 == 0 && aligned16(dst->data) && aligned16(dst->src[0]->data) && aligned16(dst->src[1]->data) &&
               k_swiglu_vec) {
        cu_launch(ctx, swiglu_flat4_kernel, elem_blocks(n / 4), k_threads, 0, static_cast<const float4 *>(dst->src[0]->data),
                  static_cast<const float4 *>(dst->src[1]->data), static_cast<float4 *>(dst->data), n / 4);
    } else if (flat) {
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
