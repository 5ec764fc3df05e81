// The core traits table, expanded from quant/types.def. The type ids themselves are the
// public enum ember_type of include/ember.h (GGUF ids); quant/types.cpp checks that the two
// lists agree. quant/ depends on nothing else in Ember.
#ifndef EMBER_QUANT_TYPES_H
#define EMBER_QUANT_TYPES_H

#include <cstddef>
#include <cstdint>

#include "blocks.h"
#include "ember.h"

// Tables indexed by ember_type have this many cells; ids at or above it are invalid.
constexpr int32_t EMBER_TYPE_COUNT = 40;

// Scalar reference codecs. n is a multiple of the type's block size.
typedef void (*ember_to_float_fn)(const void * src, float * dst, int64_t n);
typedef void (*ember_from_float_fn)(const float * src, void * dst, int64_t n);
// s = dot(x, y) over n elements; x of the row's type, y of its vec_dot_type.
typedef void (*ember_vec_dot_fn)(int64_t n, float * s, const void * x, const void * y);

struct ember_type_traits {
    const char *        name;          // "q4_0"; NULL for an id with no row
    int64_t             block_size;    // elements per block
    size_t              type_size;     // bytes per block
    bool                is_quantized;
    ember_type          vec_dot_type;
    ember_to_float_fn   to_float;      // NULL: no dequantizer (I32)
    ember_from_float_fn from_float;    // NULL: cannot be produced from floats
    ember_vec_dot_fn    vec_dot;       // NULL: no dot product with vec_dot_type
};

// Traits of a type id, or nullptr for an unknown id (safe for any int32_t).
const ember_type_traits * ember_type_get_traits(int32_t type);
bool         ember_type_is_valid(int32_t type);
const char * ember_type_get_name(int32_t type);  // nullptr if unknown
int32_t      ember_type_by_name(const char * name);  // case-insensitive, -1 if unknown

// Bytes of a row of ne0 elements (ne0 a multiple of the block size).
size_t ember_row_size(ember_type type, int64_t ne0);

// Half and bfloat16 conversions (round to nearest even; NaN stays NaN).
float      ember_half_to_float(ember_half h);
ember_half ember_float_to_half(float f);
float      ember_bf16_to_float(ember_bf16 h);
ember_bf16 ember_float_to_bf16(float f);

#endif  // EMBER_QUANT_TYPES_H
