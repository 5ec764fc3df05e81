// Shape functions and the tensor rows every pre-norm decoder shares (llama, qwen2, qwen3).
#ifndef EMBER_RUNTIME_MODELS_COMMON_H
#define EMBER_RUNTIME_MODELS_COMMON_H

#include "runtime/arch.h"

int ember_shape_embd(const ember_hparams & hp, int64_t ne[4]);        // [n_embd]
int ember_shape_tok_embd(const ember_hparams & hp, int64_t ne[4]);    // [n_embd, n_vocab]
int ember_shape_rope_freqs(const ember_hparams & hp, int64_t ne[4]);  // [n_rot / 2]
int ember_shape_wq(const ember_hparams & hp, int64_t ne[4]);          // [n_embd, n_embd_q]
int ember_shape_wk(const ember_hparams & hp, int64_t ne[4]);          // [n_embd, n_embd_k_gqa]
int ember_shape_wv(const ember_hparams & hp, int64_t ne[4]);          // [n_embd, n_embd_v_gqa]
int ember_shape_wo(const ember_hparams & hp, int64_t ne[4]);          // [n_embd_head_v * n_head, n_embd]
int ember_shape_q_out(const ember_hparams & hp, int64_t ne[4]);       // [n_embd_q]
int ember_shape_k_out(const ember_hparams & hp, int64_t ne[4]);       // [n_embd_k_gqa]
int ember_shape_v_out(const ember_hparams & hp, int64_t ne[4]);       // [n_embd_v_gqa]
int ember_shape_head_k(const ember_hparams & hp, int64_t ne[4]);      // [n_embd_head_k]
int ember_shape_ffn_up(const ember_hparams & hp, int64_t ne[4]);      // [n_embd, n_ff]
int ember_shape_ffn_down(const ember_hparams & hp, int64_t ne[4]);    // [n_ff, n_embd]

// token_embd, output_norm, output (optional: tied to token_embd), rope_freqs (optional),
// and per layer the norms, attention projections and the SwiGLU FFN.
#define EMBER_COMMON_DECODER_TENSORS                                                                             \
    {"token_embd.weight", EMBER_TENSOR_GLOBAL, true, ember_shape_tok_embd, &ember_model::tok_embd, nullptr},     \
    {"output_norm.weight", EMBER_TENSOR_GLOBAL, true, ember_shape_embd, &ember_model::output_norm, nullptr},      \
    {"output.weight", EMBER_TENSOR_GLOBAL, false, ember_shape_tok_embd, &ember_model::output, nullptr},          \
    {"rope_freqs.weight", EMBER_TENSOR_GLOBAL, false, ember_shape_rope_freqs, &ember_model::rope_freqs, nullptr}, \
    {"blk.%d.attn_norm.weight", EMBER_TENSOR_LAYER, true, ember_shape_embd, nullptr, &ember_layer::attn_norm},   \
    {"blk.%d.attn_q.weight", EMBER_TENSOR_LAYER, true, ember_shape_wq, nullptr, &ember_layer::wq},               \
    {"blk.%d.attn_k.weight", EMBER_TENSOR_LAYER, true, ember_shape_wk, nullptr, &ember_layer::wk},               \
    {"blk.%d.attn_v.weight", EMBER_TENSOR_LAYER, true, ember_shape_wv, nullptr, &ember_layer::wv},               \
    {"blk.%d.attn_output.weight", EMBER_TENSOR_LAYER, true, ember_shape_wo, nullptr, &ember_layer::wo},          \
    {"blk.%d.ffn_norm.weight", EMBER_TENSOR_LAYER, true, ember_shape_embd, nullptr, &ember_layer::ffn_norm},     \
    {"blk.%d.ffn_gate.weight", EMBER_TENSOR_LAYER, true, ember_shape_ffn_up, nullptr, &ember_layer::ffn_gate},   \
    {"blk.%d.ffn_up.weight", EMBER_TENSOR_LAYER, true, ember_shape_ffn_up, nullptr, &ember_layer::ffn_up},       \
    {"blk.%d.ffn_down.weight", EMBER_TENSOR_LAYER, true, ember_shape_ffn_down, nullptr, &ember_layer::ffn_down}

#endif  // EMBER_RUNTIME_MODELS_COMMON_H
