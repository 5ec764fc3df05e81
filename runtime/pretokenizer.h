// Pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre): the text is cut into
// pieces by a sequence of regular expressions, each applied to every piece the previous one
// produced (its matches and the text between them both become pieces, as Hugging Face's
// Split(behavior=Isolated) does). The expressions are hand-written matchers with the exact
// semantics of the reference patterns (leftmost match, alternatives tried in order, greedy
// quantifiers with backtracking) over the generated Unicode tables; no std::regex.
#ifndef EMBER_RUNTIME_PRETOKENIZER_H
#define EMBER_RUNTIME_PRETOKENIZER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// Families of pre-tokenizers: one per distinct sequence of expressions.
enum ember_pre_type : int32_t {
    EMBER_PRE_DEFAULT        = 0,  // llama.cpp's fallback: punctuation runs, GPT-2, numbers, digit triples
    EMBER_PRE_LLAMA3         = 1,  // Llama 3 (tiktoken cl100k style, \p{N}{1,3})
    EMBER_PRE_QWEN2          = 2,  // as Llama 3 with single digits
    EMBER_PRE_GPT2           = 3,  // GPT-2's pattern
    EMBER_PRE_STARCODER      = 4,  // single digits, then GPT-2
    EMBER_PRE_FALCON         = 5,  // punctuation runs, GPT-2, digit triples
    EMBER_PRE_DEEPSEEK_LLM   = 6,  // newlines, Latin-like letters, ASCII/CJK punctuation, CJK, numbers
    EMBER_PRE_DEEPSEEK_CODER = 7,  // newlines, letters, punctuation, CJK, single digits
    EMBER_PRE_DEEPSEEK3      = 8,  // \p{N}{1,3}, CJK and kana, then a cl100k-like pattern
    EMBER_PRE_BLOOM          = 9,  // " ?[^(\s|.,!?…。，、।۔،)]+"
    EMBER_PRE_VIKING         = 10, // as BLOOM, then single digits
    EMBER_PRE_COUNT
};

// One accepted value of tokenizer.ggml.pre and what it implies (as llama.cpp's loader sets it).
struct ember_pre_info {
    const char *   name;
    ember_pre_type type;
    bool           clean_spaces;   // detokenizing removes the space before . , ! ? and some contractions
    bool           ignore_merges;  // a piece that is itself a token is not merged from bytes
    bool           add_bos;        // default of tokenizer.ggml.add_bos_token
};

// The entry for a tokenizer.ggml.pre value, or nullptr when this build does not know it.
const ember_pre_info * ember_pre_find(const std::string & name);
// All entries (for messages and tests).
const ember_pre_info * ember_pre_list(size_t * n);

// A piece of the input, as byte offsets [begin, end).
struct ember_pre_span {
    size_t begin;
    size_t end;
};

// Cuts text[0, n) into pieces, in order, covering every byte. Invalid UTF-8 bytes are
// classified as U+FFFD but stay in the pieces as they are.
void ember_pretokenize(ember_pre_type type, const char * text, size_t n, std::vector<ember_pre_span> & out);

#endif  // EMBER_RUNTIME_PRETOKENIZER_H
