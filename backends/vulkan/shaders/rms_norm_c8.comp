#version 450
// The decode RMS norm of one row (HAS_ADD: of the residual sum a + b, written to s) times the
// norm weight, with the quantized copy of the result that the next decode products read
// (quantize_x.comp's layout and arithmetic, into the stream's slot at binding 5): rms_norm.comp's
// HAS_MUL XQ_OUT case, with the invocations holding 8 consecutive values each (workgroup
// ne0 / 8), so that a 32-value block is 4 neighbouring invocations: its absolute maximum and
// integer sum are two exchanges through shared memory. One memory round trip and three
// barriers in all (clustered subgroup operations instead of the exchanges measured no faster
// on an H200: 1B Q4_0 tg128 1158.5 against 1157.9 t/s). rms_norm.comp's invocations hold strided values and exchanged the
// blocks through shared memory (3 barriers per 256 vec4). These norms are one workgroup each,
// so their time is latency: an H200 decode step spent ~5 us on each of them (1B: 33 per token;
// 1B Q4_0 tg128 1102.6 -> 1158.5 t/s with this kernel).
// Same bindings and push constants as rms_norm.comp; offsets in floats, multiples of 4.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#ifndef HAS_ADD
#define HAS_ADD 0
#endif

layout(local_size_x_id = 0) in;  // ne0 / 8

layout(binding = 0) readonly buffer A { vec4 a[]; };
#if HAS_ADD
layout(binding = 1) readonly buffer B { vec4 b[]; };
layout(binding = 3) buffer S { vec4 s[]; };
#endif
layout(binding = 2) readonly buffer W { vec4 w[]; };
layout(binding = 4) writeonly buffer D { vec4 d[]; };
layout(binding = 5) writeonly buffer XQO { uint xqo[]; };
layout(binding = 5) writeonly buffer XQD { vec2 xqd[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_off, a_nb1, a_nb2, a_nb3;  // floats
    uint b_off, b_nb1, b_nb2, b_nb3;
    uint w_off, w_nb1, w_nb2, w_nb3;
    uint w_ne1, w_ne2, w_ne3;
    uint s_off, s_nb1, s_nb2, s_nb3;
    uint d_off, d_nb1, d_nb2, d_nb3;
    float eps;
} pc;

shared float red[256];  // the subgroups' sums of squares
shared float bmax[1024];  // each invocation's absolute maximum, then
shared int   bsum[1024];  // its integers' sum

uint pack4(ivec4 q) {
    return (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v   = 2u * tid;  // its vec4: v, v + 1
    const vec4 w0  = w[pc.w_off / 4u + v], w1 = w[pc.w_off / 4u + v + 1u];
#if HAS_ADD
    // (s may be the memory of a or b: each invocation stores only what it loaded itself.)
    const vec4 x0 = a[pc.a_off / 4u + v] + b[pc.b_off / 4u + v];
    const vec4 x1 = a[pc.a_off / 4u + v + 1u] + b[pc.b_off / 4u + v + 1u];
    s[pc.s_off / 4u + v]      = x0;
    s[pc.s_off / 4u + v + 1u] = x1;
#else
    const vec4 x0 = a[pc.a_off / 4u + v], x1 = a[pc.a_off / 4u + v + 1u];
#endif
    const float sq = subgroupAdd(dot(x0, x0) + dot(x1, x1));
    if (subgroupElect()) red[gl_SubgroupID] = sq;
    barrier();
    float tot = 0.0;
    for (uint sg = 0u; sg < gl_NumSubgroups; sg++) tot += red[sg];
    const float scale = 1.0 / sqrt(tot / float(pc.ne0) + pc.eps);
    const vec4  y0 = x0 * scale * w0, y1 = x1 * scale * w1;
    d[pc.d_off / 4u + v]      = y0;
    d[pc.d_off / 4u + v + 1u] = y1;
    // Block tid / 4: invocations 4 (tid / 4) .. + 3.
    const vec4 m4 = max(abs(y0), abs(y1));
    const uint b0 = tid & ~3u;
    bmax[tid] = max(max(m4.x, m4.y), max(m4.z, m4.w));
    barrier();
    const float m = max(max(bmax[b0], bmax[b0 + 1u]), max(bmax[b0 + 2u], bmax[b0 + 3u]));
    const float dd = m / 127.0;
    const float id = dd > 0.0 ? 1.0 / dd : 0.0;
    const ivec4 q0 = ivec4(round(y0 * id)), q1 = ivec4(round(y1 * id));
    const int   qi = (q0.x + q0.y) + (q0.z + q0.w) + (q1.x + q1.y) + (q1.z + q1.w);
    bsum[tid] = qi;
    barrier();
    const int qs = (bsum[b0] + bsum[b0 + 1u]) + (bsum[b0 + 2u] + bsum[b0 + 3u]);
    xqo[v]      = pack4(q0);
    xqo[v + 1u] = pack4(q1);
    if ((tid & 3u) == 0u) xqd[pc.ne0 / 8u + tid / 4u] = vec2(dd, dd * float(qs));
}
