/* simple.c: the smallest complete Ember program. Loads a model, tokenizes a prompt, evaluates
 * it, then picks the most likely next token (greedy) again and again, printing text as it comes.
 *
 *   simple MODEL.gguf ["prompt"] [n_tokens]
 *
 * Build: cc simple.c $(pkg-config --cflags --libs ember)  (or CMake: ember::runtime) */
#include <stdio.h>
#include <stdlib.h>

#include "ember.h"

static int fail(const char * what, ember_status st) {
    fprintf(stderr, "simple: %s: %s (%s)\n", what, ember_last_error(), ember_status_str(st));
    return 1;
}

int main(int argc, char ** argv) {
    const char *    prompt = argc > 2 ? argv[2] : "And God said unto Moses,";
    const int       n_gen  = argc > 3 ? atoi(argv[3]) : 32;
    ember_model *   model  = NULL;
    ember_context * ctx    = NULL;
    ember_sampler * greedy = NULL;
    ember_token_stream * stream = NULL;
    int32_t         tokens[512];
    char            piece[256];
    ember_status    st;
    int             rc = 1;

    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [\"prompt\"] [n_tokens]\n", argv[0]);
        return 2;
    }
    if ((st = EMBER_CHECK_ABI()) != EMBER_OK) return fail("this libember is incompatible", st);
    if ((st = ember_model_load(argv[1], NULL, &model)) != EMBER_OK) return fail("load", st);

    /* a context with defaults: the model's trained context length, all cores */
    if ((st = ember_context_create(model, NULL, &ctx)) != EMBER_OK) { fail("context", st); goto done; }
    if ((st = ember_sampler_create_greedy(&greedy)) != EMBER_OK) { fail("sampler", st); goto done; }
    if ((st = ember_token_stream_create(model, 0, &stream)) != EMBER_OK) { fail("stream", st); goto done; }

    /* tokenize (with BOS) and evaluate the prompt in one batch */
    int32_t n = ember_tokenize(model, prompt, -1, tokens, 512, 1, 0);
    if (n < 1 || n > 512) { fprintf(stderr, "simple: prompt: cannot tokenize it into 1..512 tokens\n"); goto done; }
    ember_batch batch = ember_batch_one(tokens, n);
    if ((st = ember_decode(ctx, &batch)) != EMBER_OK) { fail("decode", st); goto done; }

    printf("%s", prompt);
    for (int i = 0; i < n_gen; i++) {
        int32_t tok = ember_sampler_sample(greedy, ctx, -1); /* argmax of the last logits */
        if (tok < 0) { fail("sample", EMBER_ERR_INVALID_ARG); goto done; }
        if (ember_token_is_eog(model, tok)) break;           /* end of text */
        int32_t len = ember_token_stream_push(stream, tok, piece, sizeof piece);
        if (len > 0 && len <= (int32_t) sizeof piece) fwrite(piece, 1, (size_t) len, stdout);
        fflush(stdout);
        batch = ember_batch_one(&tok, 1);                    /* feed it back */
        if ((st = ember_decode(ctx, &batch)) != EMBER_OK) {
            if (st == EMBER_ERR_CONTEXT_FULL) break;
            fail("decode", st);
            goto done;
        }
    }
    int32_t len = ember_token_stream_flush(stream, piece, sizeof piece);
    if (len > 0 && len <= (int32_t) sizeof piece) fwrite(piece, 1, (size_t) len, stdout);
    printf("\n");
    rc = 0;
done:
    ember_token_stream_free(stream);
    ember_sampler_free(greedy);
    ember_context_free(ctx);
    ember_model_free(model);
    return rc;
}
