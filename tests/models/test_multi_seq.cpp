// Sequences and KV cache operations through the C API, on a generated tiny model (no data
// directory needed). Every result is checked against Ember itself run another way ("same"
// means max |diff| < 1e-5 * scale: float rounding of a different batch shape) and against the
// float64 reference forward pass (max |diff| < 1e-4 * scale; F32 weights, F32 KV cache).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

constexpr double k_same = 1e-5;  // Ember vs Ember, relative to scale
constexpr double k_ref  = 1e-4;  // Ember vs float64, relative to scale

struct tiny_env {
    std::string          path;
    ember_ref_model      ref;
    ember_test_model_ptr model;
    int32_t              n_vocab = 0;
};

tiny_env & env() {
    static tiny_env e;
    if (e.path.empty()) {
        tiny_model_spec s;
        s.arch        = "llama";
        s.weight_type = EMBER_TYPE_F32;
        s.seed        = 4242;
        s.n_vocab     = 96;
        s.name        = "multi-seq-llama";
        e.path        = ember_test_make_tiny_model(s, ember_test_tmp_dir());
        e.ref         = ember_ref_load(e.path);
        e.n_vocab     = s.n_vocab;
        std::string err;
        REQUIRE_MESSAGE(ember_test_load_model(e.path, e.model, err) == EMBER_OK, err);
    }
    REQUIRE(e.model);
    return e;
}

std::vector<int32_t> toks(std::initializer_list<int32_t> l) { return std::vector<int32_t>(l); }

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t> & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Rows [r0, r0 + n) of a [rows x n_vocab] matrix.
template <typename T> std::vector<T> rows(const std::vector<T> & m, int32_t n_vocab, size_t r0, size_t n) {
    return std::vector<T>(m.begin() + static_cast<ptrdiff_t>(r0 * static_cast<size_t>(n_vocab)),
                          m.begin() + static_cast<ptrdiff_t>((r0 + n) * static_cast<size_t>(n_vocab)));
}

void check_close(const std::vector<double> & want, const std::vector<float> & got, int32_t n_vocab, double rel,
                 const char * what) {
    const ember_test_logit_diff d = ember_test_compare_logits(want, got, n_vocab, INFINITY);
    const std::string what_s = what;
    CAPTURE(what_s);
    CAPTURE(d.summary());
    CHECK(d.finite);
    CHECK(d.n_rows > 0);
    CHECK(d.rel_max() < rel);
    CHECK(d.argmax_differ_any.empty());
}

void check_close(const std::vector<float> & want, const std::vector<float> & got, int32_t n_vocab, double rel,
                 const char * what) {
    check_close(std::vector<double>(want.begin(), want.end()), got, n_vocab, rel, what);
}

// Reference logits of `t` (all rows).
std::vector<double> ref_logits(const std::vector<int32_t> & t) { return ember_ref_forward(env().ref, t); }

struct tok_at {
    int32_t tok, pos, seq;
};

// One ember_decode of an arbitrary mix of sequences, logits for every row.
ember_status decode_mixed(ember_context * ctx, const std::vector<tok_at> & in, std::vector<float> & logits) {
    std::vector<int32_t> t, p, s;
    for (const tok_at & x : in) {
        t.push_back(x.tok);
        p.push_back(x.pos);
        s.push_back(x.seq);
    }
    std::vector<int8_t> want(in.size(), 1);
    ember_batch         b;
    b.n_tokens            = static_cast<int32_t>(in.size());
    b.token               = t.data();
    b.pos                 = p.data();
    b.seq_id              = s.data();
    b.logits              = want.data();
    const ember_status st = ember_decode(ctx, &b);
    if (st != EMBER_OK) return st;
    const int32_t V = env().n_vocab;
    logits.assign(in.size() * static_cast<size_t>(V), 0.0f);
    for (size_t i = 0; i < in.size(); i++) {
        const float * row = ember_get_logits_ith(ctx, static_cast<int32_t>(i));
        if (!row) return EMBER_ERR_INTERNAL;
        std::memcpy(logits.data() + i * static_cast<size_t>(V), row, sizeof(float) * static_cast<size_t>(V));
    }
    return EMBER_OK;
}

ember_test_context_ptr make_ctx(uint32_t n_ctx, uint32_t n_batch, uint32_t n_ubatch, uint32_t n_seq_max) {
    ember_test_run_params p;
    p.n_ctx     = n_ctx;
    p.n_batch   = n_batch;
    p.n_ubatch  = n_ubatch;
    p.n_seq_max = n_seq_max;
    ember_test_context_ptr ctx;
    std::string            err;
    REQUIRE_MESSAGE(ember_test_make_context(env().model.get(), p, n_batch, ctx, err) == EMBER_OK, err);
    return ctx;
}

// Logits of `t` decoded alone in a fresh context.
std::vector<float> alone(const std::vector<int32_t> & t) {
    ember_test_context_ptr ctx = make_ctx(64, 64, 64, 1);
    std::vector<float>     out;
    std::string            err;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), t, 0, 0, &out, err) == EMBER_OK, err);
    return out;
}

const std::vector<int32_t> A = toks({1, 17, 42, 5, 88, 23, 61, 9, 30});
const std::vector<int32_t> B = toks({1, 70, 3, 3, 54, 12, 91, 40, 8, 66, 27, 19, 80});

}  // namespace

TEST_SUITE("models") {

TEST_CASE("[multi-seq] two prompts as sequences 0 and 1 in one batch equal each alone") {
    const int32_t            V = env().n_vocab;
    const std::vector<float> la = alone(A), lb = alone(B);
    check_close(ref_logits(A), la, V, k_ref, "A alone vs float64");
    check_close(ref_logits(B), lb, V, k_ref, "B alone vs float64");

    for (uint32_t n_ubatch : {64u, 4u}) {
        CAPTURE(n_ubatch);
        ember_test_context_ptr ctx = make_ctx(64, 64, n_ubatch, 2);
        // Interleave the two prompts: A0 B0 A1 B1 ... then the rest of B.
        std::vector<tok_at> batch;
        for (size_t i = 0; i < std::max(A.size(), B.size()); i++) {
            if (i < A.size()) batch.push_back({A[i], static_cast<int32_t>(i), 0});
            if (i < B.size()) batch.push_back({B[i], static_cast<int32_t>(i), 1});
        }
        std::vector<float> mixed;
        REQUIRE(decode_mixed(ctx.get(), batch, mixed) == EMBER_OK);
        std::vector<float> ga, gb;
        for (size_t i = 0; i < batch.size(); i++) {
            std::vector<float> & dst = batch[i].seq == 0 ? ga : gb;
            dst.insert(dst.end(), mixed.begin() + static_cast<ptrdiff_t>(i * V),
                       mixed.begin() + static_cast<ptrdiff_t>((i + 1) * V));
        }
        check_close(la, ga, V, k_same, "sequence 0 in the mixed batch vs alone");
        check_close(lb, gb, V, k_same, "sequence 1 in the mixed batch vs alone");
        CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == static_cast<int32_t>(A.size()) - 1);
        CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 1) == static_cast<int32_t>(B.size()) - 1);
        CHECK(ember_kv_cache_used(ctx.get()) == static_cast<int32_t>(A.size() + B.size()));
    }
}

TEST_CASE("[multi-seq] seq_cp shares a prefix, then both sequences continue independently") {
    const int32_t              V = env().n_vocab;
    const std::vector<int32_t> X = toks({44, 2, 71, 15, 33});
    const std::vector<int32_t> Y = toks({9, 9, 60, 81, 7, 26});
    ember_test_context_ptr     ctx = make_ctx(64, 64, 64, 2);
    std::string                err;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), A, 0, 0, nullptr, err) == EMBER_OK, err);
    const int32_t nA = static_cast<int32_t>(A.size());

    REQUIRE(ember_kv_cache_seq_cp(ctx.get(), 0, 1, 0, -1) == EMBER_OK);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 1) == nA - 1);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == nA - 1);
    CHECK(ember_kv_cache_used(ctx.get()) == nA);  // shared cells, no copy

    std::vector<tok_at> batch;
    for (size_t i = 0; i < std::max(X.size(), Y.size()); i++) {
        if (i < Y.size()) batch.push_back({Y[i], nA + static_cast<int32_t>(i), 1});
        if (i < X.size()) batch.push_back({X[i], nA + static_cast<int32_t>(i), 0});
    }
    std::vector<float> mixed;
    REQUIRE(decode_mixed(ctx.get(), batch, mixed) == EMBER_OK);
    std::vector<float> gx, gy;
    for (size_t i = 0; i < batch.size(); i++) {
        std::vector<float> & dst = batch[i].seq == 0 ? gx : gy;
        dst.insert(dst.end(), mixed.begin() + static_cast<ptrdiff_t>(i * V),
                   mixed.begin() + static_cast<ptrdiff_t>((i + 1) * V));
    }
    check_close(rows(ref_logits(concat(A, X)), V, A.size(), X.size()), gx, V, k_ref, "A+X vs float64");
    check_close(rows(ref_logits(concat(A, Y)), V, A.size(), Y.size()), gy, V, k_ref, "A+Y vs float64");
    check_close(rows(alone(concat(A, X)), V, A.size(), X.size()), gx, V, k_same, "A+X vs alone");
    check_close(rows(alone(concat(A, Y)), V, A.size(), Y.size()), gy, V, k_same, "A+Y vs alone");

    // Dropping sequence 1 leaves sequence 0 intact.
    REQUIRE(ember_kv_cache_seq_rm(ctx.get(), 1, 0, -1) == EMBER_OK);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 1) == -1);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == nA + static_cast<int32_t>(X.size()) - 1);
    CHECK(ember_kv_cache_used(ctx.get()) == nA + static_cast<int32_t>(X.size()));
    const std::vector<int32_t> Z = toks({50, 51});
    std::vector<float>         gz;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), Z, nA + static_cast<int32_t>(X.size()), 0, &gz, err) == EMBER_OK,
                    err);
    const std::vector<int32_t> AXZ = concat(concat(A, X), Z);
    check_close(rows(ref_logits(AXZ), V, A.size() + X.size(), Z.size()), gz, V, k_ref, "A+X+Z vs float64");
}

TEST_CASE("[kv-cache] seq_rm of a tail, then re-decoding it, gives the first logits again") {
    const int32_t              V = env().n_vocab;
    const std::vector<int32_t> P = concat(A, toks({12, 13, 77, 4, 90, 31, 2}));
    ember_test_context_ptr     ctx = make_ctx(64, 64, 64, 1);
    std::string                err;
    std::vector<float>         first;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), P, 0, 0, &first, err) == EMBER_OK, err);
    check_close(ref_logits(P), first, V, k_ref, "first decode vs float64");

    const int32_t cut = 10;
    REQUIRE(ember_kv_cache_seq_rm(ctx.get(), 0, cut, -1) == EMBER_OK);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == cut - 1);
    CHECK(ember_kv_cache_used(ctx.get()) == cut);
    const std::vector<int32_t> tail(P.begin() + cut, P.end());
    std::vector<float>         again;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), tail, cut, 0, &again, err) == EMBER_OK, err);
    const std::vector<float> want = rows(first, V, static_cast<size_t>(cut), tail.size());
    check_close(want, again, V, k_same, "re-decoded tail vs the first decode");
    if (want != again) MESSAGE("re-decoded tail is close to, but not bit-identical with, the first decode");

    // A different continuation after the cut must not see the removed tokens.
    REQUIRE(ember_kv_cache_seq_rm(ctx.get(), 0, cut, -1) == EMBER_OK);
    const std::vector<int32_t> other = toks({5, 6, 7});
    std::vector<float>         go;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), other, cut, 0, &go, err) == EMBER_OK, err);
    const std::vector<int32_t> PO = concat(std::vector<int32_t>(P.begin(), P.begin() + cut), other);
    check_close(rows(ref_logits(PO), V, static_cast<size_t>(cut), other.size()), go, V, k_ref,
                "other continuation vs float64");
}

TEST_CASE("[kv-cache] clear empties the cache and a new prompt starts from scratch") {
    const int32_t          V   = env().n_vocab;
    ember_test_context_ptr ctx = make_ctx(64, 64, 64, 1);
    std::string            err;
    std::vector<float>     lb;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), B, 0, 0, nullptr, err) == EMBER_OK, err);
    CHECK(ember_kv_cache_used(ctx.get()) == static_cast<int32_t>(B.size()));
    REQUIRE(ember_kv_cache_clear(ctx.get()) == EMBER_OK);
    CHECK(ember_kv_cache_used(ctx.get()) == 0);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == -1);
    std::vector<float> la;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), A, 0, 0, &la, err) == EMBER_OK, err);
    check_close(alone(A), la, V, k_same, "after clear vs a fresh context");
}

TEST_CASE("[decode] a prompt split across several ember_decode calls equals one call") {
    const int32_t              V = env().n_vocab;
    const std::vector<int32_t> P = concat(A, B);
    const std::vector<float>   one = alone(P);
    check_close(ref_logits(P), one, V, k_ref, "one call vs float64");

    SUBCASE("explicit positions, chunks of 5, 4, 13") {
        ember_test_context_ptr ctx = make_ctx(64, 64, 64, 1);
        std::string            err;
        std::vector<float>     all;
        size_t                 at = 0;
        for (size_t n : {5u, 4u, 13u}) {
            std::vector<float> part;
            REQUIRE_MESSAGE(ember_test_decode(ctx.get(), std::vector<int32_t>(P.begin() + at, P.begin() + at + n),
                                              static_cast<int32_t>(at), 0, &part, err) == EMBER_OK,
                            err);
            all.insert(all.end(), part.begin(), part.end());
            at += n;
        }
        REQUIRE(at == P.size());
        check_close(one, all, V, k_same, "chunked vs one call");
    }
    SUBCASE("pos = NULL continues after the cached tokens (ember_batch_one)") {
        ember_test_context_ptr ctx = make_ctx(64, 64, 64, 1);
        size_t                 at  = 0;
        for (int32_t n : {7, 1, 14}) {
            ember_batch b = ember_batch_one(P.data() + at, n);  // logits of the last token only
            REQUIRE(ember_decode(ctx.get(), &b) == EMBER_OK);
            at += static_cast<size_t>(n);
            CHECK(ember_n_outputs(ctx.get()) == 1);
            CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == static_cast<int32_t>(at) - 1);
            const float * last = ember_get_logits_ith(ctx.get(), -1);
            REQUIRE(last != nullptr);
            CHECK(ember_get_logits(ctx.get()) == last);
            const std::vector<float> got(last, last + V);
            check_close(rows(one, V, at - 1, 1), got, V, k_same, "last row of each chunk vs one call");
            if (n > 1) CHECK(ember_get_logits_ith(ctx.get(), 0) == nullptr);  // row 0 asked for none
        }
    }
}

TEST_CASE("[kv-cache] a full context returns EMBER_ERR_CONTEXT_FULL and changes nothing") {
    const int32_t          V   = env().n_vocab;
    ember_test_context_ptr ctx = make_ctx(32, 32, 32, 1);
    const int32_t          N   = static_cast<int32_t>(ember_context_n_ctx(ctx.get()));
    REQUIRE(N >= 32);
    REQUIRE(N <= 4096);
    std::vector<int32_t> seq;
    for (int32_t i = 0; i < N; i++) seq.push_back(1 + (i * 37) % (V - 1));

    // Fill all but 4 cells, in chunks of at most n_batch.
    std::string  err;
    const int32_t fill = N - 4;
    for (int32_t at = 0; at < fill;) {
        const int32_t n = std::min<int32_t>(32, fill - at);
        REQUIRE_MESSAGE(ember_test_decode(ctx.get(), std::vector<int32_t>(seq.begin() + at, seq.begin() + at + n),
                                          at, 0, nullptr, err) == EMBER_OK,
                        err);
        at += n;
    }
    CHECK(ember_kv_cache_used(ctx.get()) == fill);

    // 8 more do not fit: nothing changes.
    const std::vector<int32_t> eight(seq.begin() + fill, seq.begin() + fill + 4);
    std::vector<int32_t>       too_many = eight;
    too_many.insert(too_many.end(), {3, 4, 5, 6});
    CHECK(ember_test_decode(ctx.get(), too_many, fill, 0, nullptr, err) == EMBER_ERR_CONTEXT_FULL);
    CHECK(std::string(ember_last_error()).size() > 0);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == fill - 1);
    CHECK(ember_kv_cache_used(ctx.get()) == fill);

    // The 4 that fit still decode correctly, and then the cache is exactly full.
    std::vector<float> last;
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), eight, fill, 0, &last, err) == EMBER_OK, err);
    CHECK(ember_kv_cache_used(ctx.get()) == N);
    const bool small = N <= 512;  // the float64 reference is quadratic in N
    if (small) {
        check_close(rows(ref_logits(seq), V, static_cast<size_t>(fill), 4), last, V, k_ref,
                    "rows after a failed decode vs float64");
    } else {
        MESSAGE("n_ctx " << N << ": float64 comparison of the last rows skipped");
    }
    CHECK(ember_test_decode(ctx.get(), {1}, N, 0, nullptr, err) == EMBER_ERR_CONTEXT_FULL);
    CHECK(ember_kv_cache_seq_pos_max(ctx.get(), 0) == N - 1);

    // Freeing a tail makes room again.
    REQUIRE(ember_kv_cache_seq_rm(ctx.get(), 0, N - 2, -1) == EMBER_OK);
    REQUIRE_MESSAGE(ember_test_decode(ctx.get(), {seq[static_cast<size_t>(N - 2)], seq[static_cast<size_t>(N - 1)]},
                                      N - 2, 0, &last, err) == EMBER_OK,
                    err);
    if (small) {
        check_close(rows(ref_logits(seq), V, static_cast<size_t>(N - 2), 2), last, V, k_ref,
                    "rows after seq_rm in a full cache vs float64");
    }
}

}  // TEST_SUITE
