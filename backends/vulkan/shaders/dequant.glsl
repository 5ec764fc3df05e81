// One element of a row: float DQ_FN(uint row_byte, uint i) reads element i of the row that
// starts at byte row_byte of buffer DQ_BUF, of type DQ_TYPE. Included once per (buffer, type)
// with those three macros defined; the arithmetic follows quant/ref (d * q, (d * sc) * q, ...).
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
#else
#error "dequant.glsl: unknown DQ_TYPE"
#endif
}
