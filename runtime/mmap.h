// Read-only file mapping with a read-into-memory fallback.
#ifndef EMBER_RUNTIME_MMAP_H
#define EMBER_RUNTIME_MMAP_H

#include <cstddef>
#include <cstdint>
#include <string>

struct ember_mapped_file {
    // Opens `path`; maps it when use_mmap (falls back to reading if mapping fails), otherwise
    // reads it into an aligned heap buffer. Throws ember_error(EMBER_ERR_IO / EMBER_ERR_OOM).
    ember_mapped_file(const std::string & path, bool use_mmap);
    // Owns a copy of a memory image.
    ember_mapped_file(const uint8_t * data, size_t size);
    ~ember_mapped_file();
    ember_mapped_file(const ember_mapped_file &)             = delete;
    ember_mapped_file & operator=(const ember_mapped_file &) = delete;

    const uint8_t * data() const { return data_; }
    size_t          size() const { return size_; }
    bool            is_mmapped() const { return mmapped_; }

    // Size of a file without opening a mapping; throws EMBER_ERR_IO.
    static uint64_t file_size(const std::string & path);

  private:
    uint8_t * data_    = nullptr;
    size_t    size_    = 0;
    bool      mmapped_ = false;
};

#endif  // EMBER_RUNTIME_MMAP_H
