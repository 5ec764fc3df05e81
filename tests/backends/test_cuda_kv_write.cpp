// A decode step's K and V rows written into block-quantized caches by the decode attention that
// reads them (cuda-backend.cpp kv_defer, ops-attention-decode-mma.cuh mma_kv_write): the graph of
// one layer's cache writes and attention as the model builds it (SET_ROWS pair, strided views of
// the caches from row 0, ATTN), run with the writes left to the attention (the default) and with
// EMBER_CUDA_KV_ATTN=0 (the SET_ROWS pair's own kernel), compared bit for bit, caches included,
// and with the CPU. EMBER_CUDA_SKIP=other leaves every SET_ROWS kernel out: the caches must then
// still hold the new rows by default (the attention wrote them) and must not with the switch off
// (so the first check can fail). Compiled only with the CUDA backend; skips without a device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "graph.h"

#include "cuda-test-util.h"

namespace {

struct kv_case {
    ember_type           t;
    int64_t              d, heads, kv_heads, n_ctx, n_kv;
    std::vector<int32_t> idx;  // a cache row per token
};

struct kv_result {
    ember_status         st = EMBER_OK;
    std::vector<float>   out;
    std::vector<uint8_t> k, v;  // the caches after the step
};

// One layer's step: K / V rows into the caches (rows of kv_heads x d values), the attention over
// the first n_kv rows (the last token's key at its own index visible, later ones hidden).
kv_result run_kv_step(ember_device * dev, const kv_case & p, uint32_t seed) {
    ember_graph            g;
    std::vector<leaf_data> leaves;
    case_ctx               c{g, leaves, std::mt19937(seed)};
    const int64_t          T       = static_cast<int64_t>(p.idx.size());
    const int64_t          width   = p.d * p.kv_heads;
    ember_tensor *         k_cache = c.rand_leaf(p.t, width, p.n_ctx, 1, -2.0f, 2.0f);
    ember_tensor *         v_cache = c.rand_leaf(p.t, width, p.n_ctx);
    ember_tensor *         k_rows  = c.rand_leaf(EMBER_TYPE_F32, width, T, 1, -2.0f, 2.0f);
    ember_tensor *         v_rows  = c.rand_leaf(EMBER_TYPE_F32, width, T);
    ember_tensor *         idx     = c.i32_leaf(p.idx);
    ember_tensor *         q       = c.rand_leaf(EMBER_TYPE_F32, p.d, p.heads, T);
    std::vector<float>     mv(static_cast<size_t>(p.n_kv * T), 0.0f);
    for (int64_t tt = 0; tt < T; tt++) {
        for (int64_t j = 0; j < p.n_kv; j++) {
            if (j > p.idx[static_cast<size_t>(tt)] || j % 13 == 5) mv[static_cast<size_t>(tt * p.n_kv + j)] = -INFINITY;
        }
    }
    ember_tensor * mask  = c.f32_leaf(mv, p.n_kv, T);
    ember_tensor * k_all = ember_set_rows(g, k_cache, k_rows, idx);
    ember_tensor * v_all = ember_set_rows(g, v_cache, v_rows, idx);
    const int64_t  ne[4] = {p.d, p.kv_heads, p.n_kv, 1};
    const size_t   kb[4] = {k_cache->nb[0], ember_row_size(p.t, p.d), k_cache->nb[1], k_cache->nb[1] * static_cast<size_t>(p.n_kv)};
    const size_t   vb[4] = {v_cache->nb[0], ember_row_size(p.t, p.d), v_cache->nb[1], v_cache->nb[1] * static_cast<size_t>(p.n_kv)};
    ember_tensor * out   = ember_attn(g, q, ember_view_strided(g, k_all, ne, kb, 0), ember_view_strided(g, v_all, ne, vb, 0), mask,
                                      1.0f / std::sqrt(static_cast<float>(p.d)));
    g.build_forward(out);

    ember_buffer * buf = place_filled(g, leaves, dev);
    ember_stream * s   = new_stream(dev);
    kv_result      r;
    r.st = s->iface.graph_compute(s, &g, 0, static_cast<int32_t>(g.nodes.size()));
    s->iface.synchronize(s);
    r.out = ember_test::get_f32(out);
    r.k   = ember_test::get_bytes(k_cache);
    r.v   = ember_test::get_bytes(v_cache);
    ember_stream_free(s);
    ember_buffer_free(buf);
    return r;
}

kv_result run_kv_cuda(const kv_case & p, const char * kv_attn, const char * skip) {
    set_env("EMBER_CUDA_KV_ATTN", kv_attn);
    set_env("EMBER_CUDA_SKIP", skip);
    kv_result r = run_kv_step(cuda_device(), p, 41);
    set_env("EMBER_CUDA_KV_ATTN", "");
    set_env("EMBER_CUDA_SKIP", "");
    return r;
}

// A case's name for failure messages.
std::string describe(const kv_case & p) {
    std::string rows;
    for (int32_t r : p.idx) rows += " " + std::to_string(r);
    return std::string(ember_type_get_name(p.t)) + " d=" + std::to_string(p.d) + " heads " + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) +
           " n_kv=" + std::to_string(p.n_kv) + " rows" + rows;
}

// The bytes of rows `rows` of a cache (rows of `row` bytes) equal between a and b.
bool rows_equal(const std::vector<uint8_t> & a, const std::vector<uint8_t> & b, size_t row, const std::vector<int32_t> & rows) {
    for (int32_t r : rows) {
        const size_t o = static_cast<size_t>(r) * row;
        if (o + row > a.size() || o + row > b.size()) return false;
        for (size_t i = o; i < o + row; i++) {
            if (a[i] != b[i]) return false;
        }
    }
    return true;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cuda] decode attention writing the step's rows into block-quantized caches") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    std::vector<kv_case> cases;
    for (ember_type t : {EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        for (int64_t d : {64, 128}) {
            cases.push_back({t, d, 32, 8, 4400, 4160, {4133}});         // the last split's row (a decode step at 4k)
            cases.push_back({t, d, 32, 8, 2048, 1024, {700}});          // a row in an earlier split, later keys hidden
            cases.push_back({t, d, 8, 2, 2048, 1024, {1000, 1001}});    // two tokens
            cases.push_back({t, d, 20, 1, 2048, 1024, {650, 651, 650}}); // a repeated row: the last occurrence wins
            cases.push_back({t, d, 16, 4, 2048, 1024, {1500}});         // a row past the view: written, not read
        }
    }
    for (const kv_case & p : cases) {
        const std::string what = describe(p);
        CAPTURE(what);
        const kv_result fused = run_kv_cuda(p, "", "");
        const kv_result own   = run_kv_cuda(p, "0", "");
        const kv_result cpu   = run_kv_step(ember_registry_cpu_device(), p, 41);
        REQUIRE(fused.st == EMBER_OK);
        REQUIRE(own.st == EMBER_OK);
        REQUIRE(cpu.st == EMBER_OK);
        CHECK(fused.k == own.k);
        CHECK(fused.v == own.v);
        CHECK(fused.out == own.out);
        REQUIRE(fused.out.size() == cpu.out.size());
        const double e = nmse(fused.out, cpu.out);
        CAPTURE(e);
        CHECK(e < 1e-6);
        const size_t row = fused.k.size() / static_cast<size_t>(p.n_ctx);
        if (p.t == EMBER_TYPE_FP8_E4M3 || p.t == EMBER_TYPE_FP8_E5M2) {  // Q8_0 / Q4_0 may round a tie apart from the CPU's encoder
            CHECK(fused.k == cpu.k);
            CHECK(fused.v == cpu.v);
        }
        // Rows not written keep their bytes; the written ones changed.
        std::vector<int32_t> others;
        for (int32_t r = 0; r < static_cast<int32_t>(p.n_ctx); r += 97) {
            if (std::find(p.idx.begin(), p.idx.end(), r) == p.idx.end()) others.push_back(r);
        }
        CHECK(rows_equal(fused.k, cpu.k, row, others));
        ember_graph            g0;  // the K cache before the step: run_kv_step's first leaf
        std::vector<leaf_data> l0;
        case_ctx               c0{g0, l0, std::mt19937(41)};
        c0.rand_leaf(p.t, p.d * p.kv_heads, p.n_ctx, 1, -2.0f, 2.0f);
        for (int32_t r : p.idx) CHECK(!rows_equal(fused.k, l0.at(0).bytes, row, {r}));
        // The writes were the attention's: with every SET_ROWS kernel left out they still land,
        // and with the writes on their own they do not.
        const kv_result skip_fused = run_kv_cuda(p, "", "other");
        const kv_result skip_own   = run_kv_cuda(p, "0", "other");
        CHECK(rows_equal(skip_fused.k, own.k, row, p.idx));
        CHECK(rows_equal(skip_fused.v, own.v, row, p.idx));
        CHECK(!rows_equal(skip_own.k, own.k, row, p.idx));
    }
}

// The short-context attention reads the older cache rows before its PDL wait and the rows this
// step's SET_ROWS writes (their kernels launched just before it) after it (dec_early_rows): the
// same bits as every row read after the wait (EMBER_CUDA_ATTN_EARLY=0), and the CPU's result.
// Written rows that are a token's last shown key, an earlier token's row that a later token also
// sees, a repeated row, rows in every block of a row's passes (300 keys at d = 128: 5 passes).
TEST_CASE("[cuda] decode attention reading the older cache rows before its wait") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    std::vector<kv_case> cases;
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        for (int64_t d : {64, 128}) {
            cases.push_back({t, d, 32, 8, 600, 96, {95}});
            cases.push_back({t, d, 32, 8, 600, 256, {90, 91}});
            cases.push_back({t, d, 16, 4, 600, 300, {250, 251, 250}});
            cases.push_back({t, d, 8, 8, 600, 300, {3}});
        }
    }
    for (const kv_case & p : cases) {
        const std::string what = describe(p);
        CAPTURE(what);
        const kv_result early = run_kv_step(cuda_device(), p, 43);
        set_env("EMBER_CUDA_ATTN_EARLY", "0");
        const kv_result late = run_kv_step(cuda_device(), p, 43);
        set_env("EMBER_CUDA_ATTN_EARLY", "");
        const kv_result cpu = run_kv_step(ember_registry_cpu_device(), p, 43);
        REQUIRE(early.st == EMBER_OK);
        REQUIRE(late.st == EMBER_OK);
        REQUIRE(cpu.st == EMBER_OK);
        CHECK(early.out == late.out);
        REQUIRE(early.out.size() == cpu.out.size());
        const double e = nmse(early.out, cpu.out);
        CAPTURE(e);
        CHECK(e < 1e-6);
    }
}

TEST_CASE("[cuda] decode attention writing cache rows: an index past the cache is an error") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (const char * sw : {"", "0"}) {
        CAPTURE(sw);
        const kv_case   p = {EMBER_TYPE_Q8_0, 128, 32, 8, 2048, 1024, {2048}};
        const kv_result r = run_kv_cuda(p, sw, "");
        CHECK(r.st != EMBER_OK);
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
