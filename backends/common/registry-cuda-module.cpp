// The shared library's way to the CUDA backend: libember-cuda.so, loaded at first use of the
// registry from the directory libember itself was loaded from (or from $EMBER_CUDA_MODULE, a
// path). A missing module means no CUDA devices, silently; a module that exists but cannot load
// (no libcublas, another API version) is a warning on stderr, and libember goes on without it.
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend.h"

namespace {

std::string module_path() {
    if (const char * p = std::getenv("EMBER_CUDA_MODULE")) return p;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void *>(&ember_registry_cuda), &info) || !info.dli_fname) return "libember-cuda.so";
    std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    return (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) + "libember-cuda.so";
}

}  // namespace

ember_backend_reg * ember_registry_cuda() {
    const std::string path = module_path();
    struct stat       st;
    if (path.find('/') != std::string::npos && ::stat(path.c_str(), &st) != 0) return nullptr;  // not installed
    void * h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        std::fprintf(stderr, "ember: warning: CUDA backend module %s not loaded: %s\n", path.c_str(), dlerror());
        return nullptr;
    }
    using init_fn = ember_backend_reg * (*)();
    const auto init = reinterpret_cast<init_fn>(dlsym(h, "ember_backend_init"));
    if (!init) {
        std::fprintf(stderr, "ember: warning: %s has no ember_backend_init\n", path.c_str());
        dlclose(h);
        return nullptr;
    }
    return init();  // the module stays loaded for the life of the process
}
