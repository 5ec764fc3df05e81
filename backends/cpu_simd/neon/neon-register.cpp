// Registration of the NEON kernels (aarch64): baseline Advanced SIMD cells for every CPU, then
// the dot-product variants of the quantized dot products when the CPU has them (the caller,
// backends/cpu_simd/kernels.cpp, reads HWCAP_ASIMDDP / HWCAP2_I8MM).
#include "backends/cpu_simd/kernels.h"
#include "backends/cpu_simd/neon/neon-common.h"

void ember_cpu_register_neon(ember_cpu_kernel_table * t, bool dotprod, bool i8mm) {
    (void) i8mm;  // no i8mm (SMMLA) tile kernel yet: the matmul uses vec_dot
    ember_cpu_register_neon_float(t);
    ember_cpu_register_neon_quantize(t);
    if (dotprod) {
        ember_cpu_register_neon_int_dotprod(t);
    } else {
        ember_cpu_register_neon_int_base(t);
    }
}
