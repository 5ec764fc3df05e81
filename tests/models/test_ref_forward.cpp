// The float64 reference forward pass (tests/support/ref-forward) and the tiny-model generator
// (tests/support/tiny-model) checked on their own: against llama.cpp's fixture logits, and
// for determinism. Everything else in tests/models trusts these two.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "quant/types.h"
#include "runtime/gguf.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

// True when every tensor type of a fixture has a dequantizer in this build.
bool ref_can_read(const ember_test_reference & r, std::string & missing) {
    for (const auto & kv : r.tensor_types) {
        const int32_t id = ember_type_by_name(kv.second.c_str());
        const ember_type_traits * tr = ember_type_get_traits(id);
        if (!tr || !tr->to_float) {
            missing = kv.second;
            return false;
        }
    }
    return true;
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[ref-forward] float64 reference reproduces the llama.cpp fixture logits") {
    const std::vector<std::string> names = ember_test_fixture_names();
    if (names.empty()) {
        MESSAGE("skipped: no fixtures/models (pass --data-dir)");
        return;
    }
    int n_checked = 0;
    for (const std::string & name : names) {
        CAPTURE(name);
        ember_test_reference r;
        std::string          err;
        REQUIRE_MESSAGE(ember_test_load_fixture(name, r, err), err);
        std::string missing;
        if (!ref_can_read(r, missing)) {
            MESSAGE("skipped " << name << ": no dequantizer for " << missing);
            continue;
        }
        const ember_ref_model     m      = ember_ref_load(r.model_path);
        const std::vector<double> logits = ember_ref_forward(m, r.tokens);
        REQUIRE(m.cfg.n_vocab == r.n_vocab);
        REQUIRE(logits.size() == r.logits.size());

        // F32: the README's numpy reference lands within 4e-7 of scale; allow 1e-5.
        // Others: the weights are exact but llama.cpp rounds/quantizes the activations, so the
        // fixture's own tolerance applies (README: float64 F16 <= 5.2e-4, quantized <= 2e-2).
        ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
        if (r.weights == "F32") tol.max_abs = 1e-5;
        std::vector<float> got(logits.begin(), logits.end());
        const ember_test_logit_diff d = ember_test_compare_logits(r.logits, got, r.n_vocab, tol.margin * r.scale);
        CAPTURE(d.summary());
        CHECK(d.finite);
        CHECK(d.rel_max() < tol.max_abs);
        if (tol.rms > 0) CHECK(d.rel_rms() < tol.rms);
        CHECK(d.argmax_bad.empty());
        MESSAGE(name << ": " << d.summary());
        n_checked++;
    }
    CHECK(n_checked > 0);
}

TEST_CASE("[ref-forward] float64 reference reproduces the default model's logits") {
    ember_test_reference r;
    std::string          err;
    if (!ember_test_load_default_model("f16", r, err)) {
        MESSAGE("skipped: " << err);
        return;
    }
    const ember_ref_model m = ember_ref_load(r.model_path);
    CHECK(m.cfg.n_layer == 8);
    CHECK(m.cfg.n_vocab == 32000);
    const std::vector<double> logits = ember_ref_forward(m, r.tokens);
    std::vector<float>        got(logits.begin(), logits.end());
    const ember_test_tolerance  tol = ember_test_tolerance_for("F16");
    const ember_test_logit_diff d   = ember_test_compare_logits(r.logits, got, r.n_vocab, tol.margin * r.scale);
    MESSAGE(r.name << ": " << d.summary());
    CHECK(d.rel_max() < tol.max_abs);
    CHECK(d.argmax_bad.empty());
}

TEST_CASE("[tiny-model] generator is deterministic and writes the spec's metadata") {
    tiny_model_spec s;
    s.arch        = "qwen3";
    s.weight_type = EMBER_TYPE_Q8_0;
    s.seed        = 7;
    s.tied        = true;
    s.rope_freqs  = true;
    const std::string dir = ember_test_tmp_dir();
    s.name                = "det-a";
    const std::string a   = ember_test_make_tiny_model(s, dir);
    s.name                = "det-b";
    const std::string b   = ember_test_make_tiny_model(s, dir);
    std::string       ta, tb;
    REQUIRE(ember_test_read_file(a, ta));
    REQUIRE(ember_test_read_file(b, tb));
    CHECK(ta == tb);
    s.seed              = 8;
    s.name              = "det-c";
    const std::string c = ember_test_make_tiny_model(s, dir);
    std::string       tc;
    REQUIRE(ember_test_read_file(c, tc));
    CHECK(ta.size() == tc.size());
    CHECK(ta != tc);

    auto f = ember_gguf_open(a);
    CHECK(f->get_str("general.architecture", "") == "qwen3");
    CHECK(f->get_u32("qwen3.embedding_length", 0) == 64);
    CHECK(f->get_u32("qwen3.attention.head_count_kv", 0) == 2);
    CHECK(f->get_u32("qwen3.attention.key_length", 0) == 16);
    CHECK(f->find_tensor("output.weight") < 0);
    REQUIRE(f->tensor("rope_freqs.weight"));
    CHECK(f->tensor("rope_freqs.weight")->ne[0] == 8);
    REQUIRE(f->tensor("blk.1.ffn_down.weight"));
    CHECK(f->tensor("blk.1.ffn_down.weight")->type == EMBER_TYPE_Q8_0);
    CHECK(f->tensor("blk.1.ffn_down.weight")->ne[0] == 128);
    CHECK(f->tensor("blk.1.ffn_norm.weight")->type == EMBER_TYPE_F32);
}

TEST_CASE("[ref-forward] every generated variant loads and gives finite, non-trivial logits") {
    const std::string dir = ember_test_tmp_dir();
    for (const char * arch : {"llama", "qwen2", "qwen3"}) {
        for (int32_t type : {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0}) {
            const std::string arch_s = arch;
            CAPTURE(arch_s);
            CAPTURE(type);
            tiny_model_spec s;
            s.arch                = arch;
            s.weight_type         = type;
            s.rope_scale_linear   = 2.0f;
            s.rope_freqs          = true;
            const std::string p   = ember_test_make_tiny_model(s, dir);
            const ember_ref_model m = ember_ref_load(p);
            CHECK(m.cfg.freq_scale == doctest::Approx(0.5));
            CHECK(m.cfg.rope_neox == (std::string(arch) != "llama"));
            const std::vector<int32_t> toks = {1, 5, 9, 77, 3, 100, 2, 64};
            const std::vector<double>  l    = ember_ref_forward(m, toks);
            double mx = 0;
            for (double v : l) {
                REQUIRE(std::isfinite(v));
                mx = std::max(mx, std::fabs(v));
            }
            CHECK(mx > 0.1);  // the weights are large enough that logits are not tiny
            // The prefix property of causal attention: the logits of a prefix do not depend
            // on what follows.
            const std::vector<double> l4 = ember_ref_forward(m, {1, 5, 9, 77});
            for (size_t i = 0; i < l4.size(); i++) REQUIRE(l4[i] == l[i]);
        }
    }
}

}  // TEST_SUITE
