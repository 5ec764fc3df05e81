#version 450
// ROPE: src0 F32 [head_dim, n_head, n_tokens], positions I32 [n_tokens], frequency factors
// F32 [n_rot/2] (has_ff). theta_i = freq_scale * (pos * theta_scale^i / factor_i).
// mode 0 rotates pairs (2i, 2i+1), mode 2 (neox) pairs (i, i + n_rot/2); the dimensions
// from n_rot on are copied. One invocation per output element.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer A { uint a[]; };
layout(binding = 1) readonly buffer P { uint pos[]; };
layout(binding = 2) readonly buffer F { uint ff[]; };
layout(binding = 3) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2;
    uint a_off, a_nb1, a_nb2;  // floats
    uint d_off, d_nb1, d_nb2;
    uint p_off, p_nb0;         // int32 elements
    uint f_off;
    uint n_rot, mode, has_ff;
    float theta_scale, freq_scale;
} pc;

void main() {
    const uint n      = pc.ne0 * pc.ne1 * pc.ne2;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    for (uint idx = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x; idx < n; idx += stride) {
        const uint i0 = idx % pc.ne0;
        const uint ih = (idx / pc.ne0) % pc.ne1;
        const uint it = idx / (pc.ne0 * pc.ne1);
        const uint ab = pc.a_off + ih * pc.a_nb1 + it * pc.a_nb2;
        const uint db = pc.d_off + ih * pc.d_nb1 + it * pc.d_nb2;
        if (i0 >= pc.n_rot) {
            d[db + i0] = a[ab + i0];
            continue;
        }
        const uint half_rot = pc.n_rot / 2u;
        uint p, j0, j1;
        if (pc.mode == 2u) {
            p  = i0 % half_rot;
            j0 = p;
            j1 = p + half_rot;
        } else {
            p  = i0 / 2u;
            j0 = 2u * p;
            j1 = j0 + 1u;
        }
        const float ps     = float(int(pos[pc.p_off + it * pc.p_nb0]));
        const float factor = pc.has_ff != 0u ? uintBitsToFloat(ff[pc.f_off + p]) : 1.0;
        const float th     = pc.freq_scale * ((ps * pow(pc.theta_scale, float(p))) / factor);
        const float c = cos(th), s = sin(th);
        const float x0 = uintBitsToFloat(a[ab + j0]);
        const float x1 = uintBitsToFloat(a[ab + j1]);
        const float y  = i0 == j0 ? x0 * c - x1 * s : x0 * s + x1 * c;
        d[db + i0] = floatBitsToUint(y);
    }
}
