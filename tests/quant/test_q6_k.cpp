// Q6_K and its activation type Q8_K: hand-built known answers, round trips, dot products
// against float64, and the bytes of llama.cpp's own Q6_K files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "quant/types.h"
#include "support/data-path.h"

namespace {

const ember_type_traits & q6k() { return *ember_type_get_traits(EMBER_TYPE_Q6_K); }
const ember_type_traits & q8k() { return *ember_type_get_traits(EMBER_TYPE_Q8_K); }

// Packs 256 levels (0..63) into a Q6_K block, written from the layout as ggml documents it,
// independently of the library's packer: weight i sits in half h = i / 128; with r = i % 128,
// l = r % 32 and quarter k = r / 32, its low nibble is in ql[64 h + l + 32 (k & 1)] (low nibble
// for k < 2, high for k >= 2) and its high 2 bits are bits 2k..2k+1 of qh[32 h + l].
void pack_levels(const int * q, ember_block_q6_k & b) {
    std::memset(b.ql, 0, sizeof(b.ql));
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int i = 0; i < 256; i++) {
        const int h = i / 128, r = i % 128, l = r % 32, k = r / 32;
        uint8_t & lo = b.ql[64 * h + l + 32 * (k & 1)];
        lo = static_cast<uint8_t>(lo | (q[i] & 0xf) << (k < 2 ? 0 : 4));
        b.qh[32 * h + l] = static_cast<uint8_t>(b.qh[32 * h + l] | (q[i] >> 4) << (2 * k));
    }
}

std::vector<float> dequant(const ember_type_traits & tr, const void * q, int64_t n) {
    std::vector<float> y(n);
    tr.to_float(q, y.data(), n);
    return y;
}

// --- a minimal GGUF reader: enough to find a tensor's type and bytes ---
struct gguf_tensor {
    uint32_t       type = 0;
    int64_t        n    = 0;  // elements
    const uint8_t * data = nullptr;
};

struct gguf_file {
    std::vector<uint8_t>               bytes;
    std::map<std::string, gguf_tensor> tensors;
    size_t                             pos = 0;
    bool                               ok  = true;

    template <class T> T get() {
        T v{};
        if (pos + sizeof(T) > bytes.size()) {
            ok = false;
            return v;
        }
        std::memcpy(&v, bytes.data() + pos, sizeof(T));
        pos += sizeof(T);
        return v;
    }
    std::string str() {
        const uint64_t n = get<uint64_t>();
        if (!ok || n > bytes.size() - pos) {
            ok = false;
            return "";
        }
        std::string s(reinterpret_cast<const char *>(bytes.data() + pos), n);
        pos += n;
        return s;
    }
    // Skips a metadata value; returns it as an integer when it is one (for general.alignment).
    uint64_t value(uint32_t type) {
        static const size_t k_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type == 8) {
            str();
            return 0;
        }
        if (type == 9) {
            const uint32_t et = get<uint32_t>();
            const uint64_t n  = get<uint64_t>();
            for (uint64_t i = 0; i < n && ok; i++) value(et);
            return 0;
        }
        if (type > 12) {
            ok = false;
            return 0;
        }
        uint64_t v = 0;
        if (pos + k_size[type] > bytes.size()) {
            ok = false;
            return 0;
        }
        std::memcpy(&v, bytes.data() + pos, k_size[type]);  // little-endian host
        pos += k_size[type];
        return v;
    }

    bool load(const std::string & path) {
        FILE * f = std::fopen(path.c_str(), "rb");
        if (!f) return false;
        std::fseek(f, 0, SEEK_END);
        bytes.resize(static_cast<size_t>(std::ftell(f)));
        std::fseek(f, 0, SEEK_SET);
        ok = std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size();
        std::fclose(f);
        if (!ok || bytes.size() < 24 || std::memcmp(bytes.data(), "GGUF", 4) != 0) return false;
        pos = 4;
        get<uint32_t>();  // version
        const uint64_t n_tensors = get<uint64_t>();
        const uint64_t n_kv      = get<uint64_t>();
        uint64_t       align     = 32;
        for (uint64_t i = 0; i < n_kv && ok; i++) {
            const std::string key = str();
            const uint64_t    v   = value(get<uint32_t>());
            if (key == "general.alignment") align = v;
        }
        std::map<std::string, uint64_t> offsets;
        for (uint64_t i = 0; i < n_tensors && ok; i++) {
            const std::string name = str();
            const uint32_t    nd   = get<uint32_t>();
            int64_t           n    = 1;
            for (uint32_t d = 0; d < nd; d++) n *= static_cast<int64_t>(get<uint64_t>());
            gguf_tensor t;
            t.type        = get<uint32_t>();
            t.n           = n;
            offsets[name] = get<uint64_t>();
            tensors[name] = t;
        }
        if (!ok || align == 0) return false;
        const size_t base = (pos + align - 1) / align * align;
        for (auto & [name, t] : tensors) {
            const ember_type_traits * tr = ember_type_get_traits(static_cast<int32_t>(t.type));
            if (!tr) continue;
            const size_t size = ember_row_size(static_cast<ember_type>(t.type), t.n);
            if (base + offsets[name] + size > bytes.size()) return false;
            t.data = bytes.data() + base + offsets[name];
        }
        return true;
    }
};

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[q6_k] known answer: hand-packed bytes dequantize to d * scale * (q - 32)") {
    ember_block_q6_k b;
    int              q[256];
    for (int i = 0; i < 256; i++) q[i] = (i * 37 + 11) % 64;  // every level 0..63, all 4 bit fields
    q[5]   = 0;
    q[200] = 63;
    pack_levels(q, b);
    for (int j = 0; j < 16; j++) b.scales[j] = static_cast<int8_t>(j * 17 - 128);  // -128 .. 127
    b.d = ember_float_to_half(0.5f);
    REQUIRE(b.d == 0x3800);

    const std::vector<float> y = dequant(q6k(), &b, 256);
    for (int i = 0; i < 256; i++) {
        const float want = 0.5f * static_cast<float>(b.scales[i / 16]) * static_cast<float>(q[i] - 32);  // exact
        if (y[i] != want) {
            CAPTURE(i);
            CHECK(y[i] == want);
        }
    }
    CHECK(y[5] == 0.5f * -128 * -32);                 // level 0 in sub-block 0 (scale -128)
    CHECK(y[200] == 0.5f * (12 * 17 - 128) * 31);     // level 63 in sub-block 12

    // The same facts from raw bytes: weights 0, 32, 64 and 96 of the first half share ql[0],
    // ql[32] and qh[0]; weight 128 starts the second half at ql[64] and qh[32].
    std::memset(&b, 0, sizeof(b));
    b.d      = ember_float_to_half(1.0f);
    for (int j = 0; j < 16; j++) b.scales[j] = 1;
    b.ql[0]  = 0x21;        // weight 0: low nibble 1; weight 64: low nibble 2
    b.ql[32] = 0x43;        // weight 32: 3; weight 96: 4
    b.qh[0]  = 0xe4;        // 0b11'10'01'00: high bits 0 (w0), 1 (w32), 2 (w64), 3 (w96)
    b.ql[64] = 0x0f;        // weight 128: low nibble 15
    b.qh[32] = 0x03;        // weight 128: high bits 3 -> level 63
    const std::vector<float> z = dequant(q6k(), &b, 256);
    CHECK(z[0] == 1 - 32);
    CHECK(z[32] == (3 | 1 << 4) - 32);
    CHECK(z[64] == (2 | 2 << 4) - 32);
    CHECK(z[96] == (4 | 3 << 4) - 32);
    CHECK(z[128] == 63 - 32);
    CHECK(z[1] == -32);     // untouched bytes: level 0
    CHECK(z[255] == -32);
}

TEST_CASE("[q6_k] from_float: packing round-trips the levels, scale conventions of the reference") {
    std::mt19937                    rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float>              x(256 * 16);
    for (auto & v : x) v = normal(rng);
    std::vector<ember_block_q6_k> b(16);
    q6k().from_float(x.data(), b.data(), 256 * 16);
    for (const ember_block_q6_k & blk : b) {
        // the sub-block scale of largest magnitude is stored as -128; d carries its sign
        int min_scale = 127;
        for (int j = 0; j < 16; j++) min_scale = std::min<int>(min_scale, blk.scales[j]);
        CHECK(min_scale == -128);
        // re-packing the levels the dequantizer sees with the independent packer gives the bytes
        const std::vector<float> y = dequant(q6k(), &blk, 256);
        int                      q[256];
        const float              d = ember_half_to_float(blk.d);
        for (int i = 0; i < 256; i++) {
            const float step = d * blk.scales[i / 16];
            q[i]             = step != 0.0f ? static_cast<int>(std::lround(y[i] / step)) + 32 : 32;
        }
        ember_block_q6_k again = blk;
        pack_levels(q, again);
        CHECK(std::memcmp(&again, &blk, sizeof(blk)) == 0);
    }
    // an all-zero super-block is all-zero bytes
    std::vector<float> zero(256, 0.0f);
    ember_block_q6_k   z;
    std::memset(&z, 0xab, sizeof(z));
    q6k().from_float(zero.data(), &z, 256);
    const ember_block_q6_k all0 = {};
    CHECK(std::memcmp(&z, &all0, sizeof(z)) == 0);
}

TEST_CASE("[q6_k] round trip: error within a step of the largest sub-block scale") {
    std::mt19937                    rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t                   nb = 64;
    std::vector<float>              x(256 * nb);
    for (int64_t i = 0; i < 256 * nb; i++) x[i] = normal(rng) * (1.0f + static_cast<float>(i / 256));  // growing blocks
    std::vector<ember_block_q6_k> b(nb);
    q6k().from_float(x.data(), b.data(), 256 * nb);
    const std::vector<float> y = dequant(q6k(), b.data(), 256 * nb);
    double                   worst = 0.0, sq = 0.0;
    for (int64_t ib = 0; ib < nb; ib++) {
        double amax = 0.0;
        for (int i = 0; i < 256; i++) amax = std::fmax(amax, std::fabs(x[ib * 256 + i]));
        for (int i = 0; i < 256; i++) {
            const double e = std::fabs(static_cast<double>(y[ib * 256 + i]) - x[ib * 256 + i]);
            worst          = std::fmax(worst, e / amax);
            sq += e * e / (amax * amax);
        }
    }
    // measured: worst 1/62 (half a step of ~amax/31), RMS about step / sqrt(12) of a typical
    // sub-block's step (~amax/(3 * 32) on normal data)
    CHECK(worst <= 1.0 / 32);
    CHECK(std::sqrt(sq / static_cast<double>(256 * nb)) <= 1.0 / 100);
    // and scaling x by a power of two scales every output exactly (d stays a normal f16)
    std::vector<float> x4(x);
    for (auto & v : x4) v *= 4.0f;
    std::vector<ember_block_q6_k> b4(nb);
    q6k().from_float(x4.data(), b4.data(), 256 * nb);
    const std::vector<float> y4 = dequant(q6k(), b4.data(), 256 * nb);
    int                      mismatches = 0;
    for (int64_t i = 0; i < 256 * nb; i++) mismatches += y4[i] != 4.0f * y[i];
    CHECK(mismatches == 0);
}

TEST_CASE("[q8_k] known answers: sign convention, ties to even, bsums, zero block") {
    // max is negative: -127 -> iscale = 1, d = 1, q = round-half-even(x)
    std::vector<float> x(256, 0.0f);
    x[0] = -127.0f;
    x[1] = 0.5f;   // -> 0 (tie to even)
    x[2] = 1.5f;   // -> 2
    x[3] = 2.5f;   // -> 2
    x[4] = -0.5f;  // -> 0
    x[5] = -1.5f;  // -> -2
    x[6] = 126.6f; // -> 127
    x[16] = 3.0f;
    x[31] = -100.25f;
    ember_block_q8_k b;
    q8k().from_float(x.data(), &b, 256);
    CHECK(b.d == 1.0f);
    CHECK(b.qs[0] == -127);
    CHECK(b.qs[1] == 0);
    CHECK(b.qs[2] == 2);
    CHECK(b.qs[3] == 2);
    CHECK(b.qs[4] == 0);
    CHECK(b.qs[5] == -2);
    CHECK(b.qs[6] == 127);
    CHECK(b.qs[31] == -100);
    CHECK(b.bsums[0] == -127 + 0 + 2 + 2 + 0 - 2 + 127);
    CHECK(b.bsums[1] == 3 - 100);
    for (int j = 2; j < 16; j++) CHECK(b.bsums[j] == 0);

    // max is positive: it maps to -127 and d is negative
    std::vector<float> p(256);
    for (int i = 0; i < 256; i++) p[i] = static_cast<float>(i % 16) - 7.0f;  // -7..8
    p[77] = 16.0f;
    q8k().from_float(p.data(), &b, 256);
    CHECK(b.d == doctest::Approx(-16.0 / 127).epsilon(1e-6));
    CHECK(b.qs[77] == -127);
    const float iscale = -127.0f / 16.0f;
    for (int i = 0; i < 256; i++) {
        if (i == 77) continue;
        CHECK(b.qs[i] == static_cast<int>(std::nearbyint(iscale * p[i])));
    }
    const std::vector<float> y = dequant(q8k(), &b, 256);
    CHECK(y[77] == b.d * -127);
    CHECK(y[77] == doctest::Approx(16.0).epsilon(1e-6));

    // all zero: zero scale, levels and sums
    std::vector<float> zero(256, 0.0f);
    std::memset(&b, 0x5a, sizeof(b));
    q8k().from_float(zero.data(), &b, 256);
    const ember_block_q8_k all0 = {};
    CHECK(std::memcmp(&b, &all0, sizeof(b)) == 0);
}

TEST_CASE("[q8_k] bsums are the sums of each 16 levels; round trip within half a step") {
    std::mt19937                    rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t                   nb = 32;
    std::vector<float>              x(256 * nb);
    for (auto & v : x) v = normal(rng) * 100.0f;
    std::vector<ember_block_q8_k> b(nb);
    q8k().from_float(x.data(), b.data(), 256 * nb);
    const std::vector<float> y = dequant(q8k(), b.data(), 256 * nb);
    for (int64_t ib = 0; ib < nb; ib++) {
        double amax = 0.0;
        for (int i = 0; i < 256; i++) amax = std::fmax(amax, std::fabs(x[ib * 256 + i]));
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += b[ib].qs[16 * j + i];
            CHECK(b[ib].bsums[j] == s);
        }
        for (int i = 0; i < 256; i++) {
            CHECK(b[ib].qs[i] >= -127);
            const double e = std::fabs(static_cast<double>(y[ib * 256 + i]) - x[ib * 256 + i]);
            if (!(e <= amax * (0.5 / 127 + 1e-6))) CHECK(e <= amax * (0.5 / 127 + 1e-6));
        }
    }
}

TEST_CASE("[q6_k] vec_dot against Q8_K matches float64") {
    std::mt19937                           rng(21);
    std::uniform_int_distribution<int>     byte(0, 255);
    std::uniform_int_distribution<int>     level(-127, 127);
    std::normal_distribution<float>        normal(0.0f, 1.0f);
    std::uniform_real_distribution<float>  scale(0.001f, 2.0f);

    SUBCASE("random bytes: exact over the dequantized operands") {
        for (int64_t nb : {1, 2, 7}) {
            std::vector<ember_block_q6_k> a(nb);
            std::vector<ember_block_q8_k> b(nb);
            for (int64_t ib = 0; ib < nb; ib++) {
                for (auto & v : a[ib].ql) v = static_cast<uint8_t>(byte(rng));
                for (auto & v : a[ib].qh) v = static_cast<uint8_t>(byte(rng));
                for (auto & v : a[ib].scales) v = static_cast<int8_t>(byte(rng) - 128);
                a[ib].d = ember_float_to_half(scale(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
                for (auto & v : b[ib].qs) v = static_cast<int8_t>(level(rng));
                for (int j = 0; j < 16; j++) {
                    int s = 0;
                    for (int i = 0; i < 16; i++) s += b[ib].qs[16 * j + i];
                    b[ib].bsums[j] = static_cast<int16_t>(s);
                }
                b[ib].d = -scale(rng);
            }
            const int64_t            n  = 256 * nb;
            const std::vector<float> dx = dequant(q6k(), a.data(), n), dy = dequant(q8k(), b.data(), n);
            double                   ref = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++) {
                ref += static_cast<double>(dx[i]) * dy[i];
                mag += std::fabs(static_cast<double>(dx[i]) * dy[i]);
            }
            float s = 0.0f;
            q6k().vec_dot(n, &s, a.data(), b.data());
            CAPTURE(nb);
            // integer sums are exact; only (d_x * d_y), the int -> float conversion and the
            // per-block adds round: a few float ulps of the magnitude
            CHECK(std::fabs(s - ref) <= 1e-6 * mag);
        }
    }

    SUBCASE("extreme levels: the int32 accumulator does not overflow") {
        ember_block_q6_k a;
        ember_block_q8_k b;
        std::memset(a.ql, 0, sizeof(a.ql));  // level 0: q - 32 = -32
        std::memset(a.qh, 0, sizeof(a.qh));
        for (auto & v : a.scales) v = -128;
        a.d = ember_float_to_half(1.0f);
        for (auto & v : b.qs) v = -127;
        for (auto & v : b.bsums) v = -127 * 16;
        b.d = 1.0f;
        float s = 0.0f;
        q6k().vec_dot(256, &s, &a, &b);
        CHECK(s == 256.0f * -128 * -32 * -127);  // -133169152, exact in float
    }

    SUBCASE("quantized dot of real data: error within the round-trip bounds") {
        const int64_t      n = 256 * 6;
        std::vector<float> x(n), y(n);
        for (auto & v : x) v = normal(rng);
        for (auto & v : y) v = normal(rng);
        std::vector<ember_block_q6_k> qx(n / 256);
        std::vector<ember_block_q8_k> qy(n / 256);
        q6k().from_float(x.data(), qx.data(), n);
        q8k().from_float(y.data(), qy.data(), n);
        float s = 0.0f;
        q6k().vec_dot(n, &s, qx.data(), qy.data());
        // |x'y' - xy| <= |x' - x| |y'| + |x| |y' - y|, with the per-block bounds of the round trip
        const std::vector<float> dy = dequant(q8k(), qy.data(), n);
        double                   exact = 0.0, budget = 0.0;
        for (int64_t ib = 0; ib < n / 256; ib++) {
            double ax = 0.0, ay = 0.0;
            for (int i = 0; i < 256; i++) {
                ax = std::fmax(ax, std::fabs(x[ib * 256 + i]));
                ay = std::fmax(ay, std::fabs(y[ib * 256 + i]));
            }
            for (int i = 0; i < 256; i++) {
                const int64_t k = ib * 256 + i;
                exact += static_cast<double>(x[k]) * y[k];
                budget += ax / 32 * std::fabs(dy[k]) + std::fabs(x[k]) * ay * (0.5 / 127 + 1e-6);
            }
        }
        CHECK(std::fabs(s - exact) <= budget);
        // the Q6_K error has an RMS of ~0.018 here (a step of ~2/32 over sqrt(12)), so the dot
        // error has a standard deviation of ~0.018 sqrt(n): allow 5 of them
        CHECK(std::fabs(s - exact) <= 0.09 * std::sqrt(static_cast<double>(n)));
    }
}

TEST_CASE("[q6_k] re-quantizing the F32 fixture gives llama-quantize's Q6_K bytes") {
    const std::string f32_path = ember_test_data_path("fixtures/models/tiny-llama-F32.gguf");
    const std::string q6_path  = ember_test_data_path("fixtures/models/tiny-llama-Q6_K.gguf");
    if (f32_path.empty() || q6_path.empty()) {
        MESSAGE("skipped: no fixtures/models/tiny-llama-{F32,Q6_K}.gguf (pass --data-dir)");
        return;
    }
    gguf_file src, ref;
    REQUIRE(src.load(f32_path));
    REQUIRE(ref.load(q6_path));
    int64_t tensors = 0, blocks = 0, differing = 0;
    for (const auto & entry : ref.tensors) {
        const std::string & name = entry.first;
        const gguf_tensor & t    = entry.second;
        if (t.type != EMBER_TYPE_Q6_K) continue;
        CAPTURE(name);
        const auto it = src.tensors.find(name);
        REQUIRE(it != src.tensors.end());
        REQUIRE(it->second.type == EMBER_TYPE_F32);
        REQUIRE(it->second.n == t.n);
        std::vector<float> x(t.n);
        std::memcpy(x.data(), it->second.data, t.n * sizeof(float));
        std::vector<ember_block_q6_k> q(t.n / 256);
        q6k().from_float(x.data(), q.data(), t.n);
        const int64_t nb = t.n / 256;
        for (int64_t ib = 0; ib < nb; ib++) differing += std::memcmp(&q[ib], t.data + ib * 210, 210) != 0;
        blocks += nb;
        tensors++;
        // and llama.cpp's blocks decode to the F32 weights within the round-trip bound
        const std::vector<float> y = dequant(q6k(), t.data, t.n);
        for (int64_t ib = 0; ib < nb; ib++) {
            double amax = 0.0;
            for (int i = 0; i < 256; i++) amax = std::fmax(amax, std::fabs(x[ib * 256 + i]));
            for (int i = 0; i < 256; i++) {
                const double e = std::fabs(static_cast<double>(y[ib * 256 + i]) - x[ib * 256 + i]);
                if (!(e <= amax / 32 + 128 * 32 * std::ldexp(1.0, -25))) {
                    CAPTURE(ib);
                    CHECK(e <= amax / 32 + 128 * 32 * std::ldexp(1.0, -25));
                }
            }
        }
    }
    CHECK(tensors == 16);   // token_embd, 7 per layer x 2, output
    CHECK(blocks == 7168);
    CHECK(differing == 0);
}

}  // TEST_SUITE
