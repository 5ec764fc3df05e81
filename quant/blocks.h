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

#endif  // EMBER_QUANT_BLOCKS_H
