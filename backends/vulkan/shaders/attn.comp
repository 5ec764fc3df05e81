#version 450
// ATTN with an online softmax: one workgroup per (head, token). q F32 [d, n_head, n_tokens];
// k (K_TYPE), v (V_TYPE) [d, n_head_kv, n_kv]; mask F32 [n_kv, n_tokens] (0 visible, -INF
// hidden) when has_mask. Query head h reads kv head h / group. Keys are taken a tile of
// WG / KP at a time: KP neighbouring invocations score one key (each a strided share of its
// dimensions, so that they read neighbouring elements of the key row, and a dot product is
// d / KP long, not d), the tile's max and sum rescale the running state, then the keys of
// the tile are split among G = WG / DW groups of DW invocations (DW = min(d, WG)), each
// invocation accumulating its dimensions (i, i + DW, ...) over its group's keys; the groups'
// sums meet at the end. d <= 4 * WG. (Decode: 32 heads x 1 token are few workgroups for a
// large GPU; short dot products and key groups cut the serial chain of each.)
// SUBGROUP: the tile's max and sum by subgroup operations and one exchange through shared
// memory (2 barriers each instead of 1 + log2(WG)): the serial chain of a tile is mostly
// barriers when the keys are few (decode).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer Q { uint qb[]; };
layout(binding = 1) readonly buffer K { uint kb[]; };
layout(binding = 2) readonly buffer V { uint vb[]; };
layout(binding = 3) readonly buffer M { uint mb[]; };
layout(binding = 4) writeonly buffer D { uint db[]; };
// XQ_OUT (the "_xq" variants, EMBER_VULKAN_MMV_QX_OUT), with xq_on (one token, rows of d
// floats one after the other, d a multiple of 32): the output also quantized as quantize_x.comp
// would (same layout and arithmetic) into the stream's slot at binding 5, for the decode
// products that read it (the O projection: no quantize_x dispatch). Without XQ_OUT the shader
// is the one before that option existed.
#ifndef XQ_OUT
#define XQ_OUT 0
#endif
#if XQ_OUT
layout(binding = 5) writeonly buffer XQO { uint xqo[]; };
layout(binding = 5) writeonly buffer XQD { vec2 xqd[]; };
#endif

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
    // Keys after the last one the mask shows are not visited (the mask row is scanned first:
    // a decode step's causal mask hides the padded end of the cache, n_kv rounded up to 256).
    uint mask_end;
#if XQ_OUT
    uint xq_on;
#endif
} pc;

#define MAX_WG 256u
// Invocations per key when scoring: 4 (64 keys per tile of 256), or 2 | 8 (128 | 32 keys per
// tile: fewer | more tiles one after another; EMBER_VULKAN_ATTN_KP).
layout(constant_id = 1) const uint KP = 4u;
shared float sq[4u * MAX_WG];
shared float sp[MAX_WG];
shared float sred[MAX_WG];
shared float sacc[4u * MAX_WG];  // the key groups' sums

#define NEG_INF uintBitsToFloat(0xff800000u)

float reduce_max(float v) {
#if SUBGROUP
    v = subgroupMax(v);
    if (subgroupElect()) sred[gl_SubgroupID] = v;
    barrier();
    float m = sred[0];
    for (uint s = 1u; s < gl_NumSubgroups; s++) m = max(m, sred[s]);
    barrier();
    return m;
#endif
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
#if SUBGROUP
    v = subgroupAdd(v);
    if (subgroupElect()) sred[gl_SubgroupID] = v;
    barrier();
    float t = sred[0];
    for (uint s = 1u; s < gl_NumSubgroups; s++) t += sred[s];
    barrier();
    return t;
#endif
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
    const uint wg  = gl_WorkGroupSize.x;  // a power of two, a multiple of KP
    const uint kt  = wg / KP;             // keys per tile
    const uint kp  = tid % KP;            // this invocation's share of its key's dimensions
    const uint kj  = tid / KP;            // its key in the tile
    // Invocations per key group (accumulation): a quarter of the head's dimensions, each
    // invocation taking four (acc[4]), so that a tile's keys are shared by more groups and each
    // invocation's P.V loop is a few long batches of loads, not many short ones (decode at a
    // short context: 128 dims took 2 groups of 32 keys per tile, 8 batches of 4 loads; now 8
    // groups of 8 keys, 2 batches of 16). (ng - 1) * d < 4 * wg: sacc holds the groups' sums.
    const uint dw  = min((pc.d + 3u) / 4u, wg);
    const uint ng  = wg / dw;             // key groups
    const uint kg  = tid / dw;            // this invocation's group (ng: none)
    const uint di  = tid % dw;            // its first dimension

    const uint qrow = pc.q_off + ih * pc.q_nb1 + it * pc.q_nb2;
    for (uint i = tid; i < pc.d; i += wg) sq[i] = uintBitsToFloat(qb[qrow + i]);

    // The keys to visit: up to the last one the mask shows (mask_end), else all. The mask row
    // is read in the same memory round trip as q (reduce_max's first barrier publishes sq).
    uint n_end = pc.n_kv;
    if (pc.has_mask != 0u && pc.mask_end != 0u) {  // uniform (push constants)
        float last = 0.0;  // one past the last visible key this invocation saw
        for (uint j = tid; j < pc.n_kv; j += wg) {
            if (uintBitsToFloat(mb[pc.m_off + it * pc.m_nb1 + j]) != NEG_INF) last = float(j + 1u);
        }
        n_end = uint(reduce_max(last));
    } else {
        barrier();
    }

    float M = NEG_INF;
    float S = 0.0;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint j0 = 0u; j0 < n_end; j0 += kt) {
        const uint j = j0 + kj;
        bool  live = false;
        float mv   = 0.0;
        float dot  = 0.0;
        if (j < pc.n_kv) {
            mv   = pc.has_mask != 0u ? uintBitsToFloat(mb[pc.m_off + it * pc.m_nb1 + j]) : 0.0;
            live = mv != NEG_INF;
            if (live) {
                // Sixteen of the key's values loaded before any is used: the loop's loads are
                // then in flight together, not one memory round trip per value (decode at a
                // short context is this chain and the one of the P.V loop below; 128 dims: two
                // batches per invocation).
                const uint krow = pc.k_off + ik * pc.k_nb1 + j * pc.k_nb2;
                uint       i    = kp;
                for (; i + 15u * KP < pc.d; i += 16u * KP) {
                    float kv[16];
                    [[unroll]] for (uint u = 0u; u < 16u; u++) kv[u] = dq_k(krow, i + u * KP);
                    [[unroll]] for (uint u = 0u; u < 16u; u++) dot += sq[i + u * KP] * kv[u];
                }
                for (; i + 7u * KP < pc.d; i += 8u * KP) {
                    float kv[8];
                    [[unroll]] for (uint u = 0u; u < 8u; u++) kv[u] = dq_k(krow, i + u * KP);
                    [[unroll]] for (uint u = 0u; u < 8u; u++) dot += sq[i + u * KP] * kv[u];
                }
                for (; i < pc.d; i += KP) dot += sq[i] * dq_k(krow, i);
            }
        }
        sred[tid] = dot;
        barrier();
        float s = NEG_INF;
        if (kp == 0u && live) {
            float t = 0.0;
            [[unroll]] for (uint c = 0u; c < KP; c++) t += sred[tid + c];
            s = t * pc.scale + mv;
        }
        barrier();  // sred is reused by the reductions
        const float tmax = reduce_max(s);
        const float newM = max(M, tmax);
        if (newM == NEG_INF) continue;  // every key so far is hidden (uniform)
        const float p  = s == NEG_INF ? 0.0 : exp(s - newM);
        const float ms = M == NEG_INF ? 0.0 : exp(M - newM);
        if (kp == 0u) sp[kj] = p;
        const float psum = reduce_sum(p);  // its barriers also publish sp
        S = S * ms + psum;
        M = newM;
        const uint nt = min(kt, pc.n_kv - j0);
        [[unroll]] for (uint c = 0u; c < 4u; c++) acc[c] *= ms;
        if (kg < ng) {
            // Four keys' values loaded, then used (as above). A hidden key's weight is 0 and
            // its row may hold anything (an unwritten cache cell): selected away, not multiplied.
            uint jj = kg;
            for (; jj + 3u * ng < nt; jj += 4u * ng) {
                float pv[4];
                float vv[4][4];
                [[unroll]] for (uint u = 0u; u < 4u; u++) {
                    pv[u]           = sp[jj + u * ng];
                    const uint vrow = pc.v_off + ik * pc.v_nb1 + (j0 + jj + u * ng) * pc.v_nb2;
                    [[unroll]] for (uint c = 0u; c < 4u; c++) {
                        const uint i = di + c * dw;
                        vv[u][c]     = i < pc.d ? dq_v(vrow, i) : 0.0;
                    }
                }
                [[unroll]] for (uint u = 0u; u < 4u; u++) {
                    [[unroll]] for (uint c = 0u; c < 4u; c++) acc[c] += pv[u] == 0.0 ? 0.0 : pv[u] * vv[u][c];
                }
            }
            for (; jj < nt; jj += ng) {
                const float pj = sp[jj];
                if (pj == 0.0) continue;
                const uint vrow = pc.v_off + ik * pc.v_nb1 + (j0 + jj) * pc.v_nb2;
                [[unroll]] for (uint c = 0u; c < 4u; c++) {
                    const uint i = di + c * dw;
                    if (i < pc.d) acc[c] += pj * dq_v(vrow, i);
                }
            }
        }
        barrier();  // sp is rewritten by the next tile
    }
    // The groups' sums: group 0 adds the others'.
    if (kg < ng && kg > 0u) {
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            const uint i = di + c * dw;
            if (i < pc.d) sacc[(kg - 1u) * pc.d + i] = acc[c];
        }
    }
    barrier();
    if (kg == 0u) {
        const float inv  = S > 0.0 ? 1.0 / S : 0.0;  // all keys hidden: zeros
        const uint  drow = pc.d_off + ih * pc.d_nb1 + it * pc.d_nb2;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            const uint i = di + c * dw;
            if (i >= pc.d) break;
            float a = acc[c];
            for (uint k = 1u; k < ng; k++) a += sacc[(k - 1u) * pc.d + i];
            db[drow + i] = floatBitsToUint(a * inv);
#if XQ_OUT
            sq[i]        = a * inv;  // (q is no longer read)
#endif
        }
    }
#if XQ_OUT
    if (pc.xq_on != 0u) {
        // Blocks of 32: 8 neighbouring invocations, a vec4 each, their absolute maxima and
        // integer sums through shared memory (sred, sp: free now).
        barrier();
        const uint nv = pc.d / 4u;
        for (uint v0 = 0u; v0 < nv; v0 += wg) {
            const uint v   = v0 + tid;
            const bool in_ = v < nv;
            const vec4 x   = in_ ? vec4(sq[4u * v], sq[4u * v + 1u], sq[4u * v + 2u], sq[4u * v + 3u]) : vec4(0.0);
            const vec4 a   = abs(x);
            sred[tid]      = max(max(a.x, a.y), max(a.z, a.w));
            barrier();
            const uint b0 = tid & ~7u;
            float      m  = 0.0;
            [[unroll]] for (uint j = 0u; j < 8u; j++) m = max(m, sred[b0 + j]);
            const float d  = m / 127.0;
            const float id = d > 0.0 ? 1.0 / d : 0.0;
            const ivec4 q  = ivec4(round(x * id));
            sp[tid]        = intBitsToFloat((q.x + q.y) + (q.z + q.w));
            barrier();
            if (in_) {
                const uint gv = ih * nv + v;  // the vec4 of the whole row (all heads)
                xqo[gv] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) | (uint(q.w) << 24);
                if (tid == b0) {
                    int s = 0;
                    [[unroll]] for (uint j = 0u; j < 8u; j++) s += floatBitsToInt(sp[b0 + j]);
                    xqd[pc.d * pc.n_head / 8u + gv / 8u] = vec2(d, d * float(s));
                }
            }
            barrier();
        }
    }
#endif
}
