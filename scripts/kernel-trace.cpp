// A kernel timeline for any CUDA program, for the lent GPU machine, which has no Nsight Systems:
// a shared library the CUDA driver loads through CUDA_INJECTION64_PATH. It asks CUPTI for an
// activity record of every kernel (GPU start and end in ns; the records see into CUDA graphs and
// programmatic dependent launch) and writes them as CSV to $EMBER_TRACE_OUT at exit (with
// EMBER_TRACE_MEMCPY=1 also every copy on a stream: "memcpy HtoD small" and so on, bytes as gx);
// scripts/kernel-trace.py turns that into the per-kernel critical-path table of a decode token.
//
//   g++ -shared -fPIC -O2 -I/usr/local/cuda/include scripts/kernel-trace.cpp -o /tmp/kt.so
//       -L/usr/local/cuda/lib64 -lcupti   (one line)
//   CUDA_INJECTION64_PATH=/tmp/kt.so EMBER_TRACE_OUT=/tmp/trace.csv ember-bench -p 0 -n 32 ...
#include <cupti.h>

#include <cstdio>
#include <cstdlib>

namespace {

FILE * g_out = nullptr;

void CUPTIAPI buffer_requested(uint8_t ** buf, size_t * size, size_t * max_records) {
    *size        = size_t(16) << 20;
    *buf         = static_cast<uint8_t *>(std::aligned_alloc(8, *size));
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t * buf, size_t, size_t valid) {
    CUpti_Activity * r = nullptr;
    while (g_out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {  // copies on the streams: a row named by direction and size
            const auto * m   = reinterpret_cast<const CUpti_ActivityMemcpy6 *>(r);
            const char * dir = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? "HtoD" : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH" : "other";
            std::fprintf(g_out, "%llu,%llu,%u,%llu,1,1,1,memcpy %s %s\n", static_cast<unsigned long long>(m->start),
                         static_cast<unsigned long long>(m->end), m->streamId, static_cast<unsigned long long>(m->bytes), dir,
                         m->bytes >= 65536 ? "large" : "small");
            continue;
        }
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const auto * k = reinterpret_cast<const CUpti_ActivityKernel10 *>(r);
        std::fprintf(g_out, "%llu,%llu,%u,%d,%d,%d,%d,%s\n", static_cast<unsigned long long>(k->start), static_cast<unsigned long long>(k->end),
                     k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX, k->name ? k->name : "?");
    }
    std::free(buf);
}

void flush_at_exit() {
    cuptiActivityFlushAll(1);
    if (g_out) std::fclose(g_out);
    g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection() {
    const char * path = std::getenv("EMBER_TRACE_OUT");
    g_out             = std::fopen(path ? path : "/tmp/kernel-trace.csv", "w");
    if (!g_out) return 0;
    std::fprintf(g_out, "start,end,stream,gx,gy,gz,bx,name\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        (std::getenv("EMBER_TRACE_MEMCPY") && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)) {
        std::fprintf(stderr, "kernel-trace: CUPTI activity tracing unavailable\n");
        return 0;
    }
    std::atexit(flush_at_exit);
    return 1;
}
