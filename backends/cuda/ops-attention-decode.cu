// ATTN for decode (a few query tokens against the KV cache): the keys of one KV head are cut
// into splits, and a block of k_dec_threads threads takes one split of one KV head for up to
// k_dec_rows query rows that read that head (the GQA group's heads x the tokens; more rows take
// more blocks, gridDim.z), so each K/V element is read from memory once per step, not once per
// query head. Rows of up to 256 keys take attn_dec_short_kernel instead (one block per query row
// and pass of keys, no tiles; see there).
//
// A block walks its split 32 keys (a tile) at a time. The raw bytes of tile t + 1's K and V
// rows and mask values are copied into shared memory with cp.async (sm_80+; plain copies
// below) while tile t is computed, so a block keeps a tile in flight: at 4k keys the kernel
// would otherwise wait one memory round trip per tile. Every type is read in place from the
// raw tile, decoded where it is used (no float copy of the tile: that took 33 KiB of shared
// memory at d = 128, so only 3 blocks fit an SM, and a pass and a barrier per tile). Then:
//   scores: thread (key = lane, dims quarter = warp) takes its K slice once for every query
//           row (Q in shared memory, broadcast reads), the quarters summed through shared;
//   softmax: warp per row, lane = key, online (max, sum, rescale) across tiles;
//   P.V: thread (4 dims, key group) accumulates every row; the key groups are summed at the end.
// Rows of the 16-byte types are padded by 16 bytes so lanes reading 16 bytes of 8 different
// keys hit distinct banks; the byte types' slots are an odd number of words, so 32 lanes
// reading a word of 32 different keys hit 32 banks. Several splits' unnormalized results,
// maxima and sums go to scratch memory and a second kernel merges them; one split writes the
// output directly.
//
// Used when the head size is a multiple of 32 (up to EMBER_CUDA_ATTN_MAX_D), K and V share it
// and their type (mixed caches take the simple kernel: one instantiation per type, not per
// pair), the type is a cache type (cu_dispatch_elem_type) and the rows are aligned for the
// copies (16 bytes for F16/BF16/F32; the byte types copy the 4-byte words around each row, so
// the tensor's memory must end on a 4-byte boundary); else ops-attention.cu's kernels run.
// EMBER_CUDA_ATTN_DEC=0: off. EMBER_CUDA_ATTN_DEC_BLOCKS=n: aim at n blocks per SM (default 4,
// fewer where fewer fit, so the grid stays one wave) when choosing the number of splits.
//
// At 4k keys the kernel is bound by issued instructions, not by memory (ncu on an H200, 8B
// shape: 16% of DRAM bandwidth with an F16 cache, 7% with Q8_0; 4 warps per scheduler, ~60%
// issue slots busy), so the quantized caches, half the bytes, were slower than F16. The second
// version (kernel template V = 1, the default; EMBER_CUDA_ATTN_DEC_FAST=0 the first) cuts
// instructions: copies with no division per copy, Q8_0/Q4_0 values to floats
// by a byte permute and a subtraction instead of I2F (a quarter-rate conversion), K's block
// scale applied once per 8-value dot product, Q loaded and results stored row by row.
// EMBER_CUDA_ATTN_DEC_FAST=2: as 1, FP8 E4M3 decoded by bit moves instead of cvt (slower).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <cooperative_groups.h>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-plan.h"

namespace cg = cooperative_groups;

namespace {

constexpr int k_dec_threads = 128;
constexpr int k_dec_warps   = k_dec_threads / 32;
constexpr int k_dec_keys    = 32;  // keys per tile
constexpr int k_dec_rows    = 8;   // query rows per block, at most
constexpr int k_dec_stages  = 2;   // raw tile buffers: the one computed and the one in flight
constexpr int k_dec_max_split = 1024;
constexpr int k_dec_max_cluster = 8;  // splits merged in one thread block cluster, at most (the portable cluster size)

// A decode step's new K and V rows that attn_dec_mma_kernel writes into the block-quantized
// caches it reads (the SET_ROWS pair the stream left to it: ember_cuda_ctx::kv_attn): f32 rows
// (token i at rows + i nb1, KV head h at h d floats) to cache rows idx[i], at the view's own
// strides (the view starts at the cache's row 0). n = 0: none.
struct dec_kv_write {
    const char * k_rows, * v_rows;
    int64_t      k_nb1, v_nb1;
    const char * idx;
    int64_t      idx_nb0;
    int64_t      cache_rows;  // rows of the caches: indices past them are errors, as SET_ROWS's
    int          n;           // tokens (at most k_kv_write_max)
    int *        err;
};
constexpr int k_kv_write_max = 8;

struct dec_args {
    cu_tensor q, k, v, mask, dst;
    bool      has_mask;
    float     scale;
    int       group;       // query heads per KV head
    int       n_rows;      // query rows of a KV head: group * tokens
    int       n_split;     // splits of the keys
    int       split_keys;
    int       row_bytes;   // bytes of one K/V row (d elements)
    int       slot_bytes;  // shared bytes of one raw K/V row (padded)
    float *   part;        // n_split > 1: per (query row, split) d floats, then M and S
    bool      cluster;     // n_split > 1 in one thread block cluster (sm_90): merged through distributed shared memory
    int8_t *  xq;          // or nullptr: the output's quantized copy for the O matvec (cu_quantize_warp),
    float2 *  xds;         //   element e of head h of token t at flat index t xk + h d + e
    int64_t   xk;
    int       mask_rows;   // attn_dec_mma_kernel: mask rows (tokens) a block stages, at most
    int       q_rows;      //   and Q rows in shared memory (a block's rows, at most, + a zero row)
    int       mma_piece;   //   block types' copy form (mma_piece_bytes: 16 bytes from a per-cache offset, 8 / 4 bytes, 1 words at a per-thread offset, 0 words per copy)
    dec_kv_write kvw;      //   the cache rows it writes first (n = 0: none)
    bool          early     = false;    // attn_dec_short_kernel: the first pass's K/V rows read before the PDL wait (ember_cuda_attn_early_rows)
    const int32_t * early_idx = nullptr;  //   but the cache rows this step writes, early_idx[0 .. early_n) (read before it)
    int           early_n   = 0;
    int *         count     = nullptr;  // attn_dec_short_kernel LB: per (token, head) row, the blocks that stored their split (zero between launches)
};

// Floats of one split's partial row in scratch memory: d sums, then M and S, padded so every
// row starts on 16 bytes (the merge kernel reads float4).
__host__ __device__ constexpr int dec_part_stride(int d) {
    return d + 4;
}

template <int T> __host__ __device__ constexpr bool dec_copy16() {  // rows copied in 16-byte pieces
    return T == EMBER_TYPE_F16 || T == EMBER_TYPE_F32 || T == EMBER_TYPE_BF16;
}

// Byte types: where key j's row (base + j nb) starts within its aligned word.
__device__ __forceinline__ int dec_row_off(const char * base, int64_t nb, int64_t j) {
    const unsigned lo = static_cast<unsigned>(reinterpret_cast<uintptr_t>(base)) + static_cast<unsigned>(j) * static_cast<unsigned>(nb);
    return static_cast<int>(lo & 3u);
}

// Raw slot of one K/V row: 16-byte copies need the row plus 16 bytes of padding; word copies
// the words around the row (it may start mid-word, and the decoders read a word past the one
// holding its last byte), an odd number of them (bank-conflict free reads by key).
inline int dec_slot_bytes(int T, int row_bytes) {
    if (T == EMBER_TYPE_F16 || T == EMBER_TYPE_F32 || T == EMBER_TYPE_BF16) return row_bytes + 16;
    return 4 * ((row_bytes / 4 + 2) | 1);
}

// Shared memory layout (bytes), in order: raw stages [k_dec_stages][2 (K, V)][32][slot], which
// also hold the final sum of the key groups [groups][rows][d] floats; Q [rows][d]; mask
// [stages][rows][32]; score quarters [4][rows][32]; probabilities [32][rows]; M, S, rescale
// [rows]; 16 bytes slack (the decoders' word reads run up to 8 bytes past a row's last word).
struct dec_layout {
    size_t stage, q, mask, part, p, m, total;
};
__host__ __device__ inline dec_layout dec_layout_of(int d, int slot_bytes) {
    dec_layout L;
    L.stage           = 0;
    size_t end        = static_cast<size_t>(k_dec_stages) * 2 * k_dec_keys * slot_bytes;
    const int groups  = k_dec_threads / (d / 4);
    const size_t red  = sizeof(float) * groups * k_dec_rows * d;
    end               = end > red ? end : red;
    L.q               = (end + 15) / 16 * 16;
    L.mask            = L.q + sizeof(float) * k_dec_rows * d;
    L.part            = L.mask + sizeof(float) * k_dec_stages * k_dec_rows * k_dec_keys;
    L.p               = L.part + sizeof(float) * k_dec_warps * k_dec_rows * k_dec_keys;
    L.m               = L.p + sizeof(float) * k_dec_keys * k_dec_rows;
    L.total           = L.m + sizeof(float) * 3 * k_dec_rows + 16;
    return L;
}


// 8 bytes of shared memory at byte offset o of a 4-byte-aligned base: three aligned words.
__device__ __forceinline__ uint2 dec_bytes8(const uint8_t * base, int o) {
    const uint32_t * w  = reinterpret_cast<const uint32_t *>(base + (o & ~3));
    const unsigned   sh = static_cast<unsigned>(o & 3) * 8;
    const uint32_t   w0 = w[0], w1 = w[1], w2 = w[2];
    return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
}

__device__ __forceinline__ float2 dec_half2(uint32_t h) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&h));
}
// Eight F16 values (one 16-byte word) as floats.
__device__ __forceinline__ void dec_half8(const uint4 & u, float * y) {
    float2 f;
    f = dec_half2(u.x), y[0] = f.x, y[1] = f.y;
    f = dec_half2(u.y), y[2] = f.x, y[3] = f.y;
    f = dec_half2(u.z), y[4] = f.x, y[5] = f.y;
    f = dec_half2(u.w), y[6] = f.x, y[7] = f.y;
}

// Four FP8 codes to floats times s, as cu_fp8_block_elem (code value * scale, one rounding).
template <bool E4M3> __device__ __forceinline__ void dec_fp8x4(uint32_t w, float s, float * y) {
    uint32_t    lo, hi;
    const float post = cu_fp8_half_post<E4M3>();
    cu_fp8x4_half<E4M3>(w, lo, hi);
    const float2 a = dec_half2(lo), b = dec_half2(hi);
    y[0]           = a.x * post * s;
    y[1]           = a.y * post * s;
    y[2]           = b.x * post * s;
    y[3]           = b.y * post * s;
}

// Decodes values [8 pc, 8 pc + 8) of a row whose raw bytes start at byte `off` of slot `raw`.
template <int T> __device__ __forceinline__ void dec_piece(const uint8_t * raw, int off, int pc, float * y) {
    if constexpr (T == EMBER_TYPE_BF16) {
        const uint4 u = *reinterpret_cast<const uint4 *>(raw + 16 * pc);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            y[2 * i]     = __uint_as_float(w[i] << 16);
            y[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else if constexpr (T == EMBER_TYPE_Q8_0) {
        const int   b = off + 34 * (pc / 4);
        const float d = cu_half(static_cast<ember_half>(raw[b] | raw[b + 1] << 8));
        const uint2 q = dec_bytes8(raw, b + 2 + 8 * (pc % 4));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            y[i]     = d * static_cast<float>(static_cast<int8_t>(q.x >> (8 * i)));
            y[i + 4] = d * static_cast<float>(static_cast<int8_t>(q.y >> (8 * i)));
        }
    } else if constexpr (T == EMBER_TYPE_Q4_0) {
        // Piece q of a block: bytes 8 (q % 2) .. + 8, low nibbles (q < 2) or high ones.
        const int      b  = off + 18 * (pc / 4);
        const float    d  = cu_half(static_cast<ember_half>(raw[b] | raw[b + 1] << 8));
        const uint2    q  = dec_bytes8(raw, b + 2 + 8 * (pc % 2));
        const unsigned sh = (pc % 4) / 2 * 4;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            y[i]     = d * static_cast<float>(static_cast<int>(q.x >> (8 * i + sh) & 0xfu) - 8);
            y[i + 4] = d * static_cast<float>(static_cast<int>(q.y >> (8 * i + sh) & 0xfu) - 8);
        }
    } else {  // FP8_E4M3 / FP8_E5M2 blocks: E8M0 exponent, 32 codes
        constexpr bool E4M3 = T == EMBER_TYPE_FP8_E4M3;
        const int      b    = off + 33 * (pc / 4);
        const float    s    = cu_fp8_e8m0_scale(raw[b]);
        const uint2    q    = dec_bytes8(raw, b + 1 + 8 * (pc % 4));
        dec_fp8x4<E4M3>(q.x, s, y);
        dec_fp8x4<E4M3>(q.y, s, y + 4);
    }
}

// Values [e, e + 8) (e % 8 == 0) of a K/V row whose raw slot is `row`; `off`: where the row's
// bytes start in the slot (byte types; 0 for the others).
template <int T> __device__ __forceinline__ void dec_load8(const uint8_t * row, int off, int e, float * y) {
    if constexpr (T == EMBER_TYPE_F32) {
        const float4 a = *reinterpret_cast<const float4 *>(row + 4 * e);
        const float4 b = *reinterpret_cast<const float4 *>(row + 4 * e + 16);
        y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w, y[4] = b.x, y[5] = b.y, y[6] = b.z, y[7] = b.w;
    } else if constexpr (T == EMBER_TYPE_F16) {
        const uint4 u = *reinterpret_cast<const uint4 *>(row + 2 * e);
        dec_half8(u, y);
    } else {
        dec_piece<T>(row, off, e / 8, y);
    }
}

// 4 bytes of shared memory at byte offset o of a 4-byte-aligned base: two aligned words.
__device__ __forceinline__ uint32_t dec_bytes4(const uint8_t * base, int o) {
    const uint32_t * w = reinterpret_cast<const uint32_t *>(base + (o & ~3));
    return __funnelshift_r(w[0], w[1], static_cast<unsigned>(o & 3) * 8);
}

// Values [e, e + 4) (e % 4 == 0) of a K/V row, as dec_load8.
template <int T> __device__ __forceinline__ void dec_load4(const uint8_t * row, int off, int e, float * y) {
    if constexpr (T == EMBER_TYPE_F32) {
        const float4 a = *reinterpret_cast<const float4 *>(row + 4 * e);
        y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w;
    } else if constexpr (T == EMBER_TYPE_F16) {
        const uint2 u = *reinterpret_cast<const uint2 *>(row + 2 * e);
        float2      f;
        f = dec_half2(u.x), y[0] = f.x, y[1] = f.y;
        f = dec_half2(u.y), y[2] = f.x, y[3] = f.y;
    } else if constexpr (T == EMBER_TYPE_BF16) {
        const uint2 u = *reinterpret_cast<const uint2 *>(row + 2 * e);
        y[0] = __uint_as_float(u.x << 16), y[1] = __uint_as_float(u.x & 0xffff0000u);
        y[2] = __uint_as_float(u.y << 16), y[3] = __uint_as_float(u.y & 0xffff0000u);
    } else if constexpr (T == EMBER_TYPE_Q8_0) {
        const int      b = off + 34 * (e / 32);
        const float    d = cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
        const uint32_t q = dec_bytes4(row, b + 2 + e % 32);
#pragma unroll
        for (int i = 0; i < 4; i++) y[i] = d * static_cast<float>(static_cast<int8_t>(q >> (8 * i)));
    } else if constexpr (T == EMBER_TYPE_Q4_0) {
        // Values j < 16 of a block are the low nibbles of bytes j, the others the high nibbles
        // of bytes j - 16.
        const int      b  = off + 18 * (e / 32), j = e % 32;
        const float    d  = cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
        const uint32_t q  = dec_bytes4(row, b + 2 + j % 16);
        const unsigned sh = j / 16 * 4;
#pragma unroll
        for (int i = 0; i < 4; i++) y[i] = d * static_cast<float>(static_cast<int>(q >> (8 * i + sh) & 0xfu) - 8);
    } else {  // FP8_E4M3 / FP8_E5M2
        const int b = off + 33 * (e / 32);
        dec_fp8x4<T == EMBER_TYPE_FP8_E4M3>(dec_bytes4(row, b + 1 + e % 32), cu_fp8_e8m0_scale(row[b]), y);
    }
}

// The decoders of the second version (V >= 1, EMBER_CUDA_ATTN_DEC_FAST): values without the
// block's scale (the caller multiplies a dot product or the values by it once) and no
// int-to-float or FP8 conversion-unit instructions where plain arithmetic does: an I2F runs at
// a quarter of the FMA rate or less on sm_80/90 and made Q8_0/Q4_0 decode compute-bound.
// Four signed bytes to floats, exact: 0x4b0000uu is the float 2^23 + uu, uu = byte ^ 0x80.
__device__ __forceinline__ void dec_i8x4(uint32_t w, float * y) {
    const uint32_t u = w ^ 0x80808080u;
    y[0]             = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5440)) - 8388736.0f;
    y[1]             = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5441)) - 8388736.0f;
    y[2]             = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5442)) - 8388736.0f;
    y[3]             = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5443)) - 8388736.0f;
}
// Four nibbles (bytes 0..15) minus 8, exact, as dec_i8x4.
__device__ __forceinline__ void dec_u4x4(uint32_t u, float * y) {
    y[0] = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5440)) - 8388616.0f;
    y[1] = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5441)) - 8388616.0f;
    y[2] = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5442)) - 8388616.0f;
    y[3] = __uint_as_float(__byte_perm(u, 0x4b00u, 0x5443)) - 8388616.0f;
}
// Four FP8 codes to floats (the code values, no block scale). HW: the sm_89+ pair conversion
// for E4M3 (V == 1); else the bit move of cu_fp8x4_half_bits, E4M3 then times 256 in half
// precision (exact: the moved value is at most 1.875, the code value at most 448; NaN stays).
template <bool E4M3, bool HW> __device__ __forceinline__ void dec_fp8x4_u(uint32_t w, float * y) {
    uint32_t lo, hi;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if constexpr (E4M3 && HW) {
        const unsigned short w0 = static_cast<unsigned short>(w & 0xffffu), w1 = static_cast<unsigned short>(w >> 16);
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(w0));
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(w1));
    } else
#endif
    {
        cu_fp8x4_half_bits<E4M3>(w, lo, hi);
        if constexpr (E4M3) {
            const __half2 k256 = __floats2half2_rn(256.0f, 256.0f);
            __half2       l    = __hmul2(*reinterpret_cast<const __half2 *>(&lo), k256);
            __half2       h    = __hmul2(*reinterpret_cast<const __half2 *>(&hi), k256);
            lo                 = *reinterpret_cast<const uint32_t *>(&l);
            hi                 = *reinterpret_cast<const uint32_t *>(&h);
        }
    }
    const float2 a = dec_half2(lo), b = dec_half2(hi);
    y[0] = a.x, y[1] = a.y, y[2] = b.x, y[3] = b.y;
}

template <int T> __host__ __device__ constexpr bool dec_scaled() {  // block types: values times a block scale
    return T == EMBER_TYPE_Q8_0 || T == EMBER_TYPE_Q4_0 || T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E5M2;
}

// dec_load8 without the block scale, returned (1 for the plain types).
template <int T, int V> __device__ __forceinline__ float dec_load8_u(const uint8_t * row, int off, int e, float * y) {
    if constexpr (!dec_scaled<T>()) {
        dec_load8<T>(row, off, e, y);
        return 1.0f;
    } else if constexpr (T == EMBER_TYPE_Q8_0) {
        const unsigned pc = static_cast<unsigned>(e) / 8u, b = static_cast<unsigned>(off) + 34u * (pc / 4u);
        const uint2    q  = dec_bytes8(row, static_cast<int>(b + 2u + 8u * (pc % 4u)));
        dec_i8x4(q.x, y);
        dec_i8x4(q.y, y + 4);
        return cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
    } else if constexpr (T == EMBER_TYPE_Q4_0) {
        const unsigned pc = static_cast<unsigned>(e) / 8u, b = static_cast<unsigned>(off) + 18u * (pc / 4u);
        const uint2    q  = dec_bytes8(row, static_cast<int>(b + 2u + 8u * (pc % 2u)));
        const unsigned sh = (pc % 4u) / 2u * 4u;
        dec_u4x4(q.x >> sh & 0x0f0f0f0fu, y);
        dec_u4x4(q.y >> sh & 0x0f0f0f0fu, y + 4);
        return cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
    } else {
        const unsigned pc = static_cast<unsigned>(e) / 8u, b = static_cast<unsigned>(off) + 33u * (pc / 4u);
        const uint2    q  = dec_bytes8(row, static_cast<int>(b + 1u + 8u * (pc % 4u)));
        dec_fp8x4_u<T == EMBER_TYPE_FP8_E4M3, V == 1>(q.x, y);
        dec_fp8x4_u<T == EMBER_TYPE_FP8_E4M3, V == 1>(q.y, y + 4);
        return cu_fp8_e8m0_scale(row[b]);
    }
}

// dec_load4 with the new decoders (the block scale applied to the 4 values).
template <int T, int V> __device__ __forceinline__ void dec_load4_v(const uint8_t * row, int off, int e, float * y) {
    if constexpr (!dec_scaled<T>()) {
        dec_load4<T>(row, off, e, y);
    } else {
        float s;
        if constexpr (T == EMBER_TYPE_Q8_0) {
            const unsigned u = static_cast<unsigned>(e), b = static_cast<unsigned>(off) + 34u * (u / 32u);
            dec_i8x4(dec_bytes4(row, static_cast<int>(b + 2u + u % 32u)), y);
            s = cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
        } else if constexpr (T == EMBER_TYPE_Q4_0) {
            const unsigned u = static_cast<unsigned>(e), b = static_cast<unsigned>(off) + 18u * (u / 32u), j = u % 32u;
            dec_u4x4(dec_bytes4(row, static_cast<int>(b + 2u + j % 16u)) >> (j / 16u * 4u) & 0x0f0f0f0fu, y);
            s = cu_half(static_cast<ember_half>(row[b] | row[b + 1] << 8));
        } else {
            const unsigned u = static_cast<unsigned>(e), b = static_cast<unsigned>(off) + 33u * (u / 32u);
            dec_fp8x4_u<T == EMBER_TYPE_FP8_E4M3, V == 1>(dec_bytes4(row, static_cast<int>(b + 1u + u % 32u)), y);
            s = cu_fp8_e8m0_scale(row[b]);
        }
        y[0] *= s, y[1] *= s, y[2] *= s, y[3] *= s;
    }
}

// The weights of a cluster merge's splits, from their maxima m and sums s (k_dec_max_cluster
// entries, -INF / 0 past the cluster): w = exp(m - max m), 0 for a split whose keys were all
// hidden; returns 1 / sum w s (0 when every key was hidden: the row is zeros). Compiled only
// where clusters exist (its callers are sm_90 code; before, every older architecture's pass
// warned that it was never referenced).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ float dec_cluster_weights(const float (&m)[k_dec_max_cluster], const float (&s)[k_dec_max_cluster],
                                                     float (&w)[k_dec_max_cluster]) {
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < k_dec_max_cluster; r++) mx = fmaxf(mx, m[r]);
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < k_dec_max_cluster; r++) {
        w[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
        sum += w[r] * s[r];
    }
    return sum > 0.0f ? 1.0f / sum : 0.0f;
}
// The end of a merge of a row's splits (the last block of attn_dec_short_kernel LB, rank 0 of its
// cluster): their rows orr weighted by their maxima mr and sums sr; value e of the row stored, and
// its quantized copy where asked (a whole warp of values: cu_quantize_warp).
__device__ __forceinline__ void dec_merge_store(const dec_args & a, const float (&mr)[k_dec_max_cluster], const float (&sr)[k_dec_max_cluster],
                                                const float (&orr)[k_dec_max_cluster], int64_t head, int64_t tok, int d, int e) {
    float       w[k_dec_max_cluster], v = 0.0f;
    const float inv = dec_cluster_weights(mr, sr, w);
#pragma unroll
    for (int r = 0; r < k_dec_max_cluster; r++) v += w[r] * orr[r];
    const float y = v * inv;
    reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2])[e] = y;
    if (a.xq) cu_quantize_warp(y, tok * a.xk + head * d + e, a.xq, a.xds);
}
#endif

// V: 0 the first version's copies and decoders, 1 the second's (EMBER_CUDA_ATTN_DEC_FAST; 2:
// FP8 E4M3 by bit moves instead of the conversion instruction).
template <int T, int V> __global__ void __launch_bounds__(k_dec_threads) attn_dec_kernel(dec_args a) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int        d       = static_cast<int>(a.q.ne[0]);
    const dec_layout L       = dec_layout_of(d, a.slot_bytes);
    const int        slot    = a.slot_bytes;
    float *          sQ      = reinterpret_cast<float *>(smem + L.q);     // [rows][d]
    float *          sMask   = reinterpret_cast<float *>(smem + L.mask);  // [stages][rows][32]
    float *          sPart   = reinterpret_cast<float *>(smem + L.part);  // [4][rows][32]
    float *          sP      = reinterpret_cast<float *>(smem + L.p);     // [32][rows]
    float *          sM      = reinterpret_cast<float *>(smem + L.m);     // [rows]
    float *          sS      = sM + k_dec_rows;
    float *          sR      = sS + k_dec_rows;
    const int        ik      = blockIdx.x;  // KV head
    const int        split   = blockIdx.y;
    const int        r0      = blockIdx.z * k_dec_rows;  // first query row of the block
    const int        nrows   = min(k_dec_rows, a.n_rows - r0);
    const int        tid     = threadIdx.x;
    const int        lane    = tid % 32, warp = tid / 32;
    const int64_t    n_kv    = a.k.ne[2];
    const int64_t    j0      = static_cast<int64_t>(split) * a.split_keys;
    const int64_t    j1      = j0 + a.split_keys < n_kv ? j0 + a.split_keys : n_kv;
    const int        n_tiles = j1 > j0 ? static_cast<int>((j1 - j0 + k_dec_keys - 1) / k_dec_keys) : 0;
    // Query row r of the block: head ik * group + rr % group of token rr / group, rr = r0 + r.
    const auto q_head = [&](int r) { return static_cast<int64_t>(ik) * a.group + (r0 + r) % a.group; };
    const auto q_tok  = [&](int r) { return static_cast<int64_t>((r0 + r) / a.group); };
    const char * kbase = a.k.data + ik * a.k.nb[1];
    const char * vbase = a.v.data + ik * a.v.nb[1];
    // Byte types: where key j's row starts within its first word (only the low bits matter).
    const auto row_off = [](const char * base, int64_t nb, int64_t j) {
        if constexpr (dec_copy16<T>()) return 0;
        return dec_row_off(base, nb, j);
    };

    // V >= 1: each thread's copies walk (row, piece) from (tid / per_row, tid % per_row) by
    // k_dec_threads items at a time, with no division per copy: the first version's two
    // divisions by a run-time value per copy cost more than decoding the piece. (Warp-wide rows,
    // lanes over one row's pieces, measured slower for the byte types: 8B Q8_0 26.3 against
    // 25.7 us per layer, 1B 21.8 against 19.6.) The mask rows a thread copies are found once.
    const int per_row = dec_copy16<T>() ? a.row_bytes / 16 : a.row_bytes / 4 + 2;
    const int c_r0    = tid / per_row, c_p0 = tid - c_r0 * per_row;
    const int c_dr    = k_dec_threads / per_row, c_dp = k_dec_threads - c_dr * per_row;
    const float * m_row[k_dec_rows * k_dec_keys / k_dec_threads];
#pragma unroll
    for (int i = 0; i < k_dec_rows * k_dec_keys / k_dec_threads; i++) {
        const int r = (tid + i * k_dec_threads) / k_dec_keys;
        m_row[i]    = a.has_mask && r < nrows ? reinterpret_cast<const float *>(a.mask.data + q_tok(r) * a.mask.nb[1]) + tid % k_dec_keys : nullptr;
    }

    // Starts the copies of tile t into stage t % k_dec_stages (one cp.async group).
    const auto issue = [&](int t) {
        const int64_t jt = j0 + static_cast<int64_t>(t) * k_dec_keys;
        const int     nk = static_cast<int>(j1 - jt < k_dec_keys ? j1 - jt : k_dec_keys);
        uint8_t *     st = smem + L.stage + static_cast<size_t>(t % k_dec_stages) * 2 * k_dec_keys * slot;
        if constexpr (V >= 1) {
            int r = c_r0, pc = c_p0;
            for (int i = tid; i < 2 * k_dec_keys * per_row; i += k_dec_threads) {
                const int kv = r / k_dec_keys, key = r % k_dec_keys;
                if (key < nk) {
                    const char * row = kv ? vbase + (jt + key) * a.v.nb[2] : kbase + (jt + key) * a.k.nb[2];
                    uint8_t *    dst = st + r * slot;
                    if constexpr (dec_copy16<T>()) {
                        cu_cp16(dst + 16 * pc, row + 16 * pc);
                    } else {
                        const char * a0 = row - (reinterpret_cast<uintptr_t>(row) & 3);
                        if (a0 + 4 * pc < row + a.row_bytes) cu_cp4(dst + 4 * pc, a0 + 4 * pc);
                    }
                }
                pc += c_dp;
                r += c_dr;
                if (pc >= per_row) pc -= per_row, r++;
            }
            if (a.has_mask) {
                float * sm = sMask + (t % k_dec_stages) * k_dec_rows * k_dec_keys;
#pragma unroll
                for (int i = 0; i < k_dec_rows * k_dec_keys / k_dec_threads; i++) {
                    if (m_row[i] && tid % k_dec_keys < nk) cu_cp4(sm + tid + i * k_dec_threads, m_row[i] + jt);
                }
            }
            cu_cp_commit();
            return;
        }
        if constexpr (dec_copy16<T>()) {
            const int cpr = a.row_bytes / 16;  // pieces per row
            for (int i = tid; i < 2 * k_dec_keys * cpr; i += k_dec_threads) {
                const int kv = i / (k_dec_keys * cpr), rem = i - kv * k_dec_keys * cpr, key = rem / cpr, c = rem - key * cpr;
                if (key < nk) {
                    const char * src = (kv ? vbase + (jt + key) * a.v.nb[2] : kbase + (jt + key) * a.k.nb[2]) + 16 * c;
                    cu_cp16(st + (kv * k_dec_keys + key) * slot + 16 * c, src);
                }
            }
        } else {
            const int nw = a.row_bytes / 4 + 2;  // words around a row, at most
            for (int i = tid; i < 2 * k_dec_keys * nw; i += k_dec_threads) {
                const int kv = i / (k_dec_keys * nw), rem = i - kv * k_dec_keys * nw, key = rem / nw, w = rem - key * nw;
                if (key < nk) {
                    const char * row = kv ? vbase + (jt + key) * a.v.nb[2] : kbase + (jt + key) * a.k.nb[2];
                    const char * a0  = row - (reinterpret_cast<uintptr_t>(row) & 3);
                    if (a0 + 4 * w < row + a.row_bytes) cu_cp4(st + (kv * k_dec_keys + key) * slot + 4 * w, a0 + 4 * w);
                }
            }
        }
        if (a.has_mask) {
            float * sm = sMask + (t % k_dec_stages) * k_dec_rows * k_dec_keys;
            for (int i = tid; i < nrows * k_dec_keys; i += k_dec_threads) {
                const int r = i / k_dec_keys, key = i % k_dec_keys;
                if (key < nk) cu_cp4(sm + i, reinterpret_cast<const float *>(a.mask.data + q_tok(r) * a.mask.nb[1]) + jt + key);
            }
        }
        cu_cp_commit();
    };

    cu_pdl_begin();
    if constexpr (V >= 1) {
        // Q row by row (no divisions per element), copied with cp.async in tile 0's group and
        // scaled in place by the thread that copied it once that group has landed: plain loads
        // here waited one memory round trip per row (the store to shared memory needs the
        // value), several microseconds of a short-context step. No tiles: Q is never read.
        int tok = r0 / a.group, h = r0 - tok * a.group;
        for (int r = 0; r < k_dec_rows; r++) {
            const float * qr = reinterpret_cast<const float *>(a.q.data + (static_cast<int64_t>(ik) * a.group + h) * a.q.nb[1] + tok * a.q.nb[2]);
            for (int e = tid; e < d; e += k_dec_threads) {
                if (r < nrows && n_tiles > 0) cu_cp4(sQ + r * d + e, qr + e);
                else sQ[r * d + e] = 0.0f;
            }
            if (++h == a.group) h = 0, tok++;
        }
        if (n_tiles > 0) issue(0);  // commits the group (Q with tile 0)
    } else {
        if (n_tiles > 0) issue(0);
        for (int i = tid; i < k_dec_rows * d; i += k_dec_threads) {
            const int r = i / d, e = i % d;
            sQ[i]       = r < nrows ? reinterpret_cast<const float *>(a.q.data + q_head(r) * a.q.nb[1] + q_tok(r) * a.q.nb[2])[e] * a.scale : 0.0f;
        }
    }
    for (int i = tid; i < k_dec_keys * k_dec_rows; i += k_dec_threads) sP[i] = 0.0f;
    if (tid < k_dec_rows) {
        sM[tid] = -INFINITY;
        sS[tid] = 0.0f;
        sR[tid] = 1.0f;
    }
    // P.V: thread (4 dims qd, key group g), keys g, g + groups, ...; acc[row][dim].
    const int nq     = d / 4;
    const int groups = k_dec_threads / nq;
    const int qd = tid % nq, g = tid / nq;
    float     acc[k_dec_rows][4];
#pragma unroll
    for (int r = 0; r < k_dec_rows; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;

    for (int t = 0; t < n_tiles; t++) {
        const int64_t jt = j0 + static_cast<int64_t>(t) * k_dec_keys;
        const int     nk = static_cast<int>(j1 - jt < k_dec_keys ? j1 - jt : k_dec_keys);
        if (t + 1 < n_tiles) issue(t + 1);
        else cu_cp_commit();  // an empty group: wait1 below then covers tile t
        cu_cp_wait<1>();
        if (V >= 1 && t == 0) {  // this thread's Q copies have landed: scale them (as the loads did)
            for (int r = 0; r < nrows; r++) {
                for (int e = tid; e < d; e += k_dec_threads) sQ[r * d + e] *= a.scale;
            }
        }
        __syncthreads();  // tile t (and Q on the first pass) visible to all
        const uint8_t * raw = smem + L.stage + static_cast<size_t>(t % k_dec_stages) * 2 * k_dec_keys * slot;
        // Scores: thread (key = lane, quarter = warp of the dims), every row.
        {
            const int ds = d / 4, e0 = warp * ds;
            const uint8_t * krow = raw + lane * slot;
            const int       koff = row_off(kbase, a.k.nb[2], jt + lane);
            float           sc[k_dec_rows];
#pragma unroll
            for (int r = 0; r < k_dec_rows; r++) sc[r] = 0.0f;
            for (int e = e0; e < e0 + ds; e += 8) {
                float kf[8];
                float ks = 1.0f;
                if constexpr (V >= 1) ks = dec_load8_u<T, V>(krow, koff, e, kf);
                else dec_load8<T>(krow, koff, e, kf);
#pragma unroll
                for (int r = 0; r < k_dec_rows; r++) {
                    if (r < nrows) {
                        const float4 q0 = *reinterpret_cast<const float4 *>(sQ + r * d + e);
                        const float4 q1 = *reinterpret_cast<const float4 *>(sQ + r * d + e + 4);
                        const float  t8 = q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
                                         q1.z * kf[6] + q1.w * kf[7];
                        if constexpr (V >= 1 && dec_scaled<T>()) sc[r] = fmaf(ks, t8, sc[r]);  // the block scale once
                        else sc[r] += t8;
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < k_dec_rows; r++) {
                if (r < nrows) sPart[(warp * k_dec_rows + r) * k_dec_keys + lane] = sc[r];
            }
        }
        __syncthreads();
        // Online softmax per row: warp w takes rows w, w + 4; lane = key.
        for (int r = warp; r < nrows; r += k_dec_warps) {
            float s = -INFINITY;
            if (lane < nk) {
                const float mv = a.has_mask ? sMask[((t % k_dec_stages) * k_dec_rows + r) * k_dec_keys + lane] : 0.0f;
                if (mv != -INFINITY) {
                    float dot = 0.0f;
#pragma unroll
                    for (int w = 0; w < k_dec_warps; w++) dot += sPart[(w * k_dec_rows + r) * k_dec_keys + lane];
                    s = dot + mv;
                }
            }
            const float mt = cu_warp_max(s);
            const float mo = sM[r];
            const float mn = fmaxf(mo, mt);
            const float p  = mn == -INFINITY ? 0.0f : expf(s - mn);  // s = -INF gives 0
            const float ps = cu_warp_sum(p);
            sP[lane * k_dec_rows + r] = p;
            __syncwarp();
            if (lane == 0) {
                const float f = mo == -INFINITY ? 0.0f : expf(mo - mn);
                sR[r]         = f;
                sS[r]         = sS[r] * f + ps;
                sM[r]         = mn;
            }
        }
        __syncthreads();
        // P.V: every row's 4 dims of thread qd over the keys of group g.
        if (g < groups) {
#pragma unroll
            for (int r = 0; r < k_dec_rows; r++) {
                if (r < nrows) {
                    const float f = sR[r];
                    acc[r][0] *= f, acc[r][1] *= f, acc[r][2] *= f, acc[r][3] *= f;
                }
            }
            const uint8_t * vraw = raw + k_dec_keys * slot;
            for (int key = g; key < nk; key += groups) {
                float vf[4];
                if constexpr (V >= 1) dec_load4_v<T, V>(vraw + key * slot, row_off(vbase, a.v.nb[2], jt + key), 4 * qd, vf);
                else dec_load4<T>(vraw + key * slot, row_off(vbase, a.v.nb[2], jt + key), 4 * qd, vf);
                const float4 p0 = *reinterpret_cast<const float4 *>(sP + key * k_dec_rows);
                const float4 p1 = *reinterpret_cast<const float4 *>(sP + key * k_dec_rows + 4);
                const float  p[k_dec_rows] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
                for (int r = 0; r < k_dec_rows; r++) {
                    if (r < nrows) {
#pragma unroll
                        for (int c = 0; c < 4; c++) acc[r][c] += p[r] * vf[c];
                    }
                }
            }
        }
        __syncthreads();  // stage t % k_dec_stages is free again
    }
    // Sum of the key groups through shared memory [groups][rows][d] (over the tile buffers).
    float * red = reinterpret_cast<float *>(smem);
    if (g < groups) {
#pragma unroll
        for (int r = 0; r < k_dec_rows; r++) {
            if (r < nrows) *reinterpret_cast<float4 *>(red + (g * k_dec_rows + r) * d + 4 * qd) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        }
    }
    __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (a.cluster) {  // the splits of this head are the blocks of one cluster, rank = split
        // Own partial rows into red[r][d] (thread (r, e) reads only its own (g, r, e) sums).
        for (int r = 0; r < nrows; r++) {
            for (int e = tid; e < d; e += k_dec_threads) {
                float v = 0.0f;
                for (int gg = 0; gg < groups; gg++) v += red[(gg * k_dec_rows + r) * d + e];
                red[r * d + e] = v;
            }
        }
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // every split's rows, maxima and sums visible across the cluster
        // Block `split` merges rows split, split + n_split, ...: each split's weight exp(M_s - M).
        // Every remote read of a step is issued before the first is used (guarded unrolled
        // loads, no data-dependent branch): distributed shared memory answers in hundreds of
        // cycles, and a loop that waited for each in turn took microseconds.
        for (int r = split; r < nrows; r += a.n_split) {
            float m[k_dec_max_cluster], sv[k_dec_max_cluster];
#pragma unroll
            for (int s2 = 0; s2 < k_dec_max_cluster; s2++) {
                m[s2]  = s2 < a.n_split ? *cluster.map_shared_rank(sM + r, s2) : -INFINITY;
                sv[s2] = s2 < a.n_split ? *cluster.map_shared_rank(sS + r, s2) : 0.0f;
            }
            float         w[k_dec_max_cluster];
            const float   inv  = dec_cluster_weights(m, sv, w);
            const int64_t tok  = (r0 + r) / a.group;
            const int64_t head = static_cast<int64_t>(ik) * a.group + (r0 + r) % a.group;
            float *       y    = reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2]);
            for (int e = tid; e < d; e += k_dec_threads) {
                float pv[k_dec_max_cluster];
#pragma unroll
                for (int s2 = 0; s2 < k_dec_max_cluster; s2++) pv[s2] = s2 < a.n_split ? *cluster.map_shared_rank(red + r * d + e, s2) : 0.0f;
                float v = 0.0f;
#pragma unroll
                for (int s2 = 0; s2 < k_dec_max_cluster; s2++) v += w[s2] * pv[s2];
                const float o = v * inv;
                y[e]          = o;
                if (a.xq) cu_quantize_warp(o, tok * a.xk + head * d + e, a.xq, a.xds);  // d % 32 == 0: warp-uniform
            }
        }
        cluster.sync();  // no block leaves while another still reads its shared memory
        return;
    }
#endif
    // Out: the normalized rows (one split), or the split's partial result. Element e of query
    // row r, which is head `head` of token `tok`:
    const auto out = [&](int r, int e, int64_t tok, int64_t head) {
        float v = 0.0f;
        for (int gg = 0; gg < groups; gg++) v += red[(gg * k_dec_rows + r) * d + e];
        if (a.part) {
            float * pr = a.part + ((tok * a.q.ne[1] + head) * a.n_split + split) * dec_part_stride(d);  // the merge kernel's row order
            pr[e]      = v;
            if (e == 0) {
                pr[d]     = sM[r];
                pr[d + 1] = sS[r];
            }
        } else {
            const float Ssum = sS[r];
            float *     y    = reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2]);
            const float o    = Ssum > 0.0f ? v / Ssum : 0.0f;
            y[e]             = o;
            if (a.xq) cu_quantize_warp(o, tok * a.xk + head * d + e, a.xq, a.xds);  // d % 32 == 0: warp-uniform
        }
    };
    if constexpr (V >= 1) {  // row by row, as Q was loaded
        int tok = r0 / a.group, h = r0 - tok * a.group;
        for (int r = 0; r < nrows; r++) {
            const int64_t head = static_cast<int64_t>(ik) * a.group + h;
            for (int e = tid; e < d; e += k_dec_threads) out(r, e, tok, head);
            if (++h == a.group) h = 0, tok++;
        }
    } else {
        for (int i = tid; i < nrows * d; i += k_dec_threads) out(i / d, i % d, q_tok(i / d), q_head(i / d));
    }
}

// The merge of n (<= 64) partial rows of an online softmax, element e: row i's unnormalized
// values vals[i * d + e], its maximum ms[i] (-INF: nothing summed) and sum ss[i]. Every warp finds
// the weights exp(ms[i] - M) itself (lane i: rows i and i + 32); sets M and S (the merged maximum
// and sum) and returns the merged unnormalized value when sum_values (warp-uniform), else 0.
__device__ __forceinline__ float dec_merge_rows(const float * ms, const float * ss, const float * vals, int n, int d, int e, bool sum_values,
                                                float & M, float & S) {
    const int   lane = static_cast<int>(threadIdx.x % 32);
    const float m0 = lane < n ? ms[lane] : -INFINITY, m1 = lane + 32 < n ? ms[lane + 32] : -INFINITY;
    M              = cu_warp_max_fast(fmaxf(m0, m1));
    const float w0 = m0 == -INFINITY ? 0.0f : expf(m0 - M), w1 = m1 == -INFINITY ? 0.0f : expf(m1 - M);
    const float s0 = lane < n ? ss[lane] : 0.0f, s1 = lane + 32 < n ? ss[lane + 32] : 0.0f;
    float       o  = 0.0f;
    if (sum_values) {
        // Eight groups' weights and values fetched before any is summed (one shuffle and one
        // shared load in flight per group was ~60 cycles a group: ~1 us for the short kernel's
        // 32 slots at d = 64); the sum keeps its order, so the bits are the same.
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            float w[8], v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                w[k] = __shfl_sync(0xffffffffu, i + k < 32 ? w0 : w1, (i + k) % 32);
                v[k] = vals[(i + k) * d + e];
            }
#pragma unroll
            for (int k = 0; k < 8; k++) o = fmaf(w[k], v[k], o);
        }
        for (; i < n; i++) {
            const float w = __shfl_sync(0xffffffffu, i < 32 ? w0 : w1, i % 32);
            o             = fmaf(w, vals[i * d + e], o);
        }
    }
    S = cu_warp_sum((lane < n ? w0 * s0 : 0.0f) + (lane + 32 < n ? w1 * s1 : 0.0f));
    return o;
}

// Merges the splits of each query row: one block of k_merge_threads per row. Thread (quad tq,
// group g) takes 4 dims of splits g, g + groups, ..., eight at a time with every load issued
// before any is used, and keeps its own online maximum and sum; the groups are then merged
// through shared memory (dec_merge_rows, as the short kernel merges its slots). Splits whose keys were all hidden
// (M = -INF) count for nothing; a row with every key hidden is zeros. The first version (one
// thread per dim walking every split in turn, each weight found first) waited one L2 round trip
// per split: 15.3 us a layer on the critical path of an 8B token at depth 4096 (65 splits),
// as long as the attention itself (H200 kernel trace).
constexpr int k_merge_threads = 512;
constexpr int k_merge_unroll  = 8;

__global__ void __launch_bounds__(k_merge_threads)
    attn_dec_merge_kernel(const float * part, int n_split, int d, int64_t n_head, cu_tensor dst, int8_t * xq, float2 * xds) {
    __shared__ __align__(16) float sAcc[k_merge_threads * 4];  // [group][d]
    __shared__ float               sM[64], sS[64];             // groups <= 64 (d >= 32)
    cu_pdl_begin();
    const int     nq = d / 4, groups = k_merge_threads / nq;
    const int     tq = static_cast<int>(threadIdx.x) % nq, g = static_cast<int>(threadIdx.x) / nq;
    const int     stride = dec_part_stride(d);
    const int64_t row    = blockIdx.x;
    const float * pr     = part + row * n_split * stride;
    float         m = -INFINITY, s = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (g < groups) {
        for (int s0 = g; s0 < n_split; s0 += groups * k_merge_unroll) {
            float4 o[k_merge_unroll];
            float2 ms[k_merge_unroll];
#pragma unroll
            for (int u = 0; u < k_merge_unroll; u++) {
                const int sp = s0 + u * groups;
                if (sp < n_split) {
                    o[u]  = *reinterpret_cast<const float4 *>(pr + static_cast<int64_t>(sp) * stride + 4 * tq);
                    ms[u] = *reinterpret_cast<const float2 *>(pr + static_cast<int64_t>(sp) * stride + d);
                } else {
                    o[u]  = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    ms[u] = make_float2(-INFINITY, 0.0f);
                }
            }
            float mx = m;
#pragma unroll
            for (int u = 0; u < k_merge_unroll; u++) mx = fmaxf(mx, ms[u].x);
            if (mx == -INFINITY) continue;  // every key so far hidden
            const float f = m == -INFINITY ? 0.0f : expf(m - mx);
            s *= f;
#pragma unroll
            for (int c = 0; c < 4; c++) acc[c] *= f;
#pragma unroll
            for (int u = 0; u < k_merge_unroll; u++) {
                const float w = ms[u].x == -INFINITY ? 0.0f : expf(ms[u].x - mx);
                s += w * ms[u].y;
                acc[0] = fmaf(w, o[u].x, acc[0]);
                acc[1] = fmaf(w, o[u].y, acc[1]);
                acc[2] = fmaf(w, o[u].z, acc[2]);
                acc[3] = fmaf(w, o[u].w, acc[3]);
            }
            m = mx;
        }
        *reinterpret_cast<float4 *>(sAcc + g * d + 4 * tq) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        if (tq == 0) sM[g] = m, sS[g] = s;
    }
    __syncthreads();
    const int e = static_cast<int>(threadIdx.x);
    if (e >= d) return;  // d % 32 == 0: whole warps leave
    float M, S;
    float o = dec_merge_rows(sM, sS, sAcc, groups, d, e, true, M, S);
    o *= S > 0.0f ? 1.0f / S : 0.0f;
    reinterpret_cast<float *>(dst.data + (row % n_head) * dst.nb[1] + (row / n_head) * dst.nb[2])[e] = o;
    if (xq) cu_quantize_warp(o, row * d + e, xq, xds);  // rows (token, head) in x's order; d % 32 == 0
}

#include "ops-attention-decode-mma.cuh"

// Short contexts (up to 512 keys whose passes fit a cluster: k_short_default_keys): one block of
// 8 warps per query row (head, token) and pass of keys, no shared-memory tiles. The tiled
// kernel spends ~2900 dependent instructions per warp on one 32-key tile (copies, four
// barriers, the cluster merge) with one warp per scheduler: ~10.8 us for the 8B shape at 64
// keys (ncu, clocks free, H200), 11.7 us a layer on the token's critical path (kernel trace).
// Here each key goes to a group of d / 8 lanes that holds 8 of its values (slot = the warp's
// group), so a warp takes 32 / (d / 8) keys at once; every lane loads its 8 K and 8 V values
// of k_short_unroll keys before using any (one memory round trip per pass of the slots),
// reduces the score over its group with shuffles and keeps its own online softmax (M, S, 8
// sums of P V). The slots' results are merged once through shared memory. A pass takes
// 8 x 32 / (d / 8) x k_short_unroll keys (64 at d = 128, 128 at d = 64); longer rows take one
// block per pass in a thread block cluster (sm_90, up to 8; the blocks merged by rank 0
// through distributed shared memory), else more passes. Keys past the last one the mask shows
// are not read. K/V rows are read in place with the tiled kernel's decoders (byte types from
// the aligned word before the row), once per query head (the GQA group's heads read the same
// rows from L2). With a.early (the default where ember_cuda_attn_early_rows allows it) the mask
// and the first pass's rows are read before the PDL wait, all but the rows this step writes,
// which are read after it with Q: one memory round trip after the wait instead of two.
constexpr int k_short_threads = 256;

// EMBER_CUDA_ATTN_PROBE=empty (measuring only: results are wrong): the short kernel's launch with no
// work but the PDL wait, so the attention's cost to a token splits into its launch in the chain
// (this against EMBER_CUDA_SKIP=attn) and its own work (the default against this): what taking it
// off its own launch could gain, against what a faster kernel could (session 51: 1B Q4_K_M 1.23 /
// 3.66 us a layer, 8B 2.23 / 3.08). =loads: attn_dec_short_kernel PROBE = 1 (its reads, no
// arithmetic; F16 caches, else as the default). =empty_cluster: as =empty, in the default's thread
// block clusters (what their co-scheduling costs: =empty launches plain blocks).
__global__ void attn_probe_empty_kernel() {
    cu_pdl_begin();
}
int attn_probe_mode() {  // 0: off, 1: empty, 2: loads, 3: empty_cluster
    static const int mode = [] {
        const char * e = std::getenv("EMBER_CUDA_ATTN_PROBE");
        return !e                                ? 0
               : !std::strcmp(e, "empty")         ? 1
               : !std::strcmp(e, "loads")         ? 2
               : !std::strcmp(e, "empty_cluster") ? 3
                                                  : 0;
    }();
    return mode;
}
constexpr int k_short_warps   = k_short_threads / 32;
constexpr int k_short_unroll  = 4;  // keys of a slot in flight

// PROBE = 1 (EMBER_CUDA_ATTN_PROBE=loads, F16 caches; measuring only, results wrong): the kernel up
// to its reads (the mask, the first pass's K / V rows, the PDL wait, Q and this step's rows), then
// out, nothing computed: against the default it is the arithmetic, the slots' meet and the stores,
// against =empty the reads.
//
// LB (by default on sm_90 over F16 caches and other types' rows of 5 blocks or more; with
// EMBER_CUDA_ATTN_LASTBLOCK=2 every row, =0 the cluster instead: dec_lastblock_mode): a row's n_split blocks without a cluster. Each stores its split (the
// unnormalized row, M and S) to scratch memory as for the merge kernel, then counts itself in the
// row's a.count; the block that counts last reads every split back (through L2) and merges them
// as rank 0 of a cluster does (dec_merge_store: the same bits), and sets the count back to zero.
// A cluster launch in a CUDA graph costs ~1.4 us a layer outside the kernels (session 56); this
// keeps the splits' parallel passes without one, for a fence and an atomic a block. H100 (session
// 57): tg64 at depth 384 8B INT4 499.9 -> 540.8, 1B Q4_K_M 1760.9 -> 1804.9; tg128 from depth 0
// level (8B +0.1..0.4%).
template <int T, int V, int PROBE = 0, bool LB = false>
__global__ void __launch_bounds__(k_short_threads) attn_dec_short_kernel(dec_args a) {
    constexpr int                  UN = k_short_unroll;  // keys of a slot a pass
    __shared__ __align__(16) float sAcc[k_short_threads * 8];  // [slot][d]: slots x d = 256 x 8 for every d
    __shared__ float               sM[64], sS[64];              // slots <= 64 (d >= 32)
    __shared__ int                 sLast[k_short_warps];
    const int     d = static_cast<int>(a.q.ne[0]), lk = d / 8, kpw = 32 / lk, ns = k_short_warps * kpw;
    const int     lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int     slot = warp * kpw + lane / lk, part = lane % lk;
    const int64_t head = blockIdx.x, tok = blockIdx.y, ik = head / a.group;
    const int64_t n_kv = a.k.ne[2];
    const char *  kbase = a.k.data + ik * a.k.nb[1];
    const char *  vbase = a.v.data + ik * a.v.nb[1];
    // a.early: the mask and the first pass's K / V rows are read before waiting for the launch
    // before this one (the Q/K/V product, whose epilogue writes this step's cache rows, or the
    // cache writes' own kernels); the rows this step writes (a.early_idx) are read after it, with
    // Q. Safe because every kernel lets its dependents start only after its own wait
    // (cu_pdl_begin): when this one starts, every launch before the one before it has completed,
    // the input copies (mask, indices) and the earlier steps' cache writes among them.
    if (!a.early) cu_pdl_begin();
    int wr[k_kv_write_max];  // a.early: the rows this step writes, requested with the mask (one round trip)
#pragma unroll
    for (int i = 0; i < k_kv_write_max; i++) wr[i] = a.early && i < a.early_n ? a.early_idx[i] : -1;
    // Keys past the last one the mask shows are not read: the runtime pads the attention range
    // to 256 cells (EMBER_KV_PAD) so decode graphs are reused, and a short context's mask hides
    // most of it. The mask row is read with Q (one round trip), the last shown key found by a
    // block reduction.
    const float * mrow = a.has_mask ? reinterpret_cast<const float *>(a.mask.data + tok * a.mask.nb[1]) : nullptr;
    int           last = static_cast<int>(n_kv) - 1;
    if (mrow) {
        last = -1;
        for (int j = threadIdx.x; j < n_kv; j += k_short_threads) {
            if (mrow[j] != -INFINITY) last = j;
        }
    }
    float         q[8];
    const float * qr = reinterpret_cast<const float *>(a.q.data + head * a.q.nb[1] + tok * a.q.nb[2]) + 8 * part;
    if (!a.early) {
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = qr[i] * a.scale;
    }
    last = cu_warp_max_int(last);
    if (lane == 0) sLast[warp] = last;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < k_short_warps; w++) last = max(last, sLast[w]);
    const int64_t n_used = last + 1;
    // A row's bytes: 16-byte types read where they are; byte types from the aligned word before.
    const auto row_at = [](const char * base, int64_t nb, int64_t j, int & off) {
        const char * row = base + j * nb;
        if constexpr (dec_copy16<T>()) {
            off = 0;
            return reinterpret_cast<const uint8_t *>(row);
        } else {
            off = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 3u);
            return reinterpret_cast<const uint8_t *>(row - off);
        }
    };
    float m = -INFINITY, s = 0.0f, acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
    // Passes of UN keys per slot; with n_split blocks per row (a cluster), block z takes passes
    // z, z + n_split, ...: up to n_split passes' keys take one pass's time.
    const int     n_split = a.n_split, z = static_cast<int>(blockIdx.z);
    const int64_t kpp     = static_cast<int64_t>(UN) * ns;  // keys per pass
    const int64_t step    = kpp * n_split;
    float      kf[UN][8], vf[UN][8], ks[UN], vs[UN], mv[UN];
    const auto load_key = [&](int64_t j, int u) {
        int             ko, vo;
        const uint8_t * kr = row_at(kbase, a.k.nb[2], j, ko);
        const uint8_t * vr = row_at(vbase, a.v.nb[2], j, vo);
        ks[u]              = dec_load8_u<T, V>(kr, ko, 8 * part, kf[u]);
        vs[u]              = dec_load8_u<T, V>(vr, vo, 8 * part, vf[u]);
    };
    const auto zero_key = [&](int u) {  // key u's K and V values zero (a key past the pass)
#pragma unroll
        for (int i = 0; i < 8; i++) kf[u][i] = vf[u][i] = 0.0f;
        ks[u] = vs[u] = 0.0f;
    };
    // Key j0 + u ns of a pass into slot u (bit u of skip: that key is left for later, zeros now).
    const auto load_pass = [&](int64_t j0, unsigned skip) {
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * ns;
            if (j < n_used && !(skip >> u & 1u)) {
                load_key(j, u);
                mv[u] = mrow ? mrow[j] : 0.0f;
            } else {
                zero_key(u);
                mv[u] = j >= n_used ? -INFINITY : mrow ? mrow[j] : 0.0f;
            }
        }
    };
    int64_t j0 = z * kpp + slot;
    if (a.early) {
        unsigned redo = 0;  // bit u: key j0 + u ns is one this step writes
#pragma unroll
        for (int u = 0; u < UN; u++) {
#pragma unroll
            for (int i = 0; i < k_kv_write_max; i++) redo |= (wr[i] == j0 + static_cast<int64_t>(u) * ns ? 1u : 0u) << u;
        }
        if (j0 - slot < n_used) load_pass(j0, redo);
        cu_pdl_begin();
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = qr[i] * a.scale;
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int64_t j = j0 + static_cast<int64_t>(u) * ns;
            if ((redo >> u & 1u) && j < n_used) load_key(j, u);
        }
    }
    const auto probe_out = [&]() {  // PROBE = 1: the values read kept (a store no run makes), then out
        if constexpr (PROBE == 1) {
            if (!a.early && j0 - slot < n_used) load_pass(j0, 0u);
            float t = 0.0f;
#pragma unroll
            for (int u = 0; u < UN; u++) {
                t += ks[u] + vs[u] + mv[u];
#pragma unroll
                for (int i = 0; i < 8; i++) t += kf[u][i] + vf[u][i];
            }
#pragma unroll
            for (int i = 0; i < 8; i++) t += q[i];
            if (t == 1234.5f) reinterpret_cast<float *>(a.dst.data)[threadIdx.x] = t;
        }
        return PROBE == 1;
    };
    if (probe_out()) return;
    for (bool first = true; j0 - slot < n_used; j0 += step, first = false) {  // the same trip count for every lane (shuffles below)
        if (!a.early || !first) load_pass(j0, 0u);
        float sc[UN];
        float mx = m;
#pragma unroll
        for (int u = 0; u < UN; u++) {
            float t = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) t = fmaf(q[i], kf[u][i], t);
            t *= ks[u];
            for (int o = lk / 2; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            sc[u] = mv[u] == -INFINITY ? -INFINITY : t + mv[u];
            mx    = fmaxf(mx, sc[u]);
        }
        const float f = m == -INFINITY ? 0.0f : expf(m - mx);  // m = -INF: nothing summed yet
        s *= f;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] *= f;
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const float p = sc[u] == -INFINITY ? 0.0f : expf(sc[u] - mx);
            s += p;
            const float pv = p * vs[u];
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] = fmaf(pv, vf[u][i], acc[i]);
        }
        m = mx;
    }
    *reinterpret_cast<float4 *>(sAcc + slot * d + 8 * part)     = make_float4(acc[0], acc[1], acc[2], acc[3]);
    *reinterpret_cast<float4 *>(sAcc + slot * d + 8 * part + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    if (part == 0) {
        sM[slot] = m;
        sS[slot] = s;
    }
    __syncthreads();
    const bool merger = warp < d / 32;  // warp-uniform: thread e < d makes value e
    const int  e      = threadIdx.x;
    float      M, S;
    float      o = dec_merge_rows(sM, sS, sAcc, ns, d, e, merger, M, S);
    if (a.part) {
        // One of many blocks per row (more than a cluster holds): the unnormalized row, M and S
        // to scratch memory in attn_dec_merge_kernel's order; that kernel merges them.
        if (merger) {
            float * pr = a.part + ((tok * a.q.ne[1] + head) * n_split + z) * dec_part_stride(d);
            pr[e]      = o;
            if (e == 0) pr[d] = M, pr[d + 1] = S;
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if constexpr (LB) {
            __shared__ int sLastB;
            const int64_t  row = tok * a.q.ne[1] + head;
            __threadfence();  // this block's split visible before its count
            __syncthreads();
            if (threadIdx.x == 0) {
                const int prev = atomicAdd(a.count + row, 1);
                sLastB         = prev == n_split - 1;
                if (sLastB) a.count[row] = 0;  // every block of the row has counted: zero for the next launch
            }
            __syncthreads();
            if (!sLastB || !merger) return;
            __threadfence();
            const float * base = a.part + row * n_split * dec_part_stride(d);
            float         mr[k_dec_max_cluster], sr[k_dec_max_cluster], orr[k_dec_max_cluster];
#pragma unroll
            for (int r = 0; r < k_dec_max_cluster; r++) {  // every read issued before any is used
                const float * pr = base + r * dec_part_stride(d);
                mr[r]            = r < n_split ? __ldcg(pr + d) : -INFINITY;
                sr[r]            = r < n_split ? __ldcg(pr + d + 1) : 0.0f;
                orr[r]           = r < n_split ? __ldcg(pr + e) : 0.0f;
            }
            dec_merge_store(a, mr, sr, orr, head, tok, d, e);
        }
#endif
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (a.cluster) {
        // The blocks' (M, S, unnormalized row) through distributed shared memory; rank 0 merges.
        // Every thread of every block reaches both cluster barriers.
        __shared__ float sOut[EMBER_CUDA_ATTN_MAX_D], sMS[2];
        if (merger) sOut[e] = o;
        if (e == 0) sMS[0] = M, sMS[1] = S;
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        if (z == 0 && merger) {
            float mr[k_dec_max_cluster], sr[k_dec_max_cluster], orr[k_dec_max_cluster];
#pragma unroll
            for (int r = 0; r < k_dec_max_cluster; r++) {  // every remote read issued before any is used
                mr[r]  = r < n_split ? *cluster.map_shared_rank(sMS, r) : -INFINITY;
                sr[r]  = r < n_split ? *cluster.map_shared_rank(sMS + 1, r) : 0.0f;
                orr[r] = r < n_split ? *cluster.map_shared_rank(sOut + e, r) : 0.0f;
            }
            dec_merge_store(a, mr, sr, orr, head, tok, d, e);
        }
        cluster.sync();  // no block leaves while rank 0 still reads its shared memory
        return;
    }
#endif
    if (!merger) return;
    o *= S > 0.0f ? 1.0f / S : 0.0f;  // every key hidden: zeros, as the tiled kernel
    reinterpret_cast<float *>(a.dst.data + head * a.dst.nb[1] + tok * a.dst.nb[2])[e] = o;
    if (a.xq) cu_quantize_warp(o, tok * a.xk + head * d + e, a.xq, a.xds);
}

// Keys up to which the short kernel runs: 512 by default, when the row's passes fit one thread
// block cluster (8 passes: 512 keys at d = 128, 256 at d = 256; a context's first 512 tokens
// with the runtime's 256-key attention padding, EMBER_KV_PAD). H200, tg32 at depth 32 / 96 /
// 160 / 224 (one 256-key row) against the tiled kernel, F16 KV: 8B Q4_0 529.1 / 517.7 / 521.1 /
// 502.3 against 488.3 / 500.4 / 500.2 / 481.6 t/s, 1B Q4_0 1758 / 1647 / 1631 / 1569 against
// 1579 / 1619 / 1609 / 1539; Q8_0 KV gains 2.5-10% the same way. At depth 512 (H200, session
// 21, tg32, -r 2; 512 up to 256 before): 8B Q4_0 F16 KV 472.8 against 460.7, Q8_0 KV 425.6 /
// 424.3, FP8 422.6 / 417.4, 1B 1564 against 1432. Further up it gains little or loses: depth
// 1024 (16 passes, a block per pass and the merge kernel) 8B F16 454.6 / 446.8, Q8_0 414.0 /
// 414.1, FP8 400.0 / 402.7, 1B 1378 / 1374; depth 4096 with 4096: 8B F16 361.3 / 367.0, Q8_0
// 331.7 / 333.6, FP8 320.3 / 323.6. Without the cluster (one block per row, passes in turn)
// depth 160-224 lost 3-10% on the 8B shape. EMBER_CUDA_ATTN_SHORT=n: up to n keys whatever
// the passes (0: off); -1 when it names no limit (the default applies: only rows whose passes
// fit one cluster). Read at every launch, so tests can switch it (graphs replay without calling
// here).
constexpr int64_t k_short_default_keys = 512;

int64_t dec_short_keys_env() {
    return ember_cuda_env_choice("EMBER_CUDA_ATTN_SHORT", -1, {0, 32, 64, 128, 256, 512, 1024, 2048, 4096});
}

// Splits merged inside the kernel, through distributed shared memory (a thread block cluster of
// the head's n_split blocks, sm_90+; the portable cluster size bounds n_split), instead of by
// attn_dec_merge_kernel: at short contexts (a few tiles per head) the second kernel's launch
// and its round trip through scratch memory cost as much as the attention itself (H200 trace,
// 8B shape at depth <= 128: 7.6 us attention + 4.7 us merge per layer). Longer contexts have
// more splits than a cluster holds and keep the merge kernel. EMBER_CUDA_ATTN_CLUSTER=0: off.
// Read at every launch (graphs replay without calling here), so tests can switch it.
bool dec_cluster_on(const ember_cuda_ctx & ctx) {
    return ember_cuda_env_on("EMBER_CUDA_ATTN_CLUSTER") && ctx.cc_major >= 9;
}

// Clusters only for rows of more than n one-pass blocks (EMBER_CUDA_ATTN_CLUSTER_MIN=n, default
// 2); rows of up to n passes run them in turn in one block. A cluster launch in a CUDA graph costs
// ~1.4 us a layer outside the kernels (as if the PDL edges around it became full dependencies:
// eagerly, without graphs, the 1B is level with and without it): the 1B shape at up to 256 keys
// (two passes) takes the same GPU time either way in a kernel trace, yet H200 tg128 1B Q4_K_M is
// 2204.0 at n = 1, 2315.5 at n = 2 (8B level: its rows of 256 keys are four passes). n = 4 (the 8B
// at up to 256 keys in one block): 8B INT4 +1.8%, Q4_0 +0.5%, Q4_K_M +0.2% from depth 0, but four
// real passes in one block lose (1B tg128 at depth 384: 1993.8 -> 1753.8; the 8B at depths
// 160-224 lost 3-10% so before clusters). Read at every launch, as the switch above.
int64_t dec_cluster_min() {
    return ember_cuda_env_choice("EMBER_CUDA_ATTN_CLUSTER_MIN", 2, {1, 2, 3, 4, 5, 6, 7, 8});
}

// Rows that would take a cluster take attn_dec_short_kernel LB instead, their splits merged by the
// block that finishes last (EMBER_CUDA_ATTN_LASTBLOCK=0: the cluster, always; =2: the last block,
// always). By default (=1) over F16 caches, and over the other types (Q8_0, Q4_0, FP8, BF16, F32)
// for rows of k_lb_other_min blocks or more. H100 (session 58), tg128 with Q8_0 caches, cluster
// against last block for every row: 8B INT4 at depth 384 (rows of 8 blocks) 471.1 -> 509.4 (+8.1%),
// 1B Q4_K_M at 384 (rows of 4) 1660.6 -> 1640.7 (-1.2%), from depth 0 level (8B: rows of 4);
// FP8 E4M3 caches the same (472.2 -> 510.9, 1670.0 -> 1649.5). F16 rows of 4 gained instead
// (1B at 384, tg64: +2.5%). Read at every launch, as the switches above.
constexpr int64_t k_lb_other_min = 5;
int dec_lastblock_mode() {
    return static_cast<int>(ember_cuda_env_choice("EMBER_CUDA_ATTN_LASTBLOCK", 1, {0, 1, 2}));
}
std::atomic<long long> attn_lastblock_launches{0};  // (ember_cuda_attn_lastblock_launches)

bool dec_enabled() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_ATTN_DEC");
    return on;
}

// The tensor-core kernel (attn_dec_mma_kernel) for rows past the short kernel's: sm_80+, head
// sizes 64 and 128. EMBER_CUDA_ATTN_MMA=1 (default): F16 caches, and Q8_0 / Q4_0 / FP8 caches
// whose rows suit the piece copies (mma_piece_bytes: whole-block decode); 2: also the block
// types' other rows (the word copies, slower than the tiled kernel: H200, 8B Q4_0 tg128 at depth
// 4096, Q8_0 377.0 against 402.8 t/s); 0: the tiled kernel. Read at every launch (tests switch
// it; graphs replay without calling here).
int dec_mma_mode(const ember_cuda_ctx & ctx) {
    return ctx.cc_major >= 8 ? ember_cuda_env_choice("EMBER_CUDA_ATTN_MMA", 1, {0, 1, 2}) : 0;
}

// attn_dec_mma_kernel over a block type: the bytes of each copy into the raw tile. 16: when
// both caches' key rows are 16 bytes apart (nb[2] % 16 == 0, so every row of a KV head starts at
// the same offset within 16 bytes, found once a block), the 16-byte pieces around each row
// (FP8 d = 128, 132-byte rows: 9 copies a row instead of 33 words); 8 or 4 when both caches'
// rows start on such a boundary and are a whole number of them (a row's copy then needs no
// offset); 1: the words around each row, rows at even bytes with even strides (each thread's
// rows then share their offset within a word); all decode whole blocks (mma_dec_block). Else 0:
// the words around rows at any byte, found per copy, decoded 8 values at a time.
// EMBER_CUDA_ATTN_MMA_COPY=0: always 0, 2: never 16 (tests compare them). Read at every launch.
int mma_piece_bytes(const dec_args & a) {
    const int mode = ember_cuda_env_choice("EMBER_CUDA_ATTN_MMA_COPY", 1, {0, 1, 2});
    if (mode == 0) return 0;
    const auto al = [&](const cu_tensor & t, int g) {
        return reinterpret_cast<uintptr_t>(t.data) % g == 0 && t.nb[1] % g == 0 && t.nb[2] % g == 0;
    };
    if (mode == 1 && a.k.nb[2] % 16 == 0 && a.v.nb[2] % 16 == 0) return 16;
    for (int g : {8, 4}) {
        if (a.row_bytes % g == 0 && al(a.k, g) && al(a.v, g)) return g;
    }
    return al(a.k, 2) && al(a.v, 2) ? 1 : 0;  // words around rows at even bytes (64-value FP8 rows: 66 bytes)
}

// Raw slot of a row copied in pieces of g bytes: a multiple of g with a word past the row
// (mma_dec_block's funnel shift reads it), 8-byte pieces at 2 mod 4 words (the decode's lanes
// on consecutive keys meet in 2-way bank conflicts at most), 4-byte ones at an odd number of
// words. 16-byte pieces: the 16-byte units the rows span from their offset, at most, over the
// launch's KV heads (mma_slot16_bytes): a row's funnel shift only reads past the row's last
// word when it shifts by 0 (the word unused; the layout keeps slack for the last slot), so
// FP8 d = 128 rows (132 bytes at offsets 0, 4, 8, 12) take 144 bytes and the kernel still fits
// three blocks an SM (H200: 228 KB).
int mma_slot16_bytes(const dec_args & a) {
    int e = 0;
    for (int kv = 0; kv < 2; kv++) {
        const cu_tensor & t = kv ? a.v : a.k;
        for (int64_t h = 0; h < t.ne[1] && h < 16; h++) {  // offsets repeat after 16 heads (nb[1] mod 16)
            e = std::max(e, static_cast<int>((reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(h * t.nb[1])) & 15) + a.row_bytes);
        }
    }
    return 16 * ((e + 15) / 16);
}
int mma_slot_bytes(int g, int row_bytes) {
    if (g == 4) return 4 * ((row_bytes / 4 + 1) | 1);
    int w = 2 * ((row_bytes / 4 + 2) / 2);
    if (w % 4 == 0) w += 2;
    return 4 * w;
}

// The kernel version (attn_dec_kernel's V): EMBER_CUDA_ATTN_DEC_FAST=0 the first version's
// copies and decoders, 2 FP8 E4M3 decoded by bit moves; default 1.
int dec_version() {
    return ember_cuda_env_choice("EMBER_CUDA_ATTN_DEC_FAST", 1, {0, 1, 2});
}

// Blocks to aim at: EMBER_CUDA_ATTN_DEC_BLOCKS (default 4) per SM, at most `fit` (blocks that
// fit an SM at once; 0: unknown).
int dec_target_blocks(int device, int fit) {
    static int per_sm = [] {
        const char * e = std::getenv("EMBER_CUDA_ATTN_DEC_BLOCKS");
        const int    v = e ? std::atoi(e) : 0;
        return v > 0 ? std::min(v, 64) : 4;
    }();
    return (fit > 0 ? std::min(per_sm, fit) : per_sm) * cu_sm_count(device);
}

// True when every aligned 4-byte word holding a byte of t lies in t's allocation: the word
// copies of the byte types read up to 3 bytes around a row. Allocations start 256-aligned, so
// only the end of the base tensor's memory matters.
bool dec_words_in_bounds(const ember_tensor * t) {
    const ember_tensor * b = ember_memory_owner(t);
    return (reinterpret_cast<uintptr_t>(b->data) + ember_nbytes(b)) % 4 == 0;
}

// Blocks of Kernel (Threads threads) that fit an SM with smem bytes of shared memory (cached per
// kernel: the same few values come back every layer; the lock is only taken here).
template <auto Kernel, int Threads> int dec_blocks_per_sm(int device, size_t smem) {
    static std::mutex m;
    static int        c_dev = -1, c_blocks = 0;
    static size_t     c_smem = 0;
    std::lock_guard<std::mutex> lock(m);
    if (c_dev != device || c_smem != smem) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, Threads, smem) != cudaSuccess) {
            cudaGetLastError();
            n = 0;
        }
        c_dev = device, c_smem = smem, c_blocks = n;
    }
    return c_blocks;
}

struct dec_launch {
    ember_cuda_ctx & ctx;
    dec_args &       a;
    int64_t          tiles;   // key tiles of a KV head
    int64_t          units;   // KV heads x row chunks
    dim3             grid;    // x, z set; y (splits) set here
    int              d;
    size_t           part_floats_per_split;
    ember_status &   st;
    // The cache writes left for this attention (ctx.kv_attn), launched on their own before a
    // kernel that does not take them (a.kvw cleared); false when that failed (st says why).
    bool flush() const {
        a.kvw.n = 0;
        st      = ember_cuda_kv_flush(ctx);
        if (st != EMBER_OK) return false;
        st = EMBER_ERR_UNSUPPORTED;
        return true;
    }
    template <int T> void operator()() const {
        const int v = dec_version();
        if (v == 0) return run<T, 0>();
        if constexpr (T == EMBER_TYPE_FP8_E4M3) {
            if (v == 2) return run<T, 2>();
        }
        run<T, 1>();
    }
    // attn_dec_mma_kernel: splits of whole 64-key tiles, as few per block as fill the GPU's
    // block slots (as the tiled kernel's); one split writes the output, more go through the merge.
    template <int T, int D> void run_mma() const {  // a.mma_piece set
        a.slot_bytes      = a.mma_piece == 16 ? mma_slot16_bytes(a) : a.mma_piece > 1 ? mma_slot_bytes(a.mma_piece, a.row_bytes) : dec_slot_bytes(T, a.row_bytes);
        // A block's 16 rows span at most 15 / group + 2 tokens (and no more than there are).
        a.mask_rows       = a.has_mask ? static_cast<int>(std::min<int64_t>({16, a.q.ne[2], 15 / a.group + 2})) : 0;
        a.q_rows          = static_cast<int>(std::min<int64_t>(k_mma_rows, a.n_rows)) + 1;
        const size_t smem = mma_layout_of(mma_direct<T>(), D, a.slot_bytes, a.mask_rows, a.q_rows).total;
        if (smem > 48 * 1024 &&
            cudaFuncSetAttribute(attn_dec_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        const int64_t n_kv    = a.k.ne[2];
        const int64_t tiles   = std::max<int64_t>(1, (n_kv + k_mma_keys - 1) / k_mma_keys);
        const int64_t chunks  = (a.n_rows + k_mma_rows - 1) / k_mma_rows;
        const int64_t target  = dec_target_blocks(ctx.device, dec_blocks_per_sm<attn_dec_mma_kernel<T, D>, k_mma_threads>(ctx.device, smem));
        int64_t       per     = std::max<int64_t>(1, (tiles * grid.x * chunks + target - 1) / target);
        per                   = std::max<int64_t>(per, (tiles + k_dec_max_split - 1) / k_dec_max_split);
        const int64_t n_split = (tiles + per - 1) / per;
        a.n_split             = static_cast<int>(n_split);
        a.split_keys          = static_cast<int>(per * k_mma_keys);
        a.cluster             = false;
        a.part                = nullptr;
        if (n_split > 1) {
            a.part = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(n_split) * part_floats_per_split * sizeof(float)));
            if (!a.part) {
                st = EMBER_ERR_OOM;
                return;
            }
        }
        if (a.kvw.n > 0 && cu_has_warp_encoder<T>()) {  // this launch writes the new rows (mma_kv_write)
            ctx.kv_attn   = nullptr;
            ctx.kv_set[0] = ctx.kv_set[1] = nullptr;
        } else if (!flush()) {
            return;
        }
        const dim3 g(grid.x, static_cast<unsigned>(n_split), static_cast<unsigned>(chunks));
        cu_launch(ctx, attn_dec_mma_kernel<T, D>, g, k_mma_threads, smem, a);
        st = EMBER_OK;
    }
    template <int T, int V> void run() const {
        // Rows must suit the copies (16-byte pieces; the byte types' words need no alignment).
        if (dec_copy16<T>()) {
            const auto al = [](const cu_tensor & t) {
                return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.nb[1] % 16 == 0 && t.nb[2] % 16 == 0;
            };
            if (!al(a.k) || !al(a.v)) return;
        }
        if constexpr (V >= 1) {
            const int64_t short_env = dec_short_keys_env();
            const int64_t short_max = short_env < 0 ? k_short_default_keys : short_env;
            if ((d == 32 || d == 64 || d == 128 || d == 256) && a.k.ne[2] <= short_max && a.q.ne[2] <= 65535) {
                // One pass of every slot per block: as many blocks per row (sm_90: merged by the
                // last of them over F16 caches, else in a cluster) as the keys need, up to the
                // portable cluster size; more keys take more passes. Without clusters (before
                // sm_90, or EMBER_CUDA_ATTN_CLUSTER=0) the passes run in turn in one block: level
                // with the tiled kernel at two passes and slower beyond (H200, this kernel before
                // it had clusters), so longer rows go tiled.
                const int64_t kpp    = static_cast<int64_t>(k_short_unroll) * k_short_warps * (32 / (d / 8));
                const int64_t n_full = std::max<int64_t>(1, (a.k.ne[2] + kpp - 1) / kpp);  // blocks for one pass each
                const int64_t cl_min = dec_cluster_min();
                const bool    cl     = n_full > cl_min && dec_cluster_on(ctx);
                if ((cl && (n_full <= k_dec_max_cluster || short_env >= 0)) || n_full <= std::max<int64_t>(2, cl_min)) {
                    const int64_t n = cl ? std::min<int64_t>(n_full, k_dec_max_split) : 1;
                    // (LB: rows a cluster would take, the counts for every row: dec_lastblock_mode)
                    const int  lb_mode = V == 1 && n > 1 && n <= k_dec_max_cluster && attn_probe_mode() == 0 ? dec_lastblock_mode() : 0;
                    const bool lb      = (lb_mode == 2 || (lb_mode == 1 && (T == EMBER_TYPE_F16 || n >= k_lb_other_min))) && ctx.d_count &&
                                         a.q.ne[1] * a.q.ne[2] <= EMBER_CUDA_ATTN_COUNTS;
                    a.n_split       = static_cast<int>(n);
                    a.cluster       = n > 1 && n <= k_dec_max_cluster && !lb;
                    a.count         = lb ? ctx.d_count : nullptr;
                    a.part          = nullptr;
                    if (n > 1 && !a.cluster) {
                        // More passes than a cluster holds (only with EMBER_CUDA_ATTN_SHORT set
                        // above the default): a block per pass, merged by attn_dec_merge_kernel.
                        a.part = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(n) * part_floats_per_split * sizeof(float)));
                        if (!a.part) {
                            st = EMBER_ERR_OOM;
                            return;
                        }
                    }
                    if (!flush()) return;
                    const dim3 g(static_cast<unsigned>(a.q.ne[1]), static_cast<unsigned>(a.q.ne[2]), static_cast<unsigned>(n));
                    const dim3 cl(1, 1, a.cluster ? static_cast<unsigned>(n) : 1u);
                    if constexpr (V == 1) {
                        if (lb) {
                            cu_launch(ctx, attn_dec_short_kernel<T, V, 0, true>, g, k_short_threads, 0, a);
                            attn_lastblock_launches.fetch_add(1, std::memory_order_relaxed);
                            st = EMBER_OK;
                            return;
                        }
                    }
                    if constexpr (T == EMBER_TYPE_F16 && V == 1) {
                        if (attn_probe_mode() == 2) {
                            cu_launch_cluster(ctx, attn_dec_short_kernel<T, V, 1>, g, k_short_threads, 0, cl, a);
                            st = EMBER_OK;
                            return;
                        }
                    }
                    if (attn_probe_mode() == 1) cu_launch(ctx, attn_probe_empty_kernel, g, k_short_threads, 0);
                    else if (attn_probe_mode() == 3) cu_launch_cluster(ctx, attn_probe_empty_kernel, g, k_short_threads, 0, cl);
                    else cu_launch_cluster(ctx, attn_dec_short_kernel<T, V>, g, k_short_threads, 0, cl, a);
                    st = EMBER_OK;
                    return;
                }
            }
        }
        if constexpr (V == 1 && mma_type<T>()) {
            const int mode = (d == 64 || d == 128) && a.n_rows <= 65535 * k_mma_rows ? dec_mma_mode(ctx) : 0;
            a.mma_piece    = mode == 0 || mma_direct<T>() ? 0 : mma_piece_bytes(a);
            if (mode == 2 || (mode == 1 && (T == EMBER_TYPE_F16 || a.mma_piece != 0))) {
                if (d == 64) return run_mma<T, 64>();
                return run_mma<T, 128>();
            }
        }
        a.slot_bytes        = dec_slot_bytes(T, a.row_bytes);
        const size_t smem   = dec_layout_of(d, a.slot_bytes).total;
        // Above 48 KiB of shared memory the kernel must opt in.
        if (smem > 48 * 1024 &&
            cudaFuncSetAttribute(attn_dec_kernel<T, V>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        // Splits: whole tiles, as few per block as fill the GPU to the target (then every
        // block's tiles are in flight almost at once; long contexts give each block more tiles,
        // pipelined). The target counts only the blocks that fit at once, so that the grid is
        // one wave, not one and a bit.
        const int64_t target = dec_target_blocks(ctx.device, dec_blocks_per_sm<attn_dec_kernel<T, V>, k_dec_threads>(ctx.device, smem));
        int64_t       per    = std::max<int64_t>(1, (tiles * units + target - 1) / target);
        per                  = std::max<int64_t>(per, (tiles + k_dec_max_split - 1) / k_dec_max_split);
        const int64_t n_split = (tiles + per - 1) / per;
        a.n_split            = static_cast<int>(n_split);
        a.split_keys         = static_cast<int>(per * k_dec_keys);
        a.part               = nullptr;
        a.cluster            = n_split > 1 && n_split <= k_dec_max_cluster && dec_cluster_on(ctx);
        if (!flush()) return;
        if (a.cluster) {
            dim3 g = grid;
            g.y    = static_cast<unsigned>(n_split);
            cu_launch_cluster(ctx, attn_dec_kernel<T, V>, g, k_dec_threads, smem, dim3(1, static_cast<unsigned>(n_split), 1), a);
            st = EMBER_OK;
            return;
        }
        if (n_split > 1) {
            a.part = static_cast<float *>(ember_cuda_scratch(ctx, 1, static_cast<size_t>(n_split) * part_floats_per_split * sizeof(float)));
            if (!a.part) {
                st = EMBER_ERR_OOM;
                return;
            }
        }
        dim3 g = grid;
        g.y    = static_cast<unsigned>(n_split);
        cu_launch(ctx, attn_dec_kernel<T, V>, g, k_dec_threads, smem, a);
        st = EMBER_OK;
    }
};

}  // namespace

long long ember_cuda_attn_lastblock_launches() {
    return attn_lastblock_launches.load(std::memory_order_relaxed);
}

// Bytes of one K/V row of d values (d % 32 == 0) of a cache type (cu_dispatch_elem_type's):
// computed here, as libember-cuda.so may only call libember's EMBER_BACKEND_API functions.
static int64_t kv_row_bytes(ember_type t, int64_t d) {
    switch (t) {
        case EMBER_TYPE_F32: return 4 * d;
        case EMBER_TYPE_F16:
        case EMBER_TYPE_BF16: return 2 * d;
        case EMBER_TYPE_Q8_0: return d / 32 * static_cast<int64_t>(sizeof(ember_block_q8_0));
        case EMBER_TYPE_Q4_0: return d / 32 * static_cast<int64_t>(sizeof(ember_block_q4_0));
        case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E5M2: return d / 32 * static_cast<int64_t>(sizeof(ember_block_fp8));
        default: return 0;
    }
}

// Whether attn_dec_mma_kernel can write the new rows of SET_ROWS pair (sk, sv) into the caches
// attn reads through views of them: block-quantized caches it encodes (cu_encode_warp), head
// sizes 64 / 128, the views starting at the caches' row 0 with their row stride and d values
// per head, f32 rows of the whole row's width, one I32 index per token, at most k_kv_write_max
// tokens. Fills *w (n = tokens) when it can.
static bool kv_write_layout(const ember_tensor * attn, const ember_tensor * sk, const ember_tensor * sv, dec_kv_write * w) {
    const ember_tensor * kview = attn->src[1];
    const ember_tensor * vview = attn->src[2];
    if (!sk || !sv || !kview || !vview || kview->op != EMBER_OP_VIEW || vview->op != EMBER_OP_VIEW || kview->src[0] != sk || vview->src[0] != sv) {
        return false;
    }
    const int64_t d = kview->ne[0];
    const ember_type t = sk->type;
    const bool type_ok = t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
    if (!type_ok || sv->type != t || (d != 64 && d != 128) || vview->ne[0] != d || sk->src[2] != sv->src[2]) return false;
    const ember_tensor * idx = sk->src[2];
    const int64_t        n   = sk->src[1]->ne[1];
    if (!idx || idx->type != EMBER_TYPE_I32 || idx->ne[0] != n || n < 1 || n > k_kv_write_max || sv->src[1]->ne[1] != n) return false;
    for (int kv = 0; kv < 2; kv++) {
        const ember_tensor * set  = kv ? sv : sk;
        const ember_tensor * view = kv ? vview : kview;
        const ember_tensor * rows = set->src[1];
        if (view->type != t || view->data != set->data || view->nb[2] != set->nb[1] || view->nb[1] != static_cast<size_t>(kv_row_bytes(t, d)) ||
            set->ne[0] != d * view->ne[1] || set->ne[2] * set->ne[3] != 1 || set->nb[0] != view->nb[0] || !rows || rows->type != EMBER_TYPE_F32 ||
            rows->nb[0] != sizeof(float) || rows->ne[0] != set->ne[0] || rows->ne[2] * rows->ne[3] != 1 || set->ne[1] != sk->ne[1]) {
            return false;
        }
    }
    if (w) {
        w->k_rows     = static_cast<const char *>(sk->src[1]->data);
        w->v_rows     = static_cast<const char *>(sv->src[1]->data);
        w->k_nb1      = static_cast<int64_t>(sk->src[1]->nb[1]);
        w->v_nb1      = static_cast<int64_t>(sv->src[1]->nb[1]);
        w->idx        = static_cast<const char *>(idx->data);
        w->idx_nb0    = static_cast<int64_t>(idx->nb[0]);
        w->cache_rows = sk->ne[1];
        w->n          = static_cast<int>(n);
    }
    return true;
}

bool ember_cuda_attn_kv_write_ok(const ember_cuda_ctx & ctx, const ember_tensor * attn, const ember_tensor * sk, const ember_tensor * sv) {
    return ctx.cc_major >= 8 && attn->op == EMBER_OP_ATTN && attn->src[0]->ne[2] <= k_kv_write_max && kv_write_layout(attn, sk, sv, nullptr);
}

ember_status ember_cuda_attn_decode(ember_cuda_ctx & ctx, ember_tensor * dst, const ember_tensor * qx_of) {
    const ember_tensor * q    = dst->src[0];
    const ember_tensor * k    = dst->src[1];
    const ember_tensor * v    = dst->src[2];
    const ember_tensor * mask = dst->src[3];
    const int64_t        d    = q->ne[0];
    if (!dec_enabled() || d % 32 != 0 || d > EMBER_CUDA_ATTN_MAX_D || k->ne[0] != d || v->ne[0] != d || k->ne[1] <= 0 ||
        q->ne[1] % k->ne[1] != 0 || q->ne[3] != 1 || k->ne[2] != v->ne[2] || k->ne[1] > 65535 || k->type != v->type) {
        return EMBER_ERR_UNSUPPORTED;
    }
    const bool copy16 = k->type == EMBER_TYPE_F16 || k->type == EMBER_TYPE_F32 || k->type == EMBER_TYPE_BF16;
    if (!copy16 && (!dec_words_in_bounds(k) || !dec_words_in_bounds(v))) return EMBER_ERR_UNSUPPORTED;
    if (mask && (reinterpret_cast<uintptr_t>(mask->data) % 4 != 0 || mask->nb[1] % 4 != 0)) return EMBER_ERR_UNSUPPORTED;
    const int64_t group  = q->ne[1] / k->ne[1];
    const int64_t rows   = group * q->ne[2];
    const int64_t chunks = (rows + k_dec_rows - 1) / k_dec_rows;
    if (chunks > 65535) return EMBER_ERR_UNSUPPORTED;
    const int64_t n_kv = k->ne[2];
    dec_args      a;
    a.q         = cu_desc(q);
    a.k         = cu_desc(k);
    a.v         = cu_desc(v);
    a.mask      = mask ? cu_desc(mask) : cu_tensor{};
    a.has_mask  = mask != nullptr;
    a.dst       = cu_desc(dst);
    a.scale     = ember_get_op_param_f32(dst, 0);
    a.group     = static_cast<int>(group);
    a.n_rows    = static_cast<int>(rows);
    a.row_bytes = static_cast<int>(kv_row_bytes(k->type, d));
    a.xq        = nullptr;
    a.xds       = nullptr;
    a.xk        = d * q->ne[1];
    a.mask_rows = 0;
    a.q_rows    = 0;
    a.mma_piece = 0;
    a.kvw       = dec_kv_write{};  // n = 0: none unless the stream left this node its cache writes
    if (ctx.kv_attn == dst && kv_write_layout(dst, ctx.kv_set[0], ctx.kv_set[1], &a.kvw)) a.kvw.err = ctx.d_error;
    // The older cache rows read before the PDL wait (ember_cuda_attn_early_rows, cuda-plan.cpp); not
    // when this launch follows the input scatter's (the inputs being written then).
    // EMBER_CUDA_ATTN_EARLY=0: never (read at every launch; graphs replay without calling here).
    // H200, tg128 (session 38, scripts/ab-gpu.sh, HEAD before against this): 1B Q4_0 2017.3 ->
    // 2072.8, 8B Q4_0 587.7 -> 593.4; with it off in the same build 2010.3 / 586.9.
    a.early = ctx.n_launch != ctx.scatter_launch && ember_cuda_env_on("EMBER_CUDA_ATTN_EARLY") &&
              ember_cuda_attn_early_rows(dst, k_kv_write_max, &a.early_idx, &a.early_n);
    if (qx_of) {
        void * xds = nullptr;
        ember_cuda_qx_buffer(ctx, qx_of, &a.xq, &xds);  // none (nullptr): the matvec makes its own
        a.xds = static_cast<float2 *>(xds);
        if (!a.xq) qx_of = nullptr;
    }
    const int64_t tiles = std::max<int64_t>(1, (n_kv + k_dec_keys - 1) / k_dec_keys);
    const dim3    grid(static_cast<unsigned>(k->ne[1]), 1, static_cast<unsigned>(chunks));
    ember_status  st = EMBER_ERR_UNSUPPORTED;
    cu_dispatch_elem_type(k->type, dec_launch{ctx, a, tiles, k->ne[1] * chunks, grid, static_cast<int>(d),
                                              static_cast<size_t>(q->ne[1] * q->ne[2] * dec_part_stride(static_cast<int>(d))), st});  // KV cache types
    if (st != EMBER_OK) return st;
    const int64_t n_split = a.n_split;
    if (n_split > 1 && !a.cluster && !a.count) {
        cu_launch(ctx, attn_dec_merge_kernel, static_cast<unsigned>(q->ne[1] * q->ne[2]), k_merge_threads, 0,
                  static_cast<const float *>(a.part), static_cast<int>(n_split), static_cast<int>(d), q->ne[1], cu_desc(dst), a.xq, a.xds);
    }
    const ember_status ls = ember_cuda_check_launch("attn (decode)");
    if (ls == EMBER_OK && qx_of) ember_cuda_qx_set_valid(ctx, qx_of, a.xq);
    return ls;
}
