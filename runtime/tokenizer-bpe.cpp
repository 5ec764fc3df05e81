// Byte-level BPE over ranked merges ("gpt2" vocabularies).
//
// The pre-tokenizer cuts the text into pieces; each piece starts as one symbol per byte
// (the token of that byte's GPT-2 code point) in a linked list. A min-heap holds every
// adjacent pair that has a merge, by rank (the leftmost on ties); the best is merged into
// the merge's token and its new neighbours are offered. Merges are looked up by the pair of
// token ids in one hash map, so no strings are built per step.
#include <algorithm>

#include "runtime/unicode.h"
#include "runtime/vocab.h"

namespace {

constexpr int32_t k_dead = -2;  // a symbol merged into its left neighbour

struct bpe_symbol {
    int32_t id;  // token, -1 for a byte with no token, k_dead
    int32_t prev, next;
};

struct bpe_pair {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id;  // the ids when offered, to recognise stale pairs
    int32_t result;
};

// Heap order: the lowest rank on top, then the leftmost.
bool bpe_below(const bpe_pair & a, const bpe_pair & b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

struct bpe_work {
    std::vector<bpe_symbol> sym;
    std::vector<bpe_pair>   heap;
    std::string             encoded;
};

void offer(const ember_vocab & v, bpe_work & w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t a = w.sym[l].id, b = w.sym[r].id;
    if (a < 0 || b < 0) return;
    int32_t rank = 0, result = 0;
    if (!v.find_merge(a, b, rank, result)) return;
    w.heap.push_back({rank, l, r, a, b, result});
    std::push_heap(w.heap.begin(), w.heap.end(), bpe_below);
}

void bpe_piece(const ember_vocab & v, std::string_view piece, bpe_work & w, std::vector<int32_t> & out) {
    if (v.ignore_merges) {
        // A piece that is itself a token stays whole (Llama 3's tokenizer.json: ignore_merges).
        w.encoded.clear();
        for (char c : piece) ember_utf8_append(w.encoded, ember_gpt2_byte_to_cpt(static_cast<uint8_t>(c)));
        const int32_t id = v.find(w.encoded);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    const int32_t n = static_cast<int32_t>(piece.size());
    w.sym.clear();
    w.heap.clear();
    for (int32_t i = 0; i < n; i++) {
        w.sym.push_back({v.byte_token[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1});
    }
    for (int32_t i = 1; i < n; i++) offer(v, w, i - 1, i);

    while (!w.heap.empty()) {
        std::pop_heap(w.heap.begin(), w.heap.end(), bpe_below);
        const bpe_pair p = w.heap.back();
        w.heap.pop_back();
        bpe_symbol & l = w.sym[p.left];
        bpe_symbol & r = w.sym[p.right];
        if (l.id != p.left_id || r.id != p.right_id || l.next != p.right) continue;  // stale
        l.id   = p.result;
        l.next = r.next;
        r.id   = k_dead;
        if (r.next >= 0) w.sym[r.next].prev = p.left;
        offer(v, w, l.prev, p.left);
        offer(v, w, p.left, l.next);
    }

    for (int32_t i = 0; i != -1 && n > 0; i = w.sym[i].next) {
        if (w.sym[i].id >= 0) {
            out.push_back(w.sym[i].id);
        } else if (v.token_unk >= 0) {
            out.push_back(v.token_unk);  // a byte the vocabulary has no token for
        }
    }
}

}  // namespace

void ember_bpe_tokenize(const ember_vocab & v, std::string_view text, std::vector<int32_t> & out) {
    std::vector<ember_pre_span> pieces;
    ember_pretokenize(v.pre_type, text.data(), text.size(), pieces);
    bpe_work w;
    for (const ember_pre_span & s : pieces) bpe_piece(v, text.substr(s.begin, s.end - s.begin), w, out);
}
