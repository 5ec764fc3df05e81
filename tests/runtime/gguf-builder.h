// Byte-level GGUF builder for tests: writes exactly what it is told, valid or not, so tests
// can hand-craft the malformed files that ember_gguf_writer refuses to produce.
#ifndef EMBER_TESTS_GGUF_BUILDER_H
#define EMBER_TESTS_GGUF_BUILDER_H

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

struct gguf_builder {
    std::vector<uint8_t> b;

    gguf_builder & raw(const void * p, size_t n) {
        const uint8_t * s = static_cast<const uint8_t *>(p);
        b.insert(b.end(), s, s + n);
        return *this;
    }
    template <typename T> gguf_builder & put(T v) { return raw(&v, sizeof(T)); }
    gguf_builder & u8(uint8_t v) { return put(v); }
    gguf_builder & u32(uint32_t v) { return put(v); }
    gguf_builder & u64(uint64_t v) { return put(v); }
    gguf_builder & str(const std::string & s) { return u64(s.size()).raw(s.data(), s.size()); }
    gguf_builder & zeros(size_t n) { b.resize(b.size() + n, 0); return *this; }
    gguf_builder & pad(size_t align) { b.resize((b.size() + align - 1) / align * align, 0); return *this; }

    // magic, version, tensor count, kv count
    gguf_builder & header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
    }
    // A key and its value type; the caller appends the value.
    gguf_builder & key(const std::string & k, uint32_t type) { return str(k).u32(type); }
    gguf_builder & kv_u32(const std::string & k, uint32_t v) { return key(k, 4).u32(v); }
    gguf_builder & kv_str(const std::string & k, const std::string & v) { return key(k, 8).str(v); }
    // A tensor info: name, n_dims, ne..., ggml type id, offset.
    gguf_builder & tensor(const std::string & name, std::initializer_list<uint64_t> ne, uint32_t type,
                          uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t n : ne) u64(n);
        return u32(type).u64(offset);
    }
};

#endif  // EMBER_TESTS_GGUF_BUILDER_H
