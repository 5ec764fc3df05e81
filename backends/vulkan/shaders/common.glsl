// Shared by every Ember compute shader: type ids (the GGUF ids of quant/types.def), byte
// readers over storage buffers declared as uint[] (no 8/16-bit storage feature needed), and
// the flat workgroup index for dispatches folded into x and y (65535 groups per dimension).
#extension GL_EXT_control_flow_attributes : enable

#define T_F32    0
#define T_F16    1
#define T_Q4_0   2
#define T_Q4_1   3
#define T_Q5_0   6
#define T_Q5_1   7
#define T_Q8_0   8
#define T_Q2_K   10
#define T_Q3_K   11
#define T_Q4_K   12
#define T_Q5_K   13
#define T_Q6_K   14
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_BF16   30
// Ember's own types (docs/quant-types.md).
#define T_INT4         4096
#define T_INT4_G32     4097
#define T_NF4          4098
#define T_FP8_E4M3     4099
#define T_FP8_E5M2     4100
#define T_FP8_E4M3_ROW 4101
#define T_FP8_E5M2_ROW 4102
// Layouts of the Vulkan backend's own (a tensor's type stays the GGUF one; vk-repack.h).
#define T_Q6_KP 8192  // Q6_K, planar segments (q6p.glsl)

// B is a uint[] buffer, b a byte offset (uint).
#define RD_U8(B, b)  ((B[(b) >> 2] >> (((b) & 3u) << 3)) & 0xffu)
#define RD_I8(B, b)  (int(RD_U8(B, b) << 24) >> 24)
#define RD_U16(B, b) ((B[(b) >> 2] >> (((b) & 2u) << 3)) & 0xffffu)  // b even
#define RD_F16(B, b) unpackHalf2x16(RD_U16(B, b)).x                  // b even
#define RD_F32(B, b) uintBitsToFloat(B[(b) >> 2])                    // b multiple of 4
// Any byte offset (rows of NF4 need not start on a word).
#define RD_U32U(B, b) (((b) & 3u) == 0u ? B[(b) >> 2] \
                       : (B[(b) >> 2] >> (((b) & 3u) << 3)) | (B[((b) >> 2) + 1u] << (32u - (((b) & 3u) << 3))))
#define RD_F32U(B, b) uintBitsToFloat(RD_U32U(B, b))

uint flat_group() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}
