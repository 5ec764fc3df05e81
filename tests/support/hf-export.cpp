// Test-only GGUF -> Hugging Face folder exporter (see hf-export.h). It writes what transformers
// and tokenizers write, independently of the import code, so that a round trip checks the
// import against known answers rather than against itself.
#include "support/hf-export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "quant/types.h"
#include "runtime/gguf.h"
#include "runtime/json.h"

namespace {

[[noreturn]] void fail(const std::string & msg) { throw std::runtime_error("hf export: " + msg); }

//
// JSON building
//
ember_json jstr(const std::string & s) {
    ember_json j;
    j.kind = EMBER_JSON_STRING;
    j.str  = s;
    return j;
}
ember_json jint(int64_t v) {
    ember_json j;
    j.kind = EMBER_JSON_INT;
    j.i    = v;
    return j;
}
ember_json jnum(double v) {
    ember_json j;
    j.kind = EMBER_JSON_FLOAT;
    j.f    = v;
    return j;
}
ember_json jbool(bool v) {
    ember_json j;
    j.kind = EMBER_JSON_BOOL;
    j.b    = v;
    return j;
}
ember_json jnull() { return ember_json{}; }
ember_json jarr() {
    ember_json j;
    j.kind = EMBER_JSON_ARRAY;
    return j;
}
ember_json jobj() {
    ember_json j;
    j.kind = EMBER_JSON_OBJECT;
    return j;
}
void put(ember_json & o, const std::string & key, ember_json v) { o.obj.emplace_back(key, std::move(v)); }

// The shortest decimal that reads back as the same float32 (how Python prints the configs).
double short_float(float f) {
    char buf[40];
    for (int p = 1; p <= 9; p++) {
        std::snprintf(buf, sizeof(buf), "%.*g", p, static_cast<double>(f));
        const double d = std::strtod(buf, nullptr);
        if (static_cast<float>(d) == f) return d;
    }
    return f;
}

void write_json(const std::string & path, const ember_json & j) {
    ember_json_dump_options o;
    o.indent   = 2;
    o.item_sep = ",";
    ember_test_write_text(path, ember_json_dump(j, o) + "\n");
}

//
// GGUF access
//
const ember_gguf_value * find(const ember_gguf_file & f, const std::string & key) { return f.find(key); }

uint32_t u32_or(const ember_gguf_file & f, const std::string & key, uint32_t def) { return f.get_u32(key, def); }

template <typename T> T elem(const ember_gguf_value & v, size_t i) {
    T x;
    std::memcpy(&x, v.arr_data.data() + i * sizeof(T), sizeof(T));
    return x;
}

//
// Tokenizer
//
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

const char * const k_spm_space = "\xe2\x96\x81";

// DeepSeek LLM's letter ranges (its tokenizer.json pattern, as code points).
const uint32_t k_ds_letters[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

void utf8_put(std::string & s, uint32_t c) {
    if (c < 0x80) {
        s += static_cast<char>(c);
    } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += static_cast<char>(0xE0 | (c >> 12));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (c >> 18));
        s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    }
}

std::string ds_letters_regex() {
    std::string s = "\\s?[";
    for (const auto & r : k_ds_letters) {
        utf8_put(s, r[0]);
        if (r[1] != r[0]) {
            s += '-';
            utf8_put(s, r[1]);
        }
    }
    return s + "]+";
}

ember_json split(const std::string & regex) {
    ember_json p = jobj(), pat = jobj();
    put(p, "type", jstr("Split"));
    put(pat, "Regex", jstr(regex));
    put(p, "pattern", pat);
    put(p, "behavior", jstr("Isolated"));
    put(p, "invert", jbool(false));
    return p;
}
ember_json byte_level(bool use_regex) {
    ember_json p = jobj();
    put(p, "type", jstr("ByteLevel"));
    put(p, "add_prefix_space", jbool(false));
    put(p, "trim_offsets", jbool(true));
    put(p, "use_regex", jbool(use_regex));
    return p;
}
ember_json digits(bool individual) {
    ember_json p = jobj();
    put(p, "type", jstr("Digits"));
    put(p, "individual_digits", jbool(individual));
    return p;
}
ember_json sequence(std::vector<ember_json> steps) {
    ember_json p = jobj(), list = jarr();
    put(p, "type", jstr("Sequence"));
    list.arr = std::move(steps);
    put(p, "pretokenizers", list);
    return p;
}

// The pre_tokenizer of a byte-level tokenizer.json, as the published models have it.
ember_json pre_tokenizer_for(const std::string & pre) {
    const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
    if (pre == "gpt-2") return byte_level(true);
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
        return sequence({split(contractions + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                         byte_level(false)});
    }
    if (pre == "qwen2") {
        return sequence({split(contractions + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                         byte_level(false)});
    }
    if (pre == "starcoder") return sequence({digits(true), byte_level(true)});
    if (pre == "deepseek-llm") {
        return sequence({split("[\r\n]"), split(ds_letters_regex()), split(u8"\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"),
                         split("\\s+$"), split(u8"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"), digits(false), byte_level(false)});
    }
    fail("no tokenizer.json pre_tokenizer known for tokenizer.ggml.pre '" + pre + "'");
}

// Code point boundaries of a UTF-8 string (after the first character).
std::vector<size_t> cut_points(const std::string & s) {
    std::vector<size_t> out;
    for (size_t i = 1; i < s.size(); i++) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
    }
    return out;
}

struct special_key {
    const char * gguf;  // tokenizer.ggml.<gguf>_token_id
    const char * hf;    // <hf>_token / <hf>_token_id
};
const special_key k_special_keys[] = {{"bos", "bos"}, {"eos", "eos"}, {"unknown", "unk"}, {"padding", "pad"}, {"seperator", "sep"},
                                      {"cls", "cls"}, {"mask", "mask"}};

// tokenizer.json and tokenizer_config.json; the special token ids go into `config`.
void export_tokenizer(const ember_gguf_file & f, const std::string & dir, const ember_test_hf_export_options & opt, ember_json & config) {
    const std::string        model  = f.get_str("tokenizer.ggml.model", "");
    const ember_gguf_value * toks   = find(f, "tokenizer.ggml.tokens");
    const ember_gguf_value * types  = find(f, "tokenizer.ggml.token_type");
    const ember_gguf_value * scores = find(f, "tokenizer.ggml.scores");
    if (!toks) fail("the file has no tokenizer.ggml.tokens");
    const bool spm = model == "llama";
    if (!spm && model != "gpt2") fail("tokenizer.ggml.model '" + model + "' cannot be exported");
    const size_t n = toks->arr_str.size();
    auto type_of = [&](size_t i) { return types ? elem<int32_t>(*types, i) : int32_t(T_NORMAL); };
    auto score_of = [&](size_t i) { return scores ? elem<float>(*scores, i) : 0.0f; };
    auto special_id = [&](const char * name) -> int64_t {
        const ember_gguf_value * v = find(f, std::string("tokenizer.ggml.") + name + "_token_id");
        return v ? v->as_i64(name) : -1;
    };
    const int64_t unk_id = special_id("unknown");

    // Tokens that exist only as llama.cpp's padding are left out: the import pads them back.
    std::vector<bool> omit(n, false);
    for (size_t i = 0; i < n; i++) {
        const int32_t t = type_of(i);
        omit[i] = t == T_UNUSED || (t == T_UNKNOWN && static_cast<int64_t>(i) != unk_id && toks->arr_str[i] == "[PAD" + std::to_string(i) + "]");
    }
    auto is_added = [&](size_t i) {
        const int32_t t = type_of(i);
        return !omit[i] && (t == T_CONTROL || t == T_USER || t == T_UNKNOWN);
    };

    // model.vocab: SentencePiece-style files list every piece; byte-level ones (as Llama 3)
    // keep the added tokens out of the model's vocabulary.
    ember_json                              vocab = jobj();
    std::unordered_map<std::string, size_t> id_of;
    for (size_t i = 0; i < n; i++) {
        if (omit[i] || (!spm && is_added(i))) continue;
        put(vocab, toks->arr_str[i], jint(static_cast<int64_t>(i)));
        id_of[toks->arr_str[i]] = i;
    }

    ember_json merges = jarr();
    auto       add_merge = [&](const std::string & l, const std::string & r) {
        if (opt.merges_as_pairs) {
            ember_json p = jarr();
            p.arr.push_back(jstr(l));
            p.arr.push_back(jstr(r));
            merges.arr.push_back(p);
        } else {
            merges.arr.push_back(jstr(l + " " + r));
        }
    };
    if (spm) {
        // transformers' SentencePieceExtractor: every split of a piece into two pieces, by
        // (left id, right id) within a piece, then all of them by the piece's score, highest
        // first, keeping vocabulary order among equal scores.
        struct m {
            float  score;
            size_t l, r;
        };
        std::vector<m> all;
        for (size_t i = 0; i < n; i++) {
            if (omit[i] || type_of(i) != T_NORMAL) continue;
            const std::string & t = toks->arr_str[i];
            std::vector<m>      local;
            for (size_t cut : cut_points(t)) {
                auto l = id_of.find(t.substr(0, cut)), r = id_of.find(t.substr(cut));
                if (l != id_of.end() && r != id_of.end()) local.push_back({score_of(i), l->second, r->second});
            }
            std::sort(local.begin(), local.end(), [](const m & a, const m & b) { return a.l != b.l ? a.l < b.l : a.r < b.r; });
            all.insert(all.end(), local.begin(), local.end());
        }
        std::stable_sort(all.begin(), all.end(), [](const m & a, const m & b) { return a.score > b.score; });
        for (const m & x : all) add_merge(toks->arr_str[x.l], toks->arr_str[x.r]);
    } else {
        const ember_gguf_value * mv = find(f, "tokenizer.ggml.merges");
        if (!mv) fail("a gpt2 vocabulary without tokenizer.ggml.merges");
        for (const std::string & s : mv->arr_str) {
            const size_t cut = s.find(' ', 1);
            if (cut == std::string::npos) fail("merge '" + s + "' has no space");
            add_merge(s.substr(0, cut), s.substr(cut + 1));
        }
    }

    ember_json added = jarr();
    for (size_t i = 0; i < n; i++) {
        if (!is_added(i)) continue;
        ember_json a = jobj();
        put(a, "id", jint(static_cast<int64_t>(i)));
        put(a, "content", jstr(toks->arr_str[i]));
        put(a, "single_word", jbool(false));
        put(a, "lstrip", jbool(false));
        put(a, "rstrip", jbool(false));
        put(a, "normalized", jbool(false));
        put(a, "special", jbool(type_of(i) != T_USER));
        added.arr.push_back(a);
    }

    const ember_gguf_value * add_bos = find(f, "tokenizer.ggml.add_bos_token");
    const ember_gguf_value * add_eos = find(f, "tokenizer.ggml.add_eos_token");
    const int64_t            bos_id  = special_id("bos");

    ember_json tj = jobj();
    put(tj, "version", jstr("1.0"));
    put(tj, "truncation", jnull());
    put(tj, "padding", jnull());
    put(tj, "added_tokens", added);
    ember_json bpe = jobj();
    put(bpe, "type", jstr("BPE"));
    put(bpe, "dropout", jnull());
    if (spm) {
        const bool prefix = !find(f, "tokenizer.ggml.add_space_prefix") || f.get_bool("tokenizer.ggml.add_space_prefix", true);
        ember_json norm = jobj(), list = jarr(), prep = jobj(), repl = jobj(), pat = jobj();
        put(norm, "type", jstr("Sequence"));
        put(prep, "type", jstr("Prepend"));
        put(prep, "prepend", jstr(k_spm_space));
        put(repl, "type", jstr("Replace"));
        put(pat, "String", jstr(" "));
        put(repl, "pattern", pat);
        put(repl, "content", jstr(k_spm_space));
        if (prefix) list.arr.push_back(prep);
        list.arr.push_back(repl);
        put(norm, "normalizers", list);
        put(tj, "normalizer", norm);
        put(tj, "pre_tokenizer", jnull());
        ember_json dec = jobj(), dl = jarr(), d1 = jobj(), p1 = jobj(), d2 = jobj(), d3 = jobj(), d4 = jobj();
        put(dec, "type", jstr("Sequence"));
        put(d1, "type", jstr("Replace"));
        put(p1, "String", jstr(k_spm_space));
        put(d1, "pattern", p1);
        put(d1, "content", jstr(" "));
        put(d2, "type", jstr("ByteFallback"));
        put(d3, "type", jstr("Fuse"));
        put(d4, "type", jstr("Strip"));
        put(d4, "content", jstr(" "));
        put(d4, "start", jint(prefix ? 1 : 0));
        put(d4, "stop", jint(0));
        dl.arr = {d1, d2, d3, d4};
        put(dec, "decoders", dl);
        put(tj, "decoder", dec);
        put(bpe, "unk_token", unk_id >= 0 ? jstr(toks->arr_str[static_cast<size_t>(unk_id)]) : jnull());
        put(bpe, "fuse_unk", jbool(true));
        put(bpe, "byte_fallback", jbool(true));
        put(bpe, "ignore_merges", jbool(false));
    } else {
        const std::string pre = f.get_str("tokenizer.ggml.pre", "");
        put(tj, "normalizer", jnull());
        put(tj, "pre_tokenizer", pre_tokenizer_for(pre));
        put(tj, "decoder", byte_level(true));
        put(bpe, "unk_token", jnull());
        put(bpe, "fuse_unk", jbool(false));
        put(bpe, "byte_fallback", jbool(false));
        put(bpe, "ignore_merges", jbool(pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3"));
    }
    // A template that adds BOS, when the GGUF says so (the import may read add_bos from it).
    if (add_bos && add_bos->as_bool("add_bos") && bos_id >= 0) {
        ember_json pp = jobj(), single = jarr(), st = jobj(), sti = jobj(), seq = jobj(), seqi = jobj();
        put(pp, "type", jstr("TemplateProcessing"));
        put(sti, "id", jstr(toks->arr_str[static_cast<size_t>(bos_id)]));
        put(sti, "type_id", jint(0));
        put(st, "SpecialToken", sti);
        put(seqi, "id", jstr("A"));
        put(seqi, "type_id", jint(0));
        put(seq, "Sequence", seqi);
        single.arr = {st, seq};
        put(pp, "single", single);
        put(tj, "post_processor", pp);
    } else {
        put(tj, "post_processor", jnull());
    }
    put(bpe, "continuing_subword_prefix", jnull());
    put(bpe, "end_of_word_suffix", jnull());
    put(bpe, "vocab", vocab);
    put(bpe, "merges", merges);
    put(tj, "model", bpe);
    write_json(dir + "/tokenizer.json", tj);

    ember_json tc = jobj();
    if (add_bos) put(tc, "add_bos_token", jbool(add_bos->as_bool("add_bos")));
    if (add_eos) put(tc, "add_eos_token", jbool(add_eos->as_bool("add_eos")));
    for (const special_key & k : k_special_keys) {
        const int64_t id = special_id(k.gguf);
        if (id < 0) continue;
        const std::string & text = toks->arr_str[static_cast<size_t>(id)];
        if (opt.special_as_dict) {
            ember_json d = jobj();
            put(d, "__type", jstr("AddedToken"));
            put(d, "content", jstr(text));
            put(d, "lstrip", jbool(false));
            put(d, "normalized", jbool(false));
            put(d, "rstrip", jbool(false));
            put(d, "single_word", jbool(false));
            put(tc, std::string(k.hf) + "_token", d);
        } else {
            put(tc, std::string(k.hf) + "_token", jstr(text));
        }
        put(config, std::string(k.hf) + "_token_id", jint(id));
    }
    const std::string tmpl = f.get_str("tokenizer.chat_template", "");
    if (!tmpl.empty()) {
        if (opt.chat_template_list) {
            ember_json list = jarr(), d = jobj(), t = jobj();
            put(d, "name", jstr("default"));
            put(d, "template", jstr(tmpl));
            put(t, "name", jstr("tool_use"));
            put(t, "template", jstr("{{ 'tools: ' }}" + tmpl));
            list.arr = {d, t};
            put(tc, "chat_template", list);
        } else {
            put(tc, "chat_template", jstr(tmpl));
        }
    }
    put(tc, "clean_up_tokenization_spaces", jbool(false));
    put(tc, "legacy", jbool(false));
    put(tc, "tokenizer_class", jstr(spm ? "LlamaTokenizer" : "PreTrainedTokenizerFast"));
    write_json(dir + "/tokenizer_config.json", tc);
}

//
// Weights
//

struct name_pair {
    const char * gguf;  // after "blk.N."
    const char * hf;    // after "model.layers.N."
};
const name_pair k_layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name(const std::string & gguf) {
    if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
    if (gguf == "output_norm.weight") return "model.norm.weight";
    if (gguf == "output.weight") return "lm_head.weight";
    if (gguf.rfind("blk.", 0) == 0) {
        const size_t dot   = gguf.find('.', 4);
        const std::string layer = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
        for (const name_pair & p : k_layer_names) {
            if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
        }
    }
    fail("tensor '" + gguf + "' has no Hugging Face name");
}

const char * st_dtype(ember_type t) {
    switch (t) {
        case EMBER_TYPE_F32: return "F32";
        case EMBER_TYPE_F16: return "F16";
        case EMBER_TYPE_BF16: return "BF16";
        default: fail(std::string("tensor type ") + ember_type_get_name(t) + " cannot be exported");
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
    if (t == EMBER_TYPE_F16) return ember_half_to_float(ember_half{h});
    return ember_bf16_to_float(ember_bf16{h});
}

std::vector<uint8_t> convert(const uint8_t * src, ember_type from, size_t n, ember_type to) {
    const size_t         es = to == EMBER_TYPE_F32 ? 4 : 2;
    std::vector<uint8_t> out(n * es);
    if (from == to) {
        std::memcpy(out.data(), src, out.size());
        return out;
    }
    for (size_t i = 0; i < n; i++) {
        const float x = to_f32(src, from, i);
        if (to == EMBER_TYPE_F32) {
            std::memcpy(out.data() + 4 * i, &x, 4);
        } else if (to == EMBER_TYPE_F16) {
            const ember_half h = ember_float_to_half(x);
            std::memcpy(out.data() + 2 * i, &h, 2);
        } else {
            const ember_bf16 b = ember_float_to_bf16(x);
            std::memcpy(out.data() + 2 * i, &b, 2);
        }
    }
    return out;
}

// GGUF llama rows (neighbouring rotary pairs) back to Hugging Face's halves: HF row
// h*d + s*d/2 + i holds GGUF row h*d + 2i + s.
std::vector<uint8_t> unpermute(const std::vector<uint8_t> & g, int64_t rows, int64_t n_head) {
    const size_t         row = g.size() / static_cast<size_t>(rows);
    const int64_t        d   = rows / n_head;
    std::vector<uint8_t> out(g.size());
    for (int64_t h = 0; h < n_head; h++) {
        for (int64_t i = 0; i < d / 2; i++) {
            for (int64_t s = 0; s < 2; s++) {
                std::memcpy(out.data() + static_cast<size_t>(h * d + s * d / 2 + i) * row, g.data() + static_cast<size_t>(h * d + 2 * i + s) * row, row);
            }
        }
    }
    return out;
}

}  // namespace

//
// Files
//

void ember_test_write_file(const std::string & path, const std::vector<uint8_t> & bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail("cannot write " + path);
}

void ember_test_write_text(const std::string & path, const std::string & text) {
    ember_test_write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<uint8_t> ember_test_safetensors_bytes(const std::vector<ember_test_st_tensor> & tensors) {
    ember_json header = jobj(), meta = jobj();
    put(meta, "format", jstr("pt"));
    put(header, "__metadata__", meta);
    uint64_t off = 0;
    for (const ember_test_st_tensor & t : tensors) {
        ember_json e = jobj(), shape = jarr(), offs = jarr();
        for (int64_t d : t.shape) shape.arr.push_back(jint(d));
        offs.arr = {jint(static_cast<int64_t>(off)), jint(static_cast<int64_t>(off + t.data.size()))};
        put(e, "dtype", jstr(t.dtype));
        put(e, "shape", shape);
        put(e, "data_offsets", offs);
        put(header, t.name, e);
        off += t.data.size();
    }
    ember_json_dump_options o;
    o.item_sep = ",";
    o.key_sep  = ":";
    std::string h = ember_json_dump(header, o);
    while (h.size() % 8) h += ' ';
    std::vector<uint8_t> out(8 + h.size() + off);
    const uint64_t       n = h.size();
    for (int i = 0; i < 8; i++) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    std::copy(h.begin(), h.end(), out.begin() + 8);
    size_t at = 8 + h.size();
    for (const ember_test_st_tensor & t : tensors) {
        std::copy(t.data.begin(), t.data.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
        at += t.data.size();
    }
    return out;
}

void ember_test_hf_export_tokenizer(const std::string & gguf_path, const std::string & dir, const ember_test_hf_export_options & opt) {
    ember_gguf_open_params gp;
    gp.no_data = true;
    auto f     = ember_gguf_open(gguf_path, gp);
    std::filesystem::create_directories(dir);
    ember_json config = jobj();
    put(config, "vocab_size", jint(static_cast<int64_t>(f->find("tokenizer.ggml.tokens")->arr_str.size())));
    export_tokenizer(*f, dir, opt, config);
    write_json(dir + "/config.json", config);
}

void ember_test_hf_export(const std::string & gguf_path, const std::string & dir, const ember_test_hf_export_options & opt) {
    auto              f    = ember_gguf_open(gguf_path);
    const std::string arch = f->get_str("general.architecture", "");
    const char *      hf_arch = arch == "llama" ? "LlamaForCausalLM" : arch == "qwen2" ? "Qwen2ForCausalLM" : arch == "qwen3" ? "Qwen3ForCausalLM" : nullptr;
    if (!hf_arch) fail("architecture '" + arch + "' cannot be exported");
    std::filesystem::create_directories(dir);
    const std::string A        = arch + ".";
    const uint32_t    n_embd   = f->require_u32(A + "embedding_length");
    const uint32_t    n_head   = f->require_u32(A + "attention.head_count");
    const uint32_t    n_kv     = u32_or(*f, A + "attention.head_count_kv", n_head);
    const auto *      te       = f->tensor("token_embd.weight");
    if (!te) fail("no token_embd.weight");

    // config.json, in the order transformers writes the common keys.
    ember_json c = jobj(), archs = jarr();
    archs.arr.push_back(jstr(hf_arch));
    put(c, "architectures", archs);
    put(c, "hidden_act", jstr("silu"));
    put(c, "hidden_size", jint(n_embd));
    put(c, "intermediate_size", jint(f->require_u32(A + "feed_forward_length")));
    put(c, "max_position_embeddings", jint(f->require_u32(A + "context_length")));
    put(c, "model_type", jstr(arch));
    put(c, "num_attention_heads", jint(n_head));
    put(c, "num_hidden_layers", jint(f->require_u32(A + "block_count")));
    put(c, "num_key_value_heads", jint(n_kv));
    if (f->find(A + "attention.key_length")) put(c, "head_dim", jint(f->require_u32(A + "attention.key_length")));
    put(c, "rms_norm_eps", jnum(short_float(f->get_f32(A + "attention.layer_norm_rms_epsilon", 1e-5f))));
    put(c, "rope_theta", jnum(short_float(f->get_f32(A + "rope.freq_base", 10000.0f))));
    if (f->get_str(A + "rope.scaling.type", "none") == "linear") {
        ember_json rs = jobj();
        put(rs, "type", jstr("linear"));
        put(rs, "factor", jnum(short_float(f->get_f32(A + "rope.scaling.factor", 1.0f))));
        put(c, "rope_scaling", rs);
    } else {
        put(c, "rope_scaling", jnull());
    }
    put(c, "tie_word_embeddings", jbool(f->tensor("output.weight") == nullptr));
    put(c, "vocab_size", jint(te->ne[1]));
    if (f->find("tokenizer.ggml.tokens")) export_tokenizer(*f, dir, opt, c);

    // Tensors, converted and renamed.
    std::vector<ember_test_st_tensor> tensors;
    ember_type                        dtype_2d = EMBER_TYPE_F32;
    for (const ember_gguf_tensor_info & ti : f->tensors) {
        ember_test_st_tensor t;
        t.name              = hf_name(ti.name);
        const bool one_d    = ti.n_dims == 1;
        ember_type to       = ti.type;
        if (opt.dtype >= 0 && (!one_d || opt.dtype_1d)) to = static_cast<ember_type>(opt.dtype);
        st_dtype(ti.type);
        t.dtype = st_dtype(to);
        if (!one_d) dtype_2d = to;
        for (int d = ti.n_dims - 1; d >= 0; d--) t.shape.push_back(ti.ne[d]);
        const size_t n = static_cast<size_t>(ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3]);
        t.data         = convert(f->tensor_data(ti), ti.type, n, to);
        if (arch == "llama" && (ti.name.find(".attn_q.") != std::string::npos || ti.name.find(".attn_k.") != std::string::npos)) {
            const int64_t heads = ti.name.find(".attn_q.") != std::string::npos ? n_head : n_kv;
            t.data              = unpermute(t.data, ti.ne[1], heads);
        }
        tensors.push_back(std::move(t));
    }
    if (opt.inv_freq) {
        const uint32_t head_dim = u32_or(*f, A + "attention.key_length", n_embd / n_head);
        const float    base     = f->get_f32(A + "rope.freq_base", 10000.0f);
        for (uint32_t il = 0; il < f->require_u32(A + "block_count"); il++) {
            ember_test_st_tensor t;
            t.name  = "model.layers." + std::to_string(il) + ".self_attn.rotary_emb.inv_freq";
            t.dtype = "F32";
            t.shape = {head_dim / 2};
            for (uint32_t i = 0; i < head_dim / 2; i++) {
                const float x = 1.0f / std::pow(base, 2.0f * static_cast<float>(i) / static_cast<float>(head_dim));
                const auto *p = reinterpret_cast<const uint8_t *>(&x);
                t.data.insert(t.data.end(), p, p + 4);
            }
            tensors.push_back(std::move(t));
        }
    }
    put(c, "torch_dtype", jstr(dtype_2d == EMBER_TYPE_F32 ? "float32" : dtype_2d == EMBER_TYPE_F16 ? "float16" : "bfloat16"));
    put(c, "transformers_version", jstr("4.46.0"));
    write_json(dir + "/config.json", c);

    if (opt.shard_bytes == 0) {
        ember_test_write_file(dir + "/model.safetensors", ember_test_safetensors_bytes(tensors));
        return;
    }
    std::vector<std::vector<ember_test_st_tensor>> shards(1);
    uint64_t                                       size = 0, total = 0;
    for (ember_test_st_tensor & t : tensors) {
        if (!shards.back().empty() && size + t.data.size() > opt.shard_bytes) {
            shards.emplace_back();
            size = 0;
        }
        size += t.data.size();
        total += t.data.size();
        shards.back().push_back(std::move(t));
    }
    ember_json index = jobj(), meta = jobj(), wmap = jobj();
    put(meta, "total_size", jint(static_cast<int64_t>(total)));
    for (size_t s = 0; s < shards.size(); s++) {
        char name[64];
        std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        for (const ember_test_st_tensor & t : shards[s]) put(wmap, t.name, jstr(name));
        ember_test_write_file(dir + "/" + name, ember_test_safetensors_bytes(shards[s]));
    }
    put(index, "metadata", meta);
    put(index, "weight_map", wmap);
    write_json(dir + "/model.safetensors.index.json", index);
}
