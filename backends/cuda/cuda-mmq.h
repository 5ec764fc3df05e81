// The tensor-core prefill GEMM for quantized weights, shared by its two kernels: mma.sync tiles
// (ops-matmul-q.cu, sm_80 and later) and wgmma tiles (ops-matmul-wgmma.cu, sm_90a: Hopper).
#ifndef EMBER_CUDA_MMQ_H
#define EMBER_CUDA_MMQ_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include "cuda-ops.h"
#include "cuda-repack.h"

// The weight's layout: the GGUF blocks (a row's byte offset), the CUDA layout of Q4_0 / Q8_0
// (cuda-repack.h: a row's first block), or Ember's types in the CUDA ext layout (its row).
enum { k_mmq_gguf = 0, k_mmq_rp = 1, k_mmq_ext = 2 };

// Whether the tensor-core kernels read weight type T in layout L: every quantized type in the
// GGUF layout, Q4_0 / Q8_0 in theirs, Ember's types in the ext layout (F32 / F16 / BF16: cuBLAS).
constexpr bool mmq_reads(int T, int L) {
    if (T == EMBER_TYPE_F32 || T == EMBER_TYPE_F16 || T == EMBER_TYPE_BF16) return false;
    if (L == k_mmq_rp) return T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_Q8_0;
    if (L == k_mmq_ext) return ember_cuda_repack_is_ext(static_cast<ember_type>(T));
    return true;
}

// Calls f(std::integral_constant<int, L>{}) for the layout L that is `layout` where the kernels
// read type T in it (the launch dispatches of both GEMM files); false where they do not.
template <int T, typename F> bool mmq_with_layout(int layout, F && f) {
    if constexpr (mmq_reads(T, k_mmq_gguf)) {
        if (layout == k_mmq_gguf) return f(std::integral_constant<int, k_mmq_gguf>{}), true;
    }
    if constexpr (mmq_reads(T, k_mmq_rp)) {
        if (layout == k_mmq_rp) return f(std::integral_constant<int, k_mmq_rp>{}), true;
    }
    if constexpr (mmq_reads(T, k_mmq_ext)) {
        if (layout == k_mmq_ext) return f(std::integral_constant<int, k_mmq_ext>{}), true;
    }
    return false;
}

// A weight in the ext layout (ops-matvec-ext.cu's ext_layout): quants in rows of rowq bytes
// (INT4: 16 bytes a 32-weight chunk, NF4: 32 a 64-weight block, FP8: 32 a chunk), the block
// scales s (INT4: (d, z) halves; NF4: absmax_q bytes; FP8: E8M0 bytes, _ROW: an fp32 a row), NF4's
// group headers h (scale2, offset; ng a row).
struct mmq_ext {
    const uint8_t * q;
    const uint8_t * s;
    const uint8_t * h;
    int64_t         rowq;
    int             nb, ng;
};

// Where the weight matrix's rows are (one matrix of a possibly batched weight), the
// activations and the output.
struct mmq_args {
    const char *   w;      // GGUF layout: the matrix's first row
    int64_t        w_nb1;  // its row stride
    const char *   base;   // CUDA layout: the tensor's data
    int64_t        nblk;   // CUDA layout: blocks in the whole tensor
    int64_t        g0;     // CUDA / ext layout: the matrix's first row, counted over the tensor
    mmq_ext        ext;    // ext layout: the tensor's planes
    int64_t        cbytes; // bytes per 32 weights (prefetch addresses)
    int64_t        nc;     // 32-weight chunks per row (k / 32)
    int64_t        k, n, m;
    const __half * x;      // [m][k]
    float *        y;      // y[t * ldy + r]
    int64_t        ldy;
    bool           y2;     // float2 stores are aligned
    int            kper;   // k steps per split (blockIdx.z): all of them when there is one split
    float *        part;   // several splits: split z's sums at part + z m n, rows of n
};

// The ext layout's planes of w (2-D or batched, one of Ember's types, flagged as converted).
mmq_ext ember_cuda_mmq_ext(const ember_tensor * w);

#ifdef __CUDACC__
// What the kernels do per weight chunk and per output pair. A thread's weight row is `row`
// (GGUF layout: its byte offset from a.w; CUDA layout: its first block; ext layout: the row,
// counted over the tensor; mmq_row), chunk c of it.

// A 32-weight chunk of Ember's types in the ext layout: fetch loads its bytes and scale data (no
// arithmetic, so the loads stay in flight), floats makes its weights (INT4 d (q - z), NF4 NF4[q]
// absmax, FP8 code times its scale), decode the same as F16 pairs with the bits the F16
// dequantizer of the cuBLAS path gives (floats rounded by __floats2half2_rn; block FP8 and INT4
// with an integer zero point in f16 arithmetic that rounds once to the same value, NF4 through
// its block's 16 values rounded once and looked up by byte permutes, the rest through floats).
// The FP8 forms (also the decode kernels' of ops-matvec-ext.cu): one scale a row (_ROW) or an
// E8M0 byte a 32-weight chunk; E4M3 or E5M2 codes.
__host__ __device__ constexpr bool cu_fp8_is_row(int T) {
    return T == EMBER_TYPE_FP8_E4M3_ROW || T == EMBER_TYPE_FP8_E5M2_ROW;
}
__host__ __device__ constexpr bool cu_fp8_is_e4m3(int T) {
    return T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E4M3_ROW;
}
template <int T> struct cu_ext_h2 {
    static constexpr bool int4 = T == EMBER_TYPE_INT4 || T == EMBER_TYPE_INT4_G32;
    static constexpr bool nf4  = T == EMBER_TYPE_NF4;
    static constexpr bool row8 = cu_fp8_is_row(T);
    static constexpr bool e4m3 = cu_fp8_is_e4m3(T);
    struct raw {
        uint4    v[2];  // INT4: v[0]; NF4: the block's 32 bytes; FP8: the chunk's 32 codes
        float2   hd;    // NF4: the group header (scale2, offset); FP8 _ROW: .x the row's scale
        uint32_t sc;    // INT4: (d, z) halves; NF4: absmax_q; FP8: the E8M0 byte
        uint32_t sh;    // NF4: the chunk's half of each word (0 or 16)
    };
    static __device__ __forceinline__ void fetch(const mmq_ext & L, int64_t g, int c, raw & r) {
        const uint8_t * row = L.q + g * L.rowq;
        if constexpr (int4) {
            constexpr int runs = T == EMBER_TYPE_INT4 ? 4 : 1;  // chunks a scale word
            r.v[0] = *reinterpret_cast<const uint4 *>(row + 16 * static_cast<int64_t>(c));
            r.sc   = reinterpret_cast<const uint32_t *>(L.s)[g * L.nb + c / runs];
        } else if constexpr (nf4) {
            const int b = c / 2;
            r.v[0]      = reinterpret_cast<const uint4 *>(row + 32 * static_cast<int64_t>(b))[0];
            r.v[1]      = reinterpret_cast<const uint4 *>(row + 32 * static_cast<int64_t>(b))[1];
            r.hd        = reinterpret_cast<const float2 *>(L.h)[g * L.ng + b / 256];
            r.sc        = L.s[g * L.nb + b];
            r.sh        = static_cast<uint32_t>(c % 2) * 16;
        } else {
            r.v[0] = reinterpret_cast<const uint4 *>(row + 32 * static_cast<int64_t>(c))[0];
            r.v[1] = reinterpret_cast<const uint4 *>(row + 32 * static_cast<int64_t>(c))[1];
            if constexpr (row8) r.hd.x = reinterpret_cast<const float *>(L.s)[g];
            else r.sc = L.s[g * L.nb + c];
        }
    }
    // NF4: the block's absmax, dyn[absmax_q] scale2 + offset (as the CPU: no FMA).
    static __device__ __forceinline__ float nf4_absmax(const raw & r) {
        return __fadd_rn(__fmul_rn(cu_nf4_dyn.v[r.sc], r.hd.x), r.hd.y);
    }
    // The chunk's 32 weights as floats (ops-matvec-ext.cu's ext_chunk: the ext dequantizer; NF4
    // reads the codebook from cu_nf4_smem, which its kernels fill first).
    static __device__ __forceinline__ void floats(const raw & r, float (&y)[32]) {
        if constexpr (int4) {
            const uint32_t w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
            cu_int4_floats(w, r.sc, y);
        } else if constexpr (nf4) {
            const uint32_t w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w, r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
            const float    s    = nf4_absmax(r);
#pragma unroll
            for (int i = 0; i < 32; i++) y[i] = cu_nf4_smem[(w[i / 4] >> (r.sh + 4 * (i % 4))) & 0xfu] * s;  // (filled by the caller)
        } else {
            const uint32_t w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w, r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
            const float    s    = row8 ? r.hd.x : cu_fp8_e8m0_scale(r.sc);
#pragma unroll
            for (int i = 0; i < 32; i++) y[i] = cu_fp8<e4m3>((w[i / 4] >> (8 * (i % 4))) & 0xffu) * s;
        }
    }
    static __device__ __forceinline__ void decode(const raw & r, uint32_t (&h)[16]) {
        if constexpr (!int4 && !nf4 && !row8) {
            // Block FP8 in f16 arithmetic (cu_fp8_words_h2): the same bits as floats' values rounded
            // to f16.
            const uint32_t w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w, r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
            cu_fp8_words_h2<e4m3, 8>(w, r.sc, h);
            return;
        }
        if constexpr (nf4) {  // (cu_nf4_h2_make: the floats' values rounded once, looked up)
            const uint32_t        w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w, r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
            const cu_nf4_h2_table t    = cu_nf4_h2_make(nf4_absmax(r));
#pragma unroll
            for (int q = 0; q < 8; q++) cu_nf4_h2_lookup(t, w[q] >> r.sh, h + 2 * q);
            return;
        }
        if constexpr (int4) {  // (cu_int4_h2: blocks with an integer zero point; the others below)
            const uint32_t w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
            if (cu_int4_h2(w, r.sc, h)) return;
        }
        float y[32];
        floats(r, y);
#pragma unroll
        for (int i = 0; i < 16; i++) h[i] = cu_h2_u32(__floats2half2_rn(y[2 * i], y[2 * i + 1]));
    }
};

// The weight chunk codec of layout L.
template <int T, int L>
using mmq_codec = std::conditional_t<L == k_mmq_rp, cu_rp_h2<T>, std::conditional_t<L == k_mmq_ext, cu_ext_h2<T>, cu_codec_h2<T>>>;

// Row r of the matrix (r < n) as the kernels address it.
template <int L> __device__ __forceinline__ int64_t mmq_row(const mmq_args & a, int64_t r) {
    if constexpr (L == k_mmq_rp) return (a.g0 + r) * a.nc;
    else if constexpr (L == k_mmq_ext) return a.g0 + r;
    else return r * a.w_nb1;
}

// The chunk's bytes into r (WC: mmq_codec<T, L>).
template <typename WC, int L>
__device__ __forceinline__ void mmq_fetch_chunk(const mmq_args & a, int64_t row, int c, typename WC::raw & r) {
    if constexpr (L == k_mmq_rp) WC::fetch(a.base, a.nblk, row + c, r);
    else if constexpr (L == k_mmq_ext) WC::fetch(a.ext, row, c, r);
    else WC::fetch(a.w + row, c, r);
}

// The address of the chunk's first bytes (for an L2 prefetch; ext layout: cbytes a chunk).
template <int L> __device__ __forceinline__ const void * mmq_chunk_addr(const mmq_args & a, int64_t row, int c) {
    if constexpr (L == k_mmq_rp) return a.base + (row + c) * a.cbytes;
    else if constexpr (L == k_mmq_ext) return a.ext.q + row * a.ext.rowq + c * a.cbytes;
    else return a.w + row + c * a.cbytes;
}

// Where a block's sums go: y itself, or split blockIdx.z's slot of the partial sums.
struct mmq_out {
    float * y;
    int64_t ldy;
    bool    y2;  // float2 stores are aligned
};
__device__ __forceinline__ mmq_out mmq_output(const mmq_args & a) {
    if (gridDim.z > 1) return {a.part + blockIdx.z * a.m * a.n, a.n, a.n % 2 == 0};
    return {a.y, a.ldy, a.y2};
}

// Rows r and r + 1 of token t (t < m), as far as they exist.
__device__ __forceinline__ void mmq_store_pair(const mmq_out & o, int64_t n, int t, int r, float v0, float v1) {
    float * yt = o.y + static_cast<int64_t>(t) * o.ldy;
    if (o.y2 && r + 1 < n) {
        *reinterpret_cast<float2 *>(yt + r) = make_float2(v0, v1);
    } else {
        if (r < n) yt[r] = v0;
        if (r + 1 < n) yt[r + 1] = v1;
    }
}
#endif

// Raises a kernel's dynamic shared-memory limit (above the 48 KiB default) once per device;
// `done` is that kernel's own set of devices (ops-matmul-q.cu).
bool ember_cuda_allow_smem(const void * kernel, std::atomic<uint64_t> & done, int device, int bytes);

// The most k splits a product of `steps` k steps takes (plan_splits; the wide tile's choice
// counts on it): 8, each at least 4 steps, at least one.
constexpr int64_t mmq_max_splits(int64_t steps) {
    return steps / 4 < 1 ? 1 : steps / 4 > 8 ? 8 : steps / 4;
}

// The wgmma kernel's tile as the launch plans it: weight rows and tokens a block, 32-weight
// chunks a k step, blocks an SM holds (128 x 128, 2, 2; the wide form 128 x 256, 4, 1; the
// warp-specialized one 128 x 128, 2, 1), by the switches of this call and, unless
// EMBER_CUDA_MMQ_WIDE says, the product's shape (n weight rows, m tokens, nc chunks a row) on
// `sms` SMs.
struct mmq_wg_tile {
    int rows, tokens, chunks_per_step, blocks_per_sm;
};
mmq_wg_tile ember_cuda_mmq_wg_tile(int64_t n, int64_t m, int64_t nc, int sms);

// Whether this device runs the wgmma kernel: a Hopper GPU and a module built with sm_90a code
// (EMBER_CUDA_ARCHS holding 90); asked once per device by a one-thread probe kernel (false
// while the stream captures a graph, then asked again later).
bool ember_cuda_mmq_wg_available(ember_cuda_ctx & ctx);

// Whether the wgmma kernel's k splits merge in a thread block cluster (no partial sums in global
// memory, no reduce launch): then the caller plans them without a.part (EMBER_CUDA_MMQ_CLUSTER=1;
// never for the warp-specialized form).
bool ember_cuda_mmq_wg_cluster_merge();

// Launches the wgmma kernel in `tile`'s form over `grid` (rows and tokens over the tile's, splits)
// for weight type t in layout k_mmq_gguf / _rp / _ext (t CU_Q6_K_PLANAR: planar Q6_K, addressed
// as the GGUF layout); EMBER_ERR_UNSUPPORTED when it has no
// kernel for that type and layout. Splits (grid.z > 1) with a.part null merge in a cluster of
// grid.z blocks.
ember_status ember_cuda_mmq_wg_launch(ember_cuda_ctx & ctx, int t, int layout, const mmq_args & a, dim3 grid, const mmq_wg_tile & tile);

#endif  // EMBER_CUDA_MMQ_H
