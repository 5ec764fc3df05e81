#version 450
// RMS_NORM: one workgroup per row (flattened dims 1..3): y = x / sqrt(mean(x*x) + eps), in
// four variants that each save a dispatch (and a barrier) per norm of a transformer layer:
//   HAS_ADD: x = a + b is the residual ADD before the norm, written to s (the residual stream
//            reads it later) and normalized in the same pass;
//   HAS_MUL: y is multiplied by the norm weight w (a row broadcast over rows: w.ne[1..3]
//            divide the row's), the MUL after the norm; the plain norm is then not written.
// Each invocation reads back in the second pass only the elements it wrote in the first, so
// s may be the memory of a or b (an in-place ADD).
// SUBGROUP: the sum of squares by subgroupAdd and one exchange through shared memory (1
// barrier instead of 1 + log2(WG)), and the norm weights of the first pass's elements loaded
// with a and b, before the reduction (one memory round trip less on the serial chain: the
// decode norms are one workgroup each, their time is latency).
// XQ_OUT (the "_xq" variants, EMBER_VULKAN_MMV_QX_OUT; HAS_MUL, one row of at most PER * 256
// values, a multiple of 32): the result also quantized as quantize_x.comp would (same layout and
// arithmetic) into the stream's slot at binding 5, for the decode products that read it (Q, K, V
// and the FFN's gate + up: no quantize_x dispatch after the norm).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#ifndef HAS_ADD
#define HAS_ADD 0
#endif
#ifndef HAS_MUL
#define HAS_MUL 0
#endif

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer A { uint a[]; };
#if HAS_ADD
layout(binding = 1) readonly buffer B { uint b[]; };
layout(binding = 3) buffer S { uint s[]; };
#endif
#if HAS_MUL
layout(binding = 2) readonly buffer W { uint w[]; };
#endif
layout(binding = 4) writeonly buffer D { uint d[]; };
#ifndef XQ_OUT
#define XQ_OUT 0
#endif
#if XQ_OUT
layout(binding = 5) writeonly buffer XQO { uint xqo[]; };
layout(binding = 5) writeonly buffer XQD { vec2 xqd[]; };
#endif

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

#define PER 16u  // elements per invocation kept in registers

shared float red[256];
#if XQ_OUT
shared vec4  ys4[PER * 64u];  // the result, for its quantized copy
shared float amax[256];
shared int   isum[256];
#endif

void main() {
    const uint row = flat_group();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint i1  = row % pc.ne1;
    const uint i2  = (row / pc.ne1) % pc.ne2;
    const uint i3  = row / (pc.ne1 * pc.ne2);
    const uint ab  = pc.a_off + i1 * pc.a_nb1 + i2 * pc.a_nb2 + i3 * pc.a_nb3;
    const uint db  = pc.d_off + i1 * pc.d_nb1 + i2 * pc.d_nb2 + i3 * pc.d_nb3;
#if HAS_ADD
    const uint bb  = pc.b_off + i1 * pc.b_nb1 + i2 * pc.b_nb2 + i3 * pc.b_nb3;
    const uint sb  = pc.s_off + i1 * pc.s_nb1 + i2 * pc.s_nb2 + i3 * pc.s_nb3;
#endif
#if HAS_MUL
    const uint wb  = pc.w_off + (i1 % pc.w_ne1) * pc.w_nb1 + (i2 % pc.w_ne2) * pc.w_nb2 + (i3 % pc.w_ne3) * pc.w_nb3;
#endif
    const uint tid = gl_LocalInvocationID.x;
    const uint wg  = gl_WorkGroupSize.x;

    // The first PER elements of each invocation are loaded together before anything is
    // stored (s may alias a or b, so loads after a store could not be moved before it) and
    // kept in registers for the second pass: a row of 4096 takes two memory round trips, not
    // one per element (the decode norms are latency-bound: one workgroup per row).
    float xv[PER];
#if HAS_MUL && SUBGROUP
    float wv[PER];
    [[unroll]] for (uint k = 0u; k < PER; k++) {
        const uint i = tid + k * wg;
        wv[k]        = i < pc.ne0 ? uintBitsToFloat(w[wb + i]) : 0.0;
    }
#endif
    [[unroll]] for (uint k = 0u; k < PER; k++) {
        const uint i = tid + k * wg;
        xv[k]        = 0.0;
#if HAS_ADD
        if (i < pc.ne0) xv[k] = uintBitsToFloat(a[ab + i]) + uintBitsToFloat(b[bb + i]);
#else
        if (i < pc.ne0) xv[k] = uintBitsToFloat(a[ab + i]);
#endif
    }
    float sum = 0.0;
    [[unroll]] for (uint k = 0u; k < PER; k++) {
#if HAS_ADD
        const uint i = tid + k * wg;
        if (i < pc.ne0) s[sb + i] = floatBitsToUint(xv[k]);
#endif
        sum += xv[k] * xv[k];
    }
    for (uint i = tid + PER * wg; i < pc.ne0; i += wg) {
#if HAS_ADD
        const float x = uintBitsToFloat(a[ab + i]) + uintBitsToFloat(b[bb + i]);
        s[sb + i] = floatBitsToUint(x);
#else
        const float x = uintBitsToFloat(a[ab + i]);
#endif
        sum += x * x;
    }
#if SUBGROUP
    sum = subgroupAdd(sum);
    if (subgroupElect()) red[gl_SubgroupID] = sum;
    barrier();
    float tot = 0.0;
    for (uint sg = 0u; sg < gl_NumSubgroups; sg++) tot += red[sg];
    const float scale = 1.0 / sqrt(tot / float(pc.ne0) + pc.eps);
#else
    red[tid] = sum;
    barrier();
    for (uint h = wg / 2u; h > 0u; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(pc.ne0) + pc.eps);
#endif
#if HAS_MUL && !SUBGROUP
    float wv[PER];
    [[unroll]] for (uint k = 0u; k < PER; k++) {
        const uint i = tid + k * wg;
        wv[k]        = i < pc.ne0 ? uintBitsToFloat(w[wb + i]) : 0.0;
    }
#endif
    [[unroll]] for (uint k = 0u; k < PER; k++) {
        const uint i = tid + k * wg;
#if HAS_MUL
        const float y = xv[k] * scale * wv[k];
        if (i < pc.ne0) d[db + i] = floatBitsToUint(y);
#if XQ_OUT
        if (i < pc.ne0) ys4[i >> 2][i & 3u] = y;
#endif
#else
        if (i < pc.ne0) d[db + i] = floatBitsToUint(xv[k] * scale);
#endif
    }
    for (uint i = tid + PER * wg; i < pc.ne0; i += wg) {
#if HAS_ADD
        float y = uintBitsToFloat(s[sb + i]) * scale;
#else
        float y = uintBitsToFloat(a[ab + i]) * scale;
#endif
#if HAS_MUL
        y *= uintBitsToFloat(w[wb + i]);
#endif
        d[db + i] = floatBitsToUint(y);
    }
#if XQ_OUT
    // Blocks of 32 values: 8 neighbouring invocations, a vec4 of ys each, their absolute maxima
    // and integer sums through shared memory (as quantize_x.comp: the products read the same
    // bytes either way), 256 vec4 per round. (One invocation per block reading its 32 values
    // from ys one by one was a serial chain of 64 shared loads on every decode norm.)
    const uint nv = pc.ne0 / 4u;
    for (uint v0 = 0u; v0 < nv; v0 += wg) {  // uniform
        barrier();  // ys written (first round); amax and isum free (later rounds)
        const uint v  = v0 + tid;
        const bool in_ = v < nv;
        const vec4 y  = in_ ? ys4[v] : vec4(0.0);
        const vec4 a  = abs(y);
        amax[tid]     = max(max(a.x, a.y), max(a.z, a.w));
        barrier();
        const uint b0 = tid & ~7u;
        float      m  = 0.0;
        [[unroll]] for (uint j = 0u; j < 8u; j++) m = max(m, amax[b0 + j]);
        const float dd = m / 127.0;
        const float id = dd > 0.0 ? 1.0 / dd : 0.0;
        const ivec4 q  = ivec4(round(y * id));
        isum[tid]      = (q.x + q.y) + (q.z + q.w);
        barrier();
        if (in_) {
            xqo[v] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
            if (tid == b0) {
                int sq = 0;
                [[unroll]] for (uint j = 0u; j < 8u; j++) sq += isum[b0 + j];
                xqd[pc.ne0 / 8u + v / 8u] = vec2(dd, dd * float(sq));
            }
        }
    }
#endif
}
