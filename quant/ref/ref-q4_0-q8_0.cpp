// Reference codecs of the 32-element legacy quants Q4_0 and Q8_0 (ggml layouts and rounding).
#include <cmath>

#include "quant/ref/ref.h"
#include "quant/types.h"

void ember_ref_to_float_Q8_0(const void * src, float * dst, int64_t n) {
    const ember_block_q8_0 * b = static_cast<const ember_block_q8_0 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const float d = ember_half_to_float(b[i].d);
        for (int j = 0; j < EMBER_QK8_0; j++) dst[i * EMBER_QK8_0 + j] = d * b[i].qs[j];
    }
}

// d = max|x| / 127, q = round(x / d).
void ember_ref_from_float_Q8_0(const float * src, void * dst, int64_t n) {
    ember_block_q8_0 * b = static_cast<ember_block_q8_0 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        const float * x    = src + i * EMBER_QK8_0;
        float         amax = 0.0f;
        for (int j = 0; j < EMBER_QK8_0; j++) amax = std::fmax(amax, std::fabs(x[j]));
        const float d  = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        for (int j = 0; j < EMBER_QK8_0; j++) b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    }
}

void ember_ref_vec_dot_Q8_0(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q8_0 * a   = static_cast<const ember_block_q8_0 *>(x);
    const ember_block_q8_0 * b   = static_cast<const ember_block_q8_0 *>(y);
    float                    sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < EMBER_QK8_0; j++) sumi += a[i].qs[j] * b[i].qs[j];
        sum += static_cast<float>(sumi) * (ember_half_to_float(a[i].d) * ember_half_to_float(b[i].d));
    }
    *s = sum;
}

void ember_ref_to_float_Q4_0(const void * src, float * dst, int64_t n) {
    const ember_block_q4_0 * b = static_cast<const ember_block_q4_0 *>(src);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const float d = ember_half_to_float(b[i].d);
        float *     y = dst + i * EMBER_QK4_0;
        for (int j = 0; j < EMBER_QK4_0 / 2; j++) {
            y[j]                   = d * ((b[i].qs[j] & 0x0f) - 8);
            y[j + EMBER_QK4_0 / 2] = d * ((b[i].qs[j] >> 4) - 8);
        }
    }
}

// d = (signed value of largest magnitude) / -8, so that value maps to q = 0 exactly;
// q = clamp(trunc(x / d + 8.5), 0, 15).
void ember_ref_from_float_Q4_0(const float * src, void * dst, int64_t n) {
    ember_block_q4_0 * b = static_cast<ember_block_q4_0 *>(dst);
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        const float * x    = src + i * EMBER_QK4_0;
        float         amax = 0.0f;
        float         max  = 0.0f;
        for (int j = 0; j < EMBER_QK4_0; j++) {
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max  = x[j];
            }
        }
        const float d  = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d         = ember_float_to_half(d);
        for (int j = 0; j < EMBER_QK4_0 / 2; j++) {
            const float   x0 = x[j] * id;
            const float   x1 = x[j + EMBER_QK4_0 / 2] * id;
            const uint8_t q0 = static_cast<uint8_t>(std::fmin(15.0f, x0 + 8.5f));
            const uint8_t q1 = static_cast<uint8_t>(std::fmin(15.0f, x1 + 8.5f));
            b[i].qs[j]       = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void ember_ref_vec_dot_Q4_0(int64_t n, float * s, const void * x, const void * y) {
    const ember_block_q4_0 * a   = static_cast<const ember_block_q4_0 *>(x);
    const ember_block_q8_0 * b   = static_cast<const ember_block_q8_0 *>(y);
    float                    sum = 0.0f;
    for (int64_t i = 0; i < n / EMBER_QK4_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < EMBER_QK4_0 / 2; j++) {
            sumi += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
            sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + EMBER_QK4_0 / 2];
        }
        sum += static_cast<float>(sumi) * (ember_half_to_float(a[i].d) * ember_half_to_float(b[i].d));
    }
    *s = sum;
}
