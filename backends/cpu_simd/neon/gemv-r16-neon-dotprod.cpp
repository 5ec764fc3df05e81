// R16 decode products with the Armv8.2 dot-product extension (SDOT by element): the kernels of
// gemv-r16-neon.inc compiled with -march=armv8.2-a+dotprod (CMakeLists.txt). Registered only
// when the CPU reports it (HWCAP_ASIMDDP, backends/cpu_simd/kernels.cpp).
#if !defined(__ARM_FEATURE_DOTPROD)
#    error "compile this file with -march=armv8.2-a+dotprod"
#endif
#define EMBER_NEON_R16_REGISTER ember_cpu_register_neon_gemv_r16_dotprod
#include "backends/cpu_simd/neon/gemv-r16-neon.inc"
