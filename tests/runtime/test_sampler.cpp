// Sampling: each link against hand-computed candidate sets, chain order, the portable dist
// draws (fixed expected values computed by an independent reference implementation), reset,
// misuse of the C API, and sampling from a real context.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/sampler.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/tiny-model.h"

namespace {

// A candidate array over a logits vector, in id order.
struct cand_list {
    std::vector<ember_candidate> buf;
    ember_candidates             cur;

    explicit cand_list(const std::vector<float> & logits) {
        for (size_t i = 0; i < logits.size(); i++) buf.push_back(ember_candidate{static_cast<int32_t>(i), logits[i], 0.0f});
        cur.data    = buf.data();
        cur.size    = buf.size();
        cur.n_vocab = static_cast<int32_t>(buf.size());
    }
    // The ids left, in candidate order: "1 3 2".
    std::string ids() const {
        std::ostringstream os;
        for (size_t i = 0; i < cur.size; i++) os << (i ? " " : "") << cur.data[i].id;
        return os.str();
    }
    const ember_candidate * find(int32_t id) const {
        for (size_t i = 0; i < cur.size; i++) {
            if (cur.data[i].id == id) return &cur.data[i];
        }
        return nullptr;
    }
    float logit(int32_t id) const {
        const ember_candidate * c = find(id);
        REQUIRE_MESSAGE(c, "token ", id, " is not among the candidates");
        return c->logit;
    }
};

// Logits whose softmax is exactly the given probabilities.
std::vector<float> logits_of(const std::vector<double> & probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

std::vector<double> softmax(const std::vector<float> & logits) {
    double m = -INFINITY, sum = 0;
    for (float l : logits) m = std::max(m, static_cast<double>(l));
    std::vector<double> p;
    for (float l : logits) p.push_back(std::exp(l - m));
    for (double v : p) sum += v;
    for (double & v : p) v /= sum;
    return p;
}

struct sampler_free {
    void operator()(ember_sampler * s) const { ember_sampler_free(s); }
};
using sampler_ptr = std::unique_ptr<ember_sampler, sampler_free>;

// Link constructors through the C API; each REQUIREs success. (The status is taken before s is
// read: argument evaluation order is unspecified.)
ember_sampler * check_made(ember_status st, ember_sampler * s) {
    REQUIRE_MESSAGE(st == EMBER_OK, ember_last_error());
    REQUIRE(s != nullptr);
    return s;
}
ember_sampler * greedy() {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_greedy(&s);
    return check_made(st, s);
}
ember_sampler * dist(uint32_t seed) {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_dist(seed, &s);
    return check_made(st, s);
}
ember_sampler * temp(float t) {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_temp(t, &s);
    return check_made(st, s);
}
ember_sampler * top_k(int32_t k) {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_top_k(k, &s);
    return check_made(st, s);
}
ember_sampler * penalties(int32_t last_n, float repeat, float freq, float presence) {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_penalties(last_n, repeat, freq, presence, &s);
    return check_made(st, s);
}
ember_sampler * logit_bias(int32_t n_vocab, const std::vector<ember_logit_bias> & b) {
    ember_sampler * s = nullptr;
    const ember_status st = ember_sampler_create_logit_bias(n_vocab, b.data(), b.size(), &s);
    return check_made(st, s);
}

sampler_ptr chain(std::initializer_list<ember_sampler *> links) {
    ember_sampler * c = nullptr;
    REQUIRE(ember_sampler_chain_create(&c) == EMBER_OK);
    sampler_ptr owned(c);
    for (ember_sampler * s : links) REQUIRE_MESSAGE(ember_sampler_chain_add(c, s) == EMBER_OK, ember_last_error());
    return owned;
}

int32_t sample(ember_sampler * s, const std::vector<float> & logits) {
    return ember_sampler_sample_logits(s, logits.data(), static_cast<int32_t>(logits.size()));
}

std::string last_error() { return ember_last_error(); }

}  // namespace

TEST_SUITE("sampling") {

//
// Links on hand-computed candidate sets
//
TEST_CASE("[sampler] greedy takes the argmax, the lowest id on ties") {
    const std::vector<float> l = {1, 3, 3, 2, -INFINITY};
    SUBCASE("alone (the row is scanned directly)") {
        sampler_ptr g(greedy());
        CHECK(sample(g.get(), l) == 1);
    }
    SUBCASE("after a link that reorders the candidates") {
        sampler_ptr c = chain({logit_bias(5, {{3, 1.0f}}), greedy()});  // 3 -> 3.0: a three-way tie
        CHECK(sample(c.get(), l) == 1);
    }
    SUBCASE("the link itself, on candidates out of id order") {
        cand_list c({1, 3, 3, 2});
        std::swap(c.buf[1], c.buf[2]);  // ids 0 2 1 3
        ember_sampler_greedy g;
        g.apply(c.cur);
        REQUIRE(c.cur.selected >= 0);
        CHECK(c.cur.data[c.cur.selected].id == 1);
    }
    SUBCASE("negative and -inf logits") {
        sampler_ptr g(greedy());
        CHECK(sample(g.get(), {-INFINITY, -7, -3, -INFINITY}) == 2);
    }
    SUBCASE("long rows: the maximum in any lane or in the tail, ties at the lowest id") {
        sampler_ptr g(greedy());
        for (int32_t n : {8, 9, 64, 1003}) {
            for (int32_t at : {0, 5, 7, 8, n / 2, n - 2, n - 1}) {
                if (at >= n) continue;
                CAPTURE(n);
                CAPTURE(at);
                std::vector<float> row(static_cast<size_t>(n));
                for (int32_t i = 0; i < n; i++) row[i] = -1.0f - static_cast<float>((i * 37) % 101);
                row[at] = 2.0f;
                CHECK(sample(g.get(), row) == at);
                if (at + 9 < n) {
                    row[at + 9] = 2.0f;  // a tie in another lane: still the lowest id
                    CHECK(sample(g.get(), row) == at);
                }
            }
        }
    }
}

TEST_CASE("[sampler] top-k keeps the k highest, lower ids at a tie on the boundary") {
    cand_list c({0, 5, 3, 5, 1, 3});
    SUBCASE("k = 2") {
        ember_sampler_top_k(2).apply(c.cur);
        CHECK(c.ids() == "1 3");
        CHECK(c.cur.sorted);
    }
    SUBCASE("k = 3 cuts between the tied 2 and 5") {
        ember_sampler_top_k(3).apply(c.cur);
        CHECK(c.ids() == "1 3 2");
    }
    SUBCASE("k larger than the candidates keeps all, sorted") {
        ember_sampler_top_k(100).apply(c.cur);
        CHECK(c.ids() == "1 3 2 5 4 0");
    }
    SUBCASE("k <= 0 is a no-op") {
        ember_sampler_top_k(0).apply(c.cur);
        CHECK(c.ids() == "0 1 2 3 4 5");
        ember_sampler_top_k(-3).apply(c.cur);
        CHECK(c.ids() == "0 1 2 3 4 5");
        CHECK_FALSE(c.cur.sorted);
    }
}

TEST_CASE("[sampler] top-p keeps the smallest prefix reaching p, at least min_keep") {
    // probabilities 0.1 0.4 0.2 0.3: in order ids 1 (0.4), 3 (0.7), 2 (0.9), 0 (1.0)
    const std::vector<float> l = logits_of({0.1, 0.4, 0.2, 0.3});
    struct row {
        float       p;
        size_t      min_keep;
        const char * ids;
    };
    const row rows[] = {
        {0.5f, 0, "1 3"}, {0.75f, 1, "1 3 2"}, {0.35f, 1, "1"}, {0.0f, 0, "1"},
        {0.35f, 3, "1 3 2"}, {0.95f, 0, "1 3 2 0"}, {0.35f, 10, "1 3 2 0"},
    };
    for (const row & r : rows) {
        CAPTURE(r.p);
        CAPTURE(r.min_keep);
        cand_list c(l);
        ember_sampler_top_p(r.p, r.min_keep).apply(c.cur);
        CHECK(c.ids() == r.ids);
        CHECK(c.cur.sorted);
        // p was filled with the softmax of all four.
        CHECK(c.find(1)->p == doctest::Approx(0.4).epsilon(1e-6));
    }
    SUBCASE("p = 1 is a no-op") {
        cand_list c(l);
        ember_sampler_top_p(1.0f, 0).apply(c.cur);
        CHECK(c.ids() == "0 1 2 3");
    }
    SUBCASE("a large flat row: the cut lands past the first sorted chunk, ties by lower id") {
        std::vector<float> flat(1000, 0.25f);
        cand_list          c(flat);
        ember_sampler_top_p(0.5f, 0).apply(c.cur);
        REQUIRE(c.cur.size == 500);
        for (size_t i = 0; i < c.cur.size; i++) CHECK(c.cur.data[i].id == static_cast<int32_t>(i));
    }
}

TEST_CASE("[sampler] top-p and typical on large rows match a full sort") {
    // Rows past the sizes where the links sort in chunks, with ties and banned tokens.
    for (uint64_t seed : {1u, 2u, 3u}) {
        std::mt19937_64                 rng(seed);
        std::normal_distribution<float> nd(0.0f, seed == 3 ? 0.3f : 3.0f);
        std::vector<float>              l(20000);
        for (float & v : l) v = seed == 2 ? std::round(nd(rng) * 4.0f) / 4.0f : nd(rng);  // seed 2: many ties
        for (size_t i = 0; i < l.size(); i += 97) l[i] = -INFINITY;
        for (float p : {0.1f, 0.5f, 0.9f, 0.99f}) {
            for (size_t min_keep : {size_t(0), size_t(3000)}) {
                CAPTURE(seed);
                CAPTURE(p);
                CAPTURE(min_keep);
                // the reference: the same probabilities, fully sorted, walked
                cand_list ref(l);
                REQUIRE(ember_candidates_softmax(ref.cur));
                std::vector<ember_candidate> all(ref.buf);
                std::sort(all.begin(), all.end(), ember_candidate_before);
                size_t n_top = all.size();
                double cum   = 0;
                for (size_t i = 0; i < all.size(); i++) {
                    cum += all[i].p;
                    if (cum >= p && i + 1 >= min_keep) {
                        n_top = i + 1;
                        break;
                    }
                }
                cand_list c(l);
                ember_sampler_top_p(p, min_keep).apply(c.cur);
                REQUIRE(c.cur.size == n_top);
                bool same = true;
                for (size_t i = 0; i < n_top; i++) same = same && c.cur.data[i].id == all[i].id;
                CHECK(same);

                double entropy = 0;
                for (const ember_candidate & x : ref.buf) entropy -= x.p > 0 ? x.p * std::log(double(x.p)) : 0.0;
                std::vector<std::pair<double, int32_t>> order;
                for (const ember_candidate & x : ref.buf) {
                    order.push_back({x.p > 0 ? std::fabs(-std::log(double(x.p)) - entropy) : INFINITY, x.id});
                }
                std::sort(order.begin(), order.end());
                size_t n_typ = order.size();
                cum          = 0;
                for (size_t i = 0; i < order.size(); i++) {
                    cum += ref.buf[order[i].second].p;
                    if (cum > p && i + 1 >= min_keep) {
                        n_typ = i + 1;
                        break;
                    }
                }
                cand_list t(l);
                ember_sampler_typical(p, min_keep).apply(t.cur);
                REQUIRE(t.cur.size == n_typ);
                same = true;
                for (size_t i = 0; i < n_typ; i++) same = same && t.cur.data[i].id == order[i].second;
                CHECK(same);
            }
        }
    }
}

TEST_CASE("[sampler] min-p keeps tokens with p >= p_min * p_max, relative to the largest") {
    // probabilities 0.5 0.2 0.05 0.25
    const std::vector<float> l = logits_of({0.5, 0.2, 0.05, 0.25});
    SUBCASE("0.3: threshold 0.15 drops only id 2, order kept") {
        cand_list c(l);
        ember_sampler_min_p(0.3f, 0).apply(c.cur);
        CHECK(c.ids() == "0 1 3");
    }
    SUBCASE("0.6: threshold 0.3 keeps the max alone") {
        cand_list c(l);
        ember_sampler_min_p(0.6f, 1).apply(c.cur);
        CHECK(c.ids() == "0");
    }
    SUBCASE("min_keep tops it up with the next highest") {
        cand_list c(l);
        ember_sampler_min_p(0.6f, 2).apply(c.cur);
        CHECK(c.ids() == "0 3");
    }
    SUBCASE("p = 1 keeps the maxima; p = 0 is a no-op") {
        cand_list c({2, 5, 5, 1});
        ember_sampler_min_p(0.0f, 0).apply(c.cur);
        CHECK(c.ids() == "0 1 2 3");
        ember_sampler_min_p(1.0f, 0).apply(c.cur);
        CHECK(c.ids() == "1 2");
    }
}

TEST_CASE("[sampler] typical keeps the tokens closest to the entropy") {
    // p = 1/2 1/4 1/8 1/8: H = 1.75 ln 2; |-ln p - H| = (0.75, 0.25, 1.25, 1.25) ln 2, so the
    // order is 1, 0, 2, 3 (2 before 3: tie, lower id) with running sums 0.25, 0.75, 0.875, 1.
    const std::vector<float> l = logits_of({0.5, 0.25, 0.125, 0.125});
    struct row {
        float        p;
        size_t       min_keep;
        const char * ids;
    };
    const row rows[] = {
        {0.5f, 0, "1 0"}, {0.2f, 1, "1"}, {0.8f, 0, "1 0 2"}, {0.2f, 3, "1 0 2"}, {0.9f, 0, "1 0 2 3"}, {0.0f, 0, "1"},
    };
    for (const row & r : rows) {
        CAPTURE(r.p);
        CAPTURE(r.min_keep);
        cand_list c(l);
        ember_sampler_typical(r.p, r.min_keep).apply(c.cur);
        CHECK(c.ids() == r.ids);
    }
    SUBCASE("p = 1 is a no-op") {
        cand_list c(l);
        ember_sampler_typical(1.0f, 0).apply(c.cur);
        CHECK(c.ids() == "0 1 2 3");
    }
    SUBCASE("banned tokens (p = 0) come last and do not break the entropy") {
        cand_list c({static_cast<float>(std::log(0.5)), -INFINITY, static_cast<float>(std::log(0.5))});
        ember_sampler_typical(0.99f, 0).apply(c.cur);
        CHECK(c.ids() == "0 2");
    }
}

TEST_CASE("[sampler] temp divides the logits; temp <= 0 keeps only the max") {
    SUBCASE("scaling") {
        cand_list c({1, 2, -4});
        ember_sampler_temp(2.0f).apply(c.cur);
        CHECK(c.logit(0) == 0.5f);
        CHECK(c.logit(1) == 1.0f);
        CHECK(c.logit(2) == -2.0f);
        ember_sampler_temp(1.0f).apply(c.cur);
        CHECK(c.logit(2) == -2.0f);
    }
    SUBCASE("temp 0 and negative temps: one candidate, lowest id among the maxima") {
        for (float t : {0.0f, -1.0f}) {
            CAPTURE(t);
            cand_list c({3, 1, 3, 2});
            ember_sampler_temp(t).apply(c.cur);
            CHECK(c.ids() == "0");
        }
    }
    SUBCASE("temp 0 before dist makes dist deterministic") {
        sampler_ptr c = chain({temp(0.0f), dist(5)});
        for (int i = 0; i < 50; i++) CHECK(sample(c.get(), {0.1f, 0.3f, 0.2f, 0.29f}) == 1);
    }
    SUBCASE("a temp so small that logits overflow: the +inf tokens share the mass (as llama.cpp)") {
        sampler_ptr c = chain({temp(1e-38f), dist(5)});
        int         hist[3] = {0, 0, 0};
        for (int i = 0; i < 1000; i++) hist[sample(c.get(), {10.0f, 30.0f, -20.0f})]++;
        CHECK(hist[2] == 0);
        CHECK(hist[0] > 400);
        CHECK(hist[1] > 400);
        sampler_ptr g = chain({temp(1e-38f), greedy()});
        CHECK(sample(g.get(), {10.0f, 30.0f, -20.0f}) == 0);  // a tie at +inf: lowest id
    }
}

TEST_CASE("[sampler] penalties over a window of accepted tokens") {
    // repeat 2, freq 0.5, presence 1, window 3
    ember_sampler_penalties pen(3, 2.0f, 0.5f, 1.0f);
    const std::vector<float> l = {1, 4, -2, 3};
    pen.accept(1);
    pen.accept(1);
    pen.accept(2);
    CHECK(pen.count(1) == 2);
    {
        cand_list c(l);
        pen.apply(c.cur);
        CHECK(c.logit(0) == 1.0f);                         // never seen
        CHECK(c.logit(1) == 4.0f / 2 - (2 * 0.5f + 1));    // positive: divided; count 2
        CHECK(c.logit(2) == -2.0f * 2 - (1 * 0.5f + 1));   // negative: multiplied
        CHECK(c.logit(3) == 3.0f);
        CHECK_FALSE(c.cur.sorted);
    }
    pen.accept(3);  // the first 1 leaves the window: [1, 2, 3]
    CHECK(pen.count(1) == 1);
    {
        cand_list c(l);
        pen.apply(c.cur);
        CHECK(c.logit(1) == 4.0f / 2 - 1.5f);
        CHECK(c.logit(3) == 3.0f / 2 - 1.5f);
    }
    for (int i = 0; i < 3; i++) pen.accept(0);  // window [0, 0, 0]
    {
        cand_list c(l);
        pen.apply(c.cur);
        CHECK(c.logit(0) == 1.0f / 2 - (3 * 0.5f + 1));
        CHECK(c.logit(1) == 4.0f);
        CHECK(c.logit(2) == -2.0f);
        CHECK(c.logit(3) == 3.0f);
    }
    SUBCASE("reset forgets the window") {
        pen.reset();
        cand_list c(l);
        pen.apply(c.cur);
        CHECK(c.ids() == "0 1 2 3");
        CHECK(c.logit(0) == 1.0f);
    }
    SUBCASE("last_n = -1 counts every accepted token, also those accepted before any row") {
        ember_sampler_penalties all(-1, 1.0f, 1.0f, 0.0f);
        for (int i = 0; i < 100; i++) all.accept(2);
        all.accept(7);  // beyond this row's vocabulary: kept aside, never penalised here
        cand_list c(l);
        all.apply(c.cur);
        CHECK(c.logit(2) == -2.0f - 100);
        all.accept(2);
        cand_list d(l);
        all.apply(d.cur);
        CHECK(d.logit(2) == -2.0f - 101);
        CHECK(all.count(7) == 1);
        cand_list e(std::vector<float>(8, 0.0f));  // a wider row counts the 7
        all.apply(e.cur);
        CHECK(e.logit(7) == -1.0f);
    }
    SUBCASE("last_n = 0 and neutral values are off") {
        for (ember_sampler_penalties off : {ember_sampler_penalties(0, 2.0f, 1.0f, 1.0f), ember_sampler_penalties(-1, 1.0f, 0.0f, 0.0f)}) {
            off.accept(1);
            cand_list c(l);
            off.apply(c.cur);
            CHECK(c.logit(1) == 4.0f);
            CHECK(off.count(1) == 0);
        }
    }
}

TEST_CASE("[sampler] penalties through sampling: sampled tokens and accepted prompt tokens count") {
    const std::vector<float> l = {0, 3, 2, 1};
    SUBCASE("each sampled token is pushed down in turn") {
        sampler_ptr c = chain({penalties(-1, 1.0f, 100.0f, 0.0f), greedy()});
        std::string got;
        for (int i = 0; i < 6; i++) got += std::to_string(sample(c.get(), l));
        CHECK(got == "123012");
    }
    SUBCASE("ember_sampler_accept records a prompt token") {
        sampler_ptr c = chain({penalties(64, 1.0f, 0.0f, 10.0f), greedy()});
        REQUIRE(ember_sampler_accept(c.get(), 1) == EMBER_OK);
        CHECK(sample(c.get(), l) == 2);
        CHECK(sample(c.get(), l) == 3);
        REQUIRE(ember_sampler_reset(c.get()) == EMBER_OK);
        CHECK(sample(c.get(), l) == 1);
    }
    SUBCASE("repeat penalty of a window of one") {
        sampler_ptr c = chain({penalties(1, 4.0f, 0.0f, 0.0f), greedy()});
        // 3 -> 0.75 after it is sampled, so 2 wins; then 2 -> 0.5 and 3 is back
        std::string got;
        for (int i = 0; i < 4; i++) got += std::to_string(sample(c.get(), l));
        CHECK(got == "1212");
    }
}

TEST_CASE("[sampler] logit bias adds per token and -inf bans") {
    const std::vector<float> l = {1, 2, 3, 4};
    SUBCASE("on the row as laid out") {
        ember_sampler_logit_bias b(4, std::vector<ember_logit_bias>{{2, 5.0f}, {0, -INFINITY}, {2, 1.0f}}.data(), 3);
        cand_list                c(l);
        b.apply(c.cur);
        CHECK(c.logit(0) == -INFINITY);
        CHECK(c.logit(1) == 2.0f);
        CHECK(c.logit(2) == 9.0f);  // both biases of token 2 add up
        CHECK(c.logit(3) == 4.0f);
    }
    SUBCASE("on candidates another link reordered and cut") {
        ember_sampler_logit_bias b(4, std::vector<ember_logit_bias>{{1, 10.0f}, {3, -1.0f}, {0, 1.0f}}.data(), 3);
        cand_list                c(l);
        ember_sampler_top_k(3).apply(c.cur);  // 3 2 1
        b.apply(c.cur);
        CHECK(c.ids() == "3 2 1");
        CHECK(c.logit(1) == 12.0f);
        CHECK(c.logit(3) == 3.0f);
    }
    SUBCASE("a banned max is never sampled") {
        sampler_ptr g = chain({logit_bias(4, {{3, -INFINITY}}), greedy()});
        CHECK(sample(g.get(), l) == 2);
        sampler_ptr d = chain({logit_bias(4, {{3, -INFINITY}, {2, -INFINITY}}), dist(9)});
        for (int i = 0; i < 200; i++) CHECK(sample(d.get(), l) < 2);
    }
    SUBCASE("banning everything is an error, not a token") {
        const std::vector<ember_logit_bias> all = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
        for (ember_sampler * sel : {greedy(), dist(1)}) {
            sampler_ptr c = chain({logit_bias(4, all), sel});
            CHECK(sample(c.get(), l) == -1);
            CHECK(last_error().find("-inf") != std::string::npos);
        }
        sampler_ptr none = chain({logit_bias(4, all)});
        CHECK(sample(none.get(), l) == -1);
    }
}

//
// Chains
//
TEST_CASE("[sampler] chain order matters") {
    const std::vector<float> l = {5, 1, 0, 4};
    SUBCASE("bias before top-k promotes token 3; after it, 3 is already gone") {
        sampler_ptr a = chain({logit_bias(4, {{3, 2.0f}}), top_k(1), greedy()});
        sampler_ptr b = chain({top_k(1), logit_bias(4, {{3, 2.0f}}), greedy()});
        CHECK(sample(a.get(), l) == 3);
        CHECK(sample(b.get(), l) == 0);
    }
    SUBCASE("temp before min-p changes the ratio min-p sees") {
        // min-p 0.5 keeps logit >= max - ln 2 = 4.31: 4.5 stays; after temp 0.25 (20 vs 18) it goes
        const std::vector<float> m = {5, 1, 0, 4.5f};
        cand_list                a(m), b(m);
        ember_sampler_min_p(0.5f, 0).apply(a.cur);
        ember_sampler_temp(0.25f).apply(a.cur);
        ember_sampler_temp(0.25f).apply(b.cur);
        ember_sampler_min_p(0.5f, 0).apply(b.cur);
        CHECK(a.ids() == "0 3");
        CHECK(b.ids() == "0");
    }
    SUBCASE("the first selecting link decides; links after it do not run") {
        sampler_ptr a = chain({greedy(), logit_bias(4, {{1, 100.0f}})});
        CHECK(sample(a.get(), l) == 0);
        sampler_ptr d1 = chain({dist(77), greedy()});
        sampler_ptr d2(dist(77));
        for (int i = 0; i < 100; i++) CHECK(sample(d1.get(), l) == sample(d2.get(), l));
    }
    SUBCASE("without a selecting link the argmax of what remains is taken") {
        sampler_ptr empty = chain({});
        CHECK(sample(empty.get(), l) == 0);
        sampler_ptr biased = chain({logit_bias(4, {{2, 6.0f}}), top_k(2)});
        CHECK(sample(biased.get(), l) == 2);
        sampler_ptr lone(top_k(2));  // a bare link samples like a chain of one
        CHECK(sample(lone.get(), l) == 0);
    }
    SUBCASE("nested chains apply in order and accept into every link") {
        ember_sampler * inner = chain({penalties(-1, 1.0f, 10.0f, 0.0f)}).release();
        sampler_ptr     outer = chain({inner, greedy()});
        CHECK(sample(outer.get(), l) == 0);
        CHECK(sample(outer.get(), l) == 3);
        CHECK(sample(outer.get(), l) == 1);
    }
}

//
// dist: portable, seeded draws
//
TEST_CASE("[sampler] the PRNG is xoshiro256** seeded by splitmix64") {
    // Values from an independent implementation of the published algorithms.
    ember_rng r(42);
    CHECK(r.next() == 0x15780b2e0c2ec716ULL);
    CHECK(r.next() == 0x6104d9866d113a7eULL);
    CHECK(r.next() == 0xae17533239e499a1ULL);
    CHECK(r.next() == 0xecb8ad4703b360a1ULL);
    ember_rng z(0);
    CHECK(z.next() == 0x99ec5f36cb75f2b4ULL);
    CHECK(z.next() == 0xbf6e1f784956452aULL);
    for (int i = 0; i < 1000; i++) {
        const double u = r.uniform();
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
    }
}

TEST_CASE("[sampler] dist: fixed first draws for a fixed seed") {
    // Computed by an independent implementation of the documented procedure (softmax weights
    // exp(l - max) rounded to float, summed in double, first running sum above u * sum); a
    // platform whose draws differ fails here.
    const std::vector<float>   l        = {0.5f, -1.25f, 2.0f, 1.0f, 0.0f, -0.5f, 1.5f, 0.25f};
    const std::vector<int32_t> expected = {0, 6, 5, 6, 2, 6, 2, 2, 3, 4, 3, 2, 2, 4, 2, 6,
                                           4, 7, 7, 6, 6, 2, 2, 0, 3, 0, 2, 6, 0, 0, 2, 2};
    sampler_ptr d(dist(1234));
    for (size_t i = 0; i < expected.size(); i++) {
        CAPTURE(i);
        CHECK(sample(d.get(), l) == expected[i]);
    }
    SUBCASE("reset restarts the draws from the seed") {
        REQUIRE(ember_sampler_reset(d.get()) == EMBER_OK);
        for (size_t i = 0; i < expected.size(); i++) {
            CAPTURE(i);
            CHECK(sample(d.get(), l) == expected[i]);
        }
    }
    SUBCASE("resetting a chain resets its dist") {
        sampler_ptr c = chain({top_k(0), dist(1234)});
        for (int i = 0; i < 5; i++) sample(c.get(), l);
        REQUIRE(ember_sampler_reset(c.get()) == EMBER_OK);
        for (size_t i = 0; i < expected.size(); i++) CHECK(sample(c.get(), l) == expected[i]);
    }
}

TEST_CASE("[sampler] dist: the same seed gives the same 1000 draws") {
    std::vector<float> l(50);
    for (size_t i = 0; i < l.size(); i++) l[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 2.0);
    sampler_ptr a(dist(2024)), b(dist(2024)), other(dist(2025));
    int         n_diff = 0;
    for (int i = 0; i < 1000; i++) {
        const int32_t ta = sample(a.get(), l);
        CHECK(ta == sample(b.get(), l));
        n_diff += ta != sample(other.get(), l);
    }
    CHECK(n_diff > 500);  // another seed, another sequence
}

TEST_CASE("[sampler] dist: 100k draws follow the softmax") {
    const std::vector<float>  l = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f};
    const int                 n = 100000;
    SUBCASE("over the whole row") {
        const std::vector<double> p = softmax(l);
        sampler_ptr               d(dist(7));
        std::vector<int>          hist(l.size(), 0);
        for (int i = 0; i < n; i++) {
            const int32_t t = sample(d.get(), l);
            REQUIRE(t >= 0);
            REQUIRE(t < 5);
            hist[t]++;
        }
        double chi2 = 0;
        for (size_t t = 0; t < l.size(); t++) {
            CAPTURE(t);
            const double sigma = std::sqrt(p[t] * (1 - p[t]) / n);
            CHECK(std::fabs(hist[t] / double(n) - p[t]) < 5 * sigma);
            chi2 += (hist[t] - n * p[t]) * (hist[t] - n * p[t]) / (n * p[t]);
        }
        CHECK(chi2 < 23.5);  // 4 degrees of freedom: P(chi2 > 23.5) < 1e-4
    }
    SUBCASE("after top-k and temp: the softmax of what remains") {
        const std::vector<double> p = softmax({2.0f / 0.5f, 1.0f / 0.5f, 0.5f / 0.5f});  // ids 2, 1, 3
        sampler_ptr               c = chain({top_k(3), temp(0.5f), dist(11)});
        std::vector<int>          hist(l.size(), 0);
        for (int i = 0; i < n; i++) hist[sample(c.get(), l)]++;
        CHECK(hist[0] == 0);
        CHECK(hist[4] == 0);
        const int ids[3] = {2, 1, 3};
        for (int j = 0; j < 3; j++) {
            CAPTURE(ids[j]);
            const double sigma = std::sqrt(p[j] * (1 - p[j]) / n);
            CHECK(std::fabs(hist[ids[j]] / double(n) - p[j]) < 5 * sigma);
        }
    }
}

//
// Steady state and misuse
//
TEST_CASE("[sampler] the candidate buffer is reused") {
    std::vector<float> l(4096);
    for (size_t i = 0; i < l.size(); i++) l[i] = static_cast<float>(std::cos(0.37 * static_cast<double>(i)) * 3.0);
    ember_sampler_chain c;
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_penalties(16, 1.2f, 0.1f, 0.1f)));
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_top_k(40)));
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_top_p(0.9f, 1)));
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_typical(0.95f, 1)));
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_temp(0.8f)));
    c.add(std::unique_ptr<ember_sampler>(new ember_sampler_dist(3)));
    for (int i = 0; i < 20; i++) c.sample(l.data(), static_cast<int32_t>(l.size()));  // window full, buffers grown
    const ember_candidate * buf = c.candidate_buffer();
    for (int i = 0; i < 200; i++) {
        const int32_t t = c.sample(l.data(), static_cast<int32_t>(l.size()));
        REQUIRE(t >= 0);
        REQUIRE(t < 4096);
    }
    CHECK(c.candidate_buffer() == buf);
}

TEST_CASE("[sampler] misuse returns EMBER_ERR_INVALID_ARG with a message") {
    ember_sampler * s = nullptr;
    SUBCASE("parameters out of range") {
        CHECK(ember_sampler_create_top_p(1.5f, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(s == nullptr);
        CHECK(last_error().find("top-p") != std::string::npos);
        CHECK(ember_sampler_create_top_p(-0.1f, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_top_p(NAN, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_min_p(1.01f, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_min_p(NAN, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_typical(2.0f, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_temp(INFINITY, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_temp(NAN, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(-2, 1.1f, 0, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(64, 0.0f, 0, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(64, -1.0f, 0, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(64, NAN, 0, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(64, 1.1f, INFINITY, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_penalties(64, 1.1f, 0, NAN, &s) == EMBER_ERR_INVALID_ARG);
        const ember_logit_bias bad_tok[] = {{4, 1.0f}}, neg_tok[] = {{-1, 1.0f}}, nan_b[] = {{1, NAN}}, inf_b[] = {{1, INFINITY}};
        CHECK(ember_sampler_create_logit_bias(4, bad_tok, 1, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(last_error().find("n_vocab") != std::string::npos);
        CHECK(ember_sampler_create_logit_bias(4, neg_tok, 1, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_logit_bias(4, nan_b, 1, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_logit_bias(4, inf_b, 1, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_logit_bias(4, nullptr, 2, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_logit_bias(0, nullptr, 0, &s) == EMBER_ERR_INVALID_ARG);
        CHECK(s == nullptr);
        // the edges are valid
        const auto valid = [&](ember_status st) {
            CHECK_MESSAGE(st == EMBER_OK, ember_last_error());
            ember_sampler_free(s);
            s = nullptr;
        };
        valid(ember_sampler_create_top_p(0.0f, 0, &s));
        valid(ember_sampler_create_top_p(1.0f, 5, &s));
        valid(ember_sampler_create_min_p(1.0f, 0, &s));
        valid(ember_sampler_create_typical(0.0f, 0, &s));
        valid(ember_sampler_create_temp(-1.0f, &s));
        valid(ember_sampler_create_top_k(-1, &s));
        valid(ember_sampler_create_penalties(-1, 1.0f, -0.5f, -0.5f, &s));
        valid(ember_sampler_create_logit_bias(4, nullptr, 0, &s));
    }
    SUBCASE("NULL handles and outputs") {
        CHECK(ember_sampler_chain_create(nullptr) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_greedy(nullptr) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_create_dist(1, nullptr) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_chain_add(nullptr, nullptr) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_chain_add(nullptr, greedy()) == EMBER_ERR_INVALID_ARG);  // freed
        CHECK(ember_sampler_accept(nullptr, 1) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_reset(nullptr) == EMBER_ERR_INVALID_ARG);
        const float l[2] = {0, 1};
        CHECK(ember_sampler_sample_logits(nullptr, l, 2) == -1);
        CHECK(ember_sampler_sample(nullptr, nullptr, 0) == -1);
        CHECK(last_error().find("NULL") != std::string::npos);
        sampler_ptr g(greedy());
        CHECK(ember_sampler_sample(g.get(), nullptr, 0) == -1);
        CHECK(ember_sampler_sample_logits(g.get(), nullptr, 2) == -1);
        CHECK(ember_sampler_sample_logits(g.get(), l, 0) == -1);
        CHECK(ember_sampler_sample_logits(g.get(), l, -5) == -1);
        ember_sampler_free(nullptr);
    }
    SUBCASE("chain membership") {
        sampler_ptr c  = chain({});
        sampler_ptr c2 = chain({});
        CHECK(ember_sampler_chain_add(c.get(), c.get()) == EMBER_ERR_INVALID_ARG);  // not freed: still usable
        CHECK(last_error().find("itself") != std::string::npos);
        ember_sampler * k = top_k(2);
        REQUIRE(ember_sampler_chain_add(c.get(), k) == EMBER_OK);
        CHECK(ember_sampler_chain_add(c.get(), k) == EMBER_ERR_INVALID_ARG);   // already in a chain
        CHECK(ember_sampler_chain_add(c2.get(), k) == EMBER_ERR_INVALID_ARG);  // ... even another one
        CHECK(last_error().find("already") != std::string::npos);
        ember_sampler_free(k);  // owned by the chain: refused, nothing freed
        CHECK(last_error().find("belongs to a chain") != std::string::npos);
        CHECK(ember_sampler_sample_logits(k, std::vector<float>{0, 1, 2}.data(), 3) == 2);  // still alive
        // a chain inside another cannot take its ancestor
        ember_sampler * inner = chain({}).release();
        REQUIRE(ember_sampler_chain_add(c.get(), inner) == EMBER_OK);
        CHECK(ember_sampler_chain_add(inner, c.get()) == EMBER_ERR_INVALID_ARG);
        // adding to something that is not a chain frees the sampler given (ASan checks the leak)
        sampler_ptr g(greedy());
        CHECK(ember_sampler_chain_add(g.get(), top_k(1)) == EMBER_ERR_INVALID_ARG);
        CHECK(last_error().find("not a chain") != std::string::npos);
        CHECK(sample(c.get(), {3, 1, 2}) == 0);
    }
    SUBCASE("rows and tokens") {
        sampler_ptr c = chain({penalties(8, 1.5f, 0, 0), dist(1)});
        CHECK(ember_sampler_accept(c.get(), -1) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_sampler_accept(c.get(), 1000) == EMBER_OK);  // no row seen yet: any id is recorded
        CHECK(sample(c.get(), {0, NAN, 1}) == -1);
        CHECK(last_error().find("NaN") != std::string::npos);
        sampler_ptr g(greedy());
        CHECK(sample(g.get(), {0, NAN, 1}) == -1);
        std::vector<float> long_row(100, 0.5f);
        long_row[13] = NAN;  // in a vector lane, not the tail
        CHECK(sample(g.get(), long_row) == -1);
        CHECK(last_error().find("NaN") != std::string::npos);
        CHECK(sample(c.get(), {0, 1, 2}) >= 0);
        CHECK(ember_last_error()[0] == '\0');
        CHECK(ember_sampler_accept(c.get(), 3) == EMBER_ERR_INVALID_ARG);  // the chain has seen n_vocab = 3
        CHECK(last_error().find("n_vocab = 3") != std::string::npos);
        CHECK(ember_sampler_accept(c.get(), 2) == EMBER_OK);
        CHECK(sample(g.get(), {-INFINITY, -INFINITY}) == -1);
    }
}

//
// A real context
//
TEST_CASE("[sampler] sampling a context row: greedy is the argmax of ember_get_logits_ith") {
    tiny_model_spec spec;
    spec.weight_type = EMBER_TYPE_F32;
    spec.n_vocab     = 96;
    spec.n_ctx_train = 64;
    spec.seed        = 77;
    spec.name        = "sampler-llama";
    const std::string    path = ember_test_make_tiny_model(spec, ember_test_tmp_dir());
    ember_test_model_ptr model;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(path, model, err) == EMBER_OK, err);
    ember_test_run_params rp;
    ember_test_context_ptr ctx;
    REQUIRE_MESSAGE(ember_test_make_context(model.get(), rp, 32, ctx, err) == EMBER_OK, err);
    const int32_t n_vocab = ember_model_n_vocab(model.get());
    REQUIRE(n_vocab == 96);

    sampler_ptr g(greedy());
    SUBCASE("every row of a batch") {
        const std::vector<int32_t> toks = {1, 17, 42, 5, 63};
        REQUIRE_MESSAGE(ember_test_decode(ctx.get(), toks, 0, 0, nullptr, err) == EMBER_OK, err);
        for (int32_t i = -1; i < static_cast<int32_t>(toks.size()); i++) {
            CAPTURE(i);
            const float * row = ember_get_logits_ith(ctx.get(), i);
            REQUIRE(row != nullptr);
            CHECK(ember_sampler_sample(g.get(), ctx.get(), i) == ember_test_argmax(row, n_vocab));
        }
        // a seeded chain gives the same token on the context row and on a copy of it
        const std::vector<float> copy(ember_get_logits_ith(ctx.get(), 2), ember_get_logits_ith(ctx.get(), 2) + n_vocab);
        sampler_ptr              a = chain({top_k(20), temp(1.5f), dist(99)});
        sampler_ptr              b = chain({top_k(20), temp(1.5f), dist(99)});
        for (int i = 0; i < 50; i++) CHECK(ember_sampler_sample(a.get(), ctx.get(), 2) == sample(b.get(), copy));
        CHECK(ember_sampler_sample(g.get(), ctx.get(), 5) == -1);  // out of range
        CHECK(last_error().find("out of range") != std::string::npos);
    }
    SUBCASE("a token that did not ask for logits") {
        const int32_t toks[3] = {3, 4, 5};
        ember_batch   b       = ember_batch_one(toks, 3);  // logits of the last token only
        REQUIRE(ember_decode(ctx.get(), &b) == EMBER_OK);
        CHECK(ember_sampler_sample(g.get(), ctx.get(), -1) == ember_test_argmax(ember_get_logits_ith(ctx.get(), -1), n_vocab));
        CHECK(ember_sampler_sample(g.get(), ctx.get(), 0) == -1);
        CHECK(last_error().find("did not ask for logits") != std::string::npos);
    }
}

}  // TEST_SUITE("sampling")
