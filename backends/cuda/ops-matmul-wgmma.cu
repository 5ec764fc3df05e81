// MUL_MAT for many columns (prefill) with a quantized weight on Hopper (sm_90a): the tensor-core
// GEMM of ops-matmul-q.cu with warpgroup MMA (wgmma) instead of mma.sync, issue 6 item 3.
//
// A block of 256 threads (two warpgroups) computes 128 weight rows x 128 tokens, k in steps of
// 64 (one 128-byte row of F16 per weight row and per token), two stages in shared memory:
// - the activation tile (128 tokens x 64 halves): 16-byte cp.async copies (zero past m and k);
// - the weight tile (128 rows x 64 halves): each thread fetches one 32-weight chunk's bytes,
//   and decodes them to F16 pairs (cu_codec_h2 / cu_rp_h2, cuda-common.cuh: the same F16
//   weights as the dequantize + cuBLAS path) into the other stage while the tensor cores work
//   on this one (wgmma is asynchronous: issued, then waited for after the decode);
// - both tiles in the 128-byte swizzled K-major layout wgmma reads through matrix descriptors
//   (16-byte piece p of row r at r * 128 + (p ^ r % 8) * 16, tiles 1024-byte aligned);
// - warpgroup g multiplies tokens 64 g .. 64 g + 63 (A, m64) by all 128 rows (B, n128), four
//   m64n128k16 per step into 64 F32 accumulators per thread; each thread's pairs are two
//   adjacent weight rows of one token: float2 stores into y's rows.
// k may be split over blockIdx.z (the partial sums are added by ops-matmul-q.cu's reduce).
//
// Built for sm_90a (CMakeLists.txt: this file's 90 is 90a, plus compute_90 PTX); in any other
// code the kernel is empty and ember_cuda_mmq_wg_available says no, found by running a probe
// kernel. Three stages (the products of a step in flight across the next step's barrier)
// measured no faster (PERF-NOTES.md, seventh pass).
#include <cooperative_groups.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-mmq.h"
#include "cuda-repack.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_MMQ_WG 1
#endif

namespace {

constexpr int TILE = 128 * 128;  // bytes of one 128 x 64-half tile

#ifdef EMBER_MMQ_WG
__device__ __forceinline__ uint32_t wg_saddr(const void * p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Matrix descriptor of a K-major tile with the 128-byte swizzle: start address, leading byte
// offset 16 (unused for this layout), 1024 bytes between groups of 8 rows.
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return static_cast<uint64_t>((saddr & 0x3ffff) >> 4) | static_cast<uint64_t>(1) << 16 |
           static_cast<uint64_t>(1024 >> 4) << 32 | static_cast<uint64_t>(1) << 62;
}

// Chunk wh (0 or 1) of weight row wr of the swizzled tile at shared address tile: r decoded to F16
// pairs (zeros when !go: a row or chunk past the matrix) and stored as 64 bytes.
template <typename WC>
__device__ __forceinline__ void wg_decode_store(const typename WC::raw & r, bool go, uint32_t tile, int wr, int wh) {
    uint32_t h[16];
    if (go) {
        WC::decode(r, h);
    } else {
#pragma unroll
        for (int j = 0; j < 16; j++) h[j] = 0u;
    }
    const uint32_t rowa = tile + wr * 128;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint32_t dst = rowa + (((4 * wh + q) ^ (wr % 8)) << 4);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(h[4 * q]), "r"(h[4 * q + 1]), "r"(h[4 * q + 2]),
                     "r"(h[4 * q + 3])
                     : "memory");
    }
}

// This thread's cp.async copies of x into the swizzled tile at shared address tile: tokens
// m0 + xt0 + STEP i (i < N), 16-byte piece seg of the k step from kk (zeros past m and k).
template <int N, int STEP>
__device__ __forceinline__ void wg_load_x(const mmq_args & a, uint32_t tile, int m0, int kk, int seg, int xt0) {
    const bool kok = kk + 8 * seg < a.k;
#pragma unroll
    for (int i = 0; i < N; i++) {
        const int      t   = xt0 + STEP * i;
        const bool     ok  = kok && m0 + t < a.m;
        const __half * src = ok ? a.x + static_cast<int64_t>(m0 + t) * a.k + kk + 8 * seg : a.x;
        const uint32_t dst = tile + t * 128 + ((seg ^ (t % 8)) << 4);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
    }
}

// A warpgroup's 64 tokens (from t0) x 128 rows (from n0) into y: accumulator 4 j + 2 i + e is
// token 16 wq + lane / 4 + 8 i, row 8 j + 2 (lane % 4) + e (wq: the warp in its warpgroup).
__device__ __forceinline__ void wg_store(const mmq_args & a, const float (&acc)[64], int n0, int t0, int wq, int lane) {
    const mmq_out o  = mmq_output(a);
    const int     r0 = n0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = t0 + 16 * wq + lane / 4 + 8 * i;
        if (t >= a.m) continue;
#pragma unroll
        for (int j = 0; j < 16; j++) mmq_store_pair(o, a.n, t, r0 + 8 * j, acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]);
    }
}

// k split over the blocks of one thread block cluster (1 x 1 x gridDim.z; rank = blockIdx.z = the
// split; ember_cuda_mmq_wg_cluster_merge), a.part unused: each block puts its tile's sums (128
// tokens x 64 row pairs, float2, 64 KB: the stages, free once the last step's products are
// waited for) in its own shared memory, then, after the cluster barrier, adds up its share of the
// tile's units over every block's shared memory in rank order, from 0 as mmq_reduce_kernel does
// (the same bits as the split partial sums through global memory), and stores them. No partial
// sums in global memory, no reduce launch. Unit (t, u) lies at t * 64 + (u ^ 4 (t % 8)): a
// warp's stores (8 tokens x 4 row pairs) take two wavefronts, its reads (consecutive u) one.
template <int NT>  // threads: 64 NT / 128 tokens (two or four warpgroups)
__device__ __forceinline__ void wg_cluster_merge(const mmq_args & a, const float (&acc)[64], float2 * red, int n0, int m0, int tid) {
    constexpr int UNITS = NT / 2 * 64;  // tokens x row pairs
    namespace cg   = cooperative_groups;
    const int lane = tid % 32, wgi = tid / 128, wq = (tid % 128) / 32;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = 64 * wgi + 16 * wq + lane / 4 + 8 * i;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int u = 4 * j + lane % 4;
            red[t * 64 + (u ^ 4 * (t % 8))] = make_float2(acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]);
        }
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's sums visible across the cluster
    const int     nz = static_cast<int>(gridDim.z), z = static_cast<int>(cluster.block_rank());
    const int     per = (UNITS + nz - 1) / nz, e1 = min((z + 1) * per, UNITS);
    const mmq_out o{a.y, a.ldy, a.y2};
    for (int e = z * per + tid; e < e1; e += NT) {
        const int t = e / 64, u = e % 64;
        if (m0 + t >= a.m) break;  // (units go token by token: the rest are past m too)
        float2 * p  = red + t * 64 + (u ^ 4 * (t % 8));
        float    sx = 0.0f, sy = 0.0f;
        for (int r = 0; r < nz; r++) {
            const float2 v = *cluster.map_shared_rank(p, r);
            sx += v.x;
            sy += v.y;
        }
        mmq_store_pair(o, a.n, m0 + t, n0 + 2 * u, sx, sy);
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
}

// D (64 tokens x 128 rows, F32) += A (64 x 16, descriptor da) * B (128 x 16, descriptor db)^T.
__device__ __forceinline__ void wg_mma(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1));
}
#endif

// EW (EMBER_CUDA_MMQ_EW=1, measuring): a step's weight bytes are requested a whole step ahead,
// right after the step before has decoded its own (the register buffer is free then), instead
// of at the top of the step that decodes them, where only the issue of that step's products
// stands between the requests and their use.
//
// WIDE (the default; EMBER_CUDA_MMQ_WIDE=0: the 128-token tile): 128 weight rows x 256 tokens a block of four
// warpgroups (one block an SM, 192 KB of stages), k in steps of 128 (two swizzled 64-half
// sub-tiles), eight m64n128k16 a step a warpgroup: each decoded chunk feeds 256 tokens, half the
// decode a product, the work session 60 found this kernel bound by. Every thread still decodes one
// chunk a step (row tid / 4, chunk tid % 4) and copies 4 x pieces a sub-tile.
template <bool WIDE> struct wg_form {
    static constexpr int NT   = WIDE ? 512 : 256;  // threads: two or four warpgroups
    static constexpr int TOK  = NT / 2;            // tokens a block (64 a warpgroup)
    static constexpr int SUBS = WIDE ? 2 : 1;      // 64-half sub-tiles a k step
    static constexpr int CPS  = 2 * SUBS;          // 32-weight chunks of a row a k step
    static constexpr int XST  = SUBS * TOK * 128;  // bytes of a stage's x sub-tiles
    static constexpr int WST  = SUBS * TILE;       // and of its w sub-tiles (128 rows)
    static constexpr int SMEM = 2 * (XST + WST) + 1024;  // two stages of each, the alignment slack
    static_assert(2 * (XST + WST) >= TOK * 64 * 8, "the cluster merge's sums fit the stages");
};

template <int T, int L, bool EW, bool WIDE>
__global__ void __launch_bounds__(wg_form<WIDE>::NT, WIDE ? 1 : 2) mmq_wg_kernel(const mmq_args a) {
#ifdef EMBER_MMQ_WG
    using F = wg_form<WIDE>;
    extern __shared__ uint8_t wg_smem_raw[];
    // Tiles 1024-byte aligned in the shared window (the swizzle pattern repeats every 1024 bytes).
    const uint32_t raw0 = wg_saddr(wg_smem_raw);
    const uint32_t s0   = (raw0 + 1023u) & ~1023u;
    const uint32_t sx   = s0;               // x stages: sx + st * F::XST, sub-tile sub at + sub * TOK * 128
    const uint32_t sw   = s0 + 2 * F::XST;  // w stages: sw + st * F::WST, sub-tile sub at + sub * TILE

    const int tid = threadIdx.x, lane = tid % 32, wgi = tid / 128, wq = (tid % 128) / 32;
    const int n0 = static_cast<int>(blockIdx.x) * 128, m0 = static_cast<int>(blockIdx.y) * F::TOK;
    const int nc = static_cast<int>(a.nc), kt0 = static_cast<int>(blockIdx.z) * a.kper;
    const int nkt = min((nc + F::CPS - 1) / F::CPS - kt0, a.kper);

    // The weight chunk of this thread: chunk wh of each step of row wr (sub-tile wh / 2, its half wh % 2).
    using WC = mmq_codec<T, L>;
    typename WC::raw wraw;
    const int        wr   = tid / F::CPS, wh = tid % F::CPS;
    const bool       wok  = n0 + wr < a.n;
    const int64_t    wrow = mmq_row<L>(a, n0 + wr);
    bool             wgo  = false;
    const auto fetch_w = [&](int kt) {
        const int c = F::CPS * (kt0 + kt) + wh;
        wgo         = wok && c < nc;
        if (wgo) mmq_fetch_chunk<WC, L>(a, wrow, c, wraw);
    };
    const auto prefetch_w = [&](int kt) {
        const int c = F::CPS * (kt0 + kt) + wh;
        if (wok && c < nc) cu_prefetch_l2(mmq_chunk_addr<L>(a, wrow, c));
    };
    const auto decode_store_w = [&](int st) { wg_decode_store<WC>(wraw, wgo, sw + st * F::WST + (wh / 2) * TILE, wr, wh % 2); };

    // The activation copies of this thread: tokens tid / 8 + NT / 8 i, 16-byte piece tid % 8, of each sub-tile.
    const int seg = tid % 8, xt0 = tid / 8;
    const auto load_x = [&](int kt, int st) {
#pragma unroll
        for (int sub = 0; sub < F::SUBS; sub++) {
            wg_load_x<4, F::NT / 8>(a, sx + st * F::XST + sub * F::TOK * 128, m0, 64 * (F::SUBS * (kt0 + kt) + sub), seg, xt0);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;

    fetch_w(0);  // weights only: before waiting for the kernel that made x
    if (nkt > 1) prefetch_w(1);
    cu_pdl_begin();
    load_x(0, 0);
    decode_store_w(0);
    if (EW && nkt > 1) {
        fetch_w(1);
        if (nkt > 2) prefetch_w(2);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes, seen by wgmma
    __syncthreads();
    for (int kt = 0; kt < nkt; kt++) {
        const int  st   = kt % 2;
        const bool more = kt + 1 < nkt;
        if (more) {
            load_x(kt + 1, st ^ 1);
            if (!EW) {
                if (kt + 2 < nkt) prefetch_w(kt + 2);
                fetch_w(kt + 1);
            }
        }
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int sub = 0; sub < F::SUBS; sub++) {
            const uint32_t xa = sx + st * F::XST + sub * F::TOK * 128 + wgi * 64 * 128, wa = sw + st * F::WST + sub * TILE;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) wg_mma(acc, wg_desc(xa + 32 * ks), wg_desc(wa + 32 * ks));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        if (more) decode_store_w(st ^ 1);  // the CUDA cores decode while the tensor cores multiply
        if (EW && kt + 2 < nkt) {
            fetch_w(kt + 2);  // (wraw is free: its step is in shared memory now)
            if (kt + 3 < nkt) prefetch_w(kt + 3);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        asm volatile("cp.async.wait_all;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
    }

    if (gridDim.z > 1 && a.part == nullptr) {  // (the loop's last barrier: every stage read)
        wg_cluster_merge<F::NT>(a, acc, reinterpret_cast<float2 *>(wg_smem_raw + (s0 - raw0)), n0, m0, tid);
        return;
    }
    wg_store(a, acc, n0, m0 + 64 * wgi, wq, lane);
#else
    (void) a;  // not sm_90a: never launched (ember_cuda_mmq_wg_available)
#endif
}

// The warp-specialized form (EMBER_CUDA_MMQ_WS=1, measuring): the same tile (128 rows x 128
// tokens, the same swizzled layouts and products) by a block of four warpgroups, one an SM:
// warpgroups 0 and 1 make the stages (each every other k step: the activation copies two of its
// steps ahead, the weight bytes one of its steps ahead in registers, decoded and stored), 2 and
// 3 only multiply (tokens 0-63, 64-127). Stages in a ring of WS_STAGES, handed over by mbarriers
// instead of the block-wide barrier of every step: full[s] (the maker's 128 threads arrive once
// their copies have landed and their stores are fenced for the async proxy), empty[s] (the
// multipliers' 256 threads arrive once the products that read the stage are done).
constexpr int WS_NT     = 512;
constexpr int WS_STAGES = 4;
constexpr int WS_SMEM   = 2 * WS_STAGES * TILE + 1024;

#ifdef EMBER_MMQ_WG
__device__ __forceinline__ void ws_bar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void ws_bar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void ws_bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
#endif

template <int T, int L> __global__ void __launch_bounds__(WS_NT, 1) mmq_ws_kernel(const mmq_args a) {
#ifdef EMBER_MMQ_WG
    extern __shared__ uint8_t wg_smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * WS_STAGES];  // full[s], then empty[s]
    const uint32_t raw0 = wg_saddr(wg_smem_raw);
    const uint32_t s0   = (raw0 + 1023u) & ~1023u;
    const uint32_t sx   = s0;                     // x stages: sx + st * TILE
    const uint32_t sw   = s0 + WS_STAGES * TILE;  // w stages
    const uint32_t bar0 = wg_saddr(bars);
    const auto     full  = [&](int st) { return bar0 + 8u * static_cast<uint32_t>(st); };
    const auto     empty = [&](int st) { return bar0 + 8u * static_cast<uint32_t>(WS_STAGES + st); };

    const int tid = threadIdx.x, wgi = tid / 128, pt = tid % 128;
    const int n0 = static_cast<int>(blockIdx.x) * 128, m0 = static_cast<int>(blockIdx.y) * 128;
    const int nc = static_cast<int>(a.nc), kt0 = static_cast<int>(blockIdx.z) * a.kper;
    const int nkt = min((nc + 1) / 2 - kt0, a.kper);
    if (tid == 0) {
        for (int st = 0; st < WS_STAGES; st++) {
            ws_bar_init(full(st), 128);
            ws_bar_init(empty(st), 256);
        }
    }
    __syncthreads();

    if (wgi < 2) {
        // A maker: steps wgi, wgi + 2, ... Its weight chunks: rows 64 q + pt / 2 (q < 2), chunk
        // pt % 2 of each step; its activation copies: tokens pt / 8 + 16 i (i < 8), piece pt % 8.
        using WC = mmq_codec<T, L>;
        const int  wh = pt % 2, seg = pt % 8, xt0 = pt / 8;
        int64_t    wrow[2];
        bool       wok[2];
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int wr = 64 * q + pt / 2;
            wok[q]       = n0 + wr < a.n;
            wrow[q]      = mmq_row<L>(a, n0 + wr);
        }
        // The next step's bytes in a second buffer where they fit (Q4_0, Q8_0 and the like: 36
        // bytes a chunk at most, 48 with padding); the larger chunks (K-quants) are fetched at the top of their own
        // step instead, after their L2 prefetch two steps ahead (two buffers of them spill).
        constexpr bool   DB = sizeof(typename WC::raw) <= 48;
        typename WC::raw rw[2][2];  // [buffer][q]
        const auto fetch = [&](int kt, typename WC::raw (&r)[2]) {
            const int c = 2 * (kt0 + kt) + wh;
#pragma unroll
            for (int q = 0; q < 2; q++) {
                if (wok[q] && c < nc) mmq_fetch_chunk<WC, L>(a, wrow[q], c, r[q]);
            }
        };
        const auto prefetch = [&](int kt) {
            const int c = 2 * (kt0 + kt) + wh;
#pragma unroll
            for (int q = 0; q < 2; q++) {
                if (wok[q] && c < nc) cu_prefetch_l2(mmq_chunk_addr<L>(a, wrow[q], c));
            }
        };
        const auto load_x = [&](int kt) { wg_load_x<8, 16>(a, sx + (kt % WS_STAGES) * TILE, m0, 64 * (kt0 + kt), seg, xt0); };
        const auto decode_store = [&](int kt, const typename WC::raw (&r)[2]) {
            const int st = kt % WS_STAGES;
            const int c  = 2 * (kt0 + kt) + wh;
#pragma unroll
            for (int q = 0; q < 2; q++) wg_decode_store<WC>(r[q], wok[q] && c < nc, sw + st * TILE, 64 * q + pt / 2, wh);
        };
        // Stage kt % S is free once the products of step kt - S are done: that completion of
        // empty[] is its (kt / S - 1)-th.
        const auto wait_free = [&](int kt) {
            if (kt >= WS_STAGES) ws_bar_wait(empty(kt % WS_STAGES), static_cast<uint32_t>((kt / WS_STAGES + 1) & 1));
        };
        const int first = wgi;
        if (DB && first < nkt) fetch(first, rw[0]);  // weights only: before waiting for the kernel that made x
        if (first + 2 < nkt) prefetch(first + 2);
        cu_pdl_begin();
        if (first < nkt) {
            wait_free(first);
            load_x(first);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        // One step of this maker: x of step kt + 2 requested, its weight bytes fetched into the
        // other buffer, step kt's weights decoded into its stage, its x waited for; then full.
        const auto step = [&](int kt, typename WC::raw (&cur)[2], typename WC::raw (&nxt)[2]) {
            const int nx = kt + 2;
            if (nx < nkt) {
                wait_free(nx);
                load_x(nx);
                if (DB) fetch(nx, nxt);
                if (nx + 2 < nkt) prefetch(nx + 2);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");  // (possibly empty: one group a step)
            if (!DB) fetch(kt, cur);
            decode_store(kt, cur);
            asm volatile("cp.async.wait_group 1;" ::: "memory");  // step kt's x landed
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            ws_bar_arrive(full(kt % WS_STAGES));
        };
        for (int kt = first; kt < nkt; kt += 4) {
            step(kt, rw[0], rw[1]);
            if (kt + 2 < nkt) step(kt + 2, DB ? rw[1] : rw[0], rw[0]);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        return;
    }

    // A multiplier: tokens 64 c .. 64 c + 63 of the tile by all 128 rows.
    const int c = wgi - 2, lane = tid % 32, wq = (tid % 128) / 32;
    cu_pdl_begin();
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    for (int kt = 0; kt < nkt; kt++) {
        const int st = kt % WS_STAGES;
        ws_bar_wait(full(st), static_cast<uint32_t>((kt / WS_STAGES) & 1));
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        const uint32_t xa = sx + st * TILE + c * 64 * 128, wa = sw + st * TILE;
#pragma unroll
        for (int ks = 0; ks < 4; ks++) wg_mma(acc, wg_desc(xa + 32 * ks), wg_desc(wa + 32 * ks));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // step kt - 1's products done
        if (kt > 0) ws_bar_arrive(empty((kt - 1) % WS_STAGES));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");

    wg_store(a, acc, n0, m0 + 64 * c, wq, lane);
#else
    (void) a;  // not sm_90a: never launched (ember_cuda_mmq_wg_available)
#endif
}

__global__ void mmq_wg_probe_kernel(int * out) {
#ifdef EMBER_MMQ_WG
    *out = 1;
#else
    *out = 0;
#endif
}

// EMBER_CUDA_MMQ_EW=1: mmq_wg_kernel's EW form (read at every call: tests run both).
bool early_weights() {
    return ember_cuda_env_choice("EMBER_CUDA_MMQ_EW", 0, {0, 1}) == 1;
}

// EMBER_CUDA_MMQ_WS=1: mmq_ws_kernel instead (read at every call: tests run both).
bool warp_specialized() {
    return ember_cuda_env_choice("EMBER_CUDA_MMQ_WS", 0, {0, 1}) == 1;
}

// mmq_wg_kernel's wide form, wg_form<true>: EMBER_CUDA_MMQ_WIDE=1 always, =0 never; unset, chosen
// by the product's shape (ember_cuda_mmq_wg_tile). Read at every call: tests run both.
int wide_switch() {
    return ember_cuda_env_choice("EMBER_CUDA_MMQ_WIDE", -1, {0, 1});
}

// EMBER_CUDA_MMQ_CLUSTER=1: the wgmma kernel's k splits merge in a thread block cluster instead
// of writing partial sums to global memory for mmq_reduce_kernel, as the other kernels' do (read
// at every call: tests compare the two). Off by default since session 62: on an H100 the 1B
// shape's split products took 90 us (2048 x 8192) and 35 us (2048 x 2048) merged against 55 and
// 27 reduced (pp512 1B Q8_0 79.7k -> 92.9k t/s, Q4_K_M 75.9k -> 86.9k, 8B Q4_K_M level). The
// warp-specialized kernel has no cluster merge.
bool cluster_merge() {
    return !warp_specialized() && ember_cuda_env_choice("EMBER_CUDA_MMQ_CLUSTER", 0, {0, 1}) == 1;
}

struct wg_probe {
    ember_cuda_ctx & ctx;
    const mmq_args &    a;
    int                 layout;  // k_mmq_gguf, k_mmq_rp, k_mmq_ext
    dim3                grid;
    const mmq_wg_tile & tile;
    ember_status &      st;
    template <int T, int L> void launch_layout() const {
        if (warp_specialized()) {
            static std::atomic<uint64_t> ws_set;  // devices whose shared-memory limit is raised
            if (!ember_cuda_allow_smem(reinterpret_cast<const void *>(mmq_ws_kernel<T, L>), ws_set, ctx.device, WS_SMEM)) {
                st = EMBER_ERR_UNSUPPORTED;
                return;
            }
            if (grid.z > 1 && a.part == nullptr) {  // (planned for the cluster merge: not this kernel's)
                st = EMBER_ERR_INVALID_ARG;
                return;
            }
            cu_launch(ctx, mmq_ws_kernel<T, L>, grid, WS_NT, WS_SMEM, a);
        } else {
            static std::atomic<uint64_t> smem_set[4];  // per form (EW, WIDE)
            const bool                   ew = early_weights(), wd = tile.tokens == wg_form<true>::TOK;
            const auto                   kernel = wd ? (ew ? mmq_wg_kernel<T, L, true, true> : mmq_wg_kernel<T, L, false, true>)
                                                     : (ew ? mmq_wg_kernel<T, L, true, false> : mmq_wg_kernel<T, L, false, false>);
            const int                    nt = wd ? wg_form<true>::NT : wg_form<false>::NT;
            const int                    smem = wd ? wg_form<true>::SMEM : wg_form<false>::SMEM;
            if (!ember_cuda_allow_smem(reinterpret_cast<const void *>(kernel), smem_set[(ew ? 1 : 0) + (wd ? 2 : 0)], ctx.device, smem)) {
                st = EMBER_ERR_UNSUPPORTED;
                return;
            }
            const dim3 cluster(1, 1, grid.z > 1 && a.part == nullptr ? grid.z : 1);  // the splits merged in a cluster
            cu_launch_cluster(ctx, kernel, grid, nt, smem, cluster, a);
        }
        st = ember_cuda_check_launch("mul_mat (wgmma prefill, quantized weight)");
    }
    template <int T> void operator()() const {
        if (!mmq_with_layout<T>(layout, [&](auto l) { launch_layout<T, decltype(l)::value>(); })) {
            st = EMBER_ERR_UNSUPPORTED;  // (F32 / F16 / BF16: cuBLAS takes these)
        }
    }
};

}  // namespace

bool ember_cuda_mmq_wg_available(ember_cuda_ctx & ctx) {
    static std::atomic<uint64_t> known{0}, yes{0};
    if (ctx.device < 0 || ctx.device >= 64) return false;
    const uint64_t bit = uint64_t{1} << ctx.device;
    if (known.load(std::memory_order_acquire) & bit) return (yes.load(std::memory_order_relaxed) & bit) != 0;
    const int major = cu_cc_major(ctx.device);
    bool      ok    = false;
    if (major == 9) {
        if (ctx.capturing) return false;  // no synchronization inside a capture: ask later
        int * d = nullptr;
        int   h = 0;
        if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        mmq_wg_probe_kernel<<<1, 1, 0, ctx.stream>>>(d);
        ok = cudaMemcpyAsync(&h, d, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream) == cudaSuccess &&
             cudaStreamSynchronize(ctx.stream) == cudaSuccess && h == 1;
        cudaFree(d);
        cudaGetLastError();  // a probe that could not run leaves no error behind: the answer is no
    }
    if (ok) yes.fetch_or(bit, std::memory_order_relaxed);
    known.fetch_or(bit, std::memory_order_release);
    return ok;
}

bool ember_cuda_mmq_wg_cluster_merge() {
    return cluster_merge();
}

mmq_wg_tile ember_cuda_mmq_wg_tile(int64_t n, int64_t m, int64_t nc, int sms) {
    using W = wg_form<true>;
    using N = wg_form<false>;  // (the warp-specialized kernel's tile too, one block an SM)
    if (warp_specialized()) return {128, N::TOK, N::CPS, 1};
    int wd = wide_switch();
    if (wd < 0) {
        // Wide where its blocks, with the k splits plan_splits may give them, fill three quarters
        // of the SMs: every 8B product and the 1B's 2048-row ones; the 1B's 512-row K / V
        // products take the 128-token tile (H100: 19.2 -> 15.5 us a launch).
        const int64_t tiles = static_cast<int64_t>(cu_blocks(n, 128)) * cu_blocks(m, W::TOK);
        wd                  = tiles * mmq_max_splits((nc + W::CPS - 1) / W::CPS) * 4 >= 3 * static_cast<int64_t>(sms);
    }
    if (wd) return {128, W::TOK, W::CPS, 1};
    return {128, N::TOK, N::CPS, 2};
}

int ember_cuda_mmq_wg_tile_tokens(int64_t n, int64_t m, int64_t nc, int sms) {
    return ember_cuda_mmq_wg_tile(n, m, nc, sms).tokens;
}

ember_status ember_cuda_mmq_wg_launch(ember_cuda_ctx & ctx, int t, int layout, const mmq_args & a, dim3 grid, const mmq_wg_tile & tile) {
    ember_status   st = EMBER_ERR_UNSUPPORTED;
    const wg_probe probe{ctx, a, layout, grid, tile, st};
    if (t == CU_Q6_K_PLANAR) {  // (planar Q6_K: the GGUF layout's addressing, the planar codec)
        probe.template operator()<CU_Q6_K_PLANAR>();
        return st;
    }
    if (!cu_dispatch_chunk_type(static_cast<ember_type>(t), probe)) return EMBER_ERR_UNSUPPORTED;
    return st;
}
