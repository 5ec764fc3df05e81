// FP8 block codec of the CUDA kernels (FP8_E4M3 / FP8_E5M2 KV caches: an E8M0 exponent byte,
// then 32 codes), bit-identical to quant/ref/ref-fp8.cpp: the same block exponent, rounding
// (to nearest, ties to even), saturation and NaN codes. Plain integer and float arithmetic, so
// the same functions compile for the host too: tests/backends/test_cuda_ops.cpp checks them
// against the reference encoder without a GPU.
//
// The reference computes frexp / ldexp; here the exponents come from the float bits. Every
// multiplication below is by a power of two and exact (or, for a value scaled into the
// subnormals, rounded once, as ldexp does), so FMA contraction cannot change a result.
#ifndef EMBER_CUDA_FP8_H
#define EMBER_CUDA_FP8_H

#include <stdint.h>

#include <cstring>

#if defined(__CUDACC__)
#define CU_FP8_FN __host__ __device__ __forceinline__
#else
#define CU_FP8_FN inline
#endif

CU_FP8_FN uint32_t cu_fp8_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

CU_FP8_FN float cu_fp8_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

CU_FP8_FN int cu_fp8_clz(uint32_t x) {  // x != 0
#if defined(__CUDA_ARCH__)
    return __clz(static_cast<int>(x));
#else
    return __builtin_clz(x);
#endif
}

// 2^k as a float for k in [-149, 127] (subnormal below -126).
CU_FP8_FN float cu_fp8_pow2(int k) {
    return k >= -126 ? cu_fp8_float(static_cast<uint32_t>(k + 127) << 23) : cu_fp8_float(1u << (k + 149));
}

// The E8M0 scale 2^(e - 127); e = 255 is NaN (e8m0_scale).
CU_FP8_FN float cu_fp8_e8m0_scale(uint32_t e) {
    return e == 255 ? cu_fp8_float(0x7fc00000u) : cu_fp8_pow2(static_cast<int>(e) - 127);
}

// Format constants (fp8_format): mantissa bits, bias, largest finite value and its code. Both
// write NaN as S.1111.111.
template <bool E4M3> struct cu_fp8_fmt {
    static constexpr int      mbits    = E4M3 ? 3 : 2;
    static constexpr int      bias     = E4M3 ? 7 : 15;
    static constexpr uint32_t max_bits = E4M3 ? 0x43e00000u : 0x47600000u;  // 448, 57344 as float bits
    static constexpr uint32_t max_code = E4M3 ? 0x7eu : 0x7bu;
    static constexpr int      max_exp2 = E4M3 ? 9 : 16;  // frexp(max): 0.875 * 2^max_exp2
};

// encode(): the code of sign * a, a = |x| (already scaled), sign 0 or 0x80. a may be +inf (it
// saturates); NaN is handled by the caller from the unscaled value (a GPU multiplication by
// the scale would drop a NaN's sign).
template <bool E4M3> CU_FP8_FN uint32_t cu_fp8_encode_abs(float a, uint32_t sign) {
    using F           = cu_fp8_fmt<E4M3>;
    const uint32_t au = cu_fp8_bits(a);
    if (au >= F::max_bits) return sign | F::max_code;  // !(a < max), infinity included
    if (au == 0) return sign;
    // E = floor(log2 a) for a normal float; the subnormals' -127 is raised to emin anyway.
    int E = static_cast<int>(au >> 23) - 127;
    if (E < 1 - F::bias) E = 1 - F::bias;
    // The significand in ulps of the code's binade: a * 2^(mbits - E) < 2^(mbits + 1), exact.
    // Rounded as ember_ref_nearest_int does (adding 1.5 * 2^23 rounds to an integer, ties to even).
#if defined(__CUDA_ARCH__)
    const float v      = __fmul_rn(a, cu_fp8_pow2(F::mbits - E));
    const float biased = __fadd_rn(v, 12582912.0f);
#else
    const float v      = a * cu_fp8_pow2(F::mbits - E);
    const float biased = v + 12582912.0f;
#endif
    const int q    = static_cast<int>(cu_fp8_bits(biased) & 0x7fffffu) - 0x400000;
    int       code = ((E + F::bias) << F::mbits) + q - (1 << F::mbits);  // a mantissa carry moves into the exponent
    if (code > static_cast<int>(F::max_code)) code = static_cast<int>(F::max_code);
    return sign | static_cast<uint32_t>(code);
}

// block_exponent(): the smallest k with amax <= max * 2^k, as e = k + 127 clamped to [0, 254]; 127
// for a block without a finite nonzero value. amax_bits: the bits of the largest finite |x|.
// With amax = fa * 2^exp2 and max = 0.875 * 2^max_exp2 (fa, 0.875 in [0.5, 1)), k is
// exp2 - max_exp2 when fa <= 0.875, else one more.
template <bool E4M3> CU_FP8_FN uint32_t cu_fp8_block_exponent(uint32_t amax_bits) {
    using F = cu_fp8_fmt<E4M3>;
    if (amax_bits == 0) return 127;
    int      exp2;
    uint32_t m = amax_bits & 0x7fffffu;  // fraction bits of the normalized significand
    if (amax_bits >> 23) {
        exp2 = static_cast<int>(amax_bits >> 23) - 126;
    } else {  // subnormal: value m * 2^-149, top bit p
        const int p = 31 - cu_fp8_clz(m);
        exp2        = p - 148;
        m           = (m << (23 - p)) & 0x7fffffu;
    }
    const int k = exp2 - F::max_exp2 + (m <= 0x600000u ? 0 : 1);  // fa <= 0.875 <=> 1.m <= 1.75
    int       e = k + 127;
    if (e < 0) e = 0;
    if (e > 254) e = 254;
    return static_cast<uint32_t>(e);
}

// from_float_blocks() for one block: 32 floats -> e, qs[32].
template <bool E4M3> CU_FP8_FN void cu_fp8_encode_block(const float * x, uint8_t * e_out, uint8_t * qs) {
    uint32_t amax = 0;  // finite_amax, on the bits (non-negative floats order as integers)
    for (int j = 0; j < 32; j++) {
        const uint32_t a = cu_fp8_bits(x[j]) & 0x7fffffffu;
        if (a < 0x7f800000u && a > amax) amax = a;
    }
    const uint32_t e = cu_fp8_block_exponent<E4M3>(amax);
    *e_out           = static_cast<uint8_t>(e);
    const float s    = cu_fp8_pow2(127 - static_cast<int>(e));  // e <= 254: 2^-127 at the least
    for (int j = 0; j < 32; j++) {
        const uint32_t u    = cu_fp8_bits(x[j]);
        const uint32_t sign = (u >> 24) & 0x80u;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            qs[j] = static_cast<uint8_t>(sign | 0x7fu);  // NaN
            continue;
        }
#if defined(__CUDA_ARCH__)
        const float a = __fmul_rn(cu_fp8_float(u & 0x7fffffffu), s);
#else
        const float a = cu_fp8_float(u & 0x7fffffffu) * s;
#endif
        qs[j] = static_cast<uint8_t>(cu_fp8_encode_abs<E4M3>(a, sign));
    }
}

// Code -> float, exactly (decode() of the reference).
template <bool E4M3> CU_FP8_FN float cu_fp8_decode(uint32_t c) {
    using F            = cu_fp8_fmt<E4M3>;
    const uint32_t s   = (c & 0x80u) << 24;
    const uint32_t mag = c & 0x7fu;
    const int      e   = static_cast<int>(mag >> F::mbits);
    const int      m   = static_cast<int>(mag & ((1u << F::mbits) - 1));
    constexpr int  emax = (1 << (7 - F::mbits)) - 1;
    if (E4M3 && mag == 0x7fu) return cu_fp8_float(s | 0x7fc00000u);
    if (!E4M3 && e == emax) return cu_fp8_float(s | (m == 0 ? 0x7f800000u : 0x7fc00000u));
    if (e == 0) return cu_fp8_float(s | cu_fp8_bits(static_cast<float>(m) * cu_fp8_pow2(1 - F::bias - F::mbits)));
    return cu_fp8_float(s | static_cast<uint32_t>(e - F::bias + 127) << 23 | static_cast<uint32_t>(m) << (23 - F::mbits));
}

// Four FP8 codes (bytes of w) -> two pairs of f16 bits, codes 0/1 in lo and 2/3 in hi (low
// code in the low half), for the decode attention kernel's tile decoder. E5M2 codes are the
// top byte of the half, exactly. E4M3: the half with the code's sign, exponent and mantissa
// bits (bias 15 instead of 7) is value / 256 for every finite code (subnormals included: both
// formats' subnormals scale alike), so the caller multiplies by 256 (exact); the NaN codes
// S.1111.111 become half NaNs here.
template <bool E4M3> CU_FP8_FN void cu_fp8x4_half_bits(uint32_t w, uint32_t & lo, uint32_t & hi) {
    const uint32_t p0 = (w & 0xffu) << 8 | (w & 0xff00u) << 16;   // codes 0, 1 at the top of each half
    const uint32_t p1 = (w >> 8 & 0xff00u) | (w & 0xff000000u);  // codes 2, 3
    if (E4M3) {
        const auto conv = [](uint32_t x) {
            uint32_t h = (x & 0x80008000u) | (x >> 1 & 0x3f803f80u);
            if ((x & 0x7f00u) == 0x7f00u) h |= 0x7e00u;  // NaN: exponent 31, mantissa nonzero
            if ((x & 0x7f000000u) == 0x7f000000u) h |= 0x7e000000u;
            return h;
        };
        lo = conv(p0);
        hi = conv(p1);
    } else {
        lo = p0;
        hi = p1;
    }
}

#undef CU_FP8_FN

#endif  // EMBER_CUDA_FP8_H
