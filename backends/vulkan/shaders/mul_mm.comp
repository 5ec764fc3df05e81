#version 450
// MUL_MAT for many columns (prefill): 64 x 64 output tiles, 256 invocations of 4 x 4
// outputs each; W (TYPE, dequantized while loading) and x tiles of 32 k-values in shared
// memory. Same operands as mul_mat_vec.comp; z is the batch matrix.
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

#define BM 64u
#define BN 64u
#define BK 32u
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

    float acc[4][4];
    [[unroll]] for (uint a = 0u; a < 4u; a++) {
        [[unroll]] for (uint b = 0u; b < 4u; b++) acc[a][b] = 0.0;
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
            float wv[4];
            [[unroll]] for (uint a = 0u; a < 4u; a++) wv[a] = sw[(tr + 16u * a) * (BK + 1u) + kk];
            [[unroll]] for (uint b = 0u; b < 4u; b++) {
                const float xv = sx[(tc + 16u * b) * (BK + 1u) + kk];
                [[unroll]] for (uint a = 0u; a < 4u; a++) acc[a][b] += wv[a] * xv;
            }
        }
        barrier();
    }
    [[unroll]] for (uint b = 0u; b < 4u; b++) {
        const uint c = c0 + tc + 16u * b;
        if (c >= pc.m) continue;
        [[unroll]] for (uint a = 0u; a < 4u; a++) {
            const uint r = r0 + tr + 16u * a;
            if (r < pc.n) db[pc.d_off + r + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3] = floatBitsToUint(acc[a][b]);
        }
    }
}
