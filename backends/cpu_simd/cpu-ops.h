// Private interface between the CPU stream (cpu-backend.cpp) and the scalar reference kernels
// (ops-*.cpp). Every thread of the pool calls the kernel of each node with its own ith; a
// kernel splits its work by rows and may call ember_cpu_barrier() between phases.
//
// Conventions the kernels rely on (guaranteed by the op constructors in graph.cpp):
//   - rows are contiguous: nb[0] == type_size for every source and destination;
//   - dimensions 1..3 may be strided: always address rows through nb[1..3].
#ifndef EMBER_CPU_OPS_H
#define EMBER_CPU_OPS_H

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend.h"
#include "thread-pool.h"

struct ember_cpu_compute_params {
    int                 ith;    // this thread
    int                 nth;    // threads taking part
    void *              wdata;  // the stream's work buffer, shared by all threads (work_size bytes)
    size_t              wsize;
    ember_thread_pool * pool;   // for ember_cpu_barrier
    int32_t             node;     // index of the node being computed
    std::atomic<int> *  error;    // first error status of this graph_compute (0: none)
    std::atomic<int> *  stop_at;  // lowest node index after which all threads stop
    // Work sharing without a barrier (ember_cpu_claim_chunk): a number unique to this execution
    // of this node (it grows with every node the stream runs), and the stream's counter for it
    // (no other node running at the same time uses the same one).
    uint64_t                 node_seq;
    std::atomic<uint64_t> *  chunks;
};

// Dynamic work split inside one node, with no reset and so no barrier: thread ith's first
// chunk is ith (take it without asking), each call returns the next unclaimed one (>= nth;
// stop at n_chunks). The counter word holds (node_seq << 20 | next chunk): the first claim of
// a new node_seq restarts it at nth. n_chunks + nth must stay below 2^20.
constexpr int64_t EMBER_CPU_MAX_CHUNKS = (int64_t(1) << 20) - 1024;
inline int64_t ember_cpu_claim_chunk(const ember_cpu_compute_params * p) {
    const uint64_t tag = p->node_seq & ((uint64_t(1) << 44) - 1);
    uint64_t       cur = p->chunks->load(std::memory_order_relaxed);
    for (;;) {
        const bool     same = (cur >> 20) == tag;
        const int64_t  got  = same ? (int64_t) (cur & 0xfffff) : p->nth;
        const uint64_t next = same ? cur + 1 : (tag << 20 | (uint64_t) (p->nth + 1));
        if (p->chunks->compare_exchange_weak(cur, next, std::memory_order_relaxed)) return got;
    }
}

// Asks every thread to stop after `node`. All requests for node i happen before the barrier
// that ends node i, and requests made later name later nodes, so after that barrier the
// test `stop_at <= i` reads the same on every thread.
inline void ember_cpu_request_stop(std::atomic<int> * stop_at, int32_t node) {
    int cur = stop_at->load();
    while (node < cur && !stop_at->compare_exchange_weak(cur, node)) {
    }
}

inline void ember_cpu_barrier(const ember_cpu_compute_params * p) {
    if (p->nth > 1) p->pool->barrier();  // nth == 1: a light range on the calling thread alone
}

// Reports a data error (e.g. a row index out of range); the stream stops after this node.
inline void ember_cpu_set_error(const ember_cpu_compute_params * p, ember_status status) {
    int expected = 0;
    p->error->compare_exchange_strong(expected, status);
    ember_cpu_request_stop(p->stop_at, p->node);
}

// Rows [*r0, *r1) of n rows for thread ith of nth: an even split.
inline void ember_cpu_split_rows(int64_t n, int ith, int nth, int64_t * r0, int64_t * r1) {
    const int64_t per = (n + nth - 1) / nth;
    *r0               = per * ith < n ? per * ith : n;
    *r1               = *r0 + per < n ? *r0 + per : n;
}

// Address of row (i1, i2, i3) of t.
inline char * ember_cpu_row(const ember_tensor * t, int64_t i1, int64_t i2, int64_t i3) {
    return static_cast<char *>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

// Work-buffer slices are padded to a cache line so threads never share one.
constexpr size_t EMBER_CPU_CACHE_LINE = 64;
inline size_t ember_cpu_pad(size_t n) {
    return (n + EMBER_CPU_CACHE_LINE - 1) / EMBER_CPU_CACHE_LINE * EMBER_CPU_CACHE_LINE;
}

// Thread-private slots of the work buffer: after a one-line header, slot ith of
// (wsize - header) / nth bytes. A slot's place depends only on the thread and the buffer, not
// on the node, so nodes that use only their own slot may run without a barrier between them
// (cpu-backend.cpp). A kernel using slots asks for ember_cpu_slots_size(its bytes, nth).
inline size_t ember_cpu_slots_size(size_t per_thread, int nth) {
    return EMBER_CPU_CACHE_LINE + (size_t) (nth > 0 ? nth : 1) * ember_cpu_pad(per_thread);
}
inline char * ember_cpu_thread_slot(void * wdata, size_t wsize, int ith, int nth) {
    const size_t slot = (wsize - EMBER_CPU_CACHE_LINE) / (size_t) nth / EMBER_CPU_CACHE_LINE * EMBER_CPU_CACHE_LINE;
    return static_cast<char *>(wdata) + EMBER_CPU_CACHE_LINE + (size_t) ith * slot;
}

typedef void   (*ember_cpu_compute_fn)(const ember_cpu_compute_params * p, ember_tensor * dst);
typedef size_t (*ember_cpu_work_size_fn)(const ember_tensor * dst, int n_threads);  // bytes of wdata
typedef bool   (*ember_cpu_supports_fn)(const ember_tensor * dst);

struct ember_cpu_op {
    ember_cpu_compute_fn   compute;    // NULL: nothing to compute (NONE, VIEW)
    ember_cpu_work_size_fn work_size;  // NULL: needs no work buffer
    ember_cpu_supports_fn  supports;   // NULL: always supported
};

//
// Kernels, by family
//
// ops-elementwise.cpp
void   ember_cpu_rms_norm(const ember_cpu_compute_params * p, ember_tensor * dst);
void   ember_cpu_mul(const ember_cpu_compute_params * p, ember_tensor * dst);
void   ember_cpu_add(const ember_cpu_compute_params * p, ember_tensor * dst);
void   ember_cpu_swiglu(const ember_cpu_compute_params * p, ember_tensor * dst);
void   ember_cpu_scale(const ember_cpu_compute_params * p, ember_tensor * dst);
bool   ember_cpu_supports_f32(const ember_tensor * dst);  // dst and every source F32

// ops-rows.cpp: type conversion by rows
void   ember_cpu_get_rows(const ember_cpu_compute_params * p, ember_tensor * dst);
bool   ember_cpu_supports_get_rows(const ember_tensor * dst);
void   ember_cpu_set_rows(const ember_cpu_compute_params * p, ember_tensor * dst);
bool   ember_cpu_supports_set_rows(const ember_tensor * dst);
void   ember_cpu_cpy(const ember_cpu_compute_params * p, ember_tensor * dst);
size_t ember_cpu_cpy_work_size(const ember_tensor * dst, int n_threads);
bool   ember_cpu_supports_cpy(const ember_tensor * dst);

// ops-matmul.cpp
void   ember_cpu_mul_mat(const ember_cpu_compute_params * p, ember_tensor * dst);
size_t ember_cpu_mul_mat_work_size(const ember_tensor * dst, int n_threads);
// True when the matmul is a decode step whose threads convert the activations privately, each
// into its thread slot (ember_cpu_thread_slot): no barrier inside.
bool   ember_cpu_mul_mat_private(const ember_tensor * dst);
bool   ember_cpu_supports_mul_mat(const ember_tensor * dst);

// ops-rope.cpp
void   ember_cpu_rope(const ember_cpu_compute_params * p, ember_tensor * dst);
size_t ember_cpu_rope_work_size(const ember_tensor * dst, int n_threads);  // thread slots
bool   ember_cpu_supports_rope(const ember_tensor * dst);

// ops-attention.cpp
void   ember_cpu_attn(const ember_cpu_compute_params * p, ember_tensor * dst);
size_t ember_cpu_attn_work_size(const ember_tensor * dst, int n_threads);
bool   ember_cpu_supports_attn(const ember_tensor * dst);

// ops-attention-tiled.cpp: the op the stream runs (ember_cpu_attn above is its reference);
// _with computes with the given kernel table (tests compare every ISA's table).
struct ember_cpu_kernel_table;
void   ember_cpu_attn_tiled(const ember_cpu_compute_params * p, ember_tensor * dst);
void   ember_cpu_attn_tiled_with(const ember_cpu_compute_params * p, ember_tensor * dst,
                                 const ember_cpu_kernel_table * kt);
size_t ember_cpu_attn_tiled_work_size(const ember_tensor * dst, int n_threads);

// ops-topk.cpp
void   ember_cpu_top_k(const ember_cpu_compute_params * p, ember_tensor * dst);
size_t ember_cpu_top_k_work_size(const ember_tensor * dst, int n_threads);
bool   ember_cpu_supports_top_k(const ember_tensor * dst);

#endif  // EMBER_CPU_OPS_H
