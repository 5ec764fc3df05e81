// Whole models with weights repacked for the CPU decode kernels (backends/cpu_simd/repack.h):
// the loader repacks Q4_0 / Q8_0 matrices (the token embeddings only when tied: GET_ROWS then
// reads the repacked table), mapped or read into memory, and the logits and greedy tokens
// equal a load with EMBER_CPU_REPACK=0.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu_simd/kernels.h"
#include "runtime/model.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/tiny-model.h"

namespace {

struct run_out {
    std::vector<float>   logits;
    std::vector<int32_t> greedy;
    int                  n_repacked = 0;
};

run_out run(const std::string & path, bool repack, bool mmap) {
    if (repack) {
        unsetenv("EMBER_CPU_REPACK");
    } else {
        setenv("EMBER_CPU_REPACK", "0", 1);
    }
    ember_model_params mp = ember_model_default_params();
    mp.use_mmap           = mmap ? 1 : 0;
    ember_model * model   = nullptr;
    REQUIRE(ember_model_load(path.c_str(), &mp, &model) == EMBER_OK);
    unsetenv("EMBER_CPU_REPACK");
    run_out out;
    for (const ember_tensor & t : model->tensors) {
        if (t.flags & EMBER_TENSOR_FLAG_CPU_REPACKED) out.n_repacked++;
    }
    ember_test_run_params p;
    p.n_threads = ember_test_threads(2);
    ember_test_run_result r;
    std::string           err;
    const std::vector<int32_t> prompt = {1, 17, 33, 5, 90, 12, 64, 3};
    REQUIRE_MESSAGE(ember_test_run(model, prompt, 8, p, r, err) == EMBER_OK, err);
    ember_model_free(model);
    out.logits = r.logits;
    out.greedy = r.greedy;
    return out;
}

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[cpu repack] models with repacked weights give the logits of the file layout") {
    for (int32_t type : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0}) {
        for (bool tied : {false, true}) {
            CAPTURE(type);
            CAPTURE(tied);
            tiny_model_spec spec;
            spec.weight_type     = type;
            spec.tied            = tied;
            const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
            const bool        have = ember_cpu_kernels()->of(type).gemv_r16 != nullptr;
            const run_out     base = run(path, false, true);
            CHECK(base.n_repacked == 0);
            for (bool mmap : {true, false}) {
                CAPTURE(mmap);
                const run_out got = run(path, true, mmap);
                // 2 layers x 7 matrices, and output.weight or (tied) token_embd.weight
                CHECK(got.n_repacked == (have ? 15 : 0));
                REQUIRE(got.logits.size() == base.logits.size());
                double num = 0.0, den = 0.0;
                for (size_t i = 0; i < got.logits.size(); i++) {
                    num += (double) (got.logits[i] - base.logits[i]) * (got.logits[i] - base.logits[i]);
                    den += (double) base.logits[i] * base.logits[i];
                }
                CHECK(den > 0.0);
                CHECK(std::sqrt(num / den) < 1e-5);
                CHECK(got.greedy == base.greedy);
            }
        }
    }
}

}  // TEST_SUITE
