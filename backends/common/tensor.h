// Tensor descriptors: the one data structure every layer and backend shares.
//
// Dimension order is written down here, once: ne[0] is the innermost, contiguous dimension,
// the reverse of PyTorch/numpy. A weight matrix of numpy shape (out, in) has ne = {in, out};
// activations are [n_embd, n_tokens]. nb[i] is the stride of dimension i in bytes; for a
// quantized type nb[0] is the block size in bytes and rows are contiguous blocks. Types with
// row groups (NF4, FP8_*_ROW) also put group headers in each row: a row is always
// ember_row_size(type, ne[0]) bytes, converted by one codec call, and views keep rows whole.
#ifndef EMBER_BACKENDS_TENSOR_H
#define EMBER_BACKENDS_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/types.h"

enum ember_op : int32_t {
#define X(NAME, NSRC) EMBER_OP_##NAME,
#include "ops.def"
#undef X
    EMBER_OP_COUNT
};

constexpr int EMBER_MAX_DIMS      = 4;
constexpr int EMBER_MAX_SRC       = 4;
constexpr int EMBER_MAX_OP_PARAMS = 8;   // int32 slots
constexpr int EMBER_MAX_NAME      = 64;

enum ember_tensor_flag : uint32_t {
    EMBER_TENSOR_FLAG_INPUT  = 1u << 0,  // filled by the host before compute
    EMBER_TENSOR_FLAG_OUTPUT = 1u << 1,  // read by the host after compute: never reused
    EMBER_TENSOR_FLAG_WEIGHT = 1u << 2,  // model parameter, lives in a weight buffer
    EMBER_TENSOR_FLAG_PLANNED = 1u << 3, // memory assigned by the graph planner (re-planned at will)
    EMBER_TENSOR_FLAG_CPU_REPACKED = 1u << 4,  // weight bytes in the CPU backend's R16 layout
                                               // (backends/cpu_simd/repack.h): CPU MUL_MAT only
    EMBER_TENSOR_FLAG_CUDA_REPACKED = 1u << 5,  // weight bytes in the CUDA layout (backends/cuda/cuda-repack.h)
    EMBER_TENSOR_FLAG_VK_REPACKED = 1u << 6,  // weight bytes in the Vulkan layout (backends/vulkan/vk-repack.h)
};

struct ember_buffer;

struct ember_tensor {
    ember_type     type;
    int64_t        ne[EMBER_MAX_DIMS];             // elements per dimension
    size_t         nb[EMBER_MAX_DIMS];             // bytes between consecutive indices
    ember_op       op;
    int32_t        op_params[EMBER_MAX_OP_PARAMS];
    uint32_t       flags;
    ember_tensor * src[EMBER_MAX_SRC];
    ember_tensor * view_src;                       // tensor whose memory this one aliases
    size_t         view_offs;                      // byte offset into view_src
    ember_buffer * buffer;                         // where data lives (nullptr until allocated)
    void *         data;                           // host address, or device address for device buffers
    char           name[EMBER_MAX_NAME];
};

// EMBER_BACKEND_API: exported from libember for backend modules loaded at run time
// (libember-cuda.so); C++ symbols, versioned with EMBER_BACKEND_API_VERSION (backend.h).
#if defined(__GNUC__) || defined(__clang__)
#    define EMBER_BACKEND_API __attribute__((visibility("default")))
#else
#    define EMBER_BACKEND_API
#endif

EMBER_BACKEND_API const char * ember_op_name(ember_op op);
EMBER_BACKEND_API int          ember_op_n_src(ember_op op);

inline int64_t ember_nelements(const ember_tensor * t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
inline int64_t ember_nrows(const ember_tensor * t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
// The tensor whose memory t uses: t itself, or the end of its chain of views (the one the
// allocator places, the backends flag and the scheduler copies).
inline ember_tensor * ember_memory_owner(ember_tensor * t) {
    while (t->view_src) t = t->view_src;
    return t;
}
inline const ember_tensor * ember_memory_owner(const ember_tensor * t) {
    while (t->view_src) t = t->view_src;
    return t;
}
// Bytes spanned by the tensor (for a contiguous tensor: its size).
EMBER_BACKEND_API size_t ember_nbytes(const ember_tensor * t);
EMBER_BACKEND_API bool   ember_is_contiguous(const ember_tensor * t);
// Sets nb[] for a contiguous tensor of t->type and t->ne.
void   ember_set_contiguous_strides(ember_tensor * t);

// A process-wide count of the changes to tensor descriptors that a backend's recorded work
// depends on (graph-signature.h's fields): new descriptors, graphs built or cleared, tensors
// placed in buffers, views given their owner's address, the scheduler's copies. Bumped by the
// functions that make those changes; code that writes a descriptor's fields directly after it
// was computed must call ember_tensor_epoch_bump() too. While it is unchanged, nothing a graph's
// signature covers can have changed, so a backend may skip recomputing it (the Vulkan
// backend's decode step: 26 us for a 1B token on an H200, 48 us for an 8B one).
EMBER_BACKEND_API uint64_t ember_tensor_epoch();
EMBER_BACKEND_API void     ember_tensor_epoch_bump();
void   ember_set_name(ember_tensor * t, const char * fmt, ...);

inline void ember_set_op_param_f32(ember_tensor * t, int i, float v) { std::memcpy(&t->op_params[i], &v, sizeof(v)); }
inline float ember_get_op_param_f32(const ember_tensor * t, int i) {
    float v;
    std::memcpy(&v, &t->op_params[i], sizeof(v));
    return v;
}

#endif  // EMBER_BACKENDS_TENSOR_H
