// The Vulkan backend's entry points (backends/vulkan). Devices are named "vulkan:N", N the
// Vulkan physical-device index. CPU implementations (Mesa's lavapipe) are left off the
// default device list, so that a machine without a GPU keeps running on the CPU backend;
// they are used when named ("vulkan:N", or "vulkan" when no other Vulkan device exists) or
// listed with EMBER_VULKAN_ALLOW_CPU=1. EMBER_VULKAN_VALIDATE=1 enables the Khronos
// validation layer (when installed) and counts the errors it reports.
#ifndef EMBER_VULKAN_BACKEND_H
#define EMBER_VULKAN_BACKEND_H

#include <cstdint>

#include "backend.h"

ember_backend_reg * ember_vulkan_backend_reg();

// Any Vulkan device by name: "vulkan" (the preferred one: discrete, integrated, virtual, CPU),
// "vulkan:N", or "vulkan:TEXT" (the first whose description contains TEXT, case-insensitive).
// Also reached through the registry (get_proc_address "ember_find_device"). nullptr if none.
ember_device * ember_vulkan_find_device(const char * name);

// Errors the validation layer reported so far (0 when validation is off).
int64_t ember_vulkan_validation_errors();
// True when EMBER_VULKAN_VALIDATE=1 and the validation layer could be enabled.
bool    ember_vulkan_validation_enabled();

#endif  // EMBER_VULKAN_BACKEND_H
