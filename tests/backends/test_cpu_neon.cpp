// NEON-specific checks of the CPU kernel tables (backends/cpu_simd/neon/): which variant the
// CPU gets, and every variant of the kernels (baseline armv8-a, the dot-product extension, the
// int8 matrix-multiply extension), built side by side here so that a CPU with dotprod also
// tests the baseline cells that only older CPUs would run:
//   - dot products of the ggml types and of Ember's own types (INT4, INT4_G32, NF4, FP8) against
//     the scalar table, on rows of odd block counts, random levels / codes and extreme scales;
//   - quantizers, the KV-cache codecs and the FP8 converters bit-identical to the scalar table;
//   - the attention tiles (qk, softmax, pv, exp) against the kernels.h contract computed in
//     double (odd key counts and head sizes, padded strides, -INF masks, fresh running maxima),
//     and the whole attention op on one thread against the reference kernel;
//   - the element-wise row helpers (sum_sq, scale, swiglu) against the scalar table;
//   - the i8mm (SMMLA) prefill tiles (Q4_0, Q5_0, Q8_0, IQ4_NL) against vec_dot, odd tile shapes;
//   - the R16 decode products (gemv_r16 of Q4_0, Q8_0, Q4_K, Q6_K) of both variants against the
//     portable product, on random bytes: every level, 6-bit scale and int8 value, -128 included.
// On other architectures every case skips with a message. (test_cpu_kernels.cpp and
// test_cpu_ember_types.cpp compare the active table of every ISA with the scalar one.)
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attn-test-util.h"
#include "backend-test-util.h"
#include "backends/cpu_simd/cpu-ops.h"
#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/repack.h"
#include "quant/blocks.h"
#include "quant/types.h"

#if defined(__aarch64__) && defined(__linux__)
#    include <sys/auxv.h>
#endif

namespace {

#if defined(__aarch64__)

// A table's cell of a type (kernels.h's of(), with the bounds check that keeps GCC's
// -Warray-bounds quiet about ember_type_cell's -1).
const ember_cpu_type_kernels & cell(const ember_cpu_kernel_table & t, int32_t type) {
    const int32_t c = ember_type_cell(type);
    REQUIRE(c >= 0);
    return t.types[c];
}

bool cpu_has_dotprod() {
#    if defined(__linux__)
    return (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
#    else
    return false;
#    endif
}

bool cpu_has_i8mm() {
#    if defined(__linux__)
    return (getauxval(AT_HWCAP2) & (1ul << 13)) != 0;  // HWCAP2_I8MM
#    else
    return false;
#    endif
}

// The scalar table overwritten by the NEON registration, as kernels.cpp builds it.
ember_cpu_kernel_table neon_table(bool dotprod, bool i8mm = false) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    REQUIRE(scalar != nullptr);
    ember_cpu_kernel_table t = *scalar;
    t.isa                    = EMBER_CPU_ISA_NEON;
    t.name                   = dotprod ? "neon+dotprod" : "neon";
    ember_cpu_register_neon(&t, dotprod, i8mm);
    return t;
}

std::vector<float> random_floats(std::mt19937 & rng, int64_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float>              v(static_cast<size_t>(n));
    for (float & x : v) x = dist(rng);
    return v;
}

std::vector<uint8_t> quantize(int32_t type, const std::vector<float> & x) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    REQUIRE(tr != nullptr);
    REQUIRE((tr->from_float != nullptr));
    std::vector<uint8_t> q(ember_row_size(static_cast<ember_type>(type), static_cast<int64_t>(x.size())));
    tr->from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

std::vector<float> dequantize(int32_t type, const std::vector<uint8_t> & q, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    ember_type_get_traits(type)->to_float(q.data(), y.data(), n);
    return y;
}

// Weight types with a NEON dot product.
const int32_t k_dot_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,  EMBER_TYPE_Q4_0,   EMBER_TYPE_Q4_1,  EMBER_TYPE_Q5_0,
                               EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K,   EMBER_TYPE_Q3_K,  EMBER_TYPE_Q4_K,
                               EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS};

// The dot products of one table against the scalar one, for rows of 1, 3 and 17 blocks (and
// odd lengths for the float types). The integer sums are exact in both, so they differ only by
// float rounding: at most 1e-5 of sum |x_i y_i| (a wrong lane or scale is off by far more).
void check_vec_dots(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    std::mt19937                   rng(1234);
    for (int32_t type : k_dot_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        REQUIRE(tr != nullptr);
        CAPTURE(tr->name);
        REQUIRE((cell(t, type).vec_dot != nullptr));
        CHECK_MESSAGE((cell(t, type).vec_dot != cell(*scalar, type).vec_dot), "no NEON vec_dot registered");
        std::vector<int64_t> lengths = {tr->block_size, 3 * tr->block_size, 17 * tr->block_size};
        if (tr->block_size == 1) lengths.insert(lengths.end(), {7, 33, 4099});
        for (int64_t n : lengths) {
            CAPTURE(n);
            for (int trial = 0; trial < 4; trial++) {
                CAPTURE(trial);
                // trial 3: one zero block in the weights and large activations
                std::vector<float> xf = random_floats(rng, n, 1.0f);
                std::vector<float> yf = random_floats(rng, n, trial == 3 ? 300.0f : 1.0f);
                if (trial == 3) std::fill(xf.begin(), xf.begin() + tr->block_size, 0.0f);
                const std::vector<uint8_t> xq = quantize(type, xf);
                const std::vector<uint8_t> yq = quantize(tr->vec_dot_type, yf);
                const std::vector<float>   xd = dequantize(type, xq, n);
                const std::vector<float>   yd = dequantize(tr->vec_dot_type, yq, n);
                double                     mag = 0.0;
                for (int64_t i = 0; i < n; i++) mag += std::fabs(static_cast<double>(xd[i]) * yd[i]);
                float want = 0.0f, got = 0.0f;
                cell(*scalar, type).vec_dot(n, &want, xq.data(), yq.data());
                cell(t, type).vec_dot(n, &got, xq.data(), yq.data());
                CAPTURE(want);
                CAPTURE(got);
                CHECK(std::fabs(static_cast<double>(got) - want) <= 1e-5 * mag + 1e-30);
            }
        }
    }
}

// Inputs for the quantizers: random rows plus the cases where rounding is decided: exact
// ties of the block scale, +max and -max in one block, zeros, tiny values and huge ones.
std::vector<float> quantizer_input(std::mt19937 & rng) {
    std::vector<float> x = random_floats(rng, 256 * 8, 2.0f);
    for (int i = 0; i < 256; i++) x[256 + i] = static_cast<float>(i % 64 - 32) * 0.5f;  // ties
    x[512] = 30.0f, x[513] = -30.0f;                                                      // +-max, first wins
    x[768 + 5] = -30.0f, x[768 + 40] = 30.0f;
    for (int i = 0; i < 256; i++) x[1024 + i] = 0.0f;                                    // all-zero super-block
    for (int i = 0; i < 32; i++) x[1280 + i] = 1e-30f * static_cast<float>(i - 16);     // tiny
    for (int i = 0; i < 32; i++) x[1312 + i] = 6e4f * static_cast<float>(i - 16);       // huge
    return x;
}

void check_quantizers(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    std::mt19937                   rng(99);
    const std::vector<float>       x = quantizer_input(rng);
    const int64_t                  n = static_cast<int64_t>(x.size());
    for (int32_t type : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_1, EMBER_TYPE_Q8_K, EMBER_TYPE_Q4_0}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        REQUIRE((cell(t, type).from_float != nullptr));
        CHECK_MESSAGE((cell(t, type).from_float != cell(*scalar, type).from_float), "no NEON from_float registered");
        const size_t         bytes = ember_row_size(static_cast<ember_type>(type), n);
        std::vector<uint8_t> want(bytes, 0xa5), got(bytes, 0x5a);
        cell(*scalar, type).from_float(x.data(), want.data(), n);
        cell(t, type).from_float(x.data(), got.data(), n);
        size_t first_diff = bytes;
        for (size_t i = 0; i < bytes && first_diff == bytes; i++) {
            if (want[i] != got[i]) first_diff = i;
        }
        CAPTURE(first_diff);
        CHECK(first_diff == bytes);
    }
    // F16 from a length that is not a multiple of the vector width
    std::vector<ember_half> hw(13), hg(13);
    cell(*scalar, EMBER_TYPE_F16).from_float(x.data(), hw.data(), 13);
    cell(t, EMBER_TYPE_F16).from_float(x.data(), hg.data(), 13);
    CHECK(std::memcmp(hw.data(), hg.data(), sizeof(ember_half) * 13) == 0);
}

// to_float of F16 over every bit pattern (NaNs included), and of Q8_0 / Q4_0 rows.
void check_dequantizers(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    std::vector<ember_half>        h(65536 + 3);
    for (size_t i = 0; i < h.size(); i++) h[i] = static_cast<ember_half>(i);
    const int64_t      nh = static_cast<int64_t>(h.size());
    std::vector<float> want(h.size()), got(h.size());
    REQUIRE((cell(t, EMBER_TYPE_F16).to_float != cell(*scalar, EMBER_TYPE_F16).to_float));
    cell(*scalar, EMBER_TYPE_F16).to_float(h.data(), want.data(), nh);
    cell(t, EMBER_TYPE_F16).to_float(h.data(), got.data(), nh);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);

    // every float that rounds to each half boundary goes back bit-identically too
    std::vector<float> f(h.size());
    std::memcpy(f.data(), want.data(), f.size() * sizeof(float));
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
        uint32_t bits;
        std::memcpy(&bits, &f[i], sizeof(bits));
        bits += 0x1000u;  // a midpoint between two halves (ties to even)
        std::memcpy(&f[i], &bits, sizeof(bits));
    }
    std::vector<ember_half> hw(f.size()), hg(f.size());
    cell(*scalar, EMBER_TYPE_F16).from_float(f.data(), hw.data(), nh);
    cell(t, EMBER_TYPE_F16).from_float(f.data(), hg.data(), nh);
    CHECK(std::memcmp(hw.data(), hg.data(), hw.size() * sizeof(ember_half)) == 0);

    std::mt19937 rng(7);
    for (int32_t type : {EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        REQUIRE((cell(t, type).to_float != cell(*scalar, type).to_float));
        const std::vector<float>   x = random_floats(rng, 32 * 9, 3.0f);
        const std::vector<uint8_t> q = quantize(type, x);
        std::vector<float>         a(x.size()), b(x.size());
        cell(*scalar, type).to_float(q.data(), a.data(), static_cast<int64_t>(x.size()));
        cell(t, type).to_float(q.data(), b.data(), static_cast<int64_t>(x.size()));
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
}


//
// Ember's own types (INT4, INT4_G32, NF4, FP8): both variants against the scalar table.
//

const int32_t k_ember_types[] = {EMBER_TYPE_INT4,         EMBER_TYPE_INT4_G32,    EMBER_TYPE_NF4,
                                 EMBER_TYPE_FP8_E4M3,     EMBER_TYPE_FP8_E5M2,    EMBER_TYPE_FP8_E4M3_ROW,
                                 EMBER_TYPE_FP8_E5M2_ROW};

bool is_fp8(int32_t t) { return t >= EMBER_TYPE_FP8_E4M3 && t <= EMBER_TYPE_FP8_E5M2_ROW; }
bool is_e4m3(int32_t t) { return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E4M3_ROW; }
bool is_fp8_row(int32_t t) { return t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW; }
bool fp8_special(int32_t t, uint8_t c) { return is_e4m3(t) ? (c & 0x7f) == 0x7f : (c & 0x7c) == 0x7c; }

void put_half(uint8_t * p, float v) {
    const ember_half h = ember_float_to_half(v);
    std::memcpy(p, &h, 2);
}

// The payload bytes of a row (levels and codes, not the scales) replaced by random ones: every
// level / code, not only those the quantizer picks. FP8 NaN / inf codes are avoided (the
// products would be NaN); `extreme` also sets far-out INT4 zero-points (the z * sum q8 term
// then dominates and must stay exact) and extreme FP8 block exponents.
void scramble(int32_t type, std::vector<uint8_t> & q, int64_t n, std::mt19937 & rng, bool extreme) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    const int64_t             nb = n / tr->block_size;
    if (type == EMBER_TYPE_INT4 || type == EMBER_TYPE_INT4_G32) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t * blk = q.data() + b * tr->type_size;
            for (size_t i = 4; i < tr->type_size; i++) blk[i] = static_cast<uint8_t>(rng());
            if (extreme) {
                put_half(blk, (rng() & 1) ? 1e-4f : 20.0f);
                put_half(blk + 2, (rng() & 1) ? 1999.0f : -513.5f);
            }
        }
    } else if (type == EMBER_TYPE_NF4) {
        uint8_t * g = q.data();
        for (int64_t g0 = 0; g0 < nb; g0 += 256) {
            const int64_t gb = std::min<int64_t>(256, nb - g0);
            for (int64_t i = 8; i < 8 + 33 * gb; i++) g[i] = static_cast<uint8_t>(rng());
            g += 8 + 33 * gb;
        }
    } else {
        const bool row = is_fp8_row(type);
        for (int64_t i = 0; i < n; i++) {
            uint8_t & c = row ? q[static_cast<size_t>(4 + i)] : q[static_cast<size_t>((i / 32) * 33 + 1 + i % 32)];
            do {
                c = static_cast<uint8_t>(rng());
            } while (fp8_special(type, c));
        }
        if (!row && extreme) {
            for (int64_t b = 0; b < nb; b++) q[static_cast<size_t>(b * 33)] = static_cast<uint8_t>((rng() & 1) ? 1 + rng() % 20 : 200 + rng() % 20);
        }
    }
}

bool same_bits(float a, float b) {  // NaN equals any NaN
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::memcmp(&a, &b, sizeof(float)) == 0;
}

void check_ember_types(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    std::mt19937                   rng(4242);
    for (int32_t type : k_ember_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        REQUIRE(tr != nullptr);
        const std::string type_name = tr->name;
        CAPTURE(type_name);
        CHECK_MESSAGE((cell(t, type).vec_dot != cell(*scalar, type).vec_dot), "no NEON vec_dot registered");
        // 1, 2, 3, 5 and 13 blocks (INT4_G32: its 4-group steps and every tail); NF4 also two
        // row groups (the second one partial)
        std::vector<int64_t> lengths;
        for (int64_t nb : {1, 2, 3, 5, 13}) lengths.push_back(nb * tr->block_size);
        if (type == EMBER_TYPE_NF4) lengths.push_back(257 * 64);
        double worst = 0.0;
        for (int64_t n : lengths) {
            CAPTURE(n);
            for (int trial = 0; trial < 5; trial++) {  // 0, 1: quantized; 2: random payload; 3: extreme; 4: zero row
                CAPTURE(trial);
                std::vector<float> xf = random_floats(rng, n, 1.0f);
                if (trial == 1) xf[static_cast<size_t>(rng() % n)] = 500.0f;  // an outlier
                if (trial == 4) std::fill(xf.begin(), xf.end(), 0.0f);
                std::vector<uint8_t> xq = quantize(type, xf);
                if (trial == 2 || trial == 3) scramble(type, xq, n, rng, trial == 3);
                const std::vector<float>   yf = random_floats(rng, n, trial == 3 ? 40.0f : 1.0f);
                const std::vector<uint8_t> yq = quantize(tr->vec_dot_type, yf);
                const std::vector<float>   xd = dequantize(type, xq, n);
                const std::vector<float>   yd = dequantize(tr->vec_dot_type, yq, n);
                double                     mag = 0.0;
                for (int64_t i = 0; i < n; i++) mag += std::fabs(static_cast<double>(xd[i]) * yd[i]);
                REQUIRE(std::isfinite(mag));
                float want = NAN, got = NAN;
                cell(*scalar, type).vec_dot(n, &want, xq.data(), yq.data());
                cell(t, type).vec_dot(n, &got, xq.data(), yq.data());
                CAPTURE(want);
                CAPTURE(got);
                const double err = std::fabs(static_cast<double>(got) - want);
                CHECK(err <= 1e-5 * mag + 1e-35);
                if (mag > 0) worst = std::max(worst, err / mag);
            }
        }
        MESSAGE(std::string(t.name) << " " << type_name << ": worst |got - want| / sum|xy| = " << worst);
    }
}

// FP8 to_float (every code, random block exponents and row scales, NaN as any NaN) and
// from_float (ties, saturation, subnormals, zeros of both signs, NaN / inf, random bit
// patterns) bit for bit.
void check_fp8_codecs(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    for (int32_t type : k_ember_types) {
        if (!is_fp8(type)) continue;
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        REQUIRE((cell(t, type).to_float != cell(*scalar, type).to_float));
        REQUIRE((cell(t, type).from_float != cell(*scalar, type).from_float));
        const int mbits = is_e4m3(type) ? 3 : 2;
        for (int64_t n : {32, 96, 32 * 9, 32 * 64}) {
            CAPTURE(n);
            std::mt19937 rng(static_cast<uint32_t>(type * 31 + n));
            // to_float over random bytes: every code (NaN, inf), block exponents 0 .. 255
            const size_t         rs = ember_row_size(static_cast<ember_type>(type), n);
            std::vector<uint8_t> q(rs);
            for (uint8_t & b : q) b = static_cast<uint8_t>(rng());
            if (is_fp8_row(type)) {
                const float scale = n == 96 ? 1e-40f : n == 32 ? 3e38f : 0.0123f;  // subnormal, huge, plain
                std::memcpy(q.data(), &scale, 4);
            }
            std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 4, 123.0f);
            cell(*scalar, type).to_float(q.data(), want.data(), n);
            cell(t, type).to_float(q.data(), got.data(), n);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++) {
                if (!same_bits(want[static_cast<size_t>(i)], got[static_cast<size_t>(i)])) bad = i;
            }
            CAPTURE(bad);
            CHECK(bad == -1);
            CHECK(got[static_cast<size_t>(n)] == 123.0f);

            for (int pattern = 0; pattern < 6; pattern++) {
                CAPTURE(pattern);
                std::normal_distribution<float> g(0.0f, 1.0f);
                std::vector<float>              x(static_cast<size_t>(n));
                for (float & v : x) {
                    switch (pattern) {
                        case 0: v = g(rng) * ((rng() % 61) == 0 ? 1000.0f : 1.0f); break;
                        case 1: {  // midpoints between codes at random binades
                            const int E = static_cast<int>(rng() % 24) - 14;
                            const int m = static_cast<int>(rng() % (2u << mbits));
                            v = std::ldexp(static_cast<float>(2 * m + 1), E - mbits - 1) * ((rng() & 1) ? 1.0f : -1.0f);
                            break;
                        }
                        case 2: v = std::ldexp(g(rng), -130 - static_cast<int>(rng() % 15)); break;  // subnormal
                        case 3: v = (rng() & 1) ? 0.0f : -0.0f; break;
                        case 4: {
                            const uint32_t b = rng();
                            std::memcpy(&v, &b, 4);
                            break;
                        }
                        default: v = std::ldexp(g(rng), static_cast<int>(rng() % 250) - 125); break;
                    }
                }
                if (pattern == 0 && n >= 96) {  // saturation: max, beyond max, inf, NaN
                    const float mx = is_e4m3(type) ? 448.0f : 57344.0f;
                    x[1] = mx, x[2] = -mx * 1.01f, x[3] = INFINITY, x[4] = -INFINITY, x[5] = NAN, x[40] = -NAN;
                }
                std::vector<uint8_t> bw(rs), bg(rs + 8, 0xA5);
                cell(*scalar, type).from_float(x.data(), bw.data(), n);
                cell(t, type).from_float(x.data(), bg.data(), n);
                size_t first = rs;
                for (size_t i = 0; i < rs && first == rs; i++) {
                    if (bw[i] != bg[i]) first = i;
                }
                CAPTURE(first);
                CHECK(first == rs);
                CHECK(bg[rs] == 0xA5);
            }
        }
    }
}

//
// Attention tiles (kernels.h's attn cells) against the contract computed in double.
//

struct attn_shape {
    int64_t nk, d, nl;
};

void check_attn(const ember_cpu_kernel_table & t) {
    REQUIRE((t.attn.qk != nullptr));
    REQUIRE((t.attn.softmax != nullptr));
    REQUIRE((t.attn.pv != nullptr));
    REQUIRE((t.attn.exp != nullptr));
    std::mt19937                          rng(77);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    const attn_shape shapes[] = {{1, 1, 16},  {2, 3, 16},   {3, 7, 32},   {5, 4, 48},  {17, 40, 64},
                                 {64, 64, 64}, {67, 67, 80}, {13, 129, 16}, {4, 5, 112}};
    for (const attn_shape & sh : shapes) {
        const int64_t nk = sh.nk, d = sh.d, nl = sh.nl;
        CAPTURE(nk);
        CAPTURE(d);
        CAPTURE(nl);
        const size_t ldk = static_cast<size_t>(d + 3), ldq = static_cast<size_t>(nl + 5), lds = static_cast<size_t>(nl + 2);
        const size_t ldm = static_cast<size_t>(nl + 1), ldv = static_cast<size_t>(d + 1), lda = static_cast<size_t>(nl + 7);
        std::vector<float> k(nk * ldk), qt(d * ldq), v(nk * ldv);
        for (float & f : k) f = u(rng);
        for (float & f : qt) f = u(rng);
        for (float & f : v) f = u(rng);

        // qk: s = K . Q^T (the padding of s must stay untouched)
        const float        sentinel = -777.0f;
        std::vector<float> s(nk * lds, sentinel);
        t.attn.qk(nk, d, k.data(), ldk, qt.data(), ldq, nl, s.data(), lds);
        int bad = 0;
        for (int64_t j = 0; j < nk; j++) {
            for (int64_t l = 0; l < nl; l++) {
                double want = 0.0, mag = 0.0;
                for (int64_t i = 0; i < d; i++) {
                    const double p = static_cast<double>(k[j * ldk + i]) * qt[i * ldq + l];
                    want += p;
                    mag += std::fabs(p);
                }
                if (!(std::fabs(s[j * lds + l] - want) <= 1e-6 * mag + 1e-30)) bad++;
            }
            for (size_t l = static_cast<size_t>(nl); l < lds; l++) bad += s[j * lds + l] != sentinel;
        }
        CHECK_MESSAGE(bad == 0, "qk: " << bad << " wrong scores");

        // softmax: a mask with -INF holes (some queries see no key at all), running maxima that
        // are fresh (-INF), below the scores, or above them
        std::vector<float> mask(nk * ldm, 0.0f), m(nl), lsum(nl), alpha(nl, -5.0f);
        for (int64_t l = 0; l < nl; l++) {
            const int kind = static_cast<int>(l % 5);
            for (int64_t j = 0; j < nk; j++) {
                float & mv = mask[j * ldm + l];
                mv         = kind == 4 ? -INFINITY : (rng() % 4 == 0 ? -INFINITY : (rng() % 3 == 0 ? u(rng) : 0.0f));
            }
            m[l]    = kind == 0 || kind == 4 ? -INFINITY : kind == 1 ? -1.0f : 40.0f;
            lsum[l] = m[l] == -INFINITY ? 0.0f : 1.5f;
        }
        for (int64_t j = 0; j < nk; j++) {  // scores over a wide range, some far below the max
            for (int64_t l = 0; l < nl; l++) s[j * lds + l] = (rng() % 7 == 0) ? -95.0f + u(rng) : 8.0f * u(rng);
        }
        const std::vector<float> s0 = s, m0 = m, l0 = lsum;
        t.attn.softmax(nk, nl, s.data(), lds, mask.data(), ldm, m.data(), lsum.data(), alpha.data());
        auto exp_ref = [](float x) { return x < -87.5f ? 0.0 : std::exp(static_cast<double>(x)); };
        auto close   = [](double got, double want) { return std::fabs(got - want) <= 1e-6 * std::fabs(want) + 1e-30; };
        bad          = 0;
        for (int64_t l = 0; l < nl; l++) {
            float mx = m0[l];
            for (int64_t j = 0; j < nk; j++) mx = std::max(mx, s0[j * lds + l] + mask[j * ldm + l]);
            const float ref = mx == -INFINITY ? 0.0f : mx;
            double      sum = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                const double p = exp_ref((s0[j * lds + l] + mask[j * ldm + l]) - ref);
                sum += p;
                bad += !close(s[j * lds + l], p);
            }
            const double a = exp_ref(m0[l] - ref);
            bad += !(m[l] == mx);
            bad += !close(alpha[l], a);
            bad += !close(lsum[l], l0[l] * a + sum);
            if (l % 5 == 4) bad += !(m[l] == -INFINITY && lsum[l] == 0.0f && alpha[l] == 0.0f);
        }
        CHECK_MESSAGE(bad == 0, "softmax: " << bad << " wrong values");
        // and without a mask
        std::vector<float> s1 = s0, m1 = m0, lsum1 = l0;
        t.attn.softmax(nk, nl, s1.data(), lds, nullptr, 0, m1.data(), lsum1.data(), alpha.data());
        bad = 0;
        for (int64_t l = 0; l < nl; l++) {
            float mx = m0[l];
            for (int64_t j = 0; j < nk; j++) mx = std::max(mx, s0[j * lds + l]);
            for (int64_t j = 0; j < nk; j++) bad += !close(s1[j * lds + l], exp_ref(s0[j * lds + l] - mx));
            bad += !(m1[l] == mx);
        }
        CHECK_MESSAGE(bad == 0, "softmax without mask: " << bad << " wrong values");

        // pv: acc = acc * alpha + V^T . P, with the probabilities of the softmax above
        std::vector<float> acc(d * lda, sentinel);
        for (int64_t i = 0; i < d; i++) {
            for (int64_t l = 0; l < nl; l++) acc[i * lda + l] = u(rng);
        }
        const std::vector<float> acc0 = acc;
        t.attn.pv(nk, d, v.data(), ldv, s.data(), lds, alpha.data(), nl, acc.data(), lda);
        bad = 0;
        for (int64_t i = 0; i < d; i++) {
            for (int64_t l = 0; l < nl; l++) {
                double want = static_cast<double>(acc0[i * lda + l]) * alpha[l], mag = std::fabs(want);
                for (int64_t j = 0; j < nk; j++) {
                    const double p = static_cast<double>(v[j * ldv + i]) * s[j * lds + l];
                    want += p;
                    mag += std::fabs(p);
                }
                if (!(std::fabs(acc[i * lda + l] - want) <= 1e-6 * mag + 1e-30)) bad++;
            }
            for (size_t l = static_cast<size_t>(nl); l < lda; l++) bad += acc[i * lda + l] != sentinel;
        }
        CHECK_MESSAGE(bad == 0, "pv: " << bad << " wrong values");
    }

    // exp: relative error below 3e-7 against double, exactly 0 below -87.5 (and -INF), any n
    std::vector<float> x;
    for (int i = 0; i <= 4000; i++) x.push_back(-100.0f + 0.0275f * static_cast<float>(i));  // [-100, 10]
    for (float e : {-INFINITY, 0.0f, -87.49f, -87.51f, 88.0f, 1e-8f}) x.push_back(e);
    for (int64_t n : {static_cast<int64_t>(x.size()), int64_t{13}, int64_t{5}, int64_t{3}}) {
        CAPTURE(n);
        std::vector<float> y(static_cast<size_t>(n) + 1, -1.0f);
        t.attn.exp(n, x.data() + x.size() - n, y.data());
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float xi = x[x.size() - n + i];
            if (xi < -87.5f) {
                CHECK(y[i] == 0.0f);
                continue;
            }
            const double e = std::exp(static_cast<double>(xi));
            worst          = std::max(worst, std::fabs(y[i] - e) / e);
        }
        CHECK(worst < 3e-7);
        CHECK(y[n] == -1.0f);
    }
}

// The element-wise row helpers against the scalar table: odd lengths, exp's limits in SwiGLU.
void check_vec_ops(const ember_cpu_kernel_table & t) {
    const ember_cpu_kernel_table * ref = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    CHECK((t.vec.sum_sq != ref->vec.sum_sq));
    CHECK((t.vec.scale != ref->vec.scale));
    CHECK((t.vec.swiglu != ref->vec.swiglu));
    std::mt19937       rng(5);
    std::vector<float> g = random_floats(rng, 1031, 8.0f), x = random_floats(rng, 1031, 3.0f);
    const float        edges[] = {100.0f, -100.0f, 0.0f, -88.0f, 89.0f, 87.0f, -87.0f, 150.0f, -150.0f, 1e-30f, -1e-30f};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) g[i * 3] = edges[i];
    for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 33, 1031}) {
        CAPTURE(n);
        const double a = t.vec.sum_sq(n, x.data()), b = ref->vec.sum_sq(n, x.data());
        CHECK(std::fabs(a - b) <= 1e-13 * b + 1e-300);
        std::vector<float> y1(static_cast<size_t>(n) + 1, -7.0f), y2(static_cast<size_t>(n) + 1, -7.0f);
        t.vec.scale(n, x.data(), -1.25f, y1.data());
        ref->vec.scale(n, x.data(), -1.25f, y2.data());
        CHECK(y1 == y2);  // one multiplication each: bit-identical
        t.vec.swiglu(n, g.data(), x.data(), y1.data());
        ref->vec.swiglu(n, g.data(), x.data(), y2.data());
        CHECK(y1[static_cast<size_t>(n)] == -7.0f);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!std::isfinite(y1[i]) || !(std::fabs(y1[i] - y2[i]) <= 1e-6f * std::fabs(y2[i]) + 1e-37f)) {
                if (bad++ < 3) MESSAGE("swiglu g=" << g[i] << " u=" << x[i] << ": " << y1[i] << " want " << y2[i]);
            }
        }
        CHECK(bad == 0);
    }
}


//
// The i8mm (SMMLA) prefill tiles against the same table's vec_dot.
//

void check_gemm(const ember_cpu_kernel_table & t) {
    std::mt19937 rng(31);
    for (int32_t type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0, EMBER_TYPE_Q8_0, EMBER_TYPE_IQ4_NL}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        const ember_cpu_type_kernels & kw = cell(t, type);
        REQUIRE((kw.gemm != nullptr));
        const ember_type wt = static_cast<ember_type>(type);
        for (int64_t k : {32, 64, 96, 160, 32 * 17}) {
            for (int64_t nr : {1, 2, 3, 4, 5, 7, 9, 17}) {
                for (int64_t nc : {1, 2, 3, 4, 6, 11}) {
                    CAPTURE(k);
                    CAPTURE(nr);
                    CAPTURE(nc);
                    const size_t ws = ember_row_size(wt, k) + 6, xs = ember_row_size(EMBER_TYPE_Q8_0, k) + 2;  // strided
                    std::vector<uint8_t> w(ws * nr), x(xs * nc);
                    for (int64_t r = 0; r < nr; r++) {
                        // every level: random floats with a large one in some blocks
                        std::vector<float> f = random_floats(rng, k, 1.0f);
                        if (r % 3 == 1) f[static_cast<size_t>(rng() % k)] = 40.0f;
                        const std::vector<uint8_t> q = quantize(type, f);
                        std::memcpy(w.data() + r * ws, q.data(), q.size());
                    }
                    for (int64_t c = 0; c < nc; c++) {
                        const std::vector<uint8_t> q = quantize(EMBER_TYPE_Q8_0, random_floats(rng, k, c == 2 ? 50.0f : 1.0f));
                        std::memcpy(x.data() + c * xs, q.data(), q.size());
                    }
                    const size_t       ys       = static_cast<size_t>(nr) + 3;
                    const float        sentinel = 4321.0f;
                    std::vector<float> y(ys * nc, sentinel);
                    kw.gemm(k, nr, nc, w.data(), ws, x.data(), xs, y.data(), ys);
                    int bad = 0;
                    for (int64_t c = 0; c < nc; c++) {
                        const std::vector<float> xd = dequantize(EMBER_TYPE_Q8_0, std::vector<uint8_t>(x.begin() + c * xs, x.begin() + (c + 1) * xs), k);
                        for (int64_t r = 0; r < nr; r++) {
                            const std::vector<float> wd = dequantize(type, std::vector<uint8_t>(w.begin() + r * ws, w.begin() + (r + 1) * ws), k);
                            double                   mag = 0.0;
                            for (int64_t i = 0; i < k; i++) mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
                            float want = NAN;
                            kw.vec_dot(k, &want, w.data() + r * ws, x.data() + c * xs);
                            const float got = y[c * ys + r];
                            if (!(std::fabs(static_cast<double>(got) - want) <= 1e-5 * mag + 1e-30)) {
                                if (bad++ < 3) MESSAGE("row " << r << " col " << c << ": gemm " << got << " vec_dot " << want);
                            }
                        }
                        for (size_t r = static_cast<size_t>(nr); r < ys; r++) bad += y[c * ys + r] != sentinel;
                    }
                    CHECK(bad == 0);
                }
            }
        }
    }
}


// The R16 decode products of one table against the portable product (ember_cpu_gemv_r16_ref),
// on weights and activations of random bytes (only the float scales kept sane): every level
// and scale bit pattern and the int8 extremes (-128 * -128 overflows nothing in either
// variant). Groups are stored with a padded stride at an odd address; y past the last group
// must stay untouched.
void check_gemv_r16(const ember_cpu_kernel_table & t) {
    std::mt19937 rng(77);
    auto         bytes = [&](uint8_t * p, size_t n) {
        for (size_t i = 0; i < n; i++) p[i] = static_cast<uint8_t>(rng());
    };
    auto half = [&](uint8_t * p) {  // a random fp16 scale, +-[1/64, 1)
        const float      f = (static_cast<float>(rng() % 1000) / 1000.0f * 0.98f + 0.016f) * (rng() % 2 ? 1.0f : -1.0f);
        const ember_half h = ember_float_to_half(f);
        std::memcpy(p, &h, sizeof(h));
    };
    for (int32_t type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        const ember_type               wt = static_cast<ember_type>(type);
        const ember_type_traits *      tr = ember_type_get_traits(type);
        const ember_cpu_type_kernels & kw = cell(t, type);
        REQUIRE((kw.gemv_r16 != nullptr));
        const size_t bb = tr->type_size;
        for (int64_t nblk : {1, 2, 5}) {
            const int64_t k = nblk * tr->block_size, n = 48, ng = n / 16;
            CAPTURE(k);
            const size_t         rs = ember_row_size(wt, k);
            std::vector<uint8_t> plain(rs * n);
            bytes(plain.data(), plain.size());
            for (int64_t r = 0; r < n; r++) {
                for (int64_t b = 0; b < nblk; b++) {
                    uint8_t * blk = plain.data() + r * rs + b * bb;
                    if (type == EMBER_TYPE_Q6_K) {
                        half(blk + offsetof(ember_block_q6_k, d));
                    } else {
                        half(blk);  // d of Q4_0, Q8_0, Q4_K
                        if (type == EMBER_TYPE_Q4_K) half(blk + offsetof(ember_block_q4_k, dmin));
                    }
                }
            }
            std::vector<uint8_t> packed(plain.size());
            ember_cpu_repack(wt, k, n, plain.data(), packed.data());
            const size_t         stride = 16 * rs + 96;  // padded groups
            std::vector<uint8_t> wbuf(stride * ng + 8, 0xa5);
            uint8_t *            w = wbuf.data() + 3;  // an odd address
            for (int64_t g = 0; g < ng; g++) std::memcpy(w + g * stride, packed.data() + g * 16 * rs, 16 * rs);

            const ember_type     vt = tr->vec_dot_type;
            std::vector<uint8_t> x(ember_row_size(vt, k));
            bytes(x.data(), x.size());
            std::vector<ember_cpu_q8_sum> sums(static_cast<size_t>(k / 32));
            const ember_cpu_q8_sum *      xs = nullptr;
            if (vt == EMBER_TYPE_Q8_0) {
                ember_block_q8_0 * xb = reinterpret_cast<ember_block_q8_0 *>(x.data());
                for (int64_t b = 0; b < k / 32; b++) half(reinterpret_cast<uint8_t *>(&xb[b].d));
                ember_cpu_q8_sums(k, x.data(), sums.data());
                xs = sums.data();
            } else {
                REQUIRE(vt == EMBER_TYPE_Q8_K);
                ember_block_q8_k * xb = reinterpret_cast<ember_block_q8_k *>(x.data());
                for (int64_t b = 0; b < k / 256; b++) {
                    xb[b].d = static_cast<float>(rng() % 1000 + 1) * 1e-5f;
                    for (int j = 0; j < 16; j++) {
                        int s = 0;
                        for (int i = 0; i < 16; i++) s += xb[b].qs[16 * j + i];
                        xb[b].bsums[j] = static_cast<int16_t>(s);
                    }
                }
            }
            std::vector<float> want(n), got(n + 4, 1234.0f);
            ember_cpu_gemv_r16_ref(wt, k, w, stride, ng, x.data(), xs, want.data());
            kw.gemv_r16(k, w, stride, ng, x.data(), xs, got.data());
            for (int i = 0; i < 4; i++) CHECK(got[n + i] == 1234.0f);
            double num = 0.0, den = 0.0;
            int    bad = 0;
            for (int64_t r = 0; r < n; r++) {
                num += (static_cast<double>(got[r]) - want[r]) * (static_cast<double>(got[r]) - want[r]);
                den += static_cast<double>(want[r]) * want[r];
                if (std::fabs(static_cast<double>(got[r]) - want[r]) > 1e-4 * std::fabs(static_cast<double>(want[r])) + 1e-3 &&
                    bad++ < 3) {
                    MESSAGE("row " << r << ": gemv_r16 " << got[r] << " reference " << want[r]);
                }
            }
            CHECK(den > 0.0);
            CHECK(std::sqrt(num / den) < 1e-6);
        }
    }
}

//
// The whole attention op (ops-attention-tiled.cpp) with the NEON table against the reference
// kernel (ember_cpu_attn), on one thread: threads that spin-wait for each other are very slow
// under qemu-user, where test_cpu_attention.cpp's multi-thread cases take minutes.
//

// One case: cache types tk / tv, head size d, kv heads x group query heads, tokens, keys;
// mask 0: none, 1: causal, 2: random holes with whole hidden rows (their output must be 0).
void check_attn_op(const ember_cpu_kernel_table & t, ember_type tk, ember_type tv, int64_t d, int64_t n_head_kv,
                   int64_t group, int64_t n_tokens, int64_t n_kv, int mask_kind, uint32_t seed) {
    CAPTURE(ember_type_get_name(tk));
    CAPTURE(ember_type_get_name(tv));
    CAPTURE(d);
    CAPTURE(group);
    CAPTURE(n_tokens);
    CAPTURE(n_kv);
    CAPTURE(mask_kind);
    using namespace ember_test;
    const int64_t  n_head = n_head_kv * group;
    cpu_graph      G(1);
    ember_tensor * q    = G.g.new_tensor(EMBER_TYPE_F32, d, n_head, n_tokens);
    ember_tensor * k    = G.g.new_tensor(tk, d, n_head_kv, n_kv);
    ember_tensor * v    = G.g.new_tensor(tv, d, n_head_kv, n_kv);
    ember_tensor * mask = mask_kind == 0 ? nullptr : G.g.new_tensor(EMBER_TYPE_F32, n_kv, n_tokens);
    ember_tensor * out  = ember_attn(G.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(d)));
    G.g.build_forward(out);
    G.alloc();
    REQUIRE(ember_cpu_supports_attn(out));
    set_floats(q, random_f32(ember_nelements(q), seed + 1, -2.0f, 2.0f));
    set_floats(k, random_f32(ember_nelements(k), seed + 2, -2.0f, 2.0f));
    set_floats(v, random_f32(ember_nelements(v), seed + 3));
    std::vector<bool> hidden(static_cast<size_t>(n_tokens), false);
    if (mask) {
        std::vector<float> mf(static_cast<size_t>(n_kv * n_tokens), 0.0f);
        std::mt19937       rng(seed + 4);
        for (int64_t tk_i = 0; tk_i < n_tokens; tk_i++) {
            bool all = true;
            for (int64_t j = 0; j < n_kv; j++) {
                float & m = mf[static_cast<size_t>(tk_i * n_kv + j)];
                if (mask_kind == 1) {
                    if (j > n_kv - n_tokens + tk_i) m = -INFINITY;
                } else {
                    const uint32_t r = rng() % 10;
                    m                = r < 3 || tk_i == 1 ? -INFINITY : r == 3 ? -1.5f : 0.0f;
                }
                all = all && m == -INFINITY;
            }
            hidden[static_cast<size_t>(tk_i)] = all;
        }
        set_floats(mask, mf);
    }
    attn_op_runner ref;
    REQUIRE(ref.run(out, nullptr) == EMBER_OK);
    const std::vector<float> want = get_f32(out);
    double                   wmax = 0.0;
    for (float x : want) wmax = std::max(wmax, static_cast<double>(std::fabs(x)));
    std::vector<float> poison(want.size(), NAN);  // every output must be written
    ember_tensor_set(out, poison.data(), 0, poison.size() * sizeof(float));
    attn_op_runner tiled;
    REQUIRE(tiled.run(out, &t) == EMBER_OK);
    const std::vector<float> got = get_f32(out);
    double                   err = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
        err            = std::isnan(e) ? INFINITY : std::max(err, e);
    }
    CHECK(err <= 1e-5 * std::max(wmax, 1e-3));
    for (int64_t tk_i = 0; tk_i < n_tokens; tk_i++) {
        if (!hidden[static_cast<size_t>(tk_i)]) continue;
        for (int64_t i = 0; i < d * n_head; i++) REQUIRE(got[static_cast<size_t>(tk_i * d * n_head + i)] == 0.0f);
    }
}

#endif  // __aarch64__

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu-neon] the NEON table follows the CPU's dot-product flag") {
#if defined(__aarch64__)
    const ember_cpu_kernel_table * t = ember_cpu_kernels_for(EMBER_CPU_ISA_NEON);
    REQUIRE(t != nullptr);
    const bool dotprod = cpu_has_dotprod();
    const std::string name   = t->name;
    const std::string active = ember_cpu_isa_name();
    MESSAGE("this CPU: dotprod " << std::string(dotprod ? "yes" : "no") << ", NEON table " << name << ", active "
                                 << active);
    CHECK(name == (dotprod ? "neon+dotprod" : "neon"));
    // The registered quantized dot products are the variant of this CPU's flag.
    const ember_cpu_kernel_table base = neon_table(false);
    const ember_cpu_kernel_table dp   = neon_table(true);
    for (int32_t type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_XS}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        CHECK((cell(base, type).vec_dot != cell(dp, type).vec_dot));
        CHECK((cell(*t, type).vec_dot == cell((dotprod ? dp : base), type).vec_dot));
    }
    if (std::getenv("EMBER_CPU_ISA") == nullptr) CHECK(ember_cpu_kernels() == t);
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] baseline NEON kernels match the scalar reference") {
#if defined(__aarch64__)
    const ember_cpu_kernel_table t = neon_table(false);
    check_vec_dots(t);
    check_quantizers(t);
    check_dequantizers(t);
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] dot-product (SDOT) kernels match the scalar reference") {
#if defined(__aarch64__)
    if (!cpu_has_dotprod()) {
        MESSAGE("skipped: this CPU has no dot-product extension (run under qemu -cpu max to cover it)");
        return;
    }
    const ember_cpu_kernel_table t = neon_table(true);
    check_vec_dots(t);
    check_quantizers(t);
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] Ember types (INT4, NF4, FP8) match the scalar reference, both variants") {
#if defined(__aarch64__)
    check_ember_types(neon_table(false));
    check_fp8_codecs(neon_table(false));
    if (cpu_has_dotprod()) {
        check_ember_types(neon_table(true));
        check_fp8_codecs(neon_table(true));
    } else {
        MESSAGE("dot-product variant skipped: this CPU has no dot-product extension");
    }
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] attention tiles (qk, softmax, pv, exp) follow the kernels.h contract") {
#if defined(__aarch64__)
    const ember_cpu_kernel_table * t = ember_cpu_kernels_for(EMBER_CPU_ISA_NEON);
    REQUIRE(t != nullptr);
    check_attn(*t);
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] element-wise row helpers (sum_sq, scale, swiglu) match the scalar table") {
#if defined(__aarch64__)
    const ember_cpu_kernel_table * t = ember_cpu_kernels_for(EMBER_CPU_ISA_NEON);
    REQUIRE(t != nullptr);
    check_vec_ops(*t);
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] i8mm (SMMLA) prefill tiles of Q4_0, Q5_0, Q8_0 and IQ4_NL match vec_dot") {
#if defined(__aarch64__)
    // without i8mm there are no NEON gemm cells; the active table follows the CPU's flag
    const ember_cpu_kernel_table plain = neon_table(true, false);
    bool                         none  = true;
    for (int32_t type : k_dot_types) none = none && cell(plain, type).gemm == nullptr;
    CHECK(none);
    const ember_cpu_kernel_table * active = ember_cpu_kernels_for(EMBER_CPU_ISA_NEON);
    REQUIRE(active != nullptr);
    const bool active_has = cell(*active, EMBER_TYPE_Q4_0).gemm != nullptr;
    CHECK(active_has == cpu_has_i8mm());
    if (!cpu_has_i8mm()) {
        MESSAGE("skipped: this CPU has no i8mm (run under qemu -cpu max to cover it)");
        return;
    }
    check_gemm(neon_table(cpu_has_dotprod(), true));
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] R16 decode products (gemv_r16) of both variants match the portable product") {
#if defined(__aarch64__)
    check_gemv_r16(neon_table(false));
    if (cpu_has_dotprod()) {
        check_gemv_r16(neon_table(true));
    } else {
        MESSAGE("dot-product variant skipped: this CPU has no dot-product extension");
    }
    // different kernels per variant, and the active table repacks these types
    CHECK((cell(neon_table(false), EMBER_TYPE_Q4_K).gemv_r16 != cell(neon_table(true), EMBER_TYPE_Q4_K).gemv_r16));
    const int64_t ne[4] = {256, 32, 1, 1};
    if (std::getenv("EMBER_CPU_REPACK") == nullptr && std::getenv("EMBER_CPU_ISA") == nullptr) {
        for (ember_type type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) CHECK(ember_cpu_repack_wanted(type, ne));
    }
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] MUL_MAT over repacked weights with the active table matches the file layout (one thread)") {
#if defined(__aarch64__)
    // test_cpu_repack.cpp runs this on 1-3 threads; here one thread, which qemu-user runs fast
    for (ember_type type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        const std::string type_name = ember_type_get_name(type);
        CAPTURE(type_name);
        REQUIRE((cell(*ember_cpu_kernels(), type).gemv_r16 != nullptr));
        const int64_t              k = 512, n = 64;
        const std::vector<float>   wf = ember_test::random_f32(static_cast<size_t>(k * n), 51);
        const std::vector<uint8_t> plain = quantize(type, wf);
        std::vector<uint8_t>       packed(plain.size());
        ember_cpu_repack(type, k, n, plain.data(), packed.data());
        for (int64_t m : {1, 3}) {  // decode (gemv_r16), prefill (unrepacked rows)
            CAPTURE(m);
            const std::vector<float> xf = ember_test::random_f32(static_cast<size_t>(k * m), 52);
            std::vector<float>       want;
            for (bool rp : {false, true}) {
                CAPTURE(rp);
                ember_test::cpu_graph G(1);
                ember_tensor *        w = G.g.new_tensor(type, k, n);
                ember_tensor *        x = G.g.new_tensor(EMBER_TYPE_F32, k, m);
                ember_tensor *        y = ember_mul_mat(G.g, w, x);
                G.g.build_forward(y);
                G.alloc();
                ember_tensor_set(w, rp ? packed.data() : plain.data(), 0, plain.size());
                if (rp) w->flags |= EMBER_TENSOR_FLAG_CPU_REPACKED;
                ember_test::set_floats(x, xf);
                REQUIRE(G.compute() == EMBER_OK);
                const std::vector<float> got = ember_test::get_f32(y);
                if (!rp) {
                    want = got;
                    continue;
                }
                double num = 0.0, den = 0.0;
                for (size_t i = 0; i < got.size(); i++) {
                    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
                    den += static_cast<double>(want[i]) * want[i];
                }
                CHECK(den > 0.0);
                if (m == 1) {
                    CHECK(std::sqrt(num / den) < 1e-6);  // another float summation order
                } else {
                    CHECK(got == want);  // prefill: the same GEMM on unrepacked rows
                }
            }
        }
    }
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

TEST_CASE("[cpu-neon] the attention op with the NEON tiles matches the reference kernel (one thread)") {
#if defined(__aarch64__)
    const ember_cpu_kernel_table * t = ember_cpu_kernels_for(EMBER_CPU_ISA_NEON);
    REQUIRE(t != nullptr);
    const ember_type types[][2] = {{EMBER_TYPE_F16, EMBER_TYPE_F16},
                                   {EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0},
                                   {EMBER_TYPE_Q4_0, EMBER_TYPE_F16},
                                   {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E4M3},
                                   {EMBER_TYPE_F32, EMBER_TYPE_F32}};
    uint32_t         seed = 500;
    int              ci   = 0;
    for (const auto & tp : types) {
        for (int64_t n_tokens : {1, 5, 70}) {
            for (int64_t n_kv : {1, 37, 129, 300}) {
                const int64_t d     = tp[0] == EMBER_TYPE_F32 && ci % 2 == 1 ? 40 : 64;
                const int64_t group = 1 + ci % 4;
                const int     mask  = n_tokens > n_kv ? 0 : ci % 3;
                check_attn_op(*t, tp[0], tp[1], d, 1 + ci % 2, group, n_tokens, n_kv, mask, seed += 10);
                ci++;
            }
        }
    }
#else
    MESSAGE("skipped: not an aarch64 build");
#endif
}

}  // TEST_SUITE
