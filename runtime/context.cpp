#include "runtime/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "host-timer.h"
#include "runtime/arch.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace {

constexpr size_t k_max_cached_graphs = 4;

bool kv_type_ok(int32_t t) {
    return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0 ||
           t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2;
}

int32_t default_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 4 : static_cast<int32_t>(std::min(n, 512u));
}

}  // namespace

ember_context::ember_context(const ember_model & m, const ember_context_params & p) : model(m), params(p) {
    if (m.vocab_only || !m.arch) ember_throw(EMBER_ERR_UNSUPPORTED, "the model was loaded vocab-only: it has no weights to run");
    const ember_hparams & hp = m.hp;

    if (params.n_ctx == 0) params.n_ctx = hp.n_ctx_train;
    if (params.n_ctx > (1u << 24)) ember_throw(EMBER_ERR_INVALID_ARG, "n_ctx = %u is too large (max %u)", params.n_ctx, 1u << 24);
    if (params.n_batch == 0) ember_throw(EMBER_ERR_INVALID_ARG, "n_batch must be at least 1");
    if (params.n_ubatch == 0) ember_throw(EMBER_ERR_INVALID_ARG, "n_ubatch must be at least 1");
    if (params.n_seq_max == 0 || params.n_seq_max > EMBER_MAX_SEQ) {
        ember_throw(EMBER_ERR_INVALID_ARG, "n_seq_max = %u is out of range [1, %u]", params.n_seq_max, EMBER_MAX_SEQ);
    }
    if (params.n_threads < 0 || params.n_threads > 1024) ember_throw(EMBER_ERR_INVALID_ARG, "n_threads = %d is out of range [0, 1024]", params.n_threads);
    params.n_batch  = std::min(params.n_batch, params.n_ctx);
    params.n_ubatch = std::min(params.n_ubatch, params.n_batch);
    if (params.n_threads == 0) params.n_threads = default_threads();
    if (params.device_top_k < 0) ember_throw(EMBER_ERR_INVALID_ARG, "device_top_k = %d must be >= 0 (0 = off)", params.device_top_k);
    top_k = static_cast<int32_t>(std::min<uint32_t>(static_cast<uint32_t>(params.device_top_k), hp.n_vocab));

    for (int32_t t : {params.type_k, params.type_v}) {
        if (!kv_type_ok(t)) {
            const char * name = ember_type_get_name(t);
            ember_throw(EMBER_ERR_INVALID_ARG, "KV cache type %s is not supported (use f32, f16, q8_0, q4_0, fp8_e4m3 or fp8_e5m2)", name ? name : "(unknown id)");
        }
    }
    const ember_type type_k = static_cast<ember_type>(params.type_k);
    const ember_type type_v = static_cast<ember_type>(params.type_v);
    if (hp.n_embd_head_k % ember_type_get_traits(type_k)->block_size || hp.n_embd_head_v % ember_type_get_traits(type_v)->block_size) {
        ember_throw(EMBER_ERR_UNSUPPORTED, "head size %u is not a multiple of the KV cache type's block size", hp.n_embd_head_k);
    }

    // Streams: one per device the model uses, accelerators first, the CPU last.
    // A device found only by its explicit name (Vulkan's CPU implementation is kept off the
    // registry's list) still gets its stream, among the accelerators.
    std::vector<ember_device *> devices;
    ember_device * const        cpu = ember_registry_cpu_device();
    auto add_device = [&](ember_device * d) {
        if (d && d != cpu && std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    };
    for (size_t i = 0; i < ember_registry_device_count(); i++) {
        ember_device * d    = ember_registry_device(i);
        bool           used = d == m.output_device;
        for (ember_device * ld : m.layer_device) used = used || ld == d;
        if (used) add_device(d);
    }
    for (ember_device * ld : m.layer_device) add_device(ld);
    add_device(m.output_device);
    devices.push_back(cpu);
    ember_stream_params sp{};
    sp.n_threads = params.n_threads;
    for (ember_device * d : devices) {
        ember_stream * s  = nullptr;
        ember_status   st = ember_device_init_stream(d, &sp, &s);
        if (st != EMBER_OK) ember_throw(st, "cannot start a stream on device %s", ember_device_get_name(d));
        streams_.push_back(s);
    }
    sched_ = std::make_unique<ember_sched>(streams_);
    if (const char * e = std::getenv("EMBER_DECODE_ASYNC")) async_ = std::strcmp(e, "0") != 0;
    host_.on = sched_->host.on = ember_profile_host_on();
    sched_->set_abort_callback(params.abort_callback, params.abort_user_data);

    std::vector<ember_buffer_type *> layer_buft;
    for (ember_device * d : m.layer_device) layer_buft.push_back(ember_device_buffer_type(d));
    kv.init(params.n_ctx, hp.n_layer, hp.n_embd_k_gqa(), hp.n_embd_v_gqa(), type_k, type_v, layer_buft);

    tokens_.resize(params.n_batch);
    pos_.resize(params.n_batch);
    seq_.resize(params.n_batch);
    want_.resize(params.n_batch);
    output_row.resize(params.n_batch);
    cells_.reserve(params.n_ubatch);
    out_ids_.resize(params.n_ubatch);
    if (top_k > 0) top_raw_.resize(static_cast<size_t>(params.n_ubatch) * 2 * top_k);

    // Plan the worst case now, so no later micro-batch grows the compute buffers.
    cached_graph worst;
    worst.n_tokens  = params.n_ubatch;
    worst.n_outputs = params.n_ubatch;
    worst.n_kv      = kv.size();
    build(worst);
    ember_status st = sched_->reserve(worst.g.get());
    sched_->forget(worst.g.get());
    if (st != EMBER_OK) ember_throw(st, "cannot allocate the compute buffers for n_ubatch = %u, n_ctx = %u", params.n_ubatch, params.n_ctx);
    ember_log(EMBER_LOG_INFO, "context: n_ctx %u, n_batch %u, n_ubatch %u, KV cache %s/%s, %d threads, %zu stream(s)", params.n_ctx,
              params.n_batch, params.n_ubatch, ember_type_get_name(type_k), ember_type_get_name(type_v), params.n_threads, streams_.size());
}

ember_context::~ember_context() {
    if (host_.on && sched_ && sched_->host.runs > 0) {
        const double n = static_cast<double>(sched_->host.runs), us = 1e6 / n;
        std::fprintf(stderr,
                     "ember: host time per micro-batch over %.0f: inputs and setup %.1f us, compute %.1f us (scheduler copies %.1f for "
                     "%.1f copies, %.1f of them queued; graph_compute calls %.1f in %.2f splits, waits %.1f), outputs %.1f us\n",
                     n, host_.setup_s * us, host_.compute_s * us, sched_->host.copies_s * us, static_cast<double>(sched_->host.copies) / n,
                     static_cast<double>(sched_->host.copies_queued) / n, sched_->host.compute_s * us,
                     static_cast<double>(sched_->host.splits) / n, sched_->host.wait_s * us, host_.outputs_s * us);
    }
    graphs_.clear();
    sched_.reset();
    for (ember_stream * s : streams_) ember_stream_free(s);
}

void ember_context::set_n_threads(int32_t n) {
    if (n < 0 || n > 1024) ember_throw(EMBER_ERR_INVALID_ARG, "n_threads = %d is out of range [0, 1024]", n);
    params.n_threads = n == 0 ? default_threads() : n;
    for (ember_stream * s : streams_) {
        if (s->iface.set_n_threads) s->iface.set_n_threads(s, params.n_threads);
    }
}

void ember_context::build(cached_graph & cg) {
    cg.g = std::make_unique<ember_graph>();
    ember_build_ctx bc{model, model.hp, kv, *cg.g, cg.n_tokens, cg.n_outputs, cg.n_kv, {}};
    try {
        cg.logits = model.arch->build_graph(bc);
        cg.g->build_forward(cg.logits);
        if (top_k > 0) {
            // Only the candidates leave the device; the logits become scratch memory.
            cg.top = ember_top_k(*cg.g, cg.logits, top_k);
            cg.top->flags |= EMBER_TENSOR_FLAG_OUTPUT;
            cg.logits->flags &= ~static_cast<uint32_t>(EMBER_TENSOR_FLAG_OUTPUT);
            ember_set_name(cg.top, "logits top-k");
            cg.g->build_forward(cg.top);
        }
        // Calibration hook: activations read by weight matmuls must survive the compute (the
        // planner would reuse their memory); a view's memory belongs to its owner.
        if (observe_mul_mat) {
            for (ember_tensor * node : cg.g->nodes) {
                if (node->op != EMBER_OP_MUL_MAT || !(node->src[0]->flags & EMBER_TENSOR_FLAG_WEIGHT)) continue;
                ember_tensor * owner = ember_memory_owner(node->src[1]);
                if (!(owner->flags & EMBER_TENSOR_FLAG_WEIGHT)) owner->flags |= EMBER_TENSOR_FLAG_OUTPUT;
            }
        }
    } catch (const ember_graph_error & e) {
        ember_throw(EMBER_ERR_INTERNAL, "graph construction failed: %s", e.what());
    }
    cg.in = bc.in;
    n_graph_builds++;
}

ember_context::cached_graph & ember_context::graph_for(uint32_t n_tokens, uint32_t n_outputs, uint32_t n_kv) {
    use_clock_++;
    for (cached_graph & cg : graphs_) {
        if (cg.n_tokens == n_tokens && cg.n_outputs == n_outputs && cg.n_kv == n_kv) {
            cg.last_use = use_clock_;
            return cg;
        }
    }
    if (graphs_.size() >= k_max_cached_graphs) {
        auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                    [](const cached_graph & a, const cached_graph & b) { return a.last_use < b.last_use; });
        sched_->forget(lru->g.get());
        graphs_.erase(lru);
    }
    cached_graph cg;
    cg.n_tokens  = n_tokens;
    cg.n_outputs = n_outputs;
    cg.n_kv      = n_kv;
    cg.last_use  = use_clock_;
    build(cg);
    graphs_.push_back(std::move(cg));
    return graphs_.back();
}

void ember_context::decode(const ember_batch & b) {
    const uint32_t n_vocab = model.hp.n_vocab;
    if (b.n_tokens < 1 || static_cast<uint32_t>(b.n_tokens) > params.n_batch) {
        ember_throw(EMBER_ERR_INVALID_ARG, "batch has %d tokens; it must have 1 to n_batch = %u", b.n_tokens, params.n_batch);
    }
    if (!b.token) ember_throw(EMBER_ERR_INVALID_ARG, "batch.token is NULL");
    const uint32_t n = static_cast<uint32_t>(b.n_tokens);

    // Validate everything before touching the cache.
    int32_t last[EMBER_MAX_SEQ];
    bool    seen[EMBER_MAX_SEQ] = {};
    for (uint32_t i = 0; i < n; i++) {
        const int32_t t = b.token[i];
        if (t < 0 || static_cast<uint32_t>(t) >= n_vocab) ember_throw(EMBER_ERR_INVALID_ARG, "batch.token[%u] = %d is not in [0, n_vocab = %u)", i, t, n_vocab);
        const int32_t s = b.seq_id ? b.seq_id[i] : 0;
        if (s < 0 || static_cast<uint32_t>(s) >= params.n_seq_max) {
            ember_throw(EMBER_ERR_INVALID_ARG, "batch.seq_id[%u] = %d is not in [0, n_seq_max = %u)", i, s, params.n_seq_max);
        }
        if (!seen[s]) {
            seen[s] = true;
            last[s] = kv.seq_pos_max(s);
        }
        const int32_t p = b.pos ? b.pos[i] : last[s] + 1;
        if (p < 0 || p == INT32_MAX) ember_throw(EMBER_ERR_INVALID_ARG, "batch.pos[%u] = %d is out of range", i, p);
        if (p <= last[s]) {
            ember_throw(EMBER_ERR_INVALID_ARG, "batch.pos[%u] = %d for sequence %d must be greater than %d (positions must increase)", i, p, s, last[s]);
        }
        last[s]  = p;
        tokens_[i] = t;
        pos_[i]  = p;
        seq_[i]  = s;
        want_[i] = b.logits ? (b.logits[i] != 0) : (i == n - 1);
    }
    if (kv.size() - kv.used() < n) {
        ember_throw(EMBER_ERR_CONTEXT_FULL, "context full: the batch needs %u cells but only %u of n_ctx = %u are free", n,
                    kv.size() - kv.used(), kv.size());
    }

    // One micro-batch may be left running; anything else waits for the steps before it. A
    // bounded number of steps between waits: a device error surfaces within it, and the cells
    // to release then stay few.
    const bool may_queue = async_ && n <= params.n_ubatch && !observe_mul_mat;
    if (!may_queue || unsynced_steps_ >= 64) sync();

    // Until this batch completes there are no valid logits (a queued step's are superseded).
    pending_        = {};
    last_batch_size = 0;
    n_outputs       = 0;
    for (uint32_t i = 0; i < n; i++) output_row[i] = want_[i] ? n_outputs++ : -1;
    if (top_k > 0) {
        top_ids.resize(static_cast<size_t>(n_outputs) * top_k);
        top_vals.resize(static_cast<size_t>(n_outputs) * top_k);
    } else {
        logits.resize(static_cast<size_t>(n_outputs) * n_vocab);
    }

    int32_t row = 0;
    for (uint32_t u0 = 0; u0 < n; u0 += params.n_ubatch) {
        const uint32_t un = std::min(params.n_ubatch, n - u0);
        run_ubatch(u0, un, row, may_queue);
        for (uint32_t i = u0; i < u0 + un; i++) row += want_[i] ? 1 : 0;
    }
    last_batch_size = static_cast<int32_t>(n);
}

void ember_context::sync() {
    if (unsynced_steps_ == 0 && !sched_->busy()) return;
    ember_host_timer   timer(host_.on);
    const ember_status st = sched_->wait();
    timer.lap(host_.compute_s);
    if (st != EMBER_OK) {
        kv.release(unsynced_cells_.data(), static_cast<uint32_t>(unsynced_cells_.size()));
        unsynced_cells_.clear();
        unsynced_steps_ = 0;
        pending_        = {};
        last_batch_size = 0;
        n_outputs       = 0;
        ember_throw(st, "decode failed on the device (found when its results were waited for); its KV cache cells were released");
    }
    unsynced_cells_.clear();
    unsynced_steps_ = 0;
    if (pending_.at) take_outputs(pending_.at, pending_.n_out, pending_.out_row0);
    pending_ = {};
    timer.lap(host_.outputs_s);
}

// One micro-batch's output rows (TOP_K's k ids then k value bits per row, or the logits) from
// `src` into the context's vectors.
void ember_context::take_outputs(const void * src, uint32_t n_out, int32_t out_row0) {
    if (top_k > 0) {
        const size_t    k   = static_cast<size_t>(top_k);
        const int32_t * raw = static_cast<const int32_t *>(src);
        for (uint32_t r = 0; r < n_out; r++) {
            const int32_t * row = raw + r * 2 * k;
            const size_t    dst = (static_cast<size_t>(out_row0) + r) * k;
            std::memcpy(&top_ids[dst], row, k * sizeof(int32_t));
            std::memcpy(&top_vals[dst], row + k, k * sizeof(float));  // value bits
        }
    } else {
        std::memcpy(&logits[static_cast<size_t>(out_row0) * model.hp.n_vocab], src, static_cast<size_t>(n_out) * model.hp.n_vocab * sizeof(float));
    }
}

void ember_context::run_ubatch(uint32_t u0, uint32_t n, int32_t out_row0, bool may_queue) {
    uint32_t n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (want_[u0 + i]) out_ids_[n_out++] = static_cast<int32_t>(i);
    }
    const bool discard = n_out == 0;  // the graph always produces at least one row
    if (discard) out_ids_[n_out++] = static_cast<int32_t>(n - 1);

    if (!kv.find_slots(n, cells_)) ember_throw(EMBER_ERR_CONTEXT_FULL, "context full");
    kv.occupy(cells_.data(), &pos_[u0], &seq_[u0], n);

    ember_host_timer timer(host_.on);
    try {
        cached_graph & cg = graph_for(n, n_out, kv.n_kv());
        // Plan (first use) or re-address (after a buffer grew) before writing the inputs;
        // inputs are planned in CPU memory, so the mask is written in place.
        ember_status st = sched_->prepare(cg.g.get());
        if (st != EMBER_OK) ember_throw(st, "cannot allocate compute buffers");
        ember_tensor_set(cg.in.tokens, &tokens_[u0], 0, n * sizeof(int32_t));
        ember_tensor_set(cg.in.pos, &pos_[u0], 0, n * sizeof(int32_t));
        ember_tensor_set(cg.in.kv_idx, cells_.data(), 0, n * sizeof(int32_t));
        if (cg.in.out_ids) ember_tensor_set(cg.in.out_ids, out_ids_.data(), 0, n_out * sizeof(int32_t));
        kv.fill_mask(static_cast<float *>(cg.in.mask->data), cg.n_kv, &pos_[u0], &seq_[u0], n);

        timer.lap(host_.setup_s);
        const size_t   k          = static_cast<size_t>(top_k);
        ember_tensor * out        = top_k > 0 ? cg.top : cg.logits;
        const size_t   out_bytes  = top_k > 0 ? n_out * 2 * k * sizeof(int32_t) : static_cast<size_t>(n_out) * model.hp.n_vocab * sizeof(float);
        const void *   out_at     = nullptr;
        bool           queued     = false;
        st = may_queue ? sched_->launch(cg.g.get(), discard ? nullptr : out, out_bytes, &out_at, &queued) : sched_->compute(cg.g.get());
        timer.lap(host_.compute_s);
        if (st == EMBER_ERR_CANCELLED) ember_throw(st, "decode cancelled by the abort callback");
        if (st != EMBER_OK) ember_throw(st, "compute failed on micro-batch at token %u", u0);
        n_ubatches++;
        if (queued && (out_at || discard)) {  // left running: sync() brings the outputs
            unsynced_cells_.insert(unsynced_cells_.end(), cells_.begin(), cells_.begin() + n);
            unsynced_steps_++;
            pending_.at       = out_at;  // (NULL when discarded: nothing was read)
            pending_.n_out    = n_out;
            pending_.out_row0 = out_row0;
            return;
        }
        if (queued) {
            st = sched_->wait();
            if (st != EMBER_OK) ember_throw(st, "compute failed on micro-batch at token %u", u0);
        }
        if (observe_mul_mat) {  // calibration hook (see context.h)
            for (ember_tensor * node : cg.g->nodes) {
                if (node->op == EMBER_OP_MUL_MAT && (node->src[0]->flags & EMBER_TENSOR_FLAG_WEIGHT)) observe_mul_mat(node->src[0], node->src[1]);
            }
        }
        if (!discard && top_k > 0) {
            ember_tensor_get(cg.top, top_raw_.data(), 0, out_bytes);
            take_outputs(top_raw_.data(), n_out, out_row0);
        } else if (!discard) {
            ember_tensor_get(cg.logits, &logits[static_cast<size_t>(out_row0) * model.hp.n_vocab], 0, out_bytes);
        }
        timer.lap(host_.outputs_s);
    } catch (...) {
        kv.release(cells_.data(), n);
        throw;
    }
}
