// Internal error type. Runtime code throws ember_error; runtime/c-api.cpp is the only place
// that catches and converts it into a status plus the thread-local last-error message.
#ifndef EMBER_RUNTIME_ERROR_H
#define EMBER_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

#include "ember.h"

struct ember_error : std::runtime_error {
    ember_status status;
    ember_error(ember_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

// printf-style message; never returns.
[[noreturn]] void ember_throw(ember_status status, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// printf into a std::string.
std::string ember_format(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#endif  // EMBER_RUNTIME_ERROR_H
