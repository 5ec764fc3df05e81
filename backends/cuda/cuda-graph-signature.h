// What a recorded CUDA graph depends on, as one 64-bit hash: the node range, and for each node
// its op, parameters, and the address, type, shape and strides of it and of its sources, plus
// the stream's scratch buffers. cuda-backend.cpp replays its recorded graph while the hash is
// unchanged. Plain C++ (no CUDA): CPU-only builds carry it for its tests
// (test_cuda_graph_signature.cpp), which check that every field changes the hash.
#ifndef EMBER_CUDA_GRAPH_SIGNATURE_H
#define EMBER_CUDA_GRAPH_SIGNATURE_H

#include <cstdint>

#include "cuda-ops.h"
#include "graph.h"

uint64_t ember_cuda_graph_signature(const ember_cuda_ctx & cu, const ember_graph * g, int32_t begin, int32_t end);

#endif  // EMBER_CUDA_GRAPH_SIGNATURE_H
