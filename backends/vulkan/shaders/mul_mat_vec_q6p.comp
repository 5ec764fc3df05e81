#version 450
// MUL_MAT of Q6_K weights in the Vulkan backend's planar layout (q6p.glsl: each 2048-weight
// segment of a row regrouped field by field, so every field an invocation reads is aligned) by
// one column whose x was quantized beforehand (quantize_x.comp's slot: 8-bit blocks of 32, then
// (d, d * sum) per block): the decode output matrix of most GGUF models and Q4_K_M's Q6_K rows.
//
// No shared-memory staging: an invocation takes unit u = lane of a segment (super-block
// b = u / 4, half h = (u / 2) % 2, group g = u % 2: 64 weights) and reads its low bits, high
// bits and two-bit planes as three 16-byte loads, its 4 scales as one word and d from the
// segment's d words (16 bytes for the 32 invocations). Row group = 32 invocations; KS row groups
// per row, each taking segments part, part + KS, ... of its ROWS rows: for each such segment
// it loads x once and then every row's share (KS = the segments of a row where they are few,
// so that x is loaded once per row group).
//
// The unit's decode and its x: q6_unit.glsl, shared with mul_mat_vec_q6s.comp.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "idot.glsl"
#include "q6p.glsl"

layout(local_size_x_id = 0) in;              // 32 * KS * (row slots)
layout(constant_id = 1) const uint ROWS = 4u;  // rows per row group (consecutive)
layout(constant_id = 2) const uint KS = 1u;    // row groups per row: segments part, part + KS, ...

layout(binding = 0) readonly buffer W4 { uvec4 wb4[]; };
layout(binding = 0) readonly buffer W1 { uint wb1[]; };
layout(binding = 1) readonly buffer XQ { uvec4 xq4[]; };  // x's 8-bit values, 16 per entry
layout(binding = 1) readonly buffer XD { vec2 xd[]; };    // block b: xd[k / 8 + b] = (d, d * sum)
layout(binding = 2) writeonly buffer D { float db[]; };

layout(push_constant) uniform P {
    uint k, n;   // row length (a multiple of 2048), rows
    uint w_off;  // bytes from the binding to the weights (a multiple of 16)
    uint w_nb1;  // bytes between rows (a multiple of 16)
    uint d_off;  // floats from the binding to the result
} pc;

#include "q6_unit.glsl"

shared float red[gl_WorkGroupSize.x];
shared float parts[gl_WorkGroupSize.x / 32u][ROWS];  // each row group's sums (KS > 1)

void main() {
    const uint tid  = gl_LocalInvocationID.x;
    const uint lane = tid % 32u;
    const uint rg   = tid / 32u;
    const uint part = rg % KS;
    const uint row0 = (flat_group() * (gl_WorkGroupSize.x / 32u / KS) + rg / KS) * ROWS;
    const uint nseg = pc.k / Q6P_SEG_W;
    const uint b = lane >> 2, h = (lane >> 1) & 1u, g = lane & 1u;

    float acc[ROWS];
    [[unroll]] for (uint i = 0u; i < ROWS; i++) acc[i] = 0.0;

    for (uint s = part; s < nseg; s += KS) {
        uvec4 xv[4];
        float xs[4];
        int   x32[4];
        q6_unit_x(s * 8u + b, h, g, xv, xs, x32);  // x of this invocation's unit of segment s
        [[unroll]] for (uint i = 0u; i < ROWS; i++) {
            const uint  row = min(row0 + i, pc.n - 1u);  // (past the last row: a copy of it, not stored)
            const uint  sc  = ((pc.w_off + row * pc.w_nb1) >> 4) + s * Q6P_SEG_CHUNKS;  // segment's chunk
            const uvec4 lo  = wb4[sc + Q6P_QL_CHUNK(b) + 4u * h + g];
            const uvec4 hi  = wb4[sc + Q6P_QL_CHUNK(b) + 4u * h + 2u + g];
            const uvec4 qh  = wb4[sc + Q6P_QH_CHUNK(b) + 2u * h + g];
            const uint  scw = wb1[4u * sc + Q6P_SC_WORD(b) + (lane & 3u)];
            const uint  dw  = wb1[4u * sc + Q6P_D_WORD(b)];
            const float d   = unpackHalf2x16((b & 1u) != 0u ? dw >> 16 : dw).x;
            float pt = 0.0;
            [[unroll]] for (uint grp = 0u; grp < 4u; grp++) {
                int dot = -x32[grp];
                [[unroll]] for (uint w = 0u; w < 4u; w++) dot += dot4(q6_unit_levels(grp, lo[w], hi[w], qh[w]), xv[grp][w]);
                pt += float(bitfieldExtract(int(scw), int(8u * grp), 8)) * xs[grp] * float(dot);
            }
            acc[i] += d * pt;
        }
    }
    if (gl_SubgroupSize == 32u) {  // (uniform) a row group is one subgroup
        [[unroll]] for (uint i = 0u; i < ROWS; i++) acc[i] = subgroupAdd(acc[i]);
    } else {  // (lavapipe, other widths) through shared memory
        [[unroll]] for (uint i = 0u; i < ROWS; i++) {
            red[tid] = acc[i];
            barrier();
            for (uint hh = 16u; hh > 0u; hh >>= 1) {
                if (lane < hh) red[tid] += red[tid + hh];
                barrier();
            }
            acc[i] = red[tid - lane];
            barrier();
        }
    }
    if (KS > 1u) {
        if (lane == 0u) [[unroll]] for (uint i = 0u; i < ROWS; i++) parts[rg][i] = acc[i];
        barrier();
        if (part == 0u) {
            [[unroll]] for (uint i = 0u; i < ROWS; i++) {
                float t = 0.0;
                for (uint p = 0u; p < KS; p++) t += parts[rg + p][i];
                acc[i] = t;
            }
        }
    }
    if (lane == 0u && part == 0u) {
        [[unroll]] for (uint i = 0u; i < ROWS; i++) {
            if (row0 + i < pc.n) db[pc.d_off + row0 + i] = acc[i];
        }
    }
}
