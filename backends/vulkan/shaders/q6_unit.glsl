#ifndef EMBER_Q6_UNIT_GLSL
#define EMBER_Q6_UNIT_GLSL
// A 64-weight Q6_K decode unit, as mul_mat_vec_q6s.comp (GGUF layout) and mul_mat_vec_q6p.comp
// (planar layout) take it: half h, 16-weight group g of each 32, of super-block kb; its ql
// words for weights + 0 (lo) and + 32 (hi) and its qh words. The including shader declares
// xq4 / xd (quantize_x.comp's slot: x's 8-bit values, 16 per entry, then (d, d * sum) per
// block of 32) and pc.k (x's length); idot.glsl gives dot4.

// Word w of the 16 levels of group grp (0..3) as 4 bytes 0..63: low nibbles of lo / hi for
// groups 0 / 1, high nibbles for 2 / 3, the top bits from qh (bits 0-1, 2-3, 4-5, 6-7).
// (One return: Debian 12's glslc -O crashed on the early-return form.)
uint q6_unit_levels(uint grp, uint lo, uint hi, uint qh) {
    const uint ql  = (grp & 1u) != 0u ? hi : lo;
    const uint nib = (grp & 2u) != 0u ? ql >> 4 : ql;
    const uint top = grp == 0u ? qh << 4 : grp == 1u ? qh << 2 : grp == 2u ? qh : qh >> 2;
    return (nib & 0x0f0f0f0fu) | (top & 0x30303030u);
}

// The unit's x: its 4 groups of 16 values, each group's block scale, and 32 times each group's
// sum. The 6-bit levels q then go into the byte dot products as they are (0..63) and each
// group is corrected once: sum((q - 32) x) = sum(q x) - 32 sum(x).
void q6_unit_x(uint kb, uint h, uint g, out uvec4 xv[4], out float xs[4], out int x32[4]) {
    const uint xc = 16u * kb + 8u * h + g;         // x's chunk of group 0
    const uint xb = pc.k / 8u + 8u * kb + 4u * h;  // x's (d, d * sum) of group 0
    [[unroll]] for (uint grp = 0u; grp < 4u; grp++) {
        xv[grp]  = xq4[xc + 2u * grp];
        xs[grp]  = xd[xb + grp].x;
        x32[grp] = 32 * (dot4(0x01010101u, xv[grp].x) + dot4(0x01010101u, xv[grp].y) + dot4(0x01010101u, xv[grp].z) +
                         dot4(0x01010101u, xv[grp].w));
    }
}
#endif
