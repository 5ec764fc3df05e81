// Helpers shared by the K-quant reference quantizers (ref-k-quants.cpp, ref-q6_k.cpp).
//
// They follow llama.cpp's reference quantizers in the same float arithmetic: keep every
// expression's operand order, a reordered sum or a fused multiply-add can pick a different scale.
#ifndef EMBER_QUANT_REF_K_COMMON_H
#define EMBER_QUANT_REF_K_COMMON_H

#include <cmath>
#include <cstdint>

#include "quant/ref/ref.h"

// No fused multiply-adds in the helpers below nor in the files that include this header (a
// -march with FMA would otherwise let the compiler fuse the weighted sums of the scale searches
// and change which candidate wins).
#if defined(__clang__)
#    pragma clang fp contract(off)
#elif defined(__GNUC__)
#    pragma GCC optimize("fp-contract=off")
#endif

namespace ember_ref_k {

constexpr float kGroupEps = 1e-15f;  // below this a group counts as all zero

inline int nearest_int(float v) { return ember_ref_nearest_int(v); }
inline int clamp_int(int v, int lo, int hi) { return ember_ref_clamp_int(v, lo, hi); }

// The signed value of largest magnitude among x[0..n) (the first one on ties; 0 when all are 0),
// its magnitude written to amax.
inline float signed_absmax(int n, const float * x, float & amax) {
    float max = 0.0f;
    amax      = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max  = x[i];
        }
    }
    return max;
}

// The signed level of x against iscale, clamped to [-nmax, nmax - 1].
inline int signed_level(float iscale, float x, int nmax) { return clamp_int(nearest_int(iscale * x), -nmax, nmax - 1); }

// Adds level l of weight x to the least-squares sums with weight x^2: sumlx += x^2 x l,
// suml2 += x^2 l^2.
inline void add_x2_weighted(float x, int l, float & sumlx, float & suml2) {
    const float w = x * x;
    sumlx += w * x * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
}

}  // namespace ember_ref_k

#endif  // EMBER_QUANT_REF_K_COMMON_H
