#version 450
// MUL_MAT for many columns (prefill) on the tensor cores, through cooperative matrices
// (GL_NV_cooperative_matrix: the extension that the Debian 12 glslc knows; built only when the
// glslc at hand compiles it, used only on devices that have VK_NV_cooperative_matrix with the
// 16 x 8 x 16 f16 x f16 -> f32 shape: vk-backend.cpp). Same operands and push constants as
// mul_mm.comp. A workgroup of 256 invocations (8 subgroups of 32) computes a BM x BN tile of
// the output (rows: weight rows, columns: x rows); per step of BK k-values (64 in the build:
// fewer barriers than 32), the weights (TYPE, dequantized by runs of 8) and x are converted to
// f16 into shared memory (x beyond the f16 range, 65504, would become infinite: mul_mm.comp,
// with EMBER_VULKAN_COOPMAT=0, keeps f32), then each
// subgroup multiplies its (BM / 2) x (BN / 4) part with 16 x 8 x 16 products into f32
// accumulators. The next step's global loads are issued before this step's products, as raw
// words that are dequantized and converted only after them (no use of a loaded value before
// the products, so that they hide the loads' latency; other types than F16, Q4_0 and Q8_0
// dequantize as they load). Whole 16 x 8 results go straight to the F32 output; those of
// partial edge tiles through shared memory, cut off at the edges. z is the batch matrix.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer W { uint wb[]; };
layout(binding = 1) readonly buffer X { uint xb[]; };
layout(binding = 1) readonly buffer X4 { vec4 xb4[]; };  // the same x, 16 bytes at a time
layout(binding = 2) writeonly buffer D { uint db[]; };
layout(binding = 2) writeonly buffer DF { float dbf[]; };  // the same output, for whole fragments

#define DQ_FN dq_w
#define DQ_BUF wb
#define DQ_TYPE TYPE
#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint k, n, m, x2;
    uint w_off, w_nb1, w_nb2, w_nb3;  // bytes
    uint x_off, x_nb1, x_nb2, x_nb3;  // floats
    uint d_off, d_nb1, d_nb2, d_nb3;  // floats
    uint bcast2, bcast3;
} pc;

#ifndef BM
#define BM 128u
#endif
#ifndef BN
#define BN 128u
#endif
#ifndef BK
#define BK 32u
#endif
// Shared rows of BK halves plus 8 (16 bytes) of padding, in uvec4 units (8 halves): rows 80
// (BK 32) or 144 (BK 64) bytes apart fall on distinct banks for the 8-row fragment loads.
#define KR (BK / 8u)  // runs of 8 k-values per row and step
#define SKV (KR + 1u)
#define WTM (BM / 2u)    // a subgroup's rows (2 x 4 subgroups)
#define WTN (BN / 4u)    // ... and columns
#define FM (WTM / 16u)   // its 16 x 16 A fragments
#define FN (WTN / 8u)    // ... and 16 x 8 B fragments
#define RUNS_A (BM * BK / 8u / 256u)  // runs of 8 k-values each invocation loads per step
#define RUNS_B (BN * BK / 8u / 256u)

shared uvec4 sa[BM * SKV];             // weights, row-major (row r: sa[r * SKV ...])
shared uvec4 sb[BN * SKV];             // x, one column of B per x row (column-major B)
shared float so[8u * 128u];            // per subgroup: one 16 x 8 result, column-major

#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>

// A run: eight weights of the row at byte rb, k-values kg .. kg + 7 (kg a multiple of 8), as
// f16 pairs: ld_w loads what cv_w converts. F16, Q4_0, Q8_0: raw words; Q4_0, Q8_0: the word
// holding the scale, then the three words from the one holding the first quant (blocks start
// on even bytes). Other types: converted by ld_w already.
uvec4 ld_w(uint rb, uint kg) {
    if (kg + 8u > pc.k) {  // a last step short of a whole run (rows of no multiple of 8)
        float v[8];
        [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = kg + i < pc.k ? dq_w(rb, kg + i) : 0.0;
        return uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), packHalf2x16(vec2(v[4], v[5])),
                     packHalf2x16(vec2(v[6], v[7])));
    }
#if TYPE == T_F16
    const uint b = rb + 2u * kg;
    if ((b & 3u) == 0u) return uvec4(wb[b >> 2], wb[(b >> 2) + 1u], wb[(b >> 2) + 2u], wb[(b >> 2) + 3u]);
    return uvec4(RD_U32U(wb, b), RD_U32U(wb, b + 4u), RD_U32U(wb, b + 8u), RD_U32U(wb, b + 12u));
#elif TYPE == T_Q4_0 || TYPE == T_Q8_0
#if TYPE == T_Q4_0
    const uint bb = rb + (kg >> 5) * 18u;
    const uint qb = bb + 2u + (kg & 15u);
#else
    const uint bb = rb + (kg >> 5) * 34u;
    const uint qb = bb + 2u + (kg & 31u);
#endif
    const uint q = qb >> 2;
    return uvec4(wb[bb >> 2], wb[q], wb[q + 1u], (qb & 3u) != 0u ? wb[q + 2u] : 0u);
#else
    float v[8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = dq_w(rb, kg + i);
    return uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), packHalf2x16(vec2(v[4], v[5])),
                 packHalf2x16(vec2(v[6], v[7])));
#endif
}

uvec4 cv_w(uvec4 raw, uint rb, uint kg) {
    if (kg + 8u > pc.k) return raw;
#if TYPE == T_Q4_0 || TYPE == T_Q8_0
#if TYPE == T_Q4_0
    const uint bb = rb + (kg >> 5) * 18u;
    const uint qb = bb + 2u + (kg & 15u);
    const uint sh = (kg & 31u) < 16u ? 0u : 4u;
#else
    const uint bb = rb + (kg >> 5) * 34u;
    const uint qb = bb + 2u + (kg & 31u);
#endif
    const float d  = unpackHalf2x16(raw.x >> ((bb & 2u) << 3)).x;
    const uint  s  = (qb & 3u) << 3;
    const uint  w0 = s == 0u ? raw.y : (raw.y >> s) | (raw.z << (32u - s));
    const uint  w1 = s == 0u ? raw.z : (raw.z >> s) | (raw.w << (32u - s));
    float v[8];
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
#if TYPE == T_Q4_0
        v[i]      = d * float(int((w0 >> (8u * i + sh)) & 15u) - 8);
        v[i + 4u] = d * float(int((w1 >> (8u * i + sh)) & 15u) - 8);
#else
        v[i]      = d * float(int(w0 << (24u - 8u * i)) >> 24);
        v[i + 4u] = d * float(int(w1 << (24u - 8u * i)) >> 24);
#endif
    }
    return uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), packHalf2x16(vec2(v[4], v[5])),
                 packHalf2x16(vec2(v[6], v[7])));
#else
    return raw;
#endif
}

// A run of x: eight values from float index xi, k-values kg .. kg + 7 (those >= k as zeros).
// x4 (xi a multiple of 4, a whole run): two raw vec4 that cv_x converts; else converted here
// into .x of the first.
void ld_x(uint xi, uint kg, bool x4, out vec4 a, out vec4 b) {
    if (x4 && kg + 8u <= pc.k) {
        a = xb4[xi / 4u];
        b = xb4[xi / 4u + 1u];
        return;
    }
    float v[8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = kg + i < pc.k ? uintBitsToFloat(xb[xi + i]) : 0.0;
    a = uintBitsToFloat(uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), packHalf2x16(vec2(v[4], v[5])),
                              packHalf2x16(vec2(v[6], v[7]))));
    b = vec4(0.0);
}

uvec4 cv_x(vec4 a, vec4 b, uint kg, bool x4) {
    if (x4 && kg + 8u <= pc.k) return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
    return floatBitsToUint(a);
}

void main() {
    const uint r0  = gl_WorkGroupID.x * BM;
    const uint c0  = gl_WorkGroupID.y * BN;
    const uint i2  = gl_WorkGroupID.z % pc.x2;
    const uint i3  = gl_WorkGroupID.z / pc.x2;
    const uint wm  = pc.w_off + (i2 / pc.bcast2) * pc.w_nb2 + (i3 / pc.bcast3) * pc.w_nb3;
    const uint xm  = pc.x_off + i2 * pc.x_nb2 + i3 * pc.x_nb3;
    const uint tid = gl_LocalInvocationID.x;
    const uint sg  = tid / 32u;  // the host uses this kernel only with subgroups of 32
    const uint ln  = tid % 32u;
    const uint wr  = (sg % 2u) * WTM;  // the subgroup's part of the tile
    const uint wc  = (sg / 2u) * WTN;
    const bool x4  = ((pc.x_off | pc.x_nb1 | pc.x_nb2 | pc.x_nb3) & 3u) == 0u;

    ACC acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; i++) acc[i] = ACC(0.0);

    // Run e of a step: row (or column) e / KR, k-values 8 (e % KR) ..; rows and columns past
    // the edges load nothing and store zeros.
    uvec4 ra[RUNS_A];
    vec4  rxa[RUNS_B], rxb[RUNS_B];
    uint  rrb[RUNS_A];  // the runs' weight rows (byte offsets)
    bool  ina[RUNS_A], inx[RUNS_B];
    uint  xi[RUNS_B];
    [[unroll]] for (uint q = 0u; q < RUNS_A; q++) {
        const uint e = tid + 256u * q, rg = r0 + e / KR;
        ina[q] = rg < pc.n;
        rrb[q] = wm + rg * pc.w_nb1;
    }
    [[unroll]] for (uint q = 0u; q < RUNS_B; q++) {
        const uint e = tid + 256u * q, cg = c0 + e / KR;
        inx[q] = cg < pc.m;
        xi[q]  = xm + cg * pc.x_nb1 + 8u * (e % KR);
    }
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
        // Loads of this step (the first) or issued during the last one; converted, stored.
        if (k0 == 0u) {
            [[unroll]] for (uint q = 0u; q < RUNS_A; q++) {
                const uint kg = 8u * ((tid + 256u * q) % KR);
                if (ina[q] && kg < pc.k) ra[q] = ld_w(rrb[q], kg);
            }
            [[unroll]] for (uint q = 0u; q < RUNS_B; q++) {
                const uint kg = 8u * ((tid + 256u * q) % KR);
                if (inx[q] && kg < pc.k) ld_x(xi[q], kg, x4, rxa[q], rxb[q]);
            }
        }
        [[unroll]] for (uint q = 0u; q < RUNS_A; q++) {
            const uint e = tid + 256u * q, kg = k0 + 8u * (e % KR);
            sa[(e / KR) * SKV + e % KR] = ina[q] && kg < pc.k ? cv_w(ra[q], rrb[q], kg) : uvec4(0u);
        }
        [[unroll]] for (uint q = 0u; q < RUNS_B; q++) {
            const uint e = tid + 256u * q, kg = k0 + 8u * (e % KR);
            sb[(e / KR) * SKV + e % KR] = inx[q] && kg < pc.k ? cv_x(rxa[q], rxb[q], kg, x4) : uvec4(0u);
        }
        barrier();
        const uint k1 = k0 + BK;
        if (k1 < pc.k) {
            [[unroll]] for (uint q = 0u; q < RUNS_A; q++) {
                const uint kg = k1 + 8u * ((tid + 256u * q) % KR);
                if (ina[q] && kg < pc.k) ra[q] = ld_w(rrb[q], kg);
            }
            [[unroll]] for (uint q = 0u; q < RUNS_B; q++) {
                const uint kg = k1 + 8u * ((tid + 256u * q) % KR);
                if (inx[q] && kg < pc.k) ld_x(xi[q] + k1, kg, x4, rxa[q], rxb[q]);
            }
        }
        [[unroll]] for (uint kk = 0u; kk < BK / 8u; kk += 2u) {  // 16 k-values = 2 uvec4
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[FM];
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>  b[FN];
            [[unroll]] for (uint i = 0u; i < FM; i++) coopMatLoadNV(a[i], sa, (wr + 16u * i) * SKV + kk, SKV, false);
            [[unroll]] for (uint j = 0u; j < FN; j++) coopMatLoadNV(b[j], sb, (wc + 8u * j) * SKV + kk, SKV, true);
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                [[unroll]] for (uint j = 0u; j < FN; j++) acc[i * FN + j] = coopMatMulAddNV(a[i], b[j], acc[i * FN + j]);
            }
        }
        barrier();  // the products have read the shared tiles
    }

    // Whole 16 x 8 results (inside the output, 16-byte aligned) straight to the output; those
    // at the edges through shared memory, 16 invocations per column of 16 rows.
    const uint base  = sg * 128u;
    const uint bz    = pc.d_off + i2 * pc.d_nb2 + i3 * pc.d_nb3;
    const bool align = ((bz | pc.d_nb1) & 3u) == 0u;
    [[unroll]] for (uint i = 0u; i < FM; i++) {
        const uint rf = r0 + wr + 16u * i;
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            const uint cf = c0 + wc + 8u * j;
            if (align && rf + 16u <= pc.n && cf + 8u <= pc.m) {
                coopMatStoreNV(acc[i * FN + j], dbf, bz + cf * pc.d_nb1 + rf, pc.d_nb1, true);
                continue;
            }
            coopMatStoreNV(acc[i * FN + j], so, base, 16u, true);
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
            const uint rg = rf + ln % 16u;
            [[unroll]] for (uint t = 0u; t < 4u; t++) {
                const uint cg = cf + 2u * t + ln / 16u;
                if (cg < pc.m && rg < pc.n) db[bz + cg * pc.d_nb1 + rg] = floatBitsToUint(so[base + 32u * t + ln]);
            }
            controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
        }
    }
}
