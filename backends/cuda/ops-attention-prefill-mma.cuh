// Prefill attention on tensor cores (sm_80+, F16 caches, head size 64 or 128): part of
// ops-attention.cu (included inside its anonymous namespace, after fa_kernel, whose place it
// takes by default where it applies; EMBER_CUDA_FA_MMA=0: fa_kernel everywhere).
//
// fa_kernel does every product of Q K^T and P V as FP32 FMAs on the CUDA cores: ~9 TFLOP/s,
// 121 us a layer at the 1B shape (32 / 8 heads, d = 64, pp512, causal) and 225 us at the 8B
// shape (d = 128) on an H200, 17-21% of the prefill step. Here the products run on the tensor
// cores as FlashAttention-2 and llama.cpp's fattn-mma do them, with the decode kernel's
// fragments (ops-attention-decode-mma.cuh):
//   block: 4 warps, 64 query rows of one KV head (fa_kernel's rows: (token, head of the GQA
//          group) pairs, token-major), 16 rows a warp (mma's M); blocks start from the last
//          rows, which under a causal mask see the most keys;
//   tiles: 64 keys; K and V as f16 in shared memory ([key][d + 8 halves]: conflict-free
//          ldmatrix), with the mask rows of the block's tokens ([token][64 + 8 floats]), two
//          stages: the next visible tile's cp.async copies land while the current one is
//          computed;
//   skip:  before the walk the block reads its tokens' mask rows once and marks the 64-key
//          tiles that some row sees (a bitmap in shared memory); the others (the causal upper
//          triangle, a sliding window's leading tiles) are neither loaded nor computed;
//   warp:  Q's fragments loaded once from global memory (times scale * log2 e, as f16); per
//          tile S = Q K^T (K by ldmatrix), the mask added in log2 units (-INF hidden), an
//          online softmax per row in registers (exp2 units, ex2.approx), P as the A operand
//          straight from S's accumulators, O += P V (V by ldmatrix.trans; O rescaled only when
//          a row's maximum moved). Rows whose keys are all hidden give zeros, as fa_kernel and
//          the CPU do.
// Q, K, V and P are rounded to f16 (sums in f32), as the decode tensor-core kernel and
// llama.cpp do: a relative error of ~2^-11 per element, where fa_kernel is exact to f32.
// Work per warp and 64-key tile at d = 128: 64 mma for S and 64 for P V, where fa_kernel's
// warp does 4 (8) rows of 32 keys in scalar FMAs. Measured so far only on its own (H100,
// ember_cuda_attn called 20 times back to back from a scratch harness, us a layer, fa_kernel ->
// this): 1B pp512 117.5 -> 23.6, 8B pp512 211.7 -> 31.8, 1B at 2048 tokens 1225 -> 183, 8B
// 2446 -> 263; NMSE against a double-precision reference 3e-8 .. 9e-8 over the test's shapes
// (fa_kernel ~5e-14). Not yet measured in a model's prefill step, hence off by default. Block types
// (Q8_0, Q4_0, FP8), BF16 / F32 caches, head size 96 and unaligned rows stay on fa_kernel.
// Resources (ptxas, sm_90a, no bound): 183 registers at d = 128 and 135 at d = 64, no spills
// (sm_86 / sm_89 the same; sm_80: 207 and 168, 12 bytes spilled at d = 64);
// shared memory at a GQA group of 4: 79 KB at d = 128 (2 blocks an SM, by both) and 47 KB at
// d = 64 (3 blocks an SM, by the registers); group 1 stages 64 mask rows (+27 KB). A bound of 4
// blocks at d = 64 spilled (128 registers), one of 2 at d = 128 took 209. The mask pass reads
// the block's mask rows once more than the walk does (at pp512: 16 x 512 floats a block of a
// group of 4), to know which tiles to copy before copying them.
constexpr int k_fm_threads = 128;
constexpr int k_fm_warps   = k_fm_threads / 32;
constexpr int k_fm_rows    = 16 * k_fm_warps;  // query rows per block
constexpr int k_fm_keys    = 64;               // keys per tile
constexpr int k_fm_mp      = k_fm_keys + 8;    // mask tile row stride (floats): the rows of a warp's loads 32 bytes apart in the banks

// Shared memory (bytes), in order: K [2][64][d + 8] halves, V the same, the mask
// [2][mask_rows][k_fm_mp] floats (a row per token of the block, none without a mask), the
// visible tiles' bitmap [(n_tiles + 31) / 32] words.
struct fm_layout {
    size_t v, mask, vis, total;
};
__host__ __device__ inline fm_layout fm_layout_of(int d, int mask_rows, int n_tiles) {
    const size_t tile = static_cast<size_t>(k_fm_keys) * (d + 8) * 2;
    fm_layout    L;
    L.v     = 2 * tile;
    L.mask  = 4 * tile;
    L.vis   = L.mask + sizeof(float) * 2 * static_cast<size_t>(mask_rows) * k_fm_mp;
    L.total = L.vis + sizeof(uint32_t) * ((static_cast<size_t>(n_tiles) + 31) / 32);
    return L;
}

struct fm_args {
    cu_tensor q, k, v, mask, dst;
    float     scale;
    int       group;      // query heads per KV head
    int       n_rows;     // query rows per KV head: tokens x group
    int       n_tiles;    // 64-key tiles of the keys
    int       mask_rows;  // mask rows (tokens) a block stages, at least the most any block has
    bool      has_mask;
    bool      mask16;     // mask rows 16-byte aligned: its tiles copied and scanned 4 floats at a time
};


// One block per 64 query rows (from the last) and KV head (blockIdx.y); D = 64 or 128.
template <int D> __global__ void __launch_bounds__(k_fm_threads) fa_mma_kernel(fm_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) uint8_t fm_smem[];
    constexpr int   LD     = D + 8;
    constexpr float kLog2e = 1.4426950408889634f;
    const fm_layout L      = fm_layout_of(D, a.has_mask ? a.mask_rows : 0, a.n_tiles);
    __half *        sK     = reinterpret_cast<__half *>(fm_smem);           // [2][64][LD]
    __half *        sV     = reinterpret_cast<__half *>(fm_smem + L.v);     // [2][64][LD]
    float *         sM     = reinterpret_cast<float *>(fm_smem + L.mask);   // [2][mask_rows][k_fm_mp]
    uint32_t *      sVis   = reinterpret_cast<uint32_t *>(fm_smem + L.vis);  // bit u: some row sees tile u
    const int       tid    = threadIdx.x;
    const int       lane   = tid % 32, warp = tid / 32;
    const int       ik     = blockIdx.y;
    const int       row0   = static_cast<int>(gridDim.x - 1 - blockIdx.x) * k_fm_rows;
    const int       nrows  = min(k_fm_rows, a.n_rows - row0);
    const int       n_tiles = a.n_tiles;
    const int64_t   n_kv   = a.k.ne[2];
    const char *    kbase  = a.k.data + ik * a.k.nb[1];
    const char *    vbase  = a.v.data + ik * a.v.nb[1];
    // The block's tokens (a mask row each): tk0 .. tk0 + ntok - 1.
    const int tk0 = row0 / a.group, ntok = (row0 + nrows - 1) / a.group - tk0 + 1;

    cu_pdl_begin();

    // The visible tiles: every tile without a mask; else those where some row of the block has
    // a key not -INF, from one pass over the block's mask rows, a (token, tile) pair per thread
    // at a time (its 64 values loaded together).
    const int n_words = (n_tiles + 31) / 32;
    for (int i = tid; i < n_words; i += k_fm_threads) sVis[i] = a.has_mask ? 0u : ~0u;
    if (a.has_mask) {
        __syncthreads();
        for (int p = tid; p < ntok * n_tiles; p += k_fm_threads) {
            const int     r = p % ntok, u = p / ntok;
            const int64_t j0 = static_cast<int64_t>(u) * k_fm_keys;
            const int     nk = static_cast<int>(min(static_cast<int64_t>(k_fm_keys), n_kv - j0));
            const float * mr = reinterpret_cast<const float *>(a.mask.data + static_cast<int64_t>(tk0 + r) * a.mask.nb[1]) + j0;
            float         mx = -INFINITY;
            if (a.mask16 && nk == k_fm_keys) {
#pragma unroll
                for (int e = 0; e < k_fm_keys / 4; e++) {
                    const float4 x = reinterpret_cast<const float4 *>(mr)[e];
                    mx             = fmaxf(mx, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
                }
            } else {
                for (int e = 0; e < nk; e++) mx = fmaxf(mx, mr[e]);
            }
            if (mx != -INFINITY) atomicOr(sVis + u / 32, 1u << (u % 32));
        }
    }
    __syncthreads();
    // The first visible tile at or after u (n_tiles: none); the same in every thread.
    const auto next_tile = [&](int u) {
        while (u < n_tiles) {
            const uint32_t w = sVis[u / 32] >> (u % 32);
            if (w) return min(u + __ffs(static_cast<int>(w)) - 1, n_tiles);
            u = (u / 32 + 1) * 32;
        }
        return n_tiles;
    };

    // Starts the copies of tile u (K, V and the mask rows) into stage st: one cp.async group.
    // K and V rows past n_kv are zeroed (plain stores: nobody reads the stage until the barrier
    // after its group lands), so P's zeros never meet stale values.
    constexpr int PR   = D / 8;               // 16-byte pieces a K / V row
    constexpr int RS   = k_fm_threads / PR;   // rows a pass of the block covers
    const int     c_r0 = tid / PR, c_p0 = tid % PR;
    const auto    issue = [&](int u, int st) {
        const int64_t jt = static_cast<int64_t>(u) * k_fm_keys;
        const int     nk = static_cast<int>(min(static_cast<int64_t>(k_fm_keys), n_kv - jt));
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            const int64_t nb2 = kv ? a.v.nb[2] : a.k.nb[2];
            const char *  src = (kv ? vbase : kbase) + (jt + c_r0) * nb2 + 16 * c_p0;
            __half *      dst = (kv ? sV : sK) + (st * k_fm_keys + c_r0) * LD + 8 * c_p0;
#pragma unroll
            for (int i = 0; i < k_fm_keys / RS; i++, src += RS * nb2, dst += RS * LD) {
                if (c_r0 + i * RS < nk) cu_cp16(dst, src);
                else *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        if (a.has_mask) {
            float * md = sM + st * a.mask_rows * k_fm_mp;
            if (a.mask16) {
                for (int i = tid; i < ntok * (k_fm_keys / 4); i += k_fm_threads) {
                    const int     r = i / (k_fm_keys / 4), c = 4 * (i % (k_fm_keys / 4));
                    const float * mr = reinterpret_cast<const float *>(a.mask.data + static_cast<int64_t>(tk0 + r) * a.mask.nb[1]) + jt + c;
                    float *       d  = md + r * k_fm_mp + c;
                    if (c + 4 <= nk) {
                        cu_cp16(d, mr);
                    } else {
                        for (int e = c; e < nk; e++) cu_cp4(d + e - c, mr + e - c);
                    }
                }
            } else {
                for (int i = tid; i < ntok * k_fm_keys; i += k_fm_threads) {
                    const int r = i / k_fm_keys, key = i % k_fm_keys;
                    if (key < nk) {
                        cu_cp4(md + r * k_fm_mp + key,
                               reinterpret_cast<const float *>(a.mask.data + static_cast<int64_t>(tk0 + r) * a.mask.nb[1]) + jt + key);
                    }
                }
            }
        }
        cu_cp_commit();
    };

    // The first two visible tiles in flight (a group each, empty when there is none), then Q.
    int cur = next_tile(0);
    int nxt = cur < n_tiles ? next_tile(cur + 1) : n_tiles;
    if (cur < n_tiles) issue(cur, 0);
    else cu_cp_commit();
    if (nxt < n_tiles) issue(nxt, 1);
    else cu_cp_commit();

    // This thread's rows: lane / 4 and lane / 4 + 8 of the warp's 16 (h = 0, 1). Q's A
    // fragments: a[h + 2 c] holds row h's dims 16 ks + 8 c + 2 (lane % 4) and the next; rows
    // past the end zeros (their scores are never used).
    const int rw = row0 + 16 * warp;  // the warp's first row
    const int g  = lane / 4, tq = lane % 4;
    uint32_t  qf[D / 16][4];
    int       mt[2];  // the rows' tokens in the mask tile
    {
        const float qs = a.scale * kLog2e;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int     r  = rw + g + 8 * h;
            const bool    ok = r < a.n_rows;
            const int64_t head = static_cast<int64_t>(ik) * a.group + r % a.group, tok = r / a.group;
            const float * qr = reinterpret_cast<const float *>(a.q.data + head * a.q.nb[1] + tok * a.q.nb[2]) + 2 * tq;
            mt[h]            = ok ? r / a.group - tk0 : 0;
            float2 x[D / 16][2];
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
                for (int c = 0; c < 2; c++) x[ks][c] = ok ? *reinterpret_cast<const float2 *>(qr + 16 * ks + 8 * c) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
                for (int c = 0; c < 2; c++) qf[ks][h + 2 * c] = cu_pack_h2(x[ks][c].x * qs, x[ks][c].y * qs);
            }
        }
    }

    float o[D / 8][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    int st = 0;  // cur's stage
    while (cur < n_tiles) {
        const int64_t jt = static_cast<int64_t>(cur) * k_fm_keys;
        const int     nk = static_cast<int>(min(static_cast<int64_t>(k_fm_keys), n_kv - jt));
        cu_cp_wait<1>();       // cur's group landed (nxt's may still be in flight)
        __syncthreads();  // and is visible to all
        if (rw < a.n_rows) {  // the warp has rows
            const __half * tK = sK + st * k_fm_keys * LD;
            const __half * tV = sV + st * k_fm_keys * LD;
            const float *  tM = sM + st * a.mask_rows * k_fm_mp;
            float          s[k_fm_keys / 8][4];
#pragma unroll
            for (int nt = 0; nt < k_fm_keys / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
                for (int np = 0; np < k_fm_keys / 16; np++) {
                    uint32_t kb[4];
                    cu_ldsm_x4(kb, cu_smem_addr(tK + (16 * np + 8 * (lane / 16) + lane % 8) * LD + 16 * ks + 8 * ((lane / 8) % 2)));
                    cu_mma_16816(s[2 * np], qf[ks], kb[0], kb[1]);
                    cu_mma_16816(s[2 * np + 1], qf[ks], kb[2], kb[3]);
                }
            }
            // Keys past n_kv and hidden ones: -INF; the mask's values in log2 units.
#pragma unroll
            for (int nt = 0; nt < k_fm_keys / 8; nt++) {
                const int key = 8 * nt + 2 * tq;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float2 mv = make_float2(0.0f, 0.0f);
                    if (a.has_mask) mv = *reinterpret_cast<const float2 *>(tM + mt[h] * k_fm_mp + key);
                    float & x0 = s[nt][2 * h];
                    float & x1 = s[nt][2 * h + 1];
                    x0         = key >= nk || mv.x == -INFINITY ? -INFINITY : fmaf(mv.x, kLog2e, x0);
                    x1         = key + 1 >= nk || mv.y == -INFINITY ? -INFINITY : fmaf(mv.y, kLog2e, x1);
                }
            }
            float f[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {  // rows g and g + 8
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < k_fm_keys / 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
                mx             = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx             = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[h], mx);
                f[h]           = m[h] == mn ? 1.0f : cu_exp2_approx(m[h] - mn);  // m = -INF < mn: 0
                float ps       = 0.0f;
#pragma unroll
                for (int nt = 0; nt < k_fm_keys / 8; nt++) {
#pragma unroll
                    for (int j = 2 * h; j < 2 * h + 2; j++) {
                        const float p = s[nt][j] == -INFINITY ? 0.0f : cu_exp2_approx(s[nt][j] - mn);
                        s[nt][j]      = p;
                        ps += p;
                    }
                }
                l[h] = l[h] * f[h] + ps;  // this thread's keys; the quad is summed at the end
                m[h] = mn;
            }
            if (__any_sync(0xffffffffu, f[0] != 1.0f || f[1] != 1.0f)) {  // a row's maximum moved
#pragma unroll
                for (int j = 0; j < D / 8; j++) {
                    o[j][0] *= f[0], o[j][1] *= f[0];
                    o[j][2] *= f[1], o[j][3] *= f[1];
                }
            }
#pragma unroll
            for (int kp = 0; kp < k_fm_keys / 16; kp++) {  // keys 16 kp .. 16 kp + 15
                const uint32_t pa[4] = {cu_pack_h2(s[2 * kp][0], s[2 * kp][1]), cu_pack_h2(s[2 * kp][2], s[2 * kp][3]),
                                        cu_pack_h2(s[2 * kp + 1][0], s[2 * kp + 1][1]), cu_pack_h2(s[2 * kp + 1][2], s[2 * kp + 1][3])};
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t vb[4];
                    cu_ldsm_x4_t(vb, cu_smem_addr(tV + (16 * kp + 8 * ((lane / 8) % 2) + lane % 8) * LD + 16 * np + 8 * (lane / 16)));
                    cu_mma_16816(o[2 * np], pa, vb[0], vb[1]);
                    cu_mma_16816(o[2 * np + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncthreads();  // stage st free again
        const int nn = nxt < n_tiles ? next_tile(nxt + 1) : n_tiles;
        if (nn < n_tiles) issue(nn, st);
        else cu_cp_commit();  // an empty group: wait1 then covers nxt
        cur = nxt;
        nxt = nn;
        st ^= 1;
    }

    // The rows out: O / S (zeros where no key was visible).
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int r = rw + g + 8 * h;
        if (r >= a.n_rows) continue;
        const float   inv  = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        const int64_t head = static_cast<int64_t>(ik) * a.group + r % a.group, tok = r / a.group;
        float *       y    = reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2]) + 2 * tq;
#pragma unroll
        for (int j = 0; j < D / 8; j++) *reinterpret_cast<float2 *>(y + 8 * j) = make_float2(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
    }
#endif
}

std::atomic<long long> fa_mma_launch_count{0};  // (ember_cuda_fa_mma_launches)

// This kernel where it applies (sm_80+, the default since session 62: H100 pp512 1B Q8_0 79.3k
// -> 96.1k t/s, 8B Q8_0 12.9k -> 16.5k); EMBER_CUDA_FA_MMA=0: fa_kernel. Read at every launch
// (the tests switch it while the process runs; a recorded CUDA graph keeps the kernel it recorded).
bool fa_mma_enabled(const ember_cuda_ctx & ctx) {
    return ctx.cc_major >= 8 && ember_cuda_env_choice("EMBER_CUDA_FA_MMA", 1, {0, 1}) == 1;
}

template <int D> ember_status fa_mma_launch(ember_cuda_ctx & ctx, const fm_args & a, int64_t n_head_kv) {
    if (ctx.device < 0 || ctx.device >= 64) return EMBER_ERR_UNSUPPORTED;
    // The shared memory grows with the mask rows (GQA group 1: 64 tokens) and the bitmap (the
    // keys): the kernel may take the device's whole opt-in, set once per device.
    static std::atomic<int> optin[64];  // bytes + 1 (0: not set yet)
    int                     lim = optin[ctx.device].load(std::memory_order_relaxed) - 1;
    if (lim < 0) {
        int max_smem = 0;
        if (cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device) != cudaSuccess ||
            cudaFuncSetAttribute(fa_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem) != cudaSuccess) {
            cudaGetLastError();
            return EMBER_ERR_UNSUPPORTED;
        }
        optin[ctx.device].store(max_smem + 1, std::memory_order_relaxed);
        lim = max_smem;
    }
    const size_t smem = fm_layout_of(D, a.has_mask ? a.mask_rows : 0, a.n_tiles).total;
    if (smem > static_cast<size_t>(lim)) return EMBER_ERR_UNSUPPORTED;
    const dim3 grid(static_cast<unsigned>((a.n_rows + k_fm_rows - 1) / k_fm_rows), static_cast<unsigned>(n_head_kv));
    cu_launch(ctx, fa_mma_kernel<D>, grid, k_fm_threads, smem, a);
    fa_mma_launch_count.fetch_add(1, std::memory_order_relaxed);
    return EMBER_OK;
}

// The tensor-core prefill for the shapes fa_kernel's caller took (enough tokens, whole GQA
// groups, fewer than 2^30 rows a KV head): EMBER_ERR_UNSUPPORTED (fa_kernel's turn) unless K and
// V are F16 with 16-byte aligned rows, the head size is 64 or 128, and Q / the output have
// 8-byte aligned rows.
ember_status fa_mma_attn(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * q    = dst->src[0];
    const ember_tensor * k    = dst->src[1];
    const ember_tensor * v    = dst->src[2];
    const ember_tensor * mask = dst->src[3];
    const int64_t        d    = q->ne[0];
    const auto aligned = [](const ember_tensor * t, size_t n) {
        return reinterpret_cast<uintptr_t>(t->data) % n == 0 && t->nb[1] % n == 0 && t->nb[2] % n == 0;
    };
    if (k->type != EMBER_TYPE_F16 || v->type != EMBER_TYPE_F16 || (d != 64 && d != 128)) return EMBER_ERR_UNSUPPORTED;
    if (k->nb[0] != 2 || v->nb[0] != 2 || !aligned(k, 16) || !aligned(v, 16)) return EMBER_ERR_UNSUPPORTED;
    if (q->nb[0] != 4 || dst->nb[0] != 4 || !aligned(q, 8) || !aligned(dst, 8)) return EMBER_ERR_UNSUPPORTED;
    if ((mask && mask->nb[0] != 4) || k->ne[2] > (int64_t(1) << 30)) return EMBER_ERR_UNSUPPORTED;
    fm_args a;
    a.q         = cu_desc(q);
    a.k         = cu_desc(k);
    a.v         = cu_desc(v);
    a.mask      = mask ? cu_desc(mask) : cu_tensor{};
    a.dst       = cu_desc(dst);
    a.scale     = ember_get_op_param_f32(dst, 0);
    a.group     = static_cast<int>(q->ne[1] / k->ne[1]);
    a.n_rows    = static_cast<int>(q->ne[2] * a.group);
    a.n_tiles   = static_cast<int>((k->ne[2] + k_fm_keys - 1) / k_fm_keys);
    a.mask_rows = std::min(k_fm_rows, (k_fm_rows - 1) / a.group + 2);  // tokens of 64 consecutive rows, at most
    a.has_mask  = mask != nullptr;
    a.mask16    = mask && reinterpret_cast<uintptr_t>(mask->data) % 16 == 0 && mask->nb[1] % 16 == 0;
    return d == 64 ? fa_mma_launch<64>(ctx, a, k->ne[1]) : fa_mma_launch<128>(ctx, a, k->ne[1]);
}
