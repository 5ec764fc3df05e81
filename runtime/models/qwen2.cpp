// qwen2: Qwen2 / Qwen2.5. The llama decoder with biases on Q, K and V, and RoPE on NeoX pairs.
#include "runtime/models/common.h"

namespace {

const ember_tensor_spec k_tensors[] = {
    EMBER_COMMON_DECODER_TENSORS,
    {"blk.%d.attn_q.bias", EMBER_TENSOR_LAYER, true, ember_shape_q_out, nullptr, &ember_layer::bq},
    {"blk.%d.attn_k.bias", EMBER_TENSOR_LAYER, true, ember_shape_k_out, nullptr, &ember_layer::bk},
    {"blk.%d.attn_v.bias", EMBER_TENSOR_LAYER, true, ember_shape_v_out, nullptr, &ember_layer::bv},
};

ember_tensor * build(ember_build_ctx & ctx) { return ember_build_decoder(ctx); }

}  // namespace

extern const ember_arch_desc ember_arch_qwen2 = {
    "qwen2", EMBER_ROPE_NEOX, nullptr, k_tensors, static_cast<int>(sizeof(k_tensors) / sizeof(k_tensors[0])), build,
};
