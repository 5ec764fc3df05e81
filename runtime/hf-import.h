// Internals of the Hugging Face folder import (runtime/hf-import.cpp, runtime/hf-tokenizer.cpp),
// exposed for tests. The public entry points are in runtime/model-source.h.
#ifndef EMBER_RUNTIME_HF_IMPORT_H
#define EMBER_RUNTIME_HF_IMPORT_H

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf.h"
#include "runtime/json.h"

// Reads and parses a JSON file. Throws EMBER_ERR_IO when it cannot be read and
// EMBER_ERR_BAD_FORMAT (naming the file) when it is not JSON.
ember_json ember_hf_read_json(const std::string & path);
// Like ember_hf_read_json, but returns false when the file does not exist.
bool ember_hf_read_json_if_present(const std::string & path, ember_json & out);
// The bytes of a text file; false when it does not exist (EMBER_ERR_IO when unreadable).
bool ember_hf_read_text_if_present(const std::string & path, std::string & out);

// The tokenizer.* metadata of a folder, as llama.cpp's converter writes it: from
// tokenizer.json (BPE: byte-level -> "gpt2" with merges and tokenizer.ggml.pre from the
// pre-tokenizer; byte_fallback -> SentencePiece-style "llama" with scores), tokenizer_config.json
// (special tokens, add_bos/add_eos, chat template), config.json and generation_config.json
// (special token ids). n_vocab > 0 (config.json vocab_size) pads the token list with
// "[PAD<id>]" placeholders up to that size. Appends to kv. Throws ember_error naming the file
// and field at fault (EMBER_ERR_UNSUPPORTED for tokenizer kinds Ember cannot run).
void ember_hf_tokenizer_kv(const std::string & dir, int64_t n_vocab, std::vector<ember_gguf_kv> & kv);

// llama3 RoPE frequency factors (rope_freqs.weight), computed as llama.cpp's converter does
// (float32 arithmetic): one factor per rotated pair, dim / 2 values.
std::vector<float> ember_hf_llama3_rope_factors(double base, int64_t dim, double factor, double low_freq_factor,
                                                double high_freq_factor, double old_context_len);

#endif  // EMBER_RUNTIME_HF_IMPORT_H
