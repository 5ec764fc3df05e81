// The CPU backend's decode-shaped paths: element-wise ops on a single row cut into column
// slices across threads, the vec row helpers of every ISA table against the scalar one, and
// the decode matmul's dynamic row chunks against a one-thread run.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "backend-test-util.h"
#include "backends/cpu_simd/kernels.h"

using namespace ember_test;

TEST_SUITE("backends") {

TEST_CASE("[cpu] single-row element-wise ops split over threads match float64") {
    const int64_t n = 1000;  // not a multiple of 16: the last slice is partial
    for (int nth : {1, 2, 3, 5}) {
        CAPTURE(nth);
        cpu_graph      G(nth);
        ember_tensor * x  = G.g.new_tensor(EMBER_TYPE_F32, n, 1);
        ember_tensor * w  = G.g.new_tensor(EMBER_TYPE_F32, n, 1);
        ember_tensor * w4 = G.g.new_tensor(EMBER_TYPE_F32, 4, 1);  // repeated within the row
        ember_tensor * nm = ember_rms_norm(G.g, x, 1e-5f);
        ember_tensor * ml = ember_mul(G.g, nm, w);
        ember_tensor * ad = ember_add(G.g, ml, w4);
        ember_tensor * sw = ember_swiglu(G.g, ad, x);
        ember_tensor * sc = ember_scale(G.g, sw, 0.75f);
        G.g.build_forward(sc);
        G.alloc();
        const std::vector<float> xf  = random_f32(n, 61, -3.0f, 3.0f);
        const std::vector<float> wf  = random_f32(n, 62);
        const std::vector<float> w4f = random_f32(4, 63);
        set_floats(x, xf);
        set_floats(w, wf);
        set_floats(w4, w4f);
        REQUIRE(G.compute() == EMBER_OK);

        double ss = 0.0;
        for (float v : xf) ss += (double) v * v;
        const double        scale = 1.0 / std::sqrt(ss / n + 1e-5);
        std::vector<double> want_nm(n), want_ml(n), want_ad(n), want_sw(n), want_sc(n);
        const std::vector<float> got_ad = get_f32(ad);
        for (int64_t i = 0; i < n; i++) {
            want_nm[i] = xf[i] * scale;
            want_ml[i] = want_nm[i] * wf[i];
            want_ad[i] = want_ml[i] + w4f[i % 4];
            // swiglu from the computed add (float inputs), so only swiglu's own error counts
            const double g = got_ad[i];
            want_sw[i]     = g / (1.0 + std::exp(-g)) * xf[i];
            want_sc[i]     = want_sw[i] * 0.75;
        }
        CHECK(nmse(get_f32(nm), want_nm) < 1e-12);
        CHECK(nmse(get_f32(ml), want_ml) < 1e-12);
        CHECK(nmse(got_ad, want_ad) < 1e-12);
        CHECK(nmse(get_f32(sw), want_sw) < 1e-12);
        CHECK(nmse(get_f32(sc), want_sc) < 1e-12);
    }
}

TEST_CASE("[cpu] vec row helpers of every ISA match the scalar table") {
    const ember_cpu_kernel_table * ref = ember_cpu_kernels_for(EMBER_CPU_ISA_SCALAR);
    REQUIRE(ref);
    std::vector<float> g = random_f32(301, 71, -20.0f, 20.0f);
    g[0] = 100.0f, g[1] = -100.0f, g[2] = 0.0f, g[3] = -88.0f, g[4] = 89.0f;  // exp's limits
    const std::vector<float> u = random_f32(301, 72);
    for (int isa = 0; isa < EMBER_CPU_ISA_COUNT; isa++) {
        const ember_cpu_kernel_table * kt = ember_cpu_kernels_for((ember_cpu_isa) isa);
        if (!kt) continue;
        CAPTURE(kt->name);
        const bool filled = kt->vec.sum_sq && kt->vec.scale && kt->vec.swiglu;
        REQUIRE(filled);
        for (int64_t n : {0, 1, 15, 16, 17, 301}) {
            CAPTURE(n);
            const double a = kt->vec.sum_sq(n, u.data()), b = ref->vec.sum_sq(n, u.data());
            CHECK(std::fabs(a - b) <= 1e-12 * (1.0 + b));
            std::vector<float> y1(n + 1, -7.0f), y2(n + 1, -7.0f);  // y[n] must stay untouched
            kt->vec.scale(n, u.data(), 1.5f, y1.data());
            ref->vec.scale(n, u.data(), 1.5f, y2.data());
            CHECK(y1 == y2);
            kt->vec.swiglu(n, g.data(), u.data(), y1.data());
            ref->vec.swiglu(n, g.data(), u.data(), y2.data());
            CHECK(y1[n] == -7.0f);
            for (int64_t i = 0; i < n; i++) {
                CAPTURE(g[i]);
                CHECK(std::isfinite(y1[i]));
                CHECK(std::fabs(y1[i] - y2[i]) <= 1e-6f * std::fabs(y2[i]) + 1e-30f);
            }
        }
    }
}

TEST_CASE("[cpu] decode mul_mat: row chunks over threads give the one-thread result") {
    for (ember_type type : {EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_F32}) {
        CAPTURE(ember_type_get_traits(type)->name);
        const int64_t      k = 256, n = 1003;  // n: many chunks and a partial last one
        std::vector<float> ref;
        for (int nth : {1, 2, 3}) {
            CAPTURE(nth);
            cpu_graph      G(nth);
            ember_tensor * w = G.g.new_tensor(type, k, n);
            ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, k, 1, 2);  // two matrices of one column
            ember_tensor * y = ember_mul_mat(G.g, w, x);
            G.g.build_forward(y);
            G.alloc();
            set_floats(w, random_f32(ember_nelements(w), 81));
            set_floats(x, random_f32(ember_nelements(x), 82));
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float> got = get_f32(y);
            if (nth == 1) {
                ref = got;
                double s = 0.0;
                for (float v : got) s += std::fabs(v);
                CHECK(s > 0.0);  // something was computed
            } else {
                CHECK(got == ref);  // each output is one vec_dot whichever thread takes it
            }
        }
    }
}

TEST_CASE("[cpu] decode block with barrier-free groups gives the one-thread result") {
    // x -> norm -> three matmuls of one column (one barrier-free group), two ropes-free adds,
    // gate/up-like matmuls, swiglu: each thread count must give the bits of one thread.
    const int64_t      k = 128;
    std::vector<float> ref;
    for (int nth : {1, 2, 3}) {
        CAPTURE(nth);
        cpu_graph      G(nth);
        ember_tensor * x  = G.g.new_tensor(EMBER_TYPE_F32, k, 1);
        ember_tensor * wq = G.g.new_tensor(EMBER_TYPE_Q8_0, k, k);
        ember_tensor * wk = G.g.new_tensor(EMBER_TYPE_Q4_0, k, k);
        ember_tensor * wv = G.g.new_tensor(EMBER_TYPE_F32, k, k);
        ember_tensor * wg = G.g.new_tensor(EMBER_TYPE_Q8_0, k, 3 * k);
        ember_tensor * wu = G.g.new_tensor(EMBER_TYPE_Q4_0, k, 3 * k);
        ember_tensor * h  = ember_rms_norm(G.g, x, 1e-5f);
        ember_tensor * q  = ember_mul_mat(G.g, wq, h);
        ember_tensor * kk = ember_mul_mat(G.g, wk, h);
        ember_tensor * v  = ember_mul_mat(G.g, wv, h);
        ember_tensor * s  = ember_add(G.g, ember_add(G.g, q, kk), v);
        ember_tensor * g  = ember_mul_mat(G.g, wg, s);
        ember_tensor * u  = ember_mul_mat(G.g, wu, s);
        ember_tensor * y  = ember_swiglu(G.g, g, u);
        G.g.build_forward(y);
        G.alloc();
        set_floats(x, random_f32(k, 91));
        set_floats(wq, random_f32(k * k, 92));
        set_floats(wk, random_f32(k * k, 93));
        set_floats(wv, random_f32(k * k, 94));
        set_floats(wg, random_f32(3 * k * k, 95));
        set_floats(wu, random_f32(3 * k * k, 96));
        for (int rep = 0; rep < 3; rep++) {  // repeated calls reuse the stream's counters
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float> got = get_f32(y);
            if (ref.empty()) {
                ref = got;
                double sum = 0.0;
                for (float f : got) sum += std::fabs(f);
                CHECK(sum > 0.0);
            } else {
                CHECK(got == ref);
            }
        }
    }
}

}  // TEST_SUITE
