// Fixture models on the Vulkan backend (any device, Mesa's lavapipe included): every layer
// offloaded (n_gpu_layers = -1 on device "vulkan") and a partial offload, compared with
// llama.cpp's reference logits within the conformance tolerances (test_conformance.cpp).
// A few files only, so the suite stays at a couple of minutes on lavapipe.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/fixtures.h"

#ifdef EMBER_HAVE_VULKAN
#    include "backends/vulkan/vulkan-backend.h"

namespace {

ember_status load_on(const std::string & path, const char * device, int32_t n_gpu_layers, ember_test_model_ptr & out,
                     std::string & err) {
    ember_model_params mp = ember_model_default_params();
    mp.device             = device;
    mp.n_gpu_layers       = n_gpu_layers;
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    if (st != EMBER_OK) err = std::string("ember_model_load(") + path + "): " + ember_status_str(st) + ": " + ember_last_error();
    out.reset(m);
    return st;
}

void check_fixture(const std::string & name, int32_t n_gpu_layers, int32_t type_kv, uint32_t n_ubatch) {
    CAPTURE(name);
    CAPTURE(n_gpu_layers);
    ember_test_reference r;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_fixture(name, r, err), err);
    ember_test_model_ptr model;
    REQUIRE_MESSAGE(load_on(r.model_path, "vulkan", n_gpu_layers, model, err) == EMBER_OK, err);
    const int64_t validation_before = ember_vulkan_validation_errors();

    ember_test_run_params p;
    p.n_ubatch = n_ubatch;
    p.type_k = p.type_v = type_kv;
    ember_test_run_result res;
    REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, static_cast<int32_t>(r.greedy.size()), p, res, err) == EMBER_OK, err);

    const ember_test_tolerance  tol = ember_test_tolerance_for(r.weights);
    const ember_test_logit_diff d   = ember_test_compare_logits(r.logits, res.logits, r.n_vocab, tol.margin * r.scale);
    CAPTURE(d.summary());
    CHECK(d.finite);
    CHECK_MESSAGE(d.rel_max() < tol.max_abs, "max |logit diff| must stay below " << tol.max_abs << " * scale");
    if (tol.rms > 0) CHECK_MESSAGE(d.rel_rms() < tol.rms, "RMS diff must stay below " << tol.rms << " * RMS(ref)");
    CHECK(d.argmax_bad.empty());
    // The greedy continuation until the first near-tie of the reference.
    REQUIRE(res.greedy.size() == r.greedy.size());
    for (size_t s = 0; s < r.greedy.size(); s++) {
        if (r.greedy_margin.size() == r.greedy.size() && r.greedy_margin[s] < tol.margin * r.scale) break;
        CHECK(res.greedy[s] == r.greedy[s]);
        if (res.greedy[s] != r.greedy[s]) break;
    }
    CHECK(ember_vulkan_validation_errors() == validation_before);
    MESSAGE(name << " on vulkan (n_gpu_layers " << n_gpu_layers << "): " << d.summary());
}

bool have_vulkan_and_fixtures() {
    if (!ember_vulkan_find_device("vulkan")) {
        MESSAGE("skipped: no Vulkan device (install mesa-vulkan-drivers for lavapipe)");
        return false;
    }
    if (ember_test_fixture_names().empty()) {
        MESSAGE("skipped: no fixtures/models (pass --data-dir)");
        return false;
    }
    return true;
}

}  // namespace

TEST_SUITE("vulkan") {

TEST_CASE("[vulkan] fixture models fully offloaded match llama.cpp") {
    if (!have_vulkan_and_fixtures()) return;
    // F32 weights and KV, then quantized weights with F16 / Q8_0 KV caches, micro-batches of 7.
    check_fixture("tiny-llama-F32", -1, EMBER_TYPE_F32, 0);
    check_fixture("tiny-llama-Q4_K_M", -1, EMBER_TYPE_F16, 7);
    check_fixture("tiny-qwen3-F16", -1, EMBER_TYPE_F32, 0);
    check_fixture("tiny-llama-Q8_0", -1, EMBER_TYPE_Q8_0, 0);
}

TEST_CASE("[vulkan] partial offload: one layer on the device, the rest on the CPU") {
    if (!have_vulkan_and_fixtures()) return;
    check_fixture("tiny-llama-Q4_0", 1, EMBER_TYPE_F32, 0);
}

TEST_CASE("[vulkan] an unknown Vulkan device index is a clean error") {
    if (!have_vulkan_and_fixtures()) return;
    ember_test_reference r;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_fixture("tiny-llama-F32", r, err), err);
    ember_test_model_ptr model;
    CHECK(load_on(r.model_path, "vulkan:99", -1, model, err) == EMBER_ERR_UNSUPPORTED);
    CHECK(!model);
}

}  // TEST_SUITE

#else

TEST_CASE("[vulkan] model tests: backend not built") {
    MESSAGE("skipped: this build has no Vulkan backend (EMBER_VULKAN=OFF)");
}

#endif  // EMBER_HAVE_VULKAN
