// The CUDA graph signature (backends/cuda/cuda-graph-signature.h), on CPU graphs: the same
// nodes give the same hash, and a change to any field a launcher reads (a node's or a source's
// address, type, shape, strides, an op parameter, the op, a source present or absent, the node
// range, the scratch buffers) gives another, on both sides of the two-fields-in-one packing.
// A field left out would let a decode step replay a recorded CUDA graph for the wrong work.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "backends/cuda/cuda-graph-signature.h"
#include "graph.h"

namespace {

struct sig_graph {
    ember_graph    g;
    ember_tensor * w = nullptr, *x = nullptr, *y = nullptr, *z = nullptr;
    sig_graph() {
        w = g.new_tensor(EMBER_TYPE_Q4_0, 256, 64);
        x = g.new_tensor(EMBER_TYPE_F32, 256, 1);
        y = ember_mul_mat(g, w, x);
        z = ember_rms_norm(g, y, 1e-5f);
        g.build_forward(z);
        uintptr_t a = 0x7f0000000000u;
        for (ember_tensor * t : {w, x, y, z}) {
            t->data = reinterpret_cast<void *>(a);
            a += 1 << 20;
        }
    }
};

}  // namespace

TEST_SUITE("backends") {

TEST_CASE("[cuda] the CUDA graph signature changes with every field it guards") {
    ember_cuda_ctx cu;
    sig_graph      sg;
    const int32_t  n    = static_cast<int32_t>(sg.g.nodes.size());
    const uint64_t base = ember_cuda_graph_signature(cu, &sg.g, 0, n);
    CHECK(ember_cuda_graph_signature(cu, &sg.g, 0, n) == base);
    {
        sig_graph other;  // the same nodes in another graph object: another graph
        CHECK(ember_cuda_graph_signature(cu, &other.g, 0, n) != base);
    }
    std::set<uint64_t> seen = {base};
    // Each change is made, hashed (it must be new), and undone (the base hash must come back).
    const auto check = [&](const char * what, auto && change, auto && undo) {
        CAPTURE(what);
        change();
        const uint64_t h = ember_cuda_graph_signature(cu, &sg.g, 0, n);
        CHECK(seen.insert(h).second);
        undo();
        CHECK(ember_cuda_graph_signature(cu, &sg.g, 0, n) == base);
    };
    for (ember_tensor * t : {sg.y, sg.w}) {  // a node, and a node's source (the weight)
        const void * data = t->data;
        check("data", [&] { t->data = static_cast<char *>(t->data) + 256; }, [&] { t->data = const_cast<void *>(data); });
        const ember_type type = t->type;
        check("type", [&] { t->type = EMBER_TYPE_Q8_0; }, [&] { t->type = type; });
        for (int d = 0; d < 4; d++) {
            const int64_t ne = t->ne[d];
            const size_t  nb = t->nb[d];
            check("ne", [&] { t->ne[d] += 1; }, [&] { t->ne[d] = ne; });
            check("nb", [&] { t->nb[d] += 4; }, [&] { t->nb[d] = nb; });
            // Past 2^31 (two values unpacked behind a marker), and the same low bits.
            check("nb >= 2^31", [&] { t->nb[d] = nb + (size_t(1) << 31); }, [&] { t->nb[d] = nb; });
            check("nb >= 2^32", [&] { t->nb[d] = nb + (size_t(1) << 32); }, [&] { t->nb[d] = nb; });
            check("ne < 0", [&] { t->ne[d] = -ne; }, [&] { t->ne[d] = ne; });
        }
    }
    for (int p = 0; p < EMBER_MAX_OP_PARAMS; p++) {
        const int32_t v = sg.z->op_params[p];
        check("op param", [&] { sg.z->op_params[p] = v + 1; }, [&] { sg.z->op_params[p] = v; });
        check("op param < 0", [&] { sg.z->op_params[p] = -1 - v; }, [&] { sg.z->op_params[p] = v; });
    }
    const ember_op op = sg.z->op;
    check("op", [&] { sg.z->op = EMBER_OP_SCALE; }, [&] { sg.z->op = op; });
    ember_tensor * s1 = sg.z->src[1];
    check("source added", [&] { sg.z->src[1] = sg.x; }, [&] { sg.z->src[1] = s1; });
    check("scratch", [&] { cu.scratch[1] = reinterpret_cast<void *>(uintptr_t(0x1000)); }, [&] { cu.scratch[1] = nullptr; });
    check("scratch size", [&] { cu.scratch_size[0] = 4096; }, [&] { cu.scratch_size[0] = 0; });
    CHECK(seen.insert(ember_cuda_graph_signature(cu, &sg.g, 1, n)).second);  // another range
    CHECK(seen.insert(ember_cuda_graph_signature(cu, &sg.g, 0, n - 1)).second);
}

}  // TEST_SUITE
