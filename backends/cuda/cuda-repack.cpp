// Host side of the CUDA weight layout (cuda-repack.h).
#include "cuda-repack.h"

#include <cstdlib>
#include <cstring>

int ember_cuda_repack_qbytes(ember_type t) {
    switch (t) {
        case EMBER_TYPE_Q4_0: return 16;
        case EMBER_TYPE_Q8_0: return 32;
        default: return 0;
    }
}

bool ember_cuda_repack_wanted(const ember_tensor * t) {
    static const bool off = [] {
        const char * e = std::getenv("EMBER_CUDA_REPACK");
        return e && std::strcmp(e, "0") == 0;
    }();
    if (off || !(t->flags & EMBER_TENSOR_FLAG_WEIGHT) || t->view_src || !ember_cuda_repack_qbytes(t->type)) return false;
    return t->ne[0] % 32 == 0 && ember_nelements(t) > 0 && ember_is_contiguous(t);
}

namespace {

// Fixed-size copies (QB known at compile time): the conversion runs at memory speed.
template <size_t QB> void repack_blocks(size_t n, const uint8_t * s, uint8_t * q, uint8_t * d) {
    for (size_t i = 0; i < n; i++, s += QB + 2) {
        std::memcpy(d + 2 * i, s, 2);  // ember_half d comes first in both block types
        std::memcpy(q + QB * i, s + 2, QB);
    }
}

template <size_t QB> void unrepack_blocks(size_t n, const uint8_t * q, const uint8_t * d, uint8_t * o) {
    for (size_t i = 0; i < n; i++, o += QB + 2) {
        std::memcpy(o, d + 2 * i, 2);
        std::memcpy(o + 2, q + QB * i, QB);
    }
}

}  // namespace

void ember_cuda_repack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst) {
    const size_t    qb = static_cast<size_t>(ember_cuda_repack_qbytes(t));
    const size_t    n  = static_cast<size_t>(rows * (k / 32));  // blocks
    const uint8_t * s  = static_cast<const uint8_t *>(src);
    uint8_t *       q  = static_cast<uint8_t *>(dst);
    if (qb == 16) repack_blocks<16>(n, s, q, q + n * 16);
    if (qb == 32) repack_blocks<32>(n, s, q, q + n * 32);
}

void ember_cuda_unrepack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst) {
    const size_t    qb = static_cast<size_t>(ember_cuda_repack_qbytes(t));
    const size_t    n  = static_cast<size_t>(rows * (k / 32));
    const uint8_t * q  = static_cast<const uint8_t *>(src);
    uint8_t *       o  = static_cast<uint8_t *>(dst);
    if (qb == 16) unrepack_blocks<16>(n, q, q + n * 16, o);
    if (qb == 32) unrepack_blocks<32>(n, q, q + n * 32, o);
}
