// Reference codecs of the float types: F32, F16, BF16. Dot products accumulate in double.
#include <cstring>

#include "quant/ref/ref.h"
#include "quant/types.h"

void ember_ref_to_float_F32(const void * src, float * dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void ember_ref_from_float_F32(const float * src, void * dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void ember_ref_vec_dot_F32(int64_t n, float * s, const void * x, const void * y) {
    const float * a   = static_cast<const float *>(x);
    const float * b   = static_cast<const float *>(y);
    double        sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += static_cast<double>(a[i]) * b[i];
    *s = static_cast<float>(sum);
}

void ember_ref_to_float_F16(const void * src, float * dst, int64_t n) {
    const ember_half * h = static_cast<const ember_half *>(src);
    for (int64_t i = 0; i < n; i++) dst[i] = ember_half_to_float(h[i]);
}
void ember_ref_from_float_F16(const float * src, void * dst, int64_t n) {
    ember_half * h = static_cast<ember_half *>(dst);
    for (int64_t i = 0; i < n; i++) h[i] = ember_float_to_half(src[i]);
}
void ember_ref_vec_dot_F16(int64_t n, float * s, const void * x, const void * y) {
    const ember_half * a   = static_cast<const ember_half *>(x);
    const ember_half * b   = static_cast<const ember_half *>(y);
    double             sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += static_cast<double>(ember_half_to_float(a[i])) * ember_half_to_float(b[i]);
    *s = static_cast<float>(sum);
}

void ember_ref_to_float_BF16(const void * src, float * dst, int64_t n) {
    const ember_bf16 * h = static_cast<const ember_bf16 *>(src);
    for (int64_t i = 0; i < n; i++) dst[i] = ember_bf16_to_float(h[i]);
}
void ember_ref_from_float_BF16(const float * src, void * dst, int64_t n) {
    ember_bf16 * h = static_cast<ember_bf16 *>(dst);
    for (int64_t i = 0; i < n; i++) h[i] = ember_float_to_bf16(src[i]);
}
void ember_ref_vec_dot_BF16(int64_t n, float * s, const void * x, const void * y) {
    const ember_bf16 * a   = static_cast<const ember_bf16 *>(x);
    const ember_bf16 * b   = static_cast<const ember_bf16 *>(y);
    double             sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += static_cast<double>(ember_bf16_to_float(a[i])) * ember_bf16_to_float(b[i]);
    *s = static_cast<float>(sum);
}
