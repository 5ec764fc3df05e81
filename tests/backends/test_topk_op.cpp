// TOP_K (ops.def): the CPU kernel against a plain sort written here (ties, -inf, +inf, NaN,
// -0, strided rows, both thread splits), the constructor's errors, and the CUDA kernel
// against the same reference (cases named "cuda"; skipped without a CUDA device).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend-test-util.h"

using namespace ember_test;

namespace {

// The expected order, spelled out: NaN first, then higher values, equal values (-0 == +0
// included) by lower index.
std::vector<int32_t> ref_top_k(const float * x, int64_t n, int32_t k) {
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [x](int32_t a, int32_t b) {
        const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
        if (na || nb) return na && !nb;
        return x[a] > x[b];
    });
    idx.resize(static_cast<size_t>(k));
    return idx;
}

uint32_t bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

// Checks one output row (k ids, then k value bits) against the reference of row x.
void check_row(const int32_t * got, const float * x, int64_t n, int32_t k, int64_t row) {
    CAPTURE(row);
    const std::vector<int32_t> want = ref_top_k(x, n, k);
    int                        bad  = 0;
    for (int32_t j = 0; j < k && bad < 5; j++) {
        CAPTURE(j);
        if (got[j] != want[j]) {
            CHECK(got[j] == want[j]);
            bad++;
            continue;
        }
        uint32_t vb;
        std::memcpy(&vb, &got[k + j], 4);
        if (vb != bits(x[want[j]])) {
            CHECK(vb == bits(x[want[j]]));  // the value itself, bit for bit
            bad++;
        }
    }
}

// Rows of data for the cases: random (kind 0), tie-heavy (1: a few distinct values), with
// specials (2), or descending with a few spikes (3: a list that is full when a better value comes,
// so the CUDA kernel inserts into it instead of merging).
std::vector<float> make_rows(int64_t n, int64_t rows, uint32_t seed, int kind) {
    std::mt19937                          rng(seed);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::uniform_int_distribution<int>    few(0, 5);
    std::vector<float>                    v(static_cast<size_t>(n * rows));
    for (float & x : v) x = kind == 1 ? static_cast<float>(few(rng)) * 0.5f : u(rng);
    if (kind == 3) {
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n; i++) v[static_cast<size_t>(r * n + i)] = static_cast<float>(n - i) * 0.25f;
            for (int64_t p : {64, 65, 192, 193, 2118}) {
                if (p < n) v[static_cast<size_t>(r * n + p)] = 1e6f + static_cast<float>(p + r);
            }
        }
    }
    if (kind == 2) {  // specials at seeded places
        std::uniform_int_distribution<int64_t> at(0, n * rows - 1);
        const float specials[] = {INFINITY, -INFINITY, NAN, -0.0f, 0.0f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f};
        for (int rep = 0; rep < 3; rep++) {
            for (float s : specials) v[static_cast<size_t>(at(rng))] = s;
        }
    }
    return v;
}

// TOP_K over rows of n on the CPU stream (n_threads), input as a strided view when `strided`
// (every other row of a larger tensor); returns the output tensor's int32 values.
std::vector<int32_t> cpu_top_k(const std::vector<float> & data, int64_t n, int64_t rows, int32_t k, int n_threads, bool strided) {
    cpu_graph      G(n_threads);
    ember_tensor * src = G.g.new_tensor(EMBER_TYPE_F32, n, strided ? 2 * rows : rows);
    ember_tensor * a   = src;
    if (strided) {
        const int64_t ne[4] = {n, rows, 1, 1};
        const size_t  nb[4] = {4, static_cast<size_t>(2 * n * 4), static_cast<size_t>(2 * n * 4 * rows), static_cast<size_t>(2 * n * 4 * rows)};
        a                   = ember_view_strided(G.g, src, ne, nb, static_cast<size_t>(n * 4));  // odd rows
    }
    ember_tensor * out = ember_top_k(G.g, a, k);
    G.g.build_forward(out);
    G.alloc();
    std::vector<float> full(static_cast<size_t>(n * (strided ? 2 * rows : rows)), 7.0f);  // 7.0 above any data: must never show
    for (int64_t r = 0; r < rows; r++) {
        std::copy(data.begin() + r * n, data.begin() + (r + 1) * n, full.begin() + (strided ? (2 * r + 1) : r) * n);
    }
    set_floats(src, full);
    REQUIRE(G.compute() == EMBER_OK);
    std::vector<int32_t> res(static_cast<size_t>(ember_nelements(out)));
    ember_tensor_get(out, res.data(), 0, res.size() * 4);
    return res;
}

void check_all(const std::vector<int32_t> & got, const std::vector<float> & data, int64_t n, int64_t rows, int32_t k) {
    REQUIRE(got.size() == static_cast<size_t>(2 * k * rows));
    for (int64_t r = 0; r < rows; r++) check_row(&got[static_cast<size_t>(r * 2 * k)], &data[static_cast<size_t>(r * n)], n, k, r);
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cpu] top_k: order, ties, -inf/+inf/NaN/-0, strided rows, both thread splits") {
    struct shape { int64_t n, rows; };
    const shape shapes[] = {{1, 1}, {7, 3}, {33, 1}, {1000, 5}, {5000, 2}, {70000, 1}};
    for (const shape & s : shapes) {
        for (int32_t k : {1, 2, 5, 40, 64, 100, 5000}) {
            if (k > s.n) continue;
            for (int kind = 0; kind < 4; kind++) {
                for (int nth : {1, 3}) {
                    for (bool strided : {false, true}) {
                        CAPTURE(s.n);
                        CAPTURE(s.rows);
                        CAPTURE(k);
                        CAPTURE(kind);
                        CAPTURE(nth);
                        CAPTURE(strided);
                        const std::vector<float> data = make_rows(s.n, s.rows, static_cast<uint32_t>(s.n * 31 + k + kind), kind);
                        check_all(cpu_top_k(data, s.n, s.rows, k, nth, strided), data, s.n, s.rows, k);
                    }
                }
            }
        }
    }
}

TEST_CASE("[cpu] top_k: hand-made rows") {
    // ties cut by k: the lower ids stay; NaN ranks first, then +inf; -0 and +0 tie
    const std::vector<float> x = {1.0f, 3.0f, -0.0f, 3.0f, NAN, 0.0f, INFINITY, -INFINITY, 3.0f, NAN};
    const std::vector<int32_t> got = cpu_top_k(x, 10, 1, 10, 1, false);
    const std::vector<int32_t> ids(got.begin(), got.begin() + 10);
    CHECK(ids == std::vector<int32_t>{4, 9, 6, 1, 3, 8, 0, 2, 5, 7});
    float v[10];
    std::memcpy(v, got.data() + 10, sizeof(v));
    CHECK(std::isnan(v[0]));
    CHECK(v[2] == INFINITY);
    CHECK(v[3] == 3.0f);
    CHECK(std::signbit(v[7]));  // the value as stored: -0 stays -0
    CHECK(v[9] == -INFINITY);
    // k = 2 of three equal maxima: ids 1 and 3, not 8
    const std::vector<int32_t> two = cpu_top_k({1.0f, 3.0f, 2.0f, 3.0f, 0.0f, 3.0f}, 6, 1, 2, 3, false);
    CHECK(two[0] == 1);
    CHECK(two[1] == 3);
    // an all -inf row keeps the lowest ids
    const std::vector<int32_t> ninf = cpu_top_k(std::vector<float>(9, -INFINITY), 9, 1, 3, 2, false);
    CHECK(ninf[0] == 0);
    CHECK(ninf[1] == 1);
    CHECK(ninf[2] == 2);
}

TEST_CASE("[cpu] top_k: the constructor refuses bad k and types") {
    ember_graph    g;
    ember_tensor * a = g.new_tensor(EMBER_TYPE_F32, 10, 2);
    ember_tensor * h = g.new_tensor(EMBER_TYPE_F16, 10, 2);
    CHECK_THROWS_WITH_AS(ember_top_k(g, a, 11), doctest::Contains("k = 11 must be in [1, row length 10]"), ember_graph_error);
    CHECK_THROWS_WITH_AS(ember_top_k(g, a, 0), doctest::Contains("k = 0"), ember_graph_error);
    CHECK_THROWS_WITH_AS(ember_top_k(g, h, 3), doctest::Contains("must be f32"), ember_graph_error);
    ember_tensor * t = ember_top_k(g, a, 10);
    CHECK(t->type == EMBER_TYPE_I32);
    CHECK(t->ne[0] == 20);
    CHECK(t->ne[1] == 2);
    CHECK(ember_device_supports_op(ember_registry_cpu_device(), t));
}

}  // TEST_SUITE

#ifdef EMBER_HAVE_CUDA

#include "backends/cuda/cuda-ops.h"  // EMBER_CUDA_TOPK_MAX_K

namespace {

ember_device * topk_cuda_device() {
    return ember_registry_find_device("cuda");
}

// The same TOP_K on the CUDA device, `reps` times in one graph (for timing) over one input;
// returns the first node's output and the mean time per node of the last of three computes.
std::vector<int32_t> cuda_top_k(const std::vector<float> & data, int64_t n, int64_t rows, int32_t k, int reps, double * us_per_op) {
    ember_device * dev = topk_cuda_device();
    ember_graph    g;
    ember_tensor * a = g.new_tensor(EMBER_TYPE_F32, n, rows);
    std::vector<ember_tensor *> outs;
    for (int r = 0; r < reps; r++) {
        outs.push_back(ember_top_k(g, a, k));
        g.build_forward(outs.back());
    }
    for (ember_tensor * t : g.nodes) REQUIRE(ember_device_supports_op(dev, t));
    ember_buffer * buf = ember_test::place_graph(g, dev);
    ember_tensor_set(a, data.data(), 0, data.size() * 4);
    ember_stream_params sp{};
    ember_stream *      s = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &s) == EMBER_OK);
    for (int run = 0; run < 3; run++) {
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(s->iface.graph_compute(s, &g, 0, static_cast<int32_t>(g.nodes.size())) == EMBER_OK);
        s->iface.synchronize(s);
        const auto t1 = std::chrono::steady_clock::now();
        if (us_per_op) *us_per_op = std::chrono::duration<double, std::micro>(t1 - t0).count() / reps;
    }
    std::vector<int32_t> res(static_cast<size_t>(ember_nelements(outs[0])));
    ember_tensor_get(outs[0], res.data(), 0, res.size() * 4);
    for (int r = 1; r < reps; r++) {  // every repetition wrote the same
        std::vector<int32_t> other(res.size());
        ember_tensor_get(outs[r], other.data(), 0, other.size() * 4);
        if (other != res) {
            CHECK(other == res);
            break;
        }
    }
    ember_stream_free(s);
    ember_buffer_free(buf);
    return res;
}

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cuda] top_k matches the CPU order: ties, specials, k up to 64, several rows") {
    if (!topk_cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    struct shape { int64_t n, rows; };
    const shape shapes[] = {{1, 1}, {33, 3}, {2048, 2}, {2049, 1}, {5000, 4}, {32000, 1}, {128256, 1}, {128256, 3}, {262144, 1}};
    for (const shape & s : shapes) {
        for (int32_t k : {1, 2, 8, 31, 32, 33, 40, 63, 64}) {
            if (k > s.n) continue;
            for (int kind = 0; kind < 4; kind++) {
                CAPTURE(s.n);
                CAPTURE(s.rows);
                CAPTURE(k);
                CAPTURE(kind);
                const std::vector<float> data = make_rows(s.n, s.rows, static_cast<uint32_t>(s.n * 7 + k * 3 + kind), kind);
                check_all(cuda_top_k(data, s.n, s.rows, k, 1, nullptr), data, s.n, s.rows, k);
            }
        }
    }
    // Sorted input (every chunk improves the list: the merge path all the way) and reversed.
    for (int32_t k : {1, 40, 64}) {
        std::vector<float> up(100000), down(100000);
        for (size_t i = 0; i < up.size(); i++) up[i] = down[up.size() - 1 - i] = static_cast<float>(i) * 0.25f;
        check_all(cuda_top_k(up, 100000, 1, k, 1, nullptr), up, 100000, 1, k);
        check_all(cuda_top_k(down, 100000, 1, k, 1, nullptr), down, 100000, 1, k);
    }
    // k above what the kernel takes: not supported here, so the scheduler runs it on the CPU.
    ember_graph    g;
    ember_tensor * a = g.new_tensor(EMBER_TYPE_F32, 1000, 1);
    CHECK_FALSE(ember_device_supports_op(topk_cuda_device(), ember_top_k(g, a, EMBER_CUDA_TOPK_MAX_K + 1)));
    CHECK(ember_device_supports_op(topk_cuda_device(), ember_top_k(g, a, EMBER_CUDA_TOPK_MAX_K)));
}

TEST_CASE("[cuda] top_k time per decode row (n_vocab 128256)") {
    if (!topk_cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (int32_t k : {1, 40, 64}) {
        const std::vector<float> data = make_rows(128256, 1, 99u + static_cast<uint32_t>(k), 0);
        double                   us   = 0;
        check_all(cuda_top_k(data, 128256, 1, k, 200, &us), data, 128256, 1, k);
        MESSAGE("top_k k=" << k << " over 128256 logits: " << us << " us per row (200 in one graph)");
    }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
