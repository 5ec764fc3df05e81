#version 450
// MUL_MAT for few columns (decode), the fast path of Q4_0, Q8_0, Q4_K and Q6_K: same operands
// and push constants as mul_mat_vec.comp, which stays the path for every other case.
//
// The row is cut into units of 256 weights (8 blocks of Q4_0 / Q8_0, one super-block of the
// K-quants). LPR invocations (a specialization constant the host picks from the row length)
// share NR rows (NR = 1 or 2, another specialization constant), each taking whole units
// (u = lane, lane + LPR, ...) of all NR rows, so that every activation it loads serves NR
// rows; a workgroup of WG invocations computes NR * WG / LPR rows, and the partial sums meet
// in shared memory. A unit of Q4_0 (144 bytes), Q8_0 (272) or Q4_K (144) starts on 16 bytes when
// the row does (the host checks it), so it is read with 16-byte loads (uvec4) into registers
// and decoded there: one load instruction per 16 bytes instead of one per element as in
// the generic kernel, and each block's scale read once. Q6_K super-blocks (210 bytes) only
// start on 2 bytes: read as 32-bit words and realigned. The activations are read as vec4.
// Neighbouring invocations read neighbouring units, so a subgroup streams one contiguous
// stretch of the row (and of x, which every row of the workgroup shares through the cache).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// SG_RED: a row's LPR partial sums added by subgroupAdd, then the row's subgroups' sums
// through shared memory (1 barrier instead of 1 + log2(LPR); the small-unit kernels give each
// invocation only a few quarters of a decode row, so the reduction is much of their time).
// Used when LPR is a multiple of the subgroup size (rows of whole subgroups, invocations
// numbered subgroup by subgroup as on every driver seen); otherwise the shared-memory steps.
#ifndef SG_RED
#define SG_RED 0
#endif
#if SG_RED
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint LPR = 16u;  // invocations per row (a power of two up to the workgroup size)
layout(constant_id = 2) const uint NR  = 1u;   // rows per invocation (1 or 2)
// Units per invocation per step, their loads issued together (QX: blocks or sub-blocks, QQ:
// quarters): more bytes in flight per invocation, but more registers and so fewer invocations
// per multiprocessor (the host picks it per product; EMBER_VULKAN_MMV_QX_U, _QQ_U).
layout(constant_id = 3) const uint USTEP = 4u;

layout(binding = 0) readonly buffer W { uint wb[]; };
layout(binding = 0) readonly buffer W4 { uvec4 wb4[]; };
layout(binding = 1) readonly buffer X4 { vec4 xb4[]; };
// SWIGLU_X: x is SWIGLU(gate, up) = silu(gate) * up, made as it is read (the FFN down
// projection, one dispatch and one barrier less): gate at binding 1, up at binding 3, with the
// same shape and strides (up's offset u_off).
#ifndef SWIGLU_X
#define SWIGLU_X 0
#endif
#if SWIGLU_X
layout(binding = 3) readonly buffer U4 { vec4 ub4[]; };
#endif
// ROPE_OUT: the result, rows of heads [head_dim, n_head] per column (token), is rotated as
// ROPE mode 0 (pairs 2i, 2i+1: rows r and r + 1 of one workgroup) before it is written
// (the Q and K projections: one dispatch and one barrier less each). Positions (int32 per
// column) at binding 3, frequency factors at binding 4; same formula as rope.comp.
#ifndef ROPE_OUT
#define ROPE_OUT 0
#endif
#if ROPE_OUT
layout(binding = 3) readonly buffer P { int pos[]; };
layout(binding = 4) readonly buffer F { float ff[]; };
#endif
// GLU_OUT: the gate and up products of one x (binding 0: gate weights, binding 3: up weights,
// same type and strides, up's resid u_off in bytes) in one dispatch, written as
// silu(gate) * up (the FFN's SWIGLU): each invocation takes the same row of both matrices
// (its two rows, NR = 2), every x value loaded once for both, and SWIGLU needs no dispatch
// of its own nor is it recomputed by every workgroup of the down projection (SWIGLU_X).
#ifndef GLU_OUT
#define GLU_OUT 0
#endif
#if GLU_OUT
layout(binding = 3) readonly buffer WU { uint ub[]; };
layout(binding = 3) readonly buffer WU4 { uvec4 ub4[]; };
#endif
#if (GLU_OUT + SWIGLU_X + ROPE_OUT) > 1
#error "mul_mat_vec_q.comp: one of GLU_OUT, SWIGLU_X, ROPE_OUT"
#endif
// KV_OUT: the result (with ROPE_OUT: rotated) is not written as F32 but stored as F16 into row
// idx[c] of a KV cache (SET_ROWS of the K and V projections: one dispatch and one barrier
// level less per layer). Binding 2 is the cache (d_off, d_nb1 in bytes), binding 5 the row
// indices (int32 per column), binding 6 the dispatch's error word, set like SET_ROWS's when an
// index is out of range (nothing is written then); a column whose index appears again in a
// later column is skipped (the last one wins). Rows come in (even, odd) pairs inside a
// workgroup, packed into one 32-bit word (the host checks that n is even).
#ifndef KV_OUT
#define KV_OUT 0
#endif
#if KV_OUT
#if GLU_OUT || SWIGLU_X
#error "mul_mat_vec_q.comp: KV_OUT goes with ROPE_OUT only"
#endif
layout(binding = 5) readonly buffer KI { int kv_idx[]; };
layout(binding = 6) writeonly buffer KE { uint kv_err[]; };
#endif
// NORM_OUT: the product is an operand of a residual ADD whose sum RMS_NORM normalizes and MUL
// scales by the norm weight (the O and FFN down projections of a decode step with the norm
// after them: one dispatch and one barrier level less each). Each workgroup writes its rows of
// the product (binding 2: the stream's scratch rows, d_off 0) and counts itself
// done on the dispatch's counter (binding 7, zero between dispatches); the workgroup that counts
// last (every other one's rows written and visible: coherent stores, a buffer memory barrier
// before each count) reads the product and the residual (binding 3) into registers, adds them,
// normalizes, and only then writes the sum (binding 5: the ADD's result, read by later residual
// ADDs) and sum / rms * weight (binding 6; the norm weight at binding 4), so that these may lie
// over anything it or the other workgroups read, x included (the graph allocator reuses the
// attention output for the sum). One column; n a multiple of 4 and at most NORM_V vec4 per
// invocation, every offset a multiple of 4 floats (the host checks them).
#ifndef NORM_OUT
#define NORM_OUT 0
#endif
#ifndef XQ_OUT
#define XQ_OUT 0
#endif
#if XQ_OUT && !(NORM_OUT || GLU_OUT)
#error "mul_mat_vec_q.comp: XQ_OUT goes with NORM_OUT or GLU_OUT"
#endif
#if NORM_OUT
#if GLU_OUT || SWIGLU_X || ROPE_OUT || KV_OUT
#error "mul_mat_vec_q.comp: NORM_OUT goes alone"
#endif
#define NORM_V 8u
layout(binding = 2) coherent buffer D { uint db[]; };
layout(binding = 2) coherent buffer D4 { vec4 db4[]; };
layout(binding = 3) readonly buffer R4 { vec4 rs4[]; };
layout(binding = 4) readonly buffer NW4 { vec4 nw4[]; };
layout(binding = 5) writeonly buffer S4 { vec4 sb4[]; };
layout(binding = 6) writeonly buffer O4 { vec4 ob4[]; };
layout(binding = 7) coherent buffer CNT { uint cnt[]; };
#if XQ_OUT
// XQ_OUT (the "_xq" variants, EMBER_VULKAN_MMV_QX_OUT): the normalized result also quantized
// as quantize_x.comp would (same layout and arithmetic) into the stream's slot 0, which
// binding 2 runs on over from word xq_w (the products of the next layer that read it then need
// no quantize_x dispatch). Without it the shader is the one before that option existed.
layout(binding = 2) writeonly buffer DXD { vec2 dxd[]; };
#endif
#elif GLU_OUT && XQ_OUT
// XQ_OUT: the result also quantized as quantize_x.comp would into the slot at binding 5 (the
// FFN down product then needs no quantize_x dispatch): the workgroups of each 32-row block
// count themselves done on its word at binding 6 (zero between dispatches), and the last one
// reads the block back (coherent) and quantizes it. One column, n a multiple of 32.
layout(binding = 2) coherent buffer D { uint db[]; };
layout(binding = 5) writeonly buffer XQO { uint xqo[]; };
layout(binding = 5) writeonly buffer XQD { vec2 xqd[]; };
layout(binding = 6) coherent buffer XCNT { uint xcnt[]; };
#else
layout(binding = 2) writeonly buffer D { uint db[]; };
#endif

layout(push_constant) uniform PC {
    uint k, n, m, x2;
    uint w_off, w_nb1, w_nb2, w_nb3;  // bytes
    uint x_off, x_nb1, x_nb2, x_nb3;  // floats (multiples of 4 here)
    uint d_off, d_nb1, d_nb2, d_nb3;  // floats
    uint bcast2, bcast3;
    uint u_off;  // floats (SWIGLU_X); bytes (GLU_OUT: the up weights' resid)
    // ROPE_OUT: head_dim, head stride (floats; d_nb1 is then the column stride), n_rot,
    // positions (offset, stride in int32), frequency factors (offset, present), theta_scale,
    // freq_scale.
#if NORM_OUT
    // NORM_OUT: the residual, the norm weight, the normalized result (floats), epsilon, the sum.
    uint r_off, nw_off, o_off;
    float eps;
    uint s_off;
#if XQ_OUT
    uint xq_on, xq_w;  // the quantized copy (0: none), its word offset in binding 2
    uint unused_[2];
#else
    uint unused_[4];
#endif
#elif GLU_OUT && XQ_OUT
    uint xq_on;  // the quantized copy (0: none)
    uint unused_[8];
#else
    uint hd, h_nb, n_rot, p_off, p_nb0, f_off, has_ff;
    float theta_scale, freq_scale;
#endif
    // KV_OUT: row indices (offset, stride in int32), rows of the cache.
    uint i_off, i_nb0, d_nrows;
} pc;

shared float red[256], red2[256];
#if NORM_OUT
shared bool is_last;
#endif
#if SG_RED
shared float sgp[256], sgp2[256];  // subgroup sums
#endif
#if ROPE_OUT || KV_OUT
shared float tot[256];  // the workgroup's row sums (its first row is even)
#endif

// x[xr + i .. xr + i + 3], xr and i multiples of 4.
vec4 x4(uint xr, uint i) {
#if SWIGLU_X
    const vec4 g = xb4[(xr + i) >> 2];
    return g / (1.0 + exp(-g)) * ub4[(xr - pc.x_off + pc.u_off + i) >> 2];
#else
    return xb4[(xr + i) >> 2];
#endif
}

#ifndef QQ
#define QQ 0
#endif
#if QQ && TYPE != T_Q4_0 && TYPE != T_Q8_0 && TYPE != T_Q6_K
#error "mul_mat_vec_q.comp: QQ is for Q4_0, Q8_0 and Q6_K"
#endif
// QX: x quantized once per workgroup to 8-bit blocks of 32 (a scale d and d * the sum of
// the integers per block, as Q8_1) in shared memory, and the products in integers: a block of
// 32 weights costs 8 four-way byte dot products and two 16-byte shared loads of x instead of
// 32 conversions, 32 multiply-adds and 128 bytes of x loaded per row (the float kernels are
// bound by that work, not by the weight bytes: 8B decode, Q4_0 read at half Q8_0's bytes per
// second). Unit: one block (Q4_0, Q8_0) or one 32-weight sub-block (Q4_K, Q6_K); the first units'
// weights are loaded before x is quantized, so that their latency overlaps it. x rows up to
// QX_MAXK values (the host checks it and the shared memory). QX_DOT: the byte dot products
// as SPV_KHR_integer_dot_product instructions (OpSDot, packed 4 x 8 bits; the host uses these
// shaders only on devices with that feature), else unpacked and multiplied.
#ifndef QX
#define QX 0
#endif
#ifndef QX_DOT
#define QX_DOT 0
#endif
#if QX && QQ
#error "mul_mat_vec_q.comp: QX or QQ"
#endif
#define T_INT4_ANY (TYPE == T_INT4 || TYPE == T_INT4_G32)
#define T_FP8_ANY (TYPE == T_FP8_E4M3 || TYPE == T_FP8_E5M2)
#if QX && TYPE != T_Q4_0 && TYPE != T_Q8_0 && TYPE != T_Q4_K && TYPE != T_Q6_K && !T_INT4_ANY && !T_FP8_ANY && TYPE != T_NF4
#error "mul_mat_vec_q.comp: QX is for Q4_0, Q8_0, Q4_K, Q6_K, INT4, INT4_G32, FP8_E4M3, FP8_E5M2 and NF4"
#endif
#if QX && TYPE == T_NF4
#include "nf4.glsl"
// NF4's codebook as signed bytes, round(127 NF4[q]) as the CUDA backend's (a weight moves by at
// most 0.4% of its block's absmax; x is rounded to 8 bits anyway), 4 copies shifted to the 4
// byte positions of a word (nf4_i8[16 p + q]: value q at byte p), so that 4 lookups and 3
// ORs give a word of 4 weights for a dot4; and the absmax map as floats. In shared memory
// (read by index: a constant array read with a different index per invocation is slow or
// spilled), filled at the start of main. One lookup instruction reads 16 words at most, each
// its own bank: no conflicts.
const int NF4_I8[16] = int[16](-127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127);
shared uint  nf4_i8[64];
shared float nf4_dyn[256];
#endif
// Weights per QX unit: a block of 32 (Q4_0, Q8_0, INT4 runs, FP8), a Q4_K / Q6_K sub-block of
// 32, a whole NF4 block of 64 (its low nibbles are weights 0..31, its high ones 32..63: a unit
// of 32 read the block's 33 bytes twice, for half its nibbles each time).
#if TYPE == T_NF4
#define QX_UW 64u
#else
#define QX_UW 32u
#endif
// QX_PRE: x already quantized (quantize_x.comp, once per product input, into a scratch slot
// bound at binding 1 instead of the float x): read from there, through the cache, with no
// quantization, shared memory or barrier before the products (one column; no SWIGLU_X).
#ifndef QX_PRE
#define QX_PRE 0
#endif
#if QX_PRE && (!QX || SWIGLU_X)
#error "mul_mat_vec_q.comp: QX_PRE goes with QX, without SWIGLU_X"
#endif
#if QX
#define QX_MAXK 16384u
#define QX_U USTEP
#if QX_PRE
layout(binding = 1) readonly buffer XQG { uvec4 xqg[]; };  // block b: xqg[2b], xqg[2b + 1]
layout(binding = 1) readonly buffer XDG { vec2 xdg[]; };   // block b: xdg[k / 8 + b]
#define XQ(i) xqg[i]
#define XDS(b) xdg[pc.k / 8u + (b)]
#else
shared uvec4 xq[QX_MAXK / 16u];  // block b: xq[2b], xq[2b + 1] (32 int8)
shared vec2  xds[QX_MAXK / 32u]; // block b: (d, d * sum of its integers)
#define XQ(i) xq[i]
#define XDS(b) xds[b]
#endif
#include "idot.glsl"
#endif

// Word i of the weights of row r (r a constant once the loops are unrolled): with GLU_OUT
// row 1 is the up matrix's.
uint wl(uint r, uint i) {
#if GLU_OUT
    return r == 0u ? wb[i] : ub[i];
#else
    return wb[i];
#endif
}
uvec4 wl4(uint r, uint i) {
#if GLU_OUT
    return r == 0u ? wb4[i] : ub4[i];
#else
    return wb4[i];
#endif
}

#if QQ || T_FP8_ANY
// The 4 signed bytes of q as floats (Q8_0's weights in QQ; x's integers in the QX products of
// the float-weight types).
vec4 i8v(uint q) {
    const int v = int(q);
    return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
}
#endif

#if !QX  // the 256-weight units (unit_dot) and the small ones (QQ): not the QX kernels
#if TYPE == T_Q4_0 || TYPE == T_Q4_K
#define UNIT_WORDS 36u  // 144 bytes
#elif TYPE == T_Q8_0
#define UNIT_WORDS 68u  // 272 bytes
#elif TYPE == T_Q6_K
#define UNIT_WORDS 53u  // 210 bytes, rounded up
#else
#error "mul_mat_vec_q.comp: Q4_0, Q8_0, Q4_K or Q6_K"
#endif

// The units of the invocation's rows (NR of them), in registers.
uint w[2][UNIT_WORDS];

// The 32 bits at byte o of row r's unit (r and o constants once the loops are unrolled).
uint word_at(uint r, uint o) {
    const uint s = (o & 3u) * 8u;
    return s == 0u ? w[r][o >> 2] : (w[r][o >> 2] >> s) | (w[r][(o >> 2) + 1u] << (32u - s));
}
uint byte_at(uint r, uint o) { return (w[r][o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }
float half_at(uint r, uint o) { return unpackHalf2x16(word_at(r, o)).x; }  // o even

vec4 lo4(uint q) { return vec4(uvec4(q, q >> 8, q >> 16, q >> 24) & 15u); }
vec4 hi4(uint q) { return vec4(uvec4(q >> 4, q >> 12, q >> 20, q >> 28) & 15u); }
float hsum(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

// Unit u of the row at byte rb into w[r].
void load_unit(uint r, uint rb, uint u) {
#if TYPE == T_Q4_0 || TYPE == T_Q4_K || TYPE == T_Q8_0
    const uint ub = (rb + u * (UNIT_WORDS * 4u)) >> 4;
    [[unroll]] for (uint j = 0u; j < UNIT_WORDS / 4u; j++) {
        const uvec4 v = wl4(r, ub + j);
        w[r][4u * j] = v.x;
        w[r][4u * j + 1u] = v.y;
        w[r][4u * j + 2u] = v.z;
        w[r][4u * j + 3u] = v.w;
    }
#else
    // Q6_K: the 53 words that hold the super-block, shifted down by 2 bytes when it starts
    // mid-word (super-blocks start on even bytes).
    const uint ub = rb + u * 210u;
    const uint wi = ub >> 2;
    const bool odd = (ub & 2u) != 0u;
    uint prev = wl(r, wi);
    [[unroll]] for (uint j = 0u; j < UNIT_WORDS; j++) {
        const uint next = j + 1u < UNIT_WORDS ? wl(r, wi + j + 1u) : 0u;
        w[r][j] = odd ? (prev >> 16) | (next << 16) : prev;
        prev = next;
    }
#endif
}

// Dot products of unit u of the NR rows at bytes rb[r] with x from float xr: every x value
// is loaded once for all the rows.
vec2 unit_dot(uvec2 rb, uint u, uint xr) {
    const uint x0 = u * 256u;
    [[unroll]] for (uint r = 0u; r < NR; r++) load_unit(r, rb[r], u);
    vec2 acc = vec2(0.0);
#if TYPE == T_Q4_0
    // 8 blocks of 18 bytes: f16 d, 16 bytes (weight l low nibble, weight l + 16 high nibble).
    [[unroll]] for (uint b = 0u; b < 8u; b++) {
        const uint o = 18u * b;
        vec2  s  = vec2(0.0);
        float sx = 0.0;
        [[unroll]] for (uint q = 0u; q < 4u; q++) {
            const vec4 xl = x4(xr, x0 + 32u * b + 4u * q);
            const vec4 xh = x4(xr, x0 + 32u * b + 16u + 4u * q);
            sx += hsum(xl + xh);
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                const uint qw = word_at(r, o + 2u + 4u * q);
                s[r] += dot(lo4(qw), xl) + dot(hi4(qw), xh);
            }
        }
        [[unroll]] for (uint r = 0u; r < NR; r++) acc[r] += half_at(r, o) * (s[r] - 8.0 * sx);
    }
#elif TYPE == T_Q8_0
    // 8 blocks of 34 bytes: f16 d, 32 int8.
    [[unroll]] for (uint b = 0u; b < 8u; b++) {
        const uint o = 34u * b;
        vec2 s = vec2(0.0);
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            const vec4 xv = x4(xr, x0 + 32u * b + 4u * q);
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                const int qw = int(word_at(r, o + 2u + 4u * q));
                const vec4 qv = vec4(bitfieldExtract(qw, 0, 8), bitfieldExtract(qw, 8, 8), bitfieldExtract(qw, 16, 8),
                                     bitfieldExtract(qw, 24, 8));
                s[r] += dot(qv, xv);
            }
        }
        [[unroll]] for (uint r = 0u; r < NR; r++) acc[r] += half_at(r, o) * s[r];
    }
#elif TYPE == T_Q4_K
    // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles: each 64
    // weights share 32 bytes, the first 32 in the low nibbles, the next 32 in the high ones.
    [[unroll]] for (uint jp = 0u; jp < 4u; jp++) {
        vec2 sl = vec2(0.0), sh = vec2(0.0);
        float sxl = 0.0, sxh = 0.0;
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            const vec4 xl = x4(xr, x0 + 64u * jp + 4u * q);
            const vec4 xh = x4(xr, x0 + 64u * jp + 32u + 4u * q);
            sxl += hsum(xl);
            sxh += hsum(xh);
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                const uint qw = w[r][4u + 8u * jp + q];
                sl[r] += dot(lo4(qw), xl);
                sh[r] += dot(hi4(qw), xh);
            }
        }
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            const float d = half_at(r, 0u), dmin = half_at(r, 2u);
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                const uint j = 2u * jp + h;
                uint sc, mn;
                if (j < 4u) {
                    sc = byte_at(r, 4u + j) & 63u;
                    mn = byte_at(r, 8u + j) & 63u;
                } else {
                    const uint s4 = byte_at(r, 8u + j);
                    sc = (s4 & 15u) | ((byte_at(r, j) >> 6) << 4);
                    mn = (s4 >> 4) | ((byte_at(r, 4u + j) >> 6) << 4);
                }
                acc[r] += d * float(sc) * (h == 0u ? sl[r] : sh[r]) - dmin * float(mn) * (h == 0u ? sxl : sxh);
            }
        }
    }
#else
    // Q6_K: ql[128], qh[64], int8 scales[16], f16 d. In each half h of 128 weights, for l in
    // 0..31 and k in 0..3, weight 32 k + l is the nibble k >> 1 of ql[64 h + l + 32 (k & 1)]
    // plus bits 2k..2k+1 of qh[32 h + l] as bits 4..5, minus 32; scale 8 h + 2 k + l / 16.
    vec2 t = vec2(0.0);
    [[unroll]] for (uint h = 0u; h < 2u; h++) {
        [[unroll]] for (uint l4 = 0u; l4 < 8u; l4++) {
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                const vec4 xv = x4(xr, x0 + 128u * h + 32u * k + 4u * l4);
                const uint j  = 8u * h + 2u * k + (l4 >> 2);
                [[unroll]] for (uint r = 0u; r < NR; r++) {
                    const uint  L  = w[r][16u * h + 8u * (k & 1u) + l4];
                    const uint  C  = w[r][32u + 8u * h + l4];
                    const uvec4 lo = (uvec4(L, L >> 8, L >> 16, L >> 24) >> (4u * (k >> 1))) & 15u;
                    const uvec4 hi = (uvec4(C, C >> 8, C >> 16, C >> 24) >> (2u * k)) & 3u;
                    const vec4  qv = vec4(ivec4(lo | (hi << 4)) - 32);
                    const float sc = float(bitfieldExtract(int(w[r][48u + (j >> 2)]), int(8u * (j & 3u)), 8));
                    t[r] += sc * dot(qv, xv);
                }
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < NR; r++) acc[r] = half_at(r, 208u) * t[r];
#endif
    return acc;
}

#if QQ
// QQ: small units, so that neighbouring invocations read neighbouring words of the row and
// neighbouring vec4 of x (coalesced), and little is held in registers (many subgroups in
// flight). QU weights per unit:
// Q4_0, Q8_0: a quarter of a block (8 weights), a subgroup reads 8 blocks (144 or 272
// contiguous bytes) and 1 KiB of x per step; the block's scale is read by its 4 invocations.
// Q6_K: 16 weights (4 of each of the 4 quarters of a half super-block: one word of each ql
// half, one of qh), 16 invocations per super-block; super-blocks start on 2 bytes, so each
// word is put together from two (neighbouring invocations read the same ones: L1 hits).
#if TYPE == T_Q6_K
#define QU 16u
#else
#define QU 8u
#endif

// The 32 bits at bytes 2..5 of (a, b) when s16, else a.
uint funnel(uint a, uint b, bool s16) { return s16 ? (a >> 16) | (b << 16) : a; }

vec2 quarter_dot(uvec2 rb, uint u, uint xr) {
    vec2 acc = vec2(0.0);
#if TYPE == T_Q4_0
    // Quarter q of a block: qs word q, its low nibbles weights 4q..4q+3, its high ones 16+4q..16+4q+3.
    const uint blk = u >> 2, q = u & 3u;
    const vec4 xl  = x4(xr, 32u * blk + 4u * q);
    const vec4 xh  = x4(xr, 32u * blk + 16u + 4u * q);
    const float sx = hsum(xl + xh);
    [[unroll]] for (uint r = 0u; r < NR; r++) {
        const uint bo = rb[r] + 18u * blk;  // even
        const uint i  = bo >> 2;
        const uint w0 = wl(r, i);
        const uint w1 = wl(r, i + q + 1u);
        // bo on a word: d in w0's low half, qs word q at bo + 2 + 4q: the high half of word
        // i + q and the low half of i + q + 1; else d in w0's high half, qs word q = word i + q + 1.
        uint qw, dh;
        if ((bo & 2u) == 0u) {
            const uint wq = q == 0u ? w0 : wl(r, i + q);
            qw = (wq >> 16) | (w1 << 16);
            dh = w0 & 0xffffu;
        } else {
            qw = w1;
            dh = w0 >> 16;
        }
        acc[r] = unpackHalf2x16(dh).x * (dot(lo4(qw), xl) + dot(hi4(qw), xh) - 8.0 * sx);
    }
#elif TYPE == T_Q8_0
    // Quarter q of a block (34 bytes: f16 d, 32 int8): bytes 2 + 8q .. 9 + 8q.
    const uint blk = u >> 2, q = u & 3u;
    const vec4 xa  = x4(xr, 32u * blk + 8u * q);
    const vec4 xb  = x4(xr, 32u * blk + 8u * q + 4u);
    [[unroll]] for (uint r = 0u; r < NR; r++) {
        const uint bo  = rb[r] + 34u * blk;  // even
        const bool odd = (bo & 2u) != 0u;    // d in the high half of its word, the bytes on words
        const uint dw  = wl(r, bo >> 2);
        const uint j   = (bo + 2u + 8u * q) >> 2;
        const uint a = wl(r, j), b = wl(r, j + 1u), c = wl(r, j + (odd ? 1u : 2u));
        const uint q0 = funnel(a, b, !odd), q1 = funnel(b, c, !odd);
        acc[r] = unpackHalf2x16(odd ? dw >> 16 : dw).x * (dot(i8v(q0), xa) + dot(i8v(q1), xb));
    }
#else
    // Q6_K: unit p = u % 16 of super-block u / 16: half h = p / 8, l = 4 (p % 8) .. + 3; its
    // weights 128 h + 32 k + l for k = 0..3 (see unit_dot), scales 8 h + 2 k + l / 16.
    const uint sb = u >> 4, p = u & 15u, h = p >> 3, j = p & 7u, jj = j >> 2;
    const uint xo = 256u * sb + 128u * h + 4u * j;
    vec4 xv[4];
    [[unroll]] for (uint k = 0u; k < 4u; k++) xv[k] = x4(xr, xo + 32u * k);
    [[unroll]] for (uint r = 0u; r < NR; r++) {
        const uint bo = rb[r] + 210u * sb;  // even
        const uint i  = bo >> 2;
        const bool s  = (bo & 2u) != 0u;
        const uint e  = s ? 1u : 0u;
#define Q6W(o) funnel(wl(r, i + (o) / 4u), wl(r, i + (o) / 4u + e), s)
        const uint L0 = Q6W(64u * h + 4u * j);
        const uint L1 = Q6W(64u * h + 32u + 4u * j);
        const uint C  = Q6W(128u + 32u * h + 4u * j);
        const uint S0 = Q6W(192u + 8u * h);
        const uint S1 = Q6W(196u + 8u * h);
#undef Q6W
        const uint dw = wl(r, i + 52u);  // d at byte 208
        float t = 0.0;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            const uint L  = (k & 1u) == 0u ? L0 : L1;
            const uint qb = ((L >> (4u * (k >> 1))) & 0x0f0f0f0fu) | (((C >> (2u * k)) & 0x03030303u) << 4);
            const vec4 qv = vec4(uvec4(qb, qb >> 8, qb >> 16, qb >> 24) & 0xffu) - 32.0;
            const float sc = float(bitfieldExtract(int(k < 2u ? S0 : S1), int(8u * ((2u * k + jj) & 3u)), 8));
            t += sc * dot(qv, xv[k]);
        }
        acc[r] = unpackHalf2x16(s ? dw >> 16 : dw).x * t;
    }
#endif
    return acc;
}
#endif
#endif  // !QX

#if QX
#if TYPE == T_Q4_0
#define QX_WORDS 5u  // the words over an 18-byte block (it starts on an even byte)
#elif T_INT4_ANY
#define QX_WORDS 5u  // the group's (d, z) word and the 4 words of the unit's nibbles
#elif T_FP8_ANY
#define QX_WORDS 9u  // a 33-byte block (on any byte), realigned: its scale byte, then the codes
#elif TYPE == T_NF4
#define QX_WORDS 11u  // a 33-byte block realigned (absmax_q, 32 bytes of nibbles), its group's scale2 and offset
#elif TYPE == T_Q8_0
#define QX_WORDS 9u  // over a 34-byte block
#elif TYPE == T_Q4_K
#define QX_WORDS 12u  // Q4_K: d, dmin and the 12 scale bytes; the 32 bytes of the sub-block's nibbles
#else
#define QX_WORDS 18u  // Q6_K: the 32 bytes of low bits and of high bits, the 2 scales, d
#endif
// The words of unit u of the row at byte rb (ready for qx_dot).
void qx_load(uint r, uint rb, uint u, out uint v[QX_WORDS]) {
#if TYPE == T_Q6_K
    // Super-blocks of 210 bytes (on even bytes): ql[128], qh[64], 16 int8 scales, f16 d. The
    // sub-block j = 4n + p of 32 weights: ql bytes 64n + 32(p & 1) .. + 31 (nibble p >> 1), qh
    // bytes 32n .. + 31 (bits 2p, 2p + 1), scales 8n + 2p (weights 0..15), + 1 (16..31).
    const uint base = rb + 210u * (u >> 3);
    const uint j = u & 7u, n = j >> 2, p = j & 3u;
    const uint ol = base + 64u * n + 32u * (p & 1u), oh = base + 128u + 32u * n;
    uint       a[9], b[9];
    [[unroll]] for (uint i = 0u; i < 9u; i++) {
        a[i] = wl(r, (ol >> 2) + i);
        b[i] = wl(r, (oh >> 2) + i);
    }
    const bool odd = (base & 2u) != 0u;  // ol, oh: base + multiples of 32
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        v[i]      = odd ? (a[i] >> 16) | (a[i + 1u] << 16) : a[i];
        v[8u + i] = odd ? (b[i] >> 16) | (b[i + 1u] << 16) : b[i];
    }
    const uint os = base + 192u + 8u * n + 2u * p, od = base + 208u;
    v[16] = wl(r, os >> 2) >> (8u * (os & 2u));
    v[17] = wl(r, od >> 2) >> (8u * (od & 2u));
#elif T_FP8_ANY || TYPE == T_NF4
    // Blocks of 33 bytes (on any byte): the E8M0 scale exponent, then 32 codes (FP8), or
    // absmax_q, then 32 bytes of nibbles (NF4: 64 weights, unit u the whole block, in row
    // groups of 256 blocks after an 8-byte header: f32 scale2, f32 offset; rows on 4 bytes, the
    // host checks). The 9 words over the block, shifted so that v[0]'s low byte is its first
    // (the bytes past its last in v[8] are the next block's or the binding's padding: the host
    // rounds ranges up to 16).
#if TYPE == T_NF4
    const uint gb = rb + (u >> 8) * (8u + 256u * 33u);
    const uint bo = gb + 8u + (u & 255u) * 33u;
    v[9]          = wl(r, gb >> 2);
    v[10]         = wl(r, (gb >> 2) + 1u);
#else
    const uint bo = rb + 33u * u;
#endif
    const uint i = bo >> 2, sh = 8u * (bo & 3u);
    uint       a[9];
    [[unroll]] for (uint j = 0u; j < 9u; j++) a[j] = wl(r, i + j);
    [[unroll]] for (uint j = 0u; j < 9u; j++) {
        const uint nx = j + 1u < 9u ? a[j + 1u] : 0u;  // a[9] would hold only bytes past the block
        v[j] = sh == 0u ? a[j] : (a[j] >> sh) | (nx << (32u - sh));
    }
#elif T_INT4_ANY
    // Groups of 128 (INT4: 68 bytes) or 32 (INT4_G32: 20 bytes) weights, on 4 bytes: f16 d, f16
    // z, then the nibbles of each run of 32 weights in Q4_0's order (16 bytes). Unit: one run.
#if TYPE == T_INT4
    const uint bo = rb + 68u * (u >> 2);
    const uint qo = bo + 4u + 16u * (u & 3u);
#else
    const uint bo = rb + 20u * u;
    const uint qo = bo + 4u;
#endif
    v[0] = wl(r, bo >> 2);
    [[unroll]] for (uint j = 0u; j < 4u; j++) v[1u + j] = wl(r, (qo >> 2) + j);
#elif TYPE == T_Q4_K
    const uint sb = (rb + 144u * (u >> 3)) >> 4;  // super-blocks start on 16 bytes (the host checks)
    const uvec4 h = wl4(r, sb), a = wl4(r, sb + 1u + 2u * ((u & 7u) >> 1)), b = wl4(r, sb + 2u + 2u * ((u & 7u) >> 1));
    v[0] = h.x; v[1] = h.y; v[2] = h.z; v[3] = h.w;
    v[4] = a.x; v[5] = a.y; v[6] = a.z; v[7] = a.w;
    v[8] = b.x; v[9] = b.y; v[10] = b.z; v[11] = b.w;
#else
#if TYPE == T_Q4_0
    const uint bo = rb + 18u * u;
#else
    const uint bo = rb + 34u * u;
#endif
    const uint i = bo >> 2;
    [[unroll]] for (uint j = 0u; j < QX_WORDS; j++) v[j] = wl(r, i + j);
    // Realigned: v[0] holds d in its low half, v[1..] the quants from their first byte.
    if ((bo & 2u) == 0u) {
        [[unroll]] for (uint j = QX_WORDS - 1u; j > 0u; j--) v[j] = (v[j - 1u] >> 16) | (v[j] << 16);
    } else {
        v[0] >>= 16;
    }
#endif
}

#if T_FP8_ANY
// The 4 FP8 codes of word w as floats, exactly, in two unpackHalf2x16: each code's bits moved
// into an f16 (E5M2 is the top byte of an f16, infinities and NaN included; E4M3's exponent and
// mantissa go below f16's, so that its value comes out times 2^-8, and its subnormal codes
// as f16 subnormals). About 8 integer operations and 4 conversions per word; rebuilding f32s
// with selects for subnormals, NaN and the signs took about 50, and bound the FP8 products
// (H200, 1B FP8_E4M3: gate + up 32.7 us per layer, 1.06 TB/s). E4M3's NaN code (S.1111.111)
// would read as 480 * 2^-8: fp8_nan() flags it.
vec4 fp8x4(uint w) {
#if TYPE == T_FP8_E4M3
    const uint h02 = ((w & 0x007f007fu) << 7) | ((w & 0x00800080u) << 8);  // codes 0 and 2
    const uint h13 = ((w & 0x7f007f00u) >> 1) | (w & 0x80008000u);         // codes 1 and 3
#else
    const uint h02 = (w & 0x00ff00ffu) << 8;
    const uint h13 = w & 0xff00ff00u;
#endif
    const vec2 a = unpackHalf2x16(h02), b = unpackHalf2x16(h13);
    return vec4(a.x, b.x, a.y, b.y);
}
// E4M3: whether a code of w is NaN (its exponent and mantissa bits all set).
bool fp8_nan(uint w) { return (((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0u; }
#endif

// The dot product of unit u (words v, from qx_load) with the quantized x.
float qx_dot(const uint v[QX_WORDS], uint u) {
#if TYPE == T_NF4
    // The block's 8 words of nibbles (bytes 1..32): low nibbles against x's block 2u, high
    // ones against 2u + 1, as int8 codebook values (nf4_i8) in dot products; absmax =
    // DYN[absmax_q] * scale2 + offset, rounded twice as the reference, times 1/127.
    const uvec4 x0 = XQ(4u * u), x1 = XQ(4u * u + 1u), x2 = XQ(4u * u + 2u), x3 = XQ(4u * u + 3u);
    int         slo = 0, shi = 0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        const uint q  = (v[j] >> 8) | (v[j + 1u] << 24);  // bytes 4j .. 4j + 3 of the nibbles (unsigned: no sign extension)
        const uint lo = nf4_i8[bitfieldExtract(q, 0, 4)] | nf4_i8[16u + bitfieldExtract(q, 8, 4)] |
                        nf4_i8[32u + bitfieldExtract(q, 16, 4)] | nf4_i8[48u + bitfieldExtract(q, 24, 4)];
        const uint hi = nf4_i8[bitfieldExtract(q, 4, 4)] | nf4_i8[16u + bitfieldExtract(q, 12, 4)] |
                        nf4_i8[32u + bitfieldExtract(q, 20, 4)] | nf4_i8[48u + (q >> 28)];
        slo += dot4(lo, j < 4u ? x0[j] : x1[j - 4u]);
        shi += dot4(hi, j < 4u ? x2[j] : x3[j - 4u]);
    }
    precise float absmax = nf4_dyn[v[0] & 0xffu] * uintBitsToFloat(v[9]);
    absmax += uintBitsToFloat(v[10]);
    return absmax * (1.0 / 127.0) * (XDS(2u * u).x * float(slo) + XDS(2u * u + 1u).x * float(shi));
#elif T_FP8_ANY
    // One block: scale 2^(e - 127) (e = 255: NaN; e = 0: 2^-127, which a device that flushes
    // subnormals reads as 0, as dequant.glsl) times the codes' float dot product with x's integers.
    const uvec4 x0 = XQ(2u * u), x1 = XQ(2u * u + 1u);
    float       s  = 0.0;
    bool        nan = false;
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        const uint cw = (v[j] >> 8) | (v[j + 1u] << 24);  // codes 4j .. 4j + 3
        s += dot(fp8x4(cw), i8v(j < 4u ? x0[j] : x1[j - 4u]));
#if TYPE == T_FP8_E4M3
        nan = nan || fp8_nan(cw);
#endif
    }
    const uint  se    = v[0] & 0xffu;
    const float scale = uintBitsToFloat(se == 255u ? 0x7fc00000u : se == 0u ? 0x00400000u : se << 23);
#if TYPE == T_FP8_E4M3
    s *= 256.0;  // fp8x4's 2^-8
    if (nan) s = uintBitsToFloat(0x7fc00000u);
#endif
    return scale * XDS(u).x * s;
#elif TYPE == T_Q6_K
    const uvec4 x0 = XQ(2u * u), x1 = XQ(2u * u + 1u);
    const uint  p = u & 3u, shl = 4u * (p >> 1), shh = 2u * p;
    int         s0 = 0, s1 = 0;  // weights 0..15, 16..31 (a scale each)
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        // The 6-bit values minus 32 as signed bytes: bit 5 flipped, and where it is then set
        // (the value was below 32) bits 6 and 7 too.
        const uint q  = ((v[i] >> shl) & 0x0f0f0f0fu) | (((v[8u + i] >> shh) & 0x03030303u) << 4);
        const uint t  = q ^ 0x20202020u;
        const uint sg = t & 0x20202020u;
        const int  d  = dot4(t | (sg << 1) | (sg << 2), i < 4u ? x0[i & 3u] : x1[i & 3u]);
        if (i < 4u) s0 += d;
        else s1 += d;
    }
    const float sc0 = float(bitfieldExtract(int(v[16]), 0, 8)), sc1 = float(bitfieldExtract(int(v[16]), 8, 8));
    return unpackHalf2x16(v[17]).x * XDS(u).x * (sc0 * float(s0) + sc1 * float(s1));
#elif TYPE == T_Q4_K
    // Sub-block u is x block u.
    const uvec4 x0 = XQ(2u * u), x1 = XQ(2u * u + 1u);
    const vec2  xd = XDS(u);
    const uint  j  = u & 7u, sh = 4u * (j & 1u);
    int         s  = dot4((v[4] >> sh) & 0x0f0f0f0fu, x0.x) + dot4((v[5] >> sh) & 0x0f0f0f0fu, x0.y) +
             dot4((v[6] >> sh) & 0x0f0f0f0fu, x0.z) + dot4((v[7] >> sh) & 0x0f0f0f0fu, x0.w);
    s += dot4((v[8] >> sh) & 0x0f0f0f0fu, x1.x) + dot4((v[9] >> sh) & 0x0f0f0f0fu, x1.y) +
         dot4((v[10] >> sh) & 0x0f0f0f0fu, x1.z) + dot4((v[11] >> sh) & 0x0f0f0f0fu, x1.w);
    // The 6-bit scale and min of sub-block j (bytes 4..15 of the super-block: v[1..3]).
    const uint b4j = (v[1u + (j >> 2)] >> (8u * (j & 3u))) & 0xffu;  // byte 4 + j (j < 4: the scale)
    uint       sc, mn;
    if (j < 4u) {
        sc = b4j & 63u;
        mn = (v[2u] >> (8u * j)) & 63u;  // byte 8 + j
    } else {
        const uint s4 = (v[3u] >> (8u * (j - 4u))) & 0xffu;  // byte 8 + j
        sc = (s4 & 15u) | (((v[1u] >> (8u * (j - 4u))) & 0xffu) >> 6 << 4);  // byte j - 4 + 4 = j: v[1] bytes
        mn = (s4 >> 4) | ((b4j >> 6) << 4);
    }
    const vec2 dm = unpackHalf2x16(v[0]);
    return dm.x * float(sc) * xd.x * float(s) - dm.y * float(mn) * xd.y;
#elif TYPE == T_Q4_0 || T_INT4_ANY
    const uvec4 x0 = XQ(2u * u), x1 = XQ(2u * u + 1u);
    const vec2  xd = XDS(u);
    const int   s  = dot4(v[1] & 0x0f0f0f0fu, x0.x) + dot4(v[2] & 0x0f0f0f0fu, x0.y) + dot4(v[3] & 0x0f0f0f0fu, x0.z) +
                  dot4(v[4] & 0x0f0f0f0fu, x0.w) + dot4((v[1] >> 4) & 0x0f0f0f0fu, x1.x) +
                  dot4((v[2] >> 4) & 0x0f0f0f0fu, x1.y) + dot4((v[3] >> 4) & 0x0f0f0f0fu, x1.z) +
                  dot4((v[4] >> 4) & 0x0f0f0f0fu, x1.w);
#if T_INT4_ANY
    // d (q - z): d (dx sum(q xq) - z dx sum(xq)).
    const vec2 dz = unpackHalf2x16(v[0]);
    return dz.x * (xd.x * float(s) - dz.y * xd.y);
#else
    return unpackHalf2x16(v[0]).x * (xd.x * float(s) - 8.0 * xd.y);
#endif
#else
    const uvec4 x0 = XQ(2u * u), x1 = XQ(2u * u + 1u);
    const int   s  = dot4(v[1], x0.x) + dot4(v[2], x0.y) + dot4(v[3], x0.z) + dot4(v[4], x0.w) + dot4(v[5], x1.x) +
                  dot4(v[6], x1.y) + dot4(v[7], x1.z) + dot4(v[8], x1.w);
    return unpackHalf2x16(v[0]).x * XDS(u).x * float(s);
#endif
}

#if !QX_PRE
// x from float xr (k values) into xq / xds, block by block over the workgroup.
void qx_quantize(uint xr) {
    const uint nb = pc.k / 32u;
    for (uint b = gl_LocalInvocationID.x; b < nb; b += gl_WorkGroupSize.x) {
        vec4  xv[8];
        float amax = 0.0;
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            xv[j] = x4(xr, 32u * b + 4u * j);
            const vec4 a = abs(xv[j]);
            amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        }
        const float d  = amax / 127.0;
        const float id = d > 0.0 ? 1.0 / d : 0.0;
        int         sum = 0;
        uint        q[8];
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            const ivec4 qi = ivec4(round(xv[j] * id));
            sum += (qi.x + qi.y) + (qi.z + qi.w);
            q[j] = (uint(qi.x) & 0xffu) | ((uint(qi.y) & 0xffu) << 8) | ((uint(qi.z) & 0xffu) << 16) | (uint(qi.w) << 24);
        }
        xq[2u * b]      = uvec4(q[0], q[1], q[2], q[3]);
        xq[2u * b + 1u] = uvec4(q[4], q[5], q[6], q[7]);
        xds[b]          = vec2(d, d * float(sum));
    }
}
#endif
#endif

#if GLU_OUT && XQ_OUT
// Block b (32 values of the result row at d_off, a multiple of 32) quantized by one
// invocation, with quantize_x.comp's arithmetic: int8 words at word 8b of the slot, then
// (d, d * the sum of the integers) at vec2 n / 8 + b.
void xq_block(uint b) {
    vec4  v[8];
    float m = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        const uint o = pc.d_off + 32u * b + 4u * j;
        v[j]         = vec4(uintBitsToFloat(db[o]), uintBitsToFloat(db[o + 1u]), uintBitsToFloat(db[o + 2u]), uintBitsToFloat(db[o + 3u]));
        const vec4 a = abs(v[j]);
        m            = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d  = m / 127.0;
    const float id = d > 0.0 ? 1.0 / d : 0.0;
    int         s  = 0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        const ivec4 q = ivec4(round(v[j] * id));
        s += (q.x + q.y) + (q.z + q.w);
        xqo[8u * b + j] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
    }
    xqd[pc.n / 8u + b] = vec2(d, d * float(s));
}
#endif

void main() {
    const uint tid  = gl_LocalInvocationID.x;
    const uint lane = tid % LPR;
#if GLU_OUT
    const uint r0   = flat_group() * (gl_WorkGroupSize.x / LPR) + tid / LPR;  // row r0 of gate and of up
#else
    const uint r0   = (flat_group() * (gl_WorkGroupSize.x / LPR) + tid / LPR) * NR;  // rows r0 .. r0 + NR - 1
#endif
    const uint c    = gl_WorkGroupID.z % pc.m;
    const uint i2   = (gl_WorkGroupID.z / pc.m) % pc.x2;
    const uint i3   = gl_WorkGroupID.z / (pc.m * pc.x2);
    vec2       sum  = vec2(0.0);
#if QX
#if TYPE == T_NF4
    for (uint i = tid; i < 256u; i += gl_WorkGroupSize.x) {
        nf4_dyn[i] = uintBitsToFloat(NF4_DYN[i]);
        if (i < 64u) nf4_i8[i] = (uint(NF4_I8[i & 15u]) & 0xffu) << (8u * (i >> 4));
    }
    barrier();
#endif
    {
        const bool live = r0 < pc.n;
        const uint wm   = pc.w_off + (i2 / pc.bcast2) * pc.w_nb2 + (i3 / pc.bcast3) * pc.w_nb3;
#if GLU_OUT
        const uvec2 rb = uvec2(wm + r0 * pc.w_nb1, wm - pc.w_off + pc.u_off + r0 * pc.w_nb1);
#else
        const uvec2 rb = uvec2(wm + r0 * pc.w_nb1, wm + (NR > 1u && r0 + 1u < pc.n ? r0 + 1u : r0) * pc.w_nb1);
#endif
        const uint nu = pc.k / QX_UW;
        // Units lane + LPR * (QX_U * s + j): their words, the first step's loaded before x.
        uint v[QX_U][2][QX_WORDS];
        [[unroll]] for (uint j = 0u; j < QX_U; j++) {
            const uint u = lane + LPR * j;
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                if (live && u < nu) qx_load(r, rb[r], u, v[j][r]);
            }
        }
#if !QX_PRE
        qx_quantize(pc.x_off + c * pc.x_nb1 + i2 * pc.x_nb2 + i3 * pc.x_nb3);
        barrier();
#endif
        if (live) {
            for (uint u0 = lane; u0 < nu; u0 += QX_U * LPR) {
                [[unroll]] for (uint j = 0u; j < QX_U; j++) {
                    const uint u = u0 + LPR * j;
                    if (u < nu) {
                        [[unroll]] for (uint r = 0u; r < NR; r++) sum[r] += qx_dot(v[j][r], u);
                    }
                }
                [[unroll]] for (uint j = 0u; j < QX_U; j++) {
                    const uint u = u0 + LPR * (QX_U + j);
                    [[unroll]] for (uint r = 0u; r < NR; r++) {
                        if (u < nu) qx_load(r, rb[r], u, v[j][r]);
                    }
                }
            }
        }
    }
#else
    if (r0 < pc.n) {
        const uint wm = pc.w_off + (i2 / pc.bcast2) * pc.w_nb2 + (i3 / pc.bcast3) * pc.w_nb3;
        // A second row past the end reads the first one again (its sum is not written).
#if GLU_OUT
        const uvec2 rb = uvec2(wm + r0 * pc.w_nb1, wm - pc.w_off + pc.u_off + r0 * pc.w_nb1);
#else
        const uvec2 rb = uvec2(wm + r0 * pc.w_nb1, wm + (NR > 1u && r0 + 1u < pc.n ? r0 + 1u : r0) * pc.w_nb1);
#endif
        const uint  xr = pc.x_off + c * pc.x_nb1 + i2 * pc.x_nb2 + i3 * pc.x_nb3;
#if QQ
        // USTEP quarters per step, their loads issued together.
        const uint nu = pc.k / QU;
        uint       u  = lane;
        for (; u + (USTEP - 1u) * LPR < nu; u += USTEP * LPR) {
            vec2 s = vec2(0.0);
            [[unroll]] for (uint j = 0u; j < USTEP; j++) s += quarter_dot(rb, u + j * LPR, xr);
            sum += s;
        }
        for (; u < nu; u += LPR) sum += quarter_dot(rb, u, xr);
#else
        const uint  nu = pc.k / 256u;
        for (uint u = lane; u < nu; u += LPR) sum += unit_dot(rb, u, xr);
#endif
    }
#endif
#if SG_RED
    // gl_SubgroupSize is the same for the whole workgroup: the branch is uniform (barriers).
    // A row's subgroups are tid / gl_SubgroupSize: invocations are assumed numbered subgroup
    // by subgroup (the tests would catch a driver that does otherwise).
    if (LPR % gl_SubgroupSize == 0u) {
        const float sx = subgroupAdd(sum.x), sy = subgroupAdd(sum.y);
        if (subgroupElect()) {
            sgp[gl_SubgroupID]  = sx;
            sgp2[gl_SubgroupID] = sy;
        }
        barrier();
        if (lane == 0u) {
            const uint s0 = tid / gl_SubgroupSize;
            float      tx = 0.0, ty = 0.0;
            for (uint k = 0u; k < LPR / gl_SubgroupSize; k++) {
                tx += sgp[s0 + k];
                ty += sgp2[s0 + k];
            }
            red[tid]  = tx;  // where the epilogues read a row's total (only its lane 0 reads it)
            red2[tid] = ty;
        }
    } else
#endif
    {
        red[tid]  = sum.x;
        red2[tid] = sum.y;
        barrier();
        // The LPR partial sums of a row, in log2(LPR) steps: its total lands at its lane 0.
        for (uint h = LPR / 2u; h > 0u; h >>= 1) {
            if (lane < h) {
                red[tid] += red[tid + h];
                red2[tid] += red2[tid + h];
            }
            barrier();
        }
    }
#if KV_OUT
    const uint lr0 = (tid / LPR) * NR;  // local row of r0
    if (lane == 0u) {
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            tot[lr0 + r] = r == 0u ? red[tid] : red2[tid];
        }
    }
    barrier();
    const int id   = kv_idx[pc.i_off + c * pc.i_nb0];
    bool      keep = id >= 0 && uint(id) < pc.d_nrows;  // never write outside the cache
    if (!keep && tid == 0u) kv_err[0] = 1u;
    for (uint j = c + 1u; j < pc.m; j++) {
        if (kv_idx[pc.i_off + j * pc.i_nb0] == id) keep = false;  // a later column wins
    }
    if (lane == 0u && keep) {
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            const uint row = r0 + r;
            if (row >= pc.n) break;
            if ((row & 1u) != 0u) continue;  // written with the even row before it
            const uint lr = lr0 + r;
            vec2       y  = vec2(tot[lr], tot[lr + 1u]);
#if ROPE_OUT
            const uint i0 = row % pc.hd;
            if (i0 < pc.n_rot) {
                const uint  p      = i0 / 2u;
                const float ps     = float(pos[pc.p_off + c * pc.p_nb0]);
                const float factor = pc.has_ff != 0u ? ff[pc.f_off + p] : 1.0;
                const float th     = pc.freq_scale * ((ps * pow(pc.theta_scale, float(p))) / factor);
                const float cs = cos(th), sn = sin(th);
                y = vec2(y.x * cs - y.y * sn, y.x * sn + y.y * cs);
            }
#endif
            db[(pc.d_off + uint(id) * pc.d_nb1 + row * 2u) >> 2] = packHalf2x16(y);
        }
    }
#elif ROPE_OUT
    const uint lr0 = (tid / LPR) * NR;  // local row of r0
    if (lane == 0u) {
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            tot[lr0 + r] = r == 0u ? red[tid] : red2[tid];
        }
    }
    barrier();
    if (lane == 0u) {
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            const uint row = r0 + r;
            if (row >= pc.n) break;
            const uint i0 = row % pc.hd;
            const uint lr = lr0 + r;
            float      y  = tot[lr];
            if (i0 < pc.n_rot) {
                const uint  p      = i0 / 2u;
                const float ps     = float(pos[pc.p_off + c * pc.p_nb0]);
                const float factor = pc.has_ff != 0u ? ff[pc.f_off + p] : 1.0;
                const float th     = pc.freq_scale * ((ps * pow(pc.theta_scale, float(p))) / factor);
                const float cs = cos(th), sn = sin(th);
                const float x0 = tot[lr & ~1u], x1 = tot[lr | 1u];
                y = (i0 & 1u) == 0u ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
            }
            db[pc.d_off + c * pc.d_nb1 + (row / pc.hd) * pc.h_nb + i0] = floatBitsToUint(y);
        }
    }
#elif NORM_OUT
    if (lane == 0u) {
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            const uint row = r0 + r;
            if (row >= pc.n) break;
            db[pc.d_off + row] = floatBitsToUint(r == 0u ? red[tid] : red2[tid]);
        }
    }
    // Every row of this workgroup written and made visible, then counted.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        const uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        is_last = atomicAdd(cnt[0], 1u) == groups - 1u;
    }
    barrier();
    if (!is_last) return;  // shared: uniform in the workgroup
    memoryBarrierBuffer();
    // The last workgroup: every load issued before any is used (a few round trips, not n).
    const uint wgs = gl_WorkGroupSize.x, nv = pc.n / 4u;
    vec4       sv[NORM_V];
    [[unroll]] for (uint j = 0u; j < NORM_V; j++) {
        const uint v = tid + j * wgs;
        sv[j]        = v < nv ? db4[pc.d_off / 4u + v] + rs4[pc.r_off / 4u + v] : vec4(0.0);
    }
    float ss = 0.0;
    [[unroll]] for (uint j = 0u; j < NORM_V; j++) ss += dot(sv[j], sv[j]);
#if SG_RED
    ss = subgroupAdd(ss);
    if (subgroupElect()) sgp[gl_SubgroupID] = ss;
    barrier();
    float tot = 0.0;
    for (uint k = 0u; k < gl_NumSubgroups; k++) tot += sgp[k];
#else
    red[tid] = ss;
    barrier();
    for (uint h = wgs / 2u; h > 0u; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float tot = red[0];
#endif
    // Every load of the workgroup is done (its values were summed): the outputs may overwrite them.
    const float scale = 1.0 / sqrt(tot / float(pc.n) + pc.eps);
    [[unroll]] for (uint j = 0u; j < NORM_V; j++) {
        const uint v = tid + j * wgs;
        if (v < nv) {
            sb4[pc.s_off / 4u + v] = sv[j];
#if XQ_OUT
            sv[j]                  = sv[j] * scale * nw4[pc.nw_off / 4u + v];
            ob4[pc.o_off / 4u + v] = sv[j];
#else
            ob4[pc.o_off / 4u + v] = sv[j] * scale * nw4[pc.nw_off / 4u + v];
#endif
        }
    }
    if (tid == 0u) cnt[0] = 0u;  // for the next dispatch that counts on this word
#if XQ_OUT
    if (pc.xq_on != 0u) {
        // Blocks of 32 values: 8 neighbouring invocations (one vec4 each, as in quantize_x.comp),
        // their absolute maxima and integer sums through shared memory.
        barrier();  // red is read above (the norm's total)
        [[unroll]] for (uint j = 0u; j < NORM_V; j++) {
            if (j * wgs >= nv) break;  // uniform
            const uint v  = tid + j * wgs;
            const vec4 a  = abs(sv[j]);
            red[tid]      = v < nv ? max(max(a.x, a.y), max(a.z, a.w)) : 0.0;
            barrier();
            const uint b0 = tid & ~7u;
            float      m  = 0.0;
            [[unroll]] for (uint i = 0u; i < 8u; i++) m = max(m, red[b0 + i]);
            const float d  = m / 127.0;
            const float id = d > 0.0 ? 1.0 / d : 0.0;
            const ivec4 q  = ivec4(round(sv[j] * id));
            red2[tid]      = intBitsToFloat((q.x + q.y) + (q.z + q.w));
            barrier();
            if (v < nv) {
                db[pc.xq_w + v] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
                if (tid == b0) {
                    int s = 0;
                    [[unroll]] for (uint i = 0u; i < 8u; i++) s += floatBitsToInt(red2[b0 + i]);
                    dxd[(pc.xq_w * 4u + pc.n) / 8u + v / 8u] = vec2(d, d * float(s));
                }
            }
        }
    }
#endif
#elif GLU_OUT
    if (lane == 0u && r0 < pc.n) {
        const float g = red[tid];
        db[pc.d_off + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3 + r0] = floatBitsToUint(g / (1.0 + exp(-g)) * red2[tid]);
    }
#if XQ_OUT
    if (pc.xq_on != 0u) {
        // Every row of this workgroup written and made visible, then each of its blocks counted
        // (a workgroup holds part of one block or whole blocks: powers of two).
        memoryBarrierBuffer();
        barrier();
        const uint rpw = gl_WorkGroupSize.x / LPR;
        const uint b   = flat_group() * rpw / 32u + tid;
        if (tid < max(rpw / 32u, 1u) && b < pc.n / 32u && atomicAdd(xcnt[b], 1u) == max(32u / rpw, 1u) - 1u) {
            xcnt[b] = 0u;  // for the next dispatch that counts on this word
            memoryBarrierBuffer();
            xq_block(b);
        }
    }
#endif
#else
    if (lane == 0u) {
        const uint db0 = pc.d_off + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3;
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            if (r0 + r >= pc.n) break;
            db[db0 + r0 + r] = floatBitsToUint(r == 0u ? red[tid] : red2[tid]);
        }
    }
#endif
}
