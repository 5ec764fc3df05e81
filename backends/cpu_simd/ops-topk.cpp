// TOP_K on the CPU (ops.def): the k largest values of each row and their indices, the
// reference the other backends are tested against, and what runs when a device lacks the op.
//
// The order is one 64-bit key per element: the float mapped to an unsigned integer that sorts
// like the float (NaN on top, -0 folded onto +0), then the bit-inverted index, so that equal
// values put the lower index first and every key of a row is distinct. A row is scanned with
// a min-heap of its k best keys; most elements fail one float compare against the heap's
// smallest value and never build a key.
//
// Work split: with at least as many rows as threads, each thread takes whole rows. Otherwise
// (decode: one row) every thread scans a slice of the row into its thread slot, and thread 0
// merges the slots after a barrier.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "cpu-ops.h"

namespace {

inline uint64_t topk_key(float v, uint32_t i) {
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    if (v == 0.0f) b = 0;  // -0 == +0: a tie, decided by the index
    uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    if (v != v) ord = 0xFFFFFFFFu;  // every NaN above +inf (0xFF800000)
    return (uint64_t) ord << 32 | (0xFFFFFFFFu - i);
}

inline int32_t topk_index(uint64_t key) {
    return (int32_t) (0xFFFFFFFFu - (uint32_t) key);
}

// Offers a key to the min-heap heap[0, m) of at most k keys; returns the new m.
inline size_t heap_offer(uint64_t * heap, size_t m, size_t k, uint64_t key) {
    if (m < k) {
        heap[m++] = key;
        std::push_heap(heap, heap + m, std::greater<uint64_t>());
    } else if (key > heap[0]) {
        std::pop_heap(heap, heap + m, std::greater<uint64_t>());
        heap[m - 1] = key;
        std::push_heap(heap, heap + m, std::greater<uint64_t>());
    }
    return m;
}

// The value a key was made from, for the cheap reject: a float below it cannot enter.
inline float key_value(uint64_t key) {
    const uint32_t ord = (uint32_t) (key >> 32);
    if (ord == 0xFFFFFFFFu) return -INFINITY;  // NaN in the heap: nothing can be rejected by value
    const uint32_t b = (ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord;
    float          v;
    std::memcpy(&v, &b, sizeof(v));
    return v;
}

// The best k keys of x[i0, i1) into heap (a min-heap); returns how many (< k when the slice is shorter).
size_t scan_slice(const float * x, int64_t i0, int64_t i1, uint64_t * heap, size_t k) {
    size_t m     = 0;
    float  floor = -INFINITY;  // the heap's smallest value once it is full
    for (int64_t i = i0; i < i1; i++) {
        const float v = x[i];
        if (m == k && v < floor) continue;  // false for NaN: it goes on to the key
        m = heap_offer(heap, m, k, topk_key(v, (uint32_t) i));
        if (m == k) floor = key_value(heap[0]);
    }
    return m;
}

// Sorts the heap's keys best first and writes the row: k indices, then k values.
void write_row(const float * x, uint64_t * keys, size_t k, char * out) {
    std::sort(keys, keys + k, std::greater<uint64_t>());
    int32_t * ids = reinterpret_cast<int32_t *>(out);
    for (size_t j = 0; j < k; j++) {
        const int32_t id = topk_index(keys[j]);
        ids[j]           = id;
        std::memcpy(&ids[k + j], &x[id], sizeof(float));
    }
}

}  // namespace

size_t ember_cpu_top_k_work_size(const ember_tensor * dst, int n_threads) {
    const size_t k = (size_t) dst->op_params[0];
    return ember_cpu_slots_size((1 + 2 * k) * sizeof(uint64_t), n_threads);
}

bool ember_cpu_supports_top_k(const ember_tensor * dst) {
    const ember_tensor * a = dst->src[0];
    return dst->type == EMBER_TYPE_I32 && a->type == EMBER_TYPE_F32 && dst->op_params[0] >= 1 && dst->op_params[0] <= a->ne[0] &&
           dst->ne[0] == 2 * (int64_t) dst->op_params[0];
}

void ember_cpu_top_k(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * a    = dst->src[0];
    const size_t         k    = (size_t) dst->op_params[0];
    const int64_t        n    = a->ne[0];
    const int64_t        rows = ember_nrows(a);
    uint64_t *           slot = reinterpret_cast<uint64_t *>(ember_cpu_thread_slot(p->wdata, p->wsize, p->ith, p->nth));

    auto row_of = [&](int64_t r, const ember_tensor * t) {
        return ember_cpu_row(t, r % t->ne[1], (r / t->ne[1]) % t->ne[2], r / (t->ne[1] * t->ne[2]));
    };

    if (rows >= p->nth) {
        int64_t r0, r1;
        ember_cpu_split_rows(rows, p->ith, p->nth, &r0, &r1);
        for (int64_t r = r0; r < r1; r++) {
            const float * x = reinterpret_cast<const float *>(row_of(r, a));
            scan_slice(x, 0, n, slot, k);  // k <= n: the heap fills
            write_row(x, slot, k, row_of(r, dst));
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float * x = reinterpret_cast<const float *>(row_of(r, a));
        int64_t       i0, i1;
        ember_cpu_split_rows(n, p->ith, p->nth, &i0, &i1);
        slot[0] = scan_slice(x, i0, i1, slot + 1, k);
        ember_cpu_barrier(p);
        if (p->ith == 0) {
            uint64_t * merged = slot + 1 + k;
            size_t     m      = 0;
            for (int t = 0; t < p->nth; t++) {
                const uint64_t * s = reinterpret_cast<const uint64_t *>(ember_cpu_thread_slot(p->wdata, p->wsize, t, p->nth));
                for (uint64_t j = 0; j < s[0]; j++) m = heap_offer(merged, m, k, s[1 + j]);
            }
            write_row(x, merged, k, row_of(r, dst));
        }
        ember_cpu_barrier(p);  // the slots are reused by the next row
    }
}
