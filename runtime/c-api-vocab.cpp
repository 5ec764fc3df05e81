// The C API of the tokenizer (include/ember.h, section "Tokenizer"). Like every c-api file,
// it is a place that catches exceptions: each entry point runs through ember_api_guarded.
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/c-api-internal.h"
#include "runtime/model.h"
#include "runtime/unicode.h"
#include "runtime/vocab.h"

struct ember_token_stream {
    const ember_vocab * vocab = nullptr;
    bool                unparse_special = false;
    std::string         held;  // the start of a UTF-8 sequence that later tokens complete
};

namespace {

// The model's vocabulary; fails (INVALID_ARG) for a NULL model or one without a tokenizer.
ember_status get_vocab(const char * fn, const ember_model * model, const ember_vocab *& out) {
    if (!model) return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!model->vocab) return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: the model has no vocabulary (no tokenizer.ggml.tokens)", fn);
    out = model->vocab.get();
    return EMBER_OK;
}

// Runs f (filling an int32 result) guarded; -1 on failure, with the last error set.
template <typename F> int32_t guarded_int(F && f) {
    int32_t            r  = -1;
    const ember_status st = ember_api_guarded([&]() -> ember_status { return f(r); });
    return st == EMBER_OK ? r : -1;
}

int32_t checked_size(const char * fn, size_t n) {
    if (n > static_cast<size_t>(INT32_MAX)) ember_throw(EMBER_ERR_INVALID_ARG, "%s: the result (%zu bytes or tokens) exceeds INT32_MAX", fn, n);
    return static_cast<int32_t>(n);
}

// U+FFFD in UTF-8: what an unfinished sequence becomes when a stream is flushed.
const char k_replacement[] = "\xef\xbf\xbd";

}  // namespace

extern "C" {

EMBER_API int32_t ember_tokenize(const ember_model * model, const char * text, int32_t text_len, int32_t * tokens,
                                 int32_t n_tokens_max, uint8_t add_special, uint8_t parse_special) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_tokenize", model, v)) return st;
        if (!text) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_tokenize: text is NULL");
        if (text_len < -1) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_tokenize: text_len = %d", text_len);
        if (n_tokens_max < 0 || (n_tokens_max > 0 && !tokens)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_tokenize: tokens is NULL or n_tokens_max = %d is negative", n_tokens_max);
        }
        const size_t         n = text_len < 0 ? std::strlen(text) : static_cast<size_t>(text_len);
        std::vector<int32_t> out;
        v->tokenize(std::string_view(text, n), add_special != 0, parse_special != 0, out);
        r = checked_size("ember_tokenize", out.size());
        if (r > 0 && n_tokens_max > 0) std::memcpy(tokens, out.data(), sizeof(int32_t) * static_cast<size_t>(r < n_tokens_max ? r : n_tokens_max));
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_to_piece(const ember_model * model, int32_t token, char * buf, int32_t buf_size, uint8_t special) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_to_piece", model, v)) return st;
        if (buf_size < 0 || (buf_size > 0 && !buf)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_to_piece: buf is NULL or buf_size = %d is negative", buf_size);
        }
        const std::string_view p = v->token_to_piece(token, special != 0);
        r                        = checked_size("ember_token_to_piece", p.size());
        if (!p.empty() && buf_size > 0) std::memcpy(buf, p.data(), p.size() < static_cast<size_t>(buf_size) ? p.size() : buf_size);
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_detokenize(const ember_model * model, const int32_t * tokens, int32_t n_tokens, char * buf,
                                   int32_t buf_size, uint8_t remove_special, uint8_t unparse_special) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_detokenize", model, v)) return st;
        if (n_tokens < 0 || (n_tokens > 0 && !tokens)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_detokenize: tokens is NULL or n_tokens = %d is negative", n_tokens);
        }
        if (buf_size < 0 || (buf_size > 0 && !buf)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_detokenize: buf is NULL or buf_size = %d is negative", buf_size);
        }
        const std::string s = v->detokenize(tokens, static_cast<size_t>(n_tokens), remove_special != 0, unparse_special != 0);
        checked_size("ember_detokenize", s.size());
        r = ember_api_copy_out(s, buf, static_cast<size_t>(buf_size));
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_token_stream_create(const ember_model * model, uint8_t unparse_special, ember_token_stream ** out) {
    if (out) *out = nullptr;
    return ember_api_guarded([&]() -> ember_status {
        if (!out) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_stream_create: out is NULL");
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_stream_create", model, v)) return st;
        ember_token_stream * s = new ember_token_stream;
        s->vocab               = v;
        s->unparse_special     = unparse_special != 0;
        *out                   = s;
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_stream_push(ember_token_stream * stream, int32_t token, char * buf, int32_t buf_size) {
    return guarded_int([&](int32_t & r) -> ember_status {
        if (!stream) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_stream_push: stream is NULL");
        if (buf_size < 0 || (buf_size > 0 && !buf)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_stream_push: buf is NULL or buf_size = %d is negative", buf_size);
        }
        const std::string_view p    = stream->vocab->token_to_piece(token, stream->unparse_special);
        std::string            text = stream->held;
        text.append(p.data(), p.size());
        const size_t ready = ember_utf8_complete_prefix(text.data(), text.size());
        r                  = checked_size("ember_token_stream_push", ready);
        if (r > buf_size) return EMBER_OK;  // the caller asks again with a larger buffer
        if (ready > 0) std::memcpy(buf, text.data(), ready);
        stream->held = text.substr(ready);
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_stream_flush(ember_token_stream * stream, char * buf, int32_t buf_size) {
    return guarded_int([&](int32_t & r) -> ember_status {
        if (!stream) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_stream_flush: stream is NULL");
        if (buf_size < 0 || (buf_size > 0 && !buf)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_stream_flush: buf is NULL or buf_size = %d is negative", buf_size);
        }
        // What is held is at most one unfinished sequence.
        const std::string text = stream->held.empty() ? std::string() : std::string(k_replacement);
        r                      = static_cast<int32_t>(text.size());
        if (r > buf_size) return EMBER_OK;
        if (!text.empty()) std::memcpy(buf, text.data(), text.size());
        stream->held.clear();
        return EMBER_OK;
    });
}

EMBER_API void ember_token_stream_free(ember_token_stream * stream) { delete stream; }

EMBER_API int32_t ember_token_eot(const ember_model * model) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_eot", model, v)) return st;
        r = v->token_eot;
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_nl(const ember_model * model) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_nl", model, v)) return st;
        r = v->token_nl;
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_is_eog(const ember_model * model, int32_t token) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_is_eog", model, v)) return st;
        r = v->is_eog(token) ? 1 : 0;
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_token_is_control(const ember_model * model, int32_t token) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_token_is_control", model, v)) return st;
        if (!v->valid(token)) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_token_is_control: token %d is out of range [0, %d)", token, v->n_tokens());
        r = (v->attr[token] & EMBER_TOKEN_ATTR_CONTROL) ? 1 : 0;
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_model_add_bos(const ember_model * model) {
    return guarded_int([&](int32_t & r) -> ember_status {
        const ember_vocab * v = nullptr;
        if (ember_status st = get_vocab("ember_model_add_bos", model, v)) return st;
        r = v->add_bos ? 1 : 0;
        return EMBER_OK;
    });
}

}  // extern "C"
