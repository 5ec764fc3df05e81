// The 32-weight legacy quants Q4_1, Q5_0, Q5_1 and the activation type Q8_1: hand-built known
// answers, quantizer conventions, dot products against float64, and the bytes of llama.cpp's
// own files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "quant/types.h"
#include "runtime/gguf.h"
#include "support/data-path.h"

#include "fixture-requant.h"

namespace {

const ember_type_traits & traits(ember_type t) { return *ember_type_get_traits(t); }

std::vector<float> dequant(ember_type t, const void * q, int64_t n) {
    std::vector<float> y(n);
    traits(t).to_float(q, y.data(), n);
    return y;
}

// Level j (0..31) of a Q5 block, read from the layout as ggml documents it, independently of
// the library: the low nibble of qs[j % 16] (low for j < 16, high otherwise), and bit j of the
// little-endian uint32 qh as bit 4.
int q5_level(const uint8_t * qs, const uint8_t * qh, int j) {
    const int lo = qs[j % 16] >> (j < 16 ? 0 : 4) & 0xf;
    return lo | (qh[j / 8] >> (j % 8) & 1) << 4;
}

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[q4_1] known answer: d * q + m, low nibbles hold the first half") {
    ember_block_q4_1 b;
    b.d = ember_float_to_half(0.25f);
    b.m = ember_float_to_half(-1.5f);
    for (int j = 0; j < 16; j++) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
    const std::vector<float> y = dequant(EMBER_TYPE_Q4_1, &b, 32);
    for (int j = 0; j < 16; j++) {
        CAPTURE(j);
        CHECK(y[j] == 0.25f * j - 1.5f);              // exact: quarter steps
        CHECK(y[j + 16] == 0.25f * (15 - j) - 1.5f);
    }
}

TEST_CASE("[q4_1] from_float: min maps to level 0, max to 15, halves round up") {
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = -1.0f + 0.25f * static_cast<float>(i % 16);  // min -1, max 2.75
    x[3] = -1.0f + 0.25f * 2.5f;  // exactly between levels 2 and 3: trunc(2.5 + 0.5) = 3
    ember_block_q4_1 b;
    traits(EMBER_TYPE_Q4_1).from_float(x, &b, 32);
    CHECK(ember_half_to_float(b.d) == 0.25f);  // (2.75 - -1) / 15
    CHECK(ember_half_to_float(b.m) == -1.0f);
    for (int j = 0; j < 16; j++) CHECK(b.qs[j] == (j | j << 4));  // weight 3: the tie went up to 3
    const std::vector<float> y = dequant(EMBER_TYPE_Q4_1, &b, 32);
    for (int i = 0; i < 32; i++) {
        if (i != 3) CHECK(y[i] == x[i]);
    }
    CHECK(y[3] == -0.25f);
}

TEST_CASE("[q5_0] known answer: d * (q - 16), qh bit j is bit 4 of weight j") {
    std::mt19937                       rng(17);
    std::uniform_int_distribution<int> byte(0, 255);
    ember_block_q5_0                   b;
    for (auto & v : b.qs) v = static_cast<uint8_t>(byte(rng));
    for (auto & v : b.qh) v = static_cast<uint8_t>(byte(rng));
    b.d                      = ember_float_to_half(-0.5f);
    const std::vector<float> y = dequant(EMBER_TYPE_Q5_0, &b, 32);
    for (int j = 0; j < 32; j++) {
        CAPTURE(j);
        CHECK(y[j] == -0.5f * static_cast<float>(q5_level(b.qs, b.qh, j) - 16));
    }
    // from raw bytes: weight 0 and weight 16 share qs[0]; weight 16's fifth bit is qh bit 16
    std::memset(&b, 0, sizeof(b));
    b.d     = ember_float_to_half(1.0f);
    b.qs[0] = 0x3f;  // weight 0: 15, weight 16: 3
    b.qh[2] = 0x01;  // bit 16: weight 16 gets +16
    b.qh[3] = 0x80;  // bit 31: weight 31 gets +16
    const std::vector<float> z = dequant(EMBER_TYPE_Q5_0, &b, 32);
    CHECK(z[0] == 15 - 16);
    CHECK(z[16] == 3 + 16 - 16);
    CHECK(z[31] == 16 - 16);
    CHECK(z[1] == -16);
    CHECK(z[15] == -16);
}

TEST_CASE("[q5_0] from_float: the value of largest magnitude maps to level 0, whatever its sign") {
    for (float sign : {1.0f, -1.0f}) {
        CAPTURE(sign);
        float x[32];
        for (int i = 0; i < 32; i++) x[i] = sign * 0.125f * static_cast<float>(16 - i);  // |x| max at i = 0
        ember_block_q5_0 b;
        traits(EMBER_TYPE_Q5_0).from_float(x, &b, 32);
        CHECK(ember_half_to_float(b.d) == sign * -0.125f);  // x[0] / -16
        for (int j = 0; j < 16; j++) CHECK(b.qs[j] == (j | j << 4));  // level i for weight i
        CHECK(b.qh[0] == 0);
        CHECK(b.qh[1] == 0);
        CHECK(b.qh[2] == 0xff);  // weights 16..31 have levels >= 16
        CHECK(b.qh[3] == 0xff);
        const std::vector<float> y = dequant(EMBER_TYPE_Q5_0, &b, 32);
        for (int i = 0; i < 32; i++) CHECK(y[i] == x[i]);
    }
}

TEST_CASE("[q5_1] known answer and from_float: d * q + m over 32 levels") {
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = -1.0f + 0.125f * static_cast<float>(i);  // 31 steps of 1/8
    ember_block_q5_1 b;
    traits(EMBER_TYPE_Q5_1).from_float(x, &b, 32);
    CHECK(ember_half_to_float(b.d) == 0.125f);
    CHECK(ember_half_to_float(b.m) == -1.0f);
    for (int j = 0; j < 32; j++) CHECK(q5_level(b.qs, b.qh, j) == j);
    const std::vector<float> y = dequant(EMBER_TYPE_Q5_1, &b, 32);
    for (int i = 0; i < 32; i++) CHECK(y[i] == x[i]);

    std::mt19937                       rng(23);
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto & v : b.qs) v = static_cast<uint8_t>(byte(rng));
    for (auto & v : b.qh) v = static_cast<uint8_t>(byte(rng));
    b.d = ember_float_to_half(0.75f);
    b.m = ember_float_to_half(-3.0f);
    const std::vector<float> z = dequant(EMBER_TYPE_Q5_1, &b, 32);
    for (int j = 0; j < 32; j++) CHECK(z[j] == 0.75f * static_cast<float>(q5_level(b.qs, b.qh, j)) - 3.0f);
}

TEST_CASE("[q8_1] s is half(d * sum(q)) from the unrounded d; ties round away from zero") {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // d = 1
    x[1] = 0.5f;    // -> 1 (away from zero, unlike Q8_K's ties to even)
    x[2] = -2.5f;   // -> -3
    x[3] = 1.5f;    // -> 2
    ember_block_q8_1 b;
    traits(EMBER_TYPE_Q8_1).from_float(x.data(), &b, 32);
    CHECK(ember_half_to_float(b.d) == 1.0f);
    CHECK(b.qs[0] == 127);
    CHECK(b.qs[1] == 1);
    CHECK(b.qs[2] == -3);
    CHECK(b.qs[3] == 2);
    CHECK(ember_half_to_float(b.s) == 127.0f);

    // d = 1/127 is not a half: s = half(4064 * float(1/127)) = 32, while half(d) * 4064 is not 32
    std::vector<float> ones(32, 1.0f);
    traits(EMBER_TYPE_Q8_1).from_float(ones.data(), &b, 32);
    for (int j = 0; j < 32; j++) CHECK(b.qs[j] == 127);
    CHECK(b.s == ember_float_to_half(4064.0f * (1.0f / 127.0f)));
    CHECK(ember_half_to_float(b.s) == 32.0f);
    CHECK(ember_half_to_float(b.d) * 4064.0f != 32.0f);

    std::vector<float> zero(32, 0.0f);
    std::memset(&b, 0x5a, sizeof(b));
    traits(EMBER_TYPE_Q8_1).from_float(zero.data(), &b, 32);
    const ember_block_q8_1 all0 = {};
    CHECK(std::memcmp(&b, &all0, sizeof(b)) == 0);
}

TEST_CASE("[q4_1][q5_0][q5_1] vec_dot matches float64 over the stored operands") {
    std::mt19937                          rng(31);
    std::uniform_int_distribution<int>    byte(0, 255);
    std::uniform_int_distribution<int>    level(-127, 127);
    std::uniform_real_distribution<float> scale(0.001f, 2.0f);
    const int64_t                         nb = 9;
    for (ember_type t : {EMBER_TYPE_Q4_1, EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1}) {
        const ember_type_traits & tr = traits(t);
        CAPTURE(std::string(tr.name));
        std::vector<uint8_t> qx(ember_row_size(t, 32 * nb));
        for (auto & v : qx) v = static_cast<uint8_t>(byte(rng));
        // random bytes, then sane scales: d and m are the first halves of every block
        for (int64_t ib = 0; ib < nb; ib++) {
            ember_half h[2] = {ember_float_to_half(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f)),
                               ember_float_to_half(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f))};
            std::memcpy(qx.data() + ib * tr.type_size, h, t == EMBER_TYPE_Q5_0 ? sizeof(ember_half) : sizeof(h));
        }
        const bool                    has_s = tr.vec_dot_type == EMBER_TYPE_Q8_1;
        std::vector<ember_block_q8_1> y1(nb);
        std::vector<ember_block_q8_0> y0(nb);
        for (int64_t ib = 0; ib < nb; ib++) {
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                y1[ib].qs[j] = y0[ib].qs[j] = static_cast<int8_t>(level(rng));
                sum += y1[ib].qs[j];
            }
            const float d = scale(rng);
            y1[ib].d = y0[ib].d = ember_float_to_half(d);
            y1[ib].s            = ember_float_to_half(d * static_cast<float>(sum));
        }
        // the reference, from the bytes as ggml documents them
        double ref = 0.0, mag = 0.0;
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t * blk = qx.data() + ib * tr.type_size;
            ember_half      h[2];
            std::memcpy(h, blk, sizeof(h));
            const double dx = ember_half_to_float(h[0]);
            const double dy = ember_half_to_float(y1[ib].d);
            for (int j = 0; j < 32; j++) {
                int q = 0;
                if (t == EMBER_TYPE_Q4_1) q = blk[4 + j % 16] >> (j < 16 ? 0 : 4) & 0xf;
                if (t == EMBER_TYPE_Q5_0) q = q5_level(blk + 6, blk + 2, j) - 16;
                if (t == EMBER_TYPE_Q5_1) q = q5_level(blk + 8, blk + 4, j);
                ref += dx * dy * q * y1[ib].qs[j];
                mag += std::fabs(dx * dy * q * y1[ib].qs[j]);
            }
            if (has_s) {
                const double ms = static_cast<double>(ember_half_to_float(h[1])) * ember_half_to_float(y1[ib].s);
                ref += ms;
                mag += std::fabs(ms);
            }
        }
        float s = 0.0f;
        tr.vec_dot(32 * nb, &s, qx.data(), has_s ? static_cast<const void *>(y1.data()) : y0.data());
        // integer sums are exact: only the scale products and the per-block adds round
        CHECK(std::fabs(s - ref) <= 1e-6 * mag);
    }
}

TEST_CASE("[q4_1][q5_0][q5_1] re-quantizing the F32 fixture gives llama-quantize's bytes") {
    if (ember_test_data_path("fixtures/models/tiny-llama-F32.gguf").empty()) {
        MESSAGE("skipped: no fixtures/models/tiny-llama-F32.gguf (pass --data-dir)");
        return;
    }
    const std::pair<const char *, ember_type> files[] = {
        {"Q4_1", EMBER_TYPE_Q4_1}, {"Q5_0", EMBER_TYPE_Q5_0}, {"Q5_1", EMBER_TYPE_Q5_1}};
    for (const auto & file : files) {
        const std::string weights = file.first;
        const ember_type  type    = file.second;
        CAPTURE(weights);
        const std::map<ember_type, requant_count> c = requantize_fixture("llama", weights);
        REQUIRE(c.count(type) == 1);
        CHECK(c.at(type).tensors == 15);  // every 2-D tensor but output.weight (Q6_K)
        CHECK(c.at(type).blocks == 53248);
        CHECK(c.at(type).differing == 0);
        REQUIRE(c.count(EMBER_TYPE_Q6_K) == 1);
        CHECK(c.at(EMBER_TYPE_Q6_K).differing == 0);
        CHECK(c.size() == 2);
    }
}

}  // TEST_SUITE
