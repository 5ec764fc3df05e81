#version 450
// One decode activation row x (k floats, k a multiple of 32) quantized to 8-bit blocks of 32,
// as mul_mat_vec_q.comp's QX kernels quantize it into shared memory, but once per product
// input into a scratch slot that the QX_PRE kernels read (instead of every workgroup of every
// product of x quantizing all of it again: Q, K and V share one). Slot layout: k int8 (block
// b at bytes 32b .. 32b + 31), then k / 32 vec2 (d, d * the sum of the block's integers) from
// byte k. Eight invocations per block, one vec4 each; workgroups of 256 (32 blocks).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer X4 { vec4 xb4[]; };
layout(binding = 1) writeonly buffer Q { uint xq[]; };
layout(binding = 1) writeonly buffer QD { vec2 xd[]; };

layout(push_constant) uniform PC {
    uint k;
    uint x_off;  // floats, a multiple of 4
} pc;

shared float amax[256];
shared int   isum[256];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint i   = gl_WorkGroupID.x * 256u + tid;  // the vec4 of x
    const bool in_ = i < pc.k / 4u;
    const vec4 v   = in_ ? xb4[pc.x_off / 4u + i] : vec4(0.0);
    const vec4 a   = abs(v);
    amax[tid] = max(max(a.x, a.y), max(a.z, a.w));
    barrier();
    const uint b0 = tid & ~7u;  // the block's first invocation
    float      m  = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) m = max(m, amax[b0 + j]);
    const float d  = m / 127.0;
    const float id = d > 0.0 ? 1.0 / d : 0.0;
    const ivec4 q  = ivec4(round(v * id));
    isum[tid] = (q.x + q.y) + (q.z + q.w);
    barrier();
    if (!in_) return;
    xq[i] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
    if (tid == b0) {
        int s = 0;
        [[unroll]] for (uint j = 0u; j < 8u; j++) s += isum[b0 + j];
        xd[pc.k / 8u + i / 8u] = vec2(d, d * float(s));
    }
}
