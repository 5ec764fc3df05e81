// Mutation fuzzing of GGUF loading under ASan + UBSan (scripts/fuzz.sh builds and runs it):
// mutated copies of small GGUF files (bit flips, interesting integers, truncation, inserted,
// deleted and copied bytes, mostly in the header and metadata) are loaded (mmap or read, vocab
// only or whole), tokenized, detokenized, rendered with their chat template, and decoded two
// tokens on the CPU. Every failure must be a status; a sanitizer report stops the run, and the
// input is left at /tmp/ember-fuzz/load-SEED.gguf.
//     fuzz-load SEED ITERATIONS FILE.gguf...
#include <ember.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <fstream>
#include <iterator>

static std::vector<uint8_t> slurp(const char * p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
int main(int argc, char ** argv) {
    uint64_t seed = strtoull(argv[1], 0, 10);
    int iters = atoi(argv[2]);
    std::vector<std::vector<uint8_t>> seeds;
    for (int i = 3; i < argc; i++) seeds.push_back(slurp(argv[i]));
    ember_log_set_level(-1); ember_log_set([](int32_t, const char *, void *) {}, nullptr);
    std::string out = "/tmp/ember-fuzz/load-" + std::to_string(seed) + ".gguf";
    std::mt19937_64 rng(seed);
    for (int it = 0; it < iters; it++) {
        std::vector<uint8_t> b = seeds[rng() % seeds.size()];
        // the header / metadata / tensor info region: where the tensor data starts is unknown; mutate mostly the first 64 KiB
        size_t lim = std::min<size_t>(b.size(), (rng() % 4) ? 65536 : b.size());
        int nm = 1 + rng() % 6;
        for (int m = 0; m < nm; m++) {
            size_t pos = rng() % lim;
            switch (rng() % 7) {
            case 0: b[pos] ^= uint8_t(1u << (rng() % 8)); break;
            case 1: b[pos] = uint8_t(rng()); break;
            case 2: { static const uint64_t iv[] = {0, 1, 0xff, 0x7fffffff, 0xffffffff, 0x80000000, 0xffffffffffffffffull, 0x7fffffffffffffffull, 65536, 4096, 2, 3, 31, 32, 33, 1000000000};
                uint64_t v = iv[rng() % 16]; size_t w = (rng() % 2) ? 4 : 8; if (pos + w <= b.size()) memcpy(&b[pos & ~size_t(3)], &v, w); break; }
            case 3: b.resize(rng() % b.size()); lim = std::min(lim, b.size()); if (lim == 0) lim = 1; if (b.empty()) b.push_back(0); break;
            case 4: { size_t n = 1 + rng() % 16; if (pos + n < b.size()) b.erase(b.begin() + pos, b.begin() + pos + n); break; }
            case 5: { size_t n = 1 + rng() % 16; b.insert(b.begin() + pos, n, uint8_t(rng())); break; }
            case 6: { // copy a chunk from elsewhere
                size_t src = rng() % b.size(), n = 1 + rng() % 32; if (src + n < b.size() && pos + n < b.size()) memmove(&b[pos], &b[src], n); break; }
            }
        }
        FILE * f = fopen(out.c_str(), "wb"); fwrite(b.data(), 1, b.size(), f); fclose(f);
        ember_model_params mp = ember_model_default_params();
        mp.use_mmap = rng() % 2;
        mp.vocab_only = (rng() % 4) == 0;
        mp.device = "cpu";
        ember_model * model = nullptr;
        if (ember_model_load(out.c_str(), &mp, &model) != EMBER_OK) continue;
        int32_t toks[64];
        const char * text = "Hello world, <|im_start|> ünïcode \xff\xfe 12345 <s>";
        int n = ember_tokenize(model, text, -1, toks, 64, 1, rng() % 2);
        if (n > 64) n = 64;
        char buf[512];
        if (n > 0) ember_detokenize(model, toks, n, buf, sizeof buf, 0, 1);
        for (int t = -1; t < 8; t++) ember_token_to_piece(model, t * 37, buf, sizeof buf, 1);
        ember_chat_message msgs[2] = {{"user", "hi"}, {"assistant", "ho"}};
        ember_chat_apply_template(model, nullptr, msgs, 2, 1, buf, sizeof buf);
        if (!mp.vocab_only) {
            ember_context_params cp = ember_context_default_params();
            cp.n_ctx = 64;
            ember_context * ctx = nullptr;
            if (ember_context_create(model, &cp, &ctx) == EMBER_OK) {
                if (n <= 0) { toks[0] = 1; n = 1; }
                if (n > 8) n = 8;
                ember_batch bt = ember_batch_one(toks, n);
                if (ember_decode(ctx, &bt) == EMBER_OK) ember_get_logits_ith(ctx, -1);
                ember_context_free(ctx);
            }
        }
        ember_model_free(model);
    }
    printf("seed %llu done %d\n", (unsigned long long)seed, iters);
}
