// NEON-specific checks of the CPU kernel tables (backends/cpu_simd/neon/): which variant the
// CPU gets, and both variants of the quantized dot products (baseline armv8-a and the
// dot-product extension), built side by side here so that a CPU with dotprod also tests the
// baseline cells that only older CPUs would run. Quantizers and the KV-cache codecs must be
// bit-identical to the scalar table. On other architectures every case skips with a message.
// (test_cpu_kernels.cpp compares the active table of every ISA with the scalar one.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu_simd/kernels.h"
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

// The scalar table overwritten by the NEON registration, as kernels.cpp builds it.
ember_cpu_kernel_table neon_table(bool dotprod) {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    REQUIRE(scalar != nullptr);
    ember_cpu_kernel_table t = *scalar;
    t.isa                    = EMBER_CPU_ISA_NEON;
    t.name                   = dotprod ? "neon+dotprod" : "neon";
    ember_cpu_register_neon(&t, dotprod, false);
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

}  // TEST_SUITE
