// The C API's device queries: the public device numbering (ember_api_device, which
// ember_device_name in runtime/c-api.cpp uses too), a device's description and
// a measurement of its memory bandwidth, so tools can say which GPU (or CPU) and how many bytes
// per second a run had to work with (ember-bench prints both for the device it benchmarks).
#include <algorithm>
#include <chrono>
#include <memory>

#include "backend.h"
#include "graph.h"
#include "runtime/c-api-internal.h"

ember_device * ember_api_device(int32_t index) {
    if (ember_init() != EMBER_OK) return nullptr;
    const int32_t n = static_cast<int32_t>(ember_registry_device_count());
    if (index < 0 || index >= n) return nullptr;
    return index == 0 ? ember_registry_cpu_device() : ember_registry_device(static_cast<size_t>(index - 1));
}

EMBER_API const char * ember_device_description(int32_t index) {
    ember_device * d = ember_api_device(index);
    if (!d) return nullptr;
    return d->iface.get_description ? d->iface.get_description(d) : ember_device_get_name(d);
}

// A copy of one F32 tensor into another in the device's own memory, through the device's own
// stream (the backend's CPY op): bytes read + bytes written per second, best of the runs after
// a warm-up (an accelerator's first runs also record and instantiate its launch graph).
EMBER_API ember_status ember_device_copy_bandwidth(int32_t index, uint64_t bytes, double * gb_per_s) {
    return ember_api_guarded([&]() -> ember_status {
        if (!gb_per_s) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_device_copy_bandwidth: gb_per_s is NULL");
        *gb_per_s        = 0.0;
        ember_device * d = ember_api_device(index);
        if (!d) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_device_copy_bandwidth: no device %d", index);
        const bool cpu = d == ember_registry_cpu_device();
        if (bytes == 0) bytes = cpu ? (uint64_t(256) << 20) : (uint64_t(1) << 30);
        if (bytes < 4096 || bytes > (uint64_t(16) << 30)) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_device_copy_bandwidth: %llu bytes is out of range [4 KiB, 16 GiB]",
                                  static_cast<unsigned long long>(bytes));
        }
        const int64_t  n = static_cast<int64_t>(bytes / 4);
        ember_graph    g;
        ember_tensor * src = g.new_tensor(EMBER_TYPE_F32, n);
        ember_tensor * dst = ember_cpy(g, src, EMBER_TYPE_F32);
        g.build_forward(dst);
        if (!ember_device_supports_op(d, dst)) {
            return ember_api_fail(EMBER_ERR_UNSUPPORTED, "ember_device_copy_bandwidth: %s cannot copy F32 tensors", ember_device_get_name(d));
        }
        ember_buffer_type * bt    = ember_device_buffer_type(d);
        const size_t        align = ember_buffer_type_alignment(bt);
        const size_t        each  = (ember_buffer_type_alloc_size(bt, src) + align - 1) / align * align;
        ember_buffer *      buf   = nullptr;
        ember_status        st    = ember_buffer_type_alloc(bt, 2 * each, &buf);
        if (st != EMBER_OK) {
            return ember_api_fail(st, "ember_device_copy_bandwidth: cannot allocate 2 x %llu bytes on %s", static_cast<unsigned long long>(bytes),
                                  ember_device_get_name(d));
        }
        std::unique_ptr<ember_buffer, void (*)(ember_buffer *)> hold(buf, ember_buffer_free);
        ember_buffer_place_tensor(buf, src, 0);
        ember_buffer_place_tensor(buf, dst, each);
        buf->iface.clear(buf, 0);
        ember_stream_params sp{};
        sp.n_threads     = 0;  // the CPU: all cores
        ember_stream * s = nullptr;
        st               = ember_device_init_stream(d, &sp, &s);
        if (st != EMBER_OK) return ember_api_fail(st, "ember_device_copy_bandwidth: cannot start a stream on %s", ember_device_get_name(d));
        std::unique_ptr<ember_stream, void (*)(ember_stream *)> hold_s(s, ember_stream_free);
        const int32_t n_nodes = static_cast<int32_t>(g.nodes.size());
        double        best    = 0.0;
        for (int rep = 0; rep < 8; rep++) {
            const auto t0 = std::chrono::steady_clock::now();
            st            = s->iface.graph_compute(s, &g, 0, n_nodes);
            s->iface.synchronize(s);
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (st != EMBER_OK) return ember_api_fail(st, "ember_device_copy_bandwidth: the copy failed on %s", ember_device_get_name(d));
            if (rep >= 2 && sec > 0) best = std::max(best, 2.0 * static_cast<double>(n) * 4.0 / sec / 1e9);
        }
        *gb_per_s = best;
        return EMBER_OK;
    });
}
