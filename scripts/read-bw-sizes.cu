// How fast one kernel can stream S bytes from device memory, for the sizes of a decode
// matvec's weights (Llama-3.1-8B Q4_0: K/V 2.4 MB, Q/O 9.4 MB, down 33 MB, gate+up 66 MB):
// the floor a matvec of that size can reach in one launch, fixed cost included.
// Build and run on the GPU machine: nvcc -O3 -arch=sm_90 scripts/read-bw-sizes.cu -o /tmp/rbw && /tmp/rbw
#include <cstdio>
#include <cuda_runtime.h>

// Each thread reads U 16-byte chunks per step, all issued before any is used.
template <int U>
__global__ void __launch_bounds__(256) read_kernel(const uint4 * p, size_t n, unsigned * sink) {
    unsigned acc = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const size_t j = i + u * stride;
            v[u]           = j < n ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// sm_90: one instruction asks the copy engine of the SM (TMA) to bring `bytes` (a multiple of
// 16) into L2; nothing comes back to registers.
__global__ void bulk_prefetch_kernel(const char * p, size_t bytes, unsigned chunk) {
#if __CUDA_ARCH__ >= 900
    const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x * chunk;
    for (size_t o = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * chunk; o < bytes; o += step) {
        const unsigned n = bytes - o < chunk ? static_cast<unsigned>(bytes - o) : chunk;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
    }
#endif
}

// Spins for about `ns` nanoseconds: the stand-in for a decode step's small kernels.
__global__ void spin_kernel(long long ns, unsigned * sink) {
    long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long t = t0;
    while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t == 0) *sink = 1;
}

int main() {
    const size_t big = size_t(512) << 20;
    char *       buf;
    char *       flush;
    unsigned *   sink;
    if (cudaMalloc(&buf, big) != cudaSuccess || cudaMalloc(&flush, big) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) {
        std::printf("no memory\n");
        return 1;
    }
    cudaMemset(buf, 1, big);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const double mbs[] = {2.36, 9.44, 33.0, 66.1, 200.0};
    std::printf("| MB | blocks/SM | one launch us | GB/s | 10 launches back to back, us each | GB/s |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (double mb : mbs) {
        const size_t n = static_cast<size_t>(mb * 1e6) / 16;
        for (int bps : {2, 4, 8}) {
            const int blocks = sms * bps;
            float     one = 1e30f, many = 1e30f;
            for (int rep = 0; rep < 5; rep++) {
                cudaMemsetAsync(flush, rep, big);  // evict buf from L2
                cudaEventRecord(e0);
                read_kernel<4><<<blocks, 256>>>(reinterpret_cast<const uint4 *>(buf), n, sink);
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                if (ms < one) one = ms;
                // 10 different slices back to back (none in L2 from the previous launch)
                cudaMemsetAsync(flush, rep, big);
                const size_t slices = big / 16 / n < 10 ? big / 16 / n : 10;
                cudaEventRecord(e0);
                for (size_t s = 0; s < slices; s++)
                    read_kernel<4><<<blocks, 256>>>(reinterpret_cast<const uint4 *>(buf) + s * n, n, sink);
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms, e0, e1);
                ms /= static_cast<float>(slices);
                if (ms < many) many = ms;
            }
            std::printf("| %.2f | %d | %.1f | %.0f | %.1f | %.0f |\n", mb, bps, one * 1e3, mb * 1e6 / (one * 1e-3) / 1e9, many * 1e3,
                        mb * 1e6 / (many * 1e-3) / 1e9);
        }
    }
    // L2-hot reads: the same slice twice, the second timed.
    std::printf("\n| MB | L2-hot read us | GB/s |\n| ---: | ---: | ---: |\n");
    for (double mb : {2.36, 9.44, 20.0, 33.0}) {
        const size_t n    = static_cast<size_t>(mb * 1e6) / 16;
        float        best = 1e30f;
        for (int rep = 0; rep < 5; rep++) {
            read_kernel<4><<<sms * 4, 256>>>(reinterpret_cast<const uint4 *>(buf), n, sink);
            cudaEventRecord(e0);
            read_kernel<4><<<sms * 4, 256>>>(reinterpret_cast<const uint4 *>(buf), n, sink);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (ms < best) best = ms;
        }
        std::printf("| %.2f | %.1f | %.0f |\n", mb, best * 1e3, mb * 1e6 / (best * 1e-3) / 1e9);
    }
    // A gap (spin) then a read, on one stream; beside it, on a second stream, a bulk prefetch of
    // the slice starting with the gap: does DRAM fill L2 while the chain waits?
    cudaStream_t sa, sb;
    cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking);
    cudaEvent_t go;
    cudaEventCreateWithFlags(&go, cudaEventDisableTiming);
    std::printf("\n| MB | gap us | prefetch blocks x32 thr, chunk KB | gap + read, no prefetch, us | with prefetch, us |\n| ---: | ---: | --- | ---: | ---: |\n");
    for (double mb : {9.44, 33.0}) {
        const size_t n = static_cast<size_t>(mb * 1e6) / 16;
        for (int gap : {5, 10, 20}) {
            for (int cfg = 0; cfg < 4; cfg++) {
                const int      pb    = cfg == 0 ? 1 : cfg == 1 ? 4 : cfg == 2 ? 16 : 132;
                const unsigned chunk = cfg == 0 ? 65536 : 16384;
                float          t[2]  = {1e30f, 1e30f};
                for (int rep = 0; rep < 5; rep++) {
                    for (int with = 0; with < 2; with++) {
                        cudaMemsetAsync(flush, rep, big, sa);
                        cudaEventRecord(e0, sa);
                        cudaEventRecord(go, sa);
                        cudaStreamWaitEvent(sb, go, 0);
                        if (with) bulk_prefetch_kernel<<<pb, 32, 0, sb>>>(buf, n * 16, chunk);
                        spin_kernel<<<1, 32, 0, sa>>>(gap * 1000LL, sink);
                        read_kernel<4><<<sms * 4, 256, 0, sa>>>(reinterpret_cast<const uint4 *>(buf), n, sink);
                        cudaEventRecord(e1, sa);
                        cudaEventSynchronize(e1);
                        cudaStreamSynchronize(sb);
                        float ms = 0;
                        cudaEventElapsedTime(&ms, e0, e1);
                        if (ms < t[with]) t[with] = ms;
                    }
                }
                std::printf("| %.2f | %d | %d, %u | %.1f | %.1f |\n", mb, gap, pb, chunk / 1024, t[0] * 1e3, t[1] * 1e3);
            }
        }
    }
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 1;
}
