/* The public header as a C99 program sees it: compiled with -std=c99 -pedantic -Werror and
 * linked against the shared libember. Needs no data; with a model path as argv[1] it also
 * loads that model, decodes a few tokens and checks the logits are finite.
 * Exit code 0 on success; every failed check prints one line to stderr. */
#include <stdio.h>
#include <string.h>

#include "ember.h"

static int g_failures = 0;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                   \
        }                                                                   \
    } while (0)

static int on_progress(float progress, void * user_data) {
    float * last = (float *) user_data;
    *last        = progress;
    return 0;
}

static int run_model(const char * path) {
    ember_model_params   mp;
    ember_context_params cp;
    ember_model *        model = NULL;
    ember_context *      ctx   = NULL;
    float                last_progress = -1.0f;
    int32_t              toks[3];
    ember_batch          batch;
    const float *        logits;
    int32_t              n_vocab, i;
    char                 arch[32];
    ember_status         st;

    mp                    = ember_model_default_params();
    mp.progress_callback  = on_progress;
    mp.progress_user_data = &last_progress;
    st                    = ember_model_load(path, &mp, &model);
    if (st != EMBER_OK) {
        fprintf(stderr, "load of %s failed: %s: %s\n", path, ember_status_str(st), ember_last_error());
        return 1;
    }
    EXPECT(last_progress == 1.0f);
    EXPECT(ember_model_meta_val_str(model, "general.architecture", arch, sizeof arch) > 0);
    n_vocab = ember_model_n_vocab(model);
    EXPECT(n_vocab > 3);

    cp          = ember_context_default_params();
    cp.n_ctx    = 64;
    cp.n_batch  = 8;
    cp.n_ubatch = 8;
    st          = ember_context_create(model, &cp, &ctx);
    if (st != EMBER_OK) {
        fprintf(stderr, "context: %s: %s\n", ember_status_str(st), ember_last_error());
        ember_model_free(model);
        return 1;
    }
    toks[0] = ember_token_bos(model) >= 0 ? ember_token_bos(model) : 0;
    toks[1] = 2 % n_vocab;
    toks[2] = 3 % n_vocab;
    batch   = ember_batch_one(toks, 3);
    EXPECT(ember_decode(ctx, &batch) == EMBER_OK);
    logits = ember_get_logits_ith(ctx, -1);
    EXPECT(logits != NULL);
    if (logits) {
        for (i = 0; i < n_vocab; i++) {
            if (!(logits[i] - logits[i] == 0.0f)) { /* NaN and inf give NaN; no libm needed */
                fprintf(stderr, "logit %d is not finite\n", (int) i);
                g_failures++;
                break;
            }
        }
    }
    EXPECT(ember_kv_cache_seq_pos_max(ctx, 0) == 2);
    ember_context_free(ctx);
    ember_model_free(model);
    return 0;
}

int main(int argc, char ** argv) {
    ember_model_params   mp;
    ember_context_params cp;
    ember_status         s;
    ember_model *        model = NULL;

    if (EMBER_CHECK_ABI() != EMBER_OK) {
        fprintf(stderr, "ABI mismatch: library %u, header %u\n", (unsigned) ember_abi_version(),
                (unsigned) EMBER_ABI_VERSION);
        return 1;
    }
    EXPECT(ember_check_abi(EMBER_ABI_VERSION + 1) == EMBER_ERR_UNSUPPORTED);
    EXPECT(ember_version_number() == EMBER_VERSION_NUMBER);
    EXPECT(strcmp(ember_version_string(), EMBER_VERSION_STRING) == 0);
    EXPECT(ember_init() == EMBER_OK);

    mp = ember_model_default_params();
    EXPECT(mp.struct_size == sizeof(ember_model_params));
    EXPECT(mp.n_gpu_layers == -1);
    EXPECT(mp.use_mmap == 1);
    EXPECT(mp.vocab_only == 0);
    cp = ember_context_default_params();
    EXPECT(cp.struct_size == sizeof(ember_context_params));
    EXPECT(cp.type_k == EMBER_TYPE_F16);
    EXPECT(cp.n_seq_max == 1);

    for (s = EMBER_OK; s <= EMBER_ERR_INTERNAL; s++) {
        const char * str = ember_status_str(s);
        EXPECT(str != NULL && str[0] != '\0');
    }
    EXPECT(ember_status_str(-42) != NULL);
    EXPECT(ember_last_error() != NULL);
    EXPECT(ember_type_from_name("q8_0") == EMBER_TYPE_Q8_0);
    EXPECT(ember_type_name(EMBER_TYPE_F16) != NULL);
    EXPECT(ember_device_count() >= 1);
    EXPECT(ember_device_name(0) != NULL);

    /* NULL handles fail cleanly. */
    EXPECT(ember_model_load(NULL, NULL, &model) == EMBER_ERR_INVALID_ARG);
    EXPECT(model == NULL);
    EXPECT(ember_last_error()[0] != '\0');
    EXPECT(ember_decode(NULL, NULL) == EMBER_ERR_INVALID_ARG);
    ember_model_free(NULL);
    ember_context_free(NULL);
    ember_log_set(NULL, NULL);
    ember_log_set_level(EMBER_LOG_WARN);

    if (argc > 1 && run_model(argv[1]) != 0) g_failures++;

    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    return 0;
}
