// The CUDA backend's registry entry (backends/cuda). A machine without a driver or without
// GPUs gets a registry with zero devices, never an error.
#ifndef EMBER_CUDA_BACKEND_H
#define EMBER_CUDA_BACKEND_H

#include "backend.h"

ember_backend_reg * ember_cuda_backend_reg();

#endif  // EMBER_CUDA_BACKEND_H
