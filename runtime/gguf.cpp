// GGUF reader: parses and validates a whole header before anyone sees it.
//
// Everything here treats the file as hostile. Each count is checked against the bytes left
// in the file before anything is reserved, each size is computed with overflow checks, and
// each read goes through gguf_parser::take(), the one place that touches the bytes.
#include "runtime/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#    error "the GGUF reader assumes a little-endian host"
#endif

//
// Limits and tables
//

// Deeper nesting has no use in any known file; the limit keeps recursion bounded.
static constexpr int      k_max_depth      = 8;
// GGUF keys are at most 2^16 - 1 bytes (spec); tensor names fit ggml's 64-byte name field.
static constexpr uint64_t k_max_key_len    = 65535;
static constexpr uint64_t k_max_name_len   = 63;
// Smallest possible encodings, used to reject counts the remaining bytes cannot hold:
// kv = key (8-byte length + 1 byte) + type (4) + smallest value (1);
// tensor info = name (8 + 1) + n_dims (4) + one ne (8) + type (4) + offset (8).
static constexpr uint64_t k_min_kv_bytes     = 8 + 1 + 4 + 1;
static constexpr uint64_t k_min_tensor_bytes = 8 + 1 + 4 + 8 + 4 + 8;

// Encoded size of each scalar type; 0 for string and array, which have no fixed size.
static constexpr uint64_t k_scalar_size[EMBER_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
// Smallest encoding of one array element of each type (string: its length; array: type + n).
static constexpr uint64_t k_min_elem_size[EMBER_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
static_assert(EMBER_GGUF_TYPE_COUNT == 13, "update the GGUF type tables");

static const char * const k_gguf_type_names[EMBER_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

// ggml's tensor type ids, so that a valid file using a type this build lacks is reported as
// unsupported (naming the type) rather than malformed. nullptr: an id ggml never assigned
// or has retired.
static const char * const k_ggml_type_names[] = {
    "f32",     "f16",     "q4_0",   "q4_1",   nullptr, nullptr,  "q5_0",  "q5_1",  "q8_0",  "q8_1",
    "q2_K",    "q3_K",    "q4_K",   "q5_K",   "q6_K",  "q8_K",   "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl",  "iq3_s",   "iq2_s",  "iq4_xs", "i8",    "i16",    "i32",   "i64",   "f64",   "iq1_m",
    "bf16",    nullptr,   nullptr,  nullptr,  "tq1_0", "tq2_0",  nullptr, nullptr, nullptr, "mxfp4",
};
static_assert(sizeof(k_ggml_type_names) / sizeof(k_ggml_type_names[0]) == EMBER_TYPE_COUNT,
              "one name per ggml type id");

const char * ember_gguf_type_name(ember_gguf_type t) {
    return static_cast<uint32_t>(t) < EMBER_GGUF_TYPE_COUNT ? k_gguf_type_names[t] : "invalid";
}

// Keys and names come from the file, so they are escaped and shortened before they go into
// a message: a hostile name must not be able to flood a log or inject control characters.
static std::string printable(const std::string & s) {
    static constexpr size_t k_max_shown = 96;
    std::string out;
    for (size_t i = 0; i < s.size() && i < k_max_shown; i++) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > k_max_shown) out += "...";
    return out;
}

static bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

//
// Values
//

bool ember_gguf_value::is_integer() const {
    switch (type) {
        case EMBER_GGUF_UINT8: case EMBER_GGUF_INT8: case EMBER_GGUF_UINT16: case EMBER_GGUF_INT16:
        case EMBER_GGUF_UINT32: case EMBER_GGUF_INT32: case EMBER_GGUF_UINT64: case EMBER_GGUF_INT64:
        case EMBER_GGUF_BOOL:
            return true;
        default:
            return false;
    }
}

bool ember_gguf_value::is_number() const {
    return is_integer() || type == EMBER_GGUF_FLOAT32 || type == EMBER_GGUF_FLOAT64;
}

static bool is_signed_type(ember_gguf_type t) {
    return t == EMBER_GGUF_INT8 || t == EMBER_GGUF_INT16 || t == EMBER_GGUF_INT32 || t == EMBER_GGUF_INT64;
}

[[noreturn]] static void value_type_error(const char * what, const char * expected, ember_gguf_type found) {
    ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': expected %s, found %s", what ? what : "?", expected,
                ember_gguf_type_name(found));
}

int64_t ember_gguf_value::as_i64(const char * what) const {
    if (!is_integer()) value_type_error(what, "an integer", type);
    if (is_signed_type(type)) return num.i64;
    if (num.u64 > static_cast<uint64_t>(INT64_MAX)) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': value %" PRIu64 " does not fit in int64", what ? what : "?", num.u64);
    }
    return static_cast<int64_t>(num.u64);
}

uint64_t ember_gguf_value::as_u64(const char * what) const {
    if (!is_integer()) value_type_error(what, "an integer", type);
    if (is_signed_type(type) && num.i64 < 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': value %" PRId64 " is negative", what ? what : "?", num.i64);
    }
    return num.u64;
}

double ember_gguf_value::as_f64(const char * what) const {
    if (!is_number()) value_type_error(what, "a number", type);
    if (type == EMBER_GGUF_FLOAT32 || type == EMBER_GGUF_FLOAT64) return num.f64;
    if (is_signed_type(type)) return static_cast<double>(num.i64);
    return static_cast<double>(num.u64);
}

bool ember_gguf_value::as_bool(const char * what) const {
    if (type != EMBER_GGUF_BOOL) value_type_error(what, "a bool", type);
    return num.u64 != 0;
}

// Shortest decimal text that reads back as the same value, so 0.1f prints as "0.1".
static std::string format_float(double v, bool single) {
    char buf[40];
    for (int prec = single ? 6 : 15; prec <= 17; prec++) {
        std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
        double back = std::strtod(buf, nullptr);
        if (single ? static_cast<float>(back) == static_cast<float>(v) : back == v) break;
        if (std::isnan(v)) break;
    }
    return buf;
}

static std::string quote_string(const std::string & s) {
    std::string out = "\"";
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

// Text of element i of a scalar array held in arr_data.
static std::string scalar_elem_to_string(ember_gguf_type t, const uint8_t * p) {
    ember_gguf_value v;
    v.type = t;
    switch (t) {
        case EMBER_GGUF_UINT8:   { uint8_t  x; std::memcpy(&x, p, 1); v.num.u64 = x; break; }
        case EMBER_GGUF_INT8:    { int8_t   x; std::memcpy(&x, p, 1); v.num.i64 = x; break; }
        case EMBER_GGUF_UINT16:  { uint16_t x; std::memcpy(&x, p, 2); v.num.u64 = x; break; }
        case EMBER_GGUF_INT16:   { int16_t  x; std::memcpy(&x, p, 2); v.num.i64 = x; break; }
        case EMBER_GGUF_UINT32:  { uint32_t x; std::memcpy(&x, p, 4); v.num.u64 = x; break; }
        case EMBER_GGUF_INT32:   { int32_t  x; std::memcpy(&x, p, 4); v.num.i64 = x; break; }
        case EMBER_GGUF_FLOAT32: { float    x; std::memcpy(&x, p, 4); v.num.f64 = x; break; }
        case EMBER_GGUF_BOOL:    { uint8_t  x; std::memcpy(&x, p, 1); v.num.u64 = x != 0; break; }
        case EMBER_GGUF_UINT64:  { std::memcpy(&v.num.u64, p, 8); break; }
        case EMBER_GGUF_INT64:   { std::memcpy(&v.num.i64, p, 8); break; }
        case EMBER_GGUF_FLOAT64: { std::memcpy(&v.num.f64, p, 8); break; }
        default: return "?";
    }
    return v.to_string();
}

std::string ember_gguf_value::to_string(size_t max_elems) const {
    switch (type) {
        case EMBER_GGUF_UINT8: case EMBER_GGUF_UINT16: case EMBER_GGUF_UINT32: case EMBER_GGUF_UINT64:
            return std::to_string(num.u64);
        case EMBER_GGUF_INT8: case EMBER_GGUF_INT16: case EMBER_GGUF_INT32: case EMBER_GGUF_INT64:
            return std::to_string(num.i64);
        case EMBER_GGUF_FLOAT32: return format_float(num.f64, true);
        case EMBER_GGUF_FLOAT64: return format_float(num.f64, false);
        case EMBER_GGUF_BOOL:    return num.u64 ? "true" : "false";
        case EMBER_GGUF_STRING:  return str;
        case EMBER_GGUF_ARRAY:   break;
        default:                 return "?";
    }
    std::string out = "[";
    uint64_t    esz = static_cast<uint32_t>(arr_type) < EMBER_GGUF_TYPE_COUNT ? k_scalar_size[arr_type] : 0;
    for (uint64_t i = 0; i < arr_n; i++) {
        if (i > 0) out += ", ";
        if (i >= max_elems) {
            out += "...";
            break;
        }
        // Bounds come from the containers, not arr_n, so a hand-built value cannot over-read.
        if (arr_type == EMBER_GGUF_STRING) {
            out += i < arr_str.size() ? quote_string(arr_str[i]) : "?";
        } else if (arr_type == EMBER_GGUF_ARRAY) {
            out += i < arr_arr.size() ? arr_arr[i].to_string(max_elems) : "?";
        } else if (esz > 0 && (i + 1) * esz <= arr_data.size()) {
            out += scalar_elem_to_string(arr_type, arr_data.data() + i * esz);
        } else {
            out += "?";
        }
    }
    return out + "]";
}

//
// Header-only source: reads the file front in growing chunks, for no_data opens, so a
// vocab-only load of a multi-gigabyte model reads only the few megabytes of its header.
//
namespace {

struct header_loader {
    std::string          path;
    int                  fd   = -1;
    uint64_t             size = 0;
    std::vector<uint8_t> buf;

    explicit header_loader(const std::string & p) : path(p) {
        do {
            fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        } while (fd < 0 && errno == EINTR);
        if (fd < 0) ember_throw(EMBER_ERR_IO, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
        struct stat st;
        if (::fstat(fd, &st) != 0) {
            int err = errno;
            ::close(fd);
            ember_throw(EMBER_ERR_IO, "%s: cannot stat: %s", path.c_str(), std::strerror(err));
        }
        if (!S_ISREG(st.st_mode)) {
            ::close(fd);
            ember_throw(EMBER_ERR_IO, "%s: not a regular file", path.c_str());
        }
        size = static_cast<uint64_t>(st.st_size);
    }
    ~header_loader() { ::close(fd); }
    header_loader(const header_loader &)             = delete;
    header_loader & operator=(const header_loader &) = delete;

    // Makes buf hold at least `need` bytes (need <= size). Doubling keeps the total work linear.
    void extend(uint64_t need) {
        static constexpr uint64_t k_first_chunk = 1u << 20;
        uint64_t target = std::max<uint64_t>(need, std::max<uint64_t>(k_first_chunk, 2 * buf.size()));
        target          = std::min(target, size);
        size_t have     = buf.size();
        buf.resize(static_cast<size_t>(target));
        while (have < buf.size()) {
            ssize_t n = ::pread(fd, buf.data() + have, buf.size() - have, static_cast<off_t>(have));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) ember_throw(EMBER_ERR_IO, "%s: read failed: %s", path.c_str(), std::strerror(errno));
            if (n == 0) ember_throw(EMBER_ERR_IO, "%s: file shrank while reading its header", path.c_str());
            have += static_cast<size_t>(n);
        }
    }
};

//
// The parser
//
class gguf_parser {
  public:
    gguf_parser(const uint8_t * data, uint64_t avail, uint64_t size, header_loader * loader)
        : data_(data), avail_(avail), size_(size), loader_(loader) {}

    void parse(ember_gguf_file & f);

  private:
    const uint8_t * data_;
    uint64_t        avail_;  // bytes at data_ (less than size_ only while a loader streams)
    uint64_t        size_;   // the whole file
    uint64_t        pos_ = 0;
    header_loader * loader_;
    std::string     where_;  // the item being parsed ("key 'x'"), prefixed to every message

    uint64_t left() const { return size_ - pos_; }

    [[noreturn]] void fail(const char * fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
    {
        va_list ap;
        va_start(ap, fmt);
        char buf[1024];
        std::vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        throw ember_error(EMBER_ERR_BAD_FORMAT, where_.empty() ? std::string(buf) : where_ + ": " + buf);
    }

    // The only access to file bytes: n bytes at the cursor, which then moves past them.
    const uint8_t * take(uint64_t n, const char * what) {
        if (n > left()) {
            fail("file truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", only %" PRIu64 " left", what, n,
                 pos_, left());
        }
        if (pos_ + n > avail_) {
            loader_->extend(pos_ + n);
            data_  = loader_->buf.data();
            avail_ = loader_->buf.size();
        }
        const uint8_t * p = data_ + pos_;
        pos_ += n;
        return p;
    }

    template <typename T> T read(const char * what) {
        T v;
        std::memcpy(&v, take(sizeof(T), what), sizeof(T));
        return v;
    }

    std::string read_string(const char * what) {
        uint64_t n = read<uint64_t>(what);
        if (n > left()) {
            fail("%s length %" PRIu64 " exceeds the %" PRIu64 " bytes left in the file", what, n, left());
        }
        const uint8_t * p = take(n, what);
        return std::string(reinterpret_cast<const char *>(p), static_cast<size_t>(n));
    }

    ember_gguf_type read_type(const char * what) {
        uint32_t t = read<uint32_t>(what);
        if (t >= EMBER_GGUF_TYPE_COUNT) fail("invalid %s %u (valid: 0..%d)", what, t, EMBER_GGUF_TYPE_COUNT - 1);
        return static_cast<ember_gguf_type>(t);
    }

    void read_key(std::string & key);
    void read_value(ember_gguf_value & v, ember_gguf_type type, int depth);
    void read_array(ember_gguf_value & v, int depth);
    void read_tensor_info(ember_gguf_tensor_info & t, uint64_t alignment);
    void check_tensor_layout(ember_gguf_file & f);
};

void gguf_parser::read_key(std::string & key) {
    key = read_string("key");
    if (key.empty()) fail("empty key");
    if (key.size() > k_max_key_len) fail("key of %zu bytes is longer than %" PRIu64, key.size(), k_max_key_len);
    for (char ch : key) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) fail("key '%s' contains control character 0x%02x", printable(key).c_str(), c);
    }
}

void gguf_parser::read_value(ember_gguf_value & v, ember_gguf_type type, int depth) {
    v.type = type;
    switch (type) {
        case EMBER_GGUF_UINT8:   v.num.u64 = read<uint8_t>("u8 value"); break;
        case EMBER_GGUF_INT8:    v.num.i64 = read<int8_t>("i8 value"); break;
        case EMBER_GGUF_UINT16:  v.num.u64 = read<uint16_t>("u16 value"); break;
        case EMBER_GGUF_INT16:   v.num.i64 = read<int16_t>("i16 value"); break;
        case EMBER_GGUF_UINT32:  v.num.u64 = read<uint32_t>("u32 value"); break;
        case EMBER_GGUF_INT32:   v.num.i64 = read<int32_t>("i32 value"); break;
        case EMBER_GGUF_UINT64:  v.num.u64 = read<uint64_t>("u64 value"); break;
        case EMBER_GGUF_INT64:   v.num.i64 = read<int64_t>("i64 value"); break;
        case EMBER_GGUF_FLOAT32: v.num.f64 = read<float>("f32 value"); break;
        case EMBER_GGUF_FLOAT64: v.num.f64 = read<double>("f64 value"); break;
        case EMBER_GGUF_BOOL: {
            uint8_t b = read<uint8_t>("bool value");
            if (b > 1) fail("bool value is %u, not 0 or 1", b);
            v.num.u64 = b;
            break;
        }
        case EMBER_GGUF_STRING: v.str = read_string("string value"); break;
        case EMBER_GGUF_ARRAY:  read_array(v, depth + 1); break;
        default:                fail("invalid value type %u", static_cast<unsigned>(type));
    }
}

void gguf_parser::read_array(ember_gguf_value & v, int depth) {
    if (depth > k_max_depth) fail("arrays nested deeper than %d levels", k_max_depth);
    v.type     = EMBER_GGUF_ARRAY;
    v.arr_type = read_type("array element type");
    v.arr_n    = read<uint64_t>("array length");
    const ember_gguf_type et = v.arr_type;
    const uint64_t        n  = v.arr_n;
    // Every element takes at least k_min_elem_size bytes, so a count the rest of the file
    // cannot hold is rejected here, before anything is reserved for it.
    if (n > left() / k_min_elem_size[et]) {
        fail("array of %" PRIu64 " %s elements cannot fit in the %" PRIu64 " bytes left in the file", n,
             ember_gguf_type_name(et), left());
    }
    if (et == EMBER_GGUF_STRING) {
        v.arr_str.resize(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; i++) v.arr_str[i] = read_string("array string");
    } else if (et == EMBER_GGUF_ARRAY) {
        v.arr_arr.resize(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; i++) read_array(v.arr_arr[i], depth + 1);
    } else {
        uint64_t        bytes = n * k_scalar_size[et];  // no overflow: bounded by left() above
        const uint8_t * p     = take(bytes, "array data");
        v.arr_data.assign(p, p + bytes);
        if (et == EMBER_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                if (v.arr_data[i] > 1) fail("bool array element %" PRIu64 " is %u, not 0 or 1", i, v.arr_data[i]);
            }
        }
    }
}

void gguf_parser::read_tensor_info(ember_gguf_tensor_info & t, uint64_t alignment) {
    t.name = read_string("tensor name");
    if (t.name.empty()) fail("empty tensor name");
    where_ = "tensor '" + printable(t.name) + "'";
    if (t.name.size() > k_max_name_len) {
        fail("name is %zu bytes long, the limit is %" PRIu64, t.name.size(), k_max_name_len);
    }
    uint32_t n_dims = read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > 4) fail("n_dims is %u, must be 1 to 4", n_dims);
    t.n_dims = static_cast<int32_t>(n_dims);
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne = read<uint64_t>("dimension");
        if (ne > static_cast<uint64_t>(INT64_MAX)) fail("ne[%u] = %" PRIu64 " is negative as int64", d, ne);
        t.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type_id = read<uint32_t>("tensor type");
    t.offset         = read<uint64_t>("tensor offset");

    const ember_type_traits * tr = type_id <= static_cast<uint32_t>(INT32_MAX)
                                       ? ember_type_get_traits(static_cast<int32_t>(type_id))
                                       : nullptr;
    if (!tr) {
        if (type_id < static_cast<uint32_t>(EMBER_TYPE_COUNT) && k_ggml_type_names[type_id]) {
            throw ember_error(EMBER_ERR_UNSUPPORTED,
                              ember_format("%s: type %s (ggml id %u) is not supported by this build", where_.c_str(),
                                           k_ggml_type_names[type_id], type_id));
        }
        if (type_id >= static_cast<uint32_t>(EMBER_TYPE_EMBER_FIRST) &&
            type_id < static_cast<uint32_t>(EMBER_TYPE_EMBER_FIRST + EMBER_TYPE_EMBER_COUNT)) {
            throw ember_error(EMBER_ERR_UNSUPPORTED,
                              ember_format("%s: Ember type id %u is not supported by this build (a newer Ember wrote it)",
                                           where_.c_str(), type_id));
        }
        fail("unknown tensor type id %u", type_id);
    }
    t.type = static_cast<ember_type>(type_id);
    if (t.ne[0] % tr->block_size != 0) {
        fail("ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, t.ne[0], tr->name,
             tr->block_size);
    }

    // Element count and byte size must not overflow. Zero dims make the tensor empty, but the
    // product of the other dims is still checked: strides are computed from them.
    int64_t  n_elem_nz = 1;
    uint64_t bytes_nz  = 0;
    bool     empty     = false;
    for (int d = 0; d < t.n_dims; d++) {
        if (t.ne[d] == 0) {
            empty = true;
        } else if (__builtin_mul_overflow(n_elem_nz, t.ne[d], &n_elem_nz)) {
            fail("element count overflows int64 (ne = %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 ")",
                 t.ne[0], t.ne[1], t.ne[2], t.ne[3]);
        }
    }
    // Row bytes include the row-group headers of the types that have them (NF4, FP8_*_ROW).
    bool overflow = !ember_row_size_checked(t.type, t.ne[0] == 0 ? tr->block_size : t.ne[0], &bytes_nz);
    for (int d = 1; d < t.n_dims && !overflow; d++) {
        if (t.ne[d] != 0) overflow = __builtin_mul_overflow(bytes_nz, static_cast<uint64_t>(t.ne[d]), &bytes_nz);
    }
    if (overflow || bytes_nz > static_cast<uint64_t>(INT64_MAX)) fail("byte size overflows int64");
    t.nbytes = empty ? 0 : bytes_nz;

    if (t.offset % alignment != 0) {
        fail("data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, t.offset, alignment);
    }
}

void gguf_parser::check_tensor_layout(ember_gguf_file & f) {
    const uint64_t data_size = f.data_offset <= size_ ? size_ - f.data_offset : 0;
    for (const ember_gguf_tensor_info & t : f.tensors) {
        where_ = "tensor '" + printable(t.name) + "'";
        if (t.offset > data_size || t.nbytes > data_size - t.offset) {
            fail("data [%" PRIu64 ", +%" PRIu64 ") lies past the end of the file (the data section at offset %" PRIu64
                 " holds %" PRIu64 " bytes)",
                 t.offset, t.nbytes, f.data_offset, data_size);
        }
    }
    // Sorted by offset, each tensor must end before the next begins.
    std::vector<size_t> order(f.tensors.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const ember_gguf_tensor_info & ta = f.tensors[a];
        const ember_gguf_tensor_info & tb = f.tensors[b];
        return ta.offset != tb.offset ? ta.offset < tb.offset : ta.nbytes < tb.nbytes;
    });
    for (size_t i = 1; i < order.size(); i++) {
        const ember_gguf_tensor_info & prev = f.tensors[order[i - 1]];
        const ember_gguf_tensor_info & cur  = f.tensors[order[i]];
        if (prev.offset + prev.nbytes > cur.offset) {  // no overflow: both lie inside the file
            where_ = "tensor '" + printable(cur.name) + "'";
            fail("data at offset %" PRIu64 " overlaps tensor '%s' [%" PRIu64 ", +%" PRIu64 ")", cur.offset,
                 printable(prev.name).c_str(), prev.offset, prev.nbytes);
        }
    }
    where_.clear();
}

void gguf_parser::parse(ember_gguf_file & f) {
    f.file_size = size_;
    if (size_ < 4 + 4 + 8 + 8) fail("file of %" PRIu64 " bytes is too small for a GGUF header", size_);
    const uint8_t * magic = take(4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        fail("bad magic %02x %02x %02x %02x: not a GGUF file", magic[0], magic[1], magic[2], magic[3]);
    }
    uint32_t version = read<uint32_t>("version");
    if (version == 1) fail("GGUF version 1 is not supported (only 2 and 3): convert the model again");
    if (version != 2 && version != 3) {
        uint32_t swapped = __builtin_bswap32(version);
        fail("unsupported GGUF version %u%s", version,
             swapped == 2 || swapped == 3 ? " (a big-endian file; only little-endian files are supported)" : "");
    }
    f.version               = version;
    uint64_t n_tensors      = read<uint64_t>("tensor count");
    uint64_t n_kv           = read<uint64_t>("kv count");
    if (n_kv > left() / k_min_kv_bytes || n_tensors > left() / k_min_tensor_bytes ||
        n_kv * k_min_kv_bytes + n_tensors * k_min_tensor_bytes > left()) {
        fail("%" PRIu64 " key-value pairs and %" PRIu64 " tensors cannot fit in the %" PRIu64 " bytes left in the file",
             n_kv, n_tensors, left());
    }

    f.kv.resize(static_cast<size_t>(n_kv));
    f.kv_index.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; i++) {
        ember_gguf_kv & kv = f.kv[i];
        where_             = ember_format("kv %" PRIu64, i);
        read_key(kv.key);
        where_ = "key '" + printable(kv.key) + "'";
        read_value(kv.value, read_type("value type"), 0);
        if (!f.kv_index.emplace(kv.key, static_cast<size_t>(i)).second) fail("duplicate key");
    }

    f.alignment = 32;
    if (const ember_gguf_value * a = f.find("general.alignment")) {
        where_ = "key 'general.alignment'";
        if (a->type != EMBER_GGUF_UINT32) fail("must be u32, found %s", ember_gguf_type_name(a->type));
        if (!is_pow2(a->num.u64)) fail("alignment %" PRIu64 " is not a power of two", a->num.u64);
        f.alignment = a->num.u64;
    }

    f.tensors.resize(static_cast<size_t>(n_tensors));
    f.tensor_index.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; i++) {
        where_ = ember_format("tensor %" PRIu64, i);
        read_tensor_info(f.tensors[i], f.alignment);
        if (!f.tensor_index.emplace(f.tensors[i].name, static_cast<size_t>(i)).second) fail("duplicate tensor name");
    }
    where_.clear();

    // pos_ is at most the file size and the alignment at most 2^31, so this cannot overflow.
    f.data_offset = (pos_ + f.alignment - 1) / f.alignment * f.alignment;
    check_tensor_layout(f);
}

}  // namespace

//
// Opening
//

static std::unique_ptr<ember_gguf_file> parse_mapping(std::unique_ptr<ember_mapped_file> mapping) {
    auto f = std::make_unique<ember_gguf_file>();
    gguf_parser p(mapping->data(), mapping->size(), mapping->size(), nullptr);
    p.parse(*f);
    f->mapping = std::move(mapping);
    return f;
}

std::unique_ptr<ember_gguf_file> ember_gguf_open(const std::string & path, const ember_gguf_open_params & params) {
    try {
        if (params.no_data) {
            // Nothing of the file is kept after the header is parsed, so a mapping would buy
            // nothing over reading the front of the file.
            header_loader loader(path);
            auto          f = std::make_unique<ember_gguf_file>();
            gguf_parser   p(nullptr, 0, loader.size, &loader);
            p.parse(*f);
            return f;
        }
        return parse_mapping(std::make_unique<ember_mapped_file>(path, params.use_mmap));
    } catch (const ember_error & e) {
        // I/O messages already name the path; format errors get it here.
        if (e.status == EMBER_ERR_IO) throw;
        throw ember_error(e.status, path + ": " + e.what());
    }
}

std::unique_ptr<ember_gguf_file> ember_gguf_parse(const uint8_t * data, size_t size) {
    if (!data && size > 0) ember_throw(EMBER_ERR_INVALID_ARG, "ember_gguf_parse: data is NULL");
    return parse_mapping(std::make_unique<ember_mapped_file>(data, size));
}

//
// Lookups and getters
//

const ember_gguf_value * ember_gguf_file::find(const std::string & key) const {
    auto it = kv_index.find(key);
    return it == kv_index.end() ? nullptr : &kv[it->second].value;
}

int64_t ember_gguf_file::find_tensor(const std::string & name) const {
    auto it = tensor_index.find(name);
    return it == tensor_index.end() ? -1 : static_cast<int64_t>(it->second);
}

const ember_gguf_tensor_info * ember_gguf_file::tensor(const std::string & name) const {
    int64_t i = find_tensor(name);
    return i < 0 ? nullptr : &tensors[static_cast<size_t>(i)];
}

uint32_t ember_gguf_file::get_u32(const std::string & key, uint32_t def) const {
    const ember_gguf_value * v = find(key);
    if (!v) return def;
    uint64_t x = v->as_u64(key.c_str());
    if (x > UINT32_MAX) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': value %" PRIu64 " does not fit in u32", key.c_str(), x);
    }
    return static_cast<uint32_t>(x);
}

float ember_gguf_file::get_f32(const std::string & key, float def) const {
    const ember_gguf_value * v = find(key);
    if (!v) return def;
    if (v->type != EMBER_GGUF_FLOAT32 && v->type != EMBER_GGUF_FLOAT64) value_type_error(key.c_str(), "f32", v->type);
    if (std::isfinite(v->num.f64) && std::fabs(v->num.f64) > FLT_MAX) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "key '%s': value %g does not fit in f32", key.c_str(), v->num.f64);
    }
    return static_cast<float>(v->num.f64);
}

bool ember_gguf_file::get_bool(const std::string & key, bool def) const {
    const ember_gguf_value * v = find(key);
    return v ? v->as_bool(key.c_str()) : def;
}

std::string ember_gguf_file::get_str(const std::string & key, const std::string & def) const {
    const ember_gguf_value * v = find(key);
    if (!v) return def;
    if (v->type != EMBER_GGUF_STRING) value_type_error(key.c_str(), "a string", v->type);
    return v->str;
}

uint32_t ember_gguf_file::require_u32(const std::string & key) const {
    if (!find(key)) ember_throw(EMBER_ERR_BAD_FORMAT, "missing key '%s'", key.c_str());
    return get_u32(key, 0);
}

const uint8_t * ember_gguf_file::tensor_data(const ember_gguf_tensor_info & t) const {
    if (!mapping) return nullptr;
    // Guards against an info that came from another file; the parser checked its own.
    if (data_offset > mapping->size() || t.offset > mapping->size() - data_offset ||
        t.nbytes > mapping->size() - data_offset - t.offset) {
        return nullptr;
    }
    return mapping->data() + data_offset + t.offset;
}

const uint8_t * ember_gguf_file::file_data() const { return mapping ? mapping->data() : nullptr; }

bool ember_gguf_file::is_mmapped() const { return mapping && mapping->is_mmapped(); }
