// Entry point of libember-cuda.so, the CUDA backend as a module libember loads at run time, so
// that libember itself needs neither libcublas nor a driver (backends/common/registry-cuda-module.cpp).
#include "cuda-backend.h"

extern "C" __attribute__((visibility("default"))) ember_backend_reg * ember_backend_init(void) {
    return ember_cuda_backend_reg();
}
