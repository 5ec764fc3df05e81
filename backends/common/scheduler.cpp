#include "scheduler.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "host-timer.h"

namespace {

std::vector<ember_buffer_type *> stream_bufts(const std::vector<ember_stream *> & streams) {
    std::vector<ember_buffer_type *> bufts;
    for (ember_stream * s : streams) bufts.push_back(ember_device_buffer_type(s->device));
    return bufts;
}

// Host to device through the device stream's queued copy when it has one (`into`: the stream
// that owns dst's memory, or nullptr): the stream runs it before its next split, behind any
// work left running, with no wait here (a decode step's inputs: five copies, ~40 us of round
// trips per token on CUDA). Returns whether the copy was queued.
bool queue_copy(const ember_tensor * src, ember_tensor * dst, ember_stream * into) {
    return into && into->iface.set_tensor_async && !ember_buffer_type_is_host(dst->buffer->buft) &&
           ember_buffer_type_is_host(src->buffer->buft) && into->iface.set_tensor_async(into, dst, src->data, 0, ember_nbytes(src));
}

// Copies the bytes spanned by src into dst (same strides) now, through host memory when needed
// (nothing may be running on either side).
void copy_now(const ember_tensor * src, ember_tensor * dst, std::vector<uint8_t> & staging) {
    const size_t n = ember_nbytes(src);
    if (ember_buffer_type_is_host(dst->buffer->buft)) {
        ember_tensor_get(src, dst->data, 0, n);
    } else if (ember_buffer_type_is_host(src->buffer->buft)) {
        ember_tensor_set(dst, src->data, 0, n);
    } else {
        staging.resize(n);
        ember_tensor_get(src, staging.data(), 0, n);
        ember_tensor_set(dst, staging.data(), 0, n);
    }
}

}  // namespace

ember_sched::ember_sched(std::vector<ember_stream *> streams)
    : streams_(std::move(streams)), running_(streams_.size(), 0), galloc_(new ember_gallocr(stream_bufts(streams_))) {}

ember_sched::~ember_sched() { (void)wait(); }

void ember_sched::set_abort_callback(ember_abort_callback cb, void * user_data) {
    abort_cb_ = cb;
    abort_ud_ = user_data;
    for (ember_stream * s : streams_) {
        if (s->iface.set_abort_callback) s->iface.set_abort_callback(s, cb, user_data);
    }
}

int ember_sched::stream_of_buffer(const ember_buffer * buf) const {
    for (size_t i = 0; i < streams_.size(); i++) {
        if (ember_device_buffer_type(streams_[i]->device) == buf->buft) return static_cast<int>(i);
    }
    // Host memory the CPU can read (mmap'd weights, host-pointer buffers).
    const int cpu = static_cast<int>(streams_.size()) - 1;
    if (ember_device_supports_buft(streams_[cpu]->device, buf->buft)) return cpu;
    return -1;
}

ember_status ember_sched::plan_graph(ember_graph * g, graph_plan & p) {
    ember_tensor_epoch_bump();  // (its copies, and the sources it points at them)
    const int n_streams = static_cast<int>(streams_.size());
    const int cpu       = n_streams - 1;
    std::unordered_map<const ember_tensor *, int> where;  // stream of each computed node

    auto supports = [&](int s, const ember_tensor * node) { return ember_device_supports_op(streams_[s]->device, node); };

    // Pass 1: placement.
    std::vector<int>  assigned(g->nodes.size(), cpu);
    std::vector<char> by_prev(g->nodes.size(), 0);  // placed by the node before it, no weight of its own
    int               prev = -1;
    for (size_t i = 0; i < g->nodes.size(); i++) {
        ember_tensor * node = g->nodes[i];
        int            s    = -1;
        if (node->op == EMBER_OP_VIEW || node->view_src) {
            ember_tensor * owner = ember_memory_owner(node);
            if (owner->buffer && !(owner->flags & EMBER_TENSOR_FLAG_PLANNED)) {
                s = stream_of_buffer(owner->buffer);
            } else if (where.count(owner)) {
                s = where[owner];
            }
            if (node->op != EMBER_OP_VIEW && (s < 0 || !supports(s, node))) s = -1;  // e.g. SET_ROWS
        }
        // Weights repacked for the CPU can only be read there.
        for (ember_tensor * src : node->src) {
            if (s < 0 && src && (ember_memory_owner(src)->flags & EMBER_TENSOR_FLAG_CPU_REPACKED)) s = cpu;
        }
        if (s < 0) {
            for (ember_tensor * src : node->src) {
                if (!src) continue;
                ember_tensor * owner = ember_memory_owner(src);
                if (owner->op != EMBER_OP_NONE || !owner->buffer || (owner->flags & EMBER_TENSOR_FLAG_PLANNED)) continue;
                int ws = stream_of_buffer(owner->buffer);
                if (ws >= 0 && supports(ws, node)) {
                    s = ws;
                    break;
                }
            }
        }
        if (s < 0 && node->op != EMBER_OP_VIEW && !node->view_src) by_prev[i] = 1;
        if (s < 0 && prev >= 0 && supports(prev, node)) s = prev;
        for (int k = 0; s < 0 && k < n_streams; k++) {
            if (supports(k, node)) s = k;
        }
        if (s < 0) {
            return EMBER_ERR_UNSUPPORTED;  // not even the CPU: a graph-builder bug
        }
        assigned[i] = s;
        where[node] = s;
        prev        = s;
    }

    // Pass 1b: a node on the CPU only because the node before it ran there (no weight of its
    // own, e.g. the first layer's RMS_NORM after the CPU's embedding lookup) runs where all its
    // consumers run when that is one accelerator that supports it. The lookup's result then
    // crosses once, at the start of the step, instead of the step being split where the first
    // layer's residual ADD reads it (an H200 decode token of the 8B model had two host round
    // trips more for that). Backwards, so consumers are final; views stay with their owners.
    {
        std::unordered_map<const ember_tensor *, size_t> index;
        for (size_t i = 0; i < g->nodes.size(); i++) index[g->nodes[i]] = i;
        std::vector<int> consumer_stream(g->nodes.size(), -1);  // -1 none, -2 several or the CPU or a view
        const auto       note = [&](size_t i, int s) {
            int & c = consumer_stream[i];
            c       = c == -1 ? s : c == s ? c : -2;
        };
        for (size_t i = g->nodes.size(); i-- > 0;) {
            ember_tensor * node = g->nodes[i];
            const int      cs   = consumer_stream[i];
            if (by_prev[i] && assigned[i] == cpu && cs >= 0 && cs != cpu && supports(cs, node)) {
                assigned[i] = cs;
                where[node] = cs;
            }
            const bool view = node->op == EMBER_OP_VIEW || node->view_src;
            for (ember_tensor * src : node->src) {
                if (!src) continue;
                auto it = index.find(src);
                if (it != index.end()) note(it->second, view || assigned[i] == cpu ? -2 : assigned[i]);
            }
        }
    }

    // Leaves the graph writes into (the KV cache through SET_ROWS views): a copy of them must
    // stay where it is, after the writes.
    std::unordered_set<const ember_tensor *> written;
    for (ember_tensor * node : g->nodes) {
        if (node->op != EMBER_OP_VIEW && node->op != EMBER_OP_NONE && node->view_src) written.insert(ember_memory_owner(node));
    }

    // Pass 2: copies where a node reads memory its device cannot use. Copies of leaves the
    // graph does not write (inputs, weights) are hoisted to the start of the graph, one per
    // destination stream: a decode step then runs as one split per device instead of being
    // cut at every first use of an input (positions, mask, KV indices).
    std::vector<ember_tensor *> nodes, hoisted;
    std::vector<int>            node_stream, node_dest, hoisted_dest;
    std::unordered_map<ember_tensor *, ember_tensor *> copies;  // valid within the current split
    std::map<std::pair<ember_tensor *, int>, ember_tensor *> leaf_copies;
    // A CPY node reading src, to be placed on stream s.
    auto new_copy = [g](ember_tensor * src, int s) {
        ember_tensor * c = &g->arena.emplace_back(*src);
        c->op            = EMBER_OP_CPY;
        std::memset(c->src, 0, sizeof(c->src));
        c->src[0]    = src;
        c->view_src  = nullptr;
        c->view_offs = 0;
        c->buffer    = nullptr;
        c->data      = nullptr;
        c->flags     = 0;
        ember_set_name(c, "%.40s#copy%d", src->name, s);
        return c;
    };
    int split_stream = -2;
    p.n_splits       = 0;
    for (size_t i = 0; i < g->nodes.size(); i++) {
        ember_tensor * node = g->nodes[i];
        const int      s    = assigned[i];
        if (s != split_stream) {
            copies.clear();
            split_stream = s;
            p.n_splits++;
        }
        ember_buffer_type * buft = ember_device_buffer_type(streams_[s]->device);
        for (int k = 0; k < EMBER_MAX_SRC; k++) {
            ember_tensor * src = node->src[k];
            if (!src) continue;
            if (node->op == EMBER_OP_VIEW) break;  // a view is only an address
            ember_tensor * owner = ember_memory_owner(src);
            int            home;
            bool           leaf = true;
            if (owner->buffer && !(owner->flags & EMBER_TENSOR_FLAG_PLANNED)) {
                home = -3;  // a leaf with its own buffer: ask the device directly
                if (ember_device_supports_buft(streams_[s]->device, owner->buffer->buft)) continue;
            } else if (where.count(owner)) {
                home = where[owner];
                leaf = false;
                if (home == s || ember_device_supports_buft(streams_[s]->device, ember_device_buffer_type(streams_[home]->device))) continue;
            } else {  // an input leaf: lives in CPU memory
                home = cpu;
                if (s == cpu || ember_device_supports_buft(streams_[s]->device, ember_device_buffer_type(streams_[cpu]->device))) continue;
            }
            (void) buft;
            (void) home;
            if (leaf && !written.count(owner)) {
                auto lt = leaf_copies.find({src, s});
                if (lt == leaf_copies.end()) {
                    ember_tensor * c = new_copy(src, s);
                    hoisted.push_back(c);
                    hoisted_dest.push_back(s);
                    lt = leaf_copies.emplace(std::make_pair(src, s), c).first;
                }
                node->src[k] = lt->second;
                continue;
            }
            auto it = copies.find(src);
            if (it == copies.end()) {
                ember_tensor * c = new_copy(src, s);
                nodes.push_back(c);
                node_stream.push_back(-1);
                node_dest.push_back(s);
                it = copies.emplace(src, c).first;
            }
            node->src[k] = it->second;
        }
        nodes.push_back(node);
        node_stream.push_back(s);
        node_dest.push_back(s);
    }
    // Hoisted copies first, then the graph; a copy lives on its destination stream.
    nodes.insert(nodes.begin(), hoisted.begin(), hoisted.end());
    node_stream.insert(node_stream.begin(), hoisted.size(), -1);
    node_dest.insert(node_dest.begin(), hoisted_dest.begin(), hoisted_dest.end());
    g->nodes.swap(nodes);
    p.node_stream.swap(node_stream);
    p.node_buft.swap(node_dest);
    n_plans_++;
    return EMBER_OK;
}

ember_status ember_sched::ensure_allocated(ember_graph * g, graph_plan & p) {
    if (p.generation == galloc_->generation()) return EMBER_OK;
    // A buffer may grow (free and allocate): nothing may still be running in it.
    ember_status st = wait();
    if (st != EMBER_OK) return st;
    st = galloc_->alloc_graph(g, p.node_buft, static_cast<int>(streams_.size()) - 1);
    if (st != EMBER_OK) return st;
    // If that grew a buffer, every other graph's addresses are stale; this one is current.
    p.generation = galloc_->generation();
    return EMBER_OK;
}

ember_status ember_sched::reserve(ember_graph * g) {
    graph_plan * p  = nullptr;
    ember_status st = find_or_plan(g, &p);
    if (st == EMBER_OK) st = wait();  // (buffers may grow)
    if (st != EMBER_OK) return st;
    return galloc_->reserve(g, p->node_buft, static_cast<int>(streams_.size()) - 1);
}

ember_status ember_sched::find_or_plan(ember_graph * g, graph_plan ** out) {
    auto it = plans_.find(g);
    if (it == plans_.end()) {
        it              = plans_.emplace(g, graph_plan{}).first;
        ember_status st = plan_graph(g, it->second);
        if (st != EMBER_OK) {
            plans_.erase(it);
            return st;
        }
    }
    *out = &it->second;
    return EMBER_OK;
}

ember_status ember_sched::prepare(ember_graph * g) {
    graph_plan * p  = nullptr;
    ember_status st = find_or_plan(g, &p);
    return st != EMBER_OK ? st : ensure_allocated(g, *p);
}

ember_status ember_sched::compute(ember_graph * g) { return run(g, false, nullptr, 0, nullptr, nullptr); }

ember_status ember_sched::launch(ember_graph * g, const ember_tensor * read, size_t read_bytes, const void ** read_at, bool * queued) {
    return run(g, true, read, read_bytes, read_at, queued);
}

bool ember_sched::busy() const { return std::find(running_.begin(), running_.end(), 1) != running_.end(); }

ember_status ember_sched::wait() {
    ember_status first = EMBER_OK;
    for (size_t s = 0; s < streams_.size(); s++) {
        if (!running_[s]) continue;
        running_[s]           = 0;
        const ember_status st = streams_[s]->iface.wait(streams_[s]);
        if (first == EMBER_OK) first = st;
    }
    return first;
}

ember_status ember_sched::run(ember_graph * g, bool queue_last, const ember_tensor * read, size_t read_bytes, const void ** read_at,
                              bool * queued) {
    if (read_at) *read_at = nullptr;
    if (queued) *queued = false;
    ember_status st = prepare(g);
    if (st != EMBER_OK) return st;
    if (!queue_last) {  // everything below waits: so does what was left running
        st = wait();
        if (st != EMBER_OK) return st;
    }
    graph_plan & p = plans_.find(g)->second;

    std::vector<uint8_t> staging;
    const int32_t        n = static_cast<int32_t>(g->nodes.size());
    ember_host_timer     timer(host.on);
    for (int32_t i = 0; i < n;) {
        const int s = p.node_stream[i];
        int32_t   j = i;
        while (j < n && p.node_stream[j] == s) j++;
        if (s < 0) {
            for (int32_t k = i; k < j; k++) {
                ember_tensor * dst   = g->nodes[k];
                const int      owner = dst->buffer ? stream_of_buffer(ember_memory_owner(dst)->buffer) : -1;
                // Queued behind the running work, or copied now once nothing runs.
                if (queue_copy(dst->src[0], dst, owner >= 0 ? streams_[owner] : nullptr)) {
                    host.copies_queued++;
                } else {
                    st = wait();
                    if (st != EMBER_OK) return st;
                    copy_now(dst->src[0], dst, staging);
                }
                host.copies++;
            }
            timer.lap(host.copies_s);
        } else {
            if (abort_cb_ && abort_cb_(abort_ud_)) return EMBER_ERR_CANCELLED;
            ember_stream * stream = streams_[s];
            const bool     last   = j == n;
            const bool     queue  = queue_last && last && stream->iface.graph_launch && stream->iface.wait;
            if (!queue && running_[s]) {  // (a split before the last: the ones after read what it writes)
                st = wait();
                if (st != EMBER_OK) return st;
            }
            st = queue ? stream->iface.graph_launch(stream, g, i, j) : stream->iface.graph_compute(stream, g, i, j);
            timer.lap(host.compute_s);
            host.splits++;
            if (queue) running_[s] = 1;
            if (st != EMBER_OK) {
                (void)wait();  // (leave nothing running behind an error)
                return st;
            }
            if (queue) {
                if (queued) *queued = true;
                if (read && read_at && stream->iface.read_async) *read_at = stream->iface.read_async(stream, read, 0, read_bytes);
                i = j;
                continue;
            }
            // The next split may read what this one wrote.
            if (j < n) stream->iface.synchronize(stream);
            timer.lap(host.wait_s);
        }
        i = j;
    }
    for (size_t k = 0; k < streams_.size(); k++) {
        if (!running_[k]) streams_[k]->iface.synchronize(streams_[k]);
    }
    timer.lap(host.wait_s);
    host.runs++;
    return EMBER_OK;
}

void ember_sched::forget(ember_graph * g) { plans_.erase(g); }

const std::vector<int> * ember_sched::node_streams(ember_graph * g) const {
    auto it = plans_.find(g);
    return it == plans_.end() ? nullptr : &it->second.node_stream;
}

int ember_sched::n_splits(ember_graph * g) const {
    auto it = plans_.find(g);
    return it == plans_.end() ? 0 : it->second.n_splits;
}
