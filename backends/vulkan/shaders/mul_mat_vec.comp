#version 450
// MUL_MAT for few columns: one workgroup per (output row, column, batch matrix).
// W [k, n, w2, w3] of TYPE (dequantized on the fly), x F32 [k, m, x2, x3] -> y F32 [n, m, x2, x3];
// W's batch dims broadcast over x's. The invocations stride over k; the partial sums are
// reduced with subgroupAdd (SUBGROUP) or through shared memory.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;

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

shared float red[256];

void main() {
    const uint r = flat_group();
    if (r >= pc.n) return;
    const uint c  = gl_WorkGroupID.z % pc.m;
    const uint i2 = (gl_WorkGroupID.z / pc.m) % pc.x2;
    const uint i3 = gl_WorkGroupID.z / (pc.m * pc.x2);
    const uint rb = pc.w_off + r * pc.w_nb1 + (i2 / pc.bcast2) * pc.w_nb2 + (i3 / pc.bcast3) * pc.w_nb3;
    const uint xr = pc.x_off + c * pc.x_nb1 + i2 * pc.x_nb2 + i3 * pc.x_nb3;
    const uint tid = gl_LocalInvocationID.x;

    float sum = 0.0;
    for (uint i = tid; i < pc.k; i += gl_WorkGroupSize.x) sum += dq_w(rb, i) * uintBitsToFloat(xb[xr + i]);

#if SUBGROUP
    sum = subgroupAdd(sum);
    if (subgroupElect()) red[gl_SubgroupID] = sum;
    barrier();
    if (tid == 0u) {
        float t = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; s++) t += red[s];
        db[pc.d_off + r + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3] = floatBitsToUint(t);
    }
#else
    red[tid] = sum;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2u; h > 0u; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    if (tid == 0u) db[pc.d_off + r + c * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3] = floatBitsToUint(red[0]);
#endif
}
