// SentencePiece-style BPE over token scores ("llama" vocabularies).
//
// The text (spaces already U+2581) starts as one symbol per UTF-8 character, in a linked
// list. A max-heap holds every adjacent pair whose concatenation is a token, by that token's
// score (the leftmost pair on ties). The best pair is merged and its new neighbours are
// offered; stale pairs are recognised when popped. What is left is a list of tokens, except
// for single characters that are not tokens: those fall back to their byte tokens <0xNN>.
// O(n log n) in the text length; allocation is per call, not per character.
#include <algorithm>

#include "runtime/unicode.h"
#include "runtime/vocab.h"

namespace {

struct spm_symbol {
    int32_t prev, next;  // -1 at the ends
    size_t  off, len;    // bytes of the text; len 0: merged into its left neighbour
};

struct spm_pair {
    float   score;
    int32_t left, right;
    size_t  len;  // bytes of the merged symbol, to recognise stale pairs
};

// Heap order: the highest score on top, then the leftmost.
bool spm_below(const spm_pair & a, const spm_pair & b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
}

}  // namespace

void ember_spm_tokenize(const ember_vocab & v, std::string_view text, std::vector<int32_t> & out) {
    if (text.empty()) return;
    std::vector<spm_symbol> sym;
    sym.reserve(text.size());
    // One symbol per character; a byte that starts no valid sequence is a symbol of its own
    // (llama.cpp goes by the lead byte alone, which lets an invalid byte swallow the U+2581
    // of a following space).
    for (size_t off = 0; off < text.size();) {
        size_t next = off;
        ember_utf8_decode(text.data(), text.size(), next);
        sym.push_back({-1, -1, off, next - off});
        off = next;
    }
    auto is_space = [&](size_t i) { return text.compare(sym[i].off, sym[i].len, "\xe2\x96\x81") == 0; };

    std::vector<spm_pair> heap;
    auto offer = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const std::string_view s  = text.substr(sym[l].off, sym[l].len + sym[r].len);
        const int32_t          id = v.find(s);
        if (id < 0) return;
        heap.push_back({v.score[id], l, r, s.size()});
        std::push_heap(heap.begin(), heap.end(), spm_below);
    };

    // When no token has a U+2581 right after another character (v.spm_split_words), no merge
    // can cross the start of a run of spaces: each word is then merged on its own, with the
    // same result and a small heap.
    for (size_t b = 0; b < sym.size();) {
        size_t e = b + 1;
        if (v.spm_split_words) {
            while (e < sym.size() && !(is_space(e) && !is_space(e - 1))) e++;
        } else {
            e = sym.size();
        }
        for (size_t i = b; i < e; i++) {
            sym[i].prev = i > b ? static_cast<int32_t>(i - 1) : -1;
            sym[i].next = i + 1 < e ? static_cast<int32_t>(i + 1) : -1;
        }
        heap.clear();
        for (size_t i = b + 1; i < e; i++) offer(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), spm_below);
            const spm_pair p = heap.back();
            heap.pop_back();
            spm_symbol & l = sym[p.left];
            spm_symbol & r = sym[p.right];
            if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;  // one of them changed since
            l.len += r.len;
            r.len  = 0;
            l.next = r.next;
            if (r.next >= 0) sym[r.next].prev = p.left;
            offer(l.prev, p.left);
            offer(p.left, l.next);
        }

        for (int32_t i = static_cast<int32_t>(b); i != -1; i = sym[i].next) {
            const std::string_view s  = text.substr(sym[i].off, sym[i].len);
            const int32_t          id = v.find(s);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            bool all_bytes = true;
            for (char c : s) all_bytes = all_bytes && v.byte_token[static_cast<uint8_t>(c)] >= 0;
            if (all_bytes) {
                for (char c : s) out.push_back(v.byte_token[static_cast<uint8_t>(c)]);
            } else if (v.token_unk >= 0) {
                out.push_back(v.token_unk);  // no byte fallback in this vocabulary
            }
        }
        b = e;
    }
}
