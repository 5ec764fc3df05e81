// Mutation fuzzing of ember_model_quantize under ASan + UBSan (scripts/fuzz.sh): mutated small
// GGUF files quantized to a random target (mixes, Ember's types, dry runs, requantizing).
//     fuzz-quantize SEED ITERATIONS FILE.gguf...
#include <ember.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>
int main(int argc, char ** argv) {
    ember_log_set([](int32_t, const char *, void *) {}, nullptr);
    uint64_t seed = strtoull(argv[1], 0, 10); int iters = atoi(argv[2]);
    std::vector<std::vector<uint8_t>> seeds;
    for (int i = 3; i < argc; i++) { std::ifstream f(argv[i], std::ios::binary); seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()); }
    std::mt19937_64 rng(seed);
    const std::string in = "/tmp/ember-fuzz/quantize-in-" + std::to_string(seed) + ".gguf", out = "/tmp/ember-fuzz/quantize-out-" + std::to_string(seed) + ".gguf";
    static const char * ft[] = {"Q4_K_M", "q8_0", "NF4", "FP8_E4M3", "INT4", "Q2_K", "IQ4_XS", "F16", "Q6_K", "q4_0"};
    for (int it = 0; it < iters; it++) {
        std::vector<uint8_t> b = seeds[rng() % seeds.size()];
        size_t lim = std::min<size_t>(b.size(), 65536);
        int nm = 1 + rng() % 4;
        for (int m = 0; m < nm; m++) {
            size_t pos = rng() % lim;
            switch (rng() % 4) {
            case 0: b[pos] ^= uint8_t(1u << (rng() % 8)); break;
            case 1: b[pos] = uint8_t(rng()); break;
            case 2: { static const uint64_t iv[] = {0, 1, 0xffffffff, 0x7fffffff, 0xffffffffffffffffull, 2, 3, 4097}; uint64_t v = iv[rng() % 8]; memcpy(&b[pos & ~size_t(3)], &v, (pos & ~size_t(3)) + 8 <= b.size() ? 8 : 1); break; }
            case 3: b.resize(1 + rng() % b.size()); lim = std::min(lim, b.size()); break;
            }
        }
        FILE * f = fopen(in.c_str(), "wb"); fwrite(b.data(), 1, b.size(), f); fclose(f);
        ember_quantize_params qp = ember_quantize_default_params();
        qp.ftype = ft[rng() % 10];
        qp.n_threads = 2;
        qp.allow_requantize = rng() % 2;
        qp.pure = rng() % 2;
        qp.dry_run = rng() % 3 == 0;
        remove(out.c_str());
        ember_model_quantize(in.c_str(), out.c_str(), &qp);
    }
    printf("ok\n");
}
