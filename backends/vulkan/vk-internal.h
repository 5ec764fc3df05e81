// Private structures of the Vulkan backend, shared by vk-backend.cpp (instance, devices,
// memory, buffers, streams) and vk-ops.cpp (which ops run here and how they are recorded).
#ifndef EMBER_VK_INTERNAL_H
#define EMBER_VK_INTERNAL_H

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "host-copy.h"

// Fails the enclosing function (returning ember_status) with a message when a Vulkan call fails.
#define EMBER_VK_CHECK(call, what)                                                  \
    do {                                                                            \
        VkResult r_ = (call);                                                       \
        if (r_ != VK_SUCCESS) return ember_vk_fail(r_, what, __FILE__, __LINE__);   \
    } while (0)

ember_status ember_vk_fail(VkResult r, const char * what, const char * file, int line);

// The backend's environment switches: whether variable `name` is exactly `value`; whether it
// is set to something other than "" or "0"; its integer value, or `dflt` when it is not set (0
// when it is not a number).
inline bool env_is(const char * name, const char * value) {
    const char * v = std::getenv(name);
    return v && std::strcmp(v, value) == 0;
}
inline bool env_flag(const char * name) {
    const char * v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}
inline long env_long(const char * name, long dflt) {
    const char * v = std::getenv(name);
    return v ? std::strtol(v, nullptr, 10) : dflt;
}

// One VkDeviceMemory block that buffers are sub-allocated from (first fit).
struct vk_mem_block {
    VkDeviceMemory                     memory = VK_NULL_HANDLE;
    VkDeviceSize                       size   = 0;
    uint32_t                           type   = 0;        // memory type index
    void *                             mapped = nullptr;  // when host-visible
    std::map<VkDeviceSize, VkDeviceSize> free_ranges;     // offset -> size
};

struct vk_device_ctx {
    // Set at enumeration.
    uint32_t                   index = 0;
    std::string                name;         // "vulkan:N"
    std::string                description;  // the driver's device name
    VkPhysicalDevice           phys = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties props{};
    VkPhysicalDeviceMemoryProperties mem_props{};
    bool                       is_cpu = false;
    uint32_t                   subgroup_size  = 0;
    bool                       subgroup_arith = false;  // subgroupAdd in compute shaders
    // The decode products' byte dot products as SPV_KHR_integer_dot_product instructions
    // (mul_mat_vec_q.comp QX_DOT): VK_KHR_shader_integer_dot_product and its feature, enabled at
    // device creation. False with EMBER_VULKAN_IDOT=0 or when the device lacks them.
    bool                       idot = false;
    bool                       idot_fast = false;  // 4x8-bit packed signed dot product accelerated (informative)
    // Prefill products on the tensor cores (mul_mm_coop.comp): VK_NV_cooperative_matrix with
    // the 16 x 8 x 16 f16 x f16 -> f32 shape, shaderFloat16 and the Vulkan memory model, all
    // enabled at device creation. Found at enumeration; false when the build has no such
    // shaders, with EMBER_VULKAN_COOPMAT=0, or when the device lacks any of them.
    bool                       coopmat = false;
    bool                       pstats  = false;  // EMBER_VULKAN_PIPELINE_STATS=1 and VK_KHR_pipeline_executable_properties
    ember_buffer_type          buft{};
    ember_device               device{};

    // Created on first use (ensure_init).
    std::mutex            mutex;  // init, pipelines, memory blocks
    bool                  init_done   = false;
    ember_status          init_status = EMBER_OK;
    VkDevice              dev         = VK_NULL_HANDLE;
    uint32_t              queue_family = 0;
    VkQueue               queue        = VK_NULL_HANDLE;
    std::mutex            queue_mutex;  // vkQueueSubmit / vkQueueWaitIdle
    VkDescriptorSetLayout dsl    = VK_NULL_HANDLE;
    VkPipelineLayout      layout = VK_NULL_HANDLE;
    std::map<std::string, VkShaderModule> modules;
    std::map<std::string, VkPipeline>     pipelines;  // "name/wg"
    VkPipelineCache       pcache = VK_NULL_HANDLE;      // vk-pipeline-cache.cpp
    std::string           pcache_file;                  // "" when the disk cache is off
    int                   pcache_state = 0;             // EMBER_VK_PCACHE_*
    bool                  pcache_dirty = false;         // pipelines made since the last save
    uint32_t              mem_type_device = UINT32_MAX;  // device-local (for every ember buffer)
    bool                  device_mem_mapped = false;     // that type is also host-visible and coherent
    uint32_t              mem_type_staging = UINT32_MAX; // host-visible, coherent
    std::vector<vk_mem_block *> blocks;
    VkDeviceSize          block_size = 0;
    std::atomic<uint64_t> buffer_epoch{0};  // +1 per freed buffer: recorded command buffers may name it
    // Synchronous transfers (staging copies, fills), under xfer_mutex.
    std::mutex            xfer_mutex;
    VkCommandPool         xfer_pool  = VK_NULL_HANDLE;
    VkCommandBuffer       xfer_cb    = VK_NULL_HANDLE;
    VkFence               xfer_fence = VK_NULL_HANDLE;
    // Small uploads recorded (vkCmdUpdateBuffer) while up_open, submitted with the next graph
    // or before the next other transfer (vk-backend.cpp: upload_deferred).
    VkCommandBuffer       up_cb   = VK_NULL_HANDLE;
    bool                  up_open = false;
    // up_cb went with a stream's graph submission that is not known done yet (cleared when that
    // stream waits for its fence): reusing it then needs a wait, otherwise none.
    std::atomic<bool>     up_busy{false};
    // Readback reads of 128 KiB or more (the logits) split over helper threads (host-copy.h),
    // made at the first such read; under xfer_mutex.
    std::unique_ptr<ember_host_copier> copier;
    int                                copier_n = -1;  // the helpers asked for (EMBER_VULKAN_COPY_THREADS)
    // Readback copies (vk-backend.cpp: record_readbacks): write_gen counts the submissions and
    // the host's writes (set, clear, free); rb_stream's last submission, which took generation
    // rb_gen, copied its graph's outputs into host memory, and they are current while
    // write_gen == rb_gen. Under xfer_mutex.
    uint64_t              write_gen = 0, rb_gen = 0;
    struct vk_stream_ctx * rb_stream = nullptr;
    // Statistics (ember_vulkan_device_io_stats): queue submissions, waits for the whole queue,
    // reads served by a readback copy.
    std::atomic<uint64_t> n_submits{0}, n_idle_waits{0}, n_rb_reads{0};
    VkBuffer              staging     = VK_NULL_HANDLE;
    vk_mem_block *        staging_blk = nullptr;
    VkDeviceSize          staging_size = 0;
    // EMBER_VULKAN_PROFILE=1: host time in set_tensor / get_tensor (waits and staged copies
    // included) and their count, printed with a stream's profile.
    // [0]: set_tensor, [1]: get_tensor; counted once the first graph was submitted (not the
    // weights' uploads).
    std::atomic<uint64_t> prof_io_ns[2] = {}, prof_io_calls[2] = {};
    std::atomic<bool>     prof_graph_seen{false};
};

struct vk_buffer_ctx {
    vk_device_ctx * dc     = nullptr;
    VkBuffer        buffer = VK_NULL_HANDLE;
    vk_mem_block *  block  = nullptr;
    VkDeviceSize    offset = 0;  // in the block
    VkDeviceSize    size   = 0;  // requested
    VkDeviceSize    alloc  = 0;  // taken from the block
    // The host reads and writes it through the block's mapping (device memory mapped: integrated
    // GPUs, lavapipe), not through staging copies. False with EMBER_VULKAN_NO_UMA=1 also where
    // it shares a mapped block (lavapipe's single memory type).
    bool            host_mapped = false;
};

// A command buffer recorded for one graph range, kept to be submitted again while the graph,
// its tensors' shapes, parameters and addresses, and the device's buffers stay the same (the
// runtime reuses its decode graphs from token to token; only the inputs' contents change).
// A graph output copied into the stream's readback buffer at the end of a recording: bytes
// [off, off + size) of buffer src, at dst in the readback buffer.
struct vk_readback {
    VkBuffer     src = VK_NULL_HANDLE;
    VkDeviceSize off = 0, size = 0, dst = 0;
};

struct vk_recording {
    VkCommandBuffer               cb = VK_NULL_HANDLE;
    std::vector<VkDescriptorPool> desc_pools;  // its descriptor sets
    size_t                        desc_pool_cur = 0;
    bool                          valid      = false;
    bool                          row_checks = false;  // has GET_ROWS / SET_ROWS
    const void *                  graph      = nullptr;
    int32_t                       begin = 0, end = 0;
    uint64_t                      sig = 0, epoch = 0, last_use = 0;
    uint64_t                      tensor_epoch = 0;  // ember_tensor_epoch() when sig was last found to hold
    // EMBER_VULKAN_PROFILE=1: a timestamp before the first dispatch and after each one, and
    // what each interval ran.
    VkQueryPool                   qpool = VK_NULL_HANDLE;
    uint32_t                      qcap  = 0;
    std::vector<std::string>      qnames;
    std::vector<vk_readback>      readbacks;  // its outputs' copies into vk_stream_ctx::rb_buf
};
constexpr int k_vk_recordings = 8;  // per stream (the runtime caches a few graphs)

struct vk_stream_ctx {
    vk_device_ctx *               dc   = nullptr;
    VkCommandPool                 pool = VK_NULL_HANDLE;
    VkCommandBuffer               cb   = VK_NULL_HANDLE;  // the one being recorded (= rec->cb)
    VkFence                       fence = VK_NULL_HANDLE;
    bool                          pending = false;  // submitted, fence not yet waited
    bool                          up_in_flight = false;  // that submission holds the device's up_cb
    // Host-visible (cached where the device has it) memory that each recording's last commands
    // copy the graph's outputs into (EMBER_TENSOR_FLAG_OUTPUT: the logits), so that reading them
    // costs no second submission and wait (vk-backend.cpp: record_readbacks); rb_rec: the
    // recording last submitted.
    VkBuffer                      rb_buf = VK_NULL_HANDLE;
    vk_mem_block *                rb_blk = nullptr;
    VkDeviceSize                  rb_off = 0, rb_alloc = 0, rb_size = 0;
    const char *                  rb_ptr = nullptr;
    const vk_recording *          rb_rec = nullptr;
    vk_recording                  recs[k_vk_recordings];
    vk_recording *                rec = nullptr;    // being recorded
    uint64_t                      use_clock = 0;
    uint64_t                      n_recorded = 0, n_reused = 0;  // statistics (tests)
    uint64_t                      n_sigs = 0;                    // graph signatures computed (tests)
    // The last recording's dispatches, barriers between them and fused node groups (tests).
    uint32_t                      n_dispatches = 0, n_barriers = 0, n_fused = 0;
    std::vector<std::string>      shaders;  // the last recording's shader variants, in order (tests)
    // EMBER_VULKAN_PROFILE=1: every dispatch in graph order after a barrier, timed (GPU
    // timestamps); per kernel: total nanoseconds and calls, printed when the stream is freed.
    bool                          profile = false;
    // EMBER_VULKAN_PROFILE=graph: only the whole graph timed, barriers as planned (the GPU time
    // of a token as it runs, against the host's wall time between submissions).
    bool                          profile_graph = false;
    vk_recording *                last_submitted = nullptr;
    std::map<std::string, std::pair<double, uint64_t>> prof;
    double                        prof_total_ns = 0;
    uint64_t                      prof_graphs   = 0;
    // Host side (profile): wall time from one submission to the next, time blocked on the
    // fence, submissions counted.
    double                        prof_last_submit_ns = 0, prof_wall_ns = 0, prof_wait_ns = 0;
    double                        prof_prep_ns = 0, prof_enter_ns = 0;  // in graph_compute before its submission (signature, recording)
    double                        prof_sig_ns  = 0;                     // in the graph signature itself (every graph_compute)
    uint64_t                      prof_sigs    = 0;
    uint64_t                      prof_submits = 0;
    ember_abort_callback          abort_cb = nullptr;
    void *                        abort_ud = nullptr;
    // Words in host-visible memory that GET_ROWS / SET_ROWS set when a row index is out of
    // range (bound at binding 4); read after the graph, reported as a status. Each such
    // dispatch of a recording gets its own slot (err_stride bytes apart, a legal binding
    // offset), so that they need no barrier between them for writing the same word.
    VkBuffer                      err_buf = VK_NULL_HANDLE;
    vk_mem_block *                err_blk = nullptr;
    VkDeviceSize                  err_off = 0, err_alloc = 0;
    volatile uint32_t *           err_ptr = nullptr;
    VkDeviceSize                  err_stride = 4;
    uint32_t                      err_slot   = 0;  // the slot of the dispatch being recorded
    // Device-local words (err_stride bytes apart, zero between dispatches) that the workgroups
    // of a decode product fused with the norm after it (mul_mat_vec_q.comp NORM_OUT) count
    // themselves done on, so that the last one does the norm: one slot per such dispatch of a
    // recording (dispatches that share a slot are ordered by their data: the residual stream);
    // after them (at cnt_scratch) the product rows those dispatches hand to their last
    // workgroup (k_vk_norm_max floats; the planner orders such dispatches, which all write it).
    // After the scratch rows (at xq_base): k_vk_xq_slots slots of k_vk_xq_slot bytes, each
    // one decode activation row quantized to 8 bits (quantize_x.comp) for the QX_PRE products
    // that read it; the planner hands them out in turn per recording (ember_vk_record_range).
    // Slot 0 lies right after the scratch rows: the fused product + norm dispatches that write
    // their result's quantized copy themselves (EMBER_VULKAN_MMV_QX_OUT) bind both as one range.
    // After the slots (at xq_bcnt): k_vk_xq_maxk / 32 words, one per 32-value block of a
    // quantized row, that the workgroups of a fused gate + up + SWIGLU dispatch count themselves
    // done on, so that the last one of a block quantizes it (zero between dispatches).
    VkBuffer                      cnt_buf = VK_NULL_HANDLE;
    VkDeviceSize                  cnt_scratch = 0, xq_base = 0, xq_bcnt = 0;
    int32_t                       xq_slot = -1;  // the slot of the product being recorded (-1: none)
    int32_t                       xq_out  = -1;  // the slot the dispatch being recorded writes its result's copy to (-1: none)
    bool                          xq_code = false;  // its "_xq" shader variant with the copy off (EMBER_VULKAN_MMV_QX_OUT=code)
    uint32_t                      n_xq    = 0;   // quantize_x dispatches of the last recording (in n_dispatches)
    vk_mem_block *                cnt_blk = nullptr;
    VkDeviceSize                  cnt_off = 0, cnt_alloc = 0;
};
constexpr uint32_t k_vk_err_slots = 64;
constexpr uint32_t k_vk_cnt_slots = 256;
constexpr uint32_t k_vk_norm_max  = 8192;  // the longest row a fused product + norm normalizes
constexpr uint32_t k_vk_xq_slots  = 8;
constexpr uint32_t k_vk_xq_maxk   = 16384;  // the longest quantized row (mul_mat_vec_q.comp QX_MAXK)
constexpr uint32_t k_vk_norm_xq_maxk = 4096;  // the longest norm row that writes its quantized copy (rms_norm.comp PER * 256)
constexpr uint32_t k_vk_xq_slot   = k_vk_xq_maxk + k_vk_xq_maxk / 32 * 8;  // int8 values, then (d, d * sum) per 32
constexpr uint32_t k_vk_xq_bcnt   = k_vk_xq_maxk / 32 * 4;  // the block counters' bytes
constexpr uint64_t k_vk_readback_max = 32ull << 20;  // the most output bytes a recording copies back

// Every pipeline has the same layout: 8 storage buffers (binding 0..7; most shaders use the
// first few, the decode products fused with the norm after them all 8) and 128 bytes of push
// constants.
constexpr uint32_t k_vk_bindings   = 8;
constexpr uint32_t k_vk_push_words = 32;
// The fake base address of every device buffer: tensor->data - base is the byte offset.
constexpr uintptr_t k_vk_base = 0x1000;

// vk-pipeline-cache.cpp (called with dc->mutex held)
enum { EMBER_VK_PCACHE_OFF = -1, EMBER_VK_PCACHE_NONE = 0, EMBER_VK_PCACHE_LOADED = 1, EMBER_VK_PCACHE_IGNORED = 2 };
std::string  ember_vk_pcache_path(const vk_device_ctx * dc);  // from the environment, now
void         ember_vk_pcache_load(vk_device_ctx * dc);        // creates dc->pcache
void         ember_vk_pcache_save(vk_device_ctx * dc);        // when dirty

// vk-backend.cpp
ember_status ember_vk_ensure_init(vk_device_ctx * dc);
// spec1 .. spec3: specialization constants 1 .. 3 of shaders that have them (0: not given, the
// shader's default).
ember_status ember_vk_pipeline(vk_device_ctx * dc, const std::string & shader, uint32_t wg, VkPipeline * out, uint32_t spec1 = 0,
                               uint32_t spec2 = 0, uint32_t spec3 = 0);
ember_status ember_vk_alloc_desc_set(vk_stream_ctx * sc, VkDescriptorSet * out);
bool         ember_vk_is_own_buffer(vk_device_ctx * dc, const ember_buffer * buf);

// vk-ops.cpp
bool         ember_vk_supports_op(vk_device_ctx * dc, const ember_tensor * op);
// Records nodes [begin, end) of g into sc->cb: some node groups fused into one dispatch
// ([ADD] RMS_NORM [MUL]; SWIGLU + the decode MUL_MAT that reads it; the K and V products
// with their SET_ROWS into an F16 cache; the O and FFN down products with the residual ADD and
// the RMS_NORM + MUL after them), the dispatches ordered by dependency level (each after every
// earlier one whose buffer ranges it reads or writes, or that reads what it writes) with a
// barrier only between levels; before the first QX product of each decode x, a dispatch that
// quantizes x once for all of them (quantize_x.comp). EMBER_VULKAN_BARRIERS=all: graph order
// and a barrier after every dispatch; EMBER_VULKAN_FUSE=0: no fusion (both to compare).
ember_status ember_vk_record_range(vk_stream_ctx * sc, ember_graph * g, int32_t begin, int32_t end);

#endif  // EMBER_VK_INTERNAL_H
