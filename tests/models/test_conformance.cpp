// Conformance against llama.cpp, through the public C API only: the fixture models
// (shared/fixtures/models) and the default model (shared/models), teacher-forced logits of the
// reference prompt plus the greedy continuation. Tolerances: shared/fixtures/models/README.md,
// also in tests/support/fixtures.cpp (ember_test_tolerance_for).
#include <cstdlib>
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/data-path.h"
#include "support/fixtures.h"

namespace {

struct run_config {
    const char * what;
    uint32_t     n_ubatch;   // 0 = the whole prompt in one micro-batch
    int32_t      n_threads;
    int32_t      type_kv;
};

// Reference runs used one micro-batch, one thread and an F32 KV cache; the others must agree
// within the same tolerance.
const run_config k_fixture_configs[] = {
    {"one micro-batch, 1 thread, F32 KV", 0, 1, EMBER_TYPE_F32},
    {"micro-batches of 7, 2 threads, F32 KV", 7, 2, EMBER_TYPE_F32},
};

void check_logits(const ember_test_reference & r, const std::vector<float> & got, const ember_test_tolerance & tol) {
    const ember_test_logit_diff d = ember_test_compare_logits(r.logits, got, r.n_vocab, tol.margin * r.scale);
    CAPTURE(d.summary());
    CHECK(d.finite);
    CHECK_MESSAGE(d.rel_max() < tol.max_abs, "max |logit diff| must stay below " << tol.max_abs << " * scale");
    if (tol.rms > 0) CHECK_MESSAGE(d.rel_rms() < tol.rms, "RMS diff must stay below " << tol.rms << " * RMS(ref)");
    for (int32_t row : d.argmax_bad) {
        CAPTURE(row);
        CAPTURE(r.margin[static_cast<size_t>(row)]);
        FAIL_CHECK("top-1 differs from the reference where the reference margin is large");
    }
    MESSAGE(r.name << ": " << d.summary());
}

// Token by token, until the first step where a near-tie allows the sequences to diverge:
// the reference's own margin when the manifest has it, otherwise Ember's margin.
void check_greedy(const ember_test_reference & r, const ember_test_run_result & got, const ember_test_tolerance & tol) {
    const double thr = tol.margin * r.scale;
    REQUIRE(got.greedy.size() == r.greedy.size());
    int32_t compared = 0;
    for (size_t step = 0; step < r.greedy.size(); step++) {
        CAPTURE(step);
        const double margin = r.greedy_margin.size() == r.greedy.size() ? r.greedy_margin[step] : got.greedy_margin[step];
        if (margin < thr) {
            MESSAGE(r.name << ": greedy compared up to step " << step << " (near-tie there, margin " << margin << ")");
            break;
        }
        CHECK(got.greedy[step] == r.greedy[step]);
        if (got.greedy[step] != r.greedy[step]) break;
        compared++;
    }
    // Unless the very first step is already a near-tie in the reference, something was compared.
    const double first = r.greedy_margin.size() == r.greedy.size() ? r.greedy_margin[0] : got.greedy_margin[0];
    if (first >= thr) CHECK(compared > 0);
}

// Teacher-forced greedy: the reference continuation is decoded one token at a time, so every
// step has the reference's context, and Ember's argmax must equal the reference's next token at
// every step with a clear margin (no stop at the first near-tie).
void check_forced_greedy(const ember_test_reference & r, const ember_test_run_result & got,
                         const ember_test_tolerance & tol) {
    const double thr = tol.margin * r.scale;
    REQUIRE(got.greedy.size() == r.greedy.size());
    int32_t checked = 0;
    for (size_t step = 0; step < r.greedy.size(); step++) {
        CAPTURE(step);
        const double margin = r.greedy_margin.size() == r.greedy.size() ? r.greedy_margin[step] : got.greedy_margin[step];
        if (margin < thr) continue;
        CHECK(got.greedy[step] == r.greedy[step]);
        checked++;
    }
    MESSAGE(r.name << ": teacher-forced greedy checked at " << checked << " of " << r.greedy.size() << " steps");
    CHECK(checked > 0);
}

bool is_conformance_type(const std::string & weights) {
    const auto & t = ember_test_conformance_types();
    return std::find(t.begin(), t.end(), weights) != t.end();
}

// The fixture uses a tensor type that this build does not know (e.g. Q6_K output.weight in the
// llama.cpp Q4_0 mix). Such files must fail to load with EMBER_ERR_UNSUPPORTED, never crash.
bool has_unknown_tensor_type(const ember_test_reference & r, std::string & which) {
    for (const auto & kv : r.tensor_types) {
        if (ember_type_from_name(kv.second.c_str()) < 0) {
            which = kv.first + " (" + kv.second + ")";
            return true;
        }
    }
    return false;
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[conformance] fixture models match llama.cpp logits and greedy ids") {
    REQUIRE(EMBER_CHECK_ABI() == EMBER_OK);
    const std::vector<std::string> names = ember_test_fixture_names();
    if (names.empty()) {
        MESSAGE("skipped: no fixtures/models (pass --data-dir)");
        return;
    }
    int         n_run = 0;
    std::string not_run;
    for (const std::string & name : names) {
        CAPTURE(name);
        std::string arch, weights;
        REQUIRE(ember_test_split_fixture_name(name, arch, weights));
        if (!is_conformance_type(weights)) {
            not_run += " " + name;
            continue;
        }
        ember_test_reference r;
        std::string          err;
        REQUIRE_MESSAGE(ember_test_load_fixture(name, r, err), err);

        ember_test_model_ptr model;
        const ember_status   st = ember_test_load_model(r.model_path, model, err);
        std::string          unknown;
        if (has_unknown_tensor_type(r, unknown)) {
            if (st == EMBER_OK) {
                MESSAGE(name << ": loads although " << unknown << " is not a type this build names");
            } else {
                CHECK_MESSAGE(st == EMBER_ERR_UNSUPPORTED, err);
                MESSAGE("skipped " << name << ": tensor " << unknown << " has a type this build does not support");
                continue;
            }
        }
        REQUIRE_MESSAGE(st == EMBER_OK, err);
        CHECK(std::string(ember_model_arch(model.get())) == r.arch);
        REQUIRE(ember_model_n_vocab(model.get()) == r.n_vocab);

        const ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
        for (const run_config & cfg : k_fixture_configs) {
            // EMBER_TEST_MAX_THREADS caps the configurations (ember_test_threads).
            if (ember_test_threads(cfg.n_threads) != cfg.n_threads) continue;
            const std::string what = cfg.what;
            CAPTURE(what);
            ember_test_run_params p;
            p.n_ubatch  = cfg.n_ubatch;
            p.n_threads = cfg.n_threads;
            p.type_k = p.type_v = cfg.type_kv;
            ember_test_run_result res;
            const ember_status    rs = ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p,
                                                      res, err);
            REQUIRE_MESSAGE(rs == EMBER_OK, err);
            check_logits(r, res.logits, tol);
            check_greedy(r, res, tol);
            ember_test_run_result forced;
            REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, forced,
                                           err, &r.greedy) == EMBER_OK,
                            err);
            check_forced_greedy(r, forced, tol);
        }
        n_run++;
    }
    if (!not_run.empty()) MESSAGE("fixture types not in the conformance list (later issues):" << not_run);
    CHECK(n_run > 0);
}

TEST_CASE("[conformance] default model ember-kjv-25m matches its reference logits and greedy ids") {
    for (const std::string variant : {"f16", "q8_0"}) {
        CAPTURE(variant);
        ember_test_reference r;
        std::string          err;
        if (!ember_test_load_default_model(variant, r, err)) {
            MESSAGE("skipped: " << err);
            continue;
        }
        ember_test_model_ptr model;
        REQUIRE_MESSAGE(ember_test_load_model(r.model_path, model, err) == EMBER_OK, err);
        CHECK(std::string(ember_model_arch(model.get())) == "llama");
        CHECK(ember_model_n_layer(model.get()) == 8);
        CHECK(ember_model_n_embd(model.get()) == 384);
        CHECK(ember_model_n_head(model.get()) == 6);
        CHECK(ember_model_n_head_kv(model.get()) == 2);
        CHECK(ember_model_n_ctx_train(model.get()) == 512);
        REQUIRE(ember_model_n_vocab(model.get()) == 32000);
        CHECK(ember_token_bos(model.get()) == 1);
        CHECK(ember_token_eos(model.get()) == 2);

        const ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
        const run_config           configs[] = {
            {"default F16 KV cache", 0, 1, EMBER_TYPE_F16},
            {"F32 KV cache", 0, 1, EMBER_TYPE_F32},
            {"F16 KV cache, micro-batches of 7, 2 threads", 7, 2, EMBER_TYPE_F16},
        };
        for (const run_config & cfg : configs) {
            const std::string what = cfg.what;
            CAPTURE(what);
            ember_test_run_params p;
            p.n_ubatch  = cfg.n_ubatch;
            p.n_threads = cfg.n_threads;
            p.type_k = p.type_v = cfg.type_kv;
            ember_test_run_result res;
            REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, res,
                                           err) == EMBER_OK,
                            err);
            check_logits(r, res.logits, tol);
            check_greedy(r, res, tol);
            ember_test_run_result forced;
            REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, forced,
                                           err, &r.greedy) == EMBER_OK,
                            err);
            check_forced_greedy(r, forced, tol);
        }
    }
}

}  // TEST_SUITE
