// One element of a row: float DQ_FN(uint row_byte, uint i) reads element i of the row that
// starts at byte row_byte of buffer DQ_BUF, of type DQ_TYPE. Included once per (buffer, type)
// with those three macros defined; the arithmetic follows quant/ref (d * q, (d * sc) * q, ...).
#if DQ_TYPE == T_NF4
#include "nf4.glsl"
#endif
#if DQ_TYPE == T_Q6_KP
#include "q6p.glsl"
#endif
#if (DQ_TYPE == T_FP8_E4M3 || DQ_TYPE == T_FP8_E5M2 || DQ_TYPE == T_FP8_E4M3_ROW || DQ_TYPE == T_FP8_E5M2_ROW) && \
    !defined(EMBER_FP8_DECODE)
#define EMBER_FP8_DECODE
// An OCP FP8 code as a float, built from its bits (exact). E4M3: bias 7, S.1111.111 NaN, no
// infinities; E5M2: bias 15, exponent 11111 infinity (mantissa 0) or NaN.
float ember_fp8_decode(uint c, bool e5m2) {
    const uint s = (c & 0x80u) << 24;
    const uint mb = e5m2 ? 2u : 3u;
    const uint e = (c & 0x7fu) >> mb;
    const uint m = c & ((1u << mb) - 1u);
    const uint emax = e5m2 ? 31u : 15u;
    const uint bias = e5m2 ? 15u : 7u;
    uint bits;
    if (e == emax && (e5m2 || m == 7u)) {
        bits = e5m2 && m == 0u ? 0x7f800000u : 0x7fc00000u;
    } else if (e == 0u) {
        return uintBitsToFloat(s | floatBitsToUint(float(m) * (e5m2 ? 1.0 / 65536.0 : 1.0 / 512.0)));
    } else {
        bits = ((e + 127u - bias) << 23) | (m << (23u - mb));
    }
    return uintBitsToFloat(s | bits);
}
#endif

float DQ_FN(uint rb, uint i) {
#if DQ_TYPE == T_F32
    return RD_F32(DQ_BUF, rb + 4u * i);
#elif DQ_TYPE == T_F16
    return RD_F16(DQ_BUF, rb + 2u * i);
#elif DQ_TYPE == T_Q4_0 || DQ_TYPE == T_IQ4_NL
    const uint bb = rb + (i >> 5) * 18u;
    const uint j  = i & 31u;
    const float d = RD_F16(DQ_BUF, bb);
    uint q = RD_U8(DQ_BUF, bb + 2u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4);
#if DQ_TYPE == T_Q4_0
    return d * float(int(q) - 8);
#else
    const int kv[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return d * float(kv[q]);
#endif
#elif DQ_TYPE == T_Q4_1
    const uint bb = rb + (i >> 5) * 20u;
    const uint j  = i & 31u;
    uint q = RD_U8(DQ_BUF, bb + 4u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4);
    return RD_F16(DQ_BUF, bb) * float(q) + RD_F16(DQ_BUF, bb + 2u);
#elif DQ_TYPE == T_Q5_0 || DQ_TYPE == T_Q5_1
#if DQ_TYPE == T_Q5_0
    const uint bb = rb + (i >> 5) * 22u;
    const uint hoff = 2u;
#else
    const uint bb = rb + (i >> 5) * 24u;
    const uint hoff = 4u;
#endif
    const uint j  = i & 31u;
    const uint qh = RD_U16(DQ_BUF, bb + hoff) | (RD_U16(DQ_BUF, bb + hoff + 2u) << 16);
    uint q = RD_U8(DQ_BUF, bb + hoff + 4u + (j & 15u));
    q = (j < 16u ? (q & 15u) : (q >> 4)) | (((qh >> j) & 1u) << 4);
#if DQ_TYPE == T_Q5_0
    return RD_F16(DQ_BUF, bb) * float(int(q) - 16);
#else
    return RD_F16(DQ_BUF, bb) * float(q) + RD_F16(DQ_BUF, bb + 2u);
#endif
#elif DQ_TYPE == T_Q8_0
    const uint bb = rb + (i >> 5) * 34u;
    return RD_F16(DQ_BUF, bb) * float(RD_I8(DQ_BUF, bb + 2u + (i & 31u)));
#elif DQ_TYPE == T_Q4_K || DQ_TYPE == T_Q5_K
#if DQ_TYPE == T_Q4_K
    const uint bb = rb + (i >> 8) * 144u;
    const uint qs = bb + 16u;
#else
    const uint bb = rb + (i >> 8) * 176u;
    const uint qs = bb + 48u;
#endif
    const uint e = i & 255u;
    const uint j = e >> 5;
    const uint l = e & 31u;
    uint sc, m;
    if (j < 4u) {
        sc = RD_U8(DQ_BUF, bb + 4u + j) & 63u;
        m  = RD_U8(DQ_BUF, bb + 8u + j) & 63u;
    } else {
        const uint s4 = RD_U8(DQ_BUF, bb + 8u + j);  // scales[j + 4]
        sc = (s4 & 15u) | ((RD_U8(DQ_BUF, bb + j) >> 6) << 4);          // scales[j - 4]
        m  = (s4 >> 4) | ((RD_U8(DQ_BUF, bb + 4u + j) >> 6) << 4);       // scales[j]
    }
    const uint qb = RD_U8(DQ_BUF, qs + 32u * (j >> 1) + l);
    uint q = (j & 1u) != 0u ? (qb >> 4) : (qb & 15u);
#if DQ_TYPE == T_Q5_K
    q |= ((RD_U8(DQ_BUF, bb + 16u + l) >> j) & 1u) << 4;
#endif
    const float d1 = RD_F16(DQ_BUF, bb) * float(sc);
    const float m1 = RD_F16(DQ_BUF, bb + 2u) * float(m);
    return d1 * float(q) - m1;
#elif DQ_TYPE == T_Q6_K
    const uint bb = rb + (i >> 8) * 210u;
    const uint e  = i & 255u;
    const uint h  = e >> 7;
    const uint k  = (e >> 5) & 3u;
    const uint l  = e & 31u;
    const uint lb = RD_U8(DQ_BUF, bb + 64u * h + l + 32u * (k & 1u));
    const uint lo = (k >> 1) != 0u ? (lb >> 4) : (lb & 15u);
    const uint hi = (RD_U8(DQ_BUF, bb + 128u + 32u * h + l) >> (2u * k)) & 3u;
    const float ds = RD_F16(DQ_BUF, bb + 208u) * float(RD_I8(DQ_BUF, bb + 192u + (e >> 4)));
    return ds * float(int(lo | (hi << 4)) - 32);
#elif DQ_TYPE == T_Q6_KP
    // The same fields as Q6_K, at their planar places (q6p.glsl).
    const uint kb = i >> 8;
    const uint e  = i & 255u;
    const uint h  = e >> 7;
    const uint k  = (e >> 5) & 3u;
    const uint l  = e & 31u;
    const uint lb = RD_U8(DQ_BUF, rb + q6p_ql(kb) + 64u * h + l + 32u * (k & 1u));
    const uint lo = (k >> 1) != 0u ? (lb >> 4) : (lb & 15u);
    const uint hi = (RD_U8(DQ_BUF, rb + q6p_qh(kb) + 32u * h + l) >> (2u * k)) & 3u;
    const float ds = RD_F16(DQ_BUF, rb + q6p_d(kb)) * float(RD_I8(DQ_BUF, rb + q6p_sc(kb, e >> 4)));
    return ds * float(int(lo | (hi << 4)) - 32);
#elif DQ_TYPE == T_BF16
    return uintBitsToFloat(RD_U16(DQ_BUF, rb + 2u * i) << 16);
#elif DQ_TYPE == T_Q2_K
    const uint bb = rb + (i >> 8) * 84u;
    const uint e  = i & 255u;
    const uint r  = e & 127u;
    const uint sc = RD_U8(DQ_BUF, bb + (e >> 4));
    const uint q  = (RD_U8(DQ_BUF, bb + 16u + 32u * (e >> 7) + (r & 31u)) >> (2u * (r >> 5))) & 3u;
    const float dl = RD_F16(DQ_BUF, bb + 80u) * float(sc & 15u);
    const float ml = RD_F16(DQ_BUF, bb + 82u) * float(sc >> 4);
    return dl * float(q) - ml;
#elif DQ_TYPE == T_Q3_K
    const uint bb = rb + (i >> 8) * 110u;
    const uint e  = i & 255u;
    const uint r  = e & 127u;
    const uint j  = e >> 4;
    const uint lo = j < 8u ? RD_U8(DQ_BUF, bb + 96u + j) & 15u : RD_U8(DQ_BUF, bb + 96u + j - 8u) >> 4;
    const uint hi = (RD_U8(DQ_BUF, bb + 104u + (j & 3u)) >> (2u * (j >> 2))) & 3u;
    const int  q  = int((RD_U8(DQ_BUF, bb + 32u + 32u * (e >> 7) + (r & 31u)) >> (2u * (r >> 5))) & 3u) -
                    (((RD_U8(DQ_BUF, bb + (e & 31u)) >> (e >> 5)) & 1u) != 0u ? 0 : 4);
    const float dl = RD_F16(DQ_BUF, bb + 108u) * float(int(lo | (hi << 4)) - 32);
    return dl * float(q);
#elif DQ_TYPE == T_IQ4_XS
    const uint bb = rb + (i >> 8) * 136u;
    const uint e  = i & 255u;
    const uint j  = e >> 5;
    const uint l  = e & 31u;
    const uint ls = ((RD_U8(DQ_BUF, bb + 4u + (j >> 1)) >> (4u * (j & 1u))) & 15u) |
                    (((RD_U16(DQ_BUF, bb + 2u) >> (2u * j)) & 3u) << 4);
    uint q = RD_U8(DQ_BUF, bb + 8u + 16u * j + (l & 15u));
    q = l < 16u ? (q & 15u) : (q >> 4);
    const int kv[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const float dl = RD_F16(DQ_BUF, bb) * float(int(ls) - 32);
    return dl * float(kv[q]);
#elif DQ_TYPE == T_INT4 || DQ_TYPE == T_INT4_G32
    // Groups of G weights: fp16 d, fp16 z, nibbles run by run of 32 (Q4_0's order); d (q - z).
#if DQ_TYPE == T_INT4
    const uint bb = rb + (i >> 7) * 68u;
    const uint e  = i & 127u;
#else
    const uint bb = rb + (i >> 5) * 20u;
    const uint e  = i & 31u;
#endif
    const uint l = e & 31u;
    uint q = RD_U8(DQ_BUF, bb + 4u + 16u * (e >> 5) + (l & 15u));
    q = l < 16u ? (q & 15u) : (q >> 4);
    return RD_F16(DQ_BUF, bb) * (float(q) - RD_F16(DQ_BUF, bb + 2u));
#elif DQ_TYPE == T_NF4
    // Row groups of up to 256 blocks of 64: [f32 scale2][f32 offset] then 33-byte blocks
    // [absmax_q][32 bytes: weight l low nibble, weight 32 + l high nibble].
    const uint  blk = i >> 6;
    const uint  gb  = rb + (blk >> 8) * (8u + 256u * 33u);
    const uint  bb  = gb + 8u + (blk & 255u) * 33u;
    const uint  e   = i & 63u;
    const float scale2 = RD_F32U(DQ_BUF, gb);
    const float offset = RD_F32U(DQ_BUF, gb + 4u);
    precise float absmax = uintBitsToFloat(NF4_DYN[RD_U8(DQ_BUF, bb)]) * scale2;  // two roundings, as the reference
    absmax += offset;
    uint q = RD_U8(DQ_BUF, bb + 1u + (e & 31u));
    q = e < 32u ? (q & 15u) : (q >> 4);
    return uintBitsToFloat(NF4_CODE[q]) * absmax;
#elif DQ_TYPE == T_FP8_E4M3 || DQ_TYPE == T_FP8_E5M2 || DQ_TYPE == T_FP8_E4M3_ROW || DQ_TYPE == T_FP8_E5M2_ROW
#if DQ_TYPE == T_FP8_E4M3 || DQ_TYPE == T_FP8_E5M2
    // 33-byte blocks: E8M0 exponent, 32 codes; scale 2^(e - 127).
    const uint bb = rb + (i >> 5) * 33u;
    const uint c  = RD_U8(DQ_BUF, bb + 1u + (i & 31u));
    const uint se = RD_U8(DQ_BUF, bb);
    // e = 0 is 2^-127, a subnormal (a device that flushes subnormals reads 0 there)
    const float scale = uintBitsToFloat(se == 255u ? 0x7fc00000u : se == 0u ? 0x00400000u : se << 23);
#else
    // One f32 scale per row, then the codes.
    const uint  c     = RD_U8(DQ_BUF, rb + 4u + i);
    const float scale = RD_F32U(DQ_BUF, rb);
#endif
    return ember_fp8_decode(c, DQ_TYPE == T_FP8_E5M2 || DQ_TYPE == T_FP8_E5M2_ROW) * scale;
#else
#error "dequant.glsl: unknown DQ_TYPE"
#endif
}
