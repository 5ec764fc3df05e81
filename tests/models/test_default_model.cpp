// The bundled default model: the same tensors as the reference file, its chat template, the
// reference greedy continuation, and the reference perplexity on the held-out text.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/gguf.h"
#include "support/data-path.h"

namespace {

std::string repo_path(const std::string & rel) { return std::string(EMBER_SOURCE_DIR) + "/" + rel; }

std::string slurp(const std::string & path) {
    std::ifstream     f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<int32_t> ids_of(const std::string & text) {
    std::vector<int32_t> ids;
    std::istringstream   ss(text);
    int32_t              v;
    while (ss >> v) ids.push_back(v);
    return ids;
}

const char * k_model = "models/ember-kjv-25m-q8_0.gguf";

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[default-model] the bundled file holds the reference tensors and the chat template") {
    std::unique_ptr<ember_gguf_file> ours = ember_gguf_open(repo_path(k_model));
    CHECK(ours->get_str("tokenizer.chat_template", "") == slurp(repo_path("models/ember-kjv-25m.chat-template.jinja")));
    const std::string ref_path = ember_test_data_path("models/ember-kjv-25m-q8_0.gguf");
    if (ref_path.empty()) {
        MESSAGE("no reference data: tensor comparison skipped");
        return;
    }
    std::unique_ptr<ember_gguf_file> ref = ember_gguf_open(ref_path);
    REQUIRE(ours->tensors.size() == ref->tensors.size());
    for (const ember_gguf_tensor_info & t : ref->tensors) {
        CAPTURE(t.name);
        const ember_gguf_tensor_info * o = ours->tensor(t.name);
        REQUIRE(o != nullptr);
        CHECK(o->type == t.type);
        REQUIRE(o->nbytes == t.nbytes);
        CHECK(std::memcmp(ours->tensor_data(*o), ref->tensor_data(t), t.nbytes) == 0);
    }
    for (const ember_gguf_kv & kv : ref->kv) {
        CAPTURE(kv.key);
        REQUIRE(ours->find(kv.key) != nullptr);
        CHECK(ours->find(kv.key)->to_string(1u << 20) == kv.value.to_string(1u << 20));
    }
}

TEST_CASE("[default-model] reproduces the reference greedy continuation") {
    ember_model * model = nullptr;
    REQUIRE(ember_model_load(repo_path(k_model).c_str(), nullptr, &model) == EMBER_OK);
    ember_context_params cp = ember_context_default_params();
    cp.type_k = cp.type_v = EMBER_TYPE_F32;  // as the reference run
    ember_context * ctx   = nullptr;
    REQUIRE(ember_context_create(model, &cp, &ctx) == EMBER_OK);
    std::vector<int32_t> prompt = ids_of(slurp(repo_path("models/ember-kjv-25m-q8_0.tokens.txt")));
    std::vector<int32_t> want   = ids_of(slurp(repo_path("models/ember-kjv-25m-q8_0.greedy.txt")));
    REQUIRE(prompt.size() == 10);
    REQUIRE(want.size() == 32);
    ember_batch b = ember_batch_one(prompt.data(), static_cast<int32_t>(prompt.size()));
    REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
    for (size_t i = 0; i < want.size(); i++) {
        const float * l    = ember_get_logits_ith(ctx, -1);
        int32_t       best = 0;
        for (int32_t j = 1; j < ember_model_n_vocab(model); j++) best = l[j] > l[best] ? j : best;
        CAPTURE(i);
        REQUIRE(best == want[i]);
        b = ember_batch_one(&best, 1);
        REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
    }
    ember_context_free(ctx);
    ember_model_free(model);
}

// llama-perplexity's method (-c 512): tokenize the whole text with BOS, cut it into chunks of
// n_ctx tokens, make each chunk's first token BOS, and score the second half of each chunk.
TEST_CASE("[default-model] perplexity on the held-out text matches the reference within 1%") {
    const std::string val = ember_test_data_path("models/val.txt");
    if (val.empty()) {
        MESSAGE("no reference data: perplexity skipped");
        return;
    }
    const double ref_ppl = 70.47;  // ../shared/models/README.md, Q8_0 row
    const std::string text = slurp(val);
    ember_model * model = nullptr;
    REQUIRE(ember_model_load(repo_path(k_model).c_str(), nullptr, &model) == EMBER_OK);
    const int32_t n_tok = ember_tokenize(model, text.data(), static_cast<int32_t>(text.size()), nullptr, 0, 1, 0);
    REQUIRE(n_tok > 1024);
    std::vector<int32_t> tokens(static_cast<size_t>(n_tok));
    REQUIRE(ember_tokenize(model, text.data(), static_cast<int32_t>(text.size()), tokens.data(), n_tok, 1, 0) == n_tok);

    const int32_t        n_ctx = 512, first = n_ctx / 2, n_vocab = ember_model_n_vocab(model);
    ember_context_params cp    = ember_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx;
    ember_context * ctx   = nullptr;
    REQUIRE(ember_context_create(model, &cp, &ctx) == EMBER_OK);
    std::vector<int8_t> want(n_ctx, 0);
    for (int32_t j = first; j < n_ctx - 1; j++) want[j] = 1;

    double  nll = 0.0;
    int64_t count = 0;
    const int32_t n_chunk = n_tok / n_ctx;
    for (int32_t c = 0; c < n_chunk; c++) {
        std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
        chunk[0] = ember_token_bos(model);
        ember_batch b = ember_batch_one(chunk.data(), n_ctx);
        b.logits      = want.data();
        REQUIRE(ember_kv_cache_clear(ctx) == EMBER_OK);
        REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
        for (int32_t j = first; j < n_ctx - 1; j++) {
            const float * l   = ember_get_logits_ith(ctx, j);
            double        max = l[0], sum = 0.0;
            for (int32_t v = 1; v < n_vocab; v++) max = l[v] > max ? l[v] : max;
            for (int32_t v = 0; v < n_vocab; v++) sum += std::exp(l[v] - max);
            nll += -(l[tokens[c * n_ctx + j + 1]] - max - std::log(sum));
            count++;
        }
    }
    const double ppl = std::exp(nll / static_cast<double>(count));
    MESSAGE("perplexity over ", n_chunk, " chunks of 512: ", ppl, " (reference ", ref_ppl, ")");
    CHECK(std::fabs(ppl - ref_ppl) / ref_ppl < 0.01);
    ember_context_free(ctx);
    ember_model_free(model);
}

}  // TEST_SUITE
