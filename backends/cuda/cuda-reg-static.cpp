// The CUDA backend linked into the static library: the registry takes it directly (the shared
// library loads libember-cuda.so instead: backends/common/registry-cuda-module.cpp).
#include "cuda-backend.h"

ember_backend_reg * ember_registry_cuda() { return ember_cuda_backend_reg(); }
