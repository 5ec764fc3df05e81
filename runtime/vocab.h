// The vocabulary of a model and its tokenizer, read entirely from GGUF metadata
// (tokenizer.ggml.*). Immutable after ember_vocab_load, so one vocabulary may be used by
// several threads at once.
//
// Families (tokenizer.ggml.model):
//   "llama"  SentencePiece-style BPE over token scores, with byte fallback <0xNN>
//            (runtime/tokenizer-spm.cpp)
//   "gpt2"   byte-level BPE over ranked merges, after a pre-tokenizer chosen by
//            tokenizer.ggml.pre (runtime/tokenizer-bpe.cpp, runtime/pretokenizer.cpp)
// Other families ("bert", "t5", ...) load, so their models still run, but cannot tokenize:
// `unsupported` says why.
#ifndef EMBER_RUNTIME_VOCAB_H
#define EMBER_RUNTIME_VOCAB_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf.h"
#include "runtime/pretokenizer.h"

enum ember_vocab_type : int32_t {
    EMBER_VOCAB_NONE = 0,  // no tokenizer this build can run
    EMBER_VOCAB_SPM  = 1,
    EMBER_VOCAB_BPE  = 2,
};

// tokenizer.ggml.token_type values (GGUF; never renumbered).
enum ember_token_type : int32_t {
    EMBER_TOKEN_TYPE_UNDEFINED    = 0,
    EMBER_TOKEN_TYPE_NORMAL       = 1,
    EMBER_TOKEN_TYPE_UNKNOWN      = 2,
    EMBER_TOKEN_TYPE_CONTROL      = 3,
    EMBER_TOKEN_TYPE_USER_DEFINED = 4,
    EMBER_TOKEN_TYPE_UNUSED       = 5,
    EMBER_TOKEN_TYPE_BYTE         = 6,
    EMBER_TOKEN_TYPE_COUNT
};

// Per-token attributes (a token type, plus what the loader learns about it).
enum : uint32_t {
    EMBER_TOKEN_ATTR_UNDEFINED    = 0,
    EMBER_TOKEN_ATTR_NORMAL       = 1u << 0,
    EMBER_TOKEN_ATTR_UNKNOWN      = 1u << 1,
    EMBER_TOKEN_ATTR_CONTROL      = 1u << 2,
    EMBER_TOKEN_ATTR_USER_DEFINED = 1u << 3,
    EMBER_TOKEN_ATTR_UNUSED       = 1u << 4,
    EMBER_TOKEN_ATTR_BYTE         = 1u << 5,
    EMBER_TOKEN_ATTR_LSTRIP       = 1u << 6,  // when matched as special: drop spaces before it
    EMBER_TOKEN_ATTR_RSTRIP       = 1u << 7,  // ... and after it
};

// Open addressing with linear probing over a power-of-two array: 64-bit keys (never ~0) to
// 64-bit values. Tokenizing spends most of its time in lookups, and a flat array costs one
// cache miss where std::unordered_map chases a bucket and a node. Several entries may share
// a key (text hashes); for_each visits them.
struct ember_flat_table {
    static constexpr uint64_t k_empty = ~uint64_t(0);
    struct slot {
        uint64_t key = k_empty;
        uint64_t val = 0;
    };
    std::vector<slot> slots;
    uint64_t          mask = 0;

    static uint64_t mix(uint64_t k) { return (k ^ (k >> 29)) * 0x9E3779B97F4A7C15ull; }
    void            init(size_t n);  // room for n entries
    void            insert(uint64_t key, uint64_t val);
    // Calls f(val) for each entry of `key` until f returns true; returns whether one did.
    template <typename F> bool for_each(uint64_t key, F && f) const {
        if (slots.empty()) return false;
        for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
            const slot & s = slots[i];
            if (s.key == k_empty) return false;
            if (s.key == key && f(s.val)) return true;
        }
    }
};

struct ember_vocab {
    ember_vocab_type type = EMBER_VOCAB_NONE;
    std::string      model;        // tokenizer.ggml.model
    std::string      pre;          // tokenizer.ggml.pre ("" when absent)
    ember_pre_type   pre_type = EMBER_PRE_DEFAULT;
    std::string      unsupported;  // non-empty: why this vocabulary cannot tokenize

    std::vector<std::string> text;    // [n] token text as stored (SPM: spaces as U+2581; BPE: GPT-2 alphabet)
    std::vector<float>       score;   // [n]
    std::vector<uint32_t>    attr;    // [n] EMBER_TOKEN_ATTR_*
    std::vector<std::string> piece;   // [n] the bytes each token stands for (control tokens: their text)

    // Lookups.
    ember_flat_table     text_to_id;  // hash of the text -> id
    ember_flat_table     merges;      // left id << 32 | right id -> rank << 32 | merged id
    size_t               n_merges = 0;
    int32_t              byte_token[256];  // BPE: the token of each byte's code point;
                                           // SPM: <0xNN> (or the byte itself); -1: none
    std::vector<int32_t> special;  // control, user-defined and unknown tokens, longest first

    int32_t token_bos = -1, token_eos = -1, token_eot = -1, token_eom = -1, token_unk = -1;
    int32_t token_pad = -1, token_sep = -1, token_nl = -1;
    std::vector<int32_t> eog;  // sorted: tokens that end generation

    bool add_bos          = false;
    bool add_eos          = false;
    bool add_space_prefix = false;  // SPM: a space before the text (and after every special token)
    bool clean_spaces     = false;  // detokenize: llama.cpp's clean_up_tokenization_spaces
    bool ignore_merges    = false;
    bool spm_split_words  = false;  // SPM: no token has U+2581 right after another character

    ember_vocab()                                = default;
    ember_vocab(const ember_vocab &)             = delete;
    ember_vocab & operator=(const ember_vocab &) = delete;

    int32_t n_tokens() const { return static_cast<int32_t>(text.size()); }
    bool    valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
    int32_t find(std::string_view s) const;  // -1 when s is no token
    // The merge of two tokens: its rank and result, false when there is none.
    bool    find_merge(int32_t left, int32_t right, int32_t & rank, int32_t & result) const {
        const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
        return merges.for_each(key, [&](uint64_t v) {
            rank   = static_cast<int32_t>(v >> 32);
            result = static_cast<int32_t>(v & 0xFFFFFFFFu);
            return true;
        });
    }
    bool    is_eog(int32_t id) const;

    // Appends the tokens of text. add_special: BOS/EOS as add_bos/add_eos say. parse_special:
    // control and user-defined token texts become those tokens. Throws EMBER_ERR_UNSUPPORTED
    // when the vocabulary cannot tokenize.
    void tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t> & out) const;
    // The bytes of one token: control and unknown tokens are empty unless `render_special`.
    std::string_view token_to_piece(int32_t id, bool render_special) const;
    // The text of a token sequence (see ember_detokenize in include/ember.h).
    std::string detokenize(const int32_t * tokens, size_t n, bool remove_special, bool unparse_special) const;
};

// Builds the vocabulary of a GGUF file that has tokenizer.ggml.tokens. Throws
// ember_error(EMBER_ERR_BAD_FORMAT, message naming the key) on malformed metadata.
std::unique_ptr<ember_vocab> ember_vocab_load(const ember_gguf_file & f);

// The tokenizers proper, on text without special tokens (called by ember_vocab::tokenize).
// SPM: `text` already has its spaces escaped (U+2581) and any space prefix.
void ember_spm_tokenize(const ember_vocab & v, std::string_view text, std::vector<int32_t> & out);
void ember_bpe_tokenize(const ember_vocab & v, std::string_view text, std::vector<int32_t> & out);

#endif  // EMBER_RUNTIME_VOCAB_H
