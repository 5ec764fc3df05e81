// Every architecture, one line each. tests/runtime/test_arch_registry.cpp walks this list.
#include <cstring>

#include "runtime/arch.h"

extern const ember_arch_desc ember_arch_llama;
extern const ember_arch_desc ember_arch_qwen2;
extern const ember_arch_desc ember_arch_qwen3;

namespace {
const ember_arch_desc * const k_archs[] = {
    &ember_arch_llama,
    &ember_arch_qwen2,
    &ember_arch_qwen3,
};
}  // namespace

const ember_arch_desc * const * ember_arch_list(int * n) {
    *n = static_cast<int>(sizeof(k_archs) / sizeof(k_archs[0]));
    return k_archs;
}

const ember_arch_desc * ember_arch_find(const char * name) {
    for (const ember_arch_desc * a : k_archs) {
        if (name && std::strcmp(a->name, name) == 0) return a;
    }
    return nullptr;
}
