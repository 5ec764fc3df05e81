// The CUDA backend: registry entry, one device per GPU ("cuda:0", ...), a device-memory buffer
// type per device, and a stream per context (a cudaStream_t with its cuBLAS handle and
// scratch memory). Kernels live in ops-*.cu (cuda-ops.h).
//
// Weights: Q4_0, Q8_0 and Ember's own types (INT4, INT4_G32, NF4, FP8 E4M3/E5M2 and their _ROW
// forms) are converted to the CUDA layout when uploaded as model weights (cuda-repack.h;
// set_tensor, get_tensor gives the GGUF bytes back), and only the ops that understand it
// (MUL_MAT, GET_ROWS) are offered for them.
//
// Synchronization: graph_compute waits for its kernels before returning (the kernels'
// data-error flag must be read to return a status), and every buffer transfer runs on the
// device's copy stream and waits for it, so host-side order is device-side order. The one
// exception is graph_launch: a replayed decode graph is left running, with its outputs queued
// behind it (read_async) and its inputs queued before it (set_tensor_async), until wait(); the
// scheduler waits before any other transfer or compute (backends/common/scheduler.h).
//
// CUDA graphs: a node range made only of decode-sized work (no cuBLAS) is recorded into a CUDA
// graph on its second run and replayed as long as its signature (every node's op, type,
// addresses, shape, strides and parameters, and the scratch buffers) is unchanged: the runtime
// reuses one graph per shape, and only the data changes from token to token. A changed
// signature is recorded again and replaces the executable graph through cudaGraphExecUpdate,
// or a fresh instantiation when the topology changed. One launch per token instead of one per
// node removes the CPU launch cost and the gaps between kernels. It paid only once a decode
// step became one range (the scheduler hoists input copies to the start of the graph): H100,
// 1B-shape Q4_0 decode 553 -> 659 t/s, Q8_0 504 -> 591; 8B Q4_0 193 -> 194. On by default;
// EMBER_CUDA_GRAPHS=0 turns it off.
#include "cuda-backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "converted-weights.h"
#include "cuda-env.h"
#include "cuda-graph-signature.h"
#include "cuda-matvec-ext.h"
#include "cuda-ops.h"
#include "cuda-plan.h"
#include "cuda-repack.h"
#include "graph-signature.h"  // ember_hash4
#include "host-copy.h"
#include "host-timer.h"

namespace {

constexpr size_t k_alignment   = 256;
constexpr size_t k_stage_bytes = 8u << 20;  // each of the two pinned staging halves

double mib(size_t n) {
    return static_cast<double>(n) / (1024.0 * 1024.0);
}

// Makes device `id` current for the calling thread, reading the current one first (a
// thread-local read) and calling cudaSetDevice only when it differs, as llama.cpp's
// ggml_cuda_set_device does: the stream's entry points run once per token or more, and on the
// H200 host ~40 us per decode step went to graph_compute outside its own timed parts (its first
// call is cudaSetDevice) and ~13 us to each queued input copy (whose only CUDA call, in one
// experiment, was cudaSetDevice). Not yet measured with this change.
cudaError_t set_device(int id) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == id) return cudaSuccess;
    return cudaSetDevice(id);
}

struct cuda_device_ctx {
    int               id = 0;
    std::string       name;
    std::string       description;
    int               cc_major = 0, cc_minor = 0;
    ember_buffer_type buft{};
    ember_device      dev{};

    // Transfers: a copy stream and two pinned staging halves, created on first use.
    std::mutex   copy_mutex;
    cudaStream_t copy_stream = nullptr;
    char *       staging     = nullptr;
    cudaEvent_t  staged[2]   = {nullptr, nullptr};
    bool         copy_ready  = false;
    // Host copies out of the staging memory over helper threads (host-copy.h), for reads that
    // fit it whole: EMBER_CUDA_COPY_THREADS helpers (default 4 where the host has 16 or more
    // cores, 2 with 8 or more), polling for the next read for 5 ms (a decode step's logits come every ~1 ms).
    std::unique_ptr<ember_host_copier> copier;

    bool init_copy_locked() {
        if (copy_ready) return true;
        set_device(id);
        if (cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking) != cudaSuccess) {
            cudaGetLastError();
            copy_stream = nullptr;
            return false;
        }
        // Pinned staging is an optimization: without it, copies go from pageable memory.
        if (cudaMallocHost(reinterpret_cast<void **>(&staging), 2 * k_stage_bytes) != cudaSuccess ||
            cudaEventCreateWithFlags(&staged[0], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&staged[1], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            if (staging) cudaFreeHost(staging);
            staging = nullptr;
        }
        if (staging) {
            try {
                copier = std::make_unique<ember_host_copier>(ember_host_copier::helpers_wanted("EMBER_CUDA_COPY_THREADS", false), 5000);
            } catch (...) {
                copier.reset();  // plain memcpy
            }
        }
        copy_ready = true;
        return true;
    }
};

std::vector<std::unique_ptr<cuda_device_ctx>> & devices() {
    static std::vector<std::unique_ptr<cuda_device_ctx>> v;
    return v;
}

void report(const char * dev, const char * what, cudaError_t err) {
    std::fprintf(stderr, "ember: %s: %s failed: %s\n", dev, what, cudaGetErrorString(err));
}

cuda_device_ctx * dev_ctx(ember_device * dev) {
    return static_cast<cuda_device_ctx *>(dev->context);
}

//
// Buffers
//
struct cuda_buffer_ctx {
    cuda_device_ctx * dev;
    void *            ptr;
};

cuda_buffer_ctx * buf_ctx(ember_buffer * b) {
    return static_cast<cuda_buffer_ctx *>(b->context);
}

void cuda_buffer_free(ember_buffer * buf) {
    cuda_buffer_ctx * c = buf_ctx(buf);
    set_device(c->dev->id);
    cudaFree(c->ptr);
    delete c;
    delete buf;
}

void * cuda_buffer_get_base(ember_buffer * buf) {
    return buf_ctx(buf)->ptr;
}

// Host -> device through the pinned halves (double-buffered), or directly from pageable
// memory when pinned memory could not be had.
void upload(cuda_device_ctx * d, char * dst, const char * src, size_t size) {
    std::lock_guard<std::mutex> lock(d->copy_mutex);
    set_device(d->id);
    if (!d->init_copy_locked()) {
        cudaError_t e = cudaMemcpy(dst, src, size, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) report(d->name.c_str(), "cudaMemcpy (upload)", e);
        return;
    }
    cudaError_t e = cudaSuccess;
    if (!d->staging) {
        e = cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, d->copy_stream);
    } else {
        int half = 0;
        for (size_t off = 0; off < size && e == cudaSuccess; off += k_stage_bytes, half ^= 1) {
            const size_t n = std::min(k_stage_bytes, size - off);
            e              = cudaEventSynchronize(d->staged[half]);  // the half's previous copy is done
            if (e != cudaSuccess) break;
            char * st = d->staging + half * k_stage_bytes;
            std::memcpy(st, src + off, n);
            e = cudaMemcpyAsync(dst + off, st, n, cudaMemcpyHostToDevice, d->copy_stream);
            if (e == cudaSuccess) e = cudaEventRecord(d->staged[half], d->copy_stream);
        }
    }
    const cudaError_t es = cudaStreamSynchronize(d->copy_stream);
    if (e == cudaSuccess) e = es;
    if (e != cudaSuccess) report(d->name.c_str(), "upload", e);
}

void download(cuda_device_ctx * d, void * data, const char * src, size_t size);

// Weights of the CUDA layout (cuda-repack.h) are converted here, when uploaded whole, and read
// back as their GGUF bytes (converted-weights.h has the rules).
const ember_converted_layout k_cuda_layout = {EMBER_TENSOR_FLAG_CUDA_REPACKED, ember_cuda_repack_wanted, ember_cuda_repack,
                                              ember_cuda_unrepack};

void cuda_buffer_set_tensor(ember_buffer * buf, ember_tensor * t, const void * data, size_t offset, size_t size) {
    cuda_device_ctx *    d     = buf_ctx(buf)->dev;
    const ember_tensor * owner = ember_memory_owner(t);
    char *               od    = static_cast<char *>(owner->data);
    const auto read  = [&](void * dst, size_t n) { download(d, dst, od, n); };
    const auto write = [&](const void * src, size_t n) { upload(d, od, static_cast<const char *>(src), n); };
    if (!ember_converted_set(k_cuda_layout, d->name.c_str(), t, data, offset, size, read, write)) {
        upload(d, static_cast<char *>(t->data) + offset, static_cast<const char *>(data), size);
    }
}

void cuda_buffer_get_tensor(ember_buffer * buf, const ember_tensor * t, void * data, size_t offset, size_t size) {
    cuda_device_ctx *    d     = buf_ctx(buf)->dev;
    const ember_tensor * owner = ember_memory_owner(t);
    const auto read = [&](void * dst, size_t n) { download(d, dst, static_cast<const char *>(owner->data), n); };
    if (!ember_converted_get(k_cuda_layout, d->name.c_str(), t, data, offset, size, read)) download(d, data, static_cast<const char *>(t->data) + offset, size);
}

// Device -> host. Large reads (a decode step's logits row: 128256 floats, 501 KiB) go through
// the pinned staging memory: a copy into pageable memory took 65-87 us per 8B-shape token on an
// H200 host. Those that fit it whole in one copy, then out of it over the copier's helper
// threads (H200 host, through 128 KiB pieces with one core: 52 us per 1B token, 70 per 8B);
// larger ones in 128 KiB pieces, the copy engine filling one half while the host copies the
// other out. Small ones go directly.
void download(cuda_device_ctx * d, void * data, const char * src, size_t size) {
    std::lock_guard<std::mutex> lock(d->copy_mutex);
    set_device(d->id);
    cudaError_t  e;
    constexpr size_t k_piece = 128u << 10;
    if (d->init_copy_locked() && d->staging && d->copier && size >= 2 * k_piece && size <= 2 * k_stage_bytes) {
        e = cudaMemcpyAsync(d->staging, src, size, cudaMemcpyDeviceToHost, d->copy_stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(d->copy_stream);
        if (e == cudaSuccess) d->copier->copy(data, d->staging, size);
    } else if (d->staging && size >= 2 * k_piece) {
        const size_t n     = (size + k_piece - 1) / k_piece;
        const auto   issue = [&](size_t i) {
            const size_t      len = std::min(k_piece, size - i * k_piece);
            const int         h   = static_cast<int>(i % 2);
            cudaError_t       r   = cudaMemcpyAsync(d->staging + h * k_stage_bytes, src + i * k_piece, len, cudaMemcpyDeviceToHost, d->copy_stream);
            if (r == cudaSuccess) r = cudaEventRecord(d->staged[h], d->copy_stream);
            return r;
        };
        e = issue(0);
        if (e == cudaSuccess) e = issue(1);
        for (size_t i = 0; i < n && e == cudaSuccess; i++) {
            const int h = static_cast<int>(i % 2);
            e           = cudaEventSynchronize(d->staged[h]);
            if (e != cudaSuccess) break;
            std::memcpy(static_cast<char *>(data) + i * k_piece, d->staging + h * k_stage_bytes, std::min(k_piece, size - i * k_piece));
            if (i + 2 < n) e = issue(i + 2);
        }
        const cudaError_t es = cudaStreamSynchronize(d->copy_stream);
        if (e == cudaSuccess) e = es;
    } else if (d->copy_ready) {
        e = cudaMemcpyAsync(data, src, size, cudaMemcpyDeviceToHost, d->copy_stream);
        const cudaError_t es = cudaStreamSynchronize(d->copy_stream);
        if (e == cudaSuccess) e = es;
    } else {
        e = cudaMemcpy(data, src, size, cudaMemcpyDeviceToHost);
    }
    if (e != cudaSuccess) report(d->name.c_str(), "download", e);
}

bool is_cuda_buft(ember_buffer_type * buft);

bool cuda_buffer_cpy_tensor(ember_buffer * buf, const ember_tensor * src, ember_tensor * dst) {
    if (!src->buffer || ember_nbytes(src) != ember_nbytes(dst) || !ember_is_contiguous(src) || !ember_is_contiguous(dst)) return false;
    // The CUDA weight layout: through get/set_tensor, which convert.
    if ((ember_memory_owner(src)->flags | ember_memory_owner(dst)->flags) & EMBER_TENSOR_FLAG_CUDA_REPACKED) return false;
    const size_t n = ember_nbytes(src);
    if (ember_buffer_type_is_host(src->buffer->buft)) {
        upload(buf_ctx(buf)->dev, static_cast<char *>(dst->data), static_cast<const char *>(src->data), n);
        return true;
    }
    if (!is_cuda_buft(src->buffer->buft)) return false;
    cuda_device_ctx * sd = buf_ctx(src->buffer)->dev;
    cuda_device_ctx * dd = buf_ctx(buf)->dev;
    set_device(dd->id);
    cudaError_t e = sd == dd ? cudaMemcpy(dst->data, src->data, n, cudaMemcpyDeviceToDevice)
                             : cudaMemcpyPeer(dst->data, dd->id, src->data, sd->id, n);
    const cudaError_t es = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = es;
    if (e != cudaSuccess) {
        report(dd->name.c_str(), "device copy", e);
        return false;
    }
    return true;
}

void cuda_buffer_clear(ember_buffer * buf, uint8_t value) {
    cuda_buffer_ctx * c = buf_ctx(buf);
    set_device(c->dev->id);
    cudaError_t       e  = cudaMemset(c->ptr, value, buf->size);
    const cudaError_t es = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = es;
    if (e != cudaSuccess) report(c->dev->name.c_str(), "clear", e);
}

const ember_buffer_i k_cuda_buffer_i = {
    /* .free_buffer = */ cuda_buffer_free,
    /* .get_base    = */ cuda_buffer_get_base,
    /* .set_tensor  = */ cuda_buffer_set_tensor,
    /* .get_tensor  = */ cuda_buffer_get_tensor,
    /* .cpy_tensor  = */ cuda_buffer_cpy_tensor,
    /* .clear       = */ cuda_buffer_clear,
};

//
// Buffer type
//
const char * cuda_buft_name(ember_buffer_type * buft) {
    return static_cast<cuda_device_ctx *>(buft->context)->name.c_str();
}

ember_status cuda_buft_alloc(ember_buffer_type * buft, size_t size, ember_buffer ** out) {
    *out                = nullptr;
    cuda_device_ctx * d = static_cast<cuda_device_ctx *>(buft->context);
    set_device(d->id);
    void *      ptr = nullptr;
    cudaError_t e   = cudaMalloc(&ptr, std::max<size_t>(size, k_alignment));
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cudaGetLastError();
        std::fprintf(stderr, "ember: %s: cannot allocate %.1f MiB of device memory: %.1f MiB free of %.1f MiB (%s)\n",
                     d->name.c_str(), mib(size), mib(free_b), mib(total_b), cudaGetErrorString(e));
        return EMBER_ERR_OOM;
    }
    cuda_buffer_ctx * c   = new (std::nothrow) cuda_buffer_ctx{d, ptr};
    ember_buffer *    buf = c ? new (std::nothrow) ember_buffer : nullptr;
    if (!buf) {
        delete c;
        cudaFree(ptr);
        return EMBER_ERR_OOM;
    }
    buf->iface   = k_cuda_buffer_i;
    buf->buft    = buft;
    buf->context = c;
    buf->size    = size;
    buf->usage   = EMBER_BUFFER_USAGE_ANY;
    *out         = buf;
    return EMBER_OK;
}

size_t cuda_buft_alignment(ember_buffer_type *) {
    return k_alignment;
}

bool cuda_buft_is_host(ember_buffer_type *) {
    return false;
}

bool is_cuda_buft(ember_buffer_type * buft) {
    return buft && buft->iface.alloc_buffer == cuda_buft_alloc;
}

//
// Ops
//
bool is_f32(const ember_tensor * t) {
    return t && t->type == EMBER_TYPE_F32;
}

bool supports(const ember_tensor * op) {
    if (op->op < 0 || op->op >= EMBER_OP_COUNT) return false;
    for (int i = 0; i < ember_op_n_src(op->op); i++) {
        const bool optional = (op->op == EMBER_OP_ROPE && i == 2) || (op->op == EMBER_OP_ATTN && i == 3);
        if (!op->src[i] && !optional) return false;
    }
    const ember_tensor * s0 = op->src[0];
    const ember_tensor * s1 = op->src[1];
    // Weights in the CUDA layout: read only by MUL_MAT and GET_ROWS (2-D tables), not through views.
    for (int i = 0; i < EMBER_MAX_SRC; i++) {
        if (!op->src[i] || !(ember_memory_owner(op->src[i])->flags & EMBER_TENSOR_FLAG_CUDA_REPACKED)) continue;
        if (i != 0 || op->src[i]->view_src) return false;
        if (op->op == EMBER_OP_GET_ROWS ? s0->ne[2] * s0->ne[3] != 1 : op->op != EMBER_OP_MUL_MAT) return false;
    }
    switch (op->op) {
        case EMBER_OP_NONE:
        case EMBER_OP_VIEW: return true;
        case EMBER_OP_GET_ROWS:
            return is_f32(op) && s1->type == EMBER_TYPE_I32 && ember_cuda_type_has_chunks(s0->type) &&
                   (op->ne[0] % 32 == 0 || s0->type == EMBER_TYPE_F32 || s0->type == EMBER_TYPE_F16 || s0->type == EMBER_TYPE_BF16);
        case EMBER_OP_RMS_NORM:
        case EMBER_OP_SCALE: return is_f32(op) && is_f32(s0);
        case EMBER_OP_MUL:
        case EMBER_OP_ADD:
        case EMBER_OP_SWIGLU: return is_f32(op) && is_f32(s0) && is_f32(s1);
        case EMBER_OP_MUL_MAT:
            return is_f32(op) && is_f32(s1) && ember_cuda_type_has_chunks(s0->type) && s0->ne[0] <= INT32_MAX &&
                   s0->ne[1] <= INT32_MAX;
        case EMBER_OP_ROPE:
            return is_f32(op) && is_f32(s0) && s1->type == EMBER_TYPE_I32 && (!op->src[2] || is_f32(op->src[2]));
        case EMBER_OP_SET_ROWS:
            return ember_cuda_type_has_encoder(op->type) && s0->type == op->type && is_f32(s1) && op->src[2]->type == EMBER_TYPE_I32;
        case EMBER_OP_ATTN:
            return is_f32(op) && is_f32(s0) && ember_cuda_type_has_elem(s1->type) && ember_cuda_type_has_elem(op->src[2]->type) &&
                   (!op->src[3] || is_f32(op->src[3])) && s0->ne[0] <= EMBER_CUDA_ATTN_MAX_D;
        case EMBER_OP_CPY: return ember_cuda_supports_cpy(op);
        case EMBER_OP_TOP_K: return ember_cuda_supports_top_k(op);
        default: return false;
    }
}

bool is_matvec(const ember_tensor * node) {
    return ember_cuda_is_matvec(node);
}

// Whether a memo's scratch buffers are still the stream's (a recorded graph points into them).
bool same_scratch(void * const * scratch, const size_t * size, const ember_cuda_ctx & cu) {
    for (int i = 0; i < EMBER_CUDA_SCRATCH_SLOTS; i++) {
        if (scratch[i] != cu.scratch[i] || size[i] != cu.scratch_size[i]) return false;
    }
    return true;
}

// Whether running `node` may make the quantized activations in scratch slot 0 stale: it
// writes over the activations they were made from, or it uses slot 0 itself (the prefill
// MUL_MAT). A matvec checks its own result (ops-matvec-q.cu). RoPE and the cache writes
// between a layer's Q, K and V matvecs keep the copy.
bool clobbers_qx(const ember_cuda_ctx & ctx, const ember_tensor * node) {
    if (!ctx.qx_valid) return false;
    if (node->op == EMBER_OP_MUL_MAT) return !is_matvec(node);
    ember_tensor x;
    std::memset(&x, 0, sizeof(x));
    x.type = EMBER_TYPE_F32;
    x.data = const_cast<void *>(ctx.qx_data);
    for (int d = 0; d < 4; d++) {
        x.ne[d] = ctx.qx_ne[d];
        x.nb[d] = static_cast<size_t>(ctx.qx_nb[d]);
    }
    return ember_cuda_overlaps(node, &x);
}

// An integer matvec that takes the quantized copy of its x (mul_floats_needed's readers).
bool int_matvec_reader(const ember_tensor * c) {
    return !ember_cuda_ext_float_x(c->src[0]) && ember_cuda_mul_mat_vec_q_supported(c);
}

// Whether a fused norm's MUL result `mul` (made by nodes before k, with its quantized copy)
// needs its floats in memory: not when every reader is an integer matvec of this range of the
// graph (readers on another backend take the floats) reading it as x, so it takes the
// quantized copy, and nothing between the first and the last reader could replace that copy:
// only those matvecs, views, RoPE and cache writes run between (a layer's Q, K and V units;
// gate and up). The decode norm then leaves the MUL's rows unwritten (8 to 32 KB a token and
// norm).
// EMBER_CUDA_NORM_STORE=1: the decode norm writes both float rows always (to compare).
bool norm_store_all() {
    static const bool on = ember_cuda_env_choice("EMBER_CUDA_NORM_STORE", 0, {0, 1}) == 1;
    return on;
}

bool mul_floats_needed(const ember_graph * g, const ember_tensor * mul, int32_t k, int32_t end) {
    return !ember_cuda_only_matvecs_read(g, mul, k, end, int_matvec_reader);
}

ember_status compute_node(ember_cuda_ctx & ctx, ember_tensor * node) {
    if (clobbers_qx(ctx, node)) ctx.qx_valid = false;
    switch (node->op) {
        case EMBER_OP_GET_ROWS: return ember_cuda_get_rows(ctx, node);
        case EMBER_OP_RMS_NORM: return ember_cuda_rms_norm(ctx, node);
        case EMBER_OP_MUL: return ember_cuda_mul(ctx, node);
        case EMBER_OP_ADD: return ember_cuda_add(ctx, node);
        case EMBER_OP_MUL_MAT: return is_matvec(node) ? ember_cuda_mul_mat_vec(ctx, node) : ember_cuda_mul_mat_blas(ctx, node);
        case EMBER_OP_ROPE: return ember_cuda_rope(ctx, node);
        case EMBER_OP_SWIGLU: return ember_cuda_swiglu(ctx, node);
        case EMBER_OP_SET_ROWS: return ember_cuda_set_rows(ctx, node);
        case EMBER_OP_ATTN: return ember_cuda_attn(ctx, node);
        case EMBER_OP_CPY: return ember_cuda_cpy(ctx, node);
        case EMBER_OP_SCALE: return ember_cuda_scale(ctx, node);
        case EMBER_OP_TOP_K: return ember_cuda_top_k(ctx, node);
        default: return EMBER_ERR_UNSUPPORTED;
    }
}

// Runs node i of g, fused with node i + 1 where that saves a launch; *used = nodes done.
// EMBER_CUDA_FUSE=0: only the RMS_NORM + MUL fusion (no residual ADD, no quantized x), for comparisons.
// EMBER_CUDA_MV_GROUP=0: every matvec its own launch.
bool group_matvecs() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_GROUP");
    return on;
}

bool fuse_more() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_FUSE");
    return on;
}

// Two ROPE nodes with the same positions, frequencies and parameters.
bool rope_can_pair(const ember_tensor * a, const ember_tensor * b) {
    if (b->op != EMBER_OP_ROPE || a->src[1] != b->src[1] || a->src[2] != b->src[2]) return false;
    for (int p = 0; p < EMBER_MAX_OP_PARAMS; p++) {
        if (a->op_params[p] != b->op_params[p]) return false;
    }
    return true;
}

// How far ahead compute_at looks for matvecs to join a launch (Q's view and RoPE, K's: ~6).
constexpr int32_t k_hoist_window = EMBER_CUDA_HOIST_WINDOW;

// Whether node j may run before nodes i + 1 .. j - 1 (with node i and the group members so
// far): none of those nodes writes j's inputs, reads or writes j's output (the allocator may
// have given j memory that one of them uses), and j's output is not a group member's.
bool is_hoisted(const ember_cuda_ctx & ctx, const ember_tensor * t) {
    for (int h = 0; h < ctx.n_hoisted; h++) {
        if (ctx.hoisted[h] == t) return true;
    }
    return false;
}

bool hoistable(const ember_cuda_ctx & ctx, const ember_graph * g, int32_t i, int32_t j, ember_tensor * const * grp, int n) {
    const ember_tensor * c = g->nodes[j];
    if (is_hoisted(ctx, c)) return false;
    for (int m = 0; m < n; m++) {
        if (ember_cuda_overlaps(c, grp[m])) return false;
    }
    for (int32_t k = i + 1; k < j; k++) {
        const ember_tensor * b = g->nodes[k];
        if (is_hoisted(ctx, b)) continue;  // it ran already
        if (ember_cuda_overlaps(b, c)) return false;
        for (int s = 0; s < EMBER_MAX_SRC; s++) {
            if (b->src[s] == c || ember_cuda_overlaps(b->src[s], c)) return false;
        }
        if (b->op != EMBER_OP_VIEW && b->op != EMBER_OP_NONE) {
            for (int s = 0; s < EMBER_MAX_SRC; s++) {
                if (c->src[s] && ember_cuda_overlaps(b, c->src[s])) return false;
            }
        }
    }
    return true;
}

// EMBER_CUDA_KV_ATTN=0: a layer's writes into block-quantized KV caches always launch on their
// own (else kv_defer). Read at every graph_compute that records or runs eagerly (tests switch it).
bool kv_attn_on() {
    return ember_cuda_env_on("EMBER_CUDA_KV_ATTN");
}

// The SET_ROWS pair (a, b) at node i (b hoisted or next) left for the decode attention that
// reads both caches through views, when it can write the rows itself
// (ember_cuda_attn_kv_write_ok) and nothing between them in [i, end) reads or writes the caches
// or writes the pair's rows or indices (the pair then runs as late as that node). The attention
// writes the rows or launches the pair before its kernel (ember_cuda_kv_flush); compute_at
// launches it if the range ends first. True: left (ctx.kv_attn set).
bool kv_defer(ember_cuda_ctx & ctx, const ember_graph * g, int32_t i, int32_t end, ember_tensor * a, ember_tensor * b) {
    if (ctx.kv_attn || !kv_attn_on()) return false;
    for (int32_t k = i + 1; k < end && k <= i + 2 * k_hoist_window; k++) {
        const ember_tensor * n = g->nodes[k];
        if (n->op == EMBER_OP_ATTN) {
            ember_tensor * sk = n->src[1] && n->src[1]->src[0] == b ? b : a;
            ember_tensor * sv = sk == a ? b : a;
            if (!ember_cuda_attn_kv_write_ok(ctx, n, sk, sv)) return false;
            ctx.kv_attn   = n;
            ctx.kv_set[0] = sk;
            ctx.kv_set[1] = sv;
            return true;
        }
        if (n == a || n == b || n->op == EMBER_OP_VIEW || n->op == EMBER_OP_NONE || is_hoisted(ctx, n)) continue;  // no launch
        for (const ember_tensor * t : {a, b}) {
            if (ember_cuda_overlaps(n, t)) return false;
            for (int s = 0; s < EMBER_MAX_SRC; s++) {
                if (n->src[s] == t || ember_cuda_overlaps(n->src[s], t)) return false;
            }
            if (ember_cuda_overlaps(n, t->src[1]) || ember_cuda_overlaps(n, t->src[2])) return false;
        }
    }
    return false;
}

// EMBER_CUDA_MV_EPI=0: RoPE and the KV cache writes as their own kernels (no matvec epilogues).
bool mv_epilogues() {
    static const bool on = ember_cuda_env_on("EMBER_CUDA_MV_EPI");
    return on;
}

// EMBER_CUDA_MV_NORM: 2 (default) the decode norm in the product before it at any size
// (ember_cuda_mul_mat_vec_norm), 1 only where that product's grid fills the GPU (the default
// before session 41), 0 never (else mv_norm_plan). Read at every graph walk (tests switch it).
int mv_norm_mode() {
    return ember_cuda_env_choice("EMBER_CUDA_MV_NORM", 2, {0, 1, 2});
}

// The backend's conditions of ember_cuda_plan_mv_norm (cuda-plan.h): the fused ADD + RMS_NORM +
// MUL kernels' and mvr_norm_kernel's.
bool mv_norm_fuse_ok(const ember_tensor * mm, const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul) {
    return ember_cuda_can_fuse_add_rms_norm(add, norm) && ember_cuda_can_fuse_rms_norm_mul(norm, mul) && ember_cuda_mv_norm_ok(mm, add, norm, mul);
}

bool mv_norm_plan(const ember_graph * g, int32_t i, int32_t end, ember_tensor ** f) {
    if (!fuse_more() || mv_norm_mode() == 0) return false;
    ember_cuda_norm_hooks h;
    h.fuse_ok   = mv_norm_fuse_ok;
    h.reader_ok = ember_cuda_mv_norm_reader_ok;
    h.pair_ok   = ember_cuda_mv_norm_pair_ok;
    return ember_cuda_plan_mv_norm(g, i, end, h, f);
}

// A layer's Q, K and V units in one launch (cuda-plan.h finds them): *used = the nodes done, 0
// when there is nothing to fuse at node i.
// f16: F16 / BF16 units (EMBER_CUDA_F16_FUSE=1: ember_cuda_mul_mat_vec_f16_units), else integer.
ember_status run_units(ember_cuda_ctx & ctx, ember_graph * g, int32_t i, int32_t end, int32_t * used, bool f16) {
    *used = 0;
    ember_cuda_plan_hooks hooks;
    hooks.unit_ok   = f16 ? ember_cuda_mv_f16_unit_ok : ember_cuda_mv_unit_ok;
    hooks.can_share = f16 ? ember_cuda_mul_mat_vec_f16_can_share : ember_cuda_mul_mat_vec_q_can_share;
    hooks.group     = group_matvecs();
    const ember_cuda_unit_plan p = ember_cuda_plan_units(g, i, end, ctx.hoisted, ctx.n_hoisted, hooks);
    if (p.n == 0) return EMBER_OK;
    if (p.hoist) ctx.hoisted[ctx.n_hoisted++] = p.hoist;  // run now, skipped when the walk reaches it
    *used = p.next - i;
    return f16 ? ember_cuda_mul_mat_vec_f16_units(ctx, p.u, p.n) : ember_cuda_mul_mat_vec_q_units(ctx, p.u, p.n);
}

ember_status compute_at_node(ember_cuda_ctx & ctx, ember_graph * g, int32_t i, int32_t end, int32_t * used);

// Whether SWIGLU `sw` may make the 16-bit x of the prefill product `mm` after it
// (ember_cuda_swiglu_xh): mm reads sw as its one x matrix and converts it to F16 (weights
// neither F32 nor BF16), every tensor contiguous and flat.
bool swiglu_xh_ok(const ember_tensor * mm, const ember_tensor * sw) {
    if (mm->op != EMBER_OP_MUL_MAT || is_matvec(mm) || mm->src[1] != sw || !ember_cuda_env_on("EMBER_CUDA_XH_REUSE")) return false;
    const ember_type wt = mm->src[0]->type;
    if (wt == EMBER_TYPE_F32 || wt == EMBER_TYPE_BF16 || sw->ne[2] * sw->ne[3] != 1 || sw->type != EMBER_TYPE_F32) return false;
    const int64_t n = ember_nelements(sw);
    return ember_is_contiguous(sw) && ember_is_contiguous(sw->src[0]) && ember_is_contiguous(sw->src[1]) && ember_nelements(sw->src[0]) == n &&
           ember_nelements(sw->src[1]) == n && sw->ne[0] % 8 == 0;
}

// The node at i (and those its launch covers), its kernels left out when EMBER_CUDA_SKIP
// names its kind.
ember_status compute_at(ember_cuda_ctx & ctx, ember_graph * g, int32_t i, int32_t end, int32_t * used) {
    ctx.skip_now = (ctx.skip & ember_cuda_skip_kind_of(g->nodes[i])) != 0 || (ctx.skip_list && ember_cuda_skip_weight(ctx.skip_list, g->nodes[i]));
    ctx.graph_now = g;
    ctx.node_now  = i;
    if (ctx.xh_valid && g->nodes[i]->op == EMBER_OP_MUL_MAT && !is_matvec(g->nodes[i])) {
        ctx.xh_valid = ctx.xh_graph == g && ember_cuda_xh_reusable(g, ctx.xh_node, i);
    }
    ember_status st = compute_at_node(ctx, g, i, end, used);
    ctx.skip_now    = false;
    if (st == EMBER_OK && ctx.kv_attn && i + *used >= end) st = ember_cuda_kv_flush(ctx);  // the range ended before its attention
    return st;
}

}  // namespace

// The pair's own launch, counted (EMBER_CUDA_SKIP) as the SET_ROWS it is.
ember_status ember_cuda_kv_flush(ember_cuda_ctx & ctx) {
    if (!ctx.kv_attn) return EMBER_OK;
    ember_tensor * k = ctx.kv_set[0];
    ember_tensor * v = ctx.kv_set[1];
    ctx.kv_attn      = nullptr;
    ctx.kv_set[0] = ctx.kv_set[1] = nullptr;
    const bool skip_was = ctx.skip_now;
    ctx.skip_now        = (ctx.skip & ember_cuda_skip_kind_of(k)) != 0;
    const ember_status st = ember_cuda_set_rows_pair(ctx, k, v);
    ctx.skip_now          = skip_was;
    return st;
}

namespace {

ember_status compute_at_node(ember_cuda_ctx & ctx, ember_graph * g, int32_t i, int32_t end, int32_t * used) {
    ember_tensor * node = g->nodes[i];
    *used               = 1;
    for (int h = 0; h < ctx.n_hoisted; h++) {  // already run with an earlier matvec's launch
        if (ctx.hoisted[h] == node) {
            ctx.hoisted[h] = ctx.hoisted[--ctx.n_hoisted];
            return EMBER_OK;
        }
    }
    // [ADD] RMS_NORM [MUL] in one kernel, which also quantizes the result for the integer
    // matvec right after it (the next node reads that tensor): one launch instead of up to four.
    ember_tensor * add  = nullptr;
    int32_t        j    = i;
    if (i + 1 < end && fuse_more() && ember_cuda_can_fuse_add_rms_norm(node, g->nodes[i + 1]) && ember_nelements(node) > 0) {
        add = node;
        j   = i + 1;
    }
    ember_tensor * norm = g->nodes[j];
    if (norm->op == EMBER_OP_RMS_NORM && ember_nelements(norm) > 0) {
        ember_tensor * mul = j + 1 < end && ember_cuda_can_fuse_rms_norm_mul(norm, g->nodes[j + 1]) ? g->nodes[j + 1] : nullptr;
        if (add || mul) {
            const int32_t  k    = j + (mul ? 2 : 1);
            ember_tensor * next = k < end ? g->nodes[k] : nullptr;
            const bool     qx   = fuse_more() && mul && next && is_matvec(next) && next->src[1] == mul && ember_cuda_mul_mat_vec_q_supported(next);
            *used               = k - i;
            ctx.qx_valid        = false;
            // With the quantized copy (decode), the norm's rows only when something but the
            // MUL reads them and the MUL's when something reads its floats; both scans only
            // then (a prefill step or an eager decode step would pay them per norm).
            const bool skip_ok    = qx && !norm_store_all();
            const bool store_norm = !skip_ok || ember_graph_read_elsewhere(g, norm, mul, static_cast<size_t>(k));
            const bool store_mul  = !skip_ok || mul_floats_needed(g, mul, k, end);
            return ember_cuda_rms_norm_fused(ctx, add, norm, mul, qx, store_norm, store_mul);
        }
    }
    if (node->op == EMBER_OP_NONE || node->op == EMBER_OP_VIEW || ember_nelements(node) == 0) return EMBER_OK;
    // A decode matvec with the residual ADD, RMS_NORM and MUL after it (mv_norm_plan).
    ember_tensor * nf[3];
    if (is_matvec(node) && mv_norm_plan(g, i, end, nf)) {
        const ember_status st = ember_cuda_mul_mat_vec_norm(ctx, node, nf[0], nf[1], nf[2], mv_norm_mode() == 2);
        if (st != EMBER_ERR_UNSUPPORTED) {
            *used = 4;
            return st;
        }
    }
    // A matvec with the RoPE and KV cache write after it done by its store, with the next
    // such units (a layer's Q, K, V) in the same launch.
    // (F16 / BF16: mvh_fused_kernel's units, EMBER_CUDA_F16_FUSE=1.)
    const bool f16_fuse = is_matvec(node) && ember_cuda_mv_f16_fuse_on(node);
    if (is_matvec(node) && mv_epilogues() && (f16_fuse || ember_cuda_mul_mat_vec_q_supported(node))) {
        int32_t            n  = 0;
        const ember_status st = run_units(ctx, g, i, end, &n, f16_fuse);
        if (st != EMBER_OK || n > 0) {
            *used = n > 0 ? n : 1;
            return st;
        }
    }
    // The gate and up matvecs with their SWIGLU (EMBER_CUDA_MV_GLU): one launch instead of two.
    ember_tensor * gf[3];
    bool           store_gu = false;
    if (is_matvec(node) && fuse_more() && ember_cuda_mv_glu_on() &&
        ember_cuda_plan_glu(g, i, end, ctx.hoisted, ctx.n_hoisted, f16_fuse ? ember_cuda_mv_f16_glu_ok : ember_cuda_mv_glu_ok, gf, &store_gu)) {
        // (F16 / BF16: the SWIGLU's floats may go to scratch memory where only such products read them.)
        const ember_status st = f16_fuse ? ember_cuda_mul_mat_vec_f16_glu(ctx, gf[0], gf[1], gf[2], store_gu,
                                                                          ember_cuda_only_matvecs_read(g, gf[2], i + 3, end, ember_cuda_mv_f16_fuse_on))
                                         : ember_cuda_mul_mat_vec_glu(ctx, gf[0], gf[1], gf[2], store_gu);
        if (st != EMBER_ERR_UNSUPPORTED) {
            *used = 3;
            return st;
        }
    }
    // Matvecs over one x (Q, K, V; gate, up) in one launch: one grid drain instead of up to
    // three on the token's critical path. The graph's order (a depth-first walk from the
    // logits) puts Q's view and RoPE between the Q and K matvecs, so later matvecs are hoisted
    // here when that is safe (hoistable) and skipped when the walk reaches them.
    // (F16 / BF16 weights: their own kernel's groups, EMBER_CUDA_F16_GROUP=1.)
    const bool q_group = ember_cuda_mul_mat_vec_q_supported(node);
    if (is_matvec(node) && group_matvecs() && (q_group || node->src[0]->type == EMBER_TYPE_F16 || node->src[0]->type == EMBER_TYPE_BF16)) {
        const auto     can_group = q_group ? ember_cuda_mul_mat_vec_q_can_group : ember_cuda_mul_mat_vec_f16_can_group;
        ember_tensor * grp[3]    = {node, nullptr, nullptr};
        int            n         = 1;
        for (int32_t j = i + 1; j < end && j <= i + k_hoist_window && n < 3 && ctx.n_hoisted + n <= 6; j++) {
            ember_tensor * c = g->nodes[j];
            if (!is_matvec(c) || ember_nelements(c) == 0 || !can_group(node, c)) continue;
            if (!hoistable(ctx, g, i, j, grp, n)) continue;
            grp[n++] = c;
        }
        if (n > 1) {
            for (int m = 1; m < n; m++) {
                if (g->nodes[i + m] != grp[m]) ctx.hoisted[ctx.n_hoisted++] = grp[m];  // run now, skip later (at most 2 pending)
            }
            // The members right after node run now too: consume them as this step's nodes.
            int32_t run = 1;
            while (run < n && g->nodes[i + run] == grp[run]) run++;
            *used = run;
            // (Ember's types in the CUDA ext layout: ops-matvec-ext.cu, through the same call.)
            return q_group ? ember_cuda_mul_mat_vec_q_group(ctx, grp, n) : ember_cuda_mul_mat_vec_f16_group(ctx, grp, n);
        }
    }
    // ROPE of Q and K, SET_ROWS of K and V: each pair in one launch (the partner hoisted); a
    // SET_ROWS pair into block-quantized caches is left to the decode attention that reads them
    // next (kv_defer), which writes the rows itself: one launch less per layer.
    if ((node->op == EMBER_OP_ROPE || node->op == EMBER_OP_SET_ROWS) && fuse_more() && ctx.n_hoisted < 6) {
        for (int32_t j = i + 1; j < end && j <= i + k_hoist_window; j++) {
            ember_tensor * c  = g->nodes[j];
            const bool     ok = node->op == EMBER_OP_ROPE ? rope_can_pair(node, c) : ember_cuda_set_rows_can_pair(node, c);
            if (!ok || ember_nelements(c) == 0 || !hoistable(ctx, g, i, j, &node, 1)) continue;
            if (j == i + 1) {
                *used = 2;
            } else {
                ctx.hoisted[ctx.n_hoisted++] = c;
            }
            if (clobbers_qx(ctx, node) || clobbers_qx(ctx, c)) ctx.qx_valid = false;
            if (node->op == EMBER_OP_SET_ROWS && kv_defer(ctx, g, i, end, node, c)) return EMBER_OK;
            return node->op == EMBER_OP_ROPE ? ember_cuda_rope_pair(ctx, node, c) : ember_cuda_set_rows_pair(ctx, node, c);
        }
    }
    // Decode attention quantizing its output for the O matvec (ATTN, VIEW, MUL_MAT): one launch
    // less per layer. The view must be dst's memory as contiguous rows of heads x d floats.
    if (node->op == EMBER_OP_ATTN && fuse_more() && i + 2 < end) {
        const ember_tensor * view = g->nodes[i + 1];
        const ember_tensor * o    = g->nodes[i + 2];
        const bool           ok   = view->op == EMBER_OP_VIEW && view->src[0] == node && view->data == node->data && is_matvec(o) &&
                         o->src[1] == view && ember_cuda_mul_mat_vec_q_supported(o) && node->type == EMBER_TYPE_F32 &&
                         ember_is_contiguous(node) && ember_is_contiguous(view) && view->ne[0] == node->ne[0] * node->ne[1] &&
                         view->ne[1] == node->ne[2] && view->ne[2] * view->ne[3] == 1 && node->ne[3] == 1 && view->ne[0] % 32 == 0;
        if (ok) {
            ctx.qx_valid = false;
            return ember_cuda_attn(ctx, node, view);
        }
    }
    // SWIGLU making the 16-bit x of the prefill product right after it (FFN down): that
    // product's conversion launch saved, and the F32 rows' write and read back where only it
    // reads them (EMBER_CUDA_XH_REUSE=0: off, as the reuse of the copy).
    if (node->op == EMBER_OP_SWIGLU && fuse_more() && i + 1 < end && swiglu_xh_ok(g->nodes[i + 1], node)) {
        const bool         store = ember_graph_read_elsewhere(g, node, g->nodes[i + 1], static_cast<size_t>(i));
        const ember_status st    = ember_cuda_swiglu_xh(ctx, node, store);
        if (st != EMBER_ERR_UNSUPPORTED) return st;
    }
    // SWIGLU quantizing its result for the matvec right after it (FFN down): one launch less.
    if (node->op == EMBER_OP_SWIGLU && fuse_more() && i + 1 < end && is_matvec(g->nodes[i + 1]) && g->nodes[i + 1]->src[1] == node &&
        ember_cuda_mul_mat_vec_q_supported(g->nodes[i + 1])) {
        ctx.qx_valid = false;
        return ember_cuda_swiglu_fused(ctx, node, true);
    }
    return compute_node(ctx, node);
}

//
// Per-op GPU timer (EMBER_CUDA_PROFILE=1): an event after every node (and after the sub-steps
// a launcher marks), all eager (no CUDA graphs while it is on); the time between two events is
// counted under the later one's label. Printed to stderr when the stream is freed, with the
// host time spent in graph_compute beside the GPU sum (a gap there is host work or waits).
// A stream's first graph_compute is not counted: it pays CUDA's lazy loading of every kernel
// (and cuBLAS's first-call setup), which made the first profiles useless.
//
struct op_profile {
    struct entry {
        int64_t count = 0;
        double  ms    = 0;
    };
    std::vector<cudaEvent_t>     ev;
    std::vector<std::string>     label;  // label[i]: the work between ev[i - 1] and ev[i]
    size_t                       n = 0;
    std::map<std::string, entry> sum;
    double                       host_ms = 0;
    int64_t                      calls   = 0;
};

bool profile_on() {
    static const bool on = [] {
        const char * e = std::getenv("EMBER_CUDA_PROFILE");
        return e && *e && std::strcmp(e, "0") != 0;
    }();
    return on;
}

void prof_collect(op_profile * p) {
    if (p->calls == 0) p->n = 0;  // the first call: not counted (see above)
    for (size_t i = 1; i < p->n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        op_profile::entry & e = p->sum[p->label[i]];
        e.count++;
        e.ms += ms;
    }
    p->n = 0;
}

void prof_print(op_profile * p, const char * dev) {
    if (p->sum.empty()) return;
    std::vector<std::pair<std::string, op_profile::entry>> v(p->sum.begin(), p->sum.end());
    std::sort(v.begin(), v.end(), [](const auto & a, const auto & b) { return a.second.ms > b.second.ms; });
    double tot = 0;
    for (const auto & x : v) tot += x.second.ms;
    std::fprintf(stderr, "ember: %s: GPU time per op: %.2f ms in %lld graph_compute calls after the first (host %.2f ms)\n", dev, tot,
                 static_cast<long long>(p->calls - 1), p->host_ms);
    std::fprintf(stderr, "| op | n | ms | %% | avg us |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (const auto & x : v) {
        std::fprintf(stderr, "| %s | %lld | %.3f | %.1f | %.1f |\n", x.first.c_str(), static_cast<long long>(x.second.count), x.second.ms,
                     tot > 0 ? 100.0 * x.second.ms / tot : 0.0, 1e3 * x.second.ms / static_cast<double>(x.second.count));
    }
}

// "OP" plus the batch class (prefill-sized or decode-sized work) and a fused group's size.
std::string prof_label(const ember_tensor * node, int32_t used) {
    std::string l = ember_op_name(node->op);
    const int64_t rows = node->op == EMBER_OP_ATTN ? node->ne[2] : node->ne[1];
    l += rows > EMBER_CUDA_MATVEC_MAX_COLS ? " [batch]" : " [<=8]";
    if (used > 1) l += " +" + std::to_string(used - 1) + " fused";
    return l;
}

//
// Stream
//
struct cuda_stream_ctx {
    cuda_device_ctx *    dev = nullptr;
    ember_cuda_ctx       cu;
    ember_abort_callback abort_cb = nullptr;
    void *               abort_ud = nullptr;
    int *                h_error  = nullptr;  // pinned copy of cu.d_error

    // CUDA graph of the last captured node range (see the top of this file).
    cudaGraphExec_t      exec = nullptr;
    uint64_t exec_sig = 0;  // signature (ember_cuda_graph_signature) of the nodes recorded in exec
    uint64_t exec_cluster_sig = 0;  // cluster launches recorded in exec (ember_cuda_ctx::cluster_sig)
    // The last signature computed and what it was computed for: while no tensor descriptor
    // changed since (ember_tensor_epoch()), the same range and scratch buffers hash the same.
    struct {
        const void * g = nullptr;
        int32_t      begin = -1, end = -1;
        uint64_t     tepoch = 0, sig = 0;
        void *       scratch[EMBER_CUDA_SCRATCH_SLOTS]      = {};
        size_t       scratch_size[EMBER_CUDA_SCRATCH_SLOTS] = {};
    } sig_memo;
    uint64_t n_sigs     = 0;      // signatures computed (EMBER_PROFILE_HOST=1)
    bool     sig_always = false;  // EMBER_CUDA_SIGNATURE=always: hashed every time
    // EMBER_PROFILE_HOST=1: host seconds per part of graph_compute, printed when freed.
    bool     host_on = false;
    double   host_sig_s = 0, host_check_s = 0, host_launch_s = 0, host_wait_s = 0;
    uint64_t host_calls = 0, host_replays = 0;
    const void *    last_g = nullptr;  // the range run last: captured from its second run on
    int32_t         last_begin = -1, last_end = -1;
    size_t          last_n_nodes = 0;
    bool            graphs_off = false;  // EMBER_CUDA_GRAPHS=0; also set when a capture failed
    // Queued host -> device copies (set_tensor_async): the source bytes go into this pinned ring
    // and a cudaMemcpyAsync on the stream takes them from there. A region is written again
    // only after the stream was synchronized (stage_used back to 0), so no copy can still be
    // reading it. Allocated on first use; k_async_stage_bytes.
    char *          stage      = nullptr;
    size_t          stage_used = 0;
    bool            stage_failed = false;  // no pinned memory: copies go the synchronous way
    // EMBER_CUDA_DEFER_COPIES=1 (opt-in): the queued copies are not issued as they come; the
    // next graph_compute issues them first, inside the CUDA graph it records (memcpy nodes
    // reading the ring), so that a replayed decode step makes no CUDA call per input. The same
    // inputs land at the same ring offsets every step: the graph is replayed only while the
    // list's key matches the one it was recorded with. Issued eagerly by the eager paths,
    // synchronize() and a full ring. It passes the CUDA tests on an H200 but gained nothing
    // there (session 16, EMBER_PROFILE_HOST=1, 1B Q4_0: the scheduler's copies 31.2 -> 19.6 us
    // per token, the graph launch 4.4 -> 14.7 us; tg128 1436 against 1431, 8B 473 against 475),
    // so the copies are issued as they come by default.
    struct queued_copy {
        void * dst;
        size_t at, size;  // ring offset, bytes
    };
    std::vector<queued_copy> pending;
    uint64_t                 exec_copies = 0;          // key of the pending list recorded in exec
    bool                     defer_copies = false;     // EMBER_CUDA_DEFER_COPIES=1
    // Merged input copies (EMBER_CUDA_MERGE_COPIES, default 2): the queued copies are kept as
    // with DEFER, but issued eagerly before any work (never inside a recorded graph): two or
    // more as one copy of their ring span into `mirror` (device memory at the ring's offsets)
    // and one scatter kernel (ember_cuda_scatter), instead of a cudaMemcpyAsync each. The kernel
    // trace of a queued 1B Q4_0 step (session 22): its four input copies took 10.2 us of the
    // GPU's critical path, and the host ~18-33 us to issue them.
    // 2 (merge_side): that copy on its own stream (up_stream), which the compute stream waits
    // for (up_done) only before the scatter kernel, so the copy runs while the step before still
    // computes and only the scatter is on the critical path. H200 tg128 (session 29), a copy
    // each (=0) / merged on the compute stream (=1) / on its own stream (=2): 1B Q4_0 1897.7 /
    // 1888.1 / 1927.7, 8B Q4_0 541.9 / 542.6 / 545.2.
    bool                     merge_copies = false;
    char *                   mirror       = nullptr;
    bool                     merge_side   = false;
    cudaStream_t             up_stream    = nullptr;
    cudaEvent_t              up_done      = nullptr;
    // Work graph_launch left running (a decode step the host did not wait for): finish() waits
    // for it and returns its status. Reads queued behind it (read_async) land in `out`
    // (pinned, grown on demand, one read at a time).
    bool   running  = false;
    char * out      = nullptr;
    size_t out_size = 0;
    // The read's path off the compute stream: a device-to-device copy of the outputs into
    // `side` on the compute stream (the next step may overwrite them), then the copy to `out` on
    // `read_stream` while the next step's kernels run. `read_done` guards `side` against the next
    // step's copy into it. Made on the first read; without them the read goes on the compute
    // stream.
    char *       side        = nullptr;
    cudaStream_t read_stream = nullptr;
    cudaEvent_t  read_ready = nullptr, read_done = nullptr;
    bool         read_setup_failed = false;  // also EMBER_CUDA_READ_SIDE=0: the read on the compute stream
    bool         read_pending      = false;  // a copy on read_stream not yet waited for
};

// The pending copies' key (their destinations, ring offsets and sizes, in order).
uint64_t pending_key(const cuda_stream_ctx * c) {
    ember_hash4 h;
    h.mix(static_cast<int64_t>(c->pending.size()));
    for (const cuda_stream_ctx::queued_copy & q : c->pending) {
        h.mix_ptr(q.dst);
        h.mix2(static_cast<int64_t>(q.at), static_cast<int64_t>(q.size));
    }
    return h.finish();
}

// Issues the pending copies on the stream (into a recording when one is open). Kept until
// the caller knows they ran (eagerly, or in a graph that was launched): pending_done().
cudaError_t pending_issue(cuda_stream_ctx * c) {
    for (const cuda_stream_ctx::queued_copy & q : c->pending) {
        const cudaError_t e = cudaMemcpyAsync(q.dst, c->stage + q.at, q.size, cudaMemcpyHostToDevice, c->cu.stream);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
void pending_done(cuda_stream_ctx * c) { c->pending.clear(); }

constexpr size_t k_async_stage_bytes = 16u << 20;
constexpr size_t k_merge_max_span    = 256u << 10;  // larger spans: a copy each

// The pending copies as one copy of their ring span and one scatter kernel (merge_copies):
// false when they do not qualify (one copy, too many or too large, no mirror memory).
bool pending_merge(cuda_stream_ctx * c, cudaError_t * e) {
    const size_t n = c->pending.size();
    if (!c->merge_copies || n < 2 || n > static_cast<size_t>(k_cuda_scatter_max)) return false;
    size_t lo = SIZE_MAX, hi = 0;
    for (const cuda_stream_ctx::queued_copy & q : c->pending) {
        lo = std::min(lo, q.at);
        hi = std::max(hi, q.at + q.size);
    }
    if (hi - lo > k_merge_max_span) return false;
    if (!c->mirror && cudaMalloc(reinterpret_cast<void **>(&c->mirror), k_async_stage_bytes) != cudaSuccess) {
        cudaGetLastError();
        c->mirror       = nullptr;
        c->merge_copies = false;  // no device memory for it: a copy each from now on
        return false;
    }
    ember_cuda_piece p[k_cuda_scatter_max];
    for (size_t k = 0; k < n; k++) p[k] = {c->pending[k].dst, static_cast<uint32_t>(c->pending[k].at), static_cast<uint32_t>(c->pending[k].size)};
    if (c->merge_side && !c->up_stream) {
        if (cudaStreamCreateWithFlags(&c->up_stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->up_done, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            c->merge_side = false;  // the copy on the compute stream, as mode 1
        }
    }
    // On up_stream (merge_side): the ring and mirror regions are written again only after the
    // compute stream was synchronized, and it waits for this copy, so nothing can overwrite them
    // under it.
    *e = cudaMemcpyAsync(c->mirror + lo, c->stage + lo, hi - lo, cudaMemcpyHostToDevice, c->merge_side ? c->up_stream : c->cu.stream);
    if (*e == cudaSuccess && c->merge_side) *e = cudaEventRecord(c->up_done, c->up_stream);
    if (*e == cudaSuccess && c->merge_side) *e = cudaStreamWaitEvent(c->cu.stream, c->up_done, 0);
    if (*e == cudaSuccess && ember_cuda_scatter(c->cu, c->mirror, p, static_cast<int>(n)) != EMBER_OK) *e = cudaErrorLaunchFailure;
    return true;
}

// Eagerly, outside any recording.
cudaError_t pending_flush(cuda_stream_ctx * c) {
    if (c->pending.empty()) return cudaSuccess;
    cudaError_t e = cudaSuccess;
    if (!pending_merge(c, &e)) e = pending_issue(c);
    pending_done(c);
    if (e != cudaSuccess) report(c->dev->name.c_str(), "queued upload", e);
    return e;
}

// The stream waited for: every queued copy has read its ring region.
void stage_reset(cuda_stream_ctx * c) {
    c->stage_used = 0;
}

const char * cuda_stream_get_name(ember_stream * s) {
    return static_cast<cuda_stream_ctx *>(s->context)->dev->name.c_str();
}

void destroy_stream_ctx(cuda_stream_ctx * c) {
    set_device(c->cu.device);
    if (c->cu.stream) cudaStreamSynchronize(c->cu.stream);
    if (c->cu.prof) {
        op_profile * p = static_cast<op_profile *>(c->cu.prof);
        prof_print(p, c->dev->name.c_str());
        for (cudaEvent_t e : p->ev) cudaEventDestroy(e);
        delete p;
        c->cu.prof = nullptr;
    }
    if (c->host_on && c->host_calls > 0) {
        const double us = 1e6 / static_cast<double>(c->host_calls);
        std::fprintf(stderr,
                     "ember: %s: host time per graph_compute over %llu (%llu replays): signature %.1f us (%llu computed), checks + "
                     "recording or eager launches %.1f us, replay launch %.1f us, wait %.1f us\n",
                     c->dev->name.c_str(), static_cast<unsigned long long>(c->host_calls), static_cast<unsigned long long>(c->host_replays),
                     c->host_sig_s * us, static_cast<unsigned long long>(c->n_sigs), c->host_check_s * us, c->host_launch_s * us, c->host_wait_s * us);
    }
    if (c->up_stream) cudaStreamSynchronize(c->up_stream);  // (its copies read stage, write mirror)
    for (int i = 0; i < EMBER_CUDA_SCRATCH_SLOTS; i++) cudaFree(c->cu.scratch[i]);
    if (c->stage) cudaFreeHost(c->stage);
    if (c->mirror) cudaFree(c->mirror);
    if (c->read_stream) cudaStreamSynchronize(c->read_stream);
    if (c->out) cudaFreeHost(c->out);
    if (c->side) cudaFree(c->side);
    if (c->read_ready) cudaEventDestroy(c->read_ready);
    if (c->read_done) cudaEventDestroy(c->read_done);
    if (c->read_stream) cudaStreamDestroy(c->read_stream);
    if (c->up_done) cudaEventDestroy(c->up_done);
    if (c->up_stream) cudaStreamDestroy(c->up_stream);
    cudaFree(c->cu.d_error);
    cudaFree(c->cu.d_count);
    cudaFree(c->cu.d_mvn_part);
    cudaFree(c->cu.d_mvn_count);
    if (c->h_error) cudaFreeHost(c->h_error);
    if (c->exec) cudaGraphExecDestroy(c->exec);
    if (c->cu.cublas) cublasDestroy(c->cu.cublas);
    if (c->cu.stream) cudaStreamDestroy(c->cu.stream);
    cudaGetLastError();
    delete c;
}

void cuda_stream_free(ember_stream * s) {
    destroy_stream_ctx(static_cast<cuda_stream_ctx *>(s->context));
    delete s;
}

// Waits for the stream; then the first data error the kernels recorded, if any.
// The flag comes back with the same wait (one round trip per graph_compute, not two).
ember_status finish(cuda_stream_ctx * c) {
    c->running    = false;
    cudaError_t e = cudaMemcpyAsync(c->h_error, c->cu.d_error, sizeof(int), cudaMemcpyDeviceToHost, c->cu.stream);
    if (e != cudaSuccess) {
        report(c->dev->name.c_str(), "reading the error flag", e);
        cudaStreamSynchronize(c->cu.stream);
        return EMBER_ERR_BACKEND;
    }
    e = cudaStreamSynchronize(c->cu.stream);
    if (e != cudaSuccess) {
        report(c->dev->name.c_str(), "graph execution", e);
        return EMBER_ERR_BACKEND;
    }
    stage_reset(c);
    const int err = *c->h_error;
    if (err != 0) {
        cudaMemset(c->cu.d_error, 0, sizeof(int));
        cudaDeviceSynchronize();
        std::fprintf(stderr, "ember: %s: a kernel found bad data (status %d, e.g. a row index out of range)\n",
                     c->dev->name.c_str(), err);
        return err;
    }
    return EMBER_OK;
}

std::atomic<uint64_t> g_instantiations{0};  // graphs instantiated by run_captured (ember_cuda_graph_instantiations)

// Records nodes [begin, end) into a CUDA graph, updates (or instantiates) the stream's
// executable graph with it and launches it. EMBER_ERR_UNSUPPORTED when nothing was launched:
// the caller runs the nodes eagerly, this time only when scratch memory had to grow (*retry),
// else from now on.
ember_status run_captured(cuda_stream_ctx * c, ember_graph * g, int32_t begin, int32_t end, bool * retry) {
    *retry = false;
    cudaStream_t st = c->cu.stream;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return EMBER_ERR_UNSUPPORTED;
    }
    c->cu.capturing   = true;
    c->cu.n_hoisted   = 0;
    c->cu.kv_attn     = nullptr;
    c->cu.h_t         = nullptr;
    c->cu.cluster_sig     = 0;
    c->cu.capture_launch0 = c->cu.n_launch;
    ember_status rs = pending_issue(c) == cudaSuccess ? EMBER_OK : EMBER_ERR_BACKEND;  // the queued inputs first
    for (int32_t i = begin, used = 1; i < end && rs == EMBER_OK; i += used) rs = compute_at(c->cu, g, i, end, &used);
    c->cu.capturing = false;
    cudaGraph_t graph = nullptr;
    cudaError_t e     = cudaStreamEndCapture(st, &graph);
    if (rs != EMBER_OK || e != cudaSuccess || !graph) {
        cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        *retry = rs == EMBER_ERR_OOM && e == cudaSuccess;  // scratch must grow: once eagerly, then record again
        if (*retry) return EMBER_ERR_UNSUPPORTED;
        std::fprintf(stderr, "ember: %s: recording a CUDA graph failed (%s); running nodes one by one\n", c->dev->name.c_str(),
                     rs != EMBER_OK ? ember_status_str(rs) : cudaGetErrorString(e));
        return EMBER_ERR_UNSUPPORTED;
    }
    if (c->exec && c->exec_cluster_sig != c->cu.cluster_sig) {  // another cluster shape: no update (cuda-ops.h)
        cudaGraphExecDestroy(c->exec);
        c->exec = nullptr;
    }
    if (c->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(c->exec, graph, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(c->exec);
            c->exec = nullptr;
        }
    }
    if (!c->exec) {
        g_instantiations.fetch_add(1, std::memory_order_relaxed);
        e = cudaGraphInstantiate(&c->exec, graph, 0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            c->exec = nullptr;
            cudaGraphDestroy(graph);
            std::fprintf(stderr, "ember: %s: instantiating a CUDA graph failed (%s); running nodes one by one\n", c->dev->name.c_str(),
                         cudaGetErrorString(e));
            return EMBER_ERR_UNSUPPORTED;
        }
    }
    cudaGraphDestroy(graph);
    const uint64_t copies = pending_key(c);
    e = cudaGraphLaunch(c->exec, st);
    if (e != cudaSuccess) {
        report(c->dev->name.c_str(), "cudaGraphLaunch", e);
        return EMBER_ERR_BACKEND;
    }
    c->exec_copies      = copies;
    c->exec_cluster_sig = c->cu.cluster_sig;
    pending_done(c);
    return EMBER_OK;
}

// graph_compute (queue = false) and graph_launch (queue = true: a replayed graph is left
// running; every other path waits, as graph_compute does).
ember_status run_range(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end, bool queue) {
    cuda_stream_ctx * c = static_cast<cuda_stream_ctx *>(s->context);
    if (!g || node_begin < 0 || node_begin > node_end || static_cast<size_t>(node_end) > g->nodes.size()) return EMBER_ERR_INVALID_ARG;
    set_device(c->cu.device);
    ember_host_timer timer(c->host_on);
    c->host_calls++;
    if (c->merge_copies && pending_flush(c) != cudaSuccess) return EMBER_ERR_BACKEND;  // (never into a recording)
    // The same work as the recorded graph (checked and run before): replay it.
    bool graphable = !c->graphs_off && !c->cu.prof;
    for (int32_t i = node_begin; i < node_end && graphable; i++) {
        const ember_tensor * node = g->nodes[i];
        if (node->op == EMBER_OP_MUL_MAT && !is_matvec(node)) graphable = false;  // cuBLAS: not for capture
    }
    uint64_t sig = 0;
    if (graphable) {
        // Hashed unless nothing it covers can have changed since the last hash (the epoch read
        // first: a change made while hashing moves it again).
        const uint64_t tepoch = ember_tensor_epoch();
        auto &         m      = c->sig_memo;
        if (m.g == g && m.begin == node_begin && m.end == node_end && m.tepoch == tepoch && same_scratch(m.scratch, m.scratch_size, c->cu) &&
            !c->sig_always) {
            sig = m.sig;
        } else {
            sig = ember_cuda_graph_signature(c->cu, g, node_begin, node_end);
            c->n_sigs++;
            m.g     = g;
            m.begin = node_begin;
            m.end   = node_end;
            m.tepoch = tepoch;
            m.sig    = sig;
            for (int i = 0; i < EMBER_CUDA_SCRATCH_SLOTS; i++) {
                m.scratch[i]      = c->cu.scratch[i];
                m.scratch_size[i] = c->cu.scratch_size[i];
            }
        }
    }
    timer.lap(c->host_sig_s);
    if (graphable && c->exec && sig == c->exec_sig && pending_key(c) == c->exec_copies) {
        if (c->abort_cb && c->abort_cb(c->abort_ud)) return EMBER_ERR_CANCELLED;
        c->cu.qx_valid  = false;
        c->cu.xh_valid  = false;
        c->cu.n_hoisted = 0;
        c->cu.kv_attn   = nullptr;
        c->cu.h_t       = nullptr;
        const cudaError_t e = cudaGraphLaunch(c->exec, c->cu.stream);  // (the pending copies are its first nodes)
        timer.lap(c->host_launch_s);
        if (e != cudaSuccess) {
            report(c->dev->name.c_str(), "cudaGraphLaunch", e);
            return EMBER_ERR_BACKEND;
        }
        pending_done(c);
        c->host_replays++;
        // Deferred copies (EMBER_CUDA_DEFER_COPIES=1) need the ring reset between steps to
        // land at the offsets the graph was recorded with: that mode waits.
        if (queue && !c->defer_copies) {
            c->running = true;
            return EMBER_OK;
        }
        const ember_status fs = finish(c);
        timer.lap(c->host_wait_s);
        return fs;
    }
    // Everything below may record, grow scratch memory or run eagerly: nothing may still run.
    if (c->running) {
        const ember_status fs = finish(c);
        if (fs != EMBER_OK) return fs;
    }
    // Check every node first, so a graph either runs or fails before touching memory.
    for (int32_t i = node_begin; i < node_end; i++) {
        const ember_tensor * node = g->nodes[i];
        if (!supports(node)) {
            std::fprintf(stderr, "ember: %s: unsupported node %d '%s' (%s)\n", c->dev->name.c_str(), i, node->name, ember_op_name(node->op));
            return EMBER_ERR_UNSUPPORTED;
        }
        if (node->op == EMBER_OP_NONE || node->op == EMBER_OP_VIEW) continue;
        if (!node->data) return EMBER_ERR_INTERNAL;
        for (int j = 0; j < EMBER_MAX_SRC; j++) {
            if (node->src[j] && !node->src[j]->data) return EMBER_ERR_INTERNAL;
        }
    }
    c->cu.qx_valid  = false;  // x's memory may hold new data since the last call
    c->cu.xh_valid  = false;
    c->cu.n_hoisted = 0;
    c->cu.kv_attn   = nullptr;
    c->cu.h_t       = nullptr;
    if (c->cu.prof) {  // the per-op timer: every node eagerly, between events
        if (pending_flush(c) != cudaSuccess) return EMBER_ERR_BACKEND;
        op_profile * p  = static_cast<op_profile *>(c->cu.prof);
        const auto   t0 = std::chrono::steady_clock::now();
        p->n            = 0;
        ember_cuda_prof_mark(c->cu, "");
        ember_status st = EMBER_OK;
        for (int32_t i = node_begin, used = 1; i < node_end && st == EMBER_OK; i += used) {
            st = compute_at(c->cu, g, i, node_end, &used);
            if (st != EMBER_OK) {
                std::fprintf(stderr, "ember: %s: node %d '%s' (%s) failed: %s\n", c->dev->name.c_str(), i, g->nodes[i]->name,
                             ember_op_name(g->nodes[i]->op), ember_status_str(st));
                break;
            }
            ember_cuda_prof_mark(c->cu, prof_label(g->nodes[i], used).c_str());
        }
        const ember_status fs = finish(c);
        prof_collect(p);
        if (p->calls > 0) p->host_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        p->calls++;
        return st != EMBER_OK ? st : fs;
    }
    timer.lap(c->host_check_s);
    if (graphable) {
        const bool again = c->last_g == g && c->last_begin == node_begin && c->last_end == node_end && c->last_n_nodes == g->nodes.size();
        c->last_g        = g;
        c->last_begin    = node_begin;
        c->last_end      = node_end;
        c->last_n_nodes  = g->nodes.size();
        // The first run of a range goes eagerly: it sizes the scratch memory, which cannot
        // grow while a graph is recorded.
        if (again) {
            if (c->abort_cb && c->abort_cb(c->abort_ud)) return EMBER_ERR_CANCELLED;
            bool               retry = false;
            const ember_status st    = run_captured(c, g, node_begin, node_end, &retry);
            if (st == EMBER_OK) c->exec_sig = sig;
            if (st != EMBER_ERR_UNSUPPORTED) return st != EMBER_OK ? st : finish(c);
            if (!retry) c->graphs_off = true;  // recording does not work here: eager from now on
        }
    }
    if (pending_flush(c) != cudaSuccess) {
        finish(c);
        return EMBER_ERR_BACKEND;
    }
    for (int32_t i = node_begin, used = 1; i < node_end; i += used) {
        ember_tensor *     node = g->nodes[i];
        const ember_status st   = compute_at(c->cu, g, i, node_end, &used);
        if (st != EMBER_OK) {
            std::fprintf(stderr, "ember: %s: node %d '%s' (%s) failed: %s\n", c->dev->name.c_str(), i, node->name,
                         ember_op_name(node->op), ember_status_str(st));
            finish(c);
            return st;
        }
        if (c->abort_cb && c->abort_cb(c->abort_ud)) {
            finish(c);
            return EMBER_ERR_CANCELLED;
        }
    }
    return finish(c);
}

ember_status cuda_stream_graph_compute(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end) {
    return run_range(s, g, node_begin, node_end, false);
}

ember_status cuda_stream_graph_launch(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end) {
    return run_range(s, g, node_begin, node_end, true);
}

// The copy to the host that read_async left on read_stream, waited for.
ember_status read_finish(cuda_stream_ctx * c) {
    if (!c->read_pending) return EMBER_OK;
    c->read_pending     = false;
    const cudaError_t e = cudaStreamSynchronize(c->read_stream);
    if (e != cudaSuccess) {
        report(c->dev->name.c_str(), "reading the outputs", e);
        return EMBER_ERR_BACKEND;
    }
    return EMBER_OK;
}

ember_status cuda_stream_wait(ember_stream * s) {
    cuda_stream_ctx * c = static_cast<cuda_stream_ctx *>(s->context);
    set_device(c->cu.device);
    if (pending_flush(c) != cudaSuccess) {
        finish(c);
        read_finish(c);
        return EMBER_ERR_BACKEND;
    }
    const ember_status st = finish(c);
    const ember_status rs = read_finish(c);
    return st != EMBER_OK ? st : rs;
}

// A decode step's outputs (a logits row: 501 KiB for a 128256-token vocabulary; or the top-k
// ids) queued behind its kernels into this stream's pinned memory: no second round trip
// through the copy stream, and the host copies them out only when they are read.
constexpr size_t k_read_async_max = 64u << 20;

const void * cuda_stream_read_async(ember_stream * s, const ember_tensor * t, size_t offset, size_t size) {
    cuda_stream_ctx *    c     = static_cast<cuda_stream_ctx *>(s->context);
    const ember_tensor * owner = ember_memory_owner(t);
    if (size == 0 || size > k_read_async_max || !t->data || !owner->buffer || !is_cuda_buft(owner->buffer->buft) ||
        buf_ctx(owner->buffer)->dev != c->dev || (owner->flags & (EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED))) {
        return nullptr;
    }
    set_device(c->cu.device);
    if (size > c->out_size) {
        if (c->out) {  // an earlier read may still be landing there
            if (cudaStreamSynchronize(c->cu.stream) != cudaSuccess) return nullptr;  // (wait() reports it)
            if (c->read_stream && cudaStreamSynchronize(c->read_stream) != cudaSuccess) return nullptr;
            cudaFreeHost(c->out);
            cudaFree(c->side);
            c->out      = nullptr;
            c->side     = nullptr;
            c->out_size = 0;
        }
        const size_t want = (size + (1u << 20) - 1) / (1u << 20) * (1u << 20);
        if (cudaMallocHost(reinterpret_cast<void **>(&c->out), want) != cudaSuccess) {
            cudaGetLastError();
            c->out = nullptr;
            return nullptr;
        }
        c->out_size = want;
        if (!c->read_setup_failed && cudaMalloc(reinterpret_cast<void **>(&c->side), want) != cudaSuccess) {
            cudaGetLastError();
            c->side = nullptr;
        }
    }
    if (c->side && !c->read_stream && !c->read_setup_failed) {
        if (cudaStreamCreateWithFlags(&c->read_stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->read_ready, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->read_done, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            c->read_setup_failed = true;
        }
    }
    const char * src = static_cast<const char *>(t->data) + offset;
    if (c->side && c->read_stream && !c->read_setup_failed) {
        // side is free once the last read from it is done; the outputs into it now, then to the
        // host beside the next step.
        cudaError_t e = c->read_pending ? cudaStreamWaitEvent(c->cu.stream, c->read_done, 0) : cudaSuccess;
        if (e == cudaSuccess) e = cudaMemcpyAsync(c->side, src, size, cudaMemcpyDeviceToDevice, c->cu.stream);
        if (e == cudaSuccess) e = cudaEventRecord(c->read_ready, c->cu.stream);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(c->read_stream, c->read_ready, 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(c->out, c->side, size, cudaMemcpyDeviceToHost, c->read_stream);
        if (e == cudaSuccess) e = cudaEventRecord(c->read_done, c->read_stream);
        c->read_pending = true;
        return e == cudaSuccess ? c->out : nullptr;  // (a launch error: wait() reports it)
    }
    if (cudaMemcpyAsync(c->out, src, size, cudaMemcpyDeviceToHost, c->cu.stream) != cudaSuccess) return nullptr;
    return c->out;
}

void cuda_stream_synchronize(ember_stream * s) {
    cuda_stream_ctx * c = static_cast<cuda_stream_ctx *>(s->context);
    set_device(c->cu.device);
    pending_flush(c);  // (queued inputs no graph took)
    if (cudaStreamSynchronize(c->cu.stream) == cudaSuccess) stage_reset(c);
}

// A graph input (token ids, positions, the mask, the CPU's embedding rows) queued on the
// compute stream through the pinned ring: no round trip per input, and the graph launched next
// on the same stream sees it. Refused (the caller uploads synchronously) for weights (their
// CUDA layout is made in set_tensor), for copies larger than the ring, and without pinned
// memory.
bool cuda_stream_set_tensor_async(ember_stream * s, ember_tensor * t, const void * data, size_t offset, size_t size) {
    cuda_stream_ctx * c = static_cast<cuda_stream_ctx *>(s->context);
    const ember_tensor * owner = ember_memory_owner(t);
    if (size == 0) return true;
    if (c->stage_failed || size > k_async_stage_bytes || !owner->buffer || !is_cuda_buft(owner->buffer->buft) || buf_ctx(owner->buffer)->dev != c->dev ||
        (owner->flags & (EMBER_TENSOR_FLAG_WEIGHT | EMBER_TENSOR_FLAG_CUDA_REPACKED))) {
        return false;
    }
    set_device(c->cu.device);
    if (!c->stage) {
        if (cudaMallocHost(reinterpret_cast<void **>(&c->stage), k_async_stage_bytes) != cudaSuccess) {
            cudaGetLastError();
            c->stage        = nullptr;
            c->stage_failed = true;
            return false;
        }
    }
    const size_t at = (c->stage_used + 255) / 256 * 256;
    if (at + size > k_async_stage_bytes) {  // full: wait for the queued copies, start over
        if (pending_flush(c) != cudaSuccess || cudaStreamSynchronize(c->cu.stream) != cudaSuccess) return false;
        stage_reset(c);
        return cuda_stream_set_tensor_async(s, t, data, offset, size);
    }
    std::memcpy(c->stage + at, data, size);
    if (c->defer_copies || c->merge_copies) {
        c->pending.push_back({static_cast<char *>(t->data) + offset, at, size});
        c->stage_used = at + size;
        return true;
    }
    const cudaError_t e = cudaMemcpyAsync(static_cast<char *>(t->data) + offset, c->stage + at, size, cudaMemcpyHostToDevice, c->cu.stream);
    if (e != cudaSuccess) {
        report(c->dev->name.c_str(), "queued upload", e);
        cudaStreamSynchronize(c->cu.stream);  // nothing half-done left behind for the synchronous copy
        cudaGetLastError();
        return false;
    }
    c->stage_used = at + size;
    return true;
}

void cuda_stream_set_abort_callback(ember_stream * s, ember_abort_callback cb, void * user_data) {
    cuda_stream_ctx * c = static_cast<cuda_stream_ctx *>(s->context);
    c->abort_cb         = cb;
    c->abort_ud         = user_data;
}

const ember_stream_i k_cuda_stream_i = {
    /* .get_name           = */ cuda_stream_get_name,
    /* .free_stream        = */ cuda_stream_free,
    /* .graph_compute      = */ cuda_stream_graph_compute,
    /* .synchronize        = */ cuda_stream_synchronize,
    /* .set_n_threads      = */ nullptr,
    /* .set_abort_callback = */ cuda_stream_set_abort_callback,
    /* .event_record       = */ nullptr,
    /* .event_wait         = */ nullptr,
    /* .set_tensor_async   = */ cuda_stream_set_tensor_async,
    /* .graph_launch       = */ cuda_stream_graph_launch,
    /* .wait               = */ cuda_stream_wait,
    /* .read_async         = */ cuda_stream_read_async,
};

//
// Device
//
const char * cuda_dev_get_name(ember_device * dev) {
    return dev_ctx(dev)->name.c_str();
}

const char * cuda_dev_get_description(ember_device * dev) {
    return dev_ctx(dev)->description.c_str();
}

void cuda_dev_get_props(ember_device * dev, ember_device_props * props) {
    cuda_device_ctx * d = dev_ctx(dev);
    std::memset(props, 0, sizeof(*props));
    props->name        = d->name.c_str();
    props->description = d->description.c_str();
    set_device(d->id);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    props->memory_free        = free_b;
    props->memory_total       = total_b;
    props->type               = EMBER_DEVICE_TYPE_GPU;
    props->caps.fp16          = 1;
    props->caps.int8_dot      = d->cc_major > 6 || (d->cc_major == 6 && d->cc_minor >= 1);
    props->caps.fp8           = d->cc_major > 8 || (d->cc_major == 8 && d->cc_minor >= 9);
    props->caps.subgroup_size = 32;
}

ember_buffer_type * cuda_dev_get_buffer_type(ember_device * dev) {
    return &dev_ctx(dev)->buft;
}

ember_status cuda_dev_init_stream(ember_device * dev, const ember_stream_params *, ember_stream ** out) {
    *out                = nullptr;
    cuda_device_ctx * d = dev_ctx(dev);
    cuda_stream_ctx * c = new (std::nothrow) cuda_stream_ctx;
    if (!c) return EMBER_ERR_OOM;
    c->dev       = d;
    c->cu.device = d->id;
    c->cu.cc_major = d->cc_major;
    c->graphs_off       = !ember_cuda_env_on("EMBER_CUDA_GRAPHS");
    const char * sig    = std::getenv("EMBER_CUDA_SIGNATURE");
    c->sig_always       = sig && std::strcmp(sig, "always") == 0;
    const char * defer  = std::getenv("EMBER_CUDA_DEFER_COPIES");
    c->defer_copies     = defer && std::strcmp(defer, "1") == 0;
    const int merge     = ember_cuda_env_choice("EMBER_CUDA_MERGE_COPIES", 2, {0, 1, 2});
    c->merge_copies     = !c->defer_copies && merge != 0;
    c->merge_side       = c->merge_copies && merge == 2;
    c->cu.scatter_flat  = ember_cuda_env_choice("EMBER_CUDA_SCATTER_FLAT", 1, {0, 1}) == 1;
    c->read_setup_failed = !ember_cuda_env_on("EMBER_CUDA_READ_SIDE");
    c->cu.pdl           = d->cc_major >= 9 && ember_cuda_env_on("EMBER_CUDA_PDL");
    c->host_on          = ember_profile_host_on();
    const char * skip   = std::getenv("EMBER_CUDA_SKIP");
    c->cu.skip          = ember_cuda_skip_parse(skip);
    c->cu.skip_list     = skip && std::strstr(skip, "w:") ? skip : nullptr;  // only lists with weight entries are read per node
    const char * carve  = std::getenv("EMBER_CUDA_CARVE");
    c->cu.carve         = carve && *carve ? carve : nullptr;
    if (skip && *skip) std::fprintf(stderr, "ember: EMBER_CUDA_SKIP=%s: those kernels are not launched (timing only, results are wrong)\n", skip);
    if (profile_on()) c->cu.prof = new (std::nothrow) op_profile;
    cudaError_t e = set_device(d->id);
    // EMBER_CUDA_CACHE_CONFIG (measuring): the device's preferred L1 / shared-memory split for
    // every kernel (1 shared, 2 L1, 3 equal; 0 the driver's choice per kernel). An SM runs blocks
    // of two kernels side by side only in one split, so a kernel whose split differs from the
    // running one's cannot start early there (programmatic dependent launch) before it drains.
    static const int cache_cfg = ember_cuda_env_choice("EMBER_CUDA_CACHE_CONFIG", 0, {0, 1, 2, 3});
    if (e == cudaSuccess && cache_cfg != 0) {
        const cudaFuncCache cfg[] = {cudaFuncCachePreferNone, cudaFuncCachePreferShared, cudaFuncCachePreferL1, cudaFuncCachePreferEqual};
        if (cudaDeviceSetCacheConfig(cfg[cache_cfg]) != cudaSuccess) cudaGetLastError();  // a preference: ignored where unsupported
    }
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->cu.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&c->cu.d_error), sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(c->cu.d_error, 0, sizeof(int));
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&c->cu.d_count), EMBER_CUDA_ATTN_COUNTS * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(c->cu.d_count, 0, EMBER_CUDA_ATTN_COUNTS * sizeof(int));
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&c->cu.d_mvn_part), 64 * EMBER_CUDA_MVN_SPLIT_GROUPS * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void **>(&c->cu.d_mvn_count), EMBER_CUDA_MVN_SPLIT_GROUPS * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(c->cu.d_mvn_count, 0, EMBER_CUDA_MVN_SPLIT_GROUPS * sizeof(int));
    if (e == cudaSuccess) e = cudaMallocHost(reinterpret_cast<void **>(&c->h_error), sizeof(int));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        report(d->name.c_str(), "stream creation", e);
        cudaGetLastError();
        destroy_stream_ctx(c);
        return e == cudaErrorMemoryAllocation ? EMBER_ERR_OOM : EMBER_ERR_BACKEND;
    }
    const cublasStatus_t bst = cublasCreate(&c->cu.cublas);
    if (bst != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "ember: %s: cublasCreate failed: status %d\n", d->name.c_str(), static_cast<int>(bst));
        c->cu.cublas = nullptr;
        destroy_stream_ctx(c);
        return bst == CUBLAS_STATUS_ALLOC_FAILED ? EMBER_ERR_OOM : EMBER_ERR_BACKEND;
    }
    ember_stream * s = new (std::nothrow) ember_stream{k_cuda_stream_i, dev, c};
    if (!s) {
        destroy_stream_ctx(c);
        return EMBER_ERR_OOM;
    }
    *out = s;
    return EMBER_OK;
}

bool cuda_dev_supports_op(ember_device *, const ember_tensor * op) {
    return supports(op);
}

bool cuda_dev_supports_buft(ember_device * dev, ember_buffer_type * buft) {
    return buft == &dev_ctx(dev)->buft;
}

const ember_device_i k_cuda_device_i = {
    /* .get_name             = */ cuda_dev_get_name,
    /* .get_description      = */ cuda_dev_get_description,
    /* .get_props            = */ cuda_dev_get_props,
    /* .get_buffer_type      = */ cuda_dev_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .init_stream          = */ cuda_dev_init_stream,
    /* .supports_op          = */ cuda_dev_supports_op,
    /* .supports_buft        = */ cuda_dev_supports_buft,
    /* .offload_op           = */ nullptr,
};

//
// Registry entry (defined below; constant-initialized)
//
extern ember_backend_reg g_cuda_reg;

void enumerate_devices() {
    static std::once_flag once;
    std::call_once(once, [] {
        int         n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            // No driver, no GPU, or a driver older than the runtime: no devices, not an error.
            cudaGetLastError();
            return;
        }
        for (int i = 0; i < n; i++) {
            cudaDeviceProp prop;
            if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
                cudaGetLastError();
                continue;
            }
            auto d         = std::make_unique<cuda_device_ctx>();
            d->id          = i;
            d->name        = "cuda:" + std::to_string(i);
            // "NVIDIA H200 (compute 9.0, 139.8 GiB, CUDA driver 13.0)"
            int  drv = 0;
            char mem[32];
            if (cudaDriverGetVersion(&drv) != cudaSuccess) cudaGetLastError();
            std::snprintf(mem, sizeof(mem), "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
            d->description = std::string(prop.name) + " (compute " + std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", " + mem +
                             ", CUDA driver " + std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10) + ")";
            d->cc_major    = prop.major;
            d->cc_minor    = prop.minor;
            d->buft.iface  = {cuda_buft_name, cuda_buft_alloc, cuda_buft_alignment, nullptr, nullptr, cuda_buft_is_host};
            d->buft.device = &d->dev;
            d->buft.context = d.get();
            d->dev.iface   = k_cuda_device_i;
            d->dev.reg     = &g_cuda_reg;
            d->dev.context = d.get();
            devices().push_back(std::move(d));
        }
    });
}

const char * cuda_reg_get_name(ember_backend_reg *) {
    return "cuda";
}

size_t cuda_reg_get_device_count(ember_backend_reg *) {
    enumerate_devices();
    return devices().size();
}

ember_device * cuda_reg_get_device(ember_backend_reg *, size_t index) {
    enumerate_devices();
    return index < devices().size() ? &devices()[index]->dev : nullptr;
}

ember_backend_reg g_cuda_reg = {
    /* .api_version = */ EMBER_BACKEND_API_VERSION,
    /* .struct_size = */ sizeof(ember_backend_reg),
    /* .iface       = */ {
        /* .get_name         = */ cuda_reg_get_name,
        /* .get_device_count = */ cuda_reg_get_device_count,
        /* .get_device       = */ cuda_reg_get_device,
        /* .get_proc_address = */ nullptr,
    },
    /* .context     = */ nullptr,
};

}  // namespace

void * ember_cuda_scratch(ember_cuda_ctx & ctx, int slot, size_t size) {
    if (size <= ctx.scratch_size[slot]) return ctx.scratch[slot];
    if (ctx.capturing) return nullptr;  // no sync or malloc inside a recording: the caller runs eagerly
    // Kernels still queued may use the old memory.
    cudaStreamSynchronize(ctx.stream);
    cudaFree(ctx.scratch[slot]);
    ctx.scratch[slot]      = nullptr;
    ctx.scratch_size[slot] = 0;
    const size_t want      = size + size / 4;
    void *       p         = nullptr;
    cudaError_t  e         = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cudaGetLastError();
        std::fprintf(stderr, "ember: cuda:%d: cannot allocate %.1f MiB of scratch memory: %.1f MiB free of %.1f MiB\n", ctx.device,
                     mib(want), mib(free_b), mib(total_b));
        return nullptr;
    }
    ctx.scratch[slot]      = p;
    ctx.scratch_size[slot] = want;
    return p;
}

void ember_cuda_prof_mark(ember_cuda_ctx & ctx, const char * label) {
    op_profile * p = static_cast<op_profile *>(ctx.prof);
    if (!p || ctx.capturing) return;
    if (p->n == p->ev.size()) {
        cudaEvent_t e = nullptr;
        if (cudaEventCreate(&e) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        p->ev.push_back(e);
        p->label.emplace_back();
    }
    if (cudaEventRecord(p->ev[p->n], ctx.stream) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    p->label[p->n] = label;
    p->n++;
}

void ember_cuda_carve_apply(const char * list, const void * kernel) {
    static std::mutex                    mu;
    static std::vector<const void *>     seen;
    const std::lock_guard<std::mutex>    lock(mu);
    if (std::find(seen.begin(), seen.end(), kernel) != seen.end()) return;
    seen.push_back(kernel);
#if CUDART_VERSION >= 12030
    const char * name = nullptr;
    if (cudaFuncGetName(&name, kernel) != cudaSuccess || !name) {
        cudaGetLastError();
        return;
    }
    const std::string all = list;
    for (size_t at = 0; at < all.size();) {
        size_t end = all.find(',', at);
        if (end == std::string::npos) end = all.size();
        const std::string entry = all.substr(at, end - at);
        at                      = end + 1;
        const size_t colon      = entry.rfind(':');
        if (colon == std::string::npos || colon == 0) continue;
        if (std::strstr(name, entry.substr(0, colon).c_str()) == nullptr) continue;
        const int pct = std::atoi(entry.c_str() + colon + 1);
        const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
        std::fprintf(stderr, "ember: EMBER_CUDA_CARVE: %s -> %d%s\n", name, pct, e == cudaSuccess ? "" : " (refused)");
        if (e != cudaSuccess) cudaGetLastError();
        return;
    }
#else
    (void) list;  // no cudaFuncGetName before CUDA 12.3
#endif
}

ember_status ember_cuda_check_launch(const char * what) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return EMBER_OK;
    std::fprintf(stderr, "ember: cuda: %s: kernel launch failed: %s\n", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? EMBER_ERR_OOM : EMBER_ERR_BACKEND;
}

ember_backend_reg * ember_cuda_backend_reg() {
    return &g_cuda_reg;
}

uint64_t ember_cuda_graph_instantiations() {
    return g_instantiations.load(std::memory_order_relaxed);
}
