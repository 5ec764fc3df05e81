// Tiny random-weight GGUF models for tests (the "committed generator" of STYLE.md section 5,
// written in C++ on top of Ember's own GGUF writer).
//
// The weights are seeded normals (std::mt19937_64 + our own Box-Muller), so a spec gives the
// same file bytes on every platform. Metadata keys are the ones llama.cpp writes.
#ifndef EMBER_TESTS_TINY_MODEL_H
#define EMBER_TESTS_TINY_MODEL_H

#include <cstdint>
#include <string>

struct tiny_model_spec {
    std::string arch        = "llama";  // llama, qwen2, qwen3
    int32_t     weight_type = 0;        // ggml type id of the 2-D tensors: F32 0, F16 1, Q4_0 2, Q8_0 8, BF16 30
    int32_t     n_vocab     = 128;
    int32_t     n_embd      = 64;       // multiple of 32
    int32_t     n_layer     = 2;
    int32_t     n_head      = 4;
    int32_t     n_head_kv   = 2;
    int32_t     head_dim    = 0;        // 0 = n_embd / n_head; otherwise written as ARCH.attention.key/value_length
    int32_t     n_rot       = 0;        // 0 = head_dim (not written); otherwise ARCH.rope.dimension_count
    int32_t     n_ff        = 128;      // multiple of 32
    int32_t     n_ctx_train = 256;
    uint64_t    seed        = 1;
    bool        tied        = false;    // no output.weight: the output projection uses token_embd
    bool        rope_freqs  = false;    // write rope_freqs.weight (llama3-style frequency factors)
    float       rope_scale_linear = 0;  // > 0: ARCH.rope.scaling.type = "linear", .factor = this
    float       rope_freq_base    = 10000.0f;
    float       rms_eps     = 1e-5f;
    float       w_std       = 0.08f;    // std of the matrix weights
    std::string name;                   // file name without ".gguf"; "" = derived from the spec
};

// A short name describing the spec ("llama-q8_0-e64-l2-h4-kv2-tied"), also the default file name.
std::string ember_test_tiny_model_name(const tiny_model_spec & spec);

// Writes the model as DIR/NAME.gguf and returns its path. Throws std::runtime_error (or the
// writer's ember_error) on a bad spec or I/O failure.
std::string ember_test_make_tiny_model(const tiny_model_spec & spec, const std::string & dir);

#endif  // EMBER_TESTS_TINY_MODEL_H
