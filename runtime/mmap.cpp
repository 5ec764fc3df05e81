#include "runtime/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "runtime/error.h"

// Read buffers are 64-byte aligned so that tensor data inside them is as aligned as in a
// mapping for every SIMD width we use (the GGUF alignment itself is usually 32).
static constexpr size_t k_buffer_align = 64;

static uint8_t * alloc_buffer(size_t size, const char * what) {
    // Never allocate zero bytes: data() of an empty image is still a valid pointer.
    void * p = ::operator new(size ? size : 1, std::align_val_t(k_buffer_align), std::nothrow);
    if (!p) ember_throw(EMBER_ERR_OOM, "%s: cannot allocate %zu bytes", what, size);
    return static_cast<uint8_t *>(p);
}

static void free_buffer(uint8_t * p) {
    ::operator delete(p, std::align_val_t(k_buffer_align));
}

namespace {
// Closes the descriptor on every path out of the constructor, including throws.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};
}  // namespace

static int open_regular(const std::string & path, struct stat & st) {
    int fd;
    do {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) ember_throw(EMBER_ERR_IO, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        ember_throw(EMBER_ERR_IO, "%s: cannot stat: %s", path.c_str(), std::strerror(err));
    }
    // A directory opens fine but cannot be read or mapped; a FIFO would block forever.
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        ember_throw(EMBER_ERR_IO, "%s: not a regular file", path.c_str());
    }
    return fd;
}

ember_mapped_file::ember_mapped_file(const std::string & path, bool use_mmap) {
    struct stat st;
    fd_guard    guard{open_regular(path, st)};
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > SIZE_MAX) {
        ember_throw(EMBER_ERR_IO, "%s: file too large for this address space", path.c_str());
    }
    size_ = static_cast<size_t>(st.st_size);

    // mmap of zero bytes fails with EINVAL, so an empty file always takes the read path.
    if (use_mmap && size_ > 0) {
        void * p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
        if (p != MAP_FAILED) {
            data_    = static_cast<uint8_t *>(p);
            mmapped_ = true;
            return;
        }
        // Some file systems cannot be mapped; reading still works there.
    }

    data_ = alloc_buffer(size_, path.c_str());
    size_t done = 0;
    while (done < size_) {
        ssize_t n = ::pread(guard.fd, data_ + done, size_ - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;
            free_buffer(data_);
            data_ = nullptr;
            if (err) ember_throw(EMBER_ERR_IO, "%s: read failed: %s", path.c_str(), std::strerror(err));
            ember_throw(EMBER_ERR_IO, "%s: file shrank while reading (%zu of %zu bytes)", path.c_str(), done, size_);
        }
        done += static_cast<size_t>(n);
    }
}

ember_mapped_file::ember_mapped_file(const uint8_t * data, size_t size) {
    data_ = alloc_buffer(size, "memory image");
    size_ = size;
    if (size > 0) std::memcpy(data_, data, size);
}

ember_mapped_file::~ember_mapped_file() {
    if (!data_) return;
    if (mmapped_) {
        ::munmap(data_, size_);
    } else {
        free_buffer(data_);
    }
}

uint64_t ember_mapped_file::file_size(const std::string & path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
        ember_throw(EMBER_ERR_IO, "%s: cannot stat: %s", path.c_str(), std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) ember_throw(EMBER_ERR_IO, "%s: not a regular file", path.c_str());
    return static_cast<uint64_t>(st.st_size);
}
