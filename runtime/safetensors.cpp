// Safetensors reader: header validation and mapping (see runtime/safetensors.h).
#include "runtime/safetensors.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"
#include "runtime/json.h"

namespace {

// The safetensors library refuses headers above 100 MB; so do we.
constexpr uint64_t k_max_header = 100000000;

struct dtype_info {
    const char * name;
    uint32_t     bits;
};

// Every dtype the format defines (sub-byte floats included), with its width.
const dtype_info k_dtypes[] = {
    {"BOOL", 8},  {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16},  {"F16", 16}, {"BF16", 16}, {"I32", 32},   {"U32", 32},    {"F32", 32},    {"F64", 64},
    {"I64", 64},  {"U64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

const dtype_info * find_dtype(const std::string & s) {
    for (const dtype_info & d : k_dtypes) {
        if (s == d.name) return &d;
    }
    return nullptr;
}

int64_t json_nonneg_int(const ember_json & v, const std::string & what, const std::string & where) {
    if (v.kind != EMBER_JSON_INT || v.i < 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: %s must be a non-negative integer", where.c_str(), what.c_str());
    }
    return v.i;
}

}  // namespace

int64_t ember_st_tensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

const ember_st_tensor * ember_st_file::find(const std::string & name) const {
    for (const ember_st_tensor & t : tensors) {
        if (t.name == name) return &t;
    }
    return nullptr;
}

bool ember_safetensors_type(const std::string & dtype, ember_type & out) {
    if (dtype == "F32") {
        out = EMBER_TYPE_F32;
    } else if (dtype == "F16") {
        out = EMBER_TYPE_F16;
    } else if (dtype == "BF16") {
        out = EMBER_TYPE_BF16;
    } else {
        return false;
    }
    return true;
}

std::unique_ptr<ember_st_file> ember_safetensors_from_mapping(std::shared_ptr<ember_mapped_file> map, const std::string & what) {
    const char *   w    = what.c_str();
    const uint64_t size = map->size();
    if (size < 8) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: file of %llu bytes is too short for a safetensors header", w, (unsigned long long) size);
    uint64_t n_header = 0;
    for (int i = 7; i >= 0; i--) n_header = (n_header << 8) | map->data()[i];  // little-endian
    if (n_header > size - 8) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)", w,
                    (unsigned long long) n_header, (unsigned long long) size);
    }
    if (n_header > k_max_header) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: header length %llu is above the limit of %llu bytes", w, (unsigned long long) n_header,
                    (unsigned long long) k_max_header);
    }
    if (n_header < 2 || map->data()[8] != '{') ember_throw(EMBER_ERR_BAD_FORMAT, "%s: the header is not a JSON object", w);

    ember_json header;
    try {
        header = ember_json_parse(std::string(reinterpret_cast<const char *>(map->data()) + 8, n_header));
    } catch (const ember_error & e) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: bad JSON header: %s", w, e.what());
    }
    if (header.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: the header is not a JSON object", w);

    auto           file       = std::make_unique<ember_st_file>();
    const uint64_t data_start = 8 + n_header;
    const uint64_t data_size  = size - data_start;
    file->path                = what;
    for (const auto & kv : header.obj) {
        if (kv.first == "__metadata__") {
            if (kv.second.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: __metadata__ is not an object", w);
            for (const auto & m : kv.second.obj) {
                if (m.second.kind == EMBER_JSON_STRING) file->metadata.emplace_back(m.first, m.second.str);
            }
            continue;
        }
        const std::string where = what + ": tensor '" + kv.first + "'";
        const ember_json & e    = kv.second;
        if (kv.first.empty()) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: a tensor has an empty name", w);
        if (e.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s is not an object", where.c_str());
        const ember_json * dtype   = e.find("dtype");
        const ember_json * shape   = e.find("shape");
        const ember_json * offsets = e.find("data_offsets");
        if (!dtype || dtype->kind != EMBER_JSON_STRING) ember_throw(EMBER_ERR_BAD_FORMAT, "%s has no string 'dtype'", where.c_str());
        if (!shape || shape->kind != EMBER_JSON_ARRAY) ember_throw(EMBER_ERR_BAD_FORMAT, "%s has no array 'shape'", where.c_str());
        if (!offsets || offsets->kind != EMBER_JSON_ARRAY || offsets->arr.size() != 2) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s has no 'data_offsets' [begin, end]", where.c_str());
        }
        const dtype_info * di = find_dtype(dtype->str);
        if (!di) ember_throw(EMBER_ERR_BAD_FORMAT, "%s has unknown dtype '%s'", where.c_str(), dtype->str.c_str());

        ember_st_tensor t;
        t.name  = kv.first;
        t.dtype = dtype->str;
        // Element count with an overflow guard: no real tensor comes near 2^62 elements.
        uint64_t n = 1;
        for (const ember_json & d : shape->arr) {
            const int64_t v = json_nonneg_int(d, "every dimension of 'shape'", where);
            if (v != 0 && n > (uint64_t(1) << 62) / static_cast<uint64_t>(v)) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "%s: shape is too large", where.c_str());
            }
            n *= static_cast<uint64_t>(v);
            t.shape.push_back(v);
        }
        const uint64_t begin = static_cast<uint64_t>(json_nonneg_int(offsets->arr[0], "data_offsets[0]", where));
        const uint64_t end   = static_cast<uint64_t>(json_nonneg_int(offsets->arr[1], "data_offsets[1]", where));
        if (end < begin) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: data_offsets [%llu, %llu] end before they begin", where.c_str(),
                                     (unsigned long long) begin, (unsigned long long) end);
        if (end > data_size) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: data_offsets [%llu, %llu] run past the end of the data (%llu bytes)", where.c_str(),
                        (unsigned long long) begin, (unsigned long long) end, (unsigned long long) data_size);
        }
        const uint64_t expect = (n * di->bits + 7) / 8;
        if (end - begin != expect) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: %llu bytes of data, but shape and dtype %s need %llu", where.c_str(),
                        (unsigned long long) (end - begin), di->name, (unsigned long long) expect);
        }
        t.offset = data_start + begin;
        t.nbytes = end - begin;
        file->tensors.push_back(std::move(t));
    }

    // No two tensors may share bytes.
    std::vector<const ember_st_tensor *> order;
    for (const ember_st_tensor & t : file->tensors) {
        if (t.nbytes) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const ember_st_tensor * a, const ember_st_tensor * b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); i++) {
        if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: tensors '%s' and '%s' overlap", w, order[i - 1]->name.c_str(), order[i]->name.c_str());
        }
    }
    file->map = std::move(map);
    return file;
}

std::unique_ptr<ember_st_file> ember_safetensors_open(const std::string & path) {
    return ember_safetensors_from_mapping(std::make_shared<ember_mapped_file>(path, true), path);
}
