// The C API of sampling (include/ember.h, section "Sampling"). Like every c-api file, it is
// a place that catches exceptions: each entry point runs through ember_api_guarded.
#include <memory>
#include <utility>

#include "ember.h"
#include "runtime/c-api-internal.h"
#include "runtime/context.h"
#include "runtime/sampler.h"

namespace {

// Creates a link of type T from its constructor arguments (which validate and throw).
template <typename T, typename... A> ember_status create_link(const char * fn, ember_sampler ** out, A &&... args) {
    if (out) *out = nullptr;
    return ember_api_guarded([&]() -> ember_status {
        if (!out) return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: out is NULL", fn);
        *out = new T(std::forward<A>(args)...);
        return EMBER_OK;
    });
}

// Runs f (returning a token) guarded; -1 on failure, with the last error set.
template <typename F> int32_t guarded_token(F && f) {
    int32_t            token = -1;
    const ember_status st    = ember_api_guarded([&]() -> ember_status { return f(token); });
    return st == EMBER_OK ? token : -1;
}

}  // namespace

extern "C" {

EMBER_API ember_status ember_sampler_chain_create(ember_sampler ** out) {
    return create_link<ember_sampler_chain>("ember_sampler_chain_create", out);
}

EMBER_API ember_status ember_sampler_chain_add(ember_sampler * chain, ember_sampler * s) {
    return ember_api_guarded([&]() -> ember_status {
        if (!s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_chain_add: sampler is NULL");
        // A sampler that has an owner (another chain, or the caller through `chain` itself)
        // is not taken: freeing it here would pull it out from under that owner.
        if (s->parent) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_chain_add: the %s sampler already belongs to a chain", s->name());
        }
        for (const ember_sampler * p = chain; p; p = p->parent) {
            if (p == s) {
                return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_chain_add: adding the %s sampler would make a chain contain itself",
                                      s->name());
            }
        }
        std::unique_ptr<ember_sampler> owned(s);  // ours from here on, freed on any failure below
        if (!chain) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_chain_add: chain is NULL");
        if (!chain->is_chain()) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_chain_add: the %s sampler is not a chain", chain->name());
        }
        static_cast<ember_sampler_chain *>(chain)->add(std::move(owned));
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_sampler_create_greedy(ember_sampler ** out) {
    return create_link<ember_sampler_greedy>("ember_sampler_create_greedy", out);
}

EMBER_API ember_status ember_sampler_create_dist(uint32_t seed, ember_sampler ** out) {
    return create_link<ember_sampler_dist>("ember_sampler_create_dist", out, seed);
}

EMBER_API ember_status ember_sampler_create_temp(float temp, ember_sampler ** out) {
    return create_link<ember_sampler_temp>("ember_sampler_create_temp", out, temp);
}

EMBER_API ember_status ember_sampler_create_top_k(int32_t k, ember_sampler ** out) {
    return create_link<ember_sampler_top_k>("ember_sampler_create_top_k", out, k);
}

EMBER_API ember_status ember_sampler_create_top_p(float p, size_t min_keep, ember_sampler ** out) {
    return create_link<ember_sampler_top_p>("ember_sampler_create_top_p", out, p, min_keep);
}

EMBER_API ember_status ember_sampler_create_min_p(float p, size_t min_keep, ember_sampler ** out) {
    return create_link<ember_sampler_min_p>("ember_sampler_create_min_p", out, p, min_keep);
}

EMBER_API ember_status ember_sampler_create_typical(float p, size_t min_keep, ember_sampler ** out) {
    return create_link<ember_sampler_typical>("ember_sampler_create_typical", out, p, min_keep);
}

EMBER_API ember_status ember_sampler_create_penalties(int32_t last_n, float repeat, float freq, float presence, ember_sampler ** out) {
    return create_link<ember_sampler_penalties>("ember_sampler_create_penalties", out, last_n, repeat, freq, presence);
}

EMBER_API ember_status ember_sampler_create_logit_bias(int32_t n_vocab, const ember_logit_bias * biases, size_t n, ember_sampler ** out) {
    return create_link<ember_sampler_logit_bias>("ember_sampler_create_logit_bias", out, n_vocab, biases, n);
}

EMBER_API int32_t ember_sampler_sample(ember_sampler * s, ember_context * ctx, int32_t i) {
    return guarded_token([&](int32_t & token) -> ember_status {
        if (!s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_sample: sampler is NULL");
        if (!ctx) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_sample: context is NULL");
        ctx->sync();  // the last decode's outputs, if its step is still queued
        const int32_t n_vocab = static_cast<int32_t>(ctx->model.hp.n_vocab);
        if (ctx->top_k > 0) {  // only the device's top-k candidates came back
            const int32_t row = ember_api_output_row(ctx, i, "ember_sampler_sample");
            if (row < 0) return EMBER_ERR_INVALID_ARG;  // the message is set
            const size_t off = static_cast<size_t>(row) * ctx->top_k;
            token            = s->sample_top(&ctx->top_ids[off], &ctx->top_vals[off], ctx->top_k, n_vocab);
            return EMBER_OK;
        }
        const float * row = ember_get_logits_ith(ctx, i);
        if (!row) return EMBER_ERR_INVALID_ARG;  // ember_get_logits_ith set the message
        token = s->sample(row, n_vocab);
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_sampler_sample_logits(ember_sampler * s, const float * logits, int32_t n_vocab) {
    return guarded_token([&](int32_t & token) -> ember_status {
        if (!s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_sample_logits: sampler is NULL");
        if (!logits) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_sample_logits: logits is NULL");
        if (n_vocab <= 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_sample_logits: n_vocab = %d must be positive", n_vocab);
        token = s->sample(logits, n_vocab);
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_sampler_accept(ember_sampler * s, int32_t token) {
    return ember_api_guarded([&]() -> ember_status {
        if (!s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_accept: sampler is NULL");
        if (token < 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_accept: token %d is negative", token);
        if (s->n_vocab > 0 && token >= s->n_vocab) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_accept: token %d is not in [0, n_vocab = %d)", token, s->n_vocab);
        }
        s->accept(token);
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_sampler_reset(ember_sampler * s) {
    return ember_api_guarded([&]() -> ember_status {
        if (!s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_reset: sampler is NULL");
        s->reset();
        return EMBER_OK;
    });
}

EMBER_API void ember_sampler_free(ember_sampler * s) {
    if (!s) return;
    if (s->parent) {
        // Owned by a chain: freeing it here would leave the chain with a dangling link.
        ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_sampler_free: the %s sampler belongs to a chain; free the chain", s->name());
        return;
    }
    delete s;
}

}  // extern "C"
