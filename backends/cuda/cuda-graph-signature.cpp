// The CUDA graph signature (cuda-graph-signature.h): the common graph signature
// (backends/common/graph-signature.h) with the stream's scratch buffers. Before that hash was
// shared: building and comparing a vector of the fields cost more host time than the launch it
// guards (EMBER_PROFILE_HOST=1 shows the split; H200 host, 8B shape: 36-84 us per token).
#include "cuda-graph-signature.h"

#include "graph-signature.h"

static_assert(EMBER_CUDA_SCRATCH_SLOTS == 3, "every scratch slot goes into the signature");

uint64_t ember_cuda_graph_signature(const ember_cuda_ctx & cu, const ember_graph * g, int32_t begin, int32_t end) {
    return ember_graph_signature(g, begin, end, false,
                                 {static_cast<int64_t>(reinterpret_cast<intptr_t>(cu.scratch[0])), static_cast<int64_t>(cu.scratch_size[0]),
                                  static_cast<int64_t>(reinterpret_cast<intptr_t>(cu.scratch[1])), static_cast<int64_t>(cu.scratch_size[1]),
                                  static_cast<int64_t>(reinterpret_cast<intptr_t>(cu.scratch[2])), static_cast<int64_t>(cu.scratch_size[2])});
}
