// Ember's own weight types (docs/quant-types.md): INT4 / INT4_G32 (AWQ-style search), NF4
// (QLoRA NormalFloat4, double-quantized scales in row groups), FP8 E4M3 / E5M2 with a
// power-of-two block scale or an fp32 row scale. Known answers from independent float64
// formulas and decoders written here from the documented layouts, property tests of every
// codec against float64, and the quantizer's search against plain min/max rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/ref/ref.h"
#include "quant/types.h"

namespace {

const ember_type k_ember_types[] = {EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32,     EMBER_TYPE_NF4,
                                    EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,     EMBER_TYPE_FP8_E4M3_ROW,
                                    EMBER_TYPE_FP8_E5M2_ROW};

const ember_type_traits & traits(ember_type t) { return *ember_type_get_traits(t); }

//
// Independent float64 definitions
//

// OCP FP8 value of code c, from the bit fields (E4M3: 4 exponent bits, bias 7, S.1111.111
// NaN, no inf; E5M2: 5 exponent bits, bias 15, IEEE inf / NaN).
double fp8_value(bool e4m3, int c) {
    const int    ebits = e4m3 ? 4 : 5, mbits = 7 - ebits, bias = e4m3 ? 7 : 15;
    const int    e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
    const double sign = (c & 0x80) ? -1.0 : 1.0;
    if (e4m3 && e == 15 && m == 7) return NAN;
    if (!e4m3 && e == 31) return m == 0 ? sign * INFINITY : NAN;
    if (e == 0) return sign * std::pow(2.0, 1 - bias) * (m / std::pow(2.0, mbits));
    return sign * std::pow(2.0, e - bias) * (1.0 + m / std::pow(2.0, mbits));
}

double fp8_max(bool e4m3) { return e4m3 ? 448.0 : 57344.0; }

// bitsandbytes' NF4 codebook, spelled out here.
const double k_nf4[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                          -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                          0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                          0.7229568362236023, 1.0};

// bitsandbytes' create_dynamic_map(signed=True) in float64: for i = 0..6, the means of 2^i
// equal intervals of [0.1, 1] times +-10^(i-6); then 0 and 1; sorted.
std::vector<double> dynamic_map64() {
    std::vector<double> v;
    for (int i = 0; i < 7; i++) {
        const int n = 1 << i;
        for (int j = 0; j < n; j++) {
            const double a = 0.1 + 0.9 * j / n, b = 0.1 + 0.9 * (j + 1) / n;
            v.push_back(std::pow(10.0, i - 6) * (a + b) / 2);
            v.push_back(-std::pow(10.0, i - 6) * (a + b) / 2);
        }
    }
    v.push_back(0.0);
    v.push_back(1.0);
    std::sort(v.begin(), v.end());
    return v;
}

double half64(const uint8_t * p) {
    ember_half h;
    std::memcpy(&h, p, 2);
    return ember_half_to_float(h);
}

double f32at(const uint8_t * p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
}

// Test-side decoders of one row (n weights) from the byte layouts of docs/quant-types.md.
std::vector<double> decode_row(ember_type t, const uint8_t * p, int64_t n) {
    std::vector<double> y(static_cast<size_t>(n));
    switch (t) {
        case EMBER_TYPE_INT4:
        case EMBER_TYPE_INT4_G32: {
            const int G = t == EMBER_TYPE_INT4 ? 128 : 32;
            for (int64_t g = 0; g < n / G; g++) {
                const uint8_t * b = p + g * (4 + G / 2);
                const double    d = half64(b), z = half64(b + 2);
                for (int k = 0; k < G; k++) {
                    const int j = k / 32, i = k % 32;
                    const int q = i < 16 ? b[4 + 16 * j + i] & 15 : b[4 + 16 * j + i - 16] >> 4;
                    y[g * G + k] = d * (q - z);
                }
            }
            break;
        }
        case EMBER_TYPE_NF4: {
            const uint8_t * g = p;
            for (int64_t b0 = 0; b0 < n / 64; b0 += 256) {
                const int64_t nb = std::min<int64_t>(256, n / 64 - b0);
                const float scale2 = static_cast<float>(f32at(g)), offset = static_cast<float>(f32at(g + 4));
                for (int64_t j = 0; j < nb; j++) {
                    const uint8_t * b = g + 8 + j * 33;
                    // the documented fp32 arithmetic: absmax = fl(fl(DYN[q] * scale2) + offset),
                    // with DYN as the library holds it (checked against float64 separately)
                    const float  prod   = ember_ref_nf4_dynamic_value(b[0]) * scale2;
                    const double absmax = static_cast<float>(prod + offset);
                    for (int i = 0; i < 64; i++) {
                        const int q                  = i < 32 ? b[1 + i] & 15 : b[1 + i - 32] >> 4;
                        y[(b0 + j) * 64 + i] = k_nf4[q] * absmax;
                    }
                }
                g += 8 + nb * 33;
            }
            break;
        }
        case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E5M2:
            for (int64_t i = 0; i < n; i++) {
                const uint8_t * b = p + (i / 32) * 33;
                y[i] = fp8_value(t == EMBER_TYPE_FP8_E4M3, b[1 + i % 32]) * std::pow(2.0, b[0] - 127);
            }
            break;
        default: {  // per-row FP8
            const double s = f32at(p);
            for (int64_t i = 0; i < n; i++) y[i] = fp8_value(t == EMBER_TYPE_FP8_E4M3_ROW, p[4 + i]) * s;
        }
    }
    return y;
}

// Input rows of several kinds: normal, all zero, constant, heavy-tailed (outliers), small,
// one huge outlier in normal data.
const char * const k_kind_names[] = {"normal", "zero", "constant", "cauchy", "small", "outlier"};
std::vector<float> make_row(int kind, int64_t n, std::mt19937 & rng) {
    std::vector<float>              x(static_cast<size_t>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::cauchy_distribution<float> heavy(0.0f, 1.0f);
    for (float & v : x) {
        switch (kind) {
            case 0: v = normal(rng); break;
            case 1: v = 0.0f; break;
            case 2: v = -0.3f; break;
            case 3: v = std::fmax(-1e3f, std::fmin(1e3f, heavy(rng))); break;
            case 4: v = 1e-3f * normal(rng); break;
            default: v = 0.02f * normal(rng); break;
        }
    }
    if (kind == 5) x[static_cast<size_t>(n / 3)] = 40.0f;
    return x;
}

// Row lengths per type: one block, several blocks, and for NF4 more than one row group.
std::vector<int64_t> row_lengths(ember_type t) {
    switch (t) {
        case EMBER_TYPE_INT4: return {128, 384, 1024};
        case EMBER_TYPE_INT4_G32: return {32, 96, 1024};
        case EMBER_TYPE_NF4: return {64, 192, 64 * 256, 64 * 300};
        default: return {32, 96, 1024};
    }
}

std::vector<uint8_t> quantize(ember_type t, const std::vector<float> & x) {
    std::vector<uint8_t> q(ember_row_size(t, static_cast<int64_t>(x.size())));
    traits(t).from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

std::vector<float> dequantize(ember_type t, const std::vector<uint8_t> & q, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    traits(t).to_float(q.data(), y.data(), n);
    return y;
}

// Plain min/max rounding of INT4 (the baseline the search must beat): d = (max - min) / 15,
// z = round(-min / d), q = clamp(round(x / d + z), 0, 15), d and z as fp16. Squared errors
// weighted by w (nullptr: 1) per group.
std::vector<double> minmax_group_errors(const std::vector<float> & x, int G, const float * w) {
    std::vector<double> errs;
    for (size_t g = 0; g < x.size() / G; g++) {
        const float * v  = &x[g * G];
        float         mn = v[0], mx = v[0];
        for (int i = 0; i < G; i++) mn = std::fmin(mn, v[i]), mx = std::fmax(mx, v[i]);
        const double d = ember_half_to_float(ember_float_to_half((mx - mn) / 15.0f));
        const double z = d > 0 ? ember_half_to_float(ember_float_to_half(std::nearbyint(-mn / d))) : 0.0;
        double       e = 0;
        for (int i = 0; i < G; i++) {
            const double q  = d > 0 ? std::fmin(15.0, std::fmax(0.0, std::nearbyint(v[i] / d + z))) : 0.0;
            const double dx = v[i] - d * (q - z);
            e += (w ? w[(g * G + i) % x.size()] : 1.0) * dx * dx;
        }
        errs.push_back(e);
    }
    return errs;
}

std::vector<double> group_errors(const std::vector<float> & x, const std::vector<double> & y, int G, const float * w) {
    std::vector<double> errs;
    for (size_t g = 0; g < x.size() / G; g++) {
        double e = 0;
        for (int i = 0; i < G; i++) {
            const double dx = x[g * G + i] - y[g * G + i];
            e += (w ? w[g * G + i] : 1.0) * dx * dx;
        }
        errs.push_back(e);
    }
    return errs;
}

// Relative RMS error bounds on normal data (about 1.5x the measured values, which the test prints).
double rms_bound(ember_type t) {
    switch (t) {
        case EMBER_TYPE_INT4: return 0.15;
        case EMBER_TYPE_INT4_G32: return 0.12;
        case EMBER_TYPE_NF4: return 0.15;
        case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E4M3_ROW: return 0.04;
        default: return 0.08;
    }
}

}  // namespace

TEST_SUITE("quant") {

TEST_CASE("[ember types] the table: ids, names, sizes, activation types, row groups") {
    struct row {
        ember_type  type;
        int32_t     id;
        const char *name;
        int64_t     block_size;
        size_t      type_size;
        ember_type  vec_dot_type;
        int64_t     n;         // a row length
        size_t      row_bytes;  // its ember_row_size
        bool        groups;
    };
    const row rows[] = {
        {EMBER_TYPE_INT4, 4096, "int4", 128, 68, EMBER_TYPE_Q8_1, 256, 136, false},
        {EMBER_TYPE_INT4_G32, 4097, "int4_g32", 32, 20, EMBER_TYPE_Q8_1, 64, 40, false},
        {EMBER_TYPE_NF4, 4098, "nf4", 64, 33, EMBER_TYPE_Q8_0, 64 * 257, 2 * 8 + 257 * 33, true},
        {EMBER_TYPE_FP8_E4M3, 4099, "fp8_e4m3", 32, 33, EMBER_TYPE_F32, 96, 99, false},
        {EMBER_TYPE_FP8_E5M2, 4100, "fp8_e5m2", 32, 33, EMBER_TYPE_F32, 96, 99, false},
        {EMBER_TYPE_FP8_E4M3_ROW, 4101, "fp8_e4m3_row", 32, 32, EMBER_TYPE_F32, 96, 4 + 96, true},
        {EMBER_TYPE_FP8_E5M2_ROW, 4102, "fp8_e5m2_row", 32, 32, EMBER_TYPE_F32, 4096, 4 + 4096, true},
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
        CHECK((tr->to_float && tr->from_float && tr->vec_dot));
        CHECK(ember_row_size(r.type, r.n) == r.row_bytes);
        CHECK(ember_type_has_row_groups(r.id) == r.groups);
        std::string upper = r.name;
        for (char & c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        CHECK(ember_type_by_name(upper.c_str()) == r.id);
        CHECK(ember_type_cell(r.id) >= EMBER_TYPE_COUNT);
    }
    CHECK(ember_row_size(EMBER_TYPE_NF4, 64 * 256) == 8 + 256 * 33);  // exactly one full group
    CHECK(ember_row_size(EMBER_TYPE_NF4, 64) == 8 + 33);
    CHECK((ember_type_get_traits(EMBER_TYPE_INT4)->quantize != nullptr));
    CHECK((ember_type_get_traits(EMBER_TYPE_INT4_G32)->quantize != nullptr));
    CHECK(ember_type_get_traits(4095) == nullptr);
    CHECK(ember_type_get_traits(4103) == nullptr);  // a free Ember id
    CHECK_FALSE(ember_type_has_row_groups(EMBER_TYPE_Q8_0));
}

TEST_CASE("[fp8] all 256 codes of E4M3 and E5M2 decode to the OCP values") {
    for (bool e4m3 : {true, false}) {
        CAPTURE(e4m3);
        int n_nan = 0, n_inf = 0;
        for (int c = 0; c < 256; c++) {
            CAPTURE(c);
            const double want = fp8_value(e4m3, c);
            const float  got  = e4m3 ? ember_fp8_e4m3_to_float(static_cast<uint8_t>(c))
                                     : ember_fp8_e5m2_to_float(static_cast<uint8_t>(c));
            if (std::isnan(want)) {
                n_nan++;
                CHECK(std::isnan(got));
                continue;
            }
            if (std::isinf(want)) n_inf++;
            CHECK(static_cast<double>(got) == want);
            CHECK(std::signbit(got) == ((c & 0x80) != 0));
        }
        CHECK(n_nan == (e4m3 ? 2 : 6));
        CHECK(n_inf == (e4m3 ? 0 : 2));
    }
    // spot values of the OCP spec
    CHECK(ember_fp8_e4m3_to_float(0x7e) == 448.0f);
    CHECK(ember_fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
    CHECK(ember_fp8_e4m3_to_float(0x08) == std::ldexp(1.0f, -6));
    CHECK(ember_fp8_e4m3_to_float(0x38) == 1.0f);
    CHECK(ember_fp8_e5m2_to_float(0x7b) == 57344.0f);
    CHECK(ember_fp8_e5m2_to_float(0x01) == std::ldexp(1.0f, -16));
    CHECK(ember_fp8_e5m2_to_float(0x3c) == 1.0f);
    CHECK(std::isinf(ember_fp8_e5m2_to_float(0xfc)));
}

TEST_CASE("[fp8] encoding: every finite code round-trips, nearest even, saturation, NaN, subnormals") {
    for (bool e4m3 : {true, false}) {
        CAPTURE(e4m3);
        auto enc = [&](float x) { return e4m3 ? ember_float_to_fp8_e4m3(x) : ember_float_to_fp8_e5m2(x); };
        // finite codes, sorted by value (positive codes ascend with their bits)
        std::vector<int> pos;
        for (int c = 0; c < 128; c++) {
            const double v = fp8_value(e4m3, c);
            if (std::isfinite(v)) pos.push_back(c);
        }
        for (int c = 0; c < 256; c++) {
            const double v = fp8_value(e4m3, c);
            if (!std::isfinite(v)) continue;
            CAPTURE(c);
            CHECK(enc(static_cast<float>(v)) == c);  // -0 keeps its sign: 0x80
        }
        // ties between neighbours go to the even code; just off the midpoint goes to the nearer
        for (size_t k = 0; k + 1 < pos.size(); k++) {
            const int    a = pos[k], b = pos[k + 1];
            const double mid = (fp8_value(e4m3, a) + fp8_value(e4m3, b)) / 2;  // exact in float
            const float  m   = static_cast<float>(mid);
            REQUIRE(static_cast<double>(m) == mid);
            CAPTURE(a);
            const int even = a % 2 == 0 ? a : b;
            CHECK(enc(m) == even);
            CHECK(enc(-m) == (even | 0x80));
            CHECK(enc(std::nextafter(m, 0.0f)) == a);
            CHECK(enc(std::nextafter(m, INFINITY)) == b);
        }
        // saturation and specials
        const float   mx       = static_cast<float>(fp8_max(e4m3));
        const uint8_t max_code = e4m3 ? 0x7e : 0x7b;
        CHECK(enc(mx) == max_code);
        CHECK(enc(mx * 1.01f) == max_code);
        CHECK(enc(1e30f) == max_code);
        CHECK(enc(INFINITY) == max_code);
        CHECK(enc(-INFINITY) == (max_code | 0x80));
        CHECK(enc(-1e30f) == (max_code | 0x80));
        CHECK(std::isnan(fp8_value(e4m3, enc(NAN))));
        CHECK(std::isnan(fp8_value(e4m3, enc(-NAN))));
        // subnormals: the smallest one, half of it (a tie with zero -> 0), 1.5 halves (-> 1 ulp)
        const float tiny = std::ldexp(1.0f, e4m3 ? -9 : -16);
        CHECK(enc(tiny) == 0x01);
        CHECK(enc(tiny / 2) == 0x00);
        CHECK(enc(-tiny / 2) == 0x80);
        CHECK(enc(tiny * 0.75f) == 0x01);
        CHECK(enc(tiny * 1.5f) == 0x02);  // tie between 1 and 2 ulps -> 2 (even)
        CHECK(enc(tiny * 2.5f) == 0x02);  // tie between 2 and 3 -> 2
        CHECK(enc(std::ldexp(1.0f, -140)) == 0x00);
        // random floats: the code is a nearest one (checked against every finite code)
        std::mt19937                          rng(e4m3 ? 17 : 18);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (int it = 0; it < 20000; it++) {
            const float x    = u(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - (e4m3 ? 14 : 20));
            const int   c    = enc(x);
            const double got = std::fabs(fp8_value(e4m3, c) - x);
            double       best = INFINITY;
            for (int k = 0; k < 256; k++) {
                const double v = fp8_value(e4m3, k);
                if (std::isfinite(v) && std::fabs(v) <= fp8_max(e4m3)) best = std::fmin(best, std::fabs(v - x));
            }
            if (!(got <= best)) {
                CAPTURE(x);
                CHECK(got <= best);
            }
        }
    }
}

TEST_CASE("[fp8] block scale: the smallest power of two that fits amax, fixed for zero blocks") {
    for (ember_type t : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        const bool   e4m3 = t == EMBER_TYPE_FP8_E4M3;
        const double mx   = fp8_max(e4m3);
        CAPTURE(e4m3);
        auto exponent_for = [&](float amax) {
            std::vector<float> x(32, 0.0f);
            x[5] = -amax;
            x[9] = amax / 3;
            return static_cast<int>(quantize(t, x)[0]);
        };
        CHECK(exponent_for(static_cast<float>(mx)) == 127);
        CHECK(exponent_for(std::nextafter(static_cast<float>(mx), INFINITY)) == 128);
        CHECK(exponent_for(static_cast<float>(mx / 8)) == 124);
        CHECK(exponent_for(static_cast<float>(mx / 8) * 1.001f) == 125);
        CHECK(quantize(t, std::vector<float>(32, 0.0f))[0] == 127);
        std::mt19937 rng(5);
        for (int it = 0; it < 2000; it++) {
            const float amax = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 200) - 100);
            const int   e    = exponent_for(amax);
            CAPTURE(amax);
            CHECK(amax <= mx * std::pow(2.0, e - 127));
            CHECK(amax > mx * std::pow(2.0, e - 128));
        }
        // infinities saturate, NaN stays NaN, the finite values keep their scale
        std::vector<float> x(32, 1.0f);
        x[0]                        = INFINITY;
        x[1]                        = -INFINITY;
        x[2]                        = NAN;
        const std::vector<float> y = dequantize(t, quantize(t, x), 32);
        CHECK(y[0] == static_cast<float>(mx) * std::ldexp(1.0f, quantize(t, x)[0] - 127));
        CHECK(y[1] == -y[0]);
        CHECK(std::isnan(y[2]));
        CHECK(y[3] == 1.0f);
    }
}

TEST_CASE("[fp8] row scale: amax / max in the header, the largest value on +-max") {
    for (ember_type t : {EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW}) {
        const bool e4m3 = t == EMBER_TYPE_FP8_E4M3_ROW;
        CAPTURE(e4m3);
        std::mt19937       rng(8);
        std::vector<float> x = make_row(0, 96, rng);
        x[40]                = -7.5f;
        const std::vector<uint8_t> q = quantize(t, x);
        float                      scale;
        std::memcpy(&scale, q.data(), 4);
        CHECK(scale == 7.5f / static_cast<float>(fp8_max(e4m3)));
        CHECK(q[4 + 40] == (e4m3 ? 0xfe : 0xfb));
        std::memcpy(&scale, quantize(t, std::vector<float>(64, 0.0f)).data(), 4);
        CHECK(scale == 1.0f);  // all-zero row
    }
}

TEST_CASE("[nf4] tables: bitsandbytes' codebook and dynamic map") {
    for (int q = 0; q < 16; q++) CHECK(ember_ref_nf4_value(q) == static_cast<float>(k_nf4[q]));
    const std::vector<double> dyn = dynamic_map64();
    REQUIRE(dyn.size() == 256);
    for (int q = 0; q < 256; q++) {
        CAPTURE(q);
        const double got = ember_ref_nf4_dynamic_value(q);
        CHECK(std::fabs(got - dyn[q]) <= 2e-7 * std::fabs(dyn[q]));  // float32 arithmetic, as torch's
        if (q > 0) CHECK(got > ember_ref_nf4_dynamic_value(q - 1));
    }
    CHECK(ember_ref_nf4_dynamic_value(127) == 0.0f);
    CHECK(ember_ref_nf4_dynamic_value(255) == 1.0f);
    CHECK(ember_ref_nf4_dynamic_value(0) == doctest::Approx(-(0.9859375 + 1) / 2).epsilon(1e-7));
}

TEST_CASE("[nf4] codes are the nearest codebook entries, ties to the lower index") {
    // One block per row: its group's offset is its own absmax and scale2 is 0, so the
    // dequantized absmax is exact and the codes can be read off directly.
    std::vector<float> x(64);
    for (int i = 0; i < 64; i++) x[i] = static_cast<float>(k_nf4[i % 16]) * 2.0f;
    x[40]                        = 2.0f * static_cast<float>(k_nf4[8]) / 2;  // midpoint of entries 7 and 8
    x[41]                        = 2.0f * static_cast<float>(k_nf4[6]) / 2;  // midpoint of entries 6 and 7
    x[42]                        = 2.0f * 0.9f;                              // between 14 and 15: nearer 15
    const std::vector<uint8_t> q = quantize(EMBER_TYPE_NF4, x);
    float                      scale2, offset;
    std::memcpy(&scale2, q.data(), 4);
    std::memcpy(&offset, q.data() + 4, 4);
    CHECK(scale2 == 0.0f);
    CHECK(offset == 2.0f);
    auto code = [&](int i) { return i < 32 ? q[8 + 1 + i] & 15 : q[8 + 1 + i - 32] >> 4; };
    for (int i = 0; i < 64; i++) {
        CAPTURE(i);
        if (i == 40) CHECK(code(i) == 7);
        else if (i == 41) CHECK(code(i) == 6);
        else if (i == 42) CHECK(code(i) == 15);
        else CHECK(code(i) == i % 16);
    }
    const std::vector<float> y = dequantize(EMBER_TYPE_NF4, q, 64);
    for (int i = 0; i < 64; i++) {
        if (i < 40 || i > 42) CHECK(y[i] == x[i]);
    }
}

TEST_CASE("[nf4] double quantization: per-group offset and scale2, absmax to 8 bits") {
    // 300 blocks: a group of 256 and a group of 44, each with its own header.
    std::mt19937             rng(3);
    const int64_t            n = 64 * 300;
    std::vector<float>       x = make_row(0, n, rng);
    const std::vector<uint8_t> q = quantize(EMBER_TYPE_NF4, x);
    REQUIRE(q.size() == 2 * 8 + 300 * 33);
    const std::vector<double> dyn = dynamic_map64();
    for (int g = 0; g < 2; g++) {
        const int64_t   b0 = g * 256, nb = g == 0 ? 256 : 44;
        const uint8_t * h  = q.data() + (g == 0 ? 0 : 8 + 256 * 33);
        double          mean = 0, amax_c = 0;
        std::vector<double> absmax(nb);
        for (int64_t j = 0; j < nb; j++) {
            double a = 0;
            for (int i = 0; i < 64; i++) a = std::fmax(a, std::fabs(x[(b0 + j) * 64 + i]));
            absmax[j] = a;
            mean += a / nb;
        }
        CAPTURE(g);
        CHECK(std::fabs(f32at(h + 4) - mean) <= 1e-6 * mean);
        for (int64_t j = 0; j < nb; j++) amax_c = std::fmax(amax_c, std::fabs(absmax[j] - f32at(h + 4)));
        CHECK(f32at(h) == doctest::Approx(amax_c).epsilon(1e-6));
        // each block's 8-bit absmax is the nearest dynamic-map entry
        for (int64_t j = 0; j < nb; j++) {
            const int    aq = h[8 + j * 33];
            const double v  = (absmax[j] - f32at(h + 4)) / f32at(h);
            for (int k = 0; k < 256; k++) {
                if (!(std::fabs(dyn[aq] - v) <= std::fabs(dyn[k] - v) + 1e-6)) {
                    CAPTURE(j);
                    CHECK(std::fabs(dyn[aq] - v) <= std::fabs(dyn[k] - v) + 1e-6);
                }
            }
        }
    }
}

TEST_CASE("[ember types] to_float matches the documented layout, decoded in float64") {
    std::mt19937 rng(21);
    for (ember_type t : k_ember_types) {
        for (int64_t n : row_lengths(t)) {
            for (int kind = 0; kind < 6; kind++) {
                CAPTURE(std::string(traits(t).name));
                CAPTURE(n);
                CAPTURE(std::string(k_kind_names[kind]));
                const std::vector<float>   x    = make_row(kind, n, rng);
                const std::vector<uint8_t> q    = quantize(t, x);
                const std::vector<float>   y    = dequantize(t, q, n);
                const std::vector<double>  want = decode_row(t, q.data(), n);
                double                     worst = 0;
                for (int64_t i = 0; i < n; i++) {
                    // float arithmetic of one or two products (NF4: DYN * scale2 + offset first)
                    const double err = std::fabs(y[i] - want[i]) / (std::fabs(want[i]) + 1e-30);
                    worst            = std::fmax(worst, want[i] == 0 ? std::fabs(y[i]) : err);
                }
                CHECK(worst <= 2e-7);
            }
        }
    }
}

TEST_CASE("[ember types] dequant(quant(x)) stays under the per-type bound") {
    // Bounds relative to the largest |x| of the unit the scale belongs to (INT4: the group,
    // NF4: the 64-block, FP8: per value):
    //   INT4 / INT4_G32: the clipping search may clip the group's extremes by up to half of
    //     amax (r >= 0.5), and rounding adds half a step; plain rounding errors stay under a
    //     step, (max - min) / 15 <= 2 amax / 15. Bound: 0.5 amax + 2 amax / 15.
    //   NF4: half the widest codebook gap, (1 - 0.6962) / 2 = 0.152 of the block's dequantized
    //     absmax, which is off by at most half of DYN's widest spacing, 0.9 / 64 / 2 = 0.00704,
    //     times the group's scale2 (a value clamped to +-1 loses that much too).
    //   FP8: half an ulp of the value, 2^-4 (E4M3) or 2^-3 (E5M2) relative, or half the
    //     smallest subnormal times the scale in absolute terms; the per-row types also round
    //     x / scale once in float (2^-24 relative).
    std::mt19937 rng(31);
    for (ember_type t : k_ember_types) {
        const ember_type_traits & tr = traits(t);
        for (int64_t n : row_lengths(t)) {
            for (int kind = 0; kind < 6; kind++) {
                CAPTURE(std::string(tr.name));
                CAPTURE(n);
                CAPTURE(std::string(k_kind_names[kind]));
                const std::vector<float>   x = make_row(kind, n, rng);
                const std::vector<uint8_t> q = quantize(t, x);
                const std::vector<double>  y = decode_row(t, q.data(), n);
                double                     rms_err = 0, rms_x = 0;
                int                        bad     = 0;
                for (int64_t i = 0; i < n; i++) {
                    const double err = std::fabs(y[i] - x[i]);
                    rms_err += err * err;
                    rms_x += static_cast<double>(x[i]) * x[i];
                    double bound = 0;
                    if (t == EMBER_TYPE_INT4 || t == EMBER_TYPE_INT4_G32) {
                        const int64_t G = tr.block_size, g0 = i / G * G;
                        double        amax = 0;
                        for (int64_t k = g0; k < g0 + G; k++) amax = std::fmax(amax, std::fabs(x[k]));
                        bound = (0.5 + 2.0 / 15) * amax + 1e-7 * amax + std::ldexp(16.0, -25);
                    } else if (t == EMBER_TYPE_NF4) {
                        const int64_t b0 = i / 64 * 64, g = i / (64 * 256);
                        double        amax = 0;
                        for (int64_t k = b0; k < b0 + 64; k++) amax = std::fmax(amax, std::fabs(x[k]));
                        const double scale2 = f32at(q.data() + g * (8 + 256 * 33));
                        bound = 0.152 * (amax + 0.00704 * scale2) + 0.00704 * scale2 + 1e-6 * amax;
                    } else {
                        const bool   e4m3  = t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E4M3_ROW;
                        const bool   row   = t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW;
                        const double scale = row ? f32at(q.data()) : std::pow(2.0, q[(i / 32) * 33] - 127);
                        bound = std::ldexp(std::fabs(x[i]), e4m3 ? -4 : -3) * (1 + (row ? 2e-7 : 0)) +
                                std::ldexp(scale, e4m3 ? -10 : -17);
                    }
                    if (!(err <= bound)) bad++;
                }
                CHECK(bad == 0);
                // and on average far below the worst case (zero rows: exact)
                if (kind == 1) CHECK(rms_err == 0);
                if (kind == 0) {
                    MESSAGE(std::string(tr.name) << " n=" << n << " normal data: relative RMS error " << std::sqrt(rms_err / rms_x));
                    CHECK(std::sqrt(rms_err / rms_x) < rms_bound(t));
                }
            }
        }
    }
}

TEST_CASE("[ember types] vec_dot equals float64 over the dequantized operands") {
    std::mt19937 rng(41);
    for (ember_type t : k_ember_types) {
        const ember_type_traits & tr = traits(t);
        const ember_type_traits & vd = traits(tr.vec_dot_type);
        for (int64_t n : row_lengths(t)) {
            for (int kind = 0; kind < 6; kind++) {
                for (int ykind : {0, 3}) {
                    CAPTURE(std::string(tr.name));
                    CAPTURE(n);
                    CAPTURE(std::string(k_kind_names[kind]));
                    CAPTURE(ykind);
                    const std::vector<float>   x  = make_row(kind, n, rng);
                    const std::vector<float>   yv = make_row(ykind, n, rng);
                    const std::vector<uint8_t> qx = quantize(t, x);
                    std::vector<uint8_t>       qy(ember_row_size(tr.vec_dot_type, n));
                    vd.from_float(yv.data(), qy.data(), n);
                    const std::vector<double> dx = decode_row(t, qx.data(), n);
                    std::vector<float>        dyf(static_cast<size_t>(n));
                    vd.to_float(qy.data(), dyf.data(), n);
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < n; i++) {
                        ref += dx[i] * dyf[i];
                        mag += std::fabs(dx[i] * dyf[i]);
                    }
                    float s = NAN;
                    tr.vec_dot(n, &s, qx.data(), qy.data());
                    CHECK(std::fabs(s - ref) <= 2e-6 * mag + 1e-30);
                    // and near the unquantized dot product
                    if (kind == 0 && ykind == 0) {
                        double exact = 0, emag = 0;
                        for (int64_t i = 0; i < n; i++) {
                            exact += static_cast<double>(x[i]) * yv[i];
                            emag += std::fabs(static_cast<double>(x[i]) * yv[i]);
                        }
                        CHECK(std::fabs(s - exact) <= 0.1 * emag);
                    }
                }
            }
        }
    }
}

TEST_CASE("[int4] the search beats plain min/max rounding, group by group") {
    std::mt19937 rng(51);
    for (ember_type t : {EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32}) {
        const int G = static_cast<int>(traits(t).block_size);
        for (int kind : {0, 3, 5}) {
            CAPTURE(std::string(traits(t).name));
            CAPTURE(std::string(k_kind_names[kind]));
            const int64_t             n = 128 * 64;
            const std::vector<float>  x = make_row(kind, n, rng);
            const std::vector<uint8_t> q = quantize(t, x);
            const std::vector<double> es = group_errors(x, decode_row(t, q.data(), n), G, nullptr);
            const std::vector<double> em = minmax_group_errors(x, G, nullptr);
            double                    sum_s = 0, sum_m = 0;
            int                       worse = 0;
            for (size_t g = 0; g < es.size(); g++) {
                sum_s += es[g];
                sum_m += em[g];
                if (es[g] > em[g] * (1 + 1e-5)) worse++;  // float scores: equal up to rounding
            }
            MESSAGE(std::string(traits(t).name) << " " << std::string(k_kind_names[kind]) << ": search / min-max squared error = " << sum_s / sum_m);
            CHECK(worse == 0);
            // measured 0.83 / 0.93 / 0.89 (INT4) and 0.75 / 0.83 / 0.81 (INT4_G32): heavy tails
            // leave least to gain (clipping a large value costs more than the finer step saves)
            CHECK(sum_s < (kind == 0 ? 0.9 : 0.97) * sum_m);
        }
    }
}

TEST_CASE("[int4] importance: quantize() lowers the error of the important columns") {
    std::mt19937 rng(61);
    for (ember_type t : {EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32}) {
        const ember_type_traits & tr = traits(t);
        const int64_t             n_per_row = 512, nrows = 64;
        // one column in eight matters 100x more (as a few large activations do)
        std::vector<float> imp(n_per_row, 1.0f);
        for (int64_t i = 0; i < n_per_row; i += 8) imp[i + (i / 8) % 8] = 100.0f;
        std::vector<float> x = make_row(0, n_per_row * nrows, rng);
        const size_t       rs = ember_row_size(t, n_per_row);
        std::vector<uint8_t> q_imp(rs * nrows), q_none(rs * nrows), q_null(rs * nrows);
        tr.quantize(x.data(), q_imp.data(), nrows, n_per_row, imp.data());
        tr.quantize(x.data(), q_null.data(), nrows, n_per_row, nullptr);
        for (int64_t r = 0; r < nrows; r++) tr.from_float(x.data() + r * n_per_row, q_none.data() + r * rs, n_per_row);
        CHECK(q_null == q_none);  // no importance: the same search as from_float

        double hot_imp = 0, hot_none = 0, w_imp = 0, w_none = 0, w_minmax = 0;
        for (int64_t r = 0; r < nrows; r++) {
            const std::vector<double> yi = decode_row(t, q_imp.data() + r * rs, n_per_row);
            const std::vector<double> yn = decode_row(t, q_none.data() + r * rs, n_per_row);
            const std::vector<float>  xr(x.begin() + r * n_per_row, x.begin() + (r + 1) * n_per_row);
            for (int64_t i = 0; i < n_per_row; i++) {
                const double ei = (yi[i] - xr[i]) * (yi[i] - xr[i]), en = (yn[i] - xr[i]) * (yn[i] - xr[i]);
                w_imp += imp[i] * ei;
                w_none += imp[i] * en;
                if (imp[i] > 1) hot_imp += ei, hot_none += en;
            }
            for (double e : minmax_group_errors(xr, static_cast<int>(tr.block_size), imp.data())) w_minmax += e;
        }
        MESSAGE(std::string(tr.name) << ": important columns' squared error with / without importance = " << hot_imp / hot_none
                        << ", weighted error with importance / plain min-max = " << w_imp / w_minmax);
        // measured 0.51 (INT4) and 0.27 (INT4_G32): 16 resp. 4 important columns per group
        CHECK(hot_imp < (tr.block_size == 128 ? 0.65 : 0.4) * hot_none);
        CHECK(w_imp < w_none);
        CHECK(w_imp < 0.8 * w_minmax);
    }
}

TEST_CASE("[int4] constant, zero and degenerate groups") {
    for (ember_type t : {EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32}) {
        const int64_t G = traits(t).block_size;
        CAPTURE(std::string(traits(t).name));
        for (float c : {0.0f, 0.75f, -3.5f, 1e-6f}) {
            const std::vector<float> x(static_cast<size_t>(G), c);
            const std::vector<float> y = dequantize(t, quantize(t, x), G);
            for (float v : y) CHECK(v == ember_half_to_float(ember_float_to_half(c)));
        }
        // two distinct values are both exact (up to fp16)
        std::vector<float> x(static_cast<size_t>(G), 1.0f);
        for (int64_t i = 0; i < G; i += 3) x[i] = -2.0f;
        const std::vector<float> y = dequantize(t, quantize(t, x), G);
        for (int64_t i = 0; i < G; i++) CHECK(y[i] == doctest::Approx(x[i]).epsilon(2e-3));
        // NaN and inf do not break the group
        x[1] = NAN;
        x[2] = INFINITY;
        const std::vector<float> z = dequantize(t, quantize(t, x), G);
        for (int64_t i = 3; i < G; i++) CHECK(z[i] == doctest::Approx(x[i]).epsilon(2e-3));
    }
}

}  // TEST_SUITE
