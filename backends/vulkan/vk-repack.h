// The Vulkan weight layout (EMBER_TENSOR_FLAG_VK_REPACKED): Q6_K weight matrices with rows of a
// multiple of 2048 weights are regrouped at upload into the planar Q6_K layout
// (backends/common/q6k-planar.h; shaders/q6p.glsl reads it), so that every field a decode
// invocation reads is aligned: the GGUF layout's 210-byte super-blocks leave them 2-byte
// aligned, and its decode kernel had to stage rows through shared memory and realign them
// (H200: the 1B output matrix 87.5 -> 59.1 us per token, the 8B 185.4 -> 107.6). Same size, the
// tensor keeps its type; get_tensor gives the GGUF bytes back.
#pragma once

#include "tensor.h"

// Whether weight t is converted when uploaded whole: Q6_K, flagged EMBER_TENSOR_FLAG_WEIGHT,
// contiguous, not a view, rows of a multiple of 2048. EMBER_VULKAN_REPACK=0: never (read at each call).
bool ember_vk_repack_wanted(const ember_tensor * t);
