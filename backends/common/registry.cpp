// The backend registry: every registered backend's devices in priority order, CPU last,
// plus the device and stream dispatch helpers.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"

#ifdef EMBER_HAVE_VULKAN
#    include "backends/vulkan/vulkan-backend.h"
#endif

namespace {

struct registry {
    std::mutex                       mutex;
    bool                             initialized = false;
    std::vector<ember_backend_reg *> regs;     // in registration order, CPU first
    std::vector<ember_device *>      devices;  // other backends' devices in order, then the CPU's
};

registry & get_registry() {
    static registry r;
    return r;
}

// Rebuilds the device order; called with the mutex held.
void rebuild_devices(registry & r) {
    r.devices.clear();
    ember_backend_reg * cpu = ember_cpu_backend_reg();
    for (int pass = 0; pass < 2; pass++) {
        for (ember_backend_reg * reg : r.regs) {
            if ((reg == cpu) != (pass == 1)) continue;
            const size_t n = reg->iface.get_device_count(reg);
            for (size_t i = 0; i < n; i++) {
                ember_device * dev = reg->iface.get_device(reg, i);
                if (dev) r.devices.push_back(dev);
            }
        }
    }
}

bool add_locked(registry & r, ember_backend_reg * reg) {
    if (!reg) return false;
    if (reg->api_version != EMBER_BACKEND_API_VERSION || reg->struct_size < sizeof(ember_backend_reg)) {
        // The vtable layout of another version is unknown: do not call into it, not even get_name.
        std::fprintf(stderr, "ember: warning: backend refused: api_version %d (struct size %u), expected %d (%zu)\n",
                     reg->api_version, reg->struct_size, EMBER_BACKEND_API_VERSION, sizeof(ember_backend_reg));
        return false;
    }
    if (!reg->iface.get_name || !reg->iface.get_device_count || !reg->iface.get_device) return false;
    for (ember_backend_reg * have : r.regs) {
        if (have == reg) return false;
    }
    r.regs.push_back(reg);
    rebuild_devices(r);
    return true;
}

// Registers the built-in backends once. Called with the mutex held.
void init_locked(registry & r) {
    if (r.initialized) return;
    r.initialized = true;
    add_locked(r, ember_cpu_backend_reg());
    // GPU backends (CUDA, Vulkan) are added here when built in.
#ifdef EMBER_HAVE_CUDA
    add_locked(r, ember_registry_cuda());  // no driver or no GPU: a backend with no devices
#endif
#ifdef EMBER_HAVE_VULKAN
    add_locked(r, ember_vulkan_backend_reg());  // lists GPUs only; lavapipe is found by name
#endif
}

}  // namespace

size_t ember_registry_device_count() {
    registry &                  r = get_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    init_locked(r);
    return r.devices.size();
}

ember_device * ember_registry_device(size_t index) {
    registry &                  r = get_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    init_locked(r);
    return index < r.devices.size() ? r.devices[index] : nullptr;
}

ember_device * ember_registry_cpu_device() {
    ember_backend_reg * cpu = ember_cpu_backend_reg();
    return cpu->iface.get_device(cpu, 0);
}

bool ember_registry_add(ember_backend_reg * reg) {
    registry &                  r = get_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    init_locked(r);
    return add_locked(r, reg);
}

ember_device * ember_registry_find_device(const char * name) {
    if (!name) return nullptr;
    registry &                  r = get_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    init_locked(r);
    for (ember_device * dev : r.devices) {
        if (std::strcmp(dev->iface.get_name(dev), name) == 0) return dev;
    }
    // "cuda" names the first "cuda:N".
    if (!std::strchr(name, ':')) {
        const std::string prefix = std::string(name) + ":";
        for (ember_device * dev : r.devices) {
            if (std::strncmp(dev->iface.get_name(dev), prefix.c_str(), prefix.size()) == 0) return dev;
        }
    }
    // Devices a backend keeps off the default list (Vulkan's CPU implementation, lavapipe)
    // are still found by an explicit name, through the optional "ember_find_device" entry.
    typedef ember_device * (*find_device_fn)(ember_backend_reg *, const char *);
    for (ember_backend_reg * reg : r.regs) {
        if (!reg->iface.get_proc_address) continue;
        auto find = reinterpret_cast<find_device_fn>(reg->iface.get_proc_address(reg, "ember_find_device"));
        if (ember_device * dev = find ? find(reg, name) : nullptr) return dev;
    }
    return nullptr;
}

//
// Dispatch
//
const char * ember_device_get_name(ember_device * dev) {
    return dev->iface.get_name(dev);
}

ember_buffer_type * ember_device_buffer_type(ember_device * dev) {
    return dev->iface.get_buffer_type(dev);
}

bool ember_device_supports_op(ember_device * dev, const ember_tensor * op) {
    return dev->iface.supports_op(dev, op);
}

bool ember_device_supports_buft(ember_device * dev, ember_buffer_type * buft) {
    return dev->iface.supports_buft(dev, buft);
}

ember_status ember_device_init_stream(ember_device * dev, const ember_stream_params * p, ember_stream ** out) {
    if (!dev || !out) return EMBER_ERR_INVALID_ARG;
    *out = nullptr;
    ember_stream_params defaults = {0};
    return dev->iface.init_stream(dev, p ? p : &defaults, out);
}

void ember_stream_free(ember_stream * s) {
    if (!s) return;
    s->iface.free_stream(s);
}
