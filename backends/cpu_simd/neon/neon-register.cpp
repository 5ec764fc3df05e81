// Registration of the NEON kernels (aarch64): baseline Advanced SIMD cells for every CPU, then
// the dot-product variants of the quantized dot products and of the R16 decode products
// (gemv_r16; both variants exist, so Q4_0 / Q8_0 / Q4_K / Q6_K weights are repacked on every
// aarch64 CPU) when the CPU has them, and the int8 matrix-multiply (SMMLA) prefill tiles when
// it has i8mm (the caller, backends/cpu_simd/kernels.cpp, reads HWCAP_ASIMDDP / HWCAP2_I8MM).
#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"

void ember_cpu_register_neon(ember_cpu_kernel_table * t, bool dotprod, bool i8mm) {
    ember_cpu_register_neon_float(t);
    ember_cpu_register_neon_quantize(t);
    ember_cpu_register_neon_attn(t);
    ember_cpu_register_neon_vec_ops(t);
    if (dotprod) {
        ember_cpu_register_neon_int_dotprod(t);
        ember_cpu_register_neon_ember_types_dotprod(t);
        ember_cpu_register_neon_gemv_r16_dotprod(t);
    } else {
        ember_cpu_register_neon_int_base(t);
        ember_cpu_register_neon_ember_types_base(t);
        ember_cpu_register_neon_gemv_r16_base(t);
    }
    if (i8mm) ember_cpu_register_neon_gemm_i8mm(t);  // Q4_0 / Q5_0 / Q8_0 / IQ4_NL prefill tiles; the others use vec_dot
}
