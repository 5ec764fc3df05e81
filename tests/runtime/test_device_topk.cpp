// device_top_k (ember_context_params): a context that keeps only the best k candidates per
// output row decodes the same tokens as one that keeps the logits (greedy, and seeded sampling
// whose chain starts with top_k <= k), ember_get_top_k agrees with the logits, and the calls
// that would need the full row fail with a message instead of returning garbage.
// The contexts run on the best device (the GPU, where there is one).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"
#include "support/data-path.h"
#include "support/tiny-model.h"

namespace {

struct loaded {
    ember_model * model = nullptr;
    loaded() {
        tiny_model_spec spec;
        spec.n_vocab     = 512;  // more than any k below, several 32-wide chunks
        spec.w_std       = 0.3f; // peaked enough that greedy and top-p choices are not all ties
        spec.name        = "topk-llama-f32-v512";
        const std::string path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
        REQUIRE(ember_model_load(path.c_str(), nullptr, &model) == EMBER_OK);
    }
    ~loaded() { ember_model_free(model); }
};

ember_context * make_ctx(ember_model * m, int32_t device_top_k) {
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = 128;
    cp.n_threads            = 2;
    cp.device_top_k         = device_top_k;
    ember_context * ctx     = nullptr;
    REQUIRE(ember_context_create(m, &cp, &ctx) == EMBER_OK);
    return ctx;
}

// A chain built by `make` (a fresh one per call, same seed).
typedef ember_sampler * (*chain_fn)();

ember_sampler * chain_of(std::initializer_list<ember_sampler *> links) {
    ember_sampler * c = nullptr;
    REQUIRE(ember_sampler_chain_create(&c) == EMBER_OK);
    for (ember_sampler * l : links) REQUIRE(ember_sampler_chain_add(c, l) == EMBER_OK);
    return c;
}

ember_sampler * greedy() {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_greedy(&s) == EMBER_OK);
    return s;
}
ember_sampler * top_k(int32_t k) {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_top_k(k, &s) == EMBER_OK);
    return s;
}
ember_sampler * top_p(float p) {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_top_p(p, 1, &s) == EMBER_OK);
    return s;
}
ember_sampler * temp(float t) {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_temp(t, &s) == EMBER_OK);
    return s;
}
ember_sampler * dist(uint32_t seed) {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_dist(seed, &s) == EMBER_OK);
    return s;
}
ember_sampler * penalties() {
    ember_sampler * s = nullptr;
    REQUIRE(ember_sampler_create_penalties(16, 1.3f, 0.0f, 0.0f, &s) == EMBER_OK);
    return s;
}

// Decodes a prompt then n tokens, each sampled by s and fed back; returns the tokens (-1
// ends early: a failed sample).
std::vector<int32_t> generate(ember_context * ctx, ember_sampler * s, int n) {
    std::vector<int32_t> prompt{1, 17, 42, 99, 7};
    ember_batch          b = ember_batch_one(prompt.data(), static_cast<int32_t>(prompt.size()));
    REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
    std::vector<int32_t> out;
    for (int i = 0; i < n; i++) {
        int32_t tok = ember_sampler_sample(s, ctx, -1);
        out.push_back(tok);
        if (tok < 0) break;
        b = ember_batch_one(&tok, 1);
        REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
    }
    return out;
}

}  // namespace

TEST_SUITE("runtime") {

TEST_CASE("[device top-k] greedy with device_top_k = 1 decodes the same tokens as full logits") {
    loaded          L;
    ember_context * full = make_ctx(L.model, 0);
    ember_context * one  = make_ctx(L.model, 1);
    CHECK(ember_context_device_top_k(full) == 0);
    CHECK(ember_context_device_top_k(one) == 1);
    ember_sampler *            g1 = greedy();
    ember_sampler *            g2 = chain_of({greedy()});
    const std::vector<int32_t> a  = generate(full, g1, 24);
    const std::vector<int32_t> b  = generate(one, g2, 24);
    CHECK(a == b);
    bool varied = false;  // the model does not just repeat one token (the check could not fail then)
    for (int32_t t : a) varied = varied || t != a[0];
    CHECK(varied);
    ember_sampler_free(g1);
    ember_sampler_free(g2);
    ember_context_free(full);
    ember_context_free(one);
}

TEST_CASE("[device top-k] seeded sampling starting with top_k <= device_top_k equals the full-logits chain") {
    loaded L;
    struct variant {
        const char * what;
        int32_t      device_k;
        ember_sampler * (*make)();
    };
    const variant variants[] = {
        {"top_k 40 > top_p 0.9 > temp 0.8 > dist", 40, [] { return chain_of({top_k(40), top_p(0.9f), temp(0.8f), dist(1234)}); }},
        {"top_k 10 > temp 1.5 > dist, device k 64", 64, [] { return chain_of({top_k(10), temp(1.5f), dist(77)}); }},
        {"top_k 64 > dist, device k 64", 64, [] { return chain_of({top_k(64), dist(5)}); }},
        {"temp 0 > dist", 3, [] { return chain_of({temp(0.0f), dist(9)}); }},
        {"penalties > dist with k >= n_vocab (all kept)", 100000, [] { return chain_of({penalties(), temp(1.2f), dist(3)}); }},
    };
    for (const variant & v : variants) {
        const std::string what = v.what;
        CAPTURE(what);
        ember_context * full = make_ctx(L.model, 0);
        ember_context * kept = make_ctx(L.model, v.device_k);
        ember_sampler * s1   = v.make();
        ember_sampler * s2   = v.make();
        const std::vector<int32_t> a = generate(full, s1, 32);
        const std::vector<int32_t> b = generate(kept, s2, 32);
        CHECK(a == b);
        CHECK(a.back() >= 0);
        ember_sampler_free(s1);
        ember_sampler_free(s2);
        ember_context_free(full);
        ember_context_free(kept);
    }
}

TEST_CASE("[device top-k] ember_get_top_k agrees with the logits on every output row") {
    loaded          L;
    ember_context * full = make_ctx(L.model, 0);
    ember_context * kept = make_ctx(L.model, 33);
    std::vector<int32_t> toks{1, 2, 3, 50, 400, 7};
    std::vector<int8_t>  want{1, 0, 1, 1, 0, 1};
    ember_batch          b = ember_batch_one(toks.data(), static_cast<int32_t>(toks.size()));
    b.logits               = want.data();
    REQUIRE(ember_decode(full, &b) == EMBER_OK);
    REQUIRE(ember_decode(kept, &b) == EMBER_OK);
    CHECK(ember_n_outputs(kept) == 4);
    for (int32_t i = 0; i < 6; i++) {
        CAPTURE(i);
        int32_t ids_f[40], ids_k[40];
        float   val_f[40], val_k[40];
        if (!want[i]) {
            CHECK(ember_get_top_k(kept, i, ids_k, val_k, 40) == -1);
            CHECK(std::string(ember_last_error()).find("did not ask for logits") != std::string::npos);
            continue;
        }
        REQUIRE(ember_get_top_k(full, i, ids_f, val_f, 33) == 33);
        REQUIRE(ember_get_top_k(kept, i, ids_k, val_k, 40) == 33);  // only 33 kept
        const float * row = ember_get_logits_ith(full, i);
        REQUIRE(row);
        for (int j = 0; j < 33; j++) {
            CAPTURE(j);
            CHECK(ids_k[j] == ids_f[j]);
            CHECK(val_f[j] == row[ids_f[j]]);
            // The same graph up to the logits: on one device the values agree to rounding
            // (bit for bit on the CPU; the GPU may fuse differently with and without TOP_K).
            CHECK(val_k[j] == doctest::Approx(val_f[j]).epsilon(1e-5));
            if (j > 0) CHECK((val_f[j - 1] > val_f[j] || (val_f[j - 1] == val_f[j] && ids_f[j - 1] < ids_f[j])));
        }
        int32_t id2[2];
        CHECK(ember_get_top_k(kept, i, id2, nullptr, 2) == 2);  // vals may be NULL
        CHECK(id2[0] == ids_k[0]);
    }
    ember_context_free(full);
    ember_context_free(kept);
}

TEST_CASE("[device top-k] error paths: logits not kept, samplers that need the row, bad arguments") {
    loaded          L;
    ember_context * kept = make_ctx(L.model, 8);
    int32_t         tok  = 5;
    ember_batch     b    = ember_batch_one(&tok, 1);
    REQUIRE(ember_decode(kept, &b) == EMBER_OK);

    CHECK(ember_get_logits(kept) == nullptr);
    CHECK(std::string(ember_last_error()).find("device_top_k = 8") != std::string::npos);
    CHECK(ember_get_logits_ith(kept, -1) == nullptr);
    CHECK(std::string(ember_last_error()).find("ember_get_top_k") != std::string::npos);

    struct refused {
        const char * what;
        ember_sampler * (*make)();
    };
    const refused cases[] = {
        {"top_k above device_top_k", [] { return chain_of({top_k(9), dist(1)}); }},
        {"penalties first", [] { return chain_of({penalties(), greedy()}); }},
        {"temp > 0 first", [] { return chain_of({temp(0.7f), top_k(4), dist(1)}); }},
        {"dist alone", [] { return dist(1); }},
        {"top_p first", [] { return chain_of({top_p(0.5f), dist(1)}); }},
        {"top_k 0 (no-op) first", [] { return chain_of({top_k(0), greedy()}); }},
    };
    for (const refused & r : cases) {
        const std::string what = r.what;
        CAPTURE(what);
        ember_sampler * s = r.make();
        CHECK(ember_sampler_sample(s, kept, -1) == -1);
        CHECK(std::string(ember_last_error()).find("cannot run on the best 8 candidates") != std::string::npos);
        ember_sampler_free(s);
    }
    // Accepted ones still work after a refusal (nothing was consumed).
    ember_sampler * ok = chain_of({top_k(8), temp(0.9f), dist(2)});
    CHECK(ember_sampler_sample(ok, kept, -1) >= 0);
    ember_sampler_free(ok);
    ember_sampler * empty = chain_of({});
    CHECK(ember_sampler_sample(empty, kept, -1) >= 0);  // an empty chain takes the argmax
    ember_sampler_free(empty);

    int32_t ids[8];
    float   vals[8];
    CHECK(ember_get_top_k(nullptr, 0, ids, vals, 8) == -1);
    CHECK(ember_get_top_k(kept, 0, nullptr, vals, 8) == -1);
    CHECK(ember_get_top_k(kept, 0, ids, vals, 0) == -1);
    CHECK(ember_get_top_k(kept, 1, ids, vals, 8) == -1);
    CHECK(std::string(ember_last_error()).find("index out of range") != std::string::npos);
    CHECK(ember_get_top_k(kept, -1, ids, vals, 8) == 8);
    CHECK(ember_context_device_top_k(nullptr) == -1);
    ember_context_free(kept);

    // Bad and clamped values; an older, smaller params struct gets the default (off).
    ember_context_params cp = ember_context_default_params();
    CHECK(cp.device_top_k == 0);
    cp.device_top_k      = -1;
    ember_context * ctx  = nullptr;
    CHECK(ember_context_create(L.model, &cp, &ctx) == EMBER_ERR_INVALID_ARG);
    CHECK(ctx == nullptr);
    cp.device_top_k = 100000;
    cp.n_ctx        = 64;
    REQUIRE(ember_context_create(L.model, &cp, &ctx) == EMBER_OK);
    CHECK(ember_context_device_top_k(ctx) == 512);
    ember_context_free(ctx);
    cp              = ember_context_default_params();
    cp.n_ctx        = 64;
    cp.device_top_k = 4;
    cp.struct_size  = static_cast<uint32_t>(offsetof(ember_context_params, device_top_k));
    REQUIRE(ember_context_create(L.model, &cp, &ctx) == EMBER_OK);
    CHECK(ember_context_device_top_k(ctx) == 0);
    REQUIRE(ember_decode(ctx, &b) == EMBER_OK);
    CHECK(ember_get_logits(ctx) != nullptr);
    ember_context_free(ctx);
}

}  // TEST_SUITE
