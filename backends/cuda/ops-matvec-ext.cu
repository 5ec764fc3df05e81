// Ember's own weight types in the CUDA ext layout (cuda-repack.h): the decode matvec, the F16
// dequantizer of the prefill GEMM and GET_ROWS.
//
// The matvec follows mvr_kernel (ops-matvec-q.cu): each warp computes R rows on its own, its
// lanes reading consecutive 16-byte chunks of a row's quants (a warp load covers 512
// contiguous bytes), U chunks per lane and row loaded before any is used (U R 16-byte loads in
// flight per lane), the first ones before cu_pdl_begin() (weights only), the block scales from
// their own arrays alongside; a warp shuffle sums each row. Per type:
// - INT4 / INT4_G32: a chunk is one 32-weight run (Q4_0's nibble order); dot products with
//   __dp4a on the 8-bit activations (ember_cuda_quantized_x, the format of ops-matvec-q.cu, reused
//   across matvecs over the same x): per run d (ds.x sum q q8 - z ds.y), ds = (d8, d8 sum q8).
// - NF4: a chunk is half of a 64-weight block's bytes (16 weights from each of its two halves);
//   the codebook is looked up 8 nibbles at a time with byte permutes from an int8 copy,
//   round(127 NF4[q]) (the rounding moves a weight by at most 0.4% of its block's absmax; the
//   CPU rounds the activations to 8 bits anyway), and multiplied with __dp4a; each word's
//   nibbles were unzipped at upload (ember_cuda_nf4_unzip) so a lookup's 4 bytes are 4
//   consecutive weights, as the activations lie; the block absmax is DYN[absmax_q] scale2 +
//   offset as the reference computes it (DYN in shared memory).
// - FP8 (block and row scales): a chunk is 16 codes, converted to half pairs (hardware cvt for
//   E4M3, byte moves for E5M2) and to float, multiplied with the float activations (the CPU's
//   FP8 dot product takes them unrounded too).
// EMBER_CUDA_EXT_MV=0 (cuda-repack.cpp) keeps these weights in the GGUF layout and on the
// generic matvec, for comparisons.
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <type_traits>

#include "cuda-common.cuh"
#include "cuda-env.h"
#include "cuda-matvec-epi.cuh"
#include "cuda-matvec-ext.h"
#include "cuda-matvec-norm.cuh"
#include "cuda-mmq.h"
#include "cuda-repack.h"

namespace {

constexpr int k_warps = 4;  // warps per block of the matvec
constexpr int k_group = 3;  // matrices per launch (Q, K, V; gate, up)

// The arrays of one tensor in the ext layout.
struct ext_layout {
    const uint8_t * q = nullptr;  // quants, rows of rowq bytes
    const uint8_t * s = nullptr;  // per block: INT4 (d, z) halves; NF4 absmax_q; FP8 e. _ROW: fp32 per row
    const uint8_t * h = nullptr;  // NF4 group headers (scale2, offset), ng per row
    int64_t         rowq = 0;
    int             nb = 0, ng = 0;
};

ext_layout layout_of(const ember_tensor * w) {
    ext_layout     l;
    const int64_t  R = ember_nrows(w), k = w->ne[0];
    const uint8_t * base = static_cast<const uint8_t *>(w->data);
    l.q                  = base;
    switch (w->type) {
        case EMBER_TYPE_INT4:
            l.nb   = static_cast<int>(k / 128);
            l.rowq = l.nb * 64;
            break;
        case EMBER_TYPE_INT4_G32:
            l.nb   = static_cast<int>(k / 32);
            l.rowq = l.nb * 16;
            break;
        case EMBER_TYPE_NF4:
            l.nb   = static_cast<int>(k / 64);
            l.ng   = (l.nb + 255) / 256;
            l.rowq = l.nb * 32;
            break;
        default:  // FP8, block or row scales
            l.nb   = static_cast<int>(k / 32);
            l.rowq = k;
            break;
    }
    if (w->type == EMBER_TYPE_NF4) {
        l.h = base + R * l.rowq;
        l.s = l.h + R * l.ng * 8;
    } else {
        l.s = base + R * l.rowq;
    }
    return l;
}

// FP8's forms: cuda-mmq.h (shared with the tensor-core prefill's ext codec).
__host__ __device__ constexpr bool is_row(int T) { return cu_fp8_is_row(T); }
__host__ __device__ constexpr bool is_fp8_type(int T) {
    return T == EMBER_TYPE_FP8_E4M3 || T == EMBER_TYPE_FP8_E5M2 || is_row(T);
}
__host__ __device__ constexpr bool is_e4m3(int T) { return cu_fp8_is_e4m3(T); }

//
// Activations
//
// Where a matvec reads x: the 8-bit copy (xq, xds: ops-matvec-q.cu's format) or the floats.
struct x_src {
    const int8_t * q;
    const float2 * ds;
    const float *  f;
    bool           f16al;  // f is 16-byte aligned (float4 loads)
};

// int8 copy of a 32-weight run (INT4): the run's 32 values and its (d, d sum q).
struct x_run {
    int4   lo, hi;
    float2 ds;
};
__device__ __forceinline__ x_run load_x_run(const x_src & x, int c) {
    const int4 * p = reinterpret_cast<const int4 *>(x.q + 32 * static_cast<int64_t>(c));
    return {__ldg(p), __ldg(p + 1), __ldg(x.ds + c)};
}

// NF4 chunk c: 16 values from each half of block c / 2 and the two halves' d.
struct x_nf4 {
    int4  lo, hi;
    float dlo, dhi;
};
__device__ __forceinline__ x_nf4 load_x_nf4(const x_src & x, int c) {
    const int64_t  b = c >> 1;
    const int8_t * p = x.q + 64 * b + 16 * (c & 1);
    return {__ldg(reinterpret_cast<const int4 *>(p)), __ldg(reinterpret_cast<const int4 *>(p + 32)), __ldg(x.ds + 2 * b).x,
            __ldg(x.ds + 2 * b + 1).x};
}

// FP8 chunk c: the 16 floats it multiplies.
struct x_f16 {
    float v[16];
};
__device__ __forceinline__ x_f16 load_x_f(const x_src & x, int c) {
    x_f16         r;
    const float * p = x.f + 16 * static_cast<int64_t>(c);
    if (x.f16al) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 t = __ldg(reinterpret_cast<const float4 *>(p) + i);
            r.v[4 * i]     = t.x;
            r.v[4 * i + 1] = t.y;
            r.v[4 * i + 2] = t.z;
            r.v[4 * i + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++) r.v[i] = __ldg(p + i);
    }
    return r;
}

//
// The int8 NF4 codebook, round(127 NF4[q]), split by sign into two tables of 8 bytes (each as two
// little-endian words) whose every byte has its sign bit clear: the magnitudes of the negative
// entries (q = 0..7: 127, 88, ..., 0) and the positive entries (q = 8..15: 10, ..., 127).
//
constexpr uint32_t k_nf4_n0 = cu_pack4(127, 88, 67, 50), k_nf4_n1 = cu_pack4(36, 23, 12, 0);
constexpr uint32_t k_nf4_p0 = cu_pack4(10, 20, 31, 43), k_nf4_p1 = cu_pack4(56, 71, 92, 127);
constexpr float    k_nf4_inv = 1.0f / 127.0f;

// The tables against the codebook, at compile time: entry q (cu_sign_tables_entry) is
// round(127 NF4[q]), and no byte has its sign bit set (which cu_prmt's zeros need).
constexpr bool nf4_sign_tables_ok() {
    if (!cu_sign_tables_clear(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1)) return false;
    for (int q = 0; q < 16; q++) {
        const float v = cu_nf4_codebook.v[q] * 127.0f;
        const int   r = v >= 0.0f ? static_cast<int>(v + 0.5f) : -static_cast<int>(-v + 0.5f);
        if (cu_sign_tables_entry(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1, q) != r) return false;
    }
    return true;
}
static_assert(nf4_sign_tables_ok(), "the NF4 sign tables disagree with round(127 NF4[q])");

// mx<NF4>::decode's signed bytes, p | ((0x80 - n) ^ 0x80) a byte (p, n: the two lookups, one of
// them 0), against round(127 NF4[q]) for every q; four different codes in one word for the
// subtraction's lack of borrows (n <= 127 a byte: nf4_sign_tables_ok).
constexpr uint32_t nf4_signed_word(int q0, int q1, int q2, int q3) {
    const int      q[4] = {q0, q1, q2, q3};
    uint32_t       n = 0, p = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t t = q[i] < 8 ? (q[i] % 8 < 4 ? k_nf4_n0 : k_nf4_n1) : (q[i] % 8 < 4 ? k_nf4_p0 : k_nf4_p1);
        const uint32_t b = (t >> (8 * (q[i] % 4))) & 0xffu;
        (q[i] < 8 ? n : p) |= b << (8 * i);
    }
    return p | ((0x80808080u - n) ^ 0x80808080u);
}
constexpr bool nf4_signed_bytes_ok() {
    for (int q = 0; q < 16; q++) {
        for (int r = 0; r < 16; r++) {
            const uint32_t w = nf4_signed_word(q, r, 15 - q, 7);
            const int      want[4] = {cu_sign_tables_entry(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1, q),
                                      cu_sign_tables_entry(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1, r),
                                      cu_sign_tables_entry(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1, 15 - q),
                                      cu_sign_tables_entry(k_nf4_n0, k_nf4_n1, k_nf4_p0, k_nf4_p1, 7)};
            for (int i = 0; i < 4; i++) {
                const int b = static_cast<int>((w >> (8 * i)) & 0xffu);
                if ((b >= 128 ? b - 256 : b) != want[i]) return false;
            }
        }
    }
    return true;
}
static_assert(nf4_signed_bytes_ok(), "mx<NF4>::decode's signed bytes disagree with round(127 NF4[q])");

// The 4 nibbles in the low 16 bits of s (nibble j: byte j) through the two tables: .x the
// negative entries' magnitudes (0 where q >= 8: bit 3 set selects a sign, and every sign is
// clear), .y the positive entries (0 where q < 8: s ^ 0x8888 sets bit 3 just there). So
// NF4[q] x = (.y - .x) x, two dp4a sums whose difference is exact: no select of the two lookups.
__device__ __forceinline__ uint2 nf4_lookup_np(uint32_t s, uint32_t sx) {
    return make_uint2(cu_prmt(k_nf4_n0, k_nf4_n1, s), cu_prmt(k_nf4_p0, k_nf4_p1, sx));
}

//
// FP8: 16 codes (a chunk) times 16 floats.
//
template <bool E4M3> __device__ __forceinline__ float2 fp8x2(uint32_t two) {  // codes in the low 16 bits
    if constexpr (E4M3) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
        return __half22float2(__half2(h));
    } else {
        const uint32_t b = __byte_perm(two, 0u, 0x1404);  // each code as the top byte of a half
        return __half22float2(*reinterpret_cast<const __half2 *>(&b));
    }
}

template <bool E4M3> __device__ __forceinline__ float fp8_dot16(const uint4 & w, const x_f16 & x) {
    const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
    float          s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 a = fp8x2<E4M3>(wd[j]);
        const float2 b = fp8x2<E4M3>(wd[j] >> 16);
        s0             = fmaf(a.x, x.v[4 * j], s0);
        s1             = fmaf(a.y, x.v[4 * j + 1], s1);
        s0             = fmaf(b.x, x.v[4 * j + 2], s0);
        s1             = fmaf(b.y, x.v[4 * j + 3], s1);
    }
    return s0 + s1;
}

//
// Per type: the 16-byte chunk's scale data (sc, loaded with the
// weights), its activations and its dot product.
//
template <int T> struct mx;

template <int G> struct mx_int4 {
    static constexpr int CPB = G / 32;
    using sc_t               = uint32_t;  // (d, z) halves
    using xs_t               = x_run;
    static __device__ __forceinline__ sc_t load_sc(const uint8_t * s, const uint8_t *, int64_t g, int nb, int, int c) {
        return __ldg(reinterpret_cast<const unsigned *>(s) + g * nb + c / CPB);
    }
    static __device__ __forceinline__ xs_t load_x(const x_src & x, int c) { return load_x_run(x, c); }
    static __device__ __forceinline__ float dot(const uint4 & w, sc_t sc, const xs_t & x, const float *) {
        // The high nibbles in place (cu_dot_q4) and the sum to float by the exponent trick, as
        // in ops-matvec-q.cu's Q4_0 dot. H200 tg128 8B INT4 520.0 -> 562.1
        // (the U = 4 kernels); the short rows' kernel (U = 2, the 1B shape's) lost with it
        // (1B 1994 -> 1934: its 2048-block product 5.35 -> 5.69 us) and keeps dot_shifted.
        const int   s = cu_dot_q4(w, x.lo, x.hi);
        const float d = cu_half(static_cast<ember_half>(sc & 0xffffu));
        const float z = cu_half(static_cast<ember_half>(sc >> 16));
        return d * (x.ds.x * cu_int_float(s) - z * x.ds.y);
    }
    // The high nibbles shifted down, one sum.
    static __device__ __forceinline__ float dot_shifted(const uint4 & w, sc_t sc, const xs_t & x) {
        int s = 0;
        s     = __dp4a(static_cast<int>(w.x & 0x0f0f0f0fu), x.lo.x, s);
        s     = __dp4a(static_cast<int>((w.x >> 4) & 0x0f0f0f0fu), x.hi.x, s);
        s     = __dp4a(static_cast<int>(w.y & 0x0f0f0f0fu), x.lo.y, s);
        s     = __dp4a(static_cast<int>((w.y >> 4) & 0x0f0f0f0fu), x.hi.y, s);
        s     = __dp4a(static_cast<int>(w.z & 0x0f0f0f0fu), x.lo.z, s);
        s     = __dp4a(static_cast<int>((w.z >> 4) & 0x0f0f0f0fu), x.hi.z, s);
        s     = __dp4a(static_cast<int>(w.w & 0x0f0f0f0fu), x.lo.w, s);
        s     = __dp4a(static_cast<int>((w.w >> 4) & 0x0f0f0f0fu), x.hi.w, s);
        const float d = cu_half(static_cast<ember_half>(sc & 0xffffu));
        const float z = cu_half(static_cast<ember_half>(sc >> 16));
        return d * (x.ds.x * static_cast<float>(s) - z * x.ds.y);
    }
};
template <> struct mx<EMBER_TYPE_INT4> : mx_int4<128> {};
template <> struct mx<EMBER_TYPE_INT4_G32> : mx_int4<32> {};

template <> struct mx<EMBER_TYPE_NF4> {  // 2 chunks per block
    struct sc_t {
        uint32_t aq;
        float2   hd;  // scale2, offset
    };
    using xs_t = x_nf4;
    // (The absmax computed here instead, one register instead of three, measured 6% slower on
    // the 8B shape: the table lookup then waits for the scale loads before the weights are used.)
    static __device__ __forceinline__ sc_t load_sc(const uint8_t * s, const uint8_t * h, int64_t g, int nb, int ng, int c) {
        const int b = c >> 1;
        return {__ldg(s + g * nb + b), __ldg(reinterpret_cast<const float2 *>(h) + g * ng + (b >> 8))};
    }
    static __device__ __forceinline__ xs_t load_x(const x_src & x, int c) { return load_x_nf4(x, c); }
    // The chunk's two halves' dp4a sums times their activation scales: sum x q over its 32 weights.
    // A word's nibbles 0..3 are weights i .. i + 3 of the block's first 32 (x.lo), nibbles 4..7
    // the same of its second 32 (x.hi): ember_cuda_nf4_unzip's order. Each half word goes through
    // both sign tables (nf4_lookup_np); per half of the chunk the positive and the negative sums.
    static __device__ __forceinline__ float inner(const uint4 & w, const xs_t & x) {
        const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
        const int      xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
        int            plo = 0, nlo = 0, phi = 0, nhi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t wx = wd[j] ^ 0x88888888u;
            const uint2    a  = nf4_lookup_np(wd[j], wx);
            const uint2    b  = nf4_lookup_np(wd[j] >> 16, wx >> 16);
            nlo               = __dp4a(static_cast<int>(a.x), xl[j], nlo);
            plo               = __dp4a(static_cast<int>(a.y), xl[j], plo);
            nhi               = __dp4a(static_cast<int>(b.x), xh[j], nhi);
            phi               = __dp4a(static_cast<int>(b.y), xh[j], phi);
        }
        return x.dlo * cu_int_float(plo - nlo) + x.dhi * cu_int_float(phi - nhi);  // |sums| < 16 127^2
    }
    // A chunk's sum s times its block's absmax / 127.
    static __device__ __forceinline__ float scaled(float s, const sc_t & sc, const float * dyn) {
        const float absmax = __fadd_rn(__fmul_rn(dyn[sc.aq], sc.hd.x), sc.hd.y);  // as the CPU: no FMA
        return absmax * k_nf4_inv * s;
    }
    static __device__ __forceinline__ float dot(const uint4 & w, const sc_t & sc, const xs_t & x, const float * dyn) {
        return scaled(inner(w, x), sc, dyn);
    }
    // The same with the block's absmax / 127 given (mvx_glu_kernel's table): the same bits.
    static __device__ __forceinline__ float dot_scaled(const uint4 & w, float a, const xs_t & x) { return a * inner(w, x); }
    // The lookups alone, from weights only (before the PDL wait: mvx_norm_kernel DEC): a chunk's
    // 32 weights as signed int8 codebook bytes, v[0] word j = weights of x.lo word j, v[1] of x.hi.
    // Each byte has one nonzero lookup at most (p or n, nf4_lookup_np), so p - n a byte is p |
    // -n, -n a byte = (0x80 - n) ^ 0x80 (n <= 127: no borrow between bytes).
    static __device__ __forceinline__ void decode(const uint4 & w, uint4 (&v)[2]) {
        const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
        uint32_t       lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t wx = wd[j] ^ 0x88888888u;
            const uint2    a  = nf4_lookup_np(wd[j], wx);
            const uint2    b  = nf4_lookup_np(wd[j] >> 16, wx >> 16);
            lo[j]             = a.y | ((0x80808080u - a.x) ^ 0x80808080u);
            hi[j]             = b.y | ((0x80808080u - b.x) ^ 0x80808080u);
        }
        v[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        v[1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
    // dot over decode's bytes: the same integer sums (plo - nlo, phi - nhi), so the same bits.
    static __device__ __forceinline__ float dot_dec(const uint4 (&v)[2], const sc_t & sc, const xs_t & x, const float * dyn) {
        const uint32_t vl[4] = {v[0].x, v[0].y, v[0].z, v[0].w}, vh[4] = {v[1].x, v[1].y, v[1].z, v[1].w};
        const int      xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
        int            slo = 0, shi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            slo = __dp4a(static_cast<int>(vl[j]), xl[j], slo);
            shi = __dp4a(static_cast<int>(vh[j]), xh[j], shi);
        }
        return scaled(x.dlo * cu_int_float(slo) + x.dhi * cu_int_float(shi), sc, dyn);
    }
};

template <int T> struct mx_fp8 {  // 2 chunks per block
    using sc_t               = uint32_t;  // block: e; row: unused
    using xs_t               = x_f16;
    static __device__ __forceinline__ sc_t load_sc(const uint8_t * s, const uint8_t *, int64_t g, int nb, int, int c) {
        if constexpr (is_row(T)) return 0;
        else return __ldg(s + g * nb + (c >> 1));
    }
    static __device__ __forceinline__ xs_t load_x(const x_src & x, int c) { return load_x_f(x, c); }
    static __device__ __forceinline__ float dot(const uint4 & w, sc_t sc, const xs_t & x, const float *) {
        const float s = fp8_dot16<is_e4m3(T)>(w, x);
        if constexpr (is_row(T)) return s;  // the row scale multiplies the row's sum
        else return s * cu_fp8_e8m0_scale(sc);
    }
};
template <> struct mx<EMBER_TYPE_FP8_E4M3> : mx_fp8<EMBER_TYPE_FP8_E4M3> {};
template <> struct mx<EMBER_TYPE_FP8_E5M2> : mx_fp8<EMBER_TYPE_FP8_E5M2> {};
template <> struct mx<EMBER_TYPE_FP8_E4M3_ROW> : mx_fp8<EMBER_TYPE_FP8_E4M3_ROW> {};
template <> struct mx<EMBER_TYPE_FP8_E5M2_ROW> : mx_fp8<EMBER_TYPE_FP8_E5M2_ROW> {};

struct mvx_args {
    // Up to k_group matrices of one type and width (blocks [blk0[m], blk0[m + 1]) of grid.x);
    // one matrix may be batched (grid.z, broadcast as MUL_MAT does).
    int             nmat;
    int             blk0[k_group + 1];
    const uint8_t * q[k_group];
    const uint8_t * s[k_group];
    const uint8_t * h[k_group];
    int64_t         n[k_group];
    char *          y[k_group];
    int64_t         y_nb1[k_group];
    int64_t         y_nb2, y_nb3;
    int64_t         w_ne2, bcast2, bcast3;
    int64_t         rowq, k;
    int             nb, ng, nchunk;
    const int8_t *  xq;
    const float2 *  xds;
    const char *    xf;
    int64_t         x_nb1, x_nb2, x_nb3;
    int64_t         x_ne1, x_ne2;
    bool            xal;
    // Units (ember_cuda_mv_unit; 2-D, one launch per layer's Q, K, V): each matrix's store
    // through its epilogue (cuda-matvec-epi.cuh), rows paired for a NEOX RoPE (neox_hd).
    bool            has_epi;
    int             neox_hd[k_group];
    mv_epi          epi[k_group];
    int *           err;
    ember_cuda_norm_scale ns;  // mvx_kernel, mvx_fp8_mma_kernel NS: the norm (x is a norm-in-product copy)
};

// A kernel parameter of matrix m (a select chain: no dynamic indexing of kernel parameters).
template <typename V> __device__ __forceinline__ V pick(const V (&v)[k_group], int m) {
    return m == 0 ? v[0] : m == 1 ? v[1] : v[2];
}

// Registers (ptxas, sm_90, two rows per warp, U = 4): INT4 93, NF4 167 (95 at U = 2, NF4's
// default since session 46), FP8 118. Limiting them (__launch_bounds__ with 4-5 blocks per SM:
// NF4 123, FP8 90; before the sign-table lookup) measured no faster on the 8B
// shape (FP8 4% slower, NF4 level) and 2% either way on the 1B one, so there is no limit.
// KS > 1: the KS warps of a block share their R rows, each summing a contiguous KS-th of the
// chunks (rows longer than one step of U chunks per lane: all of a warp's loads in flight at
// once, as mvr_split_kernel), the parts meeting in shared memory in a fixed order.
// NS: x is a norm-in-product copy (mvx_norm_kernel's or another producer's), the norm's scale
// still to apply to the rows' sums (a.ns).
template <int T, int R, int U, int KS, bool NS = false, int MINB = 0>
__global__ void __launch_bounds__(32 * k_warps, MINB) mvx_kernel(const mvx_args a) {
    using D = mx<T>;
    static_assert(k_warps % KS == 0, "warps per row");
    __shared__ float dyn[T == EMBER_TYPE_NF4 ? 256 : 1];
    if constexpr (T == EMBER_TYPE_NF4) {  // constant data: before cu_pdl_begin() is fine
        for (int i = threadIdx.x; i < 256; i += 32 * k_warps) dyn[i] = cu_nf4_dyn.v[i];
        __syncthreads();
    }
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, part = wi % KS;
    // The matrix of this block (locals: writing to `a` would copy the parameters to the stack).
    const int       m      = a.nmat > 2 && blockIdx.x >= static_cast<unsigned>(a.blk0[2]) ? 2
                             : a.nmat > 1 && blockIdx.x >= static_cast<unsigned>(a.blk0[1]) ? 1 : 0;
    const int       bx     = static_cast<int>(blockIdx.x) - (m == 0 ? 0 : m == 1 ? a.blk0[1] : a.blk0[2]);
    const uint8_t * wq     = pick(a.q, m);
    const uint8_t * ws     = pick(a.s, m);
    const uint8_t * wh     = pick(a.h, m);
    const int64_t   n      = pick(a.n, m);
    char *          y_data = pick(a.y, m);
    const int64_t   y_nb1  = pick(a.y_nb1, m);
    const int64_t   row0   = (static_cast<int64_t>(bx) * (k_warps / KS) + wi / KS) * R;
    if (KS == 1 && row0 >= n) return;  // no block-wide synchronization below (KS > 1: read, discard)
    int64_t rows[R];
    mv_rows<R>(row0, a.has_epi ? pick(a.neox_hd, m) : 0, rows);
    const int64_t col = blockIdx.y;
    int64_t       i2 = 0, i3 = 0, wm = 0;
    if (gridDim.z > 1) {
        i2 = blockIdx.z % a.x_ne2;
        i3 = blockIdx.z / a.x_ne2;
        wm = i2 / a.bcast2 + (i3 / a.bcast3) * a.w_ne2;
    }
    const int64_t v = col + a.x_ne1 * blockIdx.z;
    x_src         xs;
    xs.q     = a.xq ? a.xq + v * a.k : nullptr;
    xs.ds    = a.xds ? a.xds + v * (a.k / 32) : nullptr;
    xs.f     = a.xf ? reinterpret_cast<const float *>(a.xf + col * a.x_nb1 + i2 * a.x_nb2 + i3 * a.x_nb3) : nullptr;
    xs.f16al = a.xal;
    const uint4 * wr[R];
    int64_t       gr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        gr[r] = wm * n + (rows[r] < n ? rows[r] : n - 1);  // tail rows: read, discard
        wr[r] = reinterpret_cast<const uint4 *>(wq + gr[r] * a.rowq);
    }
    const int nb = a.nb, ng = a.ng;
    const int per = KS == 1 ? a.nchunk : (a.nchunk + KS - 1) / KS;
    const int c_begin = part * per, c_end = KS == 1 ? a.nchunk : min(a.nchunk, c_begin + per);
    float     rs[R];  // _ROW: the row scales
#pragma unroll
    for (int r = 0; r < R; r++) rs[r] = is_row(T) ? __ldg(reinterpret_cast<const float *>(ws) + gr[r]) : 1.0f;
    float                acc[R] = {};
    uint4                w[U][R];
    typename D::sc_t     sc[U][R];
    const auto           load = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int  c  = c0 + 32 * u;
            const bool ok = c < c_end;
#pragma unroll
            for (int r = 0; r < R; r++) {
                w[u][r]  = ok ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
                sc[u][r] = ok ? D::load_sc(ws, wh, gr[r], nb, ng, c) : typename D::sc_t{};
            }
        }
    };
    load(c_begin + lane);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
        if (c0 != c_begin + lane) load(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c < c_end) {
                const typename D::xs_t x = D::load_x(xs, c);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if constexpr ((T == EMBER_TYPE_INT4 || T == EMBER_TYPE_INT4_G32) && U < 4) acc[r] += D::dot_shifted(w[u][r], sc[u][r], x);
                    else acc[r] += D::dot(w[u][r], sc[u][r], x, dyn);
                }
            }
        }
    }
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; r++) sum[r] = cu_warp_sum(acc[r]);
    if constexpr (NS) {
        const float sc = mv_norm_scale(a.ns, lane);
#pragma unroll
        for (int r = 0; r < R; r++) sum[r] *= sc;
    }
    if constexpr (KS > 1) {
        __shared__ float parts[k_warps][R];
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) parts[wi][r] = sum[r];
        }
        __syncthreads();
        if (part != 0 || row0 >= n) return;
#pragma unroll
        for (int r = 0; r < R; r++) {
            sum[r] = parts[wi][r];
#pragma unroll
            for (int k = 1; k < KS; k++) sum[r] += parts[wi + k][r];
        }
    }
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++) sum[r] = is_row(T) ? sum[r] * rs[r] : sum[r];
    if (a.has_epi) {  // 2-D units: no batch offsets
        mv_store_epi_of3<R>(a.epi, m, y_data, y_nb1, n, col, rows, sum, a.err);
        return;
    }
    float * yc = reinterpret_cast<float *>(y_data + col * y_nb1 + i2 * a.y_nb2 + i3 * a.y_nb3);
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (rows[r] < n) yc[rows[r]] = sum[r];
    }
}

// INT4 Q / K / V units of rows of 128 chunks with every weight requested before the PDL wait
// (EMBER_CUDA_EXT_INT4_HALVES=1, int4_halves): a block's 8 rows (mvx_kernel<INT4, 2, ...>'s grid)
// go to two pairs of warps; warp w takes rows 4 (w / 2) .. + 3 (two RoPE pairs, mv_rows) over
// half of each row, chunks 64 (w % 2) + lane + 32 u (u < 2), so each x load serves 4 rows: 40
// registers of weights and scales a lane, all loaded before the wait. The second half's warp hands
// its 4 sums to the first's through shared memory. Units (a.has_epi) over one column of x only.
template <bool NS>
__global__ void __launch_bounds__(32 * k_warps, 6) mvx_int4_halves_kernel(const mvx_args a) {
    using D = mx<EMBER_TYPE_INT4>;
    const int       lane = threadIdx.x % 32, wi = threadIdx.x / 32, pg = wi / 2, hf = wi % 2;
    const int       m    = a.nmat > 2 && blockIdx.x >= static_cast<unsigned>(a.blk0[2]) ? 2
                           : a.nmat > 1 && blockIdx.x >= static_cast<unsigned>(a.blk0[1]) ? 1 : 0;
    const int       bx   = static_cast<int>(blockIdx.x) - (m == 0 ? 0 : m == 1 ? a.blk0[1] : a.blk0[2]);
    const int64_t   n    = pick(a.n, m);
    const int64_t   l0   = static_cast<int64_t>(bx) * (2 * k_warps) + 4 * pg;  // the warp's first logical row
    if (l0 >= n) return;  // both warps of the pair
    int64_t rows[4];  // two RoPE pairs: rows 0, 1 and 2, 3
    mv_halves_rows(l0, pick(a.neox_hd, m), rows);
    uint4    w[2][4];
    uint32_t sc[2][4];
    {
        const uint8_t * wq = pick(a.q, m);
        const uint8_t * ws = pick(a.s, m);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t g = rows[r] < n ? rows[r] : n - 1;  // (tail rows: read, discard)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int c = 64 * hf + lane + 32 * u;
                w[u][r]     = __ldcs(reinterpret_cast<const uint4 *>(wq + g * a.rowq) + c);
                sc[u][r]    = D::load_sc(ws, nullptr, g, a.nb, a.ng, c);
            }
        }
    }
    cu_pdl_begin();  // (weights only before it)
    x_src xs;
    xs.q = a.xq;
    xs.ds = a.xds;
    float s[4] = {};
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const D::xs_t x = D::load_x(xs, 64 * hf + lane + 32 * u);
#pragma unroll
        for (int r = 0; r < 4; r++) s[r] += D::dot(w[u][r], sc[u][r], x, nullptr);
    }
    if (!mv_halves_meet<NS>(s, pg, hf, lane, a.ns)) return;
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const int64_t rp[2] = {rows[2 * p], rows[2 * p + 1]};
        float         sp[2] = {s[2 * p], s[2 * p + 1]};
        // (the select chain written out: through mv_store_epi_of3 this kernel's code changes)
        if (m == 0) mv_store_epi<2>(a.epi[0], pick(a.y, m), pick(a.y_nb1, m), n, blockIdx.y, rp, sp, a.err);
        else if (m == 1) mv_store_epi<2>(a.epi[1], pick(a.y, m), pick(a.y_nb1, m), n, blockIdx.y, rp, sp, a.err);
        else mv_store_epi<2>(a.epi[2], pick(a.y, m), pick(a.y_nb1, m), n, blockIdx.y, rp, sp, a.err);
    }
}

// FP8 weights on tensor cores (sm_80+; mvx_fp8_mma_kernel). mvx_kernel's FP8 path converts
// each code to a float and spends a float multiply-add on it: ~3 instructions a weight byte,
// which held the 8B shape at ~2 TB/s (47% of an H200's bandwidth). Here a warp takes 16 rows
// and each mma.m16n8k16 multiplies 16 rows x 16 codes (converted to F16 pairs, exact) with the
// x values of those columns (rounded to F16), summing in F32. The 8 columns of the mma's B
// operand are the 8 blocks of 32 of a 256-wide span of the row: column n holds x where the k
// index belongs to block n and 0 elsewhere, so C[row][n] is the row's sum over block n alone,
// which the block's E8M0 scale then multiplies (one FMA per row and block). Per warp and span:
// 8 16-byte weight loads per lane (rows g and g + 8 of the mma's row groups, chunk 4 j + t of
// the span for load j), 64 conversions, 16 mma, against ~600 instructions for the same bytes
// in mvx_kernel. x goes through F16 (|x| above 65504 would become infinite; activations of a
// model never come near).
//
// Lane (g, t) = (lane / 4, lane % 4). Its load j holds chunk c = 16 sp + 4 j + t (16 codes),
// whose word s (4 codes) feeds step (j, s): codes 0, 1 as the mma's k = 2t, 2t+1 and codes 2, 3
// as k = 2t+8, 2t+9 (any k order works when A and B agree). Chunk c lies in block 2 j + t / 2
// of the span, so B's column g is nonzero only in load j = g / 2 and for t / 2 = g % 2: each
// lane converts the 16 x values of that one chunk. C's c0, c1 are row g's columns 2t, 2t + 1.
constexpr int k_fp8_mma_warps = 8;  // warps of a block, all on the same 16 rows (k split 8 ways)

template <bool E4M3> __device__ __forceinline__ uint32_t fp8x2_half2(uint32_t two) {  // codes in the low 16 bits
    if constexpr (E4M3) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
        return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
    } else {
        return __byte_perm(two, 0u, 0x1404);  // each code as the top byte of a half
    }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // (the kernel's body is empty below sm_80)
__device__ __forceinline__ uint32_t f2_half2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t *>(&h);
}

// The weight row of logical row l of a unit launch: logical rows 2p, 2p + 1 are the pair mv_rows
// gives (with a NEOX RoPE over heads of neox_hd the rotated pair hd / 2 apart, else 2p, 2p + 1).
__device__ __forceinline__ int64_t mvx_pair_row(int64_t l, int neox_hd) {
    int64_t rows[2];
    mv_rows<2>(l - l % 2, neox_hd, rows);
    return l % 2 ? rows[1] : rows[0];
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // (cu_mma_16816: the device pass only)
// One warp's part of rows a / b (wa / wb: their weights, sra / srb: their E8M0 block scales; unused
// for row-scaled types) over spans [sp0, sp1): acc_a / acc_b, this lane's sums over blocks 2t,
// 2t + 1 of each span (the 4 lanes of a row group: its 8 block columns), before any shuffle.
// x: xf's floats (xal: 16-byte aligned); NS: an FP8 producer's copy (mvx_fp8_norm_kernel: w x
// before the norm's scale), times the scale, which warp 0 of the block computes from the partial
// sums while the first span's x loads are in flight (every thread of the block calls this: a
// barrier). The first span's weight loads before the PDL wait.
// A span's 4 scale bytes a lane are requested with its weights, unconditionally (the index
// clamped, the value dropped past nb): as `ok ? load : 0` the compiler made each a branch whose
// conversion waited for it, 4 round trips a span one after the other (ncu, 8B shape: warps ~55%
// of their cycles on L1TEX, 0.47 eligible a scheduler).
// PIPE: two buffers, the next span's weights and scales requested before this span's math (a
// warp's loads in flight through its math). Without it the next span's loads wait for this
// span's math; issuing two spans' loads together (116-124 registers) was slower (session 27, H200
// tg128 8B FP8 E4M3 290.3 against 315.7, 1B 1132.8 against 1187.3).
struct fp8_span_regs {
    uint4    w[2][4];  // rows a, b: loads j < 4 (chunk 16 sp + 4 j + t)
    uint32_t sr[4];    // E8M0 bytes of blocks b0, b0 + 1 (b0 = 8 sp + 2 t) of row a, then of row b
};
template <int T, bool NS, bool PIPE = false>
__device__ __forceinline__ void fp8_mma_spans(const uint4 * wa, const uint4 * wb, const uint8_t * sra, const uint8_t * srb, const float * xf,
                                              bool xal, const ember_cuda_norm_scale & ns, int nchunk, int nb, int sp0, int sp1, int wi, int g,
                                              int t, float & acc_a, float & acc_b) {
    const int  xj  = g / 2;          // the load whose chunk's block is B's column g
    const bool xon = t / 2 == g % 2;  // ... for this lane's t
    const auto load = [&](fp8_span_regs & r, int sp) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int  c  = 16 * sp + 4 * j + t;
            const bool ok = c < nchunk;
            r.w[0][j]     = ok ? __ldcs(wa + c) : make_uint4(0, 0, 0, 0);
            r.w[1][j]     = ok ? __ldcs(wb + c) : make_uint4(0, 0, 0, 0);
        }
        if constexpr (!is_row(T)) {
            const int b0 = 8 * sp + 2 * t, i0 = min(b0, nb - 1), i1 = min(b0 + 1, nb - 1);
            r.sr[0]      = __ldg(sra + i0);
            r.sr[1]      = __ldg(sra + i1);
            r.sr[2]      = __ldg(srb + i0);
            r.sr[3]      = __ldg(srb + i1);
        }
    };
    // x of chunk 16 sp + 4 xj + t as F16 pairs (zero where this lane's B is 0), times sc (NS).
    uint32_t   xh[8];
    const auto fetch = [&](int sp, float sc) {
        const int cx = 16 * sp + 4 * xj + t;
        if (xon && cx < nchunk) {
            const float * p = xf + 16 * static_cast<int64_t>(cx);
            if (xal) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 v = __ldg(reinterpret_cast<const float4 *>(p) + i);
                    xh[2 * i]      = NS ? f2_half2(v.x * sc, v.y * sc) : f2_half2(v.x, v.y);
                    xh[2 * i + 1]  = NS ? f2_half2(v.z * sc, v.w * sc) : f2_half2(v.z, v.w);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    xh[i] = NS ? f2_half2(__ldg(p + 2 * i) * sc, __ldg(p + 2 * i + 1) * sc) : f2_half2(__ldg(p + 2 * i), __ldg(p + 2 * i + 1));
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) xh[i] = 0u;
        }
    };
    // Span sp's products from its loads r (x in xh).
    const auto math = [&](const fp8_span_regs & r, int sp) {
        // The block scales of this lane's C columns: blocks 8 sp + 2t, + 1 of rows a, b.
        float     sa[2], sb[2];
        const int b0 = 8 * sp + 2 * t;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if constexpr (is_row(T)) {
                sa[i] = sb[i] = 1.0f;
            } else {
                const bool ok = b0 + i < nb;
                sa[i]         = ok ? cu_fp8_e8m0_scale(static_cast<uint8_t>(r.sr[i])) : 0.0f;
                sb[i]         = ok ? cu_fp8_e8m0_scale(static_cast<uint8_t>(r.sr[2 + i])) : 0.0f;
            }
        }
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t wa4[4] = {r.w[0][j].x, r.w[0][j].y, r.w[0][j].z, r.w[0][j].w};
            const uint32_t wb4[4] = {r.w[1][j].x, r.w[1][j].y, r.w[1][j].z, r.w[1][j].w};
#pragma unroll
            for (int s4 = 0; s4 < 4; s4++) {
                const uint32_t af[4] = {fp8x2_half2<is_e4m3(T)>(wa4[s4]), fp8x2_half2<is_e4m3(T)>(wb4[s4]),
                                        fp8x2_half2<is_e4m3(T)>(wa4[s4] >> 16), fp8x2_half2<is_e4m3(T)>(wb4[s4] >> 16)};
                const bool     on    = j == xj;
                cu_mma_16816(c, af, on ? xh[2 * s4] : 0u, on ? xh[2 * s4 + 1] : 0u);
            }
        }
        acc_a = fmaf(c[0], sa[0], fmaf(c[1], sa[1], acc_a));
        acc_b = fmaf(c[2], sb[0], fmaf(c[3], sb[1], acc_b));
    };
    fp8_span_regs ra;
    if (sp0 < sp1) load(ra, sp0);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    float sc = 1.0f;
    if constexpr (NS) {  // the scale (warp 0, a barrier), the first span's x loads in flight meanwhile
        __shared__ float scale;
        const int        cx = 16 * sp0 + 4 * xj + t;
        float4           v[4];
        if (sp0 < sp1 && xon && cx < nchunk) {
            const float * p = xf + 16 * static_cast<int64_t>(cx);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                v[i] = xal ? __ldg(reinterpret_cast<const float4 *>(p) + i)
                           : make_float4(__ldg(p + 4 * i), __ldg(p + 4 * i + 1), __ldg(p + 4 * i + 2), __ldg(p + 4 * i + 3));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (wi == 0) {
            const float s = mv_norm_scale(ns, 4 * g + t);  // (4 g + t: the lane)
            if (g == 0 && t == 0) scale = s;
        }
        __syncthreads();
        sc = scale;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            xh[2 * i]     = f2_half2(v[i].x * sc, v[i].y * sc);
            xh[2 * i + 1] = f2_half2(v[i].z * sc, v[i].w * sc);
        }
    }
    if constexpr (PIPE) {  // spans sp0, sp0 + 1 in ra, rb alternately, the next one's loads before the math
        fp8_span_regs rb;
        for (int sp = sp0; sp < sp1; sp += 2) {
            if (sp + 1 < sp1) load(rb, sp + 1);
            if (!NS || sp != sp0) fetch(sp, sc);
            math(ra, sp);
            if (sp + 1 >= sp1) break;
            if (sp + 2 < sp1) load(ra, sp + 2);
            fetch(sp + 1, sc);
            math(rb, sp + 1);
        }
    } else {
        for (int sp = sp0; sp < sp1; sp++) {
            if (sp != sp0) load(ra, sp);
            if (!NS || sp != sp0) fetch(sp, sc);
            math(ra, sp);
        }
    }
}
#endif

// The k split of a block of mvx_fp8_mma_kernel's form (its W warps, k_fp8_mma_warps but for the
// 4-warp units, on the same 16 rows, each a contiguous share of the row's 256-weight spans): warp
// wi's spans [sp0, sp1).
struct fp8_split {
    int sp0, sp1;
};
template <int W = k_fp8_mma_warps>
[[maybe_unused]] __device__ __forceinline__ fp8_split fp8_split_of(int wi, int nchunk) {  // (unused below sm_80)
    const int nspan = (nchunk + 15) / 16;
    const int per   = (nspan + W - 1) / W;
    fp8_split s;
    s.sp0 = wi * per;
    s.sp1 = min(nspan, s.sp0 + per);
    return s;
}

// The first half of fp8_mma_meet (every thread of the block calls it: a barrier): the 4 lanes of a
// row group hold its 8 block columns, summed by shuffles; warp wi's row r sum (r: rows g, g + 8 as
// 0-15) into parts[wi][r]. mvx_nf4_glu32_kernel meets its warps its own way after it.
template <int W>
[[maybe_unused]] __device__ __forceinline__ void fp8_mma_parts(float acc_a, float acc_b, int wi, int lane,  // (unused below sm_80)
                                                               float (&parts)[W][16]) {
    const int g = lane / 4, t = lane % 4;
    acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);
    acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 2);
    acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
    acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 2);
    if (t == 0) {
        parts[wi][g]     = acc_a;
        parts[wi][g + 8] = acc_b;
    }
    __syncthreads();
}
// The end of fp8_mma_spans' sums (every thread of the block calls it: a barrier): fp8_mma_parts,
// then the block's warps meet in shared memory. Returns row r's sum to lane r < 16 of warp 0, the
// warps' parts in order; 0 to the other lanes.
template <int W = k_fp8_mma_warps>
[[maybe_unused]] __device__ __forceinline__ float fp8_mma_meet(float acc_a, float acc_b, int wi, int lane) {  // (unused below sm_80)
    __shared__ float parts[W][16];
    fp8_mma_parts(acc_a, acc_b, wi, lane, parts);
    float sum = 0.0f;
    if (wi == 0 && lane < 16) {
        sum = parts[0][lane];
#pragma unroll
        for (int k = 1; k < W; k++) sum += parts[k][lane];
    }
    return sum;
}

// EPI: units (ember_cuda_mv_unit, 2-D): the 16 rows are 8 RoPE pairs (mvx_pair_row) and lanes
// 0, 2, .., 14 of warp 0 store a pair each through the matrix's epilogue.
// NS: x is an FP8 producer's norm-in-product copy (one column at a.xf; a.ns: the norm's scale
// applied to it, fp8_mma_spans).
// PIPE: fp8_mma_spans' two buffers (EMBER_CUDA_FP8_MMA_PIPE).
// W: warps a block (the k split), 8 or 4. W = 4 (fp8_mma_w4_mode: the units of a launch whose 8-warp
// blocks are over one wave, the 8B shape's Q / K / V, 384 blocks at 2 an SM): 4 blocks an SM at the
// same registers (capped at 128), every block in one wave, each warp twice the spans.
template <int T, bool EPI, bool NS = false, bool PIPE = false, int W = k_fp8_mma_warps>
__global__ void __launch_bounds__(32 * W, W == k_fp8_mma_warps ? 0 : 4) mvx_fp8_mma_kernel(const mvx_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const int     lane = threadIdx.x % 32, wi = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int     m    = a.nmat > 2 && blockIdx.x >= static_cast<unsigned>(a.blk0[2]) ? 2
                         : a.nmat > 1 && blockIdx.x >= static_cast<unsigned>(a.blk0[1]) ? 1 : 0;
    const int       bx     = static_cast<int>(blockIdx.x) - (m == 0 ? 0 : m == 1 ? a.blk0[1] : a.blk0[2]);
    const uint8_t * wq     = pick(a.q, m);
    const uint8_t * ws     = pick(a.s, m);
    const int64_t   n      = pick(a.n, m);
    char *          y_data = pick(a.y, m);
    const int64_t   y_nb1  = pick(a.y_nb1, m);
    const fp8_split sp     = fp8_split_of<W>(wi, a.nchunk);
    const int64_t   r0     = static_cast<int64_t>(bx) * 16;
    const int64_t   col    = blockIdx.y;
    int64_t         i2 = 0, i3 = 0, wm = 0;
    if (gridDim.z > 1) {
        i2 = blockIdx.z % a.x_ne2;
        i3 = blockIdx.z / a.x_ne2;
        wm = i2 / a.bcast2 + (i3 / a.bcast3) * a.w_ne2;
    }
    const float * xf = reinterpret_cast<const float *>(a.xf + col * a.x_nb1 + i2 * a.x_nb2 + i3 * a.x_nb3);
    // Rows g and g + 8 of the 16 (rows past n: the last row read, the sums dropped).
    const int     nx    = EPI ? pick(a.neox_hd, m) : 0;
    const int64_t ga    = wm * n + min(EPI ? mvx_pair_row(r0 + g, nx) : r0 + g, n - 1);
    const int64_t gb    = wm * n + min(EPI ? mvx_pair_row(r0 + g + 8, nx) : r0 + g + 8, n - 1);
    float         acc_a = 0.0f, acc_b = 0.0f;  // rows g, g + 8
    fp8_mma_spans<T, NS, PIPE>(reinterpret_cast<const uint4 *>(wq + ga * a.rowq), reinterpret_cast<const uint4 *>(wq + gb * a.rowq),
                               ws + ga * a.nb, ws + gb * a.nb, xf, a.xal, a.ns, a.nchunk, a.nb, sp.sp0, sp.sp1, wi, g, t, acc_a, acc_b);
    float sum = fp8_mma_meet<W>(acc_a, acc_b, wi, lane);
    if constexpr (EPI) {  // lanes 0-15 of warp 0 all take part in the shuffle
        if (wi != 0 || lane >= 16) return;
        const int64_t row = mvx_pair_row(r0 + lane, nx);
        if constexpr (is_row(T)) sum *= __ldg(reinterpret_cast<const float *>(ws) + min(row, n - 1));
        const float next = __shfl_down_sync(0x0000ffffu, sum, 1);
        if (lane % 2 != 0 || r0 + lane >= n) return;
        int64_t rows[2];
        mv_rows<2>(r0 + lane, nx, rows);
        float s2[2] = {sum, next};
        mv_store_epi_of3<2>(a.epi, m, y_data, y_nb1, n, col, rows, s2, a.err);
        return;
    }
    if (wi != 0 || lane >= 16 || r0 + lane >= n) return;
    if constexpr (is_row(T)) sum *= __ldg(reinterpret_cast<const float *>(ws) + wm * n + r0 + lane);
    reinterpret_cast<float *>(y_data + col * y_nb1 + i2 * a.y_nb2 + i3 * a.y_nb3)[r0 + lane] = sum;
#endif
}

// The codebook's dynamic map (cu_nf4_dyn) into a block's shared memory, then a barrier (every
// thread calls it; constant data: before the PDL wait).
[[maybe_unused]] __device__ __forceinline__ void nf4_dyn_to_shared(float (&dyn)[256]) {  // (unused below sm_80)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) dyn[i] = cu_nf4_dyn.v[i];
    __syncthreads();
}

// NF4 on tensor cores (EMBER_CUDA_NF4_MMA=1, opt-in; session 46: written and compiled, not yet
// run on a GPU). mvx_fp8_mma_kernel's form (16 rows a block, its 8 warps splitting the row's spans
// of 256 weights, fp8_mma_meet) over int8 mma.m16n8k32: lane (g, t) takes NF4 block t of each span
// (4 blocks, 32 bytes a row) of rows g and g + 8, and per step s (8 a span) gives A the 8 weights
// of its block in its k slots (4t..4t+3: word 2 (s % 4), 16+4t..16+4t+3: word 2 (s % 4) + 1, the
// low half-words for s < 4, the high ones after: ember_cuda_nf4_unzip's order), through the sign
// tables (nf4_lookup_np: one mma with the positive bytes, one with the negative magnitudes, their
// int32 sums subtracted). B's column n is x block n of the span (x's 8-bit copy, block 8 sp + n),
// nonzero only in the k slots of lane group t = n / 2 and the steps of its half (n % 2): so C's
// column 2t + h holds each row's exact int32 sum over half h of block t, which lane (g, t) holds as
// c0 / c1 (row g) and c2 / c3 (row g + 8), scaled there by the block's absmax / 127 and the two x
// blocks' scales. Lookups: ~7 instructions a word of 8 weights (no dp4a). NS: x is an 8-bit
// norm-in-product copy, the norm's scale applied to the rows' sums at the end (as mvx_kernel).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ void cu_mma_s8_16832(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Word k (0..7) of a block's 32 bytes held as two uint4.
__device__ __forceinline__ uint32_t nf4_word(const uint4 (&b)[2], int k) {
    const uint4 & v = b[k / 4];
    return k % 4 == 0 ? v.x : k % 4 == 1 ? v.y : k % 4 == 2 ? v.z : v.w;
}

// One step of nf4_mma_spans: A = wv (rows a, b of word k0, then of word k0 + 1) at half h through
// both sign tables, B = x words k0, k0 + 1 where this lane's column is on (xon, and half h its x
// block's): the positive bytes into cp, the negative magnitudes into cn.
__device__ __forceinline__ void nf4_mma_step(int (&cp)[4], int (&cn)[4], const uint32_t (&wv)[4], int h, bool xon, int g, const uint32_t (&xw)[8],
                                             int k0) {
    uint32_t ap[4], an[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t sel = h ? wv[i] >> 16 : wv[i];
        const uint2    np  = nf4_lookup_np(sel, sel ^ 0x8888u);
        an[i]              = np.x;
        ap[i]              = np.y;
    }
    const bool on = xon && (g & 1) == h;
    cu_mma_s8_16832(cp, ap, on ? xw[k0] : 0u, on ? xw[k0 + 1] : 0u);
    cu_mma_s8_16832(cn, an, on ? xw[k0] : 0u, on ? xw[k0 + 1] : 0u);
}

// A span's int32 sums (nf4_mma_step's cp - cn) into acc_a / acc_b: times the blocks' absmax / 127
// (aq: absmax_q byte, hd: the group's scale2, offset) and the x blocks' scales d0 / d1.
__device__ __forceinline__ void nf4_mma_span_end(const int (&cp)[4], const int (&cn)[4], const float * dyn, uint32_t aqa, uint32_t aqb, float2 hda,
                                                 float2 hdb, float d0, float d1, float & acc_a, float & acc_b) {
    const float ma = __fadd_rn(__fmul_rn(dyn[aqa], hda.x), hda.y) * k_nf4_inv;  // as the CPU: no FMA
    const float mb = __fadd_rn(__fmul_rn(dyn[aqb], hdb.x), hdb.y) * k_nf4_inv;
    acc_a          = fmaf(ma, d0 * cu_int_float(cp[0] - cn[0]) + d1 * cu_int_float(cp[1] - cn[1]), acc_a);
    acc_b          = fmaf(mb, d0 * cu_int_float(cp[2] - cn[2]) + d1 * cu_int_float(cp[3] - cn[3]), acc_b);
}

// One warp's part of rows a / b (qa / qb: their quant bytes, sa / sb: absmax_q bytes, ha / hb: group
// headers) over spans [sp0, sp1) of 256 weights: acc_a / acc_b, this lane's sums over its block
// t of each span (x blocks 2t, 2t + 1: fp8_mma_meet's columns), before any shuffle. xq / xds: x's
// 8-bit copy and its (d, d sum q) per 32. The first span's weight loads before the PDL wait.
// (The next span's loads before a span's math, two register sets, 80 registers with a 12-byte
// spill, measured slower in the gate / up launch: 8B NF4 tg128 492.8 -> 466.8, 1B 1983.9 -> 1702.8,
// against 511.4 / 1826.3 without; session 47.)
// PF (measuring): the weight loads' L2 requests widened to PF-byte segments (cu_ldcs_pf). IL: every
// other span from sp0 (sp0, sp0 + 2, ..), not each.
template <int PF = 0, bool IL = false>
__device__ __forceinline__ void nf4_mma_spans(const uint8_t * qa, const uint8_t * qb, const uint8_t * sa, const uint8_t * sb, const float2 * ha,
                                              const float2 * hb, const float * dyn, const int8_t * xq, const float2 * xds, int nb, int sp0,
                                              int sp1, int g, int t, float & acc_a, float & acc_b) {
    struct regs {
        uint4    wa[2], wb[2];
        uint32_t aqa, aqb;
        float2   hda, hdb;
    };
    const auto load = [&](regs & r, int sp) {
        const int  bt = 4 * sp + t, bi = min(bt, nb - 1);
        const bool ok = bt < nb;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            r.wa[i] = ok ? cu_ldcs_pf<PF>(reinterpret_cast<const uint4 *>(qa + 32 * static_cast<int64_t>(bi)) + i) : make_uint4(0, 0, 0, 0);
            r.wb[i] = ok ? cu_ldcs_pf<PF>(reinterpret_cast<const uint4 *>(qb + 32 * static_cast<int64_t>(bi)) + i) : make_uint4(0, 0, 0, 0);
        }
        r.aqa = __ldg(sa + bi);  // (unconditional, the index clamped: no branch waits for them)
        r.aqb = __ldg(sb + bi);
        r.hda = __ldg(ha + (bi >> 8));
        r.hdb = __ldg(hb + (bi >> 8));
    };
    const int  nxb = 2 * nb;           // x blocks of 32 in the row
    const bool xon = (g >> 1) == t;    // this lane gives B's column g (x block g of a span)
    regs       r;
    if (sp0 < sp1) load(r, sp0);  // weights only: before waiting for the kernel that makes x
    cu_pdl_begin();
    for (int sp = sp0; sp < sp1; sp += IL ? 2 : 1) {
        if (sp != sp0) load(r, sp);
        // B: x block 8 sp + g (this lane's column) as 8 words; the C columns' scales: x blocks
        // 8 sp + 2t, + 1.
        const int xb = 8 * sp + g;
        uint32_t  xw[8];
        if (xon && xb < nxb) {
            const int4 v0 = __ldg(reinterpret_cast<const int4 *>(xq + 32 * static_cast<int64_t>(xb)));
            const int4 v1 = __ldg(reinterpret_cast<const int4 *>(xq + 32 * static_cast<int64_t>(xb)) + 1);
            xw[0] = v0.x, xw[1] = v0.y, xw[2] = v0.z, xw[3] = v0.w, xw[4] = v1.x, xw[5] = v1.y, xw[6] = v1.z, xw[7] = v1.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) xw[i] = 0u;
        }
        const int   xc = 8 * sp + 2 * t;
        const float d0 = __ldg(xds + min(xc, nxb - 1)).x, d1 = __ldg(xds + min(xc + 1, nxb - 1)).x;
        int         cp[4] = {0, 0, 0, 0}, cn[4] = {0, 0, 0, 0};
#pragma unroll
        for (int st = 0; st < 8; st++) {
            const int h = st / 4, k0 = 2 * (st % 4);
            const uint32_t wv[4] = {nf4_word(r.wa, k0), nf4_word(r.wb, k0), nf4_word(r.wa, k0 + 1), nf4_word(r.wb, k0 + 1)};
            nf4_mma_step(cp, cn, wv, h, xon, g, xw, k0);
        }
        nf4_mma_span_end(cp, cn, dyn, r.aqa, r.aqb, r.hda, r.hdb, d0, d1, acc_a, acc_b);
    }
}
#endif

// EPI / NS as mvx_fp8_mma_kernel's (NS here: the norm's scale times the rows' sums).
template <bool EPI, bool NS>
__global__ void __launch_bounds__(32 * k_fp8_mma_warps) mvx_nf4_mma_kernel(const mvx_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ float dyn[256];
    nf4_dyn_to_shared(dyn);
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int m    = a.nmat > 2 && blockIdx.x >= static_cast<unsigned>(a.blk0[2]) ? 2
                     : a.nmat > 1 && blockIdx.x >= static_cast<unsigned>(a.blk0[1]) ? 1 : 0;
    const int       bx     = static_cast<int>(blockIdx.x) - (m == 0 ? 0 : m == 1 ? a.blk0[1] : a.blk0[2]);
    const uint8_t * wq     = pick(a.q, m);
    const uint8_t * ws     = pick(a.s, m);
    const float2 *  wh     = reinterpret_cast<const float2 *>(pick(a.h, m));
    const int64_t   n      = pick(a.n, m);
    char *          y_data = pick(a.y, m);
    const int64_t   y_nb1  = pick(a.y_nb1, m);
    const fp8_split sp     = fp8_split_of(wi, 2 * a.nchunk);  // (its spans of 256 weights: 16 chunks of 16 as FP8's)
    const int64_t   r0     = static_cast<int64_t>(bx) * 16;
    const int64_t   col    = blockIdx.y;
    int64_t         i2 = 0, i3 = 0, wm = 0;
    if (gridDim.z > 1) {
        i2 = blockIdx.z % a.x_ne2;
        i3 = blockIdx.z / a.x_ne2;
        wm = i2 / a.bcast2 + (i3 / a.bcast3) * a.w_ne2;
    }
    const int64_t  v   = col + a.x_ne1 * blockIdx.z;
    const int8_t * xq  = a.xq + v * a.k;
    const float2 * xds = a.xds + v * (a.k / 32);
    const int      nx  = EPI ? pick(a.neox_hd, m) : 0;
    const int64_t  ga  = wm * n + min(EPI ? mvx_pair_row(r0 + g, nx) : r0 + g, n - 1);
    const int64_t  gb  = wm * n + min(EPI ? mvx_pair_row(r0 + g + 8, nx) : r0 + g + 8, n - 1);
    float          acc_a = 0.0f, acc_b = 0.0f;
    nf4_mma_spans(wq + ga * a.rowq, wq + gb * a.rowq, ws + ga * a.nb, ws + gb * a.nb, wh + ga * a.ng, wh + gb * a.ng, dyn, xq, xds, a.nb,
                  sp.sp0, sp.sp1, g, t, acc_a, acc_b);
    float sum = fp8_mma_meet(acc_a, acc_b, wi, lane);
    if constexpr (NS) {
        if (wi == 0) sum *= mv_norm_scale(a.ns, lane);  // (every lane of warp 0: a warp sum)
    }
    if constexpr (EPI) {  // lanes 0-15 of warp 0 all take part in the shuffle
        if (wi != 0 || lane >= 16) return;
        const float next = __shfl_down_sync(0x0000ffffu, sum, 1);
        if (lane % 2 != 0 || r0 + lane >= n) return;
        int64_t rows[2];
        mv_rows<2>(r0 + lane, nx, rows);
        float s2[2] = {sum, next};
        mv_store_epi_of3<2>(a.epi, m, y_data, y_nb1, n, col, rows, s2, a.err);
        return;
    }
    if (wi != 0 || lane >= 16 || r0 + lane >= n) return;
    reinterpret_cast<float *>(y_data + col * y_nb1 + i2 * a.y_nb2 + i3 * a.y_nb3)[r0 + lane] = sum;
#endif
}

// The gate / up products of a decode FFN with their SWIGLU for block-scaled FP8 on tensor cores
// (ember_cuda_mul_mat_vec_glu; EMBER_CUDA_MV_GLU_FP8=0: not): mvx_fp8_mma_kernel's product whose
// 16 rows are 8 gate rows (g) and the same 8 up rows (g + 8), so lane r < 8 of warp 0 ends with
// both sums of hidden unit u0 + r: silu(g) u as the SWIGLU kernel computes it (no
// 8-bit copy: the down product is FP8 too, reading h's floats). NS: x is an FP8 producer's copy.
struct mvx_fp8_glu_args {
    const uint8_t *       gq, *gs, *uq, *us;  // quants (rows of rowq bytes) and E8M0 scales (nb a row)
    int64_t               rowq;
    int                   nb, nchunk;
    const float *         xf;
    bool                  xal;
    ember_cuda_norm_scale ns;
    float *               g;  // or nullptr: the gate rows' floats
    float *               u;  // or nullptr: the up rows'
    float *               h;  // silu(g) u
};

// MINB: the blocks an SM its registers are capped for (3 by default, launch_fp8_glu: 80 registers,
// 3 blocks an SM, against 90 / 101 (NS) and 2; EMBER_CUDA_FP8_GLU_OCC=0: none given).
template <int T, bool NS, bool PIPE, int MINB = 0>
__global__ void __launch_bounds__(32 * k_fp8_mma_warps, MINB) mvx_fp8_glu_kernel(const mvx_fp8_glu_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(!is_row(T), "block scales");
    const int       lane = threadIdx.x % 32, wi = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const fp8_split sp   = fp8_split_of(wi, a.nchunk);
    const int64_t   u0   = static_cast<int64_t>(blockIdx.x) * 8;  // (the units a multiple of 8)
    float           acc_g = 0.0f, acc_u = 0.0f;
    fp8_mma_spans<T, NS, PIPE>(reinterpret_cast<const uint4 *>(a.gq + (u0 + g) * a.rowq), reinterpret_cast<const uint4 *>(a.uq + (u0 + g) * a.rowq),
                               a.gs + (u0 + g) * a.nb, a.us + (u0 + g) * a.nb, a.xf, a.xal, a.ns, a.nchunk, a.nb, sp.sp0, sp.sp1, wi, g, t,
                               acc_g, acc_u);
    const float sum  = fp8_mma_meet(acc_g, acc_u, wi, lane);
    const float usum = __shfl_down_sync(0xffffffffu, sum, 8);  // lane r < 8: unit r's up sum (lane r + 8's)
    if (wi != 0 || lane >= 8) return;
    const int64_t r = u0 + lane;
    if (a.g) a.g[r] = sum;
    if (a.u) a.u[r] = usum;
    a.h[r] = sum / (1.0f + expf(-sum)) * usum;  // swiglu_flat_q_kernel's arithmetic
#endif
}

// The decode norm in the product before it (ember_cuda_mul_mat_vec_norm) for block-scaled FP8
// weights (EMBER_CUDA_MV_NORM_FP8): mvx_fp8_mma_kernel's product (16 rows a block, the same
// arithmetic: fp8_mma_spans, the same order of sums), then warp 0, lane r < 16 holding row
// r0 + r: the residual added, the ADD's floats written, the block's sum of their squares, and a
// float copy of the MUL's weights times them (no 8-bit copy: its readers are FP8 products,
// ember_cuda_mv_norm_pair_ok, mvx_fp8_mma_kernel NS, which apply the norm's scale to it).
struct mvx_fp8_norm_args {
    const uint8_t * q;  // quants, rows of rowq bytes
    const uint8_t * s;  // E8M0 block scales, nb a row
    int64_t         rowq;
    int             nb, nchunk;
    const float *   xf;  // x's floats (one column)
    bool            xal;
    const float *   res;  // the ADD's other operand
    float *         sum;  // the ADD's result
    const float *   nw;   // the MUL's weights
    float *         ov;   // out: nw * sum
    float *         osq;  // sum of sum^2 per 16 rows
};

// PIPE (fp8_norm_pipe): fp8_mma_spans' two buffers, a warp's next span requested before this one's
// math (the 8B down product: 7 spans a warp, each a round trip after the last one's math without
// it); 88 -> 128 registers, still 2 blocks an SM. H200 tg128 (session 51, one build, two runs a
// side, with the 4-warp units): 8B FP8 E4M3 408.5 -> 413.0 (the producers 12.09 -> 11.42 us and
// the gate / up launch after them 31.84 -> 30.95), 1B 1539.0 -> 1522.5 (128 blocks, one an SM: the
// down producer level at 8.6 us, the launches after it slower), so only where the grid has more
// blocks than the GPU has SMs.
template <int T, bool PIPE = false>
__global__ void __launch_bounds__(32 * k_fp8_mma_warps) mvx_fp8_norm_kernel(const mvx_fp8_norm_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(!is_row(T), "block scales");
    const int       lane = threadIdx.x % 32, wi = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int64_t   r0   = static_cast<int64_t>(blockIdx.x) * 16;
    const int64_t   ga = r0 + g, gb = r0 + g + 8;  // (the rows a multiple of 16)
    const fp8_split sp    = fp8_split_of(wi, a.nchunk);
    float           acc_a = 0.0f, acc_b = 0.0f;
    fp8_mma_spans<T, false, PIPE>(reinterpret_cast<const uint4 *>(a.q + ga * a.rowq), reinterpret_cast<const uint4 *>(a.q + gb * a.rowq), a.s + ga * a.nb,
                            a.s + gb * a.nb, a.xf, a.xal, ember_cuda_norm_scale{}, a.nchunk, a.nb, sp.sp0, sp.sp1, wi, g, t, acc_a, acc_b);
    // Warp 0's residual and MUL weight requested before the barrier (their round trip overlaps
    // the block's meeting).
    const bool  mine = wi == 0 && lane < 16;
    const float res  = mine ? a.res[r0 + lane] : 0.0f, nwr = mine ? a.nw[r0 + lane] : 0.0f;
    const float y    = fp8_mma_meet(acc_a, acc_b, wi, lane);
    if (wi != 0) return;
    float s = 0.0f;
    if (lane < 16) {
        s                = res + y;
        a.sum[r0 + lane] = s;
        a.ov[r0 + lane]  = s * nwr;
    }
    const float ss = cu_warp_sum(s * s);
    if (lane == 0) a.osq[blockIdx.x] = ss;
#endif
}

// EMBER_CUDA_FP8_MMA=0: FP8 weights through mvx_kernel's float products. Read at every call;
// off below sm_80.
bool fp8_mma_cc(int cc_major) {
    return cc_major >= 8 && ember_cuda_env_choice("EMBER_CUDA_FP8_MMA", 1, {0, 1}) == 1;
}
bool fp8_mma(const ember_cuda_ctx & ctx) {
    return fp8_mma_cc(ctx.cc_major);
}

// EMBER_CUDA_NF4_MMA=1: NF4's plain products and units on tensor cores (mvx_nf4_mma_kernel; opt-in,
// not yet measured). Read at every call (tests switch it); off below sm_80.
bool nf4_mma(const ember_cuda_ctx & ctx) {
    return ctx.cc_major >= 8 && ember_cuda_env_choice("EMBER_CUDA_NF4_MMA", 0, {0, 1}) == 1;
}

// NF4's gate / up launch on tensor cores (mvx_nf4_glu32_kernel) where the scalar one would take 4
// warps a block (warps: its grid more than 2 blocks of 8 an SM; the 8B shape): H200 tg128 8B NF4
// 492.3 -> 524.7 (session 48; the launch 26.9 -> 23.7 us a layer). Not where the scalar launch
// holds its grid in one wave of 8-warp blocks: 1B NF4 1986.2 -> 1912.4 with it (7.2 -> 9.2 us).
// EMBER_CUDA_MV_GLU_NF4_MMA=0: never, =1: at every size. Read at every call (tests switch it).
bool nf4_glu_mma(const ember_cuda_ctx & ctx, int warps) {
    if (ctx.cc_major < 8) return false;
    const int mode = ember_cuda_env_choice("EMBER_CUDA_MV_GLU_NF4_MMA", 2, {0, 1, 2});
    return mode == 2 ? warps == 4 : mode == 1;
}

// EMBER_CUDA_FP8_MMA_PIPE=1: the plain FP8 products, units and the gate / up launch on tensor cores with
// fp8_mma_spans' two buffers (a warp's next span requested before this one's math). Read at every
// call (tests switch it).
// =2: only where a warp has two spans or more (rows of nchunk chunks) and not for units.
bool fp8_mma_pipe(int nchunk, bool units) {
    const int mode = ember_cuda_env_choice("EMBER_CUDA_FP8_MMA_PIPE", 0, {0, 1, 2});
    return mode == 1 || (mode == 2 && !units && (nchunk + 15) / 16 > k_fp8_mma_warps);
}

// FP8 units in 4-warp blocks (mvx_fp8_mma_kernel W = 4; EMBER_CUDA_FP8_MMA_W4): 1 (default) where the
// 8-warp blocks of the launch do not fit one wave (the 8B shape's Q / K / V: 384 blocks at 122
// registers, 2 an SM, 1.45 waves; 4-warp ones fit 4 an SM), 2 always, 0 never. Read at every call
// (tests switch it). H200 tg128 (session 51, one build, two runs a side): 8B FP8 E4M3 399.7 ->
// 408.5, the launch 11.54 -> 10.08 us a layer; 1B (192 blocks, one wave) untouched.
int fp8_mma_w4_mode() {
    return ember_cuda_env_choice("EMBER_CUDA_FP8_MMA_W4", 1, {0, 1, 2});
}

std::atomic<long long> fp8_w4_launches{0};
std::atomic<long long> fp8_norm_pipe_launches{0};

// Blocks of Kernel (Threads threads, no dynamic shared memory) that fit an SM, for the current
// device (cached for the last device asked: device + 1 in the high half of one word, the count in
// the low half, so a reader never pairs one device's count with another's id).
template <auto Kernel, int Threads> int mma_blocks_per_sm(int device) {
    static std::atomic<uint64_t> cached{0};
    const uint64_t               c = cached.load(std::memory_order_relaxed);
    if (c >> 32 == static_cast<uint64_t>(device) + 1) return static_cast<int>(c & 0xffffffffu);
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, Threads, 0) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    cached.store((static_cast<uint64_t>(device) + 1) << 32 | static_cast<uint32_t>(std::max(n, 0)), std::memory_order_relaxed);
    return n;
}

// FP8 units (Q/K/V with their RoPE and cache writes) on the tensor-core kernel too (H200 tg128
// 8B FP8 E4M3 326.7 against 315.7 with mvx_kernel's units, 1B level: 1185.3 / 1187.3);
// EMBER_CUDA_FP8_MMA_UNITS=0: units keep mvx_kernel.
bool fp8_mma_units() {
    return ember_cuda_env_choice("EMBER_CUDA_FP8_MMA_UNITS", 1, {0, 1}) == 1;
}

// Rows of at most 64 chunks (2 a lane; the 1B shape's products from 2048 wide), INT4 and NF4:
// two rows a warp with U = 2 instead of U = 4 with two empty load slots (as mvr_kernel's short
// rows, ops-matvec-q.cu): INT4 in 64 registers (94 at U = 4), NF4 95 (167;
// NF4's long rows take U = 2 too, launch_mvx).
// EMBER_CUDA_EXT_SHORT=0: the R / U rule of launch_mvx for them too.
bool ext_short_rows() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_EXT_SHORT");
    return on;
}

// NF4's two-row warps of long rows (U = 2; the 8B Q / K / V launch, 768 blocks of 4 warps: 1.16
// waves at 5 blocks an SM, 95 registers) capped for 6 blocks an SM (80 registers, no spill), so
// the grid is one wave: the launch 9.7 -> 6.6 us (H200, 8B NF4, kernel trace; session 48).
// EMBER_CUDA_EXT_NF4_OCC=0: not. Read at every call (tests switch it).
bool nf4_occ6() {
    return ember_cuda_env_choice("EMBER_CUDA_EXT_NF4_OCC", 6, {0, 6}) == 6;
}

// INT4's two-row warps of rows past 64 chunks on one warp each (KS = 1: the 8B Q / K / V launch,
// 768 blocks of 4 warps) at U = 2 as NF4's: 72 registers, 7 blocks an SM, one wave; at U = 4 (92
// registers) 5 blocks an SM, 1.16 waves. H200 tg128 8B INT4 671.5 -> 687.6 (the launch 8.05 ->
// 7.10 us a layer; U = 4 capped for 6 blocks an SM: 80 registers with a 64-byte spill, the launch
// 6.45 us but the attention after it 3.68 -> 4.47, 687.0; session 49). EMBER_CUDA_EXT_INT4_U2=0:
// U = 4. Read at every call (tests switch it).
bool int4_long_u2() {
    return ember_cuda_env_choice("EMBER_CUDA_EXT_INT4_U2", 1, {0, 1}) == 1;
}

// INT4 Q / K / V units of rows of 128 chunks (4096 weights; the 8B shape) with every weight
// requested before the PDL wait (EMBER_CUDA_EXT_INT4_HALVES=0: not): at
// U = 2 a warp's two rows take two steps, the second's loads a memory round trip after the wait
// (the launch 7.1 us a layer for 12.6 MB, session 49); mvx_kernel<INT4, 4, 2, 2> gives a block's
// 8 rows to two pairs of warps, each warp 4 rows (two RoPE pairs, mv_rows) over half of each row in
// one step (each x load serves 4 rows), the halves meeting in shared memory: the same grid, every
// weight loaded before the wait. H200 tg128 8B INT4 684.1 -> 692.7 (session 56). Read at every
// call (tests switch it).
bool int4_halves() {
    return ember_cuda_env_choice("EMBER_CUDA_EXT_INT4_HALVES", 1, {0, 1}) == 1;
}
std::atomic<long long> int4_halves_launches{0};  // (ember_cuda_int4_halves_launches)
// NF4's decode-norm producers with their first slice's lookups before the PDL wait (mvx_norm_kernel
// DEC): by default those of one block a group of 32 rows, not the SPLIT ones (two blocks a group,
// the 1B down product: there the lookups before the wait slowed the gate / up launch beside them);
// EMBER_CUDA_MVN_NF4_DEC=0: none, =2: every one. H100 tg128 (session 72, every one): 8B NF4 507.5
// -> 519.4 (the producers 8.62 -> 8.25 us, the Q / K / V launch after the down product 8.58 ->
// 8.02), 1B 1971.5 -> 1960.5 (its O producer 4.91 -> 3.96 us, the split down producer 6.16 ->
// 6.47). Read at every call (tests switch it).
bool nf4_norm_dec(bool split) {
    const int e = ember_cuda_env_choice("EMBER_CUDA_MVN_NF4_DEC", 1, {0, 1, 2});
    return e == 2 || (e == 1 && !split);
}
std::atomic<long long> nf4_norm_dec_launches{0};  // (ember_cuda_nf4_norm_dec_launches)

// EMBER_CUDA_NF4_GLU_FORM=1..4 (measuring): NF4's gate / up launch on tensor cores in another form
// (mvx_nf4_glu32_kernel FORM); 0 (default): not. Read at every call (tests switch it).
int nf4_glu_form() {
    return ember_cuda_env_choice("EMBER_CUDA_NF4_GLU_FORM", 0, {0, 1, 2, 3, 4});
}
std::atomic<long long> nf4_glu_form_launches{0};  // (ember_cuda_nf4_glu_form_launches)

// EMBER_CUDA_EXT_SPLIT=0: every row on one warp (mvx_kernel KS = 1) however long.
bool ext_split() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_EXT_SPLIT");
    return on;
}

// NF4's absmax table (nf4_absmax_table): nrows rows of nb + k_nf4_tab_pad floats, the padding so a
// warp's 4 rows x 4 blocks fall in distinct banks; its bytes, for the launch.
constexpr int k_nf4_tab_pad = 4;
inline size_t nf4_tab_bytes(int nrows, int nb) {
    return static_cast<size_t>(nrows) * static_cast<size_t>(nb + k_nf4_tab_pad) * sizeof(float);
}

// NF4's absmax table in shared memory (mvx_glu_kernel), from weights only
// (before the PDL wait): tab[rl ts + b] = block b's absmax / 127 for the block's rows rl <
// nrows, row rl being row row0 + rl % 32 of matrix rl / 32 (s0 / h0, or s1 / h1: its absmax_q
// bytes and group headers), DYN[absmax_q] scale2 + offset as mvx_kernel computes it (the same
// bits). Rows of at most 256 blocks: one group header a row. The codebook's dynamic map and the
// rows' headers go through shared memory first; then each thread requests 8 absmax_q bytes
// before using any (one round trip per 8 entries). Every thread of the block calls it; it ends
// in a barrier.
__device__ __forceinline__ void nf4_absmax_table(float * tab, int ts, int nrows, int64_t row0, const uint8_t * s0, const uint8_t * h0,
                                                 const uint8_t * s1, const uint8_t * h1, int nb, int ng) {
    __shared__ float  dyn[256];
    __shared__ float2 hdr[64];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) dyn[i] = cu_nf4_dyn.v[i];
    for (int rl = threadIdx.x; rl < nrows; rl += blockDim.x) {  // (a block of one slice has 32 threads)
        hdr[rl] = __ldg(reinterpret_cast<const float2 *>(rl < 32 ? h0 : h1) + (row0 + rl % 32) * ng);
    }
    __syncthreads();
    const int n = nrows * nb;
    for (int i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) {
        uint32_t q[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int i = i0 + k * static_cast<int>(blockDim.x), rl = i / nb;
            q[k]        = i < n ? __ldg((rl < 32 ? s0 : s1) + (row0 + rl % 32) * nb + i % nb) : 0u;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int i = i0 + k * static_cast<int>(blockDim.x), rl = i / nb;
            if (i < n) {
                const float am         = __fadd_rn(__fmul_rn(dyn[q[k]], hdr[rl].x), hdr[rl].y);  // as the CPU: no FMA
                tab[rl * ts + i % nb] = am * k_nf4_inv;
            }
        }
    }
    __syncthreads();
}

// The decode norm in the product before it (ember_cuda_mul_mat_vec_norm) for INT4 / NF4 weights
// in the ext layout: mvr_norm_kernel's scheme (ops-matvec-q.cu) over mvx_kernel's chunks. A block
// owns 32 whole rows; its warps split the row length in slices of 8 16-byte chunks; lane l takes
// chunk l % 8 of a slice in rows 4 t + l / 8 (t = 0..7), so each x load serves 8 rows. The end
// (residual, ADD floats, the int8 copy before the norm's scale, sums of squares): mvn_block_end.
//
// SPLIT (EMBER_CUDA_MVN_SPLIT, ember_cuda_mvn_split): two blocks a group of 32 rows, block 2 g + h
// summing half of the row's slices (mvn_half), met in mvn_block_end SPLIT: a grid of n / 32
// blocks that leaves half the SMs idle (the 1B shape: 64 blocks) uses all of them, every weight of
// the 1B down product requested before the wait.
struct mvx_norm_args {
    const uint8_t * q;
    const uint8_t * s;
    const uint8_t * h;
    int64_t         rowq;
    int             nb, ng, nchunk;
    const int8_t *  xq;
    const float2 *  xds;
    mvn_out         out;
    mvn_split       split;  // SPLIT
};

// DEC (NF4, nf4_norm_dec): the warp's first slice, requested before the PDL wait, also looked up
// there (mx<NF4>::decode: 64 registers of int8 codebook bytes for its 32 of nibbles), so after the
// wait that slice costs two dp4a a word instead of four lookups and four dp4a. The same bits.
template <int T, bool SPLIT = false, bool DEC = false>
__global__ void __launch_bounds__(32 * k_mvn_max_warps, 1) mvx_norm_kernel(const mvx_norm_args a) {
    static_assert(!DEC || T == EMBER_TYPE_NF4, "DEC: NF4's lookups");
    using D = mx<T>;
    __shared__ float dyn[T == EMBER_TYPE_NF4 ? 256 : 1];
    if constexpr (T == EMBER_TYPE_NF4) nf4_dyn_to_shared(dyn);
    const int        lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int        ro = lane / 8, j = lane % 8;
    const int64_t    row0  = static_cast<int64_t>(blockIdx.x >> (SPLIT ? 1 : 0)) * k_mvn_rows;
    const int        nall  = (a.nchunk + 7) / 8;
    const int        sl0   = SPLIT ? mvn_half(nall).x : 0;  // this block's slices: sl0 .. nsl - 1
    const int        nsl   = SPLIT ? mvn_half(nall).y : nall;
    const uint4 *    wq    = reinterpret_cast<const uint4 *>(a.q + (row0 + ro) * a.rowq);
    const int64_t    qstep = 4 * a.rowq / 16;
    uint4            w[8];
    typename D::sc_t sc[8];
    const auto       load = [&](int sl, int) {  // (mvg_slices' part: both halves without PIPE)
        const int  c  = 8 * sl + j;
        const bool ok = c < a.nchunk;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            w[t]  = ok ? __ldcs(wq + t * qstep + c) : make_uint4(0, 0, 0, 0);
            sc[t] = ok ? D::load_sc(a.s, a.h, row0 + ro + 4 * t, a.nb, a.ng, c) : typename D::sc_t{};
        }
    };
    if (sl0 + wi < nsl) load(sl0 + wi, 3);  // weights only: before waiting for the kernel that makes x
    uint4 v[DEC ? 8 : 1][2];                   // DEC: the first slice's lookups
    if constexpr (DEC) {
        if (sl0 + wi < nsl) {
#pragma unroll
            for (int t = 0; t < 8; t++) {
                D::decode(w[t], v[t]);
                // (pinned here: the compiler may not sink the lookups past the wait)
                asm volatile("" : "+r"(v[t][0].x), "+r"(v[t][0].y), "+r"(v[t][0].z), "+r"(v[t][0].w));
                asm volatile("" : "+r"(v[t][1].x), "+r"(v[t][1].y), "+r"(v[t][1].z), "+r"(v[t][1].w));
            }
        }
    }
    cu_pdl_begin();
    x_src xs;
    xs.q     = a.xq;
    xs.ds    = a.xds;
    xs.f     = nullptr;
    xs.f16al = false;
    float              acc[8] = {};
    typename D::xs_t   x{};
    const auto         fetch = [&](int c) { x = D::load_x(xs, c); };
    const auto         sum   = [&](int h) {
#pragma unroll
        for (int t = 4 * h; t < 4 * h + 4; t++) acc[t] += D::dot(w[t], sc[t], x, dyn);
    };
    if constexpr (DEC) {  // the first slice (decoded), then mvg_slices' loop over the rest
        const int c = 8 * (sl0 + wi) + j;
        if (sl0 + wi < nsl && c < a.nchunk) {
            fetch(c);
#pragma unroll
            for (int t = 0; t < 8; t++) acc[t] += D::dot_dec(v[t], sc[t], x, dyn);
        }
    }
    mvg_slices<false>(wi, nw, nsl, j, a.nchunk, load, fetch, sum, sl0, DEC);
    mvn_block_end<8, SPLIT>(acc, a.out, row0, lane, wi, nw, a.split);
}

// The gate / up launch with its SWIGLU (ember_cuda_mul_mat_vec_glu, ops-matvec-q.cu) for INT4 / NF4
// weights in the ext layout (EMBER_CUDA_MV_GLU_EXT=0: not; GPU tests and numbers: sessions 40, 42):
// mvr_glu_kernel's scheme over mvx_kernel's chunks. A block of W warps owns 32 hidden units;
// warps split the row in slices of 8 16-byte chunks; lane l takes chunk l % 8 of a slice in rows
// 4 t + l / 8 (t < 8) of both matrices; the gate rows' loads before the PDL wait, the up rows'
// after it; with 4 warps (PIPE) the next slice's loads follow half a slice's arithmetic. The
// end: mvg_block_end. INT4: each chunk's (d, z) word loaded with it. NF4 (whose scale data, three
// registers a row, would not fit 16 rows): before the PDL wait the block makes a table in shared
// memory of its 64 rows' block absmax / 127 (DYN[absmax_q] scale2 + offset, as mvx_kernel computes
// it), rows nb + 4 floats apart (a warp's 16 rows x blocks in distinct banks), read at each dot.
struct mvx_glu_args {
    const uint8_t *       gq;  // gate quants, rows of rowq bytes
    const uint8_t *       gs;  // gate block scales (NF4: absmax_q bytes)
    const uint8_t *       uq;
    const uint8_t *       us;
    int64_t               rowq;
    int                   nb, ng, nchunk;
    const int8_t *        xq;
    const float2 *        xds;
    ember_cuda_norm_scale ns;
    mvg_out               out;
    const uint8_t *       gh;  // NF4: the gate / up group headers
    const uint8_t *       uh;
};

template <int T, bool NS, int W>
__global__ void __launch_bounds__(32 * W, 16 / W) mvx_glu_kernel(const mvx_glu_args a) {
    static_assert(T == EMBER_TYPE_INT4 || T == EMBER_TYPE_NF4, "INT4 (a word of scales a chunk) or NF4 (a table of them)");
    constexpr bool nf4 = T == EMBER_TYPE_NF4;
    using D                 = mx<T>;
    using sc_t              = std::conditional_t<nf4, char, typename D::sc_t>;  // (NF4: unused)
    constexpr bool   PIPE   = W == 4;
    const int        lane   = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    const int        ro     = lane / 8, j = lane % 8;
    const int64_t    row0   = static_cast<int64_t>(blockIdx.x) * 32;
    const int        nsl    = (a.nchunk + 7) / 8;
    const uint4 *    gq     = reinterpret_cast<const uint4 *>(a.gq + (row0 + ro) * a.rowq);
    const uint4 *    uq     = reinterpret_cast<const uint4 *>(a.uq + (row0 + ro) * a.rowq);
    const int64_t    qstep  = 4 * a.rowq / 16;
    uint4            w[16];
    sc_t             sg[8], su[8];
    const auto       load = [&](int sl, int part) {  // part 1: the gate rows, 2: the up rows
        const int  c  = 8 * sl + j;
        const bool ok = c < a.nchunk;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int64_t g = row0 + ro + 4 * t;
            if (part & 1) {
                w[t] = ok ? __ldcs(gq + t * qstep + c) : make_uint4(0, 0, 0, 0);
                if constexpr (!nf4) sg[t] = ok ? D::load_sc(a.gs, nullptr, g, a.nb, a.ng, c) : sc_t{};
            }
            if (part & 2) {
                w[8 + t] = ok ? __ldcs(uq + t * qstep + c) : make_uint4(0, 0, 0, 0);
                if constexpr (!nf4) su[t] = ok ? D::load_sc(a.us, nullptr, g, a.nb, a.ng, c) : sc_t{};
            }
        }
    };
    if (wi < nsl) load(wi, 1);  // weights only: before waiting for the kernel that makes x
    // NF4: the table of the block's 64 rows' absmax / 127 (gate rows 0..31, up rows 32..63), from
    // weights only too; the codebook's dynamic map through shared memory first.
    extern __shared__ float nf4_tab[];  // NF4: nf4_tab_bytes(64, nb); none for INT4
    const int               ts = a.nb + k_nf4_tab_pad;
    if constexpr (nf4) nf4_absmax_table(nf4_tab, ts, 64, row0, a.gs, a.gh, a.us, a.uh, a.nb, a.ng);  // (rows of at most 128 blocks: type_ok)
    cu_pdl_begin();
    if (wi < nsl) load(wi, 2);
    x_src xs;
    xs.q     = a.xq;
    xs.ds    = a.xds;
    xs.f     = nullptr;
    xs.f16al = false;
    float            acc[16] = {};
    typename D::xs_t x{};
    int              xb = 0;  // NF4: the block of the chunk whose x was fetched last
    mvg_slices<PIPE>(
        wi, nw, nsl, j, a.nchunk, load,
        [&](int c) {
            x  = D::load_x(xs, c);
            xb = c >> 1;
        },
        [&](int h) {  // h = 0: the gate rows, 1: the up rows
            if constexpr (nf4) {
#pragma unroll
                for (int t = 0; t < 8; t++) acc[8 * h + t] += D::dot_scaled(w[8 * h + t], nf4_tab[(32 * h + ro + 4 * t) * ts + xb], x);
            } else {
#pragma unroll
                for (int t = 0; t < 8; t++) acc[8 * h + t] += D::dot(w[8 * h + t], h == 0 ? sg[t] : su[t], x, nullptr);
            }
        });
    mvg_block_end<W, NS>(acc, a.out, a.ns, row0, lane, wi, nw);
}

// NF4's table (mvx_glu_kernel): the gate's and the up's 32 rows.
size_t mvx_glu_smem(int T, int nb) {
    return T == EMBER_TYPE_NF4 ? nf4_tab_bytes(64, nb) : 0;
}

template <int T, bool NS, int W> void launch_mvx_glu(ember_cuda_ctx & ctx, unsigned blocks, const mvx_glu_args & a) {
    cu_launch(ctx, mvx_glu_kernel<T, NS, W>, blocks, 32 * std::min(W, (a.nchunk + 7) / 8), mvx_glu_smem(T, a.nb), a);
}
template <int T> void launch_mvx_glu_t(ember_cuda_ctx & ctx, unsigned blocks, const mvx_glu_args & a, bool ns, int warps) {
    if (ns) {
        if (warps == 8) launch_mvx_glu<T, true, 8>(ctx, blocks, a);
        else launch_mvx_glu<T, true, 4>(ctx, blocks, a);
    } else {
        if (warps == 8) launch_mvx_glu<T, false, 8>(ctx, blocks, a);
        else launch_mvx_glu<T, false, 4>(ctx, blocks, a);
    }
}

// NF4's gate / up launch with its SWIGLU on tensor cores (nf4_glu_mma): mvx_nf4_mma_kernel's
// product (nf4_mma_spans) whose 16 rows a warp are 8 gate rows (g) and the same 8 up rows (g + 8),
// as mvx_fp8_glu_kernel's. A block owns 32 hidden units: warp wi takes unit tile wi % 4 (8 units)
// over half wi / 4 of the row's spans (8B: 8 spans a warp, 448 blocks in one wave at 4 an SM); the
// halves' parts meet in shared memory (the first half's first) and lane r of warp 0 ends with unit
// u0 + r's two sums, so the block quantizes h's block of 32 itself, as mvg_block_end. The scalar
// launch's 28-31 us a layer (8B NF4, ncu: 14.6 M instructions, issue-bound at 4 warps a scheduler)
// had twice INT4's instructions; the lookups here feed mma, not dp4a. (Session 47's first form, 8
// units a block with counters for h's 8-bit copy over 4 blocks, 3.4 waves: 8B 511.0 against 524.7
// here, session 48.) FORM (EMBER_CUDA_NF4_GLU_FORM, measuring): 1 / 2: the weight loads' L2 requests
// widened to 256 / 128 bytes (a row's next span comes into L2 with this one); 3: the halves' warps
// taking alternate spans (half h spans h, h + 2, ..: a tile's two warps read 256 bytes of each row
// side by side) instead of each half of the row; 4: 3 with 1's loads.
template <bool NS, int MINB, int FORM = 0>
__global__ void __launch_bounds__(32 * k_fp8_mma_warps, MINB) mvx_nf4_glu32_kernel(const mvx_glu_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(k_fp8_mma_warps == 8, "4 unit tiles x 2 halves of the row");
    __shared__ float dyn[256];
    __shared__ float parts[k_fp8_mma_warps][16];
    nf4_dyn_to_shared(dyn);
    const int      lane = threadIdx.x % 32, wi = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int      tile = wi % 4, half = wi / 4;
    const int      nspan = (2 * a.nchunk + 15) / 16, per = (nspan + 1) / 2;
    constexpr bool IL = FORM == 3 || FORM == 4;
    const int      sp0 = IL ? half : half * per, sp1 = IL ? nspan : min(nspan, sp0 + per);
    const int64_t  u0 = static_cast<int64_t>(blockIdx.x) * 32, ru = u0 + 8 * tile + g;
    const float2 * gh = reinterpret_cast<const float2 *>(a.gh);
    const float2 * uh = reinterpret_cast<const float2 *>(a.uh);
    float          acc_g = 0.0f, acc_u = 0.0f;
    nf4_mma_spans<FORM == 1 || FORM == 4 ? 256 : FORM == 2 ? 128 : 0, IL>(a.gq + ru * a.rowq, a.uq + ru * a.rowq, a.gs + ru * a.nb, a.us + ru * a.nb, gh + ru * a.ng, uh + ru * a.ng, dyn, a.xq, a.xds, a.nb,
                  sp0, sp1, g, t, acc_g, acc_u);
    fp8_mma_parts(acc_g, acc_u, wi, lane, parts);  // parts[wi][g]: the gate row of unit 8 tile + g, [g + 8] its up row
    if (wi != 0) return;
    const int tl = lane / 8, r = lane % 8;  // lane = unit u0 + lane: tile tl, row r
    float     gs = parts[tl][r] + parts[tl + 4][r];
    float     us = parts[tl][r + 8] + parts[tl + 4][r + 8];
    if constexpr (NS) {
        const float sc = mv_norm_scale(a.ns, lane);  // (every lane of warp 0: a warp sum)
        gs *= sc;
        us *= sc;
    }
    const int64_t u = u0 + lane;
    if (a.out.g) a.out.g[u] = gs;
    if (a.out.u) a.out.u[u] = us;
    const float z = gs / (1.0f + expf(-gs)) * us;  // swiglu_flat_q_kernel's arithmetic
    a.out.h[u]    = z;
    cu_quantize_warp(z, u, a.out.hq, a.out.hds);
#endif
}

// Whether Ember's type T has mvx_kernel's NS form (and mvx_norm_kernel): INT4 and NF4.
__host__ __device__ constexpr bool has_ns(int T) {
    return T == EMBER_TYPE_INT4 || T == EMBER_TYPE_NF4;
}

// mvx_kernel<T, R, U, KS>, its NS form when x is a norm-in-product copy (a.ns.nsq set).
template <int T, int R, int U, int KS, int MINB = 0> void launch_mvx_k(ember_cuda_ctx & ctx, const dim3 & grid, const mvx_args & a) {
    if constexpr (has_ns(T)) {
        if (a.ns.nsq) return cu_launch(ctx, mvx_kernel<T, R, U, KS, true, MINB>, grid, 32 * k_warps, 0, a);
    }
    cu_launch(ctx, mvx_kernel<T, R, U, KS, false, MINB>, grid, 32 * k_warps, 0, a);
}

template <int T, int R> void launch_mvx_ks(ember_cuda_ctx & ctx, const dim3 & grid, int ks, const mvx_args & a) {
    if constexpr (T == EMBER_TYPE_INT4 || T == EMBER_TYPE_INT4_G32) {
        if (ks == 4) return launch_mvx_k<T, R, 4, 4>(ctx, grid, a);
        if (ks == 2) return launch_mvx_k<T, R, 4, 2>(ctx, grid, a);
    }
    launch_mvx_k<T, R, 4, 1>(ctx, grid, a);
}

// The grid of the 16-row tensor-core matvecs (mvx_fp8_mma_kernel, mvx_nf4_mma_kernel): each matrix's
// first block in a.blk0, the blocks of all nd.
unsigned mvx_blocks16(mvx_args & a, ember_tensor * const * dsts, int nd) {
    unsigned b16 = 0;
    for (int m = 0; m < nd; m++) {
        a.blk0[m] = static_cast<int>(b16);
        b16 += cu_blocks(dsts[m]->src[0]->ne[1], 16);
    }
    a.blk0[nd] = static_cast<int>(b16);
    return b16;
}

template <int T> ember_status launch_mvx(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units,
                                         mvx_args & a) {
    int64_t nmax = 0;
    for (int m = 0; m < nd; m++) nmax = std::max<int64_t>(nmax, dsts[m]->src[0]->ne[1]);
    // Two rows per warp share the x loads; below 4096 rows one row per warp keeps more warps
    // (and loads in flight) on the GPU. A fused RoPE needs its pairs of rows on one warp.
    bool rope = false;
    for (int m = 0; units && m < nd; m++) rope = rope || units[m].rope;
    // INT4 / NF4 rows of at most 64 chunks: two a warp, U = 2 (ext_short_rows).
    const bool short_rows = !is_fp8_type(T) && a.nchunk <= 32 * 2 && ext_short_rows();
    const int  R          = short_rows || nmax >= 4096 || rope ? 2 : 1;
    // INT4 rows of more than one step (32 lanes x U = 4 chunks): 2 or 4 warps per row (H200
    // tg128 8B INT4 495.7 -> 519.4 t/s, 1B 1744.6 -> 1823.6). Not for NF4 and FP8, whose longer
    // math per chunk already hides a warp's chain of steps: 8B FP8 E4M3 258.7 -> 250.9, NF4
    // 379.8 -> 369.8 with it.
    constexpr bool int4 = T == EMBER_TYPE_INT4 || T == EMBER_TYPE_INT4_G32;
    const int      steps = (a.nchunk + 32 * 4 - 1) / (32 * 4);
    const int      ks0   = !int4 || !ext_split() || short_rows ? 1 : steps >= 3 ? 4 : steps == 2 ? 2 : 1;
    // (units over one column of x only)
    const bool halves = T == EMBER_TYPE_INT4 && units && R == 2 && ks0 == 1 && a.nchunk == 128 &&
                        dsts[0]->src[1]->ne[1] * dsts[0]->src[1]->ne[2] * dsts[0]->src[1]->ne[3] == 1 && int4_halves();
    const int ks = halves ? 2 : ks0, rb = halves ? 4 : R;  // (a block's rows: (k_warps / ks) rb, 8 either way)
    unsigned  bx    = 0;
    a.has_epi       = units != nullptr;
    for (int m = 0; m < nd; m++) {
        if (units) {
            a.epi[m]     = mv_epi_of(units[m]);
            a.neox_hd[m] = a.epi[m].rope == EMBER_ROPE_NEOX ? a.epi[m].hd : 0;
        }
        a.blk0[m] = static_cast<int>(bx);
        bx += cu_blocks(dsts[m]->src[0]->ne[1], (k_warps / ks) * rb);
    }
    a.blk0[nd]             = static_cast<int>(bx);
    a.err                  = ctx.d_error;
    const ember_tensor * x = dsts[0]->src[1];
    if constexpr (is_fp8_type(T)) {
        if (fp8_mma(ctx) && (!units || fp8_mma_units())) {
            const unsigned b16 = mvx_blocks16(a, dsts, nd);
            const dim3 g16(b16, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            constexpr int thr = 32 * k_fp8_mma_warps;
            // (the W = 4 forms: units, not PIPE; per8: the 8-warp kernel's blocks an SM)
            const auto w4 = [&](int per8) {
                const int mode = fp8_mma_w4_mode();
                return mode == 2 || (mode == 1 && per8 > 0 && static_cast<int64_t>(b16) > static_cast<int64_t>(per8) * cu_sm_count(ctx.device));
            };
            if (a.ns.nsq) {  // x: a norm-in-product copy (ember_cuda_mul_mat_vec_ext)
                if (units && w4(mma_blocks_per_sm<mvx_fp8_mma_kernel<T, true, true>, thr>(ctx.device))) {
                    cu_launch(ctx, mvx_fp8_mma_kernel<T, true, true, false, 4>, g16, 32 * 4, 0, a);
                    fp8_w4_launches.fetch_add(1, std::memory_order_relaxed);
                } else if (units) {
                    cu_launch(ctx, mvx_fp8_mma_kernel<T, true, true>, g16, thr, 0, a);
                } else {
                    cu_launch(ctx, mvx_fp8_mma_kernel<T, false, true>, g16, thr, 0, a);
                }
            } else if (units && !fp8_mma_pipe(a.nchunk, true) &&
                       w4(mma_blocks_per_sm<mvx_fp8_mma_kernel<T, true>, thr>(ctx.device))) {
                cu_launch(ctx, mvx_fp8_mma_kernel<T, true, false, false, 4>, g16, 32 * 4, 0, a);
                fp8_w4_launches.fetch_add(1, std::memory_order_relaxed);
            } else if (units) {
                if (fp8_mma_pipe(a.nchunk, true)) cu_launch(ctx, mvx_fp8_mma_kernel<T, true, false, true>, g16, thr, 0, a);
                else cu_launch(ctx, mvx_fp8_mma_kernel<T, true>, g16, thr, 0, a);
            } else if (fp8_mma_pipe(a.nchunk, false)) {
                cu_launch(ctx, mvx_fp8_mma_kernel<T, false, false, true>, g16, thr, 0, a);
            } else {
                cu_launch(ctx, mvx_fp8_mma_kernel<T, false>, g16, thr, 0, a);
            }
            return ember_cuda_check_launch("mul_mat (matvec, fp8 on tensor cores)");
        }
        if (a.ns.nsq) return EMBER_ERR_INTERNAL;  // (ember_cuda_mul_mat_vec_ext refused it first)
    }
    if constexpr (T == EMBER_TYPE_NF4) {
        if (nf4_mma(ctx)) {  // 16 rows a block (mvx_nf4_mma_kernel)
            const unsigned b16 = mvx_blocks16(a, dsts, nd);
            const dim3    g16(b16, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
            constexpr int thr = 32 * k_fp8_mma_warps;
            if (a.ns.nsq) {
                if (units) cu_launch(ctx, mvx_nf4_mma_kernel<true, true>, g16, thr, 0, a);
                else cu_launch(ctx, mvx_nf4_mma_kernel<false, true>, g16, thr, 0, a);
            } else if (units) {
                cu_launch(ctx, mvx_nf4_mma_kernel<true, false>, g16, thr, 0, a);
            } else {
                cu_launch(ctx, mvx_nf4_mma_kernel<false, false>, g16, thr, 0, a);
            }
            return ember_cuda_check_launch("mul_mat (matvec, nf4 on tensor cores)");
        }
    }
    const dim3 grid(bx, static_cast<unsigned>(x->ne[1]), static_cast<unsigned>(x->ne[2] * x->ne[3]));
    if constexpr (T == EMBER_TYPE_INT4) {
        if (halves) {
            if (a.ns.nsq) cu_launch(ctx, mvx_int4_halves_kernel<true>, grid, 32 * k_warps, 0, a);
            else cu_launch(ctx, mvx_int4_halves_kernel<false>, grid, 32 * k_warps, 0, a);
            int4_halves_launches.fetch_add(1, std::memory_order_relaxed);
            return ember_cuda_check_launch("mul_mat (matvec, int4 units in halves)");
        }
    }
    if constexpr (!is_fp8_type(T)) {
        // NF4's two-row warps of long rows at U = 2 too (95 registers against U = 4's 167: 5
        // blocks an SM instead of 3; its math per chunk, not the loads in flight, is what waits).
        // EMBER_CUDA_EXT_NF4_U2=0: U = 4. H200 tg128 8B NF4 484.4 -> 492.7 (+1.7%; the 8B Q / K / V
        // launch; session 46). INT4's where a row keeps one warp (int4_long_u2). Read at every call
        // (tests switch them).
        const bool u2 = R == 2 && !short_rows &&
                        (T == EMBER_TYPE_NF4 ? ember_cuda_env_choice("EMBER_CUDA_EXT_NF4_U2", 1, {0, 1}) == 1
                                             : T == EMBER_TYPE_INT4 && ks == 1 && int4_long_u2());
        if (short_rows || u2) {
            constexpr int occ6 = T == EMBER_TYPE_NF4 ? 6 : 0;  // (the cap is NF4's: no capped INT4 instances)
            if (T == EMBER_TYPE_NF4 && u2 && nf4_occ6()) launch_mvx_k<T, 2, 2, 1, occ6>(ctx, grid, a);
            else launch_mvx_k<T, 2, 2, 1>(ctx, grid, a);
            return ember_cuda_check_launch("mul_mat (matvec, ember types)");
        }
    }
    if (R == 2) launch_mvx_ks<T, 2>(ctx, grid, ks, a);
    else launch_mvx_ks<T, 1>(ctx, grid, ks, a);
    return ember_cuda_check_launch("mul_mat (matvec, ember types)");
}

template <typename F> bool dispatch_ext(ember_type t, F && f) {
    return cu_dispatch_among<EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,
                             EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW>(t, f);
}

struct mvx_probe {
    ember_cuda_ctx &           ctx;
    ember_tensor * const *     dsts;
    int                        nd;
    const ember_cuda_mv_unit * units;
    mvx_args &                 a;
    ember_status &             st;
    template <int T> void operator()() const { st = launch_mvx<T>(ctx, dsts, nd, units, a); }
};

//
// Dequantization of one 32-weight chunk (prefill, GET_ROWS): weights [32 c, 32 c + 32) of
// row g of the tensor, as cu_codec<T>::chunk does for the GGUF bytes.
//
using ext_dev = mmq_ext;  // (cuda-mmq.h: the tensor-core prefill reads the same planes)

ext_dev dev_of(const ember_tensor * w) {
    const ext_layout l = layout_of(w);
    return {l.q, l.s, l.h, l.rowq, l.nb, l.ng};
}

// Chunk c (32 weights) of row g as floats (cu_ext_h2, cuda-mmq.h: the tensor-core prefill's codec,
// so both paths have the same weights). NF4 looks its codebook up in cu_nf4_smem: the kernel fills it.
template <int T> __device__ __forceinline__ void ext_chunk(const ext_dev & L, int64_t g, int64_t c, float (&y)[32]) {
    typename cu_ext_h2<T>::raw r;
    cu_ext_h2<T>::fetch(L, g, static_cast<int>(c), r);
    cu_ext_h2<T>::floats(r, y);
}

constexpr int      k_dq_threads = 256;
constexpr int      k_dq_warps   = k_dq_threads / 32;
constexpr unsigned k_max_blocks = 65535u * 16u;

unsigned grid_for(int64_t n, int per_block) {
    const unsigned b = cu_blocks(n, per_block);
    return b < k_max_blocks ? b : k_max_blocks;
}

// Rows g0 .. of the tensor to F16: each lane one 32-weight chunk, the warp's 32 chunks (2 KiB,
// contiguous in the output) out through shared memory as 16-byte stores (as ops-matmul.cu's
// dequant_f16_co_kernel).
template <int T>
__global__ void __launch_bounds__(k_dq_threads) dequant_ext_kernel(ext_dev L, int64_t g0, int64_t nc, int64_t n_items, __half * out) {
    if constexpr (T == EMBER_TYPE_NF4) {
        cu_nf4_smem_fill();  // (ext_chunk's codebook)
        __syncthreads();
    }
    cu_pdl_begin();
    __shared__ uint4 sbuf[k_dq_warps][32 * 4];
    const int     lane   = threadIdx.x % 32;
    const int     wi     = threadIdx.x / 32;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * k_dq_threads;
    for (int64_t base = (static_cast<int64_t>(blockIdx.x) * k_dq_warps + wi) * 32; base < n_items; base += stride) {
        const int64_t idx = base + lane;
        float         v[32];
        if (idx < n_items) ext_chunk<T>(L, g0 + idx / nc, idx % nc, v);
        cu_warp_store_f16_chunks(sbuf[wi], lane, v, idx < n_items, out, base, n_items - base);
    }
}

// GET_ROWS from a 2-D table: one thread per 32-weight chunk of a destination row.
template <int T>
__global__ void get_rows_ext_kernel(ext_dev L, int64_t n_table, cu_tensor ids, cu_tensor dst, int64_t nc, int64_t n_items, int * err) {
    if constexpr (T == EMBER_TYPE_NF4) {
        cu_nf4_smem_fill();  // (ext_chunk's codebook)
        __syncthreads();
    }
    cu_pdl_begin();
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n_items;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r  = idx / nc;
        const int64_t c  = idx % nc;
        const int64_t i1 = r % dst.ne[1];
        const int64_t i2 = (r / dst.ne[1]) % dst.ne[2];
        const int64_t i3 = r / (dst.ne[1] * dst.ne[2]);
        const int32_t id = *reinterpret_cast<const int32_t *>(ids.data + i1 * ids.nb[0] + i2 * ids.nb[1] + i3 * ids.nb[2]);
        float *       y  = reinterpret_cast<float *>(dst.data + i1 * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3]) + 32 * c;
        if (id < 0 || id >= n_table) {
            for (int j = 0; j < 32; j++) y[j] = 0.0f;
            cu_set_error(err, EMBER_ERR_INTERNAL);
            continue;
        }
        float v[32];
        ext_chunk<T>(L, id, c, v);
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = v[j];
    }
}

struct dequant_probe {
    ember_cuda_ctx & ctx;
    ext_dev          L;
    int64_t          g0, nc, n;
    __half *         out;
    template <int T> void operator()() const {
        cu_launch(ctx, dequant_ext_kernel<T>, grid_for(n, k_dq_threads), k_dq_threads, 0, L, g0, nc, n, out);
    }
};

struct get_rows_probe {
    ember_cuda_ctx & ctx;
    ember_tensor *   dst;
    template <int T> void operator()() const {
        const ember_tensor * table = dst->src[0];
        const int64_t        nc    = dst->ne[0] / 32;
        const int64_t        n     = ember_nrows(dst) * nc;
        cu_launch(ctx, get_rows_ext_kernel<T>, grid_for(n, k_dq_threads), k_dq_threads, 0, dev_of(table), table->ne[1],
                  cu_desc(dst->src[1]), cu_desc(dst), nc, n, ctx.d_error);
    }
};

}  // namespace

long long ember_cuda_int4_halves_launches() {
    return int4_halves_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_nf4_norm_dec_launches() {
    return nf4_norm_dec_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_nf4_glu_form_launches() {
    return nf4_glu_form_launches.load(std::memory_order_relaxed);
}
// The decode-norm producers in two blocks a group of 32 rows (mvx_norm_kernel, mvr_norm_kernel,
// mvk_norm_kernel SPLIT) where the groups fill at most half the SMs (the 1B shape's 2048 rows: 64
// groups), so every SM streams weights. By default (EMBER_CUDA_MVN_SPLIT=1) INT4 / NF4 / Q8_0 rows
// of more than 16 slices (the down product: 16 warps of two slices a row become two blocks of one,
// every weight requested before the wait); =2 Q4_0's and Q4_K's too; =3 every row of two or more
// slices (the O product's 8 slices too: two blocks of 4 warps); =0 one block a group. H100 tg128
// (session 58), one block a group against =1: 1B NF4 1866.9 -> 1966.7 (+5.3%; its down product 7.5
// -> 6.2 us), INT4 2171.0 -> 2199.5 (+1.3%), Q8_0 1488.9 -> 1508.2 (+1.3%); Q4_0 2127.8 -> 2046.8
// (-3.8%) and Q4_K_M 1992.3 -> 1991.5 (level) at =2, so not by default; =3 1B NF4 1884.5, INT4
// 2174.9. Read at every call (tests switch it).
namespace {
std::atomic<long long> mvn_split_launches{0};  // (ember_cuda_mvn_split_launches)
}
// A split block's threads: a warp a slice of its half, at most EMBER_CUDA_MVN_SPLIT_WARPS (16 by
// default; measuring: 8 or 4 leave half or more of an SM's registers to the next launch's blocks,
// which start early there under PDL, for more slices a warp).
bool ember_cuda_mvn_split(const ember_cuda_ctx & ctx, ember_type t, int64_t groups, int nsl, mvn_split & sp, int & thr) {
    const int mode = ember_cuda_env_choice("EMBER_CUDA_MVN_SPLIT", 1, {0, 1, 2, 3});
    if (mode == 0 || !ctx.d_mvn_part || groups > EMBER_CUDA_MVN_SPLIT_GROUPS || nsl < 2) return false;
    if (mode < 3 && nsl <= k_mvn_max_warps) return false;
    if (mode == 1 && t != EMBER_TYPE_INT4 && t != EMBER_TYPE_NF4 && t != EMBER_TYPE_Q8_0) return false;
    if (2 * groups > cu_sm_count(ctx.device)) return false;
    const int cap = static_cast<int>(ember_cuda_env_choice("EMBER_CUDA_MVN_SPLIT_WARPS", 16, {4, 8, 16}));
    sp            = {ctx.d_mvn_part, ctx.d_mvn_count};
    thr           = 32 * std::min(mvn_warps((nsl + 1) / 2), cap);
    mvn_split_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
}
long long ember_cuda_mvn_split_launches() {
    return mvn_split_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_fp8_mma_w4_launches() {
    return fp8_w4_launches.load(std::memory_order_relaxed);
}
long long ember_cuda_fp8_norm_pipe_launches() {
    return fp8_norm_pipe_launches.load(std::memory_order_relaxed);
}

bool ember_cuda_ext_layout(const ember_tensor * t) {
    return (t->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) && ember_cuda_repack_is_ext(t->type);
}

bool ember_cuda_mul_mat_vec_ext_supported(const ember_tensor * dst) {
    const ember_tensor * w = dst->src[0];
    const ember_tensor * x = dst->src[1];
    if (!ember_cuda_ext_layout(w) || w->view_src || x->type != EMBER_TYPE_F32) return false;
    const ext_layout l = layout_of(w);
    return x->ne[1] <= 65535 && x->ne[1] * x->ne[2] * x->ne[3] <= 65535 && x->ne[2] * x->ne[3] <= 65535 && l.rowq / 16 < INT32_MAX / 2 &&
           w->ne[0] % 32 == 0;
}

bool ember_cuda_ext_has_ns(ember_type t) {
    return has_ns(t);
}

bool ember_cuda_ext_float_x(const ember_tensor * w) {
    return ember_cuda_ext_layout(w) && w->type != EMBER_TYPE_INT4 && w->type != EMBER_TYPE_INT4_G32 && w->type != EMBER_TYPE_NF4;
}

ember_status ember_cuda_mul_mat_vec_ext(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units) {
    if (nd < 1 || nd > k_group) return EMBER_ERR_INVALID_ARG;
    const ember_tensor * w0 = dsts[0]->src[0];
    const ember_tensor * x  = dsts[0]->src[1];
    for (int m = 0; m < nd; m++) {
        const ember_tensor * w = dsts[m]->src[0];
        if (!ember_cuda_mul_mat_vec_ext_supported(dsts[m]) || w->type != w0->type || w->ne[0] != w0->ne[0] || dsts[m]->src[1] != x) {
            return EMBER_ERR_INTERNAL;
        }
        if ((nd > 1 || units) && (w->ne[2] * w->ne[3] != 1 || x->ne[2] * x->ne[3] != 1)) return EMBER_ERR_INTERNAL;
        if (units && (units[m].mm != dsts[m] || !ember_cuda_mv_unit_ok(units[m]))) return EMBER_ERR_INTERNAL;
    }
    mvx_args         a{};
    const ext_layout l0 = layout_of(w0);
    a.nmat              = nd;
    for (int m = 0; m < nd; m++) {
        const ext_layout l = layout_of(dsts[m]->src[0]);
        a.q[m]             = l.q;
        a.s[m]             = l.s;
        a.h[m]             = l.h;
        a.n[m]             = dsts[m]->src[0]->ne[1];
        a.y[m]             = static_cast<char *>(dsts[m]->data);
        a.y_nb1[m]         = static_cast<int64_t>(dsts[m]->nb[1]);
    }
    a.y_nb2  = static_cast<int64_t>(dsts[0]->nb[2]);
    a.y_nb3  = static_cast<int64_t>(dsts[0]->nb[3]);
    a.w_ne2  = w0->ne[2];
    a.bcast2 = x->ne[2] / w0->ne[2];
    a.bcast3 = x->ne[3] / w0->ne[3];
    a.rowq   = l0.rowq;
    a.k      = w0->ne[0];
    a.nb     = l0.nb;
    a.ng     = l0.ng;
    a.nchunk = static_cast<int>(l0.rowq / 16);
    a.x_ne1  = x->ne[1];
    a.x_ne2  = x->ne[2];
    if (ember_cuda_ext_float_x(w0) && ember_cuda_qx_is_ns(ctx, x)) {
        // FP8 over an FP8 producer's copy (x's floats never written): its floats times the norm's
        // scale on tensor cores (mvx_fp8_mma_kernel NS).
        if (!fp8_mma(ctx) || (units && !fp8_mma_units()) || x->ne[1] * x->ne[2] * x->ne[3] != 1 || !ctx.qx_f32) {
            std::fprintf(stderr, "ember: cuda: an FP8 matvec off the tensor-core kernel, or of an 8-bit producer, reads a norm-in-product copy of x\n");
            return EMBER_ERR_INTERNAL;
        }
        a.xf  = static_cast<const char *>(ctx.qx_buf);
        a.xal = (reinterpret_cast<uintptr_t>(ctx.qx_buf) & 15) == 0;
        a.ns  = ctx.qx_norm;
    } else if (ember_cuda_ext_float_x(w0)) {  // FP8: the float activations as they are
        a.xf    = static_cast<const char *>(x->data);
        a.x_nb1 = static_cast<int64_t>(x->nb[1]);
        a.x_nb2 = static_cast<int64_t>(x->nb[2]);
        a.x_nb3 = static_cast<int64_t>(x->nb[3]);
        a.xal   = ((reinterpret_cast<uintptr_t>(x->data) | x->nb[1] | x->nb[2] | x->nb[3]) & 15) == 0;
        ctx.qx_valid = false;  // a result may overwrite the tensor of the 8-bit copy
    } else {
        int8_t *           xq  = nullptr;
        float2 *           xds = nullptr;
        // A norm-in-product copy only for the types with an NS form (for others the copy is an
        // error there: their kernels would not apply the norm's scale).
        const bool         ns = has_ns(w0->type) && ember_cuda_qx_is_ns(ctx, x);
        const ember_status qs = ember_cuda_quantized_x(ctx, x, &xq, &xds, ns);  // ops-matvec-q.cu
        if (qs != EMBER_OK) return qs;
        a.xq  = xq;
        a.xds = xds;
        if (ns) a.ns = ctx.qx_norm;
    }
    ember_status st = EMBER_ERR_UNSUPPORTED;
    dispatch_ext(w0->type, mvx_probe{ctx, dsts, nd, units, a, st});
    ember_cuda_qx_after_matvecs(ctx, x, dsts, nd, units);
    return st;
}

bool ember_cuda_fp8_norm_type(ember_type t) {
    return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
}

// EMBER_CUDA_FP8_NORM_PIPE: 2 (default) the producer's PIPE form where its grid has more blocks than
// the GPU has SMs (the 8B shape), 1 wherever a warp has two spans or more, 0 never. Read at every
// call (tests switch it).
static bool fp8_norm_pipe(const ember_cuda_ctx & ctx, int nchunk, unsigned blocks) {
    const int mode = ember_cuda_env_choice("EMBER_CUDA_FP8_NORM_PIPE", 2, {0, 1, 2});
    if (mode == 0 || nchunk <= 16 * k_fp8_mma_warps) return false;  // (one span a warp: nothing to overlap)
    return mode == 1 || static_cast<int64_t>(blocks) > cu_sm_count(ctx.device);
}

ember_status ember_cuda_mvx_fp8_norm_launch(ember_cuda_ctx & ctx, const ember_tensor * w, const float * x, const float * res, float * sum,
                                            const float * nw, float * ov, float * osq) {
    if (!ember_cuda_ext_layout(w) || !ember_cuda_fp8_norm_type(w->type) || w->ne[1] % 16 != 0) return EMBER_ERR_INTERNAL;
    if (!fp8_mma(ctx)) return EMBER_ERR_UNSUPPORTED;  // (below sm_80 or EMBER_CUDA_FP8_MMA=0: the plain launches)
    const ext_layout  l = layout_of(w);
    mvx_fp8_norm_args a;
    a.q      = l.q;
    a.s      = l.s;
    a.rowq   = l.rowq;
    a.nb     = l.nb;
    a.nchunk = static_cast<int>(l.rowq / 16);
    a.xf     = x;
    a.xal    = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    a.res    = res;
    a.sum    = sum;
    a.nw     = nw;
    a.ov     = ov;
    a.osq    = osq;
    const unsigned blocks = static_cast<unsigned>(w->ne[1] / 16);
    const bool pipe = fp8_norm_pipe(ctx, a.nchunk, blocks);
    const bool e4m3 = w->type == EMBER_TYPE_FP8_E4M3;
    if (e4m3 && pipe) cu_launch(ctx, mvx_fp8_norm_kernel<EMBER_TYPE_FP8_E4M3, true>, blocks, 32 * k_fp8_mma_warps, 0, a);
    else if (e4m3) cu_launch(ctx, mvx_fp8_norm_kernel<EMBER_TYPE_FP8_E4M3>, blocks, 32 * k_fp8_mma_warps, 0, a);
    else if (pipe) cu_launch(ctx, mvx_fp8_norm_kernel<EMBER_TYPE_FP8_E5M2, true>, blocks, 32 * k_fp8_mma_warps, 0, a);
    else cu_launch(ctx, mvx_fp8_norm_kernel<EMBER_TYPE_FP8_E5M2>, blocks, 32 * k_fp8_mma_warps, 0, a);
    if (pipe) fp8_norm_pipe_launches.fetch_add(1, std::memory_order_relaxed);
    return EMBER_OK;
}

template <int T> void launch_fp8_glu(ember_cuda_ctx & ctx, unsigned blocks, const mvx_fp8_glu_args & a, bool ns) {
    constexpr int thr  = 32 * k_fp8_mma_warps;
    const bool    pipe = fp8_mma_pipe(a.nchunk, false);
    const bool    cap  = ember_cuda_env_choice("EMBER_CUDA_FP8_GLU_OCC", 3, {0, 3}) == 3;
    if (ns && pipe) cu_launch(ctx, mvx_fp8_glu_kernel<T, true, true>, blocks, thr, 0, a);
    else if (ns && cap) cu_launch(ctx, mvx_fp8_glu_kernel<T, true, false, 3>, blocks, thr, 0, a);
    else if (ns) cu_launch(ctx, mvx_fp8_glu_kernel<T, true, false>, blocks, thr, 0, a);
    else if (pipe) cu_launch(ctx, mvx_fp8_glu_kernel<T, false, true>, blocks, thr, 0, a);
    else if (cap) cu_launch(ctx, mvx_fp8_glu_kernel<T, false, false, 3>, blocks, thr, 0, a);
    else cu_launch(ctx, mvx_fp8_glu_kernel<T, false, false>, blocks, thr, 0, a);
}

// EMBER_CUDA_MV_GLU_FP8=0: the FP8 gate / up products and the SWIGLU in their own launches. Read
// at every call (tests switch it).
bool ember_cuda_mvx_fp8_glu_ok(const ember_tensor * wg, const ember_tensor * wu) {
    if (!ember_cuda_ext_layout(wg) || !ember_cuda_ext_layout(wu) || wg->type != wu->type || !ember_cuda_fp8_norm_type(wg->type)) return false;
    return wg->ne[0] == wu->ne[0] && wg->ne[1] == wu->ne[1] && wg->ne[1] % 32 == 0 && wg->ne[0] % 32 == 0 && wg->ne[2] * wg->ne[3] == 1 &&
           wu->ne[2] * wu->ne[3] == 1 && ember_cuda_env_choice("EMBER_CUDA_MV_GLU_FP8", 1, {0, 1}) == 1;
}

ember_status ember_cuda_mvx_fp8_glu_launch(ember_cuda_ctx & ctx, const ember_tensor * wg, const ember_tensor * wu, const float * xf,
                                           const ember_cuda_norm_scale * ns, float * g, float * u, float * h) {
    if (!ember_cuda_mvx_fp8_glu_ok(wg, wu)) return EMBER_ERR_INTERNAL;
    if (!fp8_mma(ctx)) return EMBER_ERR_UNSUPPORTED;  // (below sm_80 or EMBER_CUDA_FP8_MMA=0: the plain launches)
    const ext_layout lg = layout_of(wg), lu = layout_of(wu);
    mvx_fp8_glu_args a;
    a.gq     = lg.q;
    a.gs     = lg.s;
    a.uq     = lu.q;
    a.us     = lu.s;
    a.rowq   = lg.rowq;
    a.nb     = lg.nb;
    a.nchunk = static_cast<int>(lg.rowq / 16);
    a.xf     = xf;
    a.xal    = (reinterpret_cast<uintptr_t>(xf) & 15) == 0;
    if (ns) a.ns = *ns;
    a.g = g;
    a.u = u;
    a.h = h;
    const unsigned blocks = static_cast<unsigned>(wg->ne[1] / 8);
    if (wg->type == EMBER_TYPE_FP8_E4M3) launch_fp8_glu<EMBER_TYPE_FP8_E4M3>(ctx, blocks, a, ns != nullptr);
    else launch_fp8_glu<EMBER_TYPE_FP8_E5M2>(ctx, blocks, a, ns != nullptr);
    return EMBER_OK;
}

bool ember_cuda_fp8_ns_reader_here() {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fp8_mma_cc(cu_cc_major(dev)) && fp8_mma_units();
}

// mvx_norm_kernel<t, SPLIT>, NF4's DEC form where nf4_norm_dec takes it (counted).
template <bool SPLIT> void launch_mvx_norm(ember_cuda_ctx & ctx, ember_type t, unsigned blocks, int thr, const mvx_norm_args & a) {
    if (t == EMBER_TYPE_INT4) {
        cu_launch(ctx, mvx_norm_kernel<EMBER_TYPE_INT4, SPLIT>, blocks, thr, 0, a);
    } else if (nf4_norm_dec(SPLIT)) {
        cu_launch(ctx, mvx_norm_kernel<EMBER_TYPE_NF4, SPLIT, true>, blocks, thr, 0, a);
        nf4_norm_dec_launches.fetch_add(1, std::memory_order_relaxed);
    } else {
        cu_launch(ctx, mvx_norm_kernel<EMBER_TYPE_NF4, SPLIT>, blocks, thr, 0, a);
    }
}

ember_status ember_cuda_mvx_norm_launch(ember_cuda_ctx & ctx, const ember_tensor * w, const int8_t * xq, const float2 * xds, const mvn_out & o) {
    if (!ember_cuda_ext_layout(w) || !has_ns(w->type) || w->ne[1] % k_mvn_rows != 0) return EMBER_ERR_INTERNAL;
    const ext_layout l = layout_of(w);
    mvx_norm_args    a;
    a.q      = l.q;
    a.s      = l.s;
    a.h      = l.h;
    a.rowq   = l.rowq;
    a.nb     = l.nb;
    a.ng     = l.ng;
    a.nchunk = static_cast<int>(l.rowq / 16);
    a.xq     = xq;
    a.xds    = xds;
    a.out    = o;
    const unsigned groups = static_cast<unsigned>(w->ne[1] / k_mvn_rows);
    const int      nsl    = (a.nchunk + 7) / 8;
    int            thr    = 0;
    if (ember_cuda_mvn_split(ctx, w->type, static_cast<int64_t>(groups), nsl, a.split, thr)) {
        launch_mvx_norm<true>(ctx, w->type, 2 * groups, thr, a);
    } else {
        launch_mvx_norm<false>(ctx, w->type, groups, 32 * mvn_warps(nsl), a);
    }
    return EMBER_OK;
}

ember_status ember_cuda_mvx_glu_launch(ember_cuda_ctx & ctx, const ember_tensor * wg, const ember_tensor * wu, const int8_t * xq, const float2 * xds,
                                       const ember_cuda_norm_scale * ns, const mvg_out & o, int warps) {
    if (!ember_cuda_mvx_glu_type_ok(wg, wu) || wg->ne[1] % 32 != 0 || (warps != 4 && warps != 8)) return EMBER_ERR_INTERNAL;
    const ext_layout lg = layout_of(wg), lu = layout_of(wu);
    mvx_glu_args     a{};
    a.gq     = lg.q;
    a.gs     = lg.s;
    a.gh     = lg.h;
    a.uq     = lu.q;
    a.us     = lu.s;
    a.uh     = lu.h;
    a.rowq   = lg.rowq;
    a.nb     = lg.nb;
    a.ng     = lg.ng;
    a.nchunk = static_cast<int>(lg.rowq / 16);
    a.xq     = xq;
    a.xds    = xds;
    if (ns) a.ns = *ns;
    a.out                 = o;
    const unsigned blocks = static_cast<unsigned>(wg->ne[1] / 32);
    if (wg->type == EMBER_TYPE_NF4 && nf4_glu_mma(ctx, warps)) {
        constexpr int thr  = 32 * k_fp8_mma_warps;
        const int     form = nf4_glu_form();
        if (form != 0) nf4_glu_form_launches.fetch_add(1, std::memory_order_relaxed);
        switch (form) {
        case 1: cu_launch(ctx, ns ? mvx_nf4_glu32_kernel<true, 4, 1> : mvx_nf4_glu32_kernel<false, 4, 1>, blocks, thr, 0, a); break;
        case 2: cu_launch(ctx, ns ? mvx_nf4_glu32_kernel<true, 4, 2> : mvx_nf4_glu32_kernel<false, 4, 2>, blocks, thr, 0, a); break;
        case 3: cu_launch(ctx, ns ? mvx_nf4_glu32_kernel<true, 4, 3> : mvx_nf4_glu32_kernel<false, 4, 3>, blocks, thr, 0, a); break;
        case 4: cu_launch(ctx, ns ? mvx_nf4_glu32_kernel<true, 4, 4> : mvx_nf4_glu32_kernel<false, 4, 4>, blocks, thr, 0, a); break;
        default:
            if (ns) {
                cu_launch(ctx, mvx_nf4_glu32_kernel<true, 4>, blocks, thr, 0, a);
            } else {
                cu_launch(ctx, mvx_nf4_glu32_kernel<false, 4>, blocks, thr, 0, a);
            }
        }
        return EMBER_OK;
    }
    if (wg->type == EMBER_TYPE_NF4) launch_mvx_glu_t<EMBER_TYPE_NF4>(ctx, blocks, a, ns != nullptr, warps);
    else launch_mvx_glu_t<EMBER_TYPE_INT4>(ctx, blocks, a, ns != nullptr, warps);
    return EMBER_OK;
}

// NF4: rows of at most 128 blocks (8192 weights: the table's 64 rows in 33 KB of shared memory,
// under the 48 KB a launch gets without asking); EMBER_CUDA_MV_GLU_NF4=0: not. Its GPU test passed
// on an H200 (session 42; compute-sanitizer memcheck and racecheck 0 errors, on the form before the
// table moved into nf4_absmax_table; the test passed again on the helper).
bool ember_cuda_mvx_glu_type_ok(const ember_tensor * wg, const ember_tensor * wu) {
    if (!ember_cuda_ext_layout(wg) || !ember_cuda_ext_layout(wu) || wg->type != wu->type || wg->ne[0] != wu->ne[0] || wg->ne[1] != wu->ne[1]) {
        return false;
    }
    if (wg->type == EMBER_TYPE_NF4) return wg->ne[0] % 64 == 0 && wg->ne[0] <= 64 * 128 && ember_cuda_env_on("EMBER_CUDA_MV_GLU_NF4");
    return wg->type == EMBER_TYPE_INT4 && wg->ne[0] % 128 == 0;
}

mmq_ext ember_cuda_mmq_ext(const ember_tensor * w) {
    return dev_of(w);
}

ember_status ember_cuda_ext_dequant_f16(ember_cuda_ctx & ctx, const ember_tensor * w, int64_t g0, int64_t rows, void * out) {
    if (rows <= 0) return EMBER_OK;
    if (!ember_cuda_ext_layout(w)) return EMBER_ERR_INTERNAL;
    const int64_t nc = w->ne[0] / 32;
    if (!dispatch_ext(w->type, dequant_probe{ctx, dev_of(w), g0, nc, rows * nc, static_cast<__half *>(out)})) {
        return EMBER_ERR_UNSUPPORTED;
    }
    return ember_cuda_check_launch("dequantize to f16 (ember types, cuda layout)");
}

ember_status ember_cuda_ext_get_rows(ember_cuda_ctx & ctx, ember_tensor * dst) {
    const ember_tensor * table = dst->src[0];
    if (ember_nelements(dst) == 0) return EMBER_OK;
    if (!ember_cuda_ext_layout(table) || table->ne[2] * table->ne[3] != 1 || dst->ne[0] % 32 != 0) return EMBER_ERR_UNSUPPORTED;
    if (!dispatch_ext(table->type, get_rows_probe{ctx, dst})) return EMBER_ERR_UNSUPPORTED;
    return ember_cuda_check_launch("get_rows (ember types, cuda layout)");
}
