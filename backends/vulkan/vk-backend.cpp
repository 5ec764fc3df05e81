// The Vulkan backend: instance and device enumeration, lazy logical-device creation, memory
// (device-local blocks that buffers are sub-allocated from, a host-visible staging buffer
// when device memory cannot be mapped), pipelines created on first use and cached, and the
// ember vtables (registry -> device -> stream, buffer type -> buffer). The ops are in
// vk-ops.cpp, the shaders in shaders/.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "graph-signature.h"
#include "converted-weights.h"
#include "q6k-planar.h"
#include "vk-internal.h"
#include "vk-repack.h"
#include "vk-shaders.h"
#include "vulkan-backend.h"

ember_status ember_vk_fail(VkResult r, const char * what, const char * file, int line) {
    std::fprintf(stderr, "ember: vulkan: %s failed: VkResult %d (%s:%d)\n", what, (int) r, file, line);
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY) return EMBER_ERR_OOM;
    return EMBER_ERR_BACKEND;
}

namespace {

//
// Instance (one per process, made on first use of the registry entry)
//
struct vk_instance_state {
    std::once_flag                once;
    VkInstance                    instance  = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT      messenger = VK_NULL_HANDLE;
    bool                          validation = false;
    std::vector<vk_device_ctx *>  all;     // by physical-device index
    std::vector<vk_device_ctx *>  listed;  // the registry's devices, in preference order
};

// Lives for the whole process (devices are handed out by raw pointer and may be used from
// other static destructors), so it is never destroyed.
vk_instance_state & state() {
    static vk_instance_state * s = new vk_instance_state;
    return *s;
}

std::atomic<int64_t> g_validation_errors{0};

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT * data, void *) {
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        g_validation_errors++;
        std::fprintf(stderr, "ember: vulkan validation error: %s\n", data && data->pMessage ? data->pMessage : "?");
    } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        std::fprintf(stderr, "ember: vulkan validation warning: %s\n", data && data->pMessage ? data->pMessage : "?");
    }
    return VK_FALSE;
}

bool has_layer(const char * name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkLayerProperties> layers(n);
    if (vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
    for (const auto & l : layers) {
        if (std::strcmp(l.layerName, name) == 0) return true;
    }
    return false;
}

bool has_instance_extension(const char * name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> exts(n);
    if (vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data()) != VK_SUCCESS) return false;
    for (const auto & e : exts) {
        if (std::strcmp(e.extensionName, name) == 0) return true;
    }
    return false;
}

int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 4;
        default: return 3;
    }
}

void init_device_vtables(vk_device_ctx * dc);

// Whether dc's physical device offers extension `name`.
bool has_device_ext(const vk_device_ctx * dc, const char * name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(dc->phys, nullptr, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> exts(n);
    if (vkEnumerateDeviceExtensionProperties(dc->phys, nullptr, &n, exts.data()) != VK_SUCCESS) return false;
    for (uint32_t i = 0; i < n; i++) {
        if (std::strcmp(exts[i].extensionName, name) == 0) return true;
    }
    return false;
}

// Whether the prefill kernel on cooperative matrices (mul_mm_coop.comp: GL_NV_cooperative_matrix,
// 16 x 8 x 16 f16 products into f32, subgroups of 32, up to 40 KiB of shared memory) can run on dc:
// the build has its shaders, EMBER_VULKAN_COOPMAT is not 0, and the device has the extensions
// (VK_NV_cooperative_matrix, VK_KHR_shader_float16_int8, VK_KHR_vulkan_memory_model), their
// features and that shape. device_init enables them.
bool detect_coopmat(VkInstance inst, const vk_device_ctx * dc) {
#if defined(EMBER_VK_COOPMAT_NV) && defined(VK_NV_cooperative_matrix)
    if (env_is("EMBER_VULKAN_COOPMAT", "0")) return false;
    if (dc->subgroup_size != 32 || dc->props.limits.maxComputeSharedMemorySize < 40960) return false;
    if (!has_device_ext(dc, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) || !has_device_ext(dc, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME) ||
        !has_device_ext(dc, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME)) {
        return false;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{};
    cm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16{};
    f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
    VkPhysicalDeviceVulkanMemoryModelFeaturesKHR mm{};
    mm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &cm;
    cm.pNext = &f16;
    f16.pNext = &mm;
    vkGetPhysicalDeviceFeatures2(dc->phys, &f2);
    if (!cm.cooperativeMatrix || !f16.shaderFloat16 || !mm.vulkanMemoryModel) return false;
    VkPhysicalDeviceCooperativeMatrixPropertiesNV cp{};
    cp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &cp;
    vkGetPhysicalDeviceProperties2(dc->phys, &p2);
    if (!(cp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT)) return false;
    auto shapes = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) vkGetInstanceProcAddr(
        inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t n = 0;
    if (!shapes || shapes(dc->phys, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkCooperativeMatrixPropertiesNV> list(n);
    for (VkCooperativeMatrixPropertiesNV & p : list) p.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    if (shapes(dc->phys, &n, list.data()) != VK_SUCCESS) return false;
    for (uint32_t i = 0; i < n; i++) {
        const VkCooperativeMatrixPropertiesNV & p = list[i];
        if (p.MSize == 16 && p.NSize == 8 && p.KSize == 16 && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
            p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
            p.DType == VK_COMPONENT_TYPE_FLOAT32_NV && p.scope == VK_SCOPE_SUBGROUP_NV) {
            return true;
        }
    }
    return false;
#else
    (void) inst;
    (void) dc;
    return false;
#endif
}

// Whether dc has VK_KHR_shader_integer_dot_product with its feature (mul_mat_vec_q.comp QX_DOT),
// unless EMBER_VULKAN_IDOT=0; fast: the packed signed 4 x 8-bit form is accelerated.
bool detect_idot(const vk_device_ctx * dc, bool * fast) {
    *fast = false;
#if defined(VK_KHR_shader_integer_dot_product)
    if (env_is("EMBER_VULKAN_IDOT", "0")) return false;
    if (!has_device_ext(dc, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) return false;
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR f{};
    f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &f;
    vkGetPhysicalDeviceFeatures2(dc->phys, &f2);
    if (!f.shaderIntegerDotProduct) return false;
    VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR p{};
    p.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR;
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &p;
    vkGetPhysicalDeviceProperties2(dc->phys, &p2);
    *fast = p.integerDotProduct4x8BitPackedSignedAccelerated;
    return true;
#else
    (void) dc;
    return false;
#endif
}

// Whether the pipelines' compiler statistics (registers, spills, ...) are printed as they are
// made: EMBER_VULKAN_PIPELINE_STATS=1 and the device has VK_KHR_pipeline_executable_properties.
bool detect_pstats(const vk_device_ctx * dc) {
#if defined(VK_KHR_pipeline_executable_properties)
    if (!env_flag("EMBER_VULKAN_PIPELINE_STATS")) return false;
    if (has_device_ext(dc, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) return true;
    std::fprintf(stderr, "ember: vulkan: %s has no VK_KHR_pipeline_executable_properties: EMBER_VULKAN_PIPELINE_STATS ignored\n",
                 dc->name.c_str());
#else
    (void) dc;
#endif
    return false;
}

// Prints the compiler statistics of pipeline p (made with the capture flag) as one line.
void print_pstats(vk_device_ctx * dc, VkPipeline p, const std::string & key) {
#if defined(VK_KHR_pipeline_executable_properties)
    auto props = (PFN_vkGetPipelineExecutablePropertiesKHR) vkGetDeviceProcAddr(dc->dev, "vkGetPipelineExecutablePropertiesKHR");
    auto stats = (PFN_vkGetPipelineExecutableStatisticsKHR) vkGetDeviceProcAddr(dc->dev, "vkGetPipelineExecutableStatisticsKHR");
    if (!props || !stats) return;
    VkPipelineInfoKHR pi{};
    pi.sType    = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR;
    pi.pipeline = p;
    uint32_t ne = 0;
    if (props(dc->dev, &pi, &ne, nullptr) != VK_SUCCESS) return;
    for (uint32_t e = 0; e < ne; e++) {
        VkPipelineExecutableInfoKHR ei{};
        ei.sType           = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR;
        ei.pipeline        = p;
        ei.executableIndex = e;
        uint32_t ns        = 0;
        if (stats(dc->dev, &ei, &ns, nullptr) != VK_SUCCESS) continue;
        std::vector<VkPipelineExecutableStatisticKHR> st(ns);
        for (VkPipelineExecutableStatisticKHR & x : st) x.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        if (stats(dc->dev, &ei, &ns, st.data()) != VK_SUCCESS) continue;
        std::string line = "ember: vulkan: pipeline " + key + ":";
        for (uint32_t i = 0; i < ns; i++) {
            const VkPipelineExecutableStatisticKHR & x = st[i];
            line += std::string(" ") + x.name + "=";
            switch (x.format) {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += x.value.b32 ? "1" : "0"; break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += std::to_string(x.value.i64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += std::to_string(x.value.u64); break;
                default: line += std::to_string(x.value.f64); break;
            }
        }
        std::fprintf(stderr, "%s\n", line.c_str());
    }
#else
    (void) dc;
    (void) p;
    (void) key;
#endif
}

// Creates the instance and enumerates the devices; failures leave no devices (and say why once).
void init_instance() {
    vk_instance_state & s = state();
    uint32_t api = 0;
    if (vkEnumerateInstanceVersion(&api) != VK_SUCCESS || api < VK_API_VERSION_1_1) return;  // 1.0 loader: no device for us

    std::vector<const char *> layers, exts;
    if (env_flag("EMBER_VULKAN_VALIDATE")) {
        if (has_layer("VK_LAYER_KHRONOS_validation") && has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            layers.push_back("VK_LAYER_KHRONOS_validation");
            exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
            s.validation = true;
        } else {
            std::fprintf(stderr, "ember: vulkan: EMBER_VULKAN_VALIDATE is set but VK_LAYER_KHRONOS_validation is not "
                                 "installed (Debian: vulkan-validationlayers)\n");
        }
    }
    VkApplicationInfo app{};
    app.sType              = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName   = "ember";
    app.pEngineName        = "ember";
    app.apiVersion         = VK_API_VERSION_1_1;
    VkInstanceCreateInfo ci{};
    ci.sType                   = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo        = &app;
    ci.enabledLayerCount       = (uint32_t) layers.size();
    ci.ppEnabledLayerNames     = layers.data();
    // EMBER_VULKAN_VALIDATE=sync: the layer's synchronization validation too (hazards between
    // dispatches that no barrier orders).
    const VkValidationFeatureEnableEXT sync_feature = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT            vf{};
    vf.sType                         = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
    vf.enabledValidationFeatureCount = 1;
    vf.pEnabledValidationFeatures    = &sync_feature;
    if (s.validation && env_is("EMBER_VULKAN_VALIDATE", "sync")) {
        exts.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);  // provided by the layer
        ci.pNext = &vf;
    }
    ci.enabledExtensionCount   = (uint32_t) exts.size();
    ci.ppEnabledExtensionNames = exts.data();
    if (vkCreateInstance(&ci, nullptr, &s.instance) != VK_SUCCESS) {
        s.instance   = VK_NULL_HANDLE;
        s.validation = false;
        return;
    }
    if (s.validation) {
        auto create = (PFN_vkCreateDebugUtilsMessengerEXT) vkGetInstanceProcAddr(s.instance, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi{};
        mi.sType           = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
        mi.messageType     = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = debug_callback;
        if (!create || create(s.instance, &mi, nullptr, &s.messenger) != VK_SUCCESS) s.validation = false;
    }

    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(s.instance, &n, nullptr) != VK_SUCCESS) return;
    std::vector<VkPhysicalDevice> phys(n);
    if (vkEnumeratePhysicalDevices(s.instance, &n, phys.data()) != VK_SUCCESS) return;
    for (uint32_t i = 0; i < n; i++) {
        auto * dc  = new vk_device_ctx;
        dc->index  = i;
        dc->phys   = phys[i];
        dc->name   = "vulkan:" + std::to_string(i);
        vkGetPhysicalDeviceProperties(phys[i], &dc->props);
        vkGetPhysicalDeviceMemoryProperties(phys[i], &dc->mem_props);
        dc->description = dc->props.deviceName;
        dc->is_cpu      = dc->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
        VkPhysicalDeviceSubgroupProperties sg{};
        sg.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &sg;
        vkGetPhysicalDeviceProperties2(phys[i], &p2);
        dc->subgroup_size  = sg.subgroupSize;
        dc->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                             (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                             (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) && sg.subgroupSize >= 1 &&
                             sg.subgroupSize <= 128;
        dc->coopmat = detect_coopmat(s.instance, dc);
        dc->idot    = detect_idot(dc, &dc->idot_fast);
        dc->pstats  = detect_pstats(dc);
        init_device_vtables(dc);
        s.all.push_back(dc);
    }
    // Devices of Vulkan 1.1 or later, best kind first; CPU implementations only on request.
    const bool allow_cpu = env_flag("EMBER_VULKAN_ALLOW_CPU");
    std::vector<vk_device_ctx *> order;
    for (vk_device_ctx * dc : s.all) {
        if (dc->props.apiVersion >= VK_API_VERSION_1_1) order.push_back(dc);
    }
    std::stable_sort(order.begin(), order.end(), [](vk_device_ctx * a, vk_device_ctx * b) {
        return type_rank(a->props.deviceType) < type_rank(b->props.deviceType);
    });
    for (vk_device_ctx * dc : order) {
        if (!dc->is_cpu || allow_cpu) s.listed.push_back(dc);
    }
}

vk_instance_state & instance() {
    vk_instance_state & s = state();
    std::call_once(s.once, init_instance);
    return s;
}

//
// Memory
//
uint32_t find_mem_type(const vk_device_ctx * dc, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid = 0) {
    for (uint32_t i = 0; i < dc->mem_props.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = dc->mem_props.memoryTypes[i].propertyFlags;
        if ((bits & (1u << i)) && (f & want) == want && (f & avoid) == 0) return i;
    }
    return UINT32_MAX;
}

// Takes `size` bytes aligned to `align` from a block of memory type `type` (a new block when
// none has room). Called with dc->mutex held.
ember_status mem_alloc(vk_device_ctx * dc, uint32_t type, bool map, VkDeviceSize size, VkDeviceSize align,
                       vk_mem_block ** blk_out, VkDeviceSize * off_out, std::vector<vk_mem_block *> & blocks) {
    for (vk_mem_block * b : blocks) {
        if (b->type != type || (map && !b->mapped)) continue;
        for (auto it = b->free_ranges.begin(); it != b->free_ranges.end(); ++it) {
            const VkDeviceSize start = (it->first + align - 1) / align * align;
            if (start + size > it->first + it->second) continue;
            const VkDeviceSize r_off = it->first, r_size = it->second;
            b->free_ranges.erase(it);
            if (start > r_off) b->free_ranges[r_off] = start - r_off;
            if (start + size < r_off + r_size) b->free_ranges[start + size] = r_off + r_size - (start + size);
            *blk_out = b;
            *off_out = start;
            return EMBER_OK;
        }
    }
    const VkDeviceSize bsize = std::max(size, dc->block_size);
    VkMemoryAllocateInfo ai{};
    ai.sType           = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    ai.allocationSize  = bsize;
    ai.memoryTypeIndex = type;
    VkDeviceMemory mem = VK_NULL_HANDLE;
    const VkResult r   = vkAllocateMemory(dc->dev, &ai, nullptr, &mem);
    if (r != VK_SUCCESS) {
        std::fprintf(stderr, "ember: vulkan: %s: cannot allocate %.1f MiB of device memory (VkResult %d)\n", dc->name.c_str(),
                     bsize / (1024.0 * 1024.0), (int) r);
        return EMBER_ERR_OOM;
    }
    auto * b   = new vk_mem_block;
    b->memory  = mem;
    b->size    = bsize;
    b->type    = type;
    if (map && vkMapMemory(dc->dev, mem, 0, VK_WHOLE_SIZE, 0, &b->mapped) != VK_SUCCESS) {
        vkFreeMemory(dc->dev, mem, nullptr);
        delete b;
        return EMBER_ERR_BACKEND;
    }
    if (size < bsize) b->free_ranges[size] = bsize - size;
    blocks.push_back(b);
    *blk_out = b;
    *off_out = 0;
    return EMBER_OK;
}

bool mem_block_empty(const vk_mem_block * b) {
    return b->free_ranges.size() == 1 && b->free_ranges.begin()->first == 0 && b->free_ranges.begin()->second == b->size;
}

// Returns a range; a block left empty is released, except one of the standard size per memory
// type and mapping, kept for the next allocation (a context or graph buffer made again, as
// the tests do for every case, then takes no vkAllocateMemory: lavapipe's fresh memory is
// page-faulted in again each time). Called with dc->mutex held.
void mem_free(vk_device_ctx * dc, vk_mem_block * b, VkDeviceSize off, VkDeviceSize size, std::vector<vk_mem_block *> & blocks) {
    auto & fr = b->free_ranges;
    auto   it = fr.emplace(off, size).first;
    auto   nx = std::next(it);
    if (nx != fr.end() && it->first + it->second == nx->first) {
        it->second += nx->second;
        fr.erase(nx);
    }
    if (it != fr.begin()) {
        auto pv = std::prev(it);
        if (pv->first + pv->second == it->first) {
            pv->second += it->second;
            fr.erase(it);
        }
    }
    if (mem_block_empty(b)) {
        const bool spare = b->size == dc->block_size && std::none_of(blocks.begin(), blocks.end(), [&](const vk_mem_block * o) {
                               return o != b && o->type == b->type && (o->mapped != nullptr) == (b->mapped != nullptr) && mem_block_empty(o);
                           });
        if (spare) return;
        if (b->mapped) vkUnmapMemory(dc->dev, b->memory);
        vkFreeMemory(dc->dev, b->memory, nullptr);
        blocks.erase(std::find(blocks.begin(), blocks.end(), b));
        delete b;
    }
}

ember_status create_buffer(vk_device_ctx * dc, VkDeviceSize size, uint32_t type, bool map, std::vector<vk_mem_block *> & blocks,
                           vk_buffer_ctx * out) {
    VkBufferCreateInfo bi{};
    bi.sType       = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size        = std::max<VkDeviceSize>(size, 4);
    bi.usage       = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    EMBER_VK_CHECK(vkCreateBuffer(dc->dev, &bi, nullptr, &out->buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dc->dev, out->buffer, &req);
    if (!(req.memoryTypeBits & (1u << type))) {
        vkDestroyBuffer(dc->dev, out->buffer, nullptr);
        std::fprintf(stderr, "ember: vulkan: %s: no usable memory type for storage buffers\n", dc->name.c_str());
        return EMBER_ERR_BACKEND;
    }
    ember_status st = mem_alloc(dc, type, map, req.size, req.alignment, &out->block, &out->offset, blocks);
    if (st != EMBER_OK) {
        vkDestroyBuffer(dc->dev, out->buffer, nullptr);
        return st;
    }
    out->dc    = dc;
    out->size  = size;
    out->alloc = req.size;
    const VkResult r = vkBindBufferMemory(dc->dev, out->buffer, out->block->memory, out->offset);
    if (r != VK_SUCCESS) {
        mem_free(dc, out->block, out->offset, out->alloc, blocks);
        vkDestroyBuffer(dc->dev, out->buffer, nullptr);
        return ember_vk_fail(r, "vkBindBufferMemory", __FILE__, __LINE__);
    }
    return EMBER_OK;
}

}  // namespace

//
// Logical device (first use)
//
static ember_status device_init(vk_device_ctx * dc) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(dc->phys, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(dc->phys, &nq, qf.data());
    dc->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++) {  // a compute-only family first (often an async queue), else any
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) {
            dc->queue_family = i;
            break;
        }
    }
    for (uint32_t i = 0; i < nq && dc->queue_family == UINT32_MAX; i++) {
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) dc->queue_family = i;
    }
    if (dc->queue_family == UINT32_MAX) {
        std::fprintf(stderr, "ember: vulkan: %s (%s) has no compute queue\n", dc->name.c_str(), dc->description.c_str());
        return EMBER_ERR_UNSUPPORTED;
    }
    const float             prio = 1.0f;
    VkDeviceQueueCreateInfo qi{};
    qi.sType            = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qi.queueFamilyIndex = dc->queue_family;
    qi.queueCount       = 1;
    qi.pQueuePriorities = &prio;
    VkDeviceCreateInfo di{};
    di.sType                = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos    = &qi;
    // Optional extensions and their features, chained in front of di.pNext: the prefill
    // kernel on cooperative matrices (detect_coopmat) and the integer dot products of the
    // decode products (detect_idot). If the device is refused with them, it is made without
    // the cooperative matrices (the tiled kernels then), then without both.
    while (!dc->dev) {
        std::vector<const char *> exts;
        void *                    chain = nullptr;
        // Extension `ext` enabled, its feature struct f put at the front of the chain.
        const auto link = [&](auto & f, const char * ext) {
            exts.push_back(ext);
            f.pNext = chain;
            chain   = &f;
        };
#if defined(EMBER_VK_COOPMAT_NV) && defined(VK_NV_cooperative_matrix)
        VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{};
        cm.sType             = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
        cm.cooperativeMatrix = VK_TRUE;
        VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16{};
        f16.sType         = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
        f16.shaderFloat16 = VK_TRUE;
        VkPhysicalDeviceVulkanMemoryModelFeaturesKHR mm{};
        mm.sType             = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR;
        mm.vulkanMemoryModel = VK_TRUE;
        if (dc->coopmat) {
            exts.insert(exts.end(), {VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME,
                                     VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME});
            cm.pNext  = &f16;
            f16.pNext = &mm;
            mm.pNext  = chain;
            chain     = &cm;
        }
#endif
#if defined(VK_KHR_pipeline_executable_properties)
        VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef{};
        pef.sType                  = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
        pef.pipelineExecutableInfo = VK_TRUE;
        if (dc->pstats) link(pef, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
#endif
#if defined(VK_KHR_shader_integer_dot_product)
        VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idf{};
        idf.sType                   = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR;
        idf.shaderIntegerDotProduct = VK_TRUE;
        if (dc->idot) link(idf, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
#endif
        (void) link;  // (headers without either extension)
        di.pNext                   = chain;
        di.enabledExtensionCount   = (uint32_t) exts.size();
        di.ppEnabledExtensionNames = exts.empty() ? nullptr : exts.data();
        const VkResult r           = vkCreateDevice(dc->phys, &di, nullptr, &dc->dev);
        if (r == VK_SUCCESS) break;
        dc->dev = VK_NULL_HANDLE;
        if (exts.empty()) EMBER_VK_CHECK(r, "vkCreateDevice");
        if (dc->pstats) {
            std::fprintf(stderr, "ember: vulkan: %s: no device with pipeline statistics\n", dc->name.c_str());
            dc->pstats = false;
        } else if (dc->coopmat) {
            std::fprintf(stderr, "ember: vulkan: %s: no device with cooperative matrices; prefill without them\n", dc->name.c_str());
            dc->coopmat = false;
        } else {
            std::fprintf(stderr, "ember: vulkan: %s: no device with integer dot products; decode without them\n", dc->name.c_str());
            dc->idot = false;
        }
    }
    vkGetDeviceQueue(dc->dev, dc->queue_family, 0, &dc->queue);
    ember_vk_pcache_load(dc);

    VkDescriptorSetLayoutBinding b[k_vk_bindings]{};
    for (uint32_t i = 0; i < k_vk_bindings; i++) {
        b[i].binding         = i;
        b[i].descriptorType  = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        b[i].descriptorCount = 1;
        b[i].stageFlags      = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo li{};
    li.sType        = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    li.bindingCount = k_vk_bindings;
    li.pBindings    = b;
    EMBER_VK_CHECK(vkCreateDescriptorSetLayout(dc->dev, &li, nullptr, &dc->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, k_vk_push_words * 4};
    VkPipelineLayoutCreateInfo pli{};
    pli.sType                  = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pli.setLayoutCount         = 1;
    pli.pSetLayouts            = &dc->dsl;
    pli.pushConstantRangeCount = 1;
    pli.pPushConstantRanges    = &pr;
    EMBER_VK_CHECK(vkCreatePipelineLayout(dc->dev, &pli, nullptr, &dc->layout), "vkCreatePipelineLayout");

    // Memory types: device-local for every ember buffer (mapped directly when it is also
    // host-visible and coherent: integrated GPUs, lavapipe); host-visible coherent staging.
    VkBufferCreateInfo bi{};
    bi.sType       = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size        = 4096;
    bi.usage       = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkBuffer probe = VK_NULL_HANDLE;
    EMBER_VK_CHECK(vkCreateBuffer(dc->dev, &bi, nullptr, &probe), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dc->dev, probe, &req);
    vkDestroyBuffer(dc->dev, probe, nullptr);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    // Device memory the host maps directly only where it is the host's own memory (integrated
    // GPUs, CPU implementations). A discrete GPU's host-visible VRAM (resizable BAR) is not used
    // for ember buffers: the host reading it back (logits every token) goes uncached over PCIe,
    // tens of milliseconds per token on an H100; transfers go through staging instead.
    const bool uma    = dc->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                     dc->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const bool no_uma = !uma || env_flag("EMBER_VULKAN_NO_UMA");
    dc->mem_type_device = no_uma ? UINT32_MAX : find_mem_type(dc, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | hv);
    dc->device_mem_mapped = dc->mem_type_device != UINT32_MAX;
    if (!dc->device_mem_mapped) {
        dc->mem_type_device = find_mem_type(dc, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (dc->mem_type_device == UINT32_MAX) dc->mem_type_device = find_mem_type(dc, req.memoryTypeBits, 0);
    }
    dc->mem_type_staging = find_mem_type(dc, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (dc->mem_type_staging == UINT32_MAX) dc->mem_type_staging = find_mem_type(dc, req.memoryTypeBits, hv);
    if (dc->mem_type_device == UINT32_MAX || dc->mem_type_staging == UINT32_MAX) {
        std::fprintf(stderr, "ember: vulkan: %s: no suitable memory types\n", dc->name.c_str());
        return EMBER_ERR_UNSUPPORTED;
    }
    dc->block_size = std::min<VkDeviceSize>(64ull << 20, dc->props.limits.maxStorageBufferRange);

    VkCommandPoolCreateInfo pi{};
    pi.sType            = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pi.flags            = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = dc->queue_family;
    EMBER_VK_CHECK(vkCreateCommandPool(dc->dev, &pi, nullptr, &dc->xfer_pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai{};
    ai.sType              = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool        = dc->xfer_pool;
    ai.level              = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    EMBER_VK_CHECK(vkAllocateCommandBuffers(dc->dev, &ai, &dc->xfer_cb), "vkAllocateCommandBuffers");
    EMBER_VK_CHECK(vkAllocateCommandBuffers(dc->dev, &ai, &dc->up_cb), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{};
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    EMBER_VK_CHECK(vkCreateFence(dc->dev, &fi, nullptr, &dc->xfer_fence), "vkCreateFence");
    if (!dc->device_mem_mapped) {
        vk_buffer_ctx st;
        dc->staging_size = 16ull << 20;
        const ember_status s = create_buffer(dc, dc->staging_size, dc->mem_type_staging, true, dc->blocks, &st);
        if (s != EMBER_OK) return s;
        dc->staging     = st.buffer;
        dc->staging_blk = st.block;
        // The staging buffer is the only buffer of its block (the block size is its size).
        if (st.offset != 0) return EMBER_ERR_INTERNAL;
    }
    return EMBER_OK;
}

ember_status ember_vk_ensure_init(vk_device_ctx * dc) {
    std::lock_guard<std::mutex> lock(dc->mutex);
    if (!dc->init_done) {
        dc->init_done   = true;
        dc->init_status = device_init(dc);
        if (dc->init_status != EMBER_OK) {
            std::fprintf(stderr, "ember: vulkan: %s (%s) cannot be used\n", dc->name.c_str(), dc->description.c_str());
        }
    }
    return dc->init_status;
}

ember_status ember_vk_pipeline(vk_device_ctx * dc, const std::string & shader, uint32_t wg, VkPipeline * out, uint32_t spec1,
                               uint32_t spec2, uint32_t spec3) {
    std::lock_guard<std::mutex> lock(dc->mutex);
    const std::string key = shader + "/" + std::to_string(wg) + "/" + std::to_string(spec1) + "/" + std::to_string(spec2) + "/" +
                            std::to_string(spec3);
    auto              it  = dc->pipelines.find(key);
    if (it != dc->pipelines.end()) {
        *out = it->second;
        return EMBER_OK;
    }
    VkShaderModule & mod = dc->modules[shader];
    if (mod == VK_NULL_HANDLE) {
        const ember_vk_shader_blob * blob = nullptr;
        for (size_t i = 0; i < ember_vk_shader_blob_count; i++) {
            if (shader == ember_vk_shader_blobs[i].name) blob = &ember_vk_shader_blobs[i];
        }
        if (!blob) {
            std::fprintf(stderr, "ember: vulkan: no shader '%s' in this build\n", shader.c_str());
            return EMBER_ERR_INTERNAL;
        }
        VkShaderModuleCreateInfo mi{};
        mi.sType    = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
        mi.codeSize = blob->n_words() * 4;
        mi.pCode    = blob->words;
        EMBER_VK_CHECK(vkCreateShaderModule(dc->dev, &mi, nullptr, &mod), "vkCreateShaderModule");
    }
    // Specialization constant 0: the workgroup size (local_size_x_id = 0). Constants 1 .. 3
    // when given (non-zero; mul_mat_vec_q: invocations per row, rows per invocation; 3: the
    // units per invocation and step; mul_mat_vec_q6s: rows per row group, row groups per row,
    // x loaded once per row group), else the shader's defaults.
    const uint32_t           given[4] = {wg, spec1, spec2, spec3};
    uint32_t                 values[4];
    VkSpecializationMapEntry me[4];
    uint32_t                 n_spec = 0;
    for (uint32_t i = 0; i < 4; i++) {
        if (i > 0 && given[i] == 0) continue;
        values[n_spec] = given[i];
        me[n_spec]     = {i, n_spec * 4, 4};
        n_spec++;
    }
    VkSpecializationInfo si{n_spec, me, n_spec * sizeof(uint32_t), values};
    VkComputePipelineCreateInfo ci{};
    ci.sType        = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    ci.stage.sType  = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage  = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = mod;
    ci.stage.pName  = "main";
    ci.stage.pSpecializationInfo = &si;
    ci.layout       = dc->layout;
#if defined(VK_KHR_pipeline_executable_properties)
    if (dc->pstats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
#endif
    VkPipeline p    = VK_NULL_HANDLE;
    EMBER_VK_CHECK(vkCreateComputePipelines(dc->dev, dc->pcache, 1, &ci, nullptr, &p), "vkCreateComputePipelines");
    if (dc->pstats) print_pstats(dc, p, key);
    dc->pipelines[key] = p;
    dc->pcache_dirty   = true;  // saved when the graph that needed it has been submitted
    *out               = p;
    return EMBER_OK;
}

ember_status ember_vk_alloc_desc_set(vk_stream_ctx * sc, VkDescriptorSet * out) {
    vk_device_ctx * dc = sc->dc;
    vk_recording *  rc = sc->rec;
    for (;;) {
        if (rc->desc_pool_cur == rc->desc_pools.size()) {
            VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 512 * k_vk_bindings};
            VkDescriptorPoolCreateInfo pi{};
            pi.sType         = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
            pi.maxSets       = 512;
            pi.poolSizeCount = 1;
            pi.pPoolSizes    = &ps;
            VkDescriptorPool pool = VK_NULL_HANDLE;
            EMBER_VK_CHECK(vkCreateDescriptorPool(dc->dev, &pi, nullptr, &pool), "vkCreateDescriptorPool");
            rc->desc_pools.push_back(pool);
        }
        VkDescriptorSetAllocateInfo ai{};
        ai.sType              = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
        ai.descriptorPool     = rc->desc_pools[rc->desc_pool_cur];
        ai.descriptorSetCount = 1;
        ai.pSetLayouts        = &dc->dsl;
        const VkResult r      = vkAllocateDescriptorSets(dc->dev, &ai, out);
        if (r == VK_SUCCESS) return EMBER_OK;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
            return ember_vk_fail(r, "vkAllocateDescriptorSets", __FILE__, __LINE__);
        }
        rc->desc_pool_cur++;  // this pool is full: the next one (made above when needed)
    }
}

// Host clock for EMBER_VULKAN_PROFILE=1, in nanoseconds.
static double host_ns() {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static bool profile_on() {
    static const bool on = env_flag("EMBER_VULKAN_PROFILE");
    return on;
}

// Waits for a graph's fence. A blocking vkWaitForFences wakes the thread some time after the
// fence signals (an interrupt and a reschedule, tens of microseconds on a discrete GPU), and
// the device idles through it and until the next submission: a decode step's fence is polled
// first (vkGetFenceStatus), for up to EMBER_VULKAN_SPIN_US microseconds (default 5000; 0: block
// at once), as CUDA spins by default while it has a core to spare. Not on a CPU device
// (lavapipe): the polling thread would take a core from the device's own threads.
static VkResult fence_wait(const vk_device_ctx * dc, VkFence fence) {
    const VkDevice dev = dc->dev;
    static const long spin_us = env_long("EMBER_VULKAN_SPIN_US", 5000);
    if (spin_us > 0 && !dc->is_cpu) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
        for (uint32_t i = 0;; i++) {
            const VkResult r = vkGetFenceStatus(dev, fence);
            if (r != VK_NOT_READY) return r;
            if ((i & 63u) == 63u && std::chrono::steady_clock::now() > until) break;
        }
    }
    return vkWaitForFences(dev, 1, &fence, VK_TRUE, UINT64_MAX);
}

// Waits until every submission on the device's queue is done (before host access).
static void device_wait_idle(vk_device_ctx * dc) {
    std::lock_guard<std::mutex> lock(dc->queue_mutex);
    vkQueueWaitIdle(dc->queue);
    dc->n_idle_waits++;
}

// Runs one recorded transfer command buffer and waits for it. Called with xfer_mutex held.
static ember_status xfer_submit(vk_device_ctx * dc) {
    EMBER_VK_CHECK(vkEndCommandBuffer(dc->xfer_cb), "vkEndCommandBuffer");
    VkSubmitInfo si{};
    si.sType              = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers    = &dc->xfer_cb;
    {
        std::lock_guard<std::mutex> lock(dc->queue_mutex);
        EMBER_VK_CHECK(vkQueueSubmit(dc->queue, 1, &si, dc->xfer_fence), "vkQueueSubmit");
    }
    dc->n_submits++;
    EMBER_VK_CHECK(vkWaitForFences(dc->dev, 1, &dc->xfer_fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    EMBER_VK_CHECK(vkResetFences(dc->dev, 1, &dc->xfer_fence), "vkResetFences");
    return EMBER_OK;
}

static ember_status xfer_begin(vk_device_ctx * dc) {
    EMBER_VK_CHECK(vkResetCommandBuffer(dc->xfer_cb, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    EMBER_VK_CHECK(vkBeginCommandBuffer(dc->xfer_cb, &bi), "vkBeginCommandBuffer");
    return EMBER_OK;
}

// Host <-> buffer copies through the staging buffer, in chunks of its size.
// Called with xfer_mutex held, no uploads pending.
static ember_status staged_copy(vk_buffer_ctx * bc, VkDeviceSize off, void * host, size_t size, bool to_device) {
    vk_device_ctx *             dc = bc->dc;
    char *                      h = static_cast<char *>(host);
    for (size_t done = 0; done < size;) {
        const size_t n = std::min<size_t>(size - done, dc->staging_size);
        if (to_device) std::memcpy(dc->staging_blk->mapped, h + done, n);
        ember_status st = xfer_begin(dc);
        if (st != EMBER_OK) return st;
        VkBufferCopy cp{};
        cp.size = n;
        if (to_device) {
            cp.dstOffset = off + done;
            vkCmdCopyBuffer(dc->xfer_cb, dc->staging, bc->buffer, 1, &cp);
        } else {
            cp.srcOffset = off + done;
            vkCmdCopyBuffer(dc->xfer_cb, bc->buffer, dc->staging, 1, &cp);
        }
        VkMemoryBarrier mb{};
        mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT;
        vkCmdPipelineBarrier(dc->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
        st = xfer_submit(dc);
        if (st != EMBER_OK) return st;
        if (!to_device) std::memcpy(h + done, dc->staging_blk->mapped, n);
        done += n;
    }
    return EMBER_OK;
}

// Small uploads (a decode step's token ids, positions, mask, cache row indices: a few each
// token) each cost a submission and a wait through the staging buffer, tens of microseconds
// on a discrete GPU. Instead they are recorded into up_cb (vkCmdUpdateBuffer keeps its own
// copy of the data, at most 64 KiB) and submitted in the same vkQueueSubmit as the next graph
// (submit_recording), or alone before any other transfer, clear or free (flush_uploads).
// EMBER_VULKAN_DEFER_UPLOADS=0 turns this off. Called with xfer_mutex held.
static bool upload_deferred(vk_buffer_ctx * bc, VkDeviceSize off, const void * data, size_t size) {
    static const bool off_env = env_is("EMBER_VULKAN_DEFER_UPLOADS", "0");
    vk_device_ctx * dc = bc->dc;
    if (off_env || size == 0 || size > 65536 || size % 4 != 0 || off % 4 != 0) return false;
    if (!dc->up_open) {
        // up_cb's last submission done: flushed alone (waited), or with a graph whose stream has
        // waited for its fence since (up_busy cleared); else wait for the queue. Earlier readers
        // of what it writes need no wait: every graph's command buffer ends with a barrier that
        // orders its shaders before the transfers submitted after it.
        if (dc->up_busy.load()) device_wait_idle(dc);
        dc->up_busy = false;
        if (vkResetCommandBuffer(dc->up_cb, 0) != VK_SUCCESS) return false;
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        if (vkBeginCommandBuffer(dc->up_cb, &bi) != VK_SUCCESS) return false;
        dc->up_open = true;
    }
    vkCmdUpdateBuffer(dc->up_cb, bc->buffer, off, size, data);
    return true;
}

// Ends up_cb (with the barrier that makes its writes visible to what follows) for submission.
static ember_status uploads_end(vk_device_ctx * dc) {
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(dc->up_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                         &mb, 0, nullptr, 0, nullptr);
    dc->up_open = false;
    EMBER_VK_CHECK(vkEndCommandBuffer(dc->up_cb), "vkEndCommandBuffer");
    return EMBER_OK;
}

// Submits the pending uploads alone and waits for them. Called with xfer_mutex held.
static ember_status flush_uploads(vk_device_ctx * dc) {
    if (!dc->up_open) return EMBER_OK;
    const ember_status st = uploads_end(dc);
    if (st != EMBER_OK) return st;
    VkSubmitInfo si{};
    si.sType              = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers    = &dc->up_cb;
    {
        std::lock_guard<std::mutex> lock(dc->queue_mutex);
        EMBER_VK_CHECK(vkQueueSubmit(dc->queue, 1, &si, dc->xfer_fence), "vkQueueSubmit");
    }
    dc->n_submits++;
    EMBER_VK_CHECK(vkWaitForFences(dc->dev, 1, &dc->xfer_fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    EMBER_VK_CHECK(vkResetFences(dc->dev, 1, &dc->xfer_fence), "vkResetFences");
    return EMBER_OK;
}

//
// Buffer
//
static vk_buffer_ctx * bctx(ember_buffer * buf) { return static_cast<vk_buffer_ctx *>(buf->context); }

static void vk_buffer_free(ember_buffer * buf) {
    vk_buffer_ctx * bc = bctx(buf);
    vk_device_ctx * dc = bc->dc;
    {
        std::lock_guard<std::mutex> lock(dc->xfer_mutex);
        if (flush_uploads(dc) != EMBER_OK) std::fprintf(stderr, "ember: vulkan: pending uploads failed\n");
        dc->write_gen++;  // (a later buffer may get its handle)
    }
    device_wait_idle(dc);  // the GPU may still read it
    dc->buffer_epoch++;    // no recorded command buffer may name it again
    {
        std::lock_guard<std::mutex> lock(dc->mutex);
        vkDestroyBuffer(dc->dev, bc->buffer, nullptr);
        mem_free(dc, bc->block, bc->offset, bc->alloc, dc->blocks);
    }
    delete bc;
    delete buf;
}

static void * vk_buffer_get_base(ember_buffer *) { return reinterpret_cast<void *>(k_vk_base); }

static size_t tensor_offset(const ember_tensor * t) {
    return static_cast<size_t>(reinterpret_cast<uintptr_t>(t->data) - k_vk_base);
}

// The helpers that copy large readback reads (the logits: 513 KB per token, 38 us for one core
// on the H200's host, from memory the device just wrote): EMBER_VULKAN_COPY_THREADS (default 4
// where the host has 16 or more cores, 2 with 8 or more, else 0; never on a CPU device such as lavapipe, whose own
// threads need the cores), polling for the next read as long as the fence is polled
// (EMBER_VULKAN_SPIN_US).
// (Read at each large read: a changed setting makes new helpers.)
static int copy_helpers(const vk_device_ctx * dc) { return ember_host_copier::helpers_wanted("EMBER_VULKAN_COPY_THREADS", dc->is_cpu); }
static int copy_spin_us(const vk_device_ctx * dc) { return dc->is_cpu ? 0 : (int) env_long("EMBER_VULKAN_SPIN_US", 5000); }

// Bytes [off, off + size) of bc from the readback copy of the last graph submitted on the
// device, when that graph copied them back (record_readbacks) and nothing was submitted or
// written by the host since: no queue wait and no staging submission, only the fence of that
// graph (which the scheduler has normally waited for already). Called with xfer_mutex held.
static bool readback_read(vk_buffer_ctx * bc, VkDeviceSize off, void * data, size_t size) {
    vk_device_ctx * dc = bc->dc;
    vk_stream_ctx * sc = dc->rb_stream;
    if (!sc || !sc->rb_rec || dc->rb_gen != dc->write_gen) return false;
    for (const vk_readback & r : sc->rb_rec->readbacks) {
        if (r.src != bc->buffer || off < r.off || off + size > r.off + r.size) continue;
        // (A stream is used by one thread at a time: the one reading its outputs.)
        if (sc->pending && fence_wait(dc, sc->fence) != VK_SUCCESS) return false;
        const char * src = sc->rb_ptr + r.dst + (off - r.off);
        if (size >= ember_host_copier::k_min_split) {
            const int n = copy_helpers(dc);
            if (!dc->copier || dc->copier_n != n) {
                dc->copier.reset();  // (its threads joined before new ones start)
                dc->copier   = std::make_unique<ember_host_copier>(n, copy_spin_us(dc));
                dc->copier_n = n;
            }
            dc->copier->copy(data, src, size);
        } else {
            std::memcpy(data, src, size);
        }
        dc->n_rb_reads++;
        return true;
    }
    return false;
}

// The vtable has no status for set/get: a failed transfer is reported and leaves the data as it was.
// Bytes [off, off + size) of the buffer, written (t: the tensor, for messages).
static void vk_write(vk_buffer_ctx * bc, const ember_tensor * t, size_t off, const void * data, size_t size) {
    const double    t0  = profile_on() ? host_ns() : 0;
    if (bc->host_mapped) {
        {
            std::lock_guard<std::mutex> lock(bc->dc->xfer_mutex);
            bc->dc->write_gen++;  // readback copies may be stale now
        }
        device_wait_idle(bc->dc);
        std::memcpy(static_cast<char *>(bc->block->mapped) + bc->offset + off, data, size);
    } else {
        std::lock_guard<std::mutex> lock(bc->dc->xfer_mutex);
        bc->dc->write_gen++;
        if (!upload_deferred(bc, off, data, size)) {
            ember_status st = flush_uploads(bc->dc);
            device_wait_idle(bc->dc);
            if (st == EMBER_OK) st = staged_copy(bc, off, const_cast<void *>(data), size, true);
            if (st != EMBER_OK) std::fprintf(stderr, "ember: vulkan: upload of %zu bytes to '%s' failed\n", size, t->name);
        }
    }
    if (profile_on() && bc->dc->prof_graph_seen && size <= 65536) {  // (graph inputs, not weights loaded after a probe's graph)
        bc->dc->prof_io_ns[0] += (uint64_t) (host_ns() - t0);
        bc->dc->prof_io_calls[0]++;
    }
}

// Bytes [off, off + size) of the buffer, read (t: the tensor, for messages).
static void vk_read(vk_buffer_ctx * bc, const ember_tensor * t, size_t off, void * data, size_t size) {
    const double    t0  = profile_on() ? host_ns() : 0;
    bool            rb  = false;
    {
        std::lock_guard<std::mutex> lock(bc->dc->xfer_mutex);
        rb = readback_read(bc, off, data, size);
    }
    if (rb) {
        // (read from the last graph's readback copy)
    } else if (bc->host_mapped) {
        device_wait_idle(bc->dc);
        std::memcpy(data, static_cast<const char *>(bc->block->mapped) + bc->offset + off, size);
    } else {
        std::lock_guard<std::mutex> lock(bc->dc->xfer_mutex);
        ember_status st = flush_uploads(bc->dc);
        device_wait_idle(bc->dc);
        if (st == EMBER_OK) st = staged_copy(bc, off, data, size, false);
        if (st != EMBER_OK) {
            std::fprintf(stderr, "ember: vulkan: download of %zu bytes from '%s' failed\n", size, t->name);
            std::memset(data, 0, size);
        }
    }
    if (profile_on() && bc->dc->prof_graph_seen) {
        bc->dc->prof_io_ns[1] += (uint64_t) (host_ns() - t0);
        bc->dc->prof_io_calls[1]++;
    }
}

// Weights of the Vulkan layout (vk-repack.h: planar Q6_K) are converted here, when uploaded
// whole, and read back as their GGUF bytes (converted-weights.h has the rules).
static const ember_converted_layout k_vk_layout = {
    EMBER_TENSOR_FLAG_VK_REPACKED, ember_vk_repack_wanted,
    [](ember_type, int64_t rows, int64_t k, const void * src, void * dst) { ember_q6p_pack(rows, k, src, dst); },
    [](ember_type, int64_t rows, int64_t k, const void * src, void * dst) { ember_q6p_unpack(rows, k, src, dst); }};

static void vk_buffer_set_tensor(ember_buffer * buf, ember_tensor * t, const void * data, size_t offset, size_t size) {
    vk_buffer_ctx *      bc    = bctx(buf);
    const ember_tensor * owner = ember_memory_owner(t);
    const auto read  = [&](void * dst, size_t n) { vk_read(bc, owner, tensor_offset(owner), dst, n); };
    const auto write = [&](const void * src, size_t n) { vk_write(bc, owner, tensor_offset(owner), src, n); };
    if (!ember_converted_set(k_vk_layout, "vulkan", t, data, offset, size, read, write)) vk_write(bc, t, tensor_offset(t) + offset, data, size);
}

static void vk_buffer_get_tensor(ember_buffer * buf, const ember_tensor * t, void * data, size_t offset, size_t size) {
    vk_buffer_ctx *      bc    = bctx(buf);
    const ember_tensor * owner = ember_memory_owner(t);
    const auto read = [&](void * dst, size_t n) { vk_read(bc, owner, tensor_offset(owner), dst, n); };
    if (!ember_converted_get(k_vk_layout, "vulkan", t, data, offset, size, read)) vk_read(bc, t, tensor_offset(t) + offset, data, size);
}

static void vk_buffer_clear(ember_buffer * buf, uint8_t value) {
    vk_buffer_ctx * bc = bctx(buf);
    vk_device_ctx * dc = bc->dc;
    if (bc->host_mapped) {
        {
            std::lock_guard<std::mutex> lock(dc->xfer_mutex);
            dc->write_gen++;
        }
        device_wait_idle(dc);
        std::memset(static_cast<char *>(bc->block->mapped) + bc->offset, value, bc->size);
        return;
    }
    std::lock_guard<std::mutex> lock(dc->xfer_mutex);
    dc->write_gen++;
    if (flush_uploads(dc) != EMBER_OK) return;
    device_wait_idle(dc);
    if (xfer_begin(dc) != EMBER_OK) return;
    vkCmdFillBuffer(dc->xfer_cb, bc->buffer, 0, VK_WHOLE_SIZE, 0x01010101u * value);
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(dc->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
    if (xfer_submit(dc) != EMBER_OK) std::fprintf(stderr, "ember: vulkan: buffer clear failed\n");
}

static const ember_buffer_i k_vk_buffer_i = {
    /* .free_buffer = */ vk_buffer_free,
    /* .get_base    = */ vk_buffer_get_base,
    /* .set_tensor  = */ vk_buffer_set_tensor,
    /* .get_tensor  = */ vk_buffer_get_tensor,
    /* .cpy_tensor  = */ nullptr,
    /* .clear       = */ vk_buffer_clear,
};

bool ember_vk_is_own_buffer(vk_device_ctx * dc, const ember_buffer * buf) {
    return buf && buf->buft == &dc->buft;
}

//
// Buffer type
//
static vk_device_ctx * dctx_of_buft(ember_buffer_type * buft) { return static_cast<vk_device_ctx *>(buft->context); }

static const char * vk_buft_name(ember_buffer_type * buft) { return dctx_of_buft(buft)->name.c_str(); }

static ember_status vk_buft_alloc(ember_buffer_type * buft, size_t size, ember_buffer ** out) {
    *out               = nullptr;
    vk_device_ctx * dc = dctx_of_buft(buft);
    ember_status    st = ember_vk_ensure_init(dc);
    if (st != EMBER_OK) return st;
    auto * bc = new (std::nothrow) vk_buffer_ctx;
    if (!bc) return EMBER_ERR_OOM;
    {
        std::lock_guard<std::mutex> lock(dc->mutex);
        st = create_buffer(dc, size, dc->mem_type_device, dc->device_mem_mapped, dc->blocks, bc);
    }
    bc->host_mapped = dc->device_mem_mapped && st == EMBER_OK;
    if (st != EMBER_OK) {
        std::fprintf(stderr, "ember: vulkan: %s: failed to allocate a buffer of %.1f MiB\n", dc->name.c_str(),
                     size / (1024.0 * 1024.0));
        delete bc;
        return st;
    }
    auto * buf = new (std::nothrow) ember_buffer;
    if (!buf) {
        std::lock_guard<std::mutex> lock(dc->mutex);
        vkDestroyBuffer(dc->dev, bc->buffer, nullptr);
        mem_free(dc, bc->block, bc->offset, bc->alloc, dc->blocks);
        delete bc;
        return EMBER_ERR_OOM;
    }
    buf->iface   = k_vk_buffer_i;
    buf->buft    = buft;
    buf->context = bc;
    buf->size    = size;
    buf->usage   = EMBER_BUFFER_USAGE_ANY;
    *out         = buf;
    return EMBER_OK;
}

static size_t vk_buft_alignment(ember_buffer_type * buft) {
    // Tensor offsets are rounded down to this when bound, so any multiple works; 256 keeps
    // every binding offset legal on every implementation (the limit is at most 256).
    return std::max<size_t>(256, dctx_of_buft(buft)->props.limits.minStorageBufferOffsetAlignment);
}

static size_t vk_buft_max_size(ember_buffer_type * buft) {
    const vk_device_ctx * dc = dctx_of_buft(buft);
    return std::min<size_t>(dc->props.limits.maxStorageBufferRange, (size_t) 1 << 32);
}

static bool vk_buft_is_host(ember_buffer_type *) { return false; }

//
// Stream
//
static vk_stream_ctx * sctx(ember_stream * s) { return static_cast<vk_stream_ctx *>(s->context); }

static const char * vk_stream_get_name(ember_stream * s) { return sctx(s)->dc->name.c_str(); }

// EMBER_VULKAN_PROFILE=1: adds the timestamps of the finished submission to the stream's totals.
static void profile_collect(vk_stream_ctx * sc) {
    vk_recording * rc = sc->last_submitted;
    sc->last_submitted = nullptr;
    if (!rc || !rc->qpool || rc->qnames.empty()) return;
    std::vector<uint64_t> ts(rc->qnames.size() + 1);
    if (vkGetQueryPoolResults(sc->dc->dev, rc->qpool, 0, (uint32_t) ts.size(), ts.size() * sizeof(uint64_t), ts.data(),
                              sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS) {
        return;
    }
    const double period = sc->dc->props.limits.timestampPeriod;
    for (size_t i = 0; i < rc->qnames.size(); i++) {
        auto & e = sc->prof[rc->qnames[i]];
        e.first += (double) (ts[i + 1] - ts[i]) * period;
        e.second++;
    }
    sc->prof_total_ns += (double) (ts.back() - ts.front()) * period;
    sc->prof_graphs++;
}

static void profile_print(vk_stream_ctx * sc) {
    if (sc->prof.empty()) return;
    std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(sc->prof.begin(), sc->prof.end());
    std::sort(rows.begin(), rows.end(), [](const auto & a, const auto & b) { return a.second.first > b.second.first; });
    const char * how = sc->profile_graph ? "whole graphs, barriers as planned" : "dispatches serialized, a barrier before each";
    std::fprintf(stderr, "ember: vulkan: %s profile (%s): %llu graphs, %.3f ms per graph\n", sc->dc->name.c_str(), how,
                 (unsigned long long) sc->prof_graphs, sc->prof_total_ns / 1e6 / (double) sc->prof_graphs);
    if (sc->prof_submits > 1) {
        const vk_device_ctx * dc  = sc->dc;
        const uint64_t        set = dc->prof_io_calls[0].load(), get = dc->prof_io_calls[1].load();
        std::fprintf(stderr,
                     "ember: vulkan: host: %.3f ms wall from one submission to the next (%llu submissions), %.3f ms per "
                     "submission blocked on its fence, %.1f us per resubmitted graph from graph_compute to its "
                     "submission (%llu signatures computed, %.1f us each); after the first graph: %llu set_tensor calls of at most 64 KiB, %.1f us each; %llu get_tensor calls "
                     "(%llu from readback copies), %.1f us each (waits and copies)\n",
                     sc->prof_wall_ns / 1e6 / (double) (sc->prof_submits - 1), (unsigned long long) sc->prof_submits,
                     sc->prof_wait_ns / 1e6 / (double) sc->prof_submits, sc->n_reused ? sc->prof_prep_ns / 1e3 / (double) sc->n_reused : 0.0,
                     (unsigned long long) sc->prof_sigs, sc->prof_sigs ? sc->prof_sig_ns / 1e3 / (double) sc->prof_sigs : 0.0,
                     (unsigned long long) set, set ? (double) dc->prof_io_ns[0].load() / 1e3 / (double) set : 0.0,
                     (unsigned long long) get, (unsigned long long) dc->n_rb_reads.load(),
                     get ? (double) dc->prof_io_ns[1].load() / 1e3 / (double) get : 0.0);
    }
    std::fprintf(stderr, "  %7s %10s %9s %6s  %s\n", "calls", "total ms", "avg us", "%", "kernel");
    for (const auto & r : rows) {
        std::fprintf(stderr, "  %7llu %10.3f %9.2f %6.2f  %s\n", (unsigned long long) r.second.second, r.second.first / 1e6,
                     r.second.first / 1e3 / (double) r.second.second, 100.0 * r.second.first / sc->prof_total_ns, r.first.c_str());
    }
}

static void stream_wait(vk_stream_ctx * sc) {
    if (!sc->pending) return;
    const double t0 = sc->profile ? host_ns() : 0;
    fence_wait(sc->dc, sc->fence);
    if (sc->profile) sc->prof_wait_ns += host_ns() - t0;
    vkResetFences(sc->dc->dev, 1, &sc->fence);
    sc->pending = false;
    if (sc->up_in_flight) sc->dc->up_busy = false;  // the device's up_cb went with it
    sc->up_in_flight = false;
    if (sc->profile) profile_collect(sc);
}

// The stream's readback buffer given back (no submission of the stream pending).
static void readback_free(vk_stream_ctx * sc) {
    vk_device_ctx * dc = sc->dc;
    {
        std::lock_guard<std::mutex> xlock(dc->xfer_mutex);
        if (dc->rb_stream == sc) dc->rb_stream = nullptr;
    }
    sc->rb_rec = nullptr;
    if (!sc->rb_buf) return;
    std::lock_guard<std::mutex> lock(dc->mutex);
    vkDestroyBuffer(dc->dev, sc->rb_buf, nullptr);
    mem_free(dc, sc->rb_blk, sc->rb_off, sc->rb_alloc, dc->blocks);
    sc->rb_buf  = VK_NULL_HANDLE;
    sc->rb_ptr  = nullptr;
    sc->rb_size = 0;
}

// Records, at the end of rc (after the barrier that ends its shaders), copies of the range's
// outputs (EMBER_TENSOR_FLAG_OUTPUT nodes: the logits, or the top-k candidates) into the
// stream's host-visible readback buffer, so that the host reads them after the graph's own
// fence (readback_read) instead of through a second submission, a queue wait and the staging
// buffer: one submission per decode step. At most k_vk_readback_max bytes, the last outputs
// first; larger outputs (all the logits of a long prompt) are read through staging as before.
// (The Q6_K output kernel writing the logits into this buffer itself as well, with no copy,
// measured slower on an H200: 1B Q4_0 tg128 965 against 1040 t/s, the graph 0.987 against
// 0.927 ms; its one 4-byte store per row over PCIe costs more than the 13.6 us copy.)
// Only where device memory is not mapped by the host (discrete GPUs), unless
// EMBER_VULKAN_READBACK=1 (always: the tests on lavapipe); =0 never (read at each recording).
static ember_status record_readbacks(vk_stream_ctx * sc, vk_recording * rc, const ember_graph * g, int32_t begin, int32_t end) {
    vk_device_ctx * dc = sc->dc;
    rc->readbacks.clear();
    if (env_is("EMBER_VULKAN_READBACK", "0")) return EMBER_OK;
    if (dc->device_mem_mapped && !env_is("EMBER_VULKAN_READBACK", "1")) return EMBER_OK;
    std::vector<vk_readback> want;
    VkDeviceSize             total = 0;
    for (int32_t i = end - 1; i >= begin; i--) {
        const ember_tensor * n = g->nodes[i];
        if (!(n->flags & EMBER_TENSOR_FLAG_OUTPUT) || n->op == EMBER_OP_VIEW || !ember_vk_is_own_buffer(dc, n->buffer)) continue;
        const VkDeviceSize size = ember_nbytes(n);
        if (size == 0 || total + size > k_vk_readback_max) continue;
        want.push_back({bctx(n->buffer)->buffer, tensor_offset(n), size, total});
        total = (total + size + 255) / 256 * 256;
    }
    if (want.empty()) return EMBER_OK;
    if (total > sc->rb_size) {
        // A larger buffer: the stream's other recordings copy into the old one, record them again.
        readback_free(sc);
        for (vk_recording & r : sc->recs) {
            if (&r != rc) r.valid = false;
        }
        VkDeviceSize size = 1ull << 20;
        while (size < total) size *= 2;
        vk_buffer_ctx b;
        {
            std::lock_guard<std::mutex> lock(dc->mutex);
            const ember_status st = create_buffer(dc, size, dc->mem_type_staging, true, dc->blocks, &b);
            if (st != EMBER_OK) return st;
        }
        if (!b.block->mapped) return EMBER_ERR_INTERNAL;  // host-visible memory is always mapped
        sc->rb_buf   = b.buffer;
        sc->rb_blk   = b.block;
        sc->rb_off   = b.offset;
        sc->rb_alloc = b.alloc;
        sc->rb_size  = size;
        sc->rb_ptr   = static_cast<const char *>(b.block->mapped) + b.offset;
    }
    for (const vk_readback & r : want) {
        VkBufferCopy cp{};
        cp.srcOffset = r.off;
        cp.dstOffset = r.dst;
        cp.size      = r.size;
        vkCmdCopyBuffer(sc->cb, r.src, sc->rb_buf, 1, &cp);
    }
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(sc->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    rc->readbacks = std::move(want);
    return EMBER_OK;
}

static void vk_stream_free(ember_stream * s) {
    vk_stream_ctx * sc = sctx(s);
    stream_wait(sc);
    if (env_flag("EMBER_VULKAN_STATS")) {
        std::fprintf(stderr,
                     "ember: vulkan: %s stream: %llu graph ranges recorded, %llu submitted again unchanged; the last one: "
                     "%u dispatches, %u barriers, %u fused groups\n",
                     sc->dc->name.c_str(), (unsigned long long) sc->n_recorded, (unsigned long long) sc->n_reused,
                     sc->n_dispatches, sc->n_barriers, sc->n_fused);
    }
    if (sc->err_buf) {
        std::lock_guard<std::mutex> lock(sc->dc->mutex);
        vkDestroyBuffer(sc->dc->dev, sc->err_buf, nullptr);
        mem_free(sc->dc, sc->err_blk, sc->err_off, sc->err_alloc, sc->dc->blocks);
    }
    if (sc->cnt_buf) {
        std::lock_guard<std::mutex> lock(sc->dc->mutex);
        vkDestroyBuffer(sc->dc->dev, sc->cnt_buf, nullptr);
        mem_free(sc->dc, sc->cnt_blk, sc->cnt_off, sc->cnt_alloc, sc->dc->blocks);
    }
    readback_free(sc);
    profile_print(sc);
    for (vk_recording & rc : sc->recs) {
        for (VkDescriptorPool p : rc.desc_pools) vkDestroyDescriptorPool(sc->dc->dev, p, nullptr);
        if (rc.qpool) vkDestroyQueryPool(sc->dc->dev, rc.qpool, nullptr);
    }
    if (sc->fence) vkDestroyFence(sc->dc->dev, sc->fence, nullptr);
    if (sc->pool) vkDestroyCommandPool(sc->dc->dev, sc->pool, nullptr);
    delete sc;
    delete s;
}

static void vk_stream_synchronize(ember_stream * s) { stream_wait(sctx(s)); }

static ember_status submit_recording(vk_stream_ctx * sc, vk_recording * rc);

// EMBER_VULKAN_NO_CMD_REUSE=1 records every graph again (to compare).
static bool cmd_reuse_enabled() {
    static const bool on = !env_flag("EMBER_VULKAN_NO_CMD_REUSE");
    return on;
}

static ember_status vk_stream_graph_compute(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end) {
    vk_stream_ctx * sc = sctx(s);
    vk_device_ctx * dc = sc->dc;
    if (!g || node_begin < 0 || node_begin > node_end || (size_t) node_end > g->nodes.size()) return EMBER_ERR_INVALID_ARG;
    if (sc->profile) sc->prof_enter_ns = host_ns();
    if (sc->abort_cb && sc->abort_cb(sc->abort_ud)) return EMBER_ERR_CANCELLED;
    // The same range recorded before, with nothing changed since: submit it again.
    // Everything recording reads (graph-signature.h, with the descriptors and buffers), hashed
    // unless no tensor descriptor changed since that recording's hash was last found to hold
    // (ember_tensor_epoch(), read before hashing; EMBER_VULKAN_SIGNATURE=always hashes every time).
    static const bool always = env_is("EMBER_VULKAN_SIGNATURE", "always");
    const uint64_t    tepoch = ember_tensor_epoch();
    const uint64_t    epoch  = dc->buffer_epoch.load();
    vk_recording *    hit    = nullptr;
    uint64_t          sig    = 0;
    // A recording of this range that no freed buffer may have named, and whose hash (or tensor
    // epoch, with `by_epoch`) is the current one.
    const auto        find   = [&](bool by_epoch) {
        for (vk_recording & rc : sc->recs) {
            if (cmd_reuse_enabled() && rc.valid && rc.graph == g && rc.begin == node_begin && rc.end == node_end && rc.epoch == epoch &&
                (by_epoch ? rc.tensor_epoch == tepoch : rc.sig == sig)) {
                hit = &rc;
            }
        }
    };
    if (!always) find(true);
    if (hit) {
        sig = hit->sig;
    } else {
        sig = ember_graph_signature(g, node_begin, node_end, true);
        sc->n_sigs++;
        if (sc->profile) {
            sc->prof_sig_ns += host_ns() - sc->prof_enter_ns;
            sc->prof_sigs++;
        }
        find(false);
        if (hit) hit->tensor_epoch = tepoch;
    }
    if (hit) {
        stream_wait(sc);
        sc->n_reused++;
        if (sc->profile) sc->prof_prep_ns += host_ns() - sc->prof_enter_ns;
        hit->last_use = ++sc->use_clock;
        return submit_recording(sc, hit);
    }
    // Check every node first, so a graph either runs or fails before touching memory.
    bool row_checks = false;  // GET_ROWS / SET_ROWS: wait for the graph and read the error word
    for (int32_t i = node_begin; i < node_end; i++) {
        const ember_tensor * node = g->nodes[i];
        row_checks |= node->op == EMBER_OP_GET_ROWS || node->op == EMBER_OP_SET_ROWS;
        if (!ember_vk_supports_op(dc, node)) {
            std::fprintf(stderr, "ember: vulkan: unsupported node %d '%s' (%s)\n", i, node->name, ember_op_name(node->op));
            return EMBER_ERR_UNSUPPORTED;
        }
        if (node->op == EMBER_OP_VIEW) continue;
        if (!ember_vk_is_own_buffer(dc, node->buffer)) return EMBER_ERR_INTERNAL;
        for (int j = 0; j < EMBER_MAX_SRC; j++) {
            if (node->src[j] && !ember_vk_is_own_buffer(dc, node->src[j]->buffer)) {
                std::fprintf(stderr, "ember: vulkan: node '%s' reads '%s', which is not in %s memory\n", node->name,
                             node->src[j]->name, dc->name.c_str());
                return EMBER_ERR_INTERNAL;
            }
        }
    }
    stream_wait(sc);
    // Record into the slot this range had, else the least recently used one.
    vk_recording * rc = &sc->recs[0];
    for (vk_recording & r : sc->recs) {
        if (r.graph == g && r.begin == node_begin && r.end == node_end) {
            rc = &r;
            break;
        }
        if (r.last_use < rc->last_use) rc = &r;
    }
    rc->valid = false;
    {
        std::lock_guard<std::mutex> xlock(dc->xfer_mutex);
        if (dc->rb_stream == sc) dc->rb_stream = nullptr;  // rc's list of copies changes
    }
    for (VkDescriptorPool p : rc->desc_pools) vkResetDescriptorPool(dc->dev, p, 0);
    rc->desc_pool_cur = 0;
    sc->rec           = rc;
    sc->cb            = rc->cb;
    sc->n_recorded++;

    EMBER_VK_CHECK(vkResetCommandBuffer(sc->cb, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    EMBER_VK_CHECK(vkBeginCommandBuffer(sc->cb, &bi), "vkBeginCommandBuffer");
    ember_status st = EMBER_OK;
    st = ember_vk_record_range(sc, g, node_begin, node_end);
    // The host reads the results after the fence; later submissions (this one again, copies)
    // read and write what it read and wrote.
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(sc->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                         &mb, 0, nullptr, 0, nullptr);
    if (st == EMBER_OK) st = record_readbacks(sc, rc, g, node_begin, node_end);
    if (st == EMBER_OK && sc->profile_graph && !rc->readbacks.empty() && rc->qpool) {
        // The copies of the outputs to the host (the logits over PCIe) as a row of their own.
        vkCmdWriteTimestamp(sc->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rc->qpool, static_cast<uint32_t>(rc->qnames.size()) + 1);
        VkDeviceSize bytes = 0;
        for (const vk_readback & r : rc->readbacks) bytes += r.size;
        rc->qnames.push_back("readback copies (" + std::to_string(bytes) + " bytes)");
    }
    EMBER_VK_CHECK(vkEndCommandBuffer(sc->cb), "vkEndCommandBuffer");
    if (st != EMBER_OK) return st;
    rc->valid      = true;
    rc->row_checks = row_checks;
    rc->graph      = g;
    rc->begin      = node_begin;
    rc->end        = node_end;
    rc->sig          = sig;
    rc->epoch        = epoch;
    rc->tensor_epoch = tepoch;
    rc->last_use     = ++sc->use_clock;
    {
        std::lock_guard<std::mutex> lock(dc->mutex);
        ember_vk_pcache_save(dc);
    }
    return submit_recording(sc, rc);
}

// Submits a recorded command buffer; waits for it when it has row-index checks to report.
static ember_status submit_recording(vk_stream_ctx * sc, vk_recording * rc) {
    vk_device_ctx * dc = sc->dc;
    {
        // The pending uploads (the graph's inputs) first, in the same submission.
        std::lock_guard<std::mutex> xlock(dc->xfer_mutex);
        VkCommandBuffer             cbs[2];
        uint32_t                    n = 0;
        if (dc->up_open) {
            const ember_status st = uploads_end(dc);
            if (st != EMBER_OK) return st;
            cbs[n++] = dc->up_cb;
        }
        cbs[n++] = rc->cb;
        VkSubmitInfo si{};
        si.sType              = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        si.commandBufferCount = n;
        si.pCommandBuffers    = cbs;
        {
            std::lock_guard<std::mutex> lock(dc->queue_mutex);
            EMBER_VK_CHECK(vkQueueSubmit(dc->queue, 1, &si, sc->fence), "vkQueueSubmit");
        }
        dc->n_submits++;
        sc->up_in_flight = n == 2;
        if (n == 2) dc->up_busy = true;
        // Its readback copies (if any) are the current ones until the next write.
        dc->write_gen++;
        dc->rb_gen    = dc->write_gen;
        dc->rb_stream = rc->readbacks.empty() ? nullptr : sc;
        sc->rb_rec    = rc;
    }
    sc->pending        = true;
    sc->last_submitted = rc;
    if (sc->profile) {
        const double now = host_ns();
        dc->prof_graph_seen = true;
        if (sc->prof_submits++ > 0) sc->prof_wall_ns += now - sc->prof_last_submit_ns;
        sc->prof_last_submit_ns = now;
    }
    if (rc->row_checks) {
        stream_wait(sc);
        bool bad = false;
        for (uint32_t i = 0; i < k_vk_err_slots; i++) {
            volatile uint32_t * w = sc->err_ptr + i * (sc->err_stride / 4);
            bad |= *w != 0;
            *w = 0;
        }
        if (bad) {
            std::fprintf(stderr, "ember: vulkan: %s: a row index of GET_ROWS or SET_ROWS is out of range\n", dc->name.c_str());
            return EMBER_ERR_INTERNAL;  // as the CPU backend
        }
    }
    return EMBER_OK;
}

static void vk_stream_set_abort_callback(ember_stream * s, ember_abort_callback cb, void * user_data) {
    sctx(s)->abort_cb = cb;
    sctx(s)->abort_ud = user_data;
}

static const ember_stream_i k_vk_stream_i = {
    /* .get_name           = */ vk_stream_get_name,
    /* .free_stream        = */ vk_stream_free,
    /* .graph_compute      = */ vk_stream_graph_compute,
    /* .synchronize        = */ vk_stream_synchronize,
    /* .set_n_threads      = */ nullptr,
    /* .set_abort_callback = */ vk_stream_set_abort_callback,
    /* .event_record       = */ nullptr,
    /* .event_wait         = */ nullptr,
    /* .set_tensor_async   = */ nullptr,
    /* .graph_launch       = */ nullptr,
    /* .wait               = */ nullptr,
    /* .read_async         = */ nullptr,
};

static ember_status vk_stream_init_objects(vk_stream_ctx * sc) {
    vk_device_ctx *         dc = sc->dc;
    VkCommandPoolCreateInfo pi{};
    pi.sType            = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pi.flags            = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = dc->queue_family;
    EMBER_VK_CHECK(vkCreateCommandPool(dc->dev, &pi, nullptr, &sc->pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai{};
    ai.sType              = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool        = sc->pool;
    ai.level              = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    for (vk_recording & rc : sc->recs) EMBER_VK_CHECK(vkAllocateCommandBuffers(dc->dev, &ai, &rc.cb), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{};
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    EMBER_VK_CHECK(vkCreateFence(dc->dev, &fi, nullptr, &sc->fence), "vkCreateFence");
    if (env_flag("EMBER_VULKAN_PROFILE")) {
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(dc->phys, &nq, nullptr);
        std::vector<VkQueueFamilyProperties> qf(nq);
        vkGetPhysicalDeviceQueueFamilyProperties(dc->phys, &nq, qf.data());
        sc->profile = dc->queue_family < nq && qf[dc->queue_family].timestampValidBits > 0 && dc->props.limits.timestampPeriod > 0;
        if (!sc->profile) std::fprintf(stderr, "ember: vulkan: %s has no timestamps: EMBER_VULKAN_PROFILE ignored\n", dc->name.c_str());
        sc->profile_graph = sc->profile && env_is("EMBER_VULKAN_PROFILE", "graph");
    }
    vk_buffer_ctx eb;
    {
        std::lock_guard<std::mutex> lock(dc->mutex);
        sc->err_stride        = std::max<VkDeviceSize>(dc->props.limits.minStorageBufferOffsetAlignment, 4);
        const ember_status st = create_buffer(dc, k_vk_err_slots * sc->err_stride, dc->mem_type_staging, true, dc->blocks, &eb);
        if (st != EMBER_OK) return st;
    }
    sc->err_buf   = eb.buffer;
    sc->err_blk   = eb.block;
    sc->err_off   = eb.offset;
    sc->err_alloc = eb.alloc;
    if (!eb.block->mapped) return EMBER_ERR_INTERNAL;  // host-visible memory is always mapped
    sc->err_ptr = reinterpret_cast<volatile uint32_t *>(static_cast<char *>(eb.block->mapped) + eb.offset);
    for (uint32_t i = 0; i < k_vk_err_slots; i++) sc->err_ptr[i * (sc->err_stride / 4)] = 0;
    // The counters of the fused product + norm dispatches: in device memory (atomics on
    // host memory would cross the bus), zeroed once; each dispatch leaves its word at zero.
    vk_buffer_ctx cb;
    {
        std::lock_guard<std::mutex> lock(dc->mutex);
        sc->cnt_scratch       = (k_vk_cnt_slots * sc->err_stride + 255) / 256 * 256;
        sc->xq_base           = (sc->cnt_scratch + k_vk_norm_max * 4 + 255) / 256 * 256;  // slots on 256 bytes
        sc->xq_bcnt           = sc->xq_base + (VkDeviceSize) k_vk_xq_slots * k_vk_xq_slot;  // on 256 bytes too
        const ember_status st = create_buffer(dc, sc->xq_bcnt + k_vk_xq_bcnt, dc->mem_type_device, dc->device_mem_mapped, dc->blocks, &cb);
        if (st != EMBER_OK) return st;
    }
    sc->cnt_buf   = cb.buffer;
    sc->cnt_blk   = cb.block;
    sc->cnt_off   = cb.offset;
    sc->cnt_alloc = cb.alloc;
    if (cb.block->mapped) {
        std::memset(static_cast<char *>(cb.block->mapped) + cb.offset, 0, cb.size);
        return EMBER_OK;
    }
    std::lock_guard<std::mutex> xlock(dc->xfer_mutex);
    ember_status st = flush_uploads(dc);
    if (st == EMBER_OK) st = xfer_begin(dc);
    if (st != EMBER_OK) return st;
    vkCmdFillBuffer(dc->xfer_cb, sc->cnt_buf, 0, VK_WHOLE_SIZE, 0u);
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(dc->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr,
                         0, nullptr);
    return xfer_submit(dc);
}

//
// Device
//
static vk_device_ctx * dctx(ember_device * dev) { return static_cast<vk_device_ctx *>(dev->context); }

static const char * vk_dev_get_name(ember_device * dev) { return dctx(dev)->name.c_str(); }
static const char * vk_dev_get_description(ember_device * dev) { return dctx(dev)->description.c_str(); }

static void vk_dev_get_props(ember_device * dev, ember_device_props * props) {
    vk_device_ctx * dc = dctx(dev);
    std::memset(props, 0, sizeof(*props));
    props->name        = dc->name.c_str();
    props->description = dc->description.c_str();
    size_t total       = 0;
    for (uint32_t i = 0; i < dc->mem_props.memoryHeapCount; i++) {
        if (dc->mem_props.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) total = std::max<size_t>(total, dc->mem_props.memoryHeaps[i].size);
    }
    props->memory_total       = total;
    props->memory_free        = total;  // VK_EXT_memory_budget would say more (later)
    props->type               = EMBER_DEVICE_TYPE_GPU;
    props->caps.async         = 1;
    props->caps.subgroup_size = (int32_t) dc->subgroup_size;
}

static ember_buffer_type * vk_dev_get_buffer_type(ember_device * dev) { return &dctx(dev)->buft; }

static ember_status vk_dev_init_stream(ember_device * dev, const ember_stream_params *, ember_stream ** out) {
    *out               = nullptr;
    vk_device_ctx * dc = dctx(dev);
    ember_status    st = ember_vk_ensure_init(dc);
    if (st != EMBER_OK) return st;
    auto * sc = new (std::nothrow) vk_stream_ctx;
    if (!sc) return EMBER_ERR_OOM;
    sc->dc = dc;
    auto * s = new (std::nothrow) ember_stream{k_vk_stream_i, dev, sc};
    if (!s) {
        delete sc;
        return EMBER_ERR_OOM;
    }
    st = vk_stream_init_objects(sc);
    if (st != EMBER_OK) {
        vk_stream_free(s);
        return st;
    }
    *out = s;
    return EMBER_OK;
}

static bool vk_dev_supports_op(ember_device * dev, const ember_tensor * op) { return ember_vk_supports_op(dctx(dev), op); }

static bool vk_dev_supports_buft(ember_device * dev, ember_buffer_type * buft) { return buft == &dctx(dev)->buft; }

//
// Registry entry
//
static const char * vk_reg_get_name(ember_backend_reg *) { return "vulkan"; }

static size_t vk_reg_get_device_count(ember_backend_reg *) { return instance().listed.size(); }

static ember_device * vk_reg_get_device(ember_backend_reg *, size_t index) {
    vk_instance_state & s = instance();
    return index < s.listed.size() ? &s.listed[index]->device : nullptr;
}

static void * vk_reg_get_proc_address(ember_backend_reg *, const char * name) {
    if (name && std::strcmp(name, "ember_find_device") == 0) {
        ember_device * (*fn)(ember_backend_reg *, const char *) = [](ember_backend_reg *, const char * n) {
            return ember_vulkan_find_device(n);
        };
        return reinterpret_cast<void *>(fn);
    }
    return nullptr;
}

static ember_backend_reg g_vk_reg = {
    /* .api_version = */ EMBER_BACKEND_API_VERSION,
    /* .struct_size = */ sizeof(ember_backend_reg),
    /* .iface       = */ {
        /* .get_name         = */ vk_reg_get_name,
        /* .get_device_count = */ vk_reg_get_device_count,
        /* .get_device       = */ vk_reg_get_device,
        /* .get_proc_address = */ vk_reg_get_proc_address,
    },
    /* .context     = */ nullptr,
};

namespace {
void init_device_vtables(vk_device_ctx * dc) {
    dc->buft.iface   = {vk_buft_name, vk_buft_alloc, vk_buft_alignment, vk_buft_max_size, nullptr, vk_buft_is_host};
    dc->buft.device  = &dc->device;
    dc->buft.context = dc;
    dc->device.iface = {vk_dev_get_name,        vk_dev_get_description, vk_dev_get_props,
                        vk_dev_get_buffer_type, nullptr,                vk_dev_init_stream,
                        vk_dev_supports_op,     vk_dev_supports_buft,   nullptr};
    dc->device.reg     = &g_vk_reg;
    dc->device.context = dc;
}
}  // namespace

ember_backend_reg * ember_vulkan_backend_reg() { return &g_vk_reg; }

ember_device * ember_vulkan_find_device(const char * name) {
    if (!name || std::strncmp(name, "vulkan", 6) != 0) return nullptr;
    vk_instance_state & s = instance();
    const char *        rest = name + 6;
    if (*rest == '\0') {
        if (!s.listed.empty()) return &s.listed[0]->device;
        // Nothing but CPU implementations: the best of those, since Vulkan was asked for.
        for (vk_device_ctx * dc : s.all) {
            if (dc->props.apiVersion >= VK_API_VERSION_1_1) return &dc->device;
        }
        return nullptr;
    }
    if (*rest != ':' || rest[1] == '\0') return nullptr;
    rest++;
    char *              end = nullptr;
    const unsigned long idx = std::strtoul(rest, &end, 10);
    if (end && *end == '\0' && std::isdigit(static_cast<unsigned char>(rest[0]))) {
        if (idx < s.all.size() && s.all[idx]->props.apiVersion >= VK_API_VERSION_1_1) return &s.all[idx]->device;
        return nullptr;
    }
    auto lower = [](std::string x) {
        for (char & c : x) c = (char) std::tolower(static_cast<unsigned char>(c));
        return x;
    };
    const std::string want = lower(rest);
    for (vk_device_ctx * dc : s.all) {
        if (dc->props.apiVersion >= VK_API_VERSION_1_1 && lower(dc->description).find(want) != std::string::npos) return &dc->device;
    }
    return nullptr;
}

int64_t ember_vulkan_validation_errors() { return g_validation_errors.load(); }

std::string ember_vulkan_pipeline_cache_file(ember_device * dev) {
    return dev && dev->reg == &g_vk_reg ? ember_vk_pcache_path(dctx(dev)) : std::string();
}

bool ember_vulkan_stream_stats(ember_stream * stream, uint64_t * recorded, uint64_t * reused) {
    if (!stream || stream->iface.graph_compute != vk_stream_graph_compute) return false;
    *recorded = sctx(stream)->n_recorded;
    *reused   = sctx(stream)->n_reused;
    return true;
}

uint64_t ember_vulkan_stream_signatures(ember_stream * stream) {
    return stream && stream->iface.graph_compute == vk_stream_graph_compute ? sctx(stream)->n_sigs : 0;
}

bool ember_vulkan_stream_last_recording(ember_stream * stream, uint32_t * dispatches, uint32_t * barriers, uint32_t * fused) {
    if (!stream || stream->iface.graph_compute != vk_stream_graph_compute) return false;
    *dispatches = sctx(stream)->n_dispatches;
    *barriers   = sctx(stream)->n_barriers;
    *fused      = sctx(stream)->n_fused;
    return true;
}

bool ember_vulkan_device_io_stats(ember_device * dev, uint64_t * submits, uint64_t * idle_waits, uint64_t * readback_reads) {
    if (!dev || dev->reg != &g_vk_reg) return false;
    const vk_device_ctx * dc = dctx(dev);
    *submits        = dc->n_submits.load();
    *idle_waits     = dc->n_idle_waits.load();
    *readback_reads = dc->n_rb_reads.load();
    return true;
}

std::vector<std::string> ember_vulkan_stream_last_shaders(ember_stream * stream) {
    if (!stream || stream->iface.graph_compute != vk_stream_graph_compute) return {};
    return sctx(stream)->shaders;
}

uint32_t ember_vulkan_stream_x_quantizations(ember_stream * stream) {
    if (!stream || stream->iface.graph_compute != vk_stream_graph_compute) return 0;
    return sctx(stream)->n_xq;
}

int ember_vulkan_pipeline_cache_state(ember_device * dev) {
    if (!dev || dev->reg != &g_vk_reg) return EMBER_VK_PCACHE_OFF;
    vk_device_ctx * dc = dctx(dev);
    if (ember_vk_ensure_init(dc) != EMBER_OK) return EMBER_VK_PCACHE_OFF;
    std::lock_guard<std::mutex> lock(dc->mutex);
    return dc->pcache_state;
}

bool ember_vulkan_integer_dot(ember_device * dev, bool * accelerated) {
    if (accelerated) *accelerated = false;
    if (!dev || dev->reg != &g_vk_reg) return false;
    vk_device_ctx * dc = dctx(dev);
    if (ember_vk_ensure_init(dc) != EMBER_OK) return false;  // device creation may drop the feature
    if (accelerated) *accelerated = dc->idot && dc->idot_fast;
    return dc->idot;
}

bool ember_vulkan_validation_enabled() { return instance().validation; }
