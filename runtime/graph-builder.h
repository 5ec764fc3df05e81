// Shared transformer blocks (norm, attention over the KV cache, SwiGLU FFN, output head)
// that the architecture files compose into a forward graph of one micro-batch.
#ifndef EMBER_RUNTIME_GRAPH_BUILDER_H
#define EMBER_RUNTIME_GRAPH_BUILDER_H

#include <cstdint>

#include "graph.h"

struct ember_model;
struct ember_hparams;
struct ember_kv_cache;

// Host-filled inputs of a micro-batch graph.
struct ember_graph_inputs {
    ember_tensor * tokens  = nullptr;  // I32 [n_tokens]
    ember_tensor * pos     = nullptr;  // I32 [n_tokens]
    ember_tensor * kv_idx  = nullptr;  // I32 [n_tokens]: the cache cell each token is written to
    ember_tensor * mask    = nullptr;  // F32 [n_kv, n_tokens]
    ember_tensor * out_ids = nullptr;  // I32 [n_outputs]: rows whose logits are wanted (null: all)
};

struct ember_build_ctx {
    const ember_model &   model;
    const ember_hparams & hp;
    ember_kv_cache &      kv;
    ember_graph &         g;
    uint32_t              n_tokens;
    uint32_t              n_outputs;
    uint32_t              n_kv;
    ember_graph_inputs    in;
};

// Creates the input tensors of ctx.in.
void           ember_build_inputs(ember_build_ctx & ctx);
// rmsnorm(x) * w                                                       x: [n, n_tokens]
ember_tensor * ember_build_norm(ember_build_ctx & ctx, ember_tensor * x, ember_tensor * w);
// Self-attention of layer il over the cache (optional q/k/v biases and per-head q/k norms
// when the layer has them); writes this batch's K and V to the cache.  x: [n_embd, n_tokens]
ember_tensor * ember_build_attn(ember_build_ctx & ctx, uint32_t il, ember_tensor * x);
// down(silu(gate x) * up x)                                            x: [n_embd, n_tokens]
ember_tensor * ember_build_ffn_swiglu(ember_build_ctx & ctx, uint32_t il, ember_tensor * x);
// Rows of the wanted outputs, final norm, output projection -> [n_vocab, n_outputs].
ember_tensor * ember_build_output(ember_build_ctx & ctx, ember_tensor * x);
// The pre-norm decoder shared by llama, qwen2 and qwen3.
ember_tensor * ember_build_decoder(ember_build_ctx & ctx);

#endif  // EMBER_RUNTIME_GRAPH_BUILDER_H
