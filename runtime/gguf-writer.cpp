// GGUF writer. It refuses (EMBER_ERR_INVALID_ARG) anything the reader would reject, so a
// file it writes always reads back.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"
#include "runtime/gguf.h"

static constexpr uint64_t k_default_alignment = 32;
static constexpr int      k_max_depth         = 8;   // as in the reader
static constexpr size_t   k_max_key_len       = 65535;
static constexpr size_t   k_max_name_len      = 63;
static const char * const k_alignment_key     = "general.alignment";
const char * const ember_gguf_custom_types_key  = "ember.quantization.custom_types";
const char * const ember_gguf_custom_types_text =
    "This file holds tensors of Ember-specific types (type ids >= 4096: INT4, INT4_G32, NF4, FP8_E4M3, FP8_E5M2, "
    "FP8_E4M3_ROW, FP8_E5M2_ROW; see Ember's docs/quant-types.md). Other GGUF readers cannot load them.";

static constexpr uint64_t k_scalar_size[EMBER_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static_assert(EMBER_GGUF_TYPE_COUNT == 13, "update the GGUF type tables");

static bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static uint64_t pad_to(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

//
// Metadata
//

void ember_gguf_writer::set_value(const std::string & key, const ember_gguf_value & v) {
    if (key.empty() || key.size() > k_max_key_len) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key of %zu bytes (must be 1 to %zu)", key.size(), k_max_key_len);
    }
    for (char ch : key) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key contains a control character");
    }
    // The alignment is a property of the layout, so it lives in one place: the field. The key
    // is written from it, and setting the key (or copying it from a file) sets the field.
    if (key == k_alignment_key) {
        if (v.type != EMBER_GGUF_UINT32 || !is_pow2(v.num.u64)) {
            ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: %s must be a u32 power of two", k_alignment_key);
        }
        alignment = v.num.u64;
        return;
    }
    for (ember_gguf_kv & kv_i : kv) {
        if (kv_i.key == key) {
            kv_i.value = v;
            return;
        }
    }
    kv.push_back({key, v});
}

ember_gguf_value ember_gguf_uint(ember_gguf_type type, uint64_t x) {
    ember_gguf_value v;
    v.type    = type;
    v.num.u64 = x;
    return v;
}

ember_gguf_value ember_gguf_int(ember_gguf_type type, int64_t x) {
    ember_gguf_value v;
    v.type    = type;
    v.num.i64 = x;
    return v;
}

ember_gguf_value ember_gguf_float(ember_gguf_type type, double x) {
    ember_gguf_value v;
    v.type    = type;
    v.num.f64 = x;
    return v;
}

ember_gguf_value ember_gguf_string(const std::string & x) {
    ember_gguf_value v;
    v.type = EMBER_GGUF_STRING;
    v.str  = x;
    return v;
}

ember_gguf_value ember_gguf_strings(const std::vector<std::string> & xs) {
    ember_gguf_value v;
    v.type     = EMBER_GGUF_ARRAY;
    v.arr_type = EMBER_GGUF_STRING;
    v.arr_n    = xs.size();
    v.arr_str  = xs;
    return v;
}

template <typename T> static ember_gguf_value make_scalar_array(ember_gguf_type t, const std::vector<T> & xs) {
    ember_gguf_value v;
    v.type     = EMBER_GGUF_ARRAY;
    v.arr_type = t;
    v.arr_n    = xs.size();
    v.arr_data.resize(xs.size() * sizeof(T));
    if (!xs.empty()) std::memcpy(v.arr_data.data(), xs.data(), v.arr_data.size());
    return v;
}

void ember_gguf_writer::set_u8(const std::string & key, uint8_t v) { set_value(key, ember_gguf_uint(EMBER_GGUF_UINT8, v)); }
void ember_gguf_writer::set_i8(const std::string & key, int8_t v) { set_value(key, ember_gguf_int(EMBER_GGUF_INT8, v)); }
void ember_gguf_writer::set_u16(const std::string & key, uint16_t v) { set_value(key, ember_gguf_uint(EMBER_GGUF_UINT16, v)); }
void ember_gguf_writer::set_i16(const std::string & key, int16_t v) { set_value(key, ember_gguf_int(EMBER_GGUF_INT16, v)); }
void ember_gguf_writer::set_u32(const std::string & key, uint32_t v) { set_value(key, ember_gguf_uint(EMBER_GGUF_UINT32, v)); }
void ember_gguf_writer::set_i32(const std::string & key, int32_t v) { set_value(key, ember_gguf_int(EMBER_GGUF_INT32, v)); }
void ember_gguf_writer::set_u64(const std::string & key, uint64_t v) { set_value(key, ember_gguf_uint(EMBER_GGUF_UINT64, v)); }
void ember_gguf_writer::set_i64(const std::string & key, int64_t v) { set_value(key, ember_gguf_int(EMBER_GGUF_INT64, v)); }
void ember_gguf_writer::set_f32(const std::string & key, float v) { set_value(key, ember_gguf_float(EMBER_GGUF_FLOAT32, v)); }
void ember_gguf_writer::set_f64(const std::string & key, double v) { set_value(key, ember_gguf_float(EMBER_GGUF_FLOAT64, v)); }
void ember_gguf_writer::set_bool(const std::string & key, bool v) { set_value(key, ember_gguf_uint(EMBER_GGUF_BOOL, v ? 1 : 0)); }

void ember_gguf_writer::set_str(const std::string & key, const std::string & v) { set_value(key, ember_gguf_string(v)); }

void ember_gguf_writer::set_arr_str(const std::string & key, const std::vector<std::string> & v) {
    set_value(key, ember_gguf_strings(v));
}

void ember_gguf_writer::set_arr_f32(const std::string & key, const std::vector<float> & v) {
    set_value(key, make_scalar_array(EMBER_GGUF_FLOAT32, v));
}

void ember_gguf_writer::set_arr_i32(const std::string & key, const std::vector<int32_t> & v) {
    set_value(key, make_scalar_array(EMBER_GGUF_INT32, v));
}

void ember_gguf_writer::copy_kv_from(const ember_gguf_file & f) {
    for (const ember_gguf_kv & kv_i : f.kv) set_value(kv_i.key, kv_i.value);
}

//
// Tensors
//

void ember_gguf_writer::add_tensor(const std::string & name, ember_type type, int32_t n_dims, const int64_t * ne,
                                   const void * data) {
    if (name.empty() || name.size() > k_max_name_len) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor name '%s' must be 1 to %zu bytes", name.c_str(),
                    k_max_name_len);
    }
    for (const ember_gguf_tensor_info & t : tensors) {
        if (t.name == name) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: duplicate tensor '%s'", name.c_str());
    }
    if (n_dims < 1 || n_dims > 4 || !ne) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %d (must be 1 to 4)", name.c_str(), n_dims);
    }
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type %d", name.c_str(), int(type));

    ember_gguf_tensor_info t;
    t.name   = name;
    t.n_dims = n_dims;
    t.type   = type;
    uint64_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%d] < 0", name.c_str(), d);
        t.ne[d] = ne[d];
        if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(ne[d]), &rows)) {
            ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name.c_str());
        }
    }
    if (t.ne[0] % tr->block_size != 0) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] = %" PRId64 " is not a multiple of %" PRId64,
                    name.c_str(), t.ne[0], tr->block_size);
    }
    uint64_t row_bytes, bytes;  // row bytes include row-group headers (NF4, FP8_*_ROW)
    if (!ember_row_size_checked(type, t.ne[0], &row_bytes) || __builtin_mul_overflow(row_bytes, rows, &bytes) ||
        bytes > static_cast<uint64_t>(INT64_MAX)) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name.c_str());
    }
    t.nbytes = bytes;
    // Offsets assume the current alignment; write_to_buffer recomputes them in case it changes.
    t.offset = tensors.empty() ? 0 : pad_to(tensors.back().offset + tensors.back().nbytes, alignment);

    std::vector<uint8_t> bytes_copy(static_cast<size_t>(bytes));
    if (data && bytes > 0) std::memcpy(bytes_copy.data(), data, static_cast<size_t>(bytes));
    tensors.push_back(std::move(t));
    tensor_bytes.push_back(std::move(bytes_copy));
    // A file holding one of Ember's own types says so, for people and for other readers.
    if (type >= EMBER_TYPE_EMBER_FIRST) set_str(ember_gguf_custom_types_key, ember_gguf_custom_types_text);
}

//
// Serialisation
//
namespace {

struct byte_sink {
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

void check_writable(const std::string & key, const ember_gguf_value & v, int depth);

void check_array(const std::string & key, const ember_gguf_value & v, int depth) {
    if (depth > k_max_depth) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': arrays nested deeper than %d", key.c_str(), k_max_depth);
    }
    if (static_cast<uint32_t>(v.arr_type) >= EMBER_GGUF_TYPE_COUNT) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': bad array element type", key.c_str());
    }
    size_t held;
    if (v.arr_type == EMBER_GGUF_STRING) {
        held = v.arr_str.size();
    } else if (v.arr_type == EMBER_GGUF_ARRAY) {
        held = v.arr_arr.size();
        for (const ember_gguf_value & e : v.arr_arr) {
            if (e.type != EMBER_GGUF_ARRAY) {
                ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': element of an array array is not an array",
                            key.c_str());
            }
            check_array(key, e, depth + 1);
        }
    } else {
        held = v.arr_data.size() / k_scalar_size[v.arr_type];
        if (v.arr_data.size() % k_scalar_size[v.arr_type] != 0) held = SIZE_MAX;
        if (v.arr_type == EMBER_GGUF_BOOL) {
            for (uint8_t b : v.arr_data) {
                if (b > 1) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': bool element not 0/1", key.c_str());
            }
        }
    }
    if (held != v.arr_n) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': arr_n is %" PRIu64 " but the array holds %zu elements",
                    key.c_str(), v.arr_n, held);
    }
}

void check_writable(const std::string & key, const ember_gguf_value & v, int depth) {
    if (static_cast<uint32_t>(v.type) >= EMBER_GGUF_TYPE_COUNT) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': bad value type", key.c_str());
    }
    if (v.type == EMBER_GGUF_BOOL && v.num.u64 > 1) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: key '%s': bool value not 0/1", key.c_str());
    }
    if (v.type == EMBER_GGUF_ARRAY) check_array(key, v, depth + 1);
}

void put_array_body(byte_sink & s, const ember_gguf_value & v) {
    s.put<uint32_t>(v.arr_type);
    s.put<uint64_t>(v.arr_n);
    if (v.arr_type == EMBER_GGUF_STRING) {
        for (const std::string & e : v.arr_str) s.put_str(e);
    } else if (v.arr_type == EMBER_GGUF_ARRAY) {
        for (const ember_gguf_value & e : v.arr_arr) put_array_body(s, e);
    } else {
        s.put(v.arr_data.data(), v.arr_data.size());
    }
}

void put_value(byte_sink & s, const ember_gguf_value & v) {
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
        case EMBER_GGUF_ARRAY:   put_array_body(s, v); break;
        default:                 break;  // rejected by check_writable
    }
}

}  // namespace

std::vector<uint8_t> ember_gguf_header_bytes(uint32_t version, const std::vector<ember_gguf_kv> & kv,
                                             std::vector<ember_gguf_tensor_info> & tensors, uint64_t alignment) {
    if (version != 2 && version != 3) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: version %u (must be 2 or 3)", version);
    if (!is_pow2(alignment) || alignment > UINT32_MAX) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: alignment %" PRIu64 " is not a u32 power of two", alignment);
    }
    for (const ember_gguf_kv & e : kv) {
        if (e.key.empty()) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: empty metadata key");
        check_writable(e.key, e.value, 0);
    }
    std::vector<uint8_t> out;
    byte_sink            s{out};
    s.put("GGUF", 4);
    s.put<uint32_t>(version);
    s.put<uint64_t>(tensors.size());
    s.put<uint64_t>(kv.size());
    for (const ember_gguf_kv & e : kv) {
        s.put_str(e.key);
        put_value(s, e.value);
    }
    uint64_t offset = 0;
    for (ember_gguf_tensor_info & t : tensors) {
        if (t.name.empty() || t.name.size() > k_max_name_len) {
            ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor name '%s' must be 1 to %zu bytes", t.name.c_str(), k_max_name_len);
        }
        if (t.n_dims < 1 || t.n_dims > 4) ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %d", t.name.c_str(), t.n_dims);
        s.put_str(t.name);
        s.put<uint32_t>(static_cast<uint32_t>(t.n_dims));
        for (int d = 0; d < t.n_dims; d++) s.put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
        s.put<uint32_t>(static_cast<uint32_t>(t.type));
        s.put<uint64_t>(offset);
        t.offset = offset;
        offset   = pad_to(offset + t.nbytes, alignment);
    }
    out.resize(static_cast<size_t>(pad_to(out.size(), alignment)), 0);
    return out;
}

// The writer's header: general.alignment comes from the field, first, when it is not the
// default (a key of that name in kv is skipped: the field is authoritative, see set_value).
static std::vector<uint8_t> write_header(const ember_gguf_writer & w) {
    if (w.tensor_bytes.size() != w.tensors.size()) {
        ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensors and tensor_bytes differ in length");
    }
    for (size_t i = 0; i < w.tensors.size(); i++) {
        if (w.tensor_bytes[i].size() != w.tensors[i].nbytes) {
            ember_throw(EMBER_ERR_INVALID_ARG, "gguf writer: tensor '%s': nbytes differs from its data", w.tensors[i].name.c_str());
        }
    }
    std::vector<ember_gguf_kv> kv;
    kv.reserve(w.kv.size() + 1);
    if (w.alignment != k_default_alignment && is_pow2(w.alignment) && w.alignment <= UINT32_MAX) {
        ember_gguf_kv a;
        a.key              = k_alignment_key;
        a.value.type       = EMBER_GGUF_UINT32;
        a.value.num.u64    = w.alignment;
        kv.push_back(a);
    }
    for (const ember_gguf_kv & e : w.kv) {
        if (e.key != k_alignment_key) kv.push_back(e);
    }
    std::vector<ember_gguf_tensor_info> tensors = w.tensors;
    return ember_gguf_header_bytes(w.version, kv, tensors, w.alignment);
}

std::vector<uint8_t> ember_gguf_writer::write_to_buffer() const {
    std::vector<uint8_t> out = write_header(*this);
    // Each tensor is padded to the alignment, the last one too, as ggml writes them.
    for (size_t i = 0; i < tensors.size(); i++) {
        out.insert(out.end(), tensor_bytes[i].begin(), tensor_bytes[i].end());
        out.resize(static_cast<size_t>(pad_to(out.size(), alignment)), 0);
    }
    return out;
}

void ember_gguf_writer::write_to_file(const std::string & path) const {
    // The header is built in memory, the tensor data goes straight from its buffers, so
    // writing a large model needs no second copy of its weights.
    std::vector<uint8_t> header = write_header(*this);

    FILE * fp = std::fopen(path.c_str(), "wb");
    if (!fp) ember_throw(EMBER_ERR_IO, "%s: cannot create: %s", path.c_str(), std::strerror(errno));
    static const uint8_t zeros[256] = {};
    bool   ok  = std::fwrite(header.data(), 1, header.size(), fp) == header.size();
    uint64_t pos = header.size();
    for (size_t i = 0; ok && i < tensors.size(); i++) {
        const std::vector<uint8_t> & b = tensor_bytes[i];
        ok  = b.empty() || std::fwrite(b.data(), 1, b.size(), fp) == b.size();
        pos += b.size();
        uint64_t pad = pad_to(pos, alignment) - pos;
        while (ok && pad > 0) {
            size_t n = static_cast<size_t>(pad < sizeof(zeros) ? pad : sizeof(zeros));
            ok       = std::fwrite(zeros, 1, n, fp) == n;
            pad -= n;
            pos += n;
        }
    }
    int err = ok ? 0 : errno;
    if (std::fclose(fp) != 0 && ok) {
        ok  = false;
        err = errno;
    }
    if (!ok) {
        // A half-written model must not be mistaken for a good one later.
        std::remove(path.c_str());
        ember_throw(EMBER_ERR_IO, "%s: write failed: %s", path.c_str(), std::strerror(err ? err : EIO));
    }
}
