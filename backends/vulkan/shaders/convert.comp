#version 450
// Row conversion into DST_TYPE (F32, F16, Q8_0, Q4_0), one workgroup per row:
//   MODE 0 (CPY): row r of src (SRC_TYPE) -> row r of dst, same 4-D shape;
//   MODE 1 (SET_ROWS): row i of src (F32) -> row idx[i] of dst; a row whose index appears
//   again later is skipped (the last one wins, as in a serial loop).
// The quantized types are written word by word (blocks are not 4-byte aligned): the block
// scales of a chunk of blocks go to shared memory first, then each invocation assembles whole
// 32-bit words, so no two invocations ever write the same word. The host guarantees that
// every destination row starts at a multiple of 4 bytes and spans a multiple of 4 bytes.
// Rounding as quant/ref: Q8_0 d = amax / 127, q = round(x / d); Q4_0 d = max / -8,
// q = min(15, trunc(x / d + 8.5)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer S { uint sb[]; };
layout(binding = 1) readonly buffer I { uint idx[]; };
layout(binding = 2) buffer D { uint db[]; };
#if MODE == 1
layout(binding = 4) writeonly buffer E { uint err[]; };  // set when an index is out of range
#endif

#define DQ_FN dq_src
#define DQ_BUF sb
#define DQ_TYPE SRC_TYPE
#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;            // rows to convert: src shape
    uint s_off, s_nb1, s_nb2, s_nb3;    // bytes
    uint d_off, d_nb1, d_nb2, d_nb3;    // bytes
    uint i_off, i_nb0, d_nrows;         // SET_ROWS: int32 elements; rows of dst
} pc;

#if DST_TYPE == T_Q8_0
#define QK 32u
#define TS 34u
#elif DST_TYPE == T_Q4_0
#define QK 32u
#define TS 18u
#elif DST_TYPE == T_F16
#define QK 1u
#define TS 2u
#elif DST_TYPE == T_F32
#define QK 1u
#define TS 4u
#else
#error "convert.comp: unknown DST_TYPE"
#endif

#define CHUNK 64u  // blocks per chunk (even, so every chunk is whole words)
shared float s_d[CHUNK];   // block scale (Q8_0, Q4_0)
shared uint  s_dh[CHUNK];  // its f16 bits

uint src_rb;

float src_val(uint i) { return dq_src(src_rb, i); }

#if DST_TYPE == T_Q8_0 || DST_TYPE == T_Q4_0
uint quant_of(uint blk, uint j) {  // q of element j of block blk (absolute in the row)
    const float d  = s_d[blk % CHUNK];
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    const float x  = src_val(blk * QK + j) * id;
#if DST_TYPE == T_Q8_0
    return uint(int(sign(x) * floor(abs(x) + 0.5))) & 0xffu;  // roundf: half away from zero
#else
    return uint(min(15.0, x + 8.5));
#endif
}
#endif

uint byte_at(uint blk, uint off) {  // byte `off` of block blk of the destination row
#if DST_TYPE == T_F32
    return (floatBitsToUint(src_val(blk)) >> (8u * off)) & 0xffu;
#elif DST_TYPE == T_F16
    return (packHalf2x16(vec2(src_val(blk), 0.0)) >> (8u * off)) & 0xffu;
#else
    if (off < 2u) return (s_dh[blk % CHUNK] >> (8u * off)) & 0xffu;
    const uint j = off - 2u;
#if DST_TYPE == T_Q8_0
    return quant_of(blk, j);
#else
    return quant_of(blk, j) | (quant_of(blk, j + 16u) << 4);
#endif
#endif
}

void main() {
    const uint row = flat_group();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint i1 = row % pc.ne1;
    const uint i2 = (row / pc.ne1) % pc.ne2;
    const uint i3 = row / (pc.ne1 * pc.ne2);
    src_rb = pc.s_off + i1 * pc.s_nb1 + i2 * pc.s_nb2 + i3 * pc.s_nb3;
    uint dst_rb;
#if MODE == 1
    const int id = int(idx[pc.i_off + i1 * pc.i_nb0]);
    if (id < 0 || uint(id) >= pc.d_nrows) {  // never write outside the destination
        if (gl_LocalInvocationID.x == 0u) err[0] = 1u;
        return;
    }
    for (uint j = i1 + 1u; j < pc.ne1; j++) {
        if (int(idx[pc.i_off + j * pc.i_nb0]) == id) return;  // a later row wins
    }
    dst_rb = pc.d_off + uint(id) * pc.d_nb1;
#else
    dst_rb = pc.d_off + i1 * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3;
#endif
    const uint tid     = gl_LocalInvocationID.x;
    const uint wg      = gl_WorkGroupSize.x;
    const uint nblocks = pc.ne0 / QK;
    for (uint c0 = 0u; c0 < nblocks; c0 += CHUNK) {
        const uint nb = min(CHUNK, nblocks - c0);
#if DST_TYPE == T_Q8_0 || DST_TYPE == T_Q4_0
        for (uint k = tid; k < nb; k += wg) {
            const uint blk = c0 + k;
            float amax = 0.0, vmax = 0.0;
            for (uint j = 0u; j < QK; j++) {
                const float x = src_val(blk * QK + j);
#if DST_TYPE == T_Q8_0
                amax = max(amax, abs(x));
#else
                if (amax < abs(x)) {
                    amax = abs(x);
                    vmax = x;
                }
#endif
            }
#if DST_TYPE == T_Q8_0
            const float d = amax / 127.0;
#else
            const float d = vmax / -8.0;
#endif
            s_d[blk % CHUNK]  = d;
            s_dh[blk % CHUNK] = packHalf2x16(vec2(d, 0.0)) & 0xffffu;
        }
        barrier();
#endif
        const uint b0 = c0 * TS;           // first byte of the chunk in the row (multiple of 4)
        const uint nw = (nb * TS + 3u) / 4u;
        for (uint w = tid; w < nw; w += wg) {
            uint word = 0u;
            for (uint k = 0u; k < 4u; k++) {
                const uint b = b0 + 4u * w + k;
                if (b < (c0 + nb) * TS) word |= byte_at(b / TS, b % TS) << (8u * k);
            }
            db[(dst_rb + b0) / 4u + w] = word;
        }
        barrier();
    }
}
