// The planner of the CUDA backend's decode matvec units (cuda-plan.h): plain C++ over the graph,
// no CUDA, so the tests run it on CPU graphs with their own hooks.
#include "cuda-plan.h"

#include <cstring>
#include <string>

namespace {

bool hoisted_in(const ember_tensor * const * hoisted, int n_hoisted, const ember_tensor * t) {
    for (int h = 0; h < n_hoisted; h++) {
        if (hoisted[h] == t) return true;
    }
    return false;
}

// The unit (ember_cuda_mv_unit) of the matvec at node i: MUL_MAT [VIEW ROPE] [VIEW] [SET_ROWS],
// as the graph builder orders a layer's Q (matvec, view, rope), K (+ view, set_rows) and V
// (matvec, set_rows). Returns the node after the unit (i + 1: nothing after it fused).
int32_t match_unit(const ember_graph * g, int32_t i, int32_t end, ember_cuda_mv_unit * u, const ember_cuda_plan_hooks & h) {
    ember_tensor * mm = g->nodes[i];
    *u                = ember_cuda_mv_unit{};
    u->mm             = mm;
    if (!ember_cuda_is_matvec(mm)) return i;
    int32_t j = i + 1;
    if (j + 1 < end && g->nodes[j]->op == EMBER_OP_VIEW && g->nodes[j]->src[0] == mm && g->nodes[j + 1]->op == EMBER_OP_ROPE &&
        g->nodes[j + 1]->src[0] == g->nodes[j]) {
        ember_cuda_mv_unit c = *u;
        c.rope               = g->nodes[j + 1];
        c.write_mm           = ember_graph_read_elsewhere(g, mm, g->nodes[j], i + 1) || ember_graph_read_elsewhere(g, g->nodes[j], c.rope, j + 1);
        if (h.unit_ok(c)) {
            *u = c;
            j += 2;
        }
    }
    const ember_tensor * rows = u->rope ? u->rope : mm;
    int32_t              k    = j;
    if (u->rope && k < end && g->nodes[k]->op == EMBER_OP_VIEW && g->nodes[k]->src[0] == u->rope) rows = g->nodes[k++];
    if (k < end && g->nodes[k]->op == EMBER_OP_SET_ROWS && g->nodes[k]->src[1] == rows) {
        ember_cuda_mv_unit c = *u;
        c.set_rows           = g->nodes[k];
        // What only the SET_ROWS reads is not stored: the allocator may already have given its
        // memory to the next unit's product (V's on top of K's rotated rows).
        const ember_tensor * stored    = u->rope ? u->rope : mm;  // rows is it or a reshape of it
        const bool rows_read = ember_graph_read_elsewhere(g, rows, c.set_rows, i + 1) || (rows != stored && ember_graph_read_elsewhere(g, stored, rows, i + 1));
        if (u->rope) {
            c.write_rope = rows_read;
        } else {
            c.write_mm = rows_read;
        }
        if (h.unit_ok(c)) {
            *u = c;
            j  = k + 1;
        }
    }
    return j;
}

// Whether the writes of units [0, n) touch none of their reads and none of each other.
bool units_independent(const ember_cuda_mv_unit * u, int n) {
    const ember_tensor * wr[3 * 3];
    const ember_tensor * rd[1 + 3 * 3];
    int                  nw = 0, nr = 0;
    rd[nr++] = u[0].mm->src[1];
    for (int m = 0; m < n; m++) {
        if (u[m].write_mm) wr[nw++] = u[m].mm;
        if (u[m].rope) {
            if (u[m].write_rope) wr[nw++] = u[m].rope;
            rd[nr++] = u[m].rope->src[1];
            rd[nr++] = u[m].rope->src[2];
        }
        if (u[m].set_rows) {
            wr[nw++] = u[m].set_rows;
            rd[nr++] = u[m].set_rows->src[2];
        }
    }
    for (int a = 0; a < nw; a++) {
        for (int b = 0; b < nr; b++) {
            if (ember_cuda_overlaps(wr[a], rd[b])) return false;
        }
        for (int b = a + 1; b < nw; b++) {
            if (ember_cuda_overlaps(wr[a], wr[b])) return false;
        }
    }
    return true;
}

}  // namespace

bool ember_cuda_is_matvec(const ember_tensor * node) {
    return node->op == EMBER_OP_MUL_MAT && node->src[1]->ne[1] <= EMBER_CUDA_MATVEC_MAX_COLS;
}

bool ember_cuda_xh_reusable(const ember_graph * g, int32_t from, int32_t i) {
    if (!g || from < 0 || from >= i || i >= static_cast<int32_t>(g->nodes.size())) return false;
    const ember_tensor * a = g->nodes[from];
    const ember_tensor * b = g->nodes[i];
    if (b->op != EMBER_OP_MUL_MAT || ember_cuda_is_matvec(b)) return false;
    const ember_tensor * x = b->src[1];
    if (a != x && (a->op != EMBER_OP_MUL_MAT || ember_cuda_is_matvec(a) || a->src[1] != x)) return false;  // made by x's producer or a product
    for (int32_t j = from + 1; j < i; j++) {
        const ember_tensor * n = g->nodes[j];
        if (n->op == EMBER_OP_NONE || n->op == EMBER_OP_VIEW) continue;
        const bool same_x = n->op == EMBER_OP_MUL_MAT && !ember_cuda_is_matvec(n) && n->src[1] == x;  // took the copy too
        if ((n->op != EMBER_OP_ROPE && n->op != EMBER_OP_SET_ROWS && !same_x) || ember_cuda_overlaps(n, x)) return false;
    }
    return true;
}

ember_cuda_unit_plan ember_cuda_plan_units(const ember_graph * g, int32_t i, int32_t end, const ember_tensor * const * hoisted, int n_hoisted,
                                           const ember_cuda_plan_hooks & h) {
    ember_cuda_unit_plan p;
    ember_cuda_mv_unit * u = p.u;
    int32_t            next = match_unit(g, i, end, &u[0], h);
    int                n    = 1;
    bool               epi  = u[0].rope || u[0].set_rows;
    while (n < 3 && h.group) {
        int32_t k = next;
        while (k < end && (g->nodes[k]->op == EMBER_OP_VIEW || g->nodes[k]->op == EMBER_OP_NONE)) k++;
        if (k < end && ember_cuda_is_matvec(g->nodes[k]) && h.can_share(u[0].mm, g->nodes[k])) {
            const int32_t after = match_unit(g, k, end, &u[n], h);
            if (!units_independent(u, n + 1)) break;
            epi = epi || u[n].rope || u[n].set_rows;
            n++;
            next = after;
            continue;
        }
        // With a quantized KV cache K's SET_ROWS stays a kernel of its own, between the K and V
        // matvecs: V's matvec joins the launch when it can run before the nodes between.
        int32_t j = k;
        while (j < end && j < k + EMBER_CUDA_HOIST_WINDOW && !ember_cuda_is_matvec(g->nodes[j])) j++;
        if (j >= end || !ember_cuda_is_matvec(g->nodes[j]) || !h.can_share(u[0].mm, g->nodes[j]) || n_hoisted >= 6 ||
            hoisted_in(hoisted, n_hoisted, g->nodes[j]) || match_unit(g, j, end, &u[n], h) != j + 1 || !units_independent(u, n + 1)) {
            break;
        }
        const ember_tensor * c  = g->nodes[j];
        bool                 ok = true;
        for (int32_t b = k; b < j && ok; b++) {
            const ember_tensor * t = g->nodes[b];
            if (t->op == EMBER_OP_VIEW || t->op == EMBER_OP_NONE || hoisted_in(hoisted, n_hoisted, t)) continue;
            ok = !ember_cuda_overlaps(t, c);
            for (int s = 0; s < EMBER_MAX_SRC && ok; s++) ok = t->src[s] != c && !ember_cuda_overlaps(t->src[s], c) && !ember_cuda_overlaps(t, c->src[s]);
        }
        if (!ok) break;
        p.hoist = g->nodes[j];
        n++;
        break;
    }
    if (!epi || !units_independent(u, n)) return ember_cuda_unit_plan{};
    p.n    = n;
    p.next = next;
    return p;
}

bool ember_cuda_only_matvecs_read(const ember_graph * g, const ember_tensor * t, int32_t k, int32_t end,
                                  bool (*reader_ok)(const ember_tensor * mm)) {
    if (t->flags & EMBER_TENSOR_FLAG_OUTPUT) return false;
    int32_t last = -1;  // t's last reader
    for (size_t n = static_cast<size_t>(k); n < g->nodes.size(); n++) {
        const ember_tensor * c = g->nodes[n];
        if (c->view_src == t) return false;
        bool reads = false;
        for (const ember_tensor * s : c->src) reads = reads || s == t;
        if (!reads) continue;
        if (static_cast<int32_t>(n) >= end || !ember_cuda_is_matvec(c) || c->src[0] == t || c->src[1] != t || !reader_ok(c)) return false;
        last = static_cast<int32_t>(n);
    }
    for (int32_t n = k; n < last; n++) {
        const ember_tensor * c  = g->nodes[n];
        const bool           ok = c->op == EMBER_OP_NONE || c->op == EMBER_OP_VIEW || c->op == EMBER_OP_ROPE || c->op == EMBER_OP_SET_ROWS ||
                        (ember_cuda_is_matvec(c) && c->src[1] == t);
        if (!ok) return false;
    }
    return last >= 0;
}

bool ember_cuda_plan_mv_norm(const ember_graph * g, int32_t i, int32_t end, const ember_cuda_norm_hooks & h, ember_tensor ** f) {
    if (i < 0 || i + 4 >= end) return false;
    ember_tensor * mm = g->nodes[i], *add = g->nodes[i + 1], *norm = g->nodes[i + 2], *mul = g->nodes[i + 3];
    if (!ember_cuda_is_matvec(mm) || add->op != EMBER_OP_ADD || norm->op != EMBER_OP_RMS_NORM || mul->op != EMBER_OP_MUL) return false;
    if ((add->src[0] == mm) == (add->src[1] == mm) || norm->src[0] != add || mul->src[0] != norm || mul->src[1] == norm) return false;
    if (!h.fuse_ok(mm, add, norm, mul)) return false;
    if (ember_graph_read_elsewhere(g, mm, add, static_cast<size_t>(i)) || ember_graph_read_elsewhere(g, norm, mul, static_cast<size_t>(i)) ||
        !ember_cuda_only_matvecs_read(g, mul, i + 4, end, h.reader_ok)) {
        return false;
    }
    for (int32_t n = i + 4; h.pair_ok && n < end; n++) {  // (the readers: only_matvecs_read's)
        const ember_tensor * c = g->nodes[n];
        if (ember_cuda_is_matvec(c) && c->src[1] == mul && !h.pair_ok(mm, c)) return false;
    }
    f[0] = add;
    f[1] = norm;
    f[2] = mul;
    return true;
}

bool ember_cuda_plan_glu(const ember_graph * g, int32_t i, int32_t end, const ember_tensor * const * hoisted, int n_hoisted,
                         bool (*fuse_ok)(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu), ember_tensor ** f,
                         bool * store_gu) {
    if (i < 0 || i + 2 >= end) return false;
    ember_tensor * a = g->nodes[i], *b = g->nodes[i + 1], *glu = g->nodes[i + 2];
    if (!ember_cuda_is_matvec(a) || !ember_cuda_is_matvec(b) || glu->op != EMBER_OP_SWIGLU) return false;
    ember_tensor * gate = glu->src[0], *up = glu->src[1];
    if (!((gate == a && up == b) || (gate == b && up == a))) return false;
    for (int k = 0; k < n_hoisted; k++) {
        if (hoisted[k] == a || hoisted[k] == b) return false;
    }
    if (!fuse_ok(gate, up, glu)) return false;
    f[0]      = gate;
    f[1]      = up;
    f[2]      = glu;
    *store_gu = ember_graph_read_elsewhere(g, gate, glu, static_cast<size_t>(i)) || ember_graph_read_elsewhere(g, up, glu, static_cast<size_t>(i));
    return true;
}

// Calls f(entry, length) for each entry of an EMBER_CUDA_SKIP list (separated by ',' or '+').
template <typename F> static void for_each_skip_entry(const char * list, F && f) {
    for (const char * p = list; p && *p;) {
        const char * q = std::strpbrk(p, ",+");
        const size_t n = q ? static_cast<size_t>(q - p) : std::strlen(p);
        f(p, n);
        p = q ? q + 1 : p + n;
    }
}

unsigned ember_cuda_skip_parse(const char * list) {
    static const struct {
        const char * name;
        unsigned     bit;
    } kinds[] = {{"mv", EMBER_CUDA_SKIP_MATVEC}, {"norm", EMBER_CUDA_SKIP_NORM}, {"attn", EMBER_CUDA_SKIP_ATTN},
                 {"glu", EMBER_CUDA_SKIP_GLU},   {"other", EMBER_CUDA_SKIP_OTHER}};
    unsigned bits = 0;
    for_each_skip_entry(list, [&](const char * e, size_t n) {
        for (const auto & k : kinds) {
            if (std::strlen(k.name) == n && std::strncmp(e, k.name, n) == 0) bits |= k.bit;
        }
    });
    return bits;
}

unsigned ember_cuda_skip_kind_of(const ember_tensor * node) {
    switch (node->op) {
        case EMBER_OP_MUL_MAT: return EMBER_CUDA_SKIP_MATVEC;
        case EMBER_OP_RMS_NORM:
        case EMBER_OP_ADD:
        case EMBER_OP_MUL: return EMBER_CUDA_SKIP_NORM;
        case EMBER_OP_ATTN: return EMBER_CUDA_SKIP_ATTN;
        case EMBER_OP_SWIGLU: return EMBER_CUDA_SKIP_GLU;
        default: return EMBER_CUDA_SKIP_OTHER;
    }
}

bool ember_cuda_skip_weight(const char * list, const ember_tensor * node) {
    if (!list || node->op != EMBER_OP_MUL_MAT || !node->src[0]) return false;
    bool hit = false;
    for_each_skip_entry(list, [&](const char * e, size_t n) {
        if (n > 2 && std::strncmp(e, "w:", 2) == 0 && std::strstr(node->src[0]->name, std::string(e + 2, n - 2).c_str())) hit = true;
    });
    return hit;
}

namespace {
bool plan_is_input(const ember_tensor * t) {
    return t && (t->op == EMBER_OP_NONE || (t->op == EMBER_OP_CPY && t->src[0] && t->src[0]->op == EMBER_OP_NONE));
}
}  // namespace

bool ember_cuda_attn_early_rows(const ember_tensor * attn, int max_rows, const int32_t ** idx, int * n) {
    *idx = nullptr;
    *n   = 0;
    if (!attn || attn->op != EMBER_OP_ATTN || !attn->src[1] || !attn->src[2] || (attn->src[3] && !plan_is_input(attn->src[3]))) return false;
    const ember_tensor * set[2] = {nullptr, nullptr};
    for (int kv = 0; kv < 2; kv++) {
        const ember_tensor * view = attn->src[1 + kv];
        const ember_tensor * t    = view;
        while (t->op == EMBER_OP_VIEW && t->src[0]) t = t->src[0];
        if (t->op == EMBER_OP_NONE) continue;  // a leaf: not written by this graph
        if (t->op != EMBER_OP_SET_ROWS || view->op != EMBER_OP_VIEW || view->src[0] != t || view->data != t->data || view->nb[2] != t->nb[1]) {
            return false;
        }
        set[kv] = t;
    }
    if (!set[0] && !set[1]) return true;
    const ember_tensor * ix = set[0] ? set[0]->src[2] : set[1]->src[2];
    if (!plan_is_input(ix) || ix->type != EMBER_TYPE_I32 || ix->nb[0] != sizeof(int32_t) || ix->ne[0] > max_rows || ix->ne[1] * ix->ne[2] * ix->ne[3] != 1 ||
        (set[0] && set[0]->src[2] != ix) || (set[1] && set[1]->src[2] != ix)) {
        return false;
    }
    *idx = static_cast<const int32_t *>(ix->data);
    *n   = static_cast<int>(ix->ne[0]);
    return true;
}
