// qwen3: the llama decoder with per-head RMSNorm of Q and K before RoPE (NeoX pairs), and an
// explicit head size (attention.key_length) that need not be n_embd / n_head.
#include "runtime/models/common.h"

namespace {

const ember_tensor_spec k_tensors[] = {
    EMBER_COMMON_DECODER_TENSORS,
    {"blk.%d.attn_q_norm.weight", EMBER_TENSOR_LAYER, true, ember_shape_head_k, nullptr, &ember_layer::attn_q_norm},
    {"blk.%d.attn_k_norm.weight", EMBER_TENSOR_LAYER, true, ember_shape_head_k, nullptr, &ember_layer::attn_k_norm},
};

ember_tensor * build(ember_build_ctx & ctx) { return ember_build_decoder(ctx); }

}  // namespace

extern const ember_arch_desc ember_arch_qwen3 = {
    "qwen3", EMBER_ROPE_NEOX, nullptr, k_tensors, static_cast<int>(sizeof(k_tensors) / sizeof(k_tensors[0])), build,
};
