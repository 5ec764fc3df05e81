// Quantized dot products for every armv8-a CPU (baseline Advanced SIMD, no dot-product
// instructions): see vec-dot-neon-int.inc.
#define EMBER_NEON_INT_REGISTER ember_cpu_register_neon_int_base
#include "backends/cpu_simd/neon/vec-dot-neon-int.inc"
