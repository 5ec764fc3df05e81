// Per-ISA kernel tables of the CPU backend.
//
// One table per instruction set; each starts as a copy of the scalar reference (the traits
// table of quant/) and the ISA's registration functions overwrite the cells they implement.
// The active table is chosen once, at first use, from the CPU's features (the best ISA this
// build and this CPU both have), or forced with the environment variable EMBER_CPU_ISA
// (scalar, avx2, avx512, neon; a level the CPU lacks falls back to the best it has).
// Tests compare every table with the scalar one through ember_cpu_kernels_for().
//
// Rules for the ISA directories (avx2/, avx512/, neon/): their files are compiled with that
// ISA's flags, so they must not define or instantiate anything that other files also use
// (no STL containers or algorithms, no inline functions from shared headers that are not
// plain data): helpers are `static inline` or in an anonymous namespace, and only the
// registration functions below have external linkage. quant/blocks.h (structs) and
// ember_half_to_float() calls are fine.
#ifndef EMBER_CPU_KERNELS_H
#define EMBER_CPU_KERNELS_H

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

enum ember_cpu_isa {
    EMBER_CPU_ISA_SCALAR = 0,
    EMBER_CPU_ISA_AVX2,    // x86-64 AVX2 + FMA + F16C
    EMBER_CPU_ISA_AVX512,  // x86-64 AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Zen 4 and later)
    EMBER_CPU_ISA_NEON,    // aarch64 Advanced SIMD; dotprod / i8mm cells used when present
    EMBER_CPU_ISA_COUNT
};

// Tile product for prefill: for r < nr, c < nc:
//   y[c * y_stride + r] = dot(weight row r, activation column c)
// Weight row r starts at w + r * w_stride (bytes; rows of the weight's type, k elements);
// column c starts at x + c * x_stride (bytes; k elements of the weight's vec_dot_type).
// y_stride counts floats. Must give the same values as vec_dot up to float summation order.
typedef void (*ember_gemm_fn)(int64_t k, int64_t nr, int64_t nc, const void * w, size_t w_stride,
                              const void * x, size_t x_stride, float * y, size_t y_stride);

// Decode product over weights repacked at load into 16-row groups (repack.h): for g < ng,
// r < 16: y[16 * g + r] = dot(row r of group g, x). Group g starts at w + g * group_stride;
// x is one column of the weight's vec_dot_type (k elements) and xs its block sums
// (ember_cpu_q8_sums). Must give the same values as vec_dot up to float summation order.
struct ember_cpu_q8_sum {
    float   d;  // the activation block's scale
    int32_t s;  // sum of its int8 values
};
typedef void (*ember_gemv_r16_fn)(int64_t k, const void * w, size_t group_stride, int64_t ng, const void * x,
                                  const ember_cpu_q8_sum * xs, float * y);

struct ember_cpu_type_kernels {
    ember_vec_dot_fn    vec_dot;     // row of this type . row of its vec_dot_type
    ember_from_float_fn from_float;  // floats -> this type (activation quantizer, KV-cache writes)
    ember_to_float_fn   to_float;    // this type -> floats (get_rows, KV-cache reads)
    ember_gemm_fn       gemm;        // nullptr: the matmul uses vec_dot
    ember_gemv_r16_fn   gemv_r16;    // nullptr: weights of this type are not repacked (repack.h)
};

// Attention tiles (ops-attention-tiled.cpp). A block of query rows is stored transposed,
// "queries in lanes": element i of query l at qt[i * ldq + l], so every kernel is elementwise
// across queries (no horizontal sums) and K/V rows (F32, converted per tile) are only read as
// broadcast scalars. nl (queries) is a multiple of 16; strides count floats. nullptr cells:
// the portable loops of ops-attention-tiled.cpp.
struct ember_cpu_attn_kernels {
    // s[j * lds + l] = sum_i k[j * ldk + i] * qt[i * ldq + l]   (j < nk, l < nl)
    void (*qk)(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, int64_t nl,
               float * s, size_t lds);
    // One online-softmax step over a score tile, per query l: s += mask (mask[j * ldm + l],
    // when mask is not null); mx = max(m[l], max_j s); alpha[l] = exp(m[l] - mx);
    // s = exp(s - mx) in place; l_sum[l] = l_sum[l] * alpha[l] + sum_j s; m[l] = mx. A query
    // whose scores are all -INF so far keeps m = -INF and gets zeros (exp of -INF is 0).
    void (*softmax)(int64_t nk, int64_t nl, float * s, size_t lds, const float * mask, size_t ldm, float * m,
                    float * l_sum, float * alpha);
    // acc[i * lda + l] = acc[i * lda + l] * alpha[l] + sum_j v[j * ldv + i] * p[j * ldp + l]
    // (i < d, j < nk, l < nl)
    void (*pv)(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp,
               const float * alpha, int64_t nl, float * acc, size_t lda);
    // y[i] = exp(x[i]) (any n): relative error about 1e-7 (Cephes expf polynomial); x below
    // -87.5 (and -INF) gives exactly 0.
    void (*exp)(int64_t n, const float * x, float * y);
};

// Row helpers of the F32 element-wise ops (ops-elementwise.cpp). The scalar table holds the
// portable loops (kernels.cpp); ISA files overwrite them. Any n; no alignment required.
struct ember_cpu_vec_kernels {
    // sum_i x[i]^2, accumulated in double (as ggml's RMS norm)
    double (*sum_sq)(int64_t n, const float * x);
    // y[i] = x[i] * s
    void (*scale)(int64_t n, const float * x, float s, float * y);
    // y[i] = g[i] / (1 + exp(-g[i])) * u[i] (exp within about 2 ulp of expf)
    void (*swiglu)(int64_t n, const float * g, const float * u, float * y);
};

struct ember_cpu_kernel_table {
    ember_cpu_isa          isa;
    const char *           name;  // "scalar", "avx2", "avx512", "neon", "neon+dotprod"
    ember_cpu_type_kernels types[EMBER_TYPE_CELLS];
    ember_cpu_attn_kernels attn;  // all nullptr in the scalar table
    ember_cpu_vec_kernels  vec;   // never nullptr

    // Cells of a type id; an id without a cell gets an empty cell (no kernels).
    const ember_cpu_type_kernels & of(int32_t type) const {
        static const ember_cpu_type_kernels none = {};
        const int32_t                       c    = ember_type_cell(type);
        return c >= 0 ? types[c] : none;
    }
};

// The active table (thread-safe, chosen once).
const ember_cpu_kernel_table * ember_cpu_kernels();
// The table of one ISA, or nullptr when this build or this CPU lacks it.
const ember_cpu_kernel_table * ember_cpu_kernels_for(ember_cpu_isa isa);
// Name of the active table, for logs and ember-bench ("avx512").
const char * ember_cpu_isa_name();

// Registration functions, one per ISA file group; each overwrites the cells it implements.
// Defined in the ISA directories (avx2/, avx512/, neon/), called by kernels.cpp.
#if defined(__x86_64__) || defined(_M_X64)
void ember_cpu_register_avx2_vec_dot(ember_cpu_kernel_table * t);    // avx2/vec-dot-*.cpp
void ember_cpu_register_avx2_gemm(ember_cpu_kernel_table * t);       // avx2/gemm-*.cpp
void ember_cpu_register_avx512_vec_dot(ember_cpu_kernel_table * t);  // avx512/vec-dot-*.cpp
void ember_cpu_register_avx512_gemm(ember_cpu_kernel_table * t);     // avx512/gemm-*.cpp
void ember_cpu_register_avx2_ember_types(ember_cpu_kernel_table * t);    // avx2/ember-types-*.cpp (INT4, NF4, FP8)
void ember_cpu_register_avx512_ember_types(ember_cpu_kernel_table * t);  // avx512/ember-types-*.cpp
void ember_cpu_register_avx2_attn(ember_cpu_kernel_table * t);    // avx2/attn-avx2.cpp
void ember_cpu_register_avx512_attn(ember_cpu_kernel_table * t);  // avx512/attn-avx512.cpp
void ember_cpu_register_avx2_vec_ops(ember_cpu_kernel_table * t);    // avx2/vec-ops-avx2.cpp
void ember_cpu_register_avx512_vec_ops(ember_cpu_kernel_table * t);  // avx512/vec-ops-avx512.cpp
void ember_cpu_register_avx2_gemv_r16(ember_cpu_kernel_table * t);    // avx2/gemv-r16-avx2.cpp
void ember_cpu_register_avx512_gemv_r16(ember_cpu_kernel_table * t);  // avx512/gemv-r16-avx512.cpp
#endif
#if defined(__aarch64__)
void ember_cpu_register_neon(ember_cpu_kernel_table * t, bool dotprod, bool i8mm);  // neon/*.cpp
#endif

#endif  // EMBER_CPU_KERNELS_H
