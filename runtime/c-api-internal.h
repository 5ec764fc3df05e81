// Helpers shared by the C API files (runtime/c-api*.cpp), the only files that catch
// exceptions: each exported function runs its body through ember_api_guarded.
#ifndef EMBER_RUNTIME_C_API_INTERNAL_H
#define EMBER_RUNTIME_C_API_INTERNAL_H

#include <cstring>
#include <new>
#include <string>

#include "ember.h"
#include "runtime/error.h"

// The calling thread's last error message (ember_last_error()).
std::string & ember_api_last_error();

// Sets the last error and returns st (printf-style).
ember_status ember_api_fail(ember_status st, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Runs f (returning ember_status), converting every exception into a status + message.
// Clears the last error first, so a successful call leaves it empty.
template <typename F> ember_status ember_api_guarded(F && f) {
    try {
        ember_api_last_error().clear();
        return f();
    } catch (const ember_error & e) {
        ember_api_last_error() = e.what();
        return e.status;
    } catch (const std::bad_alloc &) {
        ember_api_last_error() = "out of memory";
        return EMBER_ERR_OOM;
    } catch (const std::exception & e) {
        ember_api_last_error() = e.what();
        return EMBER_ERR_INTERNAL;
    } catch (...) {
        ember_api_last_error() = "unknown internal error";
        return EMBER_ERR_INTERNAL;
    }
}

// Device `index` in the public numbering (0 = the CPU, which the registry keeps last), or
// nullptr when out of range or when ember_init fails.
struct ember_device;
ember_device * ember_api_device(int32_t index);

// Row of the i-th token of ctx's last batch (i < 0 counts from its end) among its outputs, or
// -1 with the last error set (fn names the entry point) when i is out of range or that token
// asked for no logits.
struct ember_context;
int32_t ember_api_output_row(const ember_context * ctx, int32_t i, const char * fn);

// snprintf-style copy: writes at most buf_size bytes (NUL-terminated when buf_size > 0) and
// returns the full length.
inline int32_t ember_api_copy_out(const std::string & s, char * buf, size_t buf_size) {
    if (buf && buf_size > 0) {
        const size_t n = s.size() < buf_size - 1 ? s.size() : buf_size - 1;
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    }
    return static_cast<int32_t>(s.size() > INT32_MAX ? INT32_MAX : s.size());
}

#endif  // EMBER_RUNTIME_C_API_INTERNAL_H
