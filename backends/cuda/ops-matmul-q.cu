// MUL_MAT for many columns (prefill) with a quantized weight: a tensor-core GEMM that
// dequantizes the weight tile by tile into shared memory (no F16 copy of the weight in global
// memory, no cuBLAS), issue 6 item 3.
//
// y[t][r] = sum_k W[r][k] x[t][k], the activations x already converted to F16 ([m][k],
// ops-matmul.cu's convert_x_kernel). A block computes BM weight rows x BN tokens, walking k in
// steps of BK = 64 (two 32-weight chunks per row):
// - the weight tile: each thread fetches the bytes of one 32-weight chunk (the type's
//   cu_codec_h2 for the GGUF layout, cu_rp_h2 for the CUDA layout of Q4_0 / Q8_0,
//   cuda-common.cuh) before the products of the step before, decodes them to F16 pairs after
//   those products (Q4_0, Q8_0, Q4_K, Q6_K in half2 arithmetic; the other types through floats)
//   and stores 64 bytes into shared memory; the weight bytes of step s + 2 are prefetched into L2;
// - the activation tile: 16-byte cp.async copies into the other of two stages (zero-filled past
//   m and k);
// - the products: ldmatrix + mma.sync.m16n8k16 (F16 x F16 -> F32), the tokens as mma's A operand
//   (rows of 16), the weight rows as B (columns of 8), so each thread's accumulator pairs are two
//   adjacent weight rows: float2 stores into y's rows (dst->nb[1] apart).
// Shared-memory rows are padded to 72 halves (144 bytes): the 8 rows an ldmatrix reads fall in
// distinct banks. Two tile shapes: 128 x 128 (8 warps, 32 rows x 64 tokens each) when the
// output has enough tiles to fill the GPU, else 64 x 64 (4 warps, 32 x 32): the 1B model's
// 2048-row matrices at 512 tokens are 64 big tiles for 132 SMs. EMBER_CUDA_MMQ_TILE=128|64
// forces one.
//
// On Hopper (sm_90a code in the module) the wgmma kernel of ops-matmul-wgmma.cu runs instead
// (EMBER_CUDA_MMQ_WG=0: this one). Opt-in for now (EMBER_CUDA_MMQ=1, ops-matmul.cu): on an H200
// (session 7, pp512 t/s) wgmma / this kernel / dequantize + cuBLAS: 1B Q4_0 52.0k / 46.3k / 61.0k,
// 1B Q8_0 49.9k / 45.0k / 61.2k, 1B Q4_K_M 37.2k / 37.3k / 59.1k, 8B Q4_0 11.5k / 10.0k / 11.8k,
// 8B Q8_0 11.1k / 9.3k / 10.6k, 8B Q4_K_M 7.0k / 6.7k / 11.1k. Decoding in half2 instead of
// floats took this kernel's K-quants from 24k to 37k (1B Q4_K_M) and Q4_0 not at all: ncu shows
// it latency-bound (issue slots 29%, tensor pipe 30%, 3 warps per scheduler), where cuBLAS's
// wgmma kernel takes 12.6 us for the 1B model's 2048 x 2048 x 512 product against its 31 us.
// The K-quants' chunk fetches were their limit: 16-byte / word loads instead of 14 (Q4_K) and
// 35 (Q6_K) narrow ones per chunk took the wgmma kernel's Q4_K_M from 37.2k to 43.6k (1B,
// llama.cpp 41.7k) and from 7.0k to 9.15k (8B, llama.cpp 9.7k). On an H100 (session 60) the wgmma
// kernel / dequantize + cuBLAS: 1B Q4_0 54.3k / 63.4k, Q8_0 52.7k / 62.2k, Q4_K_M 50.2k / 62.9k,
// 8B Q4_0 12.0k / 12.1k, Q8_0 11.6k / 11.9k, Q4_K_M 9.7k / 12.1k.
//
// sm_80 and later (cp.async, m16n8k16); older GPUs keep the dequantize + cuBLAS path
// (ember_cuda_mul_mat_q returns EMBER_ERR_UNSUPPORTED). Weights are read in three layouts
// (cuda-mmq.h, mmq_codec): the GGUF blocks, the CUDA layout of Q4_0 / Q8_0, and Ember's own types
// (INT4, NF4, FP8) in the CUDA ext layout (cu_ext_h2: the same F16 values as that layout's
// dequantizer); planar Q6_K (rows where the GGUF layout has them) through the GGUF path with the
// planar codec (since session 61; not yet measured: before, its products went to dequantize +
// cuBLAS even with EMBER_CUDA_MMQ=1, 4.8 + 0.9 of an 8B Q4_K_M pp512 step's 44.5 ms on an H200).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-ext.h"
#include "cuda-mmq.h"
#include "cuda-repack.h"

namespace {

constexpr int BK  = 64;      // k per pipeline step: two 32-weight chunks per row
constexpr int LDS = BK + 8;  // shared-memory row, in halves (padded: conflict-free ldmatrix)

// BM weight rows x BN tokens per block; WR x WT warps, each TR = BM / WR rows x TT = BN / WT tokens.
template <int BM, int BN, int WR, int WT> struct mmq_shape {
    static constexpr int NT  = WR * WT * 32;
    static constexpr int TR  = BM / WR, TT = BN / WT;
    static constexpr int MI  = TT / 16, NJ = TR / 8;     // mma tiles per warp (tokens, rows)
    static constexpr int CPT = BM * (BK / 32) / NT;     // weight chunks a thread decodes per step
    static constexpr int SPT = BN * (BK / 8) / NT;      // 16-byte activation copies per thread per step
    static constexpr int SMEM = 2 * (BM + BN) * LDS * 2;  // two stages, bytes
    static_assert(NJ % 2 == 0 && MI >= 1 && CPT >= 1 && SPT >= 1 && BM * (BK / 32) % NT == 0 && BN * (BK / 8) % NT == 0,
                  "tile shape");
};

template <int T, int L, int BM, int BN, int WR, int WT, bool PIPE>
__global__ void __launch_bounds__(WR * WT * 32, BM >= 128 ? 2 : 4) mmq_kernel(const mmq_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using S = mmq_shape<BM, BN, WR, WT>;
    extern __shared__ uint4 mmq_smem[];
    __half * sx = reinterpret_cast<__half *>(mmq_smem);  // [2][BN][LDS]
    __half * sw = sx + 2 * BN * LDS;                     // [2][BM][LDS]
    constexpr uint32_t XST = BN * LDS * 2, WST = BM * LDS * 2;  // bytes per stage

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wr = warp % WR, wt = warp / WR;
    const int n0 = static_cast<int>(blockIdx.x) * BM, m0 = static_cast<int>(blockIdx.y) * BN;
    const int nc = static_cast<int>(a.nc), kt0 = static_cast<int>(blockIdx.z) * a.kper;
    const int nkt = min((nc + 1) / 2 - kt0, a.kper);  // this split's steps

    // The weight chunks this thread decodes: chunk h[i] (0 or 1) of each step of row wrow[i].
    // fetch_w loads a step's bytes into wraw (issued before the products of the step before, so
    // they arrive meanwhile), decode_w turns them into F16 pairs in wreg (after the products).
    using WC = mmq_codec<T, L>;
    typename WC::raw wraw[S::CPT];
    uint32_t     wreg[S::CPT][16];
    int64_t      wrow[S::CPT];  // mmq_row
    bool         wok[S::CPT];
    int          wh[S::CPT];
    uint32_t     wdst[S::CPT];  // shared-memory byte offset in stage 0
    bool         wgo[S::CPT];   // the fetched chunk exists
#pragma unroll
    for (int i = 0; i < S::CPT; i++) {
        const int idx = tid + S::NT * i;
        const int r   = n0 + idx / 2;
        wok[i]        = r < a.n;
        wh[i]         = idx % 2;
        wrow[i]       = mmq_row<L>(a, r);
        wdst[i]       = cu_smem_addr(sw + (idx / 2) * LDS + 32 * (idx % 2));
    }
    const auto fetch_w = [&](int kt) {
#pragma unroll
        for (int i = 0; i < S::CPT; i++) {
            const int c = 2 * (kt0 + kt) + wh[i];
            wgo[i]      = wok[i] && c < nc;
            if (wgo[i]) mmq_fetch_chunk<WC, L>(a, wrow[i], c, wraw[i]);
        }
    };
    const auto decode_w = [&]() {
#pragma unroll
        for (int i = 0; i < S::CPT; i++) {
            if (wgo[i]) {
                WC::decode(wraw[i], wreg[i]);
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++) wreg[i][j] = 0u;
            }
        }
    };
    const auto store_w = [&](int st) {
#pragma unroll
        for (int i = 0; i < S::CPT; i++) {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(wdst[i] + st * WST + 16 * q), "r"(wreg[i][4 * q]),
                             "r"(wreg[i][4 * q + 1]), "r"(wreg[i][4 * q + 2]), "r"(wreg[i][4 * q + 3])
                             : "memory");
            }
        }
    };
    const auto prefetch_w = [&](int kt) {
#pragma unroll
        for (int i = 0; i < S::CPT; i++) {
            const int c = 2 * (kt0 + kt) + wh[i];
            if (wok[i] && c < nc) cu_prefetch_l2(mmq_chunk_addr<L>(a, wrow[i], c));
        }
    };

    // The activation copies of this thread: tokens xt0 + (NT / 8) i, 8 halves at k offset 8 seg.
    const int      seg = tid % 8, xt0 = tid / 8;
    const __half * xsrc = a.x + static_cast<int64_t>(m0 + xt0) * a.k + 8 * seg;
    const uint32_t xdst = cu_smem_addr(sx + xt0 * LDS + 8 * seg);
    const auto     load_x = [&](int kt, int st) {
        const int  kk  = BK * (kt0 + kt);
        const bool kok = kk + 8 * seg < a.k;
#pragma unroll
        for (int i = 0; i < S::SPT; i++) {
            constexpr int step = S::NT / 8;
            const bool    ok   = kok && m0 + xt0 + step * i < a.m;
            const __half * src = ok ? xsrc + static_cast<int64_t>(step * i) * a.k + kk : a.x;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(xdst + st * XST + step * i * LDS * 2), "l"(src),
                         "r"(ok ? 16 : 0)
                         : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    float acc[S::MI][S::NJ][4];
#pragma unroll
    for (int i = 0; i < S::MI; i++) {
#pragma unroll
        for (int j = 0; j < S::NJ; j++) {
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;
        }
    }
    // ldmatrix addresses of this lane: A (tokens) rows lane % 16, k half lane / 16; B (weight
    // rows) matrices lane / 8: rows + 8 for matrices 2 and 3, k + 8 for 1 and 3.
    const uint32_t xa = cu_smem_addr(sx + (wt * S::TT + lane % 16) * LDS + 8 * (lane / 16));
    const uint32_t wa = cu_smem_addr(sw + (wr * S::TR + 8 * (lane / 16) + lane % 8) * LDS + 8 * (lane / 8 % 2));
    const auto     compute = [&](int st) {
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            uint32_t bf[S::NJ][2];  // all B fragments, then A one m16 tile at a time (registers)
#pragma unroll
            for (int j = 0; j < S::NJ / 2; j++) {
                uint32_t r4[4];
                cu_ldsm_x4(r4, wa + st * WST + (16 * j * LDS + 16 * ks) * 2);
                bf[2 * j][0]     = r4[0];
                bf[2 * j][1]     = r4[1];
                bf[2 * j + 1][0] = r4[2];
                bf[2 * j + 1][1] = r4[3];
            }
#pragma unroll
            for (int i = 0; i < S::MI; i++) {
                uint32_t af[4];
                cu_ldsm_x4(af, xa + st * XST + (16 * i * LDS + 16 * ks) * 2);
#pragma unroll
                for (int j = 0; j < S::NJ; j++) cu_mma_16816(acc[i][j], af, bf[j][0], bf[j][1]);
            }
        }
    };

    fetch_w(0);  // weights only: before waiting for the kernel that made x
    if (nkt > 1) prefetch_w(1);
    cu_pdl_begin();
    load_x(0, 0);
    decode_w();
    store_w(0);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int kt = 0; kt < nkt; kt++) {
        const int  st   = kt % 2;
        const bool more = kt + 1 < nkt;
        if (more) {
            load_x(kt + 1, st ^ 1);
            if (kt + 2 < nkt) prefetch_w(kt + 2);
            if (PIPE) fetch_w(kt + 1);
        }
        compute(st);
        if (more) {
            if (!PIPE) fetch_w(kt + 1);
            decode_w();
            store_w(st ^ 1);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
    }

    // Accumulator (i, j): tokens 16 i + lane / 4 (+ 8), rows 8 j + 2 (lane % 4) (+ 1).
    const int     r0 = n0 + wr * S::TR + 2 * (lane % 4), t0 = m0 + wt * S::TT + lane / 4;
    const mmq_out o = mmq_output(a);
#pragma unroll
    for (int i = 0; i < S::MI; i++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int t = t0 + 16 * i + 8 * hh;
            if (t >= a.m) continue;
#pragma unroll
            for (int j = 0; j < S::NJ; j++) mmq_store_pair(o, a.n, t, r0 + 8 * j, acc[i][j][2 * hh], acc[i][j][2 * hh + 1]);
        }
    }
#else
    (void) a;  // sm_75 and older: never launched (ember_cuda_mul_mat_q checks the device)
#endif
}

// y[t][r] = the sum of the splits' partial sums, in split order (the same result every run).
__global__ void mmq_reduce_kernel(const float * part, int splits, int64_t m, int64_t n, float * y, int64_t ldy) {
    cu_pdl_begin();
    const int64_t t = blockIdx.y;
    for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < n; r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float s = 0.0f;
        for (int z = 0; z < splits; z++) s += part[(z * m + t) * n + r];
        y[t * ldy + r] = s;
    }
}


// 0: choose by size; else the BM forced by EMBER_CUDA_MMQ_TILE (read at every call: tests
// run both shapes).
int forced_tile() {
    const char * e = std::getenv("EMBER_CUDA_MMQ_TILE");
    return e ? std::atoi(e) : 0;
}

// EMBER_CUDA_MMQ_PIPE=0: the weight chunks of the next step are fetched after the products of
// this one, not before (their load latency not hidden by this warp's products).
bool pipelined() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MMQ_PIPE");
    return on;
}

// EMBER_CUDA_MMQ_SPLIT=N: split k in N parts (1: never); unset: when the tiles are fewer than
// the SMs.
int forced_split() {
    const char * e = std::getenv("EMBER_CUDA_MMQ_SPLIT");
    return e ? std::atoi(e) : 0;
}

// EMBER_CUDA_MMQ_SPLIT_UP=1: plan_splits rounds the split count up (read at every call).
bool split_round_up() {
    return ember_cuda_env_choice("EMBER_CUDA_MMQ_SPLIT_UP", 0, {0, 1}) == 1;
}

// Split k when the tiles would leave SMs idle (the 1B model's 2048-row matrices): each split
// writes its partial sums to scratch slot 1, mmq_reduce_kernel adds them up; or, with `merged`
// (the wgmma kernel's thread block clusters), the splits add them up themselves and a.part stays
// null. Sets a.kper and a.part; returns the number of splits.
int plan_splits(ember_cuda_ctx & ctx, mmq_args & a, unsigned gx, unsigned gy, int sms, bool merged = false, int chunks_per_step = 2,
                int blocks_per_sm = 2) {
    const int nkt    = static_cast<int>((a.nc + chunks_per_step - 1) / chunks_per_step);
    int       splits = forced_split();
    if (splits <= 0) {
        // As many splits as blocks_per_sm blocks an SM hold in one wave (rounded down: at two an SM,
        // 5 splits of the 1B shape's 64 tiles, 320 blocks, left 56 for a second wave;
        // EMBER_CUDA_MMQ_SPLIT_UP=1 rounds up, as before session 60).
        const int64_t tiles = static_cast<int64_t>(gx) * gy;
        const int64_t slots = blocks_per_sm * static_cast<int64_t>(sms);
        splits = tiles >= sms ? 1 : static_cast<int>(split_round_up() ? (slots + tiles - 1) / tiles : slots / tiles);
    }
    splits = std::max(1, std::min(splits, static_cast<int>(mmq_max_splits(nkt))));
    a.kper = (nkt + splits - 1) / splits;
    splits = (nkt + a.kper - 1) / a.kper;
    if (splits > 1 && !merged) {
        a.part = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(splits) * a.m * a.n * sizeof(float)));
        if (!a.part) {
            splits = 1;
            a.kper = nkt;
        }
    }
    return splits;
}

ember_status reduce_splits(ember_cuda_ctx & ctx, const mmq_args & a, int splits) {
    if (splits > 1 && a.part) {  // (no a.part: merged by the kernel's clusters)
        const ember_status st = ember_cuda_check_launch("mul_mat (tensor-core prefill, quantized weight)");
        if (st != EMBER_OK) return st;
        cu_launch(ctx, mmq_reduce_kernel, dim3(std::min(cu_blocks(a.n, 256), 64u), static_cast<unsigned>(a.m)), 256, 0,
                  static_cast<const float *>(a.part), splits, a.m, a.n, a.y, a.ldy);
    }
    return ember_cuda_check_launch("mul_mat (tensor-core prefill, quantized weight)");
}

template <int T, int L, int BM, int BN, int WR, int WT> ember_status launch(ember_cuda_ctx & ctx, mmq_args a, int sms) {
    using S     = mmq_shape<BM, BN, WR, WT>;
    static std::atomic<uint64_t> smem_set[2];  // per kernel below: devices whose limit is raised
    const bool                   pipe   = pipelined();
    auto                         kernel = pipe ? mmq_kernel<T, L, BM, BN, WR, WT, true> : mmq_kernel<T, L, BM, BN, WR, WT, false>;
    if (!ember_cuda_allow_smem(reinterpret_cast<const void *>(kernel), smem_set[pipe ? 1 : 0], ctx.device, S::SMEM)) {
        return EMBER_ERR_UNSUPPORTED;
    }
    const unsigned gx = cu_blocks(a.n, BM), gy = cu_blocks(a.m, BN);
    const int      splits = plan_splits(ctx, a, gx, gy, sms);
    cu_launch(ctx, kernel, dim3(gx, gy, splits), S::NT, S::SMEM, a);
    return reduce_splits(ctx, a, splits);
}

// EMBER_CUDA_MMQ_Q6P=0: planar Q6_K weights (Q4_K_M's V and down products) back to dequantize +
// cuBLAS, as before session 61 (read at every call).
bool q6p_mmq_on() {
    return ember_cuda_env_on("EMBER_CUDA_MMQ_Q6P");
}

std::atomic<long long> q6p_launch_count{0};  // (ember_cuda_mmq_q6p_launches)

// EMBER_CUDA_MMQ_WG=0: the mma.sync kernel on Hopper too (read at every call: tests run both).
bool wgmma_wanted() {
    return ember_cuda_env_on("EMBER_CUDA_MMQ_WG");
}

// Big: 128 rows x 128 tokens, 8 warps; small: 64 rows x 128 tokens, 4 warps (both 32 x 64 per
// warp: the same products per decoded weight).
struct mmq_probe {
    ember_cuda_ctx & ctx;
    const mmq_args & a;
    int              layout;  // k_mmq_gguf, k_mmq_rp, k_mmq_ext
    bool             big;
    int              sms;
    ember_status &   st;
    template <int T, int L> ember_status launch_layout() const {
        return big ? launch<T, L, 128, 128, 4, 2>(ctx, a, sms) : launch<T, L, 64, 128, 2, 2>(ctx, a, sms);
    }
    template <int T> void operator()() const {
        if (!mmq_with_layout<T>(layout, [&](auto l) { st = launch_layout<T, decltype(l)::value>(); })) {
            st = EMBER_ERR_UNSUPPORTED;  // (F32 / F16 / BF16: cuBLAS takes these)
        }
    }
};

}  // namespace

// Every instantiation has the same function type, so each caller keeps one `done` per kernel.
bool ember_cuda_allow_smem(const void * kernel, std::atomic<uint64_t> & done, int device, int bytes) {
    const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
    if (bit && (done.load(std::memory_order_relaxed) & bit)) return true;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) return false;
    done.fetch_or(bit, std::memory_order_relaxed);
    return true;
}

ember_status ember_cuda_mul_mat_q(ember_cuda_ctx & ctx, const ember_tensor * w, const char * wm, const void * xh, int64_t m, void * y,
                                  int64_t ldy) {
    const int64_t k = w->ne[0], n = w->ne[1];
    if (k % 32 != 0 || n <= 0 || m <= 0) return EMBER_ERR_UNSUPPORTED;
    if (cu_cc_major(ctx.device) < 8 || m > 65535) return EMBER_ERR_UNSUPPORTED;
    const int sms = cu_sm_count(ctx.device);
    const bool repacked = (w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) != 0;
    const bool ext      = repacked && ember_cuda_ext_layout(w);
    // Planar Q6_K keeps its rows where they were: read as the GGUF layout is, by row byte
    // offsets, with the planar chunk codec (cu_codec_h2<CU_Q6_K_PLANAR>, the dequantizer's).
    const bool q6p = repacked && !ext && w->type == EMBER_TYPE_Q6_K && q6p_mmq_on();
    if (repacked && !ext && !q6p && w->type != EMBER_TYPE_Q4_0 && w->type != EMBER_TYPE_Q8_0) return EMBER_ERR_UNSUPPORTED;
    const int layout = ext ? k_mmq_ext : repacked && !q6p ? k_mmq_rp : k_mmq_gguf;
    const int tc     = q6p ? CU_Q6_K_PLANAR : static_cast<int>(w->type);  // the chunk codec's type

    mmq_args a{};
    a.w     = wm;
    a.w_nb1 = static_cast<int64_t>(w->nb[1]);
    a.nc    = k / 32;
    a.k     = k;
    a.n     = n;
    a.m     = m;
    a.x     = static_cast<const __half *>(xh);
    a.y     = static_cast<float *>(y);
    a.ldy   = ldy;
    a.y2    = ((reinterpret_cast<uintptr_t>(y) % 8) | (ldy % 2)) == 0;
    if (ext) {
        a.ext    = ember_cuda_mmq_ext(w);
        a.g0     = (wm - static_cast<const char *>(w->data)) / a.w_nb1;  // (nb[1]: the ext row's bytes, ember_cuda_ext_view)
        a.cbytes = a.ext.rowq / a.nc;
    } else if (repacked) {
        a.base   = static_cast<const char *>(w->data);
        a.g0     = (wm - a.base) / a.w_nb1;  // contiguous: matrices are row ranges
        a.nblk   = ember_nrows(w) * a.nc;
        a.cbytes = ember_cuda_repack_qbytes(w->type);
    } else {
        a.cbytes = a.w_nb1 / a.nc;  // a whole row's bytes: NF4's group headers are spread, fine for prefetching
    }
    // Hopper: the wgmma kernel (ops-matmul-wgmma.cu), its tile by the switches (mmq_wg_tile).
    if (wgmma_wanted() && ember_cuda_mmq_wg_available(ctx)) {
        const mmq_wg_tile tile = ember_cuda_mmq_wg_tile(n, m, a.nc, sms);
        const unsigned    gx = cu_blocks(n, tile.rows), gy = cu_blocks(m, tile.tokens);
        const int         splits =
            plan_splits(ctx, a, gx, gy, sms, ember_cuda_mmq_wg_cluster_merge(), tile.chunks_per_step, tile.blocks_per_sm);
        const ember_status st = ember_cuda_mmq_wg_launch(ctx, tc, layout, a, dim3(gx, gy, splits), tile);
        if (st == EMBER_OK && q6p) q6p_launch_count.fetch_add(1, std::memory_order_relaxed);
        if (st != EMBER_ERR_UNSUPPORTED) return st == EMBER_OK ? reduce_splits(ctx, a, splits) : st;
    }
    // The big tile when it still gives every SM two blocks (or when forced).
    const int64_t big_tiles = static_cast<int64_t>(cu_blocks(n, 128)) * cu_blocks(m, 128);
    const int     ft        = forced_tile();
    const bool    big       = ft == 128 || (ft != 64 && big_tiles >= 2 * static_cast<int64_t>(sms));
    ember_status  st        = EMBER_ERR_UNSUPPORTED;
    const mmq_probe probe{ctx, a, layout, big, sms, st};
    if (tc == CU_Q6_K_PLANAR) {
        probe.template operator()<CU_Q6_K_PLANAR>();
        if (st == EMBER_OK) q6p_launch_count.fetch_add(1, std::memory_order_relaxed);
        return st;
    }
    if (!cu_dispatch_chunk_type(w->type, probe)) return EMBER_ERR_UNSUPPORTED;
    return st;
}

long long ember_cuda_mmq_q6p_launches() {
    return q6p_launch_count.load(std::memory_order_relaxed);
}
