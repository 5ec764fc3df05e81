// ember_graph methods and the op constructors. Each constructor checks its op's shape and
// type rule (ops.def) and throws ember_graph_error naming the op, the operand and the shapes.
#include "graph.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <unordered_set>

//
// Errors
//
[[noreturn]] static void graph_fail(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static void graph_fail(const char * fmt, ...) {
    char    msg[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    throw ember_graph_error(msg);
}

// "name f16 [64, 8, 3, 1]" for error messages.
struct shape_str {
    char s[160];
    explicit shape_str(const ember_tensor * t) {
        const char * tn = ember_type_get_name(t->type);
        std::snprintf(s, sizeof(s), "'%s' %s [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", t->name,
                      tn ? tn : "?", t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    }
};

static void require_tensor(const char * op, const char * what, const ember_tensor * t) {
    if (!t) graph_fail("%s: %s is null", op, what);
}

static void require_type(const char * op, const char * what, const ember_tensor * t, ember_type type) {
    require_tensor(op, what, t);
    if (t->type != type) {
        graph_fail("%s: %s must be %s, got %s", op, what, ember_type_get_name(type), shape_str(t).s);
    }
}

static void require_dims(const char * op, const char * what, const ember_tensor * t, int n_dims) {
    for (int i = n_dims; i < EMBER_MAX_DIMS; i++) {
        if (t->ne[i] != 1) graph_fail("%s: %s must have at most %d dims, got %s", op, what, n_dims, shape_str(t).s);
    }
}

static void require_same_shape(const char * op, const ember_tensor * a, const ember_tensor * b) {
    for (int i = 0; i < EMBER_MAX_DIMS; i++) {
        if (a->ne[i] != b->ne[i]) graph_fail("%s: shapes differ: %s vs %s", op, shape_str(a).s, shape_str(b).s);
    }
}

//
// Graph
//
ember_tensor * ember_graph::new_tensor(ember_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || !tr->name) graph_fail("new_tensor: unknown type id %d", (int) type);
    if (ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0) {
        graph_fail("new_tensor: negative extent [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", ne0, ne1, ne2, ne3);
    }
    if (ne0 % tr->block_size != 0) {
        graph_fail("new_tensor: ne0 = %" PRId64 " is not a multiple of the %s block size %" PRId64, ne0, tr->name,
                   tr->block_size);
    }
    ember_tensor_epoch_bump();
    arena.emplace_back();
    ember_tensor * t = &arena.back();
    std::memset(t, 0, sizeof(*t));
    t->type  = type;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = ne3;
    t->op    = EMBER_OP_NONE;
    ember_set_contiguous_strides(t);
    return t;
}

void ember_graph::build_forward(ember_tensor * out) {
    if (!out) graph_fail("build_forward: output is null");
    ember_tensor_epoch_bump();
    // Tensors already placed by an earlier call are not visited again.
    std::unordered_set<const ember_tensor *> visited(nodes.begin(), nodes.end());
    visited.insert(leafs.begin(), leafs.end());
    if (visited.count(out)) return;

    // Iterative post-order DFS (graphs of a few thousand nodes are deep: one chain per layer).
    struct frame {
        ember_tensor * t;
        int            next;  // next dependency to visit: src[0..MAX_SRC-1], then view_src
    };
    std::vector<frame> stack;
    stack.push_back({out, 0});
    visited.insert(out);
    while (!stack.empty()) {
        frame & f = stack.back();
        if (f.next <= EMBER_MAX_SRC) {
            ember_tensor * dep = f.next < EMBER_MAX_SRC ? f.t->src[f.next] : f.t->view_src;
            f.next++;
            if (dep && !visited.count(dep)) {
                visited.insert(dep);
                stack.push_back({dep, 0});  // invalidates f
            }
            continue;
        }
        if (f.t->op == EMBER_OP_NONE) {
            leafs.push_back(f.t);
        } else {
            nodes.push_back(f.t);
        }
        stack.pop_back();
    }
}

void ember_graph::clear() {
    ember_tensor_epoch_bump();
    arena.clear();
    nodes.clear();
    leafs.clear();
}

//
// Op constructors
//
static ember_tensor * new_node(ember_graph & g, ember_op op, ember_type type, const int64_t ne[4]) {
    ember_tensor * t = g.new_tensor(type, ne[0], ne[1], ne[2], ne[3]);
    t->op = op;
    return t;
}

// Makes t a view of a's memory at byte offset `offset` (relative to a).
static void make_view_of(ember_tensor * t, ember_tensor * a, size_t offset) {
    t->view_src  = a->view_src ? a->view_src : a;
    t->view_offs = a->view_offs + offset;
    if (t->view_src->data) {
        t->buffer = t->view_src->buffer;
        t->data   = static_cast<char *>(t->view_src->data) + t->view_offs;
    }
}

ember_tensor * ember_view_strided(ember_graph & g, ember_tensor * a, const int64_t ne[4], const size_t nb[4], size_t offset) {
    require_tensor("view", "source", a);
    const ember_type_traits * tr = ember_type_get_traits(a->type);
    if (nb[0] != tr->type_size) {
        graph_fail("view: rows must be contiguous (nb[0] = %zu, type size %zu) for %s", nb[0], tr->type_size, shape_str(a).s);
    }
    // Rows of a type with row groups (NF4, FP8_*_ROW) carry their group headers: a view keeps
    // them whole (same ne[0], row-aligned offset and strides), never splits or reshapes them.
    if (tr->group_blocks > 0) {
        const size_t rs = ember_row_size(a->type, a->ne[0]);
        bool         ok = ne[0] == a->ne[0] && offset % rs == 0;
        for (int i = 1; i < EMBER_MAX_DIMS; i++) ok = ok && (ne[i] == 1 || nb[i] % rs == 0);
        if (!ok) {
            graph_fail("view: rows of %s hold row-group headers and cannot be split or reshaped: [%" PRId64 ", %" PRId64
                       ", %" PRId64 ", %" PRId64 "] at offset %zu of %s",
                       tr->name, ne[0], ne[1], ne[2], ne[3], offset, shape_str(a).s);
        }
    }
    ember_tensor probe;  // checked before anything is added to the graph
    std::memset(&probe, 0, sizeof(probe));
    probe.type = a->type;
    for (int i = 0; i < EMBER_MAX_DIMS; i++) {
        probe.ne[i] = ne[i];
        probe.nb[i] = nb[i];
    }
    const size_t span = ember_nbytes(&probe);
    const size_t have = ember_nbytes(a);
    if (offset + span > have) {
        graph_fail("view: [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] at offset %zu spans %zu bytes, %s has %zu",
                   ne[0], ne[1], ne[2], ne[3], offset, offset + span, shape_str(a).s, have);
    }
    ember_tensor * t = new_node(g, EMBER_OP_VIEW, a->type, ne);
    for (int i = 0; i < EMBER_MAX_DIMS; i++) t->nb[i] = nb[i];
    t->src[0] = a;
    make_view_of(t, a, offset);
    ember_set_name(t, "%s (view)", a->name);
    return t;
}

ember_tensor * ember_view(ember_graph & g, ember_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t offset) {
    require_tensor("view", "source", a);
    // Contiguous strides for the new shape: a reshape (or a contiguous slice) of a.
    ember_tensor tmp;
    std::memset(&tmp, 0, sizeof(tmp));
    tmp.type  = a->type;
    tmp.ne[0] = ne0;
    tmp.ne[1] = ne1;
    tmp.ne[2] = ne2;
    tmp.ne[3] = ne3;
    ember_set_contiguous_strides(&tmp);
    if (!ember_is_contiguous(a) && !(ne1 == 1 && ne2 == 1 && ne3 == 1)) {
        graph_fail("view: reshaping needs a contiguous source, got %s", shape_str(a).s);
    }
    return ember_view_strided(g, a, tmp.ne, tmp.nb, offset);
}

ember_tensor * ember_get_rows(ember_graph & g, ember_tensor * table, ember_tensor * ids) {
    require_tensor("get_rows", "table", table);
    require_type("get_rows", "ids", ids, EMBER_TYPE_I32);
    require_dims("get_rows", "table", table, 2);
    require_dims("get_rows", "ids", ids, 3);
    const int64_t  ne[4] = {table->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]};
    ember_tensor * t     = new_node(g, EMBER_OP_GET_ROWS, EMBER_TYPE_F32, ne);
    t->src[0]            = table;
    t->src[1]            = ids;
    return t;
}

ember_tensor * ember_rms_norm(ember_graph & g, ember_tensor * a, float eps) {
    require_type("rms_norm", "input", a, EMBER_TYPE_F32);
    if (!(eps >= 0.0f)) graph_fail("rms_norm: eps must be >= 0, got %g", (double) eps);
    ember_tensor * t = new_node(g, EMBER_OP_RMS_NORM, EMBER_TYPE_F32, a->ne);
    t->src[0]        = a;
    ember_set_op_param_f32(t, 0, eps);
    return t;
}

static ember_tensor * binary_broadcast(ember_graph & g, ember_op op, const char * name, ember_tensor * a, ember_tensor * b) {
    require_type(name, "src0", a, EMBER_TYPE_F32);
    require_type(name, "src1", b, EMBER_TYPE_F32);
    for (int i = 0; i < EMBER_MAX_DIMS; i++) {
        if (b->ne[i] <= 0 || a->ne[i] % b->ne[i] != 0) {
            graph_fail("%s: src1 %s does not broadcast to src0 %s (dim %d)", name, shape_str(b).s, shape_str(a).s, i);
        }
    }
    ember_tensor * t = new_node(g, op, EMBER_TYPE_F32, a->ne);
    t->src[0]        = a;
    t->src[1]        = b;
    return t;
}

ember_tensor * ember_mul(ember_graph & g, ember_tensor * a, ember_tensor * b) {
    return binary_broadcast(g, EMBER_OP_MUL, "mul", a, b);
}

ember_tensor * ember_add(ember_graph & g, ember_tensor * a, ember_tensor * b) {
    return binary_broadcast(g, EMBER_OP_ADD, "add", a, b);
}

ember_tensor * ember_mul_mat(ember_graph & g, ember_tensor * w, ember_tensor * x) {
    require_tensor("mul_mat", "weight", w);
    require_type("mul_mat", "input", x, EMBER_TYPE_F32);
    if (w->ne[0] != x->ne[0]) {
        graph_fail("mul_mat: inner dimensions differ: weight %s, input %s", shape_str(w).s, shape_str(x).s);
    }
    if (x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0) {
        graph_fail("mul_mat: weight batch dims %s do not broadcast to input %s", shape_str(w).s, shape_str(x).s);
    }
    const int64_t  ne[4] = {w->ne[1], x->ne[1], x->ne[2], x->ne[3]};
    ember_tensor * t     = new_node(g, EMBER_OP_MUL_MAT, EMBER_TYPE_F32, ne);
    t->src[0]            = w;
    t->src[1]            = x;
    return t;
}

ember_tensor * ember_rope(ember_graph & g, ember_tensor * a, ember_tensor * pos, ember_tensor * freq_factors,
                          int32_t n_rot, int32_t mode, float freq_base, float freq_scale) {
    require_type("rope", "input", a, EMBER_TYPE_F32);
    require_type("rope", "positions", pos, EMBER_TYPE_I32);
    require_dims("rope", "input", a, 3);
    require_dims("rope", "positions", pos, 1);
    if (pos->ne[0] != a->ne[2]) {
        graph_fail("rope: %" PRId64 " positions for %" PRId64 " tokens (%s)", pos->ne[0], a->ne[2], shape_str(a).s);
    }
    if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > a->ne[0]) {
        graph_fail("rope: n_rot = %d must be even and in (0, head_dim = %" PRId64 "]", n_rot, a->ne[0]);
    }
    if (mode != EMBER_ROPE_NORMAL && mode != EMBER_ROPE_NEOX) graph_fail("rope: unknown mode %d", mode);
    if (!(freq_base > 0.0f) || !(freq_scale > 0.0f)) {
        graph_fail("rope: freq_base (%g) and freq_scale (%g) must be > 0", (double) freq_base, (double) freq_scale);
    }
    if (freq_factors) {
        require_type("rope", "freq_factors", freq_factors, EMBER_TYPE_F32);
        if (freq_factors->ne[0] < n_rot / 2) {
            graph_fail("rope: freq_factors %s has fewer than n_rot/2 = %d entries", shape_str(freq_factors).s, n_rot / 2);
        }
    }
    ember_tensor * t = new_node(g, EMBER_OP_ROPE, EMBER_TYPE_F32, a->ne);
    t->src[0]        = a;
    t->src[1]        = pos;
    t->src[2]        = freq_factors;
    t->op_params[0]  = n_rot;
    t->op_params[1]  = mode;
    ember_set_op_param_f32(t, 2, freq_base);
    ember_set_op_param_f32(t, 3, freq_scale);
    return t;
}

ember_tensor * ember_swiglu(ember_graph & g, ember_tensor * gate, ember_tensor * up) {
    require_type("swiglu", "gate", gate, EMBER_TYPE_F32);
    require_type("swiglu", "up", up, EMBER_TYPE_F32);
    require_same_shape("swiglu", gate, up);
    ember_tensor * t = new_node(g, EMBER_OP_SWIGLU, EMBER_TYPE_F32, gate->ne);
    t->src[0]        = gate;
    t->src[1]        = up;
    return t;
}

ember_tensor * ember_set_rows(ember_graph & g, ember_tensor * dst, ember_tensor * rows, ember_tensor * idx) {
    require_tensor("set_rows", "destination", dst);
    require_type("set_rows", "rows", rows, EMBER_TYPE_F32);
    require_type("set_rows", "indices", idx, EMBER_TYPE_I32);
    require_dims("set_rows", "destination", dst, 2);
    require_dims("set_rows", "rows", rows, 2);
    require_dims("set_rows", "indices", idx, 1);
    if (rows->ne[0] != dst->ne[0]) {
        graph_fail("set_rows: row length differs: rows %s, destination %s", shape_str(rows).s, shape_str(dst).s);
    }
    if (idx->ne[0] != rows->ne[1]) {
        graph_fail("set_rows: %" PRId64 " indices for %" PRId64 " rows", idx->ne[0], rows->ne[1]);
    }
    ember_tensor * t = new_node(g, EMBER_OP_SET_ROWS, dst->type, dst->ne);
    for (int i = 0; i < EMBER_MAX_DIMS; i++) t->nb[i] = dst->nb[i];
    t->src[0] = dst;
    t->src[1] = rows;
    t->src[2] = idx;
    make_view_of(t, dst, 0);
    ember_set_name(t, "%s (set_rows)", dst->name);
    return t;
}

ember_tensor * ember_attn(ember_graph & g, ember_tensor * q, ember_tensor * k, ember_tensor * v, ember_tensor * mask, float scale) {
    require_type("attn", "q", q, EMBER_TYPE_F32);
    require_tensor("attn", "k", k);
    require_tensor("attn", "v", v);
    require_dims("attn", "q", q, 3);
    require_dims("attn", "k", k, 3);
    require_dims("attn", "v", v, 3);
    if (k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0]) {
        graph_fail("attn: head size differs: q %s, k %s, v %s", shape_str(q).s, shape_str(k).s, shape_str(v).s);
    }
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2]) {
        graph_fail("attn: k %s and v %s differ in heads or length", shape_str(k).s, shape_str(v).s);
    }
    if (k->ne[1] <= 0 || q->ne[1] % k->ne[1] != 0) {
        graph_fail("attn: n_head of q %s is not a multiple of n_head_kv of k %s", shape_str(q).s, shape_str(k).s);
    }
    if (mask) {
        require_type("attn", "mask", mask, EMBER_TYPE_F32);
        require_dims("attn", "mask", mask, 2);
        if (mask->ne[0] != k->ne[2] || mask->ne[1] != q->ne[2]) {
            graph_fail("attn: mask %s must be [n_kv = %" PRId64 ", n_tokens = %" PRId64 "]", shape_str(mask).s, k->ne[2],
                       q->ne[2]);
        }
    }
    ember_tensor * t = new_node(g, EMBER_OP_ATTN, EMBER_TYPE_F32, q->ne);
    t->src[0]        = q;
    t->src[1]        = k;
    t->src[2]        = v;
    t->src[3]        = mask;
    ember_set_op_param_f32(t, 0, scale);
    return t;
}

ember_tensor * ember_cpy(ember_graph & g, ember_tensor * a, ember_type type) {
    require_tensor("cpy", "source", a);
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || !tr->name) graph_fail("cpy: unknown destination type id %d", (int) type);
    if (a->ne[0] % tr->block_size != 0) {
        graph_fail("cpy: row of %s is not a whole number of %s blocks", shape_str(a).s, tr->name);
    }
    ember_tensor * t = new_node(g, EMBER_OP_CPY, type, a->ne);
    t->src[0]        = a;
    return t;
}

ember_tensor * ember_scale(ember_graph & g, ember_tensor * a, float s) {
    require_type("scale", "input", a, EMBER_TYPE_F32);
    ember_tensor * t = new_node(g, EMBER_OP_SCALE, EMBER_TYPE_F32, a->ne);
    t->src[0]        = a;
    ember_set_op_param_f32(t, 0, s);
    return t;
}

ember_tensor * ember_top_k(ember_graph & g, ember_tensor * a, int32_t k) {
    require_type("top_k", "input", a, EMBER_TYPE_F32);
    if (a->ne[0] > INT32_MAX) graph_fail("top_k: rows of %s are too long for I32 indices", shape_str(a).s);
    if (k < 1 || k > a->ne[0]) {
        graph_fail("top_k: k = %d must be in [1, row length %" PRId64 "] for %s", k, a->ne[0], shape_str(a).s);
    }
    const int64_t  ne[4] = {2 * static_cast<int64_t>(k), a->ne[1], a->ne[2], a->ne[3]};
    ember_tensor * t     = new_node(g, EMBER_OP_TOP_K, EMBER_TYPE_I32, ne);
    t->src[0]            = a;
    t->op_params[0]      = k;
    return t;
}
