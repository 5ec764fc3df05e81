#include "support/data-path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

static std::string g_data_dir;

void ember_test_set_data_dir(const std::string & dir) { g_data_dir = dir; }

std::string ember_test_data_dir() {
    std::string d = g_data_dir;
    if (d.empty()) {
        const char * env = std::getenv("EMBER_SHARED_DIR");
        if (env) d = env;
    }
    struct stat st;
    if (d.empty() || stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
    return d;
}

std::string ember_test_data_path(const std::string & rel) {
    std::string d = ember_test_data_dir();
    if (d.empty()) return "";
    std::string p = d + "/" + rel;
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return "";
    return p;
}

namespace {
struct tmp_dir_holder {
    std::string path;
    ~tmp_dir_holder() {
        if (!path.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
    }
};
tmp_dir_holder g_tmp;
}  // namespace

std::string ember_test_tmp_dir() {
    if (g_tmp.path.empty()) {
        std::string tmpl = (std::filesystem::temp_directory_path() / "ember-test-XXXXXX").string();
        char * p = mkdtemp(tmpl.data());
        g_tmp.path = p ? p : "/tmp";
    }
    return g_tmp.path;
}

int ember_test_threads(int want) {
    const char * cap = std::getenv("EMBER_TEST_MAX_THREADS");
    const int    max = cap ? std::atoi(cap) : 0;
    return max >= 1 && want > max ? max : want;
}
