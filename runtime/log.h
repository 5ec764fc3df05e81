// Internal logging into the sink set by ember_log_set (thread-safe).
#ifndef EMBER_RUNTIME_LOG_H
#define EMBER_RUNTIME_LOG_H

#include <cstdint>

#include "ember.h"

void ember_log(int32_t level, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ember_log_set_sink(ember_log_callback cb, void * user_data);
void ember_log_set_max_level(int32_t level);

#endif  // EMBER_RUNTIME_LOG_H
