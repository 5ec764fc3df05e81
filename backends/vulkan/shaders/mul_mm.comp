#version 450
// MUL_MAT for many columns (prefill): BM x BN output tiles, 256 invocations (16 x 16) of
// TM x TM outputs each; W (TYPE, dequantized while loading) and x tiles of BK k-values in
// shared memory. TM = 4 (64 x 64 tiles, BK 32) by default; TM = 8 (128 x 128, BK 16: twice
// the multiply-adds per shared-memory load) for products with enough tiles to fill a large
// GPU. Same operands as mul_mat_vec.comp; z is the batch matrix.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer W { uint wb[]; };
layout(binding = 1) readonly buffer X { uint xb[]; };
layout(binding = 2) writeonly buffer D { uint db[]; };

#define DQ_FN dq_w
#define DQ_BUF wb
#define DQ_TYPE TYPE
#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint k, n, m, x2;
    uint w_off, w_nb1, w_nb2, w_nb3;  // bytes
    uint x_off, x_nb1, x_nb2, x_nb3;  // floats
    uint d_off, d_nb1, d_nb2, d_nb3;  // floats
    uint bcast2, bcast3;
} pc;

#ifndef TM
#define TM 4
#endif
#if TM == 4
#define BK 32u
#else
#define BK 16u
#endif
#define BM (16u * TM)
#define BN (16u * TM)
shared float sw[BM * (BK + 1u)];
shared float sx[BN * (BK + 1u)];

void main() {
    const uint r0  = gl_WorkGroupID.x * BM;
    const uint c0  = gl_WorkGroupID.y * BN;
    const uint i2  = gl_WorkGroupID.z % pc.x2;
    const uint i3  = gl_WorkGroupID.z / pc.x2;
    const uint wm  = pc.w_off + (i2 / pc.bcast2) * pc.w_nb2 + (i3 / pc.bcast3) * pc.w_nb3;
    const uint xm  = pc.x_off + i2 * pc.x_nb2 + i3 * pc.x_nb3;
    const uint tid = gl_LocalInvocationID.x;
    const uint tr  = tid % 16u;
    const uint tc  = tid / 16u;

    float acc[TM][TM];
    [[unroll]] for (uint a = 0u; a < TM; a++) {
        [[unroll]] for (uint b = 0u; b < TM; b++) acc[a][b] = 0.0;
    }
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        for (uint e = tid; e < BM * BK; e += 256u) {
            const uint row = e / BK, kk = e % BK;
            const uint rg = r0 + row, kg = k0 + kk;
            sw[row * (BK + 1u) + kk] = rg < pc.n && kg < pc.k ? dq_w(wm + rg * pc.w_nb1, kg) : 0.0;
            const uint cg = c0 + row;
            sx[row * (BK + 1u) + kk] = cg < pc.m && kg < pc.k ? uintBitsToFloat(xb[xm + cg * pc.x_nb1 + kg]) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float wv[TM];
            [[unroll]] for (uint a = 0u; a < TM; a++) wv[a] = sw[(tr + 16u * a) * (BK + 1u) + kk];
            [[unroll]] for (uint b = 0u; b < TM; b++) {
                const float xv = sx[(tc + 16u * b) * (BK + 1u) + kk];
                [[unroll]] for (uint a = 0u; a < TM; a++) acc[a][b] += wv[a] * xv;
            }
        }
        barrier();
    }
    [[unroll]] for (uint b = 0u; b < TM; b++) {
        const uint c = c0 + tc + 16u * b;
        if (c >= pc.m) continue;
        [[unroll]] for (uint a = 0u; a < TM; a++) {
            const uint r = r0 + tr + 16u * a;
            if (r < pc.n) db[pc.d_off + r + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3] = floatBitsToUint(acc[a][b]);
        }
    }
}
