// The Vulkan backend against the CPU backend: every op and type it supports, on random data,
// the same graph run on both devices and compared by NMSE (or bytes, for exact conversions).
// Runs on any Vulkan device, Mesa's lavapipe included; skips with a message when there is
// none. With EMBER_VULKAN_VALIDATE=1 (and vulkan-validationlayers installed) every case also
// fails on a validation error; scripts/test.sh runs them so (EMBER_VULKAN_REQUIRE_VALIDATION=1:
// the layer must be on).
#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "backend-test-util.h"
#include "backend.h"
#include "graph.h"
#include "scheduler.h"
#include "support/data-path.h"
#include "support/fixtures.h"

#ifdef EMBER_HAVE_VULKAN
#    include "backends/vulkan/vulkan-backend.h"
#    include "backends/vulkan/vk-repack.h"
#    include "backends/vulkan/vk-shaders.h"

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

// Float values shared, not copied: the same random inputs serve both devices and every
// variant of a case (under AddressSanitizer each copy of a large vector was a fresh mapping,
// page-faulted in again).
struct floats {
    std::shared_ptr<const std::vector<float>> p;
    floats() = default;
    floats(std::vector<float> && v) : p(std::make_shared<const std::vector<float>>(std::move(v))) {}  // NOLINT: implicit
    floats(const std::vector<float> & v) : p(std::make_shared<const std::vector<float>>(v)) {}         // NOLINT: implicit
    explicit floats(std::shared_ptr<const std::vector<float>> sp) : p(std::move(sp)) {}
    size_t        size() const { return p ? p->size() : 0; }
    const float * data() const { return p ? p->data() : nullptr; }
    float         operator[](size_t i) const { return (*p)[i]; }
};

// Inputs of a test graph: filled after allocation, the same on every device.
struct input {
    ember_tensor *       t;
    floats               f;    // converted with the tensor type's from_float
    std::vector<int32_t> i;    // I32 tensors
    std::vector<uint8_t> raw;  // when not empty: the tensor's bytes as they are
};

// Values made once for the whole run, kept while they fit in `cap` bytes (the oldest dropped
// first): the cases run the same inputs on both devices and under several kernel variants, and
// the reference quantizers (Q4_K, Q6_K) and the random numbers took half of the test's time.
template <class Key, class Value> struct memo {
    std::map<Key, Value> map;
    std::deque<std::pair<Key, size_t>> order;  // key and bytes, oldest first
    size_t                             bytes = 0, cap;
    explicit memo(size_t c) : cap(c) {}
    const Value * find(const Key & k) const {
        auto it = map.find(k);
        return it == map.end() ? nullptr : &it->second;
    }
    // Keeps v (size bytes) under the new key k and returns it; null (v untouched) when it
    // alone is over the cap.
    const Value * put(const Key & k, Value && v, size_t size) {
        if (size > cap) return nullptr;
        while (bytes + size > cap) {
            bytes -= order.front().second;
            map.erase(order.front().first);
            order.pop_front();
        }
        bytes += size;
        order.emplace_back(k, size);
        return &map.emplace(k, std::move(v)).first->second;
    }
};

// The bytes of floats f as a tensor of `type` with rows of ne0 (from_float row by row: types
// with row groups, NF4 and FP8_*_ROW, convert one whole row per call); remembered by content.
const std::vector<uint8_t> & converted(ember_type type, int64_t ne0, const floats & f) {
    using key = std::tuple<int, int64_t, size_t, uint64_t>;
    static memo<key, std::vector<uint8_t>> cache(size_t(1) << 30);
    const key k{(int) type, ne0, f.size(), XXH3_64bits(f.data(), f.size() * sizeof(float))};
    if (const std::vector<uint8_t> * hit = cache.find(k)) return *hit;
    const ember_type_traits * tr    = ember_type_get_traits(type);
    const size_t              rsz   = ember_row_size(type, ne0);
    const int64_t             nrows = (int64_t) f.size() / ne0;
    std::vector<uint8_t>      bytes(rsz * (size_t) nrows);
    for (int64_t r = 0; r < nrows; r++) tr->from_float(f.data() + r * ne0, bytes.data() + r * rsz, ne0);
    const size_t n = bytes.size();
    if (const std::vector<uint8_t> * kept = cache.put(k, std::move(bytes), n)) return *kept;
    static std::vector<uint8_t> last;  // too large to keep
    last = std::move(bytes);
    return last;
}

// random_f32(n, seed) in [-1, 1), made once (kept while they fit in 512 MiB).
floats random_input(size_t n, uint32_t seed) {
    using values = std::shared_ptr<const std::vector<float>>;
    static memo<std::pair<size_t, uint32_t>, values> cache(size_t(1) << 29);
    if (const values * hit = cache.find({n, seed})) return floats(*hit);
    values v = std::make_shared<const std::vector<float>>(random_f32(n, seed));
    cache.put({n, seed}, values(v), n * sizeof(float));
    return floats(std::move(v));
}

void set_input(const input & in) {
    ember_tensor * t = in.t;
    if (!in.raw.empty()) {
        REQUIRE(in.raw.size() == ember_nbytes(t));
        ember_tensor_set(t, in.raw.data(), 0, in.raw.size());
        return;
    }
    if (t->type == EMBER_TYPE_I32) {
        ember_test::set_i32(t, in.i);
        return;
    }
    REQUIRE((int64_t) in.f.size() == ember_nelements(t));
    REQUIRE(ember_is_contiguous(t));
    if (t->type == EMBER_TYPE_F32) {
        ember_tensor_set(t, in.f.data(), 0, in.f.size() * sizeof(float));
        return;
    }
    const std::vector<uint8_t> & bytes = converted(t->type, t->ne[0], in.f);
    REQUIRE(bytes.size() == ember_nbytes(t));
    ember_tensor_set(t, bytes.data(), 0, bytes.size());
}
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
    // Every tensor of g in one buffer of dev (ember_test::place_graph), and a stream.
    void place(ember_device * dev) {
        buf = ember_test::place_graph(g, dev);
        ember_stream_params p = {1};
        REQUIRE(ember_device_init_stream(dev, &p, &stream) == EMBER_OK);
    }
};

// Runs the graph of `b` on dev and returns the output as floats (to_float for other types).
// status: where the graph's status goes (otherwise it must be EMBER_OK).
// The recording of a Vulkan run (ember_vulkan_stream_last_recording).
// xq: of the dispatches, the x quantizations of QX_PRE products (checks of the other
// dispatches count dispatches - xq).
struct rec_stats {
    uint32_t                 dispatches = 0, barriers = 0, fused = 0, xq = 0;
    std::vector<std::string> shaders;  // in recording order
    bool                     has(const std::string & name) const {
        return std::find(shaders.begin(), shaders.end(), name) != shaders.end();
    }
};

std::vector<float> run_on(ember_device * dev, const builder & b, ember_type * out_type = nullptr,
                          std::vector<uint8_t> * out_bytes = nullptr, ember_status * status = nullptr, rec_stats * stats = nullptr) {
    dev_run            r;
    std::vector<input> ins;
    ember_tensor *     out = b(r.g, ins);
    r.g.build_forward(out);
    CHECK_MESSAGE(ember_device_supports_op(dev, out), ember_device_get_name(dev), " does not support ", ember_op_name(out->op));
    r.place(dev);
    for (const input & in : ins) set_input(in);
    const ember_status st = r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size());
    if (status) {
        *status = st;
    } else {
        REQUIRE(st == EMBER_OK);
    }
    r.stream->iface.synchronize(r.stream);
    if (stats) {
        REQUIRE(ember_vulkan_stream_last_recording(r.stream, &stats->dispatches, &stats->barriers, &stats->fused));
        stats->xq      = ember_vulkan_stream_x_quantizations(r.stream);
        stats->shaders = ember_vulkan_stream_last_shaders(r.stream);
    }
    // The output (for SET_ROWS: the whole destination it is a view of).
    std::vector<uint8_t> bytes(ember_nbytes(out));
    ember_tensor_get(out, bytes.data(), 0, bytes.size());
    std::vector<float> f(ember_nelements(out));
    REQUIRE(ember_is_contiguous(out));
    const size_t rsz = ember_row_size(out->type, out->ne[0]);
    for (int64_t row = 0; row < ember_nrows(out); row++) {
        ember_type_get_traits(out->type)->to_float(bytes.data() + row * rsz, f.data() + row * out->ne[0], out->ne[0]);
    }
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
void compare(const builder & b, double max_nmse, rec_stats * stats = nullptr) {
    const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
    const std::vector<float> got = run_on(vk_device(), b, nullptr, nullptr, nullptr, stats);
    const double             e   = nmse(ref, got);
    CHECK_MESSAGE(e <= max_nmse, "NMSE " << e << " > " << max_nmse);
}

// Exact conversions: at least `min_equal` of the output bytes identical, NMSE below max_nmse.
void compare_bytes(const builder & b, double min_equal, double max_nmse, rec_stats * stats = nullptr) {
    std::vector<uint8_t>     rb, gb;
    const std::vector<float> ref = run_on(ember_registry_cpu_device(), b, nullptr, &rb);
    const std::vector<float> got = run_on(vk_device(), b, nullptr, &gb, nullptr, stats);
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
    ins.push_back({t, random_input((size_t) ember_nelements(t), seed), {}, {}});
    return t;
}

// As new_input, flagged a model weight (EMBER_TENSOR_FLAG_WEIGHT: backends may convert it to
// their own layout when it is uploaded whole).
ember_tensor * new_weight(ember_graph & g, std::vector<input> & ins, ember_type type, int64_t ne0, int64_t ne1 = 1,
                          int64_t ne2 = 1, int64_t ne3 = 1, uint32_t seed = 1) {
    ember_tensor * t = new_input(g, ins, type, ne0, ne1, ne2, ne3, seed);
    t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    return t;
}

ember_tensor * new_ids(ember_graph & g, std::vector<input> & ins, std::vector<int32_t> ids) {
    ember_tensor * t = g.new_tensor(EMBER_TYPE_I32, (int64_t) ids.size());
    ins.push_back({t, {}, std::move(ids), {}});
    return t;
}

const ember_type k_dq_types[] = {
    EMBER_TYPE_F32,      EMBER_TYPE_F16,          EMBER_TYPE_BF16,     EMBER_TYPE_Q4_0,     EMBER_TYPE_Q4_1,
    EMBER_TYPE_Q5_0,     EMBER_TYPE_Q5_1,         EMBER_TYPE_Q8_0,     EMBER_TYPE_Q2_K,     EMBER_TYPE_Q3_K,
    EMBER_TYPE_Q4_K,     EMBER_TYPE_Q5_K,         EMBER_TYPE_Q6_K,     EMBER_TYPE_IQ4_NL,   EMBER_TYPE_IQ4_XS,
    EMBER_TYPE_INT4,     EMBER_TYPE_INT4_G32,     EMBER_TYPE_NF4,      EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,
    EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};

// A row length that is a few whole blocks of t (an odd number for NF4: rows of 107 bytes, so
// most rows start off a 4-byte boundary).
int64_t test_row_len(ember_type t) {
    const int64_t b = ember_type_get_traits(t)->block_size;
    return b == 256 ? 512 : b == 128 ? 384 : b == 64 ? 192 : 160;
}
const ember_type k_cvt_types[] = {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0};

// Sets an environment switch of the backend (those it reads at each recording) for a scope,
// then puts back what was there (value nullptr: unset).
struct env_guard {
    std::string name, old;
    bool        had;
    env_guard(const char * n, const char * value) : name(n), had(std::getenv(n) != nullptr) {
        if (had) old = std::getenv(n);
        if (value) setenv(n, value, 1);
        else unsetenv(n);
    }
    ~env_guard() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

}  // namespace

TEST_SUITE("vulkan") {

TEST_CASE("[vulkan] device lookup by name and index") {
    REQUIRE_VK();
    // The test suite (scripts/test.sh) runs these tests with the validation layer and sets
    // EMBER_VULKAN_REQUIRE_VALIDATION=1, so a layer that went missing fails here instead of
    // the cases passing unvalidated.
    if (const char * rv = std::getenv("EMBER_VULKAN_REQUIRE_VALIDATION"); rv && std::strcmp(rv, "1") == 0) {
        REQUIRE_MESSAGE(ember_vulkan_validation_enabled(), "EMBER_VULKAN_REQUIRE_VALIDATION=1 but the validation layer is off "
                                                           "(EMBER_VULKAN_VALIDATE=1 and vulkan-validationlayers needed)");
    }
    const std::string name = ember_device_get_name(vk_device());
    CHECK(name.rfind("vulkan:", 0) == 0);
    CHECK(ember_vulkan_find_device(name.c_str()) == vk_device());
    CHECK(ember_registry_find_device(name.c_str()) == vk_device());  // also when kept off the default list
    CHECK(ember_vulkan_find_device("vulkan:99") == nullptr);
    CHECK(ember_vulkan_find_device("vulkan:no such device") == nullptr);
    CHECK(ember_vulkan_find_device("cuda") == nullptr);
    ember_device_props props;
    vk_device()->iface.get_props(vk_device(), &props);
    bool idot_fast = false;
    const bool idot = ember_vulkan_integer_dot(vk_device(), &idot_fast);
    MESSAGE("Vulkan device " << name << ": " << std::string(props.description) << ", subgroup " << props.caps.subgroup_size
                             << std::string(idot ? idot_fast ? ", integer dot products (accelerated)" : ", integer dot products" : "")
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
    // 4096: every element held in registers (16 per invocation); 5000: the rest read again.
    // Both reductions: subgroup (the default where the device has subgroup arithmetic) and
    // shared memory (EMBER_VULKAN_NORM_SG=0).
    for (const char * sg : {(const char *) nullptr, "0"}) {
        env_guard eg("EMBER_VULKAN_NORM_SG", sg);
        CAPTURE(sg != nullptr);
        for (int64_t n : {257, 64, 4096, 5000}) {
            CAPTURE(n);
            compare([n](ember_graph & g, std::vector<input> & in) {
                return ember_rms_norm(g, new_input(g, in, EMBER_TYPE_F32, n, 3, 2, 1, 10), 1e-5f);
            }, 1e-10);
        }
    }
}

// [ADD] RMS_NORM [MUL] recorded as one dispatch (rms_norm.comp's variants): the ADD's sum is
// still written (read again here), the norm weight broadcast over rows; no MUL fusion when
// something else reads the norm. EMBER_VULKAN_FUSE=0 turns fusion off (then no fused group).
TEST_CASE("[vulkan] fused add + rms_norm + mul") {
    REQUIRE_VK();
    validation_guard vg;
    const bool       fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0);
    rec_stats        st;
    // Odd n: the shared-memory reduction (EMBER_VULKAN_NORM_SG=0), even n: the default.
    for (int64_t n : {2048, 257, 4608, 2049, 4609}) {
        env_guard eg("EMBER_VULKAN_NORM_SG", n % 2 == 1 ? "0" : nullptr);
        CAPTURE(n);
        // The sum read again.
        compare([n](ember_graph & g, std::vector<input> & in) {
            ember_tensor * s = ember_add(g, new_input(g, in, EMBER_TYPE_F32, n, 3, 2, 1, 80), new_input(g, in, EMBER_TYPE_F32, n, 3, 2, 1, 81));
            ember_tensor * y = ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, n, 1, 1, 1, 82));
            return ember_add(g, y, s);
        }, 1e-10, &st);
        CHECK(st.fused == (fuse ? 1u : 0u));
        CHECK(st.dispatches - st.xq == (fuse ? 2u : 4u));
        // rms_norm + mul, the weight broadcast over two dims.
        compare([n](ember_graph & g, std::vector<input> & in) {
            ember_tensor * w = new_input(g, in, EMBER_TYPE_F32, n, 3, 1, 1, 84);
            return ember_mul(g, ember_rms_norm(g, new_input(g, in, EMBER_TYPE_F32, n, 3, 2, 2, 83), 1e-5f), w);
        }, 1e-10, &st);
        CHECK(st.fused == (fuse ? 1u : 0u));
        CHECK(st.dispatches - st.xq == (fuse ? 1u : 2u));
        // add + rms_norm fused; the norm read by two nodes, so its mul is not.
        compare([n](ember_graph & g, std::vector<input> & in) {
            ember_tensor * s    = ember_add(g, new_input(g, in, EMBER_TYPE_F32, n, 4, 1, 1, 85), new_input(g, in, EMBER_TYPE_F32, n, 4, 1, 1, 86));
            ember_tensor * norm = ember_rms_norm(g, s, 1e-6f);
            return ember_add(g, ember_mul(g, norm, new_input(g, in, EMBER_TYPE_F32, n, 1, 1, 1, 87)), norm);
        }, 1e-10, &st);
        CHECK(st.fused == (fuse ? 1u : 0u));
        CHECK(st.dispatches - st.xq == (fuse ? 3u : 4u));
    }
}

// SWIGLU computed by the decode matrix-vector product that reads it (mul_mat_vec_q.comp with
// SWIGLU_X): fused for the fast-path types; not for F16 (generic kernel) or when another node
// reads the SWIGLU result.
TEST_CASE("[vulkan] fused swiglu + mul_mat (FFN down)") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0) &&
                      !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats  st;
    // Q4_0, Q8_0, Q4_K: the QX kernels (EMBER_VULKAN_MMV_QX=all), then the float ones (=0).
    for (const char * qx : {"all", "0"}) {
    env_guard eq("EMBER_VULKAN_MMV_QX", qx);
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_F16}) {
        for (int64_t m : {1, 3}) {
            CAPTURE(std::string(qx));
            CAPTURE(std::string(ember_type_get_name(t)));
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                ember_tensor * gate = new_input(g, in, EMBER_TYPE_F32, 1024, m, 1, 1, 100);
                ember_tensor * up   = new_input(g, in, EMBER_TYPE_F32, 1024, m, 1, 1, 101);
                return ember_mul_mat(g, new_input(g, in, t, 1024, 70, 1, 1, 102), ember_swiglu(g, gate, up));
            }, 2e-4, &st);
            const bool fast = fuse && t != EMBER_TYPE_F16;
            CHECK(st.fused == (fast ? 1u : 0u));
            CHECK(st.dispatches - st.xq == (fast ? 1u : 2u));
        }
    }
    }
    compare([=](ember_graph & g, std::vector<input> & in) {  // the SWIGLU read twice
        ember_tensor * h = ember_swiglu(g, new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 103), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 104));
        ember_tensor * y = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 512, 1, 1, 105), h);
        return ember_add(g, y, h);
    }, 2e-4, &st);
    CHECK(st.fused == 0u);
    CHECK(st.dispatches - st.xq == 3u);
}

// ROPE (mode 0) of the heads of a decode matrix-vector product done as the product writes
// (mul_mat_vec_q.comp with ROPE_OUT; the Q and K projections): every fast-path type, 1 and 3
// tokens, whole and partial rotation, frequency factors; not for NEOX pairs, not when the
// product is read by another node too.
TEST_CASE("[vulkan] fused mul_mat + rope (Q, K projections)") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0) &&
                      !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats  st;
    // The QX kernels (Q4_0, Q8_0, Q4_K: x quantized once beforehand for one column, then per
    // workgroup: "wg", EMBER_VULKAN_MMV_QX_PRE=0), then the float ones.
    for (const char * qx : {"all", "wg", "0"}) {
    env_guard eq("EMBER_VULKAN_MMV_QX", std::strcmp(qx, "wg") == 0 ? "all" : qx);
    env_guard ep("EMBER_VULKAN_MMV_QX_PRE", std::strcmp(qx, "wg") == 0 ? "0" : nullptr);
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
        for (int64_t m : {1, 3}) {
            for (int32_t n_rot : {64, 32}) {
                for (int64_t n_head : {8, 2}) {  // 2 heads: fewer rows than one workgroup's
                    CAPTURE(std::string(qx));
                    CAPTURE(std::string(ember_type_get_name(t)));
                    CAPTURE(m);
                    CAPTURE(n_rot);
                    CAPTURE(n_head);
                    compare([=](ember_graph & g, std::vector<input> & in) {
                        ember_tensor * y   = ember_mul_mat(g, new_input(g, in, t, 512, 64 * n_head, 1, 1, 110), new_input(g, in, EMBER_TYPE_F32, 512, m, 1, 1, 111));
                        std::vector<int32_t> p = {17, 300, 4095};
                        p.resize((size_t) m);
                        ember_tensor * pos = new_ids(g, in, p);
                        ember_tensor * f   = nullptr;
                        if (n_rot == 32) {
                            f = g.new_tensor(EMBER_TYPE_F32, n_rot / 2);
                            in.push_back({f, random_f32((size_t) n_rot / 2, 112, 1.0f, 8.0f), {}, {}});
                        }
                        return ember_rope(g, ember_view(g, y, 64, n_head, m), pos, f, n_rot, EMBER_ROPE_NORMAL, 10000.0f, f ? 0.5f : 1.0f);
                    }, 2e-4, &st);
                    CHECK(st.fused == (fuse ? 1u : 0u));
                    CHECK(st.dispatches - st.xq == (fuse ? 1u : 2u));
                }
            }
        }
    }
    }
    SUBCASE("neox: not fused") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 113), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 114));
            return ember_rope(g, ember_view(g, y, 64, 4, 1), new_ids(g, in, {9}), nullptr, 64, EMBER_ROPE_NEOX, 10000.0f, 1.0f);
        }, 2e-4, &st);
        CHECK(st.fused == 0u);
    }
    SUBCASE("the product read twice: not fused") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 115), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 116));
            ember_tensor * r = ember_rope(g, ember_view(g, y, 64, 4, 1), new_ids(g, in, {9}), nullptr, 64, EMBER_ROPE_NORMAL, 10000.0f, 1.0f);
            return ember_add(g, ember_view(g, r, 256, 1), y);
        }, 2e-4, &st);
        CHECK(st.fused == 0u);
    }
}

// The K projection (product, ROPE, SET_ROWS of its columns) and the V projection (product,
// SET_ROWS) of a decode step into an F16 cache: each one dispatch that writes the cache
// (mul_mat_vec_q.comp with KV_OUT), unless EMBER_VULKAN_FUSE_KV=0 or fusion is off. A repeated
// index: the later column wins; an index out of range: reported, as by SET_ROWS.
TEST_CASE("[vulkan] fused mul_mat (+ rope) + set_rows into an F16 cache (K, V projections)") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse_env = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0) &&
                          !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats  st;
    auto k_proj = [](ember_type t, int64_t m, int64_t n_head, int32_t n_rot, std::vector<int32_t> ids) {
        return [=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y = ember_mul_mat(g, new_input(g, in, t, 512, 64 * n_head, 1, 1, 120), new_input(g, in, EMBER_TYPE_F32, 512, m, 1, 1, 121));
            std::vector<int32_t> p = {17, 300, 4095};
            p.resize((size_t) m);
            ember_tensor * f = nullptr;
            if (n_rot == 32) {
                f = g.new_tensor(EMBER_TYPE_F32, n_rot / 2);
                in.push_back({f, random_f32((size_t) n_rot / 2, 122, 1.0f, 8.0f), {}, {}});
            }
            ember_tensor * r     = ember_rope(g, ember_view(g, y, 64, n_head, m), new_ids(g, in, p), f, n_rot, EMBER_ROPE_NORMAL, 10000.0f,
                                              f ? 0.5f : 1.0f);
            ember_tensor * cache = new_input(g, in, EMBER_TYPE_F16, 64 * n_head, 12, 1, 1, 123);
            return ember_set_rows(g, cache, ember_view(g, r, 64 * n_head, m), new_ids(g, in, ids));
        };
    };
    auto v_proj = [](ember_type t, int64_t m, int64_t rows, std::vector<int32_t> ids) {
        return [=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y     = ember_mul_mat(g, new_input(g, in, t, 512, rows, 1, 1, 124), new_input(g, in, EMBER_TYPE_F32, 512, m, 1, 1, 125));
            ember_tensor * cache = new_input(g, in, EMBER_TYPE_F16, rows, 12, 1, 1, 126);
            return ember_set_rows(g, cache, y, new_ids(g, in, ids));
        };
    };
    // The QX kernels for Q4_0, Q8_0, Q4_K (EMBER_VULKAN_MMV_QX=all; "wg": x quantized per
    // workgroup, EMBER_VULKAN_MMV_QX_PRE=0), then the float ones (=0).
    for (const char * qx : {"all", "wg", "0"})
    for (const char * kv_env : {(const char *) nullptr, "0"}) {
        env_guard  eq("EMBER_VULKAN_MMV_QX", std::strcmp(qx, "wg") == 0 ? "all" : qx);
        env_guard  ep("EMBER_VULKAN_MMV_QX_PRE", std::strcmp(qx, "wg") == 0 ? "0" : nullptr);
        env_guard  eg("EMBER_VULKAN_FUSE_KV", kv_env);
        const bool fuse = fuse_env && !kv_env;
        CAPTURE(std::string(qx));
        CAPTURE(fuse);
        for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
            CAPTURE(std::string(ember_type_get_name(t)));
            for (int64_t m : {1, 3}) {
                CAPTURE(m);
                const std::vector<int32_t> ids = m == 1 ? std::vector<int32_t>{7} : std::vector<int32_t>{5, 2, 5};  // 5 twice: the last wins
                for (int32_t n_rot : {64, 32}) {
                    for (int64_t n_head : {8, 2}) {  // 2 heads: fewer rows than one workgroup's
                        CAPTURE(n_rot);
                        CAPTURE(n_head);
                        compare(k_proj(t, m, n_head, n_rot, ids), 2e-4, &st);
                        CHECK(st.dispatches - st.xq == (fuse ? 1u : fuse_env ? 2u : 3u));
                    }
                }
                for (int64_t rows : {512, 128, 32}) {
                    CAPTURE(rows);
                    compare(v_proj(t, m, rows, ids), 2e-4, &st);
                    CHECK(st.dispatches - st.xq == (fuse ? 1u : 2u));
                    CHECK(st.fused == (fuse ? 1u : 0u));
                }
            }
        }
        for (int32_t bad : {12, -1}) {
            CAPTURE(bad);
            for (const builder & b : {builder(k_proj(EMBER_TYPE_Q4_0, 3, 8, 64, {4, bad, 0})), builder(v_proj(EMBER_TYPE_Q8_0, 3, 256, {4, bad, 0}))}) {
                ember_status       sc = EMBER_OK, sv = EMBER_OK;
                std::vector<float> ref = run_on(ember_registry_cpu_device(), b, nullptr, nullptr, &sc);
                std::vector<float> got = run_on(vk_device(), b, nullptr, nullptr, &sv);
                CHECK(sc == EMBER_ERR_INTERNAL);
                CHECK(sv == EMBER_ERR_INTERNAL);
                CHECK(nmse(ref, got) < 2e-4);
            }
        }
    }
    SUBCASE("an F32 cache: not fused") {
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 127), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 128));
            return ember_set_rows(g, new_input(g, in, EMBER_TYPE_F32, 256, 4, 1, 1, 129), y, new_ids(g, in, {1}));
        }, 2e-4, &st);
        CHECK(st.dispatches - st.xq == 2u);
    }
    SUBCASE("the product read twice: not fused") {
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * y = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 130), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 131));
            ember_tensor * s = ember_set_rows(g, new_input(g, in, EMBER_TYPE_F16, 256, 4, 1, 1, 132), y, new_ids(g, in, {1}));
            return ember_add(g, ember_get_rows(g, s, new_ids(g, in, {1})), y);
        }, 2e-4, &st);
        CHECK(st.dispatches - st.xq == 4u);
        CHECK(st.fused == 0u);
    }
}

// Barriers only where a dispatch depends on an earlier one: three matrix-vector products of
// one input run as one level; a SET_ROWS into a table that an earlier GET_ROWS read waits for
// it (write after read) and the GET_ROWS of the new table for it (read after write).
// EMBER_VULKAN_BARRIERS=all and EMBER_VULKAN_PROFILE=1: a barrier after every dispatch.
TEST_CASE("[vulkan] barriers between dependency levels only") {
    REQUIRE_VK();
    validation_guard vg;
    const bool       all = (std::getenv("EMBER_VULKAN_BARRIERS") && std::strcmp(std::getenv("EMBER_VULKAN_BARRIERS"), "all") == 0) ||
                     (std::getenv("EMBER_VULKAN_PROFILE") && std::strcmp(std::getenv("EMBER_VULKAN_PROFILE"), "0") != 0 &&
                      std::getenv("EMBER_VULKAN_PROFILE")[0] != '\0');
    rec_stats        st;
    SUBCASE("q, k, v of one input") {
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 90);
            ember_tensor * q = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 64, 1, 1, 91), x);
            ember_tensor * k = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q8_0, 512, 64, 1, 1, 92), x);
            ember_tensor * v = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_F16, 512, 64, 1, 1, 93), x);
            return ember_add(g, ember_add(g, q, k), v);
        }, 2e-4, &st);
        CHECK(st.dispatches - st.xq == 5u);
        CHECK(st.barriers == (all ? 4u : 2u) + st.xq);  // q after the quantization of x (QX_PRE)
    }
    SUBCASE("get_rows, set_rows into the same table, get_rows again") {
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * table = new_input(g, in, EMBER_TYPE_F32, 64, 8, 1, 1, 94);
            ember_tensor * r1    = ember_get_rows(g, table, new_ids(g, in, {1, 5}));
            ember_tensor * set   = ember_set_rows(g, table, new_input(g, in, EMBER_TYPE_F32, 64, 2, 1, 1, 95), new_ids(g, in, {5, 2}));
            ember_tensor * r2    = ember_get_rows(g, set, new_ids(g, in, {1, 5}));
            return ember_add(g, r1, r2);
        }, 1e-12, &st);
        CHECK(st.dispatches - st.xq == 4u);
        CHECK(st.barriers == 3u);
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
                        in.push_back({f, random_f32((size_t) n_rot / 2, 12, 1.0f, 8.0f), {}, {}});
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
            return ember_get_rows(g, new_input(g, in, t, test_row_len(t), 10, 1, 1, 13), new_ids(g, in, {3, 0, 9, 3, 5}));
        }, 1e-12);
    }
    SUBCASE("NF4 rows of two groups (257 blocks)") {
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_get_rows(g, new_input(g, in, EMBER_TYPE_NF4, 64 * 257, 3, 1, 1, 13), new_ids(g, in, {2, 0, 1}));
        }, 1e-12);
    }
}

// Every code of the lookup tables: NF4's 256 DYN scales times its 16 levels, FP8's 256 codes
// (NaN and infinities included) under every E8M0 exponent. Bit-exact on the device.
TEST_CASE("[vulkan] get_rows: NF4 and FP8 tables bit-exact") {
    REQUIRE_VK();
    validation_guard vg;
    auto exact = [](const builder & b) {
        const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
        const std::vector<float> got = run_on(vk_device(), b);
        REQUIRE(ref.size() == got.size());
        size_t bad = 0;
        for (size_t i = 0; i < ref.size(); i++) {
            // GPUs may flush float denormals to zero (NVIDIA does in shaders): a denormal
            // reference value matches a zero of the same sign.
            const bool ftz  = std::fpclassify(ref[i]) == FP_SUBNORMAL && got[i] == 0.0f && std::signbit(got[i]) == std::signbit(ref[i]);
            const bool same = std::isnan(ref[i]) ? std::isnan(got[i]) : (std::memcmp(&ref[i], &got[i], sizeof(float)) == 0 || ftz);
            if (!same && bad++ < 5) MESSAGE("element " << i << ": CPU " << ref[i] << ", device " << got[i]);
        }
        CHECK(bad == 0);
    };
    SUBCASE("NF4") {
        exact([](ember_graph & g, std::vector<input> & in) {
            // One row of 256 blocks: block b has absmax_q = b and the 16 levels twice each.
            ember_tensor *       t = g.new_tensor(EMBER_TYPE_NF4, 64 * 256, 1);
            std::vector<uint8_t> raw(ember_nbytes(t));
            const float          scale2 = 0.75f, offset = 0.3125f;
            std::memcpy(raw.data(), &scale2, 4);
            std::memcpy(raw.data() + 4, &offset, 4);
            for (int b = 0; b < 256; b++) {
                uint8_t * blk = raw.data() + 8 + 33 * b;
                blk[0]        = (uint8_t) b;
                for (int i = 0; i < 32; i++) blk[1 + i] = (uint8_t) ((i & 15) | ((15 - (i & 15)) << 4));
            }
            in.push_back({t, {}, {}, raw});
            return ember_get_rows(g, t, new_ids(g, in, {0}));
        });
    }
    for (ember_type ty : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        CAPTURE(std::string(ember_type_get_name(ty)));
        exact([ty](ember_graph & g, std::vector<input> & in) {
            // Row e: 8 blocks of 32 codes (all 256) with exponent byte e (0: a subnormal scale,
            // left out: devices may flush it).
            const std::vector<int> exps = {1, 100, 120, 127, 130, 200, 254};
            ember_tensor *         t    = g.new_tensor(ty, 256, (int64_t) exps.size());
            std::vector<uint8_t>   raw(ember_nbytes(t));
            for (size_t r = 0; r < exps.size(); r++) {
                for (int b = 0; b < 8; b++) {
                    uint8_t * blk = raw.data() + r * 8 * 33 + 33 * b;
                    blk[0]        = (uint8_t) exps[r];
                    for (int i = 0; i < 32; i++) blk[1 + i] = (uint8_t) (32 * b + i);
                }
            }
            in.push_back({t, {}, {}, raw});
            std::vector<int32_t> ids;
            for (size_t r = 0; r < exps.size(); r++) ids.push_back((int32_t) r);
            return ember_get_rows(g, t, new_ids(g, in, ids));
        });
    }
    for (ember_type ty : {EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW}) {
        CAPTURE(std::string(ember_type_get_name(ty)));
        exact([ty](ember_graph & g, std::vector<input> & in) {
            ember_tensor *       t = g.new_tensor(ty, 256, 2);
            std::vector<uint8_t> raw(ember_nbytes(t));
            const float          scales[2] = {1.0f, -0.0371f};
            for (int r = 0; r < 2; r++) {
                std::memcpy(raw.data() + r * 260, &scales[r], 4);
                for (int i = 0; i < 256; i++) raw[r * 260 + 4 + i] = (uint8_t) i;
            }
            in.push_back({t, {}, {}, raw});
            return ember_get_rows(g, t, new_ids(g, in, {1, 0}));
        });
    }
}

TEST_CASE("[vulkan] mul_mat for every weight type: vector and tiled kernels, batch broadcast") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type t : k_dq_types) {
        // The CPU rounds activations to the weight's vec_dot_type (F16, Q8_0, Q8_1, Q8_K); the
        // device keeps them in F32, so quantized types differ by that rounding.
        const double tol = t == EMBER_TYPE_F32 ? 1e-10 : t == EMBER_TYPE_F16 ? 1e-6 : t == EMBER_TYPE_BF16 ? 1e-5 : 2e-4;
        const int64_t k  = test_row_len(t);
        for (int64_t m : {1, 3, 70}) {
            CAPTURE(std::string(ember_type_get_name(t)));
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                return ember_mul_mat(g, new_input(g, in, t, k, 67, 1, 1, 14), new_input(g, in, EMBER_TYPE_F32, k, m, 1, 1, 15));
            }, tol);
        }
    }
    SUBCASE("NF4 rows of two groups (257 blocks)") {
        for (int64_t m : {1, 70}) {
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_NF4, 64 * 257, 5, 1, 1, 14),
                                     new_input(g, in, EMBER_TYPE_F32, 64 * 257, m, 1, 1, 15));
            }, 2e-4);
        }
    }
    // Partial tiles at both edges, several tiles each way (EMBER_VULKAN_MM_BIG=1: the
    // 128 x 128 tiles, else 64 x 64), two batches.
    SUBCASE("several tiles each way") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 256, 200, 2, 1, 18),
                                 new_input(g, in, EMBER_TYPE_F32, 256, 150, 2, 1, 19));
        }, 2e-4);
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

// Prefill products big enough for both tile sizes of the kernels: on a device with
// cooperative matrices (mul_mm_coop.comp: weights and x rounded to f16 in shared memory,
// products into f32) 64 x 64 tiles for the first shape and 128 x 128 for the batched one
// (128 tiles), partial tiles at every edge, weights broadcast over batches; elsewhere the same
// shapes on mul_mm.comp. F16 rows of 197 and 200 weights: the last step short of 32 k-values,
// and of a whole run of 8.
TEST_CASE("[vulkan] mul_mat prefill tiles (cooperative matrices where the device has them)") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL}) {
        CAPTURE(std::string(ember_type_get_name(t)));
        const double  tol = t == EMBER_TYPE_F16 ? 1e-6 : 2e-4;
        const int64_t k   = t == EMBER_TYPE_Q4_K || t == EMBER_TYPE_Q6_K ? 512 : 256;
        compare([=](ember_graph & g, std::vector<input> & in) {
            return ember_mul_mat(g, new_input(g, in, t, k, 300, 1, 1, 70), new_input(g, in, EMBER_TYPE_F32, k, 260, 1, 1, 71));
        }, tol);
        compare([=](ember_graph & g, std::vector<input> & in) {
            return ember_mul_mat(g, new_input(g, in, t, k, 130, 4, 1, 72), new_input(g, in, EMBER_TYPE_F32, k, 130, 32, 1, 73));
        }, tol);
    }
    for (int64_t k : {197, 200}) {
        CAPTURE(k);
        compare([=](ember_graph & g, std::vector<input> & in) {
            return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_F16, k, 150, 1, 1, 74), new_input(g, in, EMBER_TYPE_F32, k, 90, 1, 1, 75));
        }, 1e-6);
    }
}

// The decode kernel of Q4_0, Q8_0, Q4_K and Q6_K (mul_mat_vec_q.comp: rows of 256-weight
// units, 1 to 32 invocations per row; Q4_0 by quarter blocks, 32 invocations per row, unless
// EMBER_VULKAN_MMV_Q4_0=units): rows of 3 units (Q6_K rows then start on 2 bytes mod 4
// every other row), 17 (more units than 16 invocations) and 130 (32 invocations, 4 or 5
// units each), a row count that is not a multiple of the rows per workgroup, up to 4
// columns, batches with broadcast weights.
// INT4, INT4_G32, FP8_E4M3, FP8_E5M2 and NF4 by the QX kernels.
// Q8_0 and Q6_K both ways: small units (QQ, the default) and 256-weight units
// (EMBER_VULKAN_MMV_Q8_0=units, EMBER_VULKAN_MMV_Q6_K=units). The small-unit kernels take up
// to 128 invocations per row for few long rows (the 37 rows of 130 units here), or 32 and 2
// rows each ("qq2": EMBER_VULKAN_MMV_LPR=32, EMBER_VULKAN_MMV_QQ_ROWS=2), with 1 quarter per step
// ("qq2": EMBER_VULKAN_MMV_QQ_U=1), 4 (the default) or 8 ("nosg").
TEST_CASE("[vulkan] mul_mat decode kernel for Q4_0, Q8_0, Q4_K, Q6_K, INT4, FP8, NF4") {
    REQUIRE_VK();
    validation_guard vg;
    // nosg: the small-unit kernels with shared-memory reductions only (EMBER_VULKAN_MMV_SG=0).
    // The QX kernels (x quantized to 8 bits, integer products: Q4_0, Q8_0, Q4_K by default, Q6_K
    // too with EMBER_VULKAN_MMV_QX=all; rows up to 16384 long, the 130-unit rows on the float
    // kernels): "qx" (=all) with integer dot product instructions where the device has them,
    // "qx_nodot" without (EMBER_VULKAN_MMV_QX=nodot),
    // "qx_r1" 1 row per invocation, 16 invocations per row, 4 units per step (EMBER_VULKAN_MMV_QX_ROWS=1,
    // EMBER_VULKAN_MMV_QX_LPR=16, EMBER_VULKAN_MMV_QX_U=4; else 1), "qx_64" 64 per row in
    // workgroups of 64, 2 rows each, 2 units per step (Q4_K too: EMBER_VULKAN_MMV_QX_ROWS=2,
    // EMBER_VULKAN_MMV_QX_U=2). The other modes
    // the float kernels (EMBER_VULKAN_MMV_QX=0).
    // "qx_wg": x quantized per workgroup also for one column (EMBER_VULKAN_MMV_QX_PRE=0; else
    // once beforehand, quantize_x.comp).
    for (const char * mode : {"qx", "qx_wg", "qx_nodot", "qx_r1", "qx_64", "qq", "units", "qq2", "nosg"}) {
    CAPTURE(std::string(mode));
    const bool qq2  = std::strcmp(mode, "qq2") == 0;
    const bool nosg = std::strcmp(mode, "nosg") == 0;
    const bool qx   = std::strncmp(mode, "qx", 2) == 0;
    env_guard eq("EMBER_VULKAN_MMV_QX", !qx ? "0" : std::strcmp(mode, "qx_nodot") == 0 ? "nodot" : "all");
    env_guard epre("EMBER_VULKAN_MMV_QX_PRE", std::strcmp(mode, "qx_wg") == 0 ? "0" : nullptr);
    env_guard eqr("EMBER_VULKAN_MMV_QX_ROWS", std::strcmp(mode, "qx_r1") == 0 ? "1" : std::strcmp(mode, "qx_64") == 0 ? "2" : nullptr);
    env_guard eql("EMBER_VULKAN_MMV_QX_LPR", std::strcmp(mode, "qx_r1") == 0 ? "16" : std::strcmp(mode, "qx_64") == 0 ? "64" : nullptr);
    env_guard eqw("EMBER_VULKAN_MMV_QX_WG", std::strcmp(mode, "qx_64") == 0 ? "64" : nullptr);
    env_guard equ("EMBER_VULKAN_MMV_QX_U", std::strcmp(mode, "qx_r1") == 0 ? "4" : std::strcmp(mode, "qx_64") == 0 ? "2" : nullptr);
    env_guard eqq("EMBER_VULKAN_MMV_QQ_U", qq2 ? "1" : nosg ? "8" : nullptr);
    env_guard e8("EMBER_VULKAN_MMV_Q8_0", mode);
    env_guard e6("EMBER_VULKAN_MMV_Q6_K", mode);
    env_guard el("EMBER_VULKAN_MMV_LPR", qq2 ? "32" : nullptr);
    env_guard er("EMBER_VULKAN_MMV_QQ_ROWS", qq2 ? "2" : nullptr);
    env_guard es("EMBER_VULKAN_MMV_SG", nosg ? "0" : nullptr);
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32,
                         EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_NF4}) {
        if (std::strcmp(mode, "qq") != 0 && !nosg && !qx && t != EMBER_TYPE_Q8_0 && t != EMBER_TYPE_Q6_K) continue;
        // INT4 (groups of 128: rows of 68-byte groups on 4 bytes), INT4_G32, the FP8 types
        // (33-byte blocks: rows on any byte) and NF4 (33-byte blocks of 64 after a group
        // header): the QX kernels only (the others leave them to the
        // generic one), with and without dot instructions and with 4 units per step.
        const bool own = t == EMBER_TYPE_INT4 || t == EMBER_TYPE_INT4_G32 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 ||
                         t == EMBER_TYPE_NF4;
        if (own && std::strcmp(mode, "qx") != 0 && std::strcmp(mode, "qx_nodot") != 0 && std::strcmp(mode, "qx_r1") != 0) continue;
        for (int64_t k : {768, 17 * 256, 64 * 256, 130 * 256}) {
            if (k == 64 * 256 && !qx) continue;  // the longest QX row
            for (int64_t m : {1, 4}) {
                CAPTURE(std::string(ember_type_get_name(t)));
                CAPTURE(k);
                CAPTURE(m);
                rec_stats st;
                compare([=](ember_graph & g, std::vector<input> & in) {
                    return ember_mul_mat(g, new_input(g, in, t, k, 37, 1, 1, 60), new_input(g, in, EMBER_TYPE_F32, k, m, 1, 1, 61));
                }, 2e-4, &st);
                // One column of the QX kernels: x quantized once beforehand (unless qx_wg).
                const bool pre = qx && std::strcmp(mode, "qx_wg") != 0 && m == 1 && k <= 64 * 256;
                CHECK(st.xq == (pre ? 1u : 0u));
            }
        }
        CAPTURE(std::string(ember_type_get_name(t)));
        // Many short rows: 128-invocation workgroups with 2 rows per invocation (4 columns),
        // and 32-invocation ones (1 column); the 37-row products above take 1 row each.
        for (int64_t m : {1, 4}) {
            CAPTURE(m);
            compare([=](ember_graph & g, std::vector<input> & in) {
                return ember_mul_mat(g, new_input(g, in, t, 256, 32768 + 5, 1, 1, 64), new_input(g, in, EMBER_TYPE_F32, 256, m, 1, 1, 65));
            }, 2e-4);
        }
        compare([=](ember_graph & g, std::vector<input> & in) {  // batched, weights broadcast
            return ember_mul_mat(g, new_input(g, in, t, 512, 9, 2, 1, 62), new_input(g, in, EMBER_TYPE_F32, 512, 1, 4, 1, 63));
        }, 2e-4);
    }
    }
}

// Q6_K products of one column by the kernel that stages rows through shared memory
// (mul_mat_vec_q6s.comp; x quantized beforehand): rows of 8 super-blocks (one segment, as the
// 1B output matrix), 16 (two, 8B), 56 (seven segments: Q4_K_M's 8B FFN down) and
// 64; row counts that leave the last row groups partly or wholly empty; the defaults (4 and
// 2 rows per row group for the first two, the last two dealt among 4 row groups: the last
// group of 7 segments then has only one), 1, 2, 4, 8 rows per row group for all, and the rows
// dealt among 2 row groups (an odd count of segments, 7, leaves the second short), also with 4
// rows per pair of row groups (two segments: each row group's steps then read one x); row groups waiting for their own subgroup only (the default where
// subgroups are 32 wide; lavapipe's are narrower, so only a GPU such as the H200 runs it; split
// rows take the workgroup barrier) or for the workgroup (EMBER_VULKAN_MMV_Q6_K_SYNC=workgroup);
// with and without the integer dot instructions; one-segment rows with x loaded at every step
// (EMBER_VULKAN_MMV_Q6_K_XH=0) instead of once. Not taken: rows of
// 17 super-blocks (not on 16 bytes), 4 columns, EMBER_VULKAN_MMV_Q6_K=qq.
TEST_CASE("[vulkan] Q6_K decode products: rows staged through shared memory") {
    REQUIRE_VK();
    validation_guard vg;
    bool       fast = false;
    const bool dot  = ember_vulkan_integer_dot(vk_device(), &fast);
    for (const char * mode : {"default", "nodot", "rows1", "rows2", "rows4", "rows8", "split2", "wgsync", "rows8_wgsync", "nohoist", "split2_rows4"}) {
        CAPTURE(std::string(mode));
        env_guard  eh("EMBER_VULKAN_MMV_Q6_K_XH", std::strcmp(mode, "nohoist") == 0 ? "0" : nullptr);
        env_guard  eq("EMBER_VULKAN_MMV_QX", std::strcmp(mode, "nodot") == 0 ? "nodot" : nullptr);
        env_guard  es("EMBER_VULKAN_MMV_Q6_K_SPLIT", std::strncmp(mode, "rows", 4) == 0 ? "1" : std::strncmp(mode, "split2", 6) == 0 ? "2" : nullptr);
        env_guard  er("EMBER_VULKAN_MMV_Q6_K_ROWS", std::strcmp(mode, "rows1") == 0   ? "1"
                                                            : std::strcmp(mode, "rows2") == 0 ? "2"
                                                            : std::strcmp(mode, "rows4") == 0 || std::strcmp(mode, "split2_rows4") == 0 ? "4"
                                                            : std::strncmp(mode, "rows8", 5) == 0 ? "8"
                                                                                              : nullptr);
        env_guard  ey("EMBER_VULKAN_MMV_Q6_K_SYNC", std::strstr(mode, "wgsync") ? "workgroup" : nullptr);
        const bool dp   = dot && std::strcmp(mode, "nodot") != 0;
        const std::string name = dp ? "mul_mat_vec_q6s_dp" : "mul_mat_vec_q6s";
        for (int64_t k : {2048, 4096, 56 * 256, 64 * 256}) {
            for (int64_t n : {9, 37, 1029}) {  // (one row: its NMSE is that of a single sum)
                if (k > 4096 && n == 1029) continue;  // (time)
                CAPTURE(k);
                CAPTURE(n);
                rec_stats st;
                compare([=](ember_graph & g, std::vector<input> & in) {
                    return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q6_K, k, n, 1, 1, 90), new_input(g, in, EMBER_TYPE_F32, k, 1, 1, 1, 91));
                }, 2e-4, &st);
                CHECK(st.has(name));
                CHECK(st.xq == 1u);
            }
        }
    }
    rec_stats st;
    compare([](ember_graph & g, std::vector<input> & in) {  // rows not on 16 bytes
        return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q6_K, 17 * 256, 9, 1, 1, 92), new_input(g, in, EMBER_TYPE_F32, 17 * 256, 1, 1, 1, 93));
    }, 2e-4, &st);
    CHECK_FALSE((st.has("mul_mat_vec_q6s") || st.has("mul_mat_vec_q6s_dp")));
    compare([](ember_graph & g, std::vector<input> & in) {  // 4 columns
        return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q6_K, 2048, 9, 1, 1, 94), new_input(g, in, EMBER_TYPE_F32, 2048, 4, 1, 1, 95));
    }, 2e-4, &st);
    CHECK_FALSE((st.has("mul_mat_vec_q6s") || st.has("mul_mat_vec_q6s_dp")));
    env_guard e6("EMBER_VULKAN_MMV_Q6_K", "qq");
    compare([](ember_graph & g, std::vector<input> & in) {
        return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q6_K, 2048, 9, 1, 1, 96), new_input(g, in, EMBER_TYPE_F32, 2048, 1, 1, 1, 97));
    }, 2e-4, &st);
    CHECK_FALSE((st.has("mul_mat_vec_q6s") || st.has("mul_mat_vec_q6s_dp")));
    CHECK(st.xq == 0u);
}

// Which Q6_K weights the Vulkan backend converts to the planar layout at upload: model weights,
// rows of a multiple of 2048, contiguous (the layout itself: test_q6k_planar.cpp).
TEST_CASE("[vulkan] planar Q6_K layout: which weights are converted") {
    ember_graph    g;
    ember_tensor * w = g.new_tensor(EMBER_TYPE_Q6_K, 2048, 4);
    CHECK_FALSE(ember_vk_repack_wanted(w));  // (not a weight)
    w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    CHECK(ember_vk_repack_wanted(w));
    ember_tensor * w2 = g.new_tensor(EMBER_TYPE_Q6_K, 1792, 4);
    w2->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    CHECK_FALSE(ember_vk_repack_wanted(w2));
    ember_tensor * w3 = g.new_tensor(EMBER_TYPE_Q4_K, 2048, 4);
    w3->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    CHECK_FALSE(ember_vk_repack_wanted(w3));
}

// Q6_K weights converted to the planar layout at upload (vk-repack.h), against the CPU: decode
// products of one column by mul_mat_vec_q6p.comp (x quantized beforehand) for rows of 1, 2, 3
// and 7 segments (one, two, three and seven row groups per row), row counts that leave row
// groups partly or wholly past the last row, 1, 2, 4 (default) and 8 rows per row group, with
// and without the integer dot instructions; 4 columns (the dequantizing matrix-vector kernel's
// "q6_kp" variant), prefill (mul_mm's), GET_ROWS; the V product of a decode layer (no fused
// cache write with this layout: its own SET_ROWS); EMBER_VULKAN_REPACK=0 (the GGUF layout:
// mul_mat_vec_q6s.comp). Then the tensor itself: flagged, its GGUF bytes read back, a partial write.
TEST_CASE("[vulkan] Q6_K weights in the planar layout") {
    REQUIRE_VK();
    validation_guard vg;
    bool       fast = false;
    const bool dot  = ember_vulkan_integer_dot(vk_device(), &fast);
    for (const char * mode : {"default", "nodot", "rows1", "rows2", "rows8"}) {
        CAPTURE(std::string(mode));
        env_guard         eq("EMBER_VULKAN_MMV_QX", std::strcmp(mode, "nodot") == 0 ? "nodot" : nullptr);
        env_guard         er("EMBER_VULKAN_MMV_Q6P_ROWS", std::strncmp(mode, "rows", 4) == 0 ? mode + 4 : nullptr);
        const bool        dp   = dot && std::strcmp(mode, "nodot") != 0;
        const std::string name = dp ? "mul_mat_vec_q6p_dp" : "mul_mat_vec_q6p";
        for (int64_t k : {2048, 4096, 6144, 14336}) {
            for (int64_t n : {9, 37, 1029}) {
                if (k > 4096 && n == 1029) continue;  // (time)
                if (std::strcmp(mode, "default") != 0 && k == 14336) continue;
                CAPTURE(k);
                CAPTURE(n);
                rec_stats st;
                compare([=](ember_graph & g, std::vector<input> & in) {
                    return ember_mul_mat(g, new_weight(g, in, EMBER_TYPE_Q6_K, k, n, 1, 1, 90), new_input(g, in, EMBER_TYPE_F32, k, 1, 1, 1, 91));
                }, 2e-4, &st);
                CHECK(st.has(name));
                CHECK(st.xq == 1u);
            }
        }
    }
    rec_stats st;
    compare([](ember_graph & g, std::vector<input> & in) {  // 4 columns
        return ember_mul_mat(g, new_weight(g, in, EMBER_TYPE_Q6_K, 4096, 9, 1, 1, 94), new_input(g, in, EMBER_TYPE_F32, 4096, 4, 1, 1, 95));
    }, 2e-4, &st);
    CHECK((st.has("mul_mat_vec_q6_kp") || st.has("mul_mat_vec_q6_kp_nosg")));
    compare([](ember_graph & g, std::vector<input> & in) {  // prefill
        return ember_mul_mat(g, new_weight(g, in, EMBER_TYPE_Q6_K, 2048, 70, 1, 1, 96), new_input(g, in, EMBER_TYPE_F32, 2048, 33, 1, 1, 97));
    }, 1e-3, &st);
    CHECK(std::any_of(st.shaders.begin(), st.shaders.end(), [](const std::string & s) { return s.find("mul_mm") == 0 && s.find("_q6_kp") != std::string::npos; }));
    compare([](ember_graph & g, std::vector<input> & in) {
        return ember_get_rows(g, new_weight(g, in, EMBER_TYPE_Q6_K, 2048, 11, 1, 1, 98), new_ids(g, in, {10, 0, 3, 3}));
    }, 1e-12, &st);
    CHECK(st.has("get_rows_q6_kp"));
    // A decode layer's V product into an F16 cache: the product by q6p, then SET_ROWS.
    compare([](ember_graph & g, std::vector<input> & in) {
        ember_tensor * cache = new_input(g, in, EMBER_TYPE_F16, 256, 8, 1, 1, 99);
        ember_tensor * v     = ember_mul_mat(g, new_weight(g, in, EMBER_TYPE_Q6_K, 2048, 256, 1, 1, 100), new_input(g, in, EMBER_TYPE_F32, 2048, 1, 1, 1, 101));
        return ember_set_rows(g, cache, v, new_ids(g, in, {5}));
    }, 2e-4, &st);
    CHECK((st.has("mul_mat_vec_q6p") || st.has("mul_mat_vec_q6p_dp")));
    {
        env_guard e0("EMBER_VULKAN_REPACK", "0");
        compare([](ember_graph & g, std::vector<input> & in) {
            return ember_mul_mat(g, new_weight(g, in, EMBER_TYPE_Q6_K, 2048, 9, 1, 1, 102), new_input(g, in, EMBER_TYPE_F32, 2048, 1, 1, 1, 103));
        }, 2e-4, &st);
        CHECK_FALSE((st.has("mul_mat_vec_q6p") || st.has("mul_mat_vec_q6p_dp")));
        CHECK((st.has("mul_mat_vec_q6s") || st.has("mul_mat_vec_q6s_dp")));
    }

    ember_test::check_converted_weight_io(vk_device(), EMBER_TYPE_Q6_K, 2048, 5, EMBER_TENSOR_FLAG_VK_REPACKED);
}

// The FFN's gate and up products of one x and their SWIGLU in one dispatch (mul_mat_vec_q.comp
// with GLU_OUT, both matrices' row r by one invocation): every fast-path type (Q8_0 and Q6_K
// also by 256-weight units), 1 and 3 columns, a row count that is not a multiple of the rows
// per workgroup, rows of 3 units (Q6_K rows then start on 2 bytes mod 4 every other row);
// with the down product after it, two dispatches for the whole FFN. Not fused: F16 (generic
// kernel), a product that is read elsewhere too, EMBER_VULKAN_FUSE_GLU=0.
// x quantized once (quantize_x.comp) for every QX product of one column that reads it:
// Q, K, V of one x (Q4_0 with rope, Q4_K into an F16 cache, Q4_0 plain) share one
// quantization; twelve products of twelve inputs take twelve, more than the stream's slots
// (each slot taken again only after the products that read it). EMBER_VULKAN_MMV_QX_PRE=0:
// none (every workgroup quantizes x).
TEST_CASE("[vulkan] decode products: x quantized once per input") {
    REQUIRE_VK();
    validation_guard vg;
    const bool qx = !(std::getenv("EMBER_VULKAN_MMV_QX") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_QX"), "0") == 0) &&
                    !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats st;
    for (const char * pre_env : {(const char *) nullptr, "0"}) {
        env_guard  ep("EMBER_VULKAN_MMV_QX_PRE", pre_env);
        const bool pre = qx && !pre_env;
        CAPTURE(pre);
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x     = new_input(g, in, EMBER_TYPE_F32, 1024, 1, 1, 1, 170);
            ember_tensor * q     = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 1024, 128, 1, 1, 171), x);
            ember_tensor * qr    = ember_rope(g, ember_view(g, q, 64, 2, 1), new_ids(g, in, {7}), nullptr, 64, EMBER_ROPE_NORMAL, 10000.0f, 1.0f);
            ember_tensor * k     = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_K, 1024, 128, 1, 1, 172), x);
            ember_tensor * kc    = ember_set_rows(g, new_input(g, in, EMBER_TYPE_F16, 128, 4, 1, 1, 173), k, new_ids(g, in, {2}));
            ember_tensor * v     = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 1024, 128, 1, 1, 174), x);
            return ember_add(g, ember_add(g, ember_view(g, qr, 128, 1), ember_get_rows(g, kc, new_ids(g, in, {2}))), v);
        }, 2e-4, &st);
        CHECK(st.xq == (pre ? 1u : 0u));
        compare([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * s = nullptr;
            for (uint32_t i = 0; i < 12; i++) {
                ember_tensor * x = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 180 + 2 * i);
                ember_tensor * y = ember_mul_mat(g, new_input(g, in, i % 2 ? EMBER_TYPE_Q4_K : EMBER_TYPE_Q4_0, 512, 64, 1, 1, 181 + 2 * i), x);
                s                = s ? ember_add(g, s, y) : y;
            }
            return s;
        }, 2e-4, &st);
        CHECK(st.xq == (pre ? 12u : 0u));
        CHECK(st.dispatches - st.xq == 23u);
    }
}

// FP8 weights of n rows of 256 whose blocks all have scale byte scale(r) and whose row r holds
// code(r) (none when negative) at position 32 c + c, c = r % 4, by 4 columns of x that are 1
// there and 0 elsewhere: element (r, c) is that code times its block's scale.
builder fp8_code_product(ember_type ty, int64_t n, std::function<uint8_t(int64_t)> scale, std::function<int(int64_t)> code) {
    return [=](ember_graph & g, std::vector<input> & in) {
        const int64_t  k = 256, m = 4;
        ember_tensor * w = g.new_tensor(ty, k, n);
        std::vector<uint8_t> raw(ember_nbytes(w), 0);
        for (int64_t r = 0; r < n; r++) {
            uint8_t * row = raw.data() + r * (k / 32) * 33;
            for (int blk = 0; blk < k / 32; blk++) row[33 * blk] = scale(r);
            const int c = (int) (r % 4);
            if (code(r) >= 0) row[33 * c + 1 + c] = (uint8_t) code(r);
        }
        in.push_back({w, {}, {}, raw});
        ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, k, m);
        std::vector<float> xv((size_t) (k * m), 0.0f);
        for (int64_t c = 0; c < m; c++) xv[(size_t) (c * k + 32 * c + c)] = 1.0f;
        in.push_back({x, floats(std::move(xv)), {}, {}});
        return ember_mul_mat(g, w, x);
    };
}

// The FP8 codes as the QX kernel decodes them (fp8x4: no branches, subnormal codes apart), each
// finite code of both formats checked on its own: row r of the weights holds code r % 256 at
// position 32 c + c (c = r % 4: blocks that start on each byte of a word) and zeros elsewhere,
// x column c is 1 there and 0 elsewhere (quantized exactly: 127 * (1 / 127)), so that element
// (r, c) of the product is that code times its block's scale; block scales 2^0 and 2^3.
TEST_CASE("[vulkan] FP8 decode products: every code") {
    REQUIRE_VK();
    validation_guard vg;
    for (ember_type ty : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        CAPTURE(std::string(ember_type_get_name(ty)));
        const bool    e4 = ty == EMBER_TYPE_FP8_E4M3;
        const builder b  = fp8_code_product(ty, 512, [](int64_t r) { return uint8_t(r < 256 ? 127 : 130); }, [e4](int64_t r) {
            const int code = (int) (r % 256);
            const bool fin = e4 ? (code & 0x7f) != 0x7f : (code & 0x7c) != 0x7c;  // NaN, infinities: left at 0
            return fin ? code : -1;
        });
        rec_stats                st;
        const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
        const std::vector<float> got = run_on(vk_device(), b, nullptr, nullptr, nullptr, &st);
        REQUIRE(ref.size() == got.size());
        CHECK(st.xq == 0u);  // four columns: x quantized in each workgroup, QX all the same
        size_t bad = 0, nonzero = 0;
        for (size_t i = 0; i < ref.size(); i++) {
            nonzero += ref[i] != 0.0f;
            const bool ok = std::fabs(got[i] - ref[i]) <= 2e-6f * std::fabs(ref[i]);
            if (!ok && bad++ < 5) MESSAGE("element " << i << " (row " << i % 512 << "): CPU " << ref[i] << ", device " << got[i]);
        }
        CHECK(bad == 0);
        CHECK(nonzero >= 480u);  // every finite non-zero code, twice
        // The non-finite codes (E4M3: NaN S.1111.111, which the shader flags apart; E5M2: the
        // infinities and NaN, as f16's) give what the CPU gives: NaN or the same infinity.
        const int     odd[4] = {e4 ? 0x7f : 0x7c, e4 ? 0xff : 0xfc, e4 ? 0x7f : 0x7e, 0xff};
        const builder nb     = fp8_code_product(ty, 8, [](int64_t) { return uint8_t(127); },
                                                [odd](int64_t r) { return r < 4 ? odd[r] : -1; });  // rows 4..7 stay finite (zero)
        const std::vector<float> nref = run_on(ember_registry_cpu_device(), nb);
        const std::vector<float> ngot = run_on(vk_device(), nb);
        REQUIRE(nref.size() == ngot.size());
        size_t nonfinite = 0;
        for (size_t i = 0; i < nref.size(); i++) {
            CAPTURE(i);
            nonfinite += !std::isfinite(nref[i]);
            CHECK(std::isnan(nref[i]) == std::isnan(ngot[i]));
            if (!std::isnan(nref[i])) CHECK(nref[i] == ngot[i]);
        }
        CHECK(nonfinite == 16u);  // rows 0..3, every column
    }
}

// The quantized copies of x that the QX_PRE products read, written by the dispatch that makes
// x instead of a quantize_x dispatch (EMBER_VULKAN_MMV_QX_OUT=0: never): by ATTN (the O
// projection's input), by the fused product + add + norm (EMBER_VULKAN_FUSE_NORM=1) or the
// standalone (ADD +) RMS_NORM + MUL (rms_norm.comp XQ_OUT) (the next layer's Q, K, V and
// gate + up), and with =1 by the fused gate + up + SWIGLU too (the FFN down's; unset or
// =noglu: not). A decode layer and a half, with the norms fused into the products and apart:
// the result bit for bit the same as with quantize_x (=0), whose arithmetic the copies repeat,
// and close to the CPU's (five chained products of 8-bit activations and an attention:
// 4e-4..8e-4 NMSE on every path, the float kernels' too); gate + up by the QX kernel (Q4_0, Q8_0,
// Q6_K: several rows per workgroup) and by the small-unit one (Q6_K with EMBER_VULKAN_MMV_Q6_K=qq:
// few rows per workgroup, several workgroups per block); the product + norm by QX and by small
// units (Q6_K, qq); run three times on one stream (the block counters back at zero each time).
namespace {
builder qx_out_layer(ember_type t_gu, ember_type t_down, uint32_t seed) {
    return [=](ember_graph & g, std::vector<input> & in) {
        const int64_t e = 512, hd = 64, nh = 4, nkv = 2, n_kv = 24, ff = 1024;
        ember_tensor * x0 = g.new_tensor(EMBER_TYPE_F32, e, 1);
        in.push_back({x0, random_f32(e, seed), {}, {}});
        ember_tensor * h  = ember_mul(g, ember_rms_norm(g, x0, 1e-5f), new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 200));
        ember_tensor * q  = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, e, hd * nh, 1, 1, 201), h);
        ember_tensor * kc = new_input(g, in, EMBER_TYPE_F16, hd, nkv, n_kv, 1, 202);
        ember_tensor * vc = new_input(g, in, EMBER_TYPE_F16, hd, nkv, n_kv, 1, 203);
        ember_tensor * o  = ember_attn(g, ember_view(g, q, hd, nh, 1), kc, vc, new_input(g, in, EMBER_TYPE_F32, n_kv, 1, 1, 1, 204), 0.125f);
        ember_tensor * s  = ember_add(g, x0, ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_K, hd * nh, e, 1, 1, 205), ember_view(g, o, hd * nh, 1)));
        ember_tensor * h2 = ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 206));
        ember_tensor * gt = ember_mul_mat(g, new_input(g, in, t_gu, e, ff, 1, 1, 207), h2);
        ember_tensor * up = ember_mul_mat(g, new_input(g, in, t_gu, e, ff, 1, 1, 208), h2);
        ember_tensor * s2 = ember_add(g, s, ember_mul_mat(g, new_input(g, in, t_down, ff, e, 1, 1, 209), ember_swiglu(g, gt, up)));
        ember_tensor * h3 = ember_mul(g, ember_rms_norm(g, s2, 1e-5f), new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 210));
        return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_K, e, 256, 1, 1, 211), h3);
    };
}
}  // namespace

TEST_CASE("[vulkan] decode products: quantized x written by its producer") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0) &&
                      !(std::getenv("EMBER_VULKAN_FUSE_GLU") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE_GLU"), "0") == 0);
    for (const char * fuse_norm : {"1", static_cast<const char *>(nullptr)})  // the product + norm (opt-in), the norm apart
    for (const char * q6 : {static_cast<const char *>(nullptr), "qq"})  // Q6_K by QX (the default) | the small-unit kernel
    for (ember_type t_gu : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q6_K}) {
        for (ember_type t_down : {EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}) {
            if (q6 && t_gu != EMBER_TYPE_Q6_K && t_down != EMBER_TYPE_Q6_K) continue;
            env_guard fn("EMBER_VULKAN_FUSE_NORM", fuse_norm);
            env_guard e6("EMBER_VULKAN_MMV_Q6_K", q6);
            CAPTURE(fuse_norm != nullptr);
            CAPTURE(q6 != nullptr);
            CAPTURE(std::string(ember_type_get_name(t_gu)));
            CAPTURE(std::string(ember_type_get_name(t_down)));
            const builder            b   = qx_out_layer(t_gu, t_down, 212);
            const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
            {  // the decode norms of rms_norm_c8.comp (the default): other rounding, so no byte checks
                rec_stats c8;
                CHECK(nmse(ref, run_on(vk_device(), b, nullptr, nullptr, nullptr, &c8)) < 2e-3);
            }
            // The same bytes with and without the producers' quantized copies: norms of
            // rms_norm.comp, whose sum of squares adds in the order quantize_x's input had.
            env_guard                c8("EMBER_VULKAN_NORM_C8", "0");
            std::vector<uint8_t>     on_bytes, off_bytes, ng_bytes;
            rec_stats                on, off, ng;
            std::vector<float>       got;
            {
                env_guard e("EMBER_VULKAN_MMV_QX_OUT", "0");
                run_on(vk_device(), b, nullptr, &off_bytes, nullptr, &off);
            }
            {
                env_guard e("EMBER_VULKAN_MMV_QX_OUT", nullptr);  // the default: =noglu
                run_on(vk_device(), b, nullptr, &ng_bytes, nullptr, &ng);
            }
            {
                env_guard e("EMBER_VULKAN_MMV_QX_OUT", "1");
                got = run_on(vk_device(), b, nullptr, &on_bytes, nullptr, &on);
            }
            CHECK(nmse(ref, got) < 2e-3);
            CHECK(on_bytes == off_bytes);
            CHECK(ng_bytes == off_bytes);
            if (off.xq == 0 || !fuse) {
                MESSAGE("no QX_PRE products or no fusion here: no counts to check");
                continue;
            }
            // Off: x of Q, of O, of gate + up, of down (each if its type is QX: Q6_K not with
            // EMBER_VULKAN_MMV_Q6_K=qq) and of the output. On: none (Q's by the standalone first
            // norm too).
            const unsigned gu_qx = t_gu != EMBER_TYPE_Q6_K || !q6 ? 1u : 0u, down_qx = t_down != EMBER_TYPE_Q6_K || !q6 ? 1u : 0u;
            CHECK(off.xq == 3u + gu_qx + down_qx);
            CHECK(on.xq == 0u);
            CHECK(ng.xq == down_qx);  // the down product's x
            CHECK(on.dispatches == off.dispatches - off.xq + on.xq);
        }
    }
    for (const char * fuse_norm : {"1", static_cast<const char *>(nullptr)})
    SUBCASE(fuse_norm ? "three runs on one stream, the norms in the products" : "three runs on one stream, the norms apart") {
        env_guard          e("EMBER_VULKAN_MMV_QX_OUT", "1");
        env_guard          fn("EMBER_VULKAN_FUSE_NORM", fuse_norm);
        dev_run            r;
        std::vector<input> ins;
        ember_tensor *     out = qx_out_layer(EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, 213)(r.g, ins);
        r.g.build_forward(out);
        r.place(vk_device());
        for (uint32_t seed : {213u, 214u, 215u}) {
            CAPTURE(seed);
            ins[0].f = random_f32(512, seed);  // x0: new values, same tensor
            for (const input & in : ins) set_input(in);
            REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
            r.stream->iface.synchronize(r.stream);
            const std::vector<float> ref = run_on(ember_registry_cpu_device(), qx_out_layer(EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, seed));
            CHECK(nmse(ref, ember_test::get_f32(out)) < 2e-3);
        }
    }
}

// The standalone (ADD +) RMS_NORM + MUL's quantized copy over rows of several rounds of its
// 256 vec4 (2048: two, 4096: four, 1280: a partial last round): the product that reads it gives
// the same bytes as with a quantize_x dispatch, and is close to the CPU's.
TEST_CASE("[vulkan] decode norm: quantized copy of long rows") {
    REQUIRE_VK();
    validation_guard vg;
    for (int64_t e : {1280, 2048, 4096}) {
        for (bool add : {true, false}) {
            CAPTURE(e);
            CAPTURE(add);
            const builder b = [=](ember_graph & g, std::vector<input> & in) {
                ember_tensor * x = new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 230);
                if (add) x = ember_add(g, x, new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 231));
                ember_tensor * h = ember_mul(g, ember_rms_norm(g, x, 1e-5f), new_input(g, in, EMBER_TYPE_F32, e, 1, 1, 1, 232));
                return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, e, 64, 1, 1, 233), h);
            };
            const std::vector<float> ref = run_on(ember_registry_cpu_device(), b);
            std::vector<uint8_t>     on_bytes, off_bytes, c8_bytes;
            rec_stats                on, off, c8;
            std::vector<float>       off_f;
            {
                env_guard q("EMBER_VULKAN_MMV_QX_OUT", "0");
                off_f = run_on(vk_device(), b, nullptr, &off_bytes, nullptr, &off);
            }
            {
                env_guard q("EMBER_VULKAN_NORM_C8", "0");
                const std::vector<float> got = run_on(vk_device(), b, nullptr, &on_bytes, nullptr, &on);
                CHECK(nmse(ref, got) < 2e-3);
                CHECK(on_bytes == off_bytes);
            }
            // rms_norm_c8.comp (the default where it applies): its sum of squares adds in
            // another order, so the normalized values may differ in their last bits.
            const std::vector<float> got = run_on(vk_device(), b, nullptr, &c8_bytes, nullptr, &c8);
            CHECK(nmse(ref, got) < 2e-3);
            CHECK(nmse(off_f, got) < 1e-6);
            if (off.xq > 0) {  // QX_PRE products here: the norm wrote the copy, no quantize_x
                CHECK(on.xq == 0u);
                CHECK(c8.xq == 0u);
                const std::string n = add ? "add_rms_norm_mul" : "rms_norm_mul";
                CHECK((on.has(n + "_sg_xq") || on.has(n + "_xq")));
                CHECK(c8.has(n + "_c8_xq") == (e % 256 == 0));
            }
        }
    }
}

TEST_CASE("[vulkan] fused gate + up + swiglu (FFN)") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0) &&
                      !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats  st;
    env_guard  eg("EMBER_VULKAN_FUSE_GLU", nullptr);
    // qx: the QX kernels for Q4_0, Q8_0, Q4_K (EMBER_VULKAN_MMV_QX=all); qq, units: the float ones
    // (EMBER_VULKAN_MMV_QX=0).
    // qx_wg: the same, x quantized per workgroup also for one column (EMBER_VULKAN_MMV_QX_PRE=0).
    for (const char * mode : {"qx", "qx_wg", "qq", "units"}) {
        const bool qx = std::strncmp(mode, "qx", 2) == 0;
        env_guard eq("EMBER_VULKAN_MMV_QX", qx ? "all" : "0");
        env_guard ep("EMBER_VULKAN_MMV_QX_PRE", std::strcmp(mode, "qx_wg") == 0 ? "0" : nullptr);
        env_guard e8("EMBER_VULKAN_MMV_Q8_0", mode);
        env_guard e6("EMBER_VULKAN_MMV_Q6_K", mode);
        for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_F16, EMBER_TYPE_INT4,
                             EMBER_TYPE_FP8_E4M3, EMBER_TYPE_NF4}) {
            if (std::strcmp(mode, "units") == 0 && t != EMBER_TYPE_Q8_0 && t != EMBER_TYPE_Q6_K) continue;
            if (!qx && (t == EMBER_TYPE_INT4 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_NF4)) continue;  // QX kernels only
            if (qx && t == EMBER_TYPE_F16) continue;  // as in qq
            for (int64_t k : {768, 2048}) {
                for (int64_t m : {1, 3}) {
                    CAPTURE(mode);
                    CAPTURE(std::string(ember_type_get_name(t)));
                    CAPTURE(k);
                    CAPTURE(m);
                    compare([=](ember_graph & g, std::vector<input> & in) {
                        ember_tensor * x    = new_input(g, in, EMBER_TYPE_F32, k, m, 1, 1, 120);
                        ember_tensor * gate = ember_mul_mat(g, new_input(g, in, t, k, 301, 1, 1, 121), x);
                        ember_tensor * up   = ember_mul_mat(g, new_input(g, in, t, k, 301, 1, 1, 122), x);
                        return ember_swiglu(g, gate, up);
                    }, 2e-4, &st);
                    const bool fast = fuse && t != EMBER_TYPE_F16;
                    CHECK(st.fused == (fast ? 1u : 0u));
                    CHECK(st.dispatches - st.xq == (fast ? 1u : 3u));
                }
            }
        }
    }
    SUBCASE("the whole FFN: two dispatches") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x    = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 123);
            ember_tensor * gate = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 1024, 1, 1, 124), x);
            ember_tensor * up   = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 1024, 1, 1, 125), x);
            return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q6_K, 1024, 512, 1, 1, 126), ember_swiglu(g, gate, up));
        }, 2e-4, &st);
        CHECK(st.fused == (fuse ? 1u : 0u));
        CHECK(st.dispatches - st.xq == (fuse ? 2u : 4u));
    }
    SUBCASE("the up product read elsewhere too: not fused") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x    = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 127);
            ember_tensor * gate = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 128), x);
            ember_tensor * up   = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 129), x);
            return ember_add(g, ember_swiglu(g, gate, up), up);
        }, 2e-4, &st);
        CHECK(st.fused == 0u);
        CHECK(st.dispatches - st.xq == 4u);
    }
    SUBCASE("EMBER_VULKAN_FUSE_GLU=0: not fused") {
        env_guard off("EMBER_VULKAN_FUSE_GLU", "0");
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x    = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 130);
            ember_tensor * gate = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q8_0, 512, 256, 1, 1, 131), x);
            ember_tensor * up   = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q8_0, 512, 256, 1, 1, 132), x);
            return ember_swiglu(g, gate, up);
        }, 2e-4, &st);
        CHECK(st.fused == 0u);
        CHECK(st.dispatches - st.xq == 3u);
    }
}

// The decode product of the O or FFN down projection, the residual ADD of it, RMS_NORM and
// MUL by the norm weight in one dispatch (mul_mat_vec_q.comp NORM_OUT: the last workgroup to
// finish does the norm): every fast-path type, row counts that are and are not a multiple of
// the rows per workgroup, the residual as either operand of the ADD, the sum read again
// (the residual stream); two such units chained, and run three times on one stream (each
// dispatch leaves its counter at zero for the next run). Not fused: a row count that is not
// a multiple of 4 (vec4 rows), 3 columns, the product read elsewhere, F16 weights (generic
// kernel), EMBER_VULKAN_FUSE_NORM=0 or unset (the fusion is opt-in: =1).
TEST_CASE("[vulkan] fused mul_mat + add + rms_norm + mul (O, FFN down and the next norm)") {
    REQUIRE_VK();
    validation_guard vg;
    const bool fuse = !(std::getenv("EMBER_VULKAN_FUSE") && std::strcmp(std::getenv("EMBER_VULKAN_FUSE"), "0") == 0);
    const bool mmv  = fuse && !(std::getenv("EMBER_VULKAN_MMV_GENERIC") && std::strcmp(std::getenv("EMBER_VULKAN_MMV_GENERIC"), "0") != 0);
    rec_stats  st;
    env_guard  eg("EMBER_VULKAN_FUSE_NORM", "1");
    // The QX kernels for Q4_0, Q8_0, Q4_K (EMBER_VULKAN_MMV_QX=all; "wg": x quantized per
    // workgroup, EMBER_VULKAN_MMV_QX_PRE=0), then the float ones (=0).
    for (const char * qx : {"all", "wg", "0"}) {
    env_guard eq("EMBER_VULKAN_MMV_QX", std::strcmp(qx, "wg") == 0 ? "all" : qx);
    env_guard ep("EMBER_VULKAN_MMV_QX_PRE", std::strcmp(qx, "wg") == 0 ? "0" : nullptr);
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_F16}) {
        if (std::strcmp(qx, "all") != 0 && t == EMBER_TYPE_F16) continue;  // no QX kernel: done in the first pass
        for (int64_t k : {512, 2048}) {
            CAPTURE(std::string(qx));
            for (int64_t n : {2048, 300, 301}) {
                for (bool res_first : {true, false}) {
                    CAPTURE(std::string(ember_type_get_name(t)));
                    CAPTURE(k);
                    CAPTURE(n);
                    CAPTURE(res_first);
                    compare([=](ember_graph & g, std::vector<input> & in) {
                        ember_tensor * x   = new_input(g, in, EMBER_TYPE_F32, k, 1, 1, 1, 140);
                        ember_tensor * res = new_input(g, in, EMBER_TYPE_F32, n, 1, 1, 1, 141);
                        ember_tensor * mm  = ember_mul_mat(g, new_input(g, in, t, k, n, 1, 1, 142), x);
                        ember_tensor * s   = res_first ? ember_add(g, res, mm) : ember_add(g, mm, res);
                        ember_tensor * y   = ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, n, 1, 1, 1, 143));
                        return ember_add(g, y, s);
                    }, 2e-4, &st);
                    const bool fast = mmv && t != EMBER_TYPE_F16 && n % 4 == 0;
                    // Fused: the product + norm, the last ADD. Else the product, ADD + RMS_NORM + MUL, the last ADD.
                    CHECK(st.fused == (fuse ? 1u : 0u));
                    CHECK(st.dispatches - st.xq == (fast ? 2u : fuse ? 3u : 5u));
                }
            }
        }
    }
    }
    const auto chain = [](uint32_t xseed) {
        return [xseed](ember_graph & g, std::vector<input> & in) {
            ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 1024, 1);
            in.push_back({x, random_f32(1024, xseed), {}, {}});
            ember_tensor * s = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 145);
            ember_tensor * h = x;
            for (int l = 0; l < 2; l++) {
                ember_tensor * w = new_input(g, in, l ? EMBER_TYPE_Q8_0 : EMBER_TYPE_Q4_0, l ? 512 : 1024, 512, 1, 1, 146 + l);
                s = ember_add(g, s, ember_mul_mat(g, w, h));
                h = ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 148 + l));
            }
            return h;
        };
    };
    SUBCASE("two chained, run three times on one stream") {
        dev_run            r;
        std::vector<input> ins;
        ember_tensor *     out = chain(150)(r.g, ins);
        r.g.build_forward(out);
        r.place(vk_device());
        for (uint32_t seed : {150u, 151u, 152u}) {
            CAPTURE(seed);
            ins[0].f = random_f32(1024, seed);  // x: new values, same tensor
            for (const input & in : ins) set_input(in);
            REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
            r.stream->iface.synchronize(r.stream);
            rec_stats rs;
            REQUIRE(ember_vulkan_stream_last_recording(r.stream, &rs.dispatches, &rs.barriers, &rs.fused));
            CHECK(rs.dispatches - ember_vulkan_stream_x_quantizations(r.stream) == (mmv ? 2u : fuse ? 4u : 8u));
            const std::vector<float> ref = run_on(ember_registry_cpu_device(), chain(seed));
            CHECK(nmse(ref, ember_test::get_f32(out)) < 2e-4);
        }
    }
    SUBCASE("3 columns: the norm fused alone") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * mm = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 153), new_input(g, in, EMBER_TYPE_F32, 512, 3, 1, 1, 154));
            ember_tensor * s  = ember_add(g, new_input(g, in, EMBER_TYPE_F32, 256, 3, 1, 1, 155), mm);
            return ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, 256, 1, 1, 1, 156));
        }, 2e-4, &st);
        CHECK(st.dispatches - st.xq == (fuse ? 2u : 4u));
    }
    SUBCASE("the product read elsewhere too: not fused with the norm") {
        compare([=](ember_graph & g, std::vector<input> & in) {
            ember_tensor * mm = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 512, 256, 1, 1, 157), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 158));
            ember_tensor * s  = ember_add(g, new_input(g, in, EMBER_TYPE_F32, 256, 1, 1, 1, 159), mm);
            ember_tensor * y  = ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, 256, 1, 1, 1, 160));
            return ember_add(g, y, mm);
        }, 2e-4, &st);
        CHECK(st.dispatches - st.xq == (fuse ? 3u : 5u));
    }
    for (const char * off_value : {"0", static_cast<const char *>(nullptr)}) {
        SUBCASE(off_value ? "EMBER_VULKAN_FUSE_NORM=0: not fused" : "EMBER_VULKAN_FUSE_NORM unset (the default): not fused") {
            env_guard off("EMBER_VULKAN_FUSE_NORM", off_value);
            compare([=](ember_graph & g, std::vector<input> & in) {
                ember_tensor * mm = ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q8_0, 512, 256, 1, 1, 161), new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 162));
                ember_tensor * s  = ember_add(g, new_input(g, in, EMBER_TYPE_F32, 256, 1, 1, 1, 163), mm);
                return ember_mul(g, ember_rms_norm(g, s, 1e-5f), new_input(g, in, EMBER_TYPE_F32, 256, 1, 1, 1, 164));
            }, 2e-4, &st);
            CHECK(st.dispatches - st.xq == (fuse ? 2u : 4u));
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
        }, 0.95, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact (NVIDIA: 97.5% equal for Q4_0 -> Q8_0, whose levels make many ties)
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
            }, 0.95, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact (NVIDIA: 97.5% equal for Q4_0 -> Q8_0, whose levels make many ties)
        }
    }
    SUBCASE("strided source rows") {
        compare_bytes([](ember_graph & g, std::vector<input> & in) {
            ember_tensor * big   = new_input(g, in, EMBER_TYPE_F32, 64, 8, 1, 1, 21);
            const int64_t  ne[4] = {64, 4, 1, 1};
            const size_t   nb[4] = {4, 2 * big->nb[1], 8 * big->nb[1], 8 * big->nb[1]};
            return ember_cpy(g, ember_view_strided(g, big, ne, nb, big->nb[1]), EMBER_TYPE_Q8_0);
        }, 0.95, 1e-5);  // ties of round(x / d) may go either way: GPU division is not exact (NVIDIA: 97.5% equal for Q4_0 -> Q8_0, whose levels make many ties)
    }
    // The same type, both contiguous: a flat copy (copy.comp), exact. 16-byte units (a 1-D
    // tensor of a million floats, F16 rows, Q8_0 of 8 blocks: 272 bytes) or words (sizes of an
    // odd count of words, a source 4 bytes into its buffer, Q4_0 rows of 36 bytes).
    SUBCASE("same type, contiguous: a flat copy") {
        struct shape {
            ember_type  type;
            int64_t     ne0, ne1, skip;  // skip: elements of the source buffer before the source
            const char * shader;
        };
        for (const shape & c : {shape{EMBER_TYPE_F32, 1 << 20, 1, 0, "copy_x4"}, shape{EMBER_TYPE_F16, 256, 6, 0, "copy_x4"},
                                shape{EMBER_TYPE_Q8_0, 256, 1, 0, "copy_x4"}, shape{EMBER_TYPE_F32, 1001, 3, 0, "copy"},
                                shape{EMBER_TYPE_F32, 4096, 1, 1, "copy"}, shape{EMBER_TYPE_Q8_0, 64, 1, 0, "copy"},
                                shape{EMBER_TYPE_Q4_0, 64, 3, 0, "copy"}}) {
            CAPTURE(std::string(ember_type_get_name(c.type)));
            CAPTURE(c.ne0);
            CAPTURE(c.ne1);
            CAPTURE(c.skip);
            rec_stats st;
            compare_bytes([c](ember_graph & g, std::vector<input> & in) {
                ember_tensor * src = new_input(g, in, c.type, c.ne0 * c.ne1 + c.skip, 1, 1, 1, 22);
                if (c.ne1 > 1 || c.skip > 0) src = ember_view(g, src, c.ne0, c.ne1, 1, 1, ember_row_size(c.type, c.skip));
                return ember_cpy(g, src, c.type);
            }, 1.0, 0.0, &st);
            CHECK(st.has(c.shader));
        }
    }
}

// Both ways of reducing a tile's max and sum: subgroup operations (where the device has them,
// the default) and shared memory only (EMBER_VULKAN_ATTN_SG=0); tiles of 64 keys (the default),
// 128 and 32 (EMBER_VULKAN_ATTN_KP=2|8: invocations per key).
TEST_CASE("[vulkan] attention: GQA, masks, every KV cache type, views of a cache") {
    REQUIRE_VK();
    validation_guard vg;
    for (const char * mode : {"sg", "shared", "kp2", "kp8"}) {
    CAPTURE(mode);
    const char * sg = std::strcmp(mode, "shared") == 0 ? "0" : "1";
    env_guard es("EMBER_VULKAN_ATTN_SG", sg);
    env_guard ek("EMBER_VULKAN_ATTN_KP", std::strcmp(mode, "kp2") == 0 ? "2" : std::strcmp(mode, "kp8") == 0 ? "8" : nullptr);
    const int64_t n_head = 4, n_head_kv = 2, n_tokens = 5;
    // {d, n_kv}: every type at 64, 100 (two key tiles); F16 also at head sizes that do not
    // divide the workgroup (80, 256: one key group) and more keys than a tile of the decode.
    struct shape {
        int64_t d, n_kv;
    };
    std::vector<std::tuple<ember_type, ember_type, shape>> kv;
    for (ember_type t : k_cvt_types) kv.push_back({t, t, {64, 100}});
    kv.push_back({EMBER_TYPE_F16, EMBER_TYPE_Q8_0, {64, 100}});
    for (shape sh : {shape{80, 300}, shape{128, 37}, shape{256, 65}}) kv.push_back({EMBER_TYPE_F16, EMBER_TYPE_F16, sh});
    for (auto [kt, vt, sh] : kv) {
        const auto tkv     = std::make_pair(kt, vt);
        const int64_t d    = sh.d, n_kv = sh.n_kv, kv_size = n_kv + 28;
        CAPTURE(d);
        CAPTURE(n_kv);
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
                    in.push_back({mask, m, {}, {}});
                }
                return ember_attn(g, q, k, v, mask, 0.125f);
            }, 1e-9);
        }
    }
    }
    // A decode-like mask over a padded cache: the keys after the last visible one hidden (not
    // visited unless EMBER_VULKAN_ATTN_RANGE=0), a hidden stretch before it (visited), and a
    // row that hides everything (zeros).
    for (const char * range : {(const char *) nullptr, "0"}) {
        CAPTURE(range ? range : "default");
        env_guard er("EMBER_VULKAN_ATTN_RANGE", range);
        compare([](ember_graph & g, std::vector<input> & in) {
            const int64_t  d = 64, n_kv = 300, nt = 3;
            ember_tensor * q = new_input(g, in, EMBER_TYPE_F32, d, 4, nt, 1, 25);
            ember_tensor * k = new_input(g, in, EMBER_TYPE_F16, d, 2, n_kv, 1, 26);
            ember_tensor * v = new_input(g, in, EMBER_TYPE_F16, d, 2, n_kv, 1, 27);
            ember_tensor * mask = g.new_tensor(EMBER_TYPE_F32, n_kv, nt);
            std::vector<float> m((size_t) (n_kv * nt), 0.0f);
            const int64_t last[nt] = {69, 130, -1};
            for (int64_t t = 0; t < nt; t++) {
                for (int64_t j = 0; j < n_kv; j++) {
                    if (j > last[t] || (j >= 10 && j < 20)) m[(size_t) (t * n_kv + j)] = -INFINITY;
                }
            }
            in.push_back({mask, m, {}, {}});
            return ember_attn(g, q, k, v, mask, 0.125f);
        }, 1e-9);
    }
}

TEST_CASE("[vulkan] partial offload: the scheduler keeps unsupported nodes on the CPU") {
    REQUIRE_VK();
    validation_guard vg;
    // y = rms_norm(W2 cpy(cpy(W1 x, BF16), F32)) with W1 Q2_K and W2 Q4_K on the device; the
    // two CPY nodes (to and from BF16: no Vulkan kernel) stay on the CPU.
    const int64_t k = 256, n = 256, m = 3;
    auto build = [&](ember_graph & g, ember_tensor *& w1, ember_tensor *& w2, ember_tensor *& x) {
        w1 = g.new_tensor(EMBER_TYPE_Q2_K, k, n);
        w2 = g.new_tensor(EMBER_TYPE_Q4_K, n, n);
        x  = g.new_tensor(EMBER_TYPE_F32, k, m);
        x->flags |= EMBER_TENSOR_FLAG_INPUT;
        ember_tensor * h = ember_cpy(g, ember_cpy(g, ember_mul_mat(g, w1, x), EMBER_TYPE_BF16), EMBER_TYPE_F32);
        ember_tensor * y = ember_rms_norm(g, ember_mul_mat(g, w2, h), 1e-5f);
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
                int mm_on_vk = 0, cpy_on_cpu = 0;
                for (size_t i = 0; i < g.nodes.size(); i++) {
                    if ((*ns)[i] == 0 && g.nodes[i]->op == EMBER_OP_MUL_MAT) mm_on_vk++;
                    if ((*ns)[i] == 1 && g.nodes[i]->op == EMBER_OP_CPY) cpy_on_cpu++;
                }
                CHECK(mm_on_vk == 2);    // both weights are on the device
                CHECK(cpy_on_cpu == 2);  // no Vulkan kernel converts to or from BF16
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

// Row indices out of range are a status (EMBER_ERR_INTERNAL, as on the CPU), not a silent
// result: GET_ROWS gives zeros for such rows, SET_ROWS writes nothing outside the destination;
// the other rows are as on the CPU, and the stream works afterwards.
TEST_CASE("[vulkan] get_rows / set_rows: indices out of range are reported") {
    REQUIRE_VK();
    validation_guard vg;
    for (int32_t bad : {10, -1, 1 << 30}) {
        CAPTURE(bad);
        const builder gr = [bad](ember_graph & g, std::vector<input> & in) {
            return ember_get_rows(g, new_input(g, in, EMBER_TYPE_Q8_0, 64, 10, 1, 1, 50), new_ids(g, in, {3, bad, 9}));
        };
        ember_status       sc = EMBER_OK, sv = EMBER_OK;
        std::vector<float> ref = run_on(ember_registry_cpu_device(), gr, nullptr, nullptr, &sc);
        std::vector<float> got = run_on(vk_device(), gr, nullptr, nullptr, &sv);
        CHECK(sc == EMBER_ERR_INTERNAL);
        CHECK(sv == EMBER_ERR_INTERNAL);
        CHECK(nmse(ref, got) < 1e-12);
        const builder sr = [bad](ember_graph & g, std::vector<input> & in) {
            ember_tensor * dst = new_input(g, in, EMBER_TYPE_F16, 64, 10, 1, 1, 51);
            return ember_set_rows(g, dst, new_input(g, in, EMBER_TYPE_F32, 64, 3, 1, 1, 52), new_ids(g, in, {4, bad, 0}));
        };
        ref = run_on(ember_registry_cpu_device(), sr, nullptr, nullptr, &sc);
        got = run_on(vk_device(), sr, nullptr, nullptr, &sv);
        CHECK(sc == EMBER_ERR_INTERNAL);
        CHECK(sv == EMBER_ERR_INTERNAL);
        CHECK(nmse(ref, got) < 1e-12);
    }
    // In range again: no stale error.
    compare([](ember_graph & g, std::vector<input> & in) {
        return ember_get_rows(g, new_input(g, in, EMBER_TYPE_Q8_0, 64, 10, 1, 1, 50), new_ids(g, in, {3, 0, 9}));
    }, 1e-12);
}

// A graph computed again with new input values is submitted without being recorded again,
// and gives the new results; after a buffer of the device is freed it is recorded anew. While
// no tensor descriptor changes (ember_tensor_epoch()) the graph is not even hashed; after one
// does, it is hashed and, the hash being new, recorded again.
TEST_CASE("[vulkan] command buffers are reused while the graph is unchanged") {
    REQUIRE_VK();
    validation_guard vg;
    const builder b = [](ember_graph & g, std::vector<input> & in) {
        ember_tensor * w = new_input(g, in, EMBER_TYPE_Q4_K, 512, 40, 1, 1, 70);
        ember_tensor * x = new_input(g, in, EMBER_TYPE_F32, 512, 1, 1, 1, 71);
        return ember_rms_norm(g, ember_mul_mat(g, w, ember_get_rows(g, x, new_ids(g, in, {0}))), 1e-5f);
    };
    dev_run            r;
    std::vector<input> ins;
    ember_tensor *     out = b(r.g, ins);
    r.g.build_forward(out);
    r.place(vk_device());
    uint64_t rec0 = 0, reuse0 = 0, rec = 0, reuse = 0;
    REQUIRE(ember_vulkan_stream_stats(r.stream, &rec0, &reuse0));
    std::vector<float> first;
    for (uint32_t seed : {71u, 72u, 73u}) {
        CAPTURE(seed);
        ins[1].f = random_f32(512, seed);  // x: new values, same tensor
        for (const input & in : ins) set_input(in);
        REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
        r.stream->iface.synchronize(r.stream);
        const std::vector<float> got = ember_test::get_f32(out);
        const std::vector<float> ref = run_on(ember_registry_cpu_device(), [&](ember_graph & g, std::vector<input> & in) {
            ember_tensor * w = new_input(g, in, EMBER_TYPE_Q4_K, 512, 40, 1, 1, 70);
            ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 512, 1);
            in.push_back({x, random_f32(512, seed), {}, {}});
            return ember_rms_norm(g, ember_mul_mat(g, w, ember_get_rows(g, x, new_ids(g, in, {0}))), 1e-5f);
        });
        CHECK(nmse(ref, got) < 2e-4);
        if (first.empty()) first = got;
    }
    CHECK(nmse(first, ember_test::get_f32(out)) > 1e-3);  // the inputs did change the result
    REQUIRE(ember_vulkan_stream_stats(r.stream, &rec, &reuse));
    const bool reuse_on = !std::getenv("EMBER_VULKAN_NO_CMD_REUSE");
    CHECK(rec - rec0 == (reuse_on ? 1u : 3u));
    CHECK(reuse - reuse0 == (reuse_on ? 2u : 0u));
    // Any freed device buffer may have been named by a recording: record again.
    ember_buffer * other = nullptr;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(vk_device()), 4096, &other) == EMBER_OK);
    ember_buffer_free(other);
    REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
    r.stream->iface.synchronize(r.stream);
    uint64_t rec2 = 0, reuse2 = 0;
    REQUIRE(ember_vulkan_stream_stats(r.stream, &rec2, &reuse2));
    CHECK(rec2 == rec + 1);
    CHECK(nmse(first, ember_test::get_f32(out)) > 0);  // still the last inputs
    // No descriptor made, placed or changed since (ember_tensor_epoch() unchanged): submitted
    // again without hashing the graph. A descriptor changed (the norm's eps, written directly,
    // then ember_tensor_epoch_bump() as tensor.h asks): hashed, recorded again, the new eps used.
    const bool               always = std::getenv("EMBER_VULKAN_SIGNATURE") && std::strcmp(std::getenv("EMBER_VULKAN_SIGNATURE"), "always") == 0;
    const uint64_t           sigs0  = ember_vulkan_stream_signatures(r.stream);
    const std::vector<float> before = ember_test::get_f32(out);
    REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
    r.stream->iface.synchronize(r.stream);
    uint64_t rec3 = 0, reuse3 = 0;
    REQUIRE(ember_vulkan_stream_stats(r.stream, &rec3, &reuse3));
    CHECK(ember_vulkan_stream_signatures(r.stream) == sigs0 + (always ? 1u : 0u));
    CHECK(rec3 == rec2 + (reuse_on ? 0u : 1u));
    CHECK(nmse(before, ember_test::get_f32(out)) == 0.0);
    REQUIRE(out->op == EMBER_OP_RMS_NORM);
    ember_set_op_param_f32(out, 0, 1e3f);
    ember_tensor_epoch_bump();
    REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
    r.stream->iface.synchronize(r.stream);
    uint64_t rec4 = 0, reuse4 = 0;
    REQUIRE(ember_vulkan_stream_stats(r.stream, &rec4, &reuse4));
    CHECK(ember_vulkan_stream_signatures(r.stream) == sigs0 + (always ? 2u : 1u));
    CHECK(rec4 == rec3 + 1);
    CHECK(nmse(before, ember_test::get_f32(out)) > 1e-3);  // eps 1000 against 1e-5
}

// SPIR-V instruction counts of an embedded shader: barriers (OpControlBarrier), atomics
// (OpAtomicIAdd ...) and Coherent decorations.
struct spv_counts {
    int barriers = 0, atomics = 0, coherent = 0;
};
spv_counts spv_count(const ember_vk_shader_blob & b) {
    spv_counts c;
    for (size_t i = 5; i < b.n_words();) {  // after the 5-word header
        const uint32_t op = b.words[i] & 0xffffu, len = b.words[i] >> 16;
        if (len == 0) break;
        if (op == 224) c.barriers++;                                     // OpControlBarrier
        if (op >= 227 && op <= 242) c.atomics++;                         // OpAtomicLoad .. OpAtomicXor
        if (op == 71 && len >= 3 && b.words[i + 2] == 23) c.coherent++;  // OpDecorate .. Coherent
        if (op == 72 && len >= 4 && b.words[i + 3] == 23) c.coherent++;  // OpMemberDecorate
        i += len;
    }
    return c;
}

// The quantized copy of a decode product's input written by its producer
// (EMBER_VULKAN_MMV_QX_OUT) lives in "_xq" variants only: the plain product + norm, gate + up,
// attention and norm shaders (what runs where no copy is wanted, and gate + up by default) carry
// none of its code (its barriers, the gate + up block counters' atomics, a coherent result
// buffer), as before it existed (commit b03c119 put it into them, behind a push constant).
TEST_CASE("[vulkan] shaders: the default decode variants carry no QX_OUT code") {
    size_t pairs = 0;
    for (size_t i = 0; i < ember_vk_shader_blob_count; i++) {
        const std::string name = ember_vk_shader_blobs[i].name;
        if (name.size() < 3 || name.compare(name.size() - 3, 3, "_xq") != 0) continue;
        if (name.find("_c8") != std::string::npos) continue;  // rms_norm_c8.comp: only ever with the copy
        const ember_vk_shader_blob * def = nullptr;
        for (size_t j = 0; j < ember_vk_shader_blob_count; j++) {
            if (name.compare(0, name.size() - 3, ember_vk_shader_blobs[j].name) == 0 &&
                std::strlen(ember_vk_shader_blobs[j].name) == name.size() - 3) {
                def = &ember_vk_shader_blobs[j];
            }
        }
        CAPTURE(name);
        REQUIRE_MESSAGE(def, "an _xq variant without its default one");
        const spv_counts d = spv_count(*def), x = spv_count(ember_vk_shader_blobs[i]);
        CHECK(d.barriers < x.barriers);
        if (name.find("_glu_") != std::string::npos) {
            CHECK(d.atomics == 0);
            CHECK(x.atomics > 0);
            CHECK(d.coherent == 0);
        } else {
            CHECK(d.atomics == x.atomics);
            CHECK(d.coherent == x.coherent);
        }
        pairs++;
    }
    CHECK(pairs == 128u);  // glu and norm forms of the 46 decode product variants (QX: 9 types x 4), 32 attention variants, 4 norm variants
}

// A decode step as the runtime makes it: inputs set (token id, x), the graph run, its output
// (EMBER_TENSOR_FLAG_OUTPUT, as the logits) read back. With readback copies the read is served
// from the copy the graph's own command buffer made: one submission per step, and (device
// memory not host-mapped, inputs deferred into that submission) no queue wait at all.
// strict: the device's memory is not mapped (EMBER_VULKAN_NO_UMA=1, the child process below):
// also no queue waits, and without readback copies a second submission per read. Outputs of
// 64 values and of 40960 (160 KiB, as a logits row: read through 2 helper threads,
// EMBER_VULKAN_COPY_THREADS=2, host-copy.h).
void readback_steps(bool strict) {
  for (const int64_t n_out : {64, 40960}) {
    CAPTURE(n_out);
    env_guard  ec("EMBER_VULKAN_COPY_THREADS", n_out > 64 ? "2" : nullptr);
    const auto make = [n_out](int32_t tok) {
        return [tok, n_out](ember_graph & g, std::vector<input> & in) {
            ember_tensor * w = new_input(g, in, EMBER_TYPE_Q4_0, 256, n_out, 1, 1, 90);
            ember_tensor * x = new_input(g, in, EMBER_TYPE_F32, 256, 8, 1, 1, 91);
            return ember_mul_mat(g, w, ember_get_rows(g, x, new_ids(g, in, {tok})));
        };
    };
    ember_device * dev = vk_device();
    uint64_t       sub = 0, waits = 0, rbr = 0;
    const auto     io  = [&](uint64_t * s, uint64_t * w, uint64_t * r) { REQUIRE(ember_vulkan_device_io_stats(dev, s, w, r)); };
    for (const bool copies : {true, false}) {
        CAPTURE(copies);
        env_guard          eg("EMBER_VULKAN_READBACK", copies ? (strict ? nullptr : "1") : "0");
        dev_run            r;
        std::vector<input> ins;
        ember_tensor *     out = make(0)(r.g, ins);
        out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
        r.g.build_forward(out);
        r.place(dev);
        ember_tensor * rows = out->src[1];  // not an output: read through staging or the mapping
        for (int32_t step = 0; step < 4; step++) {
            CAPTURE(step);
            const int32_t tok = (step * 3) % 8;
            ins[2].i          = {tok};
            uint64_t s0 = 0, w0 = 0, r0 = 0;
            if (step == 0) set_input(ins[0]);  // the weights, once (the large ones: a submission of their own)
            io(&s0, &w0, &r0);
            for (size_t i = 1; i < ins.size(); i++) set_input(ins[i]);
            REQUIRE(r.stream->iface.graph_compute(r.stream, &r.g, 0, (int32_t) r.g.nodes.size()) == EMBER_OK);
            r.stream->iface.synchronize(r.stream);
            const std::vector<float> got = ember_test::get_f32(out);
            io(&sub, &waits, &rbr);
            CHECK(rbr - r0 == (copies ? 1u : 0u));
            if (strict) {
                CHECK_MESSAGE(sub - s0 == (copies ? 1u : 2u), "submissions of one step (the read included)");
                if (step > 0 && copies) CHECK_MESSAGE(waits == w0, "a decode step waited for the whole queue");
            }
            const std::vector<float> ref = run_on(ember_registry_cpu_device(), make(tok));
            CHECK(nmse(ref, got) < 2e-4);
            // A part of the output, from the copy too.
            std::vector<float> part(5);
            ember_tensor_get(out, part.data(), 3 * sizeof(float), part.size() * sizeof(float));
            for (size_t i = 0; i < part.size(); i++) CHECK(part[i] == got[3 + i]);
            // Another tensor of the graph: its own bytes, not the copy's.
            const std::vector<float> x = ember_test::get_f32(rows);
            for (size_t i = 0; i < x.size(); i++) CHECK(x[i] == ins[1].f[(size_t) tok * 256 + i]);
        }
        // The host writes the output: the copy is stale, the new bytes are read.
        uint64_t s0 = 0, w0 = 0, r0 = 0;
        io(&s0, &w0, &r0);
        const std::vector<float> mark((size_t) n_out, 0.25f);
        ember_tensor_set(out, mark.data(), 0, mark.size() * sizeof(float));
        CHECK(ember_test::get_f32(out) == mark);
        io(&sub, &waits, &rbr);
        CHECK(rbr == r0);
    }
  }
}

TEST_CASE("[vulkan] decode step: outputs read from the graph's own readback copy") {
    REQUIRE_VK();
    validation_guard vg;
    readback_steps(false);  // copies forced on (lavapipe's memory is host-mapped)
#if defined(__linux__)
    // The same with device memory behind staging copies, as on a discrete GPU, in a child
    // process (the memory types are chosen when the device is opened).
    if (std::getenv("EMBER_VK_READBACK_CHILD")) return;
    namespace fs           = std::filesystem;
    std::error_code   ec;
    const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
    REQUIRE(!ec);
    const std::string log = ember_test_tmp_dir() + "/vk-readback-child.log";
    const std::string cmd = "EMBER_VK_READBACK_CHILD=1 EMBER_VULKAN_NO_UMA=1 '" + exe +
                            "' -tc='[vulkan] decode step child process' > '" + log + "' 2>&1";
    const int         rc  = std::system(cmd.c_str());
    std::ifstream     in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK_MESSAGE(rc == 0, "child failed:\n" << ss.str());
    CHECK_MESSAGE(ss.str().find("1 passed | 0 failed") != std::string::npos, "child ran no case:\n" << ss.str());
#endif
}

TEST_CASE("[vulkan] decode step child process") {
    if (!std::getenv("EMBER_VK_READBACK_CHILD")) {
        MESSAGE("skipped: run by \"[vulkan] decode step: outputs read ...\" in a child process");
        return;
    }
    REQUIRE_VK();
    validation_guard vg;
    readback_steps(true);
}

// Whole models in the weight types added last (the K-quants Q2_K / Q3_K, IQ4_XS, and Ember's
// own types), every layer on the device: the llama.cpp fixtures against their reference
// logits; Ember's types (no llama.cpp reference) quantized here from tiny-llama-F32 and
// compared with the same model on the CPU, with the quantized-type tolerances.
TEST_CASE("[vulkan] fixture models in Q2_K, Q3_K_M, IQ4_XS, INT4, NF4, FP8") {
    REQUIRE_VK();
    if (ember_test_fixture_names().empty()) {
        MESSAGE("skipped: no fixtures/models (pass --data-dir)");
        return;
    }
    const int64_t vbefore = ember_vulkan_validation_errors();
    const std::string vk_name = ember_device_get_name(vk_device());
    auto run = [&](const std::string & path, const char * device, const ember_test_reference & r, ember_test_run_result & res) {
        ember_model_params mp = ember_model_default_params();
        mp.device             = device;
        mp.n_gpu_layers       = -1;
        ember_model * m       = nullptr;
        REQUIRE_MESSAGE(ember_model_load(path.c_str(), &mp, &m) == EMBER_OK, ember_last_error());
        ember_test_model_ptr model(m);
        ember_test_run_params p;
        std::string           err;
        REQUIRE_MESSAGE(ember_test_run(model.get(), r.tokens, 4, p, res, err) == EMBER_OK, err);
    };
    auto check = [&](const std::string & what, const std::vector<float> & ref, const ember_test_reference & r,
                     const ember_test_run_result & res) {
        CAPTURE(what);
        const ember_test_tolerance  tol = ember_test_tolerance_for("Q4_0");
        const ember_test_logit_diff d   = ember_test_compare_logits(ref, res.logits, r.n_vocab, tol.margin * r.scale);
        CAPTURE(d.summary());
        CHECK(d.finite);
        CHECK(d.rel_max() < tol.max_abs);
        CHECK(d.rel_rms() < tol.rms);
        CHECK(d.argmax_bad.empty());
        MESSAGE(what << " on " << vk_name << ": " << d.summary());
    };
    for (const char * name : {"tiny-llama-Q2_K", "tiny-llama-Q3_K_M", "tiny-llama-IQ4_XS"}) {
        ember_test_reference r;
        std::string          err;
        REQUIRE_MESSAGE(ember_test_load_fixture(name, r, err), err);
        ember_test_run_result res;
        run(r.model_path, vk_name.c_str(), r, res);
        check(std::string(name) + " vs llama.cpp", r.logits, r, res);
    }
    ember_test_reference base;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_fixture("tiny-llama-F32", base, err), err);
    for (const char * type : {"INT4", "INT4_G32", "NF4", "FP8_E4M3", "FP8_E5M2_ROW", "BF16"}) {
        const std::string     out = ember_test_tmp_dir() + "/tiny-llama-" + type + ".gguf";
        ember_quantize_params qp  = ember_quantize_default_params();
        qp.ftype                  = type;
        qp.pure                   = 1;
        REQUIRE_MESSAGE(ember_model_quantize(base.model_path.c_str(), out.c_str(), &qp) == EMBER_OK, ember_last_error());
        ember_test_run_result cpu, dev;
        run(out, "cpu", base, cpu);
        run(out, vk_name.c_str(), base, dev);
        check(std::string(type) + " vs the CPU", cpu.logits, base, dev);
    }
    CHECK(ember_vulkan_validation_errors() == vbefore);
}

// Run in a child process (by the next case) with EMBER_VK_PCACHE_EXPECT set: the device,
// initialized here for the first time, must work and must have done EXPECT with the cache file.
TEST_CASE("[vulkan] pipeline cache child process") {
    const char * expect = std::getenv("EMBER_VK_PCACHE_EXPECT");
    if (!expect) {
        MESSAGE("skipped: run by \"[vulkan] pipeline cache on disk\" in a child process");
        return;
    }
    REQUIRE_VK();
    validation_guard vg;
    compare([](ember_graph & g, std::vector<input> & in) {
        return ember_mul_mat(g, new_input(g, in, EMBER_TYPE_Q4_0, 256, 40, 1, 1, 40), new_input(g, in, EMBER_TYPE_F32, 256, 2, 1, 1, 41));
    }, 2e-4);
    CHECK(ember_vulkan_pipeline_cache_state(vk_device()) == std::atoi(expect));
}

#if defined(__linux__)
TEST_CASE("[vulkan] pipeline cache on disk: saved, loaded, garbage and truncated files ignored") {
    REQUIRE_VK();
    namespace fs           = std::filesystem;
    const std::string dir  = ember_test_tmp_dir() + "/vk-pipeline-cache";
    const char *      prev = std::getenv("EMBER_VULKAN_PIPELINE_CACHE");
    const std::string saved_env = prev ? prev : "";
    setenv("EMBER_VULKAN_PIPELINE_CACHE", dir.c_str(), 1);
    const std::string file = ember_vulkan_pipeline_cache_file(vk_device());
    CHECK(file.rfind(dir + "/vk-pipelines-", 0) == 0);
    fs::create_directories(dir);
    std::error_code ec;
    const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
    REQUIRE(!ec);
    // Runs the child case with EXPECT; true when it passed.
    auto child = [&](int expect) {
        const std::string log = dir + "/child.log";
        setenv("EMBER_VK_PCACHE_EXPECT", std::to_string(expect).c_str(), 1);
        const std::string cmd = "'" + exe + "' -tc='[vulkan] pipeline cache child process' > '" + log + "' 2>&1";
        const int         rc  = std::system(cmd.c_str());
        unsetenv("EMBER_VK_PCACHE_EXPECT");
        std::ifstream     in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        if (rc != 0) MESSAGE("child (expect " << expect << ") failed:\n" << ss.str());
        return rc == 0;
    };
    auto starts_with_magic = [&]() {
        std::ifstream in(file, std::ios::binary);
        char          m[8] = {};
        in.read(m, 8);
        return in && std::memcmp(m, "EMBVKPC1", 8) == 0;
    };
    SUBCASE("garbage, then a good file, then a truncated one") {
        {
            std::ofstream out(file, std::ios::binary);
            for (int i = 0; i < 4096; i++) out.put((char) (i * 37 + 11));
        }
        CHECK(child(2));            // garbage: ignored, the device works, the file is rewritten
        CHECK(starts_with_magic());
        CHECK(child(1));            // loaded
        fs::resize_file(file, fs::file_size(file) / 2);
        CHECK(child(2));            // truncated: ignored
        CHECK(child(1));
    }
    SUBCASE("off") {
        setenv("EMBER_VULKAN_PIPELINE_CACHE", "0", 1);
        CHECK(ember_vulkan_pipeline_cache_file(vk_device()).empty());
        CHECK(child(-1));
    }
    if (prev) {
        setenv("EMBER_VULKAN_PIPELINE_CACHE", saved_env.c_str(), 1);
    } else {
        unsetenv("EMBER_VULKAN_PIPELINE_CACHE");
    }
}
#endif

}  // TEST_SUITE

#else

TEST_CASE("[vulkan] backend not built") {
    MESSAGE("skipped: this build has no Vulkan backend (EMBER_VULKAN=OFF)");
}

#endif  // EMBER_HAVE_VULKAN
