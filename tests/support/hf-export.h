// Test-only exporter: a GGUF model (llama, qwen2, qwen3 with F32/F16/BF16 tensors) written
// as a Hugging Face folder the way transformers saves one, so the import
// (runtime/hf-import.cpp) can be tested on models whose answers are known:
//   config.json             hyperparameters, tie_word_embeddings, rope_scaling (linear), ids
//   model.safetensors       or model-0000K-of-0000N.safetensors + model.safetensors.index.json
//                           (Hugging Face names; llama's Q/K rows back in rotate-half order)
//   tokenizer.json          BPE: byte-level (vocab, merges, the pre_tokenizer of
//                           tokenizer.ggml.pre) or SentencePiece-style with byte_fallback (merges
//                           rebuilt from the scores, as transformers' SpmConverter does)
//   tokenizer_config.json   special tokens, add_bos/add_eos, chat template
// Throws std::runtime_error (or ember_error from the GGUF reader) on anything it cannot express.
#ifndef EMBER_TESTS_HF_EXPORT_H
#define EMBER_TESTS_HF_EXPORT_H

#include <cstdint>
#include <string>
#include <vector>

struct ember_test_hf_export_options {
    int32_t  dtype              = -1;     // -1: each tensor keeps its GGUF type; else EMBER_TYPE_F32,
                                          // F16 or BF16 for the 2-D tensors
    bool     dtype_1d           = false;  // also store 1-D tensors (norms, biases) in `dtype`, as
                                          // a real BF16 checkpoint does
    uint64_t shard_bytes        = 0;      // 0: one model.safetensors; else shards of at most
                                          // about this many bytes, and the index
    bool     inv_freq           = true;   // add rotary_emb.inv_freq buffers (older checkpoints
                                          // have them; the import must skip them)
    bool     merges_as_pairs    = false;  // merges as ["a", "b"] (transformers >= 4.45)
    bool     special_as_dict    = false;  // tokenizer_config.json tokens as {"content": ...}
    bool     chat_template_list = false;  // chat template as [{"name": "default", ...}, ...]
};

// Writes the folder `dir` (created if needed) from the GGUF model at gguf_path.
void ember_test_hf_export(const std::string & gguf_path, const std::string & dir, const ember_test_hf_export_options & opt = {});

// Only the tokenizer: tokenizer.json, tokenizer_config.json, and a config.json with
// vocab_size and the special token ids (enough for ember_hf_tokenizer_kv). Works on vocab-only
// GGUF files (no tensors) too.
void ember_test_hf_export_tokenizer(const std::string & gguf_path, const std::string & dir,
                                    const ember_test_hf_export_options & opt = {});

// A safetensors file from raw tensors (also used to build hostile files).
struct ember_test_st_tensor {
    std::string          name;
    std::string          dtype;  // "F32", "F16", "BF16", "I8", ...
    std::vector<int64_t> shape;  // outermost first
    std::vector<uint8_t> data;
};
// The bytes of a safetensors file: 8-byte header length, the JSON header (padded with spaces
// to a multiple of 8, as the safetensors library does), then the data in order.
std::vector<uint8_t> ember_test_safetensors_bytes(const std::vector<ember_test_st_tensor> & tensors);
void                 ember_test_write_file(const std::string & path, const std::vector<uint8_t> & bytes);
void                 ember_test_write_text(const std::string & path, const std::string & text);

#endif  // EMBER_TESTS_HF_EXPORT_H
