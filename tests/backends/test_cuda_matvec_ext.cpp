// Ember's own weight types (INT4, INT4_G32, NF4, FP8 with block and row scales) as model
// weights on the CUDA backend: converted to the CUDA ext layout at upload (cuda-repack.h) and
// read by ops-matvec-ext.cu's decode matvec, prefill dequantizer and GET_ROWS. Each graph runs
// on the CPU and on the GPU with the same seeded data and the results are compared by NMSE.
// Skips with a message when there is no CUDA device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "graph.h"

namespace {

struct leaf {
    ember_tensor *       t;
    std::vector<uint8_t> bytes;
};

struct ctx_t {
    ember_graph &       g;
    std::vector<leaf> & leaves;
    std::mt19937        rng;

    ember_tensor * rand_leaf(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, float lo = -1.0f, float hi = 1.0f) {
        ember_tensor *                        t = g.new_tensor(type, ne0, ne1, ne2);
        std::vector<float>                    v(static_cast<size_t>(ne0 * ne1 * ne2));
        std::uniform_real_distribution<float> u(lo, hi);
        for (float & x : v) x = u(rng);
        std::vector<uint8_t> b(ember_nbytes(t));
        for (int64_t r = 0; r < ne1 * ne2; r++) ember_type_get_traits(type)->from_float(v.data() + r * ne0, b.data() + r * t->nb[1], ne0);
        leaves.push_back({t, std::move(b)});
        return t;
    }
    // A model weight: the CUDA backend converts it to its ext layout when it is uploaded whole.
    ember_tensor * weight(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
        ember_tensor * t = rand_leaf(type, ne0, ne1, ne2);
        t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        return t;
    }
    ember_tensor * ids(const std::vector<int32_t> & v) {
        ember_tensor *       t = g.new_tensor(EMBER_TYPE_I32, static_cast<int64_t>(v.size()));
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        leaves.push_back({t, std::move(b)});
        return t;
    }
};

using builder = std::function<ember_tensor *(ctx_t &)>;

// The graph of `build` with every tensor in dev's memory, once per seed (later runs refill the
// leaves: on the GPU they replay a recorded CUDA graph); the outputs as floats.
std::vector<std::vector<float>> run_on(ember_device * dev, const builder & build, const std::vector<uint32_t> & seeds) {
    ember_graph       g;
    std::vector<leaf> leaves;
    ctx_t             c{g, leaves, std::mt19937(seeds.at(0))};
    ember_tensor *    out = build(c);
    g.build_forward(out);
    ember_buffer_type * buft  = ember_device_buffer_type(dev);
    const size_t        align = ember_buffer_type_alignment(buft);
    size_t              total = 0;
    for (ember_tensor & t : g.arena) {
        if (!t.view_src) total += (ember_buffer_type_alloc_size(buft, &t) + align - 1) / align * align;
    }
    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(buft, total, &buf) == EMBER_OK);
    size_t offs = 0;
    for (ember_tensor & t : g.arena) {
        if (t.view_src) continue;
        ember_buffer_place_tensor(buf, &t, offs);
        offs += (ember_buffer_type_alloc_size(buft, &t) + align - 1) / align * align;
    }
    for (ember_tensor & t : g.arena) {
        if (!t.view_src) continue;
        t.buffer = t.view_src->buffer;
        t.data   = static_cast<char *>(t.view_src->data) + t.view_offs;
    }
    buf->iface.clear(buf, 0);
    for (leaf & l : leaves) ember_tensor_set(l.t, l.bytes.data(), 0, l.bytes.size());
    ember_stream_params sp{};
    sp.n_threads     = 2;
    ember_stream * s = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &s) == EMBER_OK);
    std::vector<std::vector<float>> res;
    for (size_t run = 0; run < seeds.size(); run++) {
        if (run > 0) {
            ember_graph       g2;
            std::vector<leaf> l2;
            ctx_t             c2{g2, l2, std::mt19937(seeds[run])};
            build(c2);
            REQUIRE(l2.size() == leaves.size());
            for (size_t i = 0; i < leaves.size(); i++) ember_tensor_set(leaves[i].t, l2[i].bytes.data(), 0, l2[i].bytes.size());
        }
        const ember_status st = s->iface.graph_compute(s, &g, 0, static_cast<int32_t>(g.nodes.size()));
        s->iface.synchronize(s);
        CHECK(st == EMBER_OK);
        std::vector<float> v(static_cast<size_t>(ember_nelements(out)));
        ember_tensor_get(out, v.data(), 0, v.size() * sizeof(float));  // F32 outputs only
        res.push_back(std::move(v));
    }
    ember_stream_free(s);
    ember_buffer_free(buf);
    return res;
}

double nmse(const std::vector<float> & got, const std::vector<float> & want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const double d = static_cast<double>(got[i]) - want[i];
        num += d * d;
        den += static_cast<double>(want[i]) * want[i];
    }
    return den > 0 ? num / den : num;
}

ember_device * cuda_device() {
    return ember_registry_find_device("cuda");
}

void check(const std::string & what, const builder & build, double tol, const std::vector<uint32_t> & seeds = {1234}) {
    CAPTURE(what);
    const auto want = run_on(ember_registry_cpu_device(), build, seeds);
    const auto got  = run_on(cuda_device(), build, seeds);
    REQUIRE(got.size() == want.size());
    for (size_t r = 0; r < got.size(); r++) {
        CAPTURE(r);
        REQUIRE(got[r].size() == want[r].size());
        bool finite = true;
        for (float v : got[r]) finite = finite && std::isfinite(v);
        CHECK(finite);
        const double e = nmse(got[r], want[r]);
        CAPTURE(e);
        CHECK(e < tol);
        if (r > 0) CHECK(got[r] != got[r - 1]);  // new data, new results (not a stale replay)
    }
}

const ember_type k_types[] = {EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4,         EMBER_TYPE_FP8_E4M3,
                              EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};

bool fp8(ember_type t) {
    return t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 || t == EMBER_TYPE_FP8_E4M3_ROW || t == EMBER_TYPE_FP8_E5M2_ROW;
}

// Decode tolerance. FP8: float activations on both sides (only the summation order differs).
// INT4 / NF4: the CPU and the GPU round x to the same 8-bit blocks; NF4's GPU codebook is
// round(127 NF4[q]) (a weight moves by at most 0.4% of its block's absmax: NMSE ~2e-5 over many
// rows; a single row's NMSE is one sample and can be 50 times that: 7e-4 was seen at n = 1).
double mv_tol(ember_type t, int64_t n = 2) {
    return fp8(t) ? 1e-8 : t == EMBER_TYPE_NF4 ? (n == 1 ? 3e-3 : 2e-4) : 1e-4;
}

// Widths: the smallest whole number of blocks above one 16-byte chunk per lane step, one not a
// multiple of 256, a model width plus a few blocks (chunk count not a multiple of 128).
std::vector<int64_t> widths(ember_type t) {
    const int64_t b = ember_type_get_traits(t)->block_size;
    return {b * 3, 4096 + b * 5, 2048};
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cuda] ember types in the CUDA ext layout: decode matvec") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        const std::string tn = ember_type_get_name(t);
        // Rows: one per warp with a block tail (67), a single row, two per warp (from 4096) with
        // a warp tail (4100).
        for (int64_t n : {67, 1, 4100}) {
            for (int64_t k : widths(t)) {
                for (int64_t m : {1, 3}) {
                    if (n == 4100 && (m == 3 || k != 2048)) continue;
                    check("ext matvec " + tn + " k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m),
                          [=](ctx_t & c) { return ember_mul_mat(c.g, c.weight(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f)); },
                          mv_tol(t, n));
                }
            }
        }
        check("ext matvec batched broadcast " + tn, [=](ctx_t & c) {
            return ember_mul_mat(c.g, c.weight(t, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
        }, mv_tol(t));
        // x columns not 16-byte aligned (a view one float in): FP8's scalar x loads.
        check("ext matvec of an unaligned x view " + tn, [=](ctx_t & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 513, 2);
            const int64_t  ne[4] = {512, 2, 1, 1};
            const size_t   nb[4] = {4, a->nb[1], a->nb[1] * 2, a->nb[1] * 2};
            return ember_mul_mat(c.g, c.weight(t, 512, 40), ember_view_strided(c.g, a, ne, nb, 4));
        }, mv_tol(t));
    }
    // NF4 rows of more than 256 blocks: a second group header mid-row.
    check("ext matvec nf4 two groups", [](ctx_t & c) {
        return ember_mul_mat(c.g, c.weight(EMBER_TYPE_NF4, 64 * 260, 70), c.rand_leaf(EMBER_TYPE_F32, 64 * 260, 2));
    }, mv_tol(EMBER_TYPE_NF4));
}

TEST_CASE("[cuda] ember types in the CUDA ext layout: grouped matvecs, fused x, graph replay") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        const std::string tn = ember_type_get_name(t);
        // Q, K, V over one x (unequal rows, one above 4096: a group launch), their outputs
        // consumed in between as in a model, then gate and up over a normed x.
        check("ext grouped matvecs " + tn, [=](ctx_t & c) {
            ember_tensor * x   = c.rand_leaf(EMBER_TYPE_F32, 512, 1);
            ember_tensor * q   = ember_mul_mat(c.g, c.weight(t, 512, 4160), x);
            ember_tensor * k   = ember_mul_mat(c.g, c.weight(t, 512, 72), x);
            ember_tensor * v   = ember_mul_mat(c.g, c.weight(t, 512, 136), x);
            ember_tensor * sum = ember_add(c.g, ember_add(c.g, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 4160, 64), q),
                                                          ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 72, 64), k)),
                                           ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 136, 64), v));
            return sum;
        }, fp8(t) ? 1e-8 : 2e-4);
        // A layer: RMS_NORM + MUL (its kernel writes the 8-bit x), gate and up (one launch),
        // SWIGLU, down, residual; twice with new weights (converted again) on a replayed graph.
        check("ext decode layer " + tn, [=](ctx_t & c) {
            ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
            ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 1024, 1));
            ember_tensor * gt = ember_mul_mat(c.g, c.weight(t, 1024, 512), h);
            ember_tensor * up = ember_mul_mat(c.g, c.weight(t, 1024, 512), h);
            return ember_add(c.g, x, ember_mul_mat(c.g, c.weight(t, 512, 1024), ember_swiglu(c.g, gt, up)));
        }, fp8(t) ? 1e-8 : 1e-3, {31, 32});
    }
}

TEST_CASE("[cuda] ember types in the CUDA ext layout: prefill, get_rows, readback") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : k_types) {
        const std::string tn = ember_type_get_name(t);
        const int64_t     k  = 3 * ember_type_get_traits(t)->block_size * (t == EMBER_TYPE_INT4 ? 1 : 4);
        // cuBLAS on the weights dequantized to F16 (the CPU rounds x to the weight's
        // vec_dot_type, the GPU to F16); a batched weight: the second matrix's rows follow.
        check("ext prefill " + tn + " k=" + std::to_string(k), [=](ctx_t & c) {
            return ember_mul_mat(c.g, c.weight(t, k, 40, 2), c.rand_leaf(EMBER_TYPE_F32, k, 24, 2));
        }, fp8(t) ? 1e-5 : 1e-3);
        check("ext get_rows " + tn, [=](ctx_t & c) {
            return ember_get_rows(c.g, c.weight(t, k, 9), c.ids({8, 0, 3, 3}));
        }, 1e-12);

        // Upload (converted), readback of the GGUF bytes, a partial write, a partial read.
        for (int64_t kk : {k, ember_type_get_traits(t)->block_size * 260}) {
            CAPTURE(tn);
            CAPTURE(kk);
            ember_device * dev = cuda_device();
            ember_graph    g;
            ember_tensor * w = g.new_tensor(t, kk, 5);
            w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            ember_buffer * buf = nullptr;
            REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), ember_nbytes(w), &buf) == EMBER_OK);
            ember_buffer_place_tensor(buf, w, 0);
            std::vector<float> v(static_cast<size_t>(kk * 5));
            for (size_t i = 0; i < v.size(); i++) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 97));
            std::vector<uint8_t> bytes(ember_nbytes(w));
            for (int r = 0; r < 5; r++) ember_type_get_traits(t)->from_float(v.data() + r * kk, bytes.data() + r * w->nb[1], kk);
            ember_tensor_set(w, bytes.data(), 0, bytes.size());
            CHECK((w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) != 0);
            std::vector<uint8_t> back(bytes.size());
            ember_tensor_get(w, back.data(), 0, back.size());
            CHECK(back == bytes);
            std::vector<uint8_t> row1(w->nb[1]);
            for (size_t i = 0; i < row1.size(); i++) row1[i] = static_cast<uint8_t>(i * 7 + 3);
            ember_tensor_set(w, row1.data(), w->nb[1], row1.size());
            std::memcpy(bytes.data() + w->nb[1], row1.data(), row1.size());
            ember_tensor_get(w, back.data(), 0, back.size());
            CHECK(back == bytes);
            std::vector<uint8_t> part(w->nb[1]);
            ember_tensor_get(w, part.data(), 2 * w->nb[1], part.size());
            CHECK(std::memcmp(part.data(), bytes.data() + 2 * w->nb[1], part.size()) == 0);
            ember_buffer_free(buf);
        }
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
