// Every op of the CPU backend against a naive float64 implementation written here, on seeded
// random data and odd sizes, for every type the op takes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend-test-util.h"

using namespace ember_test;

namespace {

const ember_type k_weight_types[] = {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_Q6_K};
const ember_type k_cache_types[]  = {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0};

// NMSE against float64 on unrounded inputs, where the type's rounding dominates: a uniform
// rounding error of step q has variance q^2/12, against 1/3 for uniform [-1, 1] data, once for
// the weights and once for the activations (vec_dot_type). Measured values sit 3-20x below.
double loose_bound(ember_type t) {
    switch (t) {
        case EMBER_TYPE_F32: return 1e-12;
        case EMBER_TYPE_F16: return 1e-6;   // 2^-11 relative steps: ~6e-8 measured
        case EMBER_TYPE_BF16: return 5e-5;  // 2^-8 relative steps: ~5e-6 measured
        case EMBER_TYPE_Q8_0: return 2e-4;  // step max/127: ~2.5e-5 measured
        case EMBER_TYPE_Q4_0: return 2e-2;  // step max/8: ~4e-3 expected, up to 7e-3 measured on 21 outputs
        case EMBER_TYPE_Q6_K: return 1e-3;  // 6 bits per 16-weight sub-block: ~2e-4 measured
        default: return 0.0;
    }
}

// Against float64 on the values as stored (dequantized weights, activations rounded through
// vec_dot_type) only the float accumulation in vec_dot differs.
constexpr double k_tight = 1e-10;

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu] mul_mat matches float64 for every weight type") {
    struct shape { int64_t k, n, m, w2, w3, x2, x3; };
    const shape shapes[] = {
        {7, 5, 1, 1, 1, 1, 1},  {33, 9, 4, 1, 1, 1, 1},  {64, 7, 1, 1, 1, 1, 1},
        {96, 13, 5, 1, 1, 1, 1}, {64, 3, 2, 1, 2, 2, 2},  // batch dims, w broadcast over x2
        {256, 7, 3, 1, 1, 1, 1}, {512, 5, 1, 1, 1, 1, 1},
    };
    for (ember_type type : k_weight_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        const ember_type          vt = tr->vec_dot_type;
        for (const shape & s : shapes) {
            if (s.k % tr->block_size != 0) continue;
            CAPTURE(tr->name);
            CAPTURE(s.k);
            CAPTURE(s.n);
            CAPTURE(s.m);
            cpu_graph      G(3);
            ember_tensor * w = G.g.new_tensor(type, s.k, s.n, s.w2, s.w3);
            ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, s.k, s.m, s.x2, s.x3);
            ember_tensor * y = ember_mul_mat(G.g, w, x);
            CHECK(y->ne[0] == s.n);
            CHECK(y->ne[1] == s.m);
            G.g.build_forward(y);
            G.alloc();
            const std::vector<float> wf = random_f32(ember_nelements(w), 11);
            const std::vector<float> xf = random_f32(ember_nelements(x), 12);
            set_floats(w, wf);
            set_floats(x, xf);
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float> got = get_f32(y);

            const std::vector<uint8_t> wbytes = get_bytes(w);
            const std::vector<double>  wq     = ref_dequant(type, wbytes.data(), ember_nelements(w));
            std::vector<double>        want(got.size()), exact(got.size());
            for (int64_t i3 = 0; i3 < s.x3; i3++) {
                for (int64_t i2 = 0; i2 < s.x2; i2++) {
                    const int64_t wb = (i3 / (s.x3 / s.w3)) * s.w2 + i2 / (s.x2 / s.w2);  // weight matrix index
                    for (int64_t j = 0; j < s.m; j++) {
                        const int64_t      xo = ((i3 * s.x2 + i2) * s.m + j) * s.k;
                        std::vector<float> col(xf.begin() + xo, xf.begin() + xo + s.k);
                        std::vector<double> xr = round_through(vt, col);
                        for (int64_t r = 0; r < s.n; r++) {
                            double acc = 0.0, acc_exact = 0.0;
                            for (int64_t i = 0; i < s.k; i++) {
                                acc += wq[(wb * s.n + r) * s.k + i] * xr[i];
                                acc_exact += (double) wf[(wb * s.n + r) * s.k + i] * col[i];
                            }
                            const int64_t o = ((i3 * s.x2 + i2) * s.m + j) * s.n + r;
                            want[o]         = acc;
                            exact[o]        = acc_exact;
                        }
                    }
                }
            }
            CHECK(nmse(got, want) < k_tight);
            CHECK(nmse(got, exact) < loose_bound(type));
        }
    }
}

TEST_CASE("[cpu] get_rows dequantizes table rows exactly") {
    for (ember_type type : k_weight_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        CAPTURE(tr->name);
        const int64_t  n_cols = row_len(type);
        cpu_graph      G(2);
        ember_tensor * table = G.g.new_tensor(type, n_cols, 11);
        ember_tensor * ids   = G.g.new_tensor(EMBER_TYPE_I32, 4, 2);
        ember_tensor * rows  = ember_get_rows(G.g, table, ids);
        CHECK(rows->ne[0] == n_cols);
        CHECK(rows->ne[1] == 4);
        CHECK(rows->ne[2] == 2);
        G.g.build_forward(rows);
        G.alloc();
        set_floats(table, random_f32(ember_nelements(table), 21));
        const std::vector<int32_t> id = {3, 0, 10, 3, 7, 7, 1, 9};
        set_i32(ids, id);
        REQUIRE(G.compute() == EMBER_OK);
        const std::vector<float>   got   = get_f32(rows);
        const std::vector<uint8_t> bytes = get_bytes(table);
        const size_t               rs    = ember_row_size(type, n_cols);
        for (size_t r = 0; r < id.size(); r++) {
            const std::vector<double> want = ref_dequant(type, bytes.data() + id[r] * rs, n_cols);
            for (int64_t i = 0; i < n_cols; i++) REQUIRE(got[r * n_cols + i] == (float) want[i]);
        }
    }
}

TEST_CASE("[cpu] rms_norm matches float64") {
    cpu_graph      G(3);
    ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, 33, 5, 2);
    ember_tensor * y = ember_rms_norm(G.g, x, 1e-5f);
    G.g.build_forward(y);
    G.alloc();
    const std::vector<float> xf = random_f32(ember_nelements(x), 31, -3.0f, 3.0f);
    set_floats(x, xf);
    REQUIRE(G.compute() == EMBER_OK);
    std::vector<double> want(xf.size());
    for (size_t r = 0; r < xf.size() / 33; r++) {
        double ss = 0.0;
        for (int i = 0; i < 33; i++) ss += (double) xf[r * 33 + i] * xf[r * 33 + i];
        const double scale = 1.0 / std::sqrt(ss / 33 + 1e-5);
        for (int i = 0; i < 33; i++) want[r * 33 + i] = xf[r * 33 + i] * scale;
    }
    CHECK(nmse(get_f32(y), want) < 1e-12);
}

TEST_CASE("[cpu] mul and add broadcast src1") {
    struct shape { int64_t a[4], b[4]; };
    const shape shapes[] = {
        {{33, 4, 2, 1}, {33, 4, 2, 1}},  // same shape
        {{33, 4, 2, 1}, {33, 1, 1, 1}},  // one row for all (norm weights)
        {{33, 4, 2, 1}, {11, 4, 1, 1}},  // repeated within the row, over dim 2
        {{7, 3, 2, 2}, {1, 3, 1, 2}},    // a scalar per row
    };
    for (int is_mul = 0; is_mul < 2; is_mul++) {
        for (const shape & s : shapes) {
            CAPTURE(is_mul);
            CAPTURE(s.b[0]);
            cpu_graph      G(3);
            ember_tensor * a = G.g.new_tensor(EMBER_TYPE_F32, s.a[0], s.a[1], s.a[2], s.a[3]);
            ember_tensor * b = G.g.new_tensor(EMBER_TYPE_F32, s.b[0], s.b[1], s.b[2], s.b[3]);
            ember_tensor * y = is_mul ? ember_mul(G.g, a, b) : ember_add(G.g, a, b);
            G.g.build_forward(y);
            G.alloc();
            const std::vector<float> af = random_f32(ember_nelements(a), 41);
            const std::vector<float> bf = random_f32(ember_nelements(b), 42);
            set_floats(a, af);
            set_floats(b, bf);
            REQUIRE(G.compute() == EMBER_OK);
            std::vector<double> want(af.size());
            for (int64_t i3 = 0; i3 < s.a[3]; i3++)
                for (int64_t i2 = 0; i2 < s.a[2]; i2++)
                    for (int64_t i1 = 0; i1 < s.a[1]; i1++)
                        for (int64_t i0 = 0; i0 < s.a[0]; i0++) {
                            const int64_t ia = ((i3 * s.a[2] + i2) * s.a[1] + i1) * s.a[0] + i0;
                            const int64_t ib = (((i3 % s.b[3]) * s.b[2] + i2 % s.b[2]) * s.b[1] + i1 % s.b[1]) * s.b[0] + i0 % s.b[0];
                            want[ia] = is_mul ? (double) af[ia] * bf[ib] : (double) af[ia] + bf[ib];
                        }
            CHECK(nmse(get_f32(y), want) < 1e-13);
        }
    }
}

TEST_CASE("[cpu] swiglu and scale match float64") {
    cpu_graph      G(2);
    ember_tensor * g  = G.g.new_tensor(EMBER_TYPE_F32, 33, 7);
    ember_tensor * u  = G.g.new_tensor(EMBER_TYPE_F32, 33, 7);
    ember_tensor * sw = ember_swiglu(G.g, g, u);
    ember_tensor * sc = ember_scale(G.g, sw, -0.37f);
    G.g.build_forward(sc);
    G.alloc();
    const std::vector<float> gf = random_f32(ember_nelements(g), 51, -6.0f, 6.0f);
    const std::vector<float> uf = random_f32(ember_nelements(u), 52);
    set_floats(g, gf);
    set_floats(u, uf);
    REQUIRE(G.compute() == EMBER_OK);
    std::vector<double> want_sw(gf.size()), want_sc(gf.size());
    for (size_t i = 0; i < gf.size(); i++) {
        want_sw[i] = gf[i] / (1.0 + std::exp(-(double) gf[i])) * uf[i];
        want_sc[i] = want_sw[i] * -0.37f;
    }
    CHECK(nmse(get_f32(sw), want_sw) < 1e-12);
    CHECK(nmse(get_f32(sc), want_sc) < 1e-12);
}

TEST_CASE("[cpu] rope: normal, neox, frequency factors, linear scaling") {
    const int64_t head_dim = 24, n_head = 3, n_tokens = 5;
    const int32_t n_rot    = 16;  // partial rotation: dims 16..23 pass through
    struct variant { int32_t mode; bool ff; float freq_base, freq_scale; };
    const variant variants[] = {
        {EMBER_ROPE_NORMAL, false, 10000.0f, 1.0f},
        {EMBER_ROPE_NEOX, false, 10000.0f, 1.0f},
        {EMBER_ROPE_NEOX, true, 500000.0f, 1.0f},
        {EMBER_ROPE_NORMAL, true, 10000.0f, 0.25f},
        {EMBER_ROPE_NEOX, false, 1000000.0f, 0.5f},
    };
    const std::vector<int32_t> pos = {0, 1, 17, 42, 99};
    for (const variant & v : variants) {
        CAPTURE(v.mode);
        CAPTURE(v.ff);
        CAPTURE(v.freq_scale);
        cpu_graph      G(3);
        ember_tensor * x  = G.g.new_tensor(EMBER_TYPE_F32, head_dim, n_head, n_tokens);
        ember_tensor * p  = G.g.new_tensor(EMBER_TYPE_I32, n_tokens);
        ember_tensor * ff = v.ff ? G.g.new_tensor(EMBER_TYPE_F32, n_rot / 2) : nullptr;
        ember_tensor * y  = ember_rope(G.g, x, p, ff, n_rot, v.mode, v.freq_base, v.freq_scale);
        G.g.build_forward(y);
        G.alloc();
        const std::vector<float> xf  = random_f32(ember_nelements(x), 61);
        const std::vector<float> fff = random_f32(n_rot / 2, 62, 1.0f, 8.0f);
        set_floats(x, xf);
        set_i32(p, pos);
        if (ff) set_floats(ff, fff);
        REQUIRE(G.compute() == EMBER_OK);
        const std::vector<float> got = get_f32(y);

        std::vector<double> want(xf.size());
        double              max_err = 0.0;
        for (int64_t t = 0; t < n_tokens; t++) {
            for (int64_t h = 0; h < n_head; h++) {
                const float * xr = &xf[(t * n_head + h) * head_dim];
                double *      yr = &want[(t * n_head + h) * head_dim];
                for (int64_t i = n_rot; i < head_dim; i++) yr[i] = xr[i];
                for (int32_t i = 0; i < n_rot / 2; i++) {
                    double theta = v.freq_scale * pos[t] * std::pow((double) v.freq_base, -2.0 * i / n_rot);
                    if (ff) theta /= fff[i];
                    const int64_t i0 = v.mode == EMBER_ROPE_NEOX ? i : 2 * i;
                    const int64_t i1 = v.mode == EMBER_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                    yr[i0]           = xr[i0] * std::cos(theta) - xr[i1] * std::sin(theta);
                    yr[i1]           = xr[i0] * std::sin(theta) + xr[i1] * std::cos(theta);
                }
            }
        }
        for (size_t i = 0; i < got.size(); i++) max_err = std::fmax(max_err, std::fabs(got[i] - want[i]));
        // theta is computed in float as llama.cpp does (pos * theta_scale^i, built by
        // repeated multiplication): about 2e-6 absolute at pos 99.
        CHECK(max_err < 1e-5);
        CHECK(nmse(got, want) < 1e-9);
        // pass-through dims are copied bit for bit
        for (int64_t r = 0; r < n_head * n_tokens; r++)
            for (int64_t i = n_rot; i < head_dim; i++) REQUIRE(got[r * head_dim + i] == xf[r * head_dim + i]);
    }
}

TEST_CASE("[cpu] set_rows converts rows into the destination in place") {
    for (ember_type type : k_cache_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        CAPTURE(tr->name);
        const int64_t  n = tr->block_size == 1 ? 33 : 64;
        cpu_graph      G(2);
        ember_tensor * dst  = G.g.new_tensor(type, n, 10);
        ember_tensor * rows = G.g.new_tensor(EMBER_TYPE_F32, n, 3);
        ember_tensor * idx  = G.g.new_tensor(EMBER_TYPE_I32, 3);
        ember_tensor * out  = ember_set_rows(G.g, dst, rows, idx);
        CHECK(out->view_src == dst);
        G.g.build_forward(out);
        G.alloc();
        CHECK(out->data == dst->data);
        set_floats(dst, random_f32(ember_nelements(dst), 71));
        const std::vector<float> rf = random_f32(ember_nelements(rows), 72);
        set_floats(rows, rf);
        set_i32(idx, {7, 0, 4});
        const std::vector<uint8_t> before = get_bytes(dst);
        REQUIRE(G.compute() == EMBER_OK);
        const std::vector<uint8_t> after = get_bytes(dst);
        const size_t               rs    = ember_row_size(type, n);
        std::vector<uint8_t>       expect(before);
        const int32_t              ids[3] = {7, 0, 4};
        for (int i = 0; i < 3; i++) tr->from_float(&rf[i * n], expect.data() + ids[i] * rs, n);
        CHECK(after == expect);
        // and the stored row is the F32 row within the type's rounding
        std::vector<float>  row7(rf.begin(), rf.begin() + n);
        std::vector<double> got7 = ref_dequant(type, after.data() + 7 * rs, n);
        CHECK(nmse(got7, row7) < loose_bound(type));
    }
}

TEST_CASE("[cpu] set_rows with a repeated index keeps the last row, for any thread count") {
    for (int n_threads : {1, 2, 3, 8}) {
        CAPTURE(n_threads);
        cpu_graph      G(n_threads);
        ember_tensor * dst  = G.g.new_tensor(EMBER_TYPE_F32, 8, 6);
        ember_tensor * rows = G.g.new_tensor(EMBER_TYPE_F32, 8, 4);
        ember_tensor * idx  = G.g.new_tensor(EMBER_TYPE_I32, 4);
        G.g.build_forward(ember_set_rows(G.g, dst, rows, idx));
        G.alloc();
        set_floats(dst, std::vector<float>(8 * 6, 0.0f));
        const std::vector<float> rf = random_f32(8 * 4, 73);
        set_floats(rows, rf);
        set_i32(idx, {2, 5, 2, 2});
        REQUIRE(G.compute() == EMBER_OK);
        const std::vector<float> got = get_f32(dst);
        for (int i = 0; i < 8; i++) {
            CHECK(got[2 * 8 + i] == rf[3 * 8 + i]);
            CHECK(got[5 * 8 + i] == rf[1 * 8 + i]);
            CHECK(got[0 * 8 + i] == 0.0f);
        }
    }
}

TEST_CASE("[cpu] set_rows with an index out of range fails without writing outside") {
    cpu_graph      G(2);
    ember_tensor * dst  = G.g.new_tensor(EMBER_TYPE_F16, 32, 4);
    ember_tensor * rows = G.g.new_tensor(EMBER_TYPE_F32, 32, 3);
    ember_tensor * idx  = G.g.new_tensor(EMBER_TYPE_I32, 3);
    ember_tensor * out  = ember_set_rows(G.g, dst, rows, idx);
    ember_tensor * next = ember_scale(G.g, rows, 2.0f);  // must not run after the failure
    G.g.build_forward(out);
    G.g.build_forward(next);
    G.alloc();
    set_floats(dst, std::vector<float>(32 * 4, 0.0f));
    set_floats(rows, std::vector<float>(32 * 3, 1.0f));
    set_floats(next, std::vector<float>(32 * 3, -5.0f));
    for (std::vector<int32_t> bad : {std::vector<int32_t>{1, 4, 2}, std::vector<int32_t>{-1, 0, 0}}) {
        set_i32(idx, bad);
        CHECK(G.compute() == EMBER_ERR_INTERNAL);
        CHECK(get_f32(next)[0] == -5.0f);
    }
}

TEST_CASE("[cpu] cpy converts between every pair of types") {
    for (ember_type from : k_weight_types) {
        for (ember_type to : k_weight_types) {
            const ember_type_traits * tf = ember_type_get_traits(from);
            const ember_type_traits * tt = ember_type_get_traits(to);
            CAPTURE(tf->name);
            CAPTURE(tt->name);
            const int64_t  bmax = std::max(tf->block_size, tt->block_size);
            const int64_t  n    = bmax == 1 ? 33 : bmax == 32 ? 64 : bmax;  // whole blocks of both
            cpu_graph      G(3);
            ember_tensor * a = G.g.new_tensor(from, n, 3, 2);
            ember_tensor * b = ember_cpy(G.g, a, to);
            CHECK(b->type == to);
            G.g.build_forward(b);
            G.alloc();
            set_floats(a, random_f32(ember_nelements(a), 81));
            REQUIRE(G.compute() == EMBER_OK);
            // expected: decode the source (test decoder), then the destination's from_float
            const std::vector<uint8_t> src = get_bytes(a);
            const std::vector<double>  sd  = ref_dequant(from, src.data(), ember_nelements(a));
            std::vector<float>         sf(sd.begin(), sd.end());
            std::vector<uint8_t>       expect(ember_nbytes(b));
            tt->from_float(sf.data(), expect.data(), ember_nelements(b));
            CHECK(get_bytes(b) == expect);
        }
    }
}

TEST_CASE("[cpu] attn with GQA and masks matches float64 for every cache type") {
    const int64_t d = 64, n_head = 4, n_head_kv = 2, n_kv = 9, n_tokens = 3;
    const float   scale = 1.0f / 8.0f;
    for (ember_type tk : k_cache_types) {
        for (ember_type tv : {tk, EMBER_TYPE_F16}) {
            for (bool with_mask : {true, false}) {
                CAPTURE(ember_type_get_name(tk));
                CAPTURE(ember_type_get_name(tv));
                CAPTURE(with_mask);
                cpu_graph      G(3);
                ember_tensor * q    = G.g.new_tensor(EMBER_TYPE_F32, d, n_head, n_tokens);
                ember_tensor * k    = G.g.new_tensor(tk, d, n_head_kv, n_kv);
                ember_tensor * v    = G.g.new_tensor(tv, d, n_head_kv, n_kv);
                ember_tensor * mask = with_mask ? G.g.new_tensor(EMBER_TYPE_F32, n_kv, n_tokens) : nullptr;
                ember_tensor * out  = ember_attn(G.g, q, k, v, mask, scale);
                G.g.build_forward(out);
                G.alloc();
                const std::vector<float> qf = random_f32(ember_nelements(q), 91, -2.0f, 2.0f);
                set_floats(q, qf);
                set_floats(k, random_f32(ember_nelements(k), 92, -2.0f, 2.0f));
                set_floats(v, random_f32(ember_nelements(v), 93));
                // causal over the last n_tokens cells; token 1 sees nothing at all
                std::vector<float> mf(n_kv * n_tokens, 0.0f);
                for (int64_t t = 0; t < n_tokens; t++)
                    for (int64_t j = 0; j < n_kv; j++)
                        if (j > n_kv - n_tokens + t || t == 1) mf[t * n_kv + j] = -INFINITY;
                if (mask) set_floats(mask, mf);
                REQUIRE(G.compute() == EMBER_OK);
                const std::vector<float> got = get_f32(out);

                const std::vector<uint8_t> kb = get_bytes(k), vb = get_bytes(v);
                const std::vector<double>  kd = ref_dequant(tk, kb.data(), ember_nelements(k));
                const std::vector<double>  vd = ref_dequant(tv, vb.data(), ember_nelements(v));
                std::vector<double>        want(got.size(), 0.0);
                for (int64_t t = 0; t < n_tokens; t++) {
                    for (int64_t h = 0; h < n_head; h++) {
                        const int64_t       hk = h / (n_head / n_head_kv);
                        std::vector<double> s(n_kv);
                        double              smax = -INFINITY;
                        for (int64_t j = 0; j < n_kv; j++) {
                            s[j] = -INFINITY;
                            if (mask && mf[t * n_kv + j] == -INFINITY) continue;
                            double dot = 0.0;
                            for (int64_t i = 0; i < d; i++) dot += qf[(t * n_head + h) * d + i] * kd[(j * n_head_kv + hk) * d + i];
                            s[j] = scale * dot;
                            smax = std::fmax(smax, s[j]);
                        }
                        if (smax == -INFINITY) continue;  // all hidden: zeros
                        double sum = 0.0;
                        for (int64_t j = 0; j < n_kv; j++) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - smax);
                        for (int64_t j = 0; j < n_kv; j++) {
                            if (s[j] == -INFINITY) continue;
                            const double pj = std::exp(s[j] - smax) / sum;
                            for (int64_t i = 0; i < d; i++) want[(t * n_head + h) * d + i] += pj * vd[(j * n_head_kv + hk) * d + i];
                        }
                    }
                }
                CHECK(nmse(got, want) < k_tight);
                if (mask) {
                    for (int64_t i = 0; i < d * n_head; i++) REQUIRE(got[1 * d * n_head + i] == 0.0f);
                }
            }
        }
    }
}

TEST_CASE("[cpu] supports_op follows the traits table") {
    ember_device * cpu = ember_registry_cpu_device();
    ember_graph    g;
    ember_tensor * x   = g.new_tensor(EMBER_TYPE_F32, 256, 2);
    ember_tensor * ids = g.new_tensor(EMBER_TYPE_I32, 2);
    for (ember_type type : k_weight_types) {
        CAPTURE(ember_type_get_name(type));
        ember_tensor * w = g.new_tensor(type, 256, 4);
        CHECK(ember_device_supports_op(cpu, ember_mul_mat(g, w, x)));
        CHECK(ember_device_supports_op(cpu, ember_get_rows(g, w, ids)));
        CHECK(ember_device_supports_op(cpu, ember_set_rows(g, w, x, ids)));
        CHECK(ember_device_supports_op(cpu, ember_cpy(g, w, EMBER_TYPE_Q8_0)));
    }
    // I32 has no codecs: nothing converts to or from it
    ember_tensor * iw = g.new_tensor(EMBER_TYPE_I32, 256, 4);
    CHECK_FALSE(ember_device_supports_op(cpu, ember_mul_mat(g, iw, x)));
    CHECK_FALSE(ember_device_supports_op(cpu, ember_get_rows(g, iw, ids)));
    CHECK_FALSE(ember_device_supports_op(cpu, ember_cpy(g, x, EMBER_TYPE_I32)));
    CHECK(ember_device_supports_op(cpu, ember_view(g, iw, 256, 4)));
    // Q8_K is an activation type: it has no vec_dot, so it cannot be a weight
    ember_tensor * kw = g.new_tensor(EMBER_TYPE_Q8_K, 256, 4);
    CHECK_FALSE(ember_device_supports_op(cpu, ember_mul_mat(g, kw, x)));
}

TEST_CASE("[cpu] abort callback stops between nodes") {
    cpu_graph      G(2);
    ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, 8, 2);
    ember_tensor * a = ember_scale(G.g, x, 2.0f);
    ember_tensor * b = ember_scale(G.g, a, 2.0f);
    ember_tensor * c = ember_scale(G.g, b, 2.0f);
    G.g.build_forward(c);
    G.alloc();
    set_floats(x, std::vector<float>(16, 1.0f));
    set_floats(c, std::vector<float>(16, 0.0f));
    int calls = 0;
    G.stream->iface.set_abort_callback(G.stream, [](void * ud) { return ++*static_cast<int *>(ud) >= 1 ? 1 : 0; }, &calls);
    CHECK(G.compute() == EMBER_ERR_CANCELLED);
    CHECK(calls == 1);
    CHECK(get_f32(a)[0] == 2.0f);  // the first node ran
    CHECK(get_f32(c)[0] == 0.0f);  // the last did not
    G.stream->iface.set_abort_callback(G.stream, nullptr, nullptr);
    CHECK(G.compute() == EMBER_OK);
    CHECK(get_f32(c)[0] == 8.0f);
}

TEST_CASE("[cpu] graph_compute checks its arguments and node support") {
    cpu_graph      G(1);
    ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, 8, 2);
    ember_tensor * y = ember_scale(G.g, x, 2.0f);
    G.g.build_forward(y);
    ember_stream * s = G.stream;
    CHECK(s->iface.graph_compute(s, &G.g, 0, 1) == EMBER_ERR_INTERNAL);  // not allocated
    G.alloc();
    CHECK(s->iface.graph_compute(s, &G.g, 0, 2) == EMBER_ERR_INVALID_ARG);
    CHECK(s->iface.graph_compute(s, &G.g, 1, 0) == EMBER_ERR_INVALID_ARG);
    CHECK(s->iface.graph_compute(s, nullptr, 0, 0) == EMBER_ERR_INVALID_ARG);
    CHECK(s->iface.graph_compute(s, &G.g, 1, 1) == EMBER_OK);  // empty range
    y->type = EMBER_TYPE_I32;  // a node no kernel can run
    CHECK(s->iface.graph_compute(s, &G.g, 0, 1) == EMBER_ERR_UNSUPPORTED);
}

}  // TEST_SUITE
