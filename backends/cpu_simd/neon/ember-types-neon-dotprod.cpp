// Ember's own weight types with the Armv8.2 dot-product extension (the INT4 sums as SDOT): the
// kernels of ember-types-neon.inc compiled with -march=armv8.2-a+dotprod (CMakeLists.txt).
#if !defined(__ARM_FEATURE_DOTPROD)
#    error "compile this file with -march=armv8.2-a+dotprod"
#endif
#define EMBER_NEON_EMBER_REGISTER ember_cpu_register_neon_ember_types_dotprod
#include "backends/cpu_simd/neon/ember-types-neon.inc"
