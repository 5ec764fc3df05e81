// KV cache types (through the C API), two checks per cache type:
//
// 1. The implementation is exact (F32-weight models only): Ember with a K/V cache of type T
//    matches the float64 reference whose K (after RoPE) and V rows are rounded through T's
//    from_float/to_float, within 1e-3 * scale. A wrong block layout, scale or a cache read at
//    the wrong cell lands far above that. (Measured: at most 2e-6 * scale for every cache type
//    on the F32 fixtures.) With F16 or quantized weights the check does not apply: Ember's
//    activations are rounded, so a K/V value near a rounding boundary of a coarse cache type
//    lands on the other side and moves by a whole quantum (1e-2 * scale seen with Q4_0).
// 2. The effect of the cache type is bounded. Stated bounds against the default F16 cache,
//    relative to scale = max |logit| of the F16-cache run:
//      F32  cache:  max |diff| < 4e-3 * scale                   (measured <= 5.1e-4)
//      Q8_0 cache:  max |diff| < 3e-2 * scale                   (measured <= 1.1e-2)
//      Q4_0 cache:  max |diff| < 3e-1 * scale, RMS < 2.5e-1 * RMS (measured <= 1.4e-1 / 1.3e-1
//                   on the random fixtures, 3.3e-2 / 1.7e-2 on the trained default model:
//                   4-bit keys are coarse, and random models amplify it)
//      FP8_E4M3 cache: max |diff| < 1e-1 * scale                (measured <= 4.3e-2; 1.1e-2 default model)
//      FP8_E5M2 cache: max |diff| < 2e-1 * scale                (measured <= 7.1e-2; 2.1e-2 default model)
//    and the same top-1 wherever the F16 run's margin exceeds twice the bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/ref-forward.h"

namespace {

struct kv_case {
    const char * what;
    int32_t      type_k;
    int32_t      type_v;
    double       max_abs;  // vs the F16 cache, relative to scale
    double       rms;      // 0 = not checked
};

const kv_case k_cases[] = {
    {"F32 K, F32 V", EMBER_TYPE_F32, EMBER_TYPE_F32, 4e-3, 0},
    {"Q8_0 K, Q8_0 V", EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, 3e-2, 0},
    {"Q8_0 K, F16 V", EMBER_TYPE_Q8_0, EMBER_TYPE_F16, 3e-2, 0},
    {"F16 K, Q8_0 V", EMBER_TYPE_F16, EMBER_TYPE_Q8_0, 3e-2, 0},
    {"Q4_0 K, Q4_0 V", EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, 3e-1, 2.5e-1},
    {"F32 K, Q4_0 V", EMBER_TYPE_F32, EMBER_TYPE_Q4_0, 3e-1, 2.5e-1},
    // FP8 with a power-of-two scale per 32 (Ember's own types): 3 / 2 mantissa bits
    {"FP8_E4M3 K, FP8_E4M3 V", EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E4M3, 1e-1, 0},
    {"FP8_E5M2 K, FP8_E5M2 V", EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E5M2, 2e-1, 0},
};

void check_kv_types(const ember_test_reference & r) {
    CAPTURE(r.name);
    ember_test_model_ptr model;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(r.model_path, model, err) == EMBER_OK, err);
    const ember_ref_model ref = r.weights == "F32" ? ember_ref_load(r.model_path) : ember_ref_model();
    const int32_t         n_greedy = 8;

    ember_test_run_params base;
    base.type_k = base.type_v = EMBER_TYPE_F16;
    ember_test_run_result f16;
    REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, n_greedy, base, f16, err) == EMBER_OK, err);
    const std::vector<double> f16_logits(f16.logits.begin(), f16.logits.end());
    double                    scale = 0;
    for (float v : f16.logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));

    const ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
    for (const kv_case & c : k_cases) {
        const std::string what = c.what;
        CAPTURE(what);
        ember_test_run_params p;
        p.type_k = c.type_k;
        p.type_v = c.type_v;
        ember_test_run_result res;
        REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, n_greedy, p, res, err) == EMBER_OK, err);

        // 1. exact up to the cache's own rounding
        if (r.weights == "F32") {
            ember_ref_options o;
            o.kv_type_k = c.type_k;
            o.kv_type_v = c.type_v;
            const std::vector<double>   want = ember_ref_forward(ref, r.tokens, o);
            const ember_test_logit_diff dx =
                ember_test_compare_logits(want, res.logits, r.n_vocab, tol.margin * scale);
            MESSAGE(r.name << " " << what << " vs float64 with the same K/V rounding: " << dx.summary());
            CHECK(dx.finite);
            CHECK(dx.rel_max() < tol.max_abs);
            CHECK(dx.argmax_bad.empty());
        }

        // 2. bounded effect against the default F16 cache
        const ember_test_logit_diff d =
            ember_test_compare_logits(f16_logits, res.logits, r.n_vocab, 2 * c.max_abs * scale);
        MESSAGE(r.name << " " << what << " vs F16 cache: " << d.summary());
        CHECK(d.rel_max() < c.max_abs);
        if (c.rms > 0) CHECK(d.rel_rms() < c.rms);
        CHECK(d.argmax_bad.empty());
        // Greedy ids: equal until the F16 run's first step with a small margin.
        for (size_t s = 0; s < f16.greedy.size(); s++) {
            CAPTURE(s);
            if (f16.greedy_margin[s] < 2 * c.max_abs * scale) break;
            CHECK(res.greedy[s] == f16.greedy[s]);
            if (res.greedy[s] != f16.greedy[s]) break;
        }
    }
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[kv-cache] F32, Q8_0 and Q4_0 caches: exact up to their rounding, bounded against F16") {
    int n = 0;
    for (const std::string name : {"tiny-llama-F32", "tiny-qwen2-F32", "tiny-qwen3-F32"}) {
        ember_test_reference r;
        std::string          err;
        if (!ember_test_load_fixture(name, r, err)) {
            MESSAGE("skipped " << name << ": " << err);
            continue;
        }
        check_kv_types(r);
        n++;
    }
    ember_test_reference r;
    std::string          err;
    if (ember_test_load_default_model("f16", r, err)) {
        check_kv_types(r);
        n++;
    } else {
        MESSAGE("skipped the default model: " << err);
    }
    if (n == 0) MESSAGE("skipped: no reference data (pass --data-dir)");
}

}  // TEST_SUITE
