// Helpers of the NEON kernel files (backends/cpu_simd/neon/). Everything here is `static
// inline`: each file gets its own copy compiled with its own flags (the dot-product files use
// -march=armv8.2-a+dotprod), so no instruction of an extension can leak into code that a CPU
// without it runs (see the rules in backends/cpu_simd/kernels.h).
#ifndef EMBER_CPU_NEON_COMMON_H
#define EMBER_CPU_NEON_COMMON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"

struct ember_cpu_kernel_table;

// Registration of each NEON file group (called by neon-register.cpp only).
void ember_cpu_register_neon_float(ember_cpu_kernel_table * t);        // vec-dot-neon-float.cpp
void ember_cpu_register_neon_quantize(ember_cpu_kernel_table * t);     // quantize-neon.cpp
void ember_cpu_register_neon_int_base(ember_cpu_kernel_table * t);     // vec-dot-neon-int.cpp
void ember_cpu_register_neon_int_dotprod(ember_cpu_kernel_table * t);  // vec-dot-neon-dotprod.cpp
void ember_cpu_register_neon_ember_types_base(ember_cpu_kernel_table * t);     // ember-types-neon.cpp
void ember_cpu_register_neon_ember_types_dotprod(ember_cpu_kernel_table * t);  // ember-types-neon-dotprod.cpp
void ember_cpu_register_neon_attn(ember_cpu_kernel_table * t);     // attn-neon.cpp
void ember_cpu_register_neon_vec_ops(ember_cpu_kernel_table * t);  // vec-ops-neon.cpp
void ember_cpu_register_neon_gemm_i8mm(ember_cpu_kernel_table * t);  // gemm-neon-i8mm.cpp
void ember_cpu_register_neon_gemv_r16_base(ember_cpu_kernel_table * t);     // gemv-r16-neon.cpp
void ember_cpu_register_neon_gemv_r16_dotprod(ember_cpu_kernel_table * t);  // gemv-r16-neon-dotprod.cpp

// binary16 -> binary32 by the FPU: exact for every finite value and infinity (block scales).
static inline float neon_h2f(ember_half h) {
    __fp16 f;
    memcpy(&f, &h, sizeof(f));
    return static_cast<float>(f);
}

#endif  // EMBER_CPU_NEON_COMMON_H
