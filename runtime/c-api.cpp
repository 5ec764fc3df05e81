// The C ABI. The only file that catches exceptions: every entry point maps them to a status
// and the thread-local last-error message.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/c-api-internal.h"
#include "runtime/context.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/model.h"

namespace {

thread_local std::string t_last_error;


// Copies a caller's params struct over the defaults, honouring struct_size: an older, smaller
// struct leaves the newer fields at their defaults; a newer, larger one is accepted when the
// fields this library does not know are zero.
template <typename P> ember_status read_params(const P * in, P & out, const char * what) {
    if (!in) return EMBER_OK;
    const uint32_t size = in->struct_size;
    if (size < sizeof(uint32_t) * 2 || size > 4096) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s.struct_size = %u is not valid; use %s_default_params()", what, size, what);
    }
    const size_t n = size < sizeof(P) ? size : sizeof(P);
    std::memcpy(static_cast<void *>(&out), in, n);
    for (size_t i = sizeof(P); i < size; i++) {
        if (reinterpret_cast<const uint8_t *>(in)[i] != 0) {
            return ember_api_fail(EMBER_ERR_UNSUPPORTED, "%s has fields this library version (%s) does not know", what, EMBER_VERSION_STRING);
        }
    }
    out.struct_size = sizeof(P);
    return EMBER_OK;
}

}  // namespace

std::string & ember_api_last_error() { return t_last_error; }

ember_status ember_api_fail(ember_status st, const char * fmt, ...) {
    char    buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    t_last_error = buf;
    return st;
}

int32_t ember_api_output_row(const ember_context * ctx, int32_t i, const char * fn) {
    // The rows of the last batch; negative i counts from the end of the batch.
    const int32_t n_batch_tokens = ctx->last_batch_size;
    if (i < 0) i += n_batch_tokens;
    if (i < 0 || i >= n_batch_tokens) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: index out of range (the last batch had %d tokens)", fn, n_batch_tokens), -1;
    }
    const int32_t row = ctx->output_row[i];
    if (row < 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: token %d did not ask for logits", fn, i), -1;
    return row;
}

#define EMBER_CHECK_ARG(cond, ...)                                  \
    do {                                                            \
        if (!(cond)) return ember_api_fail(EMBER_ERR_INVALID_ARG, __VA_ARGS__); \
    } while (0)

//
// Status, errors, versions
//
extern "C" {

EMBER_API const char * ember_status_str(ember_status status) {
    switch (status) {
        case EMBER_OK: return "EMBER_OK: success";
        case EMBER_ERR_INVALID_ARG: return "EMBER_ERR_INVALID_ARG: invalid argument";
        case EMBER_ERR_OOM: return "EMBER_ERR_OOM: out of memory";
        case EMBER_ERR_IO: return "EMBER_ERR_IO: input/output error";
        case EMBER_ERR_BAD_FORMAT: return "EMBER_ERR_BAD_FORMAT: malformed file";
        case EMBER_ERR_UNSUPPORTED: return "EMBER_ERR_UNSUPPORTED: not supported";
        case EMBER_ERR_BACKEND: return "EMBER_ERR_BACKEND: compute backend failure";
        case EMBER_ERR_CONTEXT_FULL: return "EMBER_ERR_CONTEXT_FULL: context full";
        case EMBER_ERR_CANCELLED: return "EMBER_ERR_CANCELLED: cancelled";
        case EMBER_ERR_INTERNAL: return "EMBER_ERR_INTERNAL: internal error";
        default: return "unknown ember_status";
    }
}

EMBER_API const char * ember_last_error(void) { return t_last_error.c_str(); }

EMBER_API const char * ember_version_string(void) { return EMBER_VERSION_STRING; }
EMBER_API uint32_t     ember_version_number(void) { return EMBER_VERSION_NUMBER; }
EMBER_API uint32_t     ember_abi_version(void) { return EMBER_ABI_VERSION; }

EMBER_API ember_status ember_check_abi(uint32_t compiled_abi) {
    t_last_error.clear();
    if (compiled_abi != EMBER_ABI_VERSION) {
        return ember_api_fail(EMBER_ERR_UNSUPPORTED, "the program was built for Ember ABI %u but this library (%s) has ABI %u", compiled_abi,
                    EMBER_VERSION_STRING, EMBER_ABI_VERSION);
    }
    return EMBER_OK;
}

EMBER_API ember_status ember_init(void) {
    return ember_api_guarded([]() -> ember_status {
        static std::once_flag once;
        std::call_once(once, [] { (void) ember_registry_device_count(); });
        return EMBER_OK;
    });
}

EMBER_API void ember_log_set(ember_log_callback callback, void * user_data) { ember_log_set_sink(callback, user_data); }
EMBER_API void ember_log_set_level(int32_t level) { ember_log_set_max_level(level); }

EMBER_API const char * ember_type_name(int32_t type) { return ember_type_get_name(type); }
EMBER_API int32_t      ember_type_from_name(const char * name) { return ember_type_by_name(name); }

EMBER_API int32_t ember_device_count(void) {
    if (ember_init() != EMBER_OK) return 0;
    return static_cast<int32_t>(ember_registry_device_count());
}

// Device 0 is the CPU in the public numbering (ember_api_device, c-api-device.cpp).
EMBER_API const char * ember_device_name(int32_t index) {
    ember_device * d = ember_api_device(index);
    return d ? ember_device_get_name(d) : nullptr;
}

//
// Model
//
EMBER_API ember_model_params ember_model_default_params(void) {
    ember_model_params p;
    std::memset(&p, 0, sizeof(p));
    p.struct_size  = sizeof(p);
    p.n_gpu_layers = -1;
    p.use_mmap     = 1;
    return p;
}

EMBER_API ember_status ember_model_load(const char * path, const ember_model_params * params, ember_model ** out) {
    if (out) *out = nullptr;
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(out, "ember_model_load: out is NULL");
        EMBER_CHECK_ARG(path && path[0], "ember_model_load: path is NULL or empty");
        ember_status st = ember_init();
        if (st != EMBER_OK) return st;
        ember_model_params p = ember_model_default_params();
        st                   = read_params(params, p, "ember_model_params");
        if (st != EMBER_OK) return st;
        EMBER_CHECK_ARG(p.n_gpu_layers >= -1, "n_gpu_layers = %d; use -1 for all layers", p.n_gpu_layers);
        ember_model_load_options opt;
        opt.use_mmap     = p.use_mmap != 0;
        opt.vocab_only   = p.vocab_only != 0;
        opt.n_gpu_layers = p.n_gpu_layers;
        opt.device       = p.device ? p.device : "";
        opt.progress     = p.progress_callback;
        opt.progress_ud  = p.progress_user_data;
        *out             = ember_model_load_file(path, opt).release();
        return EMBER_OK;
    });
}

EMBER_API void ember_model_free(ember_model * model) { delete model; }

#define EMBER_MODEL_QUERY(ret, name, bad, expr)                         \
    EMBER_API ret name(const ember_model * model) {                     \
        if (!model) {                                                   \
            ember_api_fail(EMBER_ERR_INVALID_ARG, #name ": model is NULL");       \
            return bad;                                                 \
        }                                                               \
        return expr;                                                    \
    }

EMBER_MODEL_QUERY(const char *, ember_model_arch, nullptr, model->arch_name.c_str())
EMBER_MODEL_QUERY(uint64_t, ember_model_n_params, 0, model->n_params)
EMBER_MODEL_QUERY(uint64_t, ember_model_size, 0, model->n_bytes)
EMBER_MODEL_QUERY(uint64_t, ember_model_file_size, 0, model->gguf->file_size)

static uint64_t decode_bytes(const ember_model * m) {
    uint64_t b = m->n_bytes;
    if (m->tok_embd && m->output != m->tok_embd) {
        b -= ember_nbytes(m->tok_embd);
        b += ember_row_size(m->tok_embd->type, m->tok_embd->ne[0]);
    }
    return b;
}
EMBER_MODEL_QUERY(uint64_t, ember_model_decode_bytes, 0, decode_bytes(model))
EMBER_MODEL_QUERY(int32_t, ember_model_n_vocab, -1, static_cast<int32_t>(model->hp.n_vocab))
EMBER_MODEL_QUERY(int32_t, ember_model_n_ctx_train, -1, static_cast<int32_t>(model->hp.n_ctx_train))
EMBER_MODEL_QUERY(int32_t, ember_model_n_embd, -1, static_cast<int32_t>(model->hp.n_embd))
EMBER_MODEL_QUERY(int32_t, ember_model_n_layer, -1, static_cast<int32_t>(model->hp.n_layer))
EMBER_MODEL_QUERY(int32_t, ember_model_n_head, -1, static_cast<int32_t>(model->hp.n_head))
EMBER_MODEL_QUERY(int32_t, ember_model_n_head_kv, -1, static_cast<int32_t>(model->hp.n_head_kv))
EMBER_MODEL_QUERY(int32_t, ember_model_n_tensors, -1, static_cast<int32_t>(model->gguf->tensors.size()))
EMBER_MODEL_QUERY(int32_t, ember_token_bos, -1, model->token_bos)
EMBER_MODEL_QUERY(int32_t, ember_token_eos, -1, model->token_eos)
EMBER_MODEL_QUERY(int32_t, ember_model_meta_count, -1, static_cast<int32_t>(model->gguf->kv.size()))

EMBER_API int32_t ember_model_meta_key_by_index(const ember_model * model, int32_t i, char * buf, size_t buf_size) {
    if (!model) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_meta_key_by_index: model is NULL"), -1;
    if (i < 0 || static_cast<size_t>(i) >= model->gguf->kv.size()) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG, "metadata index %d is out of range [0, %zu)", i, model->gguf->kv.size()), -1;
    }
    return ember_api_copy_out(model->gguf->kv[i].key, buf, buf_size);
}

EMBER_API int32_t ember_model_meta_val_str(const ember_model * model, const char * key, char * buf, size_t buf_size) {
    if (!model || !key) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_meta_val_str: model or key is NULL"), -1;
    const ember_gguf_value * v = model->gguf->find(key);
    if (!v) return ember_api_fail(EMBER_ERR_INVALID_ARG, "no metadata key '%s'", key), -1;
    std::string text;
    try {
        text = v->type == EMBER_GGUF_STRING ? v->str : v->to_string(16);
    } catch (...) {
        return ember_api_fail(EMBER_ERR_OOM, "out of memory"), -1;
    }
    return ember_api_copy_out(text, buf, buf_size);
}

EMBER_API int32_t ember_model_desc(const ember_model * model, char * buf, size_t buf_size) {
    if (!model) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_desc: model is NULL"), -1;
    char           text[256];
    const double   n = static_cast<double>(model->n_params);
    const char *   type = "?";
    if (model->gguf->tensors.size()) {
        const ember_gguf_tensor_info * t = model->gguf->tensor("token_embd.weight");
        if (model->layers.size() && model->layers[0].wq) type = ember_type_get_name(model->layers[0].wq->type);
        else if (t) type = ember_type_get_name(t->type);
    }
    std::snprintf(text, sizeof(text), "%s %.1f%s %s, %u layers", model->arch_name.c_str(), n >= 1e9 ? n / 1e9 : n / 1e6,
                  n >= 1e9 ? "B" : "M", type, model->hp.n_layer);
    return ember_api_copy_out(text, buf, buf_size);
}

//
// Context
//
EMBER_API ember_context_params ember_context_default_params(void) {
    ember_context_params p;
    std::memset(&p, 0, sizeof(p));
    p.struct_size = sizeof(p);
    p.n_ctx       = 0;
    p.n_batch     = 2048;
    p.n_ubatch    = 512;
    p.n_seq_max   = 1;
    p.n_threads   = 0;
    p.type_k      = EMBER_TYPE_F16;
    p.type_v      = EMBER_TYPE_F16;
    return p;
}

EMBER_API ember_status ember_context_create(ember_model * model, const ember_context_params * params, ember_context ** out) {
    if (out) *out = nullptr;
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(out, "ember_context_create: out is NULL");
        EMBER_CHECK_ARG(model, "ember_context_create: model is NULL");
        ember_context_params p  = ember_context_default_params();
        ember_status         st = read_params(params, p, "ember_context_params");
        if (st != EMBER_OK) return st;
        *out = new ember_context(*model, p);
        return EMBER_OK;
    });
}

EMBER_API void ember_context_free(ember_context * ctx) { delete ctx; }

#define EMBER_CTX_QUERY(ret, name, bad, expr)                         \
    EMBER_API ret name(const ember_context * ctx) {                   \
        if (!ctx) {                                                   \
            ember_api_fail(EMBER_ERR_INVALID_ARG, #name ": context is NULL");   \
            return bad;                                               \
        }                                                             \
        return expr;                                                  \
    }

EMBER_CTX_QUERY(const ember_model *, ember_context_model, nullptr, &ctx->model)
EMBER_CTX_QUERY(uint32_t, ember_context_n_ctx, 0, ctx->params.n_ctx)
EMBER_CTX_QUERY(uint32_t, ember_context_n_batch, 0, ctx->params.n_batch)
EMBER_CTX_QUERY(uint32_t, ember_context_n_ubatch, 0, ctx->params.n_ubatch)
EMBER_CTX_QUERY(int32_t, ember_context_n_threads, -1, ctx->params.n_threads)
EMBER_CTX_QUERY(int32_t, ember_context_device_top_k, -1, ctx->top_k)
EMBER_CTX_QUERY(int32_t, ember_n_outputs, -1, ctx->n_outputs)
EMBER_CTX_QUERY(int32_t, ember_kv_cache_used, -1, static_cast<int32_t>(ctx->kv.used()))

EMBER_API ember_status ember_context_set_n_threads(ember_context * ctx, int32_t n_threads) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_context_set_n_threads: context is NULL");
        ctx->set_n_threads(n_threads);
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_decode(ember_context * ctx, const ember_batch * batch) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_decode: context is NULL");
        EMBER_CHECK_ARG(batch, "ember_decode: batch is NULL");
        ctx->decode(*batch);
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_context_synchronize(ember_context * ctx) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_context_synchronize: context is NULL");
        ctx->sync();
        return EMBER_OK;
    });
}

// The last decode's outputs are in the context once its queued step is waited for (a device
// error found then fails the reader: the message says so, and the step's cells are released).
static bool outputs_ready(ember_context * ctx) {
    return ember_api_guarded([&]() -> ember_status {
        ctx->sync();
        return EMBER_OK;
    }) == EMBER_OK;
}

// Why there is no logits row to give: the context keeps the top-k candidates only.
static const float * no_logits_kept(const ember_context * ctx, const char * fn) {
    ember_api_fail(EMBER_ERR_UNSUPPORTED,
                   "%s: the context keeps only the best %d candidates of each row (device_top_k = %d), not the logits: "
                   "read them with ember_get_top_k, or create the context with device_top_k = 0",
                   fn, ctx->top_k, ctx->params.device_top_k);
    return nullptr;
}

EMBER_API const float * ember_get_logits(ember_context * ctx) {
    if (!ctx) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_logits: context is NULL"), nullptr;
    if (!outputs_ready(ctx)) return nullptr;
    if (ctx->n_outputs == 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_logits: the last decode produced no logits"), nullptr;
    if (ctx->top_k > 0) return no_logits_kept(ctx, "ember_get_logits");
    return ctx->logits.data();
}

EMBER_API const float * ember_get_logits_ith(ember_context * ctx, int32_t i) {
    if (!ctx) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_logits_ith: context is NULL"), nullptr;
    if (!outputs_ready(ctx)) return nullptr;
    const int32_t row = ember_api_output_row(ctx, i, "ember_get_logits_ith");
    if (row < 0) return nullptr;
    if (ctx->top_k > 0) return no_logits_kept(ctx, "ember_get_logits_ith");
    return ctx->logits.data() + static_cast<size_t>(row) * ctx->model.hp.n_vocab;
}

EMBER_API int32_t ember_get_top_k(ember_context * ctx, int32_t i, int32_t * ids, float * vals, int32_t n) {
    if (!ctx) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_top_k: context is NULL"), -1;
    if (!ids) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_top_k: ids is NULL"), -1;
    if (n < 1) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_get_top_k: n = %d must be at least 1", n), -1;
    if (!outputs_ready(ctx)) return -1;
    const int32_t row = ember_api_output_row(ctx, i, "ember_get_top_k");
    if (row < 0) return -1;
    if (ctx->top_k > 0) {
        const int32_t m   = std::min(n, ctx->top_k);
        const size_t  off = static_cast<size_t>(row) * ctx->top_k;
        std::memcpy(ids, &ctx->top_ids[off], static_cast<size_t>(m) * sizeof(int32_t));
        if (vals) std::memcpy(vals, &ctx->top_vals[off], static_cast<size_t>(m) * sizeof(float));
        return m;
    }
    // Full logits kept: the same order, found here (NaN first, then by value, then by id).
    const int32_t n_vocab = static_cast<int32_t>(ctx->model.hp.n_vocab);
    const float * x       = ctx->logits.data() + static_cast<size_t>(row) * n_vocab;
    const int32_t m       = std::min(n, n_vocab);
    int32_t       st      = -1;
    const ember_status rs = ember_api_guarded([&]() -> ember_status {
        std::vector<int32_t> order(static_cast<size_t>(n_vocab));
        for (int32_t t = 0; t < n_vocab; t++) order[t] = t;
        const auto before = [x](int32_t a, int32_t b) {
            const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
            if (na != nb) return na;
            if (!na && x[a] != x[b]) return x[a] > x[b];
            return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + m, order.end(), before);
        for (int32_t j = 0; j < m; j++) {
            ids[j] = order[j];
            if (vals) vals[j] = x[order[j]];
        }
        st = m;
        return EMBER_OK;
    });
    return rs == EMBER_OK ? st : -1;
}

//
// KV cache
//
#define EMBER_CHECK_SEQ(ctx, s, allow_all)                                                                            \
    EMBER_CHECK_ARG(((allow_all) && (s) < 0) || ((s) >= 0 && static_cast<uint32_t>(s) < (ctx)->params.n_seq_max), \
                    "sequence id %d is not in [0, n_seq_max = %u)", (s), (ctx)->params.n_seq_max)

EMBER_API ember_status ember_kv_cache_clear(ember_context * ctx) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_kv_cache_clear: context is NULL");
        ctx->sync();  // (a queued step that fails releases its cells: before the cache changes)
        ctx->kv.clear();
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_kv_cache_seq_rm(ember_context * ctx, int32_t seq_id, int32_t p0, int32_t p1) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_kv_cache_seq_rm: context is NULL");
        ctx->sync();  // (a queued step that fails releases its cells: before the cache changes)
        EMBER_CHECK_SEQ(ctx, seq_id, true);
        ctx->kv.seq_rm(seq_id, p0, p1);
        return EMBER_OK;
    });
}

EMBER_API ember_status ember_kv_cache_seq_cp(ember_context * ctx, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1) {
    return ember_api_guarded([&]() -> ember_status {
        EMBER_CHECK_ARG(ctx, "ember_kv_cache_seq_cp: context is NULL");
        ctx->sync();  // (a queued step that fails releases its cells: before the cache changes)
        EMBER_CHECK_SEQ(ctx, seq_src, false);
        EMBER_CHECK_SEQ(ctx, seq_dst, false);
        ctx->kv.seq_cp(seq_src, seq_dst, p0, p1);
        return EMBER_OK;
    });
}

EMBER_API int32_t ember_kv_cache_seq_pos_max(const ember_context * ctx, int32_t seq_id) {
    if (!ctx) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_kv_cache_seq_pos_max: context is NULL"), -1;
    if (seq_id < 0 || static_cast<uint32_t>(seq_id) >= ctx->params.n_seq_max) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG, "sequence id %d is not in [0, n_seq_max = %u)", seq_id, ctx->params.n_seq_max), -1;
    }
    return ctx->kv.seq_pos_max(seq_id);
}

}  // extern "C"
