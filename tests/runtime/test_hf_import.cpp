// Hugging Face folder import (runtime/hf-import.cpp, hf-tokenizer.cpp, safetensors.cpp):
// - round trips: GGUF model -> HF folder (tests/support/hf-export) -> ember_source_from_hf ->
//   GGUF, for generated tiny models and the tiny fixture models: every tensor byte-identical,
//   the loader's metadata equal, the same logits and the same tokenization;
// - the tokenizer round trip on the llama.cpp vocab fixtures: the imported vocabulary
//   tokenizes every .inp text to the .out ids;
// - llama's Q/K row permutation against llama.cpp's permute(), the llama3 rope factors, rope
//   scaling keys, chat template forms;
// - malformed folders and hostile safetensors files: clear ember_error, never a crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/hf-import.h"
#include "runtime/model-source.h"
#include "runtime/safetensors.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/hf-export.h"
#include "support/tiny-model.h"

namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string & name) {
    static int  n   = 0;
    std::string dir = ember_test_tmp_dir() + "/hf-" + name + "-" + std::to_string(n++);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string last_error() {
    const char * e = ember_last_error();
    return e ? e : "";
}

// Runs f, which must throw ember_error with `status` and a message containing `needle`.
template <typename F> void expect_error(F && f, ember_status status, const std::string & needle) {
    try {
        f();
        FAIL_CHECK("no error; expected one mentioning '" << needle << "'");
    } catch (const ember_error & e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        CHECK(e.status == status);
        CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, "message lacks '" << needle << "'");
    }
}

float to_f32(const uint8_t * p, ember_type t, size_t i) {
    if (t == EMBER_TYPE_F32) {
        float x;
        std::memcpy(&x, p + 4 * i, 4);
        return x;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return t == EMBER_TYPE_F16 ? ember_half_to_float(h) : ember_bf16_to_float(h);
}

// Tensor bytes converted to `to` (the exporter's conversion, to predict the import's output).
std::vector<uint8_t> convert(const uint8_t * src, ember_type from, size_t n, ember_type to) {
    std::vector<uint8_t> out(n * (to == EMBER_TYPE_F32 ? 4 : 2));
    if (from == to) {
        std::memcpy(out.data(), src, out.size());
        return out;
    }
    for (size_t i = 0; i < n; i++) {
        const float x = to_f32(src, from, i);
        if (to == EMBER_TYPE_F32) {
            std::memcpy(out.data() + 4 * i, &x, 4);
        } else {
            const uint16_t h = to == EMBER_TYPE_F16 ? ember_float_to_half(x) : ember_float_to_bf16(x);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

// Writes a source as GGUF with Ember's writer. norms_to_f32 stores non-F32 1-D tensors as F32,
// as the quantize step does (the loader wants F32 norms).
void write_source(const ember_model_source & src, const std::string & path, bool norms_to_f32 = true) {
    ember_gguf_writer w;
    for (const ember_gguf_kv & kv : src.kv) w.set_value(kv.key, kv.value);
    for (const ember_source_tensor & t : src.tensors) {
        std::vector<uint8_t> buf(t.nbytes);
        t.read(buf.data());
        ember_type type = t.type;
        if (norms_to_f32 && t.n_dims == 1 && type != EMBER_TYPE_F32) {
            buf  = convert(buf.data(), type, static_cast<size_t>(t.ne[0]), EMBER_TYPE_F32);
            type = EMBER_TYPE_F32;
        }
        w.add_tensor(t.name, type, t.n_dims, t.ne, buf.data());
    }
    w.write_to_file(path);
}

bool same_value(const ember_gguf_value & a, const ember_gguf_value & b) {
    if (a.type != b.type) return false;
    if (a.type == EMBER_GGUF_STRING) return a.str == b.str;
    if (a.type == EMBER_GGUF_ARRAY) {
        return a.arr_type == b.arr_type && a.arr_n == b.arr_n && a.arr_data == b.arr_data && a.arr_str == b.arr_str;
    }
    return a.to_string() == b.to_string();
}

// Token types may differ where tokenizer.json cannot say: llama.cpp's "[PAD<id>]" padding
// comes back UNUSED, and the model's unknown token comes back UNKNOWN.
bool type_ok(int32_t orig, int32_t got, size_t id, const std::string & text, int64_t unk_id) {
    if (orig == got) return true;
    if (text == "[PAD" + std::to_string(id) + "]" && got == 5) return true;
    return static_cast<int64_t>(id) == unk_id && got == 2 && (orig == 3 || orig == 2);
}

// The tokenizer metadata of `got` matches `orig` (tokens, types, merges, specials, flags).
void check_tokenizer_meta(const ember_gguf_file & orig, const ember_gguf_file & got) {
    for (const std::string key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                             "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                             "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}) {
        CAPTURE(key);
        const ember_gguf_value * a = orig.find(key);
        const ember_gguf_value * b = got.find(key);
        if (!a) continue;
        REQUIRE_MESSAGE(b, "imported file lacks " << key);
        CHECK(same_value(*a, *b));
    }
    if (orig.get_str("tokenizer.ggml.model", "") == "gpt2") CHECK(orig.get_str("tokenizer.ggml.pre", "") == got.get_str("tokenizer.ggml.pre", "?"));
    if (orig.find("tokenizer.ggml.add_space_prefix")) {
        CHECK(orig.get_bool("tokenizer.ggml.add_space_prefix", false) == got.get_bool("tokenizer.ggml.add_space_prefix", true));
    }
    const ember_gguf_value * ta   = orig.find("tokenizer.ggml.token_type");
    const ember_gguf_value * tb   = got.find("tokenizer.ggml.token_type");
    const ember_gguf_value * toks = orig.find("tokenizer.ggml.tokens");
    REQUIRE(ta);
    REQUIRE(tb);
    REQUIRE(ta->arr_n == tb->arr_n);
    const ember_gguf_value * unk    = orig.find("tokenizer.ggml.unknown_token_id");
    const int64_t            unk_id = unk ? unk->as_i64("unk") : -1;
    int                      bad    = 0;
    for (size_t i = 0; i < ta->arr_n; i++) {
        int32_t a, b;
        std::memcpy(&a, ta->arr_data.data() + 4 * i, 4);
        std::memcpy(&b, tb->arr_data.data() + 4 * i, 4);
        if (!type_ok(a, b, i, toks->arr_str[i], unk_id) && bad++ < 5) FAIL_CHECK("token " << i << " '" << toks->arr_str[i] << "': type " << a << " became " << b);
    }
    CHECK(bad == 0);
}

std::vector<int32_t> tokenize(const ember_model * m, const std::string & text, bool add_special, bool parse_special) {
    const int32_t n = ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), nullptr, 0, add_special, parse_special);
    REQUIRE_MESSAGE(n >= 0, last_error());
    std::vector<int32_t> ids(static_cast<size_t>(n));
    REQUIRE(ember_tokenize(m, text.data(), static_cast<int32_t>(text.size()), ids.data(), n, add_special, parse_special) == n);
    return ids;
}

const char * const k_texts[] = {
    "Once upon a time, there was a little robot who loved to read books about the stars.",
    " hello  world\n\tand 123 digits, 4567!",
    "",
    u8"\u00fcn\u00efc\u00f6d\u00e9 \u65e5\u672c\u8a9e",
    "<s> special </s> tokens",
    "the theater there then thee",
};

struct round_trip_case {
    std::string                  name;
    std::string                  gguf;  // the original model
    ember_test_hf_export_options opt;
};

// Export -> import -> GGUF, then compare with the original: tensors, metadata, logits, tokens.
void check_round_trip(const round_trip_case & rc) {
    CAPTURE(rc.name);
    const std::string dir = fresh_dir(rc.name);
    ember_test_hf_export(rc.gguf, dir, rc.opt);
    REQUIRE(ember_path_is_hf_folder(dir));
    if (rc.opt.shard_bytes) CHECK(fs::exists(dir + "/model.safetensors.index.json"));

    std::unique_ptr<ember_model_source> src;
    try {
        src = ember_source_from_hf(dir);
    } catch (const ember_error & e) {
        FAIL(e.what());
    }
    const std::string out = dir + "/imported.gguf";
    write_source(*src, out);
    auto orig = ember_gguf_open(rc.gguf);
    auto got  = ember_gguf_open(out);

    // Tensors: the same set, each with the expected type and bytes.
    CHECK(got->tensors.size() == orig->tensors.size());
    for (const ember_gguf_tensor_info & a : orig->tensors) {
        CAPTURE(a.name);
        const ember_gguf_tensor_info * b = got->tensor(a.name);
        REQUIRE_MESSAGE(b, "missing after import");
        CHECK(b->n_dims == a.n_dims);
        for (int d = 0; d < 4; d++) CHECK(b->ne[d] == a.ne[d]);
        ember_type expect = a.type;
        if (rc.opt.dtype >= 0 && a.n_dims > 1) expect = static_cast<ember_type>(rc.opt.dtype);
        REQUIRE(b->type == expect);
        const size_t n     = static_cast<size_t>(a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3]);
        auto         bytes = convert(orig->tensor_data(a), a.type, n, expect);
        if (rc.opt.dtype_1d && a.n_dims == 1 && rc.opt.dtype != EMBER_TYPE_F32) {
            // stored in the checkpoint as F16/BF16, written back as F32: the rounded values
            bytes = convert(convert(orig->tensor_data(a), a.type, n, static_cast<ember_type>(rc.opt.dtype)).data(),
                            static_cast<ember_type>(rc.opt.dtype), n, EMBER_TYPE_F32);
        }
        REQUIRE(b->nbytes == bytes.size());
        CHECK_MESSAGE(std::memcmp(got->tensor_data(*b), bytes.data(), bytes.size()) == 0, "bytes differ");
    }

    // Metadata the loader reads.
    const std::string A = orig->get_str("general.architecture", "");
    CHECK(got->get_str("general.architecture", "") == A);
    for (const char * k : {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
                           "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base", "attention.key_length",
                           "attention.value_length", "rope.dimension_count", "vocab_size", "rope.scaling.type", "rope.scaling.factor"}) {
        const std::string key = A + "." + k;
        CAPTURE(key);
        const ember_gguf_value * a = orig->find(key);
        if (!a) continue;
        const ember_gguf_value * b = got->find(key);
        REQUIRE_MESSAGE(b, "missing after import");
        CHECK(same_value(*a, *b));
    }
    check_tokenizer_meta(*orig, *got);

    // The same model: logits and tokenization.
    ember_test_model_ptr m_orig, m_got;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(rc.gguf, m_orig, err) == EMBER_OK, err);
    REQUIRE_MESSAGE(ember_test_load_model(out, m_got, err) == EMBER_OK, err);
    const std::vector<int32_t> tokens = {1, 5, 9, 20, 33, 7, 2, 40};
    ember_test_run_params      p;
    ember_test_run_result      ra, rb;
    REQUIRE_MESSAGE(ember_test_run(m_orig.get(), tokens, 0, p, ra, err) == EMBER_OK, err);
    REQUIRE_MESSAGE(ember_test_run(m_got.get(), tokens, 0, p, rb, err) == EMBER_OK, err);
    REQUIRE(ra.logits.size() == rb.logits.size());
    const int32_t n_vocab = static_cast<int32_t>(ra.logits.size() / tokens.size());
    const auto    diff    = ember_test_compare_logits(ra.logits, rb.logits, n_vocab, 0.0);
    // Same weights and hyperparameters give the same arithmetic; rounded weights a little off.
    const bool rounded = rc.opt.dtype >= 0 && orig->tensors[0].type != static_cast<ember_type>(rc.opt.dtype);
    CAPTURE(diff.summary());
    CHECK(diff.finite);
    if (rounded) {
        CHECK(diff.rel_max() < 5e-2);
    } else {
        CHECK(diff.max_abs == 0.0);
    }
    for (const std::string text : k_texts) {
        CAPTURE(text);
        for (int mode = 0; mode < 3; mode++) {
            CHECK(tokenize(m_orig.get(), text, mode > 0, mode > 1) == tokenize(m_got.get(), text, mode > 0, mode > 1));
        }
    }
}

tiny_model_spec spec(const std::string & arch, int32_t type) {
    tiny_model_spec s;
    s.arch        = arch;
    s.weight_type = type;
    s.n_vocab     = 96;
    s.n_embd      = 64;
    s.n_layer     = 2;
    s.n_head      = 4;
    s.n_head_kv   = 2;
    s.n_ff        = 96;
    s.seed        = 7;
    return s;
}

// A folder exported from a generated tiny model, to be damaged by a test.
std::string exported_tiny(const std::string & arch, const ember_test_hf_export_options & opt = {}) {
    const std::string gdir = fresh_dir("gguf");
    const std::string path = ember_test_make_tiny_model(spec(arch, EMBER_TYPE_F32), gdir);
    const std::string dir  = fresh_dir("folder-" + arch);
    ember_test_hf_export(path, dir, opt);
    return dir;
}

void edit_json(const std::string & path, const std::function<void(ember_json &)> & edit) {
    ember_json j = ember_hf_read_json(path);
    edit(j);
    ember_test_write_text(path, ember_json_dump(j));
}

void set_member(ember_json & o, const std::string & key, ember_json v) {
    for (auto & kv : o.obj) {
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    }
    o.obj.emplace_back(key, std::move(v));
}

void erase_member(ember_json & o, const std::string & key) {
    o.obj.erase(std::remove_if(o.obj.begin(), o.obj.end(), [&](const auto & kv) { return kv.first == key; }), o.obj.end());
}

ember_json json_of(const std::string & text) { return ember_json_parse(text); }

// Rewrites model.safetensors through `edit` on its tensor list.
void edit_weights(const std::string & dir, const std::function<void(std::vector<ember_test_st_tensor> &)> & edit) {
    std::vector<ember_test_st_tensor> ts;
    {
        auto f = ember_safetensors_open(dir + "/model.safetensors");
        for (const ember_st_tensor & t : f->tensors) ts.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(f->data(t), f->data(t) + t.nbytes)});
    }
    edit(ts);
    ember_test_write_file(dir + "/model.safetensors", ember_test_safetensors_bytes(ts));
}

const ember_source_tensor * find_tensor(const ember_model_source & s, const std::string & name) {
    for (const ember_source_tensor & t : s.tensors) {
        if (t.name == name) return &t;
    }
    return nullptr;
}

std::vector<float> read_f32(const ember_source_tensor & t) {
    REQUIRE(t.type == EMBER_TYPE_F32);
    std::vector<float> v(t.nbytes / 4);
    t.read(v.data());
    return v;
}

// Splits a .inp file into its texts (fixtures/vocab/README.md).
std::vector<std::string> split_inp(const std::string & s) {
    const std::string        sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t                   b = 0;
    for (size_t at; (at = s.find(sep, b)) != std::string::npos; b = at + sep.size()) out.push_back(s.substr(b, at - b));
    return out;
}

}  // namespace

TEST_SUITE("hf-import") {

TEST_CASE("[hf] round trip of generated tiny models: tensors, metadata, logits and tokens") {
    const std::string gdir = fresh_dir("tiny");
    std::vector<round_trip_case> cases;
    auto add = [&](const std::string & name, const tiny_model_spec & s, ember_test_hf_export_options opt) {
        cases.push_back({name, ember_test_make_tiny_model(s, gdir), opt});
    };
    ember_test_hf_export_options plain, sharded, f16, bf16, pairs;
    sharded.shard_bytes       = 40000;
    sharded.special_as_dict   = true;
    f16.dtype                 = EMBER_TYPE_F16;
    bf16.dtype                = EMBER_TYPE_BF16;
    bf16.dtype_1d             = true;
    pairs.merges_as_pairs     = true;
    pairs.inv_freq            = false;
    add("llama-f32", spec("llama", EMBER_TYPE_F32), plain);
    add("llama-f32-sharded", spec("llama", EMBER_TYPE_F32), sharded);
    add("llama-f32-to-f16", spec("llama", EMBER_TYPE_F32), f16);
    add("llama-f32-to-bf16", spec("llama", EMBER_TYPE_F32), bf16);
    add("llama-bf16", spec("llama", EMBER_TYPE_BF16), plain);
    tiny_model_spec tied = spec("llama", EMBER_TYPE_F16);
    tied.tied            = true;
    tied.rope_scale_linear = 2.0f;
    tied.rope_freq_base    = 500000.0f;
    add("llama-f16-tied-linear", tied, pairs);
    add("qwen2-f32", spec("qwen2", EMBER_TYPE_F32), plain);
    add("qwen2-f32-sharded", spec("qwen2", EMBER_TYPE_F32), sharded);
    tiny_model_spec q3 = spec("qwen3", EMBER_TYPE_F32);
    q3.head_dim        = 32;  // explicit, not n_embd / n_head
    add("qwen3-f32-head32", q3, plain);
    tiny_model_spec q3t = spec("qwen3", EMBER_TYPE_F16);
    q3t.tied            = true;
    add("qwen3-f16-tied-bf16", q3t, bf16);
    for (const round_trip_case & rc : cases) check_round_trip(rc);
}

TEST_CASE("[hf] round trip of the tiny fixture models") {
    int n = 0;
    for (const char * name : {"tiny-llama-F32", "tiny-qwen2-F32", "tiny-qwen3-F32", "tiny-llama-F16"}) {
        const std::string path = ember_test_data_path(std::string("fixtures/models/") + name + ".gguf");
        if (path.empty()) continue;
        ember_test_hf_export_options opt;
        opt.shard_bytes = std::string(name) == "tiny-qwen2-F32" ? 1000000 : 0;
        check_round_trip({name, path, opt});
        n++;
    }
    if (n == 0) MESSAGE("skipped: fixtures/models not found (pass --data-dir)");
}

TEST_CASE("[hf] tokenizer round trip: the vocab fixtures tokenize every .inp text to the .out ids") {
    int n = 0;
    for (const std::string name : {"gpt-2", "deepseek-llm", "starcoder", "llama-spm", "phi-3"}) {
        CAPTURE(name);
        const std::string base = ember_test_data_path("fixtures/vocab/ggml-vocab-" + name + ".gguf");
        if (base.empty()) continue;
        n++;
        ember_test_hf_export_options opt;
        opt.merges_as_pairs    = name == "starcoder";
        opt.chat_template_list = name == "phi-3";
        const std::string dir  = fresh_dir("vocab-" + name);
        ember_test_hf_export_tokenizer(base, dir, opt);

        ember_gguf_open_params gp;
        gp.no_data = true;
        auto orig  = ember_gguf_open(base, gp);
        ember_gguf_writer w;
        w.set_str("general.architecture", orig->get_str("general.architecture", "llama"));
        const int64_t n_vocab = ember_hf_read_json(dir + "/config.json").find("vocab_size")->i;
        std::vector<ember_gguf_kv> kv;
        try {
            ember_hf_tokenizer_kv(dir, n_vocab, kv);
        } catch (const ember_error & e) {
            FAIL(e.what());
        }
        for (const ember_gguf_kv & e : kv) w.set_value(e.key, e.value);
        const std::string out = dir + "/vocab.gguf";
        w.write_to_file(out);
        auto got = ember_gguf_open(out, gp);
        check_tokenizer_meta(*orig, *got);
        if (opt.chat_template_list) {
            CHECK(got->get_str("tokenizer.chat_template.tool_use", "") == "{{ 'tools: ' }}" + orig->get_str("tokenizer.chat_template", ""));
            const ember_gguf_value * names = got->find("tokenizer.chat_templates");
            REQUIRE(names);
            CHECK(names->arr_str == std::vector<std::string>{"tool_use"});
        }

        ember_model_params mp = ember_model_default_params();
        mp.vocab_only         = 1;
        ember_model * m       = nullptr;
        REQUIRE_MESSAGE(ember_model_load(out.c_str(), &mp, &m) == EMBER_OK, last_error());
        ember_test_model_ptr model(m);
        std::string          inp, outs;
        REQUIRE(ember_test_read_file(base + ".inp", inp));
        REQUIRE(ember_test_read_file(base + ".out", outs));
        const std::vector<std::string> texts = split_inp(inp);
        size_t                         line  = 0, b = 0;
        int                            bad   = 0;
        while (b < outs.size() && line < texts.size()) {
            size_t e = outs.find('\n', b);
            if (e == std::string::npos) e = outs.size();
            std::vector<int32_t> want;
            REQUIRE(ember_test_parse_ids(outs.substr(b, e - b), want));
            const std::vector<int32_t> have = tokenize(model.get(), texts[line], false, false);
            if (have != want && bad++ < 3) FAIL_CHECK("text " << line << " '" << texts[line] << "' tokenizes differently");
            b = e + 1;
            line++;
        }
        CHECK(bad == 0);
        CHECK(line == texts.size());
    }
    if (n == 0) MESSAGE("skipped: fixtures/vocab not found (pass --data-dir)");
}

TEST_CASE("[hf] llama Q/K rows follow llama.cpp's permute(); qwen rows stay") {
    for (const std::string arch : {"llama", "qwen2"}) {
        CAPTURE(arch);
        ember_test_hf_export_options opt;
        opt.inv_freq          = false;
        const std::string dir = exported_tiny(arch, opt);
        // Row r of layer 0's q_proj (64 x 64, 4 heads of 16) and k_proj (32 x 64, 2 heads)
        // holds the value r everywhere.
        edit_weights(dir, [](std::vector<ember_test_st_tensor> & ts) {
            for (ember_test_st_tensor & t : ts) {
                if (t.name != "model.layers.0.self_attn.q_proj.weight" && t.name != "model.layers.0.self_attn.k_proj.weight") continue;
                REQUIRE(t.dtype == "F32");
                for (int64_t r = 0; r < t.shape[0]; r++) {
                    const float v = static_cast<float>(r);
                    for (int64_t c = 0; c < t.shape[1]; c++) std::memcpy(t.data.data() + 4 * (r * t.shape[1] + c), &v, 4);
                }
            }
        });
        auto src = ember_source_from_hf(dir);
        for (const std::string name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight"}) {
            CAPTURE(name);
            const ember_source_tensor * t = find_tensor(*src, name);
            REQUIRE(t);
            const std::vector<float> v    = read_f32(*t);
            const int64_t            rows = t->ne[1], cols = t->ne[0];
            // llama.cpp: w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2)
            const int64_t heads = rows / 16, half = 8;
            for (int64_t h = 0; h < heads; h++) {
                for (int64_t i = 0; i < half; i++) {
                    for (int64_t s = 0; s < 2; s++) {
                        const int64_t gguf_row = (h * half + i) * 2 + s;  // index of (h, i, s) after the swap
                        const int64_t hf_row   = (h * 2 + s) * half + i;  // index of (h, s, i) before it
                        const int64_t want     = std::string(arch) == "llama" ? hf_row : gguf_row;
                        CHECK(v[static_cast<size_t>(gguf_row * cols)] == static_cast<float>(want));
                        CHECK(v[static_cast<size_t>(gguf_row * cols + cols - 1)] == static_cast<float>(want));
                    }
                }
            }
            if (arch == "llama") {
                CHECK(v[static_cast<size_t>(1 * cols)] == 8.0f);  // neighbour of row 0 is its rotary partner
                CHECK(v[static_cast<size_t>(2 * cols)] == 1.0f);
            }
        }
    }
}

TEST_CASE("[hf] llama3 rope_scaling becomes rope_freqs.weight as llama.cpp computes it") {
    const std::string dir = exported_tiny("llama");
    edit_json(dir + "/config.json", [](ember_json & c) {
        set_member(c, "rope_theta", json_of("500000.0"));
        set_member(c, "rope_scaling", json_of(R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 64, "rope_type": "llama3"})"));
    });
    auto                        src = ember_source_from_hf(dir);
    const ember_source_tensor * rf  = find_tensor(*src, "rope_freqs.weight");
    REQUIRE(rf);
    CHECK(rf->n_dims == 1);
    CHECK(rf->ne[0] == 8);  // head_dim 16 / 2
    const std::vector<float> v = read_f32(*rf);
    // float64 reference of the same formula: wavelength 2 pi / base^(-2i/d) against
    // old_ctx / high (16) and old_ctx / low (64).
    int n_one = 0, n_mid = 0, n_full = 0;
    for (size_t i = 0; i < v.size(); i++) {
        const double freq = std::pow(500000.0, -2.0 * static_cast<double>(i) / 16.0), wl = 2 * 3.14159265358979323846 / freq;
        double       want = 8.0;
        if (wl < 16.0) {
            want = 1.0;
            n_one++;
        } else if (wl <= 64.0) {
            const double smooth = (64.0 / wl - 1.0) / 3.0;
            want                = 1.0 / ((1 - smooth) / 8.0 + smooth);
            n_mid++;
        } else {
            n_full++;
        }
        CAPTURE(i);
        CHECK(v[i] == doctest::Approx(want).epsilon(1e-5));
    }
    CHECK(n_one > 0);
    CHECK(n_mid > 0);
    CHECK(n_full > 0);
    CHECK(src->find("llama.rope.scaling.type") == nullptr);
    const std::string out = dir + "/llama3.gguf";
    write_source(*src, out);
    ember_test_model_ptr m;
    std::string          err;
    CHECK_MESSAGE(ember_test_load_model(out, m, err) == EMBER_OK, err);
}

TEST_CASE("[hf] rope scaling, head_dim and special-token keys follow the converter") {
    SUBCASE("qwen2 yarn") {
        const std::string dir = exported_tiny("qwen2");
        edit_json(dir + "/config.json", [](ember_json & c) {
            set_member(c, "rope_scaling", json_of(R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})"));
        });
        auto src = ember_source_from_hf(dir);
        REQUIRE(src->find("qwen2.rope.scaling.type"));
        CHECK(src->find("qwen2.rope.scaling.type")->str == "yarn");
        CHECK(src->find("qwen2.rope.scaling.factor")->as_f64("f") == 4.0);
        CHECK(src->find("qwen2.rope.scaling.original_context_length")->as_u64("o") == 32768);
        CHECK(src->find("qwen2.attention.key_length") == nullptr);  // no explicit head_dim
    }
    SUBCASE("unknown scaling type is refused") {
        const std::string dir = exported_tiny("llama");
        edit_json(dir + "/config.json", [](ember_json & c) { set_member(c, "rope_scaling", json_of(R"({"rope_type": "longrope", "factor": 2})")); });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "longrope");
    }
    SUBCASE("rope_parameters (newer configs) carry rope_theta") {
        const std::string dir = exported_tiny("qwen3");
        edit_json(dir + "/config.json", [](ember_json & c) {
            erase_member(c, "rope_theta");
            set_member(c, "rope_parameters", json_of(R"({"rope_theta": 1000000, "rope_type": "default"})"));
        });
        auto src = ember_source_from_hf(dir);
        CHECK(src->find("qwen3.rope.freq_base")->as_f64("b") == 1000000.0);
    }
    SUBCASE("config.json ids, generation_config.json, and lists of eos ids") {
        const std::string dir = exported_tiny("llama");
        edit_json(dir + "/tokenizer_config.json", [](ember_json & c) {
            erase_member(c, "eos_token");
            erase_member(c, "add_bos_token");
        });
        edit_json(dir + "/config.json", [](ember_json & c) {
            set_member(c, "eos_token_id", json_of("[2, 5]"));  // a list: not a single id, skipped
        });
        ember_test_write_text(dir + "/generation_config.json", R"({"eos_token_id": 7, "pad_token_id": 3})");
        auto src = ember_source_from_hf(dir);
        CHECK(src->find("tokenizer.ggml.eos_token_id")->as_u64("e") == 7);
        CHECK(src->find("tokenizer.ggml.padding_token_id")->as_u64("p") == 3);
        // no add_bos_token: the post-processor's template adds <s>
        REQUIRE(src->find("tokenizer.ggml.add_bos_token"));
        CHECK(src->find("tokenizer.ggml.add_bos_token")->as_bool("b"));
        CHECK(src->find("general.file_type")->as_u64("t") == 0);
        CHECK(src->find("general.architecture")->str == "llama");
    }
    SUBCASE("chat_template.jinja") {
        const std::string dir = exported_tiny("qwen2");
        ember_test_write_text(dir + "/chat_template.jinja", "{{ messages[0]['content'] }}");
        auto src = ember_source_from_hf(dir);
        REQUIRE(src->find("tokenizer.chat_template"));
        CHECK(src->find("tokenizer.chat_template")->str == "{{ messages[0]['content'] }}");
    }
}

TEST_CASE("[hf] byte-level tokenizer.json: token types, padding, pre-tokenizer names") {
    // A hand-written folder: GPT-2 alphabet tokens ("\xc4\xa0" is U+0120, the space).
    const std::string dir   = fresh_dir("bytelevel");
    const std::string vocab = R"({"a": 0, "b": 1, "ab": 2, "x": 3, "\u0120": 4, "\u0120ab": 5})";
    auto write = [&](const std::string & pre, bool ignore_merges) {
        ember_test_write_text(dir + "/tokenizer.json", R"({"added_tokens": [
              {"id": 6, "content": "<|endoftext|>", "special": true},
              {"id": 7, "content": "x", "special": false},
              {"id": 8, "content": "<|im_start|>", "special": false}],
            "pre_tokenizer": )" + pre + R"(,
            "model": {"type": "BPE", "byte_fallback": false, "ignore_merges": )" + (ignore_merges ? "true" : "false") +
                                                      R"(, "vocab": )" + vocab + R"(, "merges": [["a", "b"], "\u0120 ab"]}})");
    };
    ember_test_write_text(dir + "/tokenizer_config.json", R"({"eos_token": {"content": "<|endoftext|>"}, "chat_template": null})");
    const std::string qwen2 = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
    // llama.cpp's own spelling of the Llama 3 expression (no (?i:...)), with real newlines.
    const std::string llama3 = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex":
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
        "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";

    auto kv_of = [&](int64_t n_vocab) {
        std::vector<ember_gguf_kv> kv;
        ember_hf_tokenizer_kv(dir, n_vocab, kv);
        ember_gguf_writer w;
        for (const ember_gguf_kv & e : kv) w.set_value(e.key, e.value);
        std::vector<uint8_t> bytes = w.write_to_buffer();
        return ember_gguf_parse(bytes.data(), bytes.size());
    };
    write(qwen2, false);
    auto f = kv_of(12);
    CHECK(f->get_str("tokenizer.ggml.model", "") == "gpt2");
    CHECK(f->get_str("tokenizer.ggml.pre", "") == "qwen2");
    const ember_gguf_value * toks  = f->find("tokenizer.ggml.tokens");
    const ember_gguf_value * types = f->find("tokenizer.ggml.token_type");
    REQUIRE(toks);
    REQUIRE(toks->arr_str.size() == 12);
    const std::vector<std::string> want_text = {"a", "b", "ab", "[PAD3]", "\xc4\xa0", "\xc4\xa0" "ab", "<|endoftext|>", "x", "<|im_start|>",
                                                "[PAD9]", "[PAD10]", "[PAD11]"};
    const std::vector<int32_t>     want_type = {1, 1, 1, 5, 1, 1, 3, 4, 3, 5, 5, 5};
    CHECK(toks->arr_str == want_text);
    for (size_t i = 0; i < want_type.size(); i++) {
        int32_t t;
        std::memcpy(&t, types->arr_data.data() + 4 * i, 4);
        CAPTURE(i);
        CHECK(t == want_type[i]);
    }
    const ember_gguf_value * merges = f->find("tokenizer.ggml.merges");
    REQUIRE(merges);
    CHECK(merges->arr_str == std::vector<std::string>{"a b", "\xc4\xa0 ab"});
    CHECK(f->get_u32("tokenizer.ggml.eos_token_id", 99) == 6);
    CHECK(f->find("tokenizer.ggml.bos_token_id") == nullptr);
    CHECK(f->find("tokenizer.chat_template") == nullptr);
    CHECK(f->find("tokenizer.ggml.scores") == nullptr);

    write(llama3, true);
    CHECK(kv_of(0)->get_str("tokenizer.ggml.pre", "") == "llama-bpe");
    write(llama3, false);
    CHECK(kv_of(0)->get_str("tokenizer.ggml.pre", "") == "smaug-bpe");
    write(R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})", false);
    CHECK(kv_of(0)->get_str("tokenizer.ggml.pre", "") == "gpt-2");
    write(qwen2, false);
    expect_error([&] { kv_of(5); }, EMBER_ERR_BAD_FORMAT, "vocab_size is 5");
}

TEST_CASE("[hf] malformed folders give errors naming the file and field") {
    SUBCASE("not a folder") {
        CHECK_FALSE(ember_path_is_hf_folder(fresh_dir("empty")));
        CHECK_FALSE(ember_path_is_hf_folder("/nonexistent/hf"));
        expect_error([&] { ember_source_from_hf(fresh_dir("empty2")); }, EMBER_ERR_IO, "config.json");
    }
    SUBCASE("unknown architecture") {
        const std::string dir = exported_tiny("llama");
        edit_json(dir + "/config.json", [](ember_json & c) { set_member(c, "architectures", json_of(R"(["GPT2LMHeadModel"])")); });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "GPT2LMHeadModel");
    }
    SUBCASE("missing key") {
        const std::string dir = exported_tiny("qwen2");
        edit_json(dir + "/config.json", [](ember_json & c) { erase_member(c, "intermediate_size"); });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "intermediate_size");
    }
    SUBCASE("config.json is not JSON") {
        const std::string dir = exported_tiny("qwen2");
        ember_test_write_text(dir + "/config.json", "{\"hidden_size\": 64,");
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "config.json");
    }
    SUBCASE("missing tensor") {
        const std::string dir = exported_tiny("qwen3");
        edit_weights(dir, [](std::vector<ember_test_st_tensor> & ts) {
            ts.erase(std::remove_if(ts.begin(), ts.end(), [](const ember_test_st_tensor & t) { return t.name == "model.layers.1.self_attn.k_norm.weight"; }),
                     ts.end());
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "model.layers.1.self_attn.k_norm.weight");
    }
    SUBCASE("untied model without lm_head") {
        const std::string dir = exported_tiny("llama");
        edit_weights(dir, [](std::vector<ember_test_st_tensor> & ts) {
            ts.erase(std::remove_if(ts.begin(), ts.end(), [](const ember_test_st_tensor & t) { return t.name == "lm_head.weight"; }), ts.end());
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "lm_head.weight");
    }
    SUBCASE("shape that disagrees with config.json") {
        const std::string dir = exported_tiny("llama");
        edit_json(dir + "/config.json", [](ember_json & c) { set_member(c, "intermediate_size", json_of("128")); });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "shape");
    }
    SUBCASE("a dtype Ember cannot convert") {
        const std::string dir = exported_tiny("llama");
        edit_weights(dir, [](std::vector<ember_test_st_tensor> & ts) {
            for (auto & t : ts) {
                if (t.name == "model.layers.0.mlp.up_proj.weight") t.dtype = "I32";  // same size as F32
            }
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "I32");
    }
    SUBCASE("a tensor the architecture has no place for") {
        const std::string dir = exported_tiny("llama");
        edit_weights(dir, [](std::vector<ember_test_st_tensor> & ts) {
            ts.push_back({"model.layers.0.self_attn.q_norm.weight", "F32", {16}, std::vector<uint8_t>(64, 0)});
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "q_norm");
    }
    SUBCASE("index naming a missing shard or a path outside the folder") {
        ember_test_hf_export_options opt;
        opt.shard_bytes       = 40000;
        const std::string dir = exported_tiny("qwen2", opt);
        edit_json(dir + "/model.safetensors.index.json", [](ember_json & j) {
            for (auto & kv : j.obj) {
                if (kv.first == "weight_map") kv.second.obj[0].second = json_of("\"../../etc/passwd\"");
            }
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "names no file");
    }
    SUBCASE("no weights") {
        const std::string dir = exported_tiny("llama");
        fs::remove(dir + "/model.safetensors");
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "model.safetensors");
    }
    SUBCASE("tokenizer: missing, unknown model type, unknown pre-tokenizer") {
        const std::string dir = exported_tiny("llama");
        fs::rename(dir + "/tokenizer.json", dir + "/tokenizer.json.bak");
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_BAD_FORMAT, "tokenizer.json");
        fs::rename(dir + "/tokenizer.json.bak", dir + "/tokenizer.json");
        edit_json(dir + "/tokenizer.json", [](ember_json & j) {
            for (auto & kv : j.obj) {
                if (kv.first == "model") set_member(kv.second, "type", json_of("\"Unigram\""));
            }
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "Unigram");
        edit_json(dir + "/tokenizer.json", [](ember_json & j) {
            for (auto & kv : j.obj) {
                if (kv.first == "model") {
                    set_member(kv.second, "type", json_of("\"BPE\""));
                    set_member(kv.second, "byte_fallback", json_of("false"));
                }
            }
            set_member(j, "pre_tokenizer", json_of(R"({"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"})"));
        });
        expect_error([&] { ember_source_from_hf(dir); }, EMBER_ERR_UNSUPPORTED, "pre_tokenizer");
    }
}

TEST_CASE("[hf] safetensors: valid files parse, hostile ones give clear errors") {
    const std::string dir  = fresh_dir("st");
    const std::string path = dir + "/x.safetensors";
    std::vector<uint8_t> f32(16), f16(6);
    for (size_t i = 0; i < f32.size(); i++) f32[i] = static_cast<uint8_t>(i);
    const std::vector<ember_test_st_tensor> good = {{"a", "F32", {2, 2}, f32}, {"b", "F16", {3}, f16}, {"s", "BF16", {}, {1, 2}}};

    SUBCASE("valid") {
        ember_test_write_file(path, ember_test_safetensors_bytes(good));
        auto f = ember_safetensors_open(path);
        REQUIRE(f->tensors.size() == 3);
        const ember_st_tensor * a = f->find("a");
        REQUIRE(a);
        CHECK(a->shape == std::vector<int64_t>{2, 2});
        CHECK(std::memcmp(f->data(*a), f32.data(), 16) == 0);
        CHECK(f->find("s")->n_elements() == 1);
        REQUIRE(f->metadata.size() == 1);
        CHECK(f->metadata[0].second == "pt");
        ember_type t;
        CHECK(ember_safetensors_type("BF16", t));
        CHECK(t == EMBER_TYPE_BF16);
        CHECK_FALSE(ember_safetensors_type("I64", t));
    }

    // A file from a raw header and data.
    auto raw = [&](const std::string & header, size_t n_data, uint64_t n_header_override = 0) {
        std::vector<uint8_t> b(8 + header.size() + n_data, 0);
        const uint64_t       n = n_header_override ? n_header_override : header.size();
        for (int i = 0; i < 8; i++) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
        std::copy(header.begin(), header.end(), b.begin() + 8);
        ember_test_write_file(path, b);
    };
    auto bad = [&](const std::string & needle) { expect_error([&] { ember_safetensors_open(path); }, EMBER_ERR_BAD_FORMAT, needle); };

    SUBCASE("truncated") {
        auto b = ember_test_safetensors_bytes(good);
        ember_test_write_file(path, std::vector<uint8_t>(b.begin(), b.begin() + 5));
        bad("too short");
        ember_test_write_file(path, std::vector<uint8_t>(b.begin(), b.end() - 3));
        bad("past the end of the data");
    }
    SUBCASE("bad header length") {
        raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 1u << 20);
        bad("header length");
        raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, ~uint64_t(0));
        bad("header length");
        raw("[1, 2]", 0);
        bad("not a JSON object");
        raw("{\"a\": {\"dtype\": ", 0);
        bad("bad JSON");
    }
    SUBCASE("offsets") {
        raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
        bad("past the end");
        raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16);
        bad("overlap");
        raw(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16);
        bad("end before");
        raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 16);
        bad("non-negative");
        raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 16);
        bad("data_offsets");
        raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 16);
        bad("data_offsets");
    }
    SUBCASE("dtype and shape") {
        raw(R"({"a":{"dtype":"Q4_0","shape":[1],"data_offsets":[0,4]}})", 4);
        bad("unknown dtype 'Q4_0'");
        raw(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4);
        bad("dtype");
        raw(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", 16);
        bad("need 20");
        raw(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
        bad("non-negative");
        raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4);
        bad("too large");
        raw(R"({"a":{"dtype":"F32","shape":"x","data_offsets":[0,4]}})", 4);
        bad("shape");
        raw(R"({"a":7})", 4);
        bad("not an object");
    }
    SUBCASE("random damage never crashes") {
        const std::vector<uint8_t> b = ember_test_safetensors_bytes(good);
        std::mt19937               rng(12345);
        int                        n_ok = 0, n_err = 0;
        for (int iter = 0; iter < 400; iter++) {
            std::vector<uint8_t> d = b;
            const int            n = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < n; k++) {
                const size_t at = rng() % std::min<size_t>(d.size(), 120);  // mostly the header
                d[at]           = static_cast<uint8_t>(rng());
            }
            if (rng() % 5 == 0) d.resize(rng() % d.size());
            ember_test_write_file(path, d);
            try {
                auto f = ember_safetensors_open(path);
                for (const ember_st_tensor & t : f->tensors) {
                    REQUIRE(t.offset + t.nbytes <= f->map->size());
                }
                n_ok++;
            } catch (const ember_error & e) {
                CHECK((e.status == EMBER_ERR_BAD_FORMAT || e.status == EMBER_ERR_IO));
                n_err++;
            }
        }
        CHECK(n_err > 0);
        MESSAGE(n_ok << " damaged files still valid, " << n_err << " rejected");
    }
}

TEST_CASE("[hf] ember_model_quantize converts an exported folder to F16 and Q8_0") {
    const std::string gdir = fresh_dir("q");
    const std::string orig = ember_test_make_tiny_model(spec("qwen2", EMBER_TYPE_F32), gdir);
    ember_test_hf_export_options opt;
    opt.dtype             = EMBER_TYPE_BF16;
    opt.dtype_1d          = true;  // norms in BF16, as real checkpoints: quantize must widen them
    const std::string dir = fresh_dir("qfolder");
    ember_test_hf_export(orig, dir, opt);

    ember_test_model_ptr m_orig;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(orig, m_orig, err) == EMBER_OK, err);
    const std::vector<int32_t> tokens = {1, 5, 9, 20, 33, 7};
    ember_test_run_params      p;
    ember_test_run_result      ra;
    REQUIRE_MESSAGE(ember_test_run(m_orig.get(), tokens, 0, p, ra, err) == EMBER_OK, err);
    for (const std::string ftype : {"F16", "Q8_0"}) {
        CAPTURE(ftype);
        const std::string     out = dir + "/out-" + ftype + ".gguf";
        ember_quantize_params qp  = ember_quantize_default_params();
        qp.ftype                  = ftype.c_str();
        qp.n_threads              = 1;
        REQUIRE_MESSAGE(ember_model_quantize(dir.c_str(), out.c_str(), &qp) == EMBER_OK, last_error());
        ember_test_model_ptr m;
        REQUIRE_MESSAGE(ember_test_load_model(out, m, err) == EMBER_OK, err);
        ember_test_run_result rb;
        REQUIRE_MESSAGE(ember_test_run(m.get(), tokens, 0, p, rb, err) == EMBER_OK, err);
        const auto diff = ember_test_compare_logits(ra.logits, rb.logits, static_cast<int32_t>(ra.logits.size() / tokens.size()), 0.0);
        CAPTURE(diff.summary());
        CHECK(diff.finite);
        CHECK(diff.rel_max() < 1e-1);  // BF16 source weights, then F16 or Q8_0
        auto g = ember_gguf_open(out);
        CHECK(g->get_str("general.architecture", "") == "qwen2");
        CHECK(g->find("tokenizer.ggml.tokens"));
    }
}

}  // TEST_SUITE
