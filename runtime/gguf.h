// GGUF reader and writer (versions 2 and 3), self-contained.
//
// The reader validates the whole header before anything uses it: magic, version, counts
// against the file size, string and array lengths, nesting depth, value and tensor types,
// tensor dims (n_dims 1..4, each ne >= 0, no overflow of element counts or byte sizes), offsets
// aligned and inside the file, no overlapping tensors, no duplicate keys or tensor names.
// Every failure throws ember_error(EMBER_ERR_BAD_FORMAT, message naming the key/tensor);
// a tensor type that ggml defines but this build has no traits for throws
// EMBER_ERR_UNSUPPORTED (naming the tensor and type); a missing or unreadable file throws
// EMBER_ERR_IO. It never reads out of bounds.
#ifndef EMBER_RUNTIME_GGUF_H
#define EMBER_RUNTIME_GGUF_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "quant/types.h"
#include "runtime/mmap.h"

enum ember_gguf_type : uint32_t {
    EMBER_GGUF_UINT8   = 0,
    EMBER_GGUF_INT8    = 1,
    EMBER_GGUF_UINT16  = 2,
    EMBER_GGUF_INT16   = 3,
    EMBER_GGUF_UINT32  = 4,
    EMBER_GGUF_INT32   = 5,
    EMBER_GGUF_FLOAT32 = 6,
    EMBER_GGUF_BOOL    = 7,
    EMBER_GGUF_STRING  = 8,
    EMBER_GGUF_ARRAY   = 9,
    EMBER_GGUF_UINT64  = 10,
    EMBER_GGUF_INT64   = 11,
    EMBER_GGUF_FLOAT64 = 12,
    EMBER_GGUF_TYPE_COUNT
};

const char * ember_gguf_type_name(ember_gguf_type t);

// A metadata value. Scalars live in the union; strings in `str`; arrays keep their element
// type in `arr_type` and their elements in `arr_data` (raw little-endian scalars, n elements),
// `arr_str` (strings) or `arr_arr` (nested arrays), according to arr_type.
struct ember_gguf_value {
    ember_gguf_type type = EMBER_GGUF_UINT8;
    union {
        uint64_t u64;
        int64_t  i64;
        double   f64;
    } num = {0};
    std::string                   str;
    ember_gguf_type               arr_type = EMBER_GGUF_UINT8;
    uint64_t                      arr_n    = 0;
    std::vector<uint8_t>          arr_data;
    std::vector<std::string>      arr_str;
    std::vector<ember_gguf_value> arr_arr;

    bool is_integer() const;  // any of the integer types or bool
    bool is_number() const;   // integer or float
    // Converting getters; throw EMBER_ERR_BAD_FORMAT when the type does not fit or the value
    // is out of range for the target. `what` names the key in the message.
    int64_t     as_i64(const char * what) const;
    uint64_t    as_u64(const char * what) const;
    double      as_f64(const char * what) const;
    bool        as_bool(const char * what) const;
    // Human-readable text (numbers in decimal, arrays "[a, b, ...]" cut after max_elems).
    std::string to_string(size_t max_elems = 16) const;
};

struct ember_gguf_kv {
    std::string      key;
    ember_gguf_value value;
};

struct ember_gguf_tensor_info {
    std::string name;
    int32_t     n_dims = 0;
    int64_t     ne[4]  = {1, 1, 1, 1};
    ember_type  type   = EMBER_TYPE_F32;
    uint64_t    offset = 0;  // from the start of the data section
    uint64_t    nbytes = 0;
};

struct ember_gguf_open_params {
    bool use_mmap     = true;   // map the file; false: read it into memory
    bool no_data      = false;  // parse and validate only the header (vocab-only loads)
};

struct ember_gguf_file {
    uint32_t                            version     = 3;
    uint64_t                            alignment   = 32;
    uint64_t                            data_offset = 0;  // file offset of the data section
    uint64_t                            file_size   = 0;
    std::vector<ember_gguf_kv>          kv;
    std::vector<ember_gguf_tensor_info> tensors;

    // Lookups (nullptr / -1 when absent).
    const ember_gguf_value *       find(const std::string & key) const;
    int64_t                        find_tensor(const std::string & name) const;
    const ember_gguf_tensor_info * tensor(const std::string & name) const;

    // Typed getters with defaults; throw EMBER_ERR_BAD_FORMAT naming the key on a type mismatch.
    uint32_t    get_u32(const std::string & key, uint32_t def) const;
    float       get_f32(const std::string & key, float def) const;
    bool        get_bool(const std::string & key, bool def) const;
    std::string get_str(const std::string & key, const std::string & def) const;
    // Required variants throw EMBER_ERR_BAD_FORMAT "missing key ..." when absent.
    uint32_t    require_u32(const std::string & key) const;

    // Host address of a tensor's data (mapped or read), nullptr when opened with no_data.
    const uint8_t * tensor_data(const ember_gguf_tensor_info & t) const;
    // The mapping (or read buffer) of the whole file, nullptr with no_data.
    const uint8_t * file_data() const;
    bool            is_mmapped() const;

    std::unordered_map<std::string, size_t> kv_index;
    std::unordered_map<std::string, size_t> tensor_index;
    std::unique_ptr<ember_mapped_file>      mapping;  // the mmap, or the read buffer
};

// Opens and validates a GGUF file. Throws ember_error (EMBER_ERR_IO / EMBER_ERR_BAD_FORMAT).
std::unique_ptr<ember_gguf_file> ember_gguf_open(const std::string & path, const ember_gguf_open_params & params = {});
// Parses and validates a GGUF image held in memory (the bytes are copied).
std::unique_ptr<ember_gguf_file> ember_gguf_parse(const uint8_t * data, size_t size);

// Every file holding a tensor of an Ember type (id >= EMBER_TYPE_EMBER_FIRST) carries this
// key with this text, so that a person inspecting it with another tool learns why it fails.
extern const char * const ember_gguf_custom_types_key;   // "ember.quantization.custom_types"
extern const char * const ember_gguf_custom_types_text;

// Metadata values, for ember_gguf_kv lists (the writer's set_* use them too).
ember_gguf_value ember_gguf_uint(ember_gguf_type type, uint64_t v);  // UINT8 .. UINT64, BOOL
ember_gguf_value ember_gguf_int(ember_gguf_type type, int64_t v);    // INT8 .. INT64
ember_gguf_value ember_gguf_float(ember_gguf_type type, double v);   // FLOAT32, FLOAT64
ember_gguf_value ember_gguf_string(const std::string & v);
ember_gguf_value ember_gguf_strings(const std::vector<std::string> & v);

// The header of a GGUF file: magic, version (2 or 3), `kv` written as given (general.alignment
// too, when present), and `tensors` (name, n_dims, ne, type, nbytes), padded to `alignment`.
// Sets each tensor's offset. Throws ember_error(EMBER_ERR_INVALID_ARG) for what a GGUF reader
// would reject. The writer below and the streaming quantizer (quantize-writer.h) both use it.
std::vector<uint8_t> ember_gguf_header_bytes(uint32_t version, const std::vector<ember_gguf_kv> & kv,
                                             std::vector<ember_gguf_tensor_info> & tensors, uint64_t alignment);

// Writer: collect metadata and tensors, then write a complete file.
struct ember_gguf_writer {
    uint32_t version   = 3;
    uint64_t alignment = 32;  // also written as general.alignment when not 32; setting the
                              // key general.alignment (or copying it) sets this field instead

    void set_u8(const std::string & key, uint8_t v);
    void set_i8(const std::string & key, int8_t v);
    void set_u16(const std::string & key, uint16_t v);
    void set_i16(const std::string & key, int16_t v);
    void set_u32(const std::string & key, uint32_t v);
    void set_i32(const std::string & key, int32_t v);
    void set_u64(const std::string & key, uint64_t v);
    void set_i64(const std::string & key, int64_t v);
    void set_f32(const std::string & key, float v);
    void set_f64(const std::string & key, double v);
    void set_bool(const std::string & key, bool v);
    void set_str(const std::string & key, const std::string & v);
    void set_arr_str(const std::string & key, const std::vector<std::string> & v);
    void set_arr_f32(const std::string & key, const std::vector<float> & v);
    void set_arr_i32(const std::string & key, const std::vector<int32_t> & v);
    // Any value, including nested arrays. Replaces an existing key of the same name.
    void set_value(const std::string & key, const ember_gguf_value & v);
    // Copies all metadata of another file.
    void copy_kv_from(const ember_gguf_file & f);

    // Adds a tensor; `data` (ember_row_size(type, ne0) * rows bytes) is copied, nullptr
    // gives zeros. Throws EMBER_ERR_INVALID_ARG for what the reader would reject.
    void add_tensor(const std::string & name, ember_type type, int32_t n_dims, const int64_t * ne, const void * data);

    std::vector<uint8_t> write_to_buffer() const;
    void                 write_to_file(const std::string & path) const;  // throws EMBER_ERR_IO

    std::vector<ember_gguf_kv>          kv;
    std::vector<ember_gguf_tensor_info> tensors;
    std::vector<std::vector<uint8_t>>   tensor_bytes;
};

#endif  // EMBER_RUNTIME_GGUF_H
