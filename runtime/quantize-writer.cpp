// Streaming GGUF writer and atomic output file (see quantize-writer.h). The in-memory writer
// of runtime/gguf-writer.cpp needs every tensor's bytes before it writes; this one lays the
// header out from the tensor sizes alone.
#include "runtime/quantize-writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"

namespace {

constexpr uint64_t k_scalar_size[EMBER_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static_assert(EMBER_GGUF_TYPE_COUNT == 13, "update the GGUF type tables");
constexpr int    k_max_depth    = 8;
constexpr size_t k_max_name_len = 63;

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

struct sink {
    std::vector<uint8_t> & out;
    void put(const void * p, size_t n) {
        const uint8_t * b = static_cast<const uint8_t *>(p);
        out.insert(out.end(), b, b + n);
    }
    template <typename T> void put(T v) { put(&v, sizeof(T)); }
    void put_str(const std::string & s) {
        put<uint64_t>(s.size());
        put(s.data(), s.size());
    }
};

void put_array(sink & s, const std::string & key, const ember_gguf_value & v, int depth);

void put_value(sink & s, const std::string & key, const ember_gguf_value & v, int depth) {
    s.put<uint32_t>(v.type);
    switch (v.type) {
        case EMBER_GGUF_UINT8:   s.put(static_cast<uint8_t>(v.num.u64)); break;
        case EMBER_GGUF_INT8:    s.put(static_cast<int8_t>(v.num.i64)); break;
        case EMBER_GGUF_UINT16:  s.put(static_cast<uint16_t>(v.num.u64)); break;
        case EMBER_GGUF_INT16:   s.put(static_cast<int16_t>(v.num.i64)); break;
        case EMBER_GGUF_UINT32:  s.put(static_cast<uint32_t>(v.num.u64)); break;
        case EMBER_GGUF_INT32:   s.put(static_cast<int32_t>(v.num.i64)); break;
        case EMBER_GGUF_UINT64:  s.put(v.num.u64); break;
        case EMBER_GGUF_INT64:   s.put(v.num.i64); break;
        case EMBER_GGUF_FLOAT32: s.put(static_cast<float>(v.num.f64)); break;
        case EMBER_GGUF_FLOAT64: s.put(v.num.f64); break;
        case EMBER_GGUF_BOOL:    s.put(static_cast<uint8_t>(v.num.u64 != 0)); break;
        case EMBER_GGUF_STRING:  s.put_str(v.str); break;
        case EMBER_GGUF_ARRAY:   put_array(s, key, v, depth + 1); break;
        default: ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: key '%s' has an invalid value type %u", key.c_str(), unsigned(v.type));
    }
}

// Array body: element type, count, elements. The count must match what the value holds.
void put_array(sink & s, const std::string & key, const ember_gguf_value & v, int depth) {
    if (depth > k_max_depth) ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: key '%s': arrays nested too deep", key.c_str());
    if (static_cast<uint32_t>(v.arr_type) >= EMBER_GGUF_TYPE_COUNT) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: key '%s': invalid array element type", key.c_str());
    }
    size_t held;
    if (v.arr_type == EMBER_GGUF_STRING) {
        held = v.arr_str.size();
    } else if (v.arr_type == EMBER_GGUF_ARRAY) {
        held = v.arr_arr.size();
    } else {
        const uint64_t es = k_scalar_size[v.arr_type];
        held              = v.arr_data.size() % es == 0 ? v.arr_data.size() / es : SIZE_MAX;
    }
    if (held != v.arr_n) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: key '%s': array of %" PRIu64 " elements holds %zu", key.c_str(), v.arr_n, held);
    }
    s.put<uint32_t>(v.arr_type);
    s.put<uint64_t>(v.arr_n);
    if (v.arr_type == EMBER_GGUF_STRING) {
        for (const std::string & e : v.arr_str) s.put_str(e);
    } else if (v.arr_type == EMBER_GGUF_ARRAY) {
        for (const ember_gguf_value & e : v.arr_arr) {
            if (e.type != EMBER_GGUF_ARRAY) ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: key '%s': bad nested array", key.c_str());
            put_array(s, key, e, depth + 1);
        }
    } else {
        s.put(v.arr_data.data(), v.arr_data.size());
    }
}

}  // namespace

std::vector<uint8_t> ember_gguf_header_bytes(const std::vector<ember_gguf_kv> & kv, std::vector<ember_gguf_tensor_info> & tensors,
                                             uint64_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: alignment %" PRIu64 " is not a power of two", alignment);
    }
    std::vector<uint8_t> out;
    sink                 s{out};
    s.put("GGUF", 4);
    s.put<uint32_t>(3);
    s.put<uint64_t>(tensors.size());
    s.put<uint64_t>(kv.size());
    for (const ember_gguf_kv & e : kv) {
        if (e.key.empty()) ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: empty metadata key");
        s.put_str(e.key);
        put_value(s, e.key, e.value, 0);
    }
    uint64_t offset = 0;
    for (ember_gguf_tensor_info & t : tensors) {
        if (t.name.empty() || t.name.size() > k_max_name_len) {
            ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: tensor name '%s' must be 1 to %zu bytes", t.name.c_str(), k_max_name_len);
        }
        if (t.n_dims < 1 || t.n_dims > 4) ember_throw(EMBER_ERR_INVALID_ARG, "gguf output: tensor '%s': n_dims %d", t.name.c_str(), t.n_dims);
        s.put_str(t.name);
        s.put<uint32_t>(static_cast<uint32_t>(t.n_dims));
        for (int d = 0; d < t.n_dims; d++) s.put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
        s.put<uint32_t>(static_cast<uint32_t>(t.type));
        s.put<uint64_t>(offset);
        t.offset = offset;
        offset   = pad(offset + t.nbytes, alignment);
    }
    out.resize(static_cast<size_t>(pad(out.size(), alignment)), 0);
    return out;
}

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
