// Ember's own types (INT4, INT4_G32, NF4, FP8_*) through the CPU backend: sizes and strides of
// row-group types, views that keep rows whole, MUL_MAT / GET_ROWS / SET_ROWS / CPY against
// float64, and attention over FP8 K/V caches. Weights are set row by row (one codec call per
// row, as the row-group types need).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend-test-util.h"

using namespace ember_test;

namespace {

const ember_type k_types[] = {EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4,          EMBER_TYPE_FP8_E4M3,
                              EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};

// A row length of whole blocks: one INT4 group, two NF4 blocks, three FP8 blocks.
int64_t ember_row_len(ember_type t) {
    switch (t) {
        case EMBER_TYPE_INT4: return 256;
        case EMBER_TYPE_NF4: return 128;
        default: return 96;
    }
}

// Quantizes v (rows of ne[0]) into a contiguous tensor, one row per from_float call.
void set_rows_of(ember_tensor * t, const std::vector<float> & v) {
    REQUIRE((int64_t) v.size() == ember_nelements(t));
    REQUIRE(ember_is_contiguous(t));
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    const int64_t             n  = t->ne[0];
    const size_t              rs = ember_row_size(t->type, n);
    REQUIRE(t->nb[1] == rs);
    std::vector<uint8_t> bytes(ember_nbytes(t));
    REQUIRE(bytes.size() == rs * (size_t) (ember_nelements(t) / n));
    for (int64_t r = 0; r < ember_nelements(t) / n; r++) tr->from_float(&v[r * n], bytes.data() + r * rs, n);
    ember_tensor_set(t, bytes.data(), 0, bytes.size());
}

// Dequantizes rows of n floats, one to_float call per row (checked against float64 in tests/quant).
std::vector<double> dequant_rows(ember_type type, const uint8_t * p, int64_t n, int64_t rows) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    const size_t              rs = ember_row_size(type, n);
    std::vector<double>       out;
    std::vector<float>        f(n);
    for (int64_t r = 0; r < rows; r++) {
        tr->to_float(p + r * rs, f.data(), n);
        out.insert(out.end(), f.begin(), f.end());
    }
    return out;
}

// Values as vec_dot_type stores them (activations of the dot products).
std::vector<double> round_activations(ember_type vt, const float * x, int64_t n) {
    const ember_type_traits * tr = ember_type_get_traits(vt);
    std::vector<uint8_t>      b(ember_row_size(vt, n));
    std::vector<float>        f(n);
    tr->from_float(x, b.data(), n);
    tr->to_float(b.data(), f.data(), n);
    return std::vector<double>(f.begin(), f.end());
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[ember types] row-group tensors: sizes, strides and contiguity count the headers") {
    ember_graph    g;
    ember_tensor * nf4 = g.new_tensor(EMBER_TYPE_NF4, 64 * 300, 3, 2);
    CHECK(nf4->nb[0] == 33);
    CHECK(nf4->nb[1] == 2 * 8 + 300 * 33);  // two row groups (256 + 44 blocks)
    CHECK(nf4->nb[2] == 3 * nf4->nb[1]);
    CHECK(ember_nbytes(nf4) == 6 * nf4->nb[1]);
    CHECK(ember_is_contiguous(nf4));
    ember_tensor * fr = g.new_tensor(EMBER_TYPE_FP8_E4M3_ROW, 96, 5);
    CHECK(fr->nb[1] == 4 + 96);
    CHECK(ember_nbytes(fr) == 5 * 100);
    CHECK(ember_is_contiguous(fr));
    ember_tensor * fb = g.new_tensor(EMBER_TYPE_FP8_E5M2, 96, 5);
    CHECK(fb->nb[1] == 3 * 33);
    CHECK(ember_nbytes(fb) == 5 * 99);
    // views keep whole rows: rows 1..2 are fine, half a row or a reshape is refused
    ember_tensor * v = ember_view(g, fr, 96, 2, 1, 1, fr->nb[1]);
    CHECK(v->nb[1] == fr->nb[1]);
    CHECK(ember_nbytes(v) == 2 * fr->nb[1]);
    CHECK_THROWS_AS(ember_view(g, fr, 48, 10, 1, 1, 0), ember_graph_error);
    CHECK_THROWS_AS(ember_view(g, fr, 96 * 5, 1, 1, 1, 0), ember_graph_error);
    CHECK_THROWS_AS(ember_view(g, fr, 96, 1, 1, 1, 4), ember_graph_error);
    const int64_t ne[4] = {96, 2, 1, 1};
    const size_t  nb[4] = {32, 100, 200, 200};
    CHECK_NOTHROW(ember_view_strided(g, fr, ne, nb, 100));
    const size_t bad_nb[4] = {32, 50, 100, 100};
    CHECK_THROWS_AS(ember_view_strided(g, fr, ne, bad_nb, 0), ember_graph_error);
    // block types without row groups still split rows as before (KV-cache heads)
    CHECK_NOTHROW(ember_view(g, fb, 32, 15, 1, 1, 0));
}

TEST_CASE("[ember types] mul_mat matches float64 for every Ember weight type") {
    struct shape { int64_t k, n, m; };
    for (ember_type type : k_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        const int64_t             b  = tr->block_size;
        // one block, several, and (NF4) more than one row group
        std::vector<shape> shapes = {{b == 128 ? 128 : 64 * 2, 7, 3}, {512, 5, 1}, {512, 9, 4}};
        if (type == EMBER_TYPE_NF4) shapes.push_back({64 * 260, 3, 2});
        for (const shape & s : shapes) {
            CAPTURE(tr->name);
            CAPTURE(s.k);
            CAPTURE(s.m);
            cpu_graph      G(3);
            ember_tensor * w = G.g.new_tensor(type, s.k, s.n);
            ember_tensor * x = G.g.new_tensor(EMBER_TYPE_F32, s.k, s.m);
            ember_tensor * y = ember_mul_mat(G.g, w, x);
            G.g.build_forward(y);
            G.alloc();
            REQUIRE(ember_device_supports_op(ember_registry_cpu_device(), y));
            const std::vector<float> wf = random_f32(ember_nelements(w), 11);
            const std::vector<float> xf = random_f32(ember_nelements(x), 12);
            set_rows_of(w, wf);
            set_floats(x, xf);
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float>   got = get_f32(y);
            const std::vector<uint8_t> wb  = get_bytes(w);
            const std::vector<double>  wq  = dequant_rows(type, wb.data(), s.k, s.n);
            std::vector<double>        want(got.size()), exact(got.size());
            for (int64_t j = 0; j < s.m; j++) {
                const std::vector<double> xr = round_activations(tr->vec_dot_type, &xf[j * s.k], s.k);
                for (int64_t r = 0; r < s.n; r++) {
                    double acc = 0, acc_exact = 0;
                    for (int64_t i = 0; i < s.k; i++) {
                        acc += wq[r * s.k + i] * xr[i];
                        acc_exact += (double) wf[r * s.k + i] * xf[j * s.k + i];
                    }
                    want[j * s.n + r]  = acc;
                    exact[j * s.n + r] = acc_exact;
                }
            }
            CHECK(nmse(got, want) < 1e-10);
            // uniform [-1, 1] weights: 4-bit types ~1e-2 (INT4 step 2/15), FP8 ~1e-3 (E5M2)
            CHECK(nmse(got, exact) < 3e-2);
        }
    }
}

TEST_CASE("[ember types] get_rows, set_rows and cpy convert whole rows") {
    for (ember_type type : k_types) {
        const ember_type_traits * tr = ember_type_get_traits(type);
        CAPTURE(tr->name);
        const int64_t n  = ember_row_len(type);
        const size_t  rs = ember_row_size(type, n);
        {  // get_rows: exactly to_float of the chosen rows
            cpu_graph      G(2);
            ember_tensor * table = G.g.new_tensor(type, n, 11);
            ember_tensor * ids   = G.g.new_tensor(EMBER_TYPE_I32, 5);
            ember_tensor * rows  = ember_get_rows(G.g, table, ids);
            G.g.build_forward(rows);
            G.alloc();
            set_rows_of(table, random_f32(ember_nelements(table), 21));
            const std::vector<int32_t> id = {3, 0, 10, 3, 7};
            set_i32(ids, id);
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float>   got   = get_f32(rows);
            const std::vector<uint8_t> bytes = get_bytes(table);
            for (size_t r = 0; r < id.size(); r++) {
                const std::vector<double> want = dequant_rows(type, bytes.data() + id[r] * rs, n, 1);
                for (int64_t i = 0; i < n; i++) REQUIRE(got[r * n + i] == (float) want[i]);
            }
        }
        {  // set_rows: from_float of each row into its place, other rows untouched
            cpu_graph      G(3);
            ember_tensor * dst  = G.g.new_tensor(type, n, 10);
            ember_tensor * src  = G.g.new_tensor(EMBER_TYPE_F32, n, 3);
            ember_tensor * idx  = G.g.new_tensor(EMBER_TYPE_I32, 3);
            ember_tensor * out  = ember_set_rows(G.g, dst, src, idx);
            G.g.build_forward(out);
            G.alloc();
            set_rows_of(dst, random_f32(ember_nelements(dst), 71));
            const std::vector<float> rf = random_f32(ember_nelements(src), 72);
            set_floats(src, rf);
            set_i32(idx, {7, 0, 4});
            std::vector<uint8_t> expect = get_bytes(dst);
            REQUIRE(G.compute() == EMBER_OK);
            const int32_t ids[3] = {7, 0, 4};
            for (int i = 0; i < 3; i++) tr->from_float(&rf[i * n], expect.data() + ids[i] * rs, n);
            CHECK(get_bytes(dst) == expect);
        }
        {  // cpy F32 -> type -> F32 over a 3-D tensor: row by row
            cpu_graph      G(3);
            ember_tensor * a = G.g.new_tensor(EMBER_TYPE_F32, n, 3, 2);
            ember_tensor * b = ember_cpy(G.g, a, type);
            ember_tensor * c = ember_cpy(G.g, b, EMBER_TYPE_F32);
            G.g.build_forward(c);
            G.alloc();
            const std::vector<float> af = random_f32(ember_nelements(a), 81);
            set_floats(a, af);
            REQUIRE(G.compute() == EMBER_OK);
            std::vector<uint8_t> expect(ember_nbytes(b));
            REQUIRE(expect.size() == 6 * rs);
            for (int64_t r = 0; r < 6; r++) tr->from_float(&af[r * n], expect.data() + r * rs, n);
            CHECK(get_bytes(b) == expect);
            const std::vector<double> back = dequant_rows(type, expect.data(), n, 6);
            const std::vector<float>  got  = get_f32(c);
            for (size_t i = 0; i < got.size(); i++) REQUIRE(got[i] == (float) back[i]);
        }
    }
}

TEST_CASE("[ember types] attn over FP8 K/V caches matches float64 of the stored values") {
    const int64_t d = 64, n_head = 4, n_head_kv = 2, n_kv = 9, n_tokens = 3;
    const float   scale = 1.0f / 8.0f;
    for (ember_type tk : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        for (ember_type tv : {tk, EMBER_TYPE_F16}) {
            CAPTURE(ember_type_get_name(tk));
            CAPTURE(ember_type_get_name(tv));
            cpu_graph      G(3);
            ember_tensor * q    = G.g.new_tensor(EMBER_TYPE_F32, d, n_head, n_tokens);
            ember_tensor * k    = G.g.new_tensor(tk, d, n_head_kv, n_kv);
            ember_tensor * v    = G.g.new_tensor(tv, d, n_head_kv, n_kv);
            ember_tensor * mask = G.g.new_tensor(EMBER_TYPE_F32, n_kv, n_tokens);
            ember_tensor * out  = ember_attn(G.g, q, k, v, mask, scale);
            G.g.build_forward(out);
            G.alloc();
            REQUIRE(ember_device_supports_op(ember_registry_cpu_device(), out));
            const std::vector<float> qf = random_f32(ember_nelements(q), 91, -2.0f, 2.0f);
            set_floats(q, qf);
            set_floats(k, random_f32(ember_nelements(k), 92, -2.0f, 2.0f));
            set_floats(v, random_f32(ember_nelements(v), 93));
            std::vector<float> mf(n_kv * n_tokens, 0.0f);
            for (int64_t t = 0; t < n_tokens; t++)
                for (int64_t j = 0; j < n_kv; j++)
                    if (j > n_kv - n_tokens + t) mf[t * n_kv + j] = -INFINITY;
            set_floats(mask, mf);
            REQUIRE(G.compute() == EMBER_OK);
            const std::vector<float>   got = get_f32(out);
            const std::vector<uint8_t> kb = get_bytes(k), vb = get_bytes(v);
            const std::vector<double>  kd = dequant_rows(tk, kb.data(), d, n_head_kv * n_kv);
            const std::vector<double>  vd = dequant_rows(tv, vb.data(), d, n_head_kv * n_kv);
            std::vector<double>        want(got.size(), 0.0);
            for (int64_t t = 0; t < n_tokens; t++) {
                for (int64_t h = 0; h < n_head; h++) {
                    const int64_t       hk = h / (n_head / n_head_kv);
                    std::vector<double> s(n_kv);
                    double              smax = -INFINITY;
                    for (int64_t j = 0; j < n_kv; j++) {
                        double dot = 0;
                        for (int64_t i = 0; i < d; i++) dot += qf[(t * n_head + h) * d + i] * kd[(j * n_head_kv + hk) * d + i];
                        s[j] = dot * scale + mf[t * n_kv + j];
                        smax = std::fmax(smax, s[j]);
                    }
                    double sum = 0;
                    for (int64_t j = 0; j < n_kv; j++) sum += std::exp(s[j] - smax);
                    for (int64_t j = 0; j < n_kv; j++) {
                        const double pj = std::exp(s[j] - smax) / sum;
                        for (int64_t i = 0; i < d; i++) want[(t * n_head + h) * d + i] += pj * vd[(j * n_head_kv + hk) * d + i];
                    }
                }
            }
            CHECK(nmse(got, want) < 1e-10);
        }
    }
}

}  // TEST_SUITE
