// The atomic output file of the streaming quantizer (see quantize-writer.h); the header it
// writes first comes from ember_gguf_header_bytes (runtime/gguf-writer.cpp), laid out from the
// tensor sizes alone.
#include "runtime/quantize-writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"

namespace {

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

//
// Atomic file
//

ember_atomic_file::ember_atomic_file(const std::string & path) : path_(path) {
    // PID plus a process-wide counter names it uniquely; O_EXCL guards against a stale file of
    // the same name, and open() with 0666 honours the umask as a plain create would.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100 && fd_ < 0; attempt++) {
        temp_ = path_ + ".tmp-" + std::to_string(static_cast<long>(::getpid())) + "-" + std::to_string(counter++);
        fd_   = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ < 0 && errno != EEXIST) {
            ember_throw(EMBER_ERR_IO, "%s: cannot create: %s", temp_.c_str(), std::strerror(errno));
        }
    }
    if (fd_ < 0) ember_throw(EMBER_ERR_IO, "%s: cannot create a temporary file next to it", path_.c_str());
}

ember_atomic_file::~ember_atomic_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
}

void ember_atomic_file::write(const void * data, size_t n) {
    const uint8_t * p = static_cast<const uint8_t *>(data);
    while (n > 0) {
        const ssize_t k = ::write(fd_, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) ember_throw(EMBER_ERR_IO, "%s: write failed: %s", temp_.c_str(), std::strerror(k < 0 ? errno : EIO));
        p += k;
        n -= static_cast<size_t>(k);
        written_ += static_cast<uint64_t>(k);
    }
}

void ember_atomic_file::pad_to(uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    uint64_t             n         = pad(written_, alignment) - written_;
    while (n > 0) {
        const size_t k = static_cast<size_t>(n < sizeof(zeros) ? n : sizeof(zeros));
        write(zeros, k);
        n -= k;
    }
}

void ember_atomic_file::commit() {
    if (::fsync(fd_) != 0) ember_throw(EMBER_ERR_IO, "%s: fsync failed: %s", temp_.c_str(), std::strerror(errno));
    const int fd = fd_;
    fd_          = -1;
    if (::close(fd) != 0) ember_throw(EMBER_ERR_IO, "%s: close failed: %s", temp_.c_str(), std::strerror(errno));
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
        ember_throw(EMBER_ERR_IO, "%s: cannot rename to %s: %s", temp_.c_str(), path_.c_str(), std::strerror(errno));
    }
    temp_.clear();
    // The rename is durable only once the directory is synced too.
    const size_t      slash = path_.find_last_of('/');
    const std::string dir   = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    const int         dfd   = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);  // best effort: some file systems refuse fsync on a directory
        ::close(dfd);
    }
}
