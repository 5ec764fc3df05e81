// Vocabulary loading (tokenizer.ggml.* -> ember_vocab), special-token handling, and the
// shared parts of tokenizing and detokenizing. Behaviour follows llama.cpp's llama-vocab where
// include/ember.h leaves room; the differences are noted where they are made.
#include "runtime/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include <xxhash.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/unicode.h"

namespace {

const char * const k_key_model      = "tokenizer.ggml.model";
const char * const k_key_pre        = "tokenizer.ggml.pre";
const char * const k_key_tokens     = "tokenizer.ggml.tokens";
const char * const k_key_scores     = "tokenizer.ggml.scores";
const char * const k_key_types      = "tokenizer.ggml.token_type";
const char * const k_key_merges     = "tokenizer.ggml.merges";
const char * const k_key_add_bos    = "tokenizer.ggml.add_bos_token";
const char * const k_key_add_eos    = "tokenizer.ggml.add_eos_token";
const char * const k_key_add_prefix = "tokenizer.ggml.add_space_prefix";

// Type value -> attribute (the table the token_type array indexes).
const uint32_t k_type_attr[EMBER_TOKEN_TYPE_COUNT] = {
    EMBER_TOKEN_ATTR_UNDEFINED, EMBER_TOKEN_ATTR_NORMAL, EMBER_TOKEN_ATTR_UNKNOWN, EMBER_TOKEN_ATTR_CONTROL,
    EMBER_TOKEN_ATTR_USER_DEFINED, EMBER_TOKEN_ATTR_UNUSED, EMBER_TOKEN_ATTR_BYTE,
};
static_assert(EMBER_TOKEN_TYPE_COUNT == 7, "k_type_attr has one entry per token type");

// Token texts that end a turn, in order of preference for the EOT token (when the file has
// no tokenizer.ggml.eot_token_id), and the wider set that ends generation (llama.cpp's lists).
const char * const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>",
};
const char * const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>",
};

const std::string k_space_marker = "\xe2\x96\x81";  // U+2581, SentencePiece's space

const ember_gguf_value * find_array(const ember_gguf_file & f, const char * key, ember_gguf_type elem, bool required) {
    const ember_gguf_value * v = f.find(key);
    if (!v) {
        if (required) ember_throw(EMBER_ERR_BAD_FORMAT, "missing key '%s'", key);
        return nullptr;
    }
    if (v->type != EMBER_GGUF_ARRAY || v->arr_type != elem) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s' must be an array of %s", key, ember_gguf_type_name(elem));
    }
    return v;
}

// Little-endian scalar array element i.
template <typename T> T arr_elem(const ember_gguf_value & v, size_t i) {
    T x;
    std::memcpy(&x, v.arr_data.data() + i * sizeof(T), sizeof(T));
    return x;
}

void check_length(const ember_gguf_value & v, const char * key, size_t n) {
    if (v.arr_n != n) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s' has %llu elements but '%s' has %zu", key,
                    static_cast<unsigned long long>(v.arr_n), k_key_tokens, n);
    }
}

// tokenizer.ggml.<name>_token_id: -1 when absent, else must be a token.
int32_t special_id(const ember_gguf_file & f, const std::string & name, int32_t n_tokens, int32_t def) {
    const std::string        key = "tokenizer.ggml." + name + "_token_id";
    const ember_gguf_value * v   = f.find(key);
    if (!v) return def;
    const int64_t id = v->as_i64(key.c_str());
    if (id < 0 || id >= n_tokens) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s' = %lld is not a token id (the vocabulary has %d tokens)", key.c_str(),
                    static_cast<long long>(id), n_tokens);
    }
    return static_cast<int32_t>(id);
}

// The bytes a token stands for, as ember_token_to_piece(special = 1) gives them.
std::string render_piece(const ember_vocab & v, int32_t id) {
    const std::string & t = v.text[id];
    const uint32_t      a = v.attr[id];
    if (a & (EMBER_TOKEN_ATTR_CONTROL | EMBER_TOKEN_ATTR_UNKNOWN | EMBER_TOKEN_ATTR_USER_DEFINED)) return t;
    const bool hex_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]));
    if ((a & EMBER_TOKEN_ATTR_BYTE) && hex_byte) return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    // Unused and undefined tokens render as nothing; byte tokens not written <0xNN> as text.
    if (!(a & (EMBER_TOKEN_ATTR_NORMAL | EMBER_TOKEN_ATTR_BYTE))) return "";
    std::string out;
    if (v.type == EMBER_VOCAB_SPM) {
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, k_space_marker.size(), k_space_marker) == 0) {
                out += ' ';
                i += k_space_marker.size();
            } else {
                out += t[i++];
            }
        }
        return out;
    }
    if (v.type == EMBER_VOCAB_BPE) {
        // Back from the GPT-2 alphabet; a code point outside it is kept as it is.
        for (size_t i = 0; i < t.size();) {
            const size_t   start = i;
            const uint32_t cpt   = ember_utf8_decode(t.data(), t.size(), i);
            const int32_t  byte  = ember_gpt2_cpt_to_byte(cpt);
            if (byte >= 0) {
                out += static_cast<char>(byte);
            } else {
                out.append(t, start, i - start);
            }
        }
        return out;
    }
    return t;
}

// The first id whose text is in `texts` (in list order), or -1.
template <size_t N> int32_t first_of(const ember_vocab & v, const char * const (&texts)[N]) {
    for (const char * s : texts) {
        const int32_t id = v.find(s);
        if (id >= 0) return id;
    }
    return -1;
}

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// llama.cpp's clean_up_tokenization_spaces (BPE vocabularies whose pre-tokenizer asks for it).
std::string clean_up_spaces(const std::string & s) {
    if (s.empty()) return s;
    // " ?" " !" " ." " ," lose the space.
    std::string a(1, s[0]);
    for (size_t i = 1; i < s.size(); i++) {
        const char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
        a += x;
    }
    // " ' " becomes "'".
    std::string b(1, a[0]);
    bool        skipped = false;  // a[i - 1] was a space dropped here: it no longer counts
    for (size_t i = 1; i < a.size(); i++) {
        const char x = a[i];
        if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && !skipped && a[i + 1] == ' ') {
            b.pop_back();
            b += x;
            i++;
            skipped = true;
            continue;
        }
        skipped = false;
        b += x;
    }
    // " 's" " 'm" " 're" " 've" lose the space (" 't" " 'd" " 'll" keep it).
    std::string c(1, b[0]);
    for (size_t i = 1; i < b.size(); i++) {
        const char x = b[i];
        if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
            const char x1 = b[i + 1];
            if (x1 == 's' || x1 == 'm') {
                c.pop_back();
            } else if (i + 2 < b.size() && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))) {
                c.pop_back();
            }
        }
        c += x;
    }
    return c;
}

// 64-bit hash of a token text (never the empty-slot key).
uint64_t text_hash(std::string_view s) {
    const uint64_t h = XXH3_64bits(s.data(), s.size());
    return h == ember_flat_table::k_empty ? 0 : h;
}

// A piece of the text, or a special token found in it.
struct fragment {
    int32_t token;  // -1: text [off, off + len)
    size_t  off, len;
};

}  // namespace

//
// Loading
//

std::unique_ptr<ember_vocab> ember_vocab_load(const ember_gguf_file & f) {
    auto           vp = std::make_unique<ember_vocab>();
    ember_vocab &  v  = *vp;
    v.model           = f.get_str(k_key_model, "");
    v.pre             = f.get_str(k_key_pre, "");
    if (!f.find(k_key_model)) ember_throw(EMBER_ERR_BAD_FORMAT, "missing key '%s'", k_key_model);

    // Tokens, scores, types.
    const ember_gguf_value * toks = find_array(f, k_key_tokens, EMBER_GGUF_STRING, true);
    if (toks->arr_str.empty() || toks->arr_str.size() > static_cast<size_t>(INT32_MAX / 2)) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s' has %zu tokens", k_key_tokens, toks->arr_str.size());
    }
    const size_t n = toks->arr_str.size();
    v.text         = toks->arr_str;
    v.score.assign(n, 0.0f);
    v.attr.assign(n, EMBER_TOKEN_ATTR_NORMAL);
    if (const ember_gguf_value * s = f.find(k_key_scores)) {
        if (s->type != EMBER_GGUF_ARRAY || (s->arr_type != EMBER_GGUF_FLOAT32 && s->arr_type != EMBER_GGUF_INT32)) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s' must be an array of float32", k_key_scores);
        }
        check_length(*s, k_key_scores, n);
        for (size_t i = 0; i < n; i++) {
            v.score[i] = s->arr_type == EMBER_GGUF_FLOAT32 ? arr_elem<float>(*s, i) : static_cast<float>(arr_elem<int32_t>(*s, i));
        }
    }
    if (const ember_gguf_value * t = find_array(f, k_key_types, EMBER_GGUF_INT32, false)) {
        check_length(*t, k_key_types, n);
        for (size_t i = 0; i < n; i++) {
            const int32_t type = arr_elem<int32_t>(*t, i);
            if (type < 0 || type >= EMBER_TOKEN_TYPE_COUNT) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': token %zu has type %d (known: 0 to %d)", k_key_types, i, type,
                            EMBER_TOKEN_TYPE_COUNT - 1);
            }
            v.attr[i] = k_type_attr[type];
        }
    }
    v.text_to_id.init(n);
    for (size_t i = 0; i < n; i++) {
        if (v.text[i].empty()) v.text[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp: never matches text
        const int32_t dup = v.find(v.text[i]);
        if (dup >= 0) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': token '%s' appears twice (ids %d and %zu)", k_key_tokens, v.text[i].c_str(), dup, i);
        }
        v.text_to_id.insert(text_hash(v.text[i]), i);
    }
    const int32_t n_tokens = v.n_tokens();

    // Family and its defaults.
    int32_t def_bos = -1, def_eos = -1, def_unk = -1;
    if (v.model == "llama") {
        v.type             = EMBER_VOCAB_SPM;
        v.add_space_prefix = true;
        v.add_bos          = true;
        def_bos            = n_tokens > 1 ? 1 : -1;
        def_eos            = n_tokens > 2 ? 2 : -1;
        def_unk            = 0;
    } else if (v.model == "gpt2") {
        v.type = EMBER_VOCAB_BPE;
        const ember_pre_info * pi = ember_pre_find(v.pre.empty() ? "default" : v.pre);
        if (v.pre.empty()) ember_log(EMBER_LOG_WARN, "vocab: no %s; using the 'default' pre-tokenizer", k_key_pre);
        if (pi) {
            v.pre_type      = pi->type;
            v.clean_spaces  = pi->clean_spaces;
            v.ignore_merges = pi->ignore_merges;
            v.add_bos       = pi->add_bos;
        } else {
            v.unsupported = ember_format("pre-tokenizer '%s' (%s) is not supported", v.pre.c_str(), k_key_pre);
        }
        const ember_gguf_value * m = find_array(f, k_key_merges, EMBER_GGUF_STRING, true);
        v.merges.init(m->arr_str.size());
        size_t n_skipped = 0;
        std::string joined;
        for (size_t i = 0; i < m->arr_str.size(); i++) {
            const std::string & s   = m->arr_str[i];
            const size_t        cut = s.find(' ', 1);
            if (cut == std::string::npos) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': merge %zu ('%s') is not two tokens separated by a space", k_key_merges, i,
                            s.c_str());
            }
            const int32_t left  = v.find(std::string_view(s).substr(0, cut));
            const int32_t right = v.find(std::string_view(s).substr(cut + 1));
            joined.assign(s, 0, cut);
            joined.append(s, cut + 1, std::string::npos);
            const int32_t result = v.find(joined);
            if (left < 0 || right < 0 || result < 0) {
                n_skipped++;  // cannot apply to token ids; the reference could only use it on non-tokens
                continue;
            }
            int32_t rank = 0, merged = 0;
            if (v.find_merge(left, right, rank, merged)) continue;  // the first (lowest) rank counts
            v.merges.insert((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right),
                            (static_cast<uint64_t>(i) << 32) | static_cast<uint32_t>(result));
            v.n_merges++;
        }
        if (n_skipped) ember_log(EMBER_LOG_DEBUG, "vocab: %zu merges name strings that are not tokens; skipped", n_skipped);
    } else if (v.model == "no_vocab" || v.model == "none") {
        v.unsupported = "the model has no tokenizer (tokenizer.ggml.model = '" + v.model + "')";
    } else {
        v.unsupported = ember_format("tokenizer '%s' (%s) is not supported", v.model.c_str(), k_key_model);
    }
    // Only SentencePiece tokenizing adds the prefix, so only there does detokenizing remove it.
    if (const ember_gguf_value * p = f.find(k_key_add_prefix)) {
        v.add_space_prefix = p->as_bool(k_key_add_prefix) && v.type == EMBER_VOCAB_SPM;
    }

    // Byte tokens.
    for (int b = 0; b < 256; b++) {
        v.byte_token[b] = -1;
        if (v.type == EMBER_VOCAB_BPE) {
            std::string s;
            ember_utf8_append(s, ember_gpt2_byte_to_cpt(static_cast<uint8_t>(b)));
            v.byte_token[b] = v.find(s);
        } else if (v.type == EMBER_VOCAB_SPM) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
            v.byte_token[b] = v.find(hex);
            if (v.byte_token[b] < 0) v.byte_token[b] = v.find(std::string(1, static_cast<char>(b)));
        }
    }

    // Special tokens.
    v.token_bos = special_id(f, "bos", n_tokens, def_bos);
    v.token_eos = special_id(f, "eos", n_tokens, def_eos);
    v.token_unk = special_id(f, "unknown", n_tokens, def_unk);
    v.token_eot = special_id(f, "eot", n_tokens, -1);
    v.token_eom = special_id(f, "eom", n_tokens, -1);
    v.token_sep = special_id(f, "seperator", n_tokens, -1);  // sic: the GGUF key is spelled so
    v.token_pad = special_id(f, "padding", n_tokens, -1);
    const ember_gguf_value * add_bos = f.find(k_key_add_bos);
    const ember_gguf_value * add_eos = f.find(k_key_add_eos);
    v.add_bos = add_bos ? add_bos->as_bool(k_key_add_bos) : v.add_bos && v.token_bos >= 0;  // a default needs a BOS
    v.add_eos = add_eos ? add_eos->as_bool(k_key_add_eos) : v.add_eos;
    if (v.add_bos && v.token_bos < 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s is true but there is no tokenizer.ggml.bos_token_id", k_key_add_bos);
    }
    if (v.add_eos && v.token_eos < 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s is true but there is no tokenizer.ggml.eos_token_id", k_key_add_eos);
    }

    // End of turn and end of generation, from the ids and, as llama.cpp does, from well-known
    // texts; tokens found this way are control tokens whatever the file says.
    if (v.token_eot < 0) v.token_eot = first_of(v, k_eot_texts);
    if (v.token_eom < 0) v.token_eom = v.find("<|eom_id|>");
    for (const char * s : k_eog_texts) {
        const int32_t id = v.find(s);
        if (id < 0) continue;
        v.eog.push_back(id);
        v.attr[id] |= EMBER_TOKEN_ATTR_CONTROL;
    }
    if (v.token_eot >= 0 && !f.find("tokenizer.ggml.eot_token_id")) v.attr[v.token_eot] |= EMBER_TOKEN_ATTR_CONTROL;
    for (int32_t id : {v.token_eos, v.token_eot, v.token_eom}) {
        if (id >= 0) v.eog.push_back(id);
    }
    std::sort(v.eog.begin(), v.eog.end());
    v.eog.erase(std::unique(v.eog.begin(), v.eog.end()), v.eog.end());

    // Special tokens matched in text (parse_special), longest first.
    for (int32_t id = 0; id < n_tokens; id++) {
        if (v.attr[id] & (EMBER_TOKEN_ATTR_CONTROL | EMBER_TOKEN_ATTR_USER_DEFINED | EMBER_TOKEN_ATTR_UNKNOWN)) v.special.push_back(id);
    }
    std::stable_sort(v.special.begin(), v.special.end(),
                     [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });

    // Phi-3 strips the spaces after its special tokens (llama.cpp matches this by model name).
    std::string name = f.get_str("general.name", "");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (int32_t id : v.special) v.attr[id] |= EMBER_TOKEN_ATTR_RSTRIP;
        if (int32_t id = v.find("</s>"); id >= 0) v.attr[id] |= EMBER_TOKEN_ATTR_RSTRIP;
        for (const char * s : {"<unk>", "<s>", "<|endoftext|>"}) {
            if (int32_t id = v.find(s); id >= 0) v.attr[id] &= ~EMBER_TOKEN_ATTR_RSTRIP;
        }
    }

    if (v.type == EMBER_VOCAB_SPM) {
        v.spm_split_words = true;
        for (const std::string & t : v.text) {
            for (size_t i = 0, prev = 0; i < t.size(); prev = i, i += ember_utf8_seq_len(static_cast<uint8_t>(t[i]))) {
                if (i > 0 && t.compare(i, k_space_marker.size(), k_space_marker) == 0 &&
                    t.compare(prev, k_space_marker.size(), k_space_marker) != 0) {
                    v.spm_split_words = false;
                }
            }
        }
    }

    v.piece.resize(n);
    for (int32_t id = 0; id < n_tokens; id++) v.piece[id] = render_piece(v, id);

    // The newline token.
    if (v.type == EMBER_VOCAB_SPM) {
        v.token_nl = v.byte_token[static_cast<uint8_t>('\n')];
    } else if (v.type == EMBER_VOCAB_BPE && v.unsupported.empty()) {
        std::vector<int32_t> nl;
        ember_bpe_tokenize(v, "\n", nl);
        v.token_nl = nl.empty() ? -1 : nl[0];
    }
    return vp;
}

//
// Queries
//

void ember_flat_table::init(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots.assign(cap, slot{});
    mask = cap - 1;
}

void ember_flat_table::insert(uint64_t key, uint64_t val) {
    uint64_t i = mix(key) & mask;
    while (slots[i].key != k_empty) i = (i + 1) & mask;
    slots[i] = {key, val};
}

int32_t ember_vocab::find(std::string_view s) const {
    int32_t id = -1;
    text_to_id.for_each(text_hash(s), [&](uint64_t v) {
        if (text[v] != s) return false;
        id = static_cast<int32_t>(v);
        return true;
    });
    return id;
}

bool ember_vocab::is_eog(int32_t id) const { return std::binary_search(eog.begin(), eog.end(), id); }

std::string_view ember_vocab::token_to_piece(int32_t id, bool render_special) const {
    if (!valid(id)) ember_throw(EMBER_ERR_INVALID_ARG, "token %d is out of range [0, %d)", id, n_tokens());
    if (!render_special && (attr[id] & (EMBER_TOKEN_ATTR_CONTROL | EMBER_TOKEN_ATTR_UNKNOWN))) return {};
    return piece[id];
}

//
// Tokenizing
//

void ember_vocab::tokenize(std::string_view s, bool add_special, bool parse_special, std::vector<int32_t> & out) const {
    if (!unsupported.empty()) ember_throw(EMBER_ERR_UNSUPPORTED, "cannot tokenize: %s", unsupported.c_str());

    // Cut out the special tokens (only with parse_special: include/ember.h says so, where
    // llama.cpp and Hugging Face also cut out user-defined tokens without it).
    std::vector<fragment> frags, next;
    if (!s.empty()) frags.push_back({-1, 0, s.size()});
    const std::vector<int32_t>   none;
    for (int32_t id : parse_special ? special : none) {
        const std::string & t = text[id];
        if (s.find(t) == std::string_view::npos) continue;
        next.clear();
        for (const fragment & fr : frags) {
            if (fr.token >= 0) {
                next.push_back(fr);
                continue;
            }
            size_t b = fr.off;
            const size_t e = fr.off + fr.len;
            while (b < e) {
                const size_t at = s.substr(0, e).find(t, b);
                if (at == std::string_view::npos) break;
                size_t left_end = at;
                if (attr[id] & EMBER_TOKEN_ATTR_LSTRIP) {
                    while (left_end > b && ascii_space(s[left_end - 1])) left_end--;
                }
                if (left_end > b) next.push_back({-1, b, left_end - b});
                next.push_back({id, 0, 0});
                b = at + t.size();
                if (attr[id] & EMBER_TOKEN_ATTR_RSTRIP) {
                    while (b < e && ascii_space(s[b])) b++;
                }
            }
            if (b < e) next.push_back({-1, b, e - b});
        }
        frags.swap(next);
    }

    if (add_special && add_bos) out.push_back(token_bos);
    if (type == EMBER_VOCAB_SPM) {
        // A space goes before the text and after each special token (llama.cpp, and what
        // SentencePiece does to each piece of text between added tokens).
        bool        prev_special = true;
        std::string escaped;
        for (const fragment & fr : frags) {
            if (fr.token >= 0) {
                out.push_back(fr.token);
                prev_special = true;
                continue;
            }
            escaped.clear();
            if (add_space_prefix && prev_special) escaped += k_space_marker;
            for (char c : s.substr(fr.off, fr.len)) {
                if (c == ' ') {
                    escaped += k_space_marker;
                } else {
                    escaped += c;
                }
            }
            ember_spm_tokenize(*this, escaped, out);
            prev_special = false;
        }
    } else {
        for (const fragment & fr : frags) {
            if (fr.token >= 0) {
                out.push_back(fr.token);
            } else {
                ember_bpe_tokenize(*this, s.substr(fr.off, fr.len), out);
            }
        }
    }
    if (add_special && add_eos) out.push_back(token_eos);
}

std::string ember_vocab::detokenize(const int32_t * tokens, size_t n, bool remove_special, bool unparse_special) const {
    size_t b = 0, e = n;
    if (remove_special && e > b && token_bos >= 0 && tokens[b] == token_bos) b++;
    if (remove_special && e > b && token_eos >= 0 && tokens[e - 1] == token_eos) e--;
    // The space SentencePiece put before the first word goes, whatever precedes it unrendered
    // (llama.cpp removes it only when the very first token is that word's).
    bool        remove_space = add_space_prefix;
    std::string out;
    for (size_t i = b; i < e; i++) {
        std::string_view p = token_to_piece(tokens[i], unparse_special);
        if (p.empty()) continue;
        if (remove_space && p[0] == ' ') p.remove_prefix(1);
        remove_space = false;
        out.append(p.data(), p.size());
    }
    return clean_spaces ? clean_up_spaces(out) : out;
}
