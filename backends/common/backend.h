// The backend interface: small C vtables, so a backend can live in a shared object loaded
// at run time. Layers: registry -> device -> stream (an execution queue), and
// buffer type -> buffer. Each object is { iface, context }; optional entries may be NULL
// and are marked "(optional)". A backend includes backends/common/* and quant/*, never runtime/.
//
// Fallback: the scheduler (scheduler.h) places each node on the first stream, in priority
// order, whose device supports it (preferring the device that holds its weights); the CPU
// is last and supports every op.
#ifndef EMBER_BACKENDS_BACKEND_H
#define EMBER_BACKENDS_BACKEND_H

#include <cstddef>
#include <cstdint>

#include "ember.h"
#include "graph.h"
#include "tensor.h"

// Bumped whenever a vtable below changes; a backend module built against another value is
// refused at load.
#define EMBER_BACKEND_API_VERSION 3  // 2: ember_stream_i.set_tensor_async; 3: graph_launch, wait, read_async

struct ember_buffer_type;
struct ember_buffer;
struct ember_device;
struct ember_stream;
struct ember_backend_reg;

//
// Buffer types and buffers
//
struct ember_buffer_type_i {
    const char * (*name)(ember_buffer_type * buft);
    // Allocates `size` bytes. EMBER_ERR_OOM (with a message) when it cannot.
    ember_status (*alloc_buffer)(ember_buffer_type * buft, size_t size, ember_buffer ** out);
    size_t       (*alignment)(ember_buffer_type * buft);
    size_t       (*max_size)(ember_buffer_type * buft);                              // (optional) default SIZE_MAX
    size_t       (*alloc_size)(ember_buffer_type * buft, const ember_tensor * tensor);  // (optional) padding; default ember_nbytes
    bool         (*is_host)(ember_buffer_type * buft);                              // memory readable by the CPU
};

struct ember_buffer_type {
    ember_buffer_type_i iface;
    ember_device *      device;
    void *              context;
};

enum ember_buffer_usage : int32_t {
    EMBER_BUFFER_USAGE_ANY     = 0,
    EMBER_BUFFER_USAGE_WEIGHTS = 1,
    EMBER_BUFFER_USAGE_COMPUTE = 2,
};

struct ember_buffer_i {
    void   (*free_buffer)(ember_buffer * buf);
    void * (*get_base)(ember_buffer * buf);
    void   (*set_tensor)(ember_buffer * buf, ember_tensor * t, const void * data, size_t offset, size_t size);
    void   (*get_tensor)(ember_buffer * buf, const ember_tensor * t, void * data, size_t offset, size_t size);
    bool   (*cpy_tensor)(ember_buffer * buf, const ember_tensor * src, ember_tensor * dst);  // (optional) device-side copy
    void   (*clear)(ember_buffer * buf, uint8_t value);
};

struct ember_buffer {
    ember_buffer_i      iface;
    ember_buffer_type * buft;
    void *              context;
    size_t              size;
    ember_buffer_usage  usage;
};

// Buffer helpers (dispatch through the vtables).
ember_status ember_buffer_type_alloc(ember_buffer_type * buft, size_t size, ember_buffer ** out);
size_t       ember_buffer_type_alignment(ember_buffer_type * buft);
size_t       ember_buffer_type_alloc_size(ember_buffer_type * buft, const ember_tensor * t);
EMBER_BACKEND_API bool ember_buffer_type_is_host(ember_buffer_type * buft);
void         ember_buffer_free(ember_buffer * buf);  // NULL is a no-op
void *       ember_buffer_base(ember_buffer * buf);
// Places tensor t at `offset` of buf (sets t->buffer and t->data).
void         ember_buffer_place_tensor(ember_buffer * buf, ember_tensor * t, size_t offset);
// Copies between host memory and a tensor in any buffer.
void         ember_tensor_set(ember_tensor * t, const void * data, size_t offset, size_t size);
void         ember_tensor_get(const ember_tensor * t, void * data, size_t offset, size_t size);

// A buffer over memory the caller owns and keeps alive (e.g. an mmap'd file): host only.
ember_buffer * ember_buffer_from_host_ptr(void * ptr, size_t size);

//
// Devices
//
enum ember_device_type : int32_t {
    EMBER_DEVICE_TYPE_CPU  = 0,
    EMBER_DEVICE_TYPE_GPU  = 1,  // discrete or integrated GPU with its own buffers
    EMBER_DEVICE_TYPE_ACCEL = 2,
};

struct ember_device_caps {
    uint8_t async;        // graph_compute returns before the work is done
    uint8_t host_buffer;  // has a pinned host buffer type for staging
    uint8_t events;       // event_record / event_wait
    uint8_t mmap;         // can use a host pointer (mmap'd file) as a weight buffer directly
    uint8_t fp16;
    uint8_t int8_dot;
    uint8_t fp8;
    uint8_t reserved;
    int32_t subgroup_size;  // 0 when not applicable
};

struct ember_device_props {
    const char *      name;
    const char *      description;
    size_t            memory_free;
    size_t            memory_total;
    ember_device_type type;
    ember_device_caps caps;
};

struct ember_stream_params {
    int32_t n_threads;  // CPU worker threads (CPU backend); 0 = all cores
};

struct ember_device_i {
    const char *        (*get_name)(ember_device * dev);
    const char *        (*get_description)(ember_device * dev);
    void                (*get_props)(ember_device * dev, ember_device_props * props);
    ember_buffer_type * (*get_buffer_type)(ember_device * dev);
    ember_buffer_type * (*get_host_buffer_type)(ember_device * dev);  // (optional) pinned staging memory
    ember_status        (*init_stream)(ember_device * dev, const ember_stream_params * params, ember_stream ** out);
    bool                (*supports_op)(ember_device * dev, const ember_tensor * op);
    bool                (*supports_buft)(ember_device * dev, ember_buffer_type * buft);
    bool                (*offload_op)(ember_device * dev, const ember_tensor * op);  // (optional) worth moving weights here
};

struct ember_device {
    ember_device_i      iface;
    ember_backend_reg * reg;
    void *              context;
};

//
// Streams (an execution queue on one device, with its own scratch memory)
//
struct ember_event;

struct ember_stream_i {
    const char * (*get_name)(ember_stream * s);
    void         (*free_stream)(ember_stream * s);
    // Runs the nodes of g in order. Every node's tensors are allocated in buffers this
    // device supports. May return before completion when the device is async.
    ember_status (*graph_compute)(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end);
    void         (*synchronize)(ember_stream * s);
    void         (*set_n_threads)(ember_stream * s, int32_t n_threads);  // (optional)
    // (optional) host callback polled between nodes; nonzero aborts with EMBER_ERR_CANCELLED
    void         (*set_abort_callback)(ember_stream * s, ember_abort_callback cb, void * user_data);
    void         (*event_record)(ember_stream * s, ember_event * e);  // (optional)
    void         (*event_wait)(ember_stream * s, ember_event * e);    // (optional)
    // (optional) Queues a copy of `size` bytes of host memory into t (a tensor in this device's
    // compute memory, at `offset`) behind the work queued so far, so a graph's inputs need no
    // round trip each: `data` may be reused as soon as it returns, and the bytes are in place
    // for the next graph_compute. false: nothing was queued (the caller copies with
    // ember_tensor_set instead).
    bool         (*set_tensor_async)(ember_stream * s, ember_tensor * t, const void * data, size_t offset, size_t size);
    // (optional, all three or none) Work left running, for a decode step the host does not wait
    // for (the next step's host work then overlaps this one's kernels):
    // graph_launch: graph_compute that may return once the work is queued (it waits when it
    //     cannot queue, e.g. while a graph is recorded); everything later on this stream
    //     (graph_compute, set_tensor_async, read_async) is ordered behind it.
    // wait: waits for all queued work and returns the first error any of it met (EMBER_OK
    //     when there was none or nothing was queued).
    // read_async: queues a copy of `size` bytes of t (this device's compute memory) at
    //     `offset` behind the queued work into host memory the stream owns, and returns where
    //     the bytes are once wait() returned EMBER_OK (valid until the next read_async or the
    //     stream's end); NULL when nothing was queued (wait, then ember_tensor_get).
    ember_status (*graph_launch)(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end);
    ember_status (*wait)(ember_stream * s);
    const void * (*read_async)(ember_stream * s, const ember_tensor * t, size_t offset, size_t size);
};

struct ember_stream {
    ember_stream_i iface;
    ember_device * device;
    void *         context;
};

//
// Registry
//
struct ember_backend_reg_i {
    const char *   (*get_name)(ember_backend_reg * reg);
    size_t         (*get_device_count)(ember_backend_reg * reg);
    ember_device * (*get_device)(ember_backend_reg * reg, size_t index);
    void *         (*get_proc_address)(ember_backend_reg * reg, const char * name);  // (optional)
};

struct ember_backend_reg {
    int32_t             api_version;  // EMBER_BACKEND_API_VERSION
    uint32_t            struct_size;  // sizeof(ember_backend_reg)
    ember_backend_reg_i iface;
    void *              context;
};

// All registered devices, CPU last. Registers the built-in backends on first use
// (thread-safe). A backend whose api_version differs is refused with a warning.
size_t         ember_registry_device_count();
ember_device * ember_registry_device(size_t index);
ember_device * ember_registry_cpu_device();
// Adds a backend (tests register fake ones). Returns false if refused.
bool           ember_registry_add(ember_backend_reg * reg);
// Device by name ("cpu", "cuda:0"); "cuda" matches the first cuda device. nullptr if none.
ember_device * ember_registry_find_device(const char * name);

// Convenience dispatch.
const char *        ember_device_get_name(ember_device * dev);
ember_buffer_type * ember_device_buffer_type(ember_device * dev);
bool                ember_device_supports_op(ember_device * dev, const ember_tensor * op);
bool                ember_device_supports_buft(ember_device * dev, ember_buffer_type * buft);
ember_status        ember_device_init_stream(ember_device * dev, const ember_stream_params * p, ember_stream ** out);
void                ember_stream_free(ember_stream * s);  // NULL is a no-op

// The CPU backend's registry entry (backends/cpu_simd).
ember_backend_reg * ember_cpu_backend_reg();

// The CUDA backend's registry entry as this library gets it (builds with EMBER_CUDA only):
// linked in (the static library: backends/cuda/cuda-reg-static.cpp) or loaded at run time from
// libember-cuda.so (the shared library: backends/common/registry-cuda-module.cpp). nullptr
// when the module is absent or cannot load.
ember_backend_reg * ember_registry_cuda();

// Proc "ember_cpu_repack" of the CPU registry entry: weights the CPU backend keeps in its own
// layout (backends/cpu_simd/repack.h). With src == dst == nullptr: whether a contiguous weight
// of this type and shape would be repacked. Otherwise writes the repacked bytes of src
// (the whole tensor) to dst, which may be src itself; the caller then sets
// EMBER_TENSOR_FLAG_CPU_REPACKED on the tensor.
typedef bool (*ember_cpu_repack_proc)(ember_type type, const int64_t ne[4], const void * src, void * dst);

#endif  // EMBER_BACKENDS_BACKEND_H
