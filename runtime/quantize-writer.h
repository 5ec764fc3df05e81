// Streaming GGUF output for the quantizer: the header (metadata and tensor infos) is written
// first, then the tensors one after the other, so a model is never held in memory whole. The
// file is written under a temporary name next to its final path and renamed when complete.
#ifndef EMBER_RUNTIME_QUANTIZE_WRITER_H
#define EMBER_RUNTIME_QUANTIZE_WRITER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf.h"

// The header itself: ember_gguf_header_bytes (runtime/gguf.h).

// A file that appears under its name only when complete: bytes go to PATH.tmp-PID-N in the
// same directory; commit() syncs it and renames it over PATH; destruction without commit()
// removes it. Throws ember_error(EMBER_ERR_IO) naming the path on every failure.
class ember_atomic_file {
  public:
    explicit ember_atomic_file(const std::string & path);
    ~ember_atomic_file();
    ember_atomic_file(const ember_atomic_file &)             = delete;
    ember_atomic_file & operator=(const ember_atomic_file &) = delete;

    void     write(const void * data, size_t n);
    void     pad_to(uint64_t alignment);  // zeros up to the next multiple of alignment
    void     commit();
    uint64_t size() const { return written_; }
    const std::string & temp_path() const { return temp_; }

  private:
    std::string path_, temp_;
    int         fd_      = -1;
    uint64_t    written_ = 0;
};

#endif  // EMBER_RUNTIME_QUANTIZE_WRITER_H
