// Host time split into consecutive parts, for the EMBER_PROFILE_HOST=1 profiles (the context,
// the scheduler and the CUDA stream each print theirs): lap(into) adds the time since the
// previous lap (or the start) to `into`. Off, it never reads the clock. Header-only, so the
// backend modules use it without calling into libember.
#ifndef EMBER_BACKENDS_HOST_TIMER_H
#define EMBER_BACKENDS_HOST_TIMER_H

#include <chrono>
#include <cstdlib>
#include <cstring>

// EMBER_PROFILE_HOST=1
inline bool ember_profile_host_on() {
    const char * e = std::getenv("EMBER_PROFILE_HOST");
    return e && std::strcmp(e, "1") == 0;
}

class ember_host_timer {
  public:
    explicit ember_host_timer(bool on) : on_(on), t_(on ? clock::now() : clock::time_point()) {}
    void lap(double & into) {
        if (!on_) return;
        const clock::time_point now = clock::now();
        into += std::chrono::duration<double>(now - t_).count();
        t_ = now;
    }

  private:
    using clock = std::chrono::steady_clock;
    bool              on_;
    clock::time_point t_;
};

#endif  // EMBER_BACKENDS_HOST_TIMER_H
