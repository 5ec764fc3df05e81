// Decode attention on tensor cores (sm_80+), for rows longer than the short kernel takes: part
// of ops-attention-decode.cu (included inside its anonymous namespace, after the tile copies
// and decoders it shares with attn_dec_kernel).
//
// attn_dec_kernel spends ~125 warp instructions per key at d = 128 with a GQA group of 4 (counted
// from its code, not measured: every
// query row's scores and P V as scalar FMAs, each K/V value decoded once per warp quarter, four
// barriers per 32-key tile): 14.7 us a layer for an 8B token at depth 4096 with an F16 cache and
// 18.4 us with Q8_0 (H200 kernel trace), while its 16.8 MB (F16) take ~4 us to read. Here a
// block of 4 warps takes one KV head, one split of its keys and up to 16 query rows (the GQA
// group's heads x the tokens: mma's M, padded), and walks the split 64 keys at a time:
//   tile: K and V rows as f16 in shared memory ([key][d + 8 halves], conflict-free ldmatrix):
//         an F16 cache copied there with cp.async, a block-quantized one copied raw (16-byte
//         pieces around each row where key rows are 16 bytes apart, else 8- / 4-byte pieces or
//         words: mma_piece_bytes) and then decoded into the f16 tile, each warp its own 16 keys
//         (mma_dec_block: a 32-value block per item; the word copies around rows at any byte: 8
//         values per item);
//   warp w: keys 16 w .. 16 w + 15 of the tile: S = Q K^T (mma.m16n8k16, Q's and K's fragments
//         by ldmatrix), an online softmax per row in log2 units (scores scaled
//         by log2 e with Q), P as the A operand straight from S's accumulators, O += P V (V's
//         fragments by ldmatrix.trans, O rescaled only when a row's maximum moved); each warp
//         keeps its own M, S and O;
// then the four warps merge through shared memory, and the split's row goes out as
// attn_dec_kernel's does (normalized when there is one split, else to scratch memory for
// attn_dec_merge_kernel, M in natural-log units). Q, K, V and P are rounded to f16 (sums in
// f32), as llama.cpp's tensor-core attention does: a relative error of ~2^-11 per element,
// where the scalar kernels are exact to f32.
//
// The copies were a third of the kernel's instructions (a division and a 64-bit multiply per
// 16-byte piece) and the 8-value decode of the block types twice the rest (ncu, H200, 8B at
// 4096 keys: 14.0 us a launch for F16 at 0.33 instructions per cycle and scheduler, 2 warps
// each); now each thread's rows are walked by pointer steps. Kernel trace at depth 4096 (8B
// Q4_0, us a layer): F16 14.45 -> 13.65, Q8_0 24.6 -> 15.6, FP8 E4M3 (8-value decode) 19.2
// against the tiled kernel's 18.4. tg128 at depth 4096 (8B Q4_0 weights, H200): F16 447.3,
// Q8_0 420.4 (tiled 402.7), Q4_0 445.2 (419.7), FP8 E4M3 415.0 (402.1); 1B: F16 1437.3, Q8_0
// 1410.1, FP8 1374.1 (66-byte rows: words around each row; tiled 1302.8). PERF-NOTES.md,
// session 24. Session 25: the step's new rows written by this kernel (mma_kv_write), 16-byte
// copies, the decode per warp, 3 blocks an SM at d = 128: tg128 at 4096 (8B): F16 446.5, Q8_0
// 437.1 (0.979), FP8 E4M3 430.4 (0.964).
constexpr int k_mma_threads = 128;
constexpr int k_mma_warps   = k_mma_threads / 32;
constexpr int k_mma_keys    = 16 * k_mma_warps;  // keys per tile
constexpr int k_mma_rows    = 16;                // query rows per block

template <int T> __host__ __device__ constexpr bool mma_direct() {  // copied straight into the f16 tile
    return T == EMBER_TYPE_F16;
}
template <int T> __host__ __device__ constexpr bool mma_type() {  // cache types the kernel reads
    return T == EMBER_TYPE_F16 || T == EMBER_TYPE_Q8_0 || T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E5M2;
}

// Shared memory (bytes), in order: Q [q_rows][ld] halves (the rows a block has, at most 16, and
// a row of zeros that the padding rows of mma's 16 read: dec_args::q_rows); the f16 K and V tiles [stages][64][ld]
// (two stages when copied straight, else one); the raw tiles [2][2 (K, V)][64][slot] (block
// types); the mask [2][mask_rows][64] floats (a row per token of a block: dec_args::mask_rows).
// At the end the warps' O [4][16][d] floats and M, S
// [2][4][16] reuse the memory from the K tile on.
struct mma_layout {
    size_t k, v, raw, mask, total;
};
__host__ __device__ inline mma_layout mma_layout_of(bool direct, int d, int slot_bytes, int mask_rows, int q_rows) {
    const size_t ld   = static_cast<size_t>(d) + 8;
    const size_t tile = static_cast<size_t>(k_mma_keys) * ld * 2 * (direct ? 2 : 1);
    mma_layout   L;
    L.k          = static_cast<size_t>(q_rows) * ld * 2;
    L.v          = L.k + tile;
    L.raw        = L.v + tile;
    L.mask       = L.raw + (direct ? 0 : static_cast<size_t>(2) * 2 * k_mma_keys * slot_bytes);
    L.total      = L.mask + sizeof(float) * 2 * mask_rows * k_mma_keys + 16;  // slack: the last raw slot's funnel word
    const size_t merge = L.k + sizeof(float) * (static_cast<size_t>(k_mma_warps) * k_mma_rows * d + 2 * k_mma_warps * k_mma_rows);
    if (L.total < merge) L.total = merge;
    return L;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// Two f16 pairs from four byte values u (0..255) minus bias, times d: each byte moved into the
// f16 1024 + u by a byte permute, the bias subtracted exactly, one f16 multiply (d q rounded
// once, as the float product rounded to f16 would be).
__device__ __forceinline__ uint2 mma_bytes_to_h2(uint32_t u, __half2 bias, __half2 d) {
    const uint32_t lo = __byte_perm(u, 0x64646464u, 0x4140), hi = __byte_perm(u, 0x64646464u, 0x4342);
    const __half2  a  = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&lo), bias), d);
    const __half2  b  = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&hi), bias), d);
    return make_uint2(*reinterpret_cast<const uint32_t *>(&a), *reinterpret_cast<const uint32_t *>(&b));
}
// Values [8 pc, 8 pc + 8) of a Q8_0 / Q4_0 row (raw slot `row`, bytes from `off`) as f16 pairs
// times the block scale, the pieces dec_load8_u reads.
template <int T> __device__ __forceinline__ uint4 mma_dec8_q(const uint8_t * row, int off, int pc) {
    uint32_t u0, u1;
    unsigned b;
    float    bias;
    if constexpr (T == EMBER_TYPE_Q8_0) {
        b             = static_cast<unsigned>(off) + 34u * static_cast<unsigned>(pc / 4);
        const uint2 q = dec_bytes8(row, static_cast<int>(b + 2u + 8u * static_cast<unsigned>(pc % 4)));
        u0 = q.x ^ 0x80808080u, u1 = q.y ^ 0x80808080u, bias = 1152.0f;  // signed bytes + 128
    } else {
        b                = static_cast<unsigned>(off) + 18u * static_cast<unsigned>(pc / 4);
        const uint2    q = dec_bytes8(row, static_cast<int>(b + 2u + 8u * static_cast<unsigned>(pc % 2)));
        const unsigned sh = static_cast<unsigned>(pc % 4) / 2u * 4u;
        u0 = q.x >> sh & 0x0f0f0f0fu, u1 = q.y >> sh & 0x0f0f0f0fu, bias = 1032.0f;  // nibbles, 8 below
    }
    const unsigned short dh = static_cast<unsigned short>(row[b] | row[b + 1] << 8);
    const __half2        d2 = __half2half2(__ushort_as_half(dh));
    const __half2        b2 = __float2half2_rn(bias);
    const uint2          x  = mma_bytes_to_h2(u0, b2, d2), y = mma_bytes_to_h2(u1, b2, d2);
    return make_uint4(x.x, x.y, y.x, y.y);
}
// Block b (32 values) of a Q8_0 / Q4_0 / FP8 row whose bytes start at byte `off` of its raw slot
// `row` (0 for 8- / 4-byte piece copies, 0..3 for mma_piece 1) as 16 f16 pairs times the block scale, in order, by whole words: the
// quants' words read once (a funnel shift where they start mid-word) where the 8-value decoders
// reread the scale and three words per 8 values. FP8 codes become f16 (cvt on sm_89+ for E4M3;
// E5M2 codes are the top byte of an f16) times the power-of-two scale in f16 (exact, rounded
// once, so the same f16 as the float product rounded: cu_pack_h2), in f32 where the scale has no
// f16.
template <int T> __device__ __forceinline__ void mma_dec_block(const uint8_t * row, int off, int b, uint4 (&h)[4]) {
    constexpr bool   FP8 = T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E5M2;
    constexpr int    SB  = FP8 ? 1 : 2;                           // scale bytes
    constexpr int    BS  = SB + (T == EMBER_TYPE_Q4_0 ? 16 : 32);  // block bytes
    constexpr int    NW  = (BS - SB) / 4;                          // quant words
    const unsigned   o   = static_cast<unsigned>(off + BS * b + SB);
    const uint32_t * w   = reinterpret_cast<const uint32_t *>(row + (o & ~3u));
    const unsigned   sh  = (o & 3u) * 8u;
    uint32_t         x[NW + 1];
#pragma unroll
    for (int j = 0; j <= NW; j++) x[j] = w[j];  // the last is read past the row (slot padding) when sh = 0: unused then
    uint32_t q[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) q[j] = __funnelshift_r(x[j], x[j + 1], sh);
    if constexpr (FP8) {
        uint32_t r[2 * NW];
        cu_fp8_words_h2<T == EMBER_TYPE_FP8_E4M3, NW>(q, row[off + BS * b], r);
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = make_uint4(r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]);
        return;
    }
    const __half2 d2 = __half2half2(*reinterpret_cast<const __half *>(row + off + BS * b));  // off even: mma_piece_bytes
    if constexpr (T == EMBER_TYPE_Q8_0) {
        const __half2 b2 = __float2half2_rn(1152.0f);  // signed bytes + 128
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint2 u = mma_bytes_to_h2(q[2 * k] ^ 0x80808080u, b2, d2), v = mma_bytes_to_h2(q[2 * k + 1] ^ 0x80808080u, b2, d2);
            h[k]          = make_uint4(u.x, u.y, v.x, v.y);
        }
    } else {  // Q4_0, values j < 16: low nibbles of bytes j; the others the high nibbles of bytes j - 16
        const __half2 b2 = __float2half2_rn(1032.0f);  // nibbles, 8 below
#pragma unroll
        for (int k = 0; k < 2; k++) {
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                const unsigned s = 4u * static_cast<unsigned>(hi);
                const uint2    u = mma_bytes_to_h2(q[2 * k] >> s & 0x0f0f0f0fu, b2, d2), v = mma_bytes_to_h2(q[2 * k + 1] >> s & 0x0f0f0f0fu, b2, d2);
                h[2 * hi + k]    = make_uint4(u.x, u.y, v.x, v.y);
            }
        }
    }
}
#endif

// The step's new K and V rows (dec_args::kvw) into the caches, by the block whose split holds
// the row (the last split also takes rows past the view), for its KV head: item (K or V, 32-value
// block) per warp, encoded as set_rows_warp_kernel does (cu_encode_warp: the same bytes). The
// caller's barrier then orders the stores before the block's tile copies; no other block reads
// a row outside its split, and blocks of other row chunks of this split store the same bytes.
// An index repeated later in the batch is written by its last occurrence only; one out of the
// caches' rows is reported (block 0) and skipped, as SET_ROWS does.
template <int T, int D> __device__ __forceinline__ void mma_kv_write(const dec_args & a, int ik, int split) {
    if constexpr (cu_has_warp_encoder<T>()) {
        constexpr int        NB = D / 32;
        const dec_kv_write & w  = a.kvw;
        const int            lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        const int            block_bytes = a.row_bytes / NB;
        for (int i = 0; i < w.n; i++) {
            const int32_t id = *reinterpret_cast<const int32_t *>(w.idx + i * w.idx_nb0);
            if (id < 0 || id >= w.cache_rows) {
                if (ik == 0 && split == 0 && blockIdx.z == 0 && threadIdx.x == 0) cu_set_error(w.err, EMBER_ERR_INTERNAL);
                continue;
            }
            const int64_t s = min(static_cast<int64_t>(id) / a.split_keys, static_cast<int64_t>(a.n_split - 1));
            if (s != split) continue;
            bool later = false;
            for (int j = i + 1; j < w.n; j++) later = later || *reinterpret_cast<const int32_t *>(w.idx + j * w.idx_nb0) == id;
            if (later) continue;
            for (int it = warp; it < 2 * NB; it += k_mma_warps) {
                const int     kv  = it / NB, b = it % NB;
                const float * src = reinterpret_cast<const float *>(kv ? w.v_rows + i * w.v_nb1 : w.k_rows + i * w.k_nb1);
                char *        dst = kv ? a.v.data + id * a.v.nb[2] + ik * a.v.nb[1] : a.k.data + id * a.k.nb[2] + ik * a.k.nb[1];
                cu_encode_warp<T>(src[ik * D + 32 * b + lane], dst + b * block_bytes);
            }
        }
    }
}

// Blocks an SM the registers must allow: F16 none (127 registers at d = 128 uncapped; a bound
// made the compiler take more); the block types 3 at d = 128 (their shared memory fits 3, and a
// split of 4225 keys over 8 KV heads then takes 2 tiles a block, not 3) and 4 at d = 64.
template <int T, int D> __host__ __device__ constexpr int mma_min_blocks() {
    return mma_direct<T>() ? 0 : D == 64 ? 4 : 3;
}

template <int T, int D> __global__ void __launch_bounds__(k_mma_threads, mma_min_blocks<T, D>()) attn_dec_mma_kernel(dec_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int    LD     = D + 8;
    constexpr bool   direct = mma_direct<T>();
    constexpr float  kLog2e = 1.4426950408889634f;
    const int        slot   = a.slot_bytes;
    const mma_layout L      = mma_layout_of(direct, D, slot, a.mask_rows, a.q_rows);
    __half *         sQ     = reinterpret_cast<__half *>(smem);
    __half *         sK0    = reinterpret_cast<__half *>(smem + L.k);
    __half *         sV0    = reinterpret_cast<__half *>(smem + L.v);
    uint8_t *        sRaw   = smem + L.raw;
    float *          sMask  = reinterpret_cast<float *>(smem + L.mask);  // [2][16][64]
    const int        ik     = blockIdx.x;
    const int        split  = blockIdx.y;
    const int        r0     = blockIdx.z * k_mma_rows;
    const int        nrows  = min(k_mma_rows, a.n_rows - r0);
    const int        tid    = threadIdx.x;
    const int        lane   = tid % 32, warp = tid / 32;
    const int64_t    n_kv   = a.k.ne[2];
    const int64_t    j0     = static_cast<int64_t>(split) * a.split_keys;
    const int64_t    j1     = j0 + a.split_keys < n_kv ? j0 + a.split_keys : n_kv;
    const int        n_tiles = j1 > j0 ? static_cast<int>((j1 - j0 + k_mma_keys - 1) / k_mma_keys) : 0;
    const char *     kbase  = a.k.data + ik * a.k.nb[1];
    const char *     vbase  = a.v.data + ik * a.v.nb[1];
    // The block's tokens (a mask row each): tk0 .. tk0 + ntok - 1, at most 16.
    const int tk0 = r0 / a.group, ntok = nrows > 0 ? (r0 + nrows - 1) / a.group - tk0 + 1 : 0;
    // The copies, each thread's (row, piece) pairs found once: piece pc of rows c_r0, c_r0 + c_dr,
    // ... of the K rows, then the same of the V rows, walked by pointer steps (no division or
    // 64-bit multiply per copy). F16: 16-byte pieces; block types (mma_piece): 16-byte pieces
    // from each cache's offset, 8- or 4-byte pieces (every row starts on that boundary), words
    // around rows at even bytes (1); else the words around each row (rows at any byte: the pair
    // walks the K and V rows together, from (tid / per_row, tid % per_row)).
    const int piece   = direct ? 16 : a.mma_piece;
    // 16-byte pieces of a block type: K's and V's rows start `off_k` / `off_v` bytes into their
    // 16 (key rows 16 bytes apart: mma_piece_bytes), copied from there.
    const int off_k   = !direct && piece == 16 ? static_cast<int>(reinterpret_cast<uintptr_t>(kbase) & 15) : 0;
    const int off_v   = !direct && piece == 16 ? static_cast<int>(reinterpret_cast<uintptr_t>(vbase) & 15) : 0;
    const int per_row = direct ? D / 8 : piece == 16 ? (max(off_k, off_v) + a.row_bytes + 15) / 16 : piece > 1 ? a.row_bytes / piece : a.row_bytes / 4 + 2;
    const int c_r0 = tid / per_row, c_p0 = tid - c_r0 * per_row;
    const int c_dr = piece == 1 ? (k_mma_threads / per_row) & ~1 : k_mma_threads / per_row, c_dp = k_mma_threads - c_dr * per_row;
    const bool c_on = !piece || c_r0 < c_dr;  // piece copies: threads past the last whole row pass idle

    // Starts the copies of tile t (K, V, mask rows) into stage t % 2 (one cp.async group). An
    // F16 tile's rows past the split's end are zeroed here (plain stores: nobody reads that
    // stage until the barrier after its group lands); block types zero them when decoding.
    const auto issue = [&](int t) {
        const int64_t jt = j0 + static_cast<int64_t>(t) * k_mma_keys;
        const int     nk = static_cast<int>(j1 - jt < k_mma_keys ? j1 - jt : k_mma_keys);
        const int     st = t % 2;
        if constexpr (direct) {
            constexpr int R = k_mma_threads / (D / 8);  // rows a pass of the block covers
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                const char * src = (kv ? vbase + (jt + c_r0) * a.v.nb[2] : kbase + (jt + c_r0) * a.k.nb[2]) + 16 * c_p0;
                const int64_t step = static_cast<int64_t>(R) * (kv ? a.v.nb[2] : a.k.nb[2]);
                __half *     dst = (kv ? sV0 : sK0) + st * k_mma_keys * LD + c_r0 * LD + 8 * c_p0;
#pragma unroll
                for (int u = 0; u < k_mma_keys / R; u++, src += step, dst += R * LD) {
                    if (c_r0 + u * R < nk) cu_cp16(dst, src);
                    else *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        } else if (piece == 1) {
            // Word copies around rows at any even byte: an even number of rows per pass over
            // rows of even stride keeps each thread's offset within its word, so the words it
            // copies are found once per tile (words past the row's end are not read: only the
            // allocation's end is known to be a word boundary, dec_words_in_bounds).
            uint8_t * stg = sRaw + static_cast<size_t>(st) * 2 * k_mma_keys * slot;
            if (c_on) {
                for (int kv = 0; kv < 2; kv++) {
                    const int64_t nb2  = kv ? a.v.nb[2] : a.k.nb[2];
                    const char *  row  = (kv ? vbase : kbase) + (jt + c_r0) * nb2;
                    const int     off  = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 3);
                    if (4 * c_p0 >= off + a.row_bytes) continue;
                    const char *  src  = row - off + 4 * c_p0;
                    uint8_t *     dst  = stg + (kv * k_mma_keys + c_r0) * slot + 4 * c_p0;
                    const int64_t step = c_dr * nb2;
                    for (int key = c_r0; key < nk; key += c_dr, src += step, dst += c_dr * slot) cu_cp4(dst, src);
                }
            }
        } else if (piece) {
            // Pieces on 8- / 4-byte boundaries: separate from piece 1 above, whose run-time
            // offset here took FP8's d = 128 kernel from 128 to 154 registers (sm_90).
            uint8_t * stg = sRaw + static_cast<size_t>(st) * 2 * k_mma_keys * slot;
            if (c_on) {
                for (int kv = 0; kv < 2; kv++) {
                    const int64_t nb2  = kv ? a.v.nb[2] : a.k.nb[2];
                    const char *  src  = (kv ? vbase : kbase) + (jt + c_r0) * nb2 + piece * c_p0;
                    uint8_t *     dst  = stg + (kv * k_mma_keys + c_r0) * slot + piece * c_p0;
                    const int64_t step = c_dr * nb2;
                    if (piece == 16) {
                        const int off = kv ? off_v : off_k;
                        if (16 * c_p0 >= off + a.row_bytes) continue;  // past this cache's row (the other's may need it)
                        src -= off;
                        for (int key = c_r0; key < nk; key += c_dr, src += step, dst += c_dr * slot) cu_cp16(dst, src);
                    } else if (piece == 8) {
                        for (int key = c_r0; key < nk; key += c_dr, src += step, dst += c_dr * slot) cu_cp8(dst, src);
                    } else {
                        for (int key = c_r0; key < nk; key += c_dr, src += step, dst += c_dr * slot) cu_cp4(dst, src);
                    }
                }
            }
        } else {
            uint8_t * stg = sRaw + static_cast<size_t>(st) * 2 * k_mma_keys * slot;
            int       r = c_r0, w = c_p0;
            for (int i = tid; i < 2 * k_mma_keys * per_row; i += k_mma_threads) {
                const int kv = r / k_mma_keys, key = r % k_mma_keys;
                if (key < nk) {
                    const char * row = kv ? vbase + (jt + key) * a.v.nb[2] : kbase + (jt + key) * a.k.nb[2];
                    const char * a0  = row - (reinterpret_cast<uintptr_t>(row) & 3);
                    if (a0 + 4 * w < row + a.row_bytes) cu_cp4(stg + r * slot + 4 * w, a0 + 4 * w);
                }
                w += c_dp;
                r += c_dr;
                if (w >= per_row) w -= per_row, r++;
            }
        }
        if (a.has_mask) {  // one row per token of the block (the GQA group's rows share it)
            for (int i = tid; i < ntok * k_mma_keys; i += k_mma_threads) {
                const int r = i / k_mma_keys, key = i % k_mma_keys;
                if (key < nk) {
                    const float * mr = reinterpret_cast<const float *>(a.mask.data + static_cast<int64_t>(tk0 + r) * a.mask.nb[1]);
                    cu_cp4(sMask + (st * a.mask_rows + r) * k_mma_keys + key, mr + jt + key);
                }
            }
        }
        cu_cp_commit();
    };

    cu_pdl_begin();
    if (a.kvw.n > 0) {  // the step's new cache rows first (block types: the stream's deferred SET_ROWS pair)
        mma_kv_write<T, D>(a, ik, split);
        __syncthreads();
    }
    // Tiles 0 and 1 in flight (a group each, empty when there is none), then Q: its rows
    // (head ik * group + rr % group of token rr / group, rr = r0 + r) times scale and log2 e as
    // f16, rows past nrows zeros (their scores are never used), every load issued before the
    // first store so the block waits one round trip, beside the tiles' copies.
    if (n_tiles > 0) issue(0);
    else cu_cp_commit();
    if (n_tiles > 1) issue(1);
    else cu_cp_commit();
    {
        constexpr int NQ = k_mma_rows * (D / 2) / k_mma_threads;  // f32 pairs per thread
        const float   qs = a.scale * kLog2e;
        float2        qv[NQ];
#pragma unroll
        for (int u = 0; u < NQ; u++) {
            const int i = tid + u * k_mma_threads, r = i / (D / 2), e = 2 * (i % (D / 2));
            qv[u]       = make_float2(0.0f, 0.0f);
            if (r < nrows && n_tiles > 0) {
                const int64_t head = static_cast<int64_t>(ik) * a.group + (r0 + r) % a.group, tok = (r0 + r) / a.group;
                qv[u]              = *reinterpret_cast<const float2 *>(a.q.data + head * a.q.nb[1] + tok * a.q.nb[2] + 4 * e);
            }
        }
#pragma unroll
        for (int u = 0; u < NQ; u++) {
            const int i = tid + u * k_mma_threads, r = i / (D / 2), e = 2 * (i % (D / 2));
            if (r < nrows) *reinterpret_cast<__half2 *>(sQ + r * LD + e) = __floats2half2_rn(qv[u].x * qs, qv[u].y * qs);
        }
        for (int e = 2 * tid; e < D; e += 2 * k_mma_threads) *reinterpret_cast<__half2 *>(sQ + (a.q_rows - 1) * LD + e) = __floats2half2_rn(0.0f, 0.0f);
    }
    // Q's fragment rows: lane % 16, or the zero row past nrows.
    const int q_row = lane % 16 < nrows ? lane % 16 : a.q_rows - 1;

    // The mask rows of this thread's two query rows (lane / 4 and lane / 4 + 8).
    const int mt0 = (r0 + lane / 4) / a.group - tk0, mt1 = (r0 + lane / 4 + 8) / a.group - tk0;
    float    o[D / 8][4];
    float    m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int t = 0; t < n_tiles; t++) {
        const int64_t jt = j0 + static_cast<int64_t>(t) * k_mma_keys;
        const int     nk = static_cast<int>(j1 - jt < k_mma_keys ? j1 - jt : k_mma_keys);
        const int     st = t % 2;
        cu_cp_wait<1>();   // tile t's group landed (tile t + 1's may still be in flight)
        __syncthreads();  // tile t (and Q) visible to all
        if constexpr (!direct) {
            // Each warp decodes the 16 keys it computes on (K and V), so a warp barrier orders
            // its decode before its mma and the warps do not wait for each other here.
            const uint8_t * stg = sRaw + static_cast<size_t>(st) * 2 * k_mma_keys * slot;
            if (piece) {
                // Whole 32-value blocks: item (K or V, block b) of key 16 warp + lane % 16, the
                // half-warps on alternate items.
                constexpr int NB  = D / 32;
                const int     key = 16 * warp + lane % 16;
#pragma unroll 1
                for (int u = lane / 16; u < 2 * NB; u += 2) {
                    const int b = u % NB, kv = u / NB;
                    uint4     h[4] = {};
                    if (key < nk) {
                        const int off = piece == 16 ? (kv ? off_v : off_k)
                                        : piece > 1 ? 0 : kv ? dec_row_off(vbase, a.v.nb[2], jt + key) : dec_row_off(kbase, a.k.nb[2], jt + key);
                        mma_dec_block<T>(stg + (kv * k_mma_keys + key) * slot, off, b, h);
                    }
                    uint4 * dst = reinterpret_cast<uint4 *>((kv ? sV0 : sK0) + key * LD + 32 * b);
                    dst[0] = h[0], dst[1] = h[1], dst[2] = h[2], dst[3] = h[3];
                }
            } else {
                // Item (K or V, key, 8 values) of the warp's keys.
#pragma unroll 1
                for (int i = lane; i < 2 * 16 * (D / 8); i += 32) {
                    const int kv = i / (16 * (D / 8)), rem = i % (16 * (D / 8)), key = 16 * warp + rem / (D / 8), pc = rem % (D / 8);
                    uint4     h  = make_uint4(0u, 0u, 0u, 0u);
                    if (key < nk) {
                        const int       off = kv ? dec_row_off(vbase, a.v.nb[2], jt + key) : dec_row_off(kbase, a.k.nb[2], jt + key);
                        const uint8_t * row = stg + (kv * k_mma_keys + key) * slot;
                        if constexpr (T == EMBER_TYPE_Q8_0 || T == EMBER_TYPE_Q4_0) {
                            h = mma_dec8_q<T>(row, off, pc);
                        } else {  // FP8: the code values by the tiled kernel's decoder, the power-of-two scale in f32
                            float       y[8];
                            const float s = dec_load8_u<T, 1>(row, off, 8 * pc, y);
                            h = make_uint4(cu_pack_h2(y[0] * s, y[1] * s), cu_pack_h2(y[2] * s, y[3] * s), cu_pack_h2(y[4] * s, y[5] * s), cu_pack_h2(y[6] * s, y[7] * s));
                        }
                    }
                    *reinterpret_cast<uint4 *>((kv ? sV0 : sK0) + key * LD + 8 * pc) = h;
                }
            }
            __syncwarp();
        }
        const __half * sK = direct ? sK0 + st * k_mma_keys * LD : sK0;
        const __half * sV = direct ? sV0 + st * k_mma_keys * LD : sV0;
        const int      kw = 16 * warp;  // the warp's first key in the tile
        if (kw < nk) {
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                uint32_t qa[4], kb[4];
                cu_ldsm_x4(qa, cu_smem_addr(sQ + q_row * LD + 16 * ks + 8 * (lane / 16)));
                cu_ldsm_x4(kb, cu_smem_addr(sK + (kw + 8 * (lane / 16) + lane % 8) * LD + 16 * ks + 8 * ((lane / 8) % 2)));
                cu_mma_16816(s[0], qa, kb[0], kb[1]);
                cu_mma_16816(s[1], qa, kb[2], kb[3]);
            }
            // Keys past the tile's end and hidden ones: -INF; the mask's values in log2 units.
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int key = kw + 8 * nt + 2 * (lane % 4) + (j % 2), row = lane / 4 + 8 * (j / 2);
                    float     x   = s[nt][j];
                    if (key >= nk) {
                        x = -INFINITY;
                    } else if (a.has_mask && row < nrows) {
                        const float mv = sMask[(st * a.mask_rows + (j < 2 ? mt0 : mt1)) * k_mma_keys + key];
                        x              = mv == -INFINITY ? -INFINITY : fmaf(mv, kLog2e, x);
                    }
                    s[nt][j] = x;
                }
            }
            float f[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {  // rows lane / 4 and lane / 4 + 8
                float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
                mx       = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx       = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[h], mx);
                f[h]           = m[h] == mn ? 1.0f : cu_exp2_approx(m[h] - mn);  // m = -INF < mn: 0
                float ps       = 0.0f;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
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
            if (__any_sync(0xffffffffu, f[0] != 1.0f || f[1] != 1.0f)) {  // a row's maximum moved (rarely, after the first tiles)
#pragma unroll
                for (int j = 0; j < D / 8; j++) {
                    o[j][0] *= f[0], o[j][1] *= f[0];
                    o[j][2] *= f[1], o[j][3] *= f[1];
                }
            }
            const uint32_t pa[4] = {cu_pack_h2(s[0][0], s[0][1]), cu_pack_h2(s[0][2], s[0][3]), cu_pack_h2(s[1][0], s[1][1]), cu_pack_h2(s[1][2], s[1][3])};
#pragma unroll
            for (int np = 0; np < D / 16; np++) {
                uint32_t vb[4];
                cu_ldsm_x4_t(vb, cu_smem_addr(sV + (kw + 8 * ((lane / 8) % 2) + lane % 8) * LD + 16 * np + 8 * (lane / 16)));
                cu_mma_16816(o[2 * np], pa, vb[0], vb[1]);
                cu_mma_16816(o[2 * np + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();  // stage t % 2 (and the decoded tile) free again
        if (t + 2 < n_tiles) issue(t + 2);
        else cu_cp_commit();  // an empty group: wait1 then covers tile t + 1
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    // The warps' rows through shared memory (over the tiles: every warp is past the last barrier).
    float * sO  = reinterpret_cast<float *>(smem + L.k);  // [warp][row][D]
    float * sMw = sO + k_mma_warps * k_mma_rows * D;      // [warp][row]
    float * sSw = sMw + k_mma_warps * k_mma_rows;
    {
        const int row = lane / 4, c = 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            *reinterpret_cast<float2 *>(sO + (warp * k_mma_rows + row) * D + 8 * j + c)     = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2 *>(sO + (warp * k_mma_rows + row + 8) * D + 8 * j + c) = make_float2(o[j][2], o[j][3]);
        }
        if (lane % 4 == 0) {
            sMw[warp * k_mma_rows + row] = m[0], sMw[warp * k_mma_rows + row + 8] = m[1];
            sSw[warp * k_mma_rows + row] = l[0], sSw[warp * k_mma_rows + row + 8] = l[1];
        }
    }
    __syncthreads();
    for (int r = 0; r < nrows; r++) {
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < k_mma_warps; w++) M = fmaxf(M, sMw[w * k_mma_rows + r]);
        float wt[k_mma_warps], S = 0.0f;
#pragma unroll
        for (int w = 0; w < k_mma_warps; w++) {
            const float mw = sMw[w * k_mma_rows + r];
            wt[w]          = mw == -INFINITY ? 0.0f : exp2f(mw - M);
            S += wt[w] * sSw[w * k_mma_rows + r];
        }
        const int64_t head = static_cast<int64_t>(ik) * a.group + (r0 + r) % a.group, tok = (r0 + r) / a.group;
        for (int e = tid; e < D; e += k_mma_threads) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < k_mma_warps; w++) v = fmaf(wt[w], sO[(w * k_mma_rows + r) * D + e], v);
            if (a.part) {
                float * pr = a.part + ((tok * a.q.ne[1] + head) * a.n_split + split) * dec_part_stride(D);  // the merge kernel's order
                pr[e]      = v;
                if (e == 0) {
                    pr[D]     = M == -INFINITY ? -INFINITY : M * 0.6931471805599453f;  // natural-log units, as the merge expects
                    pr[D + 1] = S;
                }
            } else {
                const float y = S > 0.0f ? v / S : 0.0f;
                reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2])[e] = y;
                if (a.xq) cu_quantize_warp(y, tok * a.xk + head * D + e, a.xq, a.xds);  // D % 32 == 0: warp-uniform
            }
        }
    }
#endif
}
