// Which nodes of a decode graph the CUDA backend's matvec units (ember_cuda_mv_unit, cuda-ops.h)
// take: a matvec with the RoPE and KV cache write after it, and a layer's Q, K and V in one
// launch. Plain C++, no CUDA: cuda-backend.cpp runs it with the kernels' checks as hooks, and
// the tests run it on CPU graphs (test_cuda_plan.cpp), so a planner that stops finding the
// units fails in CI, not only in a benchmark.
#ifndef EMBER_CUDA_PLAN_H
#define EMBER_CUDA_PLAN_H

#include <cstdint>

#include "cuda-ops.h"
#include "graph.h"

// How far ahead a matvec looks for a partner to run with it (past K's SET_ROWS and views).
constexpr int32_t EMBER_CUDA_HOIST_WINDOW = 8;

struct ember_cuda_plan_hooks {
    bool (*unit_ok)(const ember_cuda_mv_unit & u);                  // a kernel can do this unit
    bool (*can_share)(const ember_tensor * a, const ember_tensor * b);  // one launch may hold both
    bool group = true;  // several units per launch (EMBER_CUDA_MV_GROUP)
};

struct ember_cuda_unit_plan {
    ember_cuda_mv_unit u[3];
    int                n     = 0;        // units in the launch; 0: nothing to fuse at the node
    int32_t            next  = 0;        // the node after the last of the consecutive units
    ember_tensor *     hoist = nullptr;  // a later plain matvec run early with them (u[n - 1])
};

// A matvec: MUL_MAT of at most EMBER_CUDA_MATVEC_MAX_COLS columns.
bool ember_cuda_is_matvec(const ember_tensor * node);

// Whether the 16-bit copy of x that node `from` of g made in scratch memory (a prefill MUL_MAT
// over x, or x's producer: ember_cuda_swiglu_xh; ember_cuda_ctx::xh_valid) still serves the
// prefill MUL_MAT at node i > from: i reads
// the same tensor as x, and only views, RoPE, cache writes (SET_ROWS) and prefill products of
// the same x, none over x's memory, lie between (nothing that uses the scratch memory or could
// write x). A layer's K and V products after Q, up after gate.
bool ember_cuda_xh_reusable(const ember_graph * g, int32_t from, int32_t i);

// The units from matvec node i of g on, within [i, end) (the range being run; `hoisted`: nodes
// already run early, to be skipped). Units are returned only when one of them fuses something
// and their writes touch none of their reads or each other.
ember_cuda_unit_plan ember_cuda_plan_units(const ember_graph * g, int32_t i, int32_t end, const ember_tensor * const * hoisted, int n_hoisted,
                                           const ember_cuda_plan_hooks & h);

// Whether t (made by nodes before k) is read only as the x of matvecs of [k, end) that pass
// reader_ok, at least one, through no view, t no graph output, with only those matvecs, views,
// RoPE and cache writes from k to the last of them (nothing that could replace the quantized copy
// of t they share in scratch memory). Then t's floats need not be written.
bool ember_cuda_only_matvecs_read(const ember_graph * g, const ember_tensor * t, int32_t k, int32_t end,
                                  bool (*reader_ok)(const ember_tensor * mm));

// The decode norm in the product before it (ember_cuda_mul_mat_vec_norm, cuda-ops.h): the matvec
// at node i of g, the residual ADD at i + 1 that alone reads its result, that ADD's RMS_NORM at
// i + 2 whose result only the MUL at i + 3 reads, and that MUL read only as x by integer matvecs
// of [i + 4, end) that apply the norm's scale (reader_ok), with only matvecs, views, RoPE and cache
// writes between them (a layer's gate and up after its O product; the next layer's Q, K and V
// after the FFN down product). fuse_ok: the kernel's own conditions (types, shapes). True: f =
// {ADD, RMS_NORM, MUL}. pair_ok (optional): whether a reader may read the copy of that
// producer (the copy's form depends on the producer's weights).
struct ember_cuda_norm_hooks {
    bool (*fuse_ok)(const ember_tensor * mm, const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul);
    bool (*reader_ok)(const ember_tensor * mm);
    bool (*pair_ok)(const ember_tensor * producer, const ember_tensor * reader) = nullptr;
};
bool ember_cuda_plan_mv_norm(const ember_graph * g, int32_t i, int32_t end, const ember_cuda_norm_hooks & h, ember_tensor ** f);

// The gate and up matvecs of a decode FFN with their SWIGLU (ember_cuda_mul_mat_vec_glu,
// cuda-ops.h): matvecs at nodes i and i + 1 of g, the SWIGLU at i + 2 over them (gate = its first
// source, up its second, in either node order), fuse_ok (the kernel's conditions), neither node
// hoisted (already run). True: f = {gate, up, SWIGLU}, *store_gu whether another node (or the
// graph's output) reads gate or up, so the launch must write their floats too.
bool ember_cuda_plan_glu(const ember_graph * g, int32_t i, int32_t end, const ember_tensor * const * hoisted, int n_hoisted,
                         bool (*fuse_ok)(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu), ember_tensor ** f,
                         bool * store_gu);
// Whether the decode attention `attn` (ATTN: q, k, v, mask) may read its K / V cache rows before
// its PDL wait (attn_dec_short_kernel's early rows), all but those this graph writes: K and V each
// a VIEW of a SET_ROWS (key j = cache row j: the view at the cache's start, its key stride the
// cache's row stride) whose I32 indices are a graph input of at most max_rows rows, the same for
// both (the runtime's kv_idx), or leaves (or views of leaves) nothing in the graph writes; the mask
// (if any) an input too. A graph input: a leaf, or the scheduler's copy of one (a CPY hoisted to
// the graph's start, scheduler.cpp), written before any node runs. True: *idx the written rows'
// indices (nullptr, *n = 0: none).
bool ember_cuda_attn_early_rows(const ember_tensor * attn, int max_rows, const int32_t ** idx, int * n);

// EMBER_CUDA_SKIP (measuring only; results are wrong): kinds of op whose kernels a decode step
// does not launch, so a benchmark shows what each kind costs on the token's critical path.
enum ember_cuda_skip_kind : unsigned {
    EMBER_CUDA_SKIP_MATVEC = 1,   // "mv": MUL_MAT (decode products and their fused units)
    EMBER_CUDA_SKIP_NORM   = 2,   // "norm": RMS_NORM, ADD, MUL (and their fusions)
    EMBER_CUDA_SKIP_ATTN   = 4,   // "attn"
    EMBER_CUDA_SKIP_GLU    = 8,   // "glu": SWIGLU
    EMBER_CUDA_SKIP_OTHER  = 16,  // "other": ROPE, SET_ROWS, GET_ROWS, copies, TOP_K, ...
};
// A list such as "norm,attn" or "norm+attn" as ember_cuda_skip_kind bits (unknown names
// ignored; null: 0).
unsigned ember_cuda_skip_parse(const char * list);
// The kind a node (the first of those one launch covers) counts as.
unsigned ember_cuda_skip_kind_of(const ember_tensor * node);
// Whether `list` has a "w:NAME" entry that names part of a matvec node's weight name (e.g.
// "w:ffn_down" skips the FFN down products only).
bool ember_cuda_skip_weight(const char * list, const ember_tensor * node);

#endif  // EMBER_CUDA_PLAN_H
