// llama: Llama 2/3.x, Mistral, TinyLlama, SmolLM. Pre-norm decoder, RMSNorm, SwiGLU, RoPE on
// adjacent pairs, GQA, optional llama3 rope frequency factors, optional tied output.
#include "runtime/models/common.h"

namespace {

const ember_tensor_spec k_tensors[] = {
    EMBER_COMMON_DECODER_TENSORS,
};

ember_tensor * build(ember_build_ctx & ctx) { return ember_build_decoder(ctx); }

}  // namespace

extern const ember_arch_desc ember_arch_llama = {
    "llama", EMBER_ROPE_NORMAL, nullptr, k_tensors, static_cast<int>(sizeof(k_tensors) / sizeof(k_tensors[0])), build,
};
