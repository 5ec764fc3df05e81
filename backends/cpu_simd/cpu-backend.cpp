// The CPU backend: registry entry, device, host buffer type and the stream that runs graphs
// on a persistent thread pool. The kernels live in ops-*.cpp (scalar reference code).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "cpu-ops.h"
#include "cpu-profile.h"
#include "repack.h"
#include "thread-pool.h"

//
// Kernel table
//
static_assert(EMBER_OP_COUNT == 14, "EMBER_OP_COUNT changed: add the new op to the CPU kernel table");

static const ember_cpu_op k_cpu_ops[EMBER_OP_COUNT] = {
    /* NONE     */ {nullptr, nullptr, nullptr},
    /* VIEW     */ {nullptr, nullptr, nullptr},
    /* GET_ROWS */ {ember_cpu_get_rows, nullptr, ember_cpu_supports_get_rows},
    /* RMS_NORM */ {ember_cpu_rms_norm, nullptr, ember_cpu_supports_f32},
    /* MUL      */ {ember_cpu_mul, nullptr, ember_cpu_supports_f32},
    /* ADD      */ {ember_cpu_add, nullptr, ember_cpu_supports_f32},
    /* MUL_MAT  */ {ember_cpu_mul_mat, ember_cpu_mul_mat_work_size, ember_cpu_supports_mul_mat},
    /* ROPE     */ {ember_cpu_rope, ember_cpu_rope_work_size, ember_cpu_supports_rope},
    /* SWIGLU   */ {ember_cpu_swiglu, nullptr, ember_cpu_supports_f32},
    /* SET_ROWS */ {ember_cpu_set_rows, nullptr, ember_cpu_supports_set_rows},
    /* ATTN     */ {ember_cpu_attn_tiled, ember_cpu_attn_tiled_work_size, ember_cpu_supports_attn},
    /* CPY      */ {ember_cpu_cpy, ember_cpu_cpy_work_size, ember_cpu_supports_cpy},
    /* SCALE    */ {ember_cpu_scale, nullptr, ember_cpu_supports_f32},
    /* TOP_K    */ {ember_cpu_top_k, ember_cpu_top_k_work_size, ember_cpu_supports_top_k},
};

static bool cpu_supports(const ember_tensor * op) {
    if (op->op < 0 || op->op >= EMBER_OP_COUNT) return false;
    if (!ember_type_get_traits(op->type)) return false;
    for (int i = 0; i < ember_op_n_src(op->op); i++) {
        // Only ROPE's frequency factors and ATTN's mask are optional.
        const bool optional = (op->op == EMBER_OP_ROPE && i == 2) || (op->op == EMBER_OP_ATTN && i == 3);
        if (!op->src[i] && !optional) return false;
        if (op->src[i] && !ember_type_get_traits(op->src[i]->type)) return false;
    }
    const ember_cpu_op & k = k_cpu_ops[op->op];
    return !k.supports || k.supports(op);
}

//
// Aligned host memory
//
static constexpr size_t k_cpu_alignment = 64;
// Larger requests fail as OOM without asking the allocator (48-bit address spaces).
static constexpr size_t k_cpu_max_alloc = (size_t) 1 << 47;

static void * aligned_malloc(size_t size) {
    size = ember_cpu_pad(std::max<size_t>(size, 1));
    void * p = nullptr;
    if (posix_memalign(&p, k_cpu_alignment, size) != 0) return nullptr;
    return p;
}

//
// Buffer
//
static void cpu_buffer_free(ember_buffer * buf) {
    std::free(buf->context);
    delete buf;
}

static void * cpu_buffer_get_base(ember_buffer * buf) {
    return buf->context;
}

static void cpu_buffer_set_tensor(ember_buffer *, ember_tensor * t, const void * data, size_t offset, size_t size) {
    std::memcpy(static_cast<char *>(t->data) + offset, data, size);
}

static void cpu_buffer_get_tensor(ember_buffer *, const ember_tensor * t, void * data, size_t offset, size_t size) {
    std::memcpy(data, static_cast<const char *>(t->data) + offset, size);
}

static bool cpu_buffer_cpy_tensor(ember_buffer *, const ember_tensor * src, ember_tensor * dst) {
    if (!src->buffer || !ember_buffer_type_is_host(src->buffer->buft)) return false;
    if (ember_nbytes(src) != ember_nbytes(dst) || !ember_is_contiguous(src) || !ember_is_contiguous(dst)) return false;
    std::memcpy(dst->data, src->data, ember_nbytes(src));
    return true;
}

static void cpu_buffer_clear(ember_buffer * buf, uint8_t value) {
    std::memset(buf->context, value, buf->size);
}

static const ember_buffer_i k_cpu_buffer_i = {
    /* .free_buffer = */ cpu_buffer_free,
    /* .get_base    = */ cpu_buffer_get_base,
    /* .set_tensor  = */ cpu_buffer_set_tensor,
    /* .get_tensor  = */ cpu_buffer_get_tensor,
    /* .cpy_tensor  = */ cpu_buffer_cpy_tensor,
    /* .clear       = */ cpu_buffer_clear,
};

//
// Buffer type
//
static const char * cpu_buft_name(ember_buffer_type *) {
    return "cpu";
}

static ember_status cpu_buft_alloc(ember_buffer_type * buft, size_t size, ember_buffer ** out) {
    *out         = nullptr;
    void * data  = size <= k_cpu_max_alloc ? aligned_malloc(size) : nullptr;
    if (!data) {
        std::fprintf(stderr, "ember: cpu: failed to allocate a buffer of %.1f MiB\n", size / (1024.0 * 1024.0));
        return EMBER_ERR_OOM;
    }
    ember_buffer * buf = new (std::nothrow) ember_buffer;
    if (!buf) {
        std::free(data);
        return EMBER_ERR_OOM;
    }
    buf->iface   = k_cpu_buffer_i;
    buf->buft    = buft;
    buf->context = data;
    buf->size    = size;
    buf->usage   = EMBER_BUFFER_USAGE_ANY;
    *out         = buf;
    return EMBER_OK;
}

static size_t cpu_buft_alignment(ember_buffer_type *) {
    return k_cpu_alignment;
}

static size_t cpu_buft_max_size(ember_buffer_type *) {
    return k_cpu_max_alloc;
}

static bool cpu_buft_is_host(ember_buffer_type *) {
    return true;
}

// Defined at the end; every object below is constant-initialized, so no static-init order issue.
namespace {
extern ember_device g_cpu_device;
}

static ember_buffer_type g_cpu_buft = {
    /* .iface   = */ {
        /* .name         = */ cpu_buft_name,
        /* .alloc_buffer = */ cpu_buft_alloc,
        /* .alignment    = */ cpu_buft_alignment,
        /* .max_size     = */ cpu_buft_max_size,
        /* .alloc_size   = */ nullptr,
        /* .is_host      = */ cpu_buft_is_host,
    },
    /* .device  = */ &g_cpu_device,
    /* .context = */ nullptr,
};

//
// Stream
//
struct cpu_stream_context {
    ember_thread_pool *  pool      = nullptr;
    void *               work      = nullptr;  // scratch shared by the kernels; only grows
    size_t               work_size = 0;
    ember_abort_callback abort_cb  = nullptr;
    void *               abort_ud  = nullptr;
    std::atomic<int>     error{0};
    std::atomic<int>     stop_at{INT_MAX};
    std::atomic<bool>    aborted{false};
    ember_cpu_profile *  prof = nullptr;  // EMBER_PROFILE=1 only
    uint64_t             node_seq = 1;     // next node_seq (from 1: the counter word starts at 0)
    std::vector<uint8_t> sync;             // per node of the current call: 1 = barrier after it
    // Work counters (ember_cpu_claim_chunk), one per node_seq % k_chunk_counters: nodes of one
    // barrier-free group run at the same time, so each needs its own (plan_barriers keeps
    // groups shorter than k_chunk_counters nodes).
    struct alignas(64) chunk_counter {
        std::atomic<uint64_t> v{0};
    };
    static constexpr int k_chunk_counters = 8;
    chunk_counter        chunks[k_chunk_counters];
};

struct cpu_graph_task {
    cpu_stream_context * ctx;
    ember_graph *        graph;
    int32_t              begin;
    int32_t              end;
    uint64_t             seq_base;  // node_seq of node `begin`
    const uint8_t *      sync;      // 1: barrier after node i
};

// Every thread walks the nodes; a barrier ends each computed node.
static void cpu_graph_task_run(void * arg, int ith, int nth) {
    cpu_graph_task *     task = static_cast<cpu_graph_task *>(arg);
    cpu_stream_context * ctx  = task->ctx;
    ember_cpu_compute_params p;
    p.ith     = ith;
    p.nth     = nth;
    p.wdata   = ctx->work;
    p.wsize   = ctx->work_size;
    p.pool    = ctx->pool;
    p.node    = 0;
    p.error   = &ctx->error;
    p.stop_at = &ctx->stop_at;
    p.chunks  = &ctx->chunks[0].v;
    p.node_seq = 0;
    for (int32_t i = task->begin; i < task->end; i++) {
        ember_tensor *       node = task->graph->nodes[i];
        const ember_cpu_op & k    = k_cpu_ops[node->op];
        if (!k.compute) continue;  // NONE, VIEW
        p.node     = i;
        p.node_seq = task->seq_base + (uint64_t) (i - task->begin);
        p.chunks   = &ctx->chunks[p.node_seq % cpu_stream_context::k_chunk_counters].v;
        if (ctx->prof && ith < EMBER_CPU_PROFILE_MAX_THREADS) {
            const int64_t t0 = ember_cpu_now_ns();
            k.compute(&p, node);
            const int64_t t1 = ember_cpu_now_ns();
            if (ith == 0 && task->sync[i] && ctx->abort_cb && ctx->abort_cb(ctx->abort_ud)) {
                ctx->aborted.store(true);
                ember_cpu_request_stop(&ctx->stop_at, i);
            }
            if (task->sync[i]) ember_cpu_barrier(&p);
            ember_cpu_profile::per_thread & pt = ctx->prof->th[ith];
            pt.compute_ns[node->op] += t1 - t0;
            pt.barrier_ns[node->op] += ember_cpu_now_ns() - t1;
            pt.nodes[node->op]++;
            pt.barriers[node->op] += task->sync[i];
            if (task->sync[i] && ctx->stop_at.load() <= i) break;
            continue;
        }
        k.compute(&p, node);
        if (!task->sync[i]) continue;  // the next node is independent of this one
        if (ith == 0 && ctx->abort_cb && ctx->abort_cb(ctx->abort_ud)) {
            ctx->aborted.store(true);
            ember_cpu_request_stop(&ctx->stop_at, i);
        }
        ember_cpu_barrier(&p);
        if (ctx->stop_at.load() <= i) break;
    }
}

//
// Barrier elision. Each node ends with a barrier unless the next computed node is independent
// of every node since the last barrier: it reads nothing they write, writes nothing they read
// or write, and their use of the shared work buffer cannot collide. In a llama decode step
// this drops the barrier between the gate and up matmuls; the others are kept by dependencies
// or by the allocator reusing a dead input's memory for the next output (which this check
// sees). Nodes that can report a data error (GET_ROWS, SET_ROWS, ATTN) always end with a
// barrier, and the abort callback is asked only at barriers, so a graph still stops right
// after a failing node and between groups.
//
namespace {

struct mem_range {
    const char * lo;
    const char * hi;
};

mem_range range_of(const ember_tensor * t) {
    const char * p = static_cast<const char *>(t->data);
    return {p, p + ember_nbytes(t)};
}

bool overlap(mem_range a, mem_range b) {
    return a.lo < b.hi && b.lo < a.hi;
}

// How a node uses the work buffer: 0 not at all, 1 only its thread slots
// (ember_cpu_thread_slot: decode matmuls converting their columns privately, ropes), -1 shared
// use. A barrier-free group may mix 0 and 1 freely (a thread runs its nodes in order, so only
// it touches its slot), never -1.
int work_key(const ember_tensor * node, int nth) {
    const ember_cpu_op & k = k_cpu_ops[node->op];
    if (!k.work_size || k.work_size(node, nth) == 0) return 0;
    if (node->op == EMBER_OP_MUL_MAT && ember_cpu_mul_mat_private(node)) return 1;
    if (node->op == EMBER_OP_ROPE) return 1;
    return -1;
}

bool independent(const ember_tensor * a, const ember_tensor * b) {
    const mem_range da = range_of(a), db = range_of(b);
    if (overlap(da, db)) return false;
    for (int j = 0; j < EMBER_MAX_SRC; j++) {
        if (b->src[j] && overlap(da, range_of(b->src[j]))) return false;  // b reads what a writes
        if (a->src[j] && overlap(db, range_of(a->src[j]))) return false;  // b overwrites what a reads
    }
    return true;
}

// sync[i] = 1 where node i needs the barrier after it (always after the last node).
void plan_barriers(const ember_graph * g, int32_t begin, int32_t end, int nth, std::vector<uint8_t> & sync) {
    if (sync.size() < (size_t) end) sync.resize(end);
    int32_t group = -1;  // first computed node since the last barrier
    int32_t prev  = -1;  // last computed node
    for (int32_t i = begin; i < end; i++) {
        sync[i] = 1;
        const ember_tensor * node = g->nodes[i];
        if (!k_cpu_ops[node->op].compute) continue;
        const bool can_fail = prev >= 0 && (g->nodes[prev]->op == EMBER_OP_GET_ROWS || g->nodes[prev]->op == EMBER_OP_SET_ROWS ||
                                            g->nodes[prev]->op == EMBER_OP_ATTN);
        bool ok = prev >= 0 && !can_fail && work_key(node, nth) >= 0 && i - group < cpu_stream_context::k_chunk_counters;
        for (int32_t q = group; ok && q <= prev; q++) {
            const ember_tensor * a = g->nodes[q];
            if (k_cpu_ops[a->op].compute) ok = work_key(a, nth) >= 0 && independent(a, node);
        }
        if (ok) {
            sync[prev] = 0;
        } else {
            group = i;
        }
        prev = i;
    }
}

}  // namespace

static const char * cpu_stream_get_name(ember_stream *) {
    return "cpu";
}

static void cpu_stream_free(ember_stream * s) {
    cpu_stream_context * ctx = static_cast<cpu_stream_context *>(s->context);
    if (ctx->prof) ctx->prof->print();
    delete ctx->prof;
    delete ctx->pool;
    std::free(ctx->work);
    delete ctx;
    delete s;
}

// A range of a few light nodes (a decode step's embedding row on the CPU while the layers run
// on a GPU: one GET_ROWS of one row) runs on the calling thread alone: waking the pool's
// sleeping workers and joining them cost more than the work (8B shape on an H200 host with 16
// threads: ~190 us per token for one 4096-value row).
static bool cpu_range_is_light(const ember_graph * g, int32_t begin, int32_t end) {
    constexpr int64_t k_light_elements = 16384;
    int64_t           n                = 0;
    for (int32_t i = begin; i < end; i++) {
        const ember_tensor * node = g->nodes[i];
        switch (node->op) {
            case EMBER_OP_NONE: case EMBER_OP_VIEW: continue;
            case EMBER_OP_GET_ROWS: case EMBER_OP_ADD: case EMBER_OP_MUL: case EMBER_OP_SCALE: case EMBER_OP_CPY:
            case EMBER_OP_RMS_NORM: case EMBER_OP_SWIGLU:
                n += ember_nelements(node);
                break;
            default: return false;
        }
        if (n > k_light_elements) return false;
    }
    return true;
}

static ember_status cpu_stream_graph_compute(ember_stream * s, ember_graph * g, int32_t node_begin, int32_t node_end) {
    cpu_stream_context * ctx = static_cast<cpu_stream_context *>(s->context);
    if (!g || node_begin < 0 || node_begin > node_end || (size_t) node_end > g->nodes.size()) return EMBER_ERR_INVALID_ARG;
    const int64_t t_begin = ctx->prof ? ember_cpu_now_ns() : 0;

    // Check every node first, so a graph either runs or fails before touching memory.
    const bool light = cpu_range_is_light(g, node_begin, node_end);
    const int  nth   = light ? 1 : ctx->pool->n_threads();
    size_t    need = 0;
    for (int32_t i = node_begin; i < node_end; i++) {
        const ember_tensor * node = g->nodes[i];
        if (!cpu_supports(node)) {
            std::fprintf(stderr, "ember: cpu: unsupported node %d '%s' (%s)\n", i, node->name, ember_op_name(node->op));
            return EMBER_ERR_UNSUPPORTED;
        }
        const ember_cpu_op & k = k_cpu_ops[node->op];
        if (!k.compute) continue;
        if (!node->data) return EMBER_ERR_INTERNAL;
        for (int j = 0; j < EMBER_MAX_SRC; j++) {
            if (node->src[j] && !node->src[j]->data) return EMBER_ERR_INTERNAL;
        }
        if (k.work_size) need = std::max(need, k.work_size(node, nth));
    }
    if (need > ctx->work_size) {
        void * work = aligned_malloc(need);
        if (!work) return EMBER_ERR_OOM;
        std::free(ctx->work);
        ctx->work      = work;
        ctx->work_size = need;
    }

    ctx->error.store(0);
    ctx->stop_at.store(INT_MAX);
    ctx->aborted.store(false);
    try {
        plan_barriers(g, node_begin, node_end, nth, ctx->sync);
    } catch (const std::bad_alloc &) {
        return EMBER_ERR_OOM;
    }
    cpu_graph_task task = {ctx, g, node_begin, node_end, ctx->node_seq, ctx->sync.data()};
    ctx->node_seq += (uint64_t) (node_end - node_begin);
    // A light range on the calling thread alone (no workers woken), else on the pool.
    const auto run = [&] {
        if (light) cpu_graph_task_run(&task, 0, 1);
        else ctx->pool->run(cpu_graph_task_run, &task);
    };
    if (ctx->prof) {
        // The node loop as thread 0 sees it; the rest is checks, waking the workers and joining them.
        ctx->prof->loop_ns -= ember_cpu_now_ns();
        run();
        const int64_t t_end = ember_cpu_now_ns();
        ctx->prof->loop_ns += t_end;
        ctx->prof->total_ns += t_end - t_begin;
        ctx->prof->n_calls++;
        ctx->prof->n_threads = std::max(ctx->prof->n_threads, nth);
    } else {
        run();
    }

    if (ctx->error.load() != 0) return ctx->error.load();
    if (ctx->aborted.load()) return EMBER_ERR_CANCELLED;
    return EMBER_OK;
}

static void cpu_stream_synchronize(ember_stream *) {}

static int32_t default_n_threads() {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? (int32_t) hc : 1;
}

static constexpr int32_t k_max_threads = 512;

static void cpu_stream_set_n_threads(ember_stream * s, int32_t n_threads) {
    cpu_stream_context * ctx = static_cast<cpu_stream_context *>(s->context);
    if (n_threads <= 0) n_threads = default_n_threads();
    n_threads = std::min(n_threads, k_max_threads);
    if (n_threads == ctx->pool->n_threads()) return;
    try {
        ember_thread_pool * pool = new ember_thread_pool(n_threads);
        delete ctx->pool;
        ctx->pool = pool;
    } catch (...) {
        // Keep the current pool: no threads to spare is not an error worth losing the stream.
    }
}

static void cpu_stream_set_abort_callback(ember_stream * s, ember_abort_callback cb, void * user_data) {
    cpu_stream_context * ctx = static_cast<cpu_stream_context *>(s->context);
    ctx->abort_cb            = cb;
    ctx->abort_ud            = user_data;
}

static const ember_stream_i k_cpu_stream_i = {
    /* .get_name           = */ cpu_stream_get_name,
    /* .free_stream        = */ cpu_stream_free,
    /* .graph_compute      = */ cpu_stream_graph_compute,
    /* .synchronize        = */ cpu_stream_synchronize,
    /* .set_n_threads      = */ cpu_stream_set_n_threads,
    /* .set_abort_callback = */ cpu_stream_set_abort_callback,
    /* .event_record       = */ nullptr,
    /* .event_wait         = */ nullptr,
    /* .set_tensor_async   = */ nullptr,
    /* .graph_launch       = */ nullptr,
    /* .wait               = */ nullptr,
    /* .read_async         = */ nullptr,
};

//
// Device
//
static const char * cpu_dev_get_name(ember_device *) {
    return "cpu";
}

static const char * cpu_dev_get_description(ember_device *) {
    static std::once_flag once;
    static std::string    desc = "CPU";
    std::call_once(once, [] {
        std::ifstream f("/proc/cpuinfo");
        std::string   line;
        while (std::getline(f, line)) {
            if (line.compare(0, 10, "model name") != 0) continue;
            const size_t colon = line.find(':');
            if (colon == std::string::npos) break;
            const size_t start = line.find_first_not_of(" \t", colon + 1);
            if (start != std::string::npos) desc = line.substr(start);
            break;
        }
    });
    return desc.c_str();
}

static void cpu_dev_get_props(ember_device * dev, ember_device_props * props) {
    std::memset(props, 0, sizeof(*props));
    props->name        = cpu_dev_get_name(dev);
    props->description = cpu_dev_get_description(dev);
    const long page    = sysconf(_SC_PAGESIZE);
    const long total   = sysconf(_SC_PHYS_PAGES);
#ifdef _SC_AVPHYS_PAGES
    const long avail = sysconf(_SC_AVPHYS_PAGES);
#else
    const long avail = total;
#endif
    props->memory_total = page > 0 && total > 0 ? (size_t) page * (size_t) total : 0;
    props->memory_free  = page > 0 && avail > 0 ? (size_t) page * (size_t) avail : 0;
    props->type         = EMBER_DEVICE_TYPE_CPU;
    props->caps.mmap    = 1;
}

static ember_buffer_type * cpu_dev_get_buffer_type(ember_device *) {
    return &g_cpu_buft;
}

static ember_status cpu_dev_init_stream(ember_device * dev, const ember_stream_params * params, ember_stream ** out) {
    *out              = nullptr;
    int32_t n_threads = params && params->n_threads > 0 ? params->n_threads : default_n_threads();
    n_threads         = std::min(n_threads, k_max_threads);
    cpu_stream_context * ctx = nullptr;
    ember_stream *       s   = nullptr;
    try {
        ctx       = new cpu_stream_context;
        ctx->pool = new ember_thread_pool(n_threads);
        if (ember_cpu_profile_enabled()) ctx->prof = new ember_cpu_profile;
        s         = new ember_stream{k_cpu_stream_i, dev, ctx};
    } catch (const std::bad_alloc &) {
        if (ctx) { delete ctx->pool; delete ctx->prof; }
        delete ctx;
        return EMBER_ERR_OOM;
    } catch (...) {  // std::system_error: no threads
        if (ctx) { delete ctx->pool; delete ctx->prof; }
        delete ctx;
        return EMBER_ERR_BACKEND;
    }
    *out = s;
    return EMBER_OK;
}

static bool cpu_dev_supports_op(ember_device *, const ember_tensor * op) {
    return cpu_supports(op);
}

static bool cpu_dev_supports_buft(ember_device *, ember_buffer_type * buft) {
    return ember_buffer_type_is_host(buft);
}

//
// Registry entry
//
static const char * cpu_reg_get_name(ember_backend_reg *) {
    return "cpu";
}

static size_t cpu_reg_get_device_count(ember_backend_reg *) {
    return 1;
}

static ember_device * cpu_reg_get_device(ember_backend_reg *, size_t index) {
    return index == 0 ? &g_cpu_device : nullptr;
}

static bool cpu_repack_proc(ember_type type, const int64_t ne[4], const void * src, void * dst) {
    if (!ember_cpu_repack_wanted(type, ne)) return false;
    if (src && dst) ember_cpu_repack(type, ne[0], ne[1], src, dst);
    return true;
}

static void * cpu_reg_get_proc_address(ember_backend_reg *, const char * name) {
    if (std::strcmp(name, "ember_cpu_repack") == 0) return reinterpret_cast<void *>(static_cast<ember_cpu_repack_proc>(cpu_repack_proc));
    return nullptr;
}

static ember_backend_reg g_cpu_reg = {
    /* .api_version = */ EMBER_BACKEND_API_VERSION,
    /* .struct_size = */ sizeof(ember_backend_reg),
    /* .iface       = */ {
        /* .get_name         = */ cpu_reg_get_name,
        /* .get_device_count = */ cpu_reg_get_device_count,
        /* .get_device       = */ cpu_reg_get_device,
        /* .get_proc_address = */ cpu_reg_get_proc_address,
    },
    /* .context     = */ nullptr,
};

namespace {
ember_device g_cpu_device = {
    /* .iface   = */ {
        /* .get_name             = */ cpu_dev_get_name,
        /* .get_description      = */ cpu_dev_get_description,
        /* .get_props            = */ cpu_dev_get_props,
        /* .get_buffer_type      = */ cpu_dev_get_buffer_type,
        /* .get_host_buffer_type = */ nullptr,
        /* .init_stream          = */ cpu_dev_init_stream,
        /* .supports_op          = */ cpu_dev_supports_op,
        /* .supports_buft        = */ cpu_dev_supports_buft,
        /* .offload_op           = */ nullptr,
    },
    /* .reg     = */ &g_cpu_reg,
    /* .context = */ nullptr,
};
}  // namespace

ember_backend_reg * ember_cpu_backend_reg() {
    return &g_cpu_reg;
}
