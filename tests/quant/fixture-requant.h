// Re-quantization of the fixture models, shared by the quant tests.
#ifndef EMBER_TESTS_QUANT_FIXTURE_REQUANT_H
#define EMBER_TESTS_QUANT_FIXTURE_REQUANT_H

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quant/types.h"
#include "runtime/gguf.h"
#include "support/data-path.h"

// Re-quantizes every quantized tensor of fixtures/models/tiny-<arch>-<weights>.gguf from the
// F32 fixture of the same architecture, and counts per type the tensors, the blocks and the
// blocks whose bytes differ from llama-quantize's. Empty when the fixtures are absent.
struct requant_count {
    int64_t tensors = 0, blocks = 0, differing = 0;
};

inline std::map<ember_type, requant_count> requantize_fixture(const std::string & arch, const std::string & weights) {
    std::map<ember_type, requant_count> counts;
    const std::string src_path = ember_test_data_path("fixtures/models/tiny-" + arch + "-F32.gguf");
    const std::string ref_path = ember_test_data_path("fixtures/models/tiny-" + arch + "-" + weights + ".gguf");
    if (src_path.empty() || ref_path.empty()) return counts;
    const std::unique_ptr<ember_gguf_file> src = ember_gguf_open(src_path);
    const std::unique_ptr<ember_gguf_file> ref = ember_gguf_open(ref_path);
    for (const ember_gguf_tensor_info & t : ref->tensors) {
        const ember_type_traits & tr = *ember_type_get_traits(t.type);
        if (!tr.is_quantized) continue;
        CAPTURE(t.name);
        const ember_gguf_tensor_info * s = src->tensor(t.name);
        REQUIRE(s != nullptr);
        REQUIRE(s->type == EMBER_TYPE_F32);
        const int64_t        n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
        std::vector<uint8_t> q(ember_row_size(t.type, n));
        REQUIRE(q.size() == t.nbytes);
        tr.from_float(reinterpret_cast<const float *>(src->tensor_data(*s)), q.data(), n);
        const uint8_t * r  = ref->tensor_data(t);
        requant_count & c  = counts[t.type];
        const int64_t   nb = n / tr.block_size;
        for (int64_t b = 0; b < nb; b++) {
            c.differing += std::memcmp(q.data() + b * tr.type_size, r + b * tr.type_size, tr.type_size) != 0;
        }
        c.blocks += nb;
        c.tensors++;
    }
    return counts;
}

#endif
