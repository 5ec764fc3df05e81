// Generated tiny models (tests/support/tiny-model) whose matrices are stored in each of
// Ember's own types, loaded and decoded through the C API and compared with the float64
// reference forward pass over the same dequantized weights; and a decode with FP8 K/V caches.
// Self-contained: no data directory needed.
//
// Bounds, relative to scale = max |reference logit| (measured values in the comments; the
// test prints them):
//   FP8_* weights:        max |diff| < 2e-5 * scale  (F32 activations: only float32 arithmetic
//                                                     differs from float64; measured <= 8e-7)
//   INT4, INT4_G32, NF4:  max |diff| < 6e-2 * scale, RMS diff < 5e-2 * RMS(ref)  (activations
//                         quantized to Q8_1 / Q8_0 before each dot product, Q4_0's bounds;
//                         measured <= 3.3e-2 and 2.3e-2)
// Top-1 must agree wherever the reference margin exceeds twice the max bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

struct type_case {
    int32_t      type;
    const char * name;
    double       max_abs;
    double       rms;  // 0: not checked
};

const type_case k_cases[] = {
    {EMBER_TYPE_INT4, "INT4", 6e-2, 5e-2},
    {EMBER_TYPE_INT4_G32, "INT4_G32", 6e-2, 5e-2},
    {EMBER_TYPE_NF4, "NF4", 6e-2, 5e-2},
    {EMBER_TYPE_FP8_E4M3, "FP8_E4M3", 2e-5, 0},
    {EMBER_TYPE_FP8_E5M2, "FP8_E5M2", 2e-5, 0},
    {EMBER_TYPE_FP8_E4M3_ROW, "FP8_E4M3_ROW", 2e-5, 0},
    {EMBER_TYPE_FP8_E5M2_ROW, "FP8_E5M2_ROW", 2e-5, 0},
};

std::vector<int32_t> prompt(int32_t n_vocab, int32_t n, uint64_t seed) {
    std::mt19937_64      g(seed);
    std::vector<int32_t> t = {1};
    while (static_cast<int32_t>(t.size()) < n) t.push_back(static_cast<int32_t>(g() % static_cast<uint64_t>(n_vocab)));
    return t;
}

// INT4 groups of 128 need rows of 128: n_embd 128, n_ff 256.
tiny_model_spec spec_for(int32_t type, const char * arch, uint64_t seed) {
    tiny_model_spec s;
    s.arch        = arch;
    s.weight_type = type;
    s.n_vocab     = 128;
    s.n_embd      = 128;
    s.n_ff        = 256;
    s.n_layer     = 2;
    s.n_head      = 4;
    s.n_head_kv   = 2;
    s.seed        = seed;
    return s;
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[ember types] tiny models in every Ember weight type decode like the float64 reference") {
    uint64_t seed = 4000;
    for (const type_case & c : k_cases) {
        for (const char * arch : {"llama", "qwen3"}) {
            const std::string type_s = c.name, arch_s = arch;
            CAPTURE(type_s);
            CAPTURE(arch_s);
            const tiny_model_spec s    = spec_for(c.type, arch, ++seed);
            const std::string     path = ember_test_make_tiny_model(s, ember_test_tmp_dir());
            CAPTURE(path);
            const ember_ref_model      ref  = ember_ref_load(path);
            const std::vector<int32_t> toks = prompt(s.n_vocab, 20, seed);
            const std::vector<double>  want = ember_ref_forward(ref, toks);
            double                     scale = 0;
            for (double v : want) scale = std::max(scale, std::fabs(v));

            ember_test_model_ptr model;
            std::string          err;
            REQUIRE_MESSAGE(ember_test_load_model(path, model, err) == EMBER_OK, err);
            // the writer marked the file as using Ember-only types
            char buf[512];
            CHECK(ember_model_meta_val_str(model.get(), "ember.quantization.custom_types", buf, sizeof(buf)) > 0);
            CHECK(std::string(buf).find("4096") != std::string::npos);

            ember_test_run_params p;  // F32 KV cache
            ember_test_run_result got;
            REQUIRE_MESSAGE(ember_test_run(model.get(), toks, 6, p, got, err) == EMBER_OK, err);
            const ember_test_logit_diff d = ember_test_compare_logits(want, got.logits, s.n_vocab, 2 * c.max_abs * scale);
            MESSAGE(type_s << " " << arch_s << ": " << d.summary());
            CHECK(d.finite);
            CHECK(d.rel_max() < c.max_abs);
            if (c.rms > 0) CHECK(d.rel_rms() < c.rms);
            CHECK(d.argmax_bad.empty());
        }
    }
}

TEST_CASE("[ember types][kv] FP8 K/V caches: exact up to their rounding, bounded against F32") {
    // F32 weights, so the only rounding Ember adds is the cache's: it must match the float64
    // reference whose K (after RoPE) and V rows go through the same FP8 codec within 1e-4 *
    // scale (measured <= 2.4e-5), and stay near the F32-cache run (E4M3: 3 mantissa bits,
    // E5M2: 2; random models amplify the difference, as for Q4_0 in test_kv_cache_types).
    struct kv_case {
        const char * what;
        int32_t      k, v;
        double       vs_f32;  // max |diff| against the F32 cache, relative to scale
    };
    const kv_case cases[] = {
        {"FP8_E4M3 K/V", EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E4M3, 1.5e-1},      // measured 6.0e-2
        {"FP8_E5M2 K/V", EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E5M2, 3e-1},        // measured 1.5e-1
        {"FP8_E4M3 K, F16 V", EMBER_TYPE_FP8_E4M3, EMBER_TYPE_F16, 1e-1},        // measured 3.5e-2
    };
    const tiny_model_spec s    = spec_for(EMBER_TYPE_F32, "llama", 4242);
    const std::string     path = ember_test_make_tiny_model(s, ember_test_tmp_dir());
    const ember_ref_model ref  = ember_ref_load(path);
    const std::vector<int32_t> toks = prompt(s.n_vocab, 24, 99);
    ember_test_model_ptr       model;
    std::string                err;
    REQUIRE_MESSAGE(ember_test_load_model(path, model, err) == EMBER_OK, err);
    ember_test_run_params base;
    ember_test_run_result f32;
    REQUIRE_MESSAGE(ember_test_run(model.get(), toks, 8, base, f32, err) == EMBER_OK, err);
    double scale = 0;
    for (float v : f32.logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (const kv_case & c : cases) {
        const std::string what = c.what;
        CAPTURE(what);
        ember_test_run_params p;
        p.type_k = c.k;
        p.type_v = c.v;
        ember_test_run_result res;
        REQUIRE_MESSAGE(ember_test_run(model.get(), toks, 8, p, res, err) == EMBER_OK, err);
        ember_ref_options o;
        o.kv_type_k                    = c.k;
        o.kv_type_v                    = c.v;
        const std::vector<double>   want = ember_ref_forward(ref, toks, o);
        const ember_test_logit_diff dx   = ember_test_compare_logits(want, res.logits, s.n_vocab, 2e-3 * scale);
        MESSAGE(what << " vs float64 with the same K/V rounding: " << dx.summary());
        CHECK(dx.finite);
        CHECK(dx.rel_max() < 1e-4);
        CHECK(dx.argmax_bad.empty());
        const std::vector<double>   f32_logits(f32.logits.begin(), f32.logits.end());
        const ember_test_logit_diff d = ember_test_compare_logits(f32_logits, res.logits, s.n_vocab, 2 * c.vs_f32 * scale);
        MESSAGE(what << " vs F32 cache: " << d.summary());
        CHECK(d.rel_max() < c.vs_f32);
        CHECK(d.argmax_bad.empty());
    }
    // a cache type outside the list is refused with a clear status
    ember_context_params cp = ember_context_default_params();
    cp.type_k               = EMBER_TYPE_NF4;
    ember_context * ctx     = nullptr;
    CHECK(ember_context_create(model.get(), &cp, &ctx) == EMBER_ERR_INVALID_ARG);
    CHECK(ctx == nullptr);
}

}  // TEST_SUITE
