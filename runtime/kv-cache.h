// The KV cache: per layer one K and one V tensor of `size` cells ([n_embd_k_gqa, size]),
// in the cache type chosen per context (F32, F16, Q8_0, Q4_0). Each cell knows its
// position and the set of sequences that share it (a bit mask: up to 64 sequences), so
// several sequences live in one cache and seq_cp shares cells without copying data.
#ifndef EMBER_RUNTIME_KV_CACHE_H
#define EMBER_RUNTIME_KV_CACHE_H

#include <cstdint>
#include <deque>
#include <vector>

#include "backend.h"

constexpr uint32_t EMBER_MAX_SEQ      = 64;
constexpr uint32_t EMBER_KV_PAD       = 256;  // attention range is padded so graphs are reused

struct ember_kv_cell {
    int32_t  pos      = -1;
    uint64_t seq_mask = 0;
};

struct ember_kv_cache {
    // Allocates the tensors. layer_buft[il] = where layer il's cache lives. Throws ember_error.
    void init(uint32_t n_cells, uint32_t n_layer, int64_t n_embd_k, int64_t n_embd_v, ember_type type_k,
              ember_type type_v, const std::vector<ember_buffer_type *> & layer_buft);
    ~ember_kv_cache();

    uint32_t size() const { return static_cast<uint32_t>(cells.size()); }
    uint32_t used() const { return n_used; }
    // Cells the attention must look at: one past the last used cell, padded to `pad` cells.
    uint32_t n_kv() const;

    // Picks free cells for n tokens into `out` (no allocation when out has capacity).
    // False when fewer than n cells are free.
    bool find_slots(uint32_t n, std::vector<int32_t> & out) const;
    // Stores token positions and sequences in the chosen cells.
    void occupy(const int32_t * cells_idx, const int32_t * pos, const int32_t * seq, uint32_t n);
    // Frees the cells of a rolled-back micro-batch.
    void release(const int32_t * cells_idx, uint32_t n);

    void    clear();
    void    seq_rm(int32_t seq, int32_t p0, int32_t p1);  // seq < 0: all; p1 < 0: to the end
    void    seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
    int32_t seq_pos_max(int32_t seq) const;

    // mask [n_kv, n_tokens]: 0 where token t (seq s, pos p) may see cell j, -INF elsewhere.
    void fill_mask(float * mask, uint32_t n_kv, const int32_t * pos, const int32_t * seq, uint32_t n_tokens) const;

    std::vector<ember_kv_cell>  cells;
    uint32_t                    n_used   = 0;
    uint32_t                    head     = 0;    // where the next search for free cells starts
    int32_t                     max_cell = -1;   // highest used cell index
    // n_kv's padding: EMBER_KV_PAD, or the environment's EMBER_KV_PAD=32|64|128|256|512 read at
    // init (measuring: a shorter attended row at short contexts against a graph per fewer tokens).
    uint32_t                    pad      = EMBER_KV_PAD;
    std::deque<ember_tensor>    k_l, v_l;        // per layer
    std::vector<ember_buffer *> buffers;

  private:
    void recount();
};

#endif  // EMBER_RUNTIME_KV_CACHE_H
