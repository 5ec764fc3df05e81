// The CUDA graph signature (cuda-graph-signature.h).
#include "cuda-graph-signature.h"

// What a recorded graph depends on: the range, and for each node everything a launcher reads,
// folded into a 64-bit hash as it is read. A decode step checks it once per token over ~650
// nodes of ~60 fields: building and comparing a vector of them cost more host time than the
// launch it guards (EMBER_PROFILE_HOST=1 shows the split). Two different ranges of the same
// hash (odds 2^-64 per check) would replay the recorded work for the wrong one.
uint64_t ember_cuda_graph_signature(const ember_cuda_ctx & cu, const ember_graph * g, int32_t begin, int32_t end) {
    // Four lanes in turn, so consecutive fields do not wait on each other's multiply.
    uint64_t   h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0x2545f4914f6cdd1dull};
    unsigned   k    = 0;
    const auto mix  = [&h, &k](int64_t v) {
        uint64_t & x = h[k++ & 3];
        x            = (x ^ static_cast<uint64_t>(v)) * 0xff51afd7ed558ccdull;
        x ^= x >> 29;
    };
    mix(static_cast<int64_t>(reinterpret_cast<intptr_t>(g)));
    mix(begin);
    mix(end);
    for (int i = 0; i < 2; i++) {
        mix(static_cast<int64_t>(reinterpret_cast<intptr_t>(cu.scratch[i])));
        mix(static_cast<int64_t>(cu.scratch_size[i]));
    }
    // Two fields of [0, 2^31) in one value (bits 31 and 63 clear); others as a marker (-1: not a
    // packed value) and the two fields, so the sequence of values still names every field
    // (~45% fewer multiplies per node: a synthetic graph of 1300 nodes of three sources each,
    // 77-97 -> 45-48 us on a 2-core development machine; H200 host, 8B shape, before: 36-84 us
    // per token).
    const auto mix2 = [&mix](int64_t a, int64_t b) {
        if (((static_cast<uint64_t>(a) | static_cast<uint64_t>(b)) >> 31) == 0) {
            mix(a | (b << 32));
        } else {
            mix(-1);
            mix(a);
            mix(b);
        }
    };
    // The data address first (never -1: an absent source's mark).
    const auto add_tensor = [&mix, &mix2](const ember_tensor * t) {
        mix(static_cast<int64_t>(reinterpret_cast<intptr_t>(t->data)));
        mix2(t->type, t->ne[0]);
        mix2(t->ne[1], t->ne[2]);
        mix2(t->ne[3], static_cast<int64_t>(t->nb[0]));
        mix2(static_cast<int64_t>(t->nb[1]), static_cast<int64_t>(t->nb[2]));
        mix(static_cast<int64_t>(t->nb[3]));
    };
    static_assert(EMBER_MAX_OP_PARAMS % 2 == 0, "op params are hashed in pairs");
    for (int32_t i = begin; i < end; i++) {
        const ember_tensor * node = g->nodes[i];
        mix(node->op);
        add_tensor(node);
        for (int p = 0; p < EMBER_MAX_OP_PARAMS; p += 2) {
            mix(static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(node->op_params[p])) |
                                     static_cast<uint64_t>(static_cast<uint32_t>(node->op_params[p + 1])) << 32));
        }
        for (int j = 0; j < EMBER_MAX_SRC; j++) {
            if (node->src[j]) add_tensor(node->src[j]);
            else mix(-1);
        }
    }
    uint64_t r = 0;
    for (int i = 0; i < 4; i++) r = (r ^ h[i]) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i);
    return r ^ (r >> 31);
}
