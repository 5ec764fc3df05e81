// ember.hpp: header-only C++17 wrappers over the C ABI (ember.h).
//
// RAII owners for the C handles (ember::Model, ember::Context, ember::Sampler,
// ember::TokenStream), exceptions instead of status codes (ember::Error carries the status and
// the ember_last_error() message), and std::string_view / span inputs. Everything here is
// inline code over ember.h: it adds nothing to the ABI, and a program using it links the same
// libember as a C program.
//
//   ember::Model   model("model.gguf");
//   ember::Context ctx(model);
//   ember::Sampler sampler = ember::Sampler::greedy();
//   ember::TokenStream stream(model);
//   ctx.decode(model.tokenize("And God said"));
//   for (int i = 0; i < 32; i++) {
//       int32_t tok = sampler.sample(ctx);
//       if (model.is_eog(tok)) break;
//       std::cout << stream.push(tok) << std::flush;
//       ctx.decode({&tok, 1});
//   }
//
// Thread safety is that of ember.h: a Model may be shared by threads; a Context, a Sampler
// and a TokenStream are used by one thread at a time. A Context borrows its Model, which must
// outlive it.
#ifndef EMBER_HPP
#define EMBER_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember.h"

namespace ember {

//
// Errors
//
// A failed call: status() is the ember_status, what() the library's ember_last_error() text
// (or the status name when the library gave none).
class Error : public std::runtime_error {
  public:
    Error(ember_status status, const std::string & message) : std::runtime_error(message), status_(status) {}
    ember_status status() const noexcept { return status_; }
    const char * status_name() const noexcept { return ember_status_str(status_); }

  private:
    ember_status status_;
};

namespace detail {
[[noreturn]] inline void fail(ember_status status) {
    const char * msg = ember_last_error();
    throw Error(status, msg && *msg ? msg : ember_status_str(status));
}
}  // namespace detail

// Throws ember::Error unless status is EMBER_OK.
inline void check(ember_status status) {
    if (status != EMBER_OK) detail::fail(status);
}

// Checks that the loaded library accepts the ABI this header was compiled against.
inline void check_abi() { check(EMBER_CHECK_ABI()); }

//
// span: a view of contiguous elements (pointer + size), the C++17 stand-in for std::span.
// Built from a pointer and a size, a C array, a braced list (for the call's duration), or any
// container with data() and size() (std::vector, std::array, std::string for char).
//
template <class T> class span {
  public:
    using element_type = T;

    constexpr span() noexcept = default;
    constexpr span(T * data, size_t size) noexcept : data_(data), size_(size) {}
    template <size_t N> constexpr span(T (&arr)[N]) noexcept : data_(arr), size_(N) {}
    // A braced list lives until the end of the full expression: fine for an argument, as with
    // C++26 std::span, never for a span kept in a variable.
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
    template <class U = T, class = std::enable_if_t<std::is_const<U>::value>>
    constexpr span(std::initializer_list<std::remove_const_t<T>> list) noexcept : data_(list.begin()), size_(list.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#endif
    template <class C, class = std::enable_if_t<!std::is_same<std::decay_t<C>, span>::value &&
                                                std::is_convertible<decltype(std::declval<C &>().data()), T *>::value>>
    constexpr span(C && c) noexcept(noexcept(c.data())) : data_(c.data()), size_(c.size()) {}

    constexpr T *  data() const noexcept { return data_; }
    constexpr size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T *  begin() const noexcept { return data_; }
    constexpr T *  end() const noexcept { return data_ + size_; }
    constexpr T &  operator[](size_t i) const noexcept { return data_[i]; }
    constexpr span subspan(size_t offset, size_t count) const noexcept { return span(data_ + offset, count); }

  private:
    T *    data_ = nullptr;
    size_t size_ = 0;
};

// One message of a conversation for Model::apply_chat_template.
struct ChatMessage {
    std::string role;     // "system", "user", "assistant", "tool"
    std::string content;  // UTF-8
};

namespace detail {
// Calls an snprintf-style function f(buf, size) -> needed length (< 0: error) and returns the text.
template <class F> std::string text_call(F f, size_t initial = 256) {
    std::string out(initial, '\0');
    for (;;) {
        const int32_t n = f(&out[0], out.size());
        if (n < 0) fail(EMBER_ERR_INVALID_ARG);
        if (static_cast<size_t>(n) < out.size()) {
            out.resize(static_cast<size_t>(n));
            return out;
        }
        out.assign(static_cast<size_t>(n) + 1, '\0');
    }
}

// Move-only owner of a C handle.
template <class H, void (*Free)(H *)> class handle {
  public:
    handle() noexcept = default;
    explicit handle(H * h) noexcept : h_(h) {}
    handle(handle && o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    handle & operator=(handle && o) noexcept {
        if (this != &o) reset(std::exchange(o.h_, nullptr));
        return *this;
    }
    handle(const handle &)             = delete;
    handle & operator=(const handle &) = delete;
    ~handle() { reset(); }

    H *  get() const noexcept { return h_; }
    H *  release() noexcept { return std::exchange(h_, nullptr); }
    void reset(H * h = nullptr) noexcept {
        if (h_) Free(h_);
        h_ = h;
    }

  private:
    H * h_ = nullptr;
};
}  // namespace detail

//
// Model: a loaded GGUF file. Immutable: may be shared by threads.
//
class Model {
  public:
    static ember_model_params default_params() { return ember_model_default_params(); }

    // Loads `path`; throws ember::Error (EMBER_ERR_IO, EMBER_ERR_BAD_FORMAT, ...) on failure.
    explicit Model(std::string_view path, const ember_model_params & params = default_params()) {
        check_abi();
        const std::string p(path);  // the C API wants a NUL-terminated string
        ember_model *     m = nullptr;
        check(ember_model_load(p.c_str(), &params, &m));
        h_.reset(m);
    }
    // CPU-only or offloaded: n_gpu_layers (-1 = all) on `device` ("cuda:0"; nullptr = the best).
    Model(std::string_view path, int32_t n_gpu_layers, const char * device = nullptr) :
        Model(path, with_device(n_gpu_layers, device)) {}

    ember_model * get() const noexcept { return h_.get(); }

    std::string arch() const { return ember_model_arch(h_.get()); }
    std::string desc() const {
        return detail::text_call([&](char * b, size_t n) { return ember_model_desc(h_.get(), b, n); });
    }
    uint64_t n_params() const noexcept { return ember_model_n_params(h_.get()); }
    uint64_t size() const noexcept { return ember_model_size(h_.get()); }
    int32_t  n_vocab() const noexcept { return ember_model_n_vocab(h_.get()); }
    int32_t  n_ctx_train() const noexcept { return ember_model_n_ctx_train(h_.get()); }
    int32_t  n_embd() const noexcept { return ember_model_n_embd(h_.get()); }
    int32_t  n_layer() const noexcept { return ember_model_n_layer(h_.get()); }
    int32_t  n_head() const noexcept { return ember_model_n_head(h_.get()); }
    int32_t  n_head_kv() const noexcept { return ember_model_n_head_kv(h_.get()); }
    int32_t  token_bos() const noexcept { return ember_token_bos(h_.get()); }
    int32_t  token_eos() const noexcept { return ember_token_eos(h_.get()); }
    int32_t  token_eot() const noexcept { return ember_token_eot(h_.get()); }
    bool     is_eog(int32_t token) const noexcept { return ember_token_is_eog(h_.get(), token) == 1; }
    bool     add_bos() const noexcept { return ember_model_add_bos(h_.get()) == 1; }

    // A metadata value as text, or nullopt when the key does not exist.
    std::optional<std::string> meta(std::string_view key) const {
        const std::string k(key);
        const int32_t     n = ember_model_meta_val_str(h_.get(), k.c_str(), nullptr, 0);
        if (n < 0) return std::nullopt;
        std::string out(static_cast<size_t>(n) + 1, '\0');
        ember_model_meta_val_str(h_.get(), k.c_str(), &out[0], out.size());
        out.resize(static_cast<size_t>(n));
        return out;
    }

    std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = false) const {
        if (text.size() > INT32_MAX) throw Error(EMBER_ERR_INVALID_ARG, "tokenize: text longer than 2 GiB");
        const int32_t        len = static_cast<int32_t>(text.size());
        std::vector<int32_t> out(text.size() + 8);  // a token per byte at most, plus the specials
        for (;;) {
            const int32_t n = ember_tokenize(h_.get(), text.data(), len, out.data(), static_cast<int32_t>(out.size()),
                                             add_special, parse_special);
            if (n < 0) detail::fail(EMBER_ERR_INVALID_ARG);
            const bool fits = static_cast<size_t>(n) <= out.size();
            out.resize(static_cast<size_t>(n));
            if (fits) return out;
        }
    }

    // The bytes of one token (possibly part of a UTF-8 sequence).
    std::string token_to_piece(int32_t token, bool special = false) const {
        return detail::text_call([&](char * b, size_t n) {
            return ember_token_to_piece(h_.get(), token, b, static_cast<int32_t>(n), special);
        }, 64);
    }

    std::string detokenize(span<const int32_t> tokens, bool remove_special = false, bool unparse_special = false) const {
        return detail::text_call([&](char * b, size_t n) {
            return ember_detokenize(h_.get(), tokens.data(), static_cast<int32_t>(tokens.size()), b,
                                    static_cast<int32_t>(n), remove_special, unparse_special);
        }, 64 + 8 * tokens.size());
    }

    // Renders a conversation with the model's chat template, or with `tmpl` (Jinja source).
    std::string apply_chat_template(span<const ChatMessage> messages, bool add_generation_prompt = true,
                                    const char * tmpl = nullptr) const {
        std::vector<ember_chat_message> msgs;
        msgs.reserve(messages.size());
        for (const ChatMessage & m : messages) msgs.push_back({ m.role.c_str(), m.content.c_str() });
        return detail::text_call([&](char * b, size_t n) {
            return ember_chat_apply_template(h_.get(), tmpl, msgs.data(), msgs.size(), add_generation_prompt, b,
                                             static_cast<int32_t>(n));
        }, 1024);
    }

  private:
    static ember_model_params with_device(int32_t n_gpu_layers, const char * device) {
        ember_model_params p = default_params();
        p.n_gpu_layers       = n_gpu_layers;
        p.device             = device;
        return p;
    }

    detail::handle<ember_model, ember_model_free> h_;
};

//
// Context: a KV cache on a model. Borrows the model, which must outlive it.
//
class Context {
  public:
    static ember_context_params default_params() { return ember_context_default_params(); }

    explicit Context(const Model & model, const ember_context_params & params = default_params()) :
        n_vocab_(model.n_vocab()) {
        ember_context * c = nullptr;
        // ember_context_create takes a non-const model only for its signature: it does not change it.
        check(ember_context_create(const_cast<ember_model *>(model.get()), &params, &c));
        h_.reset(c);
    }

    // The model must outlive the context: a temporary cannot.
    Context(Model &&, const ember_context_params & = default_params()) = delete;

    ember_context * get() const noexcept { return h_.get(); }
    uint32_t        n_ctx() const noexcept { return ember_context_n_ctx(h_.get()); }
    uint32_t        n_batch() const noexcept { return ember_context_n_batch(h_.get()); }
    int32_t         n_threads() const noexcept { return ember_context_n_threads(h_.get()); }
    void            set_n_threads(int32_t n) { check(ember_context_set_n_threads(h_.get(), n)); }
    int32_t         kv_used() const noexcept { return ember_kv_cache_used(h_.get()); }
    int32_t         pos_max(int32_t seq_id = 0) const noexcept { return ember_kv_cache_seq_pos_max(h_.get(), seq_id); }
    void            clear() { check(ember_kv_cache_clear(h_.get())); }
    // Drops positions [p0, p1) of a sequence (p1 < 0: to the end).
    void            seq_rm(int32_t seq_id, int32_t p0, int32_t p1 = -1) { check(ember_kv_cache_seq_rm(h_.get(), seq_id, p0, p1)); }

    // Evaluates tokens of sequence 0 after its cached ones, in batches of n_batch; logits of the
    // last token. Throws ember::Error (EMBER_ERR_CONTEXT_FULL, ...); batches already evaluated
    // stay in the cache.
    void decode(span<const int32_t> tokens) {
        if (tokens.empty()) throw Error(EMBER_ERR_INVALID_ARG, "decode: no tokens");
        const size_t step = n_batch();
        for (size_t i = 0; i < tokens.size(); i += step) {
            const size_t n = tokens.size() - i < step ? tokens.size() - i : step;
            ember_batch  b = ember_batch_one(tokens.data() + i, static_cast<int32_t>(n));
            check(ember_decode(h_.get(), &b));
        }
    }
    // Evaluates a raw batch (several sequences, explicit positions).
    void decode(const ember_batch & batch) { check(ember_decode(h_.get(), &batch)); }

    // The logits row of token i of the last batch (-1: the last): n_vocab floats owned by the
    // context, valid until the next decode.
    span<const float> logits(int32_t i = -1) const {
        const float * row = ember_get_logits_ith(h_.get(), i);
        if (!row) detail::fail(EMBER_ERR_INVALID_ARG);
        return { row, static_cast<size_t>(n_vocab_) };
    }

  private:
    int32_t                                           n_vocab_;
    detail::handle<ember_context, ember_context_free> h_;
};

//
// Sampler: one link or a chain of links.
//
class Sampler {
  public:
    // The usual chain: temperature <= 0 is greedy; otherwise [penalties] top_k, top_p, min_p,
    // temperature, then a draw seeded with `seed`. Links that would do nothing are left out.
    struct Params {
        float    temperature    = 0.8f;
        int32_t  top_k          = 40;
        float    top_p          = 0.95f;
        float    min_p          = 0.05f;
        uint32_t seed           = 0;
        float    repeat_penalty = 1.0f;  // 1 = off
        int32_t  repeat_last_n  = 64;
    };
    explicit Sampler(const Params & p) : Sampler(chain()) {
        if (p.repeat_penalty != 1.0f) add(penalties(p.repeat_last_n, p.repeat_penalty));
        if (p.temperature <= 0.0f) {
            add(greedy());
            return;
        }
        if (p.top_k > 0) add(top_k(p.top_k));
        if (p.top_p != 1.0f) add(top_p(p.top_p));
        if (p.min_p != 0.0f) add(min_p(p.min_p));
        add(temp(p.temperature));
        add(dist(p.seed));
    }

    static Sampler chain() { return make([](ember_sampler ** s) { return ember_sampler_chain_create(s); }); }
    static Sampler greedy() { return make([](ember_sampler ** s) { return ember_sampler_create_greedy(s); }); }
    static Sampler dist(uint32_t seed) {
        return make([&](ember_sampler ** s) { return ember_sampler_create_dist(seed, s); });
    }
    static Sampler temp(float t) { return make([&](ember_sampler ** s) { return ember_sampler_create_temp(t, s); }); }
    static Sampler top_k(int32_t k) { return make([&](ember_sampler ** s) { return ember_sampler_create_top_k(k, s); }); }
    static Sampler top_p(float p, size_t min_keep = 1) {
        return make([&](ember_sampler ** s) { return ember_sampler_create_top_p(p, min_keep, s); });
    }
    static Sampler min_p(float p, size_t min_keep = 1) {
        return make([&](ember_sampler ** s) { return ember_sampler_create_min_p(p, min_keep, s); });
    }
    static Sampler typical(float p, size_t min_keep = 1) {
        return make([&](ember_sampler ** s) { return ember_sampler_create_typical(p, min_keep, s); });
    }
    static Sampler penalties(int32_t last_n, float repeat, float freq = 0.0f, float presence = 0.0f) {
        return make([&](ember_sampler ** s) { return ember_sampler_create_penalties(last_n, repeat, freq, presence, s); });
    }
    static Sampler logit_bias(int32_t n_vocab, span<const ember_logit_bias> biases) {
        return make([&](ember_sampler ** s) {
            return ember_sampler_create_logit_bias(n_vocab, biases.data(), biases.size(), s);
        });
    }

    // Appends a link to this chain, which takes ownership of it.
    Sampler & add(Sampler && link) {
        if (&link == this || !link.h_.get()) throw Error(EMBER_ERR_INVALID_ARG, "Sampler::add: bad link");
        // A link this wrapper owns belongs to no chain, so the chain takes it even on failure.
        check(ember_sampler_chain_add(h_.get(), link.h_.release()));
        return *this;
    }

    ember_sampler * get() const noexcept { return h_.get(); }

    // Samples from row i of the context's last logits and accepts the token.
    int32_t sample(Context & ctx, int32_t i = -1) { return checked(ember_sampler_sample(h_.get(), ctx.get(), i)); }
    // Samples from a caller's logits row.
    int32_t sample(span<const float> logits) {
        return checked(ember_sampler_sample_logits(h_.get(), logits.data(), static_cast<int32_t>(logits.size())));
    }
    void accept(int32_t token) { check(ember_sampler_accept(h_.get(), token)); }
    void reset() { check(ember_sampler_reset(h_.get())); }

  private:
    explicit Sampler(ember_sampler * s) noexcept : h_(s) {}

    template <class F> static Sampler make(F create) {
        ember_sampler * s = nullptr;
        check(create(&s));
        return Sampler(s);
    }
    static int32_t checked(int32_t token) {
        if (token < 0) detail::fail(EMBER_ERR_INVALID_ARG);
        return token;
    }

    detail::handle<ember_sampler, ember_sampler_free> h_;
};

//
// TokenStream: push generated tokens, get text as soon as it is complete UTF-8.
//
class TokenStream {
  public:
    explicit TokenStream(const Model & model, bool unparse_special = false) {
        ember_token_stream * s = nullptr;
        check(ember_token_stream_create(model.get(), unparse_special, &s));
        h_.reset(s);
    }
    TokenStream(Model &&, bool = false) = delete;  // the stream reads the model's vocabulary

    std::string push(int32_t token) {
        return call([&](char * b, int32_t n) { return ember_token_stream_push(h_.get(), token, b, n); });
    }
    // What is held back (an incomplete sequence becomes U+FFFD); resets the stream.
    std::string flush() {
        return call([&](char * b, int32_t n) { return ember_token_stream_flush(h_.get(), b, n); });
    }
    ember_token_stream * get() const noexcept { return h_.get(); }

  private:
    template <class F> std::string call(F f) {
        char          small[128];
        const int32_t n = f(small, static_cast<int32_t>(sizeof small));
        if (n < 0) detail::fail(EMBER_ERR_INVALID_ARG);
        if (static_cast<size_t>(n) <= sizeof small) return std::string(small, static_cast<size_t>(n));
        std::string big(static_cast<size_t>(n), '\0');  // nothing was taken: again with room
        if (f(&big[0], n) != n) detail::fail(EMBER_ERR_INTERNAL);
        return big;
    }

    detail::handle<ember_token_stream, ember_token_stream_free> h_;
};

}  // namespace ember

#endif  // EMBER_HPP
