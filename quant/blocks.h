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

// Q8_0: 32 weights, x = d * q, q in [-127, 127].
#define EMBER_QK8_0 32
typedef struct {
    ember_half d;
    int8_t     qs[EMBER_QK8_0];
} ember_block_q8_0;
EMBER_STATIC_ASSERT(sizeof(ember_block_q8_0) == sizeof(ember_half) + EMBER_QK8_0, "wrong q8_0 block size/padding");

// K-quants: super-blocks of EMBER_QK_K weights.
#define EMBER_QK_K 256

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

#endif  // EMBER_QUANT_BLOCKS_H
