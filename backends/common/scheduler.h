// The scheduler runs a graph over several streams. Placement, per node, in this order:
//   1. a view goes where the memory it views lives;
//   2. a node that reads a weight or a cache tensor (a leaf with a buffer) goes to the
//      device holding that buffer, if that device supports the op;
//   3. otherwise it stays on the stream of the previous node if that one supports it,
//      else the first stream in priority order that does; the CPU (last) supports all.
// Where a node reads memory its device cannot use, a copy node is inserted before it (the
// scheduler does the copy, once per split). The plan of a graph is computed once and kept
// until forget(g); buffers are planned by ember_gallocr, so a reused graph allocates nothing.
#ifndef EMBER_BACKENDS_SCHEDULER_H
#define EMBER_BACKENDS_SCHEDULER_H

#include <memory>
#include <unordered_map>
#include <vector>

#include "alloc.h"
#include "backend.h"

struct ember_sched {
    // `streams` in priority order; the last one must be the CPU's. Not owned.
    explicit ember_sched(std::vector<ember_stream *> streams);
    ~ember_sched();

    // Plans g and grows the compute buffers to fit it (call with the worst-case graph).
    ember_status reserve(ember_graph * g);
    // Plans g if needed and gives every tensor its address (inputs can then be written).
    ember_status prepare(ember_graph * g);
    // Runs g (preparing it first if needed) and waits for it (and for work launch() left).
    ember_status compute(ember_graph * g);
    // Like compute(), but the last split is only queued when its stream can leave work running
    // (graph_launch), and then `read` (`read_bytes` from the start of a tensor of g, on that
    // stream) is queued behind it when the stream can (read_async): *read_at says where its
    // bytes will be once wait() returned EMBER_OK, else stays NULL. *queued: work was left
    // running; call wait() before using any result of g.
    ember_status launch(ember_graph * g, const ember_tensor * read, size_t read_bytes, const void ** read_at, bool * queued);
    // Waits for the work launch() left running; the first error it met.
    ember_status wait();
    bool         busy() const;
    // Drops the plan of g (call before destroying or clearing g).
    void         forget(ember_graph * g);
    void         set_abort_callback(ember_abort_callback cb, void * user_data);

    // Introspection for tests: stream index of each node of g after planning (-1 = copy).
    const std::vector<int> * node_streams(ember_graph * g) const;
    int                      n_splits(ember_graph * g) const;
    uint64_t                 n_plans() const { return n_plans_; }

    // Host time inside compute() (EMBER_PROFILE_HOST=1 sets `on`; the context prints it):
    // scheduler copies, the streams' graph_compute calls, and the waits for the streams.
    struct host_times {
        bool     on = false;
        double   copies_s = 0, compute_s = 0, wait_s = 0;
        uint64_t runs = 0, splits = 0;
        uint64_t copies = 0, copies_queued = 0;  // copy nodes run; of them queued on a device stream (set_tensor_async)
    } host;

  private:
    struct graph_plan {
        std::vector<int> node_stream;  // per node of g->nodes; -1 = scheduler copy
        std::vector<int> node_buft;
        uint64_t         generation = UINT64_MAX;
        int              n_splits   = 0;
    };
    ember_status plan_graph(ember_graph * g, graph_plan & p);
    ember_status find_or_plan(ember_graph * g, graph_plan ** out);
    ember_status ensure_allocated(ember_graph * g, graph_plan & p);
    int          stream_of_buffer(const ember_buffer * buf) const;

    ember_status run(ember_graph * g, bool queue_last, const ember_tensor * read, size_t read_bytes, const void ** read_at, bool * queued);

    std::vector<ember_stream *>                   streams_;
    std::vector<char>                             running_;  // per stream: work left by launch(), not yet waited for
    std::unique_ptr<ember_gallocr>                galloc_;
    std::unordered_map<ember_graph *, graph_plan> plans_;
    ember_abort_callback                          abort_cb_ = nullptr;
    void *                                        abort_ud_ = nullptr;
    uint64_t                                      n_plans_  = 0;
};

#endif  // EMBER_BACKENDS_SCHEDULER_H
