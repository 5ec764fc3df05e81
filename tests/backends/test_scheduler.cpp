// The scheduler with a fake accelerator: placement by weight location, CPU fallback for ops
// the accelerator lacks, copies across memory the devices cannot share, and results equal to
// an all-CPU run.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend.h"
#include "graph.h"
#include "scheduler.h"

namespace {

//
// A fake device: "device memory" is malloc'd but only reachable through its own buffer type,
// and it can compute F32 MUL_MAT and ADD on contiguous tensors.
//
struct fake_state {
    int n_computed = 0;
    int n_calls    = 0;  // graph_compute calls (splits run on the fake device)
    int n_async    = 0;  // copies queued through set_tensor_async
    int n_launch = 0, n_wait = 0, n_reads = 0;  // graph_launch / wait / read_async calls
    int n_raced  = 0;    // synchronous transfers made while queued work had not run
    bool refuse_async = false;
    bool refuse_read  = false;
    ember_status launch_fails = EMBER_OK;  // what the work of the next graph_launch reports at wait()
    ember_status failed       = EMBER_OK;  // the first error of the queued work run so far
    // Queued work (copies set_tensor_async queued, ranges graph_launch left, reads read_async
    // queued), run in order when the device next computes, synchronizes or waits (as a GPU
    // stream would): a scheduler that computed before queuing, or read before waiting, would
    // see stale bytes.
    std::vector<std::function<void()>> queue;
    std::vector<uint8_t>               read_mem;  // read_async's host memory
    void apply_pending() {
        for (auto & f : queue) f();
        queue.clear();
    }
};
fake_state g_fake;

const char * fake_buft_name(ember_buffer_type *) { return "fake"; }
size_t       fake_buft_alignment(ember_buffer_type *) { return 64; }
bool         fake_buft_is_host(ember_buffer_type *) { return false; }

void   fake_buf_free(ember_buffer * b) { std::free(b->context), delete b; }
void * fake_buf_base(ember_buffer * b) { return b->context; }
void   fake_buf_set(ember_buffer *, ember_tensor * t, const void * data, size_t off, size_t size) {
    if (!g_fake.queue.empty()) g_fake.n_raced++;
    std::memcpy(static_cast<uint8_t *>(t->data) + off, data, size);
}
void fake_buf_get(ember_buffer *, const ember_tensor * t, void * data, size_t off, size_t size) {
    if (!g_fake.queue.empty()) g_fake.n_raced++;
    std::memcpy(data, static_cast<const uint8_t *>(t->data) + off, size);
}
void fake_buf_clear(ember_buffer * b, uint8_t v) { std::memset(b->context, v, b->size); }

ember_status fake_buft_alloc(ember_buffer_type * bt, size_t size, ember_buffer ** out) {
    void * p = std::aligned_alloc(64, (size + 63) / 64 * 64);
    if (!p) return EMBER_ERR_OOM;
    auto * b    = new ember_buffer{};
    b->iface    = {fake_buf_free, fake_buf_base, fake_buf_set, fake_buf_get, nullptr, fake_buf_clear};
    b->buft     = bt;
    b->context  = p;
    b->size     = size;
    *out        = b;
    return EMBER_OK;
}

ember_buffer_type g_fake_buft = {{fake_buft_name, fake_buft_alloc, fake_buft_alignment, nullptr, nullptr, fake_buft_is_host}, nullptr, nullptr};

const char *        fake_dev_name(ember_device *) { return "fake"; }
ember_buffer_type * fake_dev_buft(ember_device *) { return &g_fake_buft; }
bool                fake_dev_supports_op(ember_device *, const ember_tensor * t) {
    if (t->op == EMBER_OP_VIEW) return true;
    if (t->op != EMBER_OP_MUL_MAT && t->op != EMBER_OP_ADD) return false;
    return t->src[0]->type == EMBER_TYPE_F32 && t->src[1]->type == EMBER_TYPE_F32 && ember_is_contiguous(t->src[1]);
}
bool fake_dev_supports_buft(ember_device *, ember_buffer_type * bt) { return bt == &g_fake_buft; }

void fake_run(ember_graph * g, int32_t begin, int32_t end) {
    for (int32_t i = begin; i < end; i++) {
        ember_tensor * t = g->nodes[i];
        REQUIRE(ember_buffer_type_is_host(t->buffer->buft) == false);  // only its own memory
        const float * a = static_cast<const float *>(t->src[0]->data);
        const float * b = static_cast<const float *>(t->src[1]->data);
        float *       y = static_cast<float *>(t->data);
        if (t->op == EMBER_OP_MUL_MAT) {
            const int64_t k = t->src[0]->ne[0], n = t->src[0]->ne[1], m = t->src[1]->ne[1];
            for (int64_t c = 0; c < m; c++) {
                for (int64_t r = 0; r < n; r++) {
                    double s = 0;
                    for (int64_t j = 0; j < k; j++) s += double(a[r * k + j]) * b[c * k + j];
                    y[c * n + r] = float(s);
                }
            }
        } else if (t->op == EMBER_OP_ADD) {
            const int64_t n = ember_nelements(t), nb = ember_nelements(t->src[1]);
            for (int64_t j = 0; j < n; j++) y[j] = a[j] + b[j % nb];
        } else {
            continue;  // views
        }
        g_fake.n_computed++;
    }
}
ember_status fake_compute(ember_stream *, ember_graph * g, int32_t begin, int32_t end) {
    g_fake.n_calls++;
    g_fake.apply_pending();
    fake_run(g, begin, end);
    return EMBER_OK;
}
void         fake_sync(ember_stream *) { g_fake.apply_pending(); }
bool         fake_set_async(ember_stream *, ember_tensor * t, const void * data, size_t off, size_t size) {
    if (g_fake.refuse_async) return false;
    const uint8_t * p   = static_cast<const uint8_t *>(data);
    uint8_t *       dst = static_cast<uint8_t *>(t->data) + off;
    g_fake.queue.push_back([dst, bytes = std::vector<uint8_t>(p, p + size)]() { std::memcpy(dst, bytes.data(), bytes.size()); });
    g_fake.n_async++;
    return true;
}
// Work left running: the range runs when the device next waits (or computes, synchronizes).
ember_status fake_launch(ember_stream *, ember_graph * g, int32_t begin, int32_t end) {
    g_fake.n_launch++;
    const ember_status fails = g_fake.launch_fails;
    g_fake.launch_fails      = EMBER_OK;
    g_fake.queue.push_back([g, begin, end, fails]() {
        fake_run(g, begin, end);
        if (g_fake.failed == EMBER_OK) g_fake.failed = fails;
    });
    return EMBER_OK;
}
ember_status fake_wait(ember_stream *) {
    g_fake.n_wait++;
    g_fake.apply_pending();
    const ember_status st = g_fake.failed;
    g_fake.failed         = EMBER_OK;
    return st;
}
const void * fake_read_async(ember_stream *, const ember_tensor * t, size_t off, size_t size) {
    if (g_fake.refuse_read) return nullptr;
    g_fake.n_reads++;
    g_fake.read_mem.assign(size, 0xEE);
    const uint8_t * src = static_cast<const uint8_t *>(t->data) + off;
    g_fake.queue.push_back([src, size]() { std::memcpy(g_fake.read_mem.data(), src, size); });
    return g_fake.read_mem.data();
}
const char * fake_stream_name(ember_stream *) { return "fake"; }
void         fake_stream_free(ember_stream *) {}

ember_device g_fake_dev;
ember_stream g_fake_stream;

void init_fake() {
    g_fake_dev            = ember_device{};
    g_fake_dev.iface      = {fake_dev_name, fake_dev_name, nullptr, fake_dev_buft, nullptr, nullptr, fake_dev_supports_op, fake_dev_supports_buft, nullptr};
    g_fake_buft.device    = &g_fake_dev;
    g_fake_stream         = ember_stream{};
    g_fake_stream.iface   = {fake_stream_name, fake_stream_free, fake_compute, fake_sync, nullptr, nullptr, nullptr, nullptr, fake_set_async,
                             fake_launch, fake_wait, fake_read_async};
    g_fake              = fake_state{};
    g_fake_stream.device  = &g_fake_dev;
}

// A leaf with data in buffer `buf` at `off` (advanced), filled with seeded values.
ember_tensor * leaf(ember_graph & g, ember_buffer * buf, size_t & off, int64_t ne0, int64_t ne1, std::mt19937 & rng, bool weight) {
    ember_tensor * t = g.new_tensor(EMBER_TYPE_F32, ne0, ne1);
    if (weight) t->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    ember_buffer_place_tensor(buf, t, off);
    off += (ember_nbytes(t) + 63) / 64 * 64;
    std::vector<float>                    v(ember_nelements(t));
    std::uniform_real_distribution<float> u(-1, 1);
    for (float & x : v) x = u(rng);
    ember_tensor_set(t, v.data(), 0, v.size() * sizeof(float));
    return t;
}

struct test_graph {
    ember_graph    g;
    ember_tensor * out = nullptr;
    ember_tensor * w_fake = nullptr;
};

// out = W2_cpu * (rms_norm(W_fake * x) + b_fake): the fake device gets the first matmul and the
// add; the norm and the last matmul fall back to / live on the CPU.
void build(test_graph & tg, ember_buffer * cpu_buf, ember_buffer * fake_buf) {
    std::mt19937 rng(5);
    size_t       co = 0, fo = 0;
    ember_tensor * x  = leaf(tg.g, cpu_buf, co, 16, 3, rng, false);
    ember_tensor * w  = leaf(tg.g, fake_buf, fo, 16, 8, rng, true);
    ember_tensor * b  = leaf(tg.g, fake_buf, fo, 8, 1, rng, true);
    ember_tensor * w2 = leaf(tg.g, cpu_buf, co, 8, 5, rng, true);
    ember_tensor * y  = ember_mul_mat(tg.g, w, x);
    ember_tensor * z  = ember_add(tg.g, ember_rms_norm(tg.g, y, 1e-5f), b);
    tg.out            = ember_mul_mat(tg.g, w2, z);
    tg.out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    tg.w_fake = w;
    tg.g.build_forward(tg.out);
}

// The CPU stream and buffers the scheduler tests use: CPU memory, the fake device's memory,
// and a second CPU buffer for the all-CPU reference run's copy of the fake device's weights.
struct sched_env {
    ember_stream * cpu_st   = nullptr;
    ember_buffer * cpu_buf  = nullptr;
    ember_buffer * cpu_buf2 = nullptr;
    ember_buffer * fake_buf = nullptr;
    sched_env() {
        init_fake();
        ember_device *      cpu_dev = ember_registry_cpu_device();
        ember_stream_params sp{};
        sp.n_threads = 2;
        REQUIRE(ember_device_init_stream(cpu_dev, &sp, &cpu_st) == EMBER_OK);
        REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(cpu_dev), 1 << 16, &cpu_buf) == EMBER_OK);
        REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(cpu_dev), 1 << 16, &cpu_buf2) == EMBER_OK);
        REQUIRE(fake_buft_alloc(&g_fake_buft, 1 << 16, &fake_buf) == EMBER_OK);
    }
    ~sched_env() {
        ember_buffer_free(cpu_buf);
        ember_buffer_free(cpu_buf2);
        ember_buffer_free(fake_buf);
        ember_stream_free(cpu_st);
    }
};

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[scheduler] ops go where their weights live, fall back to the CPU, and copy across memories") {
    sched_env      env;
    ember_stream * cpu_st   = env.cpu_st;
    ember_buffer * cpu_buf  = env.cpu_buf;
    ember_buffer * fake_buf = env.fake_buf;
    ember_buffer * cpu_buf2 = env.cpu_buf2;

    // Reference: the same graph on the CPU alone (the CPU can read the fake memory: it is malloc'd,
    // but the scheduler is told it cannot, so here we give the CPU its own copy of the weights).
    test_graph ref;
    build(ref, cpu_buf, cpu_buf2);
    std::vector<float> want(ember_nelements(ref.out));
    {
        ember_sched s({cpu_st});  // owns the compute buffer: read the result inside its scope
        REQUIRE(s.compute(&ref.g) == EMBER_OK);
        CHECK(s.n_splits(&ref.g) == 1);
        ember_tensor_get(ref.out, want.data(), 0, want.size() * sizeof(float));
    }

    test_graph tg;
    build(tg, cpu_buf, fake_buf);
    ember_sched sched({&g_fake_stream, cpu_st});
    g_fake.n_computed = 0;
    g_fake.n_async    = 0;
    REQUIRE(sched.compute(&tg.g) == EMBER_OK);
    CHECK(g_fake.n_computed == 2);  // the first matmul and the add
    CHECK(g_fake.n_async == 2);     // x and the norm's output, queued on the fake stream
    CHECK(g_fake.queue.empty());
    CHECK(g_fake.n_raced == 0);

    const std::vector<int> & where = *sched.node_streams(&tg.g);
    int n_copies = 0;
    for (size_t i = 0; i < tg.g.nodes.size(); i++) {
        const ember_tensor * t = tg.g.nodes[i];
        CAPTURE(ember_op_name(t->op));
        if (where[i] < 0) {
            n_copies++;
            continue;
        }
        if (t->op == EMBER_OP_MUL_MAT && t->src[0] == tg.w_fake) CHECK(where[i] == 0);
        if (t->op == EMBER_OP_RMS_NORM) CHECK(where[i] == 1);  // not supported by the fake device
        if (t->op == EMBER_OP_ADD) CHECK(where[i] == 0);       // reads a weight on the fake device
        if (t == tg.out) CHECK(where[i] == 1);
    }
    // x to the fake device, y back to the CPU, the norm to the fake device, z back to the CPU
    CHECK(n_copies == 4);
    CHECK(sched.n_splits(&tg.g) >= 4);

    std::vector<float> got(want.size());
    ember_tensor_get(tg.out, got.data(), 0, got.size() * sizeof(float));
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));

    // A second run reuses the plan; a stream that refuses the queued copy gets ember_tensor_set.
    const uint64_t plans = sched.n_plans();
    g_fake.refuse_async  = true;
    REQUIRE(sched.compute(&tg.g) == EMBER_OK);
    CHECK(sched.n_plans() == plans);
    CHECK(g_fake.n_async == 2);
    ember_tensor_get(tg.out, got.data(), 0, got.size() * sizeof(float));
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
}

TEST_CASE("[scheduler] launch leaves the last split running: inputs queue behind it, its read comes with wait") {
    // out = W_fake x + b_fake: x is copied to the fake device (queued), the one split runs there.
    sched_env      env;
    std::mt19937   rng(11);
    size_t         co = 0, fo = 0;
    ember_graph    g;
    ember_tensor * x   = leaf(g, env.cpu_buf, co, 16, 1, rng, false);
    ember_tensor * w   = leaf(g, env.fake_buf, fo, 16, 8, rng, true);
    ember_tensor * b   = leaf(g, env.fake_buf, fo, 8, 1, rng, true);
    ember_tensor * out = ember_add(g, ember_mul_mat(g, w, x), b);
    out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    g.build_forward(out);
    std::vector<float> wv(16 * 8), bv(8);
    ember_tensor_get(w, wv.data(), 0, wv.size() * sizeof(float));
    ember_tensor_get(b, bv.data(), 0, bv.size() * sizeof(float));
    const size_t bytes = 8 * sizeof(float);
    // A new x; the result it must give.
    const auto set_x = [&](float scale) {
        std::vector<float> xv(16);
        for (int j = 0; j < 16; j++) xv[j] = scale * static_cast<float>(j - 7);
        ember_tensor_set(x, xv.data(), 0, sizeof(float) * 16);
        std::vector<float> want(8);
        for (int r = 0; r < 8; r++) {
            double acc = bv[r];
            for (int j = 0; j < 16; j++) acc += double(wv[r * 16 + j]) * xv[j];
            want[r] = static_cast<float>(acc);
        }
        return want;
    };
    const auto check_bytes = [&](const void * at, const std::vector<float> & want) {
        REQUIRE(at);
        std::vector<float> got(8);
        std::memcpy(got.data(), at, bytes);
        for (int r = 0; r < 8; r++) CHECK(got[r] == doctest::Approx(want[r]).epsilon(1e-4));
    };
    ember_sched  sched({&g_fake_stream, env.cpu_st});
    const void * at     = nullptr;
    bool         queued = false;

    std::vector<float> want = set_x(0.5f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(queued);
    CHECK(sched.busy());
    REQUIRE(at);
    CHECK(static_cast<const uint8_t *>(at)[0] == 0xEE);  // nothing ran yet: the read lands at wait()
    CHECK(g_fake.n_launch == 1);
    CHECK(g_fake.n_calls == 0);
    REQUIRE(sched.wait() == EMBER_OK);
    CHECK_FALSE(sched.busy());
    check_bytes(at, want);

    // Two steps in a row: the second one's input copy is queued behind the first one's work.
    set_x(-1.0f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    want = set_x(2.0f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(g_fake.n_wait == 1);  // the second launch did not wait for the first
    REQUIRE(sched.wait() == EMBER_OK);
    check_bytes(at, want);
    CHECK(g_fake.n_raced == 0);

    // A copy the stream will not queue is made once nothing runs.
    set_x(1.0f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    g_fake.refuse_async = true;
    want                = set_x(3.0f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(g_fake.n_raced == 0);
    REQUIRE(sched.wait() == EMBER_OK);
    check_bytes(at, want);
    g_fake.refuse_async = false;

    // No queued read: NULL, and the tensor is read after wait().
    g_fake.refuse_read = true;
    want               = set_x(-0.25f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(queued);
    CHECK(at == nullptr);
    REQUIRE(sched.wait() == EMBER_OK);
    std::vector<float> got(8);
    ember_tensor_get(out, got.data(), 0, bytes);
    check_bytes(got.data(), want);
    g_fake.refuse_read = false;

    // An error of the queued work comes from wait(), once.
    g_fake.launch_fails = EMBER_ERR_BACKEND;
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(sched.wait() == EMBER_ERR_BACKEND);
    CHECK_FALSE(sched.busy());
    CHECK(sched.wait() == EMBER_OK);
    // ... or from a compute() that runs after it (compute waits for what was left running).
    g_fake.launch_fails = EMBER_ERR_BACKEND;
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    CHECK(sched.compute(&g) == EMBER_ERR_BACKEND);
    want = set_x(0.75f);
    REQUIRE(sched.launch(&g, out, bytes, &at, &queued) == EMBER_OK);
    REQUIRE(sched.compute(&g) == EMBER_OK);
    CHECK_FALSE(sched.busy());
    ember_tensor_get(out, got.data(), 0, bytes);
    check_bytes(got.data(), want);
    CHECK(g_fake.n_raced == 0);

    // A stream that cannot leave work running computes and waits: nothing is queued.
    ember_sched cpu_only({env.cpu_st});
    ember_graph g2;
    size_t      co2 = 0;
    std::mt19937 rng2(3);
    ember_tensor * x2 = leaf(g2, env.cpu_buf2, co2, 4, 1, rng2, false);
    ember_tensor * o2 = ember_add(g2, x2, x2);
    o2->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    g2.build_forward(o2);
    REQUIRE(cpu_only.launch(&g2, o2, 4 * sizeof(float), &at, &queued) == EMBER_OK);
    CHECK_FALSE(queued);
    CHECK(at == nullptr);
    CHECK_FALSE(cpu_only.busy());
}

TEST_CASE("[scheduler] a weightless op after a CPU op runs on the accelerator its consumers use") {
    // a = W_cpu x (a CPU weight, like the embedding lookup); b = a + a has no weight of its own
    // (the first layer's norm); c = W_fake b; out = c + a reads a again (the residual ADD). b
    // belongs with c on the fake device: one copy of a, one CPU split and one fake split.
    sched_env      env;
    ember_stream * cpu_st   = env.cpu_st;
    ember_buffer * cpu_buf  = env.cpu_buf;
    struct built {
        ember_graph    g;
        ember_tensor * b = nullptr, *out = nullptr;
    };
    const auto build_it = [&](built & t, ember_buffer * fbuf) {
        std::mt19937   rng(9);
        size_t         co = 0, fo = 0;
        ember_tensor * x  = leaf(t.g, cpu_buf, co, 16, 2, rng, false);
        ember_tensor * wc = leaf(t.g, cpu_buf, co, 16, 12, rng, true);
        ember_tensor * wf = leaf(t.g, fbuf, fo, 12, 12, rng, true);
        ember_tensor * a  = ember_mul_mat(t.g, wc, x);
        t.b               = ember_add(t.g, a, a);
        t.out             = ember_add(t.g, ember_mul_mat(t.g, wf, t.b), a);
        t.out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
        t.g.build_forward(t.out);
    };
    built ref;
    build_it(ref, env.cpu_buf2);
    std::vector<float> want(ember_nelements(ref.out));
    {
        ember_sched s({cpu_st});
        REQUIRE(s.compute(&ref.g) == EMBER_OK);
        ember_tensor_get(ref.out, want.data(), 0, want.size() * sizeof(float));
    }
    built tg;
    build_it(tg, env.fake_buf);
    ember_sched sched({&g_fake_stream, cpu_st});
    g_fake.n_calls = 0;
    REQUIRE(sched.compute(&tg.g) == EMBER_OK);
    const std::vector<int> & where = *sched.node_streams(&tg.g);
    int n_copies = 0;
    for (size_t i = 0; i < tg.g.nodes.size(); i++) {
        if (where[i] < 0) n_copies++;
        if (tg.g.nodes[i] == tg.b) CHECK(where[i] == 0);
    }
    CHECK(n_copies == 1);  // a, once: b and the last ADD share the copy
    CHECK(sched.n_splits(&tg.g) == 2);
    CHECK(g_fake.n_calls == 1);
    std::vector<float> got(want.size());
    ember_tensor_get(tg.out, got.data(), 0, got.size() * sizeof(float));
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
}

TEST_CASE("[scheduler] copies of unchanging leaves are hoisted; a leaf the graph writes is copied after the write") {
    sched_env      env;
    ember_stream * cpu_st   = env.cpu_st;
    ember_buffer * cpu_buf  = env.cpu_buf;
    ember_buffer * fake_buf = env.fake_buf;
    std::mt19937   rng(7);
    size_t       co = 0, fo = 0;

    SUBCASE("inputs used deep in the graph: one split on the fake device") {
        ember_graph    g;
        ember_tensor * x   = leaf(g, cpu_buf, co, 16, 1, rng, false);
        ember_tensor * w   = leaf(g, fake_buf, fo, 16, 8, rng, true);
        ember_tensor * wb1 = leaf(g, fake_buf, fo, 8, 1, rng, true);
        ember_tensor * wb2 = leaf(g, fake_buf, fo, 8, 1, rng, true);
        ember_tensor * b1  = leaf(g, cpu_buf, co, 8, 1, rng, false);
        ember_tensor * b2  = leaf(g, cpu_buf, co, 8, 1, rng, false);
        ember_tensor * y   = ember_mul_mat(g, w, x);
        ember_tensor * z2  = ember_add(g, y, ember_add(g, wb1, b1));  // b1 first read here
        ember_tensor * out = ember_add(g, z2, ember_add(g, wb2, b2));  // b2 here
        out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
        g.build_forward(out);
        ember_sched sched({&g_fake_stream, cpu_st});
        g_fake.n_calls = 0;
        REQUIRE(sched.compute(&g) == EMBER_OK);
        CHECK(g_fake.n_calls == 1);
        const std::vector<int> & where = *sched.node_streams(&g);
        REQUIRE(where.size() == 8);
        for (int i = 0; i < 3; i++) CHECK(where[i] < 0);  // x, b1, b2 copied first
        for (int i = 3; i < 8; i++) CHECK(where[i] == 0);
        // the result is right: out = w * x + wb1 + b1 + wb2 + b2
        std::vector<float> xv(16), wv(128), a1(8), a2(8), c1(8), c2(8), got(8);
        ember_tensor_get(x, xv.data(), 0, sizeof(float) * 16);
        ember_tensor_get(w, wv.data(), 0, sizeof(float) * 128);
        ember_tensor_get(wb1, a1.data(), 0, sizeof(float) * 8);
        ember_tensor_get(wb2, a2.data(), 0, sizeof(float) * 8);
        ember_tensor_get(b1, c1.data(), 0, sizeof(float) * 8);
        ember_tensor_get(b2, c2.data(), 0, sizeof(float) * 8);
        ember_tensor_get(out, got.data(), 0, sizeof(float) * 8);
        for (int r = 0; r < 8; r++) {
            float want = a1[r] + c1[r] + a2[r] + c2[r];
            for (int i = 0; i < 16; i++) want += wv[r * 16 + i] * xv[i];
            CHECK(got[r] == doctest::Approx(want).epsilon(1e-5));
        }
    }
    SUBCASE("a cache leaf written by SET_ROWS on the CPU is copied after the write") {
        ember_graph    g;
        ember_tensor * cache = leaf(g, cpu_buf, co, 8, 4, rng, false);  // 4 rows of 8
        ember_tensor * rows  = leaf(g, cpu_buf, co, 8, 1, rng, false);
        ember_tensor * idx   = g.new_tensor(EMBER_TYPE_I32, 1);
        ember_buffer_place_tensor(cpu_buf, idx, co);
        co += 64;
        const int32_t row2 = 2;
        ember_tensor_set(idx, &row2, 0, sizeof(row2));
        ember_tensor * w   = leaf(g, fake_buf, fo, 8, 4, rng, true);
        ember_tensor * put = ember_set_rows(g, cache, rows, idx);
        ember_tensor * out = ember_add(g, w, cache);  // on the fake device (w lives there)
        out->flags |= EMBER_TENSOR_FLAG_OUTPUT;
        g.build_forward(put);
        g.build_forward(out);
        ember_sched sched({&g_fake_stream, cpu_st});
        REQUIRE(sched.compute(&g) == EMBER_OK);
        std::vector<float> wv(32), rv(8), got(32);
        ember_tensor_get(w, wv.data(), 0, sizeof(float) * 32);
        ember_tensor_get(rows, rv.data(), 0, sizeof(float) * 8);
        ember_tensor_get(out, got.data(), 0, sizeof(float) * 32);
        for (int i = 0; i < 8; i++) CHECK(got[2 * 8 + i] == doctest::Approx(wv[2 * 8 + i] + rv[i]));  // the new row
    }
}

TEST_CASE("[alloc] intermediate buffers are reused along the graph") {
    // A chain of 8 adds over 1 MiB tensors needs about 2 live tensors, not 8.
    ember_graph    g;
    ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 1 << 18);
    x->flags |= EMBER_TENSOR_FLAG_INPUT;
    ember_tensor * cur = x;
    for (int i = 0; i < 8; i++) cur = ember_scale(g, cur, 0.5f);
    cur->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    g.build_forward(cur);
    ember_gallocr    ga({ember_device_buffer_type(ember_registry_cpu_device())});
    std::vector<int> node_buft(g.nodes.size(), 0);
    REQUIRE(ga.alloc_graph(&g, node_buft, 0) == EMBER_OK);
    const size_t one = ember_nbytes(x);
    CHECK(ga.buffer_size(0) <= 3 * one);
    CHECK(ga.buffer_size(0) >= 2 * one);
    // no two tensors alive at the same time overlap: each node's input and output differ
    for (ember_tensor * n : g.nodes) CHECK(n->data != n->src[0]->data);
}

}  // TEST_SUITE
