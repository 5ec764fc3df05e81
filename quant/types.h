// The core traits table, expanded from quant/types.def. The type ids themselves are the
// public enum ember_type of include/ember.h (GGUF ids); quant/types.cpp checks that the two
// lists agree. quant/ depends on nothing else in Ember.
#ifndef EMBER_QUANT_TYPES_H
#define EMBER_QUANT_TYPES_H

#include <cstddef>
#include <cstdint>

#include "blocks.h"
#include "ember.h"

// Type ids are sparse: ggml's ids 0..EMBER_TYPE_COUNT-1 and Ember's own ids from
// EMBER_TYPE_EMBER_FIRST (include/ember.h). Tables indexed by type use a dense cell index:
// ember_type_cell(id) in [0, EMBER_TYPE_CELLS), or -1 for an id that has no cell.
constexpr int32_t EMBER_TYPE_COUNT       = 40;    // ggml ids: [0, 40)
constexpr int32_t EMBER_TYPE_EMBER_FIRST = 4096;  // Ember ids: [4096, 4096 + 16)
constexpr int32_t EMBER_TYPE_EMBER_COUNT = 16;
constexpr int32_t EMBER_TYPE_CELLS       = EMBER_TYPE_COUNT + EMBER_TYPE_EMBER_COUNT;

constexpr int32_t ember_type_cell(int32_t type) {
    return type >= 0 && type < EMBER_TYPE_COUNT ? type
         : type >= EMBER_TYPE_EMBER_FIRST && type < EMBER_TYPE_EMBER_FIRST + EMBER_TYPE_EMBER_COUNT
             ? EMBER_TYPE_COUNT + (type - EMBER_TYPE_EMBER_FIRST)
             : -1;
}
constexpr int32_t ember_type_of_cell(int32_t cell) {
    return cell < EMBER_TYPE_COUNT ? cell : EMBER_TYPE_EMBER_FIRST + (cell - EMBER_TYPE_COUNT);
}

// Scalar reference codecs. n is a multiple of the type's block size.
typedef void (*ember_to_float_fn)(const void * src, float * dst, int64_t n);
typedef void (*ember_from_float_fn)(const float * src, void * dst, int64_t n);
// s = dot(x, y) over n elements; x of the row's type, y of its vec_dot_type.
typedef void (*ember_vec_dot_fn)(int64_t n, float * s, const void * x, const void * y);
// Quantizes nrows rows of n_per_row floats (rows contiguous in src and in dst, each row
// ember_row_size bytes), guided by an importance vector of n_per_row weights (mean squared
// activation per input column, as llama.cpp's imatrix), or nullptr for none. Types without
// one quantize row by row with from_float.
typedef void (*ember_quantize_fn)(const float * src, void * dst, int64_t nrows, int64_t n_per_row,
                                  const float * importance);

struct ember_type_traits {
    const char *        name;          // "q4_0"; NULL for an id with no row
    int64_t             block_size;    // elements per block
    size_t              type_size;     // bytes per block
    bool                is_quantized;
    ember_type          vec_dot_type;
    ember_to_float_fn   to_float;      // NULL: no dequantizer (I32)
    ember_from_float_fn from_float;    // NULL: cannot be produced from floats
    ember_vec_dot_fn    vec_dot;       // NULL: no dot product with vec_dot_type
    ember_quantize_fn   quantize;      // NULL: from_float row by row; importance is ignored
    // Row groups. Most types have none (group_blocks == 0): a row is ne0/block_size blocks.
    // A type with group_blocks > 0 puts a header of group_header bytes before every group of
    // up to group_blocks blocks in each row (NF4: second-level scales per 256 blocks; the
    // per-row FP8 types: one fp32 scale per row). Codecs of such types take whole rows
    // (n = ne0 of one row), and ember_row_size() counts the headers.
    int64_t             group_blocks;
    size_t              group_header;
};

// Traits of a type id, or nullptr for an unknown id (safe for any int32_t).
const ember_type_traits * ember_type_get_traits(int32_t type);
bool         ember_type_is_valid(int32_t type);
const char * ember_type_get_name(int32_t type);  // nullptr if unknown
int32_t      ember_type_by_name(const char * name);  // case-insensitive, -1 if unknown

// Bytes of a row of ne0 elements (ne0 a multiple of the block size), headers included.
size_t ember_row_size(ember_type type, int64_t ne0);
// True for the types whose codecs must be called one whole row at a time (group headers).
bool   ember_type_has_row_groups(int32_t type);
// ember_row_size for sizes that come from files: false for an unknown type, ne0 < 0, ne0 not
// a whole number of blocks, or a size that overflows uint64_t.
bool   ember_row_size_checked(int32_t type, int64_t ne0, uint64_t * bytes);

// Half and bfloat16 conversions (round to nearest even; NaN stays NaN).
float      ember_half_to_float(ember_half h);
ember_half ember_float_to_half(float f);
float      ember_bf16_to_float(ember_bf16 h);
ember_bf16 ember_float_to_bf16(float f);

// OCP FP8 conversions (quant/ref/ref-fp8.cpp). E4M3: bias 7, max 448, no infinities,
// S.1111.111 is NaN; E5M2: bias 15, max 57344, IEEE inf and NaN. Encoding rounds to nearest
// even and saturates (+-inf and anything beyond max become +-max); NaN stays NaN.
float   ember_fp8_e4m3_to_float(uint8_t c);
float   ember_fp8_e5m2_to_float(uint8_t c);
uint8_t ember_float_to_fp8_e4m3(float x);
uint8_t ember_float_to_fp8_e5m2(float x);

#endif  // EMBER_QUANT_TYPES_H
