// Block layouts of the quantized tensor types, bit-compatible with GGUF files written by
// llama.cpp. Valid C, C++ and CUDA: no C++ features, fixed-width fields, size checks.
#ifndef EMBER_QUANT_BLOCKS_H
#define EMBER_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#    define EMBER_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#    define EMBER_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

typedef uint16_t ember_half;  // IEEE 754 binary16 bits
typedef uint16_t ember_bf16;  // bfloat16 bits (upper half of a binary32)

// Q4_0: 32 weights, x = d * (q - 8), q in [0, 15]. Byte j holds weight j (low nibble)
// and weight j + 16 (high nibble).
#define EMBER_QK4_0 32
typedef struct {
    ember_half d;
    uint8_t    qs[EMBER_QK4_0 / 2];
} ember_block_q4_0;
EMBER_STATIC_ASSERT(sizeof(ember_block_q4_0) == sizeof(ember_half) + EMBER_QK4_0 / 2, "wrong q4_0 block size/padding");

// Q4_1: 32 weights, x = d * q + m, q in [0, 15]; m is the block minimum. Byte j holds
// weight j (low nibble) and weight j + 16 (high nibble).
#define EMBER_QK4_1 32
typedef struct {
    ember_half d;
    ember_half m;
    uint8_t    qs[EMBER_QK4_1 / 2];
} ember_block_q4_1;
EMBER_STATIC_ASSERT(sizeof(ember_block_q4_1) == 2 * sizeof(ember_half) + EMBER_QK4_1 / 2, "wrong q4_1 block size/padding");

// Q5_0: 32 weights, x = d * (q - 16), q in [0, 31]. The low 4 bits are packed as in Q4_0
// (byte j: weight j low nibble, weight j + 16 high nibble); bit i of qh (a little-endian
// uint32) is bit 4 of weight i.
#define EMBER_QK5_0 32
typedef struct {
    ember_half d;
    uint8_t    qh[4];
    uint8_t    qs[EMBER_QK5_0 / 2];
} ember_block_q5_0;
EMBER_STATIC_ASSERT(sizeof(ember_block_q5_0) == sizeof(ember_half) + 4 + EMBER_QK5_0 / 2, "wrong q5_0 block size/padding");

// Q5_1: 32 weights, x = d * q + m, q in [0, 31]; bits packed as in Q5_0.
#define EMBER_QK5_1 32
typedef struct {
    ember_half d;
    ember_half m;
    uint8_t    qh[4];
    uint8_t    qs[EMBER_QK5_1 / 2];
} ember_block_q5_1;
EMBER_STATIC_ASSERT(sizeof(ember_block_q5_1) == 2 * sizeof(ember_half) + 4 + EMBER_QK5_1 / 2, "wrong q5_1 block size/padding");

// Q8_0: 32 weights, x = d * q, q in [-127, 127].
#define EMBER_QK8_0 32
typedef struct {
    ember_half d;
    int8_t     qs[EMBER_QK8_0];
} ember_block_q8_0;
EMBER_STATIC_ASSERT(sizeof(ember_block_q8_0) == sizeof(ember_half) + EMBER_QK8_0, "wrong q8_0 block size/padding");

// Q8_1: activations of Q4_1 / Q5_1 dot products. x = d * q, q in [-127, 127]; s = d * sum(q),
// computed from the unrounded float d and then rounded to f16 (so s is not exactly
// half(d) * sum(q)): the dot product takes the min term m_x * s from it.
#define EMBER_QK8_1 32
typedef struct {
    ember_half d;
    ember_half s;
    int8_t     qs[EMBER_QK8_1];
} ember_block_q8_1;
EMBER_STATIC_ASSERT(sizeof(ember_block_q8_1) == 2 * sizeof(ember_half) + EMBER_QK8_1, "wrong q8_1 block size/padding");

// IQ4_NL: 32 weights, x = d * EMBER_IQ4NL_VALUES[q], q in [0, 15] (a non-linear 4-bit grid),
// nibbles packed as in Q4_0.
#define EMBER_QK4_NL 32
typedef struct {
    ember_half d;
    uint8_t    qs[EMBER_QK4_NL / 2];
} ember_block_iq4_nl;
EMBER_STATIC_ASSERT(sizeof(ember_block_iq4_nl) == sizeof(ember_half) + EMBER_QK4_NL / 2, "wrong iq4_nl block size/padding");

// The IQ4_NL / IQ4_XS grid (ggml's kvalues_iq4nl), as an initializer for an int8_t[16].
#define EMBER_IQ4NL_VALUES {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// K-quants: super-blocks of EMBER_QK_K weights.
#define EMBER_QK_K 256
// Bytes of the packed 6-bit scales and mins of Q4_K / Q5_K.
#define EMBER_K_SCALE_SIZE 12

// Q2_K: 16 sub-blocks of 16 weights, x = d * (scales[j] & 0xf) * q - dmin * (scales[j] >> 4),
// q in [0, 3], j = i / 16. Within each half of 128 weights (qs += 32 per half), weight
// l + 32 k (l in [0, 32), k in [0, 4)) is bits 2k..2k+1 of qs[l].
typedef struct {
    uint8_t    scales[EMBER_QK_K / 16];  // low nibble: scale, high nibble: min
    uint8_t    qs[EMBER_QK_K / 4];
    ember_half d;                        // super-block scale of the scales
    ember_half dmin;                     // super-block scale of the mins
} ember_block_q2_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q2_k) == EMBER_QK_K / 16 + EMBER_QK_K / 4 + 2 * sizeof(ember_half),
                    "wrong q2_k block size/padding");

// Q3_K: 16 sub-blocks of 16 weights, x = d * (s_j - 32) * (q - 4), q in [0, 7], s_j a 6-bit
// scale. The low 2 bits of q are packed as in Q2_K; the high bit of weight i is bit i / 32 of
// hmask[i % 32]. s_j: low 4 bits in scales[j] (j < 8, low nibble) or scales[j - 8] (high
// nibble), high 2 bits at bits 2 (j / 4)..2 (j / 4) + 1 of scales[8 + j % 4].
typedef struct {
    uint8_t    hmask[EMBER_QK_K / 8];
    uint8_t    qs[EMBER_QK_K / 4];
    uint8_t    scales[12];
    ember_half d;
} ember_block_q3_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q3_k) == EMBER_QK_K / 8 + EMBER_QK_K / 4 + 12 + sizeof(ember_half),
                    "wrong q3_k block size/padding");

// Q4_K: 8 sub-blocks of 32 weights, x = d * sc_j * q - dmin * m_j, q in [0, 15], sc_j and
// m_j 6-bit. For j < 4: sc_j = scales[j] & 63, m_j = scales[j + 4] & 63; for j >= 4: sc_j =
// (scales[j + 4] & 0xf) | (scales[j - 4] >> 6) << 4, m_j = (scales[j + 4] >> 4) |
// (scales[j] >> 6) << 4. Each 64 weights share 32 bytes of qs: the first 32 in the low
// nibbles, the next 32 in the high nibbles.
typedef struct {
    ember_half d;
    ember_half dmin;
    uint8_t    scales[EMBER_K_SCALE_SIZE];
    uint8_t    qs[EMBER_QK_K / 2];
} ember_block_q4_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q4_k) == 2 * sizeof(ember_half) + EMBER_K_SCALE_SIZE + EMBER_QK_K / 2,
                    "wrong q4_k block size/padding");

// Q5_K: Q4_K with q in [0, 31]: the low 4 bits packed as in Q4_K, and bit 4 of weight i is
// bit i / 32 of qh[i % 32].
typedef struct {
    ember_half d;
    ember_half dmin;
    uint8_t    scales[EMBER_K_SCALE_SIZE];
    uint8_t    qh[EMBER_QK_K / 8];
    uint8_t    qs[EMBER_QK_K / 2];
} ember_block_q5_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q5_k) ==
                        2 * sizeof(ember_half) + EMBER_K_SCALE_SIZE + EMBER_QK_K / 8 + EMBER_QK_K / 2,
                    "wrong q5_k block size/padding");

// Q6_K: 16 sub-blocks of 16 weights, x = d * scales[j] * (q - 32) for weight i of sub-block
// j = i / 16, q in [0, 63]. Within each half of 128 weights (ql += 64, qh += 32 per half),
// for l in [0, 32): weight l is ql[l] & 0xf, weight l + 32 is ql[l + 32] & 0xf, weight l + 64
// is ql[l] >> 4, weight l + 96 is ql[l + 32] >> 4 (the low 4 bits), and bits 2k..2k+1 of
// qh[l] are the high 2 bits of weight l + 32k.
typedef struct {
    uint8_t    ql[EMBER_QK_K / 2];   // low 4 bits of the quants
    uint8_t    qh[EMBER_QK_K / 4];   // high 2 bits of the quants
    int8_t     scales[EMBER_QK_K / 16];
    ember_half d;                    // super-block scale
} ember_block_q6_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q6_k) == EMBER_QK_K / 2 + EMBER_QK_K / 4 + EMBER_QK_K / 16 + sizeof(ember_half),
                    "wrong q6_k block size/padding");

// Q8_K: activations of K-quant dot products. x = d * q, q in [-127, 127]; d is a float32 and
// may be negative. bsums[j] = sum of qs[16 j .. 16 j + 15].
typedef struct {
    float   d;
    int8_t  qs[EMBER_QK_K];
    int16_t bsums[EMBER_QK_K / 16];
} ember_block_q8_k;
EMBER_STATIC_ASSERT(sizeof(ember_block_q8_k) == sizeof(float) + EMBER_QK_K + EMBER_QK_K / 16 * sizeof(int16_t),
                    "wrong q8_k block size/padding");

// IQ4_XS: 8 sub-blocks of 32 weights, x = d * (ls_j - 32) * EMBER_IQ4NL_VALUES[q], ls_j a
// 6-bit scale: low 4 bits in scales_l[j / 2] (nibble j % 2), high 2 bits at bits 2j..2j+1 of
// scales_h. Each sub-block's 16 bytes of qs are packed as in IQ4_NL.
typedef struct {
    ember_half d;
    uint16_t   scales_h;
    uint8_t    scales_l[EMBER_QK_K / 64];
    uint8_t    qs[EMBER_QK_K / 2];
} ember_block_iq4_xs;
EMBER_STATIC_ASSERT(sizeof(ember_block_iq4_xs) == sizeof(ember_half) + sizeof(uint16_t) + EMBER_QK_K / 64 + EMBER_QK_K / 2,
                    "wrong iq4_xs block size/padding");

//
// Ember's own types (docs/quant-types.md has the exact layouts and the arithmetic)
//
// INT4: w = d * (q - z), q in 0..15; per group of 128 (INT4) or 32 (INT4_G32) weights.
// In each 32-weight run j of the group, qs[16*j + i] holds weight 32*j + i in its low
// nibble and weight 32*j + 16 + i in its high nibble (Q4_0's order, run by run).
typedef struct {
    ember_half d;       // scale
    ember_half z;       // zero-point, in units of q (integer-valued after AWQ-style search)
    uint8_t    qs[64];
} ember_block_int4;
EMBER_STATIC_ASSERT(sizeof(ember_block_int4) == 4 + 64, "wrong int4 block size/padding");

typedef struct {
    ember_half d;
    ember_half z;
    uint8_t    qs[16];
} ember_block_int4_g32;
EMBER_STATIC_ASSERT(sizeof(ember_block_int4_g32) == 4 + 16, "wrong int4_g32 block size/padding");

// NF4: 64 weights; w = NF4[q] * absmax, absmax double-quantized to 8 bits (absmax_q) with
// a second-level fp32 scale and fp32 offset in the row-group header (one per 256 blocks).
// qs[i] holds weight i in its low nibble and weight 32 + i in its high nibble.
typedef struct {
    uint8_t absmax_q;
    uint8_t qs[32];
} ember_block_nf4;
EMBER_STATIC_ASSERT(sizeof(ember_block_nf4) == 33, "wrong nf4 block size/padding");

// FP8 with a block scale: 32 FP8 codes (E4M3 or E5M2) and one power-of-two scale
// 2^(e - 127) (an E8M0 exponent, as in the OCP microscaling formats).
typedef struct {
    uint8_t e;
    uint8_t qs[32];
} ember_block_fp8;
EMBER_STATIC_ASSERT(sizeof(ember_block_fp8) == 33, "wrong fp8 block size/padding");

#endif  // EMBER_QUANT_BLOCKS_H
