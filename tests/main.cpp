// The one doctest runner. Adds --data-dir DIR (the shared reference data: fixtures/, models/).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/data-path.h"

int main(int argc, char ** argv) {
    std::vector<char *> rest;
    for (int i = 0; i < argc; i++) {
        if (std::strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) {
            ember_test_set_data_dir(argv[++i]);
            continue;
        }
        rest.push_back(argv[i]);
    }
    // The Vulkan backend keeps its pipeline cache under ~/.cache/ember by default: tests use
    // this process's temporary directory instead, unless the caller chose a place.
    setenv("EMBER_VULKAN_PIPELINE_CACHE", ember_test_tmp_dir().c_str(), 0);
    doctest::Context ctx;
    ctx.applyCommandLine(static_cast<int>(rest.size()), rest.data());
    return ctx.run();
}
