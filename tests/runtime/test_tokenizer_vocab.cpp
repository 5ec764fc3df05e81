// Tokenizers on small hand-built vocabularies (written with ember_gguf_writer, loaded
// vocab-only through the C API): SPM scores and byte fallback, BPE merge ranks, the
// llama-bpe and qwen2 digit rules, ignore_merges, special tokens, and the validation of
// malformed tokenizer metadata.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/gguf.h"
#include "runtime/unicode.h"
#include "support/data-path.h"
#include "support/fixtures.h"

namespace {

std::string last_error() {
    const char * e = ember_last_error();
    return e ? e : "";
}

// Raw bytes -> GPT-2 alphabet, as byte-level BPE vocabularies store their tokens.
std::string enc(const std::string & raw) {
    std::string out;
    for (char c : raw) ember_utf8_append(out, ember_gpt2_byte_to_cpt(static_cast<uint8_t>(c)));
    return out;
}

std::string write_gguf(const ember_gguf_writer & w) {
    static std::atomic<int> n{0};
    const std::string       path = ember_test_tmp_dir() + "/vocab-" + std::to_string(n++) + ".gguf";
    w.write_to_file(path);
    return path;
}

// Loads vocab-only; returns the status, the model in `out` when it is EMBER_OK.
ember_status load(const ember_gguf_writer & w, ember_test_model_ptr & out) {
    ember_model_params mp = ember_model_default_params();
    mp.vocab_only         = 1;
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(write_gguf(w).c_str(), &mp, &m);
    out.reset(m);
    return st;
}

ember_test_model_ptr load_ok(const ember_gguf_writer & w) {
    ember_test_model_ptr m;
    REQUIRE_MESSAGE(load(w, m) == EMBER_OK, last_error());
    return m;
}

std::vector<int32_t> tok(const ember_model * m, const std::string & text, bool add_special = false, bool parse_special = false) {
    std::vector<int32_t> ids(text.size() + 8);
    const int32_t n = ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), ids.data(), static_cast<int32_t>(ids.size()),
                                     add_special, parse_special);
    REQUIRE_MESSAGE(n >= 0, last_error());
    REQUIRE(n <= static_cast<int32_t>(ids.size()));
    ids.resize(static_cast<size_t>(n));
    return ids;
}

std::string detok(const ember_model * m, const std::vector<int32_t> & ids, bool remove_special = false, bool unparse = false) {
    char          buf[512];
    const int32_t n = ember_detokenize(m, ids.data(), static_cast<int32_t>(ids.size()), buf, sizeof(buf), remove_special, unparse);
    REQUIRE_MESSAGE(n >= 0, last_error());
    REQUIRE(n < static_cast<int32_t>(sizeof(buf)));
    return std::string(buf, static_cast<size_t>(n));
}

std::string piece(const ember_model * m, int32_t id, bool special) {
    char          buf[64];
    const int32_t n = ember_token_to_piece(m, id, buf, sizeof(buf), special);
    REQUIRE_MESSAGE(n >= 0, last_error());
    return std::string(buf, static_cast<size_t>(n));
}

//
// A byte-level BPE vocabulary: ids 0..255 are the bytes, then one token per merge result,
// then `extra` (normal) and `special` (text, GGUF token type) tokens.
//
struct bpe_vocab {
    std::vector<std::string>                  tokens;
    std::vector<int32_t>                      types;
    std::vector<std::string>                  merges;  // raw text, "a b"

    int32_t id(const std::string & raw) const {
        const std::string e = enc(raw);
        for (size_t i = 0; i < tokens.size(); i++) {
            if (tokens[i] == e || (types[i] != 1 && tokens[i] == raw)) return static_cast<int32_t>(i);
        }
        FAIL("no token " << raw);
        return -1;
    }
};

bpe_vocab make_bpe(const std::vector<std::string> & merges, const std::vector<std::string> & extra = {},
                   const std::vector<std::pair<std::string, int32_t>> & special = {}) {
    bpe_vocab v;
    for (int b = 0; b < 256; b++) {
        v.tokens.push_back(enc(std::string(1, static_cast<char>(b))));
        v.types.push_back(1);
    }
    auto add = [&](const std::string & t, int32_t type) {
        for (const std::string & x : v.tokens) {
            if (x == t) return;
        }
        v.tokens.push_back(t);
        v.types.push_back(type);
    };
    for (const std::string & m : merges) {
        const size_t cut = m.find(' ', 1);
        add(enc(m.substr(0, cut) + m.substr(cut + 1)), 1);
        v.merges.push_back(enc(m.substr(0, cut)) + " " + enc(m.substr(cut + 1)));
    }
    for (const std::string & t : extra) add(enc(t), 1);
    for (const auto & s : special) add(s.first, s.second);
    return v;
}

ember_gguf_writer bpe_writer(const bpe_vocab & v, const std::string & pre) {
    ember_gguf_writer w;
    w.set_str("general.architecture", "llama");
    w.set_str("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) w.set_str("tokenizer.ggml.pre", pre);
    w.set_arr_str("tokenizer.ggml.tokens", v.tokens);
    w.set_arr_i32("tokenizer.ggml.token_type", v.types);
    w.set_arr_str("tokenizer.ggml.merges", v.merges);
    return w;
}

//
// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then `pieces`
// with their scores ("_" stands for U+2581 in the piece texts).
//
constexpr int32_t k_spm_byte0 = 3;

std::string sp(const std::string & s) {
    std::string out;
    for (char c : s) out += c == '_' ? std::string("\xe2\x96\x81") : std::string(1, c);
    return out;
}

ember_gguf_writer spm_writer(const std::vector<std::pair<std::string, float>> & pieces, bool byte_tokens = true,
                             const std::vector<std::string> & user = {}) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float>       scores = {0, 0, 0};
    std::vector<int32_t>     types  = {2, 3, 3};
    if (byte_tokens) {
        for (int b = 0; b < 256; b++) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
            tokens.push_back(hex);
            scores.push_back(0);
            types.push_back(6);
        }
    }
    for (const auto & p : pieces) {
        tokens.push_back(sp(p.first));
        scores.push_back(p.second);
        types.push_back(1);
    }
    for (const std::string & u : user) {
        tokens.push_back(u);
        scores.push_back(0);
        types.push_back(4);
    }
    ember_gguf_writer w;
    w.set_str("general.architecture", "llama");
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_str("tokenizer.ggml.pre", "default");
    w.set_arr_str("tokenizer.ggml.tokens", tokens);
    w.set_arr_f32("tokenizer.ggml.scores", scores);
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    return w;
}

const std::vector<std::pair<std::string, float>> k_spm_pieces = {
    {"_", -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -5}, {"bc", -3}, {"_a", -4},
};
// Ids of k_spm_pieces in a vocabulary with byte tokens.
constexpr int32_t k_sp_space = 259, k_sp_a = 260, k_sp_b = 261, k_sp_c = 262, k_sp_ab = 263, k_sp_bc = 264, k_sp_space_a = 265;

using ids = std::vector<int32_t>;

}  // namespace

TEST_SUITE("tokenizer") {

TEST_CASE("[tokenizer] spm: highest score first, leftmost on ties, byte fallback") {
    ember_gguf_writer w = spm_writer(k_spm_pieces, true, {"<user>"});
    SUBCASE("without a space prefix") {
        w.set_bool("tokenizer.ggml.add_space_prefix", false);
        ember_test_model_ptr m = load_ok(w);
        CHECK(tok(m.get(), "abc") == ids{k_sp_a, k_sp_bc});  // "bc" (-3) beats "ab" (-5)
        CHECK(tok(m.get(), "abab") == ids{k_sp_ab, k_sp_ab});
        CHECK(tok(m.get(), "aaa") == ids{k_sp_a, k_sp_a, k_sp_a});
        CHECK(tok(m.get(), "\xc3\xa9") == ids{k_spm_byte0 + 0xC3, k_spm_byte0 + 0xA9});  // é: no token, its bytes
        CHECK(tok(m.get(), "") == ids{});
        CHECK(detok(m.get(), tok(m.get(), "abc")) == "abc");
        CHECK(detok(m.get(), tok(m.get(), " abc \xc3\xa9")) == " abc \xc3\xa9");  // nothing to remove
    }
    SUBCASE("with the default space prefix") {
        ember_test_model_ptr m = load_ok(w);
        // "▁abc": "bc" (-3), then "▁a" (-4); "▁abc" and "abc" are no tokens.
        CHECK(tok(m.get(), "abc") == ids{k_sp_space_a, k_sp_bc});
        CHECK(tok(m.get(), "a b") == ids{k_sp_space_a, k_sp_space, k_sp_b});
        CHECK(tok(m.get(), " a") == ids{k_sp_space, k_sp_space_a});
        CHECK(detok(m.get(), tok(m.get(), "a b")) == "a b");  // the prefix space is removed again
        CHECK(detok(m.get(), tok(m.get(), " a")) == " a");
        CHECK(tok(m.get(), "") == ids{});

        // BOS: added as the metadata asks (SPM default: add BOS), and dropped or hidden again.
        CHECK(ember_model_add_bos(m.get()) == 1);
        CHECK(tok(m.get(), "abc", true) == ids{1, k_sp_space_a, k_sp_bc});
        CHECK(tok(m.get(), "", true) == ids{1});
        CHECK(detok(m.get(), {1, k_sp_space_a, k_sp_bc}, true) == "abc");
        CHECK(detok(m.get(), {1, k_sp_space_a, k_sp_bc}, false) == "abc");
        CHECK(detok(m.get(), {1, k_sp_space_a, k_sp_bc, 2}, false, true) == "<s> abc</s>");
        CHECK(detok(m.get(), {1, k_sp_space_a, k_sp_bc, 2}, true, true) == "abc");

        // Special tokens are text unless parse_special; the text after one gets a space prefix.
        CHECK(tok(m.get(), "<s>abc", false, true) == ids{1, k_sp_space_a, k_sp_bc});
        const ids plain = tok(m.get(), "<s>abc");
        CHECK(std::find(plain.begin(), plain.end(), 1) == plain.end());
        CHECK(detok(m.get(), plain) == "<s>abc");
        const int32_t user = 266;
        CHECK(tok(m.get(), "a<user>", false, true) == ids{k_sp_space_a, user});
        const ids user_plain = tok(m.get(), "a<user>");
        CHECK(std::find(user_plain.begin(), user_plain.end(), user) == user_plain.end());
        CHECK(detok(m.get(), {k_sp_space_a, user}) == "a<user>");  // user-defined tokens always render

        // Pieces.
        CHECK(piece(m.get(), 1, false) == "");
        CHECK(piece(m.get(), 1, true) == "<s>");
        CHECK(piece(m.get(), 0, false) == "");  // <unk> renders only when asked
        CHECK(piece(m.get(), k_sp_space_a, false) == " a");
        CHECK(piece(m.get(), k_spm_byte0 + 0xC3, false) == "\xc3");
        CHECK(ember_token_nl(m.get()) == k_spm_byte0 + '\n');
        CHECK(ember_token_eot(m.get()) == -1);
        CHECK(ember_token_is_eog(m.get(), 2) == 1);
        CHECK(ember_token_is_eog(m.get(), 1) == 0);
        CHECK(ember_token_is_control(m.get(), 1) == 1);
        CHECK(ember_token_is_control(m.get(), k_sp_a) == 0);
        CHECK(ember_token_is_control(m.get(), 0) == 0);  // <unk> is "unknown", not control
    }
    SUBCASE("no byte tokens: unknown characters become <unk>") {
        w = spm_writer(k_spm_pieces, false);
        w.set_bool("tokenizer.ggml.add_space_prefix", false);
        ember_test_model_ptr m = load_ok(w);
        CHECK(tok(m.get(), "a\xc3\xa9") == ids{3 + 1, 0});
        CHECK(ember_token_nl(m.get()) == -1);
    }
}

TEST_CASE("[tokenizer] bpe: merges by rank, leftmost on ties") {
    SUBCASE("rank order decides") {
        bpe_vocab v = make_bpe({"b c", "a b"});
        ember_test_model_ptr m = load_ok(bpe_writer(v, "gpt-2"));
        CHECK(tok(m.get(), "abc") == ids{v.id("a"), v.id("bc")});
        v = make_bpe({"a b", "b c"});
        m = load_ok(bpe_writer(v, "gpt-2"));
        CHECK(tok(m.get(), "abc") == ids{v.id("ab"), v.id("c")});
    }
    SUBCASE("ties go to the left, merges chain") {
        const bpe_vocab      v = make_bpe({"a a", "aa a", "h e", "l l", "he ll", "hell o", "  w", " w o"});
        ember_test_model_ptr m = load_ok(bpe_writer(v, "gpt-2"));
        CHECK(tok(m.get(), "aaa") == ids{v.id("aaa")});
        CHECK(tok(m.get(), "aaaa") == ids{v.id("aa"), v.id("aa")});  // both "a a" first, then no "aa aa"
        CHECK(tok(m.get(), "hello wo") == ids{v.id("hello"), v.id(" wo")});
        CHECK(tok(m.get(), "hello\n") == ids{v.id("hello"), v.id("\n")});
        CHECK(detok(m.get(), tok(m.get(), "hello wo\xc3\xa9\n")) == "hello wo\xc3\xa9\n");
        CHECK(piece(m.get(), v.id(" wo"), false) == " wo");
        CHECK(ember_token_nl(m.get()) == v.id("\n"));
        CHECK(ember_model_add_bos(m.get()) == 0);
        // Invalid UTF-8 goes through byte for byte.
        CHECK(tok(m.get(), "a\xff") == ids{v.id("a"), v.id("\xff")});
        CHECK(detok(m.get(), tok(m.get(), "\xff\xfe")) == "\xff\xfe");
    }
}

TEST_CASE("[tokenizer] bpe: llama-bpe and qwen2 digit rules, ignore_merges") {
    const bpe_vocab v = make_bpe({"1 2", "12 3", "4 5", "x y"}, {"xyz"});
    SUBCASE("llama-bpe: numbers in groups of three; a piece that is a token is kept whole") {
        ember_gguf_writer w = bpe_writer(v, "llama-bpe");
        w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.id("x")));
        ember_test_model_ptr m = load_ok(w);
        CHECK(tok(m.get(), "12345") == ids{v.id("123"), v.id("45")});
        CHECK(tok(m.get(), "xyz") == ids{v.id("xyz")});  // no merge makes "xyz", ignore_merges does
        CHECK(ember_model_add_bos(m.get()) == 1);         // the llama-bpe default
        CHECK(tok(m.get(), "12", true) == ids{v.id("x"), v.id("12")});
    }
    SUBCASE("qwen2: single digits") {
        ember_test_model_ptr m = load_ok(bpe_writer(v, "qwen2"));
        CHECK(tok(m.get(), "12345") == ids{v.id("1"), v.id("2"), v.id("3"), v.id("4"), v.id("5")});
        CHECK(tok(m.get(), "xyz") == ids{v.id("xy"), v.id("z")});
        CHECK(ember_model_add_bos(m.get()) == 0);
    }
    SUBCASE("gpt-2: whole numbers, merges only") {
        ember_test_model_ptr m = load_ok(bpe_writer(v, "gpt-2"));
        CHECK(tok(m.get(), "12345") == ids{v.id("123"), v.id("45")});
        CHECK(tok(m.get(), "123123") == ids{v.id("123"), v.id("123")});
        CHECK(tok(m.get(), "xyz") == ids{v.id("xy"), v.id("z")});
    }
    SUBCASE("metadata overrides the pre-tokenizer's add_bos default") {
        ember_gguf_writer w = bpe_writer(v, "llama-bpe");
        w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.id("x")));
        w.set_bool("tokenizer.ggml.add_bos_token", false);
        ember_test_model_ptr m = load_ok(w);
        CHECK(ember_model_add_bos(m.get()) == 0);
        CHECK(tok(m.get(), "12", true) == ids{v.id("12")});
    }
}

TEST_CASE("[tokenizer] bpe: special and user-defined tokens") {
    const bpe_vocab v = make_bpe({"h i"}, {}, {{"<|begin|>", 3}, {"<|eot_id|>", 3}, {"<|tool|>", 4}, {"<|tool|>x", 4}});
    ember_gguf_writer w = bpe_writer(v, "llama-bpe");
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.id("<|begin|>")));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.id("<|eot_id|>")));
    ember_test_model_ptr m   = load_ok(w);
    const int32_t        bos = v.id("<|begin|>"), eot = v.id("<|eot_id|>"), tool = v.id("<|tool|>"), toolx = v.id("<|tool|>x");

    CHECK(tok(m.get(), "hi", true) == ids{bos, v.id("hi")});
    CHECK(tok(m.get(), "hi<|eot_id|>hi", false, true) == ids{v.id("hi"), eot, v.id("hi")});
    CHECK(tok(m.get(), "<|begin|><|begin|>", false, true) == ids{bos, bos});
    const ids plain = tok(m.get(), "hi<|eot_id|>");
    CHECK(plain.size() > 3);
    CHECK(std::find(plain.begin(), plain.end(), eot) == plain.end());
    CHECK(detok(m.get(), plain) == "hi<|eot_id|>");
    // Longest match first; user-defined tokens only with parse_special (as include/ember.h says).
    CHECK(tok(m.get(), "<|tool|>x<|tool|>", false, true) == ids{toolx, tool});
    const ids user_plain = tok(m.get(), "<|tool|>");
    CHECK(std::find(user_plain.begin(), user_plain.end(), tool) == user_plain.end());

    CHECK(ember_token_eot(m.get()) == eot);
    CHECK(ember_token_is_eog(m.get(), eot) == 1);
    CHECK(ember_token_is_eog(m.get(), v.id("hi")) == 0);
    CHECK(ember_token_is_eog(m.get(), -5) == 0);
    CHECK(ember_token_is_control(m.get(), eot) == 1);
    CHECK(ember_token_is_control(m.get(), tool) == 0);
    CHECK(ember_token_is_control(m.get(), v.id("hi")) == 0);
    CHECK(ember_token_is_control(m.get(), 100000) == -1);
    CHECK(ember_token_bos(m.get()) == bos);
    CHECK(ember_token_eos(m.get()) == eot);

    const ids all = {bos, v.id("hi"), tool, eot};
    CHECK(detok(m.get(), all) == "hi<|tool|>");
    CHECK(detok(m.get(), all, false, true) == "<|begin|>hi<|tool|><|eot_id|>");
    CHECK(detok(m.get(), all, true, true) == "hi<|tool|>");
}

TEST_CASE("[tokenizer] malformed tokenizer metadata is refused, naming the key") {
    struct bad_case {
        const char * what;
        const char * key;  // must appear in the message
        void (*edit)(ember_gguf_writer & w);
    };
    const bad_case cases[] = {
        {"scores shorter than tokens", "tokenizer.ggml.scores",
         [](ember_gguf_writer & w) { w.set_arr_f32("tokenizer.ggml.scores", {0.0f, 1.0f}); }},
        {"scores of the wrong type", "tokenizer.ggml.scores",
         [](ember_gguf_writer & w) { w.set_arr_str("tokenizer.ggml.scores", {"x"}); }},
        {"token types shorter than tokens", "tokenizer.ggml.token_type",
         [](ember_gguf_writer & w) { w.set_arr_i32("tokenizer.ggml.token_type", {1, 1}); }},
        {"an unknown token type", "tokenizer.ggml.token_type",
         [](ember_gguf_writer & w) {
             std::vector<int32_t> t(259 + k_spm_pieces.size(), 1);
             t[5] = 9;
             w.set_arr_i32("tokenizer.ggml.token_type", t);
         }},
        {"a BOS id past the end", "tokenizer.ggml.bos_token_id", [](ember_gguf_writer & w) { w.set_u32("tokenizer.ggml.bos_token_id", 100000); }},
        {"a negative EOS id", "tokenizer.ggml.eos_token_id", [](ember_gguf_writer & w) { w.set_i32("tokenizer.ggml.eos_token_id", -1); }},
        {"an EOT id of the wrong type", "tokenizer.ggml.eot_token_id", [](ember_gguf_writer & w) { w.set_str("tokenizer.ggml.eot_token_id", "7"); }},
        {"a duplicate token", "tokenizer.ggml.tokens",
         [](ember_gguf_writer & w) {
             std::vector<std::string> t = {"<unk>", "<s>", "</s>", "a", "a"};
             w.set_arr_str("tokenizer.ggml.tokens", t);
             w.set_arr_f32("tokenizer.ggml.scores", std::vector<float>(t.size(), 0.0f));
             w.set_arr_i32("tokenizer.ggml.token_type", std::vector<int32_t>(t.size(), 1));
         }},
        {"no tokenizer model", "tokenizer.ggml.model",
         [](ember_gguf_writer & w) {
             ember_gguf_writer c;
             for (const ember_gguf_kv & kv : w.kv) {
                 if (kv.key != "tokenizer.ggml.model") c.set_value(kv.key, kv.value);
             }
             w = c;
         }},
        {"add_bos without a BOS", "tokenizer.ggml.add_bos_token",
         [](ember_gguf_writer & w) {
             w.set_str("tokenizer.ggml.model", "gpt2");
             w.set_str("tokenizer.ggml.pre", "gpt-2");
             w.set_arr_str("tokenizer.ggml.merges", {});
             ember_gguf_writer c;
             for (const ember_gguf_kv & kv : w.kv) {
                 if (kv.key != "tokenizer.ggml.bos_token_id") c.set_value(kv.key, kv.value);
             }
             w = c;
             w.set_bool("tokenizer.ggml.add_bos_token", true);
         }},
        {"gpt2 without merges", "tokenizer.ggml.merges", [](ember_gguf_writer & w) { w.set_str("tokenizer.ggml.model", "gpt2"); }},
        {"a merge that is not two tokens", "tokenizer.ggml.merges",
         [](ember_gguf_writer & w) {
             w.set_str("tokenizer.ggml.model", "gpt2");
             w.set_arr_str("tokenizer.ggml.merges", {"ab"});
         }},
        {"an add_space_prefix that is no bool", "tokenizer.ggml.add_space_prefix",
         [](ember_gguf_writer & w) { w.set_u32("tokenizer.ggml.add_space_prefix", 1); }},
    };
    for (const bad_case & c : cases) {
        const std::string what = c.what;
        CAPTURE(what);
        ember_gguf_writer w = spm_writer(k_spm_pieces);
        c.edit(w);
        ember_test_model_ptr m;
        CHECK(load(w, m) == EMBER_ERR_BAD_FORMAT);
        CHECK(m == nullptr);
        CHECK_MESSAGE(last_error().find(c.key) != std::string::npos, last_error());
    }
}

TEST_CASE("[tokenizer] unsupported tokenizers load but do not tokenize") {
    SUBCASE("an unknown pre-tokenizer") {
        const bpe_vocab      v = make_bpe({"h i"});
        ember_test_model_ptr m = load_ok(bpe_writer(v, "tekken-next"));
        int32_t              t[8];
        CHECK(ember_tokenize(m.get(), "hi", 2, t, 8, 0, 0) == -1);
        CHECK(last_error().find("tekken-next") != std::string::npos);
        CHECK(piece(m.get(), v.id("hi"), false) == "hi");  // decoding still works
        CHECK(detok(m.get(), {v.id("hi"), v.id(" ")}) == "hi ");
    }
    SUBCASE("an unknown tokenizer model") {
        ember_gguf_writer w = spm_writer(k_spm_pieces);
        w.set_str("tokenizer.ggml.model", "bert");
        ember_test_model_ptr m = load_ok(w);
        int32_t              t[8];
        CHECK(ember_tokenize(m.get(), "hi", 2, t, 8, 0, 0) == -1);
        CHECK(last_error().find("bert") != std::string::npos);
    }
    SUBCASE("no pre-tokenizer key: llama.cpp's default") {
        const bpe_vocab      v = make_bpe({"h i", "1 2", "12 3"});
        ember_test_model_ptr m = load_ok(bpe_writer(v, ""));
        CHECK(tok(m.get(), "hi, 1234") == ids{v.id("hi"), v.id(","), v.id(" "), v.id("123"), v.id("4")});
    }
}

}  // TEST_SUITE
