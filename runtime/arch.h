// Architecture descriptors. Each architecture is one file in runtime/models/ holding one
// ember_arch_desc (GGUF arch string, hparam loader, tensor table, graph builder) and one
// line in runtime/models/registry.cpp.
#ifndef EMBER_RUNTIME_ARCH_H
#define EMBER_RUNTIME_ARCH_H

#include <cstdint>

#include "runtime/graph-builder.h"
#include "runtime/model.h"

// Where a tensor of the table goes: the model (global) or every layer.
enum ember_tensor_scope : int32_t {
    EMBER_TENSOR_GLOBAL = 0,
    EMBER_TENSOR_LAYER  = 1,  // name has one %d: the layer index
};

struct ember_tensor_spec {
    const char *       name;      // GGUF name, "blk.%d.attn_q.weight"
    ember_tensor_scope scope;
    bool               required;
    // Expected shape from the hyperparameters: fills ne, returns n_dims.
    int (*shape)(const ember_hparams & hp, int64_t ne[4]);
    // Where the pointer goes (exactly one of these is set).
    ember_tensor * ember_model::*global;
    ember_tensor * ember_layer::*layer;
};

struct ember_arch_desc {
    const char *              name;       // general.architecture
    int32_t                   rope_mode;  // EMBER_ROPE_NORMAL or EMBER_ROPE_NEOX
    // Architecture-specific hyperparameters after the common ones are read (may be null).
    void (*load_hparams)(const ember_gguf_file & f, ember_hparams & hp);
    const ember_tensor_spec * tensors;
    int                       n_tensors;
    // Builds the forward graph of one micro-batch; returns the logits node.
    ember_tensor * (*build_graph)(ember_build_ctx & ctx);
};

// Every registered architecture, and lookup by GGUF name (nullptr if unknown).
const ember_arch_desc * const * ember_arch_list(int * n);
const ember_arch_desc *         ember_arch_find(const char * name);

#endif  // EMBER_RUNTIME_ARCH_H
