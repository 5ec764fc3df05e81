// Safetensors reader (Hugging Face's weight format): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {}},
// then the data, with offsets relative to its start.
//
// Opening validates the whole header before anything uses it: the length against the file
// size, the JSON, every dtype (a name the format does not define is an error; a defined one
// that Ember cannot convert is kept, and ember_safetensors_type() says so), shapes (no
// negative dims, no overflow), the byte size of each tensor against its shape and dtype, and
// the offsets (inside the data, not overlapping). Every failure throws ember_error
// (EMBER_ERR_BAD_FORMAT naming the file and tensor; EMBER_ERR_IO for a missing or unreadable
// file). The file is memory-mapped (runtime/mmap.h); nothing reads out of bounds.
#ifndef EMBER_RUNTIME_SAFETENSORS_H
#define EMBER_RUNTIME_SAFETENSORS_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "quant/types.h"
#include "runtime/mmap.h"

struct ember_st_tensor {
    std::string          name;
    std::string          dtype;   // as in the file: "F32", "BF16", "I64", ...
    std::vector<int64_t> shape;   // safetensors order: outermost first, last dim contiguous
    uint64_t             offset = 0;  // from the start of the file
    uint64_t             nbytes = 0;

    int64_t n_elements() const;
};

struct ember_st_file {
    std::string                                      path;  // for messages
    std::shared_ptr<ember_mapped_file>               map;
    std::vector<ember_st_tensor>                     tensors;   // in header order
    std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__" (string values)

    const ember_st_tensor * find(const std::string & name) const;  // nullptr when absent
    const uint8_t *         data(const ember_st_tensor & t) const { return map->data() + t.offset; }
};

// The Ember type of a safetensors dtype: F32, F16 or BF16; false for every other dtype.
bool ember_safetensors_type(const std::string & dtype, ember_type & out);

// Opens, maps and validates a .safetensors file.
std::unique_ptr<ember_st_file> ember_safetensors_open(const std::string & path);
// Validates an image already in memory (`what` names it in messages).
std::unique_ptr<ember_st_file> ember_safetensors_from_mapping(std::shared_ptr<ember_mapped_file> map, const std::string & what);

#endif  // EMBER_RUNTIME_SAFETENSORS_H
