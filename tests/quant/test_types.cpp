// Property tests of every row of the traits table against float64.
#include <doctest/doctest.h>

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
        default: return -1.0;
    }
}

// Absolute error allowed on top of round_trip_bound * max|x|. F16 values (and F16 block
// scales) below 2^-14 are subnormal: their error is absolute, up to 2^-25 per value, times the
// largest quant level for a scaled block. Q6_K's f16 super-block scale d multiplies int8 scales
// and 6-bit levels, |scale * (q - 32)| <= 128 * 32: when d is subnormal (a block max below
// about 0.25) its 2^-25 rounding error reaches the values 4096-fold, and the levels, recomputed
// against the rounded d, clamp by that much (measured 1.3e-4 abs on the 1e-3 input below).
double round_trip_slack(ember_type t, const ember_type_traits * tr) {
    if (t == EMBER_TYPE_F16) return std::ldexp(1.0, -25);
    if (t == EMBER_TYPE_Q6_K) return 128 * 32 * std::ldexp(1.0, -25);
    return tr->is_quantized ? 128 * std::ldexp(1.0, -25) : 0.0;
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
    CHECK(ember_type_get_traits(3) == nullptr);  // Q4_1: not in this build yet
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
            CHECK(std::fabs(s - ref) <= 1e-5 * mag + 1e-30);
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
