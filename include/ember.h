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
    EMBER_TYPE_BF16   = 30,
    /* Ember's own types (docs/quant-types.md). Their ids are far above ggml's so that no other
     * GGUF reader ever mistakes them for one of its types; files holding them say so in their
     * metadata (ember.quantization.custom_types). */
    EMBER_TYPE_INT4         = 4096, /* 4-bit ints, groups of 128, fp16 scale + zero-point     */
    EMBER_TYPE_INT4_G32     = 4097, /* the same with groups of 32                             */
    EMBER_TYPE_NF4          = 4098, /* QLoRA NormalFloat4, 64-blocks, double-quantized absmax */
    EMBER_TYPE_FP8_E4M3     = 4099, /* OCP E4M3 (max 448), a power-of-two scale per 32        */
    EMBER_TYPE_FP8_E5M2     = 4100, /* OCP E5M2 (max 57344), a power-of-two scale per 32      */
    EMBER_TYPE_FP8_E4M3_ROW = 4101, /* E4M3 with one fp32 scale per row                       */
    EMBER_TYPE_FP8_E5M2_ROW = 4102  /* E5M2 with one fp32 scale per row                       */
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
/* Static description of device i (the GPU's name, compute capability, memory and CUDA driver;
 * the Vulkan device's name; the CPU's model), or NULL when out of range. */
EMBER_API const char * ember_device_description(int32_t index);
/* Measures device i's memory bandwidth: a copy of `bytes` (0 = 1 GiB, 256 MiB on the CPU) within
 * its own memory, best of 6 timed runs, as bytes read + written per second in *gb_per_s (units
 * of 1e9 bytes). Takes twice `bytes` of the device's memory for the call. */
EMBER_API ember_status ember_device_copy_bandwidth(int32_t index, uint64_t bytes, double * gb_per_s);

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
/* Weight bytes one decode step reads: every tensor except the input embedding table, of which
 * one row is read (all of it when the output projection is tied to it). Divide memory
 * bandwidth by this for the decode speed limit. */
EMBER_API uint64_t     ember_model_decode_bytes(const ember_model * model);
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
// Quantization and conversion (ember-quantize). Reads a GGUF file or a Hugging Face model
// folder and writes a GGUF file; see docs/quant-types.md for the types and the mixes.
//
/* Called after each tensor is written. Return nonzero to cancel (the output is not created). */
typedef int (*ember_quantize_progress_callback)(int32_t i_tensor, int32_t n_tensors, const char * tensor_name,
                                                int32_t type, double mb_per_s, void * user_data);

typedef struct ember_quantize_params {
    uint32_t     struct_size;          /* sizeof(ember_quantize_params), set by the defaults         */
    const char * ftype;                /* target: a type name ("q8_0", "NF4", "FP8_E4M3") or a mix
                                          ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q3_K_M", "Q2_K"), "F16",
                                          "BF16", "F32"; default "Q4_K_M"                          */
    int32_t      n_threads;            /* 0 (default) = all cores                                   */
    int32_t      output_tensor_type;   /* type for output.weight, -1 (default) = the recipe's      */
    int32_t      token_embd_type;      /* type for token_embd.weight, -1 (default) = the recipe's  */
    const char * imatrix_path;         /* importance matrix (llama.cpp imatrix .dat / .gguf), NULL */
    uint8_t      allow_requantize;     /* 1 = accept quantized input tensors (default 0)           */
    uint8_t      pure;                 /* 1 = every matrix gets `ftype`, no mix rules (default 0)  */
    uint8_t      dry_run;              /* 1 = plan and report sizes, write nothing (default 0)     */
    uint8_t      reserved[5];          /* zero                                                     */
    ember_quantize_progress_callback progress_callback; /* NULL = no reports                      */
    void *       progress_user_data;
    /* Added later (an older, smaller struct_size keeps the defaults): */
    const char * calibration_path;     /* text to measure an importance matrix on, with the input
                                          model, before quantizing (GGUF input; not with
                                          imatrix_path); NULL (default) = none                    */
    int32_t      calibration_chunks;   /* chunks of 512 tokens to measure (default 16, >= 1)      */
    const char * imatrix_out_path;     /* NULL (default), or save the measured matrix here
                                          (llama.cpp's legacy .dat format)                        */
} ember_quantize_params;

EMBER_API ember_quantize_params ember_quantize_default_params(void);

/* Converts `input` (GGUF file or Hugging Face folder) into the GGUF file `output`. The file is
 * written under a temporary name in the same directory and renamed at the end: a failed or
 * cancelled run leaves no output and never touches the input. Refuses output == input and
 * checks free disk space first. EMBER_ERR_INVALID_ARG (bad type name, same paths),
 * EMBER_ERR_IO, EMBER_ERR_BAD_FORMAT, EMBER_ERR_UNSUPPORTED, EMBER_ERR_CANCELLED. */
EMBER_API ember_status ember_model_quantize(const char * input, const char * output, const ember_quantize_params * params);

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
    int32_t              type_k;           /* K cache type: EMBER_TYPE_F16 (default), F32, Q8_0, Q4_0,
                                              FP8_E4M3, FP8_E5M2 (an 8-bit float per value and a
                                              power-of-two scale per 32)                           */
    int32_t              type_v;           /* V cache type: same choices as type_k                     */
    ember_abort_callback abort_callback;   /* NULL (default) = never abort; polled between compute steps */
    void *               abort_user_data;  /* passed to abort_callback                                 */
    /* Added later (an older, smaller struct_size keeps the defaults): */
    int32_t              device_top_k;     /* 0 (default) = off: every output row is n_vocab logits.
                                              k > 0: the decode graph ends with a top-k on the
                                              device, so only the best k ids and values of each
                                              output row reach the host (k above n_vocab keeps
                                              n_vocab); read them with ember_get_top_k and sample
                                              with ember_sampler_sample (see there: exact for
                                              greedy and top_k <= k chains); ember_get_logits
                                              then fails. The CUDA backend runs k <= 64 on the
                                              GPU; larger k, and other devices, on the CPU      */
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
/* Candidates kept per output row (device_top_k, at most n_vocab); 0 when full logits are kept. */
EMBER_API int32_t      ember_context_device_top_k(const ember_context * ctx);
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
 * computed stay in the cache, the rest are not added); EMBER_ERR_BACKEND / EMBER_ERR_OOM.
 * On a GPU a batch of at most n_ubatch tokens may return once its work is queued, so the
 * caller's next step overlaps it; reading its outputs (ember_get_logits*, ember_get_top_k,
 * ember_sampler_sample), editing the KV cache or ember_context_synchronize waits for it. A
 * device error found then is returned by that call, and the tokens of the steps not yet
 * waited for are removed from the cache. (EMBER_DECODE_ASYNC=0 in the environment when the
 * context is created: every decode waits.) */
EMBER_API ember_status ember_decode(ember_context * ctx, const ember_batch * batch);
/* Waits for the decode steps still running on the device (a no-op when none are): for timing,
 * or to find a device error early. EMBER_OK, or the error (see ember_decode). */
EMBER_API ember_status ember_context_synchronize(ember_context * ctx);

/* Logits of the last successful ember_decode: one row of n_vocab floats per token that
 * asked for logits, in batch order. Owned by the context, valid until the next decode.
 * NULL (with a last error) when the context keeps only the top-k candidates (device_top_k). */
EMBER_API const float * ember_get_logits(ember_context * ctx);
/* Row of the i-th token of the last batch (i = -1 is the batch's last token, counting
 * tokens, not rows), or NULL (with a last error) when that token did not ask for logits,
 * i is out of range, or the context keeps only the top-k candidates (device_top_k). */
EMBER_API const float * ember_get_logits_ith(ember_context * ctx, int32_t i);
/* The best candidates of the i-th token's output row (i as in ember_get_logits_ith), best
 * first: the highest logits, equal logits by ascending token id, a NaN logit ranked above
 * everything (so a row holding NaN shows one). Writes min(n, kept) token ids to ids and their
 * logits to vals (vals may be NULL), where kept is device_top_k, or n_vocab when the context
 * keeps full logits (then the candidates are found on the host). Returns the number written,
 * or -1 with a last error (NULL context or ids, n < 1, no such row). */
EMBER_API int32_t       ember_get_top_k(ember_context * ctx, int32_t i, int32_t * ids, float * vals, int32_t n);
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

//
// Tokenizer (from the model's GGUF metadata; works on vocab_only models)
//
/* Tokenizes UTF-8 text of text_len bytes (-1: NUL-terminated). add_special: add BOS/EOS as
 * the model's metadata asks (tokenizer.ggml.add_bos_token / add_eos_token). parse_special:
 * text that spells a control or user-defined token becomes that token instead of being split.
 * Writes at most n_tokens_max ids and returns the number of tokens of the whole text (more
 * than n_tokens_max means the buffer was too small: call again with that many), or -1 on
 * error (NULL model or text, invalid UTF-8 is not an error: bytes fall back as the model allows). */
EMBER_API int32_t ember_tokenize(const ember_model * model, const char * text, int32_t text_len, int32_t * tokens,
                                 int32_t n_tokens_max, uint8_t add_special, uint8_t parse_special);

/* The text of one token, snprintf style: writes at most buf_size bytes (not NUL-terminated:
 * a piece may be part of a UTF-8 sequence) and returns the bytes needed, or -1 for a bad
 * token. special: render control tokens (<s>, <|im_end|>) as their text instead of nothing. */
EMBER_API int32_t ember_token_to_piece(const ember_model * model, int32_t token, char * buf, int32_t buf_size, uint8_t special);

/* The text of a token sequence, snprintf style (NUL-terminated when it fits; returns the
 * length without the NUL, or -1). remove_special: drop a leading BOS and trailing EOS.
 * unparse_special: render control tokens as their text. Like the reference tokenizers, the
 * space that SentencePiece models put before the first word is removed. */
EMBER_API int32_t ember_detokenize(const ember_model * model, const int32_t * tokens, int32_t n_tokens, char * buf, int32_t buf_size,
                                   uint8_t remove_special, uint8_t unparse_special);

/* Streaming detokenizer: push tokens one at a time and get text back as soon as it is
 * complete UTF-8 (a partial sequence is held back until the next token completes it). */
typedef struct ember_token_stream ember_token_stream;
EMBER_API ember_status ember_token_stream_create(const ember_model * model, uint8_t unparse_special, ember_token_stream ** out);
/* Appends `token` and writes the newly completed text (not NUL-terminated). Returns its length
 * in bytes; when that is more than buf_size, nothing is written and the token is not taken:
 * call again with a larger buffer. -1 on error (NULL stream, bad token). */
EMBER_API int32_t      ember_token_stream_push(ember_token_stream * stream, int32_t token, char * buf, int32_t buf_size);
/* Writes what is held back (an incomplete sequence is written as U+FFFD) and resets; same
 * return convention as push. */
EMBER_API int32_t      ember_token_stream_flush(ember_token_stream * stream, char * buf, int32_t buf_size);
EMBER_API void         ember_token_stream_free(ember_token_stream * stream);

/* Special tokens. -1 when the model has none. */
EMBER_API int32_t ember_token_eot(const ember_model * model);    /* end of turn (e.g. <|eot_id|>, <|im_end|>) */
EMBER_API int32_t ember_token_nl(const ember_model * model);     /* the newline token */
/* 1 when generation should stop at this token (EOS, EOT and the model's other end tokens). */
EMBER_API int32_t ember_token_is_eog(const ember_model * model, int32_t token);
/* 1 for control tokens (rendered as nothing unless asked), 0 otherwise, -1 for a bad token. */
EMBER_API int32_t ember_token_is_control(const ember_model * model, int32_t token);
/* 1 when ember_tokenize with add_special adds a BOS token. */
EMBER_API int32_t ember_model_add_bos(const ember_model * model);

//
// Chat templates (Jinja, rendered like Hugging Face transformers does)
//
typedef struct ember_chat_message {
    const char * role;     /* "system", "user", "assistant", "tool" */
    const char * content;  /* UTF-8 */
} ember_chat_message;

/* Templates that print the date (strftime_now) use the SOURCE_DATE_EPOCH environment variable
 * (seconds since 1970, UTC) when it is set, the local time otherwise. Limits: 64 MiB of
 * output, 10 million evaluation steps, ranges of at most 100000 items; beyond them the call
 * fails with EMBER_ERR_INVALID_ARG. raise_exception(msg) gives EMBER_ERR_INVALID_ARG and msg;
 * valid Jinja this engine does not implement gives EMBER_ERR_UNSUPPORTED.
 *
 * Renders a conversation with a chat template, snprintf style (NUL-terminated when it fits;
 * returns the length without the NUL). tmpl: a Jinja template, or NULL for the model's
 * tokenizer.chat_template (model may be NULL when tmpl is given). bos_token and eos_token
 * come from the model's vocabulary ("" without a model). Returns -1 with a last error naming
 * the construct when the template cannot be rendered or raises (raise_exception). */
EMBER_API int32_t ember_chat_apply_template(const ember_model * model, const char * tmpl, const ember_chat_message * messages,
                                            size_t n_messages, uint8_t add_generation_prompt, char * buf, int32_t buf_size);

/* Renders a template with the variables of a JSON object, e.g. {"messages": [...], "tools":
 * [...], "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}; messages may
 * carry tool_calls, tool_call_id and any other field. Object key order is kept (tojson,
 * items()). snprintf style as above; -1 on bad JSON or a template error. */
EMBER_API int32_t ember_chat_render_json(const char * tmpl, const char * variables_json, char * buf, int32_t buf_size);

/* A built-in template by family name ("llama3", "chatml", "mistral", "gemma", "phi3"), or
 * NULL. Static storage. For models whose own template cannot be rendered, when asked. */
EMBER_API const char * ember_chat_builtin_template(const char * name);

//
// Sampling: a chain of samplers applied in order to one row of logits.
//
// A sampler works on candidates (token id, logit, probability) built from the row; each link
// transforms them in turn. greedy and dist are selecting links: the first one reached picks the
// token, and the links after it do not run for that draw (they still see accept and reset). When
// no selecting link is reached, sampling takes the argmax of the candidates that remain, so an
// empty chain, a chain of filters or a single link alone all sample (a link not in a chain acts
// as a chain of one). Ties are always broken towards the lowest token id.
// A sampler may be used by one thread at a time; different samplers, concurrently. Once it has
// sampled a row of n_vocab logits, sampling allocates nothing (a penalty window fills first).
//
typedef struct ember_sampler ember_sampler;

typedef struct ember_logit_bias {
    int32_t token;
    float   bias;  /* added to the logit; -INFINITY bans the token; NaN and +INFINITY are invalid */
} ember_logit_bias;

/* An empty chain (free with ember_sampler_free). Samplers added to it are owned by it and
 * freed with it. Chains may be nested. */
EMBER_API ember_status ember_sampler_chain_create(ember_sampler ** out);
/* Appends s. The chain takes ownership of s, also on failure (s is then freed), except where s
 * already has an owner: s NULL, s already in a chain, or s being `chain` itself or a chain that
 * contains it are EMBER_ERR_INVALID_ARG and leave s untouched. */
EMBER_API ember_status ember_sampler_chain_add(ember_sampler * chain, ember_sampler * s);
/* Links. Each returns EMBER_ERR_INVALID_ARG (and *out = NULL) for out-of-range parameters. */
EMBER_API ember_status ember_sampler_create_greedy(ember_sampler ** out);                 /* argmax, lowest id on ties */
/* One draw from the softmax of the candidates. Every seed is a plain seed (none means
 * "random"): it starts a xoshiro256** generator whose state comes from splitmix64(seed); a
 * draw takes u = (next() >> 11) / 2^53 and picks the first candidate, in the chain's
 * candidate order, whose running sum of exp(logit - max) (each term computed in double and
 * rounded to float, summed in double) exceeds u times the total. The same seed and logits
 * give the same tokens on every platform and backend. */
EMBER_API ember_status ember_sampler_create_dist(uint32_t seed, ember_sampler ** out);
/* logits / temp (temp finite); temp <= 0 keeps only the max. A temp so small that logits
 * overflow to +inf makes those tokens equally likely. */
EMBER_API ember_status ember_sampler_create_temp(float temp, ember_sampler ** out);
/* Keeps the k highest logits, exactly k (at a tie on the boundary the lower ids stay);
 * k <= 0: no-op. */
EMBER_API ember_status ember_sampler_create_top_k(int32_t k, ember_sampler ** out);
/* p in [0, 1]. top_p keeps the fewest most probable candidates whose probabilities sum to at
 * least p; min_p keeps those with probability >= p times the largest one (in their order);
 * typical orders candidates by |-ln p_i - H| (H the entropy) and keeps the shortest prefix
 * whose probabilities sum to more than p. Each keeps at least min_keep candidates. No-op at
 * p = 1 (top_p, typical) and p = 0 (min_p). */
EMBER_API ember_status ember_sampler_create_top_p(float p, size_t min_keep, ember_sampler ** out);
EMBER_API ember_status ember_sampler_create_min_p(float p, size_t min_keep, ember_sampler ** out);
EMBER_API ember_status ember_sampler_create_typical(float p, size_t min_keep, ember_sampler ** out);
/* Penalties over the last `last_n` accepted tokens (-1: all accepted tokens, counted per token,
 * so memory stays bounded by n_vocab; 0: off). For a token seen c > 0 times: repeat (finite,
 * > 0; 1 = off) divides a positive logit and multiplies a negative one, then c * freq +
 * presence is subtracted (finite; 0 = off). */
EMBER_API ember_status ember_sampler_create_penalties(int32_t last_n, float repeat, float freq, float presence, ember_sampler ** out);
/* Adds biases[i].bias to the logit of biases[i].token (copied; biases of one token add up).
 * n_vocab > 0 and every token in [0, n_vocab); biases may be NULL when n is 0. */
EMBER_API ember_status ember_sampler_create_logit_bias(int32_t n_vocab, const ember_logit_bias * biases, size_t n, ember_sampler ** out);

/* Samples a token from row i of the context's last logits (as ember_get_logits_ith: i = -1
 * is the batch's last token) and accepts it into every link (penalty history). Returns the
 * token, or -1 with the last error: NULL sampler or context, no such row (the message of
 * ember_get_logits_ith), a NaN logit, or no token left to pick (every logit -inf, e.g. all
 * banned).
 * With device_top_k = K the sampler runs on the K candidates the context kept, and gives the
 * token the full row would give (same seed, same draws) when its outcome depends only on the
 * best K: a chain (or link) that starts with greedy, temp <= 0, or top_k(k) with 0 < k <= K,
 * whatever follows (e.g. top_k 40 -> top_p -> min_p -> temp -> dist with K >= 40). Any other
 * sampler (one starting with penalties, logit bias, temp > 0, top_p, ... or top_k above K)
 * is refused: -1 with a last error saying so (EMBER_ERR_UNSUPPORTED), never a guess. */
EMBER_API int32_t      ember_sampler_sample(ember_sampler * s, ember_context * ctx, int32_t i);
/* The same over a caller's logits row (n_vocab floats, n_vocab > 0); backend independent. */
EMBER_API int32_t      ember_sampler_sample_logits(ember_sampler * s, const float * logits, int32_t n_vocab);
/* Records a token chosen elsewhere (e.g. the prompt) in the penalty history of every link.
 * EMBER_ERR_INVALID_ARG for a negative token, or one >= n_vocab once s has sampled a row. */
EMBER_API ember_status ember_sampler_accept(ember_sampler * s, int32_t token);
/* Forgets history and restarts random draws from the seed (every link of a chain). */
EMBER_API ember_status ember_sampler_reset(ember_sampler * s);
/* Frees a sampler (a chain with its links). NULL is a no-op. A sampler that belongs to a
 * chain is freed with it: freeing it alone does nothing and sets the last error. */
EMBER_API void         ember_sampler_free(ember_sampler * s);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_H */
