// The CUDA backend's decode planner (backends/cuda/cuda-plan.h) on graphs laid out by the real
// graph allocator, on the CPU: runs in every build, GPU or not. A layer's Q, K and V products
// are ordered as the graph builder orders them, and the allocator gives K's and V's products
// the memory of Q's (free once Q's RoPE has run): session 4's grouping was refused as a hazard
// by exactly that and nothing failed. Here the units must be found: Q with its RoPE, K with
// RoPE and cache write, V with its cache write, all three in one launch; with a cache type the
// store cannot write, V's matvec still joins (run early past K's SET_ROWS).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "alloc.h"
#include "backend.h"
#include "backends/cuda/cuda-matvec-ext.h"
#include "backends/cuda/cuda-plan.h"
#include "graph.h"

namespace {

struct layer_nodes {
    ember_tensor *q_mm, *k_mm, *v_mm, *q_rope, *k_rope, *k_set, *v_set;
};

// Two layers of attention over a residual stream, as ember_build_attn lays them out; weights of
// type wt.
// vt: V's weight type (EMBER_TYPE_COUNT: wt, as Q and K).
ember_tensor * build_layers(ember_graph & g, ember_type cache_type, std::vector<layer_nodes> & layers, ember_type wt = EMBER_TYPE_Q4_0,
                            ember_type vt = static_cast<ember_type>(EMBER_TYPE_COUNT)) {
    if (vt == EMBER_TYPE_COUNT) vt = wt;
    const int64_t n_embd = 256, hd = 64, n_head = 4, n_head_kv = 2, n_kv = 8;
    ember_tensor * x   = g.new_tensor(EMBER_TYPE_F32, n_embd, 1);
    ember_tensor * pos = g.new_tensor(EMBER_TYPE_I32, 1);
    ember_tensor * idx = g.new_tensor(EMBER_TYPE_I32, 1);
    for (int il = 0; il < 2; il++) {
        layer_nodes    L;
        ember_tensor * h = ember_rms_norm(g, x, 1e-5f);
        L.q_mm           = ember_mul_mat(g, g.new_tensor(wt, n_embd, hd * n_head), h);
        L.k_mm           = ember_mul_mat(g, g.new_tensor(wt, n_embd, hd * n_head_kv), h);
        L.v_mm           = ember_mul_mat(g, g.new_tensor(vt, n_embd, hd * n_head_kv), h);
        L.q_rope = ember_rope(g, ember_view(g, L.q_mm, hd, n_head, 1), pos, nullptr, static_cast<int32_t>(hd), EMBER_ROPE_NORMAL, 1e4f, 1.0f);
        L.k_rope = ember_rope(g, ember_view(g, L.k_mm, hd, n_head_kv, 1), pos, nullptr, static_cast<int32_t>(hd), EMBER_ROPE_NORMAL, 1e4f, 1.0f);
        ember_tensor * kc = g.new_tensor(cache_type, hd * n_head_kv, n_kv);
        ember_tensor * vc = g.new_tensor(cache_type, hd * n_head_kv, n_kv);
        L.k_set           = ember_set_rows(g, kc, ember_view(g, L.k_rope, hd * n_head_kv, 1), idx);
        L.v_set           = ember_set_rows(g, vc, L.v_mm, idx);
        const int64_t  ne[4] = {hd, n_head_kv, n_kv, 1};
        const size_t   kb[4] = {kc->nb[0], ember_row_size(cache_type, hd), kc->nb[1], kc->nb[1] * n_kv};
        ember_tensor * o     = ember_attn(g, L.q_rope, ember_view_strided(g, L.k_set, ne, kb, 0), ember_view_strided(g, L.v_set, ne, kb, 0),
                                          nullptr, 0.125f);
        o                    = ember_mul_mat(g, g.new_tensor(wt, hd * n_head, n_embd), ember_view(g, o, hd * n_head, 1));
        x                    = ember_add(g, x, o);
        layers.push_back(L);
    }
    return x;
}

// As the runtime has it: weights, inputs and KV caches in buffers of their own, the
// intermediate results placed by the graph allocator (memory reused once read). Returns the
// leaves' buffer (to free).
ember_buffer * place_graph(ember_graph & g) {
    ember_buffer_type * buft  = ember_device_buffer_type(ember_registry_cpu_device());
    size_t              total = 0;
    for (ember_tensor * t : g.leafs) total += (ember_nbytes(t) + 255) / 256 * 256;
    ember_buffer * leaves = nullptr;
    REQUIRE(ember_buffer_type_alloc(buft, total, &leaves) == EMBER_OK);
    size_t offs = 0;
    for (ember_tensor * t : g.leafs) {
        ember_buffer_place_tensor(leaves, t, offs);
        offs += (ember_nbytes(t) + 255) / 256 * 256;
    }
    ember_gallocr alloc({buft});
    REQUIRE(alloc.alloc_graph(&g, std::vector<int>(g.nodes.size(), 0), 0) == EMBER_OK);
    return leaves;
}

// The plans of every matvec of g, walked as the stream walks them.
std::vector<ember_cuda_unit_plan> plan_all(ember_graph & g, const ember_cuda_plan_hooks & h) {
    std::vector<ember_cuda_unit_plan> plans;
    const ember_tensor *              hoisted[8] = {};
    int                               n_hoisted  = 0;
    const int32_t                     end        = static_cast<int32_t>(g.nodes.size());
    for (int32_t i = 0; i < end; i++) {
        if (!ember_cuda_is_matvec(g.nodes[i])) continue;
        bool skip = false;
        for (int k = 0; k < n_hoisted; k++) skip = skip || hoisted[k] == g.nodes[i];
        if (skip) continue;
        const ember_cuda_unit_plan p = ember_cuda_plan_units(&g, i, end, hoisted, n_hoisted, h);
        if (p.n == 0) continue;
        plans.push_back(p);
        if (p.hoist) hoisted[n_hoisted++] = p.hoist;
        i = p.next - 1;
    }
    return plans;
}

// The plans of build_layers' graph when every layer's Q, K and V are units of one launch: Q
// with its RoPE, K with RoPE and cache write, V with its cache write.
void check_qkv_units(const std::vector<ember_cuda_unit_plan> & plans, const std::vector<layer_nodes> & layers) {
    REQUIRE(plans.size() == layers.size());
    for (size_t l = 0; l < layers.size(); l++) {
        CAPTURE(l);
        const ember_cuda_unit_plan & p = plans[l];
        REQUIRE(p.n == 3);
        CHECK(p.u[0].mm == layers[l].q_mm);
        CHECK(p.u[0].rope == layers[l].q_rope);
        CHECK(p.u[1].rope == layers[l].k_rope);
        CHECK(p.u[1].set_rows == layers[l].k_set);
        CHECK(p.u[2].set_rows == layers[l].v_set);
    }
}


// The kernels' side, as the CUDA backend has it: the store writes F16 caches, not Q8_0 ones;
// one launch holds matvecs over one x with weights of one type.
bool unit_ok(const ember_cuda_mv_unit & u) {
    return !u.set_rows || u.set_rows->type == EMBER_TYPE_F16;
}
bool can_share(const ember_tensor * a, const ember_tensor * b) {
    return a->src[1] == b->src[1] && a->src[0]->type == b->src[0]->type;
}

// Decoder layers as ember_build_decoder lays them out (attention and SwiGLU FFN around a
// residual stream, an output norm and product): weights of type wt, V's of vt in layer vt_layer
// (-1: none), the output's of out_t. o_mm / down_mm: each layer's O and FFN down products.
// reread: layer 1's FFN norm and layer 2's O product are read again (added to the logits).
ember_tensor * build_decoder(ember_graph & g, ember_type wt, ember_type out_t, std::vector<ember_tensor *> & o_mm,
                             std::vector<ember_tensor *> & down_mm, int vt_layer = -1, ember_type vt = EMBER_TYPE_Q6_K, bool reread = false,
                             int64_t n_tok = 1) {
    const int64_t n_embd = 256, hd = 64, n_head = 4, n_head_kv = 2, n_kv = n_tok > 8 ? n_tok : 8, n_ff = 512;
    ember_tensor * x    = ember_get_rows(g, g.new_tensor(EMBER_TYPE_F32, n_embd, 16), g.new_tensor(EMBER_TYPE_I32, n_tok));
    ember_tensor * pos  = g.new_tensor(EMBER_TYPE_I32, n_tok);
    ember_tensor * idx  = g.new_tensor(EMBER_TYPE_I32, n_tok);
    ember_tensor * mask = g.new_tensor(EMBER_TYPE_F32, n_kv, n_tok);
    std::vector<ember_tensor *> extra;
    const auto     norm = [&](ember_tensor * t) { return ember_mul(g, ember_rms_norm(g, t, 1e-5f), g.new_tensor(EMBER_TYPE_F32, n_embd)); };
    for (int il = 0; il < 3; il++) {
        ember_tensor * h  = norm(x);
        ember_tensor * q  = ember_mul_mat(g, g.new_tensor(wt, n_embd, hd * n_head), h);
        ember_tensor * k  = ember_mul_mat(g, g.new_tensor(wt, n_embd, hd * n_head_kv), h);
        ember_tensor * v  = ember_mul_mat(g, g.new_tensor(il == vt_layer ? vt : wt, n_embd, hd * n_head_kv), h);
        q                 = ember_rope(g, ember_view(g, q, hd, n_head, n_tok), pos, nullptr, static_cast<int32_t>(hd), EMBER_ROPE_NORMAL, 1e4f, 1.0f);
        k                 = ember_rope(g, ember_view(g, k, hd, n_head_kv, n_tok), pos, nullptr, static_cast<int32_t>(hd), EMBER_ROPE_NORMAL, 1e4f, 1.0f);
        ember_tensor * kc = g.new_tensor(EMBER_TYPE_F16, hd * n_head_kv, n_kv);
        ember_tensor * vc = g.new_tensor(EMBER_TYPE_F16, hd * n_head_kv, n_kv);
        ember_tensor * ka = ember_set_rows(g, kc, ember_view(g, k, hd * n_head_kv, n_tok), idx);
        ember_tensor * va = ember_set_rows(g, vc, v, idx);
        const int64_t  ne[4] = {hd, n_head_kv, n_kv, 1};
        const size_t   kb[4] = {kc->nb[0], ember_row_size(EMBER_TYPE_F16, hd), kc->nb[1], kc->nb[1] * n_kv};
        ember_tensor * o     = ember_attn(g, q, ember_view_strided(g, ka, ne, kb, 0), ember_view_strided(g, va, ne, kb, 0), mask, 0.125f);
        o_mm.push_back(ember_mul_mat(g, g.new_tensor(wt, hd * n_head, n_embd), ember_view(g, o, hd * n_head, n_tok)));
        x                 = ember_add(g, x, o_mm.back());
        ember_tensor * h2 = norm(x);
        if (reread && il == 1) extra.push_back(ember_view(g, h2->src[0], 64, 1));
        if (reread && il == 2) extra.push_back(ember_view(g, o_mm.back(), 64, 1));
        ember_tensor * gt = ember_mul_mat(g, g.new_tensor(wt, n_embd, n_ff), h2);
        ember_tensor * up = ember_mul_mat(g, g.new_tensor(wt, n_embd, n_ff), h2);
        down_mm.push_back(ember_mul_mat(g, g.new_tensor(wt, n_ff, n_embd), ember_swiglu(g, gt, up)));
        x = ember_add(g, x, down_mm.back());
    }
    ember_tensor * logits = ember_mul_mat(g, g.new_tensor(out_t, n_embd, 64), norm(x));
    for (ember_tensor * e : extra) logits = ember_add(g, logits, e);
    logits->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    return logits;
}

// The matvecs of g at which ember_cuda_plan_mv_norm takes the norm after them.
using sites_t = std::vector<const ember_tensor *>;
sites_t norm_sites(ember_graph & g, const ember_cuda_norm_hooks & h) {
    sites_t sites;
    const int32_t                     end = static_cast<int32_t>(g.nodes.size());
    for (int32_t i = 0; i < end; i++) {
        ember_tensor * f[3] = {};
        if (!ember_cuda_plan_mv_norm(&g, i, end, h, f)) continue;
        CHECK(f[0] == g.nodes[i + 1]);
        CHECK(f[1] == g.nodes[i + 2]);
        CHECK(f[2] == g.nodes[i + 3]);
        sites.push_back(g.nodes[i]);
    }
    return sites;
}

// The test's kernel side: Q4_0 weights only.
bool q4_0_fuse_ok(const ember_tensor * mm, const ember_tensor *, const ember_tensor *, const ember_tensor *) {
    return mm->src[0]->type == EMBER_TYPE_Q4_0;
}
bool q4_0_reader_ok(const ember_tensor * mm) {
    return mm->src[0]->type == EMBER_TYPE_Q4_0;
}

}  // namespace

TEST_SUITE("backends") {
// The decode norm in the product before it needs the graph builder's order (product, residual
// ADD, RMS_NORM, MUL, then the MUL's products): found after every O and FFN down product, and
// not where one reader of the MUL cannot apply the scale (another type), where the norm's or
// the product's floats are read again, or where the range ends before a reader.
TEST_CASE("[cuda plan] the decode norm in the product before it, on decoder layers as the graph builder orders them") {
    ember_cuda_norm_hooks h;
    h.fuse_ok   = q4_0_fuse_ok;
    h.reader_ok = q4_0_reader_ok;
    {
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, o_mm, down_mm));
        ember_buffer * leaves = place_graph(g);
        const auto     sites  = norm_sites(g, h);
        REQUIRE(sites.size() == 6);  // 3 layers x (O, down): the last down product's norm feeds the output
        for (int il = 0; il < 3; il++) {
            CHECK(sites[2 * il] == o_mm[il]);
            CHECK(sites[2 * il + 1] == down_mm[il]);
        }
        // A range that ends between the MUL and its readers, or before the MUL.
        const int32_t i0 = static_cast<int32_t>(std::find(g.nodes.begin(), g.nodes.end(), o_mm[0]) - g.nodes.begin());
        ember_tensor * f[3];
        CHECK(ember_cuda_plan_mv_norm(&g, i0, static_cast<int32_t>(g.nodes.size()), h, f));
        CHECK_FALSE(ember_cuda_plan_mv_norm(&g, i0, i0 + 4, h, f));
        CHECK_FALSE(ember_cuda_plan_mv_norm(&g, i0, i0 + 3, h, f));
        ember_buffer_free(leaves);
    }
    {  // the output in another type: not after the last down product; V of another type in layer 1:
       // not after layer 0's down product (V reads that norm)
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q6_K, o_mm, down_mm, 1));
        CHECK(norm_sites(g, h) == sites_t{o_mm[0], o_mm[1], down_mm[1], o_mm[2]});
    }
    {  // layer 1's FFN norm read again, layer 2's O product read again
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, o_mm, down_mm, -1, EMBER_TYPE_Q6_K, true));
        CHECK(norm_sites(g, h) == sites_t{o_mm[0], down_mm[0], down_mm[1], down_mm[2]});
    }
    {  // pair_ok: a reader every producer's copy serves (reader_ok) that this producer's does not
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q6_K, o_mm, down_mm, 1));
        ember_cuda_norm_hooks any = h;
        any.reader_ok             = [](const ember_tensor * mm) { return mm->src[0]->type == EMBER_TYPE_Q4_0 || mm->src[0]->type == EMBER_TYPE_Q6_K; };
        CHECK(norm_sites(g, any).size() == 6);
        any.pair_ok = [](const ember_tensor *, const ember_tensor * reader) { return reader->src[0]->type != EMBER_TYPE_Q6_K; };
        CHECK(norm_sites(g, any) == sites_t{o_mm[0], o_mm[1], down_mm[1], o_mm[2]});
    }
}

TEST_CASE("[cuda plan] a layer's Q/K/V matvecs, RoPE and cache writes in one launch, on allocator-placed graphs") {
    for (ember_type cache : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        const std::string cache_name = ember_type_get_name(cache);
        CAPTURE(cache_name);
        ember_graph              g;
        std::vector<layer_nodes> layers;
        g.build_forward(build_layers(g, cache, layers));
        ember_buffer * leaves = place_graph(g);
        // The case that matters: products placed where earlier ones of the layer were (V's on K's
        // rotated rows here), which a plan writing every intermediate result could not group.
        bool reused = false;
        for (const layer_nodes & L : layers) {
            reused = reused || ember_cuda_overlaps(L.v_mm, L.k_rope) || ember_cuda_overlaps(L.k_mm, L.q_mm) || ember_cuda_overlaps(L.v_mm, L.q_mm);
        }
        CHECK(reused);

        ember_cuda_plan_hooks h;
        h.unit_ok                                    = unit_ok;
        h.can_share                                  = can_share;
        const std::vector<ember_cuda_unit_plan> plans = plan_all(g, h);
        const ember_tensor *                    hoisted[8] = {};
        const int32_t                           end        = static_cast<int32_t>(g.nodes.size());
        // A layer whose V did not join runs V as a plan of its own only if it fuses something
        // (a Q8_0 cache: no), so one plan per layer either way.
        REQUIRE(plans.size() == layers.size());
        for (size_t l = 0; l < layers.size(); l++) {
            CAPTURE(l);
            const ember_cuda_unit_plan & p = plans[l];
            const layer_nodes &          L = layers[l];
            // With a Q8_0 cache K's SET_ROWS runs after the launch and reads K's rotated rows: V's
            // product may run early only where it does not land on them.
            const bool v_on_k = cache != EMBER_TYPE_F16 && ember_cuda_overlaps(L.v_mm, L.k_rope);
            if (v_on_k) {
                CHECK(p.n == 2);
                CHECK(p.hoist == nullptr);
                continue;
            }
            REQUIRE(p.n == 3);
            CHECK(p.u[0].mm == L.q_mm);
            CHECK(p.u[0].rope == L.q_rope);
            CHECK(p.u[0].set_rows == nullptr);
            CHECK_FALSE(p.u[0].write_mm);  // only the RoPE reads Q's product
            CHECK(p.u[1].mm == L.k_mm);
            CHECK(p.u[1].rope == L.k_rope);
            CHECK_FALSE(p.u[1].write_mm);
            CHECK(p.u[0].write_rope);  // attention reads Q's rotated rows
            CHECK(p.u[2].mm == L.v_mm);
            CHECK(p.u[2].rope == nullptr);
            if (cache == EMBER_TYPE_F16) {  // only the cache rows are written for K and V
                CHECK(p.u[1].set_rows == L.k_set);
                CHECK_FALSE(p.u[1].write_rope);
                CHECK(p.u[2].set_rows == L.v_set);
                CHECK_FALSE(p.u[2].write_mm);
                CHECK(p.hoist == nullptr);
            } else {  // the SET_ROWS stay nodes of their own; V's matvec runs early with Q and K
                CHECK(p.u[1].set_rows == nullptr);
                CHECK(p.u[2].set_rows == nullptr);
                CHECK(p.u[2].write_mm);
                CHECK(p.hoist == L.v_mm);
            }
        }
        // One launch per unit when grouping is off.
        h.group                        = false;
        const ember_cuda_unit_plan one = ember_cuda_plan_units(&g, static_cast<int32_t>(std::find(g.nodes.begin(), g.nodes.end(), layers[0].q_mm) - g.nodes.begin()),
                                                               end, hoisted, 0, h);
        CHECK(one.n == 1);
        CHECK(one.u[0].rope == layers[0].q_rope);
        ember_buffer_free(leaves);
    }
}

// The SWIGLU nodes of g and the gate / up / SWIGLU triples ember_cuda_plan_glu takes, walked as
// the stream walks them (a taken triple's nodes are done).
struct glu_site {
    ember_tensor *gate, *up, *glu;
    bool          store_gu;
};
std::vector<glu_site> glu_sites(ember_graph & g, bool (*ok)(const ember_tensor *, const ember_tensor *, const ember_tensor *)) {
    std::vector<glu_site> sites;
    const int32_t         end = static_cast<int32_t>(g.nodes.size());
    for (int32_t i = 0; i < end; i++) {
        ember_tensor * f[3]     = {};
        bool           store_gu = false;
        if (!ember_cuda_plan_glu(&g, i, end, nullptr, 0, ok, f, &store_gu)) continue;
        sites.push_back({f[0], f[1], f[2], store_gu});
        i += 2;
    }
    return sites;
}
std::vector<ember_tensor *> swiglu_nodes(const ember_graph & g) {
    std::vector<ember_tensor *> v;
    for (ember_tensor * n : g.nodes) {
        if (n->op == EMBER_OP_SWIGLU) v.push_back(n);
    }
    return v;
}
bool glu_q4_0_ok(const ember_tensor * gate, const ember_tensor * up, const ember_tensor *) {
    return gate->src[0]->type == EMBER_TYPE_Q4_0 && up->src[0]->type == EMBER_TYPE_Q4_0;
}

// A layer's gate and up products with their SWIGLU in one launch (EMBER_CUDA_MV_GLU): found in
// every layer of the graph builder's order (gate, up, SWIGLU), whichever of the two comes first;
// gate's or up's floats stored when something else reads them; not when the range ends before
// the SWIGLU, a node was hoisted, or the kernel refuses (another type).
TEST_CASE("[cuda plan] the gate / up products with their SWIGLU") {
    {
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, o_mm, down_mm));
        ember_buffer * leaves = place_graph(g);
        const auto     glus   = swiglu_nodes(g);
        const auto     sites  = glu_sites(g, glu_q4_0_ok);
        REQUIRE(glus.size() == 3);
        REQUIRE(sites.size() == 3);
        for (size_t l = 0; l < 3; l++) {
            CHECK(sites[l].glu == glus[l]);
            CHECK(sites[l].gate == glus[l]->src[0]);
            CHECK(sites[l].up == glus[l]->src[1]);
            CHECK_FALSE(sites[l].store_gu);
        }
        const int32_t i0 = static_cast<int32_t>(std::find(g.nodes.begin(), g.nodes.end(), glus[0]) - g.nodes.begin()) - 2;
        ember_tensor * f[3];
        bool           st = false;
        CHECK(ember_cuda_plan_glu(&g, i0, i0 + 3, nullptr, 0, glu_q4_0_ok, f, &st));
        CHECK_FALSE(ember_cuda_plan_glu(&g, i0, i0 + 2, nullptr, 0, glu_q4_0_ok, f, &st));  // the SWIGLU outside the range
        CHECK_FALSE(ember_cuda_plan_glu(&g, i0 + 1, i0 + 4, nullptr, 0, glu_q4_0_ok, f, &st));
        const ember_tensor * hoisted[1] = {g.nodes[i0 + 1]};
        CHECK_FALSE(ember_cuda_plan_glu(&g, i0, i0 + 3, hoisted, 1, glu_q4_0_ok, f, &st));
        ember_buffer_free(leaves);
    }
    {  // Q8_0 weights: refused by this kernel side
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, o_mm, down_mm));
        CHECK(glu_sites(g, glu_q4_0_ok).empty());
    }
    // Up before gate in the graph; the gate (or up) read again by another product.
    for (int variant = 0; variant < 3; variant++) {
        CAPTURE(variant);
        ember_graph    g;
        ember_tensor * x  = g.new_tensor(EMBER_TYPE_F32, 256, 1);
        ember_tensor * up = ember_mul_mat(g, g.new_tensor(EMBER_TYPE_Q4_0, 256, 512), x);
        ember_tensor * gt = ember_mul_mat(g, g.new_tensor(EMBER_TYPE_Q4_0, 256, 512), x);
        ember_tensor * y  = ember_mul_mat(g, g.new_tensor(EMBER_TYPE_Q4_0, 512, 256), ember_swiglu(g, gt, up));
        if (variant > 0) y = ember_add(g, y, ember_mul_mat(g, g.new_tensor(EMBER_TYPE_Q4_0, 512, 256), variant == 1 ? gt : up));
        if (variant == 0) g.build_forward(up);  // up's node first, then gate's
        g.build_forward(y);
        REQUIRE(g.nodes.size() >= 3);
        CHECK(g.nodes[0] == (variant == 0 ? up : gt));
        const auto sites = glu_sites(g, glu_q4_0_ok);
        REQUIRE(sites.size() == 1);
        CHECK(sites[0].gate == gt);
        CHECK(sites[0].up == up);
        CHECK(sites[0].store_gu == (variant > 0));  // 1, 2: gate / up read by a second product
    }
}

#ifdef EMBER_HAVE_CUDA
// The same with the CUDA backend's own conditions (host code: the fused norm kernels' and
// mvr_norm_kernel's) on allocator-placed tensors: Q4_0 / Q8_0 weights in the CUDA layout take it
// after every O and down product; Q4_K too (mvk_norm_kernel; not with EMBER_CUDA_MV_NORM_Q4K=0),
// with V in planar Q6_K in one layer as well (mvp6_kernel NS reads the copy); INT4 / NF4 in the
// ext layout too (mvx_norm_kernel, mvx_kernel NS; not with EMBER_CUDA_MV_NORM_EXT=0).
bool cuda_fuse_ok(const ember_tensor * mm, const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul) {
    return ember_cuda_can_fuse_add_rms_norm(add, norm) && ember_cuda_can_fuse_rms_norm_mul(norm, mul) && ember_cuda_mv_norm_ok(mm, add, norm, mul);
}

TEST_CASE("[cuda plan] the backend's hooks: the decode norm in the product before it for Q4_0 / Q8_0 / Q4_K / INT4 / NF4") {
    ember_cuda_norm_hooks h;
    h.fuse_ok   = cuda_fuse_ok;
    h.reader_ok = ember_cuda_mv_norm_reader_ok;
    for (int opt : {0, 1, 2, 3, 4, 5}) {  // Q4_0, Q8_0, Q4_K, 3: Q4_K with V of layer 1 in planar Q6_K, INT4, NF4 (ext layout)
        const ember_type wt = opt == 0   ? EMBER_TYPE_Q4_0
                              : opt == 1 ? EMBER_TYPE_Q8_0
                              : opt == 4 ? EMBER_TYPE_INT4
                              : opt == 5 ? EMBER_TYPE_NF4
                                         : EMBER_TYPE_Q4_K;
        const bool       ext = wt == EMBER_TYPE_INT4 || wt == EMBER_TYPE_NF4;
        CAPTURE(opt);
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, wt, wt, o_mm, down_mm, opt == 3 ? 1 : -1, EMBER_TYPE_Q6_K));
        for (ember_tensor * t : g.leafs) {
            if (t->type != wt && t->type != EMBER_TYPE_Q6_K) continue;
            t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            if (t->type != EMBER_TYPE_Q4_K) t->flags |= EMBER_TENSOR_FLAG_CUDA_REPACKED;  // Q6_K: the planar layout
        }
        ember_buffer * leaves = place_graph(g);
        setenv("EMBER_CUDA_MV_NORM_Q4K", "0", 1);
        CHECK(norm_sites(g, h).size() == (wt == EMBER_TYPE_Q4_K ? 0u : 6u));  // the switch off: not for Q4_K
        setenv("EMBER_CUDA_MV_NORM_Q4K", "", 1);
        setenv("EMBER_CUDA_MV_NORM_EXT", "0", 1);
        CHECK(norm_sites(g, h).size() == (ext ? 0u : 6u));  // the switch off: not for INT4 / NF4
        setenv("EMBER_CUDA_MV_NORM_EXT", "", 1);
        const auto sites = norm_sites(g, h);
        REQUIRE(sites.size() == 6);
        for (int il = 0; il < 3; il++) {
            CHECK(sites[2 * il] == o_mm[il]);
            CHECK(sites[2 * il + 1] == down_mm[il]);
        }
        ember_buffer_free(leaves);
    }
}

// The GGUF-layout types with an integer decode dot (mvq_kernel: Q5_0, the K-quants, IQ4_NL / XS)
// take the dp4a matvec where their rows are aligned for its loads, and nothing that kernel
// cannot do: no groups or Q / K / V units (mvq_kernel has no epilogue: such a launch would be an
// internal error) and no norm-in-product copy. Q4_1 stays on the float matvec.
TEST_CASE("[cuda plan] the backend's hooks: decode products of Q5_0 / the K-quants / IQ4 on dp4a alone") {
    // (Q5_K and IQ4_XS: in Q4_K's kernel, with its groups and units, by default: the next case;
    // IQ4_XS here at EMBER_CUDA_IQ4XS_WIDE=0.)
    for (ember_type wt : {EMBER_TYPE_Q5_0, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS, EMBER_TYPE_Q4_1}) {
        const std::string tn = ember_type_get_name(wt);
        CAPTURE(tn);
        setenv("EMBER_CUDA_IQ4XS_WIDE", wt == EMBER_TYPE_IQ4_XS ? "0" : "", 1);
        const bool        dp4a = wt != EMBER_TYPE_Q4_1;
        ember_graph       g;
        ember_tensor *    x  = g.new_tensor(EMBER_TYPE_F32, 512, 1);
        ember_tensor *    wa = g.new_tensor(wt, 512, 64);
        ember_tensor *    wb = g.new_tensor(wt, 512, 64);
        for (ember_tensor * w : {wa, wb}) w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        ember_tensor * a   = ember_mul_mat(g, wa, x);
        ember_tensor * b   = ember_mul_mat(g, wb, x);
        ember_tensor * sum = ember_add(g, g.new_tensor(EMBER_TYPE_F32, 64, 1), a);
        ember_tensor * nrm = ember_rms_norm(g, sum, 1e-5f);
        ember_tensor * out = ember_mul(g, nrm, g.new_tensor(EMBER_TYPE_F32, 64));
        g.build_forward(ember_add(g, out, b));
        ember_buffer * leaves = place_graph(g);
        CHECK(ember_cuda_mul_mat_vec_q_supported(a) == dp4a);
        CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_share(a, b));
        ember_cuda_mv_unit u{};
        u.mm = a;  // (writing its result: a unit Q4_K's kernel would take)
        CHECK_FALSE(ember_cuda_mv_unit_ok(u));
        CHECK_FALSE(ember_cuda_mv_norm_ok(a, sum, nrm, out));
        CHECK_FALSE(ember_cuda_mv_norm_reader_ok(a));
        // Rows off the loads' alignment (2 bytes past it: the 4-byte-aligned types' words would
        // straddle): not the dp4a kernel.
        if (ember_type_get_traits(wt)->type_size % 4 == 0) {
            char * data = static_cast<char *>(wa->data);
            wa->data    = data + 2;
            CHECK_FALSE(ember_cuda_mul_mat_vec_q_supported(a));
            wa->data = data;
        }
        ember_buffer_free(leaves);
    }
    unsetenv("EMBER_CUDA_IQ4XS_WIDE");
}

// Q5_K with 16-byte-aligned rows (its GGUF layout) in Q4_K's kernels (EMBER_CUDA_Q5K_WIDE, on by
// default): gate / up and Q / K grouped, units with RoPE and cache writes, a producer and reader of
// the norm-in-product copy (with Q4_K's switch, EMBER_CUDA_MV_NORM_Q4K); none of it at =0 or with
// rows off the 16-byte alignment.
// IQ4_XS the same (EMBER_CUDA_IQ4XS_WIDE, on by default; rows 8-byte aligned).
TEST_CASE("[cuda plan] the backend's hooks: Q5_K and IQ4_XS in Q4_K's kernels: groups, units, the norm-in-product copy") {
    struct sw_case {
        ember_type  t;
        const char *var, *value;
        bool        on;
    };
    for (const sw_case & sc : {sw_case{EMBER_TYPE_Q5_K, "EMBER_CUDA_Q5K_WIDE", "", true}, sw_case{EMBER_TYPE_Q5_K, "EMBER_CUDA_Q5K_WIDE", "0", false},
                               sw_case{EMBER_TYPE_IQ4_XS, "EMBER_CUDA_IQ4XS_WIDE", "", true}, sw_case{EMBER_TYPE_IQ4_XS, "EMBER_CUDA_IQ4XS_WIDE", "0", false}}) {
        setenv(sc.var, sc.value, 1);
        const bool        on = sc.on;
        const std::string tn = ember_type_get_name(sc.t);
        CAPTURE(tn);
        CAPTURE(on);
        ember_graph              g;
        std::vector<layer_nodes> layers;
        g.build_forward(build_layers(g, EMBER_TYPE_F16, layers, sc.t));
        for (ember_tensor * t : g.leafs) {
            if (t->type == sc.t) t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        }
        ember_buffer *        leaves = place_graph(g);
        ember_cuda_plan_hooks h;
        h.unit_ok                                     = ember_cuda_mv_unit_ok;
        h.can_share                                   = ember_cuda_mul_mat_vec_q_can_share;
        const std::vector<ember_cuda_unit_plan> plans = plan_all(g, h);
        if (on) {
            check_qkv_units(plans, layers);
        } else {
            CHECK(plans.empty());
        }
        const ember_tensor * q = layers[0].q_mm;
        CHECK(ember_cuda_mul_mat_vec_q_can_share(q, layers[0].k_mm) == on);
        CHECK(ember_cuda_mv_norm_reader_ok(q) == on);
        ember_cuda_mv_unit u{};
        u.mm = layers[0].q_mm;
        CHECK(ember_cuda_mv_unit_ok(u) == on);
        // The producer: a Q5_K product with the residual ADD, RMS_NORM and MUL after it.
        {
            ember_graph    g2;
            ember_tensor * x2 = g2.new_tensor(EMBER_TYPE_F32, 512, 1);
            ember_tensor * w2 = g2.new_tensor(sc.t, 512, 64);
            w2->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            ember_tensor * a   = ember_mul_mat(g2, w2, x2);
            ember_tensor * sum = ember_add(g2, g2.new_tensor(EMBER_TYPE_F32, 64, 1), a);
            ember_tensor * nrm = ember_rms_norm(g2, sum, 1e-5f);
            ember_tensor * out = ember_mul(g2, nrm, g2.new_tensor(EMBER_TYPE_F32, 64));
            g2.build_forward(out);
            ember_buffer * l2 = place_graph(g2);
            CHECK(ember_cuda_mv_norm_ok(a, sum, nrm, out) == on);
            setenv("EMBER_CUDA_MV_NORM_Q4K", "0", 1);
            CHECK_FALSE(ember_cuda_mv_norm_ok(a, sum, nrm, out));
            CHECK_FALSE(ember_cuda_mv_norm_reader_ok(q));
            unsetenv("EMBER_CUDA_MV_NORM_Q4K");
            ember_buffer_free(l2);
        }
        ember_tensor * w    = q->src[0];
        char *         data = static_cast<char *>(w->data);
        w->data             = data + 4;  // rows off the 16- / 8-byte alignment: the 4-byte-load kernel alone
        CHECK(ember_cuda_mul_mat_vec_q_supported(q));
        CHECK_FALSE(ember_cuda_mv_unit_ok(u));
        CHECK_FALSE(ember_cuda_mv_norm_reader_ok(q));
        CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_share(q, layers[0].k_mm));
        w->data = data;
        ember_buffer_free(leaves);
        unsetenv(sc.var);
    }
}

// Planar Q6_K products make the copy (mvp6_norm_kernel) by default, not with
// EMBER_CUDA_MV_NORM_Q6K=0, only in the planar layout (flagged as converted at upload) and with
// rows of whole 2048-weight segments.
TEST_CASE("[cuda plan] the backend's hooks: planar Q6_K makes the norm-in-product copy, its switch and layout") {
    const auto chain = [](ember_graph & g, int64_t k, ember_tensor ** f) {
        ember_tensor * w = g.new_tensor(EMBER_TYPE_Q6_K, k, 64);
        w->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;
        f[0] = ember_mul_mat(g, w, g.new_tensor(EMBER_TYPE_F32, k, 1));
        f[1] = ember_add(g, g.new_tensor(EMBER_TYPE_F32, 64, 1), f[0]);
        f[2] = ember_rms_norm(g, f[1], 1e-5f);
        f[3] = ember_mul(g, f[2], g.new_tensor(EMBER_TYPE_F32, 64));
        return f[3];
    };
    for (int64_t k : {int64_t{2048}, int64_t{4096}, int64_t{2304}}) {
        CAPTURE(k);
        ember_graph    g;
        ember_tensor * f[4];
        g.build_forward(chain(g, k, f));
        ember_buffer * leaves = place_graph(g);
        CHECK(ember_cuda_mv_norm_ok(f[0], f[1], f[2], f[3]) == (k % 2048 == 0));  // the default: on
        setenv("EMBER_CUDA_MV_NORM_Q6K", "0", 1);
        CHECK_FALSE(ember_cuda_mv_norm_ok(f[0], f[1], f[2], f[3]));
        unsetenv("EMBER_CUDA_MV_NORM_Q6K");
        f[0]->src[0]->flags &= ~EMBER_TENSOR_FLAG_CUDA_REPACKED;  // the GGUF layout: no
        CHECK_FALSE(ember_cuda_mv_norm_ok(f[0], f[1], f[2], f[3]));
        ember_buffer_free(leaves);
    }
}

// Which products read the norm-in-product copy (ember_cuda_mv_norm_reader_ok, shapes only): planar
// Q6_K per-layer products (a V unit) do, a vocabulary-sized planar Q6_K output does not (its NS
// form measured slower than the norm's own launch), Q4_K only with EMBER_CUDA_MV_NORM_Q4K on,
// INT4 / NF4 in the ext layout only with EMBER_CUDA_MV_NORM_EXT on, F16 and Q6_K in the GGUF
// layout never.
TEST_CASE("[cuda plan] the backend's hooks: the readers of the norm-in-product copy") {
    ember_graph g;
    const auto  mm = [&](ember_type t, int64_t k, int64_t n, bool converted) {
        ember_tensor * w = g.new_tensor(t, k, n);
        w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        if (converted) w->flags |= EMBER_TENSOR_FLAG_CUDA_REPACKED;
        return ember_mul_mat(g, w, g.new_tensor(EMBER_TYPE_F32, k, 1));
    };
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q6_K, 4096, 1024, true)));
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q6_K, 2048, 32768, true)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q6_K, 4096, 128256, true)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q6_K, 4096, 1024, false)));
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q4_0, 4096, 128256, true)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_F16, 4096, 1024, false)));
    // Ember's types in the ext layout: INT4 and NF4 (mvx_kernel NS), not INT4_G32 (no NS form);
    // none with EMBER_CUDA_MV_NORM_EXT=0. FP8 (mvx_fp8_mma_kernel NS) by default on a device with
    // its tensor-core kernel (none here: not at all), never with EMBER_CUDA_MV_NORM_FP8=0.
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_INT4, 4096, 1024, true)));
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_NF4, 4096, 128256, true)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_INT4, 4096, 1024, false)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_INT4_G32, 4096, 1024, true)));
    const bool fp8_here = ember_cuda_fp8_ns_reader_here();
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_FP8_E4M3, 4096, 1024, true)) == fp8_here);
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_FP8_E5M2_ROW, 4096, 1024, true)) == fp8_here);
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_FP8_E4M3, 4096, 1024, false)));
    setenv("EMBER_CUDA_MV_NORM_FP8", "0", 1);
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_FP8_E4M3, 4096, 1024, true)));
    unsetenv("EMBER_CUDA_MV_NORM_FP8");
    // Whose copy a reader may take (pair_ok): an FP8 producer's (floats, no 8-bit values) only FP8
    // products; an 8-bit producer's (no floats) all the others.
    ember_tensor * fp8  = mm(EMBER_TYPE_FP8_E4M3, 4096, 1024, true);
    ember_tensor * fp8r = mm(EMBER_TYPE_FP8_E4M3_ROW, 4096, 1024, true);
    ember_tensor * q40  = mm(EMBER_TYPE_Q4_0, 4096, 1024, true);
    ember_tensor * nf4  = mm(EMBER_TYPE_NF4, 4096, 1024, true);
    CHECK(ember_cuda_mv_norm_pair_ok(fp8, fp8r));
    CHECK_FALSE(ember_cuda_mv_norm_pair_ok(fp8, q40));
    CHECK_FALSE(ember_cuda_mv_norm_pair_ok(fp8, nf4));
    CHECK_FALSE(ember_cuda_mv_norm_pair_ok(q40, fp8));
    CHECK(ember_cuda_mv_norm_pair_ok(nf4, q40));
    setenv("EMBER_CUDA_MV_NORM_EXT", "0", 1);
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_INT4, 4096, 1024, true)));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_NF4, 4096, 1024, true)));
    setenv("EMBER_CUDA_MV_NORM_EXT", "", 1);
    ember_tensor * q4k = mm(EMBER_TYPE_Q4_K, 4096, 1024, false);
    q4k->src[0]->data  = reinterpret_cast<void *>(uintptr_t{1} << 20);  // rows 16-byte aligned (144 * 16 bytes a row)
    CHECK(ember_cuda_mv_norm_reader_ok(q4k));
    setenv("EMBER_CUDA_MV_NORM_Q4K", "0", 1);
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(q4k));
    CHECK_FALSE(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q6_K, 4096, 1024, true)));
    CHECK(ember_cuda_mv_norm_reader_ok(mm(EMBER_TYPE_Q8_0, 4096, 1024, true)));
    setenv("EMBER_CUDA_MV_NORM_Q4K", "", 1);
}

// The same plan with the CUDA backend's own hooks (ember_cuda_mv_unit_ok, ..._can_share: host
// code, no device needed) for weights in the backend's layouts (flagged as converted at upload,
// as the CUDA buffer does): every type with an epilogue kernel must give one Q/K/V launch with
// its RoPE and F16 cache writes, and gate / up must group. Until session 26 the hooks refused
// Ember's own types, so their layers ran as 14 launches instead of 8 and no test noticed.
TEST_CASE("[cuda plan] the backend's hooks: Q/K/V units and gate/up groups for every type with an epilogue kernel") {
    for (ember_type wt : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3,
                          EMBER_TYPE_FP8_E5M2_ROW}) {
        const std::string tn = ember_type_get_name(wt);
        CAPTURE(tn);
        ember_graph              g;
        std::vector<layer_nodes> layers;
        g.build_forward(build_layers(g, EMBER_TYPE_F16, layers, wt));
        for (ember_tensor * t : g.leafs) {
            if (t->type == wt) t->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;
        }
        ember_buffer *        leaves = place_graph(g);
        ember_cuda_plan_hooks h;
        h.unit_ok                                     = ember_cuda_mv_unit_ok;
        h.can_share                                   = ember_cuda_mul_mat_vec_q_can_share;
        const std::vector<ember_cuda_unit_plan> plans = plan_all(g, h);
        check_qkv_units(plans, layers);
        // Gate and up over one x group; a weight of another type or one not converted does not.
        ember_tensor * x    = g.new_tensor(EMBER_TYPE_F32, 256, 1);
        ember_tensor * wg   = g.new_tensor(wt, 256, 768);
        ember_tensor * wu   = g.new_tensor(wt, 256, 768);
        ember_tensor * wraw = g.new_tensor(wt, 256, 768);
        ember_tensor * wq4  = g.new_tensor(wt == EMBER_TYPE_Q4_0 ? EMBER_TYPE_Q8_0 : EMBER_TYPE_Q4_0, 256, 768);
        for (ember_tensor * w : {wg, wu, wq4}) w->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;
        std::vector<char> mem(static_cast<size_t>(ember_nbytes(x) + ember_nbytes(wg) + ember_nbytes(wu) + ember_nbytes(wraw) + ember_nbytes(wq4)) + 4 * 256);
        size_t            off = 0;
        for (ember_tensor * t : {x, wg, wu, wraw, wq4}) {  // distinct memory: no hazards
            t->data = mem.data() + off;
            off += (ember_nbytes(t) + 255) / 256 * 256;
        }
        ember_tensor * gate = ember_mul_mat(g, wg, x);
        ember_tensor * up   = ember_mul_mat(g, wu, x);
        ember_tensor * raw  = ember_mul_mat(g, wraw, x);
        ember_tensor * other = ember_mul_mat(g, wq4, x);
        std::vector<float> y(4 * 768);
        gate->data  = y.data();
        up->data    = y.data() + 768;
        raw->data   = y.data() + 2 * 768;
        other->data = y.data() + 3 * 768;
        CHECK(ember_cuda_mul_mat_vec_q_can_group(gate, up));
        CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_group(gate, other));
        if (wt != EMBER_TYPE_Q4_0 && wt != EMBER_TYPE_Q8_0) {
            CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_group(gate, raw));  // GGUF bytes: the generic kernel
        }
        ember_buffer_free(leaves);
    }
}

// (Q5_K_M's layers the same by default, EMBER_CUDA_MV_K4P6_Q5K; at =0, two launches.)
TEST_CASE("[cuda plan] the backend's hooks: Q4_K_M's V in planar Q6_K is a unit of its own with its cache write") {
    for (ember_type wt : {EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K}) {
        const std::string tn = ember_type_get_name(wt);
        CAPTURE(tn);
        ember_graph              g;
        std::vector<layer_nodes> layers;
        g.build_forward(build_layers(g, EMBER_TYPE_F16, layers, wt, EMBER_TYPE_Q6_K));
        for (ember_tensor * t : g.leafs) {
            if (t->type == EMBER_TYPE_Q6_K) t->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;  // the planar layout
            if (t->type == wt) t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        }
        ember_buffer *        leaves = place_graph(g);
        ember_cuda_plan_hooks h;
        h.unit_ok                                     = ember_cuda_mv_unit_ok;
        h.can_share                                   = ember_cuda_mul_mat_vec_q_can_share;
        setenv("EMBER_CUDA_MV_K4P6", "0", 1);
        const std::vector<ember_cuda_unit_plan> plans = plan_all(g, h);
        // With EMBER_CUDA_MV_K4P6=0, per layer: Q and K (Q4_K, RoPE, K's cache write) in one launch, then V alone (a kernel of
        // another type) with its cache write; no RoPE on a Q6_K unit.
        REQUIRE(plans.size() == 2 * layers.size());
        for (size_t l = 0; l < layers.size(); l++) {
            CAPTURE(l);
            const ember_cuda_unit_plan & qk = plans[2 * l];
            const ember_cuda_unit_plan & v  = plans[2 * l + 1];
            REQUIRE(qk.n == 2);
            CHECK(qk.u[0].rope == layers[l].q_rope);
            CHECK(qk.u[1].set_rows == layers[l].k_set);
            REQUIRE(v.n == 1);
            CHECK(v.u[0].mm == layers[l].v_mm);
            CHECK(v.u[0].set_rows == layers[l].v_set);
            CHECK(v.u[0].rope == nullptr);
        }
        CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_share(layers[0].k_mm, layers[0].v_mm));
        // By default (EMBER_CUDA_MV_K4P6), Q, K and V are the units of one launch (mvk_p6_kernel);
        // still no plain group of the two types (gate / up and other groups: can_group).
        unsetenv("EMBER_CUDA_MV_K4P6");
        if (wt == EMBER_TYPE_Q5_K) {
            setenv("EMBER_CUDA_MV_K4P6_Q5K", "0", 1);
            CHECK(plan_all(g, h).size() == 2 * layers.size());  // (not without its own switch)
            unsetenv("EMBER_CUDA_MV_K4P6_Q5K");
        }
        const std::vector<ember_cuda_unit_plan> one = plan_all(g, h);
        REQUIRE(one.size() == layers.size());
        for (size_t l = 0; l < layers.size(); l++) {
            CAPTURE(l);
            REQUIRE(one[l].n == 3);
            CHECK(one[l].u[0].rope == layers[l].q_rope);
            CHECK(one[l].u[1].set_rows == layers[l].k_set);
            CHECK(one[l].u[2].mm == layers[l].v_mm);
            CHECK(one[l].u[2].set_rows == layers[l].v_set);
        }
        CHECK(ember_cuda_mul_mat_vec_q_can_share(layers[0].k_mm, layers[0].v_mm));
        CHECK_FALSE(ember_cuda_mul_mat_vec_q_can_group(layers[0].k_mm, layers[0].v_mm));
        // The same V unit with a RoPE, or in the GGUF layout, is refused.
        ember_cuda_mv_unit u = plans[1].u[0];
        u.rope               = layers[0].k_rope;
        CHECK_FALSE(ember_cuda_mv_unit_ok(u));
        layers[0].v_mm->src[0]->flags &= ~EMBER_TENSOR_FLAG_CUDA_REPACKED;
        CHECK_FALSE(ember_cuda_mv_unit_ok(plans[1].u[0]));
        ember_buffer_free(leaves);
    }
}

// The same with the CUDA backend's own conditions (host code) on allocator-placed tensors: Q4_0 /
// Q8_0 weights in the CUDA layout, INT4 / NF4 in the ext layout and Q4_K take it in every layer;
// Q4_0 / Q8_0 / INT4 / NF4 in the GGUF layout, not; INT4 / NF4 not with EMBER_CUDA_MV_GLU_EXT=0,
// NF4 not with EMBER_CUDA_MV_GLU_NF4=0, Q4_K not with EMBER_CUDA_MV_GLU_Q4K=0; IQ4_XS (in Q4_K's
// kernel) and Q5_K by default, not with EMBER_CUDA_MV_GLU_IQ4XS=0 / EMBER_CUDA_MV_GLU_Q5K=0 nor with
// EMBER_CUDA_IQ4XS_WIDE=0 / EMBER_CUDA_Q5K_WIDE=0.
TEST_CASE("[cuda plan] the backend's hooks: the gate / up products with their SWIGLU") {
    for (ember_type wt : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_INT4, EMBER_TYPE_NF4, EMBER_TYPE_IQ4_XS, EMBER_TYPE_Q5_K}) {
        for (bool repacked : {true, false}) {
            const std::string tn = ember_type_get_name(wt);
            CAPTURE(tn);
            CAPTURE(repacked);
            const bool                  gguf_only = wt == EMBER_TYPE_IQ4_XS || wt == EMBER_TYPE_Q5_K;  // (never repacked: the GGUF layout either way)
            ember_graph                 g;
            std::vector<ember_tensor *> o_mm, down_mm;
            g.build_forward(build_decoder(g, wt, wt, o_mm, down_mm));
            for (ember_tensor * t : g.leafs) {
                if (t->type != wt || !repacked) continue;
                t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
                if (!gguf_only) t->flags |= EMBER_TENSOR_FLAG_CUDA_REPACKED;
            }
            ember_buffer * leaves = place_graph(g);
            if (gguf_only) {
                const bool   q5   = wt == EMBER_TYPE_Q5_K;
                const char * sw   = q5 ? "EMBER_CUDA_MV_GLU_Q5K" : "EMBER_CUDA_MV_GLU_IQ4XS";
                const char * wide = q5 ? "EMBER_CUDA_Q5K_WIDE" : "EMBER_CUDA_IQ4XS_WIDE";
                CHECK(glu_sites(g, ember_cuda_mv_glu_ok).size() == 3u);
                setenv(sw, "0", 1);
                CHECK(glu_sites(g, ember_cuda_mv_glu_ok).empty());
                unsetenv(sw);
                setenv(wide, "0", 1);
                CHECK(glu_sites(g, ember_cuda_mv_glu_ok).empty());
                unsetenv(wide);
                ember_buffer_free(leaves);
                continue;
            }
            const bool     q4k    = wt == EMBER_TYPE_Q4_K;  // (mvk_glu_kernel: the GGUF layout, 16-byte-aligned rows)
            const bool     want   = (repacked && (wt == EMBER_TYPE_Q4_0 || wt == EMBER_TYPE_Q8_0)) || q4k;
            const bool     nf4    = wt == EMBER_TYPE_NF4;
            const bool     want_ext = want || (repacked && (wt == EMBER_TYPE_INT4 || nf4));  // (mvx_glu_kernel)
            CHECK(glu_sites(g, ember_cuda_mv_glu_ok).size() == (want_ext ? 3u : 0u));
            setenv("EMBER_CUDA_MV_GLU_EXT", "0", 1);  // INT4 / NF4 off, the others as they were
            CHECK(glu_sites(g, ember_cuda_mv_glu_ok).size() == (want ? 3u : 0u));
            unsetenv("EMBER_CUDA_MV_GLU_EXT");
            setenv("EMBER_CUDA_MV_GLU_NF4", "0", 1);  // NF4 off, the others as they were
            CHECK(glu_sites(g, ember_cuda_mv_glu_ok).size() == (want_ext && !nf4 ? 3u : 0u));
            unsetenv("EMBER_CUDA_MV_GLU_NF4");
            setenv("EMBER_CUDA_MV_GLU_Q4K", "0", 1);  // Q4_K off, the others as they were
            CHECK(glu_sites(g, ember_cuda_mv_glu_ok).size() == (want_ext && !q4k ? 3u : 0u));
            unsetenv("EMBER_CUDA_MV_GLU_Q4K");
            ember_buffer_free(leaves);
        }
    }
    // NF4 rows of at most 128 blocks (mvx_glu_kernel's absmax table in shared memory): 8192 wide
    // yes, 129 blocks no.
    for (int64_t k : {int64_t{64 * 128}, int64_t{64 * 129}}) {
        CAPTURE(k);
        ember_graph    g;
        ember_tensor * x  = g.new_tensor(EMBER_TYPE_F32, k, 1);
        ember_tensor * wg = g.new_tensor(EMBER_TYPE_NF4, k, 64);
        ember_tensor * wu = g.new_tensor(EMBER_TYPE_NF4, k, 64);
        wg->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;
        wu->flags |= EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED;
        ember_tensor * gt  = ember_mul_mat(g, wg, x);
        ember_tensor * up  = ember_mul_mat(g, wu, x);
        ember_tensor * glu = ember_swiglu(g, gt, up);
        g.build_forward(ember_add(g, glu, g.new_tensor(EMBER_TYPE_F32, 64, 1)));
        ember_buffer * leaves = place_graph(g);
        CHECK(ember_cuda_mv_glu_ok(gt, up, glu) == (k <= 64 * 128));
        ember_buffer_free(leaves);
    }
}

// F16 / BF16 decode products over one x in one launch (EMBER_CUDA_F16_GROUP, on by default;
// =0 not): products of one type and width over the same x, with 16-byte-aligned rows (the
// wide kernel's conditions, mvh_ok), and nothing else: another type, another width, another x,
// x off the alignment, the switch off, EMBER_CUDA_F16_WIDE=0.
TEST_CASE("[cuda plan] the backend's hooks: F16 / BF16 products over one x grouped (EMBER_CUDA_F16_GROUP)") {
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_BF16}) {
        const std::string tn = ember_type_get_name(t);
        CAPTURE(tn);
        ember_graph    g;
        ember_tensor * x  = g.new_tensor(EMBER_TYPE_F32, 512, 1);
        ember_tensor * x2 = g.new_tensor(EMBER_TYPE_F32, 512, 1);
        ember_tensor * xo = g.new_tensor(EMBER_TYPE_F32, 516, 1);
        ember_tensor * x3 = g.new_tensor(EMBER_TYPE_F32, 1024, 1);
        const auto     w  = [&](ember_type wt, int64_t k, int64_t n) {
            ember_tensor * r = g.new_tensor(wt, k, n);
            r->flags |= EMBER_TENSOR_FLAG_WEIGHT;
            return r;
        };
        const ember_type other = t == EMBER_TYPE_F16 ? EMBER_TYPE_BF16 : EMBER_TYPE_F16;
        ember_tensor *   xv    = ember_view(g, xo, 512, 1, 1, 1, 4);  // x 4 bytes off the alignment
        ember_tensor *   q     = ember_mul_mat(g, w(t, 512, 256), x);
        ember_tensor *   k     = ember_mul_mat(g, w(t, 512, 64), x);
        ember_tensor *   o     = ember_mul_mat(g, w(other, 512, 64), x);  // another type
        ember_tensor *   x2p   = ember_mul_mat(g, w(t, 512, 64), x2);     // another x
        ember_tensor *   u1    = ember_mul_mat(g, w(t, 512, 64), xv);
        ember_tensor *   u2    = ember_mul_mat(g, w(t, 512, 64), xv);
        ember_tensor *   wide  = ember_mul_mat(g, w(t, 1024, 64), x3);  // another width (and x)
        ember_tensor *   sum   = ember_view(g, q, 64, 1);
        for (ember_tensor * p : {k, o, x2p, u1, u2, wide}) sum = ember_add(g, sum, p);
        g.build_forward(sum);
        ember_buffer * leaves = place_graph(g);
        setenv("EMBER_CUDA_F16_GROUP", "0", 1);
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, k));
        unsetenv("EMBER_CUDA_F16_GROUP");  // (on by default)
        CHECK(ember_cuda_mul_mat_vec_f16_can_group(q, k));
        CHECK(ember_cuda_mul_mat_vec_f16_can_group(k, q));
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, q));
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, o));
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, x2p));
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(u1, u2));
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, wide));
        setenv("EMBER_CUDA_F16_WIDE", "0", 1);
        CHECK_FALSE(ember_cuda_mul_mat_vec_f16_can_group(q, k));
        unsetenv("EMBER_CUDA_F16_WIDE");
        unsetenv("EMBER_CUDA_F16_GROUP");
        ember_buffer_free(leaves);
    }
}

// F16 / BF16 units and gate / up with their SWIGLU (EMBER_CUDA_F16_FUSE, on by default) on
// build_decoder's allocator-placed layers: every layer's Q, K and V units (Q with its RoPE, K with
// RoPE and cache write, V with its cache write) in one launch (EMBER_CUDA_F16_GROUP, on by default)
// and in three with EMBER_CUDA_F16_GROUP=0; the gate / up / SWIGLU sites in every layer; nothing
// with the switch off, with EMBER_CUDA_F16_WIDE=0, or for Q4_0 weights (the integer hooks take
// those). The allocator places some layers' SWIGLU over x's memory (x is dead once up has read it):
// the launch then writes it to scratch memory, which needs the down product the only reader
// (ember_cuda_only_matvecs_read). A gate product placed over x by hand is refused (the kernel reads
// x as it writes gate).
TEST_CASE("[cuda plan] the backend's hooks: F16 / BF16 units and gate / up with the SWIGLU (EMBER_CUDA_F16_FUSE)") {
    const auto plans_with = [](ember_graph & g) {
        ember_cuda_plan_hooks h;
        h.unit_ok   = ember_cuda_mv_f16_unit_ok;
        h.can_share = ember_cuda_mul_mat_vec_f16_can_share;
        return plan_all(g, h);
    };
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q4_0}) {
        const std::string tn = ember_type_get_name(t);
        CAPTURE(tn);
        ember_graph                 g;
        std::vector<ember_tensor *> o_mm, down_mm;
        g.build_forward(build_decoder(g, t, t, o_mm, down_mm));
        for (ember_tensor * l : g.leafs) {
            if (l->type == t) l->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        }
        ember_buffer * leaves = place_graph(g);
        const bool     f16    = t != EMBER_TYPE_Q4_0;
        setenv("EMBER_CUDA_F16_FUSE", "0", 1);
        CHECK(plans_with(g).empty());
        CHECK(glu_sites(g, ember_cuda_mv_f16_glu_ok).empty());
        unsetenv("EMBER_CUDA_F16_FUSE");  // (on by default, and EMBER_CUDA_F16_GROUP)
        const auto grouped = plans_with(g);
        setenv("EMBER_CUDA_F16_GROUP", "0", 1);
        const auto single = plans_with(g);
        unsetenv("EMBER_CUDA_F16_GROUP");
        const auto glus = glu_sites(g, ember_cuda_mv_f16_glu_ok);
        if (f16) {
            REQUIRE(grouped.size() == 3);
            for (const ember_cuda_unit_plan & p : grouped) {
                REQUIRE(p.n == 3);
                CHECK(p.u[0].rope);
                CHECK(p.u[1].rope);
                CHECK(p.u[1].set_rows);
                CHECK(p.u[2].set_rows);
                CHECK_FALSE(p.u[2].rope);
            }
            CHECK(single.size() == 9);  // (each unit its own launch)
            for (const ember_cuda_unit_plan & p : single) CHECK(p.n == 1);
            REQUIRE(glus.size() == 3);
            int over_x = 0;
            for (const auto & s : glus) {
                CHECK_FALSE(s.store_gu);
                over_x += ember_cuda_overlaps(s.glu, s.gate->src[1]);
                const auto at = std::find(g.nodes.begin(), g.nodes.end(), s.glu) - g.nodes.begin();
                CHECK(ember_cuda_only_matvecs_read(&g, s.glu, static_cast<int32_t>(at + 1), static_cast<int32_t>(g.nodes.size()),
                                                   ember_cuda_mv_f16_fuse_on));
            }
            CHECK(over_x > 0);  // (what the scratch path is for)
            setenv("EMBER_CUDA_F16_WIDE", "0", 1);
            CHECK(plans_with(g).empty());
            CHECK(glu_sites(g, ember_cuda_mv_f16_glu_ok).empty());
            unsetenv("EMBER_CUDA_F16_WIDE");
        } else {
            CHECK(grouped.empty());
            CHECK(single.empty());
            CHECK(glus.empty());
        }
        unsetenv("EMBER_CUDA_F16_FUSE");
        ember_buffer_free(leaves);
    }
    // gate's floats over x's.
    ember_graph    g;
    ember_tensor * xb  = g.new_tensor(EMBER_TYPE_F32, 512, 1);
    ember_tensor * x   = ember_view(g, xb, 256, 1);
    ember_tensor * wg  = g.new_tensor(EMBER_TYPE_F16, 256, 128);
    ember_tensor * wu  = g.new_tensor(EMBER_TYPE_F16, 256, 128);
    ember_tensor * gt  = ember_mul_mat(g, wg, x);
    ember_tensor * up  = ember_mul_mat(g, wu, x);
    ember_tensor * glu = ember_swiglu(g, gt, up);
    g.build_forward(ember_add(g, glu, g.new_tensor(EMBER_TYPE_F32, 128, 1)));
    ember_buffer * leaves = place_graph(g);
    setenv("EMBER_CUDA_F16_FUSE", "1", 1);
    CHECK(ember_cuda_mv_f16_glu_ok(gt, up, glu));
    void * placed = gt->data;
    gt->data      = static_cast<char *>(xb->data) + 1024;  // past x's 256 floats: no overlap
    CHECK(ember_cuda_mv_f16_glu_ok(gt, up, glu));
    gt->data = static_cast<char *>(xb->data) + 768;  // over x's last 64 floats
    CHECK_FALSE(ember_cuda_mv_f16_glu_ok(gt, up, glu));
    gt->data = placed;
    unsetenv("EMBER_CUDA_F16_FUSE");
    ember_buffer_free(leaves);
}
#endif

TEST_CASE("cuda plan: EMBER_CUDA_SKIP lists and the kind of each decode node") {
    CHECK(ember_cuda_skip_parse(nullptr) == 0);
    CHECK(ember_cuda_skip_parse("") == 0);
    CHECK(ember_cuda_skip_parse("norm") == EMBER_CUDA_SKIP_NORM);
    CHECK(ember_cuda_skip_parse("norm,attn,glu") == (EMBER_CUDA_SKIP_NORM | EMBER_CUDA_SKIP_ATTN | EMBER_CUDA_SKIP_GLU));
    CHECK(ember_cuda_skip_parse("mv,other") == (EMBER_CUDA_SKIP_MATVEC | EMBER_CUDA_SKIP_OTHER));
    CHECK(ember_cuda_skip_parse("norms,xmv,attn") == EMBER_CUDA_SKIP_ATTN);  // whole names only
    CHECK(ember_cuda_skip_parse(",,glu,") == EMBER_CUDA_SKIP_GLU);
    CHECK(ember_cuda_skip_parse("norm+attn") == (EMBER_CUDA_SKIP_NORM | EMBER_CUDA_SKIP_ATTN));  // bench-gpu.sh variants
    ember_graph    g;
    ember_tensor * w = g.new_tensor(EMBER_TYPE_F32, 8, 4);
    ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 8, 1);
    CHECK(ember_cuda_skip_kind_of(ember_mul_mat(g, w, x)) == EMBER_CUDA_SKIP_MATVEC);
    CHECK(ember_cuda_skip_kind_of(ember_rms_norm(g, x, 1e-5f)) == EMBER_CUDA_SKIP_NORM);
    CHECK(ember_cuda_skip_kind_of(ember_add(g, x, x)) == EMBER_CUDA_SKIP_NORM);
    CHECK(ember_cuda_skip_kind_of(ember_swiglu(g, x, x)) == EMBER_CUDA_SKIP_GLU);
    CHECK(ember_cuda_skip_kind_of(ember_scale(g, x, 2.0f)) == EMBER_CUDA_SKIP_OTHER);
    // "w:NAME": the products whose weight's name holds NAME
    std::snprintf(w->name, sizeof(w->name), "blk.3.ffn_down.weight");
    ember_tensor * down = ember_mul_mat(g, w, x);
    CHECK(ember_cuda_skip_weight("norm+w:ffn_down", down));
    CHECK(ember_cuda_skip_weight("w:blk.3.", down));
    CHECK_FALSE(ember_cuda_skip_weight("w:ffn_gate,norm", down));
    CHECK_FALSE(ember_cuda_skip_weight("ffn_down", down));  // a kind list, not a weight entry
    CHECK_FALSE(ember_cuda_skip_weight("w:ffn_down", ember_rms_norm(g, x, 1e-5f)));
    CHECK_FALSE(ember_cuda_skip_weight(nullptr, down));
}

// Which decode attentions may read their cache rows before the PDL wait
// (ember_cuda_attn_early_rows): the runtime's layer (K and V views of SET_ROWS over one index
// input, a mask input), with the inputs as leaves or as the scheduler's hoisted copies of them;
// not with indices or a mask a node computes, a view that does not start at the cache's row 0, two
// index tensors, or more written rows than the kernel holds; leaves K / V (nothing writes them).
TEST_CASE("[cuda plan] the decode attention's early cache rows: which graphs allow them") {
    enum variant { plain, copies, idx_made, mask_made, offset_view, two_idx, many_rows, leaf_kv };
    const auto check = [](variant vr, bool want, int want_n) {
        CAPTURE(static_cast<int>(vr));
        ember_graph   g;
        const int64_t hd = 64, n_head_kv = 2, n_ctx = 16, n_kv = 8, T = vr == many_rows ? 9 : 1;
        ember_tensor * idx  = g.new_tensor(EMBER_TYPE_I32, T);
        ember_tensor * mask = g.new_tensor(EMBER_TYPE_F32, n_kv, T);
        ember_tensor * q    = g.new_tensor(EMBER_TYPE_F32, hd, 4, T);
        ember_tensor * kr   = g.new_tensor(EMBER_TYPE_F32, hd * n_head_kv, T);
        ember_tensor * vrw  = g.new_tensor(EMBER_TYPE_F32, hd * n_head_kv, T);
        ember_tensor * kc   = g.new_tensor(EMBER_TYPE_F16, hd * n_head_kv, n_ctx);
        ember_tensor * vc   = g.new_tensor(EMBER_TYPE_F16, hd * n_head_kv, n_ctx);
        ember_tensor * ki = idx, *vi = idx;
        if (vr == copies) ki = vi = ember_cpy(g, idx, EMBER_TYPE_I32), mask = ember_cpy(g, mask, EMBER_TYPE_F32);
        if (vr == idx_made) ki = vi = ember_cpy(g, ember_view(g, g.new_tensor(EMBER_TYPE_I32, 2 * T), T, 1), EMBER_TYPE_I32);
        if (vr == mask_made) mask = ember_add(g, mask, mask);
        if (vr == two_idx) vi = g.new_tensor(EMBER_TYPE_I32, T);
        ember_tensor * ka    = vr == leaf_kv ? kc : ember_set_rows(g, kc, kr, ki);
        ember_tensor * va    = vr == leaf_kv ? vc : ember_set_rows(g, vc, vrw, vi);
        const int64_t  ne[4] = {hd, n_head_kv, n_kv, 1};
        const size_t   kb[4] = {kc->nb[0], ember_row_size(EMBER_TYPE_F16, hd), kc->nb[1], kc->nb[1] * n_kv};
        ember_tensor * o     = ember_attn(g, q, ember_view_strided(g, ka, ne, kb, vr == offset_view ? kc->nb[1] : 0),
                                          ember_view_strided(g, va, ne, kb, 0), mask, 0.125f);
        g.build_forward(o);
        ember_buffer *  leaves = place_graph(g);
        const int32_t * rows   = nullptr;
        int             n      = -1;
        CHECK(ember_cuda_attn_early_rows(o, 8, &rows, &n) == want);
        if (want) {
            CHECK(n == want_n);
            CHECK(rows == (n ? static_cast<const int32_t *>(ki->data) : nullptr));
            if (n) CHECK(rows != nullptr);
        }
        ember_buffer_free(leaves);
    };
    check(plain, true, 1);
    check(copies, true, 1);
    check(leaf_kv, true, 0);
    check(idx_made, false, 0);
    check(mask_made, false, 0);
    check(offset_view, false, 0);
    check(two_idx, false, 0);
    check(many_rows, false, 0);
    // The decoder layers as the graph builder lays them out: every attention.
    ember_graph                 g;
    std::vector<ember_tensor *> o_mm, down_mm;
    g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, o_mm, down_mm));
    ember_buffer * leaves = place_graph(g);
    int            n_attn = 0;
    for (ember_tensor * node : g.nodes) {
        if (node->op != EMBER_OP_ATTN) continue;
        const int32_t * rows = nullptr;
        int             n    = 0;
        CHECK(ember_cuda_attn_early_rows(node, 8, &rows, &n));
        CHECK(n == 1);
        n_attn++;
    }
    CHECK(n_attn == 3);
    ember_buffer_free(leaves);
}


// A prefill's 16-bit copy of the activations (ember_cuda_ctx::xh_valid): made by a layer's Q and
// taken by its K and V, made by gate and taken by up, as the stream walks the allocator-placed
// decoder; the O and down products (other activations), the next layer's Q (a new norm) and the
// logits make their own. On hand-placed nodes: a cache write over x, a SCALE, or a matvec (scratch
// slot 0) between two products end the copy; so does a product over another x.
TEST_CASE("[cuda plan] a prefill's 16-bit activations taken by the next products over the same x") {
    ember_graph                 g;
    std::vector<ember_tensor *> o_mm, down_mm;
    g.build_forward(build_decoder(g, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, o_mm, down_mm, -1, EMBER_TYPE_Q6_K, false, 16));
    ember_buffer * leaves = place_graph(g);
    int32_t        made   = -1;
    int            n_made = 0, n_taken = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); i++) {
        const ember_tensor * n = g.nodes[i];
        if (n->op != EMBER_OP_MUL_MAT) continue;
        REQUIRE_FALSE(ember_cuda_is_matvec(n));
        if (made >= 0 && ember_cuda_xh_reusable(&g, made, i)) {
            n_taken++;
            CHECK(n->src[1] == g.nodes[made]->src[1]);
            CHECK(std::find(o_mm.begin(), o_mm.end(), n) == o_mm.end());
            CHECK(std::find(down_mm.begin(), down_mm.end(), n) == down_mm.end());
        } else {
            n_made++;
            made = i;
        }
    }
    CHECK(n_taken == 3 * 3);      // K, V and up in each of the 3 layers
    CHECK(n_made == 3 * 4 + 1);   // Q, O, gate, down in each, and the logits
    // The down products take the copy their SWIGLU makes (ember_cuda_swiglu_xh).
    for (ember_tensor * d : down_mm) {
        const int32_t i = static_cast<int32_t>(std::find(g.nodes.begin(), g.nodes.end(), d) - g.nodes.begin());
        REQUIRE(i >= 2);
        CHECK(g.nodes[i - 1]->op == EMBER_OP_SWIGLU);
        CHECK(ember_cuda_xh_reusable(&g, i - 1, i));
        CHECK_FALSE(ember_cuda_xh_reusable(&g, i - 2, i));  // the up product: another x
    }
    CHECK_FALSE(ember_cuda_xh_reusable(&g, -1, 3));
    CHECK_FALSE(ember_cuda_xh_reusable(&g, 5, 5));
    CHECK_FALSE(ember_cuda_xh_reusable(&g, 0, static_cast<int32_t>(g.nodes.size())));
    ember_buffer_free(leaves);

    // Hand-placed nodes: x at mem[0 ..), everything else elsewhere.
    std::vector<char> mem(1 << 20);
    ember_graph       h;
    ember_tensor *    x    = h.new_tensor(EMBER_TYPE_F32, 64, 16);
    ember_tensor *    y    = h.new_tensor(EMBER_TYPE_F32, 64, 16);
    ember_tensor *    x1   = h.new_tensor(EMBER_TYPE_F32, 64, 1);
    ember_tensor *    rows = h.new_tensor(EMBER_TYPE_F32, 64, 2);
    ember_tensor *    ids  = h.new_tensor(EMBER_TYPE_I32, 2);
    ember_tensor *    cache = h.new_tensor(EMBER_TYPE_F32, 64, 32);
    x->data                 = mem.data();
    size_t off              = 64 * 1024;
    for (ember_tensor * t : {y, x1, rows, ids, cache}) {
        t->data = mem.data() + off;
        off += 64 * 1024;
    }
    const auto mm = [&](ember_tensor * in) {
        ember_tensor * t = ember_mul_mat(h, h.new_tensor(EMBER_TYPE_Q4_0, 64, 32), in);
        t->data          = mem.data() + off;
        off += 64 * 1024;
        return t;
    };
    ember_tensor * a         = mm(x);
    ember_tensor * b         = mm(x);
    ember_tensor * other     = mm(y);
    ember_tensor * vec       = mm(x1);
    ember_tensor * set_cache = ember_set_rows(h, cache, rows, ids);
    ember_tensor * set_x     = ember_set_rows(h, x, rows, ids);
    ember_tensor * sc        = ember_scale(h, y, 2.0f);
    sc->data                 = mem.data() + off;
    const auto between = [&](std::vector<ember_tensor *> mid) {
        h.nodes.clear();
        h.nodes.push_back(a);
        for (ember_tensor * t : mid) h.nodes.push_back(t);
        h.nodes.push_back(b);
        return ember_cuda_xh_reusable(&h, 0, static_cast<int32_t>(h.nodes.size()) - 1);
    };
    CHECK(between({}));
    CHECK(between({set_cache}));
    CHECK(between({mm(x)}));
    CHECK_FALSE(between({set_x}));        // writes x's rows
    CHECK_FALSE(between({sc}));           // not a view, RoPE, cache write or product of x
    CHECK_FALSE(between({vec}));          // a matvec: its 8-bit copy in slot 0
    CHECK_FALSE(between({other}));        // a product over y converts y into slot 0
    CHECK_FALSE(between({set_cache, sc}));
    h.nodes = {a, other};
    CHECK_FALSE(ember_cuda_xh_reusable(&h, 0, 1));  // another x
}

}
