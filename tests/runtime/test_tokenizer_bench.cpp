// Tokenizer speed, as a benchmark to run by hand (skipped by default; nothing is asserted
// about time):
//
//   test-runtime --data-dir SHARED --no-skip -tc="*tokenizer*benchmark*"
//
// Tokenizes 1 MiB of English (the default model's held-out text, repeated) with each vocab
// fixture on one thread, plus 1 MiB without spaces (one huge pre-token / word), and prints the
// time of each.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "ember.h"
#include "support/data-path.h"
#include "support/fixtures.h"

namespace {

// Best of three: wall seconds and this process's CPU seconds (the latter barely moved by other
// processes on a busy machine).
struct timing {
    double wall = 1e30, cpu = 1e30;
};

timing time_tokenize(const ember_model * m, const std::string & text, int32_t & n_tokens) {
    std::vector<int32_t> ids(text.size() + 2);
    timing               best;
    for (int rep = 0; rep < 3; rep++) {
        const auto    t0 = std::chrono::steady_clock::now();
        const clock_t c0 = std::clock();
        n_tokens = ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), ids.data(), static_cast<int32_t>(ids.size()), 0, 0);
        const clock_t c1 = std::clock();
        const auto    t1 = std::chrono::steady_clock::now();
        best.wall        = std::min(best.wall, std::chrono::duration<double>(t1 - t0).count());
        best.cpu         = std::min(best.cpu, static_cast<double>(c1 - c0) / CLOCKS_PER_SEC);
    }
    return best;
}

}  // namespace

TEST_SUITE("tokenizer") {

TEST_CASE("[tokenizer] benchmark: 1 MiB of English on one core" * doctest::skip()) {
    const std::string val = ember_test_data_path("models/val.txt");
    if (val.empty() || ember_test_data_path("fixtures/vocab/README.md").empty()) {
        MESSAGE("skipped: no models/val.txt or fixtures/vocab (pass --data-dir)");
        return;
    }
    std::string text;
    REQUIRE(ember_test_read_file(val, text));
    const size_t mib = 1u << 20;
    while (text.size() < mib) text += text;
    text.resize(mib);
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();  // whole characters
    std::string no_spaces(mib, 'a');
    for (size_t i = 0; i < no_spaces.size(); i++) no_spaces[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);

    for (const char * name : {"llama-spm", "phi-3", "gpt-2", "starcoder", "deepseek-llm"}) {
        const std::string  path = ember_test_data_path(std::string("fixtures/vocab/ggml-vocab-") + name + ".gguf");
        ember_model_params mp   = ember_model_default_params();
        mp.vocab_only           = 1;
        ember_model * m         = nullptr;
        const auto    t0        = std::chrono::steady_clock::now();
        REQUIRE(ember_model_load(path.c_str(), &mp, &m) == EMBER_OK);
        const double         load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ember_test_model_ptr hold(m);
        int32_t              n = 0, n2 = 0;
        const timing         s  = time_tokenize(m, text, n);
        const timing         s2 = time_tokenize(m, no_spaces, n2);
        MESSAGE(std::string(name) << ": load " << load * 1e3 << " ms; 1 MiB English: " << n << " tokens in " << s.wall * 1e3
                                  << " ms wall, " << s.cpu * 1e3 << " ms CPU; 1 MiB without spaces: " << n2 << " tokens in "
                                  << s2.wall * 1e3 << " ms wall, " << s2.cpu * 1e3 << " ms CPU");
        CHECK(n > 0);
    }
}

}  // TEST_SUITE
