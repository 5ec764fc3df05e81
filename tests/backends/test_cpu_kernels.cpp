// Every CPU kernel table this build and this CPU have (AVX2, AVX-512, NEON) against the scalar
// table: dot products within a tolerance relative to sum |x_i y_i|, converters byte for byte.
// Only the generic table API is used, so the same test runs on x86 and on aarch64 (qemu).
// A cell that an ISA leaves at the scalar kernel is skipped (nothing to compare).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu_simd/kernels.h"
#include "quant/types.h"

namespace {

const ember_cpu_kernel_table * scalar_table() { return ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR); }

std::vector<const ember_cpu_kernel_table *> simd_tables() {
    std::vector<const ember_cpu_kernel_table *> v;
    for (int i = EMBER_CPU_ISA_SCALAR + 1; i < EMBER_CPU_ISA_COUNT; i++) {
        if (const ember_cpu_kernel_table * t = ember_cpu_kernels_for(static_cast<ember_cpu_isa>(i))) v.push_back(t);
    }
    return v;
}

std::string table_names() {
    std::string s = "scalar";
    for (const ember_cpu_kernel_table * t : simd_tables()) s += std::string(", ") + t->name;
    return s;
}

// Float test rows. Each pattern targets a way a SIMD kernel can drift from the reference.
enum pattern {
    P_GAUSS,      // realistic
    P_ZERO,       // all zero (scales 0, id 0)
    P_NEG_ZERO,   // all -0.0 (the sign of a zero scale)
    P_MAX,        // every value +-the same magnitude (ties for the signed maximum, saturated levels)
    P_OUTLIER,    // gaussian with a few values 1000x larger
    P_HALF_INT,   // multiples of 0.5 with a block maximum of 127 or -8: exact ties for the rounding
    P_TINY,       // 1e-6 scale
    P_HUGE,       // up to 1e30 (half scales overflow to inf)
    P_COUNT
};

const char * pattern_name(int p) {
    static const char * names[P_COUNT] = {"gauss", "zero", "-zero", "max", "outlier", "half-int", "tiny", "huge"};
    return names[p];
}

std::vector<float> make_floats(int p, int64_t n, uint32_t seed) {
    std::mt19937                    rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float>              x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
        float v = 0.0f;
        switch (p) {
            case P_GAUSS: v = g(rng); break;
            case P_ZERO: v = 0.0f; break;
            case P_NEG_ZERO: v = -0.0f; break;
            case P_MAX: v = (rng() & 1) ? 3.5f : -3.5f; break;
            case P_OUTLIER: v = g(rng) * ((rng() % 61) == 0 ? 1000.0f : 1.0f); break;
            case P_HALF_INT: {
                const int k = static_cast<int>(rng() % 33);
                if (k == 0) v = (rng() & 1) ? 127.0f : -8.0f;
                else v = 0.5f * static_cast<float>(static_cast<int>(rng() % 255) - 127);
                break;
            }
            case P_TINY: v = 1e-6f * g(rng); break;
            case P_HUGE: v = 1e30f * g(rng); break;
        }
        x[static_cast<size_t>(i)] = v;
    }
    if (p == P_HALF_INT) {  // every 32 a maximum of 127 (Q8: d = 1) and one of -8 (Q4_0: d = 1)
        for (int64_t i = 0; i + 1 < n; i += 32) {
            x[static_cast<size_t>(i)]     = 127.0f;
            x[static_cast<size_t>(i + 1)] = -8.0f;
        }
    }
    return x;
}

std::vector<uint8_t> quantize(const ember_cpu_kernel_table * t, int32_t type, const std::vector<float> & x) {
    const int64_t        n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(ember_row_size(static_cast<ember_type>(type), n) + 64, 0xA5);
    t->of(type).from_float(x.data(), q.data(), n);
    q.resize(ember_row_size(static_cast<ember_type>(type), n));
    return q;
}

std::vector<float> dequantize(int32_t type, const std::vector<uint8_t> & q, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    scalar_table()->of(type).to_float(q.data(), y.data(), n);
    return y;
}

// Overwrites the fp16 scales of a block-quantized row filled with random bytes by sane values,
// so random levels get a finite result. Returns false for a type whose layout this test does not
// know (those are tested through their quantizer only).
bool sanitize_scales(int32_t type, std::vector<uint8_t> & q, std::mt19937 & rng) {
    size_t              block = 0;
    std::vector<size_t> offs;
    switch (type) {
        case EMBER_TYPE_Q4_0: block = sizeof(ember_block_q4_0), offs = {0}; break;
        case EMBER_TYPE_Q5_0: block = sizeof(ember_block_q5_0), offs = {0}; break;
        case EMBER_TYPE_Q8_0: block = sizeof(ember_block_q8_0), offs = {0}; break;
        case EMBER_TYPE_IQ4_NL: block = sizeof(ember_block_iq4_nl), offs = {0}; break;
        case EMBER_TYPE_Q4_1: block = sizeof(ember_block_q4_1), offs = {0, 2}; break;
        case EMBER_TYPE_Q5_1: block = sizeof(ember_block_q5_1), offs = {0, 2}; break;
        case EMBER_TYPE_Q2_K:
            block = sizeof(ember_block_q2_k), offs = {offsetof(ember_block_q2_k, d), offsetof(ember_block_q2_k, dmin)};
            break;
        case EMBER_TYPE_Q3_K: block = sizeof(ember_block_q3_k), offs = {offsetof(ember_block_q3_k, d)}; break;
        case EMBER_TYPE_Q4_K: block = sizeof(ember_block_q4_k), offs = {0, 2}; break;
        case EMBER_TYPE_Q5_K: block = sizeof(ember_block_q5_k), offs = {0, 2}; break;
        case EMBER_TYPE_Q6_K: block = sizeof(ember_block_q6_k), offs = {offsetof(ember_block_q6_k, d)}; break;
        case EMBER_TYPE_IQ4_XS: block = sizeof(ember_block_iq4_xs), offs = {0}; break;
        case EMBER_TYPE_INT4: block = sizeof(ember_block_int4), offs = {0, 2}; break;  // d, z
        case EMBER_TYPE_INT4_G32: block = sizeof(ember_block_int4_g32), offs = {0, 2}; break;
        default: return false;
    }
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (size_t b = 0; b + block <= q.size(); b += block) {
        for (size_t o : offs) {
            const ember_half h = ember_float_to_half(u(rng));
            std::memcpy(&q[b + o], &h, sizeof(h));
        }
    }
    return true;
}

// Row lengths: 1, 2, 3, 7, 16 blocks and an odd large count (elements for the float types).
std::vector<int64_t> lengths(int32_t type) {
    const int64_t bs = ember_type_get_traits(type)->block_size;
    if (bs == 1) return {1, 2, 3, 7, 16, 31, 33, 257, 4099};
    return {bs, 2 * bs, 3 * bs, 7 * bs, 16 * bs, 129 * bs};
}

bool same_float_bits(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return ua == ub;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu kernels] the tables exist and name their ISA") {
    REQUIRE(scalar_table() != nullptr);
    CHECK(std::string(scalar_table()->name) == "scalar");
    REQUIRE(ember_cpu_kernels() != nullptr);
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        CHECK(ember_cpu_kernels_for(t->isa) == t);
        CHECK(std::string(t->name).size() > 0);
    }
    MESSAGE("CPU kernel tables tested: " << table_names() << " (active: " << std::string(ember_cpu_isa_name()) << ")");
}

TEST_CASE("[cpu kernels] vec_dot of every table matches the scalar table") {
    const ember_cpu_kernel_table * ref = scalar_table();
    int                            n_checked = 0;
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        int n_types = 0;
        for (int32_t c = 0; c < EMBER_TYPE_CELLS; c++) {
            const int32_t             type = ember_type_of_cell(c);
            const ember_type_traits * tr   = ember_type_get_traits(type);
            if (!tr || !t->types[c].vec_dot || t->types[c].vec_dot == ref->types[c].vec_dot) continue;
            const int32_t vt  = tr->vec_dot_type;
            const bool    flt = !tr->is_quantized;
            n_types++;
            for (int64_t n : lengths(type)) {
                for (int p = 0; p < P_COUNT + 1; p++) {  // P_COUNT: random level bytes
                    if (flt && p == P_HUGE) continue;      // float products overflow alike
                    if (!flt && (p == P_HUGE || p == P_TINY)) continue;
                    const uint32_t       seed = static_cast<uint32_t>(c * 7919 + n * 31 + p);
                    std::vector<uint8_t> xq;
                    if (p == P_COUNT) {
                        if (flt) continue;
                        std::mt19937 rng(seed);
                        xq.resize(ember_row_size(static_cast<ember_type>(type), n));
                        for (uint8_t & b : xq) b = static_cast<uint8_t>(rng());
                        if (!sanitize_scales(type, xq, rng)) continue;
                    } else {
                        xq = quantize(ref, type, make_floats(p, n, seed));
                    }
                    // activations: realistic unless the pattern is about them too
                    const int                  py = (p == P_MAX || p == P_ZERO || p == P_OUTLIER) ? p : P_GAUSS;
                    const std::vector<uint8_t> yq = quantize(ref, vt, make_floats(py, n, seed + 1));

                    const std::vector<float> xf = dequantize(type, xq, n);
                    const std::vector<float> yf = dequantize(vt, yq, n);
                    double                   sum_abs = 0.0;
                    for (int64_t i = 0; i < n; i++) sum_abs += std::fabs(static_cast<double>(xf[i]) * yf[i]);

                    float want = 0.0f, got = 0.0f;
                    ref->types[c].vec_dot(n, &want, xq.data(), yq.data());
                    t->types[c].vec_dot(n, &got, xq.data(), yq.data());
                    const double tol = (flt ? 2e-5 : 1e-5) * sum_abs + 1e-30;
                    INFO(std::string(t->name) << " " << std::string(tr->name) << " n=" << n << " pattern="
                                 << std::string(p == P_COUNT ? "random-bytes" : pattern_name(p)) << " want=" << want
                                 << " got=" << got << " sum|xy|=" << sum_abs);
                    REQUIRE(std::isfinite(want));
                    CHECK(std::fabs(static_cast<double>(got) - want) <= tol);
                    n_checked++;
                }
            }
        }
        MESSAGE(std::string(t->name) << ": vec_dot of " << n_types << " types checked against scalar");
    }
    if (simd_tables().empty()) MESSAGE("no SIMD kernel table on this machine: nothing to compare");
    MESSAGE(n_checked << " vec_dot rows compared");
}

TEST_CASE("[cpu kernels] from_float of every table gives the scalar table's bytes") {
    const ember_cpu_kernel_table * ref = scalar_table();
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        int n_types = 0;
        for (int32_t c = 0; c < EMBER_TYPE_CELLS; c++) {
            const int32_t             type = ember_type_of_cell(c);
            const ember_type_traits * tr   = ember_type_get_traits(type);
            if (!tr || !t->types[c].from_float || t->types[c].from_float == ref->types[c].from_float) continue;
            n_types++;
            for (int64_t n : lengths(type)) {
                for (int p = 0; p <= P_COUNT; p++) {  // P_COUNT: random float bits (NaN, inf, subnormal)
                    if (p == P_COUNT && tr->is_quantized) continue;  // NaN levels are undefined in the reference
                    std::vector<float> x;
                    if (p == P_COUNT) {
                        std::mt19937 rng(static_cast<uint32_t>(c * 131 + n));
                        x.resize(static_cast<size_t>(n));
                        for (float & v : x) {
                            const uint32_t bits = rng();
                            std::memcpy(&v, &bits, 4);
                        }
                    } else {
                        x = make_floats(p, n, static_cast<uint32_t>(c * 977 + n * 13 + p));
                    }
                    const std::vector<uint8_t> want = quantize(ref, type, x);
                    const std::vector<uint8_t> got  = quantize(t, type, x);
                    size_t                     first_diff = want.size();
                    for (size_t i = 0; i < want.size(); i++) {
                        if (want[i] != got[i]) {
                            first_diff = i;
                            break;
                        }
                    }
                    INFO(std::string(t->name) << " " << std::string(tr->name) << " n=" << n << " pattern="
                                 << std::string(p == P_COUNT ? "random-bits" : pattern_name(p)) << " first differing byte "
                                 << first_diff << " of " << want.size());
                    CHECK(first_diff == want.size());
                }
            }
        }
        MESSAGE(std::string(t->name) << ": from_float of " << n_types << " types checked byte for byte");
    }
}

TEST_CASE("[cpu kernels] to_float of every table gives the scalar table's floats") {
    const ember_cpu_kernel_table * ref = scalar_table();
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        int n_types = 0;
        for (int32_t c = 0; c < EMBER_TYPE_CELLS; c++) {
            const int32_t             type = ember_type_of_cell(c);
            const ember_type_traits * tr   = ember_type_get_traits(type);
            if (!tr || !t->types[c].to_float || t->types[c].to_float == ref->types[c].to_float) continue;
            n_types++;
            for (int64_t n : lengths(type)) {
                for (int mode = 0; mode < 2; mode++) {  // 0: quantized gaussian, 1: random bytes
                    std::vector<uint8_t> q;
                    if (mode == 0) {
                        q = quantize(ref, type, make_floats(P_OUTLIER, n, static_cast<uint32_t>(c + n)));
                    } else {
                        if (ember_type_has_row_groups(type)) continue;
                        std::mt19937 rng(static_cast<uint32_t>(c * 17 + n));
                        q.resize(ember_row_size(static_cast<ember_type>(type), n));
                        for (uint8_t & b : q) b = static_cast<uint8_t>(rng());
                    }
                    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 16, 123.0f);
                    ref->types[c].to_float(q.data(), want.data(), n);
                    t->types[c].to_float(q.data(), got.data(), n);
                    int64_t bad = -1;
                    for (int64_t i = 0; i < n && bad < 0; i++) {
                        if (!same_float_bits(want[i], got[i])) bad = i;
                    }
                    INFO(std::string(t->name) << " " << std::string(tr->name) << " n=" << n << (mode ? " random bytes" : " quantized")
                                 << " first differing element " << bad);
                    CHECK(bad == -1);
                    CHECK(got[static_cast<size_t>(n)] == 123.0f);  // nothing written past the row
                }
            }
        }
        MESSAGE(std::string(t->name) << ": to_float of " << n_types << " types checked bit for bit");
    }
}

}  // TEST_SUITE
