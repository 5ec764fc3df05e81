// ember_host_copier (host-copy.h).
#include "host-copy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

size_t chunks_of(size_t n) { return (n + ember_host_copier::k_chunk - 1) / ember_host_copier::k_chunk; }

}  // namespace

int ember_host_copier::helpers_wanted(const char * var, bool cores_busy) {
    const char * v = std::getenv(var);
    char *       end = nullptr;
    const long   n   = v && *v ? std::strtol(v, &end, 10) : -1;
    if (v && *v && *end == '\0' && n >= 0) return static_cast<int>(std::min(n, 16L));
    // (H200 host of 16 cores, Vulkan 1B decode: the 513 KB logits read 24.8-28.9 us with 2
    // helpers, 17.4-18.8 with 4, the same with 7.)
    const unsigned cores = std::thread::hardware_concurrency();
    return cores_busy || cores < 8 ? 0 : cores < 16 ? 2 : 4;
}

ember_host_copier::ember_host_copier(int n_helpers, int spin_us) : spin_us_(std::max(0, spin_us)) {
    for (int i = 0; i < n_helpers; i++) {
        try {
            threads_.emplace_back(&ember_host_copier::helper_main, this);
        } catch (...) {  // no more threads: copy with those there are
            break;
        }
    }
}

ember_host_copier::~ember_host_copier() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
    }
    cv_.notify_all();
    for (std::thread & t : threads_) t.join();
}

void ember_host_copier::take_chunks(uint8_t * dst, const uint8_t * src, size_t n, bool helper) {
    const size_t nch = chunks_of(n);
    for (;;) {
        const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= nch) return;
        const size_t off = i * k_chunk;
        std::memcpy(dst + off, src + off, std::min(k_chunk, n - off));
        if (helper) helper_chunks_.fetch_add(1, std::memory_order_relaxed);
        done_.fetch_add(1, std::memory_order_release);
    }
}

void ember_host_copier::copy(void * dst, const void * src, size_t n) {
    if (n == 0) return;  // (dst and src may be null then)
    if (threads_.empty() || n < k_min_split) {
        std::memcpy(dst, src, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        dst_ = static_cast<uint8_t *>(dst);
        src_ = static_cast<const uint8_t *>(src);
        n_   = n;
        next_.store(0);
        done_.store(0);
        open_.store(true);
        gen_.fetch_add(1);
    }
    cv_.notify_all();
    take_chunks(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), n, false);
    const size_t nch = chunks_of(n);
    while (done_.load(std::memory_order_acquire) < nch) cpu_relax();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        open_.store(false);  // no helper joins from here on
    }
    // Those that joined may still be between their last chunk and leaving: the job's fields
    // are not reused until they are out.
    while (active_.load(std::memory_order_acquire) > 0) cpu_relax();
}

void ember_host_copier::helper_main() {
    uint64_t   seen  = gen_.load();
    const auto ready = [&]() { return gen_.load(std::memory_order_acquire) != seen && open_.load(std::memory_order_acquire); };
    for (;;) {
        // Poll for the next job for a while (they come once per decode step), then sleep.
        if (spin_us_ > 0) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
            for (uint32_t i = 0; !ready() && !stop_.load(std::memory_order_relaxed); i++) {
                cpu_relax();
                if ((i & 255u) == 255u && std::chrono::steady_clock::now() > until) break;
            }
        }
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&]() { return stop_.load() || ready(); });
        if (stop_.load()) return;
        seen                = gen_.load();
        uint8_t *       dst = dst_;
        const uint8_t * src = src_;
        const size_t    n   = n_;
        active_.fetch_add(1);
        lock.unlock();
        take_chunks(dst, src, n, true);
        active_.fetch_sub(1, std::memory_order_release);
    }
}
