#version 450
// GET_ROWS: table [n_cols, n_rows] of TYPE, ids I32 [n, a, b] -> F32 [n_cols, n, a, b].
// One workgroup per output row; an id out of range gives a row of zeros and sets err[0]
// (the stream reports it as a status).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer T { uint tb[]; };
layout(binding = 1) readonly buffer I { uint ids[]; };
layout(binding = 2) writeonly buffer D { uint d[]; };
layout(binding = 4) writeonly buffer E { uint err[]; };

#define DQ_FN dq_table
#define DQ_BUF tb
#define DQ_TYPE TYPE
#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint t_off, t_nb1, t_nrows;          // bytes
    uint i_off, i_nb0, i_nb1, i_nb2;     // int32 elements
    uint d_off, d_nb1, d_nb2, d_nb3;     // floats
} pc;

void main() {
    const uint row = flat_group();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint i1 = row % pc.ne1;
    const uint i2 = (row / pc.ne1) % pc.ne2;
    const uint i3 = row / (pc.ne1 * pc.ne2);
    const int  id = int(ids[pc.i_off + i1 * pc.i_nb0 + i2 * pc.i_nb1 + i3 * pc.i_nb2]);
    const uint db = pc.d_off + i1 * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3;
    const bool ok = id >= 0 && uint(id) < pc.t_nrows;
    const uint rb = pc.t_off + uint(ok ? id : 0) * pc.t_nb1;
    if (!ok && gl_LocalInvocationID.x == 0u) err[0] = 1u;
    for (uint i = gl_LocalInvocationID.x; i < pc.ne0; i += gl_WorkGroupSize.x) {
        d[db + i] = floatBitsToUint(ok ? dq_table(rb, i) : 0.0);
    }
}
