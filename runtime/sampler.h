// Sampling: a sampler works on the candidates (id, logit, p) built from one logits row. A chain
// applies its links in order; a selecting link (greedy, dist) picks the token and ends the walk;
// when none does, the argmax of what remains is taken. The semantics follow llama.cpp's
// llama-sampling.cpp, with two deliberate differences: ties are always broken towards the
// lowest token id (so results never depend on std::sort's unspecified order), and dist draws
// from our own xoshiro256** generator, so a seed gives the same tokens on every platform.
//
// Internal C++; runtime/c-api-sampler.cpp is the C face. Constructors validate their
// parameters and throw ember_error (EMBER_ERR_INVALID_ARG).
#ifndef EMBER_RUNTIME_SAMPLER_H
#define EMBER_RUNTIME_SAMPLER_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ember.h"

struct ember_candidate {
    int32_t id;
    float   logit;
    float   p;  // probability, valid only right after a link that computes it (top-p, typical, dist)
};

// A view of a candidate buffer (the sampled sampler owns the storage).
struct ember_candidates {
    ember_candidate * data     = nullptr;
    size_t            size     = 0;
    int32_t           n_vocab  = 0;      // size of the logits row the candidates came from
    bool              sorted   = false;  // descending logit, equal logits by ascending id
    int64_t           selected = -1;     // index picked by a selecting link, -1 while none has
};

// The candidate order: higher logit first, then lower id. A strict total order (no NaN here:
// rows are checked and the links that do arithmetic map NaN to -inf).
inline bool ember_candidate_before(const ember_candidate & a, const ember_candidate & b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Index of the first candidate in ember_candidate_before order (highest logit, lowest id).
size_t ember_candidates_argmax(const ember_candidates & cur);

// Sets p to the softmax of the logits (exp in double, rounded to float). Returns false, p
// untouched, when every logit is -inf. When some logits are +inf they share all the mass.
bool ember_candidates_softmax(ember_candidates & cur);

// xoshiro256** (Blackman and Vigna), state filled by splitmix64 from the seed: the same
// sequence on every platform, unlike std::mt19937 + std::uniform_real_distribution.
struct ember_rng {
    explicit ember_rng(uint64_t seed = 0) { reseed(seed); }
    void     reseed(uint64_t seed);
    uint64_t next();
    double   uniform();  // [0, 1) with 53 random bits

    uint64_t s[4];
};

//
// Samplers
//
struct ember_sampler {
    virtual ~ember_sampler() = default;

    virtual const char * name() const = 0;
    // Transforms the candidates; a selecting link sets cur.selected.
    virtual void apply(ember_candidates & cur) = 0;
    // Records a token that was sampled or chosen elsewhere (penalty history).
    virtual void accept(int32_t /*token*/) {}
    // Forgets history, restarts random draws from the seed.
    virtual void reset() {}
    virtual bool is_chain() const { return false; }
    // True when sampling would reach a greedy link before any other: then the row is scanned
    // directly, without building candidates.
    virtual bool greedy_first() const { return false; }

    // Builds the candidates of a row of n_vocab logits, applies this sampler, picks the token
    // (cur.selected, or the argmax of what remains), accepts it and returns it. The candidate
    // buffer is reused: no allocation once it has grown to n_vocab. Throws ember_error when
    // the row holds NaN or nothing can be picked (every logit -inf).
    int32_t sample(const float * logits, int32_t n_vocab);
    const ember_candidate * candidate_buffer() const { return cand_.data(); }  // for tests

    // How many of a row's best candidates decide what this sampler picks: 1 for greedy and
    // temp <= 0, k for top-k (k > 0), -1 when it may need any token of the row (the default:
    // penalties and logit bias move tokens up, temp > 0 may round ties apart, the p-filters
    // need the whole distribution). A chain answers for its first link.
    virtual int64_t candidates_needed() const { return -1; }
    // sample() over only the best n_kept candidates of a row of n_vocab (ids and values best
    // first, as TOP_K gives them): the same token, draws and history as sample() on the full
    // row whenever candidates_needed() is in [1, n_kept] or n_kept == n_vocab. Otherwise
    // throws EMBER_ERR_UNSUPPORTED saying why; a NaN value throws as sample() does.
    int32_t sample_top(const int32_t * ids, const float * vals, int32_t n_kept, int32_t n_vocab);

    ember_sampler * parent  = nullptr;  // the chain that owns this sampler, or nullptr
    int32_t         n_vocab = 0;        // row size of the last sample() on this sampler, 0 = none yet

  private:
    int32_t pick(ember_candidates & cur);  // apply, then the selected candidate or the argmax

    std::vector<ember_candidate> cand_;
    std::vector<float>           row_;  // sample_top with every token kept: the row rebuilt
};

struct ember_sampler_chain : ember_sampler {
    const char * name() const override { return "chain"; }
    void         apply(ember_candidates & cur) override;
    void         accept(int32_t token) override;
    void         reset() override;
    bool         is_chain() const override { return true; }
    bool         greedy_first() const override { return !links.empty() && links.front()->greedy_first(); }
    int64_t      candidates_needed() const override;

    // Takes s (freed if this throws). Throws when s already has a parent or is this chain or
    // one of its ancestors.
    void add(std::unique_ptr<ember_sampler> s);

    std::vector<std::unique_ptr<ember_sampler>> links;
};

// argmax, lowest id on ties. Throws when every candidate is -inf.
struct ember_sampler_greedy : ember_sampler {
    const char * name() const override { return "greedy"; }
    void         apply(ember_candidates & cur) override;
    bool         greedy_first() const override { return true; }
    int64_t      candidates_needed() const override { return 1; }
};

// One draw from the softmax of the candidates, in their current order: the first candidate
// whose running sum of exp(logit - max) exceeds u * sum, u = rng.uniform().
struct ember_sampler_dist : ember_sampler {
    explicit ember_sampler_dist(uint32_t seed_) : seed(seed_), rng(seed_) {}
    const char * name() const override { return "dist"; }
    void         apply(ember_candidates & cur) override;
    void         reset() override { rng.reseed(seed); }

    uint32_t  seed;
    ember_rng rng;
};

// logits / temp; temp <= 0 keeps only the max (lowest id on ties).
struct ember_sampler_temp : ember_sampler {
    explicit ember_sampler_temp(float temp);  // temp finite
    const char * name() const override { return "temp"; }
    void         apply(ember_candidates & cur) override;
    int64_t      candidates_needed() const override { return temp <= 0.0f ? 1 : -1; }

    float temp;
};

// Keeps the k highest logits (exactly k: at a tie on the boundary the lower ids stay); k <= 0 no-op.
struct ember_sampler_top_k : ember_sampler {
    explicit ember_sampler_top_k(int32_t k_) : k(k_) {}
    const char * name() const override { return "top-k"; }
    void         apply(ember_candidates & cur) override;
    int64_t      candidates_needed() const override { return k > 0 ? k : -1; }

    int32_t k;
};

// Keeps the fewest most probable candidates whose probabilities sum to at least p, and at
// least min_keep; p >= 1 no-op. Leaves them sorted.
struct ember_sampler_top_p : ember_sampler {
    ember_sampler_top_p(float p, size_t min_keep);  // p in [0, 1]
    const char * name() const override { return "top-p"; }
    void         apply(ember_candidates & cur) override;

    float  p;
    size_t min_keep;
};

// Keeps the candidates whose probability is at least p times the largest one (logit >=
// max + log p), at least min_keep of them (the highest); p <= 0 no-op. Order is kept.
struct ember_sampler_min_p : ember_sampler {
    ember_sampler_min_p(float p, size_t min_keep);  // p in [0, 1]
    const char * name() const override { return "min-p"; }
    void         apply(ember_candidates & cur) override;

    float  p;
    size_t min_keep;
};

// Locally typical sampling: orders candidates by |-log p - H| (H the entropy; ties by
// lower id) and keeps the shortest prefix whose probability exceeds p, at least min_keep;
// p >= 1 no-op. The candidates are left in that order.
struct ember_sampler_typical : ember_sampler {
    ember_sampler_typical(float p, size_t min_keep);  // p in [0, 1]
    const char * name() const override { return "typical"; }
    void         apply(ember_candidates & cur) override;

    float  p;
    size_t min_keep;

  private:
    struct scored {
        double   score;
        uint32_t idx;  // index into the candidates
        int32_t  id;
    };
    std::vector<scored>          order_;  // scratch, reused
    std::vector<ember_candidate> kept_;   // scratch, reused
};

// Repeat, frequency and presence penalties over the last last_n accepted tokens (-1: all,
// 0: off). For a token seen c > 0 times: logit > 0 ? logit / repeat : logit * repeat, then
// logit -= c * freq + presence.
struct ember_sampler_penalties : ember_sampler {
    ember_sampler_penalties(int32_t last_n, float repeat, float freq, float presence);
    const char * name() const override { return "penalties"; }
    void         apply(ember_candidates & cur) override;
    void         accept(int32_t token) override;
    void         reset() override;

    // Occurrences of a token in the window (0 for ids outside the counted range).
    int32_t count(int32_t token) const;

    int32_t last_n;
    float   repeat, freq, presence;

  private:
    bool active() const { return last_n != 0 && (repeat != 1.0f || freq != 0.0f || presence != 0.0f); }
    // Sizes counts to n_vocab (growing only) and recounts what was recorded.
    void size_counts(int32_t n_vocab);

    std::vector<int32_t> counts_;   // [>= n_vocab once a row was seen] occurrences in the window
    std::vector<int32_t> ring_;     // last_n > 0: the window, grows up to last_n entries
    size_t               head_ = 0; // last_n > 0 and ring full: the oldest entry
    std::vector<int32_t> pending_;  // last_n < 0: accepted ids not yet covered by counts_
};

// Adds a bias to the logits of given tokens (-INFINITY bans). Biases for one token add up.
struct ember_sampler_logit_bias : ember_sampler {
    // Every token in [0, n_vocab), every bias not NaN and not +inf.
    ember_sampler_logit_bias(int32_t n_vocab, const ember_logit_bias * biases, size_t n);
    const char * name() const override { return "logit-bias"; }
    void         apply(ember_candidates & cur) override;

    int32_t                       n_vocab_bias;
    std::vector<ember_logit_bias> biases;  // sorted by token, one entry per token
};

#endif  // EMBER_RUNTIME_SAMPLER_H
