#version 450
// MUL_MAT of Q6_K weights by one column whose x was quantized beforehand (quantize_x.comp's
// slot: 8-bit blocks of 32, then (d, d * sum) per block): the decode output matrix of most
// GGUF models (Q4_0, Q8_0, Q4_K_M) and Q4_K_M's Q6_K FFN down rows.
//
// Q6_K's 210-byte super-blocks leave every field only 2-byte aligned, so 16-byte loads cannot
// take an invocation's quants out of global memory; the word-by-word kernels
// (mul_mat_vec_q.comp QQ and QX) read the H200's output matrix at 1.5-1.65 TB/s. But a row of a
// multiple of 8 super-blocks (1680 bytes) starts on 16 bytes: each row group of 32
// invocations copies its rows into shared memory SEG super-blocks at a time with coalesced
// 16-byte loads, the next segment's loads issued before the current one is decoded (RW
// consecutive rows per group, their segments one stream), as the CUDA backend's mv6_kernel.
// Decoding, an invocation takes units of 64 weights: unit u of a super-block is its half
// h = u / 2 and group g = u % 2: ql bytes 64h + 16g .. + 15 (low nibbles: weights
// 128h + 16g + i; high: + 64), the ql bytes 32 further (+ 32, + 96), qh bytes 128 + 32h + 16g
// .. + 15 (the top two bits of those four groups of 16 weights), scales 8h + g + {0, 2, 4, 6},
// d at byte 208. The 6-bit quants less 32 fit signed bytes: byte dot products with x.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "idot.glsl"

layout(local_size_x_id = 0) in;               // a multiple of 32: row groups of 32 invocations
layout(constant_id = 1) const uint RW = 4u;   // consecutive rows per row group
// Row groups per row (1, 2 or 4, at most the workgroup's; then RW = 1): long rows (the FFN
// down: 4 or 7 segments) dealt segment by segment among KS row groups, whose sums meet in
// shared memory, instead of one row group taking every segment in turn.
layout(constant_id = 2) const uint KS = 1u;
// 1: x loaded once before the steps (below), where every step of a row group reads the same x:
// rows of one segment per row group (the host sets it; a constant, so that each pipeline
// carries one of the two decodes, not both behind selects).
layout(constant_id = 3) const uint XH = 0u;

// Super-blocks per segment: 8, the least a row holds, so that every invocation decodes one
// unit per segment and holds 4 chunks in flight (16 took 7 and 95 registers on an H200: 5
// workgroups per multiprocessor).
#define SEG 8u
#define SEGQ (SEG * 210u / 16u)    // its 16-byte chunks (105)
#define LOADS ((SEGQ + 31u) / 32u) // chunks per invocation (4)

layout(binding = 0) readonly buffer W4 { uvec4 wb4[]; };
layout(binding = 1) readonly buffer XQ { uvec4 xq4[]; };  // x's 8-bit values, 16 per entry
layout(binding = 1) readonly buffer XD { vec2 xd[]; };    // block b: xd[k / 8 + b] = (d, d * sum)
layout(binding = 2) writeonly buffer D { float db[]; };

layout(push_constant) uniform P {
    uint k, n;      // row length (a multiple of 2048), rows
    uint w_off;     // bytes from the binding to the weights (a multiple of 16)
    uint w_nb1;     // bytes between rows (a multiple of 16)
    uint d_off;     // floats from the binding to the result
    uint sg_sync;   // 1: a row group waits for its own subgroup only (below)
} pc;

shared uvec4 seg[(gl_WorkGroupSize.x / 32u) * SEGQ];  // one segment per row group
shared float red[gl_WorkGroupSize.x];
shared float parts[gl_WorkGroupSize.x / 32u];  // the row groups' sums (KS > 1)

// Word i (of a row group's segment, in 32-bit words).
uint sw(uint base, uint i) { return seg[base + (i >> 2)][i & 3u]; }

// The 4 words at byte `off` of the segment at chunk `base` (off even; odd: off % 4 == 2).
uvec4 read16(uint base, uint off, bool odd) {
    const uint i = off >> 2;
    const uint a = sw(base, i), b = sw(base, i + 1u), c = sw(base, i + 2u), d = sw(base, i + 3u);
    if (!odd) return uvec4(a, b, c, d);
    const uint e = sw(base, i + 4u);
    return uvec4((a >> 16) | (b << 16), (b >> 16) | (c << 16), (c >> 16) | (d << 16), (d >> 16) | (e << 16));
}

// The signed byte at byte `off`.
int sbyte(uint base, uint off) { return bitfieldExtract(int(sw(base, off >> 2)), int((off & 3u) * 8u), 8); }

// Step t of a row group (segment part + KS * (t % nls) of row t / nls, rows from the one at
// chunk wrow): the chunk its segment starts at, or NO_STEP when it has none (past the steps,
// the group's rows or the row's segments).
#define NO_STEP 0xffffffffu
uint step_chunk(uint t, uint steps, uint nls, uint part, uint nrow, uint nseg, uint wrow) {
    const uint r = t / nls, sg = part + KS * (t % nls);
    return t < steps && r < nrow && sg < nseg ? wrow + r * (pc.w_nb1 >> 4) + sg * SEGQ : NO_STEP;
}

// This invocation's share of the segment at chunk c0, into b.
void load_segment(uint c0, uint lane, inout uvec4 b[LOADS]) {
    [[unroll]] for (uint j = 0u; j < LOADS; j++) {
        const uint c = lane + 32u * j;
        if (c < SEGQ) b[j] = wb4[c0 + c];
    }
}

// The row group's segment stored before it is read, or read before the next is stored. With
// pc.sg_sync (KS = 1 on a device of 32-invocation subgroups: a row group is one subgroup and
// shares nothing with the others) by a subgroup barrier, so that the workgroup's row groups
// run apart and their loads spread out; else by a workgroup barrier.
void seg_sync(bool sgs) {
    if (sgs) {
        subgroupMemoryBarrierShared();
        subgroupBarrier();
    } else {
        barrier();
    }
}

// 6-bit quants (4 per word) less 32, as signed bytes: bit 5 flipped, then sign-extended.
uint q6s(uint q) {
    const uint t = q ^ 0x20202020u;
    return t | ((t & 0x20202020u) * 6u);
}

// The x of an invocation's unit (q6_unit_x) is loaded once for all the steps of a row group
// (XH), and the 6-bit quants are then taken as they are, each group corrected once (the same
// integers as q6s() on every word). (Without the hoist the sums cost more than q6s(): H200, 8B
// output matrix 185.0 -> 194.2 us per token; with it, the 1B output matrix 100.5 -> 94.9 us.
// Both decodes in one shader, chosen by a uniform flag, made both slower: 103.7 and 191.0 us.)
#include "q6_unit.glsl"

void main() {
    const uint tid   = gl_LocalInvocationID.x;
    const uint lane  = tid % 32u;
    const uint rg    = tid / 32u;
    const uint rgs   = gl_WorkGroupSize.x / 32u;
    const uint part  = rg % KS;  // this row group's share of its rows: segments part, part + KS, ...
    const uint row0  = (flat_group() * (rgs / KS) + rg / KS) * RW;
    const uint nseg  = pc.k / (256u * SEG);  // (rows of whole segments: the host checks it)
    const uint nls   = (nseg + KS - 1u) / KS;  // segments per row for each row group
    const uint nrow  = row0 < pc.n ? min(RW, pc.n - row0) : 0u;
    const uint steps = RW * nls;  // the same for every row group: the barriers are uniform
    const uint base  = rg * SEGQ;
    const uint wrow  = (pc.w_off + row0 * pc.w_nb1) >> 4;  // in chunks
    const bool sgs   = pc.sg_sync != 0u && KS == 1u && gl_SubgroupSize == 32u;  // (uniform)

    // Step t: segment part + KS * (t % nls) of row t / nls (none past the row's end), through
    // buf, the first one loaded here. (Two steps' loads in flight, through a second buffer,
    // measured slower on an H200: 110.8 against 104.5 us for the 1B output matrix.)
    uvec4 buf[LOADS];
    [[unroll]] for (uint j = 0u; j < LOADS; j++) buf[j] = uvec4(0u);
    {
        const uint c0 = step_chunk(0u, steps, nls, part, nrow, nseg, wrow);
        if (c0 != NO_STEP) load_segment(c0, lane, buf);
    }
    // Every step of a row group reads the same x where rows are one segment per row group
    // (nls = 1: the 1B output matrix): loaded once, here (XH; in registers).
    const bool xh = XH != 0u;
    uvec4      xv[4];
    float      xs[4];
    int        x32[4];
    if (xh && part < nseg) q6_unit_x(part * SEG + (lane >> 2), (lane >> 1) & 1u, lane & 1u, xv, xs, x32);  // (a share past the row: no steps)
    float acc = 0.0;
    for (uint t = 0u; t < steps; t++) {
        const uint r    = t / nls, sg = part + KS * (t % nls);
        const bool live = step_chunk(t, steps, nls, part, nrow, nseg, wrow) != NO_STEP;
        [[unroll]] for (uint j = 0u; j < LOADS; j++) {
            const uint c = lane + 32u * j;
            if (c < SEGQ) seg[base + c] = buf[j];
        }
        seg_sync(sgs);
        // Step t + 1's loads in flight while this one is decoded.
        {
            const uint c1 = step_chunk(t + 1u, steps, nls, part, nrow, nseg, wrow);
            if (c1 != NO_STEP) load_segment(c1, lane, buf);
        }
        if (live) {
            // One unit per invocation (a segment holds 4 * SEG = 32 units).
            const uint u = lane;
            const uint b = u >> 2, h = (u >> 1) & 1u, g = u & 1u;
            const uint o = 210u * b;
            const bool odd = (b & 1u) != 0u;
            const uvec4 lo = read16(base, o + 64u * h + 16u * g, odd);
            const uvec4 hi = read16(base, o + 64u * h + 32u + 16u * g, odd);
            const uvec4 qh = read16(base, o + 128u + 32u * h + 16u * g, odd);
            const uint  so = o + 192u + 8u * h + g;
            const uint  dw = sw(base, (o + 208u) >> 2);
            const float d  = unpackHalf2x16(odd ? dw >> 16 : dw).x;
            const uint  kb = sg * SEG + b;                    // super-block of the row
            const uint  xc = 16u * kb + 8u * h + g;           // x's chunk of group 0
            const uint  xb = pc.k / 8u + 8u * kb + 4u * h;    // x's (d, d * sum) of group 0
            float pt = 0.0;
            [[unroll]] for (uint grp = 0u; grp < 4u; grp++) {
                const uvec4 xg  = xh ? xv[grp] : xq4[xc + 2u * grp];
                int         dot = xh ? -x32[grp] : 0;
                [[unroll]] for (uint w = 0u; w < 4u; w++) {
                    const uint q = q6_unit_levels(grp, lo[w], hi[w], qh[w]);
                    dot += dot4(xh ? q : q6s(q), xg[w]);
                }
                pt += float(sbyte(base, so + 2u * grp)) * (xh ? xs[grp] : xd[xb + grp].x) * float(dot);
            }
            acc += d * pt;
        }
        seg_sync(sgs);  // the segment read before the next one is stored
        if (t % nls == nls - 1u) {  // the row's last step: its sum (uniform branch)
            float s;
            if (gl_SubgroupSize == 32u) {
                s = subgroupAdd(acc);
            } else {
                red[tid] = acc;
                barrier();
                for (uint hh = 16u; hh > 0u; hh >>= 1) {
                    if (lane < hh) red[tid] += red[tid + hh];
                    barrier();
                }
                s = red[tid - lane];
                barrier();
            }
            if (KS > 1u) {  // the row's KS shares meet in shared memory
                if (lane == 0u) parts[rg] = s;
                barrier();
                s = 0.0;
                for (uint i = 0u; i < KS; i++) s += parts[rg - part + i];
                barrier();
            }
            if (lane == 0u && part == 0u && r < nrow) db[pc.d_off + row0 + r] = s;
            acc = 0.0;
        }
    }
}
