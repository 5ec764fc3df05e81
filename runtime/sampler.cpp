// Sampler links and chains (see sampler.h for the semantics of each link).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace {

// Walks the candidates in ember_candidate_before order, sorting only as far as the walk gets:
// the first n_sorted are already in order, the rest is partially sorted in growing chunks.
// visit(i) sees data[i] in its final place and returns true to stop. Returns the index where
// visit stopped, or n when it never did (then everything is sorted).
// first_chunk: how many to sort first when a good guess is known (0: 64).
template <typename T, typename Less, typename Visit>
size_t walk_sorted(T * data, size_t n, size_t n_sorted, Less less, Visit visit, size_t first_chunk = 0) {
    for (size_t i = 0; i < n; i++) {
        if (i == n_sorted) {
            // The next chunk: selected in linear time, then sorted.
            const size_t grow = n_sorted == 0 && first_chunk > 0 ? first_chunk : std::max<size_t>(64, 4 * n_sorted);
            const size_t next = std::min(n, grow);
            if (next < n) std::nth_element(data + n_sorted, data + next - 1, data + n, less);
            std::sort(data + n_sorted, data + next, less);
            n_sorted = next;
        }
        if (visit(i)) return i;
    }
    return n;
}

// NaN can only come from inf - inf in the links that do arithmetic; it means "impossible".
inline float no_nan(float x) { return std::isnan(x) ? -INFINITY : x; }

// How many of the highest candidates hold probability mass p, to within one histogram bucket
// of the logits (0.25 wide, below the max): a guess of where top-p cuts that costs one pass,
// so the sort is done once instead of in growing chunks. Needs p filled and a finite max.
size_t top_mass_guess(const ember_candidates & cur, float max_l, double p) {
    constexpr int    n_buckets = 128;
    constexpr double per_unit  = 4.0;  // buckets per unit of logit
    double           mass[n_buckets]  = {};
    size_t           count[n_buckets] = {};
    for (size_t i = 0; i < cur.size; i++) {
        const double d = static_cast<double>(max_l) - static_cast<double>(cur.data[i].logit);  // >= 0, may be +inf
        const int    b = d < (n_buckets - 1) / per_unit ? static_cast<int>(d * per_unit) : n_buckets - 1;
        mass[b] += cur.data[i].p;
        count[b]++;
    }
    double cum = 0.0;
    size_t n   = 0;
    for (int b = 0; b < n_buckets; b++) {
        cum += mass[b];
        n += count[b];
        if (cum >= p) break;
    }
    return n;
}

[[noreturn]] void throw_nothing_to_sample(const char * who) {
    ember_throw(EMBER_ERR_INVALID_ARG, "%s: no token can be sampled: every candidate has logit -inf", who);
}

void check_p(const char * who, float p) {
    if (!(p >= 0.0f && p <= 1.0f)) ember_throw(EMBER_ERR_INVALID_ARG, "%s: p = %g is not in [0, 1]", who, p);
}

}  // namespace

size_t ember_candidates_argmax(const ember_candidates & cur) {
    size_t best = 0;
    for (size_t i = 1; i < cur.size; i++) {
        if (ember_candidate_before(cur.data[i], cur.data[best])) best = i;
    }
    return best;
}

bool ember_candidates_softmax(ember_candidates & cur) {
    float max_l = -INFINITY;
    for (size_t i = 0; i < cur.size; i++) max_l = std::max(max_l, cur.data[i].logit);
    if (max_l == -INFINITY) return false;
    double sum = 0.0;
    for (size_t i = 0; i < cur.size; i++) {
        const float l = cur.data[i].logit;
        // +inf logits (an overflowed temp or penalty) take all the mass, shared equally.
        const float e = max_l == INFINITY ? (l == INFINITY ? 1.0f : 0.0f)
                                          : static_cast<float>(std::exp(static_cast<double>(l) - static_cast<double>(max_l)));
        cur.data[i].p = e;
        sum += e;
    }
    const double inv = 1.0 / sum;  // sum >= 1: the max contributes exp(0)
    for (size_t i = 0; i < cur.size; i++) cur.data[i].p = static_cast<float>(cur.data[i].p * inv);
    return true;
}

//
// PRNG
//
void ember_rng::reseed(uint64_t seed) {
    // splitmix64 expands the seed, so nearby seeds give unrelated streams and the state is never all zero.
    uint64_t x = seed;
    for (uint64_t & w : s) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        w          = z ^ (z >> 31);
    }
}

uint64_t ember_rng::next() {
    const auto     rotl   = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t      = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ember_rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

//
// Sampling a row
//
int32_t ember_sampler::sample(const float * logits, int32_t n) {
    if (!logits) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: logits row is NULL", name());
    if (n <= 0) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: n_vocab = %d must be positive", name(), n);

    const auto check_row = [&](bool has_nan) {
        if (!has_nan) return;
        for (int32_t i = 0; i < n; i++) {
            if (std::isnan(logits[i])) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: logit of token %d is NaN", name(), i);
        }
    };
    int32_t token = -1;
    if (greedy_first()) {
        // Nothing before the argmax: the row's maximum in branch-free lanes (8 independent
        // maxima the compiler can keep in vector registers), then the first token holding it
        // (lowest id). 32000 logits: 19 -> 13 us.
        float   lane[8];
        int32_t nan_lanes = 0;
        for (int j = 0; j < 8; j++) lane[j] = -INFINITY;
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) {
            for (int j = 0; j < 8; j++) {
                const float v = logits[i + j];
                nan_lanes |= v != v;
                lane[j] = v > lane[j] ? v : lane[j];
            }
        }
        float best_l = -INFINITY;
        for (; i < n; i++) {
            const float v = logits[i];
            nan_lanes |= v != v;
            best_l = v > best_l ? v : best_l;
        }
        for (int j = 0; j < 8; j++) best_l = lane[j] > best_l ? lane[j] : best_l;
        check_row(nan_lanes != 0);
        if (best_l == -INFINITY) throw_nothing_to_sample(name());
        int32_t best = 0;
        while (logits[best] != best_l) best++;
        token = best;
    } else {
        const size_t nv = static_cast<size_t>(n);
        if (cand_.capacity() < nv) cand_.reserve(nv);
        cand_.resize(nv);
        bool nan = false;
        for (size_t i = 0; i < nv; i++) {
            nan |= std::isnan(logits[i]);
            cand_[i] = ember_candidate{static_cast<int32_t>(i), logits[i], 0.0f};
        }
        check_row(nan);
        ember_candidates cur;
        cur.data    = cand_.data();
        cur.size    = nv;
        cur.n_vocab = n;
        token       = pick(cur);
    }
    accept(token);
    n_vocab = n;
    return token;
}

int32_t ember_sampler::pick(ember_candidates & cur) {
    apply(cur);
    if (cur.size == 0 || cur.selected >= static_cast<int64_t>(cur.size)) {
        ember_throw(EMBER_ERR_INTERNAL, "sampler %s: selected candidate %lld of %zu", name(), static_cast<long long>(cur.selected), cur.size);
    }
    size_t sel = cur.selected >= 0 ? static_cast<size_t>(cur.selected) : ember_candidates_argmax(cur);
    if (cur.selected < 0 && cur.data[sel].logit == -INFINITY) throw_nothing_to_sample(name());
    return cur.data[sel].id;
}

int32_t ember_sampler::sample_top(const int32_t * ids, const float * vals, int32_t n_kept, int32_t n) {
    if (!ids || !vals) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: candidate ids or values are NULL", name());
    if (n <= 0) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: n_vocab = %d must be positive", name(), n);
    if (n_kept < 1 || n_kept > n) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: %d candidates of a row of %d", name(), n_kept, n);
    const int64_t need = candidates_needed();
    if (n_kept < n && (need < 1 || need > n_kept)) {
        ember_throw(EMBER_ERR_UNSUPPORTED,
                    "sampler %s cannot run on the best %d candidates the context kept of %d (device_top_k): its result depends "
                    "on %s; start the chain with greedy or top_k(k <= %d), or use device_top_k = 0",
                    name(), n_kept, n, need < 1 ? "the whole logits row" : "more candidates than were kept", n_kept);
    }
    const size_t nk = static_cast<size_t>(n_kept);
    if (need < 1 || need > n_kept) {
        // Every token was kept, but this sampler may depend on the candidates' order (dist
        // draws in candidate order): give it the row itself.
        row_.assign(nk, 0.0f);
        for (size_t i = 0; i < nk; i++) {
            if (ids[i] < 0 || ids[i] >= n) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: candidate id %d is not in [0, %d)", name(), ids[i], n);
            row_[static_cast<size_t>(ids[i])] = vals[i];
        }
        return sample(row_.data(), n);
    }
    if (cand_.capacity() < nk) cand_.reserve(nk);
    cand_.resize(nk);
    for (size_t i = 0; i < nk; i++) {
        if (ids[i] < 0 || ids[i] >= n) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: candidate id %d is not in [0, %d)", name(), ids[i], n);
        // TOP_K ranks NaN first: a row holding NaN always shows one here.
        if (std::isnan(vals[i])) ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: logit of token %d is NaN", name(), ids[i]);
        if (i > 0 && !ember_candidate_before(ember_candidate{ids[i - 1], vals[i - 1], 0.0f}, ember_candidate{ids[i], vals[i], 0.0f})) {
            ember_throw(EMBER_ERR_INVALID_ARG, "sampler %s: candidates %zu and %zu are not in descending order", name(), i - 1, i);
        }
        cand_[i] = ember_candidate{ids[i], vals[i], 0.0f};
    }
    ember_candidates cur;
    cur.data    = cand_.data();
    cur.size    = nk;
    cur.n_vocab = n;
    cur.sorted  = true;  // as the full row's candidates are right after a top-k link
    const int32_t token = pick(cur);
    accept(token);
    n_vocab = n;
    return token;
}

int64_t ember_sampler_chain::candidates_needed() const {
    return links.empty() ? 1 : links.front()->candidates_needed();  // an empty chain takes the argmax
}

//
// Chain
//
void ember_sampler_chain::apply(ember_candidates & cur) {
    for (auto & link : links) {
        link->apply(cur);
        if (cur.selected >= 0) return;  // a selecting link ends the walk
    }
}

void ember_sampler_chain::accept(int32_t token) {
    for (auto & link : links) link->accept(token);
}

void ember_sampler_chain::reset() {
    for (auto & link : links) link->reset();
}

void ember_sampler_chain::add(std::unique_ptr<ember_sampler> s) {
    if (!s) ember_throw(EMBER_ERR_INVALID_ARG, "chain: cannot add a NULL sampler");
    if (s->parent) ember_throw(EMBER_ERR_INVALID_ARG, "chain: the %s sampler already belongs to a chain", s->name());
    for (const ember_sampler * p = this; p; p = p->parent) {
        if (p == s.get()) ember_throw(EMBER_ERR_INVALID_ARG, "chain: adding the %s sampler would make a chain contain itself", s->name());
    }
    links.reserve(links.size() + 1);  // may throw; s is still ours and freed then
    s->parent = this;
    links.push_back(std::move(s));
}

//
// Links
//
void ember_sampler_greedy::apply(ember_candidates & cur) {
    if (cur.size == 0) return;
    const size_t best = ember_candidates_argmax(cur);
    if (cur.data[best].logit == -INFINITY) throw_nothing_to_sample("greedy");
    cur.selected = static_cast<int64_t>(best);
}

void ember_sampler_dist::apply(ember_candidates & cur) {
    if (cur.size == 0) return;
    float max_l = -INFINITY;
    for (size_t i = 0; i < cur.size; i++) max_l = std::max(max_l, cur.data[i].logit);
    if (max_l == -INFINITY) throw_nothing_to_sample("dist");

    // Unnormalised weights rounded to float, summed in double in candidate order: the draw
    // depends only on these values, so it is the same wherever exp() agrees to float precision.
    double sum = 0.0;
    for (size_t i = 0; i < cur.size; i++) {
        const float l = cur.data[i].logit;
        const float e = max_l == INFINITY ? (l == INFINITY ? 1.0f : 0.0f)
                                          : static_cast<float>(std::exp(static_cast<double>(l) - static_cast<double>(max_l)));
        cur.data[i].p = e;
        sum += e;
    }
    const double target = rng.uniform() * sum;
    double       run    = 0.0;
    size_t       sel    = cur.size;
    size_t       last   = 0;  // last candidate with weight, for target == sum after rounding
    for (size_t i = 0; i < cur.size; i++) {
        if (cur.data[i].p > 0.0f) last = i;
        run += cur.data[i].p;
        if (sel == cur.size && target < run) sel = i;
        cur.data[i].p = static_cast<float>(cur.data[i].p / sum);
    }
    cur.selected = static_cast<int64_t>(sel == cur.size ? last : sel);
}

ember_sampler_temp::ember_sampler_temp(float t) : temp(t) {
    if (!std::isfinite(t)) ember_throw(EMBER_ERR_INVALID_ARG, "temp: temperature %g is not finite", t);
}

void ember_sampler_temp::apply(ember_candidates & cur) {
    if (cur.size == 0) return;
    if (temp <= 0.0f) {
        const size_t best = ember_candidates_argmax(cur);
        std::swap(cur.data[0], cur.data[best]);
        cur.size   = 1;
        cur.sorted = true;
        return;
    }
    for (size_t i = 0; i < cur.size; i++) cur.data[i].logit /= temp;
    // Rounding may turn two close logits into a tie whose id order differs from before.
    if (temp != 1.0f) cur.sorted = false;
}

void ember_sampler_top_k::apply(ember_candidates & cur) {
    if (k <= 0 || cur.size == 0) return;
    const size_t kk = std::min(cur.size, static_cast<size_t>(k));
    if (!cur.sorted) std::partial_sort(cur.data, cur.data + kk, cur.data + cur.size, ember_candidate_before);
    cur.size   = kk;
    cur.sorted = true;
}

ember_sampler_top_p::ember_sampler_top_p(float p_, size_t min_keep_) : p(p_), min_keep(min_keep_) { check_p("top-p", p_); }

void ember_sampler_top_p::apply(ember_candidates & cur) {
    if (p >= 1.0f || cur.size == 0) return;
    if (!ember_candidates_softmax(cur)) return;
    size_t guess = 0;
    if (!cur.sorted && cur.size > 1024) {
        float max_l = -INFINITY;
        for (size_t i = 0; i < cur.size; i++) max_l = std::max(max_l, cur.data[i].logit);
        // a few more than the guess, so rounding in the exact walk rarely needs a second chunk
        if (std::isfinite(max_l)) guess = std::max(top_mass_guess(cur, max_l, p), min_keep) + 16;
    }
    double       cum  = 0.0;
    const size_t stop = walk_sorted(
        cur.data, cur.size, cur.sorted ? cur.size : 0, ember_candidate_before,
        [&](size_t i) {
            cum += cur.data[i].p;
            return cum >= p && i + 1 >= min_keep;
        },
        guess);
    if (stop < cur.size) cur.size = stop + 1;
    cur.sorted = true;
}

ember_sampler_min_p::ember_sampler_min_p(float p_, size_t min_keep_) : p(p_), min_keep(min_keep_) { check_p("min-p", p_); }

void ember_sampler_min_p::apply(ember_candidates & cur) {
    if (p <= 0.0f || cur.size == 0) return;
    float max_l = -INFINITY;
    for (size_t i = 0; i < cur.size; i++) max_l = std::max(max_l, cur.data[i].logit);
    if (max_l == -INFINITY) return;
    // p_i >= p * p_max  <=>  logit_i >= max + log(p)
    const double min_logit = static_cast<double>(max_l) + std::log(static_cast<double>(p));
    size_t       n_pass    = 0;
    for (size_t i = 0; i < cur.size; i++) n_pass += cur.data[i].logit >= min_logit;
    if (n_pass >= min_keep) {
        size_t j = 0;
        for (size_t i = 0; i < cur.size; i++) {
            if (cur.data[i].logit >= min_logit) cur.data[j++] = cur.data[i];
        }
        cur.size = j;  // order (and sortedness) kept
        return;
    }
    // Too few pass: the min_keep highest, which include every one that passed.
    const size_t kk = std::min(min_keep, cur.size);
    if (!cur.sorted) std::partial_sort(cur.data, cur.data + kk, cur.data + cur.size, ember_candidate_before);
    cur.size   = kk;
    cur.sorted = true;
}

ember_sampler_typical::ember_sampler_typical(float p_, size_t min_keep_) : p(p_), min_keep(min_keep_) { check_p("typical", p_); }

void ember_sampler_typical::apply(ember_candidates & cur) {
    if (p >= 1.0f || cur.size == 0) return;
    if (!ember_candidates_softmax(cur)) return;
    double entropy = 0.0;
    for (size_t i = 0; i < cur.size; i++) {
        const double pi = cur.data[i].p;
        if (pi > 0.0) entropy -= pi * std::log(pi);
    }
    if (order_.capacity() < cur.size) order_.reserve(cur.size);
    order_.resize(cur.size);
    for (size_t i = 0; i < cur.size; i++) {
        const double pi = cur.data[i].p;
        // p = 0 is infinitely surprising: last.
        order_[i] = scored{pi > 0.0 ? std::fabs(-std::log(pi) - entropy) : INFINITY, static_cast<uint32_t>(i), cur.data[i].id};
    }
    const auto less = [](const scored & a, const scored & b) { return a.score < b.score || (a.score == b.score && a.id < b.id); };
    double     cum  = 0.0;
    const size_t stop = walk_sorted(order_.data(), order_.size(), 0, less, [&](size_t i) {
        cum += cur.data[order_[i].idx].p;
        return cum > p && i + 1 >= min_keep;
    });
    const size_t n_keep = stop < cur.size ? stop + 1 : cur.size;
    if (kept_.capacity() < cur.size) kept_.reserve(cur.size);
    kept_.resize(n_keep);
    for (size_t i = 0; i < n_keep; i++) kept_[i] = cur.data[order_[i].idx];
    std::copy(kept_.begin(), kept_.end(), cur.data);
    cur.size   = n_keep;
    cur.sorted = false;
}

ember_sampler_penalties::ember_sampler_penalties(int32_t last_n_, float repeat_, float freq_, float presence_)
    : last_n(last_n_), repeat(repeat_), freq(freq_), presence(presence_) {
    if (last_n_ < -1) ember_throw(EMBER_ERR_INVALID_ARG, "penalties: last_n = %d; use -1 for all tokens, 0 for off", last_n_);
    if (!std::isfinite(repeat_) || repeat_ <= 0.0f) {
        ember_throw(EMBER_ERR_INVALID_ARG, "penalties: repeat = %g must be finite and > 0 (1 = off)", repeat_);
    }
    if (!std::isfinite(freq_)) ember_throw(EMBER_ERR_INVALID_ARG, "penalties: freq = %g is not finite", freq_);
    if (!std::isfinite(presence_)) ember_throw(EMBER_ERR_INVALID_ARG, "penalties: presence = %g is not finite", presence_);
}

void ember_sampler_penalties::size_counts(int32_t n) {
    const size_t nv = static_cast<size_t>(n);
    if (counts_.size() >= nv) return;
    if (last_n > 0) {
        counts_.assign(nv, 0);
        for (int32_t t : ring_) {
            if (static_cast<size_t>(t) < nv) counts_[t]++;
        }
        return;
    }
    counts_.resize(nv, 0);
    size_t j = 0;
    for (int32_t t : pending_) {
        if (static_cast<size_t>(t) < nv) counts_[t]++;
        else pending_[j++] = t;
    }
    pending_.resize(j);
}

void ember_sampler_penalties::accept(int32_t token) {
    if (!active() || token < 0) return;
    const size_t t = static_cast<size_t>(token);
    if (last_n > 0) {
        if (ring_.size() < static_cast<size_t>(last_n)) {
            ring_.push_back(token);
        } else {
            const int32_t old = ring_[head_];
            ring_[head_]      = token;
            head_             = (head_ + 1) % ring_.size();
            if (static_cast<size_t>(old) < counts_.size()) counts_[old]--;
        }
        if (t < counts_.size()) counts_[t]++;
        return;
    }
    if (t < counts_.size()) counts_[t]++;
    else pending_.push_back(token);  // counted once a row of that size is seen
}

void ember_sampler_penalties::reset() {
    std::fill(counts_.begin(), counts_.end(), 0);
    ring_.clear();
    pending_.clear();
    head_ = 0;
}

int32_t ember_sampler_penalties::count(int32_t token) const {
    if (token < 0) return 0;
    if (last_n > 0) return static_cast<int32_t>(std::count(ring_.begin(), ring_.end(), token));
    int32_t c = static_cast<size_t>(token) < counts_.size() ? counts_[token] : 0;
    return c + static_cast<int32_t>(std::count(pending_.begin(), pending_.end(), token));
}

void ember_sampler_penalties::apply(ember_candidates & cur) {
    if (!active() || cur.size == 0) return;
    size_counts(cur.n_vocab);
    for (size_t i = 0; i < cur.size; i++) {
        ember_candidate & c = cur.data[i];
        const size_t      t = static_cast<size_t>(c.id);
        const int32_t     n = t < counts_.size() ? counts_[t] : 0;
        if (n == 0) continue;
        float l = c.logit > 0.0f ? c.logit / repeat : c.logit * repeat;
        l -= static_cast<float>(n) * freq + presence;
        c.logit = no_nan(l);
    }
    cur.sorted = false;
}

ember_sampler_logit_bias::ember_sampler_logit_bias(int32_t n_vocab_, const ember_logit_bias * b, size_t n) : n_vocab_bias(n_vocab_) {
    if (n_vocab_ <= 0) ember_throw(EMBER_ERR_INVALID_ARG, "logit-bias: n_vocab = %d must be positive", n_vocab_);
    if (n > 0 && !b) ember_throw(EMBER_ERR_INVALID_ARG, "logit-bias: biases is NULL but n = %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (b[i].token < 0 || b[i].token >= n_vocab_) {
            ember_throw(EMBER_ERR_INVALID_ARG, "logit-bias: biases[%zu].token = %d is not in [0, n_vocab = %d)", i, b[i].token, n_vocab_);
        }
        if (std::isnan(b[i].bias) || b[i].bias == INFINITY) {
            ember_throw(EMBER_ERR_INVALID_ARG, "logit-bias: biases[%zu].bias = %g (token %d); use a finite bias or -INFINITY to ban",
                        i, b[i].bias, b[i].token);
        }
    }
    biases.assign(b, b + n);
    const auto by_token = [](const ember_logit_bias & x, const ember_logit_bias & y) { return x.token < y.token; };
    std::stable_sort(biases.begin(), biases.end(), by_token);
    // One entry per token: the sum of its biases.
    size_t j = 0;
    for (size_t i = 0; i < biases.size(); i++) {
        if (j > 0 && biases[j - 1].token == biases[i].token) biases[j - 1].bias += biases[i].bias;
        else biases[j++] = biases[i];
    }
    biases.resize(j);
}

void ember_sampler_logit_bias::apply(ember_candidates & cur) {
    if (biases.empty() || cur.size == 0) return;
    // Candidates still laid out as the row (id == index), the usual case when the link comes first.
    bool identity = true;
    for (const ember_logit_bias & b : biases) {
        if (static_cast<size_t>(b.token) >= cur.size || cur.data[b.token].id != b.token) {
            identity = false;
            break;
        }
    }
    if (identity) {
        for (const ember_logit_bias & b : biases) cur.data[b.token].logit = no_nan(cur.data[b.token].logit + b.bias);
    } else {
        const auto by_token = [](const ember_logit_bias & b, int32_t id) { return b.token < id; };
        for (size_t i = 0; i < cur.size; i++) {
            ember_candidate & c  = cur.data[i];
            const auto        it = std::lower_bound(biases.begin(), biases.end(), c.id, by_token);
            if (it != biases.end() && it->token == c.id) c.logit = no_nan(c.logit + it->bias);
        }
    }
    cur.sorted = false;
}
