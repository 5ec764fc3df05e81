// The CUDA backend against the CPU backend: every op and type on seeded random data, the same
// graph run on each device (all tensors in that device's memory), compared by NMSE. Compiled
// only when the CUDA backend is built; skips with a message when there is no CUDA device.
#ifdef EMBER_HAVE_CUDA

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "backends/cuda/cuda-env.h"  // the switches' reading rule (host-only)
#include "backends/cuda/cuda-fp8.h"  // host build of the CUDA FP8 encoder
#include "backends/cuda/cuda-backend.h"  // ember_cuda_graph_instantiations
#include "backends/cuda/cuda-ops.h"  // the forms' launch counters (ember_cuda_mv_k4p6_launches, ...)
#include "graph.h"
#include "quant/ref/ref.h"

#include "cuda-test-util.h"

namespace {

const ember_type k_weight_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,  EMBER_TYPE_BF16, EMBER_TYPE_Q4_0,   EMBER_TYPE_Q4_1,
                                     EMBER_TYPE_Q5_0, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K,   EMBER_TYPE_Q3_K,
                                     EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS,
                                     // Ember's own types (row groups: NF4 headers, per-row FP8 scales)
                                     EMBER_TYPE_INT4, EMBER_TYPE_INT4_G32, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2,
                                     EMBER_TYPE_FP8_E4M3_ROW, EMBER_TYPE_FP8_E5M2_ROW};
const ember_type k_kv_types[] = {EMBER_TYPE_F32,  EMBER_TYPE_F16,      EMBER_TYPE_BF16,
                                 EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0,     EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2};

bool is_float(ember_type t) {
    return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_BF16;
}

float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// Six blocks of 32 floats at the FP8 encoder's edges: block exponents on and just past a
// boundary (amax = 448 * 2^k, 57344 * 2^k and one ulp above), rounding ties in the normal and
// subnormal codes, +-0, NaN of both signs, +-inf (excluded from the block's amax, saturated),
// float subnormals (an amax below 448 * 2^-127: exponent 0), and huge values next to tiny ones
// (scaled into the float subnormals).
std::vector<float> fp8_edge_values() {
    std::vector<float> v;
    const float        nan = std::nanf(""), inf = INFINITY;
    // 0: amax 448 (E4M3 e = 127), ties of 3- and 2-bit mantissas, specials
    for (float x : {448.0f, -1.0625f, 1.1875f, 1.125f, 2.5f, -2.75f, 0.0f, -0.0f, nan, -nan, inf, -inf, 464.0f, 1.0f / 512, 3.0f / 1024,
                    1.0f / 1024, -1.0f / 1024, 5.0f / 4096, 0.001953125f, 7.0f, -15.5f, 240.0f, 248.0f, 232.0f, 0.3f, -0.7f, 100.0f, 1e-3f,
                    -1e-5f, 1e-30f, 3.0f * 1024, 1.0f / 65536})
        v.push_back(x);
    // 1: amax one ulp above 448 * 2^10 (e = 138): ties at that scale, values that land on subnormal codes
    v.push_back(bits_float(0x48e00001u));
    for (int i = 1; i < 32; i++) v.push_back(std::ldexp(static_cast<float>(2 * i + 1), (i % 12) - 2) * (i % 3 ? 1.0f : -1.0f));
    // 2: no finite nonzero value (e = 127): zeros, NaN, infinities
    for (int i = 0; i < 32; i++) v.push_back(i % 7 == 3 ? nan : i % 7 == 5 ? -inf : i % 2 ? -0.0f : 0.0f);
    // 3: float subnormals only (e = 0)
    for (int i = 0; i < 32; i++) v.push_back(bits_float(static_cast<uint32_t>((i * 0x12345u) & 0x7fffffu) | (i % 2 ? 0x80000000u : 0u)));
    // 4: near FLT_MAX next to small values
    for (int i = 0; i < 32; i++) v.push_back(i == 0 ? FLT_MAX : i == 1 ? -3e38f : i % 2 ? std::ldexp(1.5f, -i * 4) : -std::ldexp(1.25f, 90 + i));
    // 5: amax exactly 57344 * 2^-100 and 448 * 2^-100 (both boundaries), ties around them
    v.push_back(std::ldexp(57344.0f, -100));
    v.push_back(-std::ldexp(448.0f, -100));
    for (int i = 2; i < 32; i++) v.push_back(std::ldexp(static_cast<float>(4 * i + 2), -100 + (i % 9)) * (i % 2 ? 1.0f : -1.0f));
    return v;
}

// The reference encoder of FP8 type t over n floats.
std::vector<uint8_t> fp8_ref_encode(ember_type t, const float * x, int64_t n) {
    std::vector<uint8_t> b(static_cast<size_t>(n / 32 * sizeof(ember_block_fp8)));
    if (t == EMBER_TYPE_FP8_E4M3) ember_ref_from_float_FP8_E4M3(x, b.data(), n);
    else ember_ref_from_float_FP8_E5M2(x, b.data(), n);
    return b;
}

std::vector<uint8_t> fp8_host_encode(bool e4m3, const float * x, int64_t n) {
    std::vector<uint8_t> b(static_cast<size_t>(n / 32 * sizeof(ember_block_fp8)));
    for (int64_t i = 0; i < n / 32; i++) {
        ember_block_fp8 * blk = reinterpret_cast<ember_block_fp8 *>(b.data()) + i;
        if (e4m3) cu_fp8_encode_block<true>(x + 32 * i, &blk->e, blk->qs);
        else cu_fp8_encode_block<false>(x + 32 * i, &blk->e, blk->qs);
    }
    return b;
}

// Whether rows past the short kernel's 512 keys take the tensor-core decode attention by default
// (contiguous caches): head size 64 / 128 over F16, Q8_0, Q4_0 and FP8 caches (rows copied in 8-
// or 4-byte pieces, or as the words around rows at even bytes: 64-value FP8 rows, 66 bytes).
bool dec_mma_default(ember_type t, int64_t d) {
    if (d != 64 && d != 128) return false;
    return t == EMBER_TYPE_F16 || t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0 || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
}

// NMSE bound of a decode attention against the CPU: the tensor-core kernel (dec_mma_default)
// rounds Q and P to f16 (~5e-8 at 4096 keys, by a host model of its rounding); the scalar
// kernels are exact to f32.
double dec_attn_tol(ember_type t, int64_t d, int64_t n_kv) {
    return dec_mma_default(t, d) && n_kv > 512 ? 1e-6 : 1e-8;
}

// Index of the first differing byte, or -1.
int64_t first_diff(const std::vector<uint8_t> & a, const std::vector<uint8_t> & b) {
    if (a.size() != b.size()) return 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (a[i] != b[i]) return static_cast<int64_t>(i);
    }
    return -1;
}

}  // namespace

TEST_SUITE("backends") {

// The GPU tests' large random leaves come from a memo the second time (cuda-test-util.h): the
// same bytes as a fresh draw from the same generator state, the generator left where that draw
// leaves it, and a different state, type or range is a new draw. (No GPU needed.)
TEST_CASE("[cuda] test leaves: the memo of large random leaves") {
    const auto draw = [](ember_type t, uint32_t seed, float lo, std::mt19937 * after) {
        ember_graph            g;
        std::vector<leaf_data> leaves;
        case_ctx               c{g, leaves, std::mt19937(seed)};
        c.rand_leaf(t, 1024, 1024, 1, lo, 1.0f);
        *after = c.rng;
        return leaves.at(0).bytes;
    };
    leaf_memo().clear();
    std::mt19937 a1, a2, a3;
    const auto   first = draw(EMBER_TYPE_Q4_0, 5, -1.0f, &a1);
    REQUIRE(leaf_memo().size() == 1);
    const auto again = draw(EMBER_TYPE_Q4_0, 5, -1.0f, &a2);
    CHECK(leaf_memo().size() == 1);  // a hit
    CHECK(again == first);
    CHECK((a2 == a1));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // where a fresh draw leaves the generator
    std::mt19937                          direct(5);
    for (int i = 0; i < 1024 * 1024; i++) u(direct);
    CHECK((a1 == direct));
    CHECK(draw(EMBER_TYPE_Q4_0, 6, -1.0f, &a3) != first);  // another state
    CHECK(draw(EMBER_TYPE_Q8_0, 5, -1.0f, &a3).size() != first.size());
    CHECK(draw(EMBER_TYPE_Q4_0, 5, -0.5f, &a3) != first);  // another range
    CHECK(leaf_memo().size() == 4);
    // Small leaves are drawn each time.
    {
        ember_graph            g;
        std::vector<leaf_data> leaves;
        case_ctx               c{g, leaves, std::mt19937(5)};
        c.rand_leaf(EMBER_TYPE_F32, 64, 64);
        CHECK(leaf_memo().size() == 4);
    }
    leaf_memo().clear();
}

TEST_CASE("[cuda] the CUDA backend matches the CPU on every op and type") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    MESSAGE("CUDA device: " << std::string(ember_device_get_name(cuda_device())));

    SUBCASE("elementwise") {
        check_case("rms_norm", [](case_ctx & c) { return ember_rms_norm(c.g, c.rand_leaf(EMBER_TYPE_F32, 96, 5, 2), 1e-5f); }, 1e-10);
        check_case("mul broadcast", [](case_ctx & c) {
            return ember_mul(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 64));
        }, 1e-12);
        check_case("add same shape", [](case_ctx & c) {
            return ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 64, 6, 2));
        }, 1e-12);
        check_case("add broadcast dim 1", [](case_ctx & c) {
            return ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 32, 6, 2), c.rand_leaf(EMBER_TYPE_F32, 32, 1, 2));
        }, 1e-12);
        check_case("swiglu", [](case_ctx & c) {
            return ember_swiglu(c.g, c.rand_leaf(EMBER_TYPE_F32, 50, 7, 1, -4, 4), c.rand_leaf(EMBER_TYPE_F32, 50, 7));
        }, 1e-10);
        check_case("scale", [](case_ctx & c) { return ember_scale(c.g, c.rand_leaf(EMBER_TYPE_F32, 33, 3), 0.37f); }, 1e-12);
        check_case("scale of a strided view", [](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 64, 6);
            const int64_t  ne[4] = {32, 6, 1, 1};
            const size_t   nb[4] = {4, a->nb[1], a->nb[1] * 6, a->nb[1] * 6};
            return ember_scale(c.g, ember_view_strided(c.g, a, ne, nb, 16 * 4), -2.0f);
        }, 1e-12);
    }

    SUBCASE("rope") {
        for (int mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
            for (int n_rot : {64, 32}) {
                for (bool ff : {false, true}) {
                    const std::string what = "rope mode " + std::to_string(mode) + " n_rot " + std::to_string(n_rot) + (ff ? " with factors" : "");
                    check_case(what, [=](case_ctx & c) {
                        ember_tensor * a   = c.rand_leaf(EMBER_TYPE_F32, 64, 4, 5);
                        ember_tensor * pos = c.i32_leaf({0, 1, 7, 300, 4095});
                        ember_tensor * f   = ff ? c.rand_leaf(EMBER_TYPE_F32, n_rot / 2, 1, 1, 1.0f, 8.0f) : nullptr;
                        return ember_rope(c.g, a, pos, f, n_rot, mode, 10000.0f, 0.5f);
                    }, 1e-8);
                }
            }
        }
    }

    SUBCASE("get_rows") {
        for (ember_type t : k_weight_types) {
            check_case(std::string("get_rows ") + ember_type_get_name(t), [=](case_ctx & c) {
                return ember_get_rows(c.g, c.rand_leaf(t, 256, 10), c.i32_leaf({3, 0, 9, 3}));
            }, 1e-12);
        }
        check_case("get_rows f32 odd rows", [](case_ctx & c) {
            return ember_get_rows(c.g, c.rand_leaf(EMBER_TYPE_F32, 37, 5), c.i32_leaf({4, 1}));
        }, 1e-12);
    }

    SUBCASE("mul_mat") {
        for (ember_type t : k_weight_types) {
            for (int64_t m : {1, 3, 17}) {
                const std::string what = std::string("mul_mat ") + ember_type_get_name(t) + " m=" + std::to_string(m);
                // The CPU rounds activations to the weight's vec_dot_type (Q8_0, Q8_K, F16...).
                check_case(what, [=](case_ctx & c) {
                    return ember_mul_mat(c.g, c.rand_leaf(t, 512, 40), c.rand_leaf(EMBER_TYPE_F32, 512, m));
                }, is_float(t) ? 1e-5 : 1e-3);
            }
        }
        for (int64_t m : {1, 17}) {
            check_case("mul_mat f32 k=100 m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 33), c.rand_leaf(EMBER_TYPE_F32, 100, m));
            }, 1e-10);
            check_case("mul_mat f16 k=100 m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F16, 100, 33), c.rand_leaf(EMBER_TYPE_F32, 100, m));
            }, 1e-5);
            check_case("mul_mat batched broadcast m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 64, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 64, m, 4));
            }, 1e-3);
        }
    }

    SUBCASE("set_rows and cpy") {
        for (ember_type t : k_kv_types) {
            // Index 5 repeats: its last row wins.
            check_case(std::string("set_rows ") + ember_type_get_name(t), [=](case_ctx & c) {
                ember_tensor * dst = c.rand_leaf(t, 64, 12);
                return ember_set_rows(c.g, dst, c.rand_leaf(EMBER_TYPE_F32, 64, 3), c.i32_leaf({5, 0, 5}));
            }, 1e-6);
            check_case(std::string("cpy f32 -> ") + ember_type_get_name(t), [=](case_ctx & c) {
                return ember_cpy(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 6), t);
            }, 1e-6);
            check_case(std::string("cpy ") + ember_type_get_name(t) + " -> f32", [=](case_ctx & c) {
                return ember_cpy(c.g, c.rand_leaf(t, 64, 6), EMBER_TYPE_F32);
            }, 1e-12);
        }
        check_case("cpy q4_k -> f16", [](case_ctx & c) { return ember_cpy(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 256, 3), EMBER_TYPE_F16); }, 1e-6);
        // Same type, both contiguous: a device-to-device memcpy, not the chunk kernel; the
        // strided view beside it keeps the kernel.
        for (ember_type t : {EMBER_TYPE_F32, EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
            check_case(std::string("cpy ") + ember_type_get_name(t) + " -> same type (memcpy)", [=](case_ctx & c) {
                return ember_cpy(c.g, c.rand_leaf(t, 96, 7, 3), t);
            }, 1e-12);
        }
        check_case("cpy f32 strided view -> f32", [](case_ctx & c) {
            ember_tensor * a  = c.rand_leaf(EMBER_TYPE_F32, 64, 8);
            const int64_t  ne[4] = {32, 8, 1, 1};
            const size_t   nb[4] = {4, a->nb[1], a->nb[1] * 8, a->nb[1] * 8};
            return ember_cpy(c.g, ember_view_strided(c.g, a, ne, nb, 16), EMBER_TYPE_F32);
        }, 1e-12);
    }

    SUBCASE("attn") {
        for (ember_type tk : k_kv_types) {
            for (int64_t d : {64, 128}) {
                for (bool masked : {false, true}) {
                    const std::string what = std::string("attn ") + ember_type_get_name(tk) + " d=" + std::to_string(d) + (masked ? " masked" : "");
                    check_case(what, [=](case_ctx & c) {
                        const int64_t n_kv = 37, n_tok = 3;
                        ember_tensor * q = c.rand_leaf(EMBER_TYPE_F32, d, 8, n_tok);
                        ember_tensor * k = c.rand_leaf(tk, d, 2, n_kv);
                        ember_tensor * v = c.rand_leaf(tk, d, 2, n_kv);
                        ember_tensor * mask = nullptr;
                        if (masked) {
                            // causal over the last n_tok keys; the last token row also hides key 0
                            std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
                            for (int64_t t = 0; t < n_tok; t++) {
                                for (int64_t j = 0; j < n_kv; j++) {
                                    if (j > n_kv - n_tok + t || (t == n_tok - 1 && j == 0)) mv[t * n_kv + j] = -INFINITY;
                                }
                            }
                            mask = c.f32_leaf(mv, n_kv, n_tok);
                        }
                        return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(d)));
                    }, 1e-8);
                }
            }
        }
        check_case("attn every key hidden gives zeros", [](case_ctx & c) {
            std::vector<float> mv(5 * 2, -INFINITY);
            return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 2), c.rand_leaf(EMBER_TYPE_F16, 64, 4, 5),
                              c.rand_leaf(EMBER_TYPE_F16, 64, 4, 5), c.f32_leaf(mv, 5, 2), 0.125f);
        }, 1e-12);
    }
}

// Matvecs over one x that share a launch (Q, K, V; gate, up), the later ones hoisted past the
// nodes between them (here: each output's consumer, as Q's view and RoPE in a model): unequal
// row counts (block tails inside the grid), more than 4096 rows in one (2 rows per warp), a
// group of 3 with others between and a consecutive pair. Every row of every output reaches the
// result through an F32 product of its own.
ember_tensor * grouped_matvecs(case_ctx & c, ember_type t, int64_t cols) {
    ember_tensor * x   = c.rand_leaf(EMBER_TYPE_F32, 512, cols);
    ember_tensor * q   = ember_mul_mat(c.g, c.rand_leaf(t, 512, 4160), x);
    ember_tensor * k   = ember_mul_mat(c.g, c.rand_leaf(t, 512, 72), x);
    ember_tensor * v   = ember_mul_mat(c.g, c.rand_leaf(t, 512, 136), x);
    ember_tensor * sum = ember_add(c.g, ember_add(c.g, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 4160, 64), q),
                                                  ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 72, 64), k)),
                                   ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 136, 64), v));
    ember_tensor * h   = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 512), sum);
    ember_tensor * gt  = ember_mul_mat(c.g, c.rand_leaf(t, 512, 200), h);
    ember_tensor * up  = ember_mul_mat(c.g, c.rand_leaf(t, 512, 200), h);
    return ember_add(c.g, sum, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 200, 64), ember_swiglu(c.g, gt, up)));
}

TEST_CASE("[cuda] decode: integer matvec, reused quantized activations, CUDA graph replay") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // The integer-kernel types at model-like widths, odd row counts (a block's row tail) and
    // a type on the generic path (Q4_1).
    const ember_type types[] = {EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q2_K, EMBER_TYPE_Q3_K,
                                EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q6_K, EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS,
                                EMBER_TYPE_Q4_1, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3_ROW};
    for (ember_type t : types) {
        for (int64_t m : {1, 2, 5}) {
            for (int64_t n : {67, 1}) {
                check_case(std::string("matvec ") + ember_type_get_name(t) + " k=2048 n=" + std::to_string(n) + " m=" + std::to_string(m),
                           [=](case_ctx & c) {
                               return ember_mul_mat(c.g, c.rand_leaf(t, 2048, n), c.rand_leaf(EMBER_TYPE_F32, 2048, m, 1, -3.0f, 3.0f));
                           }, 1e-3);
            }
        }
        check_case(std::string("matvec ") + ember_type_get_name(t) + " of a strided x view", [=](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 512, 6);
            const int64_t  ne[4] = {512, 3, 1, 1};
            const size_t   nb[4] = {4, a->nb[1] * 2, a->nb[1] * 6, a->nb[1] * 6};
            return ember_mul_mat(c.g, c.rand_leaf(t, 512, 9), ember_view_strided(c.g, a, ne, nb, a->nb[1]));
        }, 1e-3);
    }
    // Q5_K in mvk_kernel's form (EMBER_CUDA_Q5K_WIDE, the default) and in mvq_kernel's (=0): rows
    // of one block (lanes past its 4 chunks idle), of one chunk a lane and of several, odd row
    // counts, columns. (7 rows, not 1: one k = 256 product of this seed is small enough for the
    // 8-bit x's rounding to be 4% of it, on either kernel.)
    // IQ4_XS the same in mvk_kernel XS (EMBER_CUDA_IQ4XS_WIDE, the default; 8-byte loads) and in
    // mvq_kernel (=0).
    struct wide_case {
        ember_type  t;
        const char *var, *value;
        bool        wide;
    };
    for (const wide_case & wc : {wide_case{EMBER_TYPE_Q5_K, "EMBER_CUDA_Q5K_WIDE", "", true}, wide_case{EMBER_TYPE_Q5_K, "EMBER_CUDA_Q5K_WIDE", "0", false},
                                 wide_case{EMBER_TYPE_IQ4_XS, "EMBER_CUDA_IQ4XS_WIDE", "", true},
                                 wide_case{EMBER_TYPE_IQ4_XS, "EMBER_CUDA_IQ4XS_WIDE", "0", false}}) {
        set_env(wc.var, wc.value);
        env_clear clear{{wc.var}};  // however the case ends
        for (int64_t k : {256, 2048, 4096 + 512}) {
            for (int64_t m : {1, 3}) {
                for (int64_t n : {67, 7}) {
                    check_case(std::string("matvec ") + ember_type_get_name(wc.t) + (wc.wide ? " wide" : " 4-byte") + " loads k=" + std::to_string(k) +
                                   " n=" + std::to_string(n) + " m=" + std::to_string(m),
                               [=](case_ctx & c) {
                                   return ember_mul_mat(c.g, c.rand_leaf(wc.t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
                               }, 1e-3);
                }
            }
        }
    }
    // NF4 rows longer than one group of 256 blocks: a second group header mid-row.
    check_case("get_rows nf4 two groups", [](case_ctx & c) {
        return ember_get_rows(c.g, c.rand_leaf(EMBER_TYPE_NF4, 64 * 260, 3), c.i32_leaf({2, 0}));
    }, 1e-12);
    check_case("matvec nf4 two groups", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_NF4, 64 * 260, 5), c.rand_leaf(EMBER_TYPE_F32, 64 * 260, 2));
    }, 1e-3);
    // Q6_K rows of a multiple of 8 blocks go through shared memory (mv6_kernel) in segments of
    // 16 blocks: one partial segment (2048), whole ones (4096), a tail of 8 (14336 = 56 blocks),
    // odd row counts, several columns and a batched broadcast.
    for (int64_t k : {2048, 4096, 6144, 14336}) {
        for (int64_t m : {1, 3}) {
            check_case("matvec q6_k rows through shared memory k=" + std::to_string(k) + " m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, k, 37), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
            }, 1e-3);
        }
    }
    check_case("matvec batched broadcast q6_k", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, 2048, 9, 2), c.rand_leaf(EMBER_TYPE_F32, 2048, 2, 4));
    }, 1e-3);
    check_case("matvec batched broadcast q4_k", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
    }, 1e-3);
    // Three matvecs over one x (the quantized copy is reused), then one over a new tensor.
    check_case("matvecs sharing x", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
        ember_tensor * a  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_0, 1024, 64), x);
        ember_tensor * b  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, 1024, 64), x);
        ember_tensor * d  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 1024, 64), x);
        ember_tensor * x2 = ember_scale(c.g, x, -0.5f);
        ember_tensor * e  = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_0, 1024, 64), x2);
        return ember_add(c.g, ember_add(c.g, a, b), ember_add(c.g, d, e));
    }, 1e-3);
    // Matvecs over one x in one launch (grouped_matvecs).
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K}) {
        for (int64_t cols : {1, 3}) {
            check_case(std::string("grouped matvecs ") + ember_type_get_name(t) + " cols=" + std::to_string(cols),
                       [=](case_ctx & c) { return grouped_matvecs(c, t, cols); }, 1e-3);
        }
    }
    // Decode attention with the keys split across blocks (n_kv >= 128, few query rows); the
    // mask hides keys 0..199, so whole splits see no key, and a causal tail.
    for (ember_type tk : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        for (int64_t n_tok : {1, 2}) {
            check_case(std::string("attn split ") + ember_type_get_name(tk) + " n_tok=" + std::to_string(n_tok), [=](case_ctx & c) {
                const int64_t      n_kv = 700, d = 128;
                std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
                for (int64_t t = 0; t < n_tok; t++) {
                    for (int64_t j = 0; j < n_kv; j++) {
                        if (j < 200 || j > n_kv - n_tok + t) mv[t * n_kv + j] = -INFINITY;
                    }
                }
                return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, d, 8, n_tok), c.rand_leaf(tk, d, 2, n_kv), c.rand_leaf(tk, d, 2, n_kv),
                                  c.f32_leaf(mv, n_kv, n_tok), 1.0f / std::sqrt(static_cast<float>(d)));
            }, dec_attn_tol(tk, 128, 700));
        }
    }
    check_case("attn split unmasked", [](case_ctx & c) {
        return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 1), c.rand_leaf(EMBER_TYPE_F16, 64, 4, 1000),
                          c.rand_leaf(EMBER_TYPE_F16, 64, 4, 1000), nullptr, 0.125f);
    }, dec_attn_tol(EMBER_TYPE_F16, 64, 1000));
    // The decode kernel (ops-attention-decode.cu) at model shapes: GQA groups of 8 (8B: 32 heads
    // over 4 KV heads here), several 32-key tiles per split at a long context with a ragged last
    // tile, head size 256 (shared memory above 48 KiB), a group too large for it (the simple
    // kernel's turn), and splits whose keys are all hidden.
    struct dec_shape {
        int64_t d, heads, kv_heads, n_kv, n_tok;
        bool    hide_front;
    };
    // Also: 8B's 8 KV heads at 4096 keys (several tiles per split, pipelined), 24 query rows
    // (three blocks of 8 rows per KV head), head size 32, one tile, and every KV cache type.
    // Short contexts (2..8 splits of one tile) merge inside a thread block cluster on sm_90:
    // 250 keys = 8 splits, the first four all hidden; 100 keys x 3 tokens = 4 splits of two row
    // blocks; 90 keys over 64 heads = 3 splits of 8 row blocks.
    for (const dec_shape & s : {dec_shape{128, 32, 4, 4133, 1, false}, dec_shape{128, 32, 8, 257, 2, true}, dec_shape{256, 8, 1, 300, 1, true},
                                dec_shape{64, 64, 1, 90, 1, false}, dec_shape{96, 8, 8, 65, 1, false}, dec_shape{128, 32, 8, 4096, 1, false},
                                dec_shape{128, 32, 4, 1000, 3, true}, dec_shape{32, 4, 2, 20, 1, false}, dec_shape{128, 32, 8, 250, 1, true},
                                dec_shape{128, 32, 8, 100, 3, false}, dec_shape{96, 8, 2, 3000, 1, true}}) {
        for (ember_type tk : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_BF16,
                              EMBER_TYPE_F32}) {
            const std::string what = std::string("decode attn ") + ember_type_get_name(tk) + " d=" + std::to_string(s.d) + " heads " +
                                     std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " n_kv=" + std::to_string(s.n_kv);
            check_case(what, [=](case_ctx & c) {
                std::vector<float> mv(static_cast<size_t>(s.n_kv * s.n_tok), 0.0f);
                for (int64_t t = 0; t < s.n_tok; t++) {
                    for (int64_t j = 0; j < s.n_kv; j++) {
                        if ((s.hide_front && j < 150) || j > s.n_kv - s.n_tok + t) mv[t * s.n_kv + j] = -INFINITY;
                        else if (j % 7 == 3) mv[t * s.n_kv + j] = -1.5f;  // finite additive values too
                    }
                }
                return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, s.d, s.heads, s.n_tok), c.rand_leaf(tk, s.d, s.kv_heads, s.n_kv),
                                  c.rand_leaf(tk, s.d, s.kv_heads, s.n_kv), c.f32_leaf(mv, s.n_kv, s.n_tok),
                                  1.0f / std::sqrt(static_cast<float>(s.d)));
            }, dec_attn_tol(tk, s.d, s.n_kv));
        }
    }
    // 32768 keys once (many tiles per split), Q8_0 and F16 caches.
    for (ember_type tk : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        check_case(std::string("decode attn ") + ember_type_get_name(tk) + " n_kv=32768", [=](case_ctx & c) {
            const int64_t n_kv = 32768, d = 128;
            return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, d, 32, 1), c.rand_leaf(tk, d, 8, n_kv, -2.0f, 2.0f), c.rand_leaf(tk, d, 8, n_kv),
                              nullptr, 1.0f / std::sqrt(static_cast<float>(d)));
        }, dec_attn_tol(tk, 128, 32768));
    }
    // A layer-like graph run four times on one stream with new data each time: the first run
    // is eager, the second records a CUDA graph, the others replay it (CUDA graphs are on unless
    // EMBER_CUDA_GRAPHS=0, read when a stream is made). And the same without graphs.
    set_env("EMBER_CUDA_GRAPHS", "1");
    check_runs("decode layer replayed", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 1024, 1);
        ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 1024, 1));
        ember_tensor * gt = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q4_K, 1024, 512), h);
        ember_tensor * up = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q5_0, 1024, 512), h);
        ember_tensor * dn = ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q6_K, 512, 1024), ember_swiglu(c.g, gt, up));
        return ember_add(c.g, x, dn);
    }, 1e-3, {11, 12, 13, 14});
    set_env("EMBER_CUDA_GRAPHS", "0");
    check_runs("decode layer eager", [](case_ctx & c) {
        ember_tensor * x = c.rand_leaf(EMBER_TYPE_F32, 512, 1);
        ember_tensor * h = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 512, 1));
        return ember_add(c.g, x, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_Q8_0, 512, 512), h));
    }, 1e-3, {21, 22, 23});
    set_env("EMBER_CUDA_GRAPHS", "");
}

// Prefill attention (at least 16 query tokens: the tiled flash-attention kernel for head sizes
// 64/96/128 with K and V of one type, the simple kernel otherwise): lengths around the 32-key
// and 32-row tiles, GQA groups of 1, 4 and 8, causal masks after a cached prefix, no mask, rows
// that see no key at all, finite additive mask values, and whole key tiles hidden. The tiled
// kernel's FP32 tiles, exact to 1e-8, with EMBER_CUDA_FA_MMA=0 (F16 caches at head size 64 / 128
// otherwise take the tensor-core kernel: then within its f16 rounding, 1e-6, as in
// test_cuda_attn_prefill.cpp).
TEST_CASE("[cuda] prefill attention: tiles, GQA, masks") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    env_clear fa_guard{{"EMBER_CUDA_FA_MMA"}};
    enum mask_kind { k_causal, k_none, k_causal_hidden_rows, k_bias, k_window };
    struct shape {
        int64_t   d, n_head, n_head_kv, n_tok, n_kv;
        mask_kind mk;
    };
    const shape shapes[] = {
        {64, 8, 2, 16, 16, k_causal},       {64, 8, 2, 45, 82, k_causal},        {128, 8, 2, 100, 100, k_causal},
        {128, 4, 4, 33, 70, k_none},        {64, 8, 1, 17, 300, k_causal_hidden_rows}, {96, 6, 3, 40, 40, k_bias},
        {128, 8, 2, 64, 260, k_window},     {64, 2, 2, 130, 130, k_causal},      {80, 4, 2, 20, 20, k_causal},
    };
    const ember_type kv_types[] = {EMBER_TYPE_F16,  EMBER_TYPE_Q8_0,     EMBER_TYPE_F32,
                                   EMBER_TYPE_BF16, EMBER_TYPE_Q4_0,     EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2};
    for (const shape & sh : shapes) {
        // pass 0: fa_kernel for every type; pass 1: the default for F16 (fa_mma_kernel at d 64 / 128)
        for (int i = 0; i < 2 * static_cast<int>(std::size(kv_types)); i++) {
            const int        pass = i / static_cast<int>(std::size(kv_types));
            const ember_type tk   = kv_types[i % std::size(kv_types)];
            set_env("EMBER_CUDA_FA_MMA", pass == 0 ? "0" : "");
            if (pass == 1 && tk != EMBER_TYPE_F16) continue;
            if (tk != EMBER_TYPE_F16 && tk != EMBER_TYPE_Q8_0 && sh.d != 128) continue;  // every type once, at d = 128
            if (sh.d % 32 != 0 && tk != EMBER_TYPE_F16) continue;                        // block types need rows of 32
            const std::string what = std::string(pass == 0 ? "prefill attn (fa_kernel) " : "prefill attn (default) ") +
                                     ember_type_get_name(tk) + " d=" + std::to_string(sh.d) + " heads " +
                                     std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " n_tok=" + std::to_string(sh.n_tok) +
                                     " n_kv=" + std::to_string(sh.n_kv) + " mask " + std::to_string(sh.mk);
            check_case(what, [=](case_ctx & c) {
                ember_tensor * q    = c.rand_leaf(EMBER_TYPE_F32, sh.d, sh.n_head, sh.n_tok);
                ember_tensor * k    = c.rand_leaf(tk, sh.d, sh.n_head_kv, sh.n_kv);
                ember_tensor * v    = c.rand_leaf(tk, sh.d, sh.n_head_kv, sh.n_kv);
                ember_tensor * mask = nullptr;
                if (sh.mk != k_none) {
                    // token t sits at position n_kv - n_tok + t and sees the keys up to it
                    std::vector<float>                    mv(static_cast<size_t>(sh.n_kv * sh.n_tok), 0.0f);
                    std::uniform_real_distribution<float> u(-2.0f, 0.0f);
                    for (int64_t t = 0; t < sh.n_tok; t++) {
                        const int64_t pos = sh.n_kv - sh.n_tok + t;
                        for (int64_t j = 0; j < sh.n_kv; j++) {
                            float x = j > pos ? -INFINITY : 0.0f;
                            if (sh.mk == k_causal_hidden_rows && (j < 100 || t % 5 == 3)) x = -INFINITY;  // rows 3, 8, ..: no key
                            if (sh.mk == k_bias && x == 0.0f) x = u(c.rng);
                            if (sh.mk == k_window && j < pos - 70) x = -INFINITY;  // sliding window: leading tiles hidden
                            mv[static_cast<size_t>(t * sh.n_kv + j)] = x;
                        }
                    }
                    mask = c.f32_leaf(mv, sh.n_kv, sh.n_tok);
                }
                return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(sh.d)));
            }, pass == 0 ? 1e-8 : 1e-6);
        }
    }
    set_env("EMBER_CUDA_FA_MMA", "");
    // Mixed K/V types take the simple kernel.
    check_case("prefill attn f16 K, q8_0 V", [](case_ctx & c) {
        return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 64, 4, 20), c.rand_leaf(EMBER_TYPE_F16, 64, 2, 20),
                          c.rand_leaf(EMBER_TYPE_Q8_0, 64, 2, 20), nullptr, 0.125f);
    }, 1e-8);
}

// A decode FFN block over weights of type t: x + down(swiglu(gate(h), up(h))), h = norm(x) w,
// x of width k, f rows in gate and up. The variants: ffn_gate_read_twice, the gate's result also
// through a product of its own into the result (its floats stored); ffn_after_product, x the
// residual after a k x k product, so h is that product's norm-in-product copy where the backend
// makes one (EMBER_CUDA_MV_NORM).
enum ffn_variant { ffn_plain = 0, ffn_gate_read_twice = 1, ffn_after_product = 2 };
ember_tensor * decode_ffn(case_ctx & c, ember_type t, int64_t k, int64_t f, ffn_variant variant = ffn_plain) {
    ember_tensor * x = c.rand_leaf(EMBER_TYPE_F32, k, 1, 1, -2.0f, 2.0f);
    if (variant == ffn_after_product) x = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, k, k), c.rand_leaf(EMBER_TYPE_F32, k, 1)));
    ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, k, 1, 1, 0.5f, 1.5f));
    ember_tensor * gt = ember_mul_mat(c.g, c.weight_leaf(t, k, f), h);
    ember_tensor * up = ember_mul_mat(c.g, c.weight_leaf(t, k, f), h);
    ember_tensor * y  = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, f, k), ember_swiglu(c.g, gt, up)));
    if (variant == ffn_gate_read_twice) y = ember_add(c.g, y, ember_mul_mat(c.g, c.weight_leaf(t, f, k), gt));
    return y;
}

TEST_CASE("[cuda] weights in the CUDA layout: matvec, prefill, get_rows, readback") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0}) {
        const std::string tn = ember_type_get_name(t);
        // Row counts: several blocks (67, 4100: a tail warp) and one row, widths whose chunk
        // count is not a multiple of the 128 a warp loads per step, rows of several steps
        // (loaded one step ahead: mvr_kernel P) with an odd and an even count of steps, and
        // short rows of at most 64 chunks (Q4_0 k = 2048, k = 32), two a warp (the pair's
        // second row past n when n is 67 or 1).
        for (int64_t n : {67, 1, 4100}) {
            for (int64_t k : {2048, 4096 + 32 * 5, 32, 14336 + 32 * 3, 14336}) {
                for (int64_t m : {1, 3}) {
                    if (n == 4100 && (k == 32 || k > 5000 || m == 3)) continue;
                    if (k == 14336 && (n != 67 || m != 1)) continue;  // the 8B down product's rows exactly (448 chunks)
                    check_case("cuda layout matvec " + tn + " k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m),
                               [=](case_ctx & c) {
                                   return ember_mul_mat(c.g, c.weight_leaf(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
                               }, 1e-3);
                }
            }
        }
        check_case("cuda layout matvec batched broadcast " + tn, [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, 256, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 2, 4));
        }, 1e-3);
        check_case("cuda layout prefill (cuBLAS) " + tn, [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, 512, 40, 2), c.rand_leaf(EMBER_TYPE_F32, 512, 24, 2));
        }, 1e-3);  // the CPU rounds activations to Q8_0, the GPU to F16
        check_case("cuda layout get_rows " + tn, [=](case_ctx & c) {
            return ember_get_rows(c.g, c.weight_leaf(t, 320, 9), c.i32_leaf({8, 0, 3, 3}));
        }, 1e-12);
        // A layer-like graph twice with new weights (set again whole: converted again).
        check_runs("cuda layout decode layer " + tn, [=](case_ctx & c) { return decode_ffn(c, t, 1024, 512); }, 1e-3, {31, 32});

        ember_test::check_converted_weight_io(cuda_device(), t, 96, 5, EMBER_TENSOR_FLAG_CUDA_REPACKED);
    }
}

// Q6_K weights with rows of a multiple of 2048 take the planar layout at upload (cuda-repack.h,
// backends/common/q6k-planar.h): decode products by mvp6_kernel with 1, 2, 3, 7 and 9 segments
// per row (warps per row KS = 1, 2, 3, 7 and 8, the last looping), row counts that leave a
// partial group of rows, 1 and 3 columns, a batched broadcast; prefill (dequantized from the
// planar layout for cuBLAS with EMBER_CUDA_MMQ=0, read by the tensor-core GEMM by default); GET_ROWS;
// a decode FFN run twice with new weights; and the tensor itself (flagged, its GGUF bytes back,
// a partial write). Results against the CPU, which reads the GGUF bytes: a flagged weight read
// by a GGUF-layout kernel would be garbage.
TEST_CASE("[cuda] Q6_K weights in the planar layout: matvec, prefill, get_rows, readback") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const ember_type t = EMBER_TYPE_Q6_K;
    for (int64_t k : {2048, 4096, 6144, 14336, 18432}) {
        for (int64_t n : {1, 9, 37, 1029}) {
            for (int64_t m : {1, 3}) {
                if ((k > 6144 && n == 1029) || (m == 3 && n != 37)) continue;  // (time)
                check_case("planar q6_k matvec k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m),
                           [=](case_ctx & c) {
                               return ember_mul_mat(c.g, c.weight_leaf(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
                           }, 1e-3);
            }
        }
    }
    check_case("planar q6_k matvec batched broadcast", [=](case_ctx & c) {
        return ember_mul_mat(c.g, c.weight_leaf(t, 2048, 8, 2), c.rand_leaf(EMBER_TYPE_F32, 2048, 2, 4));
    }, 1e-3);
    for (const char * mmq : {"0", "1"}) {
        set_env("EMBER_CUDA_MMQ", mmq);
        check_case(std::string("planar q6_k prefill, EMBER_CUDA_MMQ=") + mmq, [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(t, 4096, 40, 2), c.rand_leaf(EMBER_TYPE_F32, 4096, 24, 2));
        }, 1e-3);  // the CPU rounds activations to Q8_K, the GPU to F16
    }
    set_env("EMBER_CUDA_MMQ", "");
    check_case("planar q6_k get_rows", [=](case_ctx & c) {
        return ember_get_rows(c.g, c.weight_leaf(t, 2048, 9), c.i32_leaf({8, 0, 3, 3}));
    }, 1e-12);
    check_runs("planar q6_k decode ffn", [=](case_ctx & c) { return decode_ffn(c, t, 2048, 4096); }, 1e-3, {41, 42});
    ember_test::check_converted_weight_io(cuda_device(), t, 2048, 5, EMBER_TENSOR_FLAG_CUDA_REPACKED);
}

// A layer's Q/K/V projections as the graph builder orders them (Q: matvec, view, rope; K: the
// same, then a view and SET_ROWS into the cache; V: matvec, SET_ROWS), read by decode attention
// and an output projection. On the GPU the RoPE and the cache writes run in the matvecs' store
// (ember_cuda_mv_unit), all three in one launch: NORMAL and NEOX pairs, frequency factors,
// F16/F32/BF16 caches (a Q8_0 cache keeps its SET_ROWS), a Q product also read elsewhere (its
// plain rows stored too), more than 4096 Q rows and a cache row in the middle of the cache.
struct qkv_case {
    ember_type wt;
    ember_type cache;
    int32_t    mode;
    bool       ff;
    bool       q_read_elsewhere;
    int64_t    n_head, n_head_kv, hd;
    ember_type vt     = static_cast<ember_type>(EMBER_TYPE_COUNT);  // V's weights (COUNT: wt)
    int64_t    n_embd = 512;
    bool       normed = false;  // x = the layer's norm after an O product in wt (a norm-in-product copy)
};

// The case's weight types for its name: Q/K's, and V's when it differs.
std::string qkv_types(const qkv_case & p) {
    return std::string(ember_type_get_name(p.wt)) + (p.vt == EMBER_TYPE_COUNT ? "" : std::string(" v ") + ember_type_get_name(p.vt));
}

ember_tensor * qkv_layer(case_ctx & c, const qkv_case & p) {
    const int64_t n_embd = p.n_embd, n_kv = 12, row = 7;
    const ember_type vt  = p.vt == EMBER_TYPE_COUNT ? p.wt : p.vt;
    ember_graph & g      = c.g;
    ember_tensor * x     = c.rand_leaf(EMBER_TYPE_F32, n_embd, 1, 1, -2.0f, 2.0f);
    if (p.normed) {
        ember_tensor * h = ember_add(g, x, ember_mul_mat(g, c.weight_leaf(p.wt, n_embd, n_embd), c.rand_leaf(EMBER_TYPE_F32, n_embd, 1)));
        x                = ember_mul(g, ember_rms_norm(g, h, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n_embd, 1, 1, 0.5f, 1.5f));
    }
    ember_tensor * pos   = c.i32_leaf({row + 1000});
    ember_tensor * idx   = c.i32_leaf({static_cast<int32_t>(row)});
    ember_tensor * ff    = nullptr;
    if (p.ff) {
        std::vector<float> f(static_cast<size_t>(p.hd / 2));
        for (size_t i = 0; i < f.size(); i++) f[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
        ff = c.f32_leaf(f, p.hd / 2, 1);
    }
    ember_tensor * q_mm = ember_mul_mat(g, c.weight_leaf(p.wt, n_embd, p.hd * p.n_head), x);
    ember_tensor * k_mm = ember_mul_mat(g, c.weight_leaf(p.wt, n_embd, p.hd * p.n_head_kv), x);
    ember_tensor * v_mm = ember_mul_mat(g, c.weight_leaf(vt, n_embd, p.hd * p.n_head_kv), x);
    ember_tensor * q    = ember_rope(g, ember_view(g, q_mm, p.hd, p.n_head, 1), pos, ff, static_cast<int32_t>(p.hd), p.mode, 10000.0f, 1.0f);
    ember_tensor * k    = ember_rope(g, ember_view(g, k_mm, p.hd, p.n_head_kv, 1), pos, ff, static_cast<int32_t>(p.hd), p.mode, 10000.0f, 1.0f);
    ember_tensor * kc   = c.rand_leaf(p.cache, p.hd * p.n_head_kv, n_kv);
    ember_tensor * vc   = c.rand_leaf(p.cache, p.hd * p.n_head_kv, n_kv);
    ember_tensor * k_all = ember_set_rows(g, kc, ember_view(g, k, p.hd * p.n_head_kv, 1), idx);
    ember_tensor * v_all = ember_set_rows(g, vc, v_mm, idx);
    const int64_t  kv_ne[4] = {p.hd, p.n_head_kv, n_kv, 1};
    const size_t   k_nb[4]  = {kc->nb[0], ember_row_size(p.cache, p.hd), kc->nb[1], kc->nb[1] * n_kv};
    const size_t   v_nb[4]  = {vc->nb[0], ember_row_size(p.cache, p.hd), vc->nb[1], vc->nb[1] * n_kv};
    ember_tensor * o = ember_attn(g, q, ember_view_strided(g, k_all, kv_ne, k_nb, 0), ember_view_strided(g, v_all, kv_ne, v_nb, 0), nullptr,
                                  1.0f / std::sqrt(static_cast<float>(p.hd)));
    o                = ember_view(g, o, p.hd * p.n_head, 1);
    if (p.q_read_elsewhere) o = ember_add(g, o, ember_scale(g, q_mm, 0.01f));
    return ember_mul_mat(g, c.rand_leaf(EMBER_TYPE_F32, p.hd * p.n_head, 64), o);
}

TEST_CASE("[cuda] decode Q/K/V matvecs with RoPE and KV cache writes in their store") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    std::vector<qkv_case> cases;
    for (ember_type wt : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K}) {
        for (int32_t mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
            cases.push_back({wt, EMBER_TYPE_F16, mode, false, false, 8, 2, 64});
            cases.push_back({wt, EMBER_TYPE_F32, mode, true, true, 4, 4, 128});
        }
    }
    cases.push_back({EMBER_TYPE_Q4_0, EMBER_TYPE_BF16, EMBER_ROPE_NEOX, true, false, 8, 2, 64});
    cases.push_back({EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_ROPE_NORMAL, false, false, 8, 2, 64});
    cases.push_back({EMBER_TYPE_Q8_0, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 40, 8, 128});  // 5120 Q rows
    cases.push_back({EMBER_TYPE_Q4_1, EMBER_TYPE_F16, EMBER_ROPE_NORMAL, false, false, 8, 2, 64});  // no epilogue kernel
    // Ember's own types (mvx_kernel, ops-matvec-ext.cu): int8 x (INT4, NF4), float x (FP8),
    // block and row scales.
    for (ember_type wt : {EMBER_TYPE_INT4, EMBER_TYPE_NF4, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2_ROW}) {
        cases.push_back({wt, EMBER_TYPE_F16, EMBER_ROPE_NORMAL, false, false, 8, 2, 64});
        cases.push_back({wt, EMBER_TYPE_F32, EMBER_ROPE_NEOX, true, true, 4, 4, 128});
    }
    cases.push_back({EMBER_TYPE_INT4_G32, EMBER_TYPE_BF16, EMBER_ROPE_NEOX, false, false, 40, 8, 128});  // 5120 Q rows
    // Q4_K_M's layers with V in Q6_K (the planar layout from 2048 wide): V a unit of its own,
    // mvp6_kernel writing its cache rows (F16 / F32 / BF16).
    const qkv_case q4km_v{EMBER_TYPE_Q4_K, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 8, 2, 128, EMBER_TYPE_Q6_K, 2048};
    cases.push_back(q4km_v);
    for (ember_type cache : {EMBER_TYPE_F32, EMBER_TYPE_BF16}) {
        qkv_case p = q4km_v;
        p.cache    = cache;
        p.n_head_kv = 3;  // 384 V rows: not a multiple of a block's 4 x 4
        p.n_head    = 6;
        cases.push_back(p);
    }
    for (const qkv_case & p : cases) {
        const std::string what = "qkv epilogue " + qkv_types(p) + " cache " + ember_type_get_name(p.cache) +
                                 " mode " + std::to_string(p.mode) + (p.ff ? " ff" : "") + (p.q_read_elsewhere ? " q read twice" : "") +
                                 " heads " + std::to_string(p.n_head) + "/" + std::to_string(p.n_head_kv) + " hd " + std::to_string(p.hd);
        check_case(what, [=](case_ctx & c) { return qkv_layer(c, p); }, 1e-3);
    }
    // IQ4_XS units in mvk_kernel XS (EMBER_CUDA_IQ4XS_WIDE, the default).
    {
        const env_clear clear{{"EMBER_CUDA_IQ4XS_WIDE"}};
        set_env("EMBER_CUDA_IQ4XS_WIDE", "");
        for (int32_t mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
            for (const qkv_case & p : {qkv_case{EMBER_TYPE_IQ4_XS, EMBER_TYPE_F16, mode, false, false, 8, 2, 64},
                                       qkv_case{EMBER_TYPE_IQ4_XS, EMBER_TYPE_F32, mode, true, true, 4, 4, 128}}) {
                check_case("qkv epilogue iq4_xs (EMBER_CUDA_IQ4XS_WIDE) mode " + std::to_string(mode) + " hd " + std::to_string(p.hd),
                           [=](case_ctx & c) { return qkv_layer(c, p); }, 1e-3);
            }
        }
    }
    // FP8 units run on the tensor-core matvec by default (a warp's 16 rows are 8 RoPE pairs);
    // EMBER_CUDA_FP8_MMA_UNITS=0 gives them mvx_kernel's stores, EMBER_CUDA_FP8_MMA=0 every FP8
    // product the float path.
    for (const char * var : {"EMBER_CUDA_FP8_MMA_UNITS", "EMBER_CUDA_FP8_MMA"}) {
        set_env(var, "0");
        for (const qkv_case & p : cases) {
            if (p.wt != EMBER_TYPE_FP8_E4M3 && p.wt != EMBER_TYPE_FP8_E5M2_ROW) continue;
            const std::string what = std::string("qkv epilogue with ") + var + "=0 " + ember_type_get_name(p.wt) + " cache " +
                                     ember_type_get_name(p.cache) + " mode " + std::to_string(p.mode) + " heads " + std::to_string(p.n_head) +
                                     "/" + std::to_string(p.n_head_kv) + " hd " + std::to_string(p.hd);
            check_case(what, [=](case_ctx & c) { return qkv_layer(c, p); }, 1e-3);
        }
        set_env(var, "");
    }
    // NF4 units on tensor cores (EMBER_CUDA_NF4_MMA=1: mvx_nf4_mma_kernel's stores, 8 RoPE pairs a
    // block's 16 rows).
    set_env("EMBER_CUDA_NF4_MMA", "1");
    for (const qkv_case & p : cases) {
        if (p.wt != EMBER_TYPE_NF4) continue;
        const std::string what = std::string("qkv epilogue with EMBER_CUDA_NF4_MMA=1 cache ") + ember_type_get_name(p.cache) + " mode " +
                                 std::to_string(p.mode) + " heads " + std::to_string(p.n_head) + "/" + std::to_string(p.n_head_kv) + " hd " +
                                 std::to_string(p.hd);
        check_case(what, [=](case_ctx & c) { return qkv_layer(c, p); }, 1e-3);
    }
    set_env("EMBER_CUDA_NF4_MMA", "");
    // NF4 units of long rows (U = 2, two rows a warp) capped for 6 blocks an SM (by default;
    // EMBER_CUDA_EXT_NF4_OCC=0: not): 4096 wide, over the norm kernel's copy and a producer's (NS).
    // Only the registers differ: the results are the same bits. Against the CPU: the GPU's NF4
    // products take the codebook as int8 (nf4_lookup_np's sign tables), the CPU's as floats, and the normed
    // case's O product, norm and attention carry that to 4.06e-3 (the norm's own launch too:
    // 4.07e-3; INT4 1.2e-7, Q8_0 8.2e-8; session 48).
    for (bool normed : {false, true}) {
        const qkv_case p{EMBER_TYPE_NF4, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 8, 2, 128, static_cast<ember_type>(EMBER_TYPE_COUNT), 4096, normed};
        const auto     build = [=](case_ctx & c) { return qkv_layer(c, p); };
        CAPTURE(normed);
        const auto   want = run_on(ember_registry_cpu_device(), build, 1234);
        const auto   d    = run_on(cuda_device(), build, 1234);
        const auto   o0   = run_on_cuda_with("EMBER_CUDA_EXT_NF4_OCC", "0", build, 1234);
        const double e = nmse(d, want), e0 = nmse(o0, d);
        CAPTURE(e);
        CAPTURE(e0);
        CHECK(e < (normed ? 1e-2 : 1e-3));
        CHECK(e0 < 1e-12);
    }
    // INT4's units of long rows in two-row warps (EMBER_CUDA_EXT_INT4_HALVES=0; U = 2 by default,
    // EMBER_CUDA_EXT_INT4_U2=0: U = 4), 4096 wide, over the norm kernel's copy and a producer's: both
    // forms against the CPU, each set explicitly whatever the environment (H200, U = 4: 5.6e-14
    // plain, 1.2e-7 normed). (The halves form, the default there: its own test case below.)
    set_env("EMBER_CUDA_EXT_INT4_HALVES", "0");
    for (bool normed : {false, true}) {
        const qkv_case p{EMBER_TYPE_INT4, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 8, 2, 128, static_cast<ember_type>(EMBER_TYPE_COUNT), 4096, normed};
        const auto     build = [=](case_ctx & c) { return qkv_layer(c, p); };
        CAPTURE(normed);
        const auto   want = run_on(ember_registry_cpu_device(), build, 1234);
        const auto   u2   = run_on_cuda_with("EMBER_CUDA_EXT_INT4_U2", "1", build, 1234);
        const auto   u4   = run_on_cuda_with("EMBER_CUDA_EXT_INT4_U2", "0", build, 1234);
        const double e2 = nmse(u2, want), e4 = nmse(u4, want);
        CAPTURE(e2);
        CAPTURE(e4);
        CHECK(e2 < 1e-3);
        CHECK(e4 < 1e-3);
    }
    set_env("EMBER_CUDA_EXT_INT4_HALVES", "");
    // Proof that the stores did the RoPE and the cache writes: with EMBER_CUDA_SKIP=other no ROPE
    // or SET_ROWS kernel runs, and the results must still be right; for Q4_1 (no epilogue kernel)
    // they must not be (so the check can fail). FP8 units on tensor cores (the default) and on
    // mvx_kernel.
    for (const char * fp8_units : {"1", "0"}) {
        set_env("EMBER_CUDA_FP8_MMA_UNITS", fp8_units);
        CAPTURE(fp8_units);
        // (Q/K weights, V's: Q4_K_M's layers with V in planar Q6_K, 2048 wide, the last.)
        const std::pair<ember_type, ember_type> types[] = {{EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0}, {EMBER_TYPE_Q4_K, EMBER_TYPE_Q4_K},
                                                           {EMBER_TYPE_INT4, EMBER_TYPE_INT4}, {EMBER_TYPE_NF4, EMBER_TYPE_NF4},
                                                           {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E4M3}, {EMBER_TYPE_Q4_1, EMBER_TYPE_Q4_1},
                                                           {EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K}};
        for (const auto & [wt, vt] : types) {
            if (fp8_units[0] == '0' && wt != EMBER_TYPE_FP8_E4M3) continue;
            for (int32_t mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
                qkv_case p{wt, EMBER_TYPE_F16, mode, false, false, 8, 2, 64};
                if (vt != wt) {
                    p.vt     = vt;
                    p.n_embd = 2048;
                }
                const std::string tn = qkv_types(p);
                CAPTURE(tn);
                CAPTURE(mode);
                const auto   build = [=](case_ctx & c) { return qkv_layer(c, p); };
                const auto   want  = run_on(ember_registry_cpu_device(), build, 5);
                const auto   got   = run_on_cuda_with("EMBER_CUDA_SKIP", "other", build, 5);
                const double e     = nmse(got, want);
                CAPTURE(e);
                if (wt == EMBER_TYPE_Q4_1) {
                    CHECK_FALSE(e < 1e-3);  // (unwritten rows may even hold NaNs)
                } else {
                    CHECK(e < 1e-3);
                }
            }
        }
        set_env("EMBER_CUDA_FP8_MMA_UNITS", "");
    }
}

// mvk_v6_kernel (EMBER_CUDA_MV_K4V=2: in place of mvk_p6_kernel too) with a V row a warp and
// with one V block (each warp several rows), with and without its L2 prefetch (_PF) and its
// two-segment rows' loads at once (_SEG2=0: not; the same sums), the RoPE and the cache writes in
// the stores (EMBER_CUDA_SKIP=other): each result bit for bit `ref` (same) or within tol of it.
void check_k4v6(const builder & build, const std::vector<float> & ref, bool same, double tol = 0.0) {
    const env_clear reset{{"EMBER_CUDA_MV_K4V", "EMBER_CUDA_MV_K4V_BLOCKS", "EMBER_CUDA_MV_K4V_PF", "EMBER_CUDA_MV_K4V_SEG2", "EMBER_CUDA_SKIP"}};
    set_env("EMBER_CUDA_MV_K4V", "2");
    for (const char * seg2 : {"1", "0"}) {
        for (const char * pf : {"0", "1"}) {
            for (const char * blocks : {"", "1"}) {
                for (const char * skip : {"", "other"}) {
                    CAPTURE(seg2);
                    CAPTURE(pf);
                    CAPTURE(blocks);
                    CAPTURE(skip);
                    set_env("EMBER_CUDA_MV_K4V_SEG2", seg2);
                    set_env("EMBER_CUDA_MV_K4V_PF", pf);
                    set_env("EMBER_CUDA_MV_K4V_BLOCKS", blocks);
                    set_env("EMBER_CUDA_SKIP", skip);
                    const long long          before = ember_cuda_mv_k4v6_launches();
                    const std::vector<float> got    = run_on(cuda_device(), build, 5);
                    CHECK(ember_cuda_mv_k4v6_launches() > before);  // the form ran
                    if (same) {
                        CHECK(got == ref);
                    } else {
                        const double e = nmse(got, ref);
                        CAPTURE(e);
                        CHECK(e < tol);
                    }
                }
            }
        }
    }
}

// Q4_K_M's layers with V in planar Q6_K: Q, K and V in one launch (mvk_p6_kernel, the default)
// against the CPU and, bit for bit, against the two launches (EMBER_CUDA_MV_K4P6=0: the same
// arithmetic); F16 / F32 / BF16 caches, 384 V rows (not a multiple of a block's 16), over a plain
// x and over the O product's norm-in-product copy (the NS forms), the RoPE and the cache writes
// in the stores (EMBER_CUDA_SKIP=other).
// Q5_K_M's layers the same by default (EMBER_CUDA_MV_K4P6_Q5K: mvk_p6_kernel Q5; never
// mvk_v6_kernel, which would spill it: the two launches there).
TEST_CASE("[cuda] decode Q/K/V: Q4_K_M's Q4_K Q / K and planar Q6_K V in one launch (EMBER_CUDA_MV_K4P6, EMBER_CUDA_MV_K4V)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_K4P6", "EMBER_CUDA_MV_K4V", "EMBER_CUDA_SKIP", "EMBER_CUDA_MV_K4P6_Q5K"}};
    set_env("EMBER_CUDA_MV_K4V", "");  // (the default: mvk_p6_kernel where its grid fits one wave)
    for (ember_type wt : {EMBER_TYPE_Q4_K, EMBER_TYPE_Q5_K}) {
        set_env("EMBER_CUDA_MV_K4P6_Q5K", "");  // (the default: on)
        const std::string tn = ember_type_get_name(wt);
        for (ember_type cache : {EMBER_TYPE_F16, EMBER_TYPE_F32, EMBER_TYPE_BF16}) {
            for (bool normed : {false, true}) {
                qkv_case p{wt, cache, EMBER_ROPE_NEOX, false, false, 8, 2, 128, EMBER_TYPE_Q6_K, 2048};
                p.normed = normed;
                if (cache == EMBER_TYPE_F32) {
                    p.n_head_kv = 3;  // 384 V rows
                    p.n_head    = 6;
                }
                const std::string what = tn + " q / k, q6_k v in one launch cache " + std::string(ember_type_get_name(cache)) + (normed ? " normed x" : "");
                CAPTURE(what);
                const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
                set_env("EMBER_CUDA_MV_K4P6", "");  // (the default)
                const long long before = ember_cuda_mv_k4p6_launches();
                // Over the copy, the O product, the norm and the Q / K / V products are each within
                // rounding of the CPU's: two products deep that measured 1.26e-3 (F32 cache), on
                // the two launches too (bit for bit below), as check_norm_in_product's 2e-3.
                check_case(what, build, normed ? 2e-3 : 1e-3);
                CHECK(ember_cuda_mv_k4p6_launches() > before);  // the one-launch form ran (not the two launches)
                const std::vector<float> one = run_on(cuda_device(), build, 5);
                set_env("EMBER_CUDA_SKIP", "other");
                const std::vector<float> skip = run_on(cuda_device(), build, 5);
                set_env("EMBER_CUDA_SKIP", "");
                set_env("EMBER_CUDA_MV_K4P6", "0");
                const std::vector<float> two = run_on(cuda_device(), build, 5);
                CHECK(one == two);
                CHECK(skip == two);
                set_env("EMBER_CUDA_MV_K4P6", "");
                // V's rows on the Q4_K launch's places left (mvk_v6_kernel, the 8B shape's form),
                // made to run here: the same arithmetic as the two launches for rows of one segment.
                if (wt == EMBER_TYPE_Q4_K) check_k4v6(build, two, true);
            }
        }
        // V rows of five segments (10240 wide): no one-launch form takes them (mvk_p6_kernel's blocks
        // are 4 warps; mvk_v6_kernel forced off), the two launches do; against the CPU.
        {
            qkv_case p{wt, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 8, 2, 128, EMBER_TYPE_Q6_K, 10240};
            const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
            set_env("EMBER_CUDA_MV_K4V", "0");
            const long long before = ember_cuda_mv_k4p6_launches();
            check_case(tn + " q / k, q6_k v rows of five segments", build, 1e-3);
            CHECK(ember_cuda_mv_k4p6_launches() == before);
            set_env("EMBER_CUDA_MV_K4V", "");
        }
        // Rows of two segments (8B's 4096): V's row sums in another order than mvp6_kernel KS = 2's.
        for (bool normed : {false, true}) {
            qkv_case p{wt, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 8, 2, 128, EMBER_TYPE_Q6_K, 4096};
            p.normed = normed;
            CAPTURE(normed);
            const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
            const auto want  = run_on(ember_registry_cpu_device(), build, 5);
            CHECK(nmse(run_on(cuda_device(), build, 5), want) < (normed ? 2e-3 : 1e-3));
            if (wt == EMBER_TYPE_Q5_K) {  // (no mvk_v6_kernel form: the two launches, whatever EMBER_CUDA_MV_K4V says)
                const env_clear reset2{{"EMBER_CUDA_MV_K4V"}};
                set_env("EMBER_CUDA_MV_K4V", "2");
                const long long before = ember_cuda_mv_k4v6_launches();
                CHECK(nmse(run_on(cuda_device(), build, 5), want) < (normed ? 2e-3 : 1e-3));
                CHECK(ember_cuda_mv_k4v6_launches() == before);
                continue;
            }
            check_k4v6(build, want, false, normed ? 2e-3 : 1e-3);
            // Its forms the same bits: mvp6_row_seg2 sums as mvp6_rows does.
            const env_clear reset2{{"EMBER_CUDA_MV_K4V", "EMBER_CUDA_MV_K4V_SEG2"}};
            set_env("EMBER_CUDA_MV_K4V", "2");
            set_env("EMBER_CUDA_MV_K4V_SEG2", "0");
            check_k4v6(build, run_on(cuda_device(), build, 5), true);
        }
    }
}

// Q4_0 and INT4 Q / K / V units 4096 wide with every weight requested before the PDL wait
// (EMBER_CUDA_MV_Q4_HALVES=1: mvr_halves_kernel; EMBER_CUDA_EXT_INT4_HALVES=1:
// mvx_int4_halves_kernel; four rows a warp over half the row, a pair of warps meeting in shared
// memory): NEOX and NORMAL pairs, a Q product also read elsewhere (its plain rows stored and
// rotated by a RoPE launch of their own), F16 / F32 caches, over x and over an O product's
// norm-in-product copy: against the CPU (eager, recorded, replayed), against the default form to
// the rounding of another order of the two halves' sums, and, where Q is read only by the
// attention, with the RoPE and the cache writes only in the stores (EMBER_CUDA_SKIP=other).
TEST_CASE("[cuda] decode Q/K/V: Q4_0 and INT4 rows of 4096 with every weight before the wait (the HALVES forms)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_Q4_HALVES", "EMBER_CUDA_EXT_INT4_HALVES", "EMBER_CUDA_SKIP"}};
    struct form {
        ember_type   wt;
        const char * var;
        long long (*launches)();
    };
    const form forms[] = {{EMBER_TYPE_Q4_0, "EMBER_CUDA_MV_Q4_HALVES", ember_cuda_mv_halves_launches},
                          {EMBER_TYPE_INT4, "EMBER_CUDA_EXT_INT4_HALVES", ember_cuda_int4_halves_launches}};
    for (const form & f : forms) {
        for (bool normed : {false, true}) {
            for (int32_t mode : {EMBER_ROPE_NEOX, EMBER_ROPE_NORMAL}) {
                qkv_case p{f.wt, normed ? EMBER_TYPE_F32 : EMBER_TYPE_F16, mode, false, mode == EMBER_ROPE_NORMAL, 8, 2, 128, static_cast<ember_type>(EMBER_TYPE_COUNT), 4096, normed};
                const std::string what = std::string("halves ") + qkv_types(p) + (normed ? " normed" : "") + " mode " + std::to_string(mode);
                CAPTURE(what);
                const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
                set_env(f.var, "0");
                const long long          before = f.launches();
                const std::vector<float> plain  = run_on(cuda_device(), build, 5);
                CHECK(f.launches() == before);
                set_env(f.var, "1");
                const std::vector<float> halves = run_on(cuda_device(), build, 5);
                CHECK(f.launches() > before);  // the form ran
                CHECK(nmse(halves, plain) < 1e-7);                // (an F16 cache row may round the other way)
                check_runs(what, build, normed ? 2e-3 : 1e-3, {5, 6, 7});  // (eager, recorded, replayed)
                if (!p.q_read_elsewhere) {  // (else Q's own RoPE launch is one the skip leaves out)
                    set_env("EMBER_CUDA_SKIP", "other");
                    const std::vector<float> skip = run_on(cuda_device(), build, 5);
                    set_env("EMBER_CUDA_SKIP", "");
                    CHECK(skip == halves);
                }
                set_env(f.var, "");
            }
        }
    }
}

// FP8 Q / K / V units in 4-warp blocks (mvx_fp8_mma_kernel W = 4, EMBER_CUDA_FP8_MMA_W4=2: forced;
// 1, the default, only where 8-warp blocks are over one wave, the 8B shape): block- and row-scaled
// types, over x and over an FP8 producer's copy, rows of 2 to 16 spans and a K / V row count that
// is not a multiple of the block's 16 (216): against the CPU, and against the 8-warp blocks to the
// rounding of another order of the warps' sums (then the F16 cache).
TEST_CASE("[cuda] decode Q/K/V: FP8 units in 4-warp blocks (EMBER_CUDA_FP8_MMA_W4)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_FP8_MMA_W4"}};
    for (ember_type wt : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_FP8_E4M3_ROW}) {
        for (bool normed : {false, true}) {
            for (int64_t n_embd : {512, 4096}) {
                qkv_case p{wt, EMBER_TYPE_F16, EMBER_ROPE_NEOX, false, false, 6, 3, 72};
                p.n_embd = n_embd;
                p.normed = normed;
                if (n_embd == 4096) p.n_head = 8, p.n_head_kv = 2, p.hd = 128, p.mode = EMBER_ROPE_NORMAL;
                const std::string what = std::string("fp8 w4 units ") + ember_type_get_name(wt) + (normed ? " normed" : "") + " n_embd " +
                                         std::to_string(n_embd);
                CAPTURE(what);
                const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
                set_env("EMBER_CUDA_FP8_MMA_W4", "2");
                const long long          before = ember_cuda_fp8_mma_w4_launches();
                const std::vector<float> w4     = run_on(cuda_device(), build, 5);
                CHECK(ember_cuda_fp8_mma_w4_launches() > before);
                check_runs(what, build, 1e-3, {3, 4, 6});  // (eager, recorded, replayed)
                set_env("EMBER_CUDA_FP8_MMA_W4", "0");
                const long long          mid = ember_cuda_fp8_mma_w4_launches();
                const std::vector<float> w8  = run_on(cuda_device(), build, 5);
                CHECK(ember_cuda_fp8_mma_w4_launches() == mid);
                CHECK(nmse(w4, w8) < 1e-7);  // (an F16 cache row may round the other way)
                CHECK(nmse(w4, run_on(ember_registry_cpu_device(), build, 5)) < 1e-3);
            }
        }
    }
}

TEST_CASE("[cuda] decode FFN: gate/up matvecs, the quantizing SWIGLU over flat indices, the down product") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // Rows: one block of 32, 8B's 14336 and an odd count of blocks; the gate's product read
    // again elsewhere or not. Each graph runs for four seeds on one stream (CUDA graph replays).
    // The SWIGLU's own launch (EMBER_CUDA_MV_GLU=0: not in the gate / up launch, tested below).
    const env_clear reset{{"EMBER_CUDA_MV_GLU", "EMBER_CUDA_IQ4XS_WIDE"}};
    set_env("EMBER_CUDA_MV_GLU", "0");
    // (Q5_K / IQ4_XS: gate / up grouped in mvk_kernel Q5 / XS, by default;
    // rows of whole 256-weight blocks for the down product.)
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q5_K, EMBER_TYPE_IQ4_XS}) {
        set_env("EMBER_CUDA_IQ4XS_WIDE", "");
        const bool                 k256   = t == EMBER_TYPE_Q5_K || t == EMBER_TYPE_IQ4_XS;
        const std::vector<int64_t> widths = k256 ? std::vector<int64_t>{256 * 3, 14336} : std::vector<int64_t>{32, 14336, 32 * 67};
        for (int64_t n : widths) {
            for (bool gate_read_twice : {false, true}) {
                const std::string what = std::string("gate/up + swiglu + down ") + ember_type_get_name(t) + " n=" + std::to_string(n) +
                                         (gate_read_twice ? " (gate read twice)" : "");
                check_runs(what, [=](case_ctx & c) { return decode_ffn(c, t, 512, n, gate_read_twice ? ffn_gate_read_twice : ffn_plain); }, 1e-3, {7, 8, 9, 10});
            }
        }
    }
}

// A layer's decode FFN and the next layer's first product as the graph builder orders them: the O
// product of width k (its result read only by the residual ADD), the ADD, RMS_NORM and MUL, gate
// and up (f rows), SWIGLU, the down product, the next ADD, RMS_NORM and MUL, and one more product
// over that (wt2: its weight type) times the residual. By default (EMBER_CUDA_MV_NORM) both
// norms run inside the product before them (mvr_norm_kernel) for Q4_0 / Q8_0 weights in the CUDA
// layout.
ember_tensor * ffn_norm_chain(case_ctx & c, ember_type wt, ember_type wt2, int64_t k, int64_t n, int64_t f) {
    ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, -2.0f, 2.0f);
    ember_tensor * a  = c.rand_leaf(EMBER_TYPE_F32, k, 1);
    ember_tensor * x2 = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(wt, k, n), a));
    ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, 0.5f, 1.5f));
    ember_tensor * gt = ember_mul_mat(c.g, c.weight_leaf(wt, n, f), h);
    ember_tensor * up = ember_mul_mat(c.g, c.weight_leaf(wt, n, f), h);
    ember_tensor * x3 = ember_add(c.g, x2, ember_mul_mat(c.g, c.weight_leaf(wt, f, n), ember_swiglu(c.g, gt, up)));
    ember_tensor * h3 = ember_mul(c.g, ember_rms_norm(c.g, x3, 1e-6f), c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, 0.5f, 1.5f));
    // (a SWIGLU, not an ADD, at the end: EMBER_CUDA_SKIP=norm leaves ADD kernels out too)
    return ember_swiglu(c.g, ember_mul_mat(c.g, c.weight_leaf(wt2, n, n), h3), x3);
}

// The decode norm in the product before it for the weight types `types`: ffn_norm_chain against
// the CPU (eager, recorded, replayed), one step against the norm kernel's path on the GPU, and the
// proof that the products did the norms. At every size (the default; EMBER_CUDA_MV_NORM=1: only
// where the product's grid fills the GPU); the switches cleared however it ends.
// (Three test cases by type, so a run with a time limit can take each group on its own.)
void check_norm_in_product(std::initializer_list<ember_type> types) {
    const env_clear reset{{"EMBER_CUDA_MV_NORM", "EMBER_CUDA_MV_NORM_Q4K", "EMBER_CUDA_MV_NORM_EXT", "EMBER_CUDA_MV_NORM_Q6K", "EMBER_CUDA_MV_NORM_FP8",
                           "EMBER_CUDA_SKIP"}};
    const auto run_with = [](const char * mv_norm, const char * skip, const builder & build, uint32_t seed) {
        set_env("EMBER_CUDA_MV_NORM", mv_norm);
        set_env("EMBER_CUDA_SKIP", skip);
        std::vector<float> r = run_on(cuda_device(), build, seed);
        set_env("EMBER_CUDA_MV_NORM", "2");
        set_env("EMBER_CUDA_SKIP", "");
        return r;
    };
    set_env("EMBER_CUDA_MV_NORM", "2");
    struct shape {
        int64_t k, n, f;
    };
    // 1B and 8B widths (the 8B down product: 56 slices of 8 chunks, 4 a warp), an odd chunk count
    // (67 blocks: a partial slice), one 32-row block.
    const shape shapes[] = {{2048, 2048, 8192}, {4096, 4096, 14336}, {32 * 67, 32 * 3, 32 * 67}, {256, 32, 512}};
    // Q4_K / Q5_K (mvk_norm_kernel, mvk_kernel NS; widths of whole 256-blocks) with the last reader
    // in planar Q6_K (mvp6_kernel NS) where its rows allow (rows of a multiple of 2048 weights), else
    // in the same type (a Q6_K product in the GGUF layout reads no copy: SKIP=norm would leave its
    // norm undone).
    const shape shapes_k[] = {{2048, 2048, 8192}, {4096, 4096, 14336}, {512, 256, 512}};
    // INT4 / NF4: the 8B widths on small matrices (their CPU quantizers search each group's scale:
    // the 8B FFN's matrices took minutes): an O product 4096 wide over 4096 rows (16 warps, 128
    // blocks), a down product 14336 wide (14 warps), one block.
    const shape shapes_x[] = {{4096, 4096, 512}, {256, 256, 14336}, {512, 256, 512}};
    // INT4 / NF4 in the ext layout (mvx_norm_kernel, mvx_kernel NS): shapes_x.
    // Planar Q6_K (mvp6_norm_kernel, mvp6_kernel NS): every width a multiple of 2048 (the readers'
    // rows too: a Q6_K product in the GGUF layout reads no copy); 1, 4 and 7 segments a row (8
    // warps; 16 warps, 2 and 4 segments a warp).
    const shape shapes_6[] = {{2048, 2048, 2048}, {2048, 2048, 8192}, {4096, 4096, 14336}};
    // Block-scaled FP8 (mvx_fp8_norm_kernel, mvx_fp8_mma_kernel NS; EMBER_CUDA_MV_NORM_FP8=1):
    // shapes, 16 rows a block (the 1B O product's 128 blocks, a partial span of 16 chunks at 67).
    for (ember_type t : types) {
        const bool q6k = t == EMBER_TYPE_Q6_K;
        const bool fp8 = t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
        set_env("EMBER_CUDA_MV_NORM_FP8", fp8 ? "1" : "");
        // (IQ4_XS: Q4_K's kernels and switch at the ext types' shapes, its CPU quantizer searching scales)
        const bool q4k = t == EMBER_TYPE_Q4_K || t == EMBER_TYPE_Q5_K || t == EMBER_TYPE_IQ4_XS;
        const bool ext = t == EMBER_TYPE_INT4 || t == EMBER_TYPE_NF4;
        const std::vector<shape> list = t == EMBER_TYPE_IQ4_XS ? std::vector<shape>(std::begin(shapes_x), std::end(shapes_x))
                                        : q4k ? std::vector<shape>(std::begin(shapes_k), std::end(shapes_k))
                                        : ext ? std::vector<shape>(std::begin(shapes_x), std::end(shapes_x))
                                        : q6k ? std::vector<shape>(std::begin(shapes_6), std::end(shapes_6))
                                              : std::vector<shape>(std::begin(shapes), std::end(shapes));
        for (const shape & sh : list) {
            const ember_type  t2   = !q4k ? t : sh.n % 2048 == 0 ? EMBER_TYPE_Q6_K : t;
            const std::string what = std::string("norm in the product ") + ember_type_get_name(t) + " k " + std::to_string(sh.k) + " n " +
                                     std::to_string(sh.n) + " f " + std::to_string(sh.f);
            CAPTURE(what);
            const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, t, t2, sh.k, sh.n, sh.f); };
            // eager, recorded, replayed (Q4_K: the CPU quantizes x in 256-blocks, the GPU in 32s;
            // five products deep that is 1.0-1.35e-3 on the default path too)
            check_runs(what, build, q4k || ext || q6k ? 2e-3 : 1e-3, {3, 4, 5});
            // One step against the norm kernel's path on the GPU: the ADD's floats the same, a
            // product over the copy within rounding (d kept in float, not rounded to half: ~3e-8;
            // a wrong scale would be 1e-4 or more), and not identical (the fused kernels ran).
            // The whole chain is ~3e-5 from that path: each later quantization (the SWIGLU's, the
            // next norm's) rounds a few int8 values the other way on such differences.
            for (int which = 0; which < 2; which++) {
                const auto step = [=](case_ctx & c) {
                    ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, sh.n, 1, 1, -2.0f, 2.0f);
                    ember_tensor * x2 = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, sh.k, sh.n), c.rand_leaf(EMBER_TYPE_F32, sh.k, 1)));
                    ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, sh.n, 1, 1, 0.5f, 1.5f));
                    ember_tensor * gg = ember_mul_mat(c.g, c.weight_leaf(t, sh.n, sh.f), h);
                    return which == 0 ? ember_add(c.g, x2, ember_scale(c.g, ember_mul_mat(c.g, c.weight_leaf(t, sh.f, sh.n), gg), 0.0f)) : gg;
                };
                const auto   fused = run_on(cuda_device(), step, 6);
                const auto   plain = run_with("0", "", step, 6);
                const double e     = nmse(fused, plain);
                CAPTURE(which);
                CAPTURE(e);
                CHECK(e < (which == 0 ? 1e-12 : 1e-6));
                // (FP8: the products' x rounded to F16 the same both ways, measured; the SKIP=norm
                // proof below shows the fused kernels ran)
                if (which == 1 && !fp8) CHECK(e > 0.0);
            }
            // Proof that the products did the norms: with EMBER_CUDA_SKIP=norm no RMS_NORM, ADD or
            // MUL kernel runs and the results must still be right; without the fusion they must not be.
            const auto   want = run_on(ember_registry_cpu_device(), build, 6);
            const double es   = nmse(run_with("2", "norm", build, 6), want);
            const double eo   = nmse(run_with("0", "norm", build, 6), want);
            CAPTURE(es);
            CAPTURE(eo);
            CHECK(es < (q4k || ext || q6k ? 2e-3 : 1e-3));
            CHECK_FALSE(eo < 1e-3);
            if (q4k || ext || q6k || fp8) {  // EMBER_CUDA_MV_NORM_Q4K / _EXT / _Q6K / _FP8=0: the norms in their own launches again
                const char * sw = q4k ? "EMBER_CUDA_MV_NORM_Q4K" : ext ? "EMBER_CUDA_MV_NORM_EXT" : q6k ? "EMBER_CUDA_MV_NORM_Q6K" : "EMBER_CUDA_MV_NORM_FP8";
                set_env(sw, "0");
                CHECK_FALSE(nmse(run_with("2", "norm", build, 6), want) < 1e-3);
                set_env(sw, fp8 ? "1" : "");
            }
        }
    }
}

TEST_CASE("[cuda] the decode norm in the product before it: Q4_0 / Q8_0, and where it must not apply") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0});
    const env_clear reset{{"EMBER_CUDA_MV_NORM", "EMBER_CUDA_SKIP"}};
    // The default fuses at any size (a grid of one block here); EMBER_CUDA_MV_NORM=1 only where
    // the grid fills 3/4 of the SMs, so here the norms' own launches run: with EMBER_CUDA_SKIP=norm
    // the results are right by default and wrong at =1 (another seed: a skipped kernel's memory
    // may hold the run before's results).
    {
        const auto build = [](case_ctx & c) { return ffn_norm_chain(c, EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, 256, 32, 512); };
        set_env("EMBER_CUDA_SKIP", "norm");
        const double ed = nmse(run_on(cuda_device(), build, 13), run_on(ember_registry_cpu_device(), build, 13));
        set_env("EMBER_CUDA_MV_NORM", "1");
        const double e1 = nmse(run_on(cuda_device(), build, 14), run_on(ember_registry_cpu_device(), build, 14));
        set_env("EMBER_CUDA_SKIP", "");
        CAPTURE(ed);
        CAPTURE(e1);
        CHECK(ed < 1e-3);
        CHECK_FALSE(e1 < 1e-3);
    }
    set_env("EMBER_CUDA_MV_NORM", "2");
    // Where it must not apply, the usual launches (and the same results): the last product's
    // kernel does not apply the scale (F16; FP8, which reads x's floats), the norm's floats read
    // again, the O product's result read again.
    for (ember_type t2 : {EMBER_TYPE_F16, EMBER_TYPE_FP8_E4M3}) {
        check_case(std::string("norm in the product, last reader ") + ember_type_get_name(t2),
                   [=](case_ctx & c) { return ffn_norm_chain(c, EMBER_TYPE_Q4_0, t2, 512, 256, 512); }, 1e-3);
    }
    check_case("norm in the product: the norm's floats read again", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 256, 1, 1, -2.0f, 2.0f);
        ember_tensor * x2 = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_0, 512, 256), c.rand_leaf(EMBER_TYPE_F32, 512, 1)));
        ember_tensor * nr = ember_rms_norm(c.g, x2, 1e-5f);
        ember_tensor * h  = ember_mul(c.g, nr, c.rand_leaf(EMBER_TYPE_F32, 256, 1));
        return ember_add(c.g, ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_0, 256, 256), h), nr);
    }, 1e-3);
    check_case("norm in the product: the product's result read again", [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 256, 1, 1, -2.0f, 2.0f);
        ember_tensor * o  = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q8_0, 512, 256), c.rand_leaf(EMBER_TYPE_F32, 512, 1));
        ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, ember_add(c.g, x, o), 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 256, 1));
        return ember_add(c.g, ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q8_0, 256, 256), h), o);
    }, 1e-3);
}

TEST_CASE("[cuda] the decode norm in the product before it: Q4_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_Q4_K});
}

TEST_CASE("[cuda] the decode norm in the product before it: Q5_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_Q5_K});  // (mvk_norm_kernel Q5, mvk_kernel NS Q5; Q4_K's shapes and switch)
}

TEST_CASE("[cuda] the decode norm in the product before it: IQ4_XS in Q4_K's kernels (EMBER_CUDA_IQ4XS_WIDE)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_IQ4XS_WIDE"}};
    set_env("EMBER_CUDA_IQ4XS_WIDE", "");  // (the default: on)
    check_norm_in_product({EMBER_TYPE_IQ4_XS});  // (mvk_norm_kernel XS, mvk_kernel NS XS)
}

// Q5_K products read the copy (mvk_kernel NS) that another type's product makes (here Q4_0's
// down product before the last norm; in Q5_K_M models planar Q6_K's): with the norm kernels
// skipped the chain is right only if the Q5_K product applied the norm; with
// EMBER_CUDA_Q5K_WIDE=0 (mvq_kernel: no NS form) the norm runs in its own launch, so skipping it
// leaves the result wrong.
TEST_CASE("[cuda] the decode norm in the product before it: a Q5_K reader") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_SKIP", "EMBER_CUDA_Q5K_WIDE"}};
    const auto      build = [](case_ctx & c) { return ffn_norm_chain(c, EMBER_TYPE_Q4_0, EMBER_TYPE_Q5_K, 512, 256, 512); };
    check_runs("norm in the product, a Q5_K reader", build, 2e-3, {3, 4});
    for (const char * wide : {"", "0"}) {
        set_env("EMBER_CUDA_Q5K_WIDE", wide);
        set_env("EMBER_CUDA_SKIP", "norm");
        const double e = nmse(run_on(cuda_device(), build, 13), run_on(ember_registry_cpu_device(), build, 13));
        set_env("EMBER_CUDA_SKIP", "");
        CAPTURE(wide);
        CAPTURE(e);
        if (*wide) CHECK_FALSE(e < 2e-3);
        else CHECK(e < 2e-3);
    }
}

TEST_CASE("[cuda] the decode norm in the product before it: INT4 / NF4 in the ext layout") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_INT4, EMBER_TYPE_NF4});
}

// NF4's decode-norm producers with their first slice's codebook lookups before the PDL wait
// (mvx_norm_kernel DEC; EMBER_CUDA_MVN_NF4_DEC: 0 none, 1 the default, producers of one block a
// group, 2 the SPLIT ones too): ffn_norm_chain with a down product 8192 wide over 2304 rows (72
// groups: one block a group on 132 SMs, 32 slices, 2 a warp), one 14336 wide over 256 rows (8
// groups: two blocks a group, EMBER_CUDA_MVN_SPLIT's, 28 slices each), an O product 4096 wide over
// 4096 rows (16 warps of one slice, all of it decoded) and rows of 67 blocks of 64 over 2304 rows (a
// partial last slice). The same bits at every setting (the same integer sums), against the CPU (eager,
// recorded, replayed), the DEC launches counted (=1: the split producers not among them).
TEST_CASE("[cuda] the decode norm in the product before it: NF4 producers with the first slice looked up before the wait (EMBER_CUDA_MVN_NF4_DEC)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_NORM", "EMBER_CUDA_MVN_NF4_DEC"}};
    set_env("EMBER_CUDA_MV_NORM", "2");
    struct shape {
        int64_t k, n, f;
    };
    for (const shape sh : {shape{256, 2304, 8192}, shape{256, 256, 14336}, shape{4096, 4096, 512}, shape{64 * 67, 2304, 64 * 67}}) {
        const std::string what = "nf4 dec k " + std::to_string(sh.k) + " n " + std::to_string(sh.n) + " f " + std::to_string(sh.f);
        CAPTURE(what);
        const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, EMBER_TYPE_NF4, EMBER_TYPE_NF4, sh.k, sh.n, sh.f); };
        std::vector<float> got[3];
        long long          ran[3];
        for (int mode = 0; mode < 3; mode++) {
            set_env("EMBER_CUDA_MVN_NF4_DEC", std::to_string(mode).c_str());
            const long long before = ember_cuda_nf4_norm_dec_launches();
            got[mode]              = run_on(cuda_device(), build, 21);
            ran[mode]              = ember_cuda_nf4_norm_dec_launches() - before;
            CAPTURE(mode);
            CHECK(got[mode] == got[0]);
            if (mode > 0) check_runs(what + " mode " + std::to_string(mode), build, 2e-3, {21, 22, 23});
        }
        const long long split = ember_cuda_mvn_split_launches();
        set_env("EMBER_CUDA_MVN_NF4_DEC", "2");
        run_on(cuda_device(), build, 21);
        const bool has_split = ember_cuda_mvn_split_launches() > split;
        CAPTURE(has_split);
        CHECK(ran[0] == 0);
        CHECK(ran[1] > 0);  // (every chain has a producer of one block a group: its first)
        CHECK(ran[2] >= ran[1]);
        CHECK((ran[2] > ran[1]) == has_split);
        set_env("EMBER_CUDA_MVN_NF4_DEC", "");
    }
}

// Decode-norm producers in two blocks a group of 32 rows (EMBER_CUDA_MVN_SPLIT: =1, the default,
// INT4 / NF4 / Q8_0 rows of more than 16 slices, =2 every type's, =3 every row of two or more; only
// where the groups fill at most half the SMs): INT4 / NF4 (mvx_norm_kernel), Q4_0 / Q8_0
// (mvr_norm_kernel), Q4_K (mvk_norm_kernel, a slice a 256-weight block). ffn_norm_chain at n = 256
// (8 groups, as the 1B's 64 on an H100 / H200), its first producer's rows 512 wide (2 to 4 slices:
// =3 only) and its down product's 8192 wide (32 slices or more: the 1B's) and 4224 (Q4_K 4352: 17
// slices or more, the last partial). Against the CPU (eager, recorded, replayed), the launches
// counted (none at =0, the down product's at =1 for the default's types and at =2, both at =3), one
// block a group's results within the rounding of another order of the halves' sums, and a second
// run the same bits (the counts back at zero); at =3 also with 8 and 4 warps a block
// (EMBER_CUDA_MVN_SPLIT_WARPS: two or more slices a warp), against the CPU and one block a group.
TEST_CASE("[cuda] the decode norm in the product before it: producers in two blocks a group (EMBER_CUDA_MVN_SPLIT)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_NORM", "EMBER_CUDA_MVN_SPLIT", "EMBER_CUDA_MVN_SPLIT_WARPS"}};
    set_env("EMBER_CUDA_MV_NORM", "2");
    for (ember_type t : {EMBER_TYPE_INT4, EMBER_TYPE_NF4, EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K}) {
        for (int64_t f : {static_cast<int64_t>(8192), static_cast<int64_t>(t == EMBER_TYPE_Q4_K ? 4352 : 4224)}) {
            const std::string what = std::string("split producers ") + ember_type_get_name(t) + " f " + std::to_string(f);
            CAPTURE(what);
            const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, t, t, 512, 256, f); };
            std::vector<float> got[4];
            long long          ran[4];
            for (int mode = 0; mode < 4; mode++) {
                set_env("EMBER_CUDA_MVN_SPLIT", std::to_string(mode).c_str());
                const long long before = ember_cuda_mvn_split_launches();
                got[mode]              = run_on(cuda_device(), build, 11);
                ran[mode]              = ember_cuda_mvn_split_launches() - before;
                CAPTURE(mode);
                REQUIRE(got[mode].size() == got[0].size());
                CHECK(nmse(got[mode], got[0]) < 1e-6);
                if (mode > 0) {
                    CHECK(run_on(cuda_device(), build, 11) == got[mode]);
                    check_runs(what + " mode " + std::to_string(mode), build, 2e-3, {11, 12, 13});
                }
            }
            const bool dflt = t == EMBER_TYPE_INT4 || t == EMBER_TYPE_NF4 || t == EMBER_TYPE_Q8_0;
            CHECK(ran[0] == 0);
            CHECK(ran[1] == (dflt ? ran[2] : 0));
            CHECK(ran[2] > 0);
            CHECK(ran[3] == 2 * ran[2]);
            // Fewer warps a split block (EMBER_CUDA_MVN_SPLIT_WARPS=8, 4: two or more slices a warp).
            set_env("EMBER_CUDA_MVN_SPLIT", "3");
            for (const char * warps : {"8", "4"}) {
                set_env("EMBER_CUDA_MVN_SPLIT_WARPS", warps);
                CAPTURE(warps);
                const std::vector<float> few = run_on(cuda_device(), build, 11);
                REQUIRE(few.size() == got[0].size());
                CHECK(nmse(few, got[0]) < 1e-6);
                check_runs(what + " warps " + warps, build, 2e-3, {11, 12, 13});
            }
            set_env("EMBER_CUDA_MVN_SPLIT_WARPS", "");
            set_env("EMBER_CUDA_MVN_SPLIT", "");
        }
    }
}

// FP8 (EMBER_CUDA_MV_NORM_FP8=1): the producer on tensor cores (mvx_fp8_norm_kernel) and its
// readers (mvx_fp8_mma_kernel NS: gate / up, and Q / K / V units with their RoPE and cache writes);
// an 8-bit producer's copy never read by an FP8 product, nor an FP8 producer's by an 8-bit product
// (ember_cuda_mv_norm_pair_ok: that norm keeps its own launch).
TEST_CASE("[cuda] the decode norm in the product before it: FP8 on tensor cores (EMBER_CUDA_MV_NORM_FP8=1)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2});
    const env_clear reset{{"EMBER_CUDA_MV_NORM_FP8", "EMBER_CUDA_SKIP"}};
    set_env("EMBER_CUDA_MV_NORM_FP8", "1");
    const auto skipped_norms = [](const builder & build, uint32_t seed) {  // against the CPU, with no norm kernel run
        set_env("EMBER_CUDA_SKIP", "norm");
        const std::vector<float> got = run_on(cuda_device(), build, seed);
        set_env("EMBER_CUDA_SKIP", "");
        return nmse(got, run_on(ember_registry_cpu_device(), build, seed));
    };
    for (ember_type wt : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        for (ember_type cache : {EMBER_TYPE_F16, EMBER_TYPE_F32}) {
            qkv_case p{wt, cache, EMBER_ROPE_NEOX, false, false, 8, 2, 64};
            p.normed = true;
            if (cache == EMBER_TYPE_F32) p.mode = EMBER_ROPE_NORMAL;
            const std::string what = std::string("fp8 qkv units over the copy ") + ember_type_get_name(wt) + " cache " + ember_type_get_name(cache);
            CAPTURE(what);
            const auto build = [=](case_ctx & c) { return qkv_layer(c, p); };
            check_case(what, build, 1e-3);
            const double e = skipped_norms(build, 5);
            CAPTURE(e);
            CHECK(e < 1e-3);
        }
    }
    // The producer with a warp's next span requested before this one's math (EMBER_CUDA_FP8_NORM_PIPE=1, forced:
    // rows of 2 spans a warp or more; 17 spans over 8 warps, the last warp's share short): the same
    // bits as without (the spans summed in the same order), against the CPU.
    {
        const env_clear reset_pipe{{"EMBER_CUDA_FP8_NORM_PIPE"}};
        for (ember_type wt : {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
            const std::string what = std::string("fp8 producer pipe ") + ember_type_get_name(wt);
            CAPTURE(what);
            const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, wt, wt, 4096, 512, 4352); };
            set_env("EMBER_CUDA_FP8_NORM_PIPE", "1");
            const long long          before = ember_cuda_fp8_norm_pipe_launches();
            const std::vector<float> piped  = run_on(cuda_device(), build, 9);
            CHECK(ember_cuda_fp8_norm_pipe_launches() >= before + 2);  // (both producers)
            check_runs(what, build, 1e-3, {3, 4, 6});
            set_env("EMBER_CUDA_FP8_NORM_PIPE", "0");
            CHECK(piped == run_on(cuda_device(), build, 9));
        }
    }
    const std::pair<ember_type, ember_type> mixed[] = {{EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3}, {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_Q4_0}};
    for (const auto & [wt, wt2] : mixed) {
        const std::string what = std::string("norm in the product, ") + ember_type_get_name(wt) + " products, last reader " + ember_type_get_name(wt2);
        CAPTURE(what);
        const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, wt, wt2, 512, 256, 512); };
        check_case(what, build, 1e-3);
        const double e = skipped_norms(build, 7);
        CAPTURE(e);
        CHECK_FALSE(e < 1e-3);  // the first norm in its product, the last one not: its own (skipped) launch
    }
}

TEST_CASE("[cuda] the decode norm in the product before it: planar Q6_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_norm_in_product({EMBER_TYPE_Q6_K});
}

// The gate / up products with their SWIGLU in one launch (mvr_glu_kernel, EMBER_CUDA_MV_GLU=2: at
// every size): a block owns 32 hidden units, makes silu(g) u and its 8-bit block for the down
// product; 8 warps a block (4 where 2 blocks an SM do not hold the grid: the 8B shape and larger;
// EMBER_CUDA_MV_GLU_W4=0: 8 at every size), the up rows' loads before the PDL wait too
// (EMBER_CUDA_MV_GLU_EARLY=2; by default at 8 warps: the ns runs) or after it (=1, the plain runs). Over the
// norm kernel's copy of x and (ns) over the O product's norm-in-product copy (EMBER_CUDA_MV_NORM=2:
// the kernel applies the norm's scale); the 1B and 8B widths, an odd chunk count (a partial slice
// of 8 chunks), one block of 32 units; the gate's floats read again (the launch writes them too).
// Against the CPU (eager, recorded, replayed), against the separate launches on the GPU (within
// rounding: the sums in another order), and the proof that the launch did the SWIGLU: with
// EMBER_CUDA_SKIP=glu no SWIGLU kernel runs and the results must still be right, without the
// fusion they must not be. INT4 in the ext layout too (not with EMBER_CUDA_MV_GLU_EXT=0); Q4_K
// (mvk_glu_kernel, not with EMBER_CUDA_MV_GLU_Q4K=0) and NF4 (mvx_glu_kernel's absmax table, not
// with EMBER_CUDA_MV_GLU_NF4=0) in test cases of their own; block-scaled FP8 too (mvx_fp8_glu_kernel
// on tensor cores, by default at every size, not with EMBER_CUDA_MV_GLU_FP8=0; ns: over an FP8
// producer's float copy, EMBER_CUDA_MV_NORM_FP8=1; with EMBER_CUDA_FP8_MMA_PIPE=1 the same bits).
void check_glu_launch(std::initializer_list<ember_type> types) {
    const env_clear reset{{"EMBER_CUDA_MV_GLU", "EMBER_CUDA_MV_GLU_EARLY", "EMBER_CUDA_MV_GLU_W4", "EMBER_CUDA_MV_GLU_EXT", "EMBER_CUDA_MV_GLU_SEP",
                           "EMBER_CUDA_MV_GLU_Q4K", "EMBER_CUDA_MV_GLU_NF4", "EMBER_CUDA_MV_GLU_FP8", "EMBER_CUDA_MV_NORM", "EMBER_CUDA_MV_NORM_FP8",
                           "EMBER_CUDA_FP8_MMA_PIPE", "EMBER_CUDA_SKIP", "EMBER_CUDA_MV_GLU_IQ4XS", "EMBER_CUDA_MV_GLU_Q5K",
                           "EMBER_CUDA_NF4_GLU_FORM"}};
    struct shape {
        int64_t k, f;
    };
    // (38400 units: 1200 blocks, more than one wave of any GPU at 4 an SM)
    const std::vector<shape> shapes = {{2048, 8192}, {4096, 14336}, {32 * 67, 32 * 5}, {256, 32}, {256, 32 * 1200}};
    // INT4 in the ext layout (mvx_glu_kernel; EMBER_CUDA_MV_GLU_EXT=0: not): widths of whole 128-weight
    // groups (the down product's too); small matrices (the CPU quantizer searches each group's
    // scale); 300 blocks: 4 warps a block at EMBER_CUDA_MV_GLU=2 on an H100 / H200.
    const std::vector<shape> shapes_int4 = {{256, 128}, {512, 384}, {256, 9600}};
    // NF4 (mvx_glu_kernel's absmax table): 5 slices over 4 warps (300 blocks: 4 warps at
    // EMBER_CUDA_MV_GLU=2; the pipelined loop), one slice (4 blocks), a partial slice (5 blocks), two
    // slices, the 8B width (16 slices), the widest row it takes (128 blocks: the largest table; these
    // two plain only, as the 8B shape below).
    const std::vector<shape> shapes_nf4 = {{1280, 9600}, {256, 128}, {320, 128}, {512, 384}, {4096, 256}, {8192, 128}};
    // Q4_K (mvk_glu_kernel at EMBER_CUDA_MV_GLU_Q4K=2: every width; =0: not): slices of whole
    // 256-weight blocks, the down product's rows too. First the forms with slices one after the
    // other (a time-limited run reaches them first): 9 slices over 8 warps, 5 over 4 (304 blocks);
    // then one slice, 8 blocks; 1200 blocks; the 1B and the 8B widths.
    const std::vector<shape> shapes_q4k = {{2304, 256}, {1280, 9728}, {256, 256}, {256, 32 * 1200}, {2048, 8192}, {4096, 14336}};
    // IQ4_XS (mvk_glu_kernel XS; EMBER_CUDA_MV_GLU_IQ4XS=0: not) and Q5_K (mvk5_glu_kernel;
    // EMBER_CUDA_MV_GLU_Q5K=0: not), both on by default since session 70: Q4_K's forms (9 slices
    // over 8 warps, 5 over 4 at 304 blocks, one slice, the 8B width's 16 slices; Q5_K's warps two
    // sets of half the units each, so 9 slices over 4 warps, 5 over 2, one slice in 2 warps of one),
    // every width a multiple of 256 (the down product's too); small, the CPU quantizers searching
    // every sub-block's scale.
    const std::vector<shape> shapes_iq4xs = {{2304, 256}, {1280, 9728}, {256, 256}, {4096, 512}};
    for (ember_type t : types) {
        const bool q4q8 = t == EMBER_TYPE_Q4_0 || t == EMBER_TYPE_Q8_0;
        const bool fp8  = t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
        const bool   xs_q5  = t == EMBER_TYPE_IQ4_XS || t == EMBER_TYPE_Q5_K;  // (Q4_K's kernels, their own switch)
        const char * xs_q5_sw = t == EMBER_TYPE_Q5_K ? "EMBER_CUDA_MV_GLU_Q5K" : "EMBER_CUDA_MV_GLU_IQ4XS";
        const char * nf4_mma  = std::getenv("EMBER_CUDA_MV_GLU_NF4_MMA");  // (set by the NF4 cases)
        const bool   nf4_tc   = t == EMBER_TYPE_NF4 && nf4_mma && std::string(nf4_mma) == "1";
        for (const shape & sh : t == EMBER_TYPE_INT4   ? shapes_int4
                                : t == EMBER_TYPE_NF4  ? shapes_nf4
                                : t == EMBER_TYPE_Q4_K ? shapes_q4k
                                : xs_q5                ? shapes_iq4xs
                                                       : shapes) {
            for (int variant = ffn_plain; variant <= ffn_after_product; variant++) {  // the gate read again; ns: x after a product
                // The 8B shape (4 warps, 4 slices a warp) plain only: its CPU side (three matrices of
                // 58.7M weights built anew for each of ~15 runs) took most of the test's minutes; the
                // other variants' forms run on the other shapes (ns at 4 warps: the 1200 blocks;
                // 8 warps, slices one after the other: Q8_0 at 2048 wide, 16 slices, 2 a warp).
                if ((sh.f == 14336 || (t == EMBER_TYPE_NF4 && sh.k >= 4096)) && variant != ffn_plain) continue;
                const bool        ns   = variant == ffn_after_product;
                const std::string what = std::string("gate/up + swiglu in one launch ") + ember_type_get_name(t) + " k " + std::to_string(sh.k) +
                                         " f " + std::to_string(sh.f) + (variant == ffn_gate_read_twice ? " (gate read again)" : ns ? " (ns)" : "");
                CAPTURE(what);
                const auto build = [=](case_ctx & c) { return decode_ffn(c, t, sh.k, sh.f, ffn_variant(variant)); };
                set_env("EMBER_CUDA_MV_NORM", ns ? "2" : "0");
                set_env("EMBER_CUDA_MV_NORM_FP8", ns && fp8 ? "1" : "");
                set_env("EMBER_CUDA_MV_GLU", "2");
                set_env("EMBER_CUDA_MV_GLU_Q4K", "2");  // (Q4_K at every width too)
                set_env("EMBER_CUDA_MV_GLU_EARLY", variant == ffn_gate_read_twice ? "2" : ns ? "" : "1");  // the up rows' loads before the wait / by default / after it
                set_env("EMBER_CUDA_MV_GLU_W4", variant == ffn_gate_read_twice ? "0" : "");     // 8 warps a block at every size
                check_runs(what, build, 1e-3, {7, 8, 9});
                const std::vector<float> fused = run_on(cuda_device(), build, 6);
                if (q4q8 && sh.f == 32 * 1200 && variant != ffn_gate_read_twice) {
                    // 4 warps: the scales in registers of their own (the default) or merged two to
                    // a word (EMBER_CUDA_MV_GLU_SEP=0): the same values, the same bits
                    set_env("EMBER_CUDA_MV_GLU_SEP", "1");
                    const std::vector<float> sep = run_on(cuda_device(), build, 6);
                    set_env("EMBER_CUDA_MV_GLU_SEP", "0");
                    const std::vector<float> merged = run_on(cuda_device(), build, 6);
                    set_env("EMBER_CUDA_MV_GLU_SEP", "");
                    CHECK(sep == merged);
                    CHECK(sep == fused);
                }
                if (nf4_tc && variant != ffn_gate_read_twice) {
                    // the launch's other forms (EMBER_CUDA_NF4_GLU_FORM): 1 / 2, the loads' L2
                    // requests widened, the same math, so the same bits; 3 / 4, the halves taking
                    // alternate spans, the same sums in another order; the launches counted
                    for (const char * form : {"1", "2", "3", "4"}) {
                        CAPTURE(form);
                        set_env("EMBER_CUDA_NF4_GLU_FORM", form);
                        const long long          before = ember_cuda_nf4_glu_form_launches();
                        const std::vector<float> other  = run_on(cuda_device(), build, 6);
                        CHECK(ember_cuda_nf4_glu_form_launches() > before);
                        if (form[0] <= '2') CHECK(other == fused);
                        else CHECK(nmse(other, fused) < 1e-8);
                    }
                    set_env("EMBER_CUDA_NF4_GLU_FORM", "");
                }
                if (fp8 && !ns) {  // the spans through two buffers (every FP8 product of the graph): the same bits
                    set_env("EMBER_CUDA_FP8_MMA_PIPE", "1");
                    const std::vector<float> piped = run_on(cuda_device(), build, 6);
                    set_env("EMBER_CUDA_FP8_MMA_PIPE", "");
                    CHECK(piped == fused);
                }
                set_env("EMBER_CUDA_MV_GLU", "0");
                const std::vector<float> plain = run_on(cuda_device(), build, 6);
                const double             e     = nmse(fused, plain);
                CAPTURE(e);
                CHECK(e < 1e-6);
                // (a seed no run has used: a skipped SWIGLU's memory may hold an earlier run's results)
                const std::vector<float> want = run_on(ember_registry_cpu_device(), build, 12);
                set_env("EMBER_CUDA_SKIP", "glu");
                const double eo = nmse(run_on(cuda_device(), build, 12), want);
                set_env("EMBER_CUDA_MV_GLU", "2");
                const double es = nmse(run_on(cuda_device(), build, 12), want);
                // By default only where the grid is one wave (2 blocks an SM of 8 warps, 4 of 4):
                // never 1200 blocks; always 8 blocks or fewer (Q4_K too at any number of slices a
                // warp; at EMBER_CUDA_MV_GLU_Q4K=1 only where every warp has one, so not 9 slices
                // over 8 warps). (The 8B shape's 448: on 112 SMs or more.) FP8 at every size.
                const bool   small         = sh.f <= 256 || (fp8 && sh.f != 14336);
                const bool   multi         = t == EMBER_TYPE_Q4_K && sh.k / 256 > 8;
                const bool   check_default = small || sh.f == 32 * 1200;  // (each run builds the weights anew: only where checked)
                set_env("EMBER_CUDA_MV_GLU", "");
                set_env("EMBER_CUDA_MV_GLU_Q4K", "");
                const double ed = check_default ? nmse(run_on(cuda_device(), build, 12), want) : 0.0;
                double       e1 = 0.0;
                if (small && multi) {
                    set_env("EMBER_CUDA_MV_GLU_Q4K", "1");
                    e1 = nmse(run_on(cuda_device(), build, 12), want);
                    set_env("EMBER_CUDA_MV_GLU_Q4K", "");
                }
                set_env("EMBER_CUDA_SKIP", "");
                CAPTURE(es);
                CAPTURE(eo);
                CAPTURE(ed);
                CAPTURE(e1);
                CHECK(es < 1e-3);
                CHECK_FALSE(eo < 1e-3);
                if (sh.f == 32 * 1200 && !fp8) CHECK_FALSE(ed < 1e-3);
                if (small) CHECK(ed < 1e-3);
                if (small && multi) CHECK_FALSE(e1 < 1e-3);
                if (!q4q8 && variant == 0) {  // INT4 not with EMBER_CUDA_MV_GLU_EXT=0, NF4 not with _NF4=0, Q4_K not with _Q4K=0, IQ4_XS / Q5_K not with _IQ4XS=0 / _Q5K=0
                    const char * sw = t == EMBER_TYPE_INT4 ? "EMBER_CUDA_MV_GLU_EXT"
                                      : t == EMBER_TYPE_NF4  ? "EMBER_CUDA_MV_GLU_NF4"
                                      : fp8                  ? "EMBER_CUDA_MV_GLU_FP8"
                                      : xs_q5                ? xs_q5_sw
                                                             : "EMBER_CUDA_MV_GLU_Q4K";
                    set_env(sw, "0");
                    set_env("EMBER_CUDA_MV_GLU", "2");
                    set_env("EMBER_CUDA_SKIP", "glu");
                    CHECK_FALSE(nmse(run_on(cuda_device(), build, 12), want) < 1e-3);
                    set_env("EMBER_CUDA_SKIP", "");
                    set_env(sw, "");
                }
            }
        }
    }
}

TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_glu_launch({EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_INT4});
}

TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: Q4_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_glu_launch({EMBER_TYPE_Q4_K});
}

TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: IQ4_XS") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_glu_launch({EMBER_TYPE_IQ4_XS});
}

TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: Q5_K") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_glu_launch({EMBER_TYPE_Q5_K});
}

// NF4's scalar launch (mvx_glu_kernel) at every size: EMBER_CUDA_MV_GLU_NF4_MMA=0 (by default the
// tensor-core launch takes the grids the scalar one runs at 4 warps a block).
TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: NF4") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_GLU_NF4_MMA"}};
    set_env("EMBER_CUDA_MV_GLU_NF4_MMA", "0");
    check_glu_launch({EMBER_TYPE_NF4});
}

// NF4 on tensor cores (mvx_nf4_glu32_kernel, EMBER_CUDA_MV_GLU_NF4_MMA=1: at every size): 32
// hidden units a block, the row's spans in two halves (the odd 5-span row of 1280 included).
TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: NF4 on tensor cores") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_MV_GLU_NF4_MMA"}};
    set_env("EMBER_CUDA_MV_GLU_NF4_MMA", "1");
    check_glu_launch({EMBER_TYPE_NF4});
}

TEST_CASE("[cuda] decode FFN: the gate / up products with their SWIGLU in one launch: FP8 on tensor cores") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    check_glu_launch({EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2});
}

// The streaming matvec (mvr_stream_kernel: a resident grid, rows through per-warp cp.async rings;
// by default the launches of rows 2048 wide, EMBER_CUDA_MV_STREAM=2 / 4 also 4096 wide) against
// mvr_kernel (EMBER_CUDA_MV_STREAM=0): the same arithmetic in the same order, so the same bits, at
// 2 and 4 stages; the gate/up reading the norm-in-product copy (EMBER_CUDA_MV_NORM=2: its NS form)
// and the plain products over the norm kernel's copy (=0: gate/up and O); the 8B widths, the 1B
// widths (two rows a warp in mvr_kernel) and one 32-row block; and the default against the CPU.
TEST_CASE("[cuda] the streaming matvec: the same bits as mvr_kernel") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // (gate and up through the matvec kernels: EMBER_CUDA_MV_GLU=0, not the launch with the SWIGLU)
    const env_clear reset{{"EMBER_CUDA_MV_NORM", "EMBER_CUDA_MV_STREAM", "EMBER_CUDA_MV_GLU"}};
    set_env("EMBER_CUDA_MV_GLU", "0");
    struct shape {
        int64_t k, n, f;
    };
    const shape shapes[] = {{4096, 4096, 14336}, {2048, 2048, 8192}, {256, 32, 512}};
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0}) {
        for (const shape & sh : shapes) {
            const auto build = [=](case_ctx & c) { return ffn_norm_chain(c, t, t, sh.k, sh.n, sh.f); };
            const std::vector<float> want = run_on(ember_registry_cpu_device(), build, 11);
            for (const char * norm : {"2", "0"}) {
                set_env("EMBER_CUDA_MV_NORM", norm);
                set_env("EMBER_CUDA_MV_STREAM", "0");
                const std::vector<float> base = run_on(cuda_device(), build, 11);
                for (const char * stream : {"", "2", "4"}) {
                    set_env("EMBER_CUDA_MV_STREAM", stream);
                    const std::vector<float> got = run_on(cuda_device(), build, 11);
                    const std::string what = std::string(ember_type_get_name(t)) + " k " + std::to_string(sh.k) + " EMBER_CUDA_MV_NORM=" + norm +
                                             " EMBER_CUDA_MV_STREAM=" + stream;
                    CAPTURE(what);
                    REQUIRE(got.size() == base.size());
                    // Without the stream, Q8_0 rows 4096 wide (256 chunks) outside a group (the O
                    // product here with EMBER_CUDA_MV_NORM=0, the last product) take
                    // mvr_split_kernel, which sums in another order: there the stream is checked
                    // against the CPU only. Everywhere else (the default's rows 2048 wide too) the bits.
                    const bool split = t == EMBER_TYPE_Q8_0 && sh.k == 4096 && *stream != '\0';
                    size_t     differ = 0;
                    for (size_t i = 0; i < got.size(); i++) differ += got[i] != base[i];
                    if (!split) CHECK(differ == 0);
                    CHECK(nmse(got, want) < 1e-3);
                }
            }
        }
    }
}

// F16 / BF16 decode products with 16-byte loads (EMBER_CUDA_F16_WIDE, the default: mvh_kernel)
// and in the generic kernel (=0): rows of one chunk a lane and of several steps, a partial step, odd row counts (a
// warp's second row past the end), columns; rows of a width that is no multiple of 8, a batched
// product and a strided x view take the generic kernel (the launch count says which ran).
TEST_CASE("[cuda] F16 / BF16 decode matvec with 16-byte loads (EMBER_CUDA_F16_WIDE)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_F16_WIDE", "EMBER_CUDA_F16_FORM", "EMBER_CUDA_F16_GROUP", "EMBER_CUDA_F16_FUSE"}};
    set_env("EMBER_CUDA_F16_FUSE", "0");  // (the launch counts below are mvh_kernel's; its fused forms: the next case)
    // (the generic kernel at EMBER_CUDA_F16_WIDE=0; the wide one in each EMBER_CUDA_F16_FORM)
    struct form_case {
        const char *wide, *form;
    };
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_BF16}) {
        // (the CPU rounds x to the weight's type first; the GPU multiplies x's floats: BF16's 8-bit
        // mantissa puts that at ~1e-5)
        const double tol = t == EMBER_TYPE_BF16 ? 1e-4 : 1e-5;
        for (const form_case & fc : {form_case{"", ""}, form_case{"", "0"}, form_case{"", "2"}, form_case{"", "3"}, form_case{"0", ""}}) {
            const char * wide = fc.wide;
            set_env("EMBER_CUDA_F16_WIDE", wide);
            set_env("EMBER_CUDA_F16_FORM", fc.form);
            for (int64_t k : {8, 256, 4096, 2048 + 8 * 37}) {
                for (int64_t n : {67, 7}) {
                    for (int64_t m : {1, 3}) {
                        const long long before = ember_cuda_mv_f16_wide_launches();
                        check_case(std::string("matvec ") + ember_type_get_name(t) + " EMBER_CUDA_F16_WIDE=" + (*wide ? wide : "(default)") +
                                       " EMBER_CUDA_F16_FORM=" + fc.form + " k=" + std::to_string(k) +
                                       " n=" + std::to_string(n) + " m=" + std::to_string(m),
                                   [=](case_ctx & c) {
                                       return ember_mul_mat(c.g, c.rand_leaf(t, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
                                   }, tol);
                        CHECK((ember_cuda_mv_f16_wide_launches() > before) == (*wide != '0'));
                    }
                }
            }
        }
        set_env("EMBER_CUDA_F16_WIDE", "");
        set_env("EMBER_CUDA_F16_FORM", "");
        const auto generic = [&](const std::string & what, const builder & build) {
            const long long before = ember_cuda_mv_f16_wide_launches();
            check_case(what, build, tol);
            CHECK(ember_cuda_mv_f16_wide_launches() == before);
        };
        const std::string tn = ember_type_get_name(t);
        generic("matvec " + tn + " k=4100 (not a multiple of 8)", [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.rand_leaf(t, 4100, 9), c.rand_leaf(EMBER_TYPE_F32, 4100, 2));
        });
        generic("matvec " + tn + " batched", [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.rand_leaf(t, 256, 9, 2), c.rand_leaf(EMBER_TYPE_F32, 256, 1, 4));
        });
        generic("matvec " + tn + " of an x view 4 bytes off the 16-byte alignment", [=](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 512, 6);
            const int64_t  ne[4] = {256, 3, 1, 1};
            const size_t   nb[4] = {4, a->nb[1] * 2, a->nb[1] * 6, a->nb[1] * 6};
            return ember_mul_mat(c.g, c.rand_leaf(t, 256, 9), ember_view_strided(c.g, a, ne, nb, 4));
        });
        // x's columns two rows apart (16-byte aligned): the wide kernel.
        const long long before = ember_cuda_mv_f16_wide_launches();
        check_case("matvec " + tn + " of a strided x view", [=](case_ctx & c) {
            ember_tensor * a     = c.rand_leaf(EMBER_TYPE_F32, 512, 6);
            const int64_t  ne[4] = {512, 3, 1, 1};
            const size_t   nb[4] = {4, a->nb[1] * 2, a->nb[1] * 6, a->nb[1] * 6};
            return ember_mul_mat(c.g, c.rand_leaf(t, 512, 9), ember_view_strided(c.g, a, ne, nb, a->nb[1]));
        }, tol);
        CHECK(ember_cuda_mv_f16_wide_launches() > before);
        // Products over one x in one launch (EMBER_CUDA_F16_GROUP=1; grouped_matvecs, one column):
        // 2 launches a run instead of 5, the same results, in every form.
        const auto grouped = [=](case_ctx & c) { return grouped_matvecs(c, t, 1); };
        long long launches[2] = {};
        for (const char * group : {"0", "1"}) {
            set_env("EMBER_CUDA_F16_GROUP", group);
            for (const char * form : {"", "0", "2", "3"}) {  // ("": 1, the default)
                if (*group == '0' && *form) continue;
                set_env("EMBER_CUDA_F16_FORM", form);
                const long long b0 = ember_cuda_mv_f16_wide_launches();
                check_case("grouped matvecs " + tn + " EMBER_CUDA_F16_GROUP=" + group + " EMBER_CUDA_F16_FORM=" + form, grouped, 10 * tol);
                if (!*form) launches[*group - '0'] = ember_cuda_mv_f16_wide_launches() - b0;
            }
        }
        set_env("EMBER_CUDA_F16_GROUP", "");
        set_env("EMBER_CUDA_F16_FORM", "");
        CHECK(launches[0] > 0);
        CHECK(launches[0] * 2 == launches[1] * 5);
    }
}

// F16 / BF16 decode units and gate / up with their SWIGLU (EMBER_CUDA_F16_FUSE, the default;
// mvh_fused_kernel): a layer's Q / K / V with the RoPE (NORMAL, NEOX; frequency factors) and the
// cache writes (F16, F32) in their stores, in one launch (EMBER_CUDA_F16_GROUP=1) and in three; a
// decode FFN's gate / up with the SWIGLU (8B's 14336 rows, 40 and 256; gate read again elsewhere or
// not): against the CPU (eager, recorded, replayed), the fused launches counted, and the proof
// that the stores did the work: with EMBER_CUDA_SKIP=other (no ROPE / SET_ROWS kernel) or =glu (no
// SWIGLU kernel) the results are the GPU's plain launches' with the switch on (the same
// arithmetic: within 1e-9), and not with it off (against the GPU, not the CPU: the CPU rounds x
// to BF16 first, which the layer's attention carried to 3.9e-3 for one seed, session 68). The SWIGLU moved to scratch memory (where the
// allocator put it over x; EMBER_CUDA_F16_GLU_MOVE=1 moves it wherever it may) against the CPU too.
TEST_CASE("[cuda] F16 / BF16 decode: Q / K / V units and gate / up with the SWIGLU in one launch (EMBER_CUDA_F16_FUSE)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_F16_FUSE", "EMBER_CUDA_F16_GROUP", "EMBER_CUDA_F16_GLU_MOVE", "EMBER_CUDA_SKIP"}};
    // proof: the graph the SKIP proof runs: build, or, where build has other kernels the skip
    // leaves out too (the ADD and SCALE of a Q read elsewhere: EMBER_CUDA_SKIP=other), the same
    // graph without them (with them e[1] was 1.3e-4, their term missing, and what the final
    // product read in the ADD's place was the allocator's to decide; session 69).
    const auto check_fused = [](const std::string & what, const builder & build, const char * skip, const std::vector<uint32_t> & seeds,
                                const builder & proof) {
        CAPTURE(what);
        set_env("EMBER_CUDA_F16_FUSE", "1");
        const long long before = ember_cuda_mv_f16_fused_launches();
        check_runs(what, build, 1e-3, seeds);
        CHECK(ember_cuda_mv_f16_fused_launches() > before);
        set_env("EMBER_CUDA_F16_FUSE", "0");
        const std::vector<float> plain = run_on(cuda_device(), proof, 5);
        set_env("EMBER_CUDA_SKIP", skip);
        double e[2];
        for (int on = 0; on < 2; on++) {
            set_env("EMBER_CUDA_F16_FUSE", on ? "1" : "0");
            e[on] = nmse(run_on(cuda_device(), proof, 5), plain);
        }
        set_env("EMBER_CUDA_SKIP", "");
        set_env("EMBER_CUDA_F16_FUSE", "");
        CAPTURE(e[0]);
        CAPTURE(e[1]);
        CHECK_FALSE(e[0] < 1e-3);
        CHECK(e[1] < 1e-9);
    };
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_BF16}) {
        const std::string tn = ember_type_get_name(t);
        for (const char * group : {"0", "1"}) {
            set_env("EMBER_CUDA_F16_GROUP", group);
            for (int32_t mode : {EMBER_ROPE_NORMAL, EMBER_ROPE_NEOX}) {
                for (const qkv_case & p : {qkv_case{t, EMBER_TYPE_F16, mode, false, false, 8, 2, 64},
                                           qkv_case{t, EMBER_TYPE_F32, mode, true, true, 4, 4, 128}}) {
                    check_fused("f16 units " + tn + " EMBER_CUDA_F16_GROUP=" + group + " mode " + std::to_string(mode) + " cache " +
                                    ember_type_get_name(p.cache) + " hd " + std::to_string(p.hd),
                                [=](case_ctx & c) { return qkv_layer(c, p); }, "other", {3, 4}, [=](case_ctx & c) {
                                    qkv_case r          = p;
                                    r.q_read_elsewhere = false;
                                    return qkv_layer(c, r);
                                });
                }
            }
        }
        set_env("EMBER_CUDA_F16_GROUP", "");
        for (int64_t f : {int64_t{14336}, int64_t{40}, int64_t{256}}) {
            for (bool gate_read_twice : {false, true}) {
                const std::string what  = "f16 gate/up + swiglu + down " + tn + " f=" + std::to_string(f) + (gate_read_twice ? " (gate read twice)" : "");
                const auto        build = [=](case_ctx & c) { return decode_ffn(c, t, 512, f, gate_read_twice ? ffn_gate_read_twice : ffn_plain); };
                check_fused(what, build, "glu", {7, 8}, build);
                set_env("EMBER_CUDA_F16_GLU_MOVE", "1");
                const long long moved = ember_cuda_mv_f16_glu_moved();
                check_runs(what + " (EMBER_CUDA_F16_GLU_MOVE=1)", build, 1e-3, {7, 8});
                CHECK(ember_cuda_mv_f16_glu_moved() > moved);
                set_env("EMBER_CUDA_F16_GLU_MOVE", "");
            }
        }
    }
}

TEST_CASE("[cuda] Q4_K matvec with 16-byte loads") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // mvk_kernel: one row per warp below 4096 rows, two from there (4100: a tail warp) and for
    // rows of at most 2048 weights whatever their count (k = 2048, n = 67: a pair's tail); 9 blocks
    // of 256 per row: 72 chunks, not a multiple of the 32 lanes; 56 blocks: the FFN down row (a
    // warp's 7 steps); 3 columns; 67 rows: block tails. Every lane's scale bytes (sub-blocks 0-7
    // of each block: the two ways the 6-bit scales and mins are packed) meet random headers.
    for (int64_t n : {4100, 67}) {
        for (int64_t k : {2048, 256 * 9, 256 * 56}) {
            const int64_t m = k == 256 * 9 ? 3 : 1;
            check_case("q4_k matvec k=" + std::to_string(k) + " n=" + std::to_string(n) + " m=" + std::to_string(m), [=](case_ctx & c) {
                return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, k, n), c.rand_leaf(EMBER_TYPE_F32, k, m, 1, -3.0f, 3.0f));
            }, 1e-3);
        }
    }
    // 4096-wide rows (one step of U = 4 chunks) in a launch of one wave: one row a warp
    // (q4k_one_step; 4100 rows: 1025 blocks, a tail warp), and at several waves two (3 columns)
    for (int64_t m : {1, 3}) {
        check_case("q4_k matvec k=4096 n=4100 m=" + std::to_string(m), [=](case_ctx & c) {
            return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 4096, 4100), c.rand_leaf(EMBER_TYPE_F32, 4096, m, 1, -3.0f, 3.0f));
        }, 1e-3);
    }
    // gate / up in one grouped launch, then the down product over their 5120-wide SWIGLU
    const builder ffn = [](case_ctx & c) {
        ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, 256 * 9, 1, 1, -3.0f, 3.0f);
        ember_tensor * gt = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 256 * 9, 5120), x);
        ember_tensor * up = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 256 * 9, 5120), x);
        return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 5120, 300), ember_swiglu(c.g, gt, up));
    };
    check_case("q4_k grouped gate/up + down", ffn, 1e-3);
    // The default takes a whole 32-byte group of qs a lane (QW = 2); EMBER_CUDA_Q4K_WIDE=0 half
    // of one (QW = 1, two lanes a group): the same sums in another order, both against the CPU,
    // in each of the three kernels (pairs of rows, one row a warp, rows of 2048 weights).
    const std::vector<std::pair<std::string, builder>> forms = {
        {"grouped gate/up + down", ffn},
        {"k=4096 n=4100, one a warp", [](case_ctx & c) {
             return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 4096, 4100), c.rand_leaf(EMBER_TYPE_F32, 4096, 1, 1, -3.0f, 3.0f));
         }},
        {"k=2048 n=67", [](case_ctx & c) {
             return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_K, 2048, 67), c.rand_leaf(EMBER_TYPE_F32, 2048, 1, 1, -3.0f, 3.0f));
         }},
    };
    for (const auto & [what, build] : forms) {
        CAPTURE(what);
        const std::vector<float> want = run_on(ember_registry_cpu_device(), build, 9);
        const std::vector<float> wide = run_on(cuda_device(), build, 9);
        const std::vector<float> half = run_on_cuda_with("EMBER_CUDA_Q4K_WIDE", "0", build, 9);
        REQUIRE(wide.size() == want.size());
        REQUIRE(half.size() == want.size());
        const double e_wide = nmse(wide, want), e_half = nmse(half, want), e_forms = nmse(wide, half);
        CAPTURE(e_wide);
        CAPTURE(e_half);
        CAPTURE(e_forms);
        CHECK(e_wide < 1e-3);
        CHECK(e_half < 1e-3);
        CHECK(e_forms < 1e-8);  // integer sums; only the float additions' order differs
        CHECK(e_forms > 0.0);   // two different kernels ran (a switch that did nothing would give the same bits)
    }
}

TEST_CASE("[cuda] fused residual ADD + RMS_NORM + MUL + quantized x") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // Two layers: the second norm's input is the first residual ADD (fused with it), its
    // MUL's result is quantized in the same kernel for the three matvecs that follow, and
    // the ADD's result is read again by the last ADD. Run three times (eager, recorded, replayed).
    set_env("EMBER_CUDA_GRAPHS", "1");
    for (ember_type t : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_K}) {
        check_runs(std::string("add + norm + mul + matvecs ") + ember_type_get_name(t), [=](case_ctx & c) {
            const int64_t  n  = 1024;
            ember_tensor * x  = c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, -2.0f, 2.0f);
            ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * x2 = ember_add(c.g, x, ember_mul_mat(c.g, c.weight_leaf(t, n, n), h));
            ember_tensor * h2 = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * a  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * b  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * d  = ember_mul_mat(c.g, c.weight_leaf(t, n, 256), h2);
            ember_tensor * x3 = ember_add(c.g, x2, ember_mul_mat(c.g, c.weight_leaf(t, 256, n), ember_swiglu(c.g, ember_add(c.g, a, d), b)));
            // ADD + RMS_NORM without a MUL (no quantized copy), read by a matvec
            return ember_mul_mat(c.g, c.weight_leaf(t, n, 64), ember_rms_norm(c.g, ember_add(c.g, x3, x2), 1e-5f));
        }, 1e-3, {41, 42, 43});
    }
    set_env("EMBER_CUDA_GRAPHS", "");
    // The decode norm kernel (rms_norm_dec_kernel: 256 threads, float4 per thread, 1 to 8 per
    // thread): model widths, partial warps (1056: the quantizer's 8-lane groups at a warp's
    // tail), widths with no quantized copy (1000, 3000: n % 32 != 0), several rows.
    for (int64_t n : {2048, 4096, 8192, 1056, 1000, 3000}) {
        for (int64_t rows : {1, 3}) {
            check_case("decode norm kernel n=" + std::to_string(n) + " rows=" + std::to_string(rows), [=](case_ctx & c) {
                ember_tensor * x2 = ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, n, rows, 1, -2.0f, 2.0f), c.rand_leaf(EMBER_TYPE_F32, n, rows));
                ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
                // the quantized copy feeds the Q8_0 matvec (n % 32 == 0); x2 is read again
                const ember_type wt = n % 32 == 0 ? EMBER_TYPE_Q8_0 : EMBER_TYPE_F16;
                return ember_add(c.g, ember_mul_mat(c.g, c.weight_leaf(wt, n, 40), h), ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, n, 40), x2));
            }, 1e-3);
        }
    }
    check_case("decode norm kernel, norm + mul without the add", [](case_ctx & c) {
        ember_tensor * h = ember_mul(c.g, ember_rms_norm(c.g, c.rand_leaf(EMBER_TYPE_F32, 4096, 1, 1, -3.0f, 3.0f), 1e-5f),
                                     c.rand_leaf(EMBER_TYPE_F32, 4096, 1));
        return ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q4_0, 4096, 64), h);
    }, 1e-3);
    // The MUL's floats are left unwritten when only integer matvecs read it (the cases above);
    // these read them elsewhere too, so they must be written: an ADD, a matvec over F16
    // weights (float x), a SWIGLU.
    for (int which = 0; which < 3; which++) {
        check_case("decode norm kernel, the MUL's floats read elsewhere " + std::to_string(which), [=](case_ctx & c) {
            const int64_t  n  = 1024;
            ember_tensor * x2 = ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, n, 1, 1, -2.0f, 2.0f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, n, 1));
            ember_tensor * y  = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q8_0, n, n), h);
            if (which == 0) return ember_add(c.g, y, h);
            if (which == 1) return ember_add(c.g, y, ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_F16, n, n), h));
            return ember_swiglu(c.g, y, h);
        }, 1e-3);
    }
    // Rows of x whose width is not a multiple of 32 (no quantized copy), several rows.
    check_case("add + norm + mul, 100 wide, 3 rows", [](case_ctx & c) {
        ember_tensor * x2 = ember_add(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 3), c.rand_leaf(EMBER_TYPE_F32, 100, 3));
        ember_tensor * h  = ember_mul(c.g, ember_rms_norm(c.g, x2, 1e-5f), c.rand_leaf(EMBER_TYPE_F32, 100, 1));
        return ember_add(c.g, ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F16, 100, 40), h), ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_F32, 100, 40), x2));
    }, 1e-5);
}

TEST_CASE("[cuda] NF4 rows of an odd number of blocks (unaligned row headers)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // 192 weights = 3 blocks of 33 bytes after an 8-byte header: 107-byte rows, so every other
    // row's header floats sit off 4-byte alignment. GGUF layout (not flagged as a weight).
    check_case("nf4 get_rows, 107-byte rows", [](case_ctx & c) {
        return ember_get_rows(c.g, c.rand_leaf(EMBER_TYPE_NF4, 192, 7), c.i32_leaf({1, 6, 3, 0}));
    }, 1e-12);
    check_case("nf4 matvec, 107-byte rows", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_NF4, 192, 9), c.rand_leaf(EMBER_TYPE_F32, 192, 2));
    }, 1e-4);  // the CPU rounds x to 8 bits (H200: 1.8e-5)
    check_case("nf4 prefill, 107-byte rows", [](case_ctx & c) {
        return ember_mul_mat(c.g, c.rand_leaf(EMBER_TYPE_NF4, 192, 9), c.rand_leaf(EMBER_TYPE_F32, 192, 20));
    }, 1e-3);
}

TEST_CASE("[cuda] decode attention quantizing its output for the O matvec") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    // ATTN, VIEW, MUL_MAT as a layer has them: the attention kernel (or its split merge, for the
    // long caches) writes the quantized copy the O matvec reads, instead of a quantize launch.
    // One and two tokens (two columns of x), GQA, keys split across blocks from a few hundred on.
    for (ember_type kv : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0}) {
        for (ember_type wt : {EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0}) {
            for (int64_t n_kv : {40, 2100}) {
                for (int64_t n_tok : {1, 2}) {
                    const int64_t     d = 128, n_head = 8, n_head_kv = 2;
                    const std::string what = std::string("attn + O matvec, cache ") + ember_type_get_name(kv) + ", weights " +
                                             ember_type_get_name(wt) + ", n_kv=" + std::to_string(n_kv) + ", tokens " + std::to_string(n_tok);
                    check_runs(what, [=](case_ctx & c) {
                        ember_tensor * q = c.rand_leaf(EMBER_TYPE_F32, d, n_head, n_tok);
                        ember_tensor * o = ember_attn(c.g, q, c.rand_leaf(kv, d, n_head_kv, n_kv, -2.0f, 2.0f), c.rand_leaf(kv, d, n_head_kv, n_kv),
                                                      nullptr, 1.0f / std::sqrt(static_cast<float>(d)));
                        return ember_mul_mat(c.g, c.weight_leaf(wt, d * n_head, 256), ember_view(c.g, o, d * n_head, n_tok));
                    }, 1e-4, {5, 6});
                }
            }
        }
    }
}

// The CUDA FP8 codec (cuda-fp8.h) compiled for the host: no GPU needed. The device build runs
// the same source (with __fmul_rn / __fadd_rn for the multiplications and the rounding).
// The rule every EMBER_CUDA_* switch is read by (no device needed): on unless "0"; an integer
// choice only from its allowed values, anything else the default.
TEST_CASE("[cuda] environment switches: on unless 0, integer choices from a set") {
    const char * name = "EMBER_CUDA_TEST_SWITCH";
    set_env(name, "");
    CHECK(ember_cuda_env_on(name));
    CHECK(ember_cuda_env_choice(name, 4, {1, 2, 4}) == 4);
    set_env(name, "0");
    CHECK_FALSE(ember_cuda_env_on(name));
    CHECK(ember_cuda_env_choice(name, 4, {1, 2, 4}) == 4);
    set_env(name, "1");
    CHECK(ember_cuda_env_on(name));
    CHECK(ember_cuda_env_choice(name, 4, {1, 2, 4}) == 1);
    set_env(name, "2");
    CHECK(ember_cuda_env_choice(name, 4, {1, 2, 4}) == 2);
    CHECK(ember_cuda_env_choice(name, 2, {1, 4}) == 2);
    for (const char * bad : {"3", "2x", "x2", "2.0", "-1", "99999999999999999999"}) {
        CAPTURE(std::string(bad));
        set_env(name, bad);
        CHECK(ember_cuda_env_on(name));
        CHECK(ember_cuda_env_choice(name, 4, {1, 2, 4}) == 4);
    }
    set_env(name, "");
}

TEST_CASE("[cuda] FP8 codec of the CUDA kernels matches quant/ref bit for bit (host build)") {
    for (bool e4m3 : {true, false}) {
        CAPTURE(e4m3);
        // Every code decodes to the reference's value (NaN: same sign).
        for (uint32_t c = 0; c < 256; c++) {
            CAPTURE(c);
            const float want = e4m3 ? ember_fp8_e4m3_to_float(static_cast<uint8_t>(c)) : ember_fp8_e5m2_to_float(static_cast<uint8_t>(c));
            const float got  = e4m3 ? cu_fp8_decode<true>(c) : cu_fp8_decode<false>(c);
            if (std::isnan(want)) {
                CHECK(std::isnan(got));
                CHECK(std::signbit(got) == std::signbit(want));
            } else {
                CHECK(got == want);
                CHECK(std::signbit(got) == std::signbit(want));
            }
        }
        // The decode attention kernel's pair decoder (cu_fp8x4_half_bits): four codes at a time
        // (each code in every byte position), the halves times 256 for E4M3.
        for (uint32_t c = 0; c < 256; c++) {
            CAPTURE(c);
            const float want = e4m3 ? ember_fp8_e4m3_to_float(static_cast<uint8_t>(c)) : ember_fp8_e5m2_to_float(static_cast<uint8_t>(c));
            for (int pos = 0; pos < 4; pos++) {
                const uint32_t w = (0x5a3c1e00u & ~(0xffu << (8 * pos))) | c << (8 * pos);
                uint32_t       lo, hi;
                if (e4m3) cu_fp8x4_half_bits<true>(w, lo, hi);
                else cu_fp8x4_half_bits<false>(w, lo, hi);
                const uint32_t h   = (pos < 2 ? lo : hi) >> (16 * (pos % 2)) & 0xffffu;
                const float    got = ember_half_to_float(static_cast<ember_half>(h)) * (e4m3 ? 256.0f : 1.0f);
                if (std::isnan(want)) CHECK(std::isnan(got));
                else CHECK(got == want);
            }
        }
        // One value: every float whose low 16 bits are one of a few patterns (all exponents,
        // the mantissa bits where FP8 rounds, so every tie and its neighbours), both signs.
        int64_t bad = 0, n = 0;
        for (uint32_t hi = 0; hi < 0x10000u; hi++) {
            for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0xffffu}) {
                const float x = bits_float(hi << 16 | lo);
                const uint8_t want = e4m3 ? ember_float_to_fp8_e4m3(x) : ember_float_to_fp8_e5m2(x);
                uint32_t      got;
                if (std::isnan(x)) {
                    got = (std::signbit(x) ? 0x80u : 0u) | 0x7fu;  // the block encoder's own NaN path
                } else {
                    const uint32_t sign = std::signbit(x) ? 0x80u : 0u;
                    got = e4m3 ? cu_fp8_encode_abs<true>(std::fabs(x), sign) : cu_fp8_encode_abs<false>(std::fabs(x), sign);
                }
                if (got != want && bad++ < 5) MESSAGE("x = " << x << " (bits " << (hi << 16 | lo) << "): ref " << int(want) << ", cuda " << got);
                n++;
            }
        }
        CHECK(bad == 0);
        CHECK(n == 5 * 65536);
        // E8M0 scales.
        for (uint32_t e = 0; e < 255; e++) CHECK(cu_fp8_e8m0_scale(e) == std::ldexp(1.0f, static_cast<int>(e) - 127));
        CHECK(std::isnan(cu_fp8_e8m0_scale(255)));
        // Whole blocks: the edge cases, then random blocks over many magnitudes.
        const ember_type   t    = e4m3 ? EMBER_TYPE_FP8_E4M3 : EMBER_TYPE_FP8_E5M2;
        std::vector<float> edge = fp8_edge_values();
        REQUIRE(edge.size() % 32 == 0);
        CHECK(first_diff(fp8_host_encode(e4m3, edge.data(), static_cast<int64_t>(edge.size())),
                         fp8_ref_encode(t, edge.data(), static_cast<int64_t>(edge.size()))) == -1);
        std::mt19937                          rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::uniform_int_distribution<int>    ex(-140, 120);
        std::vector<float>                    x(32 * 4096);
        for (size_t b = 0; b < x.size() / 32; b++) {
            const int e0 = ex(rng);
            for (size_t j = 0; j < 32; j++) {
                float f = std::ldexp(u(rng), e0 + static_cast<int>(j % 5) * (b % 3 == 0 ? 7 : 1));
                if (b % 5 == 1 && j == 9) f = std::ldexp(e4m3 ? 448.0f : 57344.0f, e0 / 2);  // amax on a boundary
                if (b % 7 == 2) f = std::ldexp(std::round(f * 64.0f), -6);                   // coarse values: ties
                x[32 * b + j] = f;
            }
        }
        const int64_t d = first_diff(fp8_host_encode(e4m3, x.data(), static_cast<int64_t>(x.size())),
                                     fp8_ref_encode(t, x.data(), static_cast<int64_t>(x.size())));
        CAPTURE(d);
        CHECK(d == -1);
    }
}

// FP8 E4M3 / E5M2 KV caches: SET_ROWS and CPY write the reference encoder's bytes, attention
// over them (decode with split keys, GQA; the tiled prefill kernel; mixed K/V types) matches
// the CPU.
// Decode attention over a cache of type t: 32 query heads over n_head_kv KV heads, one token
// (n_kv odd) or two, keys j % 11 == 4 hidden.
ember_tensor * decode_attn_masked(case_ctx & c, ember_type t, int64_t d, int64_t n_kv, int64_t n_head_kv) {
    const int64_t      n_tok = n_kv % 2 ? 1 : 2;
    ember_tensor *     q     = c.rand_leaf(EMBER_TYPE_F32, d, 32, n_tok);
    ember_tensor *     k     = c.rand_leaf(t, d, n_head_kv, n_kv, -2.0f, 2.0f);
    ember_tensor *     v     = c.rand_leaf(t, d, n_head_kv, n_kv);
    std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
    for (int64_t j = 0; j < n_kv; j++) {
        if (j % 11 == 4) mv[static_cast<size_t>(j)] = -INFINITY;
    }
    return ember_attn(c.g, q, k, v, c.f32_leaf(mv, n_kv, n_tok), 1.0f / std::sqrt(static_cast<float>(d)));
}

TEST_CASE("[cuda] FP8 KV caches: set_rows bit-exact, decode and prefill attention") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const ember_type fp8[] = {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2};
    for (ember_type t : fp8) {
        const std::string name = ember_type_get_name(t);
        CAPTURE(name);
        // Edge values (NaN, infinities, ties, subnormals) and wide random ones, written to
        // rows 5, 0, 5 (the last 5 wins); the rest of the cache keeps its bytes.
        for (bool edge : {true, false}) {
            CAPTURE(edge);
            std::vector<std::vector<uint8_t>> want, got;
            const builder set = [=](case_ctx & c) {
                ember_tensor * dst = c.rand_leaf(t, 64, 12);
                ember_tensor * src = edge ? c.f32_leaf(fp8_edge_values(), 64, 3) : c.rand_leaf(EMBER_TYPE_F32, 64, 3, 1, -3000.0f, 3000.0f);
                return ember_set_rows(c.g, dst, src, c.i32_leaf({5, 0, 5}));
            };
            run_on_n(ember_registry_cpu_device(), set, {99}, &want);
            run_on_n(cuda_device(), set, {99}, &got);
            CHECK(first_diff(got.at(0), want.at(0)) == -1);
            // CPY f32 -> FP8 uses the same encoder.
            const builder cpy = [=](case_ctx & c) {
                ember_tensor * src = edge ? c.f32_leaf(fp8_edge_values(), 64, 3) : c.rand_leaf(EMBER_TYPE_F32, 64, 3, 1, -3000.0f, 3000.0f);
                return ember_cpy(c.g, src, t);
            };
            want.clear();
            got.clear();
            run_on_n(ember_registry_cpu_device(), cpy, {98}, &want);
            run_on_n(cuda_device(), cpy, {98}, &got);
            CHECK(first_diff(got.at(0), want.at(0)) == -1);
        }
        // Decode: one or two tokens, 32 query heads over 8 (GQA) or 32 KV heads, keys split
        // across blocks (n_kv from 37 up to 2100), some keys hidden.
        for (int64_t d : {64, 128}) {
            for (int64_t n_kv : {37, 300, 2100}) {
                for (int64_t n_head_kv : {8, 32}) {
                    const std::string what = "decode attn " + name + " d=" + std::to_string(d) + " n_kv=" + std::to_string(n_kv) +
                                             " kv heads " + std::to_string(n_head_kv);
                    check_case(what, [=](case_ctx & c) {
                        return decode_attn_masked(c, t, d, n_kv, n_head_kv);
                    }, dec_attn_tol(t, d, n_kv));
                }
            }
        }
        // Prefill (the tiled kernel: K and V of one type, >= 16 tokens), causal, GQA 4.
        for (int64_t d : {64, 96, 128}) {
            const std::string what = "prefill attn " + name + " d=" + std::to_string(d);
            check_case(what, [=](case_ctx & c) {
                const int64_t      n_tok = 40, n_kv = 90;
                ember_tensor *     q     = c.rand_leaf(EMBER_TYPE_F32, d, 8, n_tok);
                ember_tensor *     k     = c.rand_leaf(t, d, 2, n_kv, -2.0f, 2.0f);
                ember_tensor *     v     = c.rand_leaf(t, d, 2, n_kv);
                std::vector<float> mv(static_cast<size_t>(n_kv * n_tok), 0.0f);
                for (int64_t tt = 0; tt < n_tok; tt++) {
                    for (int64_t j = n_kv - n_tok + tt + 1; j < n_kv; j++) mv[static_cast<size_t>(tt * n_kv + j)] = -INFINITY;
                }
                return ember_attn(c.g, q, k, v, c.f32_leaf(mv, n_kv, n_tok), 1.0f / std::sqrt(static_cast<float>(d)));
            }, 1e-8);
        }
    }
    // Mixed K/V types (the simple kernel, decode and prefill).
    const std::pair<ember_type, ember_type> mixed[] = {{EMBER_TYPE_FP8_E4M3, EMBER_TYPE_F16},
                                                       {EMBER_TYPE_F16, EMBER_TYPE_FP8_E4M3},
                                                       {EMBER_TYPE_Q8_0, EMBER_TYPE_FP8_E5M2},
                                                       {EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}};
    for (const auto & kv : mixed) {
        for (int64_t n_tok : {1, 20}) {
            const std::string what = std::string("attn K ") + ember_type_get_name(kv.first) + ", V " + ember_type_get_name(kv.second) +
                                     " n_tok=" + std::to_string(n_tok);
            check_case(what, [=](case_ctx & c) {
                return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, 128, 8, n_tok), c.rand_leaf(kv.first, 128, 2, 500),
                                  c.rand_leaf(kv.second, 128, 2, 500), nullptr, 0.088f);
            }, 1e-8);
        }
    }
}

// SET_ROWS into quantized caches: a few rows take one warp per block (set_rows_warp_kernel,
// cu_encode_warp), more rows the thread-per-block kernel; both write the same bytes
// (EMBER_CUDA_SET_ROWS_WARP=0 forces the second). Rows 5, 0, 5 (the last 5 wins), 40 rows whose
// repeats lie more than 32 rows apart (the lanes' scan of later indices), and 70 rows (over the
// warp kernel's limit). Values: random, ties of the largest magnitude with opposite signs (Q4_0
// keeps the first), blocks of zeros and -0.0, FP8's edge values (NaN, infinities, subnormals).
std::vector<float> set_rows_values(ember_type t, int64_t n_rows) {
    std::vector<float> v;
    std::mt19937       rng(11);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    const bool         fp8 = t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
    const std::vector<float> edge = fp8_edge_values();
    for (int64_t r = 0; r < n_rows; r++) {
        for (int b = 0; b < 4; b++) {  // 128 values: 4 blocks
            for (int j = 0; j < 32; j++) {
                float x = u(rng);
                switch ((r + b) % 5) {
                    case 1: x = j == 3 ? 2.5f : j == 7 ? -2.5f : x * 0.5f; break;   // +max first
                    case 2: x = j == 1 ? -2.5f : j == 20 ? 2.5f : x * 0.5f; break;  // -max first
                    case 3: x = j % 3 ? 0.0f : -0.0f; break;                        // zeros only
                    case 4: if (fp8) x = edge[static_cast<size_t>((32 * (r + b) + j) % edge.size())]; break;
                    default: break;
                }
                v.push_back(x);
            }
        }
    }
    return v;
}

TEST_CASE("[cuda] set_rows into quantized caches: the warp encoder writes the thread encoder's bytes") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (ember_type t : {EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        for (int64_t m : {3, 40, 70}) {
            const std::string name = ember_type_get_name(t);
            CAPTURE(name);
            CAPTURE(m);
            std::vector<int32_t> idx;
            if (m == 3) idx = {5, 0, 5};
            for (int64_t i = 0; m > 3 && i < m; i++) idx.push_back(static_cast<int32_t>(i % 37));
            const std::vector<float> x = set_rows_values(t, m);
            const builder set = [=](case_ctx & c) {
                ember_tensor * dst = c.rand_leaf(t, 128, 48);
                return ember_set_rows(c.g, dst, c.f32_leaf(x, 128, m), c.i32_leaf(idx));
            };
            std::vector<std::vector<uint8_t>> warp, thread, cpu;
            run_on_n(cuda_device(), set, {77}, &warp);
            set_env("EMBER_CUDA_SET_ROWS_WARP", "0");
            run_on_n(cuda_device(), set, {77}, &thread);
            set_env("EMBER_CUDA_SET_ROWS_WARP", "");
            run_on_n(ember_registry_cpu_device(), set, {77}, &cpu);
            CHECK(first_diff(warp.at(0), thread.at(0)) == -1);
            if (t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2) CHECK(first_diff(warp.at(0), cpu.at(0)) == -1);
            // Rows never written keep their bytes; written ones changed.
            REQUIRE(warp.at(0).size() == cpu.at(0).size());
            const size_t row = warp.at(0).size() / 48;
            for (size_t r = 0; r < 48; r++) {
                const bool written = std::find(idx.begin(), idx.end(), static_cast<int32_t>(r)) != idx.end();
                const bool same    = std::equal(warp.at(0).begin() + r * row, warp.at(0).begin() + (r + 1) * row, cpu.at(0).begin() + r * row);
                if (!written) CHECK(same);
            }
            // Against the CPU's encoder as values (Q8_0 / Q4_0 may round a tie differently;
            // FP8 matched bit for bit above, NaN codes included).
            if (t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0) check_case("set_rows values " + name, set, 1e-6, 77);
        }
    }
}

// SET_ROWS of many rows into float caches (a prompt's K and V): the indices marked once per
// block (strictly increasing: no scan; else a scan per row for a later duplicate), 8-value items
// where rows are whole 16-byte words (set_rows_vec_ok), one-value items elsewhere. Bit for bit
// against the CPU (the same rounding to F16 / BF16); rows never written keep their bytes.
// Index sets: a prompt's positions (512 rows, increasing), repeats out of order (the last
// occurrence wins; repeats 37 and 300 rows apart), one row; widths 128 (vector items), 72 (nine
// 8-value items), 36 (not a multiple of 8: one-value items).
TEST_CASE("[cuda] set_rows of many rows into float caches: duplicates marked once, 8-value items") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    struct index_set {
        const char *         name;
        std::vector<int32_t> idx;
    };
    std::vector<index_set> sets(3);
    sets[0].name = "positions";
    for (int32_t i = 0; i < 512; i++) sets[0].idx.push_back(100 + i);
    sets[1].name = "repeats";
    for (int32_t i = 0; i < 340; i++) sets[1].idx.push_back((i * 7) % 300);  // i and i + 300 share an index
    sets[1].idx[37] = sets[1].idx[0];
    sets[2].name = "one row";
    sets[2].idx  = {611};
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_F32, EMBER_TYPE_BF16}) {
        for (int64_t w : {128, 72, 36}) {
            for (const index_set & is : sets) {
                if (w != 128 && is.idx.size() == 1) continue;
                const std::string name = std::string(ember_type_get_name(t)) + " w=" + std::to_string(w) + " " + is.name;
                CAPTURE(name);
                const std::vector<int32_t> idx = is.idx;
                const builder              set = [=](case_ctx & c) {
                    ember_tensor * dst = c.rand_leaf(t, w, 640);
                    return ember_set_rows(c.g, dst, c.rand_leaf(EMBER_TYPE_F32, w, static_cast<int64_t>(idx.size())), c.i32_leaf(idx));
                };
                std::vector<std::vector<uint8_t>> gpu, cpu;
                run_on_n(cuda_device(), set, {5, 6}, &gpu);  // recorded, then replayed with new values
                run_on_n(ember_registry_cpu_device(), set, {5, 6}, &cpu);
                for (size_t run = 0; run < 2; run++) CHECK(first_diff(gpu.at(run), cpu.at(run)) == -1);
            }
        }
    }
}

// Prefill products over one x: the first converts x to 16 bits (8 values a thread where x's
// rows are whole 16-byte words), the next ones over the same x take that copy (a layer's K and
// V; ember_cuda_ctx::xh_valid), a product over another x or with BF16 weights converts again.
// Against the CPU, and bit for bit against the same graph converting every time with the
// one-value kernel (EMBER_CUDA_XH_REUSE=0, EMBER_CUDA_CONVERT_X8=0): a copy taken where it
// should not be (another x's, or F16 where BF16 is wanted) fails both.
TEST_CASE("[cuda] prefill products over one x: its 16-bit copy made once, 8 values a thread") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (int64_t k : {256, 100}) {  // 100: rows not whole 16-byte words (one value a thread)
        const builder b = [=](case_ctx & c) {
            ember_tensor * x1  = c.rand_leaf(EMBER_TYPE_F32, k, 40);
            ember_tensor * x2  = c.rand_leaf(EMBER_TYPE_F32, k, 40);
            const auto     mm  = [&](ember_type t, ember_tensor * x) { return ember_mul_mat(c.g, c.weight_leaf(t, k, 48), x); };
            ember_type     q   = k % 32 == 0 ? EMBER_TYPE_Q4_0 : EMBER_TYPE_F16;
            ember_tensor * sum = mm(q, x1);
            sum                = ember_add(c.g, sum, mm(q, x1));                    // takes x1's copy
            sum                = ember_add(c.g, sum, mm(EMBER_TYPE_BF16, x1));      // BF16: converts again
            sum                = ember_add(c.g, sum, mm(EMBER_TYPE_F16, x2));       // another x
            sum                = ember_add(c.g, sum, mm(q, x2));                    // takes x2's copy
            return ember_scale(c.g, sum, 0.5f);
        };
        const std::string name = "prefill products over one x, k=" + std::to_string(k);
        check_case(name, b, 1e-5);
        std::vector<std::vector<uint8_t>> fast, slow;
        run_on_n(cuda_device(), b, {3, 4}, &fast);
        env_clear guard{{"EMBER_CUDA_XH_REUSE", "EMBER_CUDA_CONVERT_X8"}};
        set_env("EMBER_CUDA_XH_REUSE", "0");
        set_env("EMBER_CUDA_CONVERT_X8", "0");
        run_on_n(cuda_device(), b, {3, 4}, &slow);
        CAPTURE(name);
        for (size_t run = 0; run < 2; run++) CHECK(first_diff(fast.at(run), slow.at(run)) == -1);
    }
}

// A prefill FFN's SWIGLU making its down product's 16-bit x (ember_cuda_swiglu_xh): without its
// F32 rows where only that product reads them, with them where another product does (BF16
// weights: a conversion of their own), and not at all before an F32 product. Against the CPU
// and bit for bit against SWIGLU + conversion (EMBER_CUDA_XH_REUSE=0); n_ff 224 (28 8-value
// items a row).
TEST_CASE("[cuda] prefill SWIGLU making the down product's 16-bit x") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    for (int form = 0; form < 3; form++) {
        const builder b = [=](case_ctx & c) {
            const int64_t  n_embd = 128, n_ff = 224, m = 40;
            ember_tensor * h      = c.rand_leaf(EMBER_TYPE_F32, n_embd, m);
            ember_tensor * gt     = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q8_0, n_embd, n_ff), h);
            ember_tensor * up     = ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_Q8_0, n_embd, n_ff), h);
            ember_tensor * sw     = ember_swiglu(c.g, gt, up);
            const ember_type dt   = form == 0 ? EMBER_TYPE_Q8_0 : form == 1 ? EMBER_TYPE_F16 : EMBER_TYPE_F32;
            ember_tensor *   out  = ember_mul_mat(c.g, c.weight_leaf(dt, n_ff, n_embd), sw);
            if (form == 1) out = ember_add(c.g, out, ember_mul_mat(c.g, c.weight_leaf(EMBER_TYPE_BF16, n_ff, n_embd), sw));
            return out;
        };
        const std::string name = "prefill swiglu + down, form " + std::to_string(form);
        // 1e-3, as the other quantized products: the CPU quantizes the Q8_0 products' x to Q8_0
        // where the GPU rounds it to f16, and SWIGLU multiplies gate's error by up's (H100: 1.0e-4
        // form 0, 3.0e-5 and 2.9e-5 forms 1 and 2). The bits are checked against the slow path below.
        check_case(name, b, 1e-3);
        std::vector<std::vector<uint8_t>> fast, slow;
        run_on_n(cuda_device(), b, {3, 4}, &fast);
        env_clear guard{{"EMBER_CUDA_XH_REUSE"}};
        set_env("EMBER_CUDA_XH_REUSE", "0");
        run_on_n(cuda_device(), b, {3, 4}, &slow);
        CAPTURE(name);
        for (size_t run = 0; run < 2; run++) CHECK(first_diff(fast.at(run), slow.at(run)) == -1);
    }
}

// The tensor-core decode attention (attn_dec_mma_kernel: rows past 512 keys, head size 64 / 128;
// F16 caches by default, also Q8_0 / Q4_0 / FP8 with EMBER_CUDA_ATTN_MMA=2): against the CPU
// within the f16 rounding it does, the tiled kernel (EMBER_CUDA_ATTN_MMA=0) against the CPU as
// exact as before, and the default (F16: the tensor-core kernel; others: tiled) within its bound. Shapes: GQA 4 with a
// ragged last tile and some keys hidden (one token, two); the first 1500 of 2000 keys hidden
// (splits with no key) for 3 tokens of a GQA group of 16 (48 rows: 3 blocks of 16 per KV head)
// with finite mask values; 20 query heads over one KV head (a block of 16 rows and one of 4);
// 512 KV heads over 600 keys (one split: the kernel writes the output itself); a token whose
// every key is hidden (zeros); V a strided view one block into wider rows (K's and V's rows then
// start at different offsets within 16 bytes: the 16-byte copies take each cache's own).
struct mma_shape {
    int64_t heads, kv_heads, n_kv, n_tok;
    int     mask;  // 0 none, 1 keys j % 11 == 4 hidden and a causal tail, 2 the front hidden + finite values, 3 last token all hidden
    bool    v_shift = false;  // V: rows of 16 more blocks, viewed from their second block
};

ember_tensor * mma_attn(case_ctx & c, ember_type t, int64_t d, const mma_shape & s) {
    ember_tensor * q = c.rand_leaf(EMBER_TYPE_F32, d, s.heads, s.n_tok);
    ember_tensor * k = c.rand_leaf(t, d, s.kv_heads, s.n_kv, -2.0f, 2.0f);
    ember_tensor * v = nullptr;
    if (s.v_shift) {  // 16 extra blocks keep the row stride a multiple of 16 bytes for every type
        ember_tensor * w     = c.rand_leaf(t, d * s.kv_heads + 16 * 32, s.n_kv);
        const int64_t  ne[4] = {d, s.kv_heads, s.n_kv, 1};
        const size_t   nb[4] = {w->nb[0], ember_row_size(t, d), w->nb[1], w->nb[1] * static_cast<size_t>(s.n_kv)};
        v                    = ember_view_strided(c.g, w, ne, nb, ember_row_size(t, 32));
    } else {
        v = c.rand_leaf(t, d, s.kv_heads, s.n_kv);
    }
    ember_tensor * mask = nullptr;
    if (s.mask) {
        std::vector<float> mv(static_cast<size_t>(s.n_kv * s.n_tok), 0.0f);
        for (int64_t tt = 0; tt < s.n_tok; tt++) {
            for (int64_t j = 0; j < s.n_kv; j++) {
                float & x = mv[static_cast<size_t>(tt * s.n_kv + j)];
                if (j > s.n_kv - s.n_tok + tt) x = -INFINITY;
                if (s.mask == 1 && j % 11 == 4) x = -INFINITY;
                if (s.mask == 2 && x == 0.0f) x = j < 1500 ? -INFINITY : j % 7 == 3 ? -1.5f : 0.25f;
                if (s.mask == 3 && tt == s.n_tok - 1) x = -INFINITY;
            }
        }
        mask = c.f32_leaf(mv, s.n_kv, s.n_tok);
    }
    return ember_attn(c.g, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(d)));
}

TEST_CASE("[cuda] decode attention on tensor cores") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const mma_shape shapes[] = {{32, 8, 4133, 1, 1}, {32, 8, 600, 2, 1}, {32, 2, 2000, 3, 2}, {20, 1, 1000, 1, 0}, {512, 512, 600, 1, 0},
                                {32, 8, 700, 2, 3},  {32, 8, 1000, 1, 1, true}};
    for (ember_type t : {EMBER_TYPE_F16, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2}) {
        for (int64_t d : {64, 128}) {
            for (const mma_shape & s : shapes) {
                const std::string what = std::string("mma attn ") + ember_type_get_name(t) + " d=" + std::to_string(d) + " heads " +
                                         std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " n_kv=" + std::to_string(s.n_kv) +
                                         " tokens " + std::to_string(s.n_tok) + " mask " + std::to_string(s.mask) + (s.v_shift ? " v shifted" : "");
                CAPTURE(what);
                const builder            build = [=](case_ctx & c) { return mma_attn(c, t, d, s); };
                const std::vector<float> want  = run_on(ember_registry_cpu_device(), build, 17);
                const std::vector<float> got   = run_on_cuda_with("EMBER_CUDA_ATTN_MMA", "2", build, 17);
                const std::vector<float> tiled = run_on_cuda_with("EMBER_CUDA_ATTN_MMA", "0", build, 17);
                const std::vector<float> dflt  = run_on(cuda_device(), build, 17);
                if (t != EMBER_TYPE_F16) {
                    // The block types' raw tiles copied as the words around each row (any offset)
                    // decode to the same f16 tiles as the 8- / 4-byte piece copies (whole-block
                    // decode) the contiguous caches here take, where their rows allow it.
                    set_env("EMBER_CUDA_ATTN_MMA_COPY", "0");
                    const std::vector<float> words = run_on_cuda_with("EMBER_CUDA_ATTN_MMA", "2", build, 17);
                    // Without the 16-byte pieces around rows (taken where key rows are 16 bytes
                    // apart: the 8- and 512-head shapes): the 8- / 4-byte pieces or words.
                    set_env("EMBER_CUDA_ATTN_MMA_COPY", "2");
                    const std::vector<float> no16 = run_on_cuda_with("EMBER_CUDA_ATTN_MMA", "2", build, 17);
                    set_env("EMBER_CUDA_ATTN_MMA_COPY", "");
                    CHECK(words == got);
                    CHECK(no16 == got);
                }
                REQUIRE(got.size() == want.size());
                REQUIRE(tiled.size() == want.size());
                REQUIRE(dflt.size() == want.size());
                const double e_dflt = nmse(dflt, want);
                CAPTURE(e_dflt);
                CHECK(e_dflt < dec_attn_tol(t, d, s.n_kv));
                if (dec_mma_default(t, d)) CHECK(dflt == got);  // the default takes the tensor-core kernel
                bool finite = true;
                for (float x : got) finite = finite && std::isfinite(x);
                CHECK(finite);
                const double e = nmse(got, want), e_tiled = nmse(tiled, want);
                CAPTURE(e);
                CAPTURE(e_tiled);
                CHECK(e < 1e-6);
                // f16 rounding (~1e-8 and up) against the scalar kernels' f32 (~1e-13): the
                // tensor-core kernel ran.
                CHECK(nmse(got, tiled) > 1e-11);
                CHECK(e_tiled < 1e-8);
                if (s.mask == 3) {  // the last token's rows: zeros
                    const size_t row = static_cast<size_t>(d * s.heads);
                    bool         zeros = true;
                    for (size_t i = got.size() - row; i < got.size(); i++) zeros = zeros && got[i] == 0.0f;
                    CHECK(zeros);
                }
            }
        }
    }
}

// The short-context decode attention (attn_dec_short_kernel; EMBER_CUDA_ATTN_SHORT=4096 runs it
// in every case here, whatever its default limit for the head size): every cache type, head
// sizes 32..256 (4..32 lanes per key), 1 to 600 keys (1 to 8 blocks per row in a cluster, or
// more blocks merged by the split-merge kernel: 600 keys at d = 128, 256), GQA and not, one
// token and two, some keys hidden (decode_attn_masked), and a mask that hides every key of one
// token. Against the CPU, with the default limit, with the tiled kernel
// (EMBER_CUDA_ATTN_SHORT=0) and without clusters (EMBER_CUDA_ATTN_CLUSTER=0: the passes in one
// block, or the tiled kernel's merge launch) so every path stays tested.
TEST_CASE("[cuda] decode attention at short context: one block per query row") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const ember_type types[] = {EMBER_TYPE_F16, EMBER_TYPE_BF16, EMBER_TYPE_F32, EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2};
    for (ember_type t : types) {
        for (int64_t d : {32, 64, 128, 256}) {
            for (int64_t n_kv : {1, 6, 37, 100, 256, 512, 600}) {
                for (int64_t n_head_kv : {8, 32}) {
                    if (d == 32 && t != EMBER_TYPE_F16 && t != EMBER_TYPE_Q8_0) continue;
                    const std::string what = std::string("short attn ") + ember_type_get_name(t) + " d=" + std::to_string(d) +
                                             " n_kv=" + std::to_string(n_kv) + " kv heads " + std::to_string(n_head_kv);
                    CAPTURE(what);
                    const builder build = [=](case_ctx & c) {
                        return decode_attn_masked(c, t, d, n_kv, n_head_kv);
                    };
                    const std::vector<float> want  = run_on(ember_registry_cpu_device(), build, 71);
                    const std::vector<float> got   = run_on_cuda_with("EMBER_CUDA_ATTN_SHORT", "4096", build, 71);
                    // K / V (leaves) read before the PDL wait (the default) or after it
                    // (EMBER_CUDA_ATTN_EARLY=0): the same bits.
                    set_env("EMBER_CUDA_ATTN_SHORT", "4096");
                    const std::vector<float> late = run_on_cuda_with("EMBER_CUDA_ATTN_EARLY", "0", build, 71);
                    set_env("EMBER_CUDA_ATTN_SHORT", "");
                    REQUIRE(late.size() == got.size());
                    size_t differ = 0;
                    for (size_t i = 0; i < got.size(); i++) differ += late[i] != got[i];
                    CHECK(differ == 0);
                    set_env("EMBER_CUDA_ATTN_MMA", "0");  // the tiled kernel, not the tensor-core one
                    const std::vector<float> tiled = run_on_cuda_with("EMBER_CUDA_ATTN_SHORT", "0", build, 71);
                    set_env("EMBER_CUDA_ATTN_MMA", "");
                    // The default limit (512 keys when the passes fit one cluster, else tiled).
                    const std::vector<float> dflt = run_on(cuda_device(), build, 71);
                    // Without clusters: rows of up to two passes in one block, longer ones tiled
                    // with the merge kernel (as before sm_90).
                    // (EMBER_CUDA_ATTN_MMA=0: the scalar kernels only, as the tiled run above.)
                    set_env("EMBER_CUDA_ATTN_CLUSTER", "0");
                    set_env("EMBER_CUDA_ATTN_MMA", "0");
                    const std::vector<float> flat = run_on_cuda_with("EMBER_CUDA_ATTN_SHORT", "4096", build, 71);
                    set_env("EMBER_CUDA_ATTN_MMA", "");
                    set_env("EMBER_CUDA_ATTN_CLUSTER", "");
                    REQUIRE(got.size() == want.size());
                    REQUIRE(tiled.size() == want.size());
                    REQUIRE(flat.size() == want.size());
                    REQUIRE(dflt.size() == want.size());
                    const double e = nmse(got, want), e_tiled = nmse(tiled, want), e_flat = nmse(flat, want), e_dflt = nmse(dflt, want);
                    CAPTURE(e_dflt);
                    CAPTURE(e);
                    CAPTURE(e_tiled);
                    CAPTURE(e_flat);
                    CHECK(e < 1e-8);
                    CHECK(e_tiled < 1e-8);
                    CHECK(e_flat < 1e-8);
                    CHECK(e_dflt < dec_attn_tol(t, d, n_kv));
                }
            }
        }
    }
    // Two tokens, the second with every key hidden: its rows are zeros (as the tiled kernel's).
    const builder hidden = [](case_ctx & c) {
        const int64_t      d = 128, n_kv = 50;
        std::vector<float> mv(static_cast<size_t>(2 * n_kv), 0.0f);
        for (int64_t j = 0; j < n_kv; j++) mv[static_cast<size_t>(n_kv + j)] = -INFINITY;
        return ember_attn(c.g, c.rand_leaf(EMBER_TYPE_F32, d, 32, 2), c.rand_leaf(EMBER_TYPE_F16, d, 8, n_kv),
                          c.rand_leaf(EMBER_TYPE_F16, d, 8, n_kv), c.f32_leaf(mv, n_kv, 2), 0.1f);
    };
    const std::vector<float> got   = run_on_cuda_with("EMBER_CUDA_ATTN_SHORT", "4096", hidden, 5);
    set_env("EMBER_CUDA_ATTN_MMA", "0");
    const std::vector<float> tiled = run_on_cuda_with("EMBER_CUDA_ATTN_SHORT", "0", hidden, 5);
    set_env("EMBER_CUDA_ATTN_MMA", "");
    REQUIRE(got.size() == 2 * 32 * 128);
    REQUIRE(tiled.size() == got.size());
    bool zeros = true, first_nonzero = false;
    for (size_t i = 0; i < got.size(); i++) {
        if (i >= got.size() / 2) zeros = zeros && got[i] == 0.0f && tiled[i] == 0.0f;
        else first_nonzero = first_nonzero || got[i] != 0.0f;
    }
    CHECK(zeros);
    CHECK(first_nonzero);
    CHECK(nmse(got, tiled) < 1e-10);
}

// A row's splits merged by the block that finishes last instead of in a cluster (the default over
// F16 caches; EMBER_CUDA_ATTN_LASTBLOCK=0: the cluster): rows of 3 to 8 passes (d = 64 and 128;
// one token and two; 8 and 32 KV heads; keys hidden): the same bits as the cluster's merge, the
// form's launches counted (by default and with =1), a second run the same bits again (the counts
// back at zero), and eager / recorded / replayed runs (one stream, new data each) against the CPU;
// then the other cache types: by default rows of 5 blocks or more, with =2 every row.
TEST_CASE("[cuda] decode attention at short context: splits merged by their last block (EMBER_CUDA_ATTN_LASTBLOCK)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_ATTN_LASTBLOCK"}};
    struct row_case {
        int64_t d, n_kv, n_head_kv;
    };
    const row_case cases[] = {{64, 301, 8}, {64, 512, 32}, {128, 255, 8}, {128, 400, 8}, {128, 511, 32}};
    for (const row_case rc : cases) {
        const std::string what = "last block d=" + std::to_string(rc.d) + " n_kv=" + std::to_string(rc.n_kv) + " kv heads " + std::to_string(rc.n_head_kv);
        CAPTURE(what);
        const builder build = [=](case_ctx & c) { return decode_attn_masked(c, EMBER_TYPE_F16, rc.d, rc.n_kv, rc.n_head_kv); };
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", "0");
        long long                before  = ember_cuda_attn_lastblock_launches();
        const std::vector<float> cluster = run_on(cuda_device(), build, 73);
        CHECK(ember_cuda_attn_lastblock_launches() == before);  // =0: the cluster
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", "");
        before                      = ember_cuda_attn_lastblock_launches();
        const std::vector<float> lb = run_on(cuda_device(), build, 73);
        CHECK(ember_cuda_attn_lastblock_launches() > before);  // the form ran, by default
        const std::vector<float> again = run_on(cuda_device(), build, 73);
        CHECK(lb == cluster);
        CHECK(again == lb);
        check_runs(what, build, dec_attn_tol(EMBER_TYPE_F16, rc.d, rc.n_kv), {73, 74, 75});
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", "1");
        before                         = ember_cuda_attn_lastblock_launches();
        const std::vector<float> asked = run_on(cuda_device(), build, 73);
        CHECK(ember_cuda_attn_lastblock_launches() > before);
        CHECK(asked == lb);
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", "");
    }
    // Every other cache type: by default the cluster for rows of up to 4 blocks (d = 64 at 301
    // keys: 3; d = 128 at 256: 4) and the last block from 5 (d = 128 at 257 keys: 5; at 400: 7);
    // =0 the cluster, =2 the last block for every row: the cluster's bits, the form's launches
    // counted, against the CPU.
    for (ember_type t : {EMBER_TYPE_Q8_0, EMBER_TYPE_Q4_0, EMBER_TYPE_FP8_E4M3, EMBER_TYPE_FP8_E5M2, EMBER_TYPE_BF16, EMBER_TYPE_F32}) {
        for (const row_case rc : {row_case{64, 301, 8}, row_case{128, 256, 8}, row_case{128, 257, 8}, row_case{128, 400, 8}}) {
            const std::string what = std::string("last block ") + ember_type_get_name(t) + " d=" + std::to_string(rc.d) + " n_kv=" + std::to_string(rc.n_kv);
            CAPTURE(what);
            const builder build  = [=](case_ctx & c) { return decode_attn_masked(c, t, rc.d, rc.n_kv, rc.n_head_kv); };
            const int64_t blocks = (rc.n_kv + 8191 / rc.d) / (8192 / rc.d);  // one-pass blocks a row (128 keys at d = 64, 64 at 128)
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", "0");
            long long                before  = ember_cuda_attn_lastblock_launches();
            const std::vector<float> cluster = run_on(cuda_device(), build, 77);
            CHECK(ember_cuda_attn_lastblock_launches() == before);
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", "");
            before                        = ember_cuda_attn_lastblock_launches();
            const std::vector<float> dflt = run_on(cuda_device(), build, 77);
            CHECK((ember_cuda_attn_lastblock_launches() > before) == (blocks >= 5));
            CHECK(dflt == cluster);
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", "2");
            before                      = ember_cuda_attn_lastblock_launches();
            const std::vector<float> lb = run_on(cuda_device(), build, 77);
            CHECK(ember_cuda_attn_lastblock_launches() > before);
            CHECK(lb == cluster);
            CHECK(run_on(cuda_device(), build, 77) == lb);
            check_runs(what, build, dec_attn_tol(t, rc.d, rc.n_kv), {77, 78});
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", "");
        }
    }
}

// Clusters only past n one-pass blocks a row (EMBER_CUDA_ATTN_CLUSTER_MIN=n): F16 caches, rows of
// two passes at d = 64 (the 1B at up to 256 keys) and of four at d = 128 (the 8B at 256). With n
// at or above a row's passes its passes run in turn in one block (two: the same bits as
// EMBER_CUDA_ATTN_CLUSTER=0; any n above that: the same bits as at n), below them in a cluster;
// against the CPU throughout, the default too.
TEST_CASE("[cuda] decode attention at short context: clusters only past n passes (EMBER_CUDA_ATTN_CLUSTER_MIN)") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_ATTN_CLUSTER_MIN", "EMBER_CUDA_ATTN_CLUSTER"}};
    struct row_case {
        int64_t d, n_kv, passes;
    };
    for (const row_case rc : {row_case{64, 200, 2}, row_case{64, 256, 2}, row_case{128, 256, 4}, row_case{128, 150, 3}}) {
        const std::string what = "cluster min d=" + std::to_string(rc.d) + " n_kv=" + std::to_string(rc.n_kv);
        CAPTURE(what);
        const builder build = [=](case_ctx & c) { return decode_attn_masked(c, EMBER_TYPE_F16, rc.d, rc.n_kv, 8); };
        const std::vector<float> want  = run_on(ember_registry_cpu_device(), build, 72);
        const std::vector<float> dflt  = run_on(cuda_device(), build, 72);
        const std::vector<float> flat  = run_on_cuda_with("EMBER_CUDA_ATTN_CLUSTER", "0", build, 72);
        const std::vector<float> at    = run_on_cuda_with("EMBER_CUDA_ATTN_CLUSTER_MIN", std::to_string(rc.passes).c_str(), build, 72);
        const std::vector<float> above = run_on_cuda_with("EMBER_CUDA_ATTN_CLUSTER_MIN", "8", build, 72);
        const std::vector<float> below = run_on_cuda_with("EMBER_CUDA_ATTN_CLUSTER_MIN", std::to_string(rc.passes - 1).c_str(), build, 72);
        REQUIRE(dflt.size() == want.size());
        REQUIRE(at.size() == want.size());
        CHECK(nmse(dflt, want) < dec_attn_tol(EMBER_TYPE_F16, rc.d, rc.n_kv));
        CHECK(nmse(at, want) < dec_attn_tol(EMBER_TYPE_F16, rc.d, rc.n_kv));
        CHECK(nmse(below, want) < dec_attn_tol(EMBER_TYPE_F16, rc.d, rc.n_kv));
        if (rc.passes == 2) CHECK(at == flat);
        CHECK(above == at);
        CHECK(below != at);  // (a cluster's blocks sum their keys in another order)
    }
}

// The short decode attention reads no key past the last one a token's mask shows: two tokens showing
// keys [0, 77) and [0, 200) of 256 (2 blocks a row at d = 64, 4 at d = 128: merged by the last, and
// with EMBER_CUDA_ATTN_LASTBLOCK=0 in a cluster); rows 200 on holding NaN and infinities give the
// same bits as those rows holding ordinary values, finite.
TEST_CASE("[cuda] decode attention at short context: keys past the last shown one are not read") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_ATTN_LASTBLOCK"}};
    for (int64_t d : {64, 128}) {
        CAPTURE(d);
        const auto tail = [=](bool poison) {
            return [=](case_ctx & c) {
                const int64_t  n_kv = 256, n_head_kv = 8;
                ember_tensor * q    = c.rand_leaf(EMBER_TYPE_F32, d, 32, 2);
                ember_tensor * k    = c.rand_leaf(EMBER_TYPE_F16, d, n_head_kv, n_kv, -2.0f, 2.0f);
                ember_tensor * v    = c.rand_leaf(EMBER_TYPE_F16, d, n_head_kv, n_kv);
                for (size_t li = c.leaves.size() - 2; poison && li < c.leaves.size(); li++) {
                    std::vector<uint8_t> & b = c.leaves[li].bytes;
                    for (int64_t j = 200; j < n_kv; j++) {
                        for (int64_t e = 0; e < d * n_head_kv; e++) {
                            const uint16_t h = e % 3 == 0 ? 0x7e00 : e % 3 == 1 ? 0x7c00 : 0xfc00;  // NaN, +inf, -inf
                            std::memcpy(b.data() + j * c.leaves[li].t->nb[2] + 2 * e, &h, 2);
                        }
                    }
                }
                std::vector<float> mv(static_cast<size_t>(2 * n_kv), -INFINITY);
                for (int64_t j = 0; j < 77; j++) mv[static_cast<size_t>(j)] = j % 11 == 4 ? -INFINITY : 0.0f;
                for (int64_t j = 0; j < 200; j++) mv[static_cast<size_t>(n_kv + j)] = j % 11 == 4 ? -INFINITY : 0.0f;
                return ember_attn(c.g, q, k, v, c.f32_leaf(mv, n_kv, 2), 1.0f / std::sqrt(static_cast<float>(d)));
            };
        };
        for (const char * lastblock : {"", "0"}) {
            CAPTURE(lastblock);
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", lastblock);
            const std::vector<float> clean = run_on(cuda_device(), tail(false), 31), poisoned = run_on(cuda_device(), tail(true), 31);
            bool                     finite = true;
            for (float x : poisoned) finite = finite && std::isfinite(x);
            CHECK(finite);
            REQUIRE(poisoned.size() == clean.size());
            CHECK(std::memcmp(poisoned.data(), clean.data(), clean.size() * sizeof(float)) == 0);
            set_env("EMBER_CUDA_ATTN_LASTBLOCK", "");
        }
    }
}

// One stream running the decode attention over 128 keys (d = 64: one block a row, no cluster),
// then the same graph's shape over 256 keys (a cluster of 2 a row), each recorded after an eager
// run: the second recording has the first's topology, so the stream would update the executable
// graph, and an update took the new cluster shape without applying it ("unspecified launch
// failure" on an H200; EMBER_KV_PAD=128 in tg128). Also 256 -> 512 keys (clusters of 2 -> 4).
// With EMBER_CUDA_ATTN_CLUSTER_MIN=1 (1, 2, 4 blocks a row): the clusters
// (EMBER_CUDA_ATTN_LASTBLOCK=0), then the same shapes of the last-block merge (the default).
TEST_CASE("[cuda] a recorded decode graph whose cluster shape changes") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_GRAPHS", "EMBER_CUDA_ATTN_LASTBLOCK", "EMBER_CUDA_ATTN_CLUSTER_MIN"}};
    set_env("EMBER_CUDA_GRAPHS", "1");
    for (const char * lastblock : {"0", ""}) {
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", lastblock);
        set_env("EMBER_CUDA_ATTN_CLUSTER_MIN", "1");  // (rows of 2 passes in 2 blocks too)
        ember_stream * s = new_stream(cuda_device());
        for (const std::vector<int64_t> & lens : {std::vector<int64_t>{128, 256, 128}, std::vector<int64_t>{256, 512, 256}}) {
            for (int64_t n_kv : lens) {
                CAPTURE(lastblock);
                CAPTURE(n_kv);
                const builder  build = [=](case_ctx & c) { return decode_attn_masked(c, EMBER_TYPE_F16, 64, n_kv, 8); };  // (two tokens)
                const uint32_t seed  = static_cast<uint32_t>(n_kv);
                check_runs("cluster shape", build, 1e-6, {seed, seed + 1, seed + 2}, s);  // eager, recorded (an update of the last), replayed
            }
        }
        ember_stream_free(s);
    }
}

// A decode step recorded again with the same shapes updates the executable graph instead of
// instantiating a new one, clusters (the short attention's 2-block rows at 256 keys) included:
// the cluster launches' hash (ember_cuda_ctx::cluster_sig) counted every launch of the stream's
// life, so it differed at every recording and every step was instantiated anew (session 54).
TEST_CASE("[cuda] a decode graph recorded again with the same shapes is updated, not instantiated") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
    const env_clear reset{{"EMBER_CUDA_GRAPHS", "EMBER_CUDA_ATTN_LASTBLOCK", "EMBER_CUDA_ATTN_CLUSTER_MIN"}};
    set_env("EMBER_CUDA_GRAPHS", "1");
    set_env("EMBER_CUDA_ATTN_CLUSTER_MIN", "1");
    for (const char * lastblock : {"0", ""}) {  // the cluster; the last-block merge (the default)
        set_env("EMBER_CUDA_ATTN_LASTBLOCK", lastblock);
        for (int64_t n_kv : {int64_t{128}, int64_t{256}}) {  // one block a row; two
            CAPTURE(lastblock);
            CAPTURE(n_kv);
            const builder  build = [=](case_ctx & c) { return decode_attn_masked(c, EMBER_TYPE_F16, 64, n_kv, 8); };
            const uint64_t n0    = ember_cuda_graph_instantiations();
            check_runs("same shapes", build, 1e-6, {1, 2, 3, 4, 5, 6});  // eager, recorded (instantiated), then four updates
            CHECK(ember_cuda_graph_instantiations() - n0 == 1);
        }
    }
}

TEST_CASE("[cuda] device enumeration and buffers") {
    ember_device * dev = cuda_device();
    if (!dev) {
        MESSAGE("skipped: no CUDA device");
        return;
    }
    CHECK(std::string(ember_device_get_name(dev)).rfind("cuda:", 0) == 0);
    CHECK(ember_registry_find_device("cuda:0") == dev);
    ember_device_props props;
    dev->iface.get_props(dev, &props);
    CHECK(props.type == EMBER_DEVICE_TYPE_GPU);
    CHECK(props.memory_total > 0);
    CHECK(!ember_device_supports_buft(dev, ember_device_buffer_type(ember_registry_cpu_device())));
    // An impossible allocation is OOM, not a crash.
    ember_buffer * buf = nullptr;
    CHECK(ember_buffer_type_alloc(ember_device_buffer_type(dev), props.memory_total * 4, &buf) == EMBER_ERR_OOM);
    CHECK(buf == nullptr);
    // Round trip of bytes through device memory (larger than one staging half).
    const size_t n = (20u << 20) + 3;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), n, &buf) == EMBER_OK);
    ember_graph    g;
    ember_tensor * t = g.new_tensor(EMBER_TYPE_I32, 1);
    t->ne[0]         = static_cast<int64_t>(n / 4);
    ember_set_contiguous_strides(t);
    ember_buffer_place_tensor(buf, t, 0);
    std::vector<int32_t> in(n / 4), out(n / 4, 0);
    for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<int32_t>(i * 2654435761u);
    ember_tensor_set(t, in.data(), 0, in.size() * 4);
    ember_tensor_get(t, out.data(), 0, out.size() * 4);
    CHECK(in == out);
    ember_buffer_free(buf);
}

// set_tensor_async (the scheduler's input copies through the stream's pinned ring): many
// pieces of odd sizes and offsets, one overwriting part of an earlier one (it must land last),
// a large one; the source buffer is reused at once. Then a weight (refused: its layout is made
// by set_tensor).
// Each copy issued as it is queued (EMBER_CUDA_MERGE_COPIES=0), and merged (=1: the pieces as one
// copy of their ring span and a scatter kernel that applies them in order; =2, the default: that
// copy on a stream of its own, waited for by the compute stream before the scatter).
TEST_CASE("[cuda] queued host-to-device copies land in order") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
  // "2f": 2 with EMBER_CUDA_SCATTER_FLAT=1, which these pieces (odd sizes, one overlapping an
  // earlier one) must not take: still in order
  for (const char * merge : {"0", "1", "2", "2f"}) {  // 2: the merged copy on its own stream
    CAPTURE(std::string(merge));
    setenv("EMBER_CUDA_MERGE_COPIES", std::string(merge).substr(0, 1).c_str(), 1);  // read when the stream is made
    setenv("EMBER_CUDA_SCATTER_FLAT", merge[1] == 'f' ? "1" : "0", 1);
    ember_device *      dev = cuda_device();
    ember_stream_params sp{};
    ember_stream *      st  = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &st) == EMBER_OK);
    unsetenv("EMBER_CUDA_MERGE_COPIES");
    const bool has_async = st->iface.set_tensor_async != nullptr;
    REQUIRE(has_async);
    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), 1 << 20, &buf) == EMBER_OK);
    ember_graph    g;
    ember_tensor * t = g.new_tensor(EMBER_TYPE_I32, 1 << 18);  // 1 MiB
    ember_buffer_place_tensor(buf, t, 0);
    buf->iface.clear(buf, 0);
    std::vector<uint8_t> want(1 << 20, 0), src;
    uint32_t             seed = 1;
    const auto           put  = [&](size_t off, size_t n) {
        src.resize(n);
        for (size_t i = 0; i < n; i++) src[i] = static_cast<uint8_t>((seed = seed * 1664525u + 1013904223u) >> 24);
        REQUIRE(st->iface.set_tensor_async(st, t, src.data(), off, n));
        std::memcpy(want.data() + off, src.data(), n);
        std::fill(src.begin(), src.end(), uint8_t(0xee));  // reused at once
    };
    for (int i = 0; i < 11; i++) put(4096 * i + (i % 3), 1 + 97 * i);
    put(4096 * 2 + 10, 300);  // overlaps an earlier piece
    put(200000, 100000);
    put(4096 * 3, 4);
    st->iface.synchronize(st);
    std::vector<uint8_t> got(want.size());
    ember_tensor_get(t, got.data(), 0, got.size());
    CHECK(got == want);
    ember_tensor * w = g.new_tensor(EMBER_TYPE_F32, 16);
    ember_buffer_place_tensor(buf, w, 0);
    w->flags |= EMBER_TENSOR_FLAG_WEIGHT;
    float v[16] = {};
    const bool queued = st->iface.set_tensor_async(st, w, v, 0, sizeof(v));
    CHECK_FALSE(queued);
    ember_buffer_free(buf);
    ember_stream_free(st);
    unsetenv("EMBER_CUDA_SCATTER_FLAT");
  }
}

// Queued inputs taken by the graph that reads them: the first run eager, the second recorded
// (the queued copies as its first nodes), then replayed with new values at the same ring
// offsets; a step whose input is written synchronously (no queued copy: recorded again, the
// copies left out) and one that queues two inputs (recorded again); each step's result is
// 2 * that step's x (+ b). With EMBER_CUDA_DEFER_COPIES=1 (the copies as graph nodes), without
// (each copy issued as it is queued) and with EMBER_CUDA_MERGE_COPIES=1 (two or more issued
// before the graph as one copy and a scatter kernel) or =2 (that copy on its own stream).
TEST_CASE("[cuda] queued inputs go into the recorded decode graph") {
    if (!cuda_device()) {
        MESSAGE("skipped: no CUDA device (no driver or no GPU)");
        return;
    }
  // merge-flat: merge-side with EMBER_CUDA_SCATTER_FLAT=1 (the scatter's loads all issued first
  // where the pieces do not overlap: two 4000-byte inputs, longer than one word a thread)
  for (const char * mode : {"defer", "plain", "merge", "merge-side", "merge-flat"}) {
    CAPTURE(std::string(mode));
    const bool flat = std::strcmp(mode, "merge-flat") == 0;
    setenv("EMBER_CUDA_DEFER_COPIES", std::strcmp(mode, "defer") == 0 ? "1" : "0", 1);  // read when the stream is made
    setenv("EMBER_CUDA_MERGE_COPIES", std::strcmp(mode, "merge") == 0 ? "1" : std::strcmp(mode, "merge-side") == 0 || flat ? "2" : "0", 1);
    setenv("EMBER_CUDA_SCATTER_FLAT", flat ? "1" : "0", 1);  // read when the stream is made
    ember_device *      dev = cuda_device();
    ember_stream_params sp{};
    ember_stream *      st  = nullptr;
    REQUIRE(ember_device_init_stream(dev, &sp, &st) == EMBER_OK);
    unsetenv("EMBER_CUDA_DEFER_COPIES");
    unsetenv("EMBER_CUDA_MERGE_COPIES");
    ember_buffer * buf = nullptr;
    REQUIRE(ember_buffer_type_alloc(ember_device_buffer_type(dev), 1 << 16, &buf) == EMBER_OK);
    ember_graph    g;
    ember_tensor * x = g.new_tensor(EMBER_TYPE_F32, 1000);
    ember_tensor * b = g.new_tensor(EMBER_TYPE_F32, 1000);
    ember_tensor * y = ember_add(g, ember_scale(g, x, 2.0f), b);
    g.build_forward(y);
    ember_buffer_place_tensor(buf, x, 0);
    ember_buffer_place_tensor(buf, b, 4096);
    size_t off = 8192;
    for (ember_tensor * n : g.nodes) {
        ember_buffer_place_tensor(buf, n, off);
        off += 4096;
    }
    std::vector<float> bv(1000, 0.0f);
    ember_tensor_set(b, bv.data(), 0, bv.size() * sizeof(float));
    for (int step = 0; step < 8; step++) {
        CAPTURE(step);
        std::vector<float> xv(1000);
        for (size_t i = 0; i < xv.size(); i++) xv[i] = static_cast<float>(step * 1000 + (int) i);
        if (step == 5) {
            ember_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));  // synchronous: nothing queued
        } else {
            REQUIRE(st->iface.set_tensor_async(st, x, xv.data(), 0, xv.size() * sizeof(float)));
        }
        if (step >= 6) {  // two queued inputs
            for (float & v : bv) v = static_cast<float>(step);
            REQUIRE(st->iface.set_tensor_async(st, b, bv.data(), 0, bv.size() * sizeof(float)));
        }
        std::fill(xv.begin(), xv.end(), -1.0f);  // the caller's memory reused at once
        REQUIRE(st->iface.graph_compute(st, &g, 0, static_cast<int32_t>(g.nodes.size())) == EMBER_OK);
        st->iface.synchronize(st);
        std::vector<float> got(1000);
        ember_tensor_get(y, got.data(), 0, got.size() * sizeof(float));
        bool ok = true;
        for (size_t i = 0; i < got.size(); i++) ok = ok && got[i] == 2.0f * static_cast<float>(step * 1000 + (int) i) + bv[i];
        CHECK(ok);
    }
    // Queued and then only synchronized (no graph took it): it still lands.
    std::vector<float> xv(1000, 3.0f);
    REQUIRE(st->iface.set_tensor_async(st, x, xv.data(), 0, xv.size() * sizeof(float)));
    st->iface.synchronize(st);
    std::vector<float> got(1000);
    ember_tensor_get(x, got.data(), 0, got.size() * sizeof(float));
    CHECK(got == xv);
    ember_buffer_free(buf);
    ember_stream_free(st);
    unsetenv("EMBER_CUDA_SCATTER_FLAT");
  }
}

}  // TEST_SUITE

#endif  // EMBER_HAVE_CUDA
