// Random text through vocabularies under ASan + UBSan (scripts/fuzz.sh): fragments of control
// tokens, multi-byte and broken UTF-8, random bytes; tokenized with and without specials,
// detokenized, and streamed a token at a time (with a bad token and tiny buffers).
//     fuzz-tokenize SEED ITERATIONS VOCAB.gguf...
#include <ember.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
int main(int argc, char ** argv) {
    ember_log_set([](int32_t, const char *, void *) {}, nullptr);
    uint64_t seed = strtoull(argv[1], 0, 10); int iters = atoi(argv[2]);
    std::mt19937_64 rng(seed);
    static const char * frag[] = {"<s>", "</s>", "<|im_start|>", "<|endoftext|>", " ", "  ", "\n", "\t", "é", "中文", "🙂", "\xf0\x9f", "\xc3", "\xff", "'s", "'ll", "123456", "a", "Hello", "\r\n", "<0x0A>", "▁", "Ġ", "<unk>", "<|user|>", "\0x"};
    for (int a = 3; a < argc; a++) {
        ember_model_params mp = ember_model_default_params(); mp.vocab_only = 1;
        ember_model * m = nullptr;
        if (ember_model_load(argv[a], &mp, &m) != EMBER_OK) { printf("load failed %s\n", argv[a]); continue; }
        std::vector<int32_t> toks(1 << 16);
        std::vector<char> buf(1 << 18);
        for (int it = 0; it < iters; it++) {
            std::string t;
            int n = rng() % 40;
            for (int k = 0; k < n; k++) { if (rng() % 3) t += frag[rng() % (sizeof frag / sizeof *frag)]; else t += char(rng()); }
            int nt = ember_tokenize(m, t.data(), int32_t(t.size()), toks.data(), int32_t(toks.size()), rng() % 2, rng() % 2);
            if (nt < 0 || nt > (int) toks.size()) continue;
            ember_detokenize(m, toks.data(), nt, buf.data(), int32_t(buf.size()), rng() % 2, rng() % 2);
            ember_token_stream * st = nullptr;
            if (ember_token_stream_create(m, 1, &st) == EMBER_OK) {
                for (int k = 0; k < nt; k++) ember_token_stream_push(st, toks[k], buf.data(), 64);
                ember_token_stream_push(st, int32_t(rng() % 1000000) - 10, buf.data(), 64);
                ember_token_stream_flush(st, buf.data(), 4);
                ember_token_stream_free(st);
            }
        }
        ember_model_free(m);
    }
    printf("ok\n");
}
