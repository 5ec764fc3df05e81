// Scalar reference codecs: the oracle every SIMD and GPU kernel is tested against.
// ember_ref_<op>_<TYPE>: to_float (dequantize), from_float (quantize), vec_dot (this type
// against its vec_dot_type). n is a multiple of the block size. NULL-able names are
// #defined to nullptr so the traits table can name every cell.
#ifndef EMBER_QUANT_REF_H
#define EMBER_QUANT_REF_H

#include <cstdint>

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

void ember_ref_to_float_Q8_0(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q8_0(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q8_0(int64_t n, float * s, const void * x, const void * y);  // y: Q8_0

void ember_ref_to_float_Q6_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q6_K(const float * src, void * dst, int64_t n);
void ember_ref_vec_dot_Q6_K(int64_t n, float * s, const void * x, const void * y);  // y: Q8_K

// Q8_K only carries activations: quantized from floats, never a dot product's left operand.
void ember_ref_to_float_Q8_K(const void * src, float * dst, int64_t n);
void ember_ref_from_float_Q8_K(const float * src, void * dst, int64_t n);
#define ember_ref_vec_dot_Q8_K nullptr

// I32 holds indices and positions: no float conversions.
#define ember_ref_to_float_I32   nullptr
#define ember_ref_from_float_I32 nullptr
#define ember_ref_vec_dot_I32    nullptr

#endif  // EMBER_QUANT_REF_H
