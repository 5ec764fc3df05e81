// Compute graphs: a topologically ordered node array plus the op constructors that apply
// each op's shape rule. A graph is rebuilt per micro-batch shape and reused while the shape
// is unchanged; the tensor descriptors live in the graph's own arena (a deque, so pointers
// stay valid as it grows).
#ifndef EMBER_BACKENDS_GRAPH_H
#define EMBER_BACKENDS_GRAPH_H

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor.h"

// Thrown by the op constructors when shapes or types do not fit; a programming error in a
// graph builder, caught and turned into EMBER_ERR_INTERNAL at the C API.
struct ember_graph_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct ember_graph {
    std::deque<ember_tensor>    arena;  // every descriptor created for this graph
    std::vector<ember_tensor *> nodes;  // computed tensors in execution order (views included)
    std::vector<ember_tensor *> leafs;  // inputs and weights the nodes read

    // A fresh descriptor (zeroed, contiguous strides) owned by this graph.
    ember_tensor * new_tensor(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
    // Marks `out` and everything it depends on for computation, in dependency order.
    void           build_forward(ember_tensor * out);
    void           clear();
};

//
// Op constructors (shape rules). Each returns a new node of the graph; see ops.def.
//
ember_tensor * ember_view(ember_graph & g, ember_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2 = 1, int64_t ne3 = 1, size_t offset = 0);
ember_tensor * ember_view_strided(ember_graph & g, ember_tensor * a, const int64_t ne[4], const size_t nb[4], size_t offset);
ember_tensor * ember_get_rows(ember_graph & g, ember_tensor * table, ember_tensor * ids);
ember_tensor * ember_rms_norm(ember_graph & g, ember_tensor * a, float eps);
ember_tensor * ember_mul(ember_graph & g, ember_tensor * a, ember_tensor * b);
ember_tensor * ember_add(ember_graph & g, ember_tensor * a, ember_tensor * b);
ember_tensor * ember_mul_mat(ember_graph & g, ember_tensor * w, ember_tensor * x);
ember_tensor * ember_rope(ember_graph & g, ember_tensor * a, ember_tensor * pos, ember_tensor * freq_factors,
                          int32_t n_rot, int32_t mode, float freq_base, float freq_scale);
ember_tensor * ember_swiglu(ember_graph & g, ember_tensor * gate, ember_tensor * up);
ember_tensor * ember_set_rows(ember_graph & g, ember_tensor * dst, ember_tensor * rows, ember_tensor * idx);
ember_tensor * ember_attn(ember_graph & g, ember_tensor * q, ember_tensor * k, ember_tensor * v, ember_tensor * mask, float scale);
ember_tensor * ember_cpy(ember_graph & g, ember_tensor * a, ember_type type);
ember_tensor * ember_scale(ember_graph & g, ember_tensor * a, float s);
// The k largest values of each row of a and their indices (ops.def TOP_K): I32 [2k, rows...].
ember_tensor * ember_top_k(ember_graph & g, ember_tensor * a, int32_t k);

// Whether a node of g other than `reader` reads t (as a source or through a view of it), or t
// is a graph output: a backend that fuses t's producer with its reader must then still store t.
// Consumers follow producers in g->nodes, so the scan may start at index `from` (t's own or
// later). Inline: the backend modules (libember-cuda.so) call it too.
inline bool ember_graph_read_elsewhere(const ember_graph * g, const ember_tensor * t, const ember_tensor * reader, size_t from = 0) {
    if (t->flags & EMBER_TENSOR_FLAG_OUTPUT) return true;
    for (size_t k = from; k < g->nodes.size(); k++) {
        const ember_tensor * n = g->nodes[k];
        if (n == reader || n == t) continue;
        if (n->view_src == t) return true;
        for (const ember_tensor * s : n->src) {
            if (s == t) return true;
        }
    }
    return false;
}

// RoPE modes (GGUF conventions).
constexpr int32_t EMBER_ROPE_NORMAL = 0;  // rotate adjacent pairs (2i, 2i+1): llama
constexpr int32_t EMBER_ROPE_NEOX   = 2;  // rotate pairs (i, i + n_rot/2): qwen2, qwen3

#endif  // EMBER_BACKENDS_GRAPH_H
