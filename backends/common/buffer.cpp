// Buffer helpers (dispatch through the buffer and buffer-type vtables) and the host-pointer
// buffer: memory the caller owns, such as an mmap'd model file.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#include "backend.h"

//
// Dispatch
//
ember_status ember_buffer_type_alloc(ember_buffer_type * buft, size_t size, ember_buffer ** out) {
    if (!buft || !out) return EMBER_ERR_INVALID_ARG;
    *out = nullptr;
    return buft->iface.alloc_buffer(buft, size, out);
}

size_t ember_buffer_type_alignment(ember_buffer_type * buft) {
    return buft->iface.alignment(buft);
}

size_t ember_buffer_type_alloc_size(ember_buffer_type * buft, const ember_tensor * t) {
    if (buft->iface.alloc_size) return buft->iface.alloc_size(buft, t);
    return ember_nbytes(t);
}

bool ember_buffer_type_is_host(ember_buffer_type * buft) {
    return buft->iface.is_host && buft->iface.is_host(buft);
}

void ember_buffer_free(ember_buffer * buf) {
    if (!buf) return;
    buf->iface.free_buffer(buf);
}

void * ember_buffer_base(ember_buffer * buf) {
    return buf->iface.get_base(buf);
}

void ember_buffer_place_tensor(ember_buffer * buf, ember_tensor * t, size_t offset) {
    const size_t size = ember_buffer_type_alloc_size(buf->buft, t);
    if (offset > buf->size || size > buf->size - offset) {
        char msg[256];
        std::snprintf(msg, sizeof(msg), "place_tensor: '%s' (%zu bytes) at offset %zu overflows a buffer of %zu bytes",
                      t->name, size, offset, buf->size);
        throw ember_graph_error(msg);
    }
    t->buffer = buf;
    t->data   = static_cast<char *>(ember_buffer_base(buf)) + offset;
    ember_tensor_epoch_bump();
}

static void check_range(const char * what, const ember_tensor * t, size_t offset, size_t size) {
    const size_t nbytes = ember_nbytes(t);
    if (!t->buffer || !t->data) {
        char msg[256];
        std::snprintf(msg, sizeof(msg), "%s: tensor '%s' is not allocated", what, t->name);
        throw ember_graph_error(msg);
    }
    if (offset > nbytes || size > nbytes - offset) {
        char msg[256];
        std::snprintf(msg, sizeof(msg), "%s: bytes [%zu, %zu) outside tensor '%s' of %zu bytes", what, offset,
                      offset + size, t->name, nbytes);
        throw ember_graph_error(msg);
    }
}

void ember_tensor_set(ember_tensor * t, const void * data, size_t offset, size_t size) {
    check_range("tensor_set", t, offset, size);
    if (size == 0) return;
    t->buffer->iface.set_tensor(t->buffer, t, data, offset, size);
}

void ember_tensor_get(const ember_tensor * t, void * data, size_t offset, size_t size) {
    check_range("tensor_get", t, offset, size);
    if (size == 0) return;
    t->buffer->iface.get_tensor(t->buffer, t, data, offset, size);
}

//
// Host-pointer buffers: the memory belongs to the caller; freeing the buffer frees only the
// descriptor. The buffer type belongs to the CPU device, so CPU streams accept it.
//
static void host_ptr_free_buffer(ember_buffer * buf) {
    delete buf;
}

static void * host_ptr_get_base(ember_buffer * buf) {
    return buf->context;
}

static void host_ptr_set_tensor(ember_buffer *, ember_tensor * t, const void * data, size_t offset, size_t size) {
    std::memcpy(static_cast<char *>(t->data) + offset, data, size);
}

static void host_ptr_get_tensor(ember_buffer *, const ember_tensor * t, void * data, size_t offset, size_t size) {
    std::memcpy(data, static_cast<const char *>(t->data) + offset, size);
}

static bool host_ptr_cpy_tensor(ember_buffer *, const ember_tensor * src, ember_tensor * dst) {
    if (!src->buffer || !ember_buffer_type_is_host(src->buffer->buft)) return false;
    if (ember_nbytes(src) != ember_nbytes(dst) || !ember_is_contiguous(src) || !ember_is_contiguous(dst)) return false;
    std::memcpy(dst->data, src->data, ember_nbytes(src));
    return true;
}

static void host_ptr_clear(ember_buffer * buf, uint8_t value) {
    std::memset(buf->context, value, buf->size);
}

static const char * host_ptr_buft_name(ember_buffer_type *) {
    return "cpu_host_ptr";
}

static ember_status host_ptr_buft_alloc(ember_buffer_type *, size_t, ember_buffer ** out) {
    *out = nullptr;  // wraps memory, never allocates
    return EMBER_ERR_UNSUPPORTED;
}

static size_t host_ptr_buft_alignment(ember_buffer_type *) {
    return 64;
}

static bool host_ptr_buft_is_host(ember_buffer_type *) {
    return true;
}

static ember_buffer_type * host_ptr_buffer_type() {
    static ember_buffer_type buft = {
        /* .iface   = */ {
            /* .name         = */ host_ptr_buft_name,
            /* .alloc_buffer = */ host_ptr_buft_alloc,
            /* .alignment    = */ host_ptr_buft_alignment,
            /* .max_size     = */ nullptr,
            /* .alloc_size   = */ nullptr,
            /* .is_host      = */ host_ptr_buft_is_host,
        },
        /* .device  = */ ember_registry_cpu_device(),
        /* .context = */ nullptr,
    };
    return &buft;
}

ember_buffer * ember_buffer_from_host_ptr(void * ptr, size_t size) {
    if (!ptr && size > 0) return nullptr;
    ember_buffer * buf = new (std::nothrow) ember_buffer;
    if (!buf) return nullptr;
    buf->iface = {
        /* .free_buffer = */ host_ptr_free_buffer,
        /* .get_base    = */ host_ptr_get_base,
        /* .set_tensor  = */ host_ptr_set_tensor,
        /* .get_tensor  = */ host_ptr_get_tensor,
        /* .cpy_tensor  = */ host_ptr_cpy_tensor,
        /* .clear       = */ host_ptr_clear,
    };
    buf->buft    = host_ptr_buffer_type();
    buf->context = ptr;
    buf->size    = size;
    buf->usage   = EMBER_BUFFER_USAGE_WEIGHTS;
    return buf;
}
