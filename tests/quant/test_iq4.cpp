// The non-linear 4-bit quants IQ4_NL and IQ4_XS: hand-built known answers, quantizer
// conventions, dot products against float64, and the bytes of llama.cpp's own files.
#include <doctest/doctest.h>

#include <algorithm>
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

// ggml's kvalues_iq4nl, spelled out here rather than taken from the library.
const int k_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

const ember_type_traits & traits(ember_type t) { return *ember_type_get_traits(t); }

std::vector<float> dequant(ember_type t, const void * q, int64_t n) {
    std::vector<float> y(n);
    traits(t).to_float(q, y.data(), n);
    return y;
}

// Grid index of weight j of a 32-weight group: byte j % 16, low nibble for j < 16.
int nibble(const uint8_t * qs, int j) { return qs[j % 16] >> (j < 16 ? 0 : 4) & 0xf; }

// IQ4_XS's 6-bit scale of sub-block j, minus 32: 4 low bits in nibble j % 2 of scales_l[j / 2],
// 2 high bits at bits 2j..2j+1 of scales_h.
int xs_scale(const ember_block_iq4_xs & b, int j) {
    return ((b.scales_l[j / 2] >> (4 * (j % 2)) & 0xf) | (b.scales_h >> (2 * j) & 3) << 4) - 32;
}

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[iq4_nl][iq4_xs] known answer: random bytes dequantize to d * grid[q] (* (ls - 32))") {
    std::mt19937                       rng(53);
    std::uniform_int_distribution<int> byte(0, 255);
    ember_block_iq4_nl                 nl;
    for (auto & v : nl.qs) v = static_cast<uint8_t>(byte(rng));
    nl.d                      = ember_float_to_half(-0.25f);
    const std::vector<float> y = dequant(EMBER_TYPE_IQ4_NL, &nl, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == -0.25f * static_cast<float>(k_grid[nibble(nl.qs, j)]));

    ember_block_iq4_xs xs;
    for (auto & v : xs.qs) v = static_cast<uint8_t>(byte(rng));
    for (auto & v : xs.scales_l) v = static_cast<uint8_t>(byte(rng));
    xs.scales_h                = static_cast<uint16_t>(byte(rng) | byte(rng) << 8);
    xs.d                       = ember_float_to_half(0.5f);
    const std::vector<float> z = dequant(EMBER_TYPE_IQ4_XS, &xs, 256);
    for (int i = 0; i < 256; i++) {
        const float want = 0.5f * static_cast<float>(xs_scale(xs, i / 32)) *
                           static_cast<float>(k_grid[nibble(xs.qs + 16 * (i / 32), i % 32)]);  // exact
        if (z[i] != want) {
            CAPTURE(i);
            CHECK(z[i] == want);
        }
    }

    // raw bytes: sub-block 7's scale 0b10'0101 = 37 is split between scales_l[3] (high nibble)
    // and scales_h bits 14..15; its first byte of qs holds weights 224 and 240
    std::memset(&xs, 0, sizeof(xs));
    xs.d           = ember_float_to_half(1.0f);
    xs.scales_l[3] = 0x50;
    xs.scales_h    = 0x8000;
    xs.qs[16 * 7]  = 0xf0;  // weight 224: index 0 (-127), weight 240: index 15 (113)
    const std::vector<float> w = dequant(EMBER_TYPE_IQ4_XS, &xs, 256);
    CHECK(w[224] == 5.0f * -127);
    CHECK(w[240] == 5.0f * 113);
    CHECK(w[225] == 5.0f * -127);
    CHECK(w[0] == -32.0f * -127);  // sub-block 0: scale 0 -> -32
}

TEST_CASE("[iq4_nl] from_float: grid points are found exactly; the sign of d follows the grid's asymmetry") {
    // x = +-0.01 * grid[j % 16]: the candidate scale search lands on +-0.01 and every index on
    // its grid point, whichever sign the value of largest magnitude has
    for (float sign : {1.0f, -1.0f}) {
        CAPTURE(sign);
        float x[32];
        for (int j = 0; j < 32; j++) x[j] = sign * 0.01f * static_cast<float>(k_grid[j % 16]);
        ember_block_iq4_nl b;
        traits(EMBER_TYPE_IQ4_NL).from_float(x, &b, 32);
        CHECK(ember_half_to_float(b.d) == doctest::Approx(sign * 0.01).epsilon(1e-3));
        for (int j = 0; j < 16; j++) CHECK(b.qs[j] == (j | j << 4));
    }
    // an all-zero block: d = 0 and every index 8 (grid value 1, the nearest to 0)
    std::vector<float> zero(32, 0.0f);
    ember_block_iq4_nl z;
    traits(EMBER_TYPE_IQ4_NL).from_float(zero.data(), &z, 32);
    CHECK(z.d == 0);
    for (int j = 0; j < 16; j++) CHECK(z.qs[j] == 0x88);
}

TEST_CASE("[iq4_xs] from_float: the largest sub-block scale is coded -32; zero super-blocks") {
    std::mt19937                    rng(59);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t                   nb = 16;
    std::vector<float>              x(256 * nb);
    for (int64_t i = 0; i < 256 * nb; i++) x[i] = normal(rng) * (1.0f + static_cast<float>((i / 32) % 5));
    std::vector<ember_block_iq4_xs> b(nb);
    traits(EMBER_TYPE_IQ4_XS).from_float(x.data(), b.data(), 256 * nb);
    for (const ember_block_iq4_xs & blk : b) {
        int lo = 31;
        for (int j = 0; j < 8; j++) lo = std::min(lo, xs_scale(blk, j));
        CHECK(lo == -32);
    }
    // an all-zero super-block: d = -0 (ggml writes -max_scale / 32), codes 32, indices 8
    std::vector<float> zero(256, 0.0f);
    ember_block_iq4_xs z;
    traits(EMBER_TYPE_IQ4_XS).from_float(zero.data(), &z, 256);
    CHECK(z.d == 0x8000);
    CHECK(z.scales_h == 0xaaaa);
    for (int j = 0; j < 4; j++) CHECK(z.scales_l[j] == 0);
    for (int j = 0; j < 128; j++) CHECK(z.qs[j] == 0x88);
}

TEST_CASE("[iq4_nl][iq4_xs] vec_dot matches float64 over the stored operands") {
    std::mt19937                          rng(61);
    std::uniform_int_distribution<int>    byte(0, 255);
    std::uniform_int_distribution<int>    level(-127, 127);
    std::uniform_real_distribution<float> scale(0.001f, 2.0f);
    const int64_t                         nb = 5;

    SUBCASE("iq4_nl x q8_0") {
        std::vector<ember_block_iq4_nl> a(8 * nb);
        std::vector<ember_block_q8_0>   b(8 * nb);
        double                          ref = 0.0, mag = 0.0;
        for (size_t i = 0; i < a.size(); i++) {
            for (auto & v : a[i].qs) v = static_cast<uint8_t>(byte(rng));
            for (auto & v : b[i].qs) v = static_cast<int8_t>(level(rng));
            a[i].d = ember_float_to_half(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
            b[i].d = ember_float_to_half(scale(rng));
            for (int j = 0; j < 32; j++) {
                const double p = static_cast<double>(ember_half_to_float(a[i].d)) * k_grid[nibble(a[i].qs, j)] *
                                 ember_half_to_float(b[i].d) * b[i].qs[j];
                ref += p;
                mag += std::fabs(p);
            }
        }
        float s = 0.0f;
        traits(EMBER_TYPE_IQ4_NL).vec_dot(static_cast<int64_t>(32 * a.size()), &s, a.data(), b.data());
        CHECK(std::fabs(s - ref) <= 1e-6 * mag);
    }
    SUBCASE("iq4_xs x q8_k") {
        std::vector<ember_block_iq4_xs> a(nb);
        std::vector<ember_block_q8_k>   b(nb);
        double                          ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < nb; i++) {
            for (auto & v : a[i].qs) v = static_cast<uint8_t>(byte(rng));
            for (auto & v : a[i].scales_l) v = static_cast<uint8_t>(byte(rng));
            a[i].scales_h = static_cast<uint16_t>(byte(rng) | byte(rng) << 8);
            a[i].d        = ember_float_to_half(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
            for (auto & v : b[i].qs) v = static_cast<int8_t>(level(rng));
            for (int j = 0; j < 16; j++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += b[i].qs[16 * j + l];
                b[i].bsums[j] = static_cast<int16_t>(sum);
            }
            b[i].d = -scale(rng);
            for (int k = 0; k < 256; k++) {
                const double p = static_cast<double>(ember_half_to_float(a[i].d)) * xs_scale(a[i], k / 32) *
                                 k_grid[nibble(a[i].qs + 16 * (k / 32), k % 32)] * b[i].d * b[i].qs[k];
                ref += p;
                mag += std::fabs(p);
            }
        }
        float s = 0.0f;
        traits(EMBER_TYPE_IQ4_XS).vec_dot(256 * nb, &s, a.data(), b.data());
        CHECK(std::fabs(s - ref) <= 1e-6 * mag);
    }
    SUBCASE("iq4_xs extreme levels: the int32 accumulator does not overflow") {
        ember_block_iq4_xs a = {};  // every scale -32, every index 0 (-127)
        a.d                  = ember_float_to_half(1.0f);
        ember_block_q8_k y;
        for (auto & v : y.qs) v = -127;
        for (auto & v : y.bsums) v = -127 * 16;
        y.d     = 1.0f;
        float s = 0.0f;
        traits(EMBER_TYPE_IQ4_XS).vec_dot(256, &s, &a, &y);
        CHECK(s == 256.0f * -32 * -127 * -127);  // -132128768, exact in float
    }
}

TEST_CASE("[iq4_nl][iq4_xs] re-quantizing the F32 fixture gives llama-quantize's bytes") {
    if (ember_test_data_path("fixtures/models/tiny-llama-F32.gguf").empty()) {
        MESSAGE("skipped: no fixtures/models/tiny-llama-F32.gguf (pass --data-dir)");
        return;
    }
    const struct {
        const char * weights;
        ember_type   type;
        int64_t      blocks;
    } files[] = {{"IQ4_NL", EMBER_TYPE_IQ4_NL, 53248}, {"IQ4_XS", EMBER_TYPE_IQ4_XS, 6656}};
    for (const auto & f : files) {
        CAPTURE(std::string(f.weights));
        const std::map<ember_type, requant_count> c = requantize_fixture("llama", f.weights);
        REQUIRE(c.count(f.type) == 1);
        CHECK(c.at(f.type).tensors == 15);  // every 2-D tensor but output.weight (Q6_K)
        CHECK(c.at(f.type).blocks == f.blocks);
        CHECK(c.at(f.type).differing == 0);
        REQUIRE(c.count(EMBER_TYPE_Q6_K) == 1);
        CHECK(c.at(EMBER_TYPE_Q6_K).differing == 0);
        CHECK(c.size() == 2);
    }
}

}  // TEST_SUITE
