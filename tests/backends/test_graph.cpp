// Graph construction (shape rules, build_forward), tensor helpers, buffers and the registry.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alloc.h"
#include "backend-test-util.h"
#include "graph-signature.h"

using namespace ember_test;

TEST_SUITE("backends") {

TEST_CASE("[graph] tensor helpers: op names, sizes, strides") {
    CHECK(std::string(ember_op_name(EMBER_OP_MUL_MAT)) == "MUL_MAT");
    CHECK(std::string(ember_op_name(EMBER_OP_SCALE)) == "SCALE");
    CHECK(ember_op_n_src(EMBER_OP_ATTN) == 4);
    CHECK(ember_op_n_src(EMBER_OP_NONE) == 0);
    CHECK(std::string(ember_op_name((ember_op) 999)) == "UNKNOWN");

    ember_graph    g;
    ember_tensor * f = g.new_tensor(EMBER_TYPE_F32, 7, 3, 2);
    CHECK(f->nb[0] == 4);
    CHECK(f->nb[1] == 28);
    CHECK(f->nb[2] == 84);
    CHECK(ember_nbytes(f) == 7 * 3 * 2 * 4);
    CHECK(ember_is_contiguous(f));
    CHECK(ember_nrows(f) == 6);

    ember_tensor * q = g.new_tensor(EMBER_TYPE_Q4_0, 64, 3);
    CHECK(q->nb[0] == sizeof(ember_block_q4_0));
    CHECK(q->nb[1] == 2 * sizeof(ember_block_q4_0));
    CHECK(ember_nbytes(q) == 6 * sizeof(ember_block_q4_0));
    CHECK(ember_is_contiguous(q));

    // a strided view (every other row) spans less than its source and is not contiguous
    const int64_t  ne[4] = {7, 2, 1, 1};
    const size_t   nb[4] = {4, 56, 112, 112};
    ember_tensor * v     = ember_view_strided(g, f, ne, nb, 28);
    CHECK_FALSE(ember_is_contiguous(v));
    CHECK(ember_nbytes(v) == 56 + 28);
    CHECK(v->view_src == f);
    CHECK(v->view_offs == 28);

    ember_set_name(f, "x%d.%s", 3, "weight");
    CHECK(std::string(f->name) == "x3.weight");
    std::string long_name(200, 'a');
    ember_set_name(f, "%s", long_name.c_str());
    CHECK(std::strlen(f->name) == EMBER_MAX_NAME - 1);
}

// The common graph signature (graph-signature.h; every field is checked through the CUDA
// backend's use of it in test_cuda_graph_signature.cpp): with identities (Vulkan), a source
// replaced by another descriptor of the same address and shape, or a buffer replaced, changes it.
TEST_CASE("[graph] the graph signature with identities changes with the descriptors and buffers") {
    ember_graph    g;
    ember_tensor * w  = g.new_tensor(EMBER_TYPE_Q4_0, 256, 64);
    ember_tensor * x  = g.new_tensor(EMBER_TYPE_F32, 256, 1);
    ember_tensor * x2 = g.new_tensor(EMBER_TYPE_F32, 256, 1);
    ember_tensor * y  = ember_mul_mat(g, w, x);
    g.build_forward(y);
    const int32_t n = static_cast<int32_t>(g.nodes.size());
    x->data = x2->data = reinterpret_cast<void *>(uintptr_t(0x10000));
    const uint64_t base = ember_graph_signature(&g, 0, n, true);
    CHECK(ember_graph_signature(&g, 0, n, true) == base);
    CHECK(ember_graph_signature(&g, 0, n, false) != base);
    const uint64_t plain = ember_graph_signature(&g, 0, n, false);
    y->src[1] = x2;  // same address, shape and type: only the identity differs
    CHECK(ember_graph_signature(&g, 0, n, true) != base);
    CHECK(ember_graph_signature(&g, 0, n, false) == plain);
    y->src[1] = x;
    CHECK(ember_graph_signature(&g, 0, n, true) == base);
    ember_buffer other{};
    ember_buffer * buf = w->buffer;
    w->buffer          = &other;
    CHECK(ember_graph_signature(&g, 0, n, true) != base);
    CHECK(ember_graph_signature(&g, 0, n, false) == plain);
    w->buffer = buf;
    CHECK(ember_graph_signature(&g, 0, n, true, {1}) != base);  // a backend's extra state
}

TEST_CASE("[graph] build_forward orders dependencies once each, views included") {
    ember_graph    g;
    ember_tensor * x     = g.new_tensor(EMBER_TYPE_F32, 8, 4);
    ember_tensor * w     = g.new_tensor(EMBER_TYPE_F16, 8, 8);
    ember_tensor * cache = g.new_tensor(EMBER_TYPE_F16, 8, 16);
    ember_tensor * idx   = g.new_tensor(EMBER_TYPE_I32, 4);
    ember_tensor * n     = ember_rms_norm(g, x, 1e-6f);
    ember_tensor * a     = ember_mul_mat(g, w, n);
    ember_tensor * b     = ember_mul_mat(g, w, n);  // diamond: n is read twice
    ember_tensor * st    = ember_set_rows(g, cache, a, idx);
    ember_tensor * kv    = ember_view(g, st, 8, 4);  // reads the cache after the write
    ember_tensor * s     = ember_add(g, b, a);
    ember_tensor * y     = ember_add(g, s, ember_cpy(g, kv, EMBER_TYPE_F32));
    g.build_forward(y);

    auto pos = [&](const ember_tensor * t) {
        for (size_t i = 0; i < g.nodes.size(); i++)
            if (g.nodes[i] == t) return (int) i;
        return -1;
    };
    CHECK(g.nodes.size() == 8);  // rms_norm, 2 mul_mat, set_rows, view, add, cpy, add: nothing twice
    CHECK(g.leafs.size() == 4);
    for (ember_tensor * t : g.nodes) {
        CHECK(t->op != EMBER_OP_NONE);
        for (int j = 0; j < EMBER_MAX_SRC; j++)
            if (t->src[j] && t->src[j]->op != EMBER_OP_NONE) CHECK(pos(t->src[j]) < pos(t));
    }
    CHECK(pos(st) < pos(kv));
    CHECK(pos(y) == (int) g.nodes.size() - 1);
    CHECK(kv->view_src == cache);
    CHECK(st->view_src == cache);

    // a second output adds only what is new
    ember_tensor * z = ember_scale(g, n, 2.0f);
    g.build_forward(z);
    CHECK(g.nodes.size() == 9);
    CHECK(g.nodes.back() == z);
    g.build_forward(y);
    CHECK(g.nodes.size() == 9);

    g.clear();
    CHECK(g.nodes.empty());
    CHECK(g.leafs.empty());
    CHECK(g.arena.empty());
}

TEST_CASE("[graph] op constructors compute result shapes") {
    ember_graph    g;
    ember_tensor * w = g.new_tensor(EMBER_TYPE_Q8_0, 64, 10);
    ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 64, 3);
    ember_tensor * y = ember_mul_mat(g, w, x);
    CHECK(y->type == EMBER_TYPE_F32);
    CHECK((y->ne[0] == 10 && y->ne[1] == 3 && y->ne[2] == 1));
    CHECK(ember_is_contiguous(y));

    ember_tensor * q = g.new_tensor(EMBER_TYPE_F32, 16, 4, 3);
    ember_tensor * k = g.new_tensor(EMBER_TYPE_F16, 16, 2, 7);
    ember_tensor * m = g.new_tensor(EMBER_TYPE_F32, 7, 3);
    ember_tensor * o = ember_attn(g, q, k, k, m, 0.25f);
    CHECK((o->ne[0] == 16 && o->ne[1] == 4 && o->ne[2] == 3));
    CHECK(ember_get_op_param_f32(o, 0) == 0.25f);

    ember_tensor * pos = g.new_tensor(EMBER_TYPE_I32, 3);
    ember_tensor * r   = ember_rope(g, q, pos, nullptr, 8, EMBER_ROPE_NEOX, 10000.0f, 0.5f);
    CHECK(r->op_params[0] == 8);
    CHECK(r->op_params[1] == EMBER_ROPE_NEOX);
    CHECK(ember_get_op_param_f32(r, 2) == 10000.0f);
    CHECK(ember_get_op_param_f32(r, 3) == 0.5f);

    ember_tensor * c = ember_cpy(g, x, EMBER_TYPE_Q4_0);
    CHECK(c->type == EMBER_TYPE_Q4_0);
    CHECK(c->nb[1] == 2 * sizeof(ember_block_q4_0));
}

TEST_CASE("[graph] shape and type errors throw ember_graph_error") {
    ember_graph    g;
    ember_tensor * w   = g.new_tensor(EMBER_TYPE_F16, 64, 10);
    ember_tensor * x   = g.new_tensor(EMBER_TYPE_F32, 32, 3);
    ember_tensor * x64 = g.new_tensor(EMBER_TYPE_F32, 64, 3);
    ember_tensor * x7  = g.new_tensor(EMBER_TYPE_F32, 7, 3);
    ember_tensor * i32 = g.new_tensor(EMBER_TYPE_I32, 3);
    ember_tensor * q   = g.new_tensor(EMBER_TYPE_F32, 16, 4, 3);
    ember_tensor * k   = g.new_tensor(EMBER_TYPE_F16, 16, 3, 7);
    const size_t   n_arena = g.arena.size();

    CHECK_THROWS_AS(ember_mul_mat(g, w, x), ember_graph_error);      // k differs
    CHECK_THROWS_AS(ember_mul_mat(g, w, i32), ember_graph_error);    // x not F32
    CHECK_THROWS_AS(ember_mul_mat(g, w, nullptr), ember_graph_error);
    CHECK_THROWS_AS(ember_add(g, x64, k), ember_graph_error);        // src1 not F32
    CHECK_THROWS_AS(ember_mul(g, x, x64), ember_graph_error);        // 64 does not divide 32
    CHECK_THROWS_AS(ember_add(g, x64, x7), ember_graph_error);       // 7 does not divide 64
    CHECK_THROWS_AS(ember_swiglu(g, x, x64), ember_graph_error);
    CHECK_THROWS_AS(ember_rms_norm(g, i32, 1e-5f), ember_graph_error);
    CHECK_THROWS_AS(ember_get_rows(g, w, x), ember_graph_error);     // ids not I32
    CHECK_THROWS_AS(ember_rope(g, q, i32, nullptr, 7, 0, 1e4f, 1.0f), ember_graph_error);   // odd n_rot
    CHECK_THROWS_AS(ember_rope(g, q, i32, nullptr, 32, 0, 1e4f, 1.0f), ember_graph_error);  // n_rot > head_dim
    CHECK_THROWS_AS(ember_rope(g, q, i32, nullptr, 8, 1, 1e4f, 1.0f), ember_graph_error);   // mode
    CHECK_THROWS_AS(ember_rope(g, q, x, nullptr, 8, 0, 1e4f, 1.0f), ember_graph_error);     // positions not I32
    CHECK_THROWS_AS(ember_attn(g, q, k, k, nullptr, 1.0f), ember_graph_error);  // 4 heads over 3 kv heads
    CHECK_THROWS_AS(ember_set_rows(g, w, x, i32), ember_graph_error);           // row length
    CHECK_THROWS_AS(ember_cpy(g, x7, EMBER_TYPE_Q8_0), ember_graph_error);      // 7 is not whole blocks
    CHECK_THROWS_AS(g.new_tensor(EMBER_TYPE_Q4_0, 33, 1), ember_graph_error);   // not whole blocks
    CHECK_THROWS_AS(g.new_tensor((ember_type) 4, 32, 1), ember_graph_error);    // unknown type id (Q4_2, removed)
    CHECK_THROWS_AS(ember_view(g, x, 32, 4), ember_graph_error);                // larger than the source
    // a failed constructor leaves nothing behind in the graph
    CHECK(g.arena.size() == n_arena);

    try {
        ember_mul_mat(g, w, x);
    } catch (const ember_graph_error & e) {
        const std::string msg = e.what();
        CHECK(msg.find("mul_mat") != std::string::npos);
        CHECK(msg.find("[64, 10") != std::string::npos);
        CHECK(msg.find("[32, 3") != std::string::npos);
    }
}

// Every change to what a signature covers moves ember_tensor_epoch() (backends skip the hash
// while it stands still): a new descriptor, an op, a graph built or cleared, a tensor placed,
// the allocator giving views their owner's address. Reading and writing tensor data do not.
TEST_CASE("[graph] the tensor epoch moves with every descriptor change a signature covers") {
    ember_graph    g;
    uint64_t       e     = ember_tensor_epoch();
    const auto     moved = [&e]() {
        const uint64_t now = ember_tensor_epoch();
        const bool     m   = now != e;
        e                  = now;
        return m;
    };
    ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 64, 4);
    CHECK(moved());
    ember_tensor * v = ember_view(g, x, 64, 2, 1, 1, x->nb[1]);
    CHECK(moved());
    ember_tensor * y = ember_scale(g, v, 2.0f);
    CHECK(moved());
    g.build_forward(y);
    CHECK(moved());
    CHECK_FALSE(moved());
    ember_buffer_type * buft = ember_device_buffer_type(ember_registry_cpu_device());
    ember_buffer *      buf  = nullptr;
    REQUIRE(ember_buffer_type_alloc(buft, 4096, &buf) == EMBER_OK);
    ember_buffer_place_tensor(buf, x, 0);
    CHECK(moved());
    const float ones[64 * 4] = {1.0f};
    ember_tensor_set(x, ones, 0, sizeof(ones));
    CHECK_FALSE(moved());
    ember_gallocr alloc({buft});
    REQUIRE(alloc.alloc_graph(&g, std::vector<int>(g.nodes.size(), 0), 0) == EMBER_OK);
    CHECK(moved());
    CHECK(v->data == static_cast<char *>(x->data) + x->nb[1]);
    ember_tensor_epoch_bump();
    CHECK(moved());
    g.clear();
    CHECK(moved());
    ember_buffer_free(buf);
}

TEST_CASE("[buffer] cpu buffers: alignment, placement, set/get, OOM") {
    ember_buffer_type * buft = ember_device_buffer_type(ember_registry_cpu_device());
    CHECK(ember_buffer_type_alignment(buft) == 64);
    CHECK(ember_buffer_type_is_host(buft));
    CHECK(ember_device_supports_buft(ember_registry_cpu_device(), buft));

    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(buft, 1000, &buf) == EMBER_OK);
    CHECK(buf->size == 1000);
    CHECK(reinterpret_cast<uintptr_t>(ember_buffer_base(buf)) % 64 == 0);

    ember_graph    g;
    ember_tensor * t = g.new_tensor(EMBER_TYPE_F32, 10);
    ember_buffer_place_tensor(buf, t, 128);
    CHECK(t->buffer == buf);
    CHECK(t->data == static_cast<char *>(ember_buffer_base(buf)) + 128);
    const float in[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    float       out[10] = {};
    ember_tensor_set(t, in, 0, sizeof(in));
    ember_tensor_get(t, out, 0, sizeof(out));
    CHECK(std::memcmp(in, out, sizeof(in)) == 0);
    ember_tensor_get(t, out, 8, 8);
    CHECK(out[0] == 3.0f);
    CHECK_THROWS_AS(ember_tensor_set(t, in, 4, sizeof(in)), ember_graph_error);  // past the end
    CHECK_THROWS_AS(ember_buffer_place_tensor(buf, t, 980), ember_graph_error);  // overflows the buffer
    buf->iface.clear(buf, 0);
    ember_tensor_get(t, out, 0, sizeof(out));
    CHECK(out[9] == 0.0f);

    ember_tensor * u = g.new_tensor(EMBER_TYPE_F32, 4);
    CHECK_THROWS_AS(ember_tensor_set(u, in, 0, 16), ember_graph_error);  // not allocated
    ember_buffer_free(buf);
    ember_buffer_free(nullptr);

    ember_buffer * huge = reinterpret_cast<ember_buffer *>(1);
    CHECK(ember_buffer_type_alloc(buft, (size_t) 1 << 62, &huge) == EMBER_ERR_OOM);
    CHECK(huge == nullptr);
}

TEST_CASE("[buffer] host-pointer buffers wrap caller memory") {
    std::vector<float> mem(64, 0.0f);
    ember_buffer *     buf = ember_buffer_from_host_ptr(mem.data(), mem.size() * sizeof(float));
    REQUIRE(buf);
    CHECK(ember_buffer_base(buf) == mem.data());
    CHECK(ember_buffer_type_is_host(buf->buft));
    CHECK(ember_device_supports_buft(ember_registry_cpu_device(), buf->buft));
    ember_graph    g;
    ember_tensor * t = g.new_tensor(EMBER_TYPE_F32, 16);
    ember_buffer_place_tensor(buf, t, 64);
    const float v = 3.5f;
    ember_tensor_set(t, &v, 4, sizeof(v));
    CHECK(mem[17] == 3.5f);
    ember_buffer_free(buf);  // the memory stays the caller's
    CHECK(mem[17] == 3.5f);
}

namespace {
// A fake backend with two devices, "fake:0" and "fake:1", that support nothing (it stays
// registered for the rest of the process).
const char * fake_dev_name(ember_device * dev) { return static_cast<const char *>(dev->context); }
void         fake_dev_props(ember_device * dev, ember_device_props * p) {
    std::memset(p, 0, sizeof(*p));
    p->name        = fake_dev_name(dev);
    p->description = "fake test device";
    p->type        = EMBER_DEVICE_TYPE_ACCEL;
}
bool           fake_dev_supports_op(ember_device *, const ember_tensor *) { return false; }
bool           fake_dev_supports_buft(ember_device *, ember_buffer_type *) { return false; }
ember_device_i fake_dev_iface() {
    ember_device_i i;
    std::memset(&i, 0, sizeof(i));
    i.get_name        = fake_dev_name;
    i.get_description = fake_dev_name;
    i.get_props       = fake_dev_props;
    i.supports_op     = fake_dev_supports_op;
    i.supports_buft   = fake_dev_supports_buft;
    return i;
}
extern ember_backend_reg g_fake_reg;
ember_device      g_fake_devs[2] = {{fake_dev_iface(), &g_fake_reg, (void *) "fake:0"}, {fake_dev_iface(), &g_fake_reg, (void *) "fake:1"}};
const char *      fake_reg_name(ember_backend_reg *) { return "fake"; }
size_t            fake_reg_count(ember_backend_reg *) { return 2; }
ember_device *    fake_reg_dev(ember_backend_reg *, size_t i) { return i < 2 ? &g_fake_devs[i] : nullptr; }
ember_backend_reg g_fake_reg = {EMBER_BACKEND_API_VERSION, sizeof(ember_backend_reg),
                                {fake_reg_name, fake_reg_count, fake_reg_dev, nullptr}, nullptr};
ember_backend_reg g_old_reg  = {EMBER_BACKEND_API_VERSION + 1, sizeof(ember_backend_reg),
                                {fake_reg_name, fake_reg_count, fake_reg_dev, nullptr}, nullptr};
}  // namespace

TEST_CASE("[registry] the CPU is always present and last") {
    REQUIRE(ember_registry_device_count() >= 1);
    ember_device * cpu = ember_registry_cpu_device();
    REQUIRE(cpu);
    CHECK(std::string(ember_device_get_name(cpu)) == "cpu");
    CHECK(ember_registry_device(ember_registry_device_count() - 1) == cpu);
    CHECK(ember_registry_device(ember_registry_device_count()) == nullptr);
    CHECK(ember_registry_find_device("cpu") == cpu);

    ember_device_props props;
    cpu->iface.get_props(cpu, &props);
    CHECK(props.type == EMBER_DEVICE_TYPE_CPU);
    CHECK(props.memory_total > 0);
    CHECK(props.memory_free <= props.memory_total);
    CHECK(std::strlen(props.description) > 0);

    const size_t before = ember_registry_device_count();
    CHECK_FALSE(ember_registry_add(&g_old_reg));  // other api_version: refused
    CHECK_FALSE(ember_registry_add(nullptr));
    CHECK(ember_registry_device_count() == before);

    const bool added = ember_registry_add(&g_fake_reg);
    CHECK_FALSE(ember_registry_add(&g_fake_reg));  // only once
    if (added) CHECK(ember_registry_device_count() == before + 2);
    const size_t n = ember_registry_device_count();
    CHECK(ember_registry_device(n - 1) == cpu);
    CHECK(ember_registry_device(n - 3) == &g_fake_devs[0]);
    CHECK(ember_registry_find_device("fake:1") == &g_fake_devs[1]);
    CHECK(ember_registry_find_device("fake") == &g_fake_devs[0]);
    CHECK(ember_registry_find_device("fak") == nullptr);
    CHECK(ember_registry_find_device("cuda:7") == nullptr);
}

}  // TEST_SUITE
