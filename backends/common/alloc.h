// Graph memory planner. Intermediate tensors of a graph are placed at offsets inside one
// compute buffer per buffer type; a tensor's memory is reused as soon as its last reader
// has run (liveness over the node order), so peak memory is the widest live set, not the
// sum. The buffers only grow (reserve with the worst-case graph up front and no graph of
// that shape or smaller ever allocates again).
#ifndef EMBER_BACKENDS_ALLOC_H
#define EMBER_BACKENDS_ALLOC_H

#include <cstdint>
#include <vector>

#include "backend.h"

struct ember_gallocr {
    explicit ember_gallocr(std::vector<ember_buffer_type *> bufts);
    ~ember_gallocr();
    ember_gallocr(const ember_gallocr &)             = delete;
    ember_gallocr & operator=(const ember_gallocr &) = delete;

    // Plans g (tensor_buft[i] = index into bufts for every node that needs memory, keyed by
    // position in g->nodes; leaf inputs without a buffer go to `input_buft`) and grows the
    // buffers to fit. EMBER_ERR_OOM when a buffer cannot be allocated.
    ember_status reserve(ember_graph * g, const std::vector<int> & node_buft, int input_buft);
    // Plans g as reserve does and assigns every unallocated tensor its buffer and address.
    ember_status alloc_graph(ember_graph * g, const std::vector<int> & node_buft, int input_buft);

    // Bumped whenever a buffer is reallocated: addresses assigned before are stale.
    uint64_t generation() const { return generation_; }
    size_t   buffer_size(size_t i) const;

  private:
    ember_status plan(ember_graph * g, const std::vector<int> & node_buft, int input_buft, bool assign);

    std::vector<ember_buffer_type *> bufts_;
    std::vector<ember_buffer *>      buffers_;
    uint64_t                         generation_ = 0;
};

#endif  // EMBER_BACKENDS_ALLOC_H
