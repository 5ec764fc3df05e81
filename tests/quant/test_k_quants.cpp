// The K-quants Q2_K, Q3_K, Q4_K and Q5_K (Q6_K: test_q6_k.cpp): hand-built known answers,
// quantizer conventions, dot products against Q8_K in float64, and the bytes of llama.cpp's own
// Q2_K / Q3_K_M / Q4_K_M / Q5_K_M files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "quant/ref/ref.h"
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

// --- the layouts as ggml documents them, written independently of the library ---
// Each decoder gives, for weight i of a block, the scaled level a_i and the subtracted min m_i
// (x_i = a_i - m_i) in double.

// Q2_K/Q3_K low bits: weight i sits in byte 32 (i / 128) + i % 32 at bits 2k..2k+1, k = (i % 128) / 32.
int low2(const uint8_t * qs, int i) { return qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32)) & 3; }

void decode_q2_k(const ember_block_q2_k & b, int i, double & a, double & m) {
    const int j = i / 16;
    a           = static_cast<double>(ember_half_to_float(b.d)) * (b.scales[j] & 0xf) * low2(b.qs, i);
    m           = static_cast<double>(ember_half_to_float(b.dmin)) * (b.scales[j] >> 4);
}

// Q3_K scale j: 4 low bits from the low (j < 8) or high (j >= 8) nibble of scales[j % 8], 2
// high bits from scales[8 + j % 4] at bit 2 (j / 4); minus 32. Level: low2 + 4 * (bit i / 32 of
// hmask[i % 32]), minus 4.
int q3_k_scale(const ember_block_q3_k & b, int j) {
    const int lo = b.scales[j % 8] >> (j < 8 ? 0 : 4) & 0xf;
    return (lo | (b.scales[8 + j % 4] >> (2 * (j / 4)) & 3) << 4) - 32;
}

void decode_q3_k(const ember_block_q3_k & b, int i, double & a, double & m) {
    const int q = low2(b.qs, i) | (b.hmask[i % 32] >> (i / 32) & 1) << 2;
    a           = static_cast<double>(ember_half_to_float(b.d)) * q3_k_scale(b, i / 16) * (q - 4);
    m           = 0.0;
}

// Q4_K/Q5_K scale and min of sub-block j (6 bits each): for j < 4 the low 6 bits of scales[j]
// and scales[j + 4]; for j >= 4 the low / high nibble of scales[j + 4] with the top 2 bits of
// scales[j - 4] / scales[j] above them.
void k4_scale_min(const uint8_t * s, int j, int & sc, int & mn) {
    sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
    mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
}

// Low 4 bits of weight i: byte 32 (i / 64) + i % 32, low nibble for the first 32 of each 64.
int low4(const uint8_t * qs, int i) { return qs[32 * (i / 64) + i % 32] >> ((i % 64) < 32 ? 0 : 4) & 0xf; }

void decode_q4_k(const ember_block_q4_k & b, int i, double & a, double & m) {
    int sc, mn;
    k4_scale_min(b.scales, i / 32, sc, mn);
    a = static_cast<double>(ember_half_to_float(b.d)) * sc * low4(b.qs, i);
    m = static_cast<double>(ember_half_to_float(b.dmin)) * mn;
}

void decode_q5_k(const ember_block_q5_k & b, int i, double & a, double & m) {
    int sc, mn;
    k4_scale_min(b.scales, i / 32, sc, mn);
    const int q = low4(b.qs, i) | (b.qh[i % 32] >> (i / 32) & 1) << 4;
    a           = static_cast<double>(ember_half_to_float(b.d)) * sc * q;
    m           = static_cast<double>(ember_half_to_float(b.dmin)) * mn;
}

// Decodes weight i of block `blk` (of type t) with the decoders above.
void decode(ember_type t, const uint8_t * blk, int i, double & a, double & m) {
    switch (t) {
        case EMBER_TYPE_Q2_K: decode_q2_k(*reinterpret_cast<const ember_block_q2_k *>(blk), i, a, m); break;
        case EMBER_TYPE_Q3_K: decode_q3_k(*reinterpret_cast<const ember_block_q3_k *>(blk), i, a, m); break;
        case EMBER_TYPE_Q4_K: decode_q4_k(*reinterpret_cast<const ember_block_q4_k *>(blk), i, a, m); break;
        default: decode_q5_k(*reinterpret_cast<const ember_block_q5_k *>(blk), i, a, m); break;
    }
}

// Sets the f16 super-block scales of a block of type t (after random bytes).
void set_scales(ember_type t, uint8_t * blk, float d, float dmin) {
    switch (t) {
        case EMBER_TYPE_Q2_K: {
            auto & b = *reinterpret_cast<ember_block_q2_k *>(blk);
            b.d      = ember_float_to_half(d);
            b.dmin   = ember_float_to_half(dmin);
            break;
        }
        case EMBER_TYPE_Q3_K: reinterpret_cast<ember_block_q3_k *>(blk)->d = ember_float_to_half(d); break;
        case EMBER_TYPE_Q4_K: {
            auto & b = *reinterpret_cast<ember_block_q4_k *>(blk);
            b.d      = ember_float_to_half(d);
            b.dmin   = ember_float_to_half(dmin);
            break;
        }
        default: {
            auto & b = *reinterpret_cast<ember_block_q5_k *>(blk);
            b.d      = ember_float_to_half(d);
            b.dmin   = ember_float_to_half(dmin);
            break;
        }
    }
}

const ember_type k_types[] = {EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K};

// Q8_K activations with random levels and correct bsums.
std::vector<ember_block_q8_k> random_q8_k(int64_t nb, std::mt19937 & rng) {
    std::uniform_int_distribution<int>    level(-127, 127);
    std::uniform_real_distribution<float> scale(0.001f, 2.0f);
    std::vector<ember_block_q8_k>         b(nb);
    for (auto & blk : b) {
        for (auto & v : blk.qs) v = static_cast<int8_t>(level(rng));
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += blk.qs[16 * j + i];
            blk.bsums[j] = static_cast<int16_t>(s);
        }
        blk.d = scale(rng) * (level(rng) < 0 ? -1.0f : 1.0f);
    }
    return b;
}

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[q2_k][q3_k][q4_k][q5_k] known answer: random bytes dequantize as the layout documents") {
    std::mt19937                       rng(41);
    std::uniform_int_distribution<int> byte(0, 255);
    for (ember_type t : k_types) {
        const ember_type_traits & tr = traits(t);
        CAPTURE(std::string(tr.name));
        std::vector<uint8_t> blk(tr.type_size);
        for (int rep = 0; rep < 4; rep++) {
            for (auto & v : blk) v = static_cast<uint8_t>(byte(rng));
            set_scales(t, blk.data(), rep % 2 ? -0.5f : 0.5f, 0.25f);  // exact products
            const std::vector<float> y = dequant(t, blk.data(), 256);
            for (int i = 0; i < 256; i++) {
                double a, m;
                decode(t, blk.data(), i, a, m);
                if (y[i] != a - m) {
                    CAPTURE(i);
                    CHECK(y[i] == a - m);
                }
            }
        }
    }
}

TEST_CASE("[q2_k][q3_k][q4_k][q5_k] known answer: hand-set bytes") {
    SUBCASE("q2_k: scale and min nibbles, 2-bit fields") {
        ember_block_q2_k b = {};
        b.d                = ember_float_to_half(1.0f);
        b.dmin             = ember_float_to_half(0.5f);
        b.scales[0]        = 0x23;  // sub-block 0: scale 3, min 2 * 0.5
        b.scales[2]        = 0x05;  // sub-block 2 (weights 32..47): scale 5, min 0
        b.scales[8]        = 0xf1;  // sub-block 8 (weights 128..143): scale 1, min 15 * 0.5
        b.qs[0]            = 0xe4;  // 0b11'10'01'00: weight 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
        b.qs[32]           = 0x03;  // weight 128 -> 3
        const std::vector<float> y = dequant(EMBER_TYPE_Q2_K, &b, 256);
        CHECK(y[0] == 3 * 0 - 1.0f);
        CHECK(y[1] == -1.0f);
        CHECK(y[32] == 5 * 1);
        CHECK(y[64] == 0);  // sub-block 4: scale 0, min 0
        CHECK(y[128] == 1 * 3 - 7.5f);
    }
    SUBCASE("q3_k: 6-bit scales split across bytes, high bits in hmask") {
        ember_block_q3_k b = {};
        b.d                = ember_float_to_half(1.0f);
        // scale 0 = 33 (0b10'0001): low nibble 1 in scales[0], high bits 2 in scales[8] bits 0..1
        b.scales[0] = 0x01;
        b.scales[8] = 0x02;
        // scale 13 = 63 (0b11'1111): low nibble in the high nibble of scales[5], high bits 3 in
        // scales[8 + 13 % 4 = 9] at bits 2 * (13 / 4) = 6..7
        b.scales[5] = 0xf0;
        b.scales[9] = 0xc0;
        b.qs[0]     = 0x03;  // weight 0: low bits 3
        b.hmask[0]  = 0x01;  // weight 0: high bit -> level 7, value 7 - 4
        b.hmask[16] = 0x40;  // weight 6 * 32 + 16 = 208 (sub-block 13): high bit, low bits 0 -> 0
        const std::vector<float> y = dequant(EMBER_TYPE_Q3_K, &b, 256);
        CHECK(y[0] == (33 - 32) * 3);
        CHECK(y[1] == (33 - 32) * -4);
        CHECK(y[208] == 0.0f);
        CHECK(y[209] == (63 - 32) * -4);
        CHECK(y[16] == (0 - 32) * -4);  // sub-block 1: scale 0 -> -32
    }
    SUBCASE("q4_k / q5_k: the 12 scale bytes, nibbles and the fifth bit") {
        ember_block_q5_k b = {};
        b.d                = ember_float_to_half(1.0f);
        b.dmin             = ember_float_to_half(1.0f);
        b.scales[1]        = 0x80 | 5;  // sub-block 1: scale 5; bits 6..7 = 2: high bits of sub-block 5's scale
        b.scales[5]        = 0x40 | 7;  // sub-block 1: min 7; bits 6..7 = 1: high bits of sub-block 5's min
        b.scales[9]        = 0x3a;      // sub-block 5: scale low nibble 10, min low nibble 3
        b.qs[0]            = 0x21;      // weight 0: 1, weight 32: 2
        b.qs[32 * 2 + 16]  = 0xf0;      // weight 128 + 32 + 16 = 176 (sub-block 5): 15
        b.qh[16]           = 0x20;      // weight 5 * 32 + 16 = 176: fifth bit -> 31
        b.qh[1]            = 0x02;      // weight 32 + 1 = 33 (sub-block 1): fifth bit -> 16
        const std::vector<float> y = dequant(EMBER_TYPE_Q5_K, &b, 256);
        CHECK(y[0] == 0.0f);                             // sub-block 0: scale 0, min 0
        CHECK(y[33] == 5 * 16 - 7);
        CHECK(y[32] == 5 * 2 - 7);
        CHECK(y[176] == (10 | 2 << 4) * 31 - (3 | 1 << 4));
        CHECK(y[177] == -(3 | 1 << 4));
        // Q4_K shares the scale bytes and the low nibbles
        ember_block_q4_k c = {};
        c.d                = b.d;
        c.dmin             = b.dmin;
        std::memcpy(c.scales, b.scales, sizeof(c.scales));
        std::memcpy(c.qs, b.qs, sizeof(c.qs));
        const std::vector<float> z = dequant(EMBER_TYPE_Q4_K, &c, 256);
        CHECK(z[33] == 5 * 0 - 7);
        CHECK(z[32] == 5 * 2 - 7);
        CHECK(z[176] == (10 | 2 << 4) * 15 - (3 | 1 << 4));
    }
}

TEST_CASE("[q2_k][q3_k][q4_k][q5_k] from_float: scale conventions of the reference, zero blocks") {
    std::mt19937                    rng(43);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t                   nb = 16;
    std::vector<float>              x(256 * nb);
    for (auto & v : x) v = normal(rng);
    for (ember_type t : k_types) {
        const ember_type_traits & tr = traits(t);
        CAPTURE(std::string(tr.name));
        std::vector<uint8_t> q(ember_row_size(t, 256 * nb));
        tr.from_float(x.data(), q.data(), 256 * nb);
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t * blk = q.data() + ib * tr.type_size;
            // the largest sub-block scale (and min) takes the largest code
            int max_sc = 0, max_mn = 0, min_s3 = 63;
            for (int j = 0; j < (t == EMBER_TYPE_Q2_K || t == EMBER_TYPE_Q3_K ? 16 : 8); j++) {
                int sc = 0, mn = 0;
                if (t == EMBER_TYPE_Q2_K) {
                    sc = blk[j] & 0xf;
                    mn = blk[j] >> 4;
                } else if (t == EMBER_TYPE_Q3_K) {
                    min_s3 = std::min(min_s3, q3_k_scale(*reinterpret_cast<const ember_block_q3_k *>(blk), j) + 32);
                } else {
                    k4_scale_min(blk + 4, j, sc, mn);
                }
                max_sc = std::max(max_sc, sc);
                max_mn = std::max(max_mn, mn);
            }
            if (t == EMBER_TYPE_Q2_K) {
                CHECK(max_sc == 15);
                CHECK(max_mn == 15);
            } else if (t == EMBER_TYPE_Q3_K) {
                CHECK(min_s3 == 0);  // the signed scale of largest magnitude is stored as -32
            } else {
                CHECK(max_sc == 63);
                CHECK(max_mn == 63);
            }
        }
        // scaling x by a power of two scales every output exactly (d stays a normal f16)
        std::vector<float> x4(x);
        for (auto & v : x4) v *= 4.0f;
        std::vector<uint8_t> q4(q.size());
        tr.from_float(x4.data(), q4.data(), 256 * nb);
        const std::vector<float> y = dequant(t, q.data(), 256 * nb), y4 = dequant(t, q4.data(), 256 * nb);
        int                      mismatches = 0;
        for (int64_t i = 0; i < 256 * nb; i++) mismatches += y4[i] != 4.0f * y[i];
        CHECK(mismatches == 0);
        // an all-zero super-block is all-zero bytes
        std::vector<float>   zero(256, 0.0f);
        std::vector<uint8_t> z(tr.type_size, 0xab), all0(tr.type_size, 0);
        tr.from_float(zero.data(), z.data(), 256);
        CHECK(z == all0);
    }
}

TEST_CASE("[q2_k][q3_k][q4_k][q5_k] vec_dot against Q8_K matches float64") {
    std::mt19937                          rng(47);
    std::uniform_int_distribution<int>    byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 2.0f);
    for (ember_type t : k_types) {
        const ember_type_traits & tr = traits(t);
        CAPTURE(std::string(tr.name));
        SUBCASE("random bytes: exact over the stored operands") {
            for (int64_t nb : {1, 2, 7}) {
                CAPTURE(nb);
                std::vector<uint8_t> qx(tr.type_size * nb);
                for (auto & v : qx) v = static_cast<uint8_t>(byte(rng));
                for (int64_t ib = 0; ib < nb; ib++) {
                    set_scales(t, qx.data() + ib * tr.type_size, scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f), scale(rng));
                }
                const std::vector<ember_block_q8_k> qy = random_q8_k(nb, rng);
                double                              ref = 0.0, mag = 0.0;
                for (int64_t ib = 0; ib < nb; ib++) {
                    for (int i = 0; i < 256; i++) {
                        double a, m;
                        decode(t, qx.data() + ib * tr.type_size, i, a, m);
                        const double yv = static_cast<double>(qy[ib].d) * qy[ib].qs[i];
                        ref += (a - m) * yv;
                        mag += (std::fabs(a) + std::fabs(m)) * std::fabs(yv);
                    }
                }
                float s = 0.0f;
                tr.vec_dot(256 * nb, &s, qx.data(), qy.data());
                // integer sums are exact; the scale products, the int -> float conversions and
                // the per-block adds round: a few float ulps of the two terms' magnitude
                CHECK(std::fabs(s - ref) <= 1e-6 * mag);
            }
        }
    }
    SUBCASE("extreme levels: the int32 accumulators do not overflow") {
        ember_block_q8_k y;
        for (auto & v : y.qs) v = -127;
        for (auto & v : y.bsums) v = -127 * 16;
        y.d = 1.0f;
        float s = 0.0f;

        ember_block_q5_k b5;  // every level 31, scale 63, min 63
        std::memset(&b5, 0xff, sizeof(b5));
        b5.d    = ember_float_to_half(1.0f);
        b5.dmin = ember_float_to_half(1.0f);
        traits(EMBER_TYPE_Q5_K).vec_dot(256, &s, &b5, &y);
        CHECK(s == static_cast<float>(256 * 63 * 31 * -127 - 256 * 63 * -127));  // both exact in float

        ember_block_q3_k b3 = {};  // every scale -32, every level -4
        b3.d                = ember_float_to_half(1.0f);
        traits(EMBER_TYPE_Q3_K).vec_dot(256, &s, &b3, &y);
        CHECK(s == 256.0f * -32 * -4 * -127);

        ember_block_q2_k b2;  // every level 3, scale 15, min 15
        std::memset(&b2, 0xff, sizeof(b2));
        b2.d    = ember_float_to_half(1.0f);
        b2.dmin = ember_float_to_half(1.0f);
        traits(EMBER_TYPE_Q2_K).vec_dot(256, &s, &b2, &y);
        CHECK(s == 256.0f * 15 * 3 * -127 - 256.0f * 15 * -127);
    }
    SUBCASE("quantized dot of real data: error within the round-trip bounds") {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        const int64_t                   n = 256 * 6;
        std::vector<float>              x(n), y(n);
        for (auto & v : x) v = normal(rng);
        for (auto & v : y) v = normal(rng);
        std::vector<ember_block_q8_k> qy(n / 256);
        traits(EMBER_TYPE_Q8_K).from_float(y.data(), qy.data(), n);
        double exact = 0.0;
        for (int64_t i = 0; i < n; i++) exact += static_cast<double>(x[i]) * y[i];
        // RMS of the weights' round-trip error on normal data (measured over 1M values: Q2_K
        // 0.30, Q3_K 0.15, Q4_K 0.071, Q5_K 0.036; here with 20% headroom): the dot error has a
        // standard deviation of about that times sqrt(n) (Q8_K's own error is ~10x smaller);
        // allow 5 of them.
        const std::pair<ember_type, double> rms[] = {
            {EMBER_TYPE_Q2_K, 0.36}, {EMBER_TYPE_Q3_K, 0.18}, {EMBER_TYPE_Q4_K, 0.085}, {EMBER_TYPE_Q5_K, 0.043}};
        for (const auto & tr_rms : rms) {
            const ember_type t = tr_rms.first;
            const double     r = tr_rms.second;
            CAPTURE(std::string(traits(t).name));
            std::vector<uint8_t> qx(ember_row_size(t, n));
            traits(t).from_float(x.data(), qx.data(), n);
            float s = 0.0f;
            traits(t).vec_dot(n, &s, qx.data(), qy.data());
            CHECK(std::fabs(s - exact) <= 5 * r * std::sqrt(static_cast<double>(n)));
        }
    }
}

TEST_CASE("[q2_k][q3_k][q4_k][q5_k] re-quantizing the F32 fixtures gives llama-quantize's bytes") {
    if (ember_test_data_path("fixtures/models/tiny-llama-F32.gguf").empty()) {
        MESSAGE("skipped: no fixtures/models/tiny-llama-F32.gguf (pass --data-dir)");
        return;
    }
    // the tensor counts per type of llama-quantize's default mixes (fixtures/models/README.md)
    struct expect {
        const char *                          arch;
        const char *                          weights;
        std::map<ember_type, requant_count>   counts;
    };
    auto c = [](int64_t tensors, int64_t blocks) {
        requant_count r;
        r.tensors = tensors;
        r.blocks  = blocks;
        return r;
    };
    const expect files[] = {
        {"llama", "Q2_K", {{EMBER_TYPE_Q2_K, c(9, 4352)}, {EMBER_TYPE_Q3_K, c(6, 2304)}, {EMBER_TYPE_Q6_K, c(1, 512)}}},
        {"llama", "Q3_K_M",
         {{EMBER_TYPE_Q3_K, c(9, 4352)}, {EMBER_TYPE_Q4_K, c(4, 2048)}, {EMBER_TYPE_Q5_K, c(2, 256)}, {EMBER_TYPE_Q6_K, c(1, 512)}}},
        {"llama", "Q4_K_M", {{EMBER_TYPE_Q4_K, c(13, 5760)}, {EMBER_TYPE_Q6_K, c(3, 1408)}}},
        {"llama", "Q5_K_M", {{EMBER_TYPE_Q5_K, c(13, 5760)}, {EMBER_TYPE_Q6_K, c(3, 1408)}}},
        {"qwen3", "Q4_K_M", {{EMBER_TYPE_Q4_K, c(13, 5760)}, {EMBER_TYPE_Q6_K, c(3, 1408)}}},
    };
    for (const expect & e : files) {
        CAPTURE(std::string(e.arch) + " " + e.weights);
        const std::map<ember_type, requant_count> got = requantize_fixture(e.arch, e.weights);
        if (got.empty()) {
            MESSAGE("skipped: no fixtures/models/tiny-" << e.arch << "-{F32," << e.weights << "}.gguf");
            continue;
        }
        CHECK(got.size() == e.counts.size());
        for (const auto & type_want : e.counts) {
            const ember_type      type = type_want.first;
            const requant_count & want = type_want.second;
            CAPTURE(std::string(traits(type).name));
            REQUIRE(got.count(type) == 1);
            CHECK(got.at(type).tensors == want.tensors);
            CHECK(got.at(type).blocks == want.blocks);
            CHECK(got.at(type).differing == 0);
        }
    }
}

// The scale searches' vector path (8 candidates at a time: ember_ref_vector_search) writes the
// scalar loops' bytes: random rows of several spreads, rows with outliers, constant and zero
// sub-blocks, sub-blocks of one sign. (Where the CPU has no vector path both runs are scalar.)
TEST_CASE("[q2_k][q4_k][q5_k][q6_k][int4] the vectorized searches write the scalar search's bytes") {
    const int64_t      n = 256 * 64;
    std::vector<float> x(n);
    std::mt19937       rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        const int64_t blk = i / 256, sub = (i % 256) / 16;
        float         v   = nd(rng) * (blk % 4 == 0 ? 0.02f : blk % 4 == 1 ? 1.0f : blk % 4 == 2 ? 300.0f : 1e-4f);
        if (blk % 7 == 3 && sub == 2) v = 0.0f;                        // a zero sub-block
        if (blk % 7 == 4 && sub == 5) v = 0.5f;                        // a constant one
        if (blk % 5 == 1 && i % 97 == 0) v *= 40.0f;                   // outliers
        if (blk % 6 == 2 && sub < 8) v = std::fabs(v);                 // one sign
        if (blk % 6 == 5 && sub >= 8) v = -std::fabs(v) - 0.25f;      // negative, away from 0
        x[i] = v;
    }
    // (INT4 / INT4_G32: the candidate scoring of quant/ref/ref-int4.cpp, rows of 4096.)
    for (ember_type t : {EMBER_TYPE_Q2_K, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32}) {
        CAPTURE(ember_type_get_name(t));
        const ember_type_traits & tr = traits(t);
        const int64_t             row = 4096;
        const size_t              rb  = ember_row_size(t, row);
        std::vector<uint8_t>      a(rb * static_cast<size_t>(n / row)), b(a.size());
        const auto                quantize = [&](std::vector<uint8_t> & out) {
            for (int64_t r = 0; r < n / row; r++) tr.from_float(x.data() + r * row, out.data() + r * rb, row);
        };
        const bool was = ember_ref_vector_search_on();
        ember_ref_vector_search(true);
        quantize(a);
        ember_ref_vector_search(false);
        CHECK_FALSE(ember_ref_vector_search_on());
        quantize(b);
        ember_ref_vector_search(was);
        CHECK(a == b);
    }
}

}  // TEST_SUITE
