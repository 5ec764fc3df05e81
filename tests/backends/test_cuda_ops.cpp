// The CUDA backend against the CPU backend: every op and type on seeded random data, the same
// graph run on each device (all tensors in that device's memory), compared by NMSE. Compiled
// only when the CUDA backend is built; skips with a message when there is no CUDA device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "graph.h"

namespace {

struct leaf_data {
    ember_tensor *       t;
    std::vector<uint8_t> bytes;
};

struct case_ctx {
    ember_graph &            g;
    std::vector<leaf_data> & leaves;
    std::mt19937             rng;

    // A leaf of `type` holding uniform values in [lo, hi), encoded with the type's codec.
    ember_tensor * rand_leaf(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, float lo = -1.0f, float hi = 1.0f) {
        ember_tensor *                        t = g.new_tensor(type, ne0, ne1, ne2);
        std::vector<float>                    v(static_cast<size_t>(ne0 * ne1 * ne2));
        std::uniform_real_distribution<float> u(lo, hi);
        for (float & x : v) x = u(rng);
        std::vector<uint8_t> b(ember_nbytes(t));
        const int64_t        rows = ne1 * ne2;
        for (int64_t r = 0; r < rows; r++) {
            ember_type_get_traits(type)->from_float(v.data() + r * ne0, b.data() + r * t->nb[1], ne0);
        }
        leaves.push_back({t, std::move(b)});
        return t;
    }
    // A random leaf flagged as a model weight: the CUDA backend converts Q4_0 and Q8_0 ones
    // to its own layout when they are uploaded (cuda-repack.h); the CPU ignores the flag.
    ember_tensor * weight_leaf(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
        ember_tensor * t = rand_leaf(type, ne0, ne1, ne2);
        t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        return t;
    }
    ember_tensor * i32_leaf(const std::vector<int32_t> & ids) {
        ember_tensor *       t = g.new_tensor(EMBER_TYPE_I32, static_cast<int64_t>(ids.size()));
        std::vector<uint8_t> b(ids.size() * 4);
        std::memcpy(b.data(), ids.data(), b.size());
        leaves.push_back({t, std::move(b)});
        return t;
    }
    ember_tensor * f32_leaf(const std::vector<float> & v, int64_t ne0, int64_t ne1) {
        ember_tensor *       t = g.new_tensor(EMBER_TYPE_F32, ne0, ne1);
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        leaves.push_back({t, std::move(b)});
        return t;
    }
};

using builder = std::function<ember_tensor *(case_ctx &)>;

// Runs the graph of `build` with every tensor in `dev`'s memory once per seed, on one stream,
// the leaves refilled with that seed's data before each run (later runs on the CUDA stream
// replay a recorded CUDA graph); returns the outputs as floats.
std::vector<std::vector<float>> run_on_n(ember_device * dev, const builder & build, const std::vector<uint32_t> & seeds) {
    const uint32_t         seed = seeds.at(0);
    ember_graph            g;
    std::vector<leaf_data> leaves;
    case_ctx               cc{g, leaves, std::mt19937(seed)};
    ember_tensor *         out = build(cc);
    g.build_forward(out);

    ember_buffer_type * buft  = ember_device_buffer_type(dev);
    const size_t        align = ember_buffer_type_alignment(buft);
    size_t              total = 0;
    for (ember_tensor & t : g.arena) {
        if (!t.view_src) total += (ember_buffer_type_alloc_size(buft, &t) + align - 1) / align * align;
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
    buf->iface.clear(buf, 0);
    for (leaf_data & l : leaves) ember_tensor_set(l.t, l.bytes.data(), 0, l.bytes.size());

    ember_stream_params sp{};
    sp.n_threads     = 2;
    ember_stream * s = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &s) == EMBER_OK);
    std::vector<std::vector<float>> results;
    for (size_t run = 0; run < seeds.size(); run++) {
        if (run > 0) {  // the same builder with another seed: same shapes, new values
            ember_graph            g2;
            std::vector<leaf_data> leaves2;
            case_ctx               cc2{g2, leaves2, std::mt19937(seeds[run])};
            build(cc2);
            REQUIRE(leaves2.size() == leaves.size());
            for (size_t i = 0; i < leaves.size(); i++) ember_tensor_set(leaves[i].t, leaves2[i].bytes.data(), 0, leaves2[i].bytes.size());
        }
        const ember_status st = s->iface.graph_compute(s, &g, 0, static_cast<int32_t>(g.nodes.size()));
        s->iface.synchronize(s);
        CHECK(st == EMBER_OK);

        std::vector<uint8_t> bytes(ember_nbytes(out));
        ember_tensor_get(out, bytes.data(), 0, bytes.size());
        std::vector<float> res(static_cast<size_t>(ember_nelements(out)));
        const int64_t      rows = ember_nrows(out);
        for (int64_t r = 0; r < rows; r++) {
            ember_type_get_traits(out->type)->to_float(bytes.data() + r * out->nb[1], res.data() + r * out->ne[0], out->ne[0]);
        }
        results.push_back(std::move(res));
    }
    ember_stream_free(s);
    ember_buffer_free(buf);
    return results;
}

std::vector<float> run_on(ember_device * dev, const builder & build, uint32_t seed) {
    return run_on_n(dev, build, {seed})[0];
}

double nmse(const std::vector<float> & got, const std::vector<float> & want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const double d = static_cast<double>(got[i]) - want[i];
        num += d * d;
        den += static_cast<double>(want[i]) * want[i];
    }
    return den > 0 ? num / den : num;
}

ember_device * cuda_device() {
    return ember_registry_find_device("cuda");
}

void check_case(const std::string & what, const builder & build, double tol, uint32_t seed = 1234) {
    CAPTURE(what);
    const std::vector<float> want = run_on(ember_registry_cpu_device(), build, seed);
    const std::vector<float> got  = run_on(cuda_device(), build, seed);
    REQUIRE(got.size() == want.size());
    bool finite = true;
    for (float v : got) finite = finite && std::isfinite(v);
    CHECK(finite);
    const double e = nmse(got, want);
    CAPTURE(e);
    CHECK(e < tol);
}

// Runs `build` on the CPU and on the GPU for each seed in turn (one stream each) and compares.
void check_runs(const std::string & what, const builder & build, double tol, const std::vector<uint32_t> & seeds) {
    CAPTURE(what);
    const auto want = run_on_n(ember_registry_cpu_device(), build, seeds);
    const auto got  = run_on_n(cuda_device(), build, seeds);
    REQUIRE(got.size() == want.size());
    for (size_t r = 0; r < got.size(); r++) {
        CAPTURE(r);
        REQUIRE(got[r].size() == want[r].size());
        bool finite = true;
        for (float v : got[r]) finite = finite && std::isfinite(v);
        CHECK(finite);
        const double e = nmse(got[r], want[r]);
        CAPTURE(e);
        CHECK(e < tol);
        if (r > 0) CHECK(got[r] != got[r - 1]);  // new data gave new results (not a stale replay)
    }
}

void set_env(const char * name, const char * value) {
#ifdef _WIN32
    _putenv_s(name, value);
#else
    setenv(name, value, 1);
#endif
}

const ember_type k_weight_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,  EMBER_TYPE_BF16, EMBER_TYPE_Q4_0,   EMBER_TYPE_Q4_1,
                                     EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K,   EMBER_TYPE_Q3_K,
                                     EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS,
                                     // Ember's own types (row groups: NF4 headers, per-row FP8 scales)
                                     EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,
                                     EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};
const ember_type k_kv_types[] = {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0};

bool is_float(ember_type t) {
    return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_BF16;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cuda] the CUDA backend matches the CPU on every op and type") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    MESSAGE("CUDA device: " << std::string(ember_device_get_name(cuda_device())));

    SUBCASE("elementwise") {
        check_case("rms_norm", [](case_ctx & c) { return ember_rms_norm(c.g, c.rand_leaf(EMBER_TYPE_F32, 96, 5, 2), 1e-5f); }, 1e-10);
        check_case("mul broadcast", [](case_ctx & c) {
            return ember_mul(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 64));
        }, 1e-12);
        check_case("add same shape", [](case_ctx & c) {
            return ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2));
        }, 1e-12);
        check_case("add broadcast dim 1", [](case_ctx & c) {
            return ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 32, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 32, 1, 2));
        }, 1e-12);
        check_case("swiglu", [](case_ctx & c) {
            return ember_swiglu(c.g, c.rand_leaf(EMBER_TYPE_F32, 50, 7, 1, -4, 4), c.rand_leaf(EMBER_TYPE_F32, 50, 7));
        }, 1e-10);
        check_case("scale", [](case_ctx & c) { return ember_scale(c.g, c.rand_leaf(EMBER_TYPE_F32, 33, 3), 0.37f); }, 1e-12);
        check_case("scale of a strided view", [](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 64, 6);
            const int64_t  ne[4] = {32, 6, 1, 1};
            const size_t   nb[4] = {4, a->nb[1], a->nb[1] * 6, a->nb[1] * 6};
            return ember_scale(c.g, ember_view_strided(c.g, a, ne, nb, 16 * 4), -2.0f);
        }, 1e-12);
    }

    SUBCASE("rope") {
        for (int mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
            for (int n_rot : {64, 32}) {
                for (bool ff : {false, true}) {
                    const std::string what = "rope mode " + std::to_string(mode) + " n_rot " + std::to_string(n_rot) + (ff ? " with factors" : "");
                    check_case(what, [=](case_ctx & c) {
                        ember_tensor * a   = c.rand_leaf(EMBER_TYPE_F32, 64, 4, 5);
                        ember_tensor * pos = c.i32_leaf({0, 1, 7, 300, 4095});
                        ember_tensor * f   = ff ? c.rand_leaf(EMBER_TYPE_F32, n_rot / 2, 1, 1, 1.0f, 8.0f) : nullptr;
                        return ember_rope(c.g, a, pos, f, n_rot, mode, 10000.0f, 0.5f);
                    }, 1e-8);
                }
            }
        }
    }

    SUBCASE("get_rows") {
        for (ember_type t : k_weight_types) {
            check_case(std::string("get_rows ") + ember_type_get_name(t), [=](case_ctx & c) {
                return ember_get_rows(c.g, c.rand_leaf(t, 256, 10), c.i32_leaf({3, 0, 9, 3}));
            }, 1e-12);
        }
        check_case("get_rows f32 odd rows", [](case_ctx & c) {
            return ember_get_rows(c.g, c.rand_leaf(EMBER_TYPE_F32, 37, 5), c.i32_leaf({4, 1}));
        }, 1e-12);
    }

    SUBCASE("mul_mat") {
        for (ember_type t : k_weight_types) {
            for (int64_t m : {1, 3, 17}) {
                const std::string what = std::string("mul_mat ") + ember_type_get_name(t) + " m=" + std::to_string(m);
                // The CPU rounds activations to the weight's vec_dot_type (Q8_0, Q8_K, F16...).
                check_case(what, [=](case_ctx & c) {
                    return ember_mul_mat(c.g, c.rand_leaf(t, 512, 40), c.rand_leaf(EMBER_TYPE_F32, 512, m));
                }, is_float(t) ? 1e-5 : 1e-3);
            }
        }
        for (int64_t m : {1, 17}) {
            check_case("mul_mat f32 k=100 m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 33), c.rand_leaf(EMBER_TYPE_F32, 100, m));
            }, 1e-10);
            check_case("mul_mat f16 k=100 m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F16, 100, 33), c.rand_leaf(EMBER_TYPE_F32, 100, m));
            }, 1e-5);
            check_case("mul_mat batched broadcast m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 64, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 64, m, 4));
            }, 1e-3);
        }
    }

    SUBCASE("set_rows and cpy") {
        for (ember_type t : k_kv_types) {
            // Index 5 repeats: its last row wins.
            check_case(std::string("set_rows ") + ember_type_get_name(t), [=](case_ctx & c) {
                ember_tensor * dst = c.rand_leaf(t, 64, 12);
                return ember_set_rows(c.g, dst, c.rand_leaf(EMBER_TYPE_F32, 64, 3), c.i32_leaf({5, 0, 5}));
            }, 1e-6);
            check_case(std::string("cpy f32 -> ") + ember_type_get_name(t), [=](case_ctx & c) {
                return ember_cpy(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6), t);
            }, 1e-6);
            check_case(std::string("cpy ") + ember_type_get_name(t) + " -> f32", [=](case_ctx & c) {
                return ember_cpy(c.g, c.rand_leaf(t, 64, 6), EMBER_TYPE_F32);
            }, 1e-12);
        }
        check_case("cpy q4_k -> f16", [](case_ctx & c) { return ember_cpy(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 256, 3), EMBER_TYPE_F16); }, 1e-6);
    }

    SUBCASE("attn") {
        for (ember_type tk : k_kv_types) {
            for (int64_t d : {64, 128}) {
                for (bool masked : {false, true}) {
                    const std::string what = std::string("attn ") + ember_type_get_name(tk) + " d=" + std::to_string(d) + (masked ? " masked" : "");
                    check_case(what, [=](case_ctx & c) {
                        const int64_t n_kv = 37, n_tok = 3;
                        ember_tensor * q = c.rand_leaf(EMBER_TYPE_F32, d, 8, n_tok);
                        ember_tensor * k = c.rand_leaf(tk, d, 2, n_kv);
                        ember_tensor * v = c.rand_leaf(tk, d, 2, n_kv);
                        ember_tensor * mask = nullptr;
                        if (masked) {
                            // causal over the last n_tok keys; the last token row also hides key 0
                            std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
                            for (int64_t t = 0; t < n_tok; t++) {
                                for (int64_t j = 0; j < n_kv; j++) {
                                    if (j > n_kv - n_tok + t || (t == n_tok - 1 && j == 0)) mv[t * n_kv + j] = -INFINITY;
                                }
                            }
                            mask = c.f32_leaf(mv, n_kv, n_tok);
                        }
                        return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(d)));
                    }, 1e-8);
                }
            }
        }
        check_case("attn every key hidden gives zeros", [](case_ctx & c) {
            std::vector<float> mv(5 * 2, -INFINITY);
            return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 2), c.rand_leaf(EMBER_TYPE_F16, 64, 4, 5),
                              c.rand_leaf(EMBER_TYPE_F16, 64, 4, 5), c.f32_leaf(mv, 5, 2), 0.125f);
        }, 1e-12);
    }
}

TEST_CASE("[cuda] decode: integer matvec, reused quantized activations, CUDA graph replay") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // The integer-kernel types at model-like widths, odd row counts (a block's row tail) and
    // a type on the generic path.
    const ember_type types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K,
                                EMBER_TYPE_Q6_K, EMBER_TYPE_Q4_1, EMBER_TYPE_NF4,  EMBER_TYPE_FP8_E4M3_ROW};
    for (ember_type t : types) {
        for (int64_t m : {1, 2, 5}) {
            for (int64_t n : {67, 1}) {
                check_case(std::string("matvec ") + ember_type_get_name(t) + " k=2048 n=" + std::to_string(n) + " m=" + std::to_string(m),
                           [=](case_ctx & c) {
                               return ember_mul_mat(c.g, c.rand_leaf(t, 2048, n), c.rand_leaf(EMBER_TYPE_F32, 2048, m, 1, -3.0f, 3.0f));
                           }, 1e-3);
            }
        }
        check_case(std::string("matvec ") + ember_type_get_name(t) + " of a strided x view", [=](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 512, 6);
            const int64_t  ne[4] = {512, 3, 1, 1};
            const size_t   nb[4] = {4, a->nb[1] * 2, a->nb[1] * 6, a->nb[1] * 6};
            return ember_mul_mat(c.g, c.rand_leaf(t, 512, 9), ember_view_strided(c.g, a, ne, nb, a->nb[1]));
        }, 1e-3);
    }
    // NF4 rows longer than one group of 256 blocks: a second group header mid-row.
    check_case("get_rows nf4 two groups", [](case_ctx & c) {
        return ember_get_rows(c.g, c.rand_leaf(EMBER_TYPE_NF4, 64 * 260, 3), c.i32_leaf({2, 0}));
    }, 1e-12);
    check_case("matvec nf4 two groups", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_NF4, 64 * 260, 5), c.rand_leaf(EMBER_TYPE_F32, 64 * 260, 2));
    }, 1e-3);
    check_case("matvec batched broadcast q4_k", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
    }, 1e-3);
    // Three matvecs over one x (the quantized copy is reused), then one over a new tensor.
    check_case("matvecs sharing x", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
        ember_tensor * a  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_0, 1024, 64), x);
        ember_tensor * b  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, 1024, 64), x);
        ember_tensor * d  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 1024, 64), x);
        ember_tensor * x2 = ember_scale(c.g, x, -0.5f);
        ember_tensor * e  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_0, 1024, 64), x2);
        return ember_add(c.g, ember_add(c.g, a, b), ember_add(c.g, d, e));
    }, 1e-3);
    // Decode attention with the keys split across blocks (n_kv >= 128, few query rows); the
    // mask hides keys 0..199, so whole splits see no key, and a causal tail.
    for (ember_type tk : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        for (int64_t n_tok : {1, 2}) {
            check_case(std::string("attn split ") + ember_type_get_name(tk) + " n_tok=" + std::to_string(n_tok), [=](case_ctx & c) {
                const int64_t      n_kv = 700, d = 128;
                std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
                for (int64_t t = 0; t < n_tok; t++) {
                    for (int64_t j = 0; j < n_kv; j++) {
                        if (j < 200 || j > n_kv - n_tok + t) mv[t * n_kv + j] = -INFINITY;
                    }
                }
                return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, d, 8, n_tok), c.rand_leaf(tk, d, 2, n_kv), c.rand_leaf(tk, d, 2, n_kv),
                                  c.f32_leaf(mv, n_kv, n_tok), 1.0f / std::sqrt(static_cast<float>(d)));
            }, 1e-8);
        }
    }
    check_case("attn split unmasked", [](case_ctx & c) {
        return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 1), c.rand_leaf(EMBER_TYPE_F16, 64, 4, 1000),
                          c.rand_leaf(EMBER_TYPE_F16, 64, 4, 1000), nullptr, 0.125f);
    }, 1e-8);
    // A layer-like graph run four times on one stream with new data each time: the first run
    // is eager, the second records a CUDA graph, the others replay it (CUDA graphs are on unless
    // EMBER_CUDA_GRAPHS=0, read when a stream is made). And the same without graphs.
    set_env("EMBER_CUDA_GRAPHS", "1");
    check_runs("decode layer replayed", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
        ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 1024, 1));
        ember_tensor * gt = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 1024, 512), h);
        ember_tensor * up = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q5_0, 1024, 512), h);
        ember_tensor * dn = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, 512, 1024), ember_swiglu(c.g, gt, up));
        return ember_add(c.g, x, dn);
    }, 1e-3, {11, 12, 13, 14});
    set_env("EMBER_CUDA_GRAPHS", "0");
    check_runs("decode layer eager", [](case_ctx & c) {
        ember_tensor * x = c.rand_leaf(EMBER_TYPE_F32, 512, 1);
        ember_tensor * h = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 512, 1));
        return ember_add(c.g, x, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 512, 512), h));
    }, 1e-3, {21, 22, 23});
    set_env("EMBER_CUDA_GRAPHS", "");
}

// Prefill attention (at least 16 query tokens: the tiled flash-attention kernel for head sizes
// 64/96/128 with K and V of one type, the simple kernel otherwise): lengths around the 32-key
// and 32-row tiles, GQA groups of 1, 4 and 8, causal masks after a cached prefix, no mask, rows
// that see no key at all, finite additive mask values, and whole key tiles hidden.
TEST_CASE("[cuda] prefill attention: tiles, GQA, masks") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    enum mask_kind { k_causal, k_none, k_causal_hidden_rows, k_bias, k_window };
    struct shape {
        int64_t   d, n_head, n_head_kv, n_tok, n_kv;
        mask_kind mk;
    };
    const shape shapes[] = {
        {64, 8, 2, 16, 16, k_causal},       {64, 8, 2, 45, 82, k_causal},        {128, 8, 2, 100, 100, k_causal},
        {128, 4, 4, 33, 70, k_none},        {64, 8, 1, 17, 300, k_causal_hidden_rows}, {96, 6, 3, 40, 40, k_bias},
        {128, 8, 2, 64, 260, k_window},     {64, 2, 2, 130, 130, k_causal},      {80, 4, 2, 20, 20, k_causal},
    };
    const ember_type kv_types[] = {EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_F32, EMBER_TYPE_BF16, EMBER_TYPE_Q4_0};
    for (const shape & sh : shapes) {
        for (ember_type tk : kv_types) {
            if (tk != EMBER_TYPE_F16 && tk != EMBER_TYPE_Q8_0 && sh.d != 128) continue;  // every type once, at d = 128
            if (sh.d % 32 != 0 && tk != EMBER_TYPE_F16) continue;                        // block types need rows of 32
            const std::string what = std::string("prefill attn ") + ember_type_get_name(tk) + " d=" + std::to_string(sh.d) + " heads " +
                                     std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " n_tok=" + std::to_string(sh.n_tok) +
                                     " n_kv=" + std::to_string(sh.n_kv) + " mask " + std::to_string(sh.mk);
            check_case(what, [=](case_ctx & c) {
                ember_tensor * q    = c.rand_leaf(EMBER_TYPE_F32, sh.d, sh.n_head, sh.n_tok);
                ember_tensor * k    = c.rand_leaf(tk, sh.d, sh.n_head_kv, sh.n_kv);
                ember_tensor * v    = c.rand_leaf(tk, sh.d, sh.n_head_kv, sh.n_kv);
                ember_tensor * mask = nullptr;
                if (sh.mk != k_none) {
                    // token t sits at position n_kv - n_tok + t and sees the keys up to it
                    std::vector<float>                    mv(static_cast<size_t>(sh.n_kv * sh.n_tok), 0.0f);
                    std::uniform_real_distribution<float> u(-2.0f, 0.0f);
                    for (int64_t t = 0; t < sh.n_tok; t++) {
                        const int64_t pos = sh.n_kv - sh.n_tok + t;
                        for (int64_t j = 0; j < sh.n_kv; j++) {
                            float x = j > pos ? -INFINITY : 0.0f;
                            if (sh.mk == k_causal_hidden_rows && (j < 100 || t % 5 == 3)) x = -INFINITY;  // rows 3, 8, ..: no key
                            if (sh.mk == k_bias && x == 0.0f) x = u(c.rng);
                            if (sh.mk == k_window && j < pos - 70) x = -INFINITY;  // sliding window: leading tiles hidden
                            mv[static_cast<size_t>(t * sh.n_kv + j)] = x;
                        }
                    }
                    mask = c.f32_leaf(mv, sh.n_kv, sh.n_tok);
                }
                return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(sh.d)));
            }, 1e-8);
        }
    }
    // Mixed K/V types take the simple kernel.
    check_case("prefill attn f16 K, q8_0 V", [](case_ctx & c) {
        return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 20), c.rand_leaf(EMBER_TYPE_F16, 64, 2, 20),
                          c.rand_leaf(EMBER_TYPE_Q8_0, 64, 2, 20), nullptr, 0.125f);
    }, 1e-8);
}

TEST_CASE("[cuda] weights in the CUDA layout: matvec, prefill, get_rows, readback") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0}) {
        const std::string tn = ember_type_get_name(t);
        // Row counts: one row per warp (67, 1) and two (4100: a tail warp), widths whose chunk
        // count is not a multiple of the 128 a warp loads per step.
        for (int64_t n : {67, 1, 4100}) {
            for (int64_t k : {2048, 4096 + 32 * 5, 32}) {
                for (int64_t m : {1, 3}) {
                    if (n == 4100 && (k == 32 || m == 3)) continue;
                    check_case("cuda layout matvec " + tn + " k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m),
                               [=](case_ctx & c) {
                                   return ember_mul_mat(c.g, c.weight_leaf(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
                               }, 1e-3);
                }
            }
        }
        check_case("cuda layout matvec batched broadcast " + tn, [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
        }, 1e-3);
        check_case("cuda layout prefill (cuBLAS) " + tn, [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, 512, 40, 2), c.rand_leaf(EMBER_TYPE_F32, 512, 24, 2));
        }, 1e-3);  // the CPU rounds activations to Q8_0, the GPU to F16
        check_case("cuda layout get_rows " + tn, [=](case_ctx & c) {
            return ember_get_rows(c.g, c.weight_leaf(t, 320, 9), c.i32_leaf({8, 0, 3, 3}));
        }, 1e-12);
        // A layer-like graph twice with new weights (set again whole: converted again).
        check_runs("cuda layout decode layer " + tn, [=](case_ctx & c) {
            ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
            ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 1024, 1));
            ember_tensor * gt = ember_mul_mat(c.g, c.weight_leaf(t, 1024, 512), h);
            ember_tensor * up = ember_mul_mat(c.g, c.weight_leaf(t, 1024, 512), h);
            return ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, 512, 1024), ember_swiglu(c.g, gt, up)));
        }, 1e-3, {31, 32});

        // Upload, flag, readback of the GGUF bytes, and a partial write into a converted weight.
        ember_device * dev = cuda_device();
        ember_graph    g;
        ember_tensor * w = g.new_tensor(t, 96, 5);
        w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
        ember_buffer * buf = nullptr;
        REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), ember_nbytes(w), &buf) == EMBER_OK);
        ember_buffer_place_tensor(buf, w, 0);
        std::vector<float> v(96 * 5);
        for (size_t i = 0; i < v.size(); i++) v[i] = std::sin(0.37f * static_cast<float>(i));
        std::vector<uint8_t> bytes(ember_nbytes(w));
        for (int r = 0; r < 5; r++) ember_type_get_traits(t)->from_float(v.data() + r * 96, bytes.data() + r * w->nb[1], 96);
        ember_tensor_set(w, bytes.data(), 0, bytes.size());
        CHECK((w->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED) != 0);
        std::vector<uint8_t> back(bytes.size());
        ember_tensor_get(w, back.data(), 0, back.size());
        CHECK(back == bytes);
        std::vector<uint8_t> row1(w->nb[1], 0x11);
        ember_tensor_set(w, row1.data(), w->nb[1], row1.size());
        std::memcpy(bytes.data() + w->nb[1], row1.data(), row1.size());
        ember_tensor_get(w, back.data(), 0, back.size());
        CHECK(back == bytes);
        std::vector<uint8_t> part(w->nb[1]);
        ember_tensor_get(w, part.data(), 2 * w->nb[1], part.size());
        CHECK(std::memcmp(part.data(), bytes.data() + 2 * w->nb[1], part.size()) == 0);
        ember_buffer_free(buf);
    }
}

TEST_CASE("[cuda] Q4_K matvec with 16-byte loads") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // One row per warp below 4096 rows, two from there (4100: a tail warp); 9 blocks of 256
    // per row: 72 chunks, not a multiple of the 32 lanes.
    for (int64_t n : {4100, 67}) {
        for (int64_t k : {2048, 256 * 9}) {
            check_case("q4_k matvec k=" + std::to_string(k) + " n=" + std::to_string(n), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, k, n), c.rand_leaf(EMBER_TYPE_F32, k, 1, 1, -3.0f, 3.0f));
            }, 1e-3);
        }
    }
}

TEST_CASE("[cuda] fused residual ADD + RMS_NORM + MUL + quantized x") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // Two layers: the second norm's input is the first residual ADD (fused with it), its
    // MUL's result is quantized in the same kernel for the three matvecs that follow, and
    // the ADD's result is read again by the last ADD. Run three times (eager, recorded, replayed).
    set_env("EMBER_CUDA_GRAPHS", "1");
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K}) {
        check_runs(std::string("add + norm + mul + matvecs ") + ember_type_get_name(t), [=](case_ctx & c) {
            const int64_t  n  = 1024;
            ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, -2.0f, 2.0f);
            ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * x2 = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, n, n), h));
            ember_tensor * h2 = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * a  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * b  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * d  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * x3 = ember_add(c.g, x2, ember_mul_mat(c.g, c.weight_leaf(t, 256, n), ember_swiglu(c.g, ember_add(c.g, a, d), b)));
            // ADD + RMS_NORM without a MUL (no quantized copy), read by a matvec
            return ember_mul_mat(c.g, c.weight_leaf(t, n, 64), ember_rms_norm(c.g, ember_add(c.g, x3, x2), 1e-5f));
        }, 1e-3, {41, 42, 43});
    }
    set_env("EMBER_CUDA_GRAPHS", "");
    // Rows of x whose width is not a multiple of 32 (no quantized copy), several rows.
    check_case("add + norm + mul, 100 wide, 3 rows", [](case_ctx & c) {
        ember_tensor * x2 = ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 3), c.rand_leaf(EMBER_TYPE_F32, 100, 3));
        ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 100, 1));
        return ember_add(c.g, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F16, 100, 40), h), ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 40), x2));
    }, 1e-5);
}

TEST_CASE("[cuda] device enumeration and buffers") {
    ember_device * dev = cuda_device();
    if (!dev) {
        MESSAGE("skipped: no CUDA device");
        return;
    }
    CHECK(std::string(ember_device_get_name(dev)).rfind("cuda:", 0) == 0);
    CHECK(ember_registry_find_device("cuda:0") == dev);
    ember_device_props props;
    dev->iface.get_props(dev, &props);
    CHECK(props.type == EMBER_DEVICE_TYPE_GPU);
    CHECK(props.memory_total > 0);
    CHECK(!ember_device_supports_buft(dev, ember_device_buffer_type(ember_registry_cpu_device())));
    // An impossible allocation is OOM, not a crash.
    ember_buffer * buf = nullptr;
    CHECK(ember_buffer_type_alloc(ember_device_buffer_type(dev), props.memory_total * 4, &buf) == EMBER_ERR_OOM);
    CHECK(buf == nullptr);
    // Round trip of bytes through device memory (larger than one staging half).
    const size_t n = (20u << 20) + 3;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), n, &buf) == EMBER_OK);
    ember_graph    g;
    ember_tensor * t = g.new_tensor(EMBER_TYPE_I32, 1);
    t->ne[0]         = static_cast<int64_t>(n / 4);
    ember_set_contiguous_strides(t);
    ember_buffer_place_tensor(buf, t, 0);
    std::vector<int32_t> in(n / 4), out(n / 4, 0);
    for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<int32_t>(i * 2654435761u);
    ember_tensor_set(t, in.data(), 0, in.size() * 4);
    ember_tensor_get(t, out.data(), 0, out.size() * 4);
    CHECK(in == out);
    ember_buffer_free(buf);
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
