// Host side of the CUDA weight layout (cuda-repack.h).
#include "cuda-repack.h"

#include "cuda-env.h"
#include "q6k-planar.h"

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
    static const bool off     = !ember_cuda_env_on("EMBER_CUDA_REPACK");
    static const bool ext_off = !ember_cuda_env_on("EMBER_CUDA_EXT_MV");
    static const bool q6p_off = !ember_cuda_env_on("EMBER_CUDA_Q6P");
    if (off || !(t->flags & EMBER_TENSOR_FLAG_WEIGHT) || t->view_src) return false;
    if (t->type == EMBER_TYPE_Q6_K) {
        return !q6p_off && t->ne[0] > 0 && t->ne[0] % k_q6p_seg_weights == 0 && ember_nelements(t) > 0 && ember_is_contiguous(t);
    }
    const bool ext = ember_cuda_repack_is_ext(t->type);
    if (ext ? ext_off : !ember_cuda_repack_qbytes(t->type)) return false;
    return t->ne[0] % 32 == 0 && ember_nelements(t) > 0 && ember_is_contiguous(t);
}

// Two delta swaps: nibbles 1 <-> 2 and 5 <-> 6, then bytes 1 <-> 2; zip undoes them in reverse.
uint32_t ember_cuda_nf4_unzip(uint32_t x) {
    uint32_t t = (x ^ (x >> 4)) & 0x00f000f0u;
    x ^= t ^ (t << 4);
    t = (x ^ (x >> 8)) & 0x0000ff00u;
    return x ^ t ^ (t << 8);
}
uint32_t ember_cuda_nf4_zip(uint32_t x) {
    uint32_t t = (x ^ (x >> 8)) & 0x0000ff00u;
    x ^= t ^ (t << 8);
    t = (x ^ (x >> 4)) & 0x00f000f0u;
    return x ^ t ^ (t << 4);
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

// Ember's types (cuda-repack.h): one walk over the GGUF rows for both directions, moving each
// piece between its GGUF place (g) and its place in the ext layout (l); fixed sizes where they
// are known so the copies compile to moves.
template <bool PACK> struct mover {
    template <size_t N> static void fixed(uint8_t * g, uint8_t * l) {
        if (PACK) std::memcpy(l, g, N);
        else std::memcpy(g, l, N);
    }
    static void any(uint8_t * g, uint8_t * l, size_t n) {
        if (PACK) std::memcpy(l, g, n);
        else std::memcpy(g, l, n);
    }
};

// A block's 32 NF4 quant bytes between the GGUF order and the ext layout's (ember_cuda_nf4_unzip).
template <bool PACK> void nf4_quants(uint8_t * g, uint8_t * l) {
    for (int i = 0; i < 32; i += 4) {
        uint32_t w;
        std::memcpy(&w, PACK ? g + i : l + i, 4);
        w = PACK ? ember_cuda_nf4_unzip(w) : ember_cuda_nf4_zip(w);
        std::memcpy(PACK ? l + i : g + i, &w, 4);
    }
}

// gguf: the GGUF bytes (read when PACK, written otherwise); lay: the ext layout.
template <bool PACK> void walk_ext(ember_type t, int64_t rows, int64_t k, uint8_t * gguf, uint8_t * lay) {
    using M         = mover<PACK>;
    const size_t  R = static_cast<size_t>(rows);
    switch (t) {
        case EMBER_TYPE_INT4:
        case EMBER_TYPE_INT4_G32: {
            const bool   g128 = t == EMBER_TYPE_INT4;
            const size_t G = g128 ? 128 : 32, QB = G / 2, n = R * static_cast<size_t>(k / static_cast<int64_t>(G));
            uint8_t *    q = lay, *dz = lay + n * QB;
            for (size_t i = 0; i < n; i++, gguf += 4 + QB) {
                M::template fixed<4>(gguf, dz + 4 * i);
                if (g128) M::template fixed<64>(gguf + 4, q + 64 * i);
                else M::template fixed<16>(gguf + 4, q + 16 * i);
            }
            break;
        }
        case EMBER_TYPE_NF4: {
            const size_t nb = static_cast<size_t>(k / 64), ng = (nb + 255) / 256;
            uint8_t *    q = lay, *hd = lay + R * nb * 32, *aq = hd + R * ng * 8;
            for (size_t r = 0; r < R; r++) {
                for (size_t b = 0; b < nb; b++) {
                    if (b % 256 == 0) {
                        M::template fixed<8>(gguf, hd + 8 * (r * ng + b / 256));
                        gguf += 8;
                    }
                    M::template fixed<1>(gguf, aq + r * nb + b);
                    nf4_quants<PACK>(gguf + 1, q + 32 * (r * nb + b));
                    gguf += 33;
                }
            }
            break;
        }
        case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E5M2: {
            const size_t n = R * static_cast<size_t>(k / 32);
            uint8_t *    q = lay, *e = lay + n * 32;
            for (size_t i = 0; i < n; i++, gguf += 33) {
                M::template fixed<1>(gguf, e + i);
                M::template fixed<32>(gguf + 1, q + 32 * i);
            }
            break;
        }
        case EMBER_TYPE_FP8_E4M3_ROW:
        case EMBER_TYPE_FP8_E5M2_ROW: {
            const size_t kk = static_cast<size_t>(k);
            uint8_t *    q = lay, *sc = lay + R * kk;
            for (size_t r = 0; r < R; r++, gguf += 4 + kk) {
                M::template fixed<4>(gguf, sc + 4 * r);
                M::any(gguf + 4, q + kk * r, kk);
            }
            break;
        }
        default: break;
    }
}

}  // namespace

void ember_cuda_repack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst) {
    if (t == EMBER_TYPE_Q6_K) {
        ember_q6p_pack(rows, k, src, dst);
        return;
    }
    if (ember_cuda_repack_is_ext(t)) {
        walk_ext<true>(t, rows, k, const_cast<uint8_t *>(static_cast<const uint8_t *>(src)), static_cast<uint8_t *>(dst));
        return;
    }
    const size_t    qb = static_cast<size_t>(ember_cuda_repack_qbytes(t));
    const size_t    n  = static_cast<size_t>(rows * (k / 32));  // blocks
    const uint8_t * s  = static_cast<const uint8_t *>(src);
    uint8_t *       q  = static_cast<uint8_t *>(dst);
    if (qb == 16) repack_blocks<16>(n, s, q, q + n * 16);
    if (qb == 32) repack_blocks<32>(n, s, q, q + n * 32);
}

void ember_cuda_unrepack(ember_type t, int64_t rows, int64_t k, const void * src, void * dst) {
    if (t == EMBER_TYPE_Q6_K) {
        ember_q6p_unpack(rows, k, src, dst);
        return;
    }
    if (ember_cuda_repack_is_ext(t)) {
        walk_ext<false>(t, rows, k, static_cast<uint8_t *>(dst), const_cast<uint8_t *>(static_cast<const uint8_t *>(src)));
        return;
    }
    const size_t    qb = static_cast<size_t>(ember_cuda_repack_qbytes(t));
    const size_t    n  = static_cast<size_t>(rows * (k / 32));
    const uint8_t * q  = static_cast<const uint8_t *>(src);
    uint8_t *       o  = static_cast<uint8_t *>(dst);
    if (qb == 16) unrepack_blocks<16>(n, q, q + n * 16, o);
    if (qb == 32) unrepack_blocks<32>(n, q, q + n * 32, o);
}
