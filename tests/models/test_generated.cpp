// Generated tiny models (tests/support/tiny-model) of every architecture, weight type and
// variant, run through the C API and compared with the float64 reference forward pass
// (tests/support/ref-forward): teacher-forced logits of a whole prompt, and a greedy
// continuation that exercises the single-token path with a KV cache.
//
// Bounds, relative to scale = max |reference logit|:
//   F32 weights:        max |diff| < 1e-4 * scale     (F32 arithmetic against float64)
//   F16 weights:        max |diff| < 4e-3 * scale     (activations rounded to F16, as llama.cpp)
//   BF16 weights:       max |diff| < 1.6e-2 * scale   (activations rounded to BF16: 8x coarser than F16)
//   Q8_0, Q4_0 weights: max |diff| < 6e-2 * scale, RMS diff < 5e-2 * RMS(ref) (activations quantized to Q8_0)
// Top-1 must agree wherever the reference margin exceeds 2x the max bound (F32: 2e-3 * scale).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

struct weight_case {
    int32_t      type;
    const char * name;
    double       max_abs;
    double       rms;
    double       margin;
};

const weight_case k_weight_types[] = {
    {EMBER_TYPE_F32, "F32", 1e-4, 0, 2e-3},
    {EMBER_TYPE_F16, "F16", 4e-3, 0, 8e-3},
    {EMBER_TYPE_BF16, "BF16", 1.6e-2, 0, 3.2e-2},
    {EMBER_TYPE_Q8_0, "Q8_0", 6e-2, 5e-2, 1.2e-1},
    {EMBER_TYPE_Q4_0, "Q4_0", 6e-2, 5e-2, 1.2e-1},
};

struct variant {
    const char * what;
    void (*apply)(tiny_model_spec & s);
};

const variant k_variants[] = {
    {"GQA 4/2", [](tiny_model_spec &) {}},
    {"GQA 4/1 (MQA)", [](tiny_model_spec & s) { s.n_head_kv = 1; }},
    {"GQA 4/4 (MHA)", [](tiny_model_spec & s) { s.n_head_kv = 4; }},
    {"tied embeddings", [](tiny_model_spec & s) { s.tied = true; }},
    {"rope_freqs factors", [](tiny_model_spec & s) { s.rope_freqs = true; }},
    {"linear rope scaling x4", [](tiny_model_spec & s) { s.rope_scale_linear = 4.0f; }},
    {"freq_base 1e6, 8 heads of 8 kv 2", [](tiny_model_spec & s) {
         s.rope_freq_base = 1e6f;
         s.n_head         = 8;
         s.n_head_kv      = 2;
     }},
};

std::vector<int32_t> prompt_tokens(int32_t n_vocab, int32_t n, uint64_t seed) {
    std::mt19937_64      g(seed);
    std::vector<int32_t> t = {1};
    while (static_cast<int32_t>(t.size()) < n) t.push_back(static_cast<int32_t>(g() % static_cast<uint64_t>(n_vocab)));
    return t;
}

// Worst relative errors seen per weight type, reported once per test case.
struct worst_seen {
    double max_abs[5] = {0, 0, 0, 0, 0};
    double rms[5]     = {0, 0, 0, 0, 0};
    void   add(const weight_case & wc, const ember_test_logit_diff & d) {
        const size_t i = static_cast<size_t>(&wc - k_weight_types);
        max_abs[i]     = std::max(max_abs[i], d.rel_max());
        rms[i]         = std::max(rms[i], d.rel_rms());
    }
    std::string report() const {
        std::string out = "worst relative max|diff| / rms diff per weight type:";
        for (size_t i = 0; i < 5; i++) {
            char buf[96];
            std::snprintf(buf, sizeof(buf), " %s %.2g/%.2g (bound %.2g)", k_weight_types[i].name, max_abs[i], rms[i],
                          k_weight_types[i].max_abs);
            out += buf;
        }
        return out;
    }
};

// Greedy continuation of the float64 reference: n ids and their margins.
void ref_greedy(const ember_ref_model & m, std::vector<int32_t> toks, int32_t n, std::vector<int32_t> & ids,
                std::vector<double> & margins) {
    const int32_t V = m.cfg.n_vocab;
    for (int32_t s = 0; s < n; s++) {
        const std::vector<double> l   = ember_ref_forward(m, toks);
        const double *            row = l.data() + (toks.size() - 1) * static_cast<size_t>(V);
        ids.push_back(ember_test_argmax(row, V));
        margins.push_back(ember_test_margin(row, V));
        toks.push_back(ids.back());
    }
}

// Builds the model, runs Ember and the reference, compares logits and greedy ids.
void check_generated(const tiny_model_spec & spec, const weight_case & wc, worst_seen & worst) {
    const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
    CAPTURE(path);
    const ember_ref_model      ref  = ember_ref_load(path);
    const std::vector<int32_t> toks = prompt_tokens(spec.n_vocab, 24, spec.seed * 7919 + 1);
    const std::vector<double>  want = ember_ref_forward(ref, toks);
    double                     scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));

    ember_test_model_ptr model;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(path, model, err) == EMBER_OK, err);
    REQUIRE(ember_model_n_vocab(model.get()) == spec.n_vocab);
    CHECK(ember_model_n_head_kv(model.get()) == spec.n_head_kv);

    const int32_t         n_greedy = 8;
    ember_test_run_params p;  // F32 KV cache, one micro-batch
    ember_test_run_result got;
    REQUIRE_MESSAGE(ember_test_run(model.get(), toks, n_greedy, p, got, err) == EMBER_OK, err);

    const ember_test_logit_diff d = ember_test_compare_logits(want, got.logits, spec.n_vocab, wc.margin * scale);
    CAPTURE(d.summary());
    worst.add(wc, d);
    CHECK(d.finite);
    CHECK(d.rel_max() < wc.max_abs);
    if (wc.rms > 0) CHECK(d.rel_rms() < wc.rms);
    CHECK(d.argmax_bad.empty());

    std::vector<int32_t> ids;
    std::vector<double>  margins;
    ref_greedy(ref, toks, n_greedy, ids, margins);
    for (int32_t s = 0; s < n_greedy; s++) {
        CAPTURE(s);
        if (margins[static_cast<size_t>(s)] < wc.margin * scale) break;
        CHECK(got.greedy[static_cast<size_t>(s)] == ids[static_cast<size_t>(s)]);
        if (got.greedy[static_cast<size_t>(s)] != ids[static_cast<size_t>(s)]) break;
    }
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[generated] every arch x weight type x variant matches the float64 reference") {
    worst_seen worst;
    uint64_t   seed = 100;
    for (const char * arch : {"llama", "qwen2", "qwen3"}) {
        for (const weight_case & wc : k_weight_types) {
            for (const variant & v : k_variants) {
                const std::string arch_s = arch, type_s = wc.name, variant_s = v.what;
                CAPTURE(arch_s);
                CAPTURE(type_s);
                CAPTURE(variant_s);
                tiny_model_spec s;
                s.arch        = arch;
                s.weight_type = wc.type;
                s.seed        = ++seed;
                v.apply(s);
                check_generated(s, wc, worst);
            }
        }
    }
    MESSAGE(worst.report());
}

TEST_CASE("[generated] qwen3 with head_dim != n_embd / n_head") {
    // Qwen3 models set attention.key_length independently of n_embd / n_head.
    worst_seen worst;
    for (const weight_case & wc : k_weight_types) {
        const std::string type_s = wc.name;
        CAPTURE(type_s);
        tiny_model_spec s;
        s.arch        = "qwen3";
        s.weight_type = wc.type;
        s.head_dim    = 32;  // q: 4 heads x 32 = 128 > n_embd 64
        s.seed        = 77;
        check_generated(s, wc, worst);
    }
    MESSAGE(worst.report());
}

TEST_CASE("[generated] wider model, larger vocabulary, 3 layers") {
    worst_seen worst;
    for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
        CAPTURE(arch);
        tiny_model_spec s;
        s.arch      = arch;
        s.n_vocab   = 256;
        s.n_embd    = 128;
        s.n_layer   = 3;
        s.n_head    = 4;
        s.n_head_kv = 2;
        s.n_ff      = 224;
        s.seed      = 5;
        for (const weight_case & wc : k_weight_types) {
            const std::string type_s = wc.name;
            CAPTURE(type_s);
            s.weight_type = wc.type;
            check_generated(s, wc, worst);
        }
    }
    MESSAGE(worst.report());
}

}  // TEST_SUITE
