// tokenizer.json (+ tokenizer_config.json, config.json, generation_config.json) -> tokenizer.*
// GGUF metadata, following llama.cpp's convert_hf_to_gguf.py (get_vocab_base for byte-level
// BPE, LlamaHfVocab for SentencePiece-style BPE, gguf-py's SpecialVocab for special tokens and
// the chat template). Where the converter runs the Python tokenizers library, this file reads
// the JSON itself:
//   - tokenizer.ggml.pre: llama.cpp hashes the tokenizer's output on a test text; here the
//     pre_tokenizer description is matched against the expressions of the known families.
//   - SentencePiece scores: tokenizer.json keeps the merges but not the scores (and llama.cpp's
//     LlamaHfVocab writes -1000 for every token). Here the token made by merge r gets score -r,
//     so Ember's score-driven tokenizer applies the merges in the file's order, as Hugging
//     Face's BPE does.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sys/stat.h>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/hf-import.h"
#include "runtime/log.h"
#include "runtime/vocab.h"

namespace {

const char * const k_spm_space = "\xe2\x96\x81";  // U+2581, SentencePiece's space

const char * const k_kind_names[] = {"null", "a boolean", "an integer", "a number", "a string", "an array", "an object"};

// A member of an object with the given kind; nullptr when absent or JSON null. A member of
// another kind throws, naming the file and key.
const ember_json * member(const ember_json & o, const char * key, ember_json_kind kind, const std::string & where) {
    const ember_json * v = o.find(key);
    if (!v || v->kind == EMBER_JSON_NULL) return nullptr;
    if (v->kind != kind) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: '%s' must be %s", where.c_str(), key, k_kind_names[kind]);
    return v;
}

bool bool_or(const ember_json & o, const char * key, bool def, const std::string & where) {
    const ember_json * v = member(o, key, EMBER_JSON_BOOL, where);
    return v ? v->b : def;
}

//
// Pre-tokenizer recognition
//

const char * const k_re_gpt2   = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char * const k_re_llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const char * const k_re_qwen2  = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const char * const k_re_newline  = "[\r\n]";
const char * const k_re_ds_punct = u8"\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
const char * const k_re_ds_cjk   = u8"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
const char * const k_re_ds3_kana = u8"[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
const char * const k_re_ds3_main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
// DeepSeek LLM's letter class lists about 90 ranges; it is recognized by its opening.
const char * const k_re_ds_letters_open = u8"\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA";
const char * const k_stage_ds_letters   = "<deepseek-llm letters>";

// The expression in one canonical spelling: the case-insensitive contractions as (?i:...),
// and \r \n as the characters themselves (tokenizer files use both spellings).
std::string canonical_regex(const std::string & in) {
    std::string       r     = in;
    const std::string cased = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
    for (size_t at; (at = r.find(cased)) != std::string::npos;) r.replace(at, cased.size(), "(?i:'s|'t|'re|'ve|'m|'ll|'d)");
    std::string out;
    for (size_t i = 0; i < r.size(); i++) {
        if (r[i] == '\\' && i + 1 < r.size()) {
            const char c = r[++i];
            if (c == 'r' || c == 'n') {
                out += c == 'r' ? '\r' : '\n';
            } else {
                out += '\\';
                out += c;  // other escapes, \\ included, stay whole
            }
        } else {
            out += r[i];
        }
    }
    if (out.rfind(k_re_ds_letters_open, 0) == 0 && out.size() > 2 && out.compare(out.size() - 2, 2, "]+") == 0) {
        return k_stage_ds_letters;
    }
    return out;
}

// Flattens a pre_tokenizer description into the expressions it applies, in order. A step
// Ember cannot express becomes "unsupported: ..." (and then matches no family).
void pre_stages(const ember_json & p, std::vector<std::string> & out, int depth) {
    const std::string where = "tokenizer.json: pre_tokenizer";
    if (p.kind == EMBER_JSON_NULL) return;
    if (p.kind != EMBER_JSON_OBJECT || depth > 8) ember_throw(EMBER_ERR_BAD_FORMAT, "%s is not an object", where.c_str());
    const ember_json * type = member(p, "type", EMBER_JSON_STRING, where);
    const std::string  t    = type ? type->str : "";
    if (t == "Sequence") {
        const ember_json * list = member(p, "pretokenizers", EMBER_JSON_ARRAY, where);
        if (!list) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: Sequence without 'pretokenizers'", where.c_str());
        for (const ember_json & e : list->arr) pre_stages(e, out, depth + 1);
    } else if (t == "ByteLevel") {
        // The byte-to-character mapping itself is what "gpt2" vocabularies always do.
        if (bool_or(p, "use_regex", true, where)) out.push_back(k_re_gpt2);
        if (bool_or(p, "add_prefix_space", false, where)) out.push_back("unsupported: ByteLevel add_prefix_space");
    } else if (t == "Split") {
        const ember_json * pat      = member(p, "pattern", EMBER_JSON_OBJECT, where);
        const ember_json * behavior = member(p, "behavior", EMBER_JSON_STRING, where);
        const ember_json * re       = pat ? member(*pat, "Regex", EMBER_JSON_STRING, where) : nullptr;
        if (!re || (behavior && behavior->str != "Isolated") || bool_or(p, "invert", false, where)) {
            out.push_back("unsupported: Split other than an isolated regex");
        } else {
            out.push_back(canonical_regex(re->str));
        }
    } else if (t == "Digits") {
        out.push_back(bool_or(p, "individual_digits", false, where) ? "\\p{N}" : "\\p{N}+");
    } else {
        out.push_back("unsupported: " + (t.empty() ? std::string("a step without a type") : t));
    }
}

// Known families: tokenizer.ggml.pre and the expressions of their pre_tokenizer.
struct pre_family {
    const char *              name;
    int                       ignore_merges;  // -1: any; 0/1: model.ignore_merges must be this
    std::vector<const char *> stages;
};

const std::vector<pre_family> & pre_families() {
    static const std::vector<pre_family> k = {
        {"gpt-2", -1, {k_re_gpt2}},
        {"llama-bpe", 1, {k_re_llama3}},
        {"smaug-bpe", 0, {k_re_llama3}},  // the Llama 3 expression without ignore_merges
        {"qwen2", -1, {k_re_qwen2}},
        {"starcoder", -1, {"\\p{N}", k_re_gpt2}},
        {"deepseek-llm", -1, {k_re_newline, k_stage_ds_letters, k_re_ds_punct, "\\s+$", k_re_ds_cjk, "\\p{N}+"}},
        {"deepseek-coder", -1, {k_re_newline, "\\s?\\p{L}+", "\\s?\\p{P}+", k_re_ds_cjk, "\\p{N}"}},
        {"deepseek-v3", -1, {"\\p{N}{1,3}", k_re_ds3_kana, k_re_ds3_main}},
    };
    return k;
}

std::string choose_pre(const ember_json & tj, bool ignore_merges) {
    std::vector<std::string> stages;
    if (const ember_json * p = tj.find("pre_tokenizer")) pre_stages(*p, stages, 0);
    for (const pre_family & f : pre_families()) {
        if (f.ignore_merges >= 0 && f.ignore_merges != static_cast<int>(ignore_merges)) continue;
        if (f.stages.size() != stages.size()) continue;
        bool same = true;
        for (size_t i = 0; i < stages.size() && same; i++) same = stages[i] == canonical_regex(f.stages[i]);
        if (same) return f.name;
    }
    std::string have, known;
    for (const std::string & s : stages) have += (have.empty() ? "" : " , ") + s;
    for (const pre_family & f : pre_families()) known += (known.empty() ? "" : ", ") + std::string(f.name);
    ember_throw(EMBER_ERR_UNSUPPORTED,
                "tokenizer.json: the pre_tokenizer (%s) matches no pre-tokenizer Ember knows (%s); converting with a wrong one "
                "would tokenize text differently from the model's training",
                have.empty() ? "none" : have.c_str(), known.c_str());
}

//
// Tokens
//

struct added_token {
    int64_t     id = -1;
    std::string content;
    bool        special = false;
};

// llama.cpp's does_token_look_special: added tokens some models forget to mark special.
bool looks_special(const std::string & t) {
    auto starts = [&](const char * p) { return t.rfind(p, 0) == 0; };
    auto ends   = [&](const char * s) {
        const size_t n = std::strlen(s);
        return t.size() >= n && t.compare(t.size() - n, n, s) == 0;
    };
    if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
    if (starts("<|") && ends("|>")) return true;
    if (starts("<\xef\xbd\x9c") && ends("\xef\xbd\x9c>")) return true;  // <｜ ... ｜>
    return starts("<unused") && ends(">");
}

bool is_byte_token(const std::string & t) {
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// One merge as "left right" (GGUF form). The list form [left, right] allows spaces inside a
// part; they are written as U+0120, as gguf-py does.
std::string merge_string(const ember_json & m, size_t i) {
    if (m.kind == EMBER_JSON_STRING) return m.str;
    if (m.kind == EMBER_JSON_ARRAY && m.arr.size() == 2 && m.arr[0].kind == EMBER_JSON_STRING && m.arr[1].kind == EMBER_JSON_STRING) {
        std::string s;
        for (int k = 0; k < 2; k++) {
            if (k) s += ' ';
            for (char c : m.arr[k].str) {
                if (c == ' ') {
                    s += "\xc4\xa0";
                } else {
                    s += c;
                }
            }
        }
        return s;
    }
    ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
}

// The content of a special-token entry of tokenizer_config.json ("<s>" or {"content": "<s>"}).
bool special_content(const ember_json * e, std::string & out) {
    if (!e) return false;
    if (e->kind == EMBER_JSON_STRING) {
        out = e->str;
        return true;
    }
    if (e->kind == EMBER_JSON_OBJECT) {
        const ember_json * c = e->find("content");
        if (c && c->kind == EMBER_JSON_STRING) {
            out = c->str;
            return true;
        }
    }
    return false;
}

// The TemplateProcessing step of a post_processor (possibly inside a Sequence), or nullptr.
const ember_json * find_template(const ember_json * pp) {
    if (!pp || pp->kind != EMBER_JSON_OBJECT) return nullptr;
    const ember_json * t = pp->find("type");
    if (t && t->kind == EMBER_JSON_STRING && t->str == "TemplateProcessing") return pp;
    const ember_json * list = pp->find("processors");
    if (list && list->kind == EMBER_JSON_ARRAY) {
        for (const ember_json & e : list->arr) {
            if (const ember_json * f = find_template(&e)) return f;
        }
    }
    return nullptr;
}

// The special token a template item names ({"SpecialToken": {"id": "<s>"}}), "" otherwise.
std::string template_special(const ember_json & item) {
    const ember_json * st = item.find("SpecialToken");
    const ember_json * id = st ? st->find("id") : nullptr;
    return id && id->kind == EMBER_JSON_STRING ? id->str : "";
}

// Does the normalizer or pre-tokenizer put U+2581 before the text (SentencePiece's dummy prefix)?
bool adds_space_prefix(const ember_json * j, int depth) {
    if (!j || j->kind != EMBER_JSON_OBJECT || depth > 8) return false;
    const ember_json * t = j->find("type");
    const std::string  type = t && t->kind == EMBER_JSON_STRING ? t->str : "";
    if (type == "Prepend") {
        const ember_json * p = j->find("prepend");
        return p && p->kind == EMBER_JSON_STRING && p->str == k_spm_space;
    }
    if (type == "Metaspace") {
        const ember_json * scheme = j->find("prepend_scheme");
        if (scheme && scheme->kind == EMBER_JSON_STRING) return scheme->str != "never";
        const ember_json * add = j->find("add_prefix_space");
        return !add || add->kind != EMBER_JSON_BOOL || add->b;
    }
    for (const char * key : {"normalizers", "pretokenizers"}) {
        const ember_json * list = j->find(key);
        if (!list || list->kind != EMBER_JSON_ARRAY) continue;
        for (const ember_json & e : list->arr) {
            if (adds_space_prefix(&e, depth + 1)) return true;
        }
    }
    return false;
}

}  // namespace

void ember_hf_tokenizer_kv(const std::string & dir, int64_t n_vocab, std::vector<ember_gguf_kv> & kv) {
    const std::string tj_where = dir + "/tokenizer.json";
    ember_json        tj;
    if (!ember_hf_read_json_if_present(tj_where, tj)) {
        struct stat st;
        if (::stat((dir + "/tokenizer.model").c_str(), &st) == 0) {
            ember_throw(EMBER_ERR_UNSUPPORTED, "%s: the folder has tokenizer.model but no tokenizer.json; Ember reads tokenizer.json",
                        dir.c_str());
        }
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: missing tokenizer.json", dir.c_str());
    }
    if (tj.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s is not a JSON object", tj_where.c_str());
    // The optional companions; an absent file reads as an empty object.
    auto optional_object = [&](const char * name) {
        ember_json j;
        j.kind = EMBER_JSON_OBJECT;
        ember_json got;
        if (ember_hf_read_json_if_present(dir + "/" + name, got)) {
            if (got.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s/%s is not a JSON object", dir.c_str(), name);
            j = std::move(got);
        }
        return j;
    };
    const ember_json tc  = optional_object("tokenizer_config.json");
    const ember_json cfg = optional_object("config.json");
    const ember_json gen = optional_object("generation_config.json");

    const ember_json * model = member(tj, "model", EMBER_JSON_OBJECT, "tokenizer.json");
    if (!model) ember_throw(EMBER_ERR_BAD_FORMAT, "%s has no 'model' object", tj_where.c_str());
    const ember_json * mtype = member(*model, "type", EMBER_JSON_STRING, "tokenizer.json: model");
    if (!mtype || mtype->str != "BPE") {
        ember_throw(EMBER_ERR_UNSUPPORTED,
                    "tokenizer.json: model type '%s' is not supported (Ember imports BPE tokenizers: byte-level, or "
                    "SentencePiece-style with byte_fallback)",
                    mtype ? mtype->str.c_str() : "(none)");
    }
    const bool         spm   = bool_or(*model, "byte_fallback", false, "tokenizer.json: model");
    const ember_json * vocab = member(*model, "vocab", EMBER_JSON_OBJECT, "tokenizer.json: model");
    if (!vocab) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: model has no 'vocab' object");

    // Token ids: the model's vocabulary, then the added tokens (which win on a shared id).
    constexpr int64_t k_max_tokens = int64_t(1) << 23;  // far above any real vocabulary
    int64_t           max_id       = -1;
    auto              check_id     = [&](const ember_json & v, const std::string & what) {
        if (v.kind != EMBER_JSON_INT || v.i < 0 || v.i >= k_max_tokens) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: %s has no valid token id", what.c_str());
        }
        max_id = std::max(max_id, v.i);
        return v.i;
    };
    for (const auto & e : vocab->obj) check_id(e.second, "model.vocab entry '" + e.first + "'");
    std::vector<added_token> added;
    if (const ember_json * at = member(tj, "added_tokens", EMBER_JSON_ARRAY, "tokenizer.json")) {
        for (size_t i = 0; i < at->arr.size(); i++) {
            const std::string  what = "added_tokens[" + std::to_string(i) + "]";
            const ember_json & e    = at->arr[i];
            if (e.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: %s is not an object", what.c_str());
            const ember_json * id      = e.find("id");
            const ember_json * content = member(e, "content", EMBER_JSON_STRING, "tokenizer.json: " + what);
            if (!id || !content) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: %s needs 'id' and 'content'", what.c_str());
            added.push_back({check_id(*id, what), content->str, bool_or(e, "special", false, "tokenizer.json: " + what)});
        }
    }
    if (max_id < 0) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: the vocabulary is empty");
    int64_t n = max_id + 1;
    if (n_vocab > 0) {
        if (n > n_vocab) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json has token id %lld, but config.json vocab_size is %lld", (long long) max_id,
                        (long long) n_vocab);
        }
        n = n_vocab;
    }

    std::vector<std::string> tokens(static_cast<size_t>(n));
    std::vector<int32_t>     types(static_cast<size_t>(n), EMBER_TOKEN_TYPE_UNUSED);
    std::vector<bool>        have(static_cast<size_t>(n), false);
    // A vocabulary text that an added token takes over under another id loses its own id, as
    // in the converter's text -> id view of the vocabulary (the id is then padding).
    std::unordered_map<std::string, int64_t> added_id;
    for (const added_token & a : added) added_id.emplace(a.content, a.id);
    for (const auto & e : vocab->obj) {
        const size_t id = static_cast<size_t>(e.second.i);
        auto         a  = added_id.find(e.first);
        if (a != added_id.end() && a->second != e.second.i) continue;
        if (have[id]) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: tokens '%s' and '%s' share id %zu", tokens[id].c_str(), e.first.c_str(), id);
        }
        tokens[id] = e.first;
        have[id]   = true;
        types[id]  = spm && is_byte_token(e.first) ? EMBER_TOKEN_TYPE_BYTE : EMBER_TOKEN_TYPE_NORMAL;
    }
    for (const added_token & a : added) {
        const size_t id = static_cast<size_t>(a.id);
        tokens[id]      = a.content;
        have[id]        = true;
        if (spm) {
            types[id] = is_byte_token(a.content) ? EMBER_TOKEN_TYPE_BYTE : a.special ? EMBER_TOKEN_TYPE_CONTROL : EMBER_TOKEN_TYPE_USER_DEFINED;
        } else {
            types[id] = a.special || looks_special(a.content) ? EMBER_TOKEN_TYPE_CONTROL : EMBER_TOKEN_TYPE_USER_DEFINED;
        }
    }
    for (size_t i = 0; i < tokens.size(); i++) {
        if (!have[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";  // as llama.cpp pads
    }
    std::unordered_map<std::string, int64_t> id_of;
    for (size_t i = 0; i < tokens.size(); i++) id_of.emplace(tokens[i], static_cast<int64_t>(i));

    // SentencePiece's unknown token.
    if (spm) {
        if (const ember_json * unk = member(*model, "unk_token", EMBER_JSON_STRING, "tokenizer.json: model")) {
            auto it = id_of.find(unk->str);
            if (it != id_of.end()) types[static_cast<size_t>(it->second)] = EMBER_TOKEN_TYPE_UNKNOWN;
        }
    }

    // Merges.
    const ember_json *       merges_json = member(*model, "merges", EMBER_JSON_ARRAY, "tokenizer.json: model");
    std::vector<std::string> merges;
    if (merges_json) {
        merges.reserve(merges_json->arr.size());
        for (size_t i = 0; i < merges_json->arr.size(); i++) merges.push_back(merge_string(merges_json->arr[i], i));
    }
    const std::string pre = spm ? "default" : choose_pre(tj, bool_or(*model, "ignore_merges", false, "tokenizer.json: model"));
    if (!spm && merges.empty()) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.json: a byte-level BPE model needs model.merges");

    ember_gguf_writer w;  // collects the keys in order
    w.set_str("tokenizer.ggml.model", spm ? "llama" : "gpt2");
    w.set_str("tokenizer.ggml.pre", pre);
    w.set_arr_str("tokenizer.ggml.tokens", tokens);
    if (spm) {
        // Score -r for the result of merge r (its first merge, if several make it); other
        // normal tokens after every merge, in id order; the rest 0.
        std::vector<float> scores(tokens.size(), 0.0f);
        std::vector<bool>  scored(tokens.size(), false);
        std::string        joined;
        for (size_t r = 0; r < merges.size(); r++) {
            const size_t cut = merges[r].find(' ', 1);
            if (cut == std::string::npos) continue;
            joined.assign(merges[r], 0, cut);
            joined.append(merges[r], cut + 1, std::string::npos);
            auto it = id_of.find(joined);
            if (it == id_of.end()) continue;
            const size_t id = static_cast<size_t>(it->second);
            if (scored[id] || types[id] != EMBER_TOKEN_TYPE_NORMAL) continue;
            scores[id] = -static_cast<float>(r);
            scored[id] = true;
        }
        for (size_t i = 0; i < tokens.size(); i++) {
            if (!scored[i] && types[i] == EMBER_TOKEN_TYPE_NORMAL) scores[i] = -static_cast<float>(merges.size() + i);
        }
        w.set_arr_f32("tokenizer.ggml.scores", scores);
    }
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    if (spm) {
        const ember_json * norm = tj.find("normalizer");
        const ember_json * pre  = tj.find("pre_tokenizer");
        w.set_bool("tokenizer.ggml.add_space_prefix", adds_space_prefix(norm, 0) || adds_space_prefix(pre, 0));
    } else {
        w.set_arr_str("tokenizer.ggml.merges", merges);
    }

    // Special tokens, first source wins (gguf-py's SpecialVocab): tokenizer_config.json's
    // token text looked up among the added tokens, then config.json's <typ>_token_id, then
    // generation_config.json's.
    struct special_def {
        const char * hf;
        const char * gguf;
    };
    const special_def k_specials[] = {{"bos", "bos"}, {"eos", "eos"}, {"unk", "unknown"}, {"sep", "seperator"},
                                      {"pad", "padding"}, {"cls", "cls"}, {"mask", "mask"}};
    int64_t           special_id[7];
    for (size_t s = 0; s < 7; s++) {
        const special_def & d  = k_specials[s];
        int64_t             id = -1;
        std::string         content;
        if (special_content(tc.find(std::string(d.hf) + "_token"), content)) {
            for (const added_token & a : added) {
                if (a.content == content) {
                    id = a.id;
                    break;
                }
            }
        }
        for (const ember_json * src : {&cfg, &gen}) {
            const ember_json * v = src->find(std::string(d.hf) + "_token_id");
            if (id < 0 && v && v->kind == EMBER_JSON_INT) {
                if (v->i < 0) ember_throw(EMBER_ERR_BAD_FORMAT, "%s_token_id = %lld is negative", d.hf, (long long) v->i);
                id = v->i;
            }
        }
        if (id < 0 && spm && s == 2) {  // SentencePiece's unknown token, named by the model
            const ember_json * unk = member(*model, "unk_token", EMBER_JSON_STRING, "tokenizer.json: model");
            auto               it  = unk ? id_of.find(unk->str) : id_of.end();
            if (it != id_of.end()) id = it->second;
        }
        if (id >= n) {
            ember_log(EMBER_LOG_WARN, "hf import: %s token id %lld is outside the vocabulary (%lld tokens); ignored", d.hf, (long long) id,
                      (long long) n);
            id = -1;
        }
        special_id[s] = id;
        if (id >= 0) w.set_u32(std::string("tokenizer.ggml.") + d.gguf + "_token_id", static_cast<uint32_t>(id));
    }

    // add_bos / add_eos: tokenizer_config.json, else what the post-processor's template adds.
    const ember_json * add_bos  = member(tc, "add_bos_token", EMBER_JSON_BOOL, "tokenizer_config.json");
    const ember_json * add_eos  = member(tc, "add_eos_token", EMBER_JSON_BOOL, "tokenizer_config.json");
    const ember_json * tmpl     = find_template(tj.find("post_processor"));
    const ember_json * single   = tmpl ? tmpl->find("single") : nullptr;
    const bool         has_tmpl = single && single->kind == EMBER_JSON_ARRAY && !single->arr.empty();
    if (add_bos) {
        w.set_bool("tokenizer.ggml.add_bos_token", add_bos->b);
    } else if (has_tmpl) {
        const std::string first = template_special(single->arr.front());
        w.set_bool("tokenizer.ggml.add_bos_token", special_id[0] >= 0 && !first.empty() && first == tokens[static_cast<size_t>(special_id[0])]);
    }
    if (add_eos) {
        w.set_bool("tokenizer.ggml.add_eos_token", add_eos->b);
    } else if (has_tmpl) {
        const std::string last = single->arr.size() > 1 ? template_special(single->arr.back()) : "";
        w.set_bool("tokenizer.ggml.add_eos_token", special_id[1] >= 0 && !last.empty() && last == tokens[static_cast<size_t>(special_id[1])]);
    }

    // Chat template: tokenizer_config.json, else chat_template.json, else chat_template.jinja.
    const ember_json * ct = tc.find("chat_template");
    ember_json         ct_alt;
    if ((!ct || ct->kind == EMBER_JSON_NULL) && ember_hf_read_json_if_present(dir + "/chat_template.json", ct_alt) &&
        ct_alt.kind == EMBER_JSON_OBJECT) {
        ct = ct_alt.find("chat_template");
    }
    if (ct && ct->kind == EMBER_JSON_STRING) {
        w.set_str("tokenizer.chat_template", ct->str);
    } else if (ct && ct->kind == EMBER_JSON_ARRAY) {
        // Named templates (gguf-py's add_chat_template): "default" is the template; the others
        // go to tokenizer.chat_template.<name>, listed in tokenizer.chat_templates.
        std::vector<std::string> names;
        const ember_json *       def = nullptr;
        for (const ember_json & e : ct->arr) {
            const ember_json * name = e.kind == EMBER_JSON_OBJECT ? e.find("name") : nullptr;
            const ember_json * text = e.kind == EMBER_JSON_OBJECT ? e.find("template") : nullptr;
            if (!name || name->kind != EMBER_JSON_STRING || !text || text->kind != EMBER_JSON_STRING || name->str.empty()) continue;
            std::string clean;
            for (char c : name->str) clean += std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80 ? c : '_';
            if (clean == "default") {
                def = text;
            } else if (std::find(names.begin(), names.end(), clean) == names.end()) {
                names.push_back(clean);
                w.set_str("tokenizer.chat_template." + clean, text->str);
            }
        }
        if (!names.empty()) w.set_arr_str("tokenizer.chat_templates", names);
        if (def) w.set_str("tokenizer.chat_template", def->str);
    } else if (ct && ct->kind != EMBER_JSON_NULL) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer_config.json: 'chat_template' must be a string or a list of {name, template}");
    } else {
        std::string text;
        if (ember_hf_read_text_if_present(dir + "/chat_template.jinja", text)) w.set_str("tokenizer.chat_template", text);
    }

    kv.insert(kv.end(), w.kv.begin(), w.kv.end());
}

std::vector<float> ember_hf_llama3_rope_factors(double base, int64_t dim, double factor, double low_freq_factor, double high_freq_factor,
                                                double old_context_len) {
    // The converter computes in torch float32, where a Python scalar joins a float32 tensor as
    // float32 and `scalar / tensor` is tensor.reciprocal() * scalar:
    //   freqs = 1.0 / (base ** (arange(0, dim, 2) / dim)); wavelen = 2 * pi / freq; ...
    const float        f_low  = static_cast<float>(low_freq_factor);
    const float        f_fac  = static_cast<float>(factor);
    const float        f_old  = static_cast<float>(old_context_len);
    const float        f_span = static_cast<float>(high_freq_factor - low_freq_factor);
    const float        low_freq_wavelen  = static_cast<float>(old_context_len / low_freq_factor);
    const float        high_freq_wavelen = static_cast<float>(old_context_len / high_freq_factor);
    const float        two_pi            = static_cast<float>(2.0 * 3.14159265358979323846);
    std::vector<float> out;
    for (int64_t i = 0; i < dim; i += 2) {
        const float freq    = (1.0f / std::pow(static_cast<float>(base), static_cast<float>(i) / static_cast<float>(dim))) * 1.0f;
        const float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < high_freq_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > low_freq_wavelen) {
            out.push_back(f_fac);
        } else {
            const float smooth = ((1.0f / wavelen) * f_old - f_low) / f_span;
            out.push_back(1.0f / ((1.0f - smooth) / f_fac + smooth));
        }
    }
    return out;
}
