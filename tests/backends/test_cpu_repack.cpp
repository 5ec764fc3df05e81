// Weights repacked for the CPU decode kernels (backends/cpu_simd/repack.h): the layout round
// trip, the gemv_r16 kernels of every table against the portable product and vec_dot, and
// MUL_MAT over a repacked weight (decode and prefill, several thread counts) against the
// same matrix in the file layout.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend-test-util.h"
#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/repack.h"
#include "support/data-path.h"

using namespace ember_test;

namespace {

std::vector<uint8_t> quantized(ember_type type, int64_t k, int64_t n, uint32_t seed) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    const std::vector<float>  f  = random_f32(static_cast<size_t>(k * n), seed);
    std::vector<uint8_t>      q(ember_row_size(type, k) * n);
    for (int64_t r = 0; r < n; r++) tr->from_float(f.data() + r * k, q.data() + r * ember_row_size(type, k), k);
    return q;
}

double rel_err(const std::vector<float> & a, const std::vector<float> & b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (double) (a[i] - b[i]) * (a[i] - b[i]);
        den += (double) b[i] * b[i];
    }
    return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu repack] the R16 layout round-trips, in place or not") {
    for (ember_type type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        CAPTURE(ember_type_get_traits(type)->name);
        const int64_t              k = 3 * ember_type_get_traits(type)->block_size, n = 48;  // 3 blocks per row, 3 groups
        const std::vector<uint8_t> plain = quantized(type, k, n, 11);
        std::vector<uint8_t>       packed(plain.size()), back(plain.size());
        ember_cpu_repack(type, k, n, plain.data(), packed.data());
        CHECK(packed != plain);
        std::vector<uint8_t> in_place = plain;
        ember_cpu_repack(type, k, n, in_place.data(), in_place.data());
        CHECK(in_place == packed);
        ember_cpu_unrepack(type, k, n / EMBER_CPU_REPACK_ROWS, packed.data(), back.data());
        CHECK(back == plain);
        const size_t rs = ember_row_size(type, k);
        for (int64_t r = 0; r < n; r++) {  // one row at a time (GET_ROWS)
            std::vector<uint8_t> row(rs);
            ember_cpu_unrepack_row(type, k, packed.data() + r / 16 * 16 * rs, r % 16, row.data());
            CHECK(std::equal(row.begin(), row.end(), plain.begin() + r * rs));
        }
    }
}

TEST_CASE("[cpu repack] only whole 16-row groups of the R16 types are wanted") {
    const int64_t ok[4] = {64, 32, 1, 1}, odd_rows[4] = {64, 40, 1, 1}, batch[4] = {64, 32, 2, 1};
    CHECK_FALSE(ember_cpu_repack_wanted(EMBER_TYPE_Q4_0, odd_rows));
    CHECK_FALSE(ember_cpu_repack_wanted(EMBER_TYPE_Q4_0, batch));
    CHECK_FALSE(ember_cpu_repack_wanted(EMBER_TYPE_Q4_K, ok));  // 64 is not a multiple of 256
    CHECK_FALSE(ember_cpu_repack_wanted(EMBER_TYPE_Q5_K, ok));
    CHECK_FALSE(ember_cpu_repack_wanted(EMBER_TYPE_F16, ok));
    CHECK(ember_cpu_repack_wanted(EMBER_TYPE_Q4_0, ok) == (ember_cpu_kernels()->of(EMBER_TYPE_Q4_0).gemv_r16 != nullptr));
}

TEST_CASE("[cpu repack] gemv_r16 of every table matches the portable product and vec_dot") {
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    REQUIRE(scalar);
    for (ember_type type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        CAPTURE(ember_type_get_traits(type)->name);
        const ember_type vt = ember_type_get_traits(type)->vec_dot_type;
        const int64_t    bs = ember_type_get_traits(type)->block_size;
        for (int64_t nblk : {1, 2, 3, 65}) {  // odd block counts exercise the kernels' tails
            const int64_t k = nblk * bs;
            CAPTURE(k);
            const int64_t              n     = 32;
            const size_t               rs    = ember_row_size(type, k);
            const std::vector<uint8_t> plain = quantized(type, k, n, 21);
            std::vector<uint8_t>       packed(plain.size());
            ember_cpu_repack(type, k, n, plain.data(), packed.data());
            const std::vector<float> xf = random_f32(static_cast<size_t>(k), 22, -2.0f, 2.0f);
            std::vector<uint8_t>     x(ember_row_size(vt, k));
            ember_type_get_traits(vt)->from_float(xf.data(), x.data(), k);
            std::vector<ember_cpu_q8_sum> sums(k / 32);
            if (vt == EMBER_TYPE_Q8_0) ember_cpu_q8_sums(k, x.data(), sums.data());
            const ember_cpu_q8_sum * xs = vt == EMBER_TYPE_Q8_0 ? sums.data() : nullptr;

            std::vector<float> want(n), ref(n);
            for (int64_t r = 0; r < n; r++) scalar->of(type).vec_dot(k, &want[r], plain.data() + r * rs, x.data());
            ember_cpu_gemv_r16_ref(type, k, packed.data(), 16 * rs, n / 16, x.data(), xs, ref.data());
            CHECK(ref == want);
            for (int isa = 0; isa < EMBER_CPU_ISA_COUNT; isa++) {
                const ember_cpu_kernel_table * kt = ember_cpu_kernels_for((ember_cpu_isa) isa);
                if (!kt || !kt->of(type).gemv_r16) continue;
                CAPTURE(kt->name);
                std::vector<float> got(n + 1, -7.0f);  // got[n] must stay untouched
                kt->of(type).gemv_r16(k, packed.data(), 16 * rs, n / 16, x.data(), xs, got.data());
                CHECK(got[n] == -7.0f);
                got.resize(n);
                CHECK(rel_err(got, ref) < 1e-6);
            }
        }
    }
}

TEST_CASE("[cpu repack] gemv_r16 stays exact on extreme levels (random bytes, activations at +-127)") {
    // Every quant byte random (all levels, Q8_0 weights down to -128, K-quant scales and mins at
    // their limits), the fp16 scales set to 1, and activations of +-1 (int8 +-127): the int16
    // sums of the AVX2 kernels and the int32 sums of all kernels must not saturate.
    const ember_cpu_kernel_table * scalar = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    REQUIRE(scalar);
    struct half_at {
        ember_type type;
        int        offs[2];
        int        n;
    };
    for (const half_at & h : {half_at{EMBER_TYPE_Q4_0, {0, 0}, 1}, half_at{EMBER_TYPE_Q8_0, {0, 0}, 1},
                              half_at{EMBER_TYPE_Q4_K, {0, 2}, 2}, half_at{EMBER_TYPE_Q6_K, {208, 0}, 1}}) {
        const ember_type type = h.type;
        CAPTURE(ember_type_get_traits(type)->name);
        const ember_type_traits * tr = ember_type_get_traits(type);
        const int64_t             k = 4 * tr->block_size, n = 32;
        const size_t              rs = ember_row_size(type, k);
        for (int fill : {-1, 0xff, 0x80, 0x7f}) {  // random bytes, then every byte the same
            CAPTURE(fill);
            std::vector<uint8_t>      plain(rs * n);
            std::mt19937              rng(51);
            for (uint8_t & b : plain) b = static_cast<uint8_t>(fill < 0 ? rng() : static_cast<uint32_t>(fill));
            for (int64_t blk = 0; blk < n * (k / tr->block_size); blk++) {
                for (int i = 0; i < h.n; i++) {
                    uint8_t * d = plain.data() + blk * tr->type_size + h.offs[i];
                    d[0] = 0x00, d[1] = 0x3c;  // fp16 1.0
                }
            }
            std::vector<uint8_t> packed(plain.size());
            ember_cpu_repack(type, k, n, plain.data(), packed.data());
            for (float sign : {1.0f, -1.0f}) {
                std::vector<float> xf(k);
                for (int64_t i = 0; i < k; i++) xf[i] = (i % 3 == 0 ? -sign : sign);
                const ember_type     vt = tr->vec_dot_type;
                std::vector<uint8_t> x(ember_row_size(vt, k));
                ember_type_get_traits(vt)->from_float(xf.data(), x.data(), k);
                std::vector<ember_cpu_q8_sum> sums(k / 32);
                if (vt == EMBER_TYPE_Q8_0) ember_cpu_q8_sums(k, x.data(), sums.data());
                const ember_cpu_q8_sum * xs = vt == EMBER_TYPE_Q8_0 ? sums.data() : nullptr;
                std::vector<float>       want(n);
                for (int64_t r = 0; r < n; r++) scalar->of(type).vec_dot(k, &want[r], plain.data() + r * rs, x.data());
                for (int isa = 0; isa < EMBER_CPU_ISA_COUNT; isa++) {
                    const ember_cpu_kernel_table * kt = ember_cpu_kernels_for((ember_cpu_isa) isa);
                    if (!kt || !kt->of(type).gemv_r16) continue;
                    CAPTURE(kt->name);
                    std::vector<float> got(n);
                    kt->of(type).gemv_r16(k, packed.data(), 16 * rs, n / 16, x.data(), xs, got.data());
                    CHECK(rel_err(got, want) < 1e-6);
                }
            }
        }
    }
}

TEST_CASE("[cpu repack] GET_ROWS of a repacked table gives the rows of the file layout") {
    const int64_t              k = 256, n = 48;
    const std::vector<uint8_t> plain = quantized(EMBER_TYPE_Q6_K, k, n, 41);
    std::vector<uint8_t>       packed(plain.size());
    ember_cpu_repack(EMBER_TYPE_Q6_K, k, n, plain.data(), packed.data());
    std::vector<float> want;
    for (bool rp : {false, true}) {
        CAPTURE(rp);
        cpu_graph      G(ember_test_threads(2));
        ember_tensor * t   = G.g.new_tensor(EMBER_TYPE_Q6_K, k, n);
        ember_tensor * ids = G.g.new_tensor(EMBER_TYPE_I32, 5);
        ember_tensor * y   = ember_get_rows(G.g, t, ids);
        G.g.build_forward(y);
        G.alloc();
        ember_tensor_set(t, rp ? packed.data() : plain.data(), 0, plain.size());
        if (rp) t->flags |= EMBER_TENSOR_FLAG_CPU_REPACKED;
        set_i32(ids, {0, 47, 17, 16, 31});
        REQUIRE(G.compute() == EMBER_OK);
        if (rp) {
            CHECK(get_f32(y) == want);
        } else {
            want = get_f32(y);
        }
    }
}

TEST_CASE("[cpu repack] MUL_MAT over a repacked weight matches the file layout") {
    for (ember_type type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        CAPTURE(ember_type_get_traits(type)->name);
        if (!ember_cpu_kernels()->of(type).gemv_r16) {
            MESSAGE("the active CPU kernel table has no R16 kernel for this type: skipped");
            continue;
        }
        const int64_t              k = 768, n = 160;
        const std::vector<uint8_t> plain = quantized(type, k, n, 31);
        std::vector<uint8_t>       packed(plain.size());
        ember_cpu_repack(type, k, n, plain.data(), packed.data());
        for (int64_t m : {1, 3, 7, 40}) {  // decode, vec_dot prefill, gemm prefill
            CAPTURE(m);
            const std::vector<float> xf = random_f32(static_cast<size_t>(k * m), 32);
            std::vector<float>       want;
            for (bool rp : {false, true}) {
                for (int nth : {1, 2, 3}) {
                    if (ember_test_threads(nth) != nth) continue;  // EMBER_TEST_MAX_THREADS (qemu)
                    CAPTURE(rp);
                    CAPTURE(nth);
                    cpu_graph      G(nth);
                    ember_tensor * w = G.g.new_tensor(type, k, n);
                    ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, k, m);
                    ember_tensor * y = ember_mul_mat(G.g, w, x);
                    G.g.build_forward(y);
                    G.alloc();
                    ember_tensor_set(w, rp ? packed.data() : plain.data(), 0, plain.size());
                    if (rp) w->flags |= EMBER_TENSOR_FLAG_CPU_REPACKED;
                    set_floats(x, xf);
                    REQUIRE(G.compute() == EMBER_OK);
                    const std::vector<float> got = get_f32(y);
                    if (want.empty()) {
                        want = got;
                        continue;
                    }
                    if (rp && m == 1) {
                        CHECK(rel_err(got, want) < 1e-6);  // another float summation order
                    } else {
                        CHECK(got == want);  // prefill runs the same GEMM on unrepacked rows
                    }
                }
            }
        }
    }
}

}  // TEST_SUITE
