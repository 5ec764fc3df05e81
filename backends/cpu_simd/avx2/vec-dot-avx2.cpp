// AVX2 dot products and row converters: the body is shared with the AVX-512 build
// (vec-dot-x86.h), compiled here with AVX2 + FMA + F16C only.
#include "backends/cpu_simd/avx2/vec-dot-x86.h"

void ember_cpu_register_avx2_vec_dot(ember_cpu_kernel_table * t) { x86_register_vec_dot(t); }
