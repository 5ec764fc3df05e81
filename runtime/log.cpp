#include "runtime/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace {
std::mutex           g_log_mutex;
ember_log_callback   g_log_cb   = nullptr;
void *               g_log_ud   = nullptr;
std::atomic<int32_t> g_log_level{EMBER_LOG_WARN};

const char * level_name(int32_t level) {
    switch (level) {
        case EMBER_LOG_ERROR: return "error";
        case EMBER_LOG_WARN: return "warning";
        case EMBER_LOG_INFO: return "info";
        default: return "debug";
    }
}
}  // namespace

void ember_log(int32_t level, const char * fmt, ...) {
    if (level > g_log_level.load(std::memory_order_relaxed)) return;
    char    small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = std::vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    std::string big;
    const char * msg = small;
    if (n >= static_cast<int>(sizeof(small))) {
        big.resize(static_cast<size_t>(n) + 1);
        va_start(ap, fmt);
        std::vsnprintf(&big[0], big.size(), fmt, ap);
        va_end(ap);
        msg = big.c_str();
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_cb) {
        g_log_cb(level, msg, g_log_ud);
    } else {
        std::fprintf(stderr, "ember %s: %s\n", level_name(level), msg);
    }
}

void ember_log_set_sink(ember_log_callback cb, void * user_data) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_cb = cb;
    g_log_ud = user_data;
}

void ember_log_set_max_level(int32_t level) { g_log_level.store(level, std::memory_order_relaxed); }
