// The CUDA backend tests' harness (test_cuda_*.cpp): seeded random leaves, a graph run on one
// device with every tensor in that device's memory (once per seed, later runs replaying a
// recorded CUDA graph), and CPU-against-GPU comparisons by NMSE. Test-only code: everything is
// in an unnamed namespace, one copy per test file.
#ifndef EMBER_TESTS_CUDA_TEST_UTIL_H
#define EMBER_TESTS_CUDA_TEST_UTIL_H

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend-test-util.h"
#include "backend.h"
#include "graph.h"

namespace {

struct leaf_data {
    ember_tensor *       t;
    std::vector<uint8_t> bytes;
};

// Large random leaves already made: a test builds the same graph with the same seed many times
// (the CPU's run, the GPU's, each switch), and one 8B-shaped matrix takes seconds to draw and
// quantize (4096 x 14336 Q4_K: ~1.3 s of draws and ~1.6 s of quantizing). The generator's state
// before the draws is the key (with the type, shape and range); its state after comes back with
// the bytes, so a hit leaves everything as a fresh draw would. Emptied past k_leaf_memo_bytes.
struct leaf_memo_entry {
    ember_type           type;
    int64_t              ne0, ne1, ne2;
    float                lo, hi;
    std::mt19937         before, after;
    std::vector<uint8_t> bytes;
};
constexpr int64_t k_leaf_memo_min   = 1 << 20;          // values: smaller leaves are drawn each time
constexpr size_t  k_leaf_memo_bytes = size_t(4) << 30;  // bytes kept, at most
inline std::vector<leaf_memo_entry> & leaf_memo() {
    static std::vector<leaf_memo_entry> memo;
    return memo;
}

// Rows of floats encoded with type's codec, each on its own (the codecs are pure functions of a
// row), on several threads for large leaves: an 8B-shaped matrix is ~1.5 s of encoding on one
// core (K-quants' and INT4's scale searches), and the decode tests encode dozens of them.
inline void quantize_rows(ember_type type, const float * v, uint8_t * b, int64_t ne0, int64_t rows, size_t row_bytes) {
    const auto encode = [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) ember_type_get_traits(type)->from_float(v + r * ne0, b + r * row_bytes, ne0);
    };
    const int64_t hw = static_cast<int64_t>(std::thread::hardware_concurrency());
    const int64_t n  = std::min<int64_t>({hw > 0 ? hw : 1, 16, ne0 * rows / k_leaf_memo_min + 1, rows});
    if (n <= 1) {
        encode(0, rows);
        return;
    }
    std::vector<std::thread> pool;
    for (int64_t i = 1; i < n; i++) pool.emplace_back(encode, rows * i / n, rows * (i + 1) / n);
    encode(0, rows / n);
    for (std::thread & th : pool) th.join();
}

struct case_ctx {
    ember_graph &            g;
    std::vector<leaf_data> & leaves;
    std::mt19937             rng;

    // A leaf of `type` holding uniform values in [lo, hi), encoded with the type's codec.
    ember_tensor * rand_leaf(ember_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, float lo = -1.0f, float hi = 1.0f) {
        ember_tensor * t    = g.new_tensor(type, ne0, ne1, ne2);
        const bool     memo = ne0 * ne1 * ne2 >= k_leaf_memo_min;
        if (memo) {
            for (const leaf_memo_entry & m : leaf_memo()) {
                if (m.type == type && m.ne0 == ne0 && m.ne1 == ne1 && m.ne2 == ne2 && m.lo == lo && m.hi == hi && m.before == rng) {
                    rng = m.after;
                    leaves.push_back({t, m.bytes});
                    return t;
                }
            }
        }
        const std::mt19937                    before = rng;
        std::vector<float>                    v(static_cast<size_t>(ne0 * ne1 * ne2));
        std::uniform_real_distribution<float> u(lo, hi);
        for (float & x : v) x = u(rng);
        std::vector<uint8_t> b(ember_nbytes(t));
        quantize_rows(type, v.data(), b.data(), ne0, ne1 * ne2, t->nb[1]);
        if (memo) {
            size_t held = b.size();
            for (const leaf_memo_entry & m : leaf_memo()) held += m.bytes.size();
            if (held > k_leaf_memo_bytes) leaf_memo().clear();
            leaf_memo().push_back({type, ne0, ne1, ne2, lo, hi, before, rng, b});
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

// g's tensors placed in `dev`'s memory (zeroed), its leaves filled; free with ember_buffer_free.
inline ember_buffer * place_filled(ember_graph & g, std::vector<leaf_data> & leaves, ember_device * dev) {
    ember_buffer * buf = ember_test::place_graph(g, dev);
    buf->iface.clear(buf, 0);
    for (leaf_data & l : leaves) ember_tensor_set(l.t, l.bytes.data(), 0, l.bytes.size());
    return buf;
}

// A stream of `dev` (two CPU threads where it has any); free with ember_stream_free.
inline ember_stream * new_stream(ember_device * dev) {
    ember_stream_params sp{};
    sp.n_threads     = 2;
    ember_stream * s = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &s) == EMBER_OK);
    return s;
}

// Runs the graph of `build` with every tensor in `dev`'s memory once per seed, on one stream,
// the leaves refilled with that seed's data before each run (later runs on the CUDA stream
// replay a recorded CUDA graph); returns the outputs as floats (and their bytes in *raw).
// `on`: a stream of dev to run on (kept, with what it recorded before), else a new one.
inline std::vector<std::vector<float>> run_on_n(ember_device * dev, const builder & build, const std::vector<uint32_t> & seeds,
                                         std::vector<std::vector<uint8_t>> * raw = nullptr, ember_stream * on = nullptr) {
    const uint32_t         seed = seeds.at(0);
    ember_graph            g;
    std::vector<leaf_data> leaves;
    case_ctx               cc{g, leaves, std::mt19937(seed)};
    ember_tensor *         out = build(cc);
    g.build_forward(out);

    ember_buffer *                  buf = place_filled(g, leaves, dev);
    ember_stream *                  s   = on ? on : new_stream(dev);
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
        if (raw) raw->push_back(std::move(bytes));
    }
    if (!on) ember_stream_free(s);
    ember_buffer_free(buf);
    return results;
}

inline std::vector<float> run_on(ember_device * dev, const builder & build, uint32_t seed) {
    return run_on_n(dev, build, {seed})[0];
}

inline double nmse(const std::vector<float> & got, const std::vector<float> & want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const double d = static_cast<double>(got[i]) - want[i];
        num += d * d;
        den += static_cast<double>(want[i]) * want[i];
    }
    return den > 0 ? num / den : num;
}

inline ember_device * cuda_device() {
    return ember_registry_find_device("cuda");
}

inline void check_case(const std::string & what, const builder & build, double tol, uint32_t seed = 1234) {
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

// Runs `build` on the CPU and on the GPU for each seed in turn (one stream each; on the GPU `on`
// when given, as run_on_n) and compares.
inline void check_runs(const std::string & what, const builder & build, double tol, const std::vector<uint32_t> & seeds = {1234},
                       ember_stream * on = nullptr) {
    CAPTURE(what);
    const auto want = run_on_n(ember_registry_cpu_device(), build, seeds);
    const auto got  = run_on_n(cuda_device(), build, seeds, nullptr, on);
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

inline void set_env(const char * name, const char * value) {
#ifdef _WIN32
    _putenv_s(name, value);
#else
    setenv(name, value, 1);
#endif
}

// Empties the named switches when it goes out of scope, however the test case ends.
struct env_clear {
    std::vector<const char *> names;  // string literals
    ~env_clear() {
        for (const char * n : names) set_env(n, "");
    }
};

// The outputs of `build` on the CUDA device with the switch `name` set to `value` for that run
// (emptied after it): another kernel's results, to compare with the CPU's and the default's.
inline std::vector<float> run_on_cuda_with(const char * name, const char * value, const builder & build, uint32_t seed) {
    set_env(name, value);
    std::vector<float> r = run_on(cuda_device(), build, seed);
    set_env(name, "");
    return r;
}

}  // namespace

#endif  // EMBER_TESTS_CUDA_TEST_UTIL_H
