/*
 * ember.h: the C ABI of the Ember inference runtime. This header is the contract:
 * a function that is not declared here is not part of the published API.
 *
 * Thread safety
 *   - ember_init() is idempotent and thread-safe; every other entry point calls it.
 *   - A model (ember_model) is immutable after ember_model_load() returns and may be
 *     shared by any number of threads and contexts.
 *   - A context (ember_context) may be used by one thread at a time. Different
 *     contexts may be used concurrently from different threads.
 *   - ember_last_error() is thread-local.
 *   - The log callback may be called from any thread, concurrently.
 *
 * Errors
 *   Every fallible call returns an ember_status. On failure the reason is available
 *   from ember_last_error() on the same thread until the next ember_ call there; a call
 *   that returns a status clears it on success. Queries that return a value instead of a
 *   status return NULL (pointers), 0 (unsigned counts) or -1 (signed values) on a NULL
 *   handle or bad argument, and set the last error.
 *   Calls never throw, never abort on bad input, and leave their objects usable.
 *
 * Params structs
 *   Start from the *_default_params() function and change the fields you need. struct_size
 *   is the size the caller was compiled with: a smaller (older) struct gets defaults for
 *   the fields it lacks; a larger (newer) one is accepted when the fields this library
 *   does not know are zero, else EMBER_ERR_UNSUPPORTED; below 8 or above 4096 it is
 *   EMBER_ERR_INVALID_ARG.
 *
 * Usage
 *   EMBER_CHECK_ABI();
 *   ember_model * model = NULL;
 *   ember_model_params mp = ember_model_default_params();
 *   if (ember_model_load("model.gguf", &mp, &model) != EMBER_OK) puts(ember_last_error());
 *   ember_context * ctx = NULL;
 *   ember_context_params cp = ember_context_default_params();
 *   ember_context_create(model, &cp, &ctx);
 *   int32_t toks[] = {1, 379, 421};
 *   ember_batch b = ember_batch_one(toks, 3);     // one sequence, logits of the last token
 *   ember_decode(ctx, &b);
 *   const float * logits = ember_get_logits_ith(ctx, -1);   // n_vocab floats
 *   ember_context_free(ctx);
 *   ember_model_free(model);
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#include "ember_version.h"

#if defined(_WIN32) && !defined(EMBER_STATIC)
#    if defined(EMBER_BUILD)
#        define EMBER_API __declspec(dllexport)
#    else
#        define EMBER_API __declspec(dllimport)
#    endif
#elif defined(__GNUC__) || defined(__clang__)
#    define EMBER_API __attribute__((visibility("default")))
#else
#    define EMBER_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#    define EMBER_DEPRECATED(func, hint) func __attribute__((deprecated(hint)))
#elif defined(_MSC_VER)
#    define EMBER_DEPRECATED(func, hint) __declspec(deprecated(hint)) func
#else
#    define EMBER_DEPRECATED(func, hint) func
#endif

#ifdef __cplusplus
extern "C" {
#endif

//
// Status codes. The numbers are fixed forever; new codes are appended.
//
typedef int32_t ember_status;
enum {
    EMBER_OK               = 0,
    EMBER_ERR_INVALID_ARG  = 1,  /* NULL handle, bad size, bad token, bad position, ... */
    EMBER_ERR_OOM          = 2,  /* host or device memory exhausted                     */
    EMBER_ERR_IO           = 3,  /* file missing, unreadable, short read                */
    EMBER_ERR_BAD_FORMAT   = 4,  /* malformed or hostile GGUF file                      */
    EMBER_ERR_UNSUPPORTED  = 5,  /* valid input this build cannot run (arch, type, ...)  */
    EMBER_ERR_BACKEND      = 6,  /* a compute backend failed                            */
    EMBER_ERR_CONTEXT_FULL = 7,  /* no room left in the KV cache; nothing was changed   */
    EMBER_ERR_CANCELLED    = 8,  /* a callback asked to stop                             */
    EMBER_ERR_INTERNAL     = 9   /* a bug in Ember; please report it                    */
};

/* Static English name of a status ("EMBER_ERR_IO: i/o error"). Never NULL. */
EMBER_API const char * ember_status_str(ember_status status);

/* Message of the last failed call on this thread ("" if none). Owned by the library,
 * valid until the next ember_ call on this thread. Never NULL. */
EMBER_API const char * ember_last_error(void);

//
// Versions and ABI
//
/* Run-time versions; compare with EMBER_VERSION_NUMBER / EMBER_ABI_VERSION. */
EMBER_API const char * ember_version_string(void);
EMBER_API uint32_t     ember_version_number(void);
EMBER_API uint32_t     ember_abi_version(void);
/* EMBER_OK when a program compiled against ABI `compiled_abi` can use this library,
 * EMBER_ERR_UNSUPPORTED otherwise. Bindings and tools call EMBER_CHECK_ABI() first. */
EMBER_API ember_status ember_check_abi(uint32_t compiled_abi);
#define EMBER_CHECK_ABI() ember_check_abi(EMBER_ABI_VERSION)

/* Idempotent, thread-safe global initialisation (backend registry, CPU features). */
EMBER_API ember_status ember_init(void);

//
// Logging
//
enum {
    EMBER_LOG_ERROR = 0,
    EMBER_LOG_WARN  = 1,
    EMBER_LOG_INFO  = 2,
    EMBER_LOG_DEBUG = 3
};
/* Receives one complete message (no trailing newline). Must not throw or call back into Ember. */
typedef void (*ember_log_callback)(int32_t level, const char * message, void * user_data);
/* Replace the log sink (NULL restores the default: WARN and above to stderr). Thread-safe. */
EMBER_API void ember_log_set(ember_log_callback callback, void * user_data);
/* Messages above `level` are dropped before reaching the sink. Default EMBER_LOG_WARN. */
EMBER_API void ember_log_set_level(int32_t level);

//
// Tensor and cache types: GGUF (ggml) type ids. Values never change; struct fields that
// hold a type are int32_t.
//
typedef enum ember_type {
    EMBER_TYPE_F32    = 0,
    EMBER_TYPE_F16    = 1,
    EMBER_TYPE_Q4_0   = 2,
    EMBER_TYPE_Q4_1   = 3,
    EMBER_TYPE_Q5_0   = 6,
    EMBER_TYPE_Q5_1   = 7,
    EMBER_TYPE_Q8_0   = 8,
    EMBER_TYPE_Q8_1   = 9,   /* activations of Q4_1 / Q5_1 dot products only */
    EMBER_TYPE_Q2_K   = 10,
    EMBER_TYPE_Q3_K   = 11,
    EMBER_TYPE_Q4_K   = 12,
    EMBER_TYPE_Q5_K   = 13,
    EMBER_TYPE_Q6_K   = 14,
    EMBER_TYPE_Q8_K   = 15,  /* activations of K-quant and IQ4_XS dot products only */
    EMBER_TYPE_IQ4_NL = 20,
    EMBER_TYPE_IQ4_XS = 23,
    EMBER_TYPE_I32    = 26,  /* indices and positions only */
    EMBER_TYPE_BF16   = 30
} ember_type;
/* Lower-case name ("q8_0") of a type id this build knows, or NULL. Static storage. */
EMBER_API const char * ember_type_name(int32_t type);
/* Type id for a name (case-insensitive: "Q8_0", "f16"), or -1. */
EMBER_API int32_t      ember_type_from_name(const char * name);

//
// Devices. Device 0 is always the CPU.
//
EMBER_API int32_t      ember_device_count(void);
/* Static name of device i ("cpu", "cuda:0", "vulkan:0"), or NULL when out of range. */
EMBER_API const char * ember_device_name(int32_t index);

//
// Model
//
typedef struct ember_model   ember_model;
typedef struct ember_context ember_context;

/* Progress in [0, 1]. Return nonzero to cancel the load (ember_model_load then
 * returns EMBER_ERR_CANCELLED). Called on the loading thread. Must not throw. */
typedef int (*ember_progress_callback)(float progress, void * user_data);

typedef struct ember_model_params {
    uint32_t                struct_size;        /* sizeof(ember_model_params), set by the defaults    */
    int32_t                 n_gpu_layers;       /* layers to offload; -1 = all (default), 0 = CPU only */
    const char *            device;             /* NULL (default) = best available, or "cpu", "cuda",
                                                   "cuda:1", "vulkan:0": a name from ember_device_name */
    ember_progress_callback progress_callback;  /* NULL (default) = no progress reports                */
    void *                  progress_user_data; /* passed to progress_callback                        */
    uint8_t                 use_mmap;           /* 1 (default) = map tensor data, 0 = read it         */
    uint8_t                 vocab_only;         /* 1 = load metadata and vocabulary only, no tensors  */
    uint8_t                 reserved[6];        /* zero                                               */
} ember_model_params;

EMBER_API ember_model_params ember_model_default_params(void);

/* Loads a GGUF file. On success *out owns the model (free with ember_model_free).
 * On failure *out is NULL and the status says why: EMBER_ERR_IO, EMBER_ERR_BAD_FORMAT
 * (naming the key or tensor), EMBER_ERR_UNSUPPORTED, EMBER_ERR_OOM, EMBER_ERR_CANCELLED.
 * `params` may be NULL for defaults. The model must outlive every context made from it. */
EMBER_API ember_status ember_model_load(const char * path, const ember_model_params * params, ember_model ** out);
/* Frees a model. NULL is a no-op. All its contexts must be freed first. */
EMBER_API void         ember_model_free(ember_model * model);

/* Queries. On a NULL model they return 0 / NULL / -1 and set the last error. */
EMBER_API const char * ember_model_arch(const ember_model * model);       /* "llama"; owned by the model */
EMBER_API uint64_t     ember_model_n_params(const ember_model * model);   /* elements in all tensors    */
EMBER_API uint64_t     ember_model_size(const ember_model * model);       /* bytes of tensor data       */
EMBER_API uint64_t     ember_model_file_size(const ember_model * model);  /* bytes of the GGUF file     */
EMBER_API int32_t      ember_model_n_vocab(const ember_model * model);
EMBER_API int32_t      ember_model_n_ctx_train(const ember_model * model);
EMBER_API int32_t      ember_model_n_embd(const ember_model * model);
EMBER_API int32_t      ember_model_n_layer(const ember_model * model);
EMBER_API int32_t      ember_model_n_head(const ember_model * model);
EMBER_API int32_t      ember_model_n_head_kv(const ember_model * model);
EMBER_API int32_t      ember_model_n_tensors(const ember_model * model);
EMBER_API int32_t      ember_token_bos(const ember_model * model);        /* -1 when the model has none */
EMBER_API int32_t      ember_token_eos(const ember_model * model);        /* -1 when the model has none */

/* Metadata, snprintf style: writes at most buf_size bytes (NUL-terminated when buf_size > 0)
 * and returns the length the full text needs (without the NUL), or -1 when the key or
 * index does not exist. Numbers print in decimal, booleans as true/false, arrays as
 * "[a, b, ...]" (long arrays are cut after 16 elements with ", ...]"). */
EMBER_API int32_t      ember_model_meta_count(const ember_model * model);
EMBER_API int32_t      ember_model_meta_key_by_index(const ember_model * model, int32_t i, char * buf, size_t buf_size);
EMBER_API int32_t      ember_model_meta_val_str(const ember_model * model, const char * key, char * buf, size_t buf_size);
/* One-line description ("llama 24.9M F16, 8 layers"). */
EMBER_API int32_t      ember_model_desc(const ember_model * model, char * buf, size_t buf_size);

//
// Context: one KV cache and its compute buffers. Borrows its model.
//
/* Return nonzero to abort the running ember_decode (it returns EMBER_ERR_CANCELLED). */
typedef int (*ember_abort_callback)(void * user_data);

typedef struct ember_context_params {
    uint32_t             struct_size;      /* sizeof(ember_context_params), set by the defaults        */
    uint32_t             n_ctx;            /* KV cache cells (tokens); 0 (default) = trained context   */
    uint32_t             n_batch;          /* max tokens per ember_decode call; default 2048           */
    uint32_t             n_ubatch;         /* tokens per compute step (micro-batch); default 512       */
    uint32_t             n_seq_max;        /* sequences (seq ids 0..n_seq_max-1); default 1, max 64     */
    int32_t              n_threads;        /* CPU threads; 0 (default) = all cores                     */
    int32_t              type_k;           /* K cache type: EMBER_TYPE_F16 (default), F32, Q8_0, Q4_0  */
    int32_t              type_v;           /* V cache type: same choices as type_k                     */
    ember_abort_callback abort_callback;   /* NULL (default) = never abort; polled between compute steps */
    void *               abort_user_data;  /* passed to abort_callback                                 */
} ember_context_params;

EMBER_API ember_context_params ember_context_default_params(void);

/* Creates a context (KV cache and compute buffers are allocated here, not per token).
 * `params` may be NULL for defaults. The model must outlive the context. */
EMBER_API ember_status ember_context_create(ember_model * model, const ember_context_params * params, ember_context ** out);
/* Frees a context. NULL is a no-op. */
EMBER_API void         ember_context_free(ember_context * ctx);

EMBER_API const ember_model * ember_context_model(const ember_context * ctx);
EMBER_API uint32_t     ember_context_n_ctx(const ember_context * ctx);
EMBER_API uint32_t     ember_context_n_batch(const ember_context * ctx);
EMBER_API uint32_t     ember_context_n_ubatch(const ember_context * ctx);
EMBER_API int32_t      ember_context_n_threads(const ember_context * ctx);
EMBER_API ember_status ember_context_set_n_threads(ember_context * ctx, int32_t n_threads);

//
// Decoding
//
/* A batch of tokens, a view of caller-owned arrays. The layout is frozen for ABI 1. */
typedef struct ember_batch {
    int32_t         n_tokens;  /* 1..n_batch                                                     */
    const int32_t * token;     /* [n_tokens] token ids, each in [0, n_vocab)                      */
    const int32_t * pos;       /* [n_tokens] positions, or NULL: each sequence continues after its
                                  last cached position                                            */
    const int32_t * seq_id;    /* [n_tokens] sequence ids in [0, n_seq_max), or NULL: all 0      */
    const int8_t  * logits;    /* [n_tokens] nonzero = compute logits for this token, or NULL:
                                  only the last token                                              */
} ember_batch;

/* A batch for one sequence (id 0) continuing after its cached tokens; logits of the last token. */
static inline ember_batch ember_batch_one(const int32_t * tokens, int32_t n_tokens) {
    ember_batch b;
    b.n_tokens = n_tokens;
    b.token    = tokens;
    b.pos      = NULL;
    b.seq_id   = NULL;
    b.logits   = NULL;
    return b;
}

/* Evaluates a batch and appends its tokens to the KV cache.
 * Within a sequence, positions must strictly increase through the batch and be greater
 * than the sequence's last cached position.
 * Returns EMBER_OK; EMBER_ERR_INVALID_ARG for a bad batch (nothing changed);
 * EMBER_ERR_CONTEXT_FULL when the cache has no room for the batch (nothing changed);
 * EMBER_ERR_CANCELLED when the abort callback stopped it (the micro-batches already
 * computed stay in the cache, the rest are not added); EMBER_ERR_BACKEND / EMBER_ERR_OOM. */
EMBER_API ember_status ember_decode(ember_context * ctx, const ember_batch * batch);

/* Logits of the last successful ember_decode: one row of n_vocab floats per token that
 * asked for logits, in batch order. Owned by the context, valid until the next decode. */
EMBER_API const float * ember_get_logits(ember_context * ctx);
/* Row of the i-th token of the last batch (i = -1 is the batch's last token, counting
 * tokens, not rows), or NULL (with a last error) when that token did not ask for logits
 * or i is out of range. */
EMBER_API const float * ember_get_logits_ith(ember_context * ctx, int32_t i);
/* Number of logits rows from the last decode. */
EMBER_API int32_t       ember_n_outputs(const ember_context * ctx);

//
// KV cache. Positions are in [p0, p1); p0 < 0 means 0, p1 < 0 means "to the end".
// seq_id < 0 means all sequences for ember_kv_cache_seq_rm only; elsewhere it is invalid.
//
EMBER_API ember_status ember_kv_cache_clear(ember_context * ctx);
EMBER_API ember_status ember_kv_cache_seq_rm(ember_context * ctx, int32_t seq_id, int32_t p0, int32_t p1);
/* Makes the cells of seq_src in [p0, p1) also belong to seq_dst (no copy of data). */
EMBER_API ember_status ember_kv_cache_seq_cp(ember_context * ctx, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1);
/* Largest cached position of a sequence, or -1 when it is empty (or on error). */
EMBER_API int32_t      ember_kv_cache_seq_pos_max(const ember_context * ctx, int32_t seq_id);
/* Cells in use. */
EMBER_API int32_t      ember_kv_cache_used(const ember_context * ctx);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_H */
