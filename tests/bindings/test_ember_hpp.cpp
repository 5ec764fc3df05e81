// include/ember.hpp: the C++ wrappers over the C ABI, on the bundled default model.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ember.hpp"

namespace {

std::string repo_path(const std::string & rel) { return std::string(EMBER_SOURCE_DIR) + "/" + rel; }

std::vector<int32_t> ids_of(const std::string & path) {
    std::ifstream        f(path);
    std::vector<int32_t> ids;
    int32_t              v;
    while (f >> v) ids.push_back(v);
    return ids;
}

const std::string k_model = repo_path("models/ember-kjv-25m-q8_0.gguf");

ember_context_params f32_cache(uint32_t n_ctx) {
    ember_context_params cp = ember::Context::default_params();
    cp.n_ctx                = n_ctx;
    cp.type_k = cp.type_v = EMBER_TYPE_F32;  // as the reference run
    return cp;
}

// The status of the ember::Error that f throws, or -1 when it throws nothing.
template <class F> ember_status status_of(F f, std::string * what = nullptr) {
    try {
        f();
    } catch (const ember::Error & e) {
        if (what) *what = e.what();
        return e.status();
    }
    return -1;
}

}  // namespace

TEST_SUITE("bindings") {

TEST_CASE("[ember.hpp] the handles are move-only owners") {
    static_assert(!std::is_copy_constructible<ember::Model>::value, "a model has one owner");
    static_assert(!std::is_copy_assignable<ember::Context>::value, "a context has one owner");
    static_assert(std::is_nothrow_move_constructible<ember::Sampler>::value, "samplers move");
    static_assert(std::is_base_of<std::runtime_error, ember::Error>::value, "errors are std exceptions");
    ember::Model a(k_model);
    ember_model * raw = a.get();
    ember::Model  b(std::move(a));
    CHECK(a.get() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
    CHECK(b.get() == raw);
    ember::Context c1(b, f32_cache(32));
    ember::Context c2(std::move(c1));
    CHECK(c1.get() == nullptr);
    c2.decode({ 1, 2, 3 });
    CHECK(c2.kv_used() == 3);
    ember::Context c3(b, f32_cache(32));
    c3 = std::move(c2);  // the old c3 is freed, c2's cache moves over
    CHECK(c3.kv_used() == 3);
}

TEST_CASE("[ember.hpp] metadata, tokenizer and chat template") {
    const ember::Model m(k_model);
    CHECK(m.arch() == "llama");
    CHECK(m.n_vocab() == 32000);
    CHECK(m.n_layer() == 8);
    CHECK(m.n_embd() == 384);
    CHECK(m.n_head_kv() == 2);
    CHECK(m.n_ctx_train() == 512);
    CHECK(m.desc().rfind("llama", 0) == 0);
    CHECK(m.meta("general.architecture").value_or("") == "llama");
    CHECK_FALSE(m.meta("no.such.key").has_value());

    const std::vector<int32_t> prompt = ids_of(repo_path("models/ember-kjv-25m-q8_0.tokens.txt"));
    REQUIRE(prompt.size() == 10);
    CHECK(m.tokenize("And God said unto Moses, Behold") == prompt);
    CHECK(m.tokenize("And God said unto Moses, Behold", false) == std::vector<int32_t>(prompt.begin() + 1, prompt.end()));
    CHECK(m.detokenize(prompt, true) == "And God said unto Moses, Behold");
    CHECK(m.token_to_piece(prompt[1]) == " And");
    CHECK(m.token_to_piece(m.token_bos(), true) == "<s>");
    CHECK(m.is_eog(m.token_eos()));
    const std::string long_text(5000, 'a');  // longer than the first buffers
    CHECK(m.detokenize(m.tokenize(long_text, false)) == long_text);

    const std::vector<ember::ChatMessage> msgs = { { "system", "S" }, { "user", "U" } };
    CHECK(m.apply_chat_template(msgs) == "S\n\nU");
    CHECK(m.apply_chat_template(msgs, true, "{% for m in messages %}<{{ m.role }}>{% endfor %}") == "<system><user>");
}

TEST_CASE("[ember.hpp] greedy decoding reproduces the reference continuation") {
    const ember::Model         m(k_model);
    ember::Context             ctx(m, f32_cache(64));
    ember::Sampler             greedy = ember::Sampler::greedy();
    ember::TokenStream         stream(m);
    const std::vector<int32_t> prompt = ids_of(repo_path("models/ember-kjv-25m-q8_0.tokens.txt"));
    const std::vector<int32_t> want   = ids_of(repo_path("models/ember-kjv-25m-q8_0.greedy.txt"));
    REQUIRE(want.size() == 32);
    ctx.decode(prompt);
    CHECK(ctx.logits().size() == 32000);
    std::vector<int32_t> got;
    std::string          text;
    for (size_t i = 0; i < want.size(); i++) {
        int32_t tok = greedy.sample(ctx);
        got.push_back(tok);
        text += stream.push(tok);
        ctx.decode({ &tok, 1 });
    }
    text += stream.flush();
    CHECK(got == want);
    CHECK(text == m.detokenize(want));
    CHECK(ctx.pos_max() == 41);

    // again after dropping the continuation, through a Params chain at temperature 0 and over
    // a row of logits given by the caller
    ctx.seq_rm(0, 9);  // keep positions 0..8, evaluate the prompt's last token again
    CHECK(ctx.kv_used() == 9);
    ctx.decode(ember::span<const int32_t>(prompt.data() + 9, 1));
    ember::Sampler::Params p;
    p.temperature = 0.0f;
    ember::Sampler chain(p);
    const ember::span<const float> row = ctx.logits();
    const std::vector<float>       copy(row.begin(), row.end());
    CHECK(greedy.sample(copy) == want[0]);
    CHECK(chain.sample(ctx) == want[0]);
}

TEST_CASE("[ember.hpp] seeded sampling is reproducible") {
    const ember::Model m(k_model);
    ember::Context     ctx(m, f32_cache(64));
    ctx.decode(m.tokenize("In the beginning"));
    ember::Sampler::Params p;
    p.seed = 1234;
    p.temperature = 1.0f;
    ember::Sampler a(p), b(p);
    std::vector<int32_t> ta, tb;
    for (int i = 0; i < 16; i++) ta.push_back(a.sample(ctx));
    for (int i = 0; i < 16; i++) tb.push_back(b.sample(ctx));
    CHECK(ta == tb);
    a.reset();
    CHECK(a.sample(ctx) == ta[0]);
    // a hand-built chain: a banned token never comes
    const int32_t                  best = ember::Sampler::greedy().sample(ctx);
    const ember_logit_bias         ban[] = { { best, -INFINITY } };
    ember::Sampler                 c = ember::Sampler::chain();
    c.add(ember::Sampler::logit_bias(m.n_vocab(), ban)).add(ember::Sampler::top_k(5)).add(ember::Sampler::greedy());
    CHECK(c.sample(ctx) != best);
}

TEST_CASE("[ember.hpp] failures throw ember::Error with the status and the library's message") {
    std::string what;
    CHECK(status_of([] { ember::Model m("/nonexistent/model.gguf"); }, &what) == EMBER_ERR_IO);
    CHECK(what.find("/nonexistent/model.gguf") != std::string::npos);
    CHECK(status_of([] { ember::Model m(k_model, 0, "no-such-device"); }) == EMBER_ERR_INVALID_ARG);

    const ember::Model m(k_model);
    ember::Context     ctx(m, f32_cache(16));
    CHECK(status_of([&] { ctx.logits(); }) == EMBER_ERR_INVALID_ARG);  // nothing decoded yet
    CHECK(status_of([&] { ctx.decode({ 1, 32000 }); }, &what) == EMBER_ERR_INVALID_ARG);
    CHECK(what.find("32000") != std::string::npos);
    CHECK(status_of([&] { ctx.decode(std::vector<int32_t>{}); }) == EMBER_ERR_INVALID_ARG);
    CHECK(ctx.kv_used() == 0);
    std::vector<int32_t> ten(10, 5);
    ctx.decode(ten);
    CHECK(status_of([&] { ctx.decode(ten); }) == EMBER_ERR_CONTEXT_FULL);  // nothing changed
    CHECK(ctx.kv_used() == 10);
    CHECK(status_of([&] { ctx.set_n_threads(-3); }) == EMBER_ERR_INVALID_ARG);

    CHECK(status_of([] { ember::Sampler::top_p(2.0f); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([] { ember::Sampler::temp(NAN); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { ember::Sampler::logit_bias(m.n_vocab(), { { 99999, 1.0f } }); }) == EMBER_ERR_INVALID_ARG);
    ember::Sampler g = ember::Sampler::greedy();
    CHECK(status_of([&] { g.sample(std::vector<float>(4, -INFINITY)); }) == EMBER_ERR_INVALID_ARG);
    ember::Sampler chain = ember::Sampler::chain();
    CHECK(status_of([&] { chain.add(std::move(chain)); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { m.token_to_piece(-1); }, &what) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { m.apply_chat_template({}, true, "{{ raise_exception('nope') }}"); }, &what) ==
          EMBER_ERR_INVALID_ARG);
    CHECK(what == "nope");
}

TEST_CASE("[ember.hpp] span views") {
    const std::vector<int32_t> v = { 1, 2, 3 };
    const std::array<int32_t, 2> a = { { 4, 5 } };
    const int32_t c[4] = { 6, 7, 8, 9 };
    ember::span<const int32_t> sv(v), sa(a), sc(c), sp(v.data() + 1, 2);
    CHECK(sv.size() == 3);
    CHECK(sa[1] == 5);
    CHECK(sc.size() == 4);
    CHECK(sp[0] == 2);
    CHECK(sc.subspan(1, 2)[1] == 8);
    CHECK(ember::span<const int32_t>().empty());
    int sum = 0;
    for (int32_t x : sv) sum += x;
    CHECK(sum == 6);
}

}  // TEST_SUITE
