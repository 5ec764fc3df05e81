// The planar Q6_K layout (backends/common/q6k-planar.h), which the Vulkan and CUDA backends make
// at upload: each segment of 2048 weights of a row regrouped field by field (ql, qh, the
// scales 4 per decode unit, d), the same bytes, and back.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "q6k-planar.h"
#include "tensor.h"

TEST_CASE("planar Q6_K layout: field map and round trip") {
    const int64_t        ne0 = 4096, rows = 3;
    const size_t         rsz = ember_row_size(EMBER_TYPE_Q6_K, ne0);
    std::vector<uint8_t> gguf(rsz * rows), pl(gguf.size()), back(gguf.size());
    for (size_t i = 0; i < gguf.size(); i++) gguf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    ember_q6p_pack(rows, ne0, gguf.data(), pl.data());
    ember_q6p_unpack(rows, ne0, pl.data(), back.data());
    CHECK(back == gguf);
    CHECK(pl != gguf);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t kb = 0; kb < ne0 / 256; kb++) {
            const uint8_t * sb  = gguf.data() + r * rsz + kb * 210;       // GGUF super-block kb
            const uint8_t * seg = pl.data() + r * rsz + (kb / 8) * 1680;  // its planar segment
            const size_t    b   = static_cast<size_t>(kb % 8);
            CHECK(std::memcmp(seg + 128 * b, sb, 128) == 0);             // ql
            CHECK(std::memcmp(seg + 1024 + 64 * b, sb + 128, 64) == 0);  // qh
            CHECK(std::memcmp(seg + 1664 + 2 * b, sb + 208, 2) == 0);    // d
            for (size_t h = 0; h < 2; h++) {
                for (size_t g = 0; g < 2; g++) {
                    for (size_t k = 0; k < 4; k++) CHECK(seg[1536 + 16 * b + 4 * (2 * h + g) + k] == sb[192 + 8 * h + 2 * k + g]);
                }
            }
        }
    }
}
