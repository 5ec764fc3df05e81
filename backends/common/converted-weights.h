// Weights a backend keeps in a layout of its own (made at upload, the tensor keeping its type
// and size): the CUDA layout (backends/cuda/cuda-repack.h) and the Vulkan one
// (backends/vulkan/vk-repack.h). Both backends' set_tensor / get_tensor go through these two
// functions, so the rules are one:
//   - a whole-tensor write of a weight the backend wants converted is converted and flagged;
//   - a partial write into a converted tensor goes through its file bytes (read, unconvert,
//     patch, convert, write: rare, loaders write whole tensors);
//   - a read of a converted tensor gives the file bytes;
//   - no host memory for the conversion: a tensor not yet converted stays in the file layout
//     (read by the backend's other kernels), a converted one is left as it was, with a message.
// Header-only: the CUDA module is a shared library of its own.
#ifndef EMBER_CONVERTED_WEIGHTS_H
#define EMBER_CONVERTED_WEIGHTS_H

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "tensor.h"

struct ember_converted_layout {
    uint32_t flag;     // the backend's EMBER_TENSOR_FLAG_*_REPACKED
    bool (*wanted)(const ember_tensor * t);  // whether a whole upload of t is converted
    // rows rows of k weights of type t: file bytes -> the layout (pack) and back (src, dst distinct)
    void (*pack)(ember_type t, int64_t rows, int64_t k, const void * src, void * dst);
    void (*unpack)(ember_type t, int64_t rows, int64_t k, const void * src, void * dst);
};

// set_tensor's part. read(dst, n) / write(src, n) move the owner tensor's n bytes (all of them)
// between the device and the host; `who` names the device in messages. Returns false when the
// caller is to write the bytes as they are (not a converted weight, or no host memory to
// convert one).
template <typename Read, typename Write>
bool ember_converted_set(const ember_converted_layout & L, const char * who, ember_tensor * t, const void * data, size_t offset, size_t size, Read && read,
                         Write && write) {
    ember_tensor * owner = ember_memory_owner(t);
    const size_t   n     = ember_nbytes(owner);
    const size_t at    = static_cast<size_t>(static_cast<const char *>(t->data) - static_cast<const char *>(owner->data)) + offset;
    const bool   whole = owner == t && offset == 0 && size == n;
    const bool   done  = (owner->flags & L.flag) != 0;
    if (!done && !(whole && L.wanted(t))) return false;
    std::unique_ptr<uint8_t[]> tmp(new (std::nothrow) uint8_t[n]);
    std::unique_ptr<uint8_t[]> raw(whole ? nullptr : new (std::nothrow) uint8_t[n]);
    if (!tmp || (!whole && !raw)) {
        if (!done) return false;
        std::fprintf(stderr, "ember: %s: no host memory to update the converted weight '%s'\n", who, owner->name);
        return true;
    }
    const void * src = data;
    if (!whole) {  // the current file bytes, patched
        read(tmp.get(), n);
        L.unpack(owner->type, ember_nrows(owner), owner->ne[0], tmp.get(), raw.get());
        std::memcpy(raw.get() + at, data, size);
        src = raw.get();
    }
    L.pack(owner->type, ember_nrows(owner), owner->ne[0], src, tmp.get());
    write(tmp.get(), n);
    owner->flags |= L.flag;
    return true;
}

// get_tensor's part: false when t's memory is not a converted weight (the caller reads the
// bytes as they are); else data holds the file bytes (zeros, with a message, without host memory).
template <typename Read>
bool ember_converted_get(const ember_converted_layout & L, const char * who, const ember_tensor * t, void * data, size_t offset, size_t size, Read && read) {
    const ember_tensor * owner = ember_memory_owner(t);
    if (!(owner->flags & L.flag)) return false;
    const size_t               n = ember_nbytes(owner);
    std::unique_ptr<uint8_t[]> tmp(new (std::nothrow) uint8_t[n]);
    std::unique_ptr<uint8_t[]> raw(new (std::nothrow) uint8_t[n]);
    if (!tmp || !raw) {
        std::fprintf(stderr, "ember: %s: no host memory to read the converted weight '%s'\n", who, owner->name);
        std::memset(data, 0, size);
        return true;
    }
    read(tmp.get(), n);
    L.unpack(owner->type, ember_nrows(owner), owner->ne[0], tmp.get(), raw.get());
    std::memcpy(data, raw.get() + (static_cast<const char *>(t->data) - static_cast<const char *>(owner->data)) + offset, size);
    return true;
}

#endif  // EMBER_CONVERTED_WEIGHTS_H
