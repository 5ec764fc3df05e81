// Ember's own weight types (INT4, INT4_G32, NF4, FP8) for every armv8-a CPU (baseline Advanced
// SIMD): see ember-types-neon.inc.
#define EMBER_NEON_EMBER_REGISTER ember_cpu_register_neon_ember_types_base
#include "backends/cpu_simd/neon/ember-types-neon.inc"
