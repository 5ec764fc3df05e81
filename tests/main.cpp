// The one doctest runner. Adds --data-dir DIR (the shared reference data: fixtures/, models/).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

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
    doctest::Context ctx;
    ctx.applyCommandLine(static_cast<int>(rest.size()), rest.data());
    return ctx.run();
}
