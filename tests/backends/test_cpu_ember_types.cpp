// The SIMD kernels of Ember's own types (backends/cpu_simd/{avx2,avx512}/ember-types-*.cpp)
// against the scalar table (quant/ref): every ISA table this build and CPU have, every Ember
// type, rows of 1 .. 129 blocks (NF4 also rows of 1, 10 and 257 blocks: one and two row groups),
// realistic data (the reference quantizer) and adversarial data (random levels and codes,
// extreme scales and zero-points, cancelling sums). vec_dot within 1e-5 of sum |x_i y_i|;
// to_float bit for bit (NaN as any NaN); from_float byte for byte.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu_simd/kernels.h"
#include "quant/types.h"

namespace {

const ember_type k_ember_types[] = {EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32,     EMBER_TYPE_NF4,
                                    EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,     EMBER_TYPE_FP8_E4M3_ROW,
                                    EMBER_TYPE_FP8_E5M2_ROW};

const ember_cpu_kernel_table * scalar() { return ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR); }

// K(t, type), with the cell checked (GCC cannot see that every type here has one).
const ember_cpu_type_kernels & K(const ember_cpu_kernel_table * t, int32_t type) {
    const int32_t c = ember_type_cell(type);
    REQUIRE(c >= 0);
    return t->types[c];
}

std::vector<const ember_cpu_kernel_table *> simd_tables() {
    std::vector<const ember_cpu_kernel_table *> v;
    for (int i = EMBER_CPU_ISA_SCALAR + 1; i < EMBER_CPU_ISA_COUNT; i++) {
        if (const ember_cpu_kernel_table * t = ember_cpu_kernels_for(static_cast<ember_cpu_isa>(i))) v.push_back(t);
    }
    return v;
}

bool is_x86_table(const ember_cpu_kernel_table * t) { return t->isa == EMBER_CPU_ISA_AVX2 || t->isa == EMBER_CPU_ISA_AVX512; }

bool is_fp8(ember_type t) {
    return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 || t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW;
}
bool is_e4m3(ember_type t) { return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E4M3_ROW; }
bool is_row_fp8(ember_type t) { return t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW; }

// Row lengths in elements: 1 .. 9, 16, 31, 33 and 129 blocks; NF4 also 10 and 257 blocks
// (16384 + 64 weights: a second row group of one block).
std::vector<int64_t> lengths(ember_type t) {
    const int64_t        bs = ember_type_get_traits(t)->block_size;
    std::vector<int64_t> v;
    for (int64_t nb : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 33, 129}) v.push_back(nb * bs);
    if (t == EMBER_TYPE_NF4) {
        v.push_back(640);
        v.push_back(16384 + 64);
        v.push_back(2 * 16384 + 640);  // three groups, the last one partial
    }
    return v;
}

void put_half(uint8_t * p, float v) {
    const ember_half h = ember_float_to_half(v);
    std::memcpy(p, &h, 2);
}
void put_f32(uint8_t * p, float v) { std::memcpy(p, &v, 4); }

bool fp8_code_is_special(ember_type t, uint8_t c) {
    if (is_e4m3(t)) return (c & 0x7f) == 0x7f;  // NaN
    return (c & 0x7c) == 0x7c;                  // E5M2 inf / NaN
}

// Weights patterns beyond the quantizer's output.
enum wpattern {
    W_GAUSS,      // the reference quantizer on gaussian data
    W_OUTLIER,    // the quantizer on gaussian data with a few values 1000x larger
    W_RANDOM,     // random levels / codes with sane random scales
    W_EXTREME,    // random levels with extreme scales (INT4: zero-points far out; FP8: large/small e)
    W_CANCEL,     // INT4: q = z on most weights (the sum cancels); NF4: offset = -DYN*scale2 on some blocks
    W_MAXLEVEL,   // every level / code at its largest magnitude
    W_COUNT
};
const char * wpattern_name(int p) {
    static const char * n[W_COUNT] = {"gauss", "outlier", "random", "extreme", "cancel", "max-level"};
    return n[p];
}

std::vector<float> gauss(int64_t n, std::mt19937 & rng, float outlier_every = 0) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float>              x(static_cast<size_t>(n));
    for (float & v : x) {
        v = g(rng);
        if (outlier_every > 0 && rng() % static_cast<uint32_t>(outlier_every) == 0) v *= 1000.0f;
    }
    return x;
}

std::vector<uint8_t> quantize_ref(ember_type t, const std::vector<float> & x) {
    std::vector<uint8_t> q(ember_row_size(t, static_cast<int64_t>(x.size())));
    K(scalar(), t).from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

// A weight row of type t, n elements, in pattern p.
std::vector<uint8_t> make_weights(ember_type t, int64_t n, int p, std::mt19937 & rng) {
    if (p == W_GAUSS) return quantize_ref(t, gauss(n, rng));
    if (p == W_OUTLIER) return quantize_ref(t, gauss(n, rng, 61));
    std::vector<uint8_t> q(ember_row_size(t, n));
    for (uint8_t & b : q) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t                         nb = n / ember_type_get_traits(t)->block_size;
    switch (t) {
        case EMBER_TYPE_INT4:
        case EMBER_TYPE_INT4_G32: {
            const size_t bsz = ember_type_get_traits(t)->type_size;
            const size_t nq  = bsz - 4;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t * blk = q.data() + b * bsz;
                float     d = 0.05f * u(rng), z = 7.5f + 10.0f * u(rng);
                if (p == W_EXTREME) {
                    const int k = static_cast<int>(rng() % 4);
                    z           = k == 0 ? 2000.0f * u(rng) : k == 1 ? 1e-3f * u(rng) : k == 2 ? -30.0f : 15.0f + u(rng);
                    d           = (rng() & 1) ? 1e-4f * u(rng) : 30.0f * u(rng);
                }
                if (p == W_CANCEL) {  // levels equal to an integer zero-point, a few off by one
                    const int zi = static_cast<int>(rng() % 16);
                    z            = static_cast<float>(zi);
                    for (size_t i = 0; i < nq; i++) {
                        int lo = zi, hi = zi;
                        if (rng() % 16 == 0) lo = zi > 0 ? zi - 1 : 1;
                        if (rng() % 16 == 0) hi = zi < 15 ? zi + 1 : 14;
                        blk[4 + i] = static_cast<uint8_t>(lo | hi << 4);
                    }
                }
                if (p == W_MAXLEVEL) {
                    z = 0.0f;
                    std::memset(blk + 4, 0xff, nq);
                }
                put_half(blk, d);
                put_half(blk + 2, z);
            }
            break;
        }
        case EMBER_TYPE_NF4: {
            const int64_t gmax = 256;
            uint8_t *     g    = q.data();
            for (int64_t g0 = 0; g0 < nb; g0 += gmax) {
                const int64_t gb     = nb - g0 < gmax ? nb - g0 : gmax;
                float         scale2 = std::fabs(u(rng)), offset = std::fabs(u(rng));
                if (p == W_EXTREME) {
                    scale2 = (rng() & 1) ? 1e-20f : 1e20f;
                    offset = (rng() & 1) ? 1e-20f : -1e10f;
                }
                if (p == W_CANCEL) {  // DYN[255] = 1: absmax = scale2 * 1 + offset = 0 on those blocks
                    scale2 = 0.37f;
                    offset = -0.37f;
                }
                put_f32(g, scale2);
                put_f32(g + 4, offset);
                for (int64_t j = 0; j < gb; j++) {
                    uint8_t * blk = g + 8 + j * 33;
                    if (p == W_CANCEL && (rng() & 1)) blk[0] = 255;
                    if (p == W_MAXLEVEL) {
                        blk[0] = 255;
                        std::memset(blk + 1, (rng() & 1) ? 0xff : 0x00, 32);
                    }
                }
                g += 8 + gb * 33;
            }
            break;
        }
        default: {  // FP8
            const bool row  = is_row_fp8(t);
            uint8_t *  code = row ? q.data() + 4 : q.data() + 1;
            const int  step = row ? 1 : 33;
            for (int64_t i = 0; i < n; i++) {
                uint8_t & c = row ? code[i] : code[(i / 32) * step + i % 32];
                while (fp8_code_is_special(t, c)) c = static_cast<uint8_t>(rng());
                if (p == W_MAXLEVEL) c = static_cast<uint8_t>((is_e4m3(t) ? 0x7e : 0x7b) | (rng() & 0x80));
            }
            if (row) {
                float scale = 0.01f * (1.0f + u(rng));
                if (p == W_EXTREME) scale = (rng() & 1) ? 1e-30f : 1e25f;
                put_f32(q.data(), scale);
            } else {
                for (int64_t b = 0; b < nb; b++) {
                    uint8_t & e = q[static_cast<size_t>(b * 33)];
                    e           = static_cast<uint8_t>(p == W_EXTREME ? ((rng() & 1) ? 1 + rng() % 20 : 200 + rng() % 20)
                                                                      : 110 + rng() % 20);
                    if (p == W_CANCEL) e = 127;
                }
            }
            break;
        }
    }
    return q;
}

// Activations of vec_dot_type vt: gaussian (quantized by the scalar table), or random int8
// with sane scales (-128 included), or every value at the extreme.
std::vector<uint8_t> make_activations(ember_type vt, int64_t n, int mode, std::mt19937 & rng) {
    if (vt == EMBER_TYPE_F32 || mode == 0) {
        std::vector<float> y = gauss(n, rng, mode == 2 ? 17.0f : 0.0f);
        std::vector<uint8_t> b(ember_row_size(vt, n));
        K(scalar(), vt).from_float(y.data(), b.data(), n);
        return b;
    }
    std::vector<uint8_t> b(ember_row_size(vt, n));
    const size_t         bsz = ember_type_get_traits(vt)->type_size;
    const size_t         hdr = bsz - 32;  // Q8_0: d; Q8_1: d, s
    std::uniform_real_distribution<float> u(0.001f, 0.02f);
    for (int64_t blk = 0; blk < n / 32; blk++) {
        uint8_t * p = b.data() + blk * bsz;
        put_half(p, u(rng));
        if (hdr == 4) put_half(p + 2, 0.0f);  // s is not read by these dot products
        for (int i = 0; i < 32; i++) p[hdr + i] = mode == 1 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(0x80);
    }
    return b;
}

std::vector<float> to_floats(ember_type t, const std::vector<uint8_t> & q, int64_t n) {
    std::vector<float> f(static_cast<size_t>(n));
    K(scalar(), t).to_float(q.data(), f.data(), n);
    return f;
}

bool same_bits(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return ua == ub;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu ember types] the x86 tables implement every Ember type") {
    int n_tables = 0;
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        if (!is_x86_table(t)) continue;
        n_tables++;
        for (ember_type ty : k_ember_types) {
            INFO(std::string(t->name) << " " << std::string(ember_type_get_name(ty)));
            // (function pointers compared outside CHECK: doctest cannot print them)
            const bool has_vec_dot = K(t, ty).vec_dot != nullptr && K(t, ty).vec_dot != K(scalar(), ty).vec_dot;
            CHECK(has_vec_dot);
            if (is_fp8(ty)) {
                const bool has_to   = K(t, ty).to_float != K(scalar(), ty).to_float;
                const bool has_from = K(t, ty).from_float != K(scalar(), ty).from_float;
                CHECK(has_to);
                CHECK(has_from);
            }
        }
    }
    if (n_tables == 0) MESSAGE("no AVX2 / AVX-512 table on this machine: nothing to check");
}

TEST_CASE("[cpu ember types] vec_dot of every table matches the scalar reference") {
    int n_rows = 0;
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        for (ember_type ty : k_ember_types) {
            const ember_vec_dot_fn fn = K(t, ty).vec_dot;
            const ember_vec_dot_fn rf = K(scalar(), ty).vec_dot;
            if (fn == rf) continue;
            const ember_type vt = ember_type_get_traits(ty)->vec_dot_type;
            double           worst = 0.0;
            for (int64_t n : lengths(ty)) {
                for (int p = 0; p < W_COUNT; p++) {
                    if (p == W_CANCEL && is_row_fp8(ty)) continue;
                    for (int ym = 0; ym < 3; ym++) {  // activations: gaussian, random bytes, extreme / outliers
                        if (n > 16384 && (p == W_GAUSS || p == W_OUTLIER) && ym > 0) continue;  // time
                        std::mt19937 rng(static_cast<uint32_t>(ty * 7919 + n * 31 + p * 3 + ym));
                        const std::vector<uint8_t> x = make_weights(ty, n, p, rng);
                        const std::vector<uint8_t> y = make_activations(vt, n, ym, rng);
                        const std::vector<float>   xf = to_floats(ty, x, n), yf = to_floats(vt, y, n);
                        double                     sum_abs = 0.0;
                        for (int64_t i = 0; i < n; i++) sum_abs += std::fabs(static_cast<double>(xf[i]) * yf[i]);
                        float want = NAN, got = NAN;
                        rf(n, &want, x.data(), y.data());
                        fn(n, &got, x.data(), y.data());
                        INFO(std::string(t->name) << " " << std::string(ember_type_get_name(ty)) << " n=" << n << " weights="
                                                  << std::string(wpattern_name(p)) << " activations=" << ym << " want=" << want
                                                  << " got=" << got << " sum|xy|=" << sum_abs);
                        REQUIRE(std::isfinite(want));
                        REQUIRE(std::isfinite(sum_abs));
                        const double err = std::fabs(static_cast<double>(got) - want);
                        CHECK(err <= 1e-5 * sum_abs + 1e-35);
                        if (sum_abs > 0) worst = std::fmax(worst, err / sum_abs);
                        n_rows++;
                    }
                }
            }
            MESSAGE(std::string(t->name) << " " << std::string(ember_type_get_name(ty)) << ": worst |got - want| / sum|xy| = " << worst);
        }
    }
    MESSAGE(n_rows << " rows compared");
}

TEST_CASE("[cpu ember types] FP8 to_float of every table is the reference's, bit for bit") {
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        for (ember_type ty : k_ember_types) {
            if (!is_fp8(ty) || K(t, ty).to_float == K(scalar(), ty).to_float) continue;
            for (int64_t n : lengths(ty)) {
                for (int mode = 0; mode < 4; mode++) {  // quantized, random bytes (NaN, inf, e = 0 / 255), extreme scales
                    std::mt19937         rng(static_cast<uint32_t>(ty * 13 + n * 7 + mode));
                    std::vector<uint8_t> q;
                    if (mode == 0) {
                        q = quantize_ref(ty, gauss(n, rng, 61));
                    } else {
                        q.resize(ember_row_size(ty, n));
                        for (uint8_t & b : q) b = static_cast<uint8_t>(rng());
                        if (is_row_fp8(ty)) {
                            const float scales[] = {0.0123f, 1e-40f /* subnormal */, 3e38f, INFINITY, -2.5f};
                            put_f32(q.data(), scales[rng() % 5]);
                        } else if (mode == 3) {
                            for (size_t b = 0; b < q.size(); b += 33) q[b] = static_cast<uint8_t>((rng() & 1) ? rng() % 8 : 247 + rng() % 9);
                        }
                    }
                    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 8, 123.0f);
                    K(scalar(), ty).to_float(q.data(), want.data(), n);
                    K(t, ty).to_float(q.data(), got.data(), n);
                    int64_t bad = -1;
                    for (int64_t i = 0; i < n && bad < 0; i++) {
                        if (!same_bits(want[i], got[i])) bad = i;
                    }
                    INFO(std::string(t->name) << " " << std::string(ember_type_get_name(ty)) << " n=" << n << " mode=" << mode
                                              << " first differing element " << bad
                                              << (bad >= 0 ? " want=" + std::to_string(want[bad]) + " got=" + std::to_string(got[bad]) : ""));
                    CHECK(bad == -1);
                    CHECK(got[static_cast<size_t>(n)] == 123.0f);  // nothing written past the row
                }
            }
        }
    }
}

TEST_CASE("[cpu ember types] FP8 from_float of every table is the reference's, byte for byte") {
    enum { F_GAUSS, F_TIES, F_SATURATE, F_SUBNORMAL, F_ZEROS, F_BITS, F_HUGE_RANGE, F_COUNT };
    static const char * names[F_COUNT] = {"gauss", "ties", "saturate", "subnormal", "zeros", "random-bits", "huge-range"};
    for (const ember_cpu_kernel_table * t : simd_tables()) {
        for (ember_type ty : k_ember_types) {
            if (!is_fp8(ty) || K(t, ty).from_float == K(scalar(), ty).from_float) continue;
            const int mbits = is_e4m3(ty) ? 3 : 2;
            for (int64_t n : lengths(ty)) {
                for (int p = 0; p < F_COUNT; p++) {
                    std::mt19937                    rng(static_cast<uint32_t>(ty * 101 + n * 3 + p));
                    std::normal_distribution<float> g(0.0f, 1.0f);
                    std::vector<float>              x(static_cast<size_t>(n));
                    for (int64_t i = 0; i < n; i++) {
                        float v = 0.0f;
                        switch (p) {
                            case F_GAUSS: v = g(rng) * ((rng() % 61) == 0 ? 1000.0f : 1.0f); break;
                            case F_TIES: {  // midpoints between codes (m + 1/2 ulps) at random binades
                                const int E = static_cast<int>(rng() % 24) - 14;
                                const int m = static_cast<int>(rng() % (2u << mbits));
                                v = std::ldexp(static_cast<float>(2 * m + 1), E - mbits - 1) * ((rng() & 1) ? 1.0f : -1.0f);
                                break;
                            }
                            case F_SATURATE: v = (rng() & 1 ? 1.0f : -1.0f) * (is_e4m3(ty) ? 440.0f + static_cast<float>(rng() % 20)
                                                                                             : 57000.0f + static_cast<float>(rng() % 4000));
                                break;
                            case F_SUBNORMAL: v = std::ldexp(g(rng), -130 - static_cast<int>(rng() % 15)); break;
                            case F_ZEROS: v = (rng() & 1) ? 0.0f : -0.0f; break;
                            case F_BITS: {
                                const uint32_t b = rng();
                                std::memcpy(&v, &b, 4);
                                break;
                            }
                            case F_HUGE_RANGE: v = std::ldexp(g(rng), static_cast<int>(rng() % 250) - 125); break;
                        }
                        x[static_cast<size_t>(i)] = v;
                    }
                    if (p == F_SATURATE) {  // one large value per block keeps the others near max
                        for (int64_t i = 0; i < n; i += 32) x[static_cast<size_t>(i)] = is_e4m3(ty) ? 448.0f : 57344.0f;
                        if (n > 64) x[5] = INFINITY, x[6] = -INFINITY, x[7] = NAN, x[8] = -NAN;
                    }
                    const size_t         rs = ember_row_size(ty, n);
                    std::vector<uint8_t> want(rs), got(rs + 16, 0xA5);
                    K(scalar(), ty).from_float(x.data(), want.data(), n);
                    K(t, ty).from_float(x.data(), got.data(), n);
                    size_t bad = rs;
                    for (size_t i = 0; i < rs && bad == rs; i++) {
                        if (want[i] != got[i]) bad = i;
                    }
                    INFO(std::string(t->name) << " " << std::string(ember_type_get_name(ty)) << " n=" << n << " pattern=" << std::string(names[p])
                                              << " first differing byte " << bad << " of " << rs);
                    CHECK(bad == rs);
                    CHECK(got[rs] == 0xA5);  // nothing written past the row
                }
            }
        }
    }
}

}  // TEST_SUITE
