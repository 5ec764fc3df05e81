// The Vulkan backend against the CPU backend: every op and type it supports, on random data,
// the same graph run on both devices and compared by NMSE (or bytes, for exact conversions).
// Runs on any Vulkan device, Mesa's lavapipe included; skips with a message when there is
// none. With EMBER_VULKAN_VALIDATE=1 (and vulkan-validationlayers installed) every case also
// fails on a validation error.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend-test-util.h"
#include "backend.h"
#include "graph.h"
#include "scheduler.h"

#ifdef EMBER_HAVE_VULKAN
#    include "backends/vulkan/vulkan-backend.h"

namespace {

using ember_test::random_f32;

ember_device * vk_device() {
    static ember_device * dev = ember_vulkan_find_device("vulkan");
    return dev;
}

#define REQUIRE_VK()                                                                     \
    if (!vk_device()) {                                                                  \
        MESSAGE("skipped: no Vulkan device (install mesa-vulkan-drivers for lavapipe)"); \
        return;                                                                          \
    }

// Fails the current case if the validation layer reported anything.
struct validation_guard {
    int64_t before = ember_vulkan_validation_errors();
    ~validation_guard() { CHECK_MESSAGE(ember_vulkan_validation_errors() == before, "Vulkan validation errors (see stderr)"); }
};

// Inputs of a test graph: filled after allocation, the same on every device.
struct input {
    ember_tensor *       t;
    std::vector<float>   f;  // converted with the tensor type's from_float
    std::vector<int32_t> i;  // I32 tensors
};
using builder = std::function<ember_tensor *(ember_graph &, std::vector<input> &)>;

// A graph with all its tensors in one buffer of `dev`, computed on one stream of `dev`.
struct dev_run {
    ember_graph    g;
    ember_buffer * buf    = nullptr;
    ember_stream * stream = nullptr;
    ~dev_run() {
        ember_stream_free(stream);
        ember_buffer_free(buf);
    }
};

// Runs the graph of `b` on dev and returns the output as floats (to_float for other types).
std::vector<float> run_on(ember_device * dev, const builder & b, ember_type * out_type = nullptr,
                          std::vector<uint8_t> * out_bytes = nullptr) {
    dev_run            r;
    std::vector<input> ins;
    ember_tensor *     out = b(r.g, ins);
    r.g.build_forward(out);
    CHECK_MESSAGE(ember_device_supports_op(dev, out), ember_device_get_name(dev), " does not support ", ember_op_name(out->op));
    ember_buffer_type * buft  = ember_device_buffer_type(dev);
    const size_t        align = ember_buffer_type_alignment(buft);
    size_t              total = 0;
    for (ember_tensor & t : r.g.arena) {
        if (!t.view_src) total += (ember_nbytes(&t) + align - 1) / align * align;
    }
    REQUIRE(ember_buffer_type_alloc(buft, total, &r.buf) == EMBER_OK);
    size_t offs = 0;
    for (ember_tensor & t : r.g.arena) {
        if (t.view_src) continue;
        ember_buffer_place_tensor(r.buf, &t, offs);
        offs += (ember_nbytes(&t) + align - 1) / align * align;
    }
    for (ember_tensor & t : r.g.arena) {
        if (t.view_src) {
            t.buffer = t.view_src->buffer;
            t.data   = static_cast<char *>(t.view_src->data) + t.view_offs;
        }
    }
    for (input & in : ins) {
        if (in.t->type == EMBER_TYPE_I32) {
            ember_test::set_i32(in.t, in.i);
        } else {
            ember_test::set_floats(in.t, in.f);
        }
    }
    ember_stream_params p = {1};
    REQUIRE(ember_device_init_stream(dev, &p, &r.stream) == EMBER_OK);
    REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
    r.stream->iface.synchronize(r.stream);
    // The output (for SET_ROWS: the whole destination it is a view of).
    std::vector<uint8_t> bytes(ember_nbytes(out));
    ember_tensor_get(out, bytes.data(), 0, bytes.size());
    std::vector<float> f(ember_nelements(out));
    REQUIRE(ember_is_contiguous(out));
    ember_type_get_traits(out->type)->to_float(bytes.data(), f.data(), (int64_t) f.size());
    if (out_type) *out_type = out->type;
    if (out_bytes) *out_bytes = bytes;
    return f;
}

double nmse(const std::vector<float> & ref, const std::vector<float> & got) {
    REQUIRE(ref.size() == got.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;
        num += (double) (got[i] - ref[i]) * (got[i] - ref[i]);
        den += (double) ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

// The same graph on the CPU and on the Vulkan device: NMSE below max_nmse.
void compare(const builder & b, double max_nmse) {
    const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
    const std::vector<float> got = run_on(vk_device(), b);
    const double             e   = nmse(ref, got);
    CHECK_MESSAGE(e <= max_nmse, "NMSE " << e << " > " << max_nmse);
}

// Exact conversions: at least `min_equal` of the output bytes identical, NMSE below max_nmse.
void compare_bytes(const builder & b, double min_equal, double max_nmse) {
    std::vector<uint8_t>     rb, gb;
    const std::vector<float> ref = run_on(ember_registry_cpu_device(), b, nullptr, &rb);
    const std::vector<float> got = run_on(vk_device(), b, nullptr, &gb);
    REQUIRE(rb.size() == gb.size());
    size_t same = 0;
    for (size_t i = 0; i < rb.size(); i++) same += rb[i] == gb[i];
    CHECK_MESSAGE((double) same >= min_equal * (double) rb.size(), same << " of " << rb.size() << " bytes equal");
    const double e = nmse(ref, got);
    CHECK_MESSAGE(e <= max_nmse, "NMSE " << e << " > " << max_nmse);
}

ember_tensor * new_input(ember_graph & g, std::vector<input> & ins, ember_type type, int64_t ne0, int64_t ne1 = 1,
                         int64_t ne2 = 1, int64_t ne3 = 1, uint32_t seed = 1) {
    ember_tensor * t = g.new_tensor(type, ne0, ne1, ne2, ne3);
    ins.push_back({t, random_f32((size_t) ember_nelements(t), seed), {}});
    return t;
}

ember_tensor * new_ids(ember_graph & g, std::vector<input> & ins, std::vector<int32_t> ids) {
    ember_tensor * t = g.new_tensor(EMBER_TYPE_I32, (int64_t) ids.size());
    ins.push_back({t, {}, std::move(ids)});
    return t;
}

const ember_type k_dq_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,  EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_1,
                                 EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K,
                                 EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL};
const ember_type k_cvt_types[] = {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0};

}  // namespace

TEST_SUITE("vulkan") {

TEST_CASE("[vulkan] device lookup by name and index") {
    REQUIRE_VK();
    const std::string name = ember_device_get_name(vk_device());
    CHECK(name.rfind("vulkan:", 0) == 0);
    CHECK(ember_vulkan_find_device(name.c_str()) == vk_device());
    CHECK(ember_registry_find_device(name.c_str()) == vk_device());  // also when kept off the default list
    CHECK(ember_vulkan_find_device("vulkan:99") == nullptr);
    CHECK(ember_vulkan_find_device("vulkan:no such device") == nullptr);
    CHECK(ember_vulkan_find_device("cuda") == nullptr);
    ember_device_props props;
    vk_device()->iface.get_props(vk_device(), &props);
    MESSAGE("Vulkan device " << name << ": " << std::string(props.description) << ", subgroup " << props.caps.subgroup_size
                             << std::string(ember_vulkan_validation_enabled() ? ", validation on" : ""));
}

TEST_CASE("[vulkan] an impossible allocation fails with a status") {
    REQUIRE_VK();
    validation_guard    vg;
    ember_buffer *      buf = nullptr;
    const ember_status  st  = ember_buffer_type_alloc(ember_device_buffer_type(vk_device()), (size_t) 1 << 50, &buf);
    CHECK(st != EMBER_OK);
    CHECK(buf == nullptr);
}

TEST_CASE("[vulkan] add, mul (broadcast, strided), swiglu, scale") {
    REQUIRE_VK();
    validation_guard vg;
    SUBCASE("add broadcast") {
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_add(g, new_input(g, in, EMBER_TYPE_F32, 64, 5, 3, 1, 1), new_input(g, in, EMBER_TYPE_F32, 16, 1, 3, 1, 2));
        }, 1e-12);
    }
    SUBCASE("mul broadcast") {
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_mul(g, new_input(g, in, EMBER_TYPE_F32, 96, 7, 2, 2, 3), new_input(g, in, EMBER_TYPE_F32, 96, 1, 1, 1, 4));
        }, 1e-12);
    }
    SUBCASE("add of a strided view") {
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * big = new_input(g, in, EMBER_TYPE_F32, 80, 6, 1, 1, 5);
            const int64_t  ne[4] = {40, 3, 1, 1};
            const size_t   nb[4] = {4, 2 * big->nb[1], 6 * big->nb[1], 6 * big->nb[1]};
            ember_tensor * v     = ember_view_strided(g, big, ne, nb, 8 * sizeof(float));
            return ember_add(g, v, new_input(g, in, EMBER_TYPE_F32, 40, 3, 1, 1, 6));
        }, 1e-12);
    }
    SUBCASE("swiglu") {
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_swiglu(g, new_input(g, in, EMBER_TYPE_F32, 77, 5, 1, 1, 7), new_input(g, in, EMBER_TYPE_F32, 77, 5, 1, 1, 8));
        }, 1e-10);
    }
    SUBCASE("scale") {
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_scale(g, new_input(g, in, EMBER_TYPE_F32, 1000, 3, 1, 1, 9), -0.37f);
        }, 1e-12);
    }
}

TEST_CASE("[vulkan] rms_norm") {
    REQUIRE_VK();
    validation_guard vg;
    for (int64_t n : {257, 64, 4096}) {
        CAPTURE(n);
        compare([n](ember_graph & g, std::vector<input> & in) {
            return ember_rms_norm(g, new_input(g, in, EMBER_TYPE_F32, n, 3, 2, 1, 10), 1e-5f);
        }, 1e-10);
    }
}

TEST_CASE("[vulkan] rope: normal and neox, partial rotation, frequency factors, scaling") {
    REQUIRE_VK();
    validation_guard vg;
    for (int32_t mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
        for (int32_t n_rot : {64, 32}) {
            for (bool ff : {false, true}) {
                CAPTURE(mode);
                CAPTURE(n_rot);
                CAPTURE(ff);
                compare([=](ember_graph & g, std::vector<input> & in) {
                    ember_tensor * x   = new_input(g, in, EMBER_TYPE_F32, 64, 4, 5, 1, 11);
                    ember_tensor * pos = new_ids(g, in, {0, 1, 7, 300, 4095});
                    ember_tensor * f   = nullptr;
                    if (ff) {
                        f = g.new_tensor(EMBER_TYPE_F32, n_rot / 2);
                        in.push_back({f, random_f32((size_t) n_rot / 2, 12, 1.0f, 8.0f), {}});
                    }
                    return ember_rope(g, x, pos, f, n_rot, mode, 10000.0f, ff ? 0.5f : 1.0f);
                }, 1e-7);  // theta_scale^i by pow on the device, by repeated products on the CPU
            }
        }
    }
}

TEST_CASE("[vulkan] get_rows for every readable type") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type t : k_dq_types) {
        CAPTURE(std::string(ember_type_get_name(t)));
        compare([t](ember_graph & g, std::vector<input> & in) {
            const int64_t n = ember_type_get_traits(t)->block_size == 256 ? 512 : 96;
            return ember_get_rows(g, new_input(g, in, t, n, 10, 1, 1, 13), new_ids(g, in, {3, 0, 9, 3, 5}));
        }, 1e-12);
    }
}

TEST_CASE("[vulkan] mul_mat for every weight type: vector and tiled kernels, batch broadcast") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type t : k_dq_types) {
        // The CPU rounds activations to the weight's vec_dot_type (F16, Q8_0, Q8_1, Q8_K); the
        // device keeps them in F32, so quantized types differ by that rounding.
        const double tol = t == EMBER_TYPE_F32 ? 1e-10 : t == EMBER_TYPE_F16 ? 1e-6 : 2e-4;
        const int64_t k  = ember_type_get_traits(t)->block_size == 256 ? 512 : 160;
        for (int64_t m : {1, 3, 70}) {
            CAPTURE(std::string(ember_type_get_name(t)));
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                return ember_mul_mat(g, new_input(g, in, t, k, 67, 1, 1, 14), new_input(g, in, EMBER_TYPE_F32, k, m, 1, 1, 15));
            }, tol);
        }
    }
    SUBCASE("batched, weights broadcast") {
        for (int64_t m : {1, 9}) {
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_F16, 64, 33, 2, 1, 16),
                                     new_input(g, in, EMBER_TYPE_F32, 64, m, 4, 1, 17));
            }, 1e-6);
        }
    }
}

TEST_CASE("[vulkan] set_rows into every cache type, repeated index last wins") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type t : k_cvt_types) {
        CAPTURE(std::string(ember_type_get_name(t)));
        compare_bytes([t](ember_graph & g, std::vector<input> & in) {
            ember_tensor * dst  = new_input(g, in, t, 128, 12, 1, 1, 18);
            ember_tensor * rows = new_input(g, in, EMBER_TYPE_F32, 128, 5, 1, 1, 19);
            return ember_set_rows(g, dst, rows, new_ids(g, in, {4, 0, 11, 4, 7}));
        }, 0.98, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact
    }
}

TEST_CASE("[vulkan] cpy between every pair of cache types, strided source") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type s : k_cvt_types) {
        for (ember_type d : k_cvt_types) {
            CAPTURE(std::string(ember_type_get_name(s)));
            CAPTURE(std::string(ember_type_get_name(d)));
            compare_bytes([=](ember_graph & g, std::vector<input> & in) {
                return ember_cpy(g, new_input(g, in, s, 256, 6, 2, 1, 20), d);
            }, 0.98, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact
        }
    }
    SUBCASE("strided source rows") {
        compare_bytes([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * big   = new_input(g, in, EMBER_TYPE_F32, 64, 8, 1, 1, 21);
            const int64_t  ne[4] = {64, 4, 1, 1};
            const size_t   nb[4] = {4, 2 * big->nb[1], 8 * big->nb[1], 8 * big->nb[1]};
            return ember_cpy(g, ember_view_strided(g, big, ne, nb, big->nb[1]), EMBER_TYPE_Q8_0);
        }, 0.98, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact
    }
}

TEST_CASE("[vulkan] attention: GQA, masks, every KV cache type, views of a cache") {
    REQUIRE_VK();
    validation_guard vg;
    const int64_t d = 64, n_head = 4, n_head_kv = 2, n_tokens = 5, n_kv = 100, kv_size = 128;
    std::vector<std::pair<ember_type, ember_type>> kv;
    for (ember_type t : k_cvt_types) kv.push_back({t, t});
    kv.push_back({EMBER_TYPE_F16, EMBER_TYPE_Q8_0});
    for (auto tkv : kv) {
        for (bool masked : {true, false}) {
            CAPTURE(std::string(ember_type_get_name(tkv.first)));
            CAPTURE(std::string(ember_type_get_name(tkv.second)));
            CAPTURE(masked);
            compare([=](ember_graph & g, std::vector<input> & in) {
                ember_tensor * q = new_input(g, in, EMBER_TYPE_F32, d, n_head, n_tokens, 1, 22);
                // K and V as the runtime reads them: views [d, n_head_kv, n_kv] of a cache [d * n_head_kv, kv_size].
                auto view = [&](ember_type t, uint32_t seed) {
                    ember_tensor * cache = new_input(g, in, t, d * n_head_kv, kv_size, 1, 1, seed);
                    const int64_t  ne[4] = {d, n_head_kv, n_kv, 1};
                    const size_t   nb[4] = {ember_type_get_traits(t)->type_size, ember_row_size(t, d), cache->nb[1],
                                            cache->nb[1] * n_kv};
                    return ember_view_strided(g, cache, ne, nb, 0);
                };
                ember_tensor * k    = view(tkv.first, 23);
                ember_tensor * v    = view(tkv.second, 24);
                ember_tensor * mask = nullptr;
                if (masked) {  // causal over the last n_tokens positions; token 0 also hides everything
                    mask = g.new_tensor(EMBER_TYPE_F32, n_kv, n_tokens);
                    std::vector<float> m((size_t) (n_kv * n_tokens), 0.0f);
                    for (int64_t t = 0; t < n_tokens; t++) {
                        for (int64_t j = 0; j < n_kv; j++) {
                            if (t == 0 || j > n_kv - n_tokens + t) m[(size_t) (t * n_kv + j)] = -INFINITY;
                        }
                    }
                    in.push_back({mask, m, {}});
                }
                return ember_attn(g, q, k, v, mask, 0.125f);
            }, 1e-9);
        }
    }
}

TEST_CASE("[vulkan] partial offload: the scheduler keeps unsupported nodes on the CPU") {
    REQUIRE_VK();
    validation_guard vg;
    // y = rms_norm(W2 (W1 x)) with W1 Q2_K (no Vulkan kernel) and W2 Q4_K, weights on the device.
    const int64_t k = 256, n = 256, m = 3;
    auto build = [&](ember_graph & g, ember_tensor *& w1, ember_tensor *& w2, ember_tensor *& x) {
        w1 = g.new_tensor(EMBER_TYPE_Q2_K, k, n);
        w2 = g.new_tensor(EMBER_TYPE_Q4_K, n, n);
        x  = g.new_tensor(EMBER_TYPE_F32, k, m);
        x->flags |= EMBER_TENSOR_FLAG_INPUT;
        ember_tensor * y = ember_rms_norm(g, ember_mul_mat(g, w2, ember_mul_mat(g, w1, x)), 1e-5f);
        y->flags |= EMBER_TENSOR_FLAG_OUTPUT;
        return y;
    };
    auto run = [&](bool offload) {
        ember_graph    g;
        ember_tensor * w1, * w2, * x;
        ember_tensor * y = build(g, w1, w2, x);
        g.build_forward(y);
        ember_device * wdev = offload ? vk_device() : ember_registry_cpu_device();
        ember_buffer * wbuf = nullptr;
        const size_t   s1 = (ember_nbytes(w1) + 255) / 256 * 256;
        REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(wdev), s1 + ember_nbytes(w2), &wbuf) == EMBER_OK);
        ember_buffer_place_tensor(wbuf, w1, 0);
        ember_buffer_place_tensor(wbuf, w2, s1);
        ember_test::set_floats(w1, random_f32((size_t) ember_nelements(w1), 30));
        ember_test::set_floats(w2, random_f32((size_t) ember_nelements(w2), 31));
        ember_stream *              vs = nullptr, *cs = nullptr;
        ember_stream_params         p  = {1};
        REQUIRE(ember_device_init_stream(ember_registry_cpu_device(), &p, &cs) == EMBER_OK);
        std::vector<ember_stream *> streams;
        if (offload) {
            REQUIRE(ember_device_init_stream(vk_device(), &p, &vs) == EMBER_OK);
            streams.push_back(vs);
        }
        streams.push_back(cs);
        std::vector<float> out;
        {
            ember_sched sched(streams);
            REQUIRE(sched.prepare(&g) == EMBER_OK);
            ember_test::set_floats(x, random_f32((size_t) ember_nelements(x), 32));
            REQUIRE(sched.compute(&g) == EMBER_OK);
            out = ember_test::get_f32(y);
            if (offload) {
                const std::vector<int> * ns = sched.node_streams(&g);
                REQUIRE(ns != nullptr);
                int on_vk = 0, on_cpu = 0;
                for (size_t i = 0; i < g.nodes.size(); i++) {
                    if ((*ns)[i] == 0) on_vk++;
                    if ((*ns)[i] == 1 && g.nodes[i]->op == EMBER_OP_MUL_MAT) on_cpu++;
                }
                CHECK(on_vk >= 2);   // the Q4_K mul_mat and rms_norm
                CHECK(on_cpu == 1);  // the Q2_K mul_mat
                CHECK(sched.n_splits(&g) >= 2);
            }
            sched.forget(&g);
        }
        ember_stream_free(vs);
        ember_stream_free(cs);
        ember_buffer_free(wbuf);
        return out;
    };
    const std::vector<float> ref = run(false);
    const std::vector<float> got = run(true);
    CHECK(nmse(ref, got) < 1e-4);
}

}  // TEST_SUITE

#else

TEST_CASE("[vulkan] backend not built") {
    MESSAGE("skipped: this build has no Vulkan backend (EMBER_VULKAN=OFF)");
}

#endif  // EMBER_HAVE_VULKAN
