// dot4(a, b): the dot product of two words as 4 signed bytes each (x's 8-bit blocks against
// quantized weights). QX_DOT: one SPV_KHR_integer_dot_product instruction (OpSDot, packed
// 4 x 8 bits; the host uses these shaders only on devices with that feature; Debian 12's
// glslc has no GL_EXT_integer_dot_product, so through GL_EXT_spirv_intrinsics), else unpacked
// and multiplied.
#ifndef QX_DOT
#define QX_DOT 0
#endif
#if QX_DOT
#extension GL_EXT_spirv_intrinsics : require
// OpSDotKHR (4450) of two 32-bit words as 4 x int8 (PackedVectorFormat4x8Bit = 0);
// capabilities DotProductKHR (6019), DotProductInput4x8BitPackedKHR (6018).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(int a, int b, spirv_literal int fmt);
int dot4(uint a, uint b) { return sdot4(int(a), int(b), 0); }
#else
int dot4(uint a, uint b) {
    const ivec4 va = ivec4(bitfieldExtract(int(a), 0, 8), bitfieldExtract(int(a), 8, 8), bitfieldExtract(int(a), 16, 8),
                           bitfieldExtract(int(a), 24, 8));
    const ivec4 vb = ivec4(bitfieldExtract(int(b), 0, 8), bitfieldExtract(int(b), 8, 8), bitfieldExtract(int(b), 16, 8),
                           bitfieldExtract(int(b), 24, 8));
    return (va.x * vb.x + va.y * vb.y) + (va.z * vb.z + va.w * vb.w);
}
#endif
