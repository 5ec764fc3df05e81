// GGUF files holding Ember's own tensor types (ids >= 4096): byte sizes with row-group headers,
// the metadata key that marks such files, and the reader's answer for an Ember id it lacks.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "quant/types.h"
#include "runtime/error.h"
#include "runtime/gguf.h"

namespace {

const char * const k_key = "ember.quantization.custom_types";

std::vector<uint8_t> quantized_rows(ember_type t, int64_t ne0, int64_t rows, uint32_t seed) {
    std::mt19937                          rng(seed);
    std::normal_distribution<float>       nd(0.0f, 0.05f);
    std::vector<float>                    x(static_cast<size_t>(ne0));
    const size_t                          rs = ember_row_size(t, ne0);
    std::vector<uint8_t>                  out(rs * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; r++) {
        for (float & v : x) v = nd(rng);
        ember_type_get_traits(t)->from_float(x.data(), out.data() + r * rs, ne0);
    }
    return out;
}

// Offset of the u32 type field of tensor `name` in a GGUF image (after name, n_dims, ne[]).
size_t type_field(const std::vector<uint8_t> & img, const std::string & name, int n_dims) {
    for (size_t i = 8; i + name.size() < img.size(); i++) {
        uint64_t len;
        std::memcpy(&len, &img[i - 8], 8);
        if (len == name.size() && std::memcmp(&img[i], name.data(), name.size()) == 0) {
            return i + name.size() + 4 + 8 * static_cast<size_t>(n_dims);
        }
    }
    return 0;
}

}  // namespace

TEST_SUITE("runtime") {

TEST_CASE("[gguf][ember types] row-group tensors round-trip with their headers, and the file is marked") {
    ember_gguf_writer w;
    w.set_str("general.architecture", "llama");
    const ember_type types[]  = {EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_INT4, EMBER_TYPE_FP8_E5M2};
    const int64_t    ne0s[]   = {64 * 300, 96, 256, 64};
    std::vector<std::vector<uint8_t>> data;
    for (int i = 0; i < 4; i++) {
        const int64_t ne[2] = {ne0s[i], 3};
        data.push_back(quantized_rows(types[i], ne0s[i], 3, 10 + i));
        w.add_tensor("t" + std::to_string(i), types[i], 2, ne, data.back().data());
        CHECK(w.tensors.back().nbytes == 3 * ember_row_size(types[i], ne0s[i]));
    }
    CHECK(w.tensors[0].nbytes == 3 * (2 * 8 + 300 * 33));  // two NF4 row groups per row
    CHECK(w.tensors[1].nbytes == 3 * (4 + 96));
    const std::vector<uint8_t>             img = w.write_to_buffer();
    const std::unique_ptr<ember_gguf_file> f   = ember_gguf_parse(img.data(), img.size());
    for (int i = 0; i < 4; i++) {
        CAPTURE(i);
        const ember_gguf_tensor_info * t = f->tensor("t" + std::to_string(i));
        REQUIRE(t != nullptr);
        CHECK(t->type == types[i]);
        CHECK(t->nbytes == data[i].size());
        CHECK(std::memcmp(f->tensor_data(*t), data[i].data(), data[i].size()) == 0);
    }
    const std::string mark = f->get_str(k_key, "");
    CHECK(mark.find("4096") != std::string::npos);
    CHECK(mark.find("quant-types.md") != std::string::npos);

    // ggml types only: no mark
    ember_gguf_writer plain;
    const int64_t     ne[1] = {32};
    plain.add_tensor("q", EMBER_TYPE_Q8_0, 1, ne, nullptr);
    const std::vector<uint8_t> pimg = plain.write_to_buffer();
    CHECK(ember_gguf_parse(pimg.data(), pimg.size())->find(k_key) == nullptr);
}

TEST_CASE("[gguf][ember types] an Ember id this build lacks is unsupported; a truncated NF4 tensor is malformed") {
    ember_gguf_writer w;
    const int64_t     ne[2] = {64, 2};
    w.add_tensor("t", EMBER_TYPE_NF4, 2, ne, nullptr);
    std::vector<uint8_t> img = w.write_to_buffer();
    const size_t         at  = type_field(img, "t", 2);
    REQUIRE(at != 0);
    uint32_t id;
    std::memcpy(&id, &img[at], 4);
    REQUIRE(id == EMBER_TYPE_NF4);
    auto status_of = [&](const std::vector<uint8_t> & b, std::string & msg) -> ember_status {
        try {
            ember_gguf_parse(b.data(), b.size());
        } catch (const ember_error & e) {
            msg = e.what();
            return e.status;
        }
        return EMBER_OK;
    };
    std::string msg;
    CHECK(status_of(img, msg) == EMBER_OK);
    id = 4103;  // a free Ember id
    std::memcpy(&img[at], &id, 4);
    CHECK(status_of(img, msg) == EMBER_ERR_UNSUPPORTED);
    CHECK(msg.find("4103") != std::string::npos);
    id = 5000;  // outside every range
    std::memcpy(&img[at], &id, 4);
    CHECK(status_of(img, msg) == EMBER_ERR_BAD_FORMAT);
    // the data section must hold the headers too: cut the file inside them
    id = EMBER_TYPE_NF4;
    std::memcpy(&img[at], &id, 4);
    // 2 rows of 8 + 33 bytes = 82, padded to 96: keep 72, more than the 66 the blocks alone need
    std::vector<uint8_t> cut(img.begin(), img.end() - 24);
    CHECK(status_of(cut, msg) == EMBER_ERR_BAD_FORMAT);
}

}  // TEST_SUITE
