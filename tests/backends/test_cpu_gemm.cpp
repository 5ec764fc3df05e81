// The prefill GEMM tiles (the `gemm` cells of every CPU kernel table) against the same table's
// vec_dot, and the whole MUL_MAT op at prefill and decode widths against float64 sums of the
// values as stored, for several thread counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend-test-util.h"
#include "backends/cpu_simd/kernels.h"

using namespace ember_test;

namespace {

const ember_type k_gemm_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,  EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0,
                                   EMBER_TYPE_Q8_0, EMBER_TYPE_IQ4_NL, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K,
                                   EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_Q4_1,
                                   EMBER_TYPE_BF16, EMBER_TYPE_IQ4_XS};

// Relative error allowed against sum |w_i x_i|: the tiles may sum in another order and apply
// scales per sub-block; float rounding only (the integer parts are exact).
constexpr double k_rel_tol = 2e-5;

// Rows of `type`, quantized from seeded random floats with the reference codec.
std::vector<uint8_t> make_rows(ember_type type, int64_t k, int64_t n, uint32_t seed) {
    const std::vector<float> f  = random_f32((size_t) (k * n), seed);
    const size_t             rs = ember_row_size(type, k);
    std::vector<uint8_t>     out(rs * n);
    for (int64_t r = 0; r < n; r++) ember_type_get_traits(type)->from_float(f.data() + r * k, out.data() + r * rs, k);
    return out;
}

// sum |a_i b_i| over the values as stored.
double abs_dot(ember_type ta, const uint8_t * a, ember_type tb, const uint8_t * b, int64_t k) {
    const std::vector<double> da = ref_dequant(ta, a, k);
    const std::vector<double> db = ref_dequant(tb, b, k);
    double                    s  = 0.0;
    for (int64_t i = 0; i < k; i++) s += std::fabs(da[i] * db[i]);
    return s;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu] gemm tiles match vec_dot in every kernel table") {
    const ember_cpu_isa isas[] = {EMBER_CPU_ISA_SCALAR, EMBER_CPU_ISA_AVX2, EMBER_CPU_ISA_AVX512, EMBER_CPU_ISA_NEON};
    int                 n_checked = 0;
    for (ember_cpu_isa isa : isas) {
        const ember_cpu_kernel_table * kt = ember_cpu_kernels_for(isa);
        if (!kt) continue;
        for (ember_type type : k_gemm_types) {
            const ember_cpu_type_kernels & kw = kt->of(type);
            if (!kw.gemm) continue;
            const ember_type_traits * tr = ember_type_get_traits(type);
            const ember_type          vt = tr->vec_dot_type;
            const std::string isa_name = kt->name;
            CAPTURE(isa_name);
            const std::string type_name = tr->name;
            CAPTURE(type_name);
            const int64_t bs = tr->block_size == 1 ? 1 : tr->block_size;
            // k of 1..n blocks, across the kernels' 512-element chunks; odd lengths for floats
            const int64_t ks_block[] = {1, 2, 3, 5, 17, 24};
            const int64_t ks_float[] = {1, 7, 16, 33, 100, 530};
            struct shape { int64_t nr, nc; };
            const shape shapes[] = {{1, 1}, {3, 2}, {16, 8}, {17, 9}, {5, 13}, {33, 20}, {64, 64}, {40, 70}};
            uint32_t seed = 100;
            for (int ik = 0; ik < 6; ik++) {
                const int64_t k = bs == 1 ? ks_float[ik] : bs * (bs == 256 ? (ks_block[ik] + 1) / 2 : ks_block[ik]);
                for (const shape & s : shapes) {
                    CAPTURE(k);
                    CAPTURE(s.nr);
                    CAPTURE(s.nc);
                    const size_t               ws = ember_row_size(type, k) + 8;  // strided rows
                    const size_t               xs = ember_row_size(vt, k) + 4;
                    const std::vector<uint8_t> wq = make_rows(type, k, s.nr, seed++);
                    std::vector<uint8_t>       w(ws * s.nr), x(xs * s.nc);
                    for (int64_t r = 0; r < s.nr; r++) {
                        std::memcpy(w.data() + r * ws, wq.data() + r * ember_row_size(type, k), ember_row_size(type, k));
                    }
                    const std::vector<float> xf = random_f32((size_t) (k * s.nc), seed++, -2.0f, 2.0f);
                    for (int64_t c = 0; c < s.nc; c++) kt->of(vt).from_float(xf.data() + c * k, x.data() + c * xs, k);

                    const size_t       ys       = (size_t) s.nr + 3;
                    const float        sentinel = 12345.0f;
                    std::vector<float> y(ys * s.nc, sentinel);
                    kw.gemm(k, s.nr, s.nc, w.data(), ws, x.data(), xs, y.data(), ys);
                    int bad = 0;
                    for (int64_t c = 0; c < s.nc; c++) {
                        for (int64_t r = 0; r < s.nr; r++) {
                            float want;
                            kw.vec_dot(k, &want, w.data() + r * ws, x.data() + c * xs);
                            const double scale = abs_dot(type, w.data() + r * ws, vt, x.data() + c * xs, k);
                            const double got   = y[c * ys + r];
                            if (!(std::fabs(got - want) <= k_rel_tol * scale + 1e-30)) {
                                if (bad++ < 3) {
                                    MESSAGE("row " << r << " col " << c << ": gemm " << got << " vec_dot " << want
                                                   << " sum|xy| " << scale);
                                }
                            }
                        }
                        for (size_t r = s.nr; r < ys; r++) {
                            if (y[c * ys + r] != sentinel) bad++;  // wrote outside the tile
                        }
                    }
                    CHECK(bad == 0);
                    n_checked++;
                }
            }
        }
    }
    MESSAGE("gemm cells checked: " << n_checked << " (shapes x types x tables); active table: "
                                   << std::string(ember_cpu_isa_name()));
}

TEST_CASE("[cpu] mul_mat at prefill and decode widths matches float64, any thread count") {
    const ember_type types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K,
                                EMBER_TYPE_Q5_0, EMBER_TYPE_F16,  EMBER_TYPE_F32,  EMBER_TYPE_Q3_K,
                                EMBER_TYPE_Q2_K, EMBER_TYPE_BF16, EMBER_TYPE_IQ4_XS};  // the last two: no gemm cell
    // (Q4_1 is left out: its Q8_1 activations carry a rounded sum, so float64 on the stored
    // values is not its exact reference)
    const int64_t    ms[]    = {1, 2, 5, 17, 64, 130};
    const int        nths[]  = {1, 2, 3};
    for (ember_type type : types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        const ember_type          vt = tr->vec_dot_type;
        const int64_t             k  = tr->block_size == 256 ? 256 : tr->block_size == 32 ? 96 : 45;
        const int64_t             n  = 71;  // not a multiple of the tiles' 16 rows nor of 64
        for (int64_t m : ms) {
            for (int nth : nths) {
                if (nth == 3 && m != 130 && m != 17) continue;
                const std::string type_name = tr->name;
            CAPTURE(type_name);
                CAPTURE(m);
                CAPTURE(nth);
                // batch dims: w [k, n, 1, 1] broadcast over x [k, m, 2, 1]
                cpu_graph      G(nth);
                ember_tensor * w = G.g.new_tensor(type, k, n, 1, 1);
                ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, k, m, 2, 1);
                ember_tensor * y = ember_mul_mat(G.g, w, x);
                G.g.build_forward(y);
                G.alloc();
                const std::vector<float> wf = random_f32(ember_nelements(w), 7);
                const std::vector<float> xf = random_f32(ember_nelements(x), 8);
                set_floats(w, wf);
                set_floats(x, xf);
                REQUIRE(G.compute() == EMBER_OK);
                const std::vector<float>   got    = get_f32(y);
                const std::vector<uint8_t> wbytes = get_bytes(w);
                const std::vector<double>  wd     = ref_dequant(type, wbytes.data(), ember_nelements(w));
                int                        bad    = 0;
                for (int64_t i3 = 0; i3 < 1; i3++) {
                    for (int64_t i2 = 0; i2 < 2; i2++) {
                        for (int64_t j = 0; j < m; j++) {
                            const int64_t       xo = ((i3 * 2 + i2) * m + j) * k;
                            std::vector<float>  col(xf.begin() + xo, xf.begin() + xo + k);
                            std::vector<double> xr = round_through(vt, col);
                            for (int64_t r = 0; r < n; r++) {
                                double acc = 0.0, mag = 0.0;
                                for (int64_t i = 0; i < k; i++) {
                                    const double p = wd[r * k + i] * xr[i];
                                    acc += p;
                                    mag += std::fabs(p);
                                }
                                const double g = got[((i3 * 2 + i2) * m + j) * n + r];
                                // 1e-4: float accumulation plus, for the SIMD activation
                                // quantizers, an occasional level rounded the other way on a tie
                                if (!(std::fabs(g - acc) <= 1e-4 * mag + 1e-30) && bad++ < 3) {
                                    MESSAGE("batch " << i2 << "," << i3 << " row " << r << " col " << j << ": got " << g
                                                     << " want " << acc);
                                }
                            }
                        }
                    }
                }
                CHECK(bad == 0);
            }
        }
    }
}

}  // TEST_SUITE
