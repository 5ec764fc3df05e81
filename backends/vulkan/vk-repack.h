// The Vulkan weight layout (EMBER_TENSOR_FLAG_VK_REPACKED): Q6_K weight matrices with rows of a
// multiple of 2048 weights are regrouped at upload, segment by segment of 8 super-blocks (1680
// bytes), field by field (shaders/q6p.glsl has the byte map), so that every field a decode
// invocation reads is aligned: the GGUF layout's 210-byte super-blocks leave them 2-byte
// aligned, and its decode kernel had to stage rows through shared memory and realign them
// (H200: the 1B output matrix 87.5 -> 59.1 us per token, the 8B 185.4 -> 107.6). Same size, the
// tensor keeps its type; get_tensor gives the GGUF bytes back.
#pragma once

#include "tensor.h"

#include <cstddef>
#include <cstdint>

// Whether weight t is converted when uploaded whole: Q6_K, flagged EMBER_TENSOR_FLAG_WEIGHT,
// contiguous, not a view, rows of a multiple of 2048. EMBER_VULKAN_REPACK=0: never (read at each call).
bool ember_vk_repack_wanted(const ember_tensor * t);

// nrows rows of ne0 Q6_K weights (ne0 a multiple of 2048): GGUF layout -> planar, and back.
// src and dst do not overlap.
void ember_vk_repack_q6k(int64_t nrows, int64_t ne0, const void * src, void * dst);
void ember_vk_unrepack_q6k(int64_t nrows, int64_t ne0, const void * src, void * dst);
