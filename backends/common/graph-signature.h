// What a backend's recorded work for a range of graph nodes depends on, as one 64-bit hash:
// the graph object, the range, and for each node its op, parameters, and the address, type,
// shape and strides of it and of its sources. A backend replays what it recorded (a CUDA
// graph, a Vulkan command buffer) while the hash is unchanged, so every field its recording
// reads must be in it; `identity` adds each tensor's descriptor and buffer pointers (Vulkan:
// every buffer's data addresses start at one base, and fusion reads the graph's edges), and
// `extra` the backend's own state (CUDA: its scratch buffers).
//
// A decode step checks it once per token over ~650 nodes of ~60 fields, so it is built for
// speed: four lanes in turn (consecutive fields do not wait on each other's multiply), and two
// fields of [0, 2^31) packed into one value (others behind a marker, so the sequence of values
// still names every field). Two different ranges of the same hash (odds 2^-64 per check) would
// replay the recorded work for the wrong one. Inline: the backend modules use it too.
#ifndef EMBER_BACKENDS_GRAPH_SIGNATURE_H
#define EMBER_BACKENDS_GRAPH_SIGNATURE_H

#include <cstdint>
#include <initializer_list>

#include "graph.h"

struct ember_hash4 {
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0x2545f4914f6cdd1dull};
    unsigned k    = 0;

    void mix(int64_t v) {
        uint64_t & x = h[k++ & 3];
        x            = (x ^ static_cast<uint64_t>(v)) * 0xff51afd7ed558ccdull;
        x ^= x >> 29;
    }
    void mix_ptr(const void * p) { mix(static_cast<int64_t>(reinterpret_cast<intptr_t>(p))); }
    void mix2(int64_t a, int64_t b) {
        if (((static_cast<uint64_t>(a) | static_cast<uint64_t>(b)) >> 31) == 0) {
            mix(a | (b << 32));
        } else {
            mix(-1);
            mix(a);
            mix(b);
        }
    }
    uint64_t finish() const {
        uint64_t r = 0;
        for (int i = 0; i < 4; i++) r = (r ^ h[i]) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i);
        return r ^ (r >> 31);
    }
};

inline uint64_t ember_graph_signature(const ember_graph * g, int32_t begin, int32_t end, bool identity,
                                      std::initializer_list<int64_t> extra = {}) {
    ember_hash4 hs;
    hs.mix_ptr(g);
    hs.mix(begin);
    hs.mix(end);
    for (int64_t v : extra) hs.mix(v);
    // The data address first (never -1: an absent source's mark).
    const auto add_tensor = [&hs, identity](const ember_tensor * t) {
        hs.mix_ptr(t->data);
        if (identity) {
            hs.mix_ptr(t);
            hs.mix_ptr(t->buffer);
        }
        hs.mix2(t->type, t->ne[0]);
        hs.mix2(t->ne[1], t->ne[2]);
        hs.mix2(t->ne[3], static_cast<int64_t>(t->nb[0]));
        hs.mix2(static_cast<int64_t>(t->nb[1]), static_cast<int64_t>(t->nb[2]));
        hs.mix(static_cast<int64_t>(t->nb[3]));
    };
    static_assert(EMBER_MAX_OP_PARAMS % 2 == 0, "op params are hashed in pairs");
    for (int32_t i = begin; i < end; i++) {
        const ember_tensor * node = g->nodes[i];
        hs.mix(node->op);
        add_tensor(node);
        for (int p = 0; p < EMBER_MAX_OP_PARAMS; p += 2) {
            hs.mix(static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(node->op_params[p])) |
                                        static_cast<uint64_t>(static_cast<uint32_t>(node->op_params[p + 1])) << 32));
        }
        for (int j = 0; j < EMBER_MAX_SRC; j++) {
            if (node->src[j]) add_tensor(node->src[j]);
            else hs.mix(-1);
        }
    }
    return hs.finish();
}

#endif  // EMBER_BACKENDS_GRAPH_SIGNATURE_H
