// The CUDA backend's registry entry (backends/cuda). A machine without a driver or without
// GPUs gets a registry with zero devices, never an error.
#ifndef EMBER_CUDA_BACKEND_H
#define EMBER_CUDA_BACKEND_H

#include <cstdint>

#include "backend.h"

ember_backend_reg * ember_cuda_backend_reg();

// CUDA graphs instantiated so far in this process (every stream; an update of an executable graph
// is not one): a decode step recorded again with the same shape must update, not instantiate (tests).
uint64_t ember_cuda_graph_instantiations();

#endif  // EMBER_CUDA_BACKEND_H
