// Property tests of every row of the traits table against float64.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/types.h"

namespace {

// Max |dequant(quant(x)) - x| allowed, relative to max |x| of the block: the quantizer's step.
double round_trip_bound(ember_type t) {
    switch (t) {
        case EMBER_TYPE_F32: return 0.0;
        case EMBER_TYPE_F16: return 1.0 / 2048;   // 11-bit significand, half ulp
        case EMBER_TYPE_BF16: return 1.0 / 256;   // 8-bit significand, half ulp
        case EMBER_TYPE_Q8_0: return 0.5 / 127 + 1e-3;  // half a step, plus the f16 scale's rounding
        case EMBER_TYPE_Q4_0: return 1.0 / 8 + 1e-3;    // one step (asymmetric range: -8..7)
        // Q6_K: half a step of the sub-block with the largest scale, whose step is about
        // amax / 31 (the scale search tries amax / (32 +- 0.9)): measured 1/62 on normal and
        // heavy-tailed data (40000 blocks each). The x^2-weighted search may also clamp a few of
        // the largest values by more than half a step when many sit near the maximum: uniform
        // data reaches 1/38. One full step, 1/32, leaves ~2x over the inputs below. The f16
        // super-block scale adds its own term when subnormal (see round_trip_slack).
        case EMBER_TYPE_Q6_K: return 1.0 / 32;
        // Q8_K: round to nearest against a float32 scale, so half a step exactly (measured
        // 0.5/127 to 7 digits), plus a few float ulps for iscale, x * iscale and d * q.
        case EMBER_TYPE_Q8_K: return 0.5 / 127 + 1e-6;
        // Q8_1: Q8_0's arithmetic (s does not enter the dequantized values), so Q8_0's bound:
        // half a step plus the f16 scale's rounding, 127 d 2^-11 = amax 2^-11 < 1e-3.
        case EMBER_TYPE_Q8_1: return 0.5 / 127 + 1e-3;
        // The bounds below: about 2x the worst measured over 1.28M values each of normal,
        // uniform, heavy-tailed (Cauchy), offset (3 + uniform) and mixed-magnitude data.
        // Q4_1 / Q5_1: levels span [min, max] <= 2 amax in 15 / 31 steps; round to nearest
        // makes half a step, amax / 15 and amax / 31 (measured 1/14.8 and 1/30.3, the excess
        // being the f16 d and m). One full step each.
        case EMBER_TYPE_Q4_1: return 2.0 / 15;
        case EMBER_TYPE_Q5_1: return 2.0 / 31;
        // Q5_0: as Q4_0, -amax maps to level 0, so +amax clamps from 16 to 15: one step,
        // amax / 16 (measured 1/16.0). Two steps.
        case EMBER_TYPE_Q5_0: return 1.0 / 8;
        // Q2_K: 4 levels over a 16-weight sub-block's [min, max], with 4-bit coded scales and
        // mins and a mean-absolute-error fit that clamps outliers: measured 1/2.3 (uniform data),
        // 1/2.6 (normal); 0.85 is 2x the former.
        case EMBER_TYPE_Q2_K: return 0.85;
        // Q3_K: levels -4..3 with the largest magnitude at -4, so the other side clamps by up to
        // a step (amax / 4), and 6-bit coded scales: measured 1/3.7 (uniform), 1/4.6 (normal).
        case EMBER_TYPE_Q3_K: return 0.5;
        // Q4_K / Q5_K: 16 / 32 levels over a 32-weight sub-block's [min, max], 6-bit coded
        // scales and mins: measured 1/8.6 and 1/14.5 (uniform), 1/9.9 and 1/18.6 (normal).
        case EMBER_TYPE_Q4_K: return 1.0 / 4;
        case EMBER_TYPE_Q5_K: return 1.0 / 7;
        // IQ4_NL / IQ4_XS: the grid's widest gaps (89..113, -127..-104) are 24 / 127 of its
        // largest value, and the x^2-weighted fit may clamp the largest x: measured 1/7.3 and 1/7.0
        // (uniform), 1/8.5 and 1/10.0 (normal).
        case EMBER_TYPE_IQ4_NL:
        case EMBER_TYPE_IQ4_XS: return 2.0 / 7;
        default: return -1.0;
    }
}

// Absolute error allowed on top of round_trip_bound * max|x|. F16 values (and F16 block
// scales) below 2^-14 are subnormal: their error is absolute, up to 2^-25 per value, times the
// largest multiplier of an f16 scale in the dequantized value. For the 32-weight quants that
// is a level (<= 127); the K-quants and IQ4_XS multiply their f16 super-block scale by a coded
// sub-block scale and a level: Q6_K |scale * (q - 32)| <= 128 * 32, Q4_K 63 * 15 (+ 63 for
// dmin * m), Q5_K 63 * 31 + 63, IQ4_XS 32 * 127; Q2_K (15 * 3 + 15) and Q3_K (32 * 4) stay
// within 128. When d is subnormal (a block max below about 0.25 for Q6_K) its rounding reaches
// the values that many-fold, and the levels, recomputed against the rounded d, clamp by that
// much (measured: up to 0.98 of these terms on 1e-5 and 1e-7 inputs, 1.3e-4 abs for Q6_K on
// the 1e-3 input below).
double round_trip_slack(ember_type t, const ember_type_traits * tr) {
    const double ulp = std::ldexp(1.0, -25);
    switch (t) {
        case EMBER_TYPE_F16: return ulp;
        case EMBER_TYPE_Q6_K: return 128 * 32 * ulp;
        case EMBER_TYPE_Q4_K: return (63 * 15 + 63) * ulp;
        case EMBER_TYPE_Q5_K: return (63 * 31 + 63) * ulp;
        case EMBER_TYPE_IQ4_XS: return 32 * 127 * ulp;
        default: return tr->is_quantized ? 128 * ulp : 0.0;
    }
}

std::vector<float> make_input(int kind, int64_t n, std::mt19937 & rng) {
    std::vector<float>               x(n);
    std::normal_distribution<float>  normal(0.0f, 1.0f);
    std::cauchy_distribution<float>  heavy(0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
            case 0: x[i] = normal(rng); break;
            case 1: x[i] = 0.0f; break;                     // all zero
            case 2: x[i] = 0.75f; break;                    // constant
            case 3: x[i] = std::fmax(-1e4f, std::fmin(1e4f, heavy(rng))); break;  // heavy tails
            default: x[i] = 1e-3f * normal(rng); break;     // small magnitude
        }
    }
    return x;
}

// Q4_1 / Q5_1 dot products take the min term m_x * s_y from Q8_1's s = half(d * sum(q)),
// computed from the unrounded d, while the dequantized activations are half(d) * q: the two
// differ by up to 2^-10 |s| (two f16 roundings), plus 2^-25 (1 + 32 * 127) when subnormal.
// This allows twice that per block; 0 for other activation types.
double q8_1_sum_slack(const ember_type_traits & tr, const uint8_t * qx, const uint8_t * qy, int64_t n) {
    if (tr.vec_dot_type != EMBER_TYPE_Q8_1) return 0.0;
    double slack = 0.0;
    for (int64_t b = 0; b < n / tr.block_size; b++) {
        ember_half dm[2];  // Q4_1 and Q5_1 blocks both begin with d, m
        std::memcpy(dm, qx + b * tr.type_size, sizeof(dm));
        ember_block_q8_1 y;
        std::memcpy(&y, qy + b * sizeof(y), sizeof(y));
        const double m = std::fabs(ember_half_to_float(dm[1]));
        slack += 2 * m * (std::ldexp(std::fabs(ember_half_to_float(y.s)), -10) + std::ldexp(1.0 + 32 * 127, -25));
    }
    return slack;
}

std::vector<ember_type> float_convertible_types() {
    std::vector<ember_type> types;
    for (int32_t t = 0; t < EMBER_TYPE_COUNT; t++) {
        const ember_type_traits * tr = ember_type_get_traits(t);
        if (tr && tr->to_float && tr->from_float) types.push_back(static_cast<ember_type>(t));
    }
    return types;
}

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[types] the table names the ggml ids and sizes") {
    CHECK(std::string(ember_type_get_name(EMBER_TYPE_Q4_0)) == "q4_0");
    CHECK(ember_type_get_traits(EMBER_TYPE_Q4_0)->type_size == 18);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q8_0)->type_size == 34);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q8_0)->block_size == 32);
    CHECK(ember_type_get_traits(EMBER_TYPE_BF16)->type_size == 2);
    CHECK(ember_type_by_name("Q8_0") == EMBER_TYPE_Q8_0);
    CHECK(ember_type_by_name("bf16") == EMBER_TYPE_BF16);
    CHECK(ember_type_by_name("q9_9") == -1);
    CHECK(ember_type_by_name(nullptr) == -1);
    CHECK(ember_type_get_traits(-1) == nullptr);
    CHECK(ember_type_get_traits(4) == nullptr);  // Q4_2: removed from ggml, never valid
    CHECK(ember_type_get_traits(5) == nullptr);  // Q4_3: likewise
    CHECK(ember_type_get_traits(16) == nullptr);  // IQ2_XXS: not in this build yet
    CHECK(ember_type_get_traits(EMBER_TYPE_COUNT) == nullptr);
    CHECK(ember_type_get_traits(1 << 30) == nullptr);
    CHECK(ember_row_size(EMBER_TYPE_Q4_0, 64) == 36);
    CHECK(ember_row_size(EMBER_TYPE_F16, 7) == 14);
    // K-quants: 256-element super-blocks; Q8_K is an activation type with no vec_dot
    CHECK(std::string(ember_type_get_name(EMBER_TYPE_Q6_K)) == "q6_k");
    CHECK(ember_type_get_traits(EMBER_TYPE_Q6_K)->type_size == 210);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q6_K)->block_size == 256);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q6_K)->vec_dot_type == EMBER_TYPE_Q8_K);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q8_K)->type_size == 292);
    CHECK(ember_type_get_traits(EMBER_TYPE_Q8_K)->block_size == 256);
    CHECK((ember_type_get_traits(EMBER_TYPE_Q8_K)->vec_dot == nullptr));
    CHECK(ember_type_by_name("Q6_K") == EMBER_TYPE_Q6_K);
    CHECK(ember_type_by_name("q8_k") == EMBER_TYPE_Q8_K);
    CHECK(ember_row_size(EMBER_TYPE_Q6_K, 768) == 630);
}

TEST_CASE("[types] the legacy, K- and IQ4 quants have ggml's ids, names, sizes and activation types") {
    struct row {
        ember_type  type;
        int32_t     id;
        const char *name;
        int64_t     block_size;
        size_t      type_size;
        ember_type  vec_dot_type;
        bool        has_vec_dot;
    };
    const row rows[] = {
        {EMBER_TYPE_Q4_1, 3, "q4_1", 32, 20, EMBER_TYPE_Q8_1, true},
        {EMBER_TYPE_Q5_0, 6, "q5_0", 32, 22, EMBER_TYPE_Q8_0, true},
        {EMBER_TYPE_Q5_1, 7, "q5_1", 32, 24, EMBER_TYPE_Q8_1, true},
        {EMBER_TYPE_Q8_1, 9, "q8_1", 32, 36, EMBER_TYPE_Q8_1, false},
        {EMBER_TYPE_Q2_K, 10, "q2_k", 256, 84, EMBER_TYPE_Q8_K, true},
        {EMBER_TYPE_Q3_K, 11, "q3_k", 256, 110, EMBER_TYPE_Q8_K, true},
        {EMBER_TYPE_Q4_K, 12, "q4_k", 256, 144, EMBER_TYPE_Q8_K, true},
        {EMBER_TYPE_Q5_K, 13, "q5_k", 256, 176, EMBER_TYPE_Q8_K, true},
        {EMBER_TYPE_IQ4_NL, 20, "iq4_nl", 32, 18, EMBER_TYPE_Q8_0, true},
        {EMBER_TYPE_IQ4_XS, 23, "iq4_xs", 256, 136, EMBER_TYPE_Q8_K, true},
    };
    for (const row & r : rows) {
        CAPTURE(std::string(r.name));
        CHECK(static_cast<int32_t>(r.type) == r.id);
        const ember_type_traits * tr = ember_type_get_traits(r.id);
        REQUIRE(tr != nullptr);
        CHECK(std::string(tr->name) == r.name);
        CHECK(tr->block_size == r.block_size);
        CHECK(tr->type_size == r.type_size);
        CHECK(tr->is_quantized);
        CHECK(tr->vec_dot_type == r.vec_dot_type);
        CHECK((tr->vec_dot != nullptr) == r.has_vec_dot);
        CHECK((tr->to_float != nullptr));
        CHECK((tr->from_float != nullptr));
        std::string upper = r.name;
        for (char & c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        CHECK(ember_type_by_name(upper.c_str()) == r.id);
    }
    CHECK(ember_row_size(EMBER_TYPE_Q4_K, 512) == 288);
    CHECK(ember_row_size(EMBER_TYPE_IQ4_NL, 64) == 36);
}

TEST_CASE("[types] every vec_dot_type can be produced from floats") {
    for (int32_t t = 0; t < EMBER_TYPE_COUNT; t++) {
        const ember_type_traits * tr = ember_type_get_traits(t);
        if (!tr || !tr->vec_dot) continue;
        CAPTURE(std::string(tr->name));
        const ember_type_traits * vd = ember_type_get_traits(tr->vec_dot_type);
        REQUIRE(vd != nullptr);
        CHECK((vd->from_float != nullptr));
        CHECK(vd->block_size == tr->block_size);
    }
}

TEST_CASE("[f16] every half survives half -> float -> half") {
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ember_half_to_float(static_cast<ember_half>(h));
        if (std::isnan(f)) {
            CHECK(std::isnan(ember_half_to_float(ember_float_to_half(f))));
            continue;
        }
        const ember_half back = ember_float_to_half(f);
        if (back != h) {
            CAPTURE(h);
            CHECK(back == h);
        }
    }
}

TEST_CASE("[f16] rounding to nearest even, overflow and subnormals") {
    CHECK(ember_float_to_half(1.0f) == 0x3c00);
    CHECK(ember_float_to_half(-2.0f) == 0xc000);
    CHECK(ember_float_to_half(65504.0f) == 0x7bff);
    CHECK(ember_float_to_half(65520.0f) == 0x7c00);                 // rounds up to inf
    CHECK(ember_float_to_half(65519.0f) == 0x7bff);
    CHECK(ember_float_to_half(1.0f + 1.0f / 2048) == 0x3c00);      // tie -> even
    CHECK(ember_float_to_half(1.0f + 3.0f / 2048) == 0x3c02);      // tie -> even (up)
    CHECK(ember_float_to_half(std::ldexp(1.0f, -24)) == 0x0001);   // smallest subnormal
    CHECK(ember_float_to_half(std::ldexp(1.0f, -25)) == 0x0000);   // tie -> even (zero)
    CHECK(ember_float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(ember_half_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(std::isinf(ember_half_to_float(0x7c00)));
    // exhaustive against double arithmetic on a sweep of floats
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
    for (int i = 0; i < 100000; i++) {
        const float  f   = i % 2 ? u(rng) : u(rng) * 1e-5f;
        const double h   = ember_half_to_float(ember_float_to_half(f));
        const double err = std::fabs(h - f);
        if (std::fabs(f) < 65504.0f && !(err <= std::fabs(f) / 2048 + std::ldexp(1.0, -25))) {
            CAPTURE(f);
            CHECK(err <= std::fabs(f) / 2048 + std::ldexp(1.0, -25));
        }
    }
}

TEST_CASE("[bf16] conversions round to nearest even") {
    CHECK(ember_float_to_bf16(1.0f) == 0x3f80);
    CHECK(ember_bf16_to_float(0x3f80) == 1.0f);
    CHECK(ember_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);        // tie -> even
    CHECK(ember_float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    CHECK(std::isnan(ember_bf16_to_float(ember_float_to_bf16(NAN))));
}

TEST_CASE("[quant] dequant(quant(x)) stays under the per-type bound") {
    std::mt19937 rng(1234);
    for (ember_type t : float_convertible_types()) {
        const ember_type_traits * tr    = ember_type_get_traits(t);
        const double              bound = round_trip_bound(t);
        const double              slack = round_trip_slack(t, tr);
        REQUIRE_MESSAGE(bound >= 0.0, "every type needs a round-trip bound: ", std::string(tr->name));
        for (int kind = 0; kind < 5; kind++) {
            for (int64_t nblocks : {1, 3, 8}) {
                const int64_t n = nblocks * (tr->block_size == 1 ? 37 : tr->block_size);
                CAPTURE(std::string(tr->name));
                CAPTURE(kind);
                CAPTURE(n);
                std::vector<float>   x = make_input(kind, n, rng);
                std::vector<uint8_t> q(ember_row_size(t, n));
                std::vector<float>   y(n);
                tr->from_float(x.data(), q.data(), n);
                tr->to_float(q.data(), y.data(), n);
                const int64_t bs = tr->block_size == 1 ? n : tr->block_size;
                for (int64_t b0 = 0; b0 < n; b0 += bs) {
                    double amax = 0.0;
                    for (int64_t i = b0; i < b0 + bs; i++) amax = std::fmax(amax, std::fabs(x[i]));
                    for (int64_t i = b0; i < b0 + bs; i++) {
                        const double ref = tr->block_size == 1 ? std::fabs(x[i]) : amax;
                        const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
                        if (!(err <= bound * ref + slack)) {
                            CAPTURE(i);
                            CHECK(err <= bound * ref + slack);
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("[quant] vec_dot matches float64 over the dequantized operands") {
    std::mt19937 rng(99);
    for (int32_t t = 0; t < EMBER_TYPE_COUNT; t++) {
        const ember_type_traits * tr = ember_type_get_traits(t);
        if (!tr || !tr->vec_dot) continue;
        const ember_type_traits * vd = ember_type_get_traits(tr->vec_dot_type);
        for (int kind = 0; kind < 5; kind++) {
            const int64_t n = tr->block_size == 1 ? 333 : 8 * tr->block_size;
            CAPTURE(std::string(tr->name));
            CAPTURE(kind);
            std::vector<float>   x = make_input(kind, n, rng), y = make_input(0, n, rng);
            std::vector<uint8_t> qx(ember_row_size(static_cast<ember_type>(t), n)), qy(ember_row_size(tr->vec_dot_type, n));
            tr->from_float(x.data(), qx.data(), n);
            vd->from_float(y.data(), qy.data(), n);
            std::vector<float> dx(n), dy(n);
            tr->to_float(qx.data(), dx.data(), n);
            vd->to_float(qy.data(), dy.data(), n);
            double ref = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++) {
                ref += static_cast<double>(dx[i]) * dy[i];
                mag += std::fabs(static_cast<double>(dx[i]) * dy[i]);
            }
            float s = 0.0f;
            tr->vec_dot(n, &s, qx.data(), qy.data());
            CHECK(std::fabs(s - ref) <= 1e-5 * mag + q8_1_sum_slack(*tr, qx.data(), qy.data(), n) + 1e-30);
            // and the error against the unquantized float64 dot is what quantization predicts
            double exact = 0.0;
            for (int64_t i = 0; i < n; i++) exact += static_cast<double>(x[i]) * y[i];
            if (kind == 0) CHECK(std::fabs(s - exact) <= 0.15 * mag + 1e-30);
        }
    }
}

TEST_CASE("[q4_0] block layout: low nibbles hold the first half, high nibbles the second") {
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = static_cast<float>(i - 16);  // max |x| = 16 at i = 0, x = -16
    ember_block_q4_0 b;
    ember_type_get_traits(EMBER_TYPE_Q4_0)->from_float(x, &b, 32);
    CHECK(ember_half_to_float(b.d) == 2.0f);  // -16 / -8
    CHECK((b.qs[0] & 0x0f) == 0);             // -16 / 2 + 8
    CHECK((b.qs[0] >> 4) == 8);               // x[16] = 0
    CHECK((b.qs[15] >> 4) == 15);             // x[31] = 15 -> 7.5 + 8.5 = 16 -> clamped to 15
}

}  // TEST_SUITE
