// The embedded SPIR-V (generated at build time from shaders/*.comp: see vulkan.cmake).
#ifndef EMBER_VK_SHADERS_H
#define EMBER_VK_SHADERS_H

#include <cstddef>
#include <cstdint>

struct ember_vk_shader_blob {
    const char *     name;       // "mul_mat_vec_q4_0", "cpy_f32_f16", ...
    const uint32_t * words;      // the SPIR-V (4-byte aligned)
    const uint32_t * words_end;  // past its last word
    size_t           n_words() const { return static_cast<size_t>(words_end - words); }
};

extern const ember_vk_shader_blob ember_vk_shader_blobs[];
extern const size_t               ember_vk_shader_blob_count;

#endif  // EMBER_VK_SHADERS_H
