// An independent float64 reference forward pass for llama / qwen2 / qwen3 GGUF models,
// in the llama2.c style: weights dequantized to double once, then plain loops.
//
// It implements the forward pass written out in shared/fixtures/models/README.md and the
// extras the generated test models use (GQA, head_dim from key_length, partial rotary dims,
// NeoX vs normal RoPE, rope_freqs factors, linear RoPE scaling, qwen2 biases, qwen3 q/k norms,
// tied embeddings). It shares no code with the runtime except the GGUF reader and the scalar
// dequantizers of quant/types.h.
#ifndef EMBER_TESTS_REF_FORWARD_H
#define EMBER_TESTS_REF_FORWARD_H

#include <cstdint>
#include <string>
#include <vector>

struct ember_ref_config {
    std::string arch;
    int32_t     n_vocab    = 0;
    int32_t     n_embd     = 0;
    int32_t     n_layer    = 0;
    int32_t     n_head     = 0;
    int32_t     n_head_kv  = 0;
    int32_t     head_dim_k = 0;  // per-head size of q and k
    int32_t     head_dim_v = 0;  // per-head size of v
    int32_t     n_ff       = 0;
    int32_t     n_rot      = 0;  // rotated dims per head (from the start of the head)
    bool        rope_neox  = false;
    double      freq_base  = 10000.0;
    double      freq_scale = 1.0;  // positions are multiplied by this (1 / linear factor)
    double      rms_eps    = 1e-5;
};

struct ember_ref_layer {
    std::vector<double> attn_norm;           // (n_embd)
    std::vector<double> wq, wk, wv;          // (n_head*hd_k, n_embd), (n_head_kv*hd_k, n_embd), (n_head_kv*hd_v, n_embd)
    std::vector<double> bq, bk, bv;          // optional biases (qwen2)
    std::vector<double> q_norm, k_norm;      // optional per-head norms (hd_k) (qwen3)
    std::vector<double> wo;                  // (n_embd, n_head*hd_v)
    std::vector<double> ffn_norm;            // (n_embd)
    std::vector<double> w_gate, w_up;        // (n_ff, n_embd)
    std::vector<double> w_down;              // (n_embd, n_ff)
};

struct ember_ref_model {
    ember_ref_config             cfg;
    std::vector<double>          token_embd;   // (n_vocab, n_embd)
    std::vector<ember_ref_layer> layers;
    std::vector<double>          output_norm;  // (n_embd)
    std::vector<double>          output;       // (n_vocab, n_embd); token_embd when tied
    std::vector<double>          rope_freqs;   // (n_rot/2) frequency divisors, or empty
};

// Reads a GGUF model and dequantizes every tensor to double. Throws std::runtime_error
// (or the GGUF reader's ember_error) when the file or a tensor is missing or malformed.
ember_ref_model ember_ref_load(const std::string & gguf_path);

// Options that imitate a runtime's storage, for bounding its effect. Default: none.
struct ember_ref_options {
    // When >= 0, each token's K (after RoPE) / V row is rounded through this type's
    // from_float/to_float before attention reads it, like a KV cache of that type.
    int32_t kv_type_k = -1;
    int32_t kv_type_v = -1;
};

// Logits of every position, [n_tokens * n_vocab] row-major, for `tokens` at positions
// 0..n-1 of one sequence with full causal attention. Throws std::runtime_error on a bad token.
std::vector<double> ember_ref_forward(const ember_ref_model & model, const std::vector<int32_t> & tokens,
                                      const ember_ref_options & opts = {});

#endif  // EMBER_TESTS_REF_FORWARD_H
