// A context: the KV cache, the streams and scheduler that run graphs, the graphs of recent
// micro-batch shapes (reused while the shape is unchanged), and the logits of the last decode.
// Everything a decode needs is allocated at creation or on the first use of a new shape;
// a decode step of a known shape allocates nothing.
#ifndef EMBER_RUNTIME_CONTEXT_H
#define EMBER_RUNTIME_CONTEXT_H

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/graph-builder.h"
#include "runtime/kv-cache.h"
#include "runtime/model.h"
#include "scheduler.h"

struct ember_context {
    ember_context(const ember_model & model, const ember_context_params & params);  // throws ember_error
    ~ember_context();

    // Validates and evaluates a batch; throws ember_error (nothing changed on a bad batch).
    // A batch of one micro-batch on a device that can leave work running (CUDA) returns once
    // its step is queued, so the host's work for the next step overlaps this one's kernels
    // (EMBER_DECODE_ASYNC=0: always wait); its outputs come back with sync().
    void decode(const ember_batch & batch);
    // Waits for the queued decode steps and brings the last one's outputs (logits / top-k)
    // into the vectors below. Everything that reads them or changes the KV cache calls it
    // first. A step that failed on the device throws here: the cells of every step not yet
    // synchronized are released and there are no outputs.
    void sync();
    void set_n_threads(int32_t n);

    const ember_model &  model;
    ember_context_params params;
    ember_kv_cache       kv;

    std::vector<float>   logits;       // [n_outputs, n_vocab]; empty when top_k > 0
    // params.device_top_k, at most n_vocab: the decode graph ends with TOP_K and only these
    // come back (0 = full logits rows).
    int32_t              top_k = 0;
    std::vector<int32_t> top_ids;      // [n_outputs, top_k] best first
    std::vector<float>   top_vals;     // [n_outputs, top_k]
    std::vector<int32_t> output_row;   // per token of the last batch: its logits row or -1
    int32_t              n_outputs = 0;
    int32_t              last_batch_size = 0;  // tokens in the last successful batch

    // Calibration hook (runtime/calibrate.cpp). When set before the first decode, every
    // MUL_MAT that reads a model weight keeps its activations (src[1]) alive to the end of the
    // compute and is reported after it: (weight, activations), F32 on the CPU backend.
    std::function<void(const ember_tensor * weight, const ember_tensor * x)> observe_mul_mat;

    // Counters for tests and tools.
    uint64_t n_graph_builds = 0;
    uint64_t n_ubatches     = 0;

  private:
    // EMBER_PROFILE_HOST=1: host time per micro-batch, printed when the context is freed.
    struct host_profile {
        bool   on = false;
        double setup_s = 0, compute_s = 0, outputs_s = 0;
    } host_;
    struct cached_graph {
        uint32_t                     n_tokens = 0, n_outputs = 0, n_kv = 0;
        std::unique_ptr<ember_graph> g;
        ember_graph_inputs           in;
        ember_tensor *               logits   = nullptr;
        ember_tensor *               top      = nullptr;  // TOP_K of the logits (top_k > 0), the graph's output
        uint64_t                     last_use = 0;
    };
    cached_graph & graph_for(uint32_t n_tokens, uint32_t n_outputs, uint32_t n_kv);
    void           build(cached_graph & cg);
    void           run_ubatch(uint32_t u0, uint32_t n, int32_t out_row0, bool may_queue);
    void           take_outputs(const void * src, uint32_t n_out, int32_t out_row0);

    // Decode steps left running (decode with may_queue): where the last one's outputs will be
    // (stream memory, valid after the scheduler's wait) and the cells of every step since the
    // last sync (released if one failed).
    bool                 async_ = true;  // EMBER_DECODE_ASYNC != 0
    struct pending_outputs {
        const void * at       = nullptr;  // NULL: none (no step queued since, or no output wanted)
        uint32_t     n_out    = 0;
        int32_t      out_row0 = 0;
    } pending_;
    std::vector<int32_t> unsynced_cells_;
    uint32_t             unsynced_steps_ = 0;  // steps queued since the last sync

    std::vector<ember_stream *>  streams_;
    std::unique_ptr<ember_sched> sched_;
    std::vector<cached_graph>    graphs_;
    uint64_t                     use_clock_ = 0;

    // Per-batch scratch, sized at creation.
    std::vector<int32_t> tokens_, pos_, seq_, cells_, out_ids_;
    std::vector<int32_t> top_raw_;  // one micro-batch's TOP_K rows: k ids then k value bits each
    std::vector<int8_t>  want_;
};

#endif  // EMBER_RUNTIME_CONTEXT_H
