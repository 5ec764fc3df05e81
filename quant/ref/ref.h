// Scalar reference codecs: the oracle every SIMD and GPU kernel is tested against.
// ember_ref_<op>_<TYPE>: to_float (dequantize), from_float (quantize), vec_dot (this type
// against its vec_dot_type). n is a multiple of the block size. NULL-able names are
// #defined to nullptr so the traits table can name every cell.
#ifndef EMBER_QUANT_REF_H
#define EMBER_QUANT_REF_H

#include <cstdint>
#include <cstring>

void ember_ref_to_float_F32(const void * src, float * dst, int64_t n);
void ember_ref_from_float_F32(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_F32(int64_t n, float * s, const void * x, const void * y);

void ember_ref_to_float_F16(const void * src, float * dst, int64_t n);
void ember_ref_from_float_F16(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_F16(int64_t n, float * s, const void * x, const void * y);

void ember_ref_to_float_BF16(const void * src, float * dst, int64_t n);
void ember_ref_from_float_BF16(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_BF16(int64_t n, float * s, const void * x, const void * y);

void ember_ref_to_float_Q4_0(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q4_0(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q4_0(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0

void ember_ref_to_float_Q4_1(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q4_1(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q4_1(int64_t n, float * s, const void * x, const void * y);  // y: Q8_1

void ember_ref_to_float_Q5_0(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q5_0(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q5_0(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0

void ember_ref_to_float_Q5_1(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q5_1(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q5_1(int64_t n, float * s, const void * x, const void * y);  // y: Q8_1

void ember_ref_to_float_Q8_0(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q8_0(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q8_0(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0

// Q8_1 only carries activations, like Q8_K below.
void ember_ref_to_float_Q8_1(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q8_1(const float * src, void * dst, int64_t n);
#define ember_ref_vec_dot_Q8_1 nullptr

void ember_ref_to_float_Q2_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q2_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q2_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

void ember_ref_to_float_Q3_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q3_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q3_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

void ember_ref_to_float_Q4_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q4_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q4_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

void ember_ref_to_float_Q5_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q5_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q5_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

void ember_ref_to_float_Q6_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q6_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q6_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

// Q8_K only carries activations: quantized from floats, never a dot product's left operand.
void ember_ref_to_float_Q8_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q8_K(const float * src, void * dst, int64_t n);
#define ember_ref_vec_dot_Q8_K nullptr

void ember_ref_to_float_IQ4_NL(const void * src, float * dst, int64_t n);
void ember_ref_from_float_IQ4_NL(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_IQ4_NL(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0

void ember_ref_to_float_IQ4_XS(const void * src, float * dst, int64_t n);
void ember_ref_from_float_IQ4_XS(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_IQ4_XS(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

// I32 holds indices and positions: no float conversions.
#define ember_ref_to_float_I32   nullptr
#define ember_ref_from_float_I32 nullptr
#define ember_ref_vec_dot_I32    nullptr

//
// Ember's own types (docs/quant-types.md)
//
void ember_ref_to_float_INT4(const void * src, float * dst, int64_t n);
void ember_ref_from_float_INT4(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_INT4(int64_t n, float * s, const void * x, const void * y);  // y: Q8_1
void ember_ref_quantize_INT4(const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * imp);

void ember_ref_to_float_INT4_G32(const void * src, float * dst, int64_t n);
void ember_ref_from_float_INT4_G32(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_INT4_G32(int64_t n, float * s, const void * x, const void * y);  // y: Q8_1
void ember_ref_quantize_INT4_G32(const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * imp);

// NF4 and the per-row FP8 types have row groups: n is always one whole row.
void ember_ref_to_float_NF4(const void * src, float * dst, int64_t n);
void ember_ref_from_float_NF4(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_NF4(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0
// NF4's tables: the 16-value codebook and the 256-value signed dynamic map of the scales.
float ember_ref_nf4_value(int q);
float ember_ref_nf4_dynamic_value(int q);

void ember_ref_to_float_FP8_E4M3(const void * src, float * dst, int64_t n);
void ember_ref_from_float_FP8_E4M3(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_FP8_E4M3(int64_t n, float * s, const void * x, const void * y);  // y: F32

void ember_ref_to_float_FP8_E5M2(const void * src, float * dst, int64_t n);
void ember_ref_from_float_FP8_E5M2(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_FP8_E5M2(int64_t n, float * s, const void * x, const void * y);  // y: F32

void ember_ref_to_float_FP8_E4M3_ROW(const void * src, float * dst, int64_t n);
void ember_ref_from_float_FP8_E4M3_ROW(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_FP8_E4M3_ROW(int64_t n, float * s, const void * x, const void * y);  // y: F32

void ember_ref_to_float_FP8_E5M2_ROW(const void * src, float * dst, int64_t n);
void ember_ref_from_float_FP8_E5M2_ROW(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_FP8_E5M2_ROW(int64_t n, float * s, const void * x, const void * y);  // y: F32

// Importance-guided quantizers (ember_quantize_fn); nullptr: from_float row by row.
#define ember_ref_quantize_F32    nullptr
#define ember_ref_quantize_F16    nullptr
#define ember_ref_quantize_BF16   nullptr
#define ember_ref_quantize_Q4_0   nullptr
#define ember_ref_quantize_Q4_1   nullptr
#define ember_ref_quantize_Q5_0   nullptr
#define ember_ref_quantize_Q5_1   nullptr
#define ember_ref_quantize_Q8_0   nullptr
#define ember_ref_quantize_Q8_1   nullptr
#define ember_ref_quantize_Q2_K   nullptr
#define ember_ref_quantize_Q3_K   nullptr
#define ember_ref_quantize_Q4_K   nullptr
#define ember_ref_quantize_Q5_K   nullptr
#define ember_ref_quantize_Q6_K   nullptr
#define ember_ref_quantize_Q8_K   nullptr
#define ember_ref_quantize_IQ4_NL nullptr
#define ember_ref_quantize_IQ4_XS nullptr
#define ember_ref_quantize_I32    nullptr
#define ember_ref_quantize_NF4          nullptr
#define ember_ref_quantize_FP8_E4M3     nullptr
#define ember_ref_quantize_FP8_E5M2     nullptr
#define ember_ref_quantize_FP8_E4M3_ROW nullptr
#define ember_ref_quantize_FP8_E5M2_ROW nullptr

// Row groups (ember_type_traits::group_blocks / group_header); 0: none.
#define EMBER_REF_GROUP_BLOCKS_NF4          256
#define EMBER_REF_GROUP_HEADER_NF4          8      // fp32 second-level scale, fp32 offset
#define EMBER_REF_GROUP_BLOCKS_FP8_E4M3_ROW (int64_t(1) << 40)  // one group per row
#define EMBER_REF_GROUP_HEADER_FP8_E4M3_ROW 4      // fp32 scale
#define EMBER_REF_GROUP_BLOCKS_FP8_E5M2_ROW (int64_t(1) << 40)
#define EMBER_REF_GROUP_HEADER_FP8_E5M2_ROW 4
#define EMBER_REF_GROUP_BLOCKS_F32 0
#define EMBER_REF_GROUP_HEADER_F32 0
#define EMBER_REF_GROUP_BLOCKS_F16 0
#define EMBER_REF_GROUP_HEADER_F16 0
#define EMBER_REF_GROUP_BLOCKS_BF16 0
#define EMBER_REF_GROUP_HEADER_BF16 0
#define EMBER_REF_GROUP_BLOCKS_Q4_0 0
#define EMBER_REF_GROUP_HEADER_Q4_0 0
#define EMBER_REF_GROUP_BLOCKS_Q4_1 0
#define EMBER_REF_GROUP_HEADER_Q4_1 0
#define EMBER_REF_GROUP_BLOCKS_Q5_0 0
#define EMBER_REF_GROUP_HEADER_Q5_0 0
#define EMBER_REF_GROUP_BLOCKS_Q5_1 0
#define EMBER_REF_GROUP_HEADER_Q5_1 0
#define EMBER_REF_GROUP_BLOCKS_Q8_0 0
#define EMBER_REF_GROUP_HEADER_Q8_0 0
#define EMBER_REF_GROUP_BLOCKS_Q8_1 0
#define EMBER_REF_GROUP_HEADER_Q8_1 0
#define EMBER_REF_GROUP_BLOCKS_Q2_K 0
#define EMBER_REF_GROUP_HEADER_Q2_K 0
#define EMBER_REF_GROUP_BLOCKS_Q3_K 0
#define EMBER_REF_GROUP_HEADER_Q3_K 0
#define EMBER_REF_GROUP_BLOCKS_Q4_K 0
#define EMBER_REF_GROUP_HEADER_Q4_K 0
#define EMBER_REF_GROUP_BLOCKS_Q5_K 0
#define EMBER_REF_GROUP_HEADER_Q5_K 0
#define EMBER_REF_GROUP_BLOCKS_Q6_K 0
#define EMBER_REF_GROUP_HEADER_Q6_K 0
#define EMBER_REF_GROUP_BLOCKS_Q8_K 0
#define EMBER_REF_GROUP_HEADER_Q8_K 0
#define EMBER_REF_GROUP_BLOCKS_IQ4_NL 0
#define EMBER_REF_GROUP_HEADER_IQ4_NL 0
#define EMBER_REF_GROUP_BLOCKS_IQ4_XS 0
#define EMBER_REF_GROUP_HEADER_IQ4_XS 0
#define EMBER_REF_GROUP_BLOCKS_I32 0
#define EMBER_REF_GROUP_HEADER_I32 0
#define EMBER_REF_GROUP_BLOCKS_INT4 0
#define EMBER_REF_GROUP_HEADER_INT4 0
#define EMBER_REF_GROUP_BLOCKS_INT4_G32 0
#define EMBER_REF_GROUP_HEADER_INT4_G32 0
#define EMBER_REF_GROUP_BLOCKS_FP8_E4M3 0
#define EMBER_REF_GROUP_HEADER_FP8_E4M3 0
#define EMBER_REF_GROUP_BLOCKS_FP8_E5M2 0
#define EMBER_REF_GROUP_HEADER_FP8_E5M2 0

//
// Helpers shared by the reference quantizers
//

// Round to the nearest integer, ties to even, for |v| < 2^22 (llama.cpp's nearest_int; every
// caller stays far inside). Adding 1.5 * 2^23 leaves a float whose ulp is 1, so the addition
// itself rounds and the integer sits in the low mantissa bits. Defined for any input.
inline int ember_ref_nearest_int(float v) {
    const float biased = v + 12582912.0f;
    uint32_t    bits;
    std::memcpy(&bits, &biased, sizeof(bits));
    return static_cast<int>(bits & 0x7fffffu) - 0x400000;
}

inline int ember_ref_clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// The quantizers' searches (the K-quants' scale candidates: Q2_K, Q4_K, Q5_K make_qkx2_quants,
// Q6_K make_qx_quants; INT4 / INT4_G32's candidate scoring) work on 8 values at a time where
// the compiler has vector types and the CPU AVX2 (x86) or NEON; each keeps the scalar loop's
// operations and order, so the bytes are the same. Tests turn them off to compare both ways
// (switch it while nothing is quantizing: a search reads it once per call).
void ember_ref_vector_search(bool on);
bool ember_ref_vector_search_on();

// 8 floats / ints a vector for the quantizers' searches (ref-k-quants.cpp, ref-q6_k.cpp,
// ref-int4.cpp). On x86 the search functions are compiled for AVX2 (16 registers of 8 floats:
// the SSE2 baseline spills their vectors and was no faster than the scalar loop) and taken only
// where the CPU has it; no FMA there either, so every path rounds the same.
#if defined(__GNUC__) || defined(__clang__)
#    define EMBER_REF_SEARCH_VEC 1
#    if defined(__x86_64__) || defined(__i386__)
#        define EMBER_REF_SEARCH_TARGET __attribute__((target("avx2")))
#        define EMBER_REF_SEARCH_CPU_OK() __builtin_cpu_supports("avx2")
#    else
#        define EMBER_REF_SEARCH_TARGET
#        define EMBER_REF_SEARCH_CPU_OK() true
#    endif
typedef float   ember_ref_v8f __attribute__((vector_size(32)));
typedef int32_t ember_ref_v8i __attribute__((vector_size(32)));

// The searches' level of each lane, clamp(nearest_int(v), lo, hi) as a float: v clamped first
// (the same level; NaN -> lo), then rounded by adding and subtracting 1.5 * 2^23
// (ember_ref_nearest_int's rounding, exact below 2^22). For the search functions only (their
// target: inlined into them).
EMBER_REF_SEARCH_TARGET __attribute__((always_inline)) inline ember_ref_v8f ember_ref_v8_level(ember_ref_v8f v, ember_ref_v8f lo,
                                                                                               ember_ref_v8f hi) {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return (v + 12582912.0f) - 12582912.0f;
}
#endif

#endif  // EMBER_QUANT_REF_H
