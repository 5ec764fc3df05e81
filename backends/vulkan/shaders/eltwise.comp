#version 450
// F32 element-wise ops over 4-D tensors with strided rows: ADD and MUL (src1 broadcast:
// src1.ne[i] divides dst.ne[i]), SWIGLU (silu(src0) * src1, same shape), SCALE (src0 * param).
// OP: 0 add, 1 mul, 2 swiglu, 3 scale. Offsets and strides in floats.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer A { uint a[]; };
layout(binding = 1) readonly buffer B { uint b[]; };
layout(binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_off, a_nb1, a_nb2, a_nb3;
    uint b_off, b_nb1, b_nb2, b_nb3;
    uint b_ne0, b_ne1, b_ne2, b_ne3;
    uint d_off, d_nb1, d_nb2, d_nb3;
    float param;
} pc;

void main() {
    const uint n      = pc.ne0 * pc.ne1 * pc.ne2 * pc.ne3;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    for (uint idx = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x; idx < n; idx += stride) {
        const uint i0 = idx % pc.ne0;
        const uint r  = idx / pc.ne0;
        const uint i1 = r % pc.ne1;
        const uint i2 = (r / pc.ne1) % pc.ne2;
        const uint i3 = r / (pc.ne1 * pc.ne2);
        const float x = uintBitsToFloat(a[pc.a_off + i0 + i1 * pc.a_nb1 + i2 * pc.a_nb2 + i3 * pc.a_nb3]);
        float y;
#if OP == 3
        y = x * pc.param;
#else
#if OP == 2
        const uint bi = pc.b_off + i0 + i1 * pc.b_nb1 + i2 * pc.b_nb2 + i3 * pc.b_nb3;
#else
        const uint bi = pc.b_off + (i0 % pc.b_ne0) + (i1 % pc.b_ne1) * pc.b_nb1 + (i2 % pc.b_ne2) * pc.b_nb2 +
                        (i3 % pc.b_ne3) * pc.b_nb3;
#endif
        const float z = uintBitsToFloat(b[bi]);
#if OP == 0
        y = x + z;
#elif OP == 1
        y = x * z;
#else
        y = x / (1.0 + exp(-x)) * z;
#endif
#endif
        d[pc.d_off + i0 + i1 * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3] = floatBitsToUint(y);
    }
}
