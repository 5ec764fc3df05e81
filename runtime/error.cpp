#include "runtime/error.h"

#include <cstdarg>
#include <cstdio>

static std::string format_va(const char * fmt, va_list ap) {
    // vsnprintf consumes the list, so measure with a copy and then print with the original.
    va_list ap2;
    va_copy(ap2, ap);
    char buf[256];
    int  n = std::vsnprintf(buf, sizeof(buf), fmt, ap2);
    va_end(ap2);
    if (n < 0) return fmt;  // encoding error: the format itself is the best we have
    if (static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, static_cast<size_t>(n));
    std::string s(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(&s[0], s.size(), fmt, ap);
    s.resize(static_cast<size_t>(n));
    return s;
}

std::string ember_format(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = format_va(fmt, ap);
    va_end(ap);
    return s;
}

void ember_throw(ember_status status, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = format_va(fmt, ap);
    va_end(ap);
    throw ember_error(status, s);
}
