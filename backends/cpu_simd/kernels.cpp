// Chooses the CPU kernel table: the scalar reference overwritten by the best ISA available.
#include "kernels.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__aarch64__) && defined(__linux__)
#    include <sys/auxv.h>
#endif

namespace {

double vec_sum_sq(int64_t n, const float * x) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double) x[i] * x[i];
    return ss;
}

void vec_scale(int64_t n, const float * x, float s, float * y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

void vec_swiglu(int64_t n, const float * g, const float * u, float * y) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void fill_scalar(ember_cpu_kernel_table * t) {
    t->isa  = EMBER_CPU_ISA_SCALAR;
    t->name = "scalar";
    t->attn = {};
    t->vec  = {vec_sum_sq, vec_scale, vec_swiglu};
    for (int32_t c = 0; c < EMBER_TYPE_CELLS; c++) {
        const ember_type_traits * tr = ember_type_get_traits(ember_type_of_cell(c));
        t->types[c]                  = {};
        if (!tr) continue;
        t->types[c].vec_dot    = tr->vec_dot;
        t->types[c].from_float = tr->from_float;
        t->types[c].to_float   = tr->to_float;
    }
}

[[maybe_unused]] bool cpu_has(ember_cpu_isa isa) {
    switch (isa) {
        case EMBER_CPU_ISA_SCALAR: return true;
#if defined(__x86_64__) || defined(_M_X64)
        case EMBER_CPU_ISA_AVX2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        case EMBER_CPU_ISA_AVX512:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                   __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
        case EMBER_CPU_ISA_NEON: return true;
#endif
        default: return false;
    }
}

struct tables {
    ember_cpu_kernel_table t[EMBER_CPU_ISA_COUNT];
    bool                   have[EMBER_CPU_ISA_COUNT] = {};
    const ember_cpu_kernel_table * active = nullptr;

    tables() {
        for (int i = 0; i < EMBER_CPU_ISA_COUNT; i++) fill_scalar(&t[i]);
        have[EMBER_CPU_ISA_SCALAR] = true;
#if defined(__x86_64__) || defined(_M_X64)
        if (cpu_has(EMBER_CPU_ISA_AVX2)) {
            ember_cpu_kernel_table * a = &t[EMBER_CPU_ISA_AVX2];
            a->isa = EMBER_CPU_ISA_AVX2, a->name = "avx2";
            ember_cpu_register_avx2_vec_dot(a);
            ember_cpu_register_avx2_gemm(a);
            ember_cpu_register_avx2_ember_types(a);
            ember_cpu_register_avx2_attn(a);
            ember_cpu_register_avx2_vec_ops(a);
            ember_cpu_register_avx2_gemv_r16(a);  // not in the AVX-512 table: its own kernels come later
            have[EMBER_CPU_ISA_AVX2] = true;
        }
        if (cpu_has(EMBER_CPU_ISA_AVX512)) {
            ember_cpu_kernel_table * a = &t[EMBER_CPU_ISA_AVX512];
            a->isa = EMBER_CPU_ISA_AVX512, a->name = "avx512";
            ember_cpu_register_avx2_vec_dot(a);  // AVX2 cells first: AVX-512 files fill what they improve
            ember_cpu_register_avx2_gemm(a);
            ember_cpu_register_avx2_ember_types(a);
            ember_cpu_register_avx512_vec_dot(a);
            ember_cpu_register_avx512_gemm(a);
            ember_cpu_register_avx512_ember_types(a);
            ember_cpu_register_avx512_attn(a);
            ember_cpu_register_avx512_vec_ops(a);
            ember_cpu_register_avx512_gemv_r16(a);
            have[EMBER_CPU_ISA_AVX512] = true;
        }
#endif
#if defined(__aarch64__)
        {
            bool dotprod = false, i8mm = false;
#    if defined(__linux__)
            const unsigned long hw  = getauxval(AT_HWCAP);
            const unsigned long hw2 = getauxval(AT_HWCAP2);
            dotprod                 = (hw & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
            i8mm                    = (hw2 & (1ul << 13)) != 0; // HWCAP2_I8MM
#    endif
            ember_cpu_kernel_table * a = &t[EMBER_CPU_ISA_NEON];
            a->isa = EMBER_CPU_ISA_NEON, a->name = dotprod ? "neon+dotprod" : "neon";
            ember_cpu_register_neon(a, dotprod, i8mm);
            have[EMBER_CPU_ISA_NEON] = true;
        }
#endif
        int best = EMBER_CPU_ISA_SCALAR;
        for (int i = 0; i < EMBER_CPU_ISA_COUNT; i++) {
            if (have[i]) best = i;
        }
        if (const char * want = std::getenv("EMBER_CPU_ISA")) {
            for (int i = 0; i < EMBER_CPU_ISA_COUNT; i++) {
                if (std::strcmp(want, t[i].name) == 0 || (i == EMBER_CPU_ISA_NEON && std::strcmp(want, "neon") == 0)) {
                    while (i > 0 && !have[i]) i--;
                    best = i;
                    break;
                }
            }
        }
        active = &t[best];
    }
};

const tables & get() {
    static const tables t;
    return t;
}

}  // namespace

const ember_cpu_kernel_table * ember_cpu_kernels() { return get().active; }

const ember_cpu_kernel_table * ember_cpu_kernels_for(ember_cpu_isa isa) {
    if (isa < 0 || isa >= EMBER_CPU_ISA_COUNT) return nullptr;
    const tables & t = get();
    return t.have[isa] ? &t.t[isa] : nullptr;
}

const char * ember_cpu_isa_name() { return ember_cpu_kernels()->name; }
