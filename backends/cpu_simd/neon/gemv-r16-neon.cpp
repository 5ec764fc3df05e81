// R16 decode products for every armv8-a CPU (baseline Advanced SIMD, no dot-product
// instructions): see gemv-r16-neon.inc.
#define EMBER_NEON_R16_REGISTER ember_cpu_register_neon_gemv_r16_base
#include "backends/cpu_simd/neon/gemv-r16-neon.inc"
