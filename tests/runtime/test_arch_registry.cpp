// Every registered architecture loads from a tiny random model and decodes one batch on the CPU.
// A new architecture without a tiny-model recipe fails here on purpose.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/arch.h"
#include "support/data-path.h"
#include "support/tiny-model.h"

TEST_SUITE("runtime") {

TEST_CASE("[arch] every registered architecture loads and decodes") {
    int                             n    = 0;
    const ember_arch_desc * const * list = ember_arch_list(&n);
    REQUIRE(n >= 3);
    for (int i = 0; i < n; i++) {
        const ember_arch_desc * a = list[i];
        CAPTURE(std::string(a->name));
        CHECK(ember_arch_find(a->name) == a);
        CHECK((a->build_graph != nullptr));
        CHECK(a->n_tensors > 0);

        tiny_model_spec spec;
        spec.arch              = a->name;
        const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
        ember_model *     model = nullptr;
        REQUIRE(ember_model_load(path.c_str(), nullptr, &model) == EMBER_OK);
        CHECK(std::string(ember_model_arch(model)) == a->name);

        ember_context * ctx = nullptr;
        REQUIRE(ember_context_create(model, nullptr, &ctx) == EMBER_OK);
        std::vector<int32_t> toks{1, 2, 3, 4, 5};
        ember_batch          b = ember_batch_one(toks.data(), 5);
        REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
        const float * logits = ember_get_logits_ith(ctx, -1);
        REQUIRE(logits != nullptr);
        bool finite = true;
        for (int j = 0; j < ember_model_n_vocab(model); j++) finite = finite && std::isfinite(logits[j]);
        CHECK(finite);
        ember_context_free(ctx);
        ember_model_free(model);
    }
    CHECK(ember_arch_find("gpt-j") == nullptr);
    CHECK(ember_arch_find(nullptr) == nullptr);
}

TEST_CASE("[arch] a missing or misshapen tensor is a precise format error") {
    tiny_model_spec spec;
    const std::string path  = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
    std::unique_ptr<ember_gguf_file> f = ember_gguf_open(path);
    for (int variant = 0; variant < 3; variant++) {
        CAPTURE(variant);
        ember_gguf_writer w;
        w.copy_kv_from(*f);
        for (const ember_gguf_tensor_info & t : f->tensors) {
            if (variant == 0 && t.name == "blk.1.ffn_up.weight") continue;  // missing
            int64_t ne[4] = {t.ne[0], t.ne[1], t.ne[2], t.ne[3]};
            if (variant == 1 && t.name == "blk.0.attn_k.weight") ne[1] += 32;  // wrong shape
            std::vector<uint8_t> data(ember_row_size(t.type, ne[0]) * ne[1] * ne[2] * ne[3]);
            w.add_tensor(t.name, t.type, t.n_dims, ne, data.data());
        }
        if (variant == 2) w.set_str("general.architecture", "mamba");
        const std::string bad = ember_test_tmp_dir() + "/bad-arch.gguf";
        w.write_to_file(bad);
        ember_model * model = nullptr;
        const ember_status st = ember_model_load(bad.c_str(), nullptr, &model);
        CHECK(model == nullptr);
        const std::string msg = ember_last_error();
        CAPTURE(msg);
        if (variant == 0) CHECK((st == EMBER_ERR_BAD_FORMAT && msg.find("blk.1.ffn_up.weight") != std::string::npos));
        if (variant == 1) CHECK((st == EMBER_ERR_BAD_FORMAT && msg.find("blk.0.attn_k.weight") != std::string::npos));
        if (variant == 2) CHECK((st == EMBER_ERR_UNSUPPORTED && msg.find("mamba") != std::string::npos));
    }
}

}  // TEST_SUITE
