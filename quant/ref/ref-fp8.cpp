// Reference codecs of Ember's FP8 types (docs/quant-types.md): OCP 8-bit floats E4M3 (bias 7,
// max 448, no infinities, S.1111.111 is NaN) and E5M2 (bias 15, max 57344, IEEE-style inf and
// NaN), with either a power-of-two scale per 32 values (FP8_E4M3 / FP8_E5M2: an E8M0 exponent
// byte before 32 codes, as in the OCP microscaling formats) or one fp32 scale per row
// (FP8_E4M3_ROW / FP8_E5M2_ROW: a row-group header).
//
// Encoding rounds to nearest, ties to even, and saturates: anything at or beyond the largest
// finite value (infinities too) becomes +-max; NaN becomes the NaN code of its sign.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/ref/ref.h"
#include "quant/types.h"

namespace {

struct fp8_format {
    int     mbits;     // mantissa bits (3 or 2)
    int     bias;      // exponent bias
    float   max;       // largest finite value
    uint8_t max_code;  // its code, sign clear
    uint8_t nan_code;  // the NaN we write, sign clear
    bool    ieee;      // E5M2: exponent all ones is inf (mantissa 0) or NaN; E4M3: only S.1111.111 is NaN
};

constexpr fp8_format k_e4m3 = {3, 7, 448.0f, 0x7e, 0x7f, false};
constexpr fp8_format k_e5m2 = {2, 15, 57344.0f, 0x7b, 0x7f, true};

// Value of a code, exact in float (every FP8 value is a float).
float decode(const fp8_format & f, uint8_t c) {
    const int e    = (c & 0x7f) >> f.mbits;
    const int m    = c & ((1 << f.mbits) - 1);
    const int emax = (1 << (7 - f.mbits)) - 1;
    float     v;
    if (!f.ieee && e == emax && m == (1 << f.mbits) - 1) {
        v = NAN;
    } else if (f.ieee && e == emax) {
        v = m == 0 ? INFINITY : NAN;
    } else if (e == 0) {
        v = std::ldexp(static_cast<float>(m), 1 - f.bias - f.mbits);  // subnormal
    } else {
        v = std::ldexp(static_cast<float>((1 << f.mbits) + m), e - f.bias - f.mbits);
    }
    return (c & 0x80) ? -v : v;
}

// Nearest code, ties to even, saturating. Scaling by a power of two is exact, so the one
// rounding is that of ember_ref_nearest_int on the significand in units of the code's ulp.
uint8_t encode(const fp8_format & f, float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    if (std::isnan(x)) return sign | f.nan_code;
    const float a = std::fabs(x);
    if (!(a < f.max)) return sign | f.max_code;  // +-inf too
    if (a == 0.0f) return sign;
    int exp2;
    std::frexp(a, &exp2);  // a in [2^(exp2-1), 2^exp2)
    const int emin = 1 - f.bias;
    int       E    = exp2 - 1;
    if (E < emin) E = emin;  // subnormal: the smallest normal binade's ulp
    // Significand in ulps: [2^mbits, 2^(mbits+1)] for normals, [0, 2^mbits] for subnormals;
    // the code is then ((E + bias) << mbits) + q - 2^mbits in both cases, and a carry out of
    // the mantissa moves into the exponent by itself.
    const int q    = ember_ref_nearest_int(std::ldexp(a, f.mbits - E));
    int       code = ((E + f.bias) << f.mbits) + q - (1 << f.mbits);
    if (code > f.max_code) code = f.max_code;
    return static_cast<uint8_t>(sign | code);
}

struct fp8_table {
    float v[256];
    explicit fp8_table(const fp8_format & f) {
        for (int c = 0; c < 256; c++) v[c] = decode(f, static_cast<uint8_t>(c));
    }
};

const float * table_e4m3() {
    static const fp8_table t(k_e4m3);
    return t.v;
}

const float * table_e5m2() {
    static const fp8_table t(k_e5m2);
    return t.v;
}

constexpr int k_block = 32;

// Largest |x| over the finite values (NaN and infinities excluded: they saturate on their own).
float finite_amax(const float * x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float a = std::fabs(x[i]);
        if (a <= FLT_MAX && a > amax) amax = a;
    }
    return amax;
}

// E8M0 exponent e of a block: the smallest power of two 2^k with amax <= max * 2^k, stored as
// e = k + 127 in [0, 254]. All-zero blocks (no finite nonzero value) get e = 127 (scale 1).
uint8_t block_exponent(const fp8_format & f, float amax) {
    if (!(amax > 0.0f)) return 127;
    int exp2;
    std::frexp(amax, &exp2);
    int max_exp2;
    std::frexp(f.max, &max_exp2);
    // amax < 2^exp2 and max >= 2^(max_exp2 - 1): k = exp2 - max_exp2 + 1 always fits, and
    // k = exp2 - max_exp2 - 1 never does; the comparison is exact in double.
    int k = exp2 - max_exp2 - 1;
    while (!(static_cast<double>(amax) <= std::ldexp(static_cast<double>(f.max), k))) k++;
    int e = k + 127;
    if (e < 0) e = 0;      // amax below max * 2^-127: the smallest scale still fits it
    if (e > 254) e = 254;  // unreachable for finite floats (k <= 120); 255 is E8M0's NaN
    return static_cast<uint8_t>(e);
}

// 2^(e - 127); e = 255 is E8M0's NaN.
inline float e8m0_scale(uint8_t e) { return e == 255 ? NAN : std::ldexp(1.0f, e - 127); }

void from_float_blocks(const fp8_format & f, const float * src, void * dst, int64_t n) {
    ember_block_fp8 * b = static_cast<ember_block_fp8 *>(dst);
    for (int64_t i = 0; i < n / k_block; i++) {
        const float * x = src + i * k_block;
        const uint8_t e = block_exponent(f, finite_amax(x, k_block));
        b[i].e          = e;
        for (int j = 0; j < k_block; j++) b[i].qs[j] = encode(f, std::ldexp(x[j], 127 - e));  // exact
    }
}

void to_float_blocks(const float * lut, const void * src, float * dst, int64_t n) {
    const ember_block_fp8 * b = static_cast<const ember_block_fp8 *>(src);
    for (int64_t i = 0; i < n / k_block; i++) {
        const float s = e8m0_scale(b[i].e);
        for (int j = 0; j < k_block; j++) dst[i * k_block + j] = lut[b[i].qs[j]] * s;
    }
}

void vec_dot_blocks(const float * lut, int64_t n, float * s, const void * x, const void * y) {
    const ember_block_fp8 * b   = static_cast<const ember_block_fp8 *>(x);
    const float *           yf  = static_cast<const float *>(y);
    float                   sum = 0.0f;
    for (int64_t i = 0; i < n / k_block; i++) {
        float acc = 0.0f;
        for (int j = 0; j < k_block; j++) acc += lut[b[i].qs[j]] * yf[i * k_block + j];
        sum += acc * e8m0_scale(b[i].e);
    }
    *s = sum;
}

// Per-row types: [fp32 scale][n codes]. scale = amax / max, so the largest finite value lands
// on +-max; an all-zero row stores scale 1, and a scale below FLT_MIN is raised to FLT_MIN
// (the codes then still fit, and dequantizing never multiplies by a subnormal).
void from_float_row(const fp8_format & f, const float * src, void * dst, int64_t n) {
    uint8_t *   p     = static_cast<uint8_t *>(dst);
    const float amax  = finite_amax(src, n);
    float       scale = amax > 0.0f ? amax / f.max : 1.0f;
    if (scale < FLT_MIN) scale = FLT_MIN;
    std::memcpy(p, &scale, sizeof(scale));
    for (int64_t i = 0; i < n; i++) p[4 + i] = encode(f, src[i] / scale);
}

void to_float_row(const float * lut, const void * src, float * dst, int64_t n) {
    const uint8_t * p = static_cast<const uint8_t *>(src);
    float           scale;
    std::memcpy(&scale, p, sizeof(scale));
    for (int64_t i = 0; i < n; i++) dst[i] = lut[p[4 + i]] * scale;
}

void vec_dot_row(const float * lut, int64_t n, float * s, const void * x, const void * y) {
    const uint8_t * p  = static_cast<const uint8_t *>(x);
    const float *   yf = static_cast<const float *>(y);
    float           scale;
    std::memcpy(&scale, p, sizeof(scale));
    float sum = 0.0f;
    for (int64_t i0 = 0; i0 < n; i0 += k_block) {  // partial sums per 32, as the block types
        float acc = 0.0f;
        for (int64_t i = i0; i < i0 + k_block; i++) acc += lut[p[4 + i]] * yf[i];
        sum += acc;
    }
    *s = sum * scale;
}

}  // namespace

float   ember_fp8_e4m3_to_float(uint8_t c) { return table_e4m3()[c]; }
float   ember_fp8_e5m2_to_float(uint8_t c) { return table_e5m2()[c]; }
uint8_t ember_float_to_fp8_e4m3(float x) { return encode(k_e4m3, x); }
uint8_t ember_float_to_fp8_e5m2(float x) { return encode(k_e5m2, x); }

void ember_ref_from_float_FP8_E4M3(const float * src, void * dst, int64_t n) { from_float_blocks(k_e4m3, src, dst, n); }
void ember_ref_to_float_FP8_E4M3(const void * src, float * dst, int64_t n) { to_float_blocks(table_e4m3(), src, dst, n); }
void ember_ref_vec_dot_FP8_E4M3(int64_t n, float * s, const void * x, const void * y) {
    vec_dot_blocks(table_e4m3(), n, s, x, y);
}

void ember_ref_from_float_FP8_E5M2(const float * src, void * dst, int64_t n) { from_float_blocks(k_e5m2, src, dst, n); }
void ember_ref_to_float_FP8_E5M2(const void * src, float * dst, int64_t n) { to_float_blocks(table_e5m2(), src, dst, n); }
void ember_ref_vec_dot_FP8_E5M2(int64_t n, float * s, const void * x, const void * y) {
    vec_dot_blocks(table_e5m2(), n, s, x, y);
}

void ember_ref_from_float_FP8_E4M3_ROW(const float * src, void * dst, int64_t n) { from_float_row(k_e4m3, src, dst, n); }
void ember_ref_to_float_FP8_E4M3_ROW(const void * src, float * dst, int64_t n) { to_float_row(table_e4m3(), src, dst, n); }
void ember_ref_vec_dot_FP8_E4M3_ROW(int64_t n, float * s, const void * x, const void * y) {
    vec_dot_row(table_e4m3(), n, s, x, y);
}

void ember_ref_from_float_FP8_E5M2_ROW(const float * src, void * dst, int64_t n) { from_float_row(k_e5m2, src, dst, n); }
void ember_ref_to_float_FP8_E5M2_ROW(const void * src, float * dst, int64_t n) { to_float_row(table_e5m2(), src, dst, n); }
void ember_ref_vec_dot_FP8_E5M2_ROW(int64_t n, float * s, const void * x, const void * y) {
    vec_dot_row(table_e5m2(), n, s, x, y);
}
