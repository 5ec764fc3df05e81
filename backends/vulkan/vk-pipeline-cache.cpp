// The on-disk pipeline cache: the driver's VkPipelineCache data of a device, kept between runs
// so that the pipelines (one per op, type and variant) are not compiled again by the driver at
// every start (tens of milliseconds each on a real GPU).
//
// Where: $EMBER_VULKAN_PIPELINE_CACHE (a directory; empty or "0" turns the cache off), else
// $XDG_CACHE_HOME/ember, else ~/.cache/ember. One file per device and driver:
// vk-pipelines-VENDOR-DEVICE-DRIVER-UUID.bin, so that two GPUs or a driver update never read
// each other's data. The file is our header (magic, the same ids, size, FNV-1a hash of the
// data) then the driver's data; anything that does not check out (truncated, corrupt, another
// device's) is ignored with one line on stderr, and the device starts with an empty cache.
// Saved after a graph created new pipelines, through a temporary file renamed over the old
// one, so a reader never sees half a file.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#if !defined(_WIN32)
#    include <unistd.h>
#endif

#include "vk-internal.h"

namespace {

constexpr char k_magic[8] = {'E', 'M', 'B', 'V', 'K', 'P', 'C', '1'};

struct file_header {
    char     magic[8];
    uint32_t vendor;
    uint32_t device;
    uint32_t driver;
    uint8_t  uuid[VK_UUID_SIZE];
    uint32_t reserved;
    uint64_t size;  // bytes of driver data after this header
    uint64_t hash;  // FNV-1a 64 of those bytes
};
static_assert(sizeof(file_header) == 56, "pipeline cache file header: no padding");

uint64_t fnv1a(const uint8_t * p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

std::string cache_dir() {
    const char * env = std::getenv("EMBER_VULKAN_PIPELINE_CACHE");
    if (env) return (*env && std::strcmp(env, "0") != 0) ? std::string(env) : std::string();
    const char * xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/ember";
    const char * home = std::getenv("HOME");
    if (home && *home) return std::string(home) + "/.cache/ember";
    return std::string();
}

// The driver's own header (Vulkan spec, VkPipelineCacheHeaderVersionOne) names the device too.
bool driver_header_ok(const vk_device_ctx * dc, const uint8_t * p, size_t n) {
    if (n < 16 + VK_UUID_SIZE) return false;
    uint32_t hsize, version, vendor, device;
    std::memcpy(&hsize, p, 4);
    std::memcpy(&version, p + 4, 4);
    std::memcpy(&vendor, p + 8, 4);
    std::memcpy(&device, p + 12, 4);
    return hsize >= 16 + VK_UUID_SIZE && hsize <= n && version == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
           vendor == dc->props.vendorID && device == dc->props.deviceID &&
           std::memcmp(p + 16, dc->props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
}

// Why a cache file cannot be used, or nullptr when it can (data then holds the driver's part).
const char * check_file(const vk_device_ctx * dc, const std::vector<uint8_t> & file, std::vector<uint8_t> & data) {
    file_header h;
    if (file.size() < sizeof(h)) return "truncated";
    std::memcpy(&h, file.data(), sizeof(h));
    if (std::memcmp(h.magic, k_magic, sizeof(k_magic)) != 0) return "not an ember pipeline cache";
    if (h.vendor != dc->props.vendorID || h.device != dc->props.deviceID || h.driver != dc->props.driverVersion ||
        std::memcmp(h.uuid, dc->props.pipelineCacheUUID, VK_UUID_SIZE) != 0) {
        return "made for another device or driver";
    }
    if (h.size != file.size() - sizeof(h)) return "truncated";
    if (fnv1a(file.data() + sizeof(h), file.size() - sizeof(h)) != h.hash) return "corrupt (checksum)";
    if (!driver_header_ok(dc, file.data() + sizeof(h), file.size() - sizeof(h))) return "corrupt (driver header)";
    data.assign(file.begin() + sizeof(h), file.end());
    return nullptr;
}

bool read_file(const std::string & path, std::vector<uint8_t> & out) {
    std::FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    out.clear();
    uint8_t buf[65536];
    size_t  n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
        out.insert(out.end(), buf, buf + n);
        if (out.size() > (512u << 20)) break;  // no driver cache is this large: stop reading
    }
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

}  // namespace

std::string ember_vk_pcache_path(const vk_device_ctx * dc) {
    const std::string dir = cache_dir();
    if (dir.empty()) return std::string();
    char name[128];
    std::snprintf(name, sizeof(name), "/vk-pipelines-%04x-%04x-%08x-", dc->props.vendorID, dc->props.deviceID,
                  dc->props.driverVersion);
    std::string path = dir + name;
    for (uint8_t b : dc->props.pipelineCacheUUID) {
        char hx[3];
        std::snprintf(hx, sizeof(hx), "%02x", b);
        path += hx;
    }
    return path + ".bin";
}

void ember_vk_pcache_load(vk_device_ctx * dc) {
    dc->pcache_file  = ember_vk_pcache_path(dc);
    dc->pcache_state = dc->pcache_file.empty() ? EMBER_VK_PCACHE_OFF : EMBER_VK_PCACHE_NONE;
    std::vector<uint8_t> file, data;
    if (!dc->pcache_file.empty() && read_file(dc->pcache_file, file)) {
        const char * why = check_file(dc, file, data);
        if (why) {
            std::fprintf(stderr, "ember: vulkan: ignoring the pipeline cache %s: %s\n", dc->pcache_file.c_str(), why);
            dc->pcache_state = EMBER_VK_PCACHE_IGNORED;
            data.clear();
        }
    }
    VkPipelineCacheCreateInfo ci{};
    ci.sType           = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
    ci.initialDataSize = data.size();
    ci.pInitialData    = data.empty() ? nullptr : data.data();
    VkResult r         = vkCreatePipelineCache(dc->dev, &ci, nullptr, &dc->pcache);
    if (r != VK_SUCCESS && !data.empty()) {  // the driver refused the data: start empty
        std::fprintf(stderr, "ember: vulkan: ignoring the pipeline cache %s: the driver refused it (VkResult %d)\n",
                     dc->pcache_file.c_str(), (int) r);
        dc->pcache_state   = EMBER_VK_PCACHE_IGNORED;
        ci.initialDataSize = 0;
        ci.pInitialData    = nullptr;
        r                  = vkCreatePipelineCache(dc->dev, &ci, nullptr, &dc->pcache);
    } else if (r == VK_SUCCESS && !data.empty()) {
        dc->pcache_state = EMBER_VK_PCACHE_LOADED;
    }
    if (r != VK_SUCCESS) dc->pcache = VK_NULL_HANDLE;  // pipelines are then made without a cache
    dc->pcache_dirty = false;
}

void ember_vk_pcache_save(vk_device_ctx * dc) {
    if (!dc->pcache_dirty || dc->pcache == VK_NULL_HANDLE || dc->pcache_file.empty()) return;
    dc->pcache_dirty = false;
    size_t n = 0;
    if (vkGetPipelineCacheData(dc->dev, dc->pcache, &n, nullptr) != VK_SUCCESS || n == 0) return;
    std::vector<uint8_t> data(n);
    if (vkGetPipelineCacheData(dc->dev, dc->pcache, &n, data.data()) != VK_SUCCESS) return;
    data.resize(n);
    file_header h{};
    std::memcpy(h.magic, k_magic, sizeof(k_magic));
    h.vendor = dc->props.vendorID;
    h.device = dc->props.deviceID;
    h.driver = dc->props.driverVersion;
    std::memcpy(h.uuid, dc->props.pipelineCacheUUID, VK_UUID_SIZE);
    h.size = data.size();
    h.hash = fnv1a(data.data(), data.size());

    std::error_code ec;
    const std::filesystem::path path(dc->pcache_file);
    std::filesystem::create_directories(path.parent_path(), ec);
#if defined(_WIN32)
    const std::string tmp = dc->pcache_file + ".tmp";
#else
    const std::string tmp = dc->pcache_file + ".tmp." + std::to_string((long) getpid());
#endif
    std::FILE * f  = std::fopen(tmp.c_str(), "wb");
    bool        ok = f != nullptr;
    if (ok) {
        ok = std::fwrite(&h, sizeof(h), 1, f) == 1 && std::fwrite(data.data(), 1, data.size(), f) == data.size();
        ok = std::fclose(f) == 0 && ok;
    }
    if (ok) {
        std::filesystem::rename(tmp, path, ec);
        ok = !ec;
    }
    if (!ok) {
        std::filesystem::remove(tmp, ec);
        static bool said = false;  // a read-only cache directory: say it once, keep running
        if (!said) std::fprintf(stderr, "ember: vulkan: cannot write the pipeline cache %s\n", dc->pcache_file.c_str());
        said = true;
    }
}
