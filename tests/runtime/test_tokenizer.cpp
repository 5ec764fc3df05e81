// Tokenizer conformance: every text of the llama.cpp vocab fixtures (fixtures/vocab/*.gguf.inp)
// tokenizes to the ids of the matching .out, and detokenizes back; the default model's and the
// tiny fixture models' prompts tokenize to their reference ids (BOS included).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ember.h"
#include "support/data-path.h"
#include "support/fixtures.h"

namespace {

std::string last_error() {
    const char * e = ember_last_error();
    return e ? e : "";
}

// Splits a .inp file into its texts (fixtures/vocab/README.md): the separator is the exact
// byte string "\n__ggml_vocab_test__\n", and the file ends with one.
std::vector<std::string> split_inp(const std::string & s) {
    const std::string        sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t                   b = 0;
    for (size_t at; (at = s.find(sep, b)) != std::string::npos; b = at + sep.size()) out.push_back(s.substr(b, at - b));
    return out;
}

// One line of ids per text.
std::vector<std::vector<int32_t>> parse_out(const std::string & s) {
    std::vector<std::vector<int32_t>> out;
    size_t                            b = 0;
    while (b < s.size()) {
        size_t e = s.find('\n', b);
        if (e == std::string::npos) e = s.size();
        std::vector<int32_t> ids;
        REQUIRE(ember_test_parse_ids(s.substr(b, e - b), ids));
        out.push_back(ids);
        b = e + 1;
    }
    return out;
}

std::vector<int32_t> tokenize(const ember_model * m, const std::string & text, bool add_special, bool parse_special) {
    const int32_t n = ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), nullptr, 0, add_special, parse_special);
    REQUIRE_MESSAGE(n >= 0, last_error());
    std::vector<int32_t> ids(static_cast<size_t>(n));
    REQUIRE(ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), ids.data(), n, add_special, parse_special) == n);
    return ids;
}

std::string detokenize(const ember_model * m, const std::vector<int32_t> & ids, bool remove_special = false, bool unparse = false) {
    const int32_t n = ember_detokenize(m, ids.data(), static_cast<int32_t>(ids.size()), nullptr, 0, remove_special, unparse);
    REQUIRE_MESSAGE(n >= 0, last_error());
    std::vector<char> buf(static_cast<size_t>(n) + 1);
    REQUIRE(ember_detokenize(m, ids.data(), static_cast<int32_t>(ids.size()), buf.data(), n + 1, remove_special, unparse) == n);
    CHECK(buf[static_cast<size_t>(n)] == '\0');
    return std::string(buf.data(), static_cast<size_t>(n));
}

bool ember_utf8_ok(const std::string & s) {
    for (size_t i = 0; i < s.size();) {
        const unsigned char c   = static_cast<unsigned char>(s[i]);
        const size_t        len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; k++) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += len;
    }
    return true;
}

ember_test_model_ptr load_vocab(const std::string & path) {
    ember_model_params mp = ember_model_default_params();
    mp.vocab_only         = 1;
    ember_model * m       = nullptr;
    REQUIRE_MESSAGE(ember_model_load(path.c_str(), &mp, &m) == EMBER_OK, last_error());
    return ember_test_model_ptr(m);
}

std::string ids_str(const std::vector<int32_t> & ids) {
    std::string s;
    for (int32_t id : ids) s += " " + std::to_string(id);
    return s;
}

struct vocab_case {
    const char * name;
    // Texts (by index in the .inp) whose detokenization is not the text itself, as with the
    // reference: these vocabularies clean up " ?" and " 's"-like spaces (llama.cpp's
    // clean_up_tokenization_spaces).
    std::vector<int> no_round_trip;
};

const vocab_case k_vocab_cases[] = {
    {"llama-spm", {}},
    {"phi-3", {}},
    {"gpt-2", {32, 45}},
    {"starcoder", {32, 45}},
    {"deepseek-llm", {}},
};

}  // namespace

TEST_SUITE("tokenizer") {

TEST_CASE("[tokenizer] vocab fixtures: every .inp text gives the .out ids and detokenizes back") {
    if (ember_test_data_path("fixtures/vocab/README.md").empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    for (const vocab_case & vc : k_vocab_cases) {
        const std::string name = vc.name;
        CAPTURE(name);
        const std::string base = ember_test_data_path(std::string("fixtures/vocab/ggml-vocab-") + vc.name + ".gguf");
        REQUIRE(!base.empty());
        std::string inp, out;
        REQUIRE(ember_test_read_file(base + ".inp", inp));
        REQUIRE(ember_test_read_file(base + ".out", out));
        const std::vector<std::string>          texts    = split_inp(inp);
        const std::vector<std::vector<int32_t>> expected = parse_out(out);
        REQUIRE(texts.size() == 46);
        REQUIRE(expected.size() == texts.size());

        ember_test_model_ptr m = load_vocab(base);
        for (size_t i = 0; i < texts.size(); i++) {
            CAPTURE(i);
            CAPTURE(texts[i]);
            const std::vector<int32_t> ids = tokenize(m.get(), texts[i], false, false);
            CHECK_MESSAGE(ids == expected[i], "got" << ids_str(ids) << "\nwant" << ids_str(expected[i]));
            bool round_trip = true;
            for (int k : vc.no_round_trip) round_trip = round_trip && static_cast<size_t>(k) != i;
            if (round_trip) {
                CHECK(detokenize(m.get(), ids) == texts[i]);
            } else {
                CHECK(detokenize(m.get(), ids) != texts[i]);  // the list above is exact
            }
        }
    }
}

TEST_CASE("[tokenizer] model prompts tokenize to their reference ids (BOS included)") {
    struct prompt_case {
        std::string model_path;  // "" when absent
        std::string ids_path;    // reference ids
        const char * text;
    };
    const char *             kjv_prompt  = "And God said unto Moses, Behold";
    const char *             tiny_prompt = "Once upon a time, there was a little robot who loved to read books about the stars.";
    const std::string        repo_models = std::string(EMBER_SOURCE_DIR) + "/models/";
    const prompt_case        cases[]     = {
        {repo_models + "ember-kjv-25m-q8_0.gguf", repo_models + "ember-kjv-25m-q8_0.tokens.txt", kjv_prompt},
        {ember_test_data_path("models/ember-kjv-25m-f16.gguf"), ember_test_data_path("models/ember-kjv-25m-f16.tokens.txt"), kjv_prompt},
        {ember_test_data_path("fixtures/models/tiny-llama-F32.gguf"), ember_test_data_path("fixtures/models/tiny-llama-F32.tokens.txt"), tiny_prompt},
        {ember_test_data_path("fixtures/models/tiny-qwen2-F32.gguf"), ember_test_data_path("fixtures/models/tiny-qwen2-F32.tokens.txt"), tiny_prompt},
        {ember_test_data_path("fixtures/models/tiny-qwen3-F32.gguf"), ember_test_data_path("fixtures/models/tiny-qwen3-F32.tokens.txt"), tiny_prompt},
    };
    int n = 0;
    for (const prompt_case & c : cases) {
        CAPTURE(c.model_path);
        const std::string & model_path = c.model_path;
        const std::string & ids_path   = c.ids_path;
        if (model_path.empty() || ids_path.empty()) continue;
        std::string          ids_text;
        std::vector<int32_t> want;
        REQUIRE(ember_test_read_file(ids_path, ids_text));
        REQUIRE(ember_test_parse_ids(ids_text, want));
        ember_test_model_ptr m = load_vocab(model_path);
        CHECK(ember_model_add_bos(m.get()) == 1);
        const std::vector<int32_t> got = tokenize(m.get(), c.text, true, false);
        CHECK_MESSAGE(got == want, "got" << ids_str(got) << "\nwant" << ids_str(want));
        CHECK(detokenize(m.get(), got, true) == c.text);
        CHECK(detokenize(m.get(), got, false) == c.text);
        n++;
    }
    CHECK(n >= 1);  // the repository's own model at least
}

TEST_CASE("[tokenizer] special tokens of the fixture vocabularies") {
    if (ember_test_data_path("fixtures/vocab/README.md").empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    auto load = [](const char * name) { return load_vocab(ember_test_data_path(std::string("fixtures/vocab/ggml-vocab-") + name + ".gguf")); };
    {
        ember_test_model_ptr m = load("llama-spm");
        CHECK(ember_token_bos(m.get()) == 1);
        CHECK(ember_token_eos(m.get()) == 2);
        CHECK(ember_token_eot(m.get()) == -1);
        CHECK(ember_token_nl(m.get()) == 13);  // <0x0A>
        CHECK(ember_model_add_bos(m.get()) == 1);
        CHECK(ember_token_is_eog(m.get(), 2) == 1);
        CHECK(ember_token_is_control(m.get(), 1) == 1);
        CHECK(tokenize(m.get(), "Hello world", true, false) == std::vector<int32_t>{1, 15043, 3186});
        CHECK(tokenize(m.get(), "<s>Hello</s>", false, true) == std::vector<int32_t>{1, 15043, 2});
    }
    {
        // Phi-3: <|end|> ends a turn; its special tokens swallow the spaces after them.
        ember_test_model_ptr m = load("phi-3");
        CHECK(ember_token_eot(m.get()) == 32007);
        CHECK(ember_token_is_eog(m.get(), 32007) == 1);
        CHECK(ember_token_is_eog(m.get(), 32000) == 1);
        CHECK(ember_token_is_eog(m.get(), 32001) == 0);
        CHECK(tokenize(m.get(), "<|user|>\nHello<|end|>\n<|assistant|>", false, true) == std::vector<int32_t>{32010, 15043, 32007, 32001});
        CHECK(detokenize(m.get(), {32010, 15043, 32007, 32001}, false, true) == "<|user|> Hello<|end|><|assistant|>");
    }
    {
        ember_test_model_ptr m = load("gpt-2");
        CHECK(ember_token_eot(m.get()) == 50256);
        CHECK(ember_token_nl(m.get()) == 198);
        CHECK(ember_model_add_bos(m.get()) == 0);
        CHECK(tokenize(m.get(), "Hello world", true, false) == std::vector<int32_t>{15496, 995});
        CHECK(tokenize(m.get(), "a<|endoftext|>", false, true) == std::vector<int32_t>{64, 50256});
        CHECK(tokenize(m.get(), "a<|endoftext|>", false, false).size() > 2);
    }
    {
        ember_test_model_ptr m = load("deepseek-llm");
        CHECK(ember_token_bos(m.get()) == 100000);
        CHECK(ember_token_eot(m.get()) == 100001);
        CHECK(ember_model_add_bos(m.get()) == 1);
        CHECK(tokenize(m.get(), "Hello", true, false).front() == 100000);
    }
}

TEST_CASE("[tokenizer] streaming detokenizer holds back partial UTF-8") {
    const std::string path = ember_test_data_path("fixtures/vocab/ggml-vocab-llama-spm.gguf");
    if (path.empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    ember_test_model_ptr       m    = load_vocab(path);
    const std::string          text = "Hello \xf0\x9f\xa6\x99 world \xe4\xbd\xa0\xe5\xa5\xbd!";  // 🦙 and 你好 fall back to bytes
    const std::vector<int32_t> ids  = tokenize(m.get(), text, true, false);

    ember_token_stream * s = nullptr;
    REQUIRE(ember_token_stream_create(m.get(), 0, &s) == EMBER_OK);
    std::string out;
    int         n_partial = 0;
    for (int32_t id : ids) {
        char          buf[64];
        const int32_t n = ember_token_stream_push(s, id, buf, sizeof(buf));
        REQUIRE(n >= 0);
        const std::string chunk(buf, static_cast<size_t>(n));
        CHECK(ember_utf8_ok(chunk));
        n_partial += n == 0 && id != 1;
        out += chunk;
    }
    CHECK(n_partial >= 3);  // the first bytes of 🦙 gave nothing yet
    char tail[8];
    CHECK(ember_token_stream_flush(s, tail, sizeof(tail)) == 0);
    // The stream gives every piece as it is: the space SentencePiece put first stays.
    CHECK(out == " " + text);
    CHECK(detokenize(m.get(), ids, true) == text);

    SUBCASE("a buffer too small leaves the token to be pushed again") {
        const int32_t world = tokenize(m.get(), "world", false, false).at(0);  // "▁world"
        char          buf[8];
        std::memset(buf, 'x', sizeof(buf));
        CHECK(ember_token_stream_push(s, world, buf, 3) == 6);
        CHECK(buf[0] == 'x');  // nothing written
        CHECK(ember_token_stream_push(s, world, nullptr, 0) == 6);
        CHECK(ember_token_stream_push(s, world, buf, sizeof(buf)) == 6);
        CHECK(std::string(buf, 6) == " world");
    }
    SUBCASE("flush writes an unfinished sequence as U+FFFD and resets") {
        const int32_t b0 = 3 + 0xf0, b1 = 3 + 0x9f;  // <0xF0> <0x9F>
        char          buf[8];
        CHECK(ember_token_stream_push(s, b0, buf, sizeof(buf)) == 0);
        CHECK(ember_token_stream_push(s, b1, buf, sizeof(buf)) == 0);
        CHECK(ember_token_stream_flush(s, buf, 2) == 3);  // too small: kept
        CHECK(ember_token_stream_flush(s, buf, sizeof(buf)) == 3);
        CHECK(std::string(buf, 3) == "\xef\xbf\xbd");
        CHECK(ember_token_stream_flush(s, buf, sizeof(buf)) == 0);
        CHECK(ember_token_stream_push(s, 3 + 'A', buf, sizeof(buf)) == 1);
        CHECK(buf[0] == 'A');
    }
    SUBCASE("control tokens render only when asked") {
        char buf[16];
        CHECK(ember_token_stream_push(s, 2, buf, sizeof(buf)) == 0);
        ember_token_stream * t = nullptr;
        REQUIRE(ember_token_stream_create(m.get(), 1, &t) == EMBER_OK);
        CHECK(ember_token_stream_push(t, 2, buf, sizeof(buf)) == 4);
        CHECK(std::string(buf, 4) == "</s>");
        ember_token_stream_free(t);
    }
    ember_token_stream_free(s);
}

TEST_CASE("[tokenizer] random bytes and random ids: valid tokens, exact round trips, streams that add up") {
    if (ember_test_data_path("fixtures/vocab/README.md").empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    const char * const chars[] = {"a", "Z", " ", "  ", "\n", "\t", "'s", "1", "42", ".", "<s>", "<|endoftext|>", "\xc3\xa9",
                                  "\xe4\xbd\xa0", "\xf0\x9f\xa6\x99", "\xe2\x80\x8b", "\xc2\xa0"};
    for (const char * name : {"llama-spm", "phi-3", "gpt-2", "starcoder", "deepseek-llm"}) {
        const std::string vname = name;
        CAPTURE(vname);
        ember_test_model_ptr m       = load_vocab(ember_test_data_path("fixtures/vocab/ggml-vocab-" + vname + ".gguf"));
        const int32_t        n_vocab = ember_model_n_vocab(m.get());
        // SentencePiece gives back every byte, deepseek-llm every valid text (its byte tokens of
        // 0xC0 0xC1 0xF5..0xFF, bytes that UTF-8 never uses, are user-defined tokens spelling the
        // GPT-2 characters, and render as those, as in the reference); gpt-2 and starcoder clean
        // up spaces.
        const bool exact_bytes = vname == "llama-spm" || vname == "phi-3";
        const bool exact_text  = exact_bytes || vname == "deepseek-llm";
        std::mt19937 rng(1234);
        for (int iter = 0; iter < 200; iter++) {
            CAPTURE(iter);
            std::string bytes, text;
            const int   n = static_cast<int>(rng() % 48);
            for (int i = 0; i < n; i++) {
                bytes += static_cast<char>(rng() % 256);
                text += chars[rng() % (sizeof(chars) / sizeof(chars[0]))];
            }
            for (bool parse_special : {false, true}) {
                const std::vector<int32_t> ids = tokenize(m.get(), bytes, true, parse_special);
                for (int32_t id : ids) CHECK((id >= 0 && id < n_vocab));
                const std::vector<int32_t> tids = tokenize(m.get(), text, false, parse_special);
                if (exact_bytes && !parse_special) CHECK(detokenize(m.get(), ids, true) == bytes);
                if (exact_text && !parse_special) CHECK(detokenize(m.get(), tids) == text);
            }
            // The stream gives the same bytes as the pieces, whole characters at a time.
            const std::vector<int32_t> tids = tokenize(m.get(), text, false, false);
            ember_token_stream *       st   = nullptr;
            REQUIRE(ember_token_stream_create(m.get(), 0, &st) == EMBER_OK);
            std::string streamed, pieces;
            char        buf[256];
            for (int32_t id : tids) {
                const int32_t k = ember_token_stream_push(st, id, buf, sizeof(buf));
                REQUIRE(k >= 0);
                streamed.append(buf, static_cast<size_t>(k));
                const int32_t p = ember_token_to_piece(m.get(), id, buf, sizeof(buf), 0);
                REQUIRE(p >= 0);
                pieces.append(buf, static_cast<size_t>(p));
            }
            const int32_t k = ember_token_stream_flush(st, buf, sizeof(buf));
            REQUIRE(k >= 0);
            streamed.append(buf, static_cast<size_t>(k));
            ember_token_stream_free(st);
            CHECK(streamed == pieces);
            // Random ids decode without failing.
            std::vector<int32_t> rids(static_cast<size_t>(rng() % 16));
            for (int32_t & id : rids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
            CHECK(ember_detokenize(m.get(), rids.data(), static_cast<int32_t>(rids.size()), buf, sizeof(buf), 0, 1) >= 0);
        }
    }
}

TEST_CASE("[tokenizer] C API misuse gives -1 or an error, never a crash") {
    const std::string path = ember_test_data_path("fixtures/vocab/ggml-vocab-llama-spm.gguf");
    if (path.empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    ember_test_model_ptr m = load_vocab(path);
    const ember_model *  mp = m.get();
    int32_t              t[8];

    CHECK(ember_tokenize(nullptr, "a", 1, t, 8, 0, 0) == -1);
    CHECK(!last_error().empty());
    CHECK(ember_tokenize(mp, nullptr, 0, t, 8, 0, 0) == -1);
    CHECK(ember_tokenize(mp, "a", -2, t, 8, 0, 0) == -1);
    CHECK(ember_tokenize(mp, "a", 1, t, -1, 0, 0) == -1);
    CHECK(ember_tokenize(mp, "a", 1, nullptr, 4, 0, 0) == -1);
    CHECK(ember_tokenize(mp, "Hello world", -1, nullptr, 0, 0, 0) == 2);  // NUL-terminated, count only
    CHECK(last_error().empty());
    // Too small: the full count, and only n_tokens_max ids written.
    t[0] = t[1] = -7;
    CHECK(ember_tokenize(mp, "Hello world", -1, t, 1, 0, 0) == 2);
    CHECK(t[0] == 15043);
    CHECK(t[1] == -7);
    CHECK(ember_tokenize(mp, "", 0, t, 8, 0, 0) == 0);

    char buf[16];
    CHECK(ember_token_to_piece(nullptr, 1, buf, sizeof(buf), 0) == -1);
    CHECK(ember_token_to_piece(mp, -1, buf, sizeof(buf), 0) == -1);
    CHECK(ember_token_to_piece(mp, 32000, buf, sizeof(buf), 0) == -1);
    CHECK(ember_token_to_piece(mp, 15043, buf, -1, 0) == -1);
    CHECK(ember_token_to_piece(mp, 15043, nullptr, 4, 0) == -1);
    CHECK(ember_token_to_piece(mp, 15043, nullptr, 0, 0) == 6);  // " Hello"
    std::memset(buf, 'x', sizeof(buf));
    CHECK(ember_token_to_piece(mp, 15043, buf, 3, 0) == 6);  // snprintf style: at most 3 bytes written
    CHECK(std::string(buf, 4) == " Hex");

    const int32_t ids[] = {15043, 3186};
    const int32_t bad[] = {15043, 99999};
    CHECK(ember_detokenize(nullptr, ids, 2, buf, sizeof(buf), 0, 0) == -1);
    CHECK(ember_detokenize(mp, nullptr, 2, buf, sizeof(buf), 0, 0) == -1);
    CHECK(ember_detokenize(mp, ids, -1, buf, sizeof(buf), 0, 0) == -1);
    CHECK(ember_detokenize(mp, bad, 2, buf, sizeof(buf), 0, 0) == -1);
    CHECK(ember_detokenize(mp, ids, 2, nullptr, 0, 0, 0) == 11);
    CHECK(ember_detokenize(mp, ids, 2, buf, 6, 0, 0) == 11);
    CHECK(std::string(buf) == "Hello");  // truncated, NUL-terminated
    CHECK(ember_detokenize(mp, ids, 0, buf, sizeof(buf), 0, 0) == 0);
    CHECK(buf[0] == '\0');

    ember_token_stream * s = reinterpret_cast<ember_token_stream *>(0x1);
    CHECK(ember_token_stream_create(nullptr, 0, &s) == EMBER_ERR_INVALID_ARG);
    CHECK(s == nullptr);
    CHECK(ember_token_stream_create(mp, 0, nullptr) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_token_stream_push(nullptr, 1, buf, sizeof(buf)) == -1);
    CHECK(ember_token_stream_flush(nullptr, buf, sizeof(buf)) == -1);
    ember_token_stream_free(nullptr);
    REQUIRE(ember_token_stream_create(mp, 0, &s) == EMBER_OK);
    CHECK(ember_token_stream_push(s, 32000, buf, sizeof(buf)) == -1);
    CHECK(ember_token_stream_push(s, 1, buf, -1) == -1);
    ember_token_stream_free(s);

    CHECK(ember_token_eot(nullptr) == -1);
    CHECK(ember_token_nl(nullptr) == -1);
    CHECK(ember_token_is_eog(nullptr, 2) == -1);
    CHECK(ember_token_is_control(nullptr, 1) == -1);
    CHECK(ember_token_is_control(mp, -1) == -1);
    CHECK(ember_model_add_bos(nullptr) == -1);
}

}  // TEST_SUITE
