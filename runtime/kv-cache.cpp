#include "runtime/kv-cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "runtime/error.h"

ember_kv_cache::~ember_kv_cache() {
    for (ember_buffer * b : buffers) ember_buffer_free(b);
}

void ember_kv_cache::init(uint32_t n_cells, uint32_t n_layer, int64_t n_embd_k, int64_t n_embd_v, ember_type type_k,
                          ember_type type_v, const std::vector<ember_buffer_type *> & layer_buft) {
    cells.assign(n_cells, ember_kv_cell{});
    pad = EMBER_KV_PAD;
    if (const char * e = std::getenv("EMBER_KV_PAD"); e && *e && std::strspn(e, "0123456789") == std::strlen(e)) {
        const unsigned long v = std::strtoul(e, nullptr, 10);
        for (uint32_t p : {32u, 64u, 128u, 256u, 512u}) {
            if (v == p) pad = p;
        }
    }
    // One buffer per buffer type, holding the K and V tensors of the layers placed there.
    std::map<ember_buffer_type *, std::vector<uint32_t>> groups;
    for (uint32_t il = 0; il < n_layer; il++) groups[layer_buft[il]].push_back(il);
    k_l.resize(n_layer);
    v_l.resize(n_layer);
    for (uint32_t il = 0; il < n_layer; il++) {
        for (int kv = 0; kv < 2; kv++) {
            ember_tensor & t = kv == 0 ? k_l[il] : v_l[il];
            t                = ember_tensor{};
            t.type           = kv == 0 ? type_k : type_v;
            t.ne[0]          = kv == 0 ? n_embd_k : n_embd_v;
            t.ne[1]          = n_cells;
            t.ne[2] = t.ne[3] = 1;
            t.op             = EMBER_OP_NONE;
            ember_set_contiguous_strides(&t);
            ember_set_name(&t, "cache_%c_l%u", kv == 0 ? 'k' : 'v', il);
        }
    }
    for (auto & g : groups) {
        ember_buffer_type * buft  = g.first;
        const size_t        align = ember_buffer_type_alignment(buft);
        size_t              total = 0;
        for (uint32_t il : g.second) {
            for (ember_tensor * t : {&k_l[il], &v_l[il]}) total += (ember_buffer_type_alloc_size(buft, t) + align - 1) / align * align;
        }
        ember_buffer * buf = nullptr;
        ember_status   st  = ember_buffer_type_alloc(buft, total, &buf);
        if (st != EMBER_OK) {
            ember_throw(st, "cannot allocate the KV cache: %zu bytes for %u cells in %s memory", total, n_cells,
                        buft->iface.name(buft));
        }
        buf->usage = EMBER_BUFFER_USAGE_COMPUTE;
        buffers.push_back(buf);
        size_t off = 0;
        for (uint32_t il : g.second) {
            for (ember_tensor * t : {&k_l[il], &v_l[il]}) {
                ember_buffer_place_tensor(buf, t, off);
                off += (ember_buffer_type_alloc_size(buft, t) + align - 1) / align * align;
            }
        }
        // Unused cells are never read unmasked, but keep them finite for sanitizers and NaN checks.
        buf->iface.clear(buf, 0);
    }
}

uint32_t ember_kv_cache::n_kv() const {
    const uint32_t n = static_cast<uint32_t>(max_cell + 1);
    return std::min(size(), std::max(pad, (n + pad - 1) / pad * pad));
}

bool ember_kv_cache::find_slots(uint32_t n, std::vector<int32_t> & out) const {
    out.clear();
    if (size() - n_used < n) return false;
    // Fill from the lowest free cells so the attended range n_kv stays short.
    for (uint32_t i = 0; i < size() && out.size() < n; i++) {
        if (cells[i].seq_mask == 0) out.push_back(static_cast<int32_t>(i));
    }
    return out.size() == n;
}

void ember_kv_cache::occupy(const int32_t * idx, const int32_t * pos, const int32_t * seq, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        ember_kv_cell & c = cells[idx[i]];
        c.pos             = pos[i];
        c.seq_mask        = uint64_t(1) << seq[i];
        max_cell          = std::max(max_cell, idx[i]);
    }
    n_used += n;
}

void ember_kv_cache::release(const int32_t * idx, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) cells[idx[i]] = ember_kv_cell{};
    recount();
}

void ember_kv_cache::recount() {
    n_used   = 0;
    max_cell = -1;
    for (uint32_t i = 0; i < size(); i++) {
        if (cells[i].seq_mask == 0) {
            cells[i].pos = -1;
            continue;
        }
        n_used++;
        max_cell = static_cast<int32_t>(i);
    }
}

void ember_kv_cache::clear() {
    std::fill(cells.begin(), cells.end(), ember_kv_cell{});
    recount();
}

void ember_kv_cache::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    const uint64_t mask = seq < 0 ? ~uint64_t(0) : uint64_t(1) << seq;
    for (ember_kv_cell & c : cells) {
        if (c.seq_mask && c.pos >= p0 && c.pos < p1) c.seq_mask &= ~mask;
    }
    recount();
}

void ember_kv_cache::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    const uint64_t s = uint64_t(1) << src, d = uint64_t(1) << dst;
    for (ember_kv_cell & c : cells) {
        if ((c.seq_mask & s) && c.pos >= p0 && c.pos < p1) c.seq_mask |= d;
    }
}

int32_t ember_kv_cache::seq_pos_max(int32_t seq) const {
    const uint64_t m = uint64_t(1) << seq;
    int32_t        r = -1;
    for (const ember_kv_cell & c : cells) {
        if (c.seq_mask & m) r = std::max(r, c.pos);
    }
    return r;
}

void ember_kv_cache::fill_mask(float * mask, uint32_t n_kv, const int32_t * pos, const int32_t * seq, uint32_t n_tokens) const {
    for (uint32_t t = 0; t < n_tokens; t++) {
        const uint64_t m   = uint64_t(1) << seq[t];
        float *        row = mask + static_cast<size_t>(t) * n_kv;
        for (uint32_t j = 0; j < n_kv; j++) {
            const ember_kv_cell & c = cells[j];
            row[j]                  = (c.seq_mask & m) && c.pos <= pos[t] ? 0.0f : -INFINITY;
        }
    }
}
