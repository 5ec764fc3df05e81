// The CUDA backend's switches from the environment (EMBER_CUDA_*; the README's GPU switches): one
// reading rule for all of them. Host-only C++ (the stream's .cpp files and the launchers in
// the .cu files use it); call sites cache what they read unless a test must switch it while
// the process runs.
#ifndef EMBER_CUDA_ENV_H
#define EMBER_CUDA_ENV_H

#include <cstdlib>
#include <cstring>
#include <initializer_list>

// A switch that is on unless NAME is "0".
inline bool ember_cuda_env_on(const char * name) {
    const char * e = std::getenv(name);
    return !(e && std::strcmp(e, "0") == 0);
}

// NAME's integer value when it is one of `allowed`, else `def` (unset, garbage or another number).
inline int ember_cuda_env_choice(const char * name, int def, std::initializer_list<int> allowed) {
    const char * e = std::getenv(name);
    if (!e || !*e) return def;
    char *     end = nullptr;
    const long v   = std::strtol(e, &end, 10);
    if (*end != '\0') return def;
    for (int a : allowed) {
        if (v == a) return a;
    }
    return def;
}

#endif  // EMBER_CUDA_ENV_H
