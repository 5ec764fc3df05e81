#include "vk-repack.h"

#include <cstdlib>
#include <cstring>

bool ember_vk_repack_wanted(const ember_tensor * t) {
    const char * v   = std::getenv("EMBER_VULKAN_REPACK");  // (read at each upload: the tests switch it)
    const bool   off = v && std::strcmp(v, "0") == 0;
    if (off || !(t->flags & EMBER_TENSOR_FLAG_WEIGHT) || t->view_src || t->type != EMBER_TYPE_Q6_K) return false;
    return t->ne[0] > 0 && t->ne[0] % 2048 == 0 && ember_nelements(t) > 0 && ember_is_contiguous(t);
}
