// Whole models on the CUDA backend: the fixture models (shared/fixtures/models) loaded on
// device "cuda" with every layer offloaded (n_gpu_layers = -1) and with one layer offloaded
// (-ngl 1: the scheduler splits the graph between GPU and CPU) must match llama.cpp's
// reference logits within the conformance tolerances (tests/models/test_conformance.cpp) and
// give the same greedy ids. Compiled only when the CUDA backend is built; skips without a GPU.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

bool have_cuda_device() {
    for (int32_t i = 0; i < ember_device_count(); i++) {
        if (std::string(ember_device_name(i)).rfind("cuda:", 0) == 0) return true;
    }
    return false;
}

ember_status load_on_cuda(const std::string & path, int32_t n_gpu_layers, ember_test_model_ptr & out, std::string & err) {
    out.reset();
    ember_model_params mp = ember_model_default_params();
    mp.device             = "cuda";
    mp.n_gpu_layers       = n_gpu_layers;
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    if (st != EMBER_OK) {
        err = std::string("ember_model_load(") + path + ", cuda): " + ember_status_str(st) + ": " + ember_last_error();
        return st;
    }
    out.reset(m);
    return EMBER_OK;
}

// The default model (Q8_0) with every layer on the GPU: false (the test skips, saying why)
// without a CUDA device or the model's reference files.
bool default_model_on_cuda(ember_test_reference & r, ember_test_model_ptr & model) {
    if (!have_cuda_device()) {
        MESSAGE("skipped: no CUDA device");
        return false;
    }
    std::string err;
    if (!ember_test_load_default_model("q8_0", r, err)) {
        MESSAGE("skipped: " << err);
        return false;
    }
    REQUIRE_MESSAGE(load_on_cuda(r.model_path, -1, model, err) == EMBER_OK, err);
    return true;
}

void check_run(const ember_test_reference & r, const ember_test_run_result & res, const ember_test_tolerance & tol) {
    const ember_test_logit_diff d = ember_test_compare_logits(r.logits, res.logits, r.n_vocab, tol.margin * r.scale);
    CAPTURE(d.summary());
    CHECK(d.finite);
    CHECK_MESSAGE(d.rel_max() < tol.max_abs, "max |logit diff| must stay below " << tol.max_abs << " * scale");
    if (tol.rms > 0) CHECK_MESSAGE(d.rel_rms() < tol.rms, "RMS diff must stay below " << tol.rms << " * RMS(ref)");
    CHECK_MESSAGE(d.argmax_bad.empty(), "top-1 differs from the reference where the reference margin is large");
    // Greedy ids until the first near-tie of the reference.
    const double thr = tol.margin * r.scale;
    REQUIRE(res.greedy.size() == r.greedy.size());
    for (size_t s = 0; s < r.greedy.size(); s++) {
        const double margin = r.greedy_margin.size() == r.greedy.size() ? r.greedy_margin[s] : res.greedy_margin[s];
        if (margin < thr) break;
        CAPTURE(s);
        CHECK(res.greedy[s] == r.greedy[s]);
        if (res.greedy[s] != r.greedy[s]) break;
    }
    MESSAGE(r.name << ": " << d.summary());
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[cuda] fixture models on the GPU match llama.cpp logits and greedy ids") {
    if (!have_cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const std::vector<std::string> names = ember_test_fixture_names();
    if (names.empty()) {
        MESSAGE("skipped: no fixtures/models (pass --data-dir)");
        return;
    }
    const auto & types = ember_test_conformance_types();
    int          n_run = 0;
    for (const std::string & name : names) {
        CAPTURE(name);
        std::string arch, weights;
        REQUIRE(ember_test_split_fixture_name(name, arch, weights));
        if (std::find(types.begin(), types.end(), weights) == types.end()) continue;
        ember_test_reference r;
        std::string          err;
        REQUIRE_MESSAGE(ember_test_load_fixture(name, r, err), err);
        const ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
        for (int32_t ngl : {-1, 1}) {
            CAPTURE(ngl);
            ember_test_model_ptr model;
            const ember_status   st = load_on_cuda(r.model_path, ngl, model, err);
            if (st == EMBER_ERR_UNSUPPORTED) {
                MESSAGE("skipped " << name << ": " << err);
                break;
            }
            REQUIRE_MESSAGE(st == EMBER_OK, err);
            for (uint32_t n_ubatch : {0u, 7u}) {
                CAPTURE(n_ubatch);
                ember_test_run_params p;
                p.n_ubatch = n_ubatch;
                ember_test_run_result res;
                REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, res, err) == EMBER_OK, err);
                check_run(r, res, tol);
            }
        }
        n_run++;
    }
    CHECK(n_run > 0);
}

TEST_CASE("[cuda] KV cache types on the GPU keep the default model's greedy ids") {
    ember_test_reference r;
    ember_test_model_ptr model;
    std::string          err;
    if (!default_model_on_cuda(r, model)) return;
    const ember_test_tolerance tol = ember_test_tolerance_for(r.weights);
    ember_test_run_result f16;
    for (int32_t kv : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        CAPTURE(kv);
        ember_test_run_params p;
        p.type_k = p.type_v = kv;
        ember_test_run_result res;
        REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, res, err) == EMBER_OK, err);
        check_run(r, res, tol);
        if (kv == EMBER_TYPE_F16) f16 = res;
    }
    // FP8 caches (3 / 2 mantissa bits) against the GPU's F16-cache run, within the bounds of
    // tests/models/test_kv_cache_types.cpp (relative to max |logit|; the CPU measured 1.1e-2 and
    // 2.1e-2 on this model), with the same greedy ids while the F16 run's margin exceeds twice
    // the bound; and within the conformance tolerance of the CPU's run with the same cache type
    // (the GPU encodes K/V rows bit for bit as the CPU does).
    double scale = 0;
    for (float v : f16.logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    const std::vector<double> f16_logits(f16.logits.begin(), f16.logits.end());
    ember_test_model_ptr      cpu_model;
    {
        ember_model_params mp = ember_model_default_params();
        mp.device             = "cpu";
        ember_model * m       = nullptr;
        REQUIRE_MESSAGE(ember_model_load(r.model_path.c_str(), &mp, &m) == EMBER_OK, ember_last_error());
        cpu_model.reset(m);
    }
    const std::pair<int32_t, double> fp8[] = {{EMBER_TYPE_FP8_E4M3, 1e-1}, {EMBER_TYPE_FP8_E5M2, 2e-1}};
    for (const auto & c : fp8) {
        CAPTURE(c.first);
        ember_test_run_params p;
        p.type_k = p.type_v = c.first;
        ember_test_run_result res, cpu;
        REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, res, err) == EMBER_OK, err);
        const ember_test_logit_diff d = ember_test_compare_logits(f16_logits, res.logits, r.n_vocab, 2 * c.second * scale);
        MESSAGE(ember_type_name(c.first) << " cache vs F16 cache on the GPU: " << d.summary());
        CHECK(d.finite);
        CHECK(d.rel_max() < c.second);
        CHECK(d.argmax_bad.empty());
        for (size_t s = 0; s < f16.greedy.size(); s++) {
            CAPTURE(s);
            if (f16.greedy_margin[s] < 2 * c.second * scale) break;
            CHECK(res.greedy[s] == f16.greedy[s]);
            if (res.greedy[s] != f16.greedy[s]) break;
        }
        REQUIRE_MESSAGE(ember_test_run(cpu_model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, cpu, err) == EMBER_OK, err);
        const std::vector<double>   cpu_logits(cpu.logits.begin(), cpu.logits.end());
        const ember_test_logit_diff dc = ember_test_compare_logits(cpu_logits, res.logits, r.n_vocab, tol.margin * scale);
        MESSAGE(ember_type_name(c.first) << " cache, GPU vs CPU: " << dc.summary());
        CHECK(dc.rel_max() < tol.max_abs);
    }
}

TEST_CASE("[cuda] decode steps left running give what waited ones give") {
    // One-token steps are queued (ember_decode returns before the GPU is done) and their outputs
    // come back when read. The same steps with EMBER_DECODE_ASYNC=0 (every step waited for)
    // must give the same rows: read after some steps, after 70 unread ones (past the 64 the
    // context lets run unwaited), around a KV cache edit, with full logits and with device top-k.
    ember_test_reference r;
    ember_test_model_ptr model;
    std::string          err;
    if (!default_model_on_cuda(r, model)) return;
    const int32_t n_vocab = r.n_vocab;
    for (int32_t top_k : {0, 4}) {
        CAPTURE(top_k);
        // What each step gave: the logits row, or the top-k ids and values.
        struct step_out {
            std::vector<float>   row;
            std::vector<int32_t> ids;
        };
        const auto run = [&](bool async, std::vector<step_out> & outs) {
            if (!async) setenv("EMBER_DECODE_ASYNC", "0", 1);
            ember_context_params cp = ember_context_default_params();
            cp.n_ctx                = 256;
            cp.n_batch              = 32;
            cp.device_top_k         = top_k;
            ember_context *    c    = nullptr;
            const ember_status st   = ember_context_create(model.get(), &cp, &c);
            unsetenv("EMBER_DECODE_ASYNC");
            REQUIRE_MESSAGE(st == EMBER_OK, ember_last_error());
            ember_test_context_ptr ctx(c);
            const auto read = [&]() {
                step_out o;
                if (top_k > 0) {
                    o.ids.resize(top_k);
                    o.row.resize(top_k);
                    REQUIRE(ember_get_top_k(ctx.get(), -1, o.ids.data(), o.row.data(), top_k) == top_k);
                } else {
                    const float * row = ember_get_logits_ith(ctx.get(), -1);
                    REQUIRE_MESSAGE(row, ember_last_error());
                    o.row.assign(row, row + n_vocab);
                }
                outs.push_back(std::move(o));
            };
            int32_t    pos  = 0;
            const auto step = [&](int32_t token) {
                ember_batch b = ember_batch_one(&token, 1);
                b.pos         = &pos;
                REQUIRE_MESSAGE(ember_decode(ctx.get(), &b) == EMBER_OK, ember_last_error());
                pos++;
            };
            const auto token_at = [&](int32_t i) { return r.tokens[static_cast<size_t>(i) % r.tokens.size()]; };
            // Five steps, each read; 70 unread, then one read; a removed tail and two more steps.
            for (int32_t i = 0; i < 5; i++) {
                step(token_at(i));
                read();
            }
            for (int32_t i = 5; i < 75; i++) step(token_at(i));
            step(token_at(75));
            read();
            REQUIRE(ember_kv_cache_seq_rm(ctx.get(), 0, 60, -1) == EMBER_OK);
            pos = 60;
            step(token_at(3));
            step(token_at(4));
            read();
            // A batch of several tokens (waited for) after queued steps, then one more step.
            std::vector<int32_t> several = {token_at(7), token_at(8), token_at(9)};
            std::vector<int32_t> ps      = {pos, pos + 1, pos + 2};
            ember_batch          b       = ember_batch_one(several.data(), 3);
            b.pos                        = ps.data();
            REQUIRE_MESSAGE(ember_decode(ctx.get(), &b) == EMBER_OK, ember_last_error());
            pos += 3;
            read();
            step(token_at(10));
            read();
            CHECK(ember_kv_cache_used(ctx.get()) == pos);
        };
        std::vector<step_out> queued, waited;
        run(true, queued);
        run(false, waited);
        REQUIRE(queued.size() == waited.size());
        for (size_t k = 0; k < queued.size(); k++) {
            CAPTURE(k);
            CHECK(queued[k].ids == waited[k].ids);
            REQUIRE(queued[k].row.size() == waited[k].row.size());
            double scale = 0, diff = 0;
            for (size_t j = 0; j < queued[k].row.size(); j++) {
                scale = std::max(scale, static_cast<double>(std::fabs(waited[k].row[j])));
                diff  = std::max(diff, static_cast<double>(std::fabs(queued[k].row[j] - waited[k].row[j])));
            }
            CHECK(std::isfinite(diff));
            CHECK(diff <= 1e-5 * scale);  // the same kernels on the same data
        }
    }
}

TEST_CASE("[cuda] tiny models in every Ember weight type on the GPU decode like the float64 reference") {
    // Generated models (no data directory) whose matrices are INT4 / NF4 / FP8, every layer on the
    // GPU, against the float64 forward pass over the same dequantized weights: the prompt in one
    // ubatch (the prefill kernels) and one token a ubatch (the decode products, their fused forms
    // and the plan's fusions: gate / up with the SWIGLU, the norm in the product before it).
    // Rows of 256 / 512 reach those forms (NF4's gate / up launch: rows of whole 64-blocks; INT4's
    // groups of 128). Bounds, relative to max |reference logit|: the 4-bit types as on the CPU
    // (tests/models/test_ember_types_model.cpp: x quantized to 8 bits before each product); FP8 1e-2
    // max / 5e-3 RMS (x rounded to F16 for the tensor cores). A wiring error gives O(1).
    if (!have_cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    struct type_case {
        int32_t      type;
        const char * name;
        double       max_abs, rms;
        const char * env = nullptr;  // set to 1 for the case (an opt-in form)
    };
    const type_case cases[] = {
        {EMBER_TYPE_INT4, "INT4", 6e-2, 5e-2},
        {EMBER_TYPE_INT4_G32, "INT4_G32", 6e-2, 5e-2},
        {EMBER_TYPE_NF4, "NF4", 6e-2, 5e-2},
        {EMBER_TYPE_NF4, "NF4 on tensor cores", 6e-2, 5e-2, "EMBER_CUDA_NF4_MMA"},
        {EMBER_TYPE_NF4, "NF4 gate / up on tensor cores", 6e-2, 5e-2, "EMBER_CUDA_MV_GLU_NF4_MMA"},  // (=1: at this size too)
        {EMBER_TYPE_FP8_E4M3, "FP8_E4M3", 1e-2, 5e-3},
        {EMBER_TYPE_FP8_E5M2, "FP8_E5M2", 1e-2, 5e-3},
        {EMBER_TYPE_FP8_E4M3_ROW, "FP8_E4M3_ROW", 1e-2, 5e-3},
        {EMBER_TYPE_FP8_E5M2_ROW, "FP8_E5M2_ROW", 1e-2, 5e-3},
    };
    uint64_t seed = 9100;
    for (const type_case & c : cases) {
        for (const char * arch : {"llama", "qwen3"}) {
            const std::string type_s = c.name, arch_s = arch;
            CAPTURE(type_s);
            CAPTURE(arch_s);
            tiny_model_spec s;
            s.arch        = arch;
            s.weight_type = c.type;
            s.n_vocab     = 256;
            s.n_embd      = 256;
            s.n_ff        = 512;
            s.n_layer     = 2;
            s.n_head      = 4;
            s.n_head_kv   = 2;
            s.seed        = ++seed;
            const std::string          path = ember_test_make_tiny_model(s, ember_test_tmp_dir());
            const ember_ref_model      ref  = ember_ref_load(path);
            std::vector<int32_t>       toks = {1};
            for (int32_t i = 1; i < 16; i++) toks.push_back(static_cast<int32_t>((seed * 7919u + 104729u * static_cast<uint64_t>(i)) % 256u));
            const std::vector<double>  want = ember_ref_forward(ref, toks);
            double                     scale = 0;
            for (double v : want) scale = std::max(scale, std::fabs(v));
            // The case's switch on while it runs, off again however it ends (a failed REQUIRE too).
            struct env_on {
                const char * name;
                explicit env_on(const char * n) : name(n) {
                    if (name) setenv(name, "1", 1);
                }
                ~env_on() {
                    if (name) unsetenv(name);
                }
            } const on(c.env);
            ember_test_model_ptr model;
            std::string          err;
            REQUIRE_MESSAGE(load_on_cuda(path, -1, model, err) == EMBER_OK, err);
            for (uint32_t n_ubatch : {0u, 1u}) {
                CAPTURE(n_ubatch);
                ember_test_run_params p;  // F32 KV cache
                p.n_ubatch = n_ubatch;
                ember_test_run_result got;
                REQUIRE_MESSAGE(ember_test_run(model.get(), toks, 4, p, got, err) == EMBER_OK, err);
                const ember_test_logit_diff d = ember_test_compare_logits(want, got.logits, s.n_vocab, 2 * c.max_abs * scale);
                MESSAGE(type_s << " " << arch_s << " n_ubatch " << n_ubatch << ": " << d.summary());
                CHECK(d.finite);
                CHECK(d.rel_max() < c.max_abs);
                CHECK(d.rel_rms() < c.rms);
                CHECK(d.argmax_bad.empty());
            }
        }
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
