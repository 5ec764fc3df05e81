#include "alloc.h"

#include <algorithm>
#include <unordered_map>

namespace {

// First-fit free list over one buffer; tracks the high-water mark.
struct free_list {
    struct block {
        size_t offset, size;
    };
    std::vector<block> free_blocks;
    size_t             end       = 0;  // current extent
    size_t             peak      = 0;
    size_t             alignment = 1;

    size_t alloc(size_t size) {
        size = (size + alignment - 1) / alignment * alignment;
        // best fit among free blocks
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < free_blocks.size(); i++) {
            if (free_blocks[i].size >= size && (best == SIZE_MAX || free_blocks[i].size < free_blocks[best].size)) best = i;
        }
        if (best != SIZE_MAX) {
            size_t off = free_blocks[best].offset;
            free_blocks[best].offset += size;
            free_blocks[best].size -= size;
            if (free_blocks[best].size == 0) free_blocks.erase(free_blocks.begin() + static_cast<ptrdiff_t>(best));
            return off;
        }
        // a free block at the end can be extended
        for (size_t i = 0; i < free_blocks.size(); i++) {
            if (free_blocks[i].offset + free_blocks[i].size == end) {
                size_t off = free_blocks[i].offset;
                end        = off + size;
                free_blocks.erase(free_blocks.begin() + static_cast<ptrdiff_t>(i));
                peak = std::max(peak, end);
                return off;
            }
        }
        size_t off = end;
        end += size;
        peak = std::max(peak, end);
        return off;
    }

    void release(size_t offset, size_t size) {
        size = (size + alignment - 1) / alignment * alignment;
        free_blocks.push_back({offset, size});
        std::sort(free_blocks.begin(), free_blocks.end(), [](const block & a, const block & b) { return a.offset < b.offset; });
        std::vector<block> merged;
        for (const block & b : free_blocks) {
            if (!merged.empty() && merged.back().offset + merged.back().size == b.offset) {
                merged.back().size += b.size;
            } else {
                merged.push_back(b);
            }
        }
        free_blocks.swap(merged);
        if (!free_blocks.empty() && free_blocks.back().offset + free_blocks.back().size == end) {
            end = free_blocks.back().offset;
            free_blocks.pop_back();
        }
    }
};

}  // namespace

ember_gallocr::ember_gallocr(std::vector<ember_buffer_type *> bufts) : bufts_(std::move(bufts)), buffers_(bufts_.size(), nullptr) {}

ember_gallocr::~ember_gallocr() {
    for (ember_buffer * b : buffers_) ember_buffer_free(b);
}

size_t ember_gallocr::buffer_size(size_t i) const { return i < buffers_.size() && buffers_[i] ? buffers_[i]->size : 0; }

ember_status ember_gallocr::reserve(ember_graph * g, const std::vector<int> & node_buft, int input_buft) {
    return plan(g, node_buft, input_buft, false);
}

ember_status ember_gallocr::alloc_graph(ember_graph * g, const std::vector<int> & node_buft, int input_buft) {
    return plan(g, node_buft, input_buft, true);
}

ember_status ember_gallocr::plan(ember_graph * g, const std::vector<int> & node_buft, int input_buft, bool assign) {
    struct info {
        int    buft     = -1;
        size_t offset   = 0;
        size_t size     = 0;
        int    readers  = 0;  // pending reads (views count as readers of their owner until they die)
        bool   placed   = false;
        bool   released = false;
    };
    std::unordered_map<ember_tensor *, info> infos;
    std::vector<free_list>                   lists(bufts_.size());
    for (size_t i = 0; i < bufts_.size(); i++) lists[i].alignment = ember_buffer_type_alignment(bufts_[i]);

    auto needs_memory = [](ember_tensor * t) {
        return t->view_src == nullptr && (t->data == nullptr || (t->flags & EMBER_TENSOR_FLAG_PLANNED));
    };

    // Readers: every src read by a node keeps the memory owner alive.
    for (ember_tensor * node : g->nodes) {
        for (ember_tensor * s : node->src) {
            if (s) infos[ember_memory_owner(s)].readers++;
        }
        if (node->view_src) infos[ember_memory_owner(node)].readers++;  // released when the view dies
    }

    auto place = [&](ember_tensor * t, int buft) -> bool {
        info & in = infos[t];
        if (in.placed) return true;
        if (buft < 0 || buft >= static_cast<int>(bufts_.size())) return false;
        in.buft   = buft;
        in.size   = std::max<size_t>(ember_buffer_type_alloc_size(bufts_[buft], t), 1);
        in.offset = lists[buft].alloc(in.size);
        in.placed = true;
        return true;
    };

    // Inputs first: they are written by the host before compute and must not be overwritten.
    for (ember_tensor * leaf : g->leafs) {
        if (needs_memory(leaf) && !place(leaf, input_buft)) return EMBER_ERR_INTERNAL;
    }

    for (size_t i = 0; i < g->nodes.size(); i++) {
        ember_tensor * node = g->nodes[i];
        if (needs_memory(node) && !place(node, node_buft[i])) return EMBER_ERR_INTERNAL;
        // Release the sources this node was the last reader of.
        auto done_reading = [&](ember_tensor * s) {
            ember_tensor * owner = ember_memory_owner(s);
            info &         in    = infos[owner];
            if (--in.readers == 0 && in.placed && !in.released &&
                !(owner->flags & (EMBER_TENSOR_FLAG_OUTPUT | EMBER_TENSOR_FLAG_INPUT))) {
                lists[in.buft].release(in.offset, in.size);
                in.released = true;
            }
        };
        for (ember_tensor * s : node->src) {
            if (s) done_reading(s);
        }
        if (node->view_src) done_reading(node);
        // A node nobody reads (and not an output) is dead right away.
        info & self = infos[node];
        if (self.placed && self.readers == 0 && !self.released && !(node->flags & EMBER_TENSOR_FLAG_OUTPUT)) {
            lists[self.buft].release(self.offset, self.size);
            self.released = true;
        }
    }

    // Grow the buffers that are too small.
    for (size_t b = 0; b < bufts_.size(); b++) {
        size_t need = lists[b].peak;
        if (need == 0 || (buffers_[b] && buffers_[b]->size >= need)) continue;
        ember_buffer_free(buffers_[b]);
        buffers_[b] = nullptr;
        ember_status st = ember_buffer_type_alloc(bufts_[b], need, &buffers_[b]);
        if (st != EMBER_OK) return st;
        buffers_[b]->usage = EMBER_BUFFER_USAGE_COMPUTE;
        generation_++;
    }
    if (!assign) return EMBER_OK;

    for (auto & kv : infos) {
        if (!kv.second.placed) continue;
        ember_buffer_place_tensor(buffers_[kv.second.buft], kv.first, kv.second.offset);
        kv.first->flags |= EMBER_TENSOR_FLAG_PLANNED;
    }
    // Views take their owner's buffer and address.
    ember_tensor_epoch_bump();
    for (ember_tensor * node : g->nodes) {
        if (!node->view_src) continue;
        ember_tensor * src = node->view_src;
        node->buffer       = src->buffer;
        node->data         = src->data ? static_cast<uint8_t *>(src->data) + node->view_offs : nullptr;
    }
    return EMBER_OK;
}
