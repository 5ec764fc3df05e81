// MUL_MAT for many columns (prefill), the simplest correct way: cuBLAS GemmEx with F32
// accumulation. F32 weights multiply F32 activations as they are; F16 and BF16 weights are
// used in place with the activations converted to the same type; quantized weights are
// dequantized to F16 by slabs of rows into scratch memory (at most k_slab_bytes) for cuBLAS, with
// the activations converted to F16; EMBER_CUDA_MMQ=1 sends them to the tensor-core kernel of
// ops-matmul-q.cu instead (see mmq_enabled).
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-ext.h"

namespace {

constexpr size_t   k_slab_bytes = 64u << 20;
constexpr int      k_threads    = 256;
constexpr unsigned k_max_blocks = 65535u * 16u;

unsigned grid_for(int64_t n) {
    const unsigned b = cu_blocks(n, k_threads);
    return b < k_max_blocks ? b : k_max_blocks;
}

template <int T>
__global__ void dequant_f16_kernel(const char * w, int64_t w_nb1, int64_t k, int64_t n_items, __half * out) {
    cu_pdl_begin();
    const int64_t nc = k / 32;
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        const int64_t r = idx / nc;
        const int64_t c = idx % nc;
        uint32_t      h[16];
        cu_chunk_h2<T>(w + r * w_nb1, c, h);
        __half2 * o = reinterpret_cast<__half2 *>(out + r * k + 32 * c);
#pragma unroll
        for (int j = 0; j < 16; j++) o[j] = cu_h2_bits(h[j]);
    }
}

// The same two dequantizers with coalesced stores: each lane decodes one 32-weight chunk (64
// bytes of F16), the warp's 32 chunks (2 KiB, contiguous in the output) go through shared
// memory and out as 16-byte stores by consecutive lanes. The kernels above store 2 bytes per
// lane 64 bytes apart: 32 partly written sectors per store instruction, which made the
// dequantization of every prefill matmul cost more than its GEMM. EMBER_CUDA_DQ=0: the old ones.
constexpr int k_dq_warps = k_threads / 32;

template <int T, bool RP>
__global__ void __launch_bounds__(k_threads) dequant_f16_co_kernel(const char * w, int64_t w_nb1, int64_t nblk, int64_t g0, int64_t k,
                                                                  int64_t n_items, __half * out) {
    cu_pdl_begin();
    __shared__ uint4 sbuf[k_dq_warps][32 * 4];
    const int     lane   = threadIdx.x % 32;
    const int     wi     = threadIdx.x / 32;
    const int64_t nc     = k / 32;
    const int64_t stride = (int64_t) gridDim.x * k_threads;
    for (int64_t base = ((int64_t) blockIdx.x * k_dq_warps + wi) * 32; base < n_items; base += stride) {
        const int64_t idx = base + lane;
        uint32_t      h[16];
        if (idx < n_items) {
            if constexpr (RP) {
                cu_rp_chunk_h2<T>(w, nblk, g0 * nc + idx, h);
            } else {
                cu_chunk_h2<T>(w + (idx / nc) * w_nb1, idx % nc, h);
            }
        }
        cu_warp_store_h2_chunks(sbuf[wi], lane, h, idx < n_items, out, base, n_items - base);
    }
}

bool dq_coalesced() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_DQ");
    return on;
}

// Quantized weights go to the tensor-core kernels of ops-matmul-q.cu (wgmma on Hopper, mma.sync
// from sm_80), the default since session 62; EMBER_CUDA_MMQ=0: dequantize + cuBLAS (read at every
// call: tests compare the two). Issue 6 keeps cuBLAS for F16 / BF16 weights. H100 pp512, session
// 62, against dequantize + cuBLAS: 8B Q4_0 19.1k vs 17.2k t/s, Q8_0 19.5k vs 15.4k, Q4_K_M 16.9k
// vs 17.1k; the 1B's smaller products are slower (Q8_0 92.8k vs 97.4k, Q4_K_M 85.0k vs 105.8k:
// their k splits, PERF-NOTES.md), still 1.75-2x llama.cpp's.
bool mmq_enabled() {
    return ember_cuda_env_choice("EMBER_CUDA_MMQ", 1, {0, 1}) == 1;
}

// Weights in the CUDA layout (cuda-repack.h): rows g0 .. of the tensor's nblk blocks.
template <int T>
__global__ void dequant_f16_rp_kernel(const char * w, int64_t nblk, int64_t g0, int64_t k, int64_t n_items, __half * out) {
    cu_pdl_begin();
    const int64_t nc = k / 32;
    for (int64_t idx = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; idx < n_items; idx += (int64_t) gridDim.x * blockDim.x) {
        uint32_t h[16];
        cu_rp_chunk_h2<T>(w, nblk, g0 * nc + idx, h);  // rows g0 .. are consecutive blocks
        __half2 * o = reinterpret_cast<__half2 *>(out + idx * 32);
#pragma unroll
        for (int j = 0; j < 16; j++) o[j] = cu_h2_bits(h[j]);
    }
}

struct dequant_launch {
    ember_cuda_ctx & ctx;
    const char *     w;
    int64_t          w_nb1, k, rows;
    __half *         out;
    template <int T> void operator()() const {
        const int64_t n = rows * (k / 32);
        if (dq_coalesced()) {
            cu_launch(ctx, dequant_f16_co_kernel<T, false>, grid_for(n), k_threads, 0, w, w_nb1, 0, 0, k, n, out);
        } else {
            cu_launch(ctx, dequant_f16_kernel<T>, grid_for(n), k_threads, 0, w, w_nb1, k, n, out);
        }
    }
};

// Columns of one x matrix to a contiguous [k, m] matrix of half or bfloat16: blockIdx.y walks
// the columns, so there is no 64-bit division per element (which made this conversion cost
// more than the dequantization of the weight it multiplies).
template <typename H>
__global__ void convert_x_kernel(const char * x, int64_t x_nb1, int64_t k, int64_t m, H * out) {
    cu_pdl_begin();
    for (int64_t c = blockIdx.y; c < m; c += gridDim.y) {
        const float * xc = reinterpret_cast<const float *>(x + c * x_nb1);
        H *           oc = out + c * k;
        for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < k; i += (int64_t) gridDim.x * blockDim.x) {
            const float v = xc[i];
            if constexpr (std::is_same<H, __half>::value) {
                oc[i] = __float2half_rn(v);
            } else {
                oc[i] = __ushort_as_bfloat16(cu_to_bf16(v));
            }
        }
    }
}

dim3 convert_grid(int64_t k, int64_t m) {
    const unsigned bx = cu_blocks(k, k_threads);
    return dim3(bx < 1024u ? bx : 1024u, static_cast<unsigned>(m < 65535 ? m : 65535));
}

// EMBER_CUDA_CONVERT_X8=0: the one-value conversion kernel everywhere; EMBER_CUDA_XH_REUSE=0: no
// reuse of the 16-bit copy (both read at every call: tests compare).
bool convert_x8_on() {
    return ember_cuda_env_on("EMBER_CUDA_CONVERT_X8");
}
bool xh_reuse_on() {
    return ember_cuda_env_on("EMBER_CUDA_XH_REUSE");
}

// The same with 8 values a thread (k a multiple of 8, x's columns 16-byte aligned): two float4
// loads and one 16-byte store, where the kernel above moved 4 and 2 bytes a thread (11-17 us a
// prefill MUL_MAT on an H200 at 512 columns, ~0.5 TB/s: 13% of a 1B pp512 step).
template <typename H>
__global__ void __launch_bounds__(256) convert_x8_kernel(const char * x, int64_t x_nb1, int64_t k8, int64_t m, H * out) {
    cu_pdl_begin();
    for (int64_t c = blockIdx.y; c < m; c += gridDim.y) {
        const float4 * xc = reinterpret_cast<const float4 *>(x + c * x_nb1);
        uint4 *        oc = reinterpret_cast<uint4 *>(out + c * k8 * 8);
        for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < k8; i += (int64_t) gridDim.x * blockDim.x) {
            const float4 a = xc[2 * i], b = xc[2 * i + 1];
            const float  v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            uint32_t     w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if constexpr (std::is_same<H, __half>::value) {
                    w[j] = cu_pack_h2(v[2 * j], v[2 * j + 1]);
                } else {
                    w[j] = static_cast<uint32_t>(cu_to_bf16(v[2 * j])) | static_cast<uint32_t>(cu_to_bf16(v[2 * j + 1])) << 16;
                }
            }
            oc[i] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

template <typename H>
void convert_x(ember_cuda_ctx & ctx, const char * x, int64_t x_nb1, int64_t k, int64_t m, H * out) {
    const dim3 grid0 = convert_grid(k, m);
    if (k % 8 == 0 && x_nb1 % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
        convert_x8_on()) {
        const dim3 grid(cu_blocks(k / 8, k_threads) < 1024u ? cu_blocks(k / 8, k_threads) : 1024u, grid0.y);
        cu_launch(ctx, convert_x8_kernel<H>, grid, k_threads, 0, x, x_nb1, k / 8, m, out);
    } else {
        cu_launch(ctx, convert_x_kernel<H>, grid0, k_threads, 0, x, x_nb1, k, m, out);
    }
}

// The profile's label of a prefill GEMM step; with EMBER_CUDA_PROFILE_SHAPES=1 also the
// weight's rows x k, its type id and the tokens (which products of a model cost what).
void gemm_mark(ember_cuda_ctx & ctx, const char * what, const ember_tensor * w, int64_t n, int64_t m) {
    if (!ctx.prof) return;
    static const bool shapes = ember_cuda_env_choice("EMBER_CUDA_PROFILE_SHAPES", 0, {0, 1}) == 1;
    std::string l = std::string("MUL_MAT [batch]: ") + what;
    if (shapes) {
        l += " " + std::to_string(n) + "x" + std::to_string(w->ne[0]) + " type " + std::to_string(static_cast<int>(w->type)) + " m=" +
             std::to_string(m);
    }
    ember_cuda_prof_mark(ctx, l.c_str());
}

ember_status blas_status(cublasStatus_t st, const char * what) {
    if (st == CUBLAS_STATUS_SUCCESS) return EMBER_OK;
    std::fprintf(stderr, "ember: cuda: %s failed: cuBLAS status %d\n", what, static_cast<int>(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? EMBER_ERR_OOM : EMBER_ERR_BACKEND;
}

}  // namespace

ember_status ember_cuda_dequant_f16(ember_cuda_ctx & ctx, const ember_tensor * w, const char * wdata, int64_t r0, int64_t r1,
                                    void * out) {
    if (r1 <= r0) return EMBER_OK;
    if (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) {
        const char *  base = static_cast<const char *>(w->data);
        const int64_t g0   = (wdata - base) / static_cast<int64_t>(w->nb[1]) + r0;  // contiguous: matrices are row ranges
        if (ember_cuda_ext_layout(w)) return ember_cuda_ext_dequant_f16(ctx, w, g0, r1 - r0, out);  // Ember's types
        if (w->type == EMBER_TYPE_Q6_K) {  // the planar layout: rows where they were
            dequant_launch{ctx, wdata + r0 * static_cast<int64_t>(w->nb[1]), static_cast<int64_t>(w->nb[1]), w->ne[0], r1 - r0,
                           static_cast<__half *>(out)}
                .template operator()<CU_Q6_K_PLANAR>();
            return ember_cuda_check_launch("dequantize to f16 (planar q6_k)");
        }
        const int64_t nblk = ember_nrows(w) * (w->ne[0] / 32);
        const int64_t n    = (r1 - r0) * (w->ne[0] / 32);
        __half *      o    = static_cast<__half *>(out);
        const bool    co   = dq_coalesced();
        if (w->type == EMBER_TYPE_Q4_0 && co) {
            cu_launch(ctx, dequant_f16_co_kernel<EMBER_TYPE_Q4_0, true>, grid_for(n), k_threads, 0, base, 0, nblk, g0, w->ne[0], n, o);
        } else if (w->type == EMBER_TYPE_Q8_0 && co) {
            cu_launch(ctx, dequant_f16_co_kernel<EMBER_TYPE_Q8_0, true>, grid_for(n), k_threads, 0, base, 0, nblk, g0, w->ne[0], n, o);
        } else if (w->type == EMBER_TYPE_Q4_0) {
            cu_launch(ctx, dequant_f16_rp_kernel<EMBER_TYPE_Q4_0>, grid_for(n), k_threads, 0, base, nblk, g0, w->ne[0], n, o);
        } else if (w->type == EMBER_TYPE_Q8_0) {
            cu_launch(ctx, dequant_f16_rp_kernel<EMBER_TYPE_Q8_0>, grid_for(n), k_threads, 0, base, nblk, g0, w->ne[0], n, o);
        } else {
            return EMBER_ERR_UNSUPPORTED;
        }
        return ember_cuda_check_launch("dequantize to f16 (cuda layout)");
    }
    dequant_launch l{ctx, wdata + r0 * static_cast<int64_t>(w->nb[1]), static_cast<int64_t>(w->nb[1]), w->ne[0], r1 - r0,
                     static_cast<__half *>(out)};
    if (!cu_dispatch_chunk_type(w->type, l)) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("dequantize to f16");
}

ember_status ember_cuda_mul_mat_blas(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * w  = dst->src[0];
    const ember_tensor * x  = dst->src[1];
    const int64_t        k  = w->ne[0];
    const int64_t        n  = w->ne[1];
    const int64_t        m  = x->ne[1];
    const int64_t        b2 = x->ne[2] / w->ne[2];
    const int64_t        b3 = x->ne[3] / w->ne[3];
    if (ember_nelements(dst) == 0) return EMBER_OK;
    if (k > INT32_MAX || n > INT32_MAX || m > INT32_MAX) return EMBER_ERR_UNSUPPORTED;

    cublasStatus_t bst = cublasSetStream(ctx.cublas, ctx.stream);
    if (bst != CUBLAS_STATUS_SUCCESS) return blas_status(bst, "cublasSetStream");
    const float alpha = 1.0f, beta = 0.0f;
    const int   ldc   = static_cast<int>(dst->nb[1] / sizeof(float));

    for (int64_t i3 = 0; i3 < x->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
            const char * wm = static_cast<const char *>(w->data) + (i2 / b2) * w->nb[2] + (i3 / b3) * w->nb[3];
            const char * xm = static_cast<const char *>(x->data) + i2 * x->nb[2] + i3 * x->nb[3];
            char *       ym = static_cast<char *>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3];

            if (w->type == EMBER_TYPE_F32) {
                bst = cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int) n, (int) m, (int) k, &alpha, wm, CUDA_R_32F,
                                   (int) (w->nb[1] / 4), xm, CUDA_R_32F, (int) (x->nb[1] / 4), &beta, ym, CUDA_R_32F, ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                if (bst != CUBLAS_STATUS_SUCCESS) return blas_status(bst, "cublasGemmEx (f32)");
                continue;
            }

            // Activations in the weight's 16-bit type (F16 for quantized weights), or the copy
            // the last prefill MUL_MAT over the same x left in slot 0 (ctx.xh_valid: K and V
            // after Q, up after gate; EMBER_CUDA_XH_REUSE=0: converted every time).
            const bool           bf16  = w->type == EMBER_TYPE_BF16;
            const cudaDataType_t ht    = bf16 ? CUDA_R_16BF : CUDA_R_16F;
            const size_t         bytes = static_cast<size_t>(k * m) * 2;
            const bool           one   = x->ne[2] * x->ne[3] == 1;
            ember_status         st    = EMBER_OK;
            void *               xh    = nullptr;
            if (one && ctx.xh_valid && ctx.xh_x == x && ctx.xh_bf16 == bf16 && ctx.xh_buf == ctx.scratch[0] && ctx.scratch_size[0] >= bytes &&
                xh_reuse_on()) {
                xh = ctx.scratch[0];
            } else {
                ctx.xh_valid = false;
                xh           = ember_cuda_scratch(ctx, 0, bytes);
                if (!xh) return EMBER_ERR_OOM;
                if (bf16) {
                    convert_x(ctx, xm, (int64_t) x->nb[1], k, m, static_cast<__nv_bfloat16 *>(xh));
                } else {
                    convert_x(ctx, xm, (int64_t) x->nb[1], k, m, static_cast<__half *>(xh));
                }
                st = ember_cuda_check_launch("convert activations");
                if (st != EMBER_OK) return st;
                if (one) ember_cuda_xh_made(ctx, x, xh, bf16);
                gemm_mark(ctx, "convert x to 16 bits", w, n, m);
            }

            if (w->type == EMBER_TYPE_F16 || bf16) {
                bst = cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int) n, (int) m, (int) k, &alpha, wm, ht,
                                   (int) (w->nb[1] / 2), xh, ht, (int) k, &beta, ym, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT);
                if (bst != CUBLAS_STATUS_SUCCESS) return blas_status(bst, "cublasGemmEx (16-bit)");
                gemm_mark(ctx, "cuBLAS GEMM", w, n, m);
                continue;
            }

            // Quantized: the tensor-core kernel that dequantizes tiles in shared memory
            // (ops-matmul-q.cu); with EMBER_CUDA_MMQ=0, for types it does not read and on GPUs
            // before sm_80, slabs of rows dequantized to F16 for cuBLAS.
            if (mmq_enabled()) {
                st = ember_cuda_mul_mat_q(ctx, w, wm, xh, m, ym, ldc);
                if (st != EMBER_ERR_UNSUPPORTED) {
                    if (st != EMBER_OK) return st;
                    gemm_mark(ctx, "tensor-core GEMM (quantized weight)", w, n, m);
                    continue;
                }
            }
            int64_t slab = static_cast<int64_t>(k_slab_bytes / (static_cast<size_t>(k) * 2));
            if (slab < 1) slab = 1;
            if (slab > n) slab = n;
            void * wh = ember_cuda_scratch(ctx, 1, static_cast<size_t>(slab * k) * 2);
            if (!wh) return EMBER_ERR_OOM;
            for (int64_t r0 = 0; r0 < n; r0 += slab) {
                const int64_t r1 = r0 + slab < n ? r0 + slab : n;
                st               = ember_cuda_dequant_f16(ctx, w, wm, r0, r1, wh);
                if (st != EMBER_OK) return st;
                gemm_mark(ctx, "dequantize weights to F16", w, n, m);
                bst = cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int) (r1 - r0), (int) m, (int) k, &alpha, wh,
                                   CUDA_R_16F, (int) k, xh, CUDA_R_16F, (int) k, &beta, ym + r0 * sizeof(float), CUDA_R_32F, ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                if (bst != CUBLAS_STATUS_SUCCESS) return blas_status(bst, "cublasGemmEx (dequantized)");
                gemm_mark(ctx, "cuBLAS GEMM", w, n, m);
            }
        }
    }
    return EMBER_OK;
}
