#version 450
// RMS_NORM: one workgroup per row (flattened dims 1..3): y = x / sqrt(mean(x*x) + eps).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer A { uint a[]; };
layout(binding = 1) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_off, a_nb1, a_nb2, a_nb3;  // floats
    uint d_off, d_nb1, d_nb2, d_nb3;
    float eps;
} pc;

shared float red[256];

void main() {
    const uint row = flat_group();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint i1  = row % pc.ne1;
    const uint i2  = (row / pc.ne1) % pc.ne2;
    const uint i3  = row / (pc.ne1 * pc.ne2);
    const uint ab  = pc.a_off + i1 * pc.a_nb1 + i2 * pc.a_nb2 + i3 * pc.a_nb3;
    const uint db  = pc.d_off + i1 * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3;
    const uint tid = gl_LocalInvocationID.x;
    const uint wg  = gl_WorkGroupSize.x;

    float s = 0.0;
    for (uint i = tid; i < pc.ne0; i += wg) {
        const float x = uintBitsToFloat(a[ab + i]);
        s += x * x;
    }
    red[tid] = s;
    barrier();
    for (uint h = wg / 2u; h > 0u; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(pc.ne0) + pc.eps);
    for (uint i = tid; i < pc.ne0; i += wg) d[db + i] = floatBitsToUint(uintBitsToFloat(a[ab + i]) * scale);
}
