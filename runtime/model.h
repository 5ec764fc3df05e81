// A loaded model: hyperparameters, weight tensors (in the mmap'd file or uploaded to a
// device), and the architecture descriptor that builds its graph. Immutable after load.
#ifndef EMBER_RUNTIME_MODEL_H
#define EMBER_RUNTIME_MODEL_H

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "runtime/gguf.h"

struct ember_hparams {
    uint32_t n_vocab       = 0;
    uint32_t n_ctx_train   = 0;
    uint32_t n_embd        = 0;
    uint32_t n_layer       = 0;
    uint32_t n_head        = 0;
    uint32_t n_head_kv     = 0;
    uint32_t n_embd_head_k = 0;  // head_dim of Q and K
    uint32_t n_embd_head_v = 0;  // head_dim of V
    uint32_t n_ff          = 0;
    uint32_t n_rot         = 0;  // rotated dims per head
    float    rms_eps       = 1e-5f;
    float    rope_freq_base  = 10000.0f;
    float    rope_freq_scale = 1.0f;  // linear scaling: positions multiplied by this
    int32_t  rope_mode       = 0;     // EMBER_ROPE_NORMAL / EMBER_ROPE_NEOX

    int64_t n_embd_q() const { return int64_t(n_embd_head_k) * n_head; }
    int64_t n_embd_k_gqa() const { return int64_t(n_embd_head_k) * n_head_kv; }
    int64_t n_embd_v_gqa() const { return int64_t(n_embd_head_v) * n_head_kv; }
};

struct ember_layer {
    ember_tensor * attn_norm   = nullptr;
    ember_tensor * wq          = nullptr;
    ember_tensor * wk          = nullptr;
    ember_tensor * wv          = nullptr;
    ember_tensor * wo          = nullptr;
    ember_tensor * bq          = nullptr;  // qwen2
    ember_tensor * bk          = nullptr;
    ember_tensor * bv          = nullptr;
    ember_tensor * attn_q_norm = nullptr;  // qwen3
    ember_tensor * attn_k_norm = nullptr;
    ember_tensor * ffn_norm    = nullptr;
    ember_tensor * ffn_gate    = nullptr;
    ember_tensor * ffn_up      = nullptr;
    ember_tensor * ffn_down    = nullptr;
};

struct ember_arch_desc;
struct ember_vocab;

struct ember_model {
    std::string                      path;
    std::unique_ptr<ember_gguf_file> gguf;
    const ember_arch_desc *          arch = nullptr;
    std::string                      arch_name;
    ember_hparams                    hp;
    bool                             vocab_only = false;

    std::deque<ember_tensor>                        tensors;  // weight descriptors
    std::unordered_map<std::string, ember_tensor *> by_name;
    ember_tensor *                                  tok_embd    = nullptr;
    ember_tensor *                                  output_norm = nullptr;
    ember_tensor *                                  output      = nullptr;  // == tok_embd when tied
    ember_tensor *                                  rope_freqs  = nullptr;
    std::vector<ember_layer>                        layers;
    std::unique_ptr<ember_vocab>                    vocab;  // nullptr when the file has no tokenizer.ggml.tokens

    std::vector<ember_buffer *> buffers;       // weight buffers (the mmap wrapper, device copies)
    std::vector<ember_device *> layer_device;  // where each layer's weights live
    ember_device *              output_device = nullptr;

    int32_t  token_bos = -1;
    int32_t  token_eos = -1;
    uint64_t n_params  = 0;
    uint64_t n_bytes   = 0;

    ~ember_model();
};

// Loads a model; throws ember_error. progress may be null; a nonzero return cancels.
struct ember_model_load_options {
    bool                    use_mmap     = true;
    bool                    vocab_only   = false;
    int32_t                 n_gpu_layers = -1;
    std::string             device;  // "" = best available
    ember_progress_callback progress     = nullptr;
    void *                  progress_ud  = nullptr;
};
std::unique_ptr<ember_model> ember_model_load_file(const std::string & path, const ember_model_load_options & opt);

#endif  // EMBER_RUNTIME_MODEL_H
