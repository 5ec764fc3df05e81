// A model to convert: complete GGUF metadata plus tensors whose bytes are produced on demand.
// ember_model_quantize (runtime/quantize.cpp) reads one of these and writes a GGUF file; the
// source is either a GGUF file (runtime/quantize.cpp: ember_source_from_gguf) or a Hugging
// Face model folder (runtime/hf-import.cpp: ember_source_from_hf), so both inputs share one
// writer, one recipe and one set of checks.
#ifndef EMBER_RUNTIME_MODEL_SOURCE_H
#define EMBER_RUNTIME_MODEL_SOURCE_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/gguf.h"

struct ember_source_tensor {
    std::string name;                 // GGUF name: "blk.0.attn_q.weight"
    ember_type  type = EMBER_TYPE_F32; // type of the bytes read() produces (F32/F16/BF16 from
                                      // safetensors; any type from a GGUF file)
    int32_t     n_dims = 0;
    int64_t     ne[4]  = {1, 1, 1, 1}; // GGUF order: ne[0] innermost
    uint64_t    nbytes = 0;           // ember_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]
    // Writes exactly nbytes bytes to dst. May be called from several threads at once (for
    // different tensors). Throws ember_error on a read error.
    std::function<void(void * dst)> read;
};

struct ember_model_source {
    std::vector<ember_gguf_kv>       kv;       // complete metadata, in writing order
    std::vector<ember_source_tensor> tensors;  // in writing order
    std::string                      what;     // "GGUF file x.gguf" / "Hugging Face folder d/"
    std::vector<std::shared_ptr<void>> keep_alive;  // mappings the read() functions use

    const ember_gguf_value * find(const std::string & key) const {
        for (const auto & e : kv) {
            if (e.key == key) return &e.value;
        }
        return nullptr;
    }
};

// GGUF file in. Throws ember_error (EMBER_ERR_IO / EMBER_ERR_BAD_FORMAT / EMBER_ERR_UNSUPPORTED).
std::unique_ptr<ember_model_source> ember_source_from_gguf(const std::string & path);

// True when `path` is a directory with a config.json (a Hugging Face model folder).
bool ember_path_is_hf_folder(const std::string & path);
// Hugging Face folder in (config.json, *.safetensors or a sharded model.safetensors.index.json,
// tokenizer.json, tokenizer_config.json) for the llama, qwen2 and qwen3 architectures: GGUF
// names and metadata as llama.cpp's converter writes them (rope layout, tokenizer incl. merges,
// chat template). Throws ember_error with a message naming the file and field at fault.
std::unique_ptr<ember_model_source> ember_source_from_hf(const std::string & dir);

#endif  // EMBER_RUNTIME_MODEL_SOURCE_H
