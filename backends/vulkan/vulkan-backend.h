// The Vulkan backend's entry points (backends/vulkan). Devices are named "vulkan:N", N the
// Vulkan physical-device index. CPU implementations (Mesa's lavapipe) are left off the
// default device list, so that a machine without a GPU keeps running on the CPU backend;
// they are used when named ("vulkan:N", or "vulkan" when no other Vulkan device exists) or
// listed with EMBER_VULKAN_ALLOW_CPU=1. EMBER_VULKAN_VALIDATE=1 enables the Khronos
// validation layer (when installed) and counts the errors it reports.
// Other settings: EMBER_VULKAN_PIPELINE_CACHE=DIR (the on-disk pipeline cache's folder; "0"
// turns it off; default $XDG_CACHE_HOME/ember or ~/.cache/ember), EMBER_VULKAN_NO_CMD_REUSE=1
// (record every graph again instead of resubmitting unchanged ones), EMBER_VULKAN_MMV_GENERIC=1
// (no decode fast path: every matrix-vector product on the generic kernel),
// EMBER_VULKAN_MMV_ROWS=1|2 (rows per invocation of the fast path), EMBER_VULKAN_STATS=1
// (each stream says at exit how many graph ranges it recorded and resubmitted),
// EMBER_VULKAN_NO_UMA=1 (device memory through staging copies even when it is mappable),
// EMBER_VULKAN_BARRIERS=all (dispatches in graph order with a barrier after each, instead of
// reordered by dependency level with barriers only between levels), EMBER_VULKAN_FUSE=0 (no
// fused [ADD] RMS_NORM [MUL] or SWIGLU + MUL_MAT dispatch). EMBER_VULKAN_VALIDATE=sync also turns on the layer's
// synchronization validation (missing or wrong barriers). EMBER_VULKAN_COOPMAT=0: prefill
// products without cooperative matrices (VK_NV_cooperative_matrix, used when glslc and the
// device both have it). EMBER_VULKAN_FUSE_GLU=0, EMBER_VULKAN_MMV_Q8_0=units,
// EMBER_VULKAN_MMV_Q6_K=units, EMBER_VULKAN_MMV_LPR=32|64|128, EMBER_VULKAN_MMV_QQ_ROWS=1|2,
// EMBER_VULKAN_ATTN_SG=0, EMBER_VULKAN_FUSE_KV=0 (K/V projections not written straight into
// an F16 cache), EMBER_VULKAN_MMV_SG=0, EMBER_VULKAN_NORM_SG=0, EMBER_VULKAN_FUSE_NORM=0 (the O and
// FFN down products, their residual ADD and the next RMS_NORM + MUL not one dispatch),
// EMBER_VULKAN_ATTN_RANGE=0 (attention visits every key of the cache view, not only those up
// to the last one the mask shows), EMBER_VULKAN_MMV_QX=0 (no integer-dot QX products),
// EMBER_VULKAN_MMV_QX_PRE=0 (QX products quantize x in every workgroup instead of reading it
// quantized once per input), EMBER_VULKAN_NORM_C8=0 (decode norms by rms_norm.comp, not
// rms_norm_c8.comp), EMBER_VULKAN_MMV_Q6P_ROWS=1..8 (rows per row group of the planar Q6_K
// kernel, default 4): decode-kernel switches (vk-ops.cpp). EMBER_VULKAN_REPACK=0: Q6_K weights
// stay in the GGUF layout at upload instead of the backend's planar one (vk-repack.h). EMBER_VULKAN_READBACK=0: a
// graph's outputs (the logits) read back through a staging copy of their own after the graph,
// not copied into host memory by the graph's own command buffer (=1: that copy also where
// device memory is host-mapped, as on lavapipe). EMBER_VULKAN_PROFILE=1: each
// stream times every dispatch with GPU timestamps (dispatches then in graph order, a barrier
// before each) and prints the time per kernel when freed.
#ifndef EMBER_VULKAN_BACKEND_H
#define EMBER_VULKAN_BACKEND_H

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"

ember_backend_reg * ember_vulkan_backend_reg();

// Any Vulkan device by name: "vulkan" (the preferred one: discrete, integrated, virtual, CPU),
// "vulkan:N", or "vulkan:TEXT" (the first whose description contains TEXT, case-insensitive).
// Also reached through the registry (get_proc_address "ember_find_device"). nullptr if none.
ember_device * ember_vulkan_find_device(const char * name);

// Errors the validation layer reported so far (0 when validation is off).
int64_t ember_vulkan_validation_errors();
// True when EMBER_VULKAN_VALIDATE=1 and the validation layer could be enabled.
bool    ember_vulkan_validation_enabled();

// The on-disk pipeline cache (vk-pipeline-cache.cpp): the file this device would use under
// the current environment ("" when off), and what its initialization did with it: -1 off,
// 0 no file, 1 loaded, 2 ignored (corrupt or another device's).
std::string ember_vulkan_pipeline_cache_file(ember_device * dev);
int         ember_vulkan_pipeline_cache_state(ember_device * dev);

// Whether the decode products use integer dot product instructions on this device
// (VK_KHR_shader_integer_dot_product; EMBER_VULKAN_IDOT=0 off), and whether the device says
// the packed signed 8-bit form is accelerated. False for other devices.
bool ember_vulkan_integer_dot(ember_device * dev, bool * accelerated);

// Graph ranges a Vulkan stream recorded into command buffers, and those it submitted again
// unchanged (EMBER_VULKAN_NO_CMD_REUSE=1 turns reuse off). False for other streams.
bool ember_vulkan_stream_stats(ember_stream * stream, uint64_t * recorded, uint64_t * reused);

// Graph signatures the stream computed (graph-signature.h): one per graph_compute, except those
// of a range recorded before whose descriptors cannot have changed since (ember_tensor_epoch()
// unchanged). 0 for other streams.
uint64_t ember_vulkan_stream_signatures(ember_stream * stream);

// The last command buffer the stream recorded: its dispatches, the barriers between them, and
// the node groups it fused into one dispatch ([ADD] RMS_NORM [MUL], SWIGLU + MUL_MAT, MUL_MAT + ADD +
// RMS_NORM + MUL, ...). False for other streams.
bool ember_vulkan_stream_last_recording(ember_stream * stream, uint32_t * dispatches, uint32_t * barriers, uint32_t * fused);
// Of those dispatches, how many quantized a decode product's x once for the QX_PRE products
// that read it (EMBER_VULKAN_MMV_QX_PRE=0: none, every workgroup quantizes x itself).
uint32_t ember_vulkan_stream_x_quantizations(ember_stream * stream);
// The shader variant of each of those dispatches, in recording order (empty for other streams).
std::vector<std::string> ember_vulkan_stream_last_shaders(ember_stream * stream);

// Device-wide counters since the device was opened: queue submissions (graphs, staged copies,
// uploads flushed alone), waits for the whole queue (vkQueueWaitIdle), and tensor reads served
// by a graph's readback copy of its outputs (no submission or wait of their own). False for
// other devices.
bool ember_vulkan_device_io_stats(ember_device * dev, uint64_t * submits, uint64_t * idle_waits, uint64_t * readback_reads);

#endif  // EMBER_VULKAN_BACKEND_H
