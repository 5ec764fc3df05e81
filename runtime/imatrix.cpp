// Importance-matrix reader (legacy binary and GGUF formats; see imatrix.h).
#include "runtime/imatrix.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/mmap.h"

namespace {

void check_finite(const std::string & path, const std::string & name, const std::vector<float> & v) {
    for (size_t i = 0; i < v.size(); i++) {
        if (!std::isfinite(v[i])) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s' has a value that is not finite (at %zu)", path.c_str(), name.c_str(), i);
        }
    }
}

// Bounds-checked reader over the whole file.
struct byte_reader {
    const uint8_t *     p;
    size_t              size;
    size_t              pos = 0;
    const std::string & path;

    bool    left(size_t n) const { return size - pos >= n; }
    int32_t i32(const char * what) {
        if (!left(4)) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: truncated at byte %zu reading %s", path.c_str(), pos, what);
        int32_t v;
        std::memcpy(&v, p + pos, 4);
        pos += 4;
        return v;
    }
};

ember_imatrix load_legacy(const std::string & path, const uint8_t * data, size_t size) {
    ember_imatrix m;
    m.legacy = true;
    byte_reader r{data, size, 0, path};
    const int32_t n_entries = r.i32("the entry count");
    if (n_entries < 1) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: not an importance matrix (entry count %d)", path.c_str(), n_entries);
    for (int32_t e = 0; e < n_entries; e++) {
        const int32_t len = r.i32("a name length");
        if (len < 1 || len > 4096 || !r.left(size_t(len))) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry %d: bad name length %d", path.c_str(), e, len);
        }
        std::string name(reinterpret_cast<const char *>(data + r.pos), size_t(len));
        r.pos += size_t(len);
        const int32_t ncall = r.i32("a call count");
        const int32_t nval  = r.i32("a value count");
        if (nval < 1 || !r.left(size_t(nval) * 4)) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s': bad value count %d", path.c_str(), name.c_str(), nval);
        }
        std::vector<float> v(static_cast<size_t>(nval));
        std::memcpy(v.data(), data + r.pos, size_t(nval) * 4);
        r.pos += size_t(nval) * 4;
        // The file stores mean * ncall; llama-quantize divides by ncall again.
        if (ncall > 0) {
            for (float & x : v) x /= float(ncall);
        }
        check_finite(path, name, v);
        if (!m.entries.emplace(name, std::move(v)).second) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s' appears twice", path.c_str(), name.c_str());
        }
    }
    // Optional trailer: chunk count and the dataset name.
    if (r.left(4)) {
        m.chunk_count = r.i32("the chunk count");
        if (r.left(4)) {
            const int32_t len = r.i32("the dataset name length");
            if (len > 0 && r.left(size_t(len))) m.datasets.emplace_back(reinterpret_cast<const char *>(data + r.pos), size_t(len));
        }
    }
    return m;
}

bool strip_suffix(std::string & s, const char * suffix) {
    const size_t n = std::strlen(suffix);
    if (s.size() <= n || s.compare(s.size() - n, n, suffix) != 0) return false;
    s.resize(s.size() - n);
    return true;
}

int64_t n_elements(const ember_gguf_tensor_info & t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

ember_imatrix load_gguf(const std::string & path) {
    const std::unique_ptr<ember_gguf_file> f = ember_gguf_open(path);
    ember_imatrix                          m;
    if (const ember_gguf_value * d = f->find("imatrix.datasets")) {
        if (d->type == EMBER_GGUF_ARRAY && d->arr_type == EMBER_GGUF_STRING) m.datasets = d->arr_str;
    }
    if (const ember_gguf_value * c = f->find("imatrix.chunk_count")) {
        if (c->is_integer()) m.chunk_count = static_cast<int32_t>(c->as_i64("imatrix.chunk_count"));
    }
    struct pair {
        const ember_gguf_tensor_info * sum2   = nullptr;
        const ember_gguf_tensor_info * counts = nullptr;
    };
    std::map<std::string, pair> by_name;
    for (const ember_gguf_tensor_info & t : f->tensors) {
        std::string name = t.name;
        if (strip_suffix(name, ".in_sum2")) {
            by_name[name].sum2 = &t;
        } else if (strip_suffix(name, ".counts")) {
            by_name[name].counts = &t;
        }  // NAME.in_sum (plain sums) is not needed for importance
    }
    if (by_name.empty()) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: a GGUF file without importance data (no *.in_sum2 tensors)", path.c_str());
    for (const auto & it : by_name) {
        const std::string & name = it.first;
        const pair &        p    = it.second;
        if (!p.sum2 || !p.counts) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s' has %s but no %s", path.c_str(), name.c_str(),
                        p.sum2 ? "in_sum2" : "counts", p.sum2 ? "counts" : "in_sum2");
        }
        if (p.sum2->type != EMBER_TYPE_F32 || p.counts->type != EMBER_TYPE_F32) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s': sums and counts must be F32", path.c_str(), name.c_str());
        }
        const int64_t nval = n_elements(*p.sum2), ncounts = n_elements(*p.counts);
        if (nval < 1 || ncounts < 1 || nval % ncounts != 0) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s': %" PRId64 " sums do not split into %" PRId64 " matrices", path.c_str(),
                        name.c_str(), nval, ncounts);
        }
        const float * sums   = reinterpret_cast<const float *>(f->tensor_data(*p.sum2));
        const float * counts = reinterpret_cast<const float *>(f->tensor_data(*p.counts));
        if (!sums || !counts) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: entry '%s': data outside the file", path.c_str(), name.c_str());
        const int64_t      ne0 = nval / ncounts;
        std::vector<float> v(static_cast<size_t>(nval));
        for (int64_t j = 0; j < ncounts; j++) {
            float c;
            std::memcpy(&c, counts + j, sizeof(float));
            const float n = float(std::lround(c));
            for (int64_t i = 0; i < ne0; i++) {
                float s;
                std::memcpy(&s, sums + j * ne0 + i, sizeof(float));
                // A matrix no activation reached (an expert never routed to) gets uniform weights.
                v[size_t(j * ne0 + i)] = n > 0 ? s / n : 1.0f;
            }
        }
        check_finite(path, name, v);
        m.entries.emplace(name, std::move(v));
    }
    return m;
}

}  // namespace

ember_imatrix ember_imatrix_load(const std::string & path) {
    ember_mapped_file file(path, /*use_mmap=*/true);
    if (file.size() >= 4 && std::memcmp(file.data(), "GGUF", 4) == 0) return load_gguf(path);
    return load_legacy(path, file.data(), file.size());
}
