#ifndef EMBER_Q6P_GLSL
#define EMBER_Q6P_GLSL
// The Vulkan backend's planar Q6_K layout (vk-repack.h makes it at upload; the tensor's type
// stays Q6_K and its size is the same). A row is cut into segments of 2048 weights (8
// super-blocks, 1680 bytes: rows start on 16 bytes, so segments do too); a segment holds its
// 8 super-blocks field by field:
//   bytes    0 .. 1023: ql, 128 per super-block, as in the GGUF block;
//   bytes 1024 .. 1535: qh, 64 per super-block, as in the GGUF block;
//   bytes 1536 .. 1663: the 16 int8 scales per super-block, permuted so that the 4 scales of
//                       unit j = 2h + g (half h, 16-weight group g of each 32) are word j:
//                       byte 4j + k = GGUF scale 8h + 2k + g;
//   bytes 1664 .. 1679: the 8 f16 d.
#define Q6P_SEG_W      2048u
#define Q6P_SEG_BYTES  1680u
#define Q6P_SEG_CHUNKS 105u  // 16-byte chunks
#define Q6P_QL_CHUNK(b) (8u * (b))
#define Q6P_QH_CHUNK(b) (64u + 4u * (b))
#define Q6P_SC_WORD(b)  (384u + 4u * (b))
#define Q6P_D_WORD(b)   (416u + ((b) >> 1))

// Byte offsets, from a row's first byte, of the fields of super-block kb of the row.
uint q6p_seg(uint kb) { return (kb >> 3) * Q6P_SEG_BYTES; }
uint q6p_ql(uint kb) { return q6p_seg(kb) + 128u * (kb & 7u); }
uint q6p_qh(uint kb) { return q6p_seg(kb) + 1024u + 64u * (kb & 7u); }
// Scale s (0..15, the GGUF index) of super-block kb.
uint q6p_sc(uint kb, uint s) { return q6p_seg(kb) + 1536u + 16u * (kb & 7u) + 4u * (2u * (s >> 3) + (s & 1u)) + ((s >> 1) & 3u); }
uint q6p_d(uint kb) { return q6p_seg(kb) + 1664u + 2u * (kb & 7u); }
#endif
