// Tied embeddings on a device the host cannot read (Vulkan, CUDA) with EMBER_EMBD_HOST=1: the
// loader adds a host descriptor of token_embd.weight over the file (ember_model::tok_embd_host)
// and decode steps of at most k_embd_host_tokens tokens look their rows up on the CPU, as untied
// models always do; a prompt of more tokens keeps the lookup on the device. Both must give the
// logits and greedy ids of the device lookup. Skips a device this build or machine lacks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/graph-builder.h"
#include "runtime/model.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/tiny-model.h"

namespace {

// Whether `device` loads a model here (lavapipe is found by name, not listed: try it).
bool have_device(const std::string & path, const char * device) {
    ember_model_params mp = ember_model_default_params();
    mp.device             = device;
    mp.n_gpu_layers       = -1;
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    ember_model_free(m);
    return st == EMBER_OK;
}

struct embd_run {
    bool                 host = false;  // the model had a host descriptor
    std::vector<float>   prompt;        // the prompt's rows (the device lookup either way)
    std::vector<float>   steps;         // one row a decode step
    std::vector<int32_t> ids;
};

// A prompt of k_embd_host_tokens + 4 tokens, then 6 greedy steps of one token.
embd_run run_on(const std::string & path, const char * device, bool embd_host) {
    if (embd_host) setenv("EMBER_EMBD_HOST", "1", 1);
    else unsetenv("EMBER_EMBD_HOST");
    ember_model_params mp = ember_model_default_params();
    mp.device             = device;
    mp.n_gpu_layers       = -1;
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    unsetenv("EMBER_EMBD_HOST");
    REQUIRE_MESSAGE(st == EMBER_OK, ember_last_error());
    ember_test_model_ptr model(m);
    embd_run             out;
    out.host = m->tok_embd_host != nullptr;
    if (out.host) CHECK(m->tok_embd_host->data != m->tok_embd->data);  // (the file's bytes, not the device copy)
    std::vector<int32_t> prompt;
    for (uint32_t i = 0; i < k_embd_host_tokens + 4; i++) prompt.push_back(static_cast<int32_t>((7 * i + 3) % m->hp.n_vocab));
    const int32_t          n_steps = 6, n_vocab = static_cast<int32_t>(m->hp.n_vocab);
    ember_test_run_params  p;
    ember_test_context_ptr ctx;
    std::string            err;
    REQUIRE_MESSAGE(ember_test_make_context(m, p, static_cast<uint32_t>(prompt.size()) + n_steps, ctx, err) == EMBER_OK, err);
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), prompt, 0, 0, &out.prompt, err) == EMBER_OK, err);
    int32_t next = 0;
    for (int32_t s = 0; s < n_steps; s++) {
        const float * row = s == 0 ? out.prompt.data() + (prompt.size() - 1) * n_vocab : out.steps.data() + (s - 1) * n_vocab;
        for (int32_t v = 1; v < n_vocab; v++) {
            if (row[v] > row[next]) next = v;
        }
        out.ids.push_back(next);
        std::vector<float> logits;
        REQUIRE_MESSAGE(ember_test_decode(ctx.get(), {next}, static_cast<int32_t>(prompt.size()) + s, 0, &logits, err) == EMBER_OK, err);
        out.steps.insert(out.steps.end(), logits.begin(), logits.end());
        next = 0;
    }
    return out;
}

double rel_rms(const std::vector<float> & a, const std::vector<float> & b) {
    REQUIRE(a.size() == b.size());
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return den > 0.0 ? std::sqrt(num / den) : 1.0;
}

void check_device(const char * device) {
    // Untied: no second descriptor whatever the switch.
    tiny_model_spec untied;
    untied.weight_type       = 8;
    const std::string upath = ember_test_make_tiny_model(untied, ember_test_tmp_dir());
    if (!have_device(upath, device)) {
        MESSAGE("skipped: no " << std::string(device) << " device here");
        return;
    }
    CHECK_FALSE(run_on(upath, device, true).host);
    for (int32_t type : {1, 8}) {  // F16, Q8_0 tables
        CAPTURE(device);
        CAPTURE(type);
        tiny_model_spec spec;
        spec.weight_type       = type;
        spec.tied              = true;
        const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
        const embd_run    dev  = run_on(path, device, false);
        const embd_run    host = run_on(path, device, true);
        CHECK_FALSE(dev.host);
        CHECK(host.host);
        const double ep = rel_rms(host.prompt, dev.prompt), es = rel_rms(host.steps, dev.steps);
        CAPTURE(ep);
        CAPTURE(es);
        CHECK(ep < 1e-6);
        CHECK(es < 1e-6);
        CHECK(host.ids == dev.ids);
    }
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[embd host] tied embeddings looked up on the CPU for decode steps (EMBER_EMBD_HOST=1): Vulkan") {
    check_device("vulkan");
}

TEST_CASE("[embd host] tied embeddings looked up on the CPU for decode steps (EMBER_EMBD_HOST=1): CUDA") {
    check_device("cuda");
}

}  // TEST_SUITE
