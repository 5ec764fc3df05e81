#version 450
// ATTN with an online softmax: one workgroup per (head, token). q F32 [d, n_head, n_tokens];
// k (K_TYPE), v (V_TYPE) [d, n_head_kv, n_kv]; mask F32 [n_kv, n_tokens] (0 visible, -INF
// hidden) when has_mask. Query head h reads kv head h / group. Keys are taken a tile of
// WG at a time: one invocation scores one key, the tile's max and sum rescale the running
// state, then each invocation accumulates its own output dimensions. d <= 4 * WG.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer Q { uint qb[]; };
layout(binding = 1) readonly buffer K { uint kb[]; };
layout(binding = 2) readonly buffer V { uint vb[]; };
layout(binding = 3) readonly buffer M { uint mb[]; };
layout(binding = 4) writeonly buffer D { uint db[]; };

#define DQ_FN dq_k
#define DQ_BUF kb
#define DQ_TYPE K_TYPE
#include "dequant.glsl"
#undef DQ_FN
#undef DQ_BUF
#undef DQ_TYPE
#define DQ_FN dq_v
#define DQ_BUF vb
#define DQ_TYPE V_TYPE
#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint d, n_head, n_tokens, n_kv, group;
    uint q_off, q_nb1, q_nb2;  // floats
    uint k_off, k_nb1, k_nb2;  // bytes
    uint v_off, v_nb1, v_nb2;  // bytes
    uint m_off, m_nb1;         // floats
    uint has_mask;
    uint d_off, d_nb1, d_nb2;  // floats
    float scale;
} pc;

#define MAX_WG 256u
shared float sq[4u * MAX_WG];
shared float sp[MAX_WG];
shared float sred[MAX_WG];

#define NEG_INF uintBitsToFloat(0xff800000u)

float reduce_max(float v) {
    const uint tid = gl_LocalInvocationID.x;
    sred[tid] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2u; h > 0u; h >>= 1) {
        if (tid < h) sred[tid] = max(sred[tid], sred[tid + h]);
        barrier();
    }
    const float r = sred[0];
    barrier();
    return r;
}

float reduce_sum(float v) {
    const uint tid = gl_LocalInvocationID.x;
    sred[tid] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2u; h > 0u; h >>= 1) {
        if (tid < h) sred[tid] += sred[tid + h];
        barrier();
    }
    const float r = sred[0];
    barrier();
    return r;
}

void main() {
    const uint g = flat_group();
    if (g >= pc.n_head * pc.n_tokens) return;
    const uint ih  = g % pc.n_head;
    const uint it  = g / pc.n_head;
    const uint ik  = ih / pc.group;
    const uint tid = gl_LocalInvocationID.x;
    const uint wg  = gl_WorkGroupSize.x;

    const uint qrow = pc.q_off + ih * pc.q_nb1 + it * pc.q_nb2;
    for (uint i = tid; i < pc.d; i += wg) sq[i] = uintBitsToFloat(qb[qrow + i]);
    barrier();

    float M = NEG_INF;
    float S = 0.0;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint j0 = 0u; j0 < pc.n_kv; j0 += wg) {
        const uint j = j0 + tid;
        float s = NEG_INF;
        if (j < pc.n_kv) {
            const float mv = pc.has_mask != 0u ? uintBitsToFloat(mb[pc.m_off + it * pc.m_nb1 + j]) : 0.0;
            if (mv != NEG_INF) {
                const uint krow = pc.k_off + ik * pc.k_nb1 + j * pc.k_nb2;
                float dot = 0.0;
                for (uint i = 0u; i < pc.d; i++) dot += sq[i] * dq_k(krow, i);
                s = dot * pc.scale + mv;
            }
        }
        const float tmax = reduce_max(s);
        const float newM = max(M, tmax);
        if (newM == NEG_INF) continue;  // every key so far is hidden (uniform)
        const float p  = s == NEG_INF ? 0.0 : exp(s - newM);
        const float ms = M == NEG_INF ? 0.0 : exp(M - newM);
        sp[tid] = p;
        const float psum = reduce_sum(p);  // its barriers also publish sp
        S = S * ms + psum;
        M = newM;
        const uint nt = min(wg, pc.n_kv - j0);
        for (uint c = 0u; c < 4u; c++) {
            const uint i = tid + c * wg;
            if (i >= pc.d) break;
            float a = acc[c] * ms;
            for (uint jj = 0u; jj < nt; jj++) {
                const float pj = sp[jj];
                if (pj != 0.0) a += pj * dq_v(pc.v_off + ik * pc.v_nb1 + (j0 + jj) * pc.v_nb2, i);
            }
            acc[c] = a;
        }
        barrier();  // sp is rewritten by the next tile
    }
    const float inv  = S > 0.0 ? 1.0 / S : 0.0;  // all keys hidden: zeros
    const uint  drow = pc.d_off + ih * pc.d_nb1 + it * pc.d_nb2;
    for (uint c = 0u; c < 4u; c++) {
        const uint i = tid + c * wg;
        if (i < pc.d) db[drow + i] = floatBitsToUint(acc[c] * inv);
    }
}
