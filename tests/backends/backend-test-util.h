// Shared helpers of the backend tests: a graph plus one CPU buffer holding every tensor of
// it, seeded random data, an independent float64 dequantizer, and the NMSE metric.
#ifndef EMBER_TESTS_BACKEND_TEST_UTIL_H
#define EMBER_TESTS_BACKEND_TEST_UTIL_H

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend.h"
#include "graph.h"

namespace ember_test {

// Places every tensor of g's arena that owns memory (no view_src) at aligned offsets of one
// fresh buffer of dev's buffer type, then points views into their sources. The caller owns
// (and frees) the buffer.
inline ember_buffer * place_graph(ember_graph & g, ember_device * dev) {
    ember_buffer_type * buft  = ember_device_buffer_type(dev);
    const size_t        align = ember_buffer_type_alignment(buft);
    size_t              total = 0;
    for (ember_tensor & t : g.arena) {
        if (t.view_src) continue;
        total += (ember_buffer_type_alloc_size(buft, &t) + align - 1) / align * align;
    }
    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(buft, total, &buf) == EMBER_OK);
    size_t offs = 0;
    for (ember_tensor & t : g.arena) {
        if (t.view_src) continue;
        ember_buffer_place_tensor(buf, &t, offs);
        offs += (ember_buffer_type_alloc_size(buft, &t) + align - 1) / align * align;
    }
    for (ember_tensor & t : g.arena) {
        if (!t.view_src) continue;
        t.buffer = t.view_src->buffer;
        t.data   = static_cast<char *>(t.view_src->data) + t.view_offs;
    }
    return buf;
}

// One graph, its tensors in one CPU buffer, and a CPU stream.
struct cpu_graph {
    ember_graph    g;
    ember_buffer * buf    = nullptr;
    ember_stream * stream = nullptr;

    explicit cpu_graph(int n_threads = 1) {
        ember_stream_params p = {n_threads};
        REQUIRE(ember_device_init_stream(ember_registry_cpu_device(), &p, &stream) == EMBER_OK);
    }
    ~cpu_graph() {
        ember_buffer_free(buf);
        ember_stream_free(stream);
    }
    cpu_graph(const cpu_graph &)             = delete;
    cpu_graph & operator=(const cpu_graph &) = delete;

    // Every tensor of the graph in one fresh CPU buffer (place_graph).
    void alloc() {
        ember_buffer_free(buf);
        buf = nullptr;
        buf = place_graph(g, ember_registry_cpu_device());
    }

    // Every node of the graph.
    ember_status compute() {
        return stream->iface.graph_compute(stream, &g, 0, (int32_t) g.nodes.size());
    }
};

// A row length that is whole blocks of `type`: odd for float types (33), 96 for the 32-element
// quants, 256 for the K-quants.
inline int64_t row_len(ember_type type) {
    const int64_t b = ember_type_get_traits(type)->block_size;
    return b == 1 ? 33 : b == 32 ? 96 : b;
}

inline std::vector<float> random_f32(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937                          rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float>                    v(n);
    for (float & x : v) x = dist(rng);
    return v;
}

// F32 data into an F32 tensor, or converted with the type's from_float for any other type.
inline void set_floats(ember_tensor * t, const std::vector<float> & v) {
    REQUIRE((int64_t) v.size() == ember_nelements(t));
    REQUIRE(ember_is_contiguous(t));
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    REQUIRE(static_cast<bool>(tr->from_float));
    std::vector<uint8_t> bytes(ember_nbytes(t));
    tr->from_float(v.data(), bytes.data(), (int64_t) v.size());
    ember_tensor_set(t, bytes.data(), 0, bytes.size());
}

inline void set_i32(ember_tensor * t, const std::vector<int32_t> & v) {
    REQUIRE(t->type == EMBER_TYPE_I32);
    REQUIRE((int64_t) v.size() == ember_nelements(t));
    ember_tensor_set(t, v.data(), 0, v.size() * sizeof(int32_t));
}

inline std::vector<uint8_t> get_bytes(const ember_tensor * t) {
    std::vector<uint8_t> bytes(ember_nbytes(t));
    ember_tensor_get(t, bytes.data(), 0, bytes.size());
    return bytes;
}

inline std::vector<float> get_f32(const ember_tensor * t) {
    REQUIRE(t->type == EMBER_TYPE_F32);
    REQUIRE(ember_is_contiguous(t));
    std::vector<float> v(ember_nelements(t));
    ember_tensor_get(t, v.data(), 0, v.size() * sizeof(float));
    return v;
}

// Test-side decoders, written from the block layouts in quant/blocks.h, independent of the
// codecs under test: n elements of `type` at p, in double. (K-quants use their to_float.)
inline std::vector<double> ref_dequant(ember_type type, const void * p, int64_t n) {
    std::vector<double> out(n);
    const uint8_t *     b = static_cast<const uint8_t *>(p);
    auto half = [](const uint8_t * h) { return (double) ember_half_to_float((ember_half) (h[0] | (h[1] << 8))); };
    for (int64_t i = 0; i < n; i++) {
        switch (type) {
            case EMBER_TYPE_F32: {
                float f;
                std::memcpy(&f, b + 4 * i, 4);
                out[i] = f;
                break;
            }
            case EMBER_TYPE_F16: out[i] = half(b + 2 * i); break;
            case EMBER_TYPE_BF16: {
                const uint32_t bits = (uint32_t) (b[2 * i] | (b[2 * i + 1] << 8)) << 16;
                float          f;
                std::memcpy(&f, &bits, 4);
                out[i] = f;
                break;
            }
            case EMBER_TYPE_Q8_0: {
                const uint8_t * blk = b + (i / 32) * 34;
                out[i]              = half(blk) * (double) (int8_t) blk[2 + i % 32];
                break;
            }
            case EMBER_TYPE_Q4_0: {
                const uint8_t * blk = b + (i / 32) * 18;
                const int       j   = (int) (i % 32);
                const int       q   = j < 16 ? (blk[2 + j] & 0x0f) : (blk[2 + j - 16] >> 4);
                out[i]              = half(blk) * (double) (q - 8);
                break;
            }
            default: {
                // K-quants: the type's own to_float (checked against float64 in tests/quant)
                std::vector<float> f(n);
                ember_type_get_traits(type)->to_float(p, f.data(), n);
                for (int64_t j = 0; j < n; j++) out[j] = f[j];
                return out;
            }
        }
    }
    return out;
}

// Values as the type stores them: from_float then the test-side decoder.
inline std::vector<double> round_through(ember_type type, const std::vector<float> & v) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    std::vector<uint8_t>      bytes(ember_row_size(type, (int64_t) v.size()));
    tr->from_float(v.data(), bytes.data(), (int64_t) v.size());
    return ref_dequant(type, bytes.data(), (int64_t) v.size());
}

// Normalized mean squared error of `got` against the reference `want`: mse(got, want) / mse(want, 0).
template <typename A, typename B> double nmse(const std::vector<A> & got, const std::vector<B> & want) {
    REQUIRE(got.size() == want.size());
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double d = (double) got[i] - (double) want[i];
        err += d * d;
        ref += (double) want[i] * (double) want[i];
    }
    return ref > 0.0 ? err / ref : err;
}


// A small transformer block touching every op, with weights of every type and two cache types.
// Sizes: n_embd 128, 4 heads of 32 over 2 kv heads, 5 tokens at cells 3..7 of a 12-cell cache.
struct block_graph {
    ember_tensor * out     = nullptr;  // F32 [128, 5]
    ember_tensor * out_f16 = nullptr;  // the same, copied to F16
    ember_tensor * k_cache = nullptr;
    ember_tensor * v_cache = nullptr;
};

inline block_graph build_block(cpu_graph & G, uint32_t seed = 1) {
    ember_graph & g = G.g;
    const int64_t n_embd = 128, d = 32, n_head = 4, n_head_kv = 2, n_tok = 5, n_ctx = 12, n_kv = 8, n_ff = 96;
    block_graph   b;
    ember_tensor * tok_embd = g.new_tensor(EMBER_TYPE_Q8_0, n_embd, 37);
    ember_tensor * tokens   = g.new_tensor(EMBER_TYPE_I32, n_tok);
    ember_tensor * norm_w   = g.new_tensor(EMBER_TYPE_F32, n_embd);
    ember_tensor * wq       = g.new_tensor(EMBER_TYPE_Q4_0, n_embd, n_embd);
    ember_tensor * wk       = g.new_tensor(EMBER_TYPE_F16, n_embd, d * n_head_kv);
    ember_tensor * wv       = g.new_tensor(EMBER_TYPE_BF16, n_embd, d * n_head_kv);
    ember_tensor * wo       = g.new_tensor(EMBER_TYPE_F32, n_embd, n_embd);
    ember_tensor * wg       = g.new_tensor(EMBER_TYPE_Q4_0, n_embd, n_ff);
    ember_tensor * wu       = g.new_tensor(EMBER_TYPE_Q8_0, n_embd, n_ff);
    ember_tensor * wd       = g.new_tensor(EMBER_TYPE_Q8_0, n_ff, n_embd);
    ember_tensor * pos      = g.new_tensor(EMBER_TYPE_I32, n_tok);
    ember_tensor * cells    = g.new_tensor(EMBER_TYPE_I32, n_tok);
    ember_tensor * mask     = g.new_tensor(EMBER_TYPE_F32, n_kv, n_tok);
    ember_tensor * freq     = g.new_tensor(EMBER_TYPE_F32, d / 2);
    b.k_cache               = g.new_tensor(EMBER_TYPE_F16, d * n_head_kv, n_ctx);
    b.v_cache               = g.new_tensor(EMBER_TYPE_Q8_0, d * n_head_kv, n_ctx);

    ember_tensor * x  = ember_get_rows(g, tok_embd, tokens);                                 // [128, 5]
    ember_tensor * h  = ember_mul(g, ember_rms_norm(g, x, 1e-5f), norm_w);
    ember_tensor * q  = ember_view(g, ember_mul_mat(g, wq, h), d, n_head, n_tok);            // [32, 4, 5]
    ember_tensor * k  = ember_view(g, ember_mul_mat(g, wk, h), d, n_head_kv, n_tok);         // [32, 2, 5]
    ember_tensor * v  = ember_mul_mat(g, wv, h);                                             // [64, 5]
    q                 = ember_rope(g, q, pos, nullptr, d, EMBER_ROPE_NEOX, 10000.0f, 1.0f);
    k                 = ember_rope(g, k, pos, freq, d, EMBER_ROPE_NORMAL, 10000.0f, 0.5f);
    ember_tensor * sk = ember_set_rows(g, b.k_cache, ember_view(g, k, d * n_head_kv, n_tok), cells);
    ember_tensor * sv = ember_set_rows(g, b.v_cache, v, cells);
    ember_tensor * kv = ember_view(g, sk, d, n_head_kv, n_kv);                               // cells 0..7
    ember_tensor * vv = ember_view(g, sv, d, n_head_kv, n_kv);
    ember_tensor * a  = ember_attn(g, q, kv, vv, mask, 1.0f / std::sqrt((float) d));         // [32, 4, 5]
    ember_tensor * r  = ember_add(g, x, ember_mul_mat(g, wo, ember_view(g, a, n_embd, n_tok)));
    ember_tensor * ff = ember_swiglu(g, ember_mul_mat(g, wg, r), ember_mul_mat(g, wu, r));   // [96, 5]
    b.out             = ember_scale(g, ember_add(g, r, ember_mul_mat(g, wd, ff)), 0.5f);
    b.out_f16         = ember_cpy(g, b.out, EMBER_TYPE_F16);
    g.build_forward(b.out);
    g.build_forward(b.out_f16);
    G.alloc();

    uint32_t s = seed;
    for (ember_tensor * t : g.leafs) {
        if (t->type != EMBER_TYPE_I32 && t != mask && t != freq) set_floats(t, random_f32(ember_nelements(t), s++, -0.5f, 0.5f));
    }
    set_floats(freq, random_f32(d / 2, s++, 1.0f, 4.0f));
    set_i32(tokens, {5, 36, 0, 5, 17});
    set_i32(pos, {3, 4, 5, 6, 7});
    set_i32(cells, {3, 4, 5, 6, 7});
    std::vector<float> m(n_kv * n_tok, 0.0f);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t j = 0; j < n_kv; j++)
            if (j > 3 + t) m[t * n_kv + j] = -INFINITY;
    set_floats(mask, m);
    return b;
}

// A weight that a device converts to its own layout at upload (its `flag`): one of `type`,
// ne0 x rows, flagged EMBER_TENSOR_FLAG_WEIGHT, alone in a buffer of dev, set whole with
// arbitrary bytes. Then it must carry the flag and give its bytes back; a partial write inside
// row 1 (through the file bytes) and a partial read from inside row 2 must see the file bytes.
inline void check_converted_weight_io(ember_device * dev, ember_type type, int64_t ne0, int64_t rows, uint32_t flag) {
    ember_graph    g;
    ember_tensor * w = g.new_tensor(type, ne0, rows);
    w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), ember_nbytes(w), &buf) == EMBER_OK);
    ember_buffer_place_tensor(buf, w, 0);
    std::vector<uint8_t> bytes(ember_nbytes(w));
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 11);
    ember_tensor_set(w, bytes.data(), 0, bytes.size());
    CHECK((w->flags & flag) != 0);
    std::vector<uint8_t> back(bytes.size());
    ember_tensor_get(w, back.data(), 0, back.size());
    CHECK(back == bytes);
    const size_t         rs = w->nb[1];
    std::vector<uint8_t> patch(rs / 2, 0x11);
    ember_tensor_set(w, patch.data(), rs + rs / 4, patch.size());
    std::memcpy(bytes.data() + rs + rs / 4, patch.data(), patch.size());
    ember_tensor_get(w, back.data(), 0, back.size());
    CHECK(back == bytes);
    std::vector<uint8_t> part(rs - 7);
    ember_tensor_get(w, part.data(), 2 * rs + 7, part.size());
    CHECK(std::memcmp(part.data(), bytes.data() + 2 * rs + 7, part.size()) == 0);
    ember_buffer_free(buf);
}

}  // namespace ember_test

#endif  // EMBER_TESTS_BACKEND_TEST_UTIL_H
