// Large host-to-host copies split over a few helper threads: the logits a GPU backend reads
// back each decode step (a 128256-word row, 513 KB) come from memory the device just wrote, so
// one core copies them at DRAM latency (H200 host: 38 us, 13.5 GB/s). The copy is cut into
// chunks that the caller and the helpers take in turn; helpers that are late (asleep, or busy
// elsewhere) find no chunk left, so the copy is never slower than the caller's own memcpy by
// more than the wake-up call. Between jobs a helper polls for the next one for `spin_us`
// (decode steps come every millisecond or so), then sleeps.
#ifndef EMBER_BACKENDS_HOST_COPY_H
#define EMBER_BACKENDS_HOST_COPY_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor.h"  // EMBER_BACKEND_API

class EMBER_BACKEND_API ember_host_copier {
  public:
    // n_helpers threads besides the caller's (0: every copy is a plain memcpy).
    ember_host_copier(int n_helpers, int spin_us);
    ~ember_host_copier();
    ember_host_copier(const ember_host_copier &)             = delete;
    ember_host_copier & operator=(const ember_host_copier &) = delete;

    // dst[0, n) = src[0, n); returns when all of it is copied. One caller at a time.
    void copy(void * dst, const void * src, size_t n);

    int      helpers() const { return static_cast<int>(threads_.size()); }
    // The helpers a backend asks for: the environment variable `var` when it holds a count
    // (at most 16), else 4 on hosts of 16 or more cores, 2 on 8 to 15, none on smaller ones or when
    // `cores_busy` (a CPU device, whose own threads need the cores).
    static int helpers_wanted(const char * var, bool cores_busy);
    // Chunks the helpers copied so far (tests: the work was shared).
    uint64_t helper_chunks() const { return helper_chunks_.load(); }

    // Copies below this size are a plain memcpy.
    static constexpr size_t k_min_split = 128 * 1024;
    static constexpr size_t k_chunk     = 32 * 1024;

  private:
    void helper_main();
    void take_chunks(uint8_t * dst, const uint8_t * src, size_t n, bool helper);

    std::vector<std::thread> threads_;
    std::mutex               mutex_;
    std::condition_variable  cv_;
    std::atomic<bool>        stop_{false};
    int                      spin_us_;
    // The job: published under mutex_ with gen_ raised and open_ set; closed (open_ cleared)
    // by the caller before it waits for the helpers still in it (active_) to leave.
    std::atomic<uint64_t>    gen_{0};
    std::atomic<bool>        open_{false};
    uint8_t *                dst_ = nullptr;
    const uint8_t *          src_ = nullptr;
    size_t                   n_   = 0;
    std::atomic<size_t>      next_{0};   // next chunk to take
    std::atomic<size_t>      done_{0};   // chunks copied
    std::atomic<int>         active_{0}; // helpers inside the job
    std::atomic<uint64_t>    helper_chunks_{0};
};

#endif  // EMBER_BACKENDS_HOST_COPY_H
