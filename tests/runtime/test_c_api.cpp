// The public C API as a contract (include/ember.h): versions, status strings, NULL handles,
// params struct_size handling, load failures, progress/cancel, vocab-only loads, model
// queries, decode misuse, logits access, logging, and contexts on several threads.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ember.h"
#include "support/data-path.h"
#include "support/fixtures.h"
#include "support/tiny-model.h"

namespace {

// A tiny llama model shared by the tests here (made once per process).
const tiny_model_spec & tiny_spec() {
    static tiny_model_spec s = [] {
        tiny_model_spec t;
        t.arch        = "llama";
        t.weight_type = EMBER_TYPE_F32;
        t.n_vocab     = 64;
        t.n_embd      = 64;
        t.n_layer     = 2;
        t.n_head      = 4;
        t.n_head_kv   = 2;
        t.n_ff        = 96;
        t.n_ctx_train = 128;
        t.seed        = 31;
        t.name        = "c-api-llama";
        return t;
    }();
    return s;
}

const std::string & tiny_path() {
    static const std::string p = ember_test_make_tiny_model(tiny_spec(), ember_test_tmp_dir());
    return p;
}

ember_test_model_ptr load_tiny() {
    ember_test_model_ptr m;
    std::string          err;
    REQUIRE_MESSAGE(ember_test_load_model(tiny_path(), m, err) == EMBER_OK, err);
    return m;
}

ember_test_context_ptr make_ctx(ember_model * model, uint32_t n_ctx = 64, uint32_t n_batch = 16,
                                uint32_t n_seq_max = 2) {
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = n_ctx;
    cp.n_batch              = n_batch;
    cp.n_ubatch             = n_batch;
    cp.n_seq_max            = n_seq_max;
    cp.n_threads            = 1;
    cp.type_k = cp.type_v = EMBER_TYPE_F32;
    ember_context * c     = nullptr;
    const ember_status st = ember_context_create(model, &cp, &c);
    REQUIRE_MESSAGE(st == EMBER_OK, ember_last_error());
    return ember_test_context_ptr(c);
}

// The last error right after a call (it is only valid until the next ember_ call).
std::string last_error() { return ember_last_error(); }

std::string write_file(const std::string & name, const std::string & bytes) {
    const std::string p = ember_test_tmp_dir() + "/" + name;
    std::ofstream     f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
}

struct cache_state {
    int32_t used, pos0, pos1;
    bool operator==(const cache_state & o) const { return used == o.used && pos0 == o.pos0 && pos1 == o.pos1; }
};
cache_state state_of(const ember_context * c) {
    return {ember_kv_cache_used(c), ember_kv_cache_seq_pos_max(c, 0), ember_kv_cache_seq_pos_max(c, 1)};
}

}  // namespace

TEST_SUITE("runtime") {

//
// Versions, ABI, status strings
//

TEST_CASE("[c-api] compile-time and run-time versions agree") {
    CHECK(ember_version_number() == EMBER_VERSION_NUMBER);
    CHECK(std::string(ember_version_string()) == EMBER_VERSION_STRING);
    CHECK(ember_abi_version() == EMBER_ABI_VERSION);
    CHECK(EMBER_VERSION_NUMBER == EMBER_VERSION_MAJOR * 1000000 + EMBER_VERSION_MINOR * 1000 + EMBER_VERSION_PATCH);
    CHECK(EMBER_CHECK_ABI() == EMBER_OK);
    CHECK(ember_check_abi(EMBER_ABI_VERSION) == EMBER_OK);
    CHECK(ember_check_abi(EMBER_ABI_VERSION + 1) == EMBER_ERR_UNSUPPORTED);
    CHECK(ember_check_abi(0xFFFFFFFFu) == EMBER_ERR_UNSUPPORTED);
    CHECK(ember_init() == EMBER_OK);
    CHECK(ember_init() == EMBER_OK);  // idempotent
}

TEST_CASE("[c-api] ember_status_str names every code and survives unknown ones") {
    const ember_status codes[] = {EMBER_OK,          EMBER_ERR_INVALID_ARG, EMBER_ERR_OOM,
                                  EMBER_ERR_IO,      EMBER_ERR_BAD_FORMAT,  EMBER_ERR_UNSUPPORTED,
                                  EMBER_ERR_BACKEND, EMBER_ERR_CONTEXT_FULL, EMBER_ERR_CANCELLED,
                                  EMBER_ERR_INTERNAL};
    std::set<std::string> seen;
    for (ember_status s : codes) {
        CAPTURE(s);
        const char * str = ember_status_str(s);
        REQUIRE(str != nullptr);
        CHECK(std::strlen(str) > 0);
        CHECK(seen.insert(str).second);  // distinct
    }
    CHECK(std::string(ember_status_str(EMBER_OK)).find("EMBER_OK") != std::string::npos);
    CHECK(std::string(ember_status_str(EMBER_ERR_IO)).find("EMBER_ERR_IO") != std::string::npos);
    for (ember_status s : {-1, 10, 12345, INT32_MIN, INT32_MAX}) {
        CAPTURE(s);
        REQUIRE(ember_status_str(s) != nullptr);
    }
    // The status numbers are fixed forever.
    CHECK(EMBER_ERR_INVALID_ARG == 1);
    CHECK(EMBER_ERR_CONTEXT_FULL == 7);
    CHECK(EMBER_ERR_INTERNAL == 9);
}

TEST_CASE("[c-api] type names and devices") {
    CHECK(std::string(ember_type_name(EMBER_TYPE_F32)) == "f32");
    CHECK(std::string(ember_type_name(EMBER_TYPE_Q8_0)) == "q8_0");
    CHECK(ember_type_name(-1) == nullptr);
    CHECK(ember_type_name(100000) == nullptr);
    CHECK(ember_type_from_name("Q8_0") == EMBER_TYPE_Q8_0);
    CHECK(ember_type_from_name("f16") == EMBER_TYPE_F16);
    CHECK(ember_type_from_name("BF16") == EMBER_TYPE_BF16);
    CHECK(ember_type_from_name("q4_0") == EMBER_TYPE_Q4_0);
    CHECK(ember_type_from_name("nope") == -1);
    CHECK(ember_type_from_name("") == -1);
    CHECK(ember_type_from_name(nullptr) == -1);
    REQUIRE(ember_device_count() >= 1);
    CHECK(std::string(ember_device_name(0)) == "cpu");
    CHECK(ember_device_name(-1) == nullptr);
    CHECK(ember_device_name(ember_device_count()) == nullptr);
    // descriptions (the CPU's model name, or "CPU") and a copy-bandwidth measurement
    for (int32_t i = 0; i < ember_device_count(); i++) {
        REQUIRE(ember_device_description(i) != nullptr);
        CHECK(std::strlen(ember_device_description(i)) > 0);
    }
    CHECK(ember_device_description(-1) == nullptr);
    CHECK(ember_device_description(ember_device_count()) == nullptr);
    double gbs = -1.0;
    CHECK(ember_device_copy_bandwidth(0, 8u << 20, &gbs) == EMBER_OK);
    CHECK(gbs > 0.0);
    CHECK(ember_device_copy_bandwidth(0, 8u << 20, nullptr) == EMBER_ERR_INVALID_ARG);
    CHECK(std::string(ember_last_error()).find("NULL") != std::string::npos);
    CHECK(ember_device_copy_bandwidth(0, 100, &gbs) == EMBER_ERR_INVALID_ARG);  // under 4 KiB
    CHECK(gbs == 0.0);
    CHECK(ember_device_copy_bandwidth(0, uint64_t(1) << 40, &gbs) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_device_copy_bandwidth(ember_device_count(), 8u << 20, &gbs) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_device_copy_bandwidth(-1, 8u << 20, &gbs) == EMBER_ERR_INVALID_ARG);
}

TEST_CASE("[c-api] defaults") {
    const ember_model_params mp = ember_model_default_params();
    CHECK(mp.struct_size == sizeof(ember_model_params));
    CHECK(mp.n_gpu_layers == -1);
    CHECK(mp.device == nullptr);
    CHECK((mp.progress_callback == nullptr));
    CHECK(mp.use_mmap == 1);
    CHECK(mp.vocab_only == 0);
    const ember_context_params cp = ember_context_default_params();
    CHECK(cp.struct_size == sizeof(ember_context_params));
    CHECK(cp.n_ctx == 0);
    CHECK(cp.n_batch == 2048);
    CHECK(cp.n_ubatch == 512);
    CHECK(cp.n_seq_max == 1);
    CHECK(cp.n_threads == 0);
    CHECK(cp.type_k == EMBER_TYPE_F16);
    CHECK(cp.type_v == EMBER_TYPE_F16);
    CHECK((cp.abort_callback == nullptr));
}

//
// NULL handles and bad arguments
//

TEST_CASE("[c-api] every entry point rejects NULL handles with a message") {
    ember_model_params mp  = ember_model_default_params();
    ember_model *      out = reinterpret_cast<ember_model *>(0x1);
    char               buf[32];

#define EXPECT_ERR(expr, pred)                                  \
    do {                                                        \
        const auto r_ = (expr);                                 \
        const std::string e_ = last_error();                    \
        CAPTURE(#expr);                                         \
        CHECK((pred(r_)));                                      \
        CHECK_MESSAGE(!e_.empty(), "no ember_last_error()");    \
    } while (0)
    auto invalid  = [](ember_status s) { return s == EMBER_ERR_INVALID_ARG; };
    auto is_null  = [](const void * p) { return p == nullptr; };
    auto is_zero  = [](uint64_t v) { return v == 0; };
    auto le_zero  = [](int64_t v) { return v <= 0; };
    auto is_neg   = [](int64_t v) { return v < 0; };

    EXPECT_ERR(ember_model_load(nullptr, &mp, &out), invalid);
    CHECK(out == nullptr);
    EXPECT_ERR(ember_model_load(tiny_path().c_str(), &mp, nullptr), invalid);

    EXPECT_ERR(static_cast<const void *>(ember_model_arch(nullptr)), is_null);
    EXPECT_ERR(ember_model_n_params(nullptr), is_zero);
    EXPECT_ERR(ember_model_size(nullptr), is_zero);
    EXPECT_ERR(ember_model_file_size(nullptr), is_zero);
    EXPECT_ERR(ember_model_n_vocab(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_ctx_train(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_embd(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_layer(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_head(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_head_kv(nullptr), le_zero);
    EXPECT_ERR(ember_model_n_tensors(nullptr), le_zero);
    EXPECT_ERR(ember_token_bos(nullptr), is_neg);
    EXPECT_ERR(ember_token_eos(nullptr), is_neg);
    EXPECT_ERR(ember_model_meta_count(nullptr), le_zero);
    EXPECT_ERR(ember_model_meta_key_by_index(nullptr, 0, buf, sizeof(buf)), is_neg);
    EXPECT_ERR(ember_model_meta_val_str(nullptr, "general.architecture", buf, sizeof(buf)), is_neg);
    EXPECT_ERR(ember_model_desc(nullptr, buf, sizeof(buf)), is_neg);

    ember_context * cout = reinterpret_cast<ember_context *>(0x1);
    EXPECT_ERR(ember_context_create(nullptr, nullptr, &cout), invalid);
    CHECK(cout == nullptr);
    {
        ember_test_model_ptr m = load_tiny();
        EXPECT_ERR(ember_context_create(m.get(), nullptr, nullptr), invalid);
    }
    EXPECT_ERR(static_cast<const void *>(ember_context_model(nullptr)), is_null);
    EXPECT_ERR(ember_context_n_ctx(nullptr), is_zero);
    EXPECT_ERR(ember_context_n_batch(nullptr), is_zero);
    EXPECT_ERR(ember_context_n_ubatch(nullptr), is_zero);
    EXPECT_ERR(ember_context_n_threads(nullptr), le_zero);
    EXPECT_ERR(ember_context_set_n_threads(nullptr, 1), invalid);

    const int32_t tok = 1;
    ember_batch   b   = ember_batch_one(&tok, 1);
    EXPECT_ERR(ember_decode(nullptr, &b), invalid);
    EXPECT_ERR(ember_context_synchronize(nullptr), invalid);
    EXPECT_ERR(static_cast<const void *>(ember_get_logits(nullptr)), is_null);
    EXPECT_ERR(static_cast<const void *>(ember_get_logits_ith(nullptr, 0)), is_null);
    EXPECT_ERR(ember_n_outputs(nullptr), le_zero);
    EXPECT_ERR(ember_kv_cache_clear(nullptr), invalid);
    EXPECT_ERR(ember_kv_cache_seq_rm(nullptr, 0, 0, -1), invalid);
    EXPECT_ERR(ember_kv_cache_seq_cp(nullptr, 0, 1, 0, -1), invalid);
    EXPECT_ERR(ember_kv_cache_seq_pos_max(nullptr, 0), is_neg);
    EXPECT_ERR(ember_kv_cache_used(nullptr), le_zero);
#undef EXPECT_ERR

    // Frees of NULL are harmless no-ops.
    ember_model_free(nullptr);
    ember_context_free(nullptr);

    // A successful call after all that still works, and ember_last_error() is never NULL.
    CHECK(ember_last_error() != nullptr);
}

TEST_CASE("[c-api] params: bad struct_size is rejected, an older smaller one is accepted") {
    const std::string & path = tiny_path();

    SUBCASE("model params struct_size 0 and huge") {
        for (uint32_t size : {0u, 3u, static_cast<uint32_t>(sizeof(ember_model_params)) + 4096u, 0xFFFFFFFFu}) {
            CAPTURE(size);
            ember_model_params mp = ember_model_default_params();
            mp.struct_size        = size;
            ember_model * m       = reinterpret_cast<ember_model *>(0x1);
            CHECK(ember_model_load(path.c_str(), &mp, &m) == EMBER_ERR_INVALID_ARG);
            CHECK(!last_error().empty());
            CHECK(m == nullptr);
            ember_model_free(m == reinterpret_cast<ember_model *>(0x1) ? nullptr : m);
        }
    }
    SUBCASE("older model params: fields past struct_size are not read") {
        // A caller compiled before progress_callback existed: garbage after the end.
        ember_model_params mp = ember_model_default_params();
        mp.struct_size        = static_cast<uint32_t>(offsetof(ember_model_params, progress_callback));
        static std::atomic<int> calls{0};
        mp.progress_callback  = [](float, void *) -> int {
            calls++;
            return 1;  // would cancel the load if it were read
        };
        mp.vocab_only         = 1;  // would skip the tensors if it were read
        ember_model * m       = nullptr;
        REQUIRE_MESSAGE(ember_model_load(path.c_str(), &mp, &m) == EMBER_OK, last_error());
        ember_test_model_ptr hold(m);
        CHECK(calls.load() == 0);
        CHECK(ember_model_n_tensors(m) > 0);
        ember_context * c = nullptr;
        CHECK(ember_context_create(m, nullptr, &c) == EMBER_OK);  // not vocab-only
        ember_context_free(c);
    }
    SUBCASE("context params struct_size 0 and huge") {
        ember_test_model_ptr m = load_tiny();
        for (uint32_t size : {0u, 3u, static_cast<uint32_t>(sizeof(ember_context_params)) + 4096u, 0xFFFFFFFFu}) {
            CAPTURE(size);
            ember_context_params cp = ember_context_default_params();
            cp.struct_size          = size;
            ember_context * c       = reinterpret_cast<ember_context *>(0x1);
            CHECK(ember_context_create(m.get(), &cp, &c) == EMBER_ERR_INVALID_ARG);
            CHECK(!last_error().empty());
            CHECK(c == nullptr);
        }
    }
    SUBCASE("older context params: defaults for the fields past struct_size") {
        ember_test_model_ptr m = load_tiny();
        ember_context_params cp = ember_context_default_params();
        cp.struct_size          = static_cast<uint32_t>(offsetof(ember_context_params, n_threads));
        cp.n_ctx                = 64;
        cp.n_batch              = 8;
        cp.n_ubatch             = 8;
        cp.n_threads            = 123456;  // invalid if read
        cp.type_k               = 12345;   // invalid if read
        cp.type_v               = -7;
        cp.abort_callback       = [](void *) -> int { return 1; };  // would abort every decode
        ember_context * c       = nullptr;
        REQUIRE_MESSAGE(ember_context_create(m.get(), &cp, &c) == EMBER_OK, last_error());
        ember_test_context_ptr hold(c);
        CHECK(ember_context_n_batch(c) == 8);
        CHECK(ember_context_n_ubatch(c) == 8);
        CHECK(ember_context_n_ctx(c) >= 64);
        ember_context * d = nullptr;
        REQUIRE(ember_context_create(m.get(), nullptr, &d) == EMBER_OK);
        ember_test_context_ptr hold_d(d);
        CHECK(ember_context_n_threads(c) == ember_context_n_threads(d));
        const int32_t toks[] = {1, 2, 3};
        ember_batch   b      = ember_batch_one(toks, 3);
        CHECK(ember_decode(c, &b) == EMBER_OK);
    }
    SUBCASE("NULL params mean defaults") {
        ember_model * m = nullptr;
        REQUIRE(ember_model_load(path.c_str(), nullptr, &m) == EMBER_OK);
        ember_test_model_ptr hold(m);
        ember_context *      c = nullptr;
        REQUIRE(ember_context_create(m, nullptr, &c) == EMBER_OK);
        ember_test_context_ptr hold_c(c);
        CHECK(ember_context_n_ctx(c) >= static_cast<uint32_t>(tiny_spec().n_ctx_train));  // 0 = trained context
        CHECK(ember_context_n_batch(c) >= 1);
    }
}

TEST_CASE("[c-api] context params out of range are rejected") {
    ember_test_model_ptr m = load_tiny();
    struct bad {
        const char * what;
        void (*apply)(ember_context_params &);
    };
    const bad cases[] = {
        {"n_seq_max 0", [](ember_context_params & p) { p.n_seq_max = 0; }},
        {"n_seq_max 65", [](ember_context_params & p) { p.n_seq_max = 65; }},
        {"type_k unknown", [](ember_context_params & p) { p.type_k = 12345; }},
        {"type_v unknown", [](ember_context_params & p) { p.type_v = -1; }},
    };
    for (const bad & b : cases) {
        const std::string what = b.what;
        CAPTURE(what);
        ember_context_params cp = ember_context_default_params();
        b.apply(cp);
        ember_context *    c  = nullptr;
        const ember_status st = ember_context_create(m.get(), &cp, &c);
        CHECK(st != EMBER_OK);
        CHECK(c == nullptr);
        CHECK(!last_error().empty());
        ember_context_free(c);
    }
}

//
// Loading
//

TEST_CASE("[c-api] load failures: missing file, garbage, truncated") {
    ember_model * m = reinterpret_cast<ember_model *>(0x1);
    CHECK(ember_model_load((ember_test_tmp_dir() + "/does-not-exist.gguf").c_str(), nullptr, &m) == EMBER_ERR_IO);
    CHECK(m == nullptr);
    CHECK(!last_error().empty());

    std::mt19937 g(5);
    std::string  junk(4096, '\0');
    for (char & c : junk) c = static_cast<char>(g());
    const std::string garbage = write_file("garbage.gguf", junk);
    m                         = reinterpret_cast<ember_model *>(0x1);
    CHECK(ember_model_load(garbage.c_str(), nullptr, &m) == EMBER_ERR_BAD_FORMAT);
    CHECK(m == nullptr);
    CHECK(!last_error().empty());

    const std::string magic = write_file("magic-only.gguf", std::string("GGUF\x03\0\0\0", 8) + junk.substr(0, 64));
    m                       = reinterpret_cast<ember_model *>(0x1);
    CHECK(ember_model_load(magic.c_str(), nullptr, &m) == EMBER_ERR_BAD_FORMAT);
    CHECK(m == nullptr);

    // A valid file cut short in its tensor data.
    std::string whole;
    REQUIRE(ember_test_read_file(tiny_path(), whole));
    const std::string cut = write_file("truncated.gguf", whole.substr(0, whole.size() - 1000));
    m                     = reinterpret_cast<ember_model *>(0x1);
    const ember_status st = ember_model_load(cut.c_str(), nullptr, &m);
    CHECK((st == EMBER_ERR_BAD_FORMAT || st == EMBER_ERR_IO));
    CHECK(m == nullptr);

    // A directory is not a model.
    m = reinterpret_cast<ember_model *>(0x1);
    CHECK(ember_model_load(ember_test_tmp_dir().c_str(), nullptr, &m) != EMBER_OK);
    CHECK(m == nullptr);
}

TEST_CASE("[c-api] progress callback rises to 1.0, and cancelling stops the load") {
    struct progress {
        std::vector<float> seen;
        int                cancel_after = -1;  // cancel on this call (0-based), -1 = never
    };
    auto cb = [](float p, void * ud) -> int {
        auto * pr = static_cast<progress *>(ud);
        pr->seen.push_back(p);
        return pr->cancel_after >= 0 && static_cast<int>(pr->seen.size()) > pr->cancel_after ? 1 : 0;
    };
    {
        progress           pr;
        ember_model_params mp = ember_model_default_params();
        mp.progress_callback  = cb;
        mp.progress_user_data = &pr;
        ember_model * m       = nullptr;
        REQUIRE(ember_model_load(tiny_path().c_str(), &mp, &m) == EMBER_OK);
        ember_model_free(m);
        REQUIRE(!pr.seen.empty());
        for (size_t i = 0; i < pr.seen.size(); i++) {
            CAPTURE(i);
            CHECK(pr.seen[i] >= 0.0f);
            CHECK(pr.seen[i] <= 1.0f);
            if (i > 0) CHECK(pr.seen[i] >= pr.seen[i - 1]);
        }
        CHECK(pr.seen.back() == 1.0f);
    }
    for (int at : {0, 1}) {
        CAPTURE(at);
        progress pr;
        pr.cancel_after       = at;
        ember_model_params mp = ember_model_default_params();
        mp.progress_callback  = cb;
        mp.progress_user_data = &pr;
        ember_model * m       = reinterpret_cast<ember_model *>(0x1);
        const ember_status st = ember_model_load(tiny_path().c_str(), &mp, &m);
        if (at > 0 && pr.seen.size() <= static_cast<size_t>(at)) {
            CHECK(st == EMBER_OK);  // fewer reports than that: nothing to cancel
            ember_model_free(m);
            continue;
        }
        CHECK(st == EMBER_ERR_CANCELLED);
        CHECK(m == nullptr);
        CHECK(!last_error().empty());
    }
}

TEST_CASE("[c-api] vocab-only loads of tokenizer fixtures; contexts are refused") {
    const std::string dir = ember_test_data_path("fixtures/vocab");
    if (dir.empty()) {
        MESSAGE("skipped: no fixtures/vocab (pass --data-dir)");
        return;
    }
    int n = 0;
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        const std::string p = e.path().string();
        if (e.path().extension() != ".gguf") continue;
        CAPTURE(p);
        ember_model_params mp = ember_model_default_params();
        mp.vocab_only         = 1;
        ember_model *      m  = nullptr;
        const ember_status st = ember_model_load(p.c_str(), &mp, &m);
        REQUIRE_MESSAGE(st == EMBER_OK, last_error());
        ember_test_model_ptr hold(m);
        CHECK(ember_model_n_vocab(m) > 1000);
        CHECK(ember_model_n_tensors(m) == 0);
        CHECK(ember_model_meta_count(m) > 0);
        ember_context * c = reinterpret_cast<ember_context *>(0x1);
        CHECK(ember_context_create(m, nullptr, &c) != EMBER_OK);
        CHECK(c == nullptr);
        CHECK(!last_error().empty());
        n++;
    }
    CHECK(n == 5);

    // Without vocab_only the same tensor-less file is not a runnable model.
    const std::string spm = ember_test_data_path("fixtures/vocab/ggml-vocab-llama-spm.gguf");
    if (!spm.empty()) {
        ember_model * m = reinterpret_cast<ember_model *>(0x1);
        CHECK(ember_model_load(spm.c_str(), nullptr, &m) == EMBER_ERR_BAD_FORMAT);
        CHECK(m == nullptr);
    }
}

//
// Model queries
//

TEST_CASE("[c-api] model queries on a tiny model") {
    const tiny_model_spec & s = tiny_spec();
    ember_test_model_ptr    m = load_tiny();
    CHECK(std::string(ember_model_arch(m.get())) == "llama");
    CHECK(ember_model_n_vocab(m.get()) == s.n_vocab);
    CHECK(ember_model_n_ctx_train(m.get()) == s.n_ctx_train);
    CHECK(ember_model_n_embd(m.get()) == s.n_embd);
    CHECK(ember_model_n_layer(m.get()) == s.n_layer);
    CHECK(ember_model_n_head(m.get()) == s.n_head);
    CHECK(ember_model_n_head_kv(m.get()) == s.n_head_kv);
    CHECK(ember_token_bos(m.get()) == 1);
    CHECK(ember_token_eos(m.get()) == 2);

    // tensors: token_embd, output_norm, output + 9 per layer
    const int64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab, KV = s.n_head_kv * (s.n_embd / s.n_head);
    const int64_t per_layer = E + E * E + 2 * E * KV + E * E + E + 3 * E * F;
    const int64_t n_params  = V * E + E + V * E + s.n_layer * per_layer;
    CHECK(ember_model_n_tensors(m.get()) == 3 + 9 * s.n_layer);
    CHECK(ember_model_n_params(m.get()) == static_cast<uint64_t>(n_params));
    CHECK(ember_model_size(m.get()) == static_cast<uint64_t>(n_params) * 4);  // all F32
    struct stat st;
    REQUIRE(stat(tiny_path().c_str(), &st) == 0);
    CHECK(ember_model_file_size(m.get()) == static_cast<uint64_t>(st.st_size));

    // Metadata by key, snprintf semantics.
    char buf[64];
    CHECK(ember_model_meta_val_str(m.get(), "general.architecture", buf, sizeof(buf)) == 5);
    CHECK(std::string(buf) == "llama");
    std::memset(buf, 'x', sizeof(buf));
    CHECK(ember_model_meta_val_str(m.get(), "general.architecture", buf, 4) == 5);  // truncated
    CHECK(std::string(buf) == "lla");
    CHECK(buf[4] == 'x');  // nothing written past buf_size
    CHECK(ember_model_meta_val_str(m.get(), "general.architecture", nullptr, 0) == 5);
    CHECK(ember_model_meta_val_str(m.get(), "llama.embedding_length", buf, sizeof(buf)) == 2);
    CHECK(std::string(buf) == "64");
    CHECK(ember_model_meta_val_str(m.get(), "tokenizer.ggml.add_bos_token", buf, sizeof(buf)) == 4);
    CHECK(std::string(buf) == "true");
    const int32_t n_arr = ember_model_meta_val_str(m.get(), "tokenizer.ggml.token_type", buf, sizeof(buf));
    CHECK(n_arr > 0);
    CHECK(std::string(buf).rfind("[2, 3, 3, 1", 0) == 0);
    std::vector<char> big(static_cast<size_t>(n_arr) + 1);
    CHECK(ember_model_meta_val_str(m.get(), "tokenizer.ggml.token_type", big.data(), big.size()) == n_arr);
    CHECK(std::string(big.data()).find(", ...]") != std::string::npos);  // 64 elements, cut after 16
    CHECK(ember_model_meta_val_str(m.get(), "no.such.key", buf, sizeof(buf)) == -1);
    CHECK(ember_model_meta_val_str(m.get(), nullptr, buf, sizeof(buf)) == -1);

    // Metadata by index.
    const int32_t n_kv = ember_model_meta_count(m.get());
    CHECK(n_kv >= 20);
    std::set<std::string> keys;
    for (int32_t i = 0; i < n_kv; i++) {
        CAPTURE(i);
        const int32_t len = ember_model_meta_key_by_index(m.get(), i, buf, sizeof(buf));
        REQUIRE(len > 0);
        REQUIRE(len < static_cast<int32_t>(sizeof(buf)));
        CHECK(static_cast<int32_t>(std::strlen(buf)) == len);
        keys.insert(buf);
        char val[8];
        CHECK(ember_model_meta_val_str(m.get(), buf, val, sizeof(val)) >= 0);
    }
    CHECK(keys.size() == static_cast<size_t>(n_kv));
    CHECK(keys.count("general.architecture") == 1);
    CHECK(keys.count("llama.block_count") == 1);
    CHECK(ember_model_meta_key_by_index(m.get(), -1, buf, sizeof(buf)) == -1);
    CHECK(ember_model_meta_key_by_index(m.get(), n_kv, buf, sizeof(buf)) == -1);
    CHECK(ember_model_meta_key_by_index(m.get(), 0, buf, 1) > 0);
    CHECK(buf[0] == '\0');

    const int32_t dl = ember_model_desc(m.get(), buf, sizeof(buf));
    CHECK(dl > 0);
    CHECK(std::string(buf).find("llama") != std::string::npos);
}

//
// Decoding
//

TEST_CASE("[c-api] decode misuse returns EMBER_ERR_INVALID_ARG and leaves the cache unchanged") {
    ember_test_model_ptr   m   = load_tiny();
    ember_test_context_ptr ctx = make_ctx(m.get(), 64, 16, 2);
    ember_context *        c   = ctx.get();
    const int32_t          V   = ember_model_n_vocab(m.get());

    // Some state to protect: 5 tokens in sequence 0, 3 in sequence 1.
    {
        const int32_t t[]  = {1, 5, 6, 7, 8, 1, 9, 10};
        const int32_t p[]  = {0, 1, 2, 3, 4, 0, 1, 2};
        const int32_t s[]  = {0, 0, 0, 0, 0, 1, 1, 1};
        ember_batch   b    = {8, t, p, s, nullptr};
        REQUIRE(ember_decode(c, &b) == EMBER_OK);
    }
    const cache_state before = state_of(c);
    CHECK(before == cache_state{8, 4, 2});
    const float * logits_before = ember_get_logits_ith(c, -1);
    REQUIRE(logits_before != nullptr);
    const std::vector<float> row_before(logits_before, logits_before + V);

    struct bad_batch {
        const char *         what;
        std::vector<int32_t> tok, pos, seq;
        bool                 null_pos = false, null_seq = false, null_tok = false;
    };
    std::vector<bad_batch> cases = {
        {"n_tokens 0", {}, {}, {}},
        {"n_tokens > n_batch", std::vector<int32_t>(17, 3), {}, std::vector<int32_t>(17, 0), true},
        {"token -1", {3, -1}, {5, 6}, {0, 0}},
        {"token == n_vocab", {3, V}, {5, 6}, {0, 0}},
        {"token huge", {INT32_MAX}, {5}, {0}},
        {"positions not increasing", {3, 4, 5}, {5, 7, 6}, {0, 0, 0}},
        {"position repeated", {3, 4}, {5, 5}, {0, 0}},
        {"position == cached max", {3}, {4}, {0}},
        {"position < cached max", {3}, {1}, {0}},
        {"position negative", {3}, {-1}, {1}},
        {"seq_id == n_seq_max", {3}, {5}, {2}},
        {"seq_id negative", {3}, {5}, {-1}},
        {"seq_id huge", {3}, {5}, {1000}},
        {"valid first half, bad second", {3, 4, 5, 6}, {5, 6, 2, 3}, {0, 0, 1, 1}},
        {"token array NULL", {3}, {5}, {0}, false, false, true},
    };
    for (const bad_batch & bb : cases) {
        const std::string what = bb.what;
        CAPTURE(what);
        ember_batch b;
        b.n_tokens = static_cast<int32_t>(bb.tok.size());
        b.token    = bb.null_tok ? nullptr : bb.tok.data();
        b.pos      = bb.null_pos || bb.pos.empty() ? nullptr : bb.pos.data();
        b.seq_id   = bb.null_seq || bb.seq.empty() ? nullptr : bb.seq.data();
        b.logits   = nullptr;
        static const int32_t dummy = 1;
        if (bb.tok.empty()) b.token = &dummy;  // a valid pointer; n_tokens 0 is what is wrong
        CHECK(ember_decode(c, &b) == EMBER_ERR_INVALID_ARG);
        CHECK(!last_error().empty());
        CHECK(state_of(c) == before);
    }
    {
        ember_batch b = {-3, nullptr, nullptr, nullptr, nullptr};
        CHECK(ember_decode(c, &b) == EMBER_ERR_INVALID_ARG);
        CHECK(ember_decode(c, nullptr) == EMBER_ERR_INVALID_ARG);
        CHECK(state_of(c) == before);
    }
    // The context is still usable and unchanged: continuing sequence 0 matches a fresh run.
    const int32_t t5[] = {11};
    const int32_t p5[] = {5};
    ember_batch   b    = {1, t5, p5, nullptr, nullptr};
    REQUIRE(ember_decode(c, &b) == EMBER_OK);
    const float * got = ember_get_logits_ith(c, 0);
    REQUIRE(got != nullptr);

    ember_test_context_ptr fresh = make_ctx(m.get(), 64, 16, 1);
    const int32_t          all[] = {1, 5, 6, 7, 8, 11};
    ember_batch            fb    = ember_batch_one(all, 6);
    REQUIRE(ember_decode(fresh.get(), &fb) == EMBER_OK);
    const float * want = ember_get_logits_ith(fresh.get(), -1);
    REQUIRE(want != nullptr);
    double maxd = 0, scale = 0;
    for (int32_t i = 0; i < V; i++) {
        maxd  = std::max(maxd, static_cast<double>(std::fabs(got[i] - want[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    CHECK(maxd <= 1e-5 * scale);
}

TEST_CASE("[c-api] logits access: rows, negative indices, rows without logits") {
    ember_test_model_ptr   m   = load_tiny();
    ember_test_context_ptr ctx = make_ctx(m.get(), 64, 16, 1);
    ember_context *        c   = ctx.get();
    const int32_t          V   = ember_model_n_vocab(m.get());

    // Before any decode there are no logits.
    CHECK(ember_n_outputs(c) == 0);
    CHECK(ember_get_logits_ith(c, 0) == nullptr);

    const int32_t t[]    = {1, 4, 9, 16, 25};
    const int8_t  want[] = {1, 0, 1, 0, 1};
    ember_batch   b      = {5, t, nullptr, nullptr, want};
    REQUIRE(ember_decode(c, &b) == EMBER_OK);
    CHECK(ember_n_outputs(c) == 3);
    const float * all = ember_get_logits(c);
    REQUIRE(all != nullptr);
    CHECK(ember_get_logits_ith(c, 0) == all);
    CHECK(ember_get_logits_ith(c, 2) == all + V);
    CHECK(ember_get_logits_ith(c, 4) == all + 2 * V);
    CHECK(ember_get_logits_ith(c, -1) == all + 2 * V);
    CHECK(ember_get_logits_ith(c, -3) == all + V);
    CHECK(ember_get_logits_ith(c, -5) == all);
    CHECK(ember_get_logits_ith(c, 1) == nullptr);
    CHECK(!last_error().empty());
    CHECK(ember_get_logits_ith(c, 3) == nullptr);
    CHECK(ember_get_logits_ith(c, -2) == nullptr);
    CHECK(ember_get_logits_ith(c, 5) == nullptr);
    CHECK(ember_get_logits_ith(c, -6) == nullptr);
    CHECK(ember_get_logits_ith(c, INT32_MIN) == nullptr);
    for (int32_t i = 0; i < 3 * V; i++) REQUIRE(std::isfinite(all[i]));

    // A failed decode does not corrupt the cache; logits of a decode that asked for none.
    const int8_t none[] = {0, 0};
    const int32_t t2[]  = {3, 4};
    ember_batch   b2    = {2, t2, nullptr, nullptr, none};
    REQUIRE(ember_decode(c, &b2) == EMBER_OK);
    CHECK(ember_n_outputs(c) == 0);
    CHECK(ember_get_logits_ith(c, -1) == nullptr);
    CHECK(ember_kv_cache_seq_pos_max(c, 0) == 6);
    // Nothing left running on the CPU: synchronizing is a no-op that succeeds.
    CHECK(ember_context_synchronize(c) == EMBER_OK);
    CHECK(ember_n_outputs(c) == 0);
}

TEST_CASE("[c-api] kv cache calls with bad arguments") {
    ember_test_model_ptr   m   = load_tiny();
    ember_test_context_ptr ctx = make_ctx(m.get(), 64, 16, 2);
    ember_context *        c   = ctx.get();
    const int32_t          t[] = {1, 2, 3};
    ember_batch            b   = ember_batch_one(t, 3);
    REQUIRE(ember_decode(c, &b) == EMBER_OK);
    const cache_state before = state_of(c);
    CHECK(ember_kv_cache_seq_cp(c, 0, 2, 0, -1) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_kv_cache_seq_cp(c, -1, 1, 0, -1) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_kv_cache_seq_rm(c, 2, 0, -1) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_kv_cache_seq_pos_max(c, 2) == -1);
    CHECK(state_of(c) == before);
    // seq_id < 0 in seq_rm means all sequences.
    CHECK(ember_kv_cache_seq_rm(c, -1, 2, -1) == EMBER_OK);
    CHECK(ember_kv_cache_seq_pos_max(c, 0) == 1);
    CHECK(ember_kv_cache_used(c) == 2);
}

TEST_CASE("[c-api] set_n_threads and abort callback") {
    ember_test_model_ptr   m   = load_tiny();
    ember_test_context_ptr ctx = make_ctx(m.get(), 64, 16, 1);
    CHECK(ember_context_set_n_threads(ctx.get(), 2) == EMBER_OK);
    CHECK(ember_context_n_threads(ctx.get()) == 2);

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = 64;
    cp.n_batch              = 16;
    cp.n_ubatch             = 4;
    static std::atomic<int> polls{0};
    polls                = 0;
    cp.abort_callback    = [](void *) -> int { return ++polls >= 1 ? 1 : 0; };
    ember_context * c    = nullptr;
    REQUIRE(ember_context_create(m.get(), &cp, &c) == EMBER_OK);
    ember_test_context_ptr hold(c);
    std::vector<int32_t>   t(12, 3);
    t[0]          = 1;
    ember_batch b = ember_batch_one(t.data(), 12);
    CHECK(ember_decode(c, &b) == EMBER_ERR_CANCELLED);
    CHECK(polls.load() >= 1);
    // Micro-batches already computed stay; the rest are not added.
    CHECK(ember_kv_cache_used(c) < 12);
    CHECK(ember_kv_cache_used(c) % 4 == 0);
}

//
// Logging
//

TEST_CASE("[c-api] log callback receives messages; NULL restores the default sink") {
    // The sink may run on any thread: it only records, the checks run here.
    struct sink {
        std::mutex               mu;
        std::vector<std::string> msgs;
        std::vector<int32_t>     levels;
    } s;
    ember_log_set(
        [](int32_t level, const char * msg, void * ud) {
            auto * sk = static_cast<sink *>(ud);
            std::lock_guard<std::mutex> lock(sk->mu);
            sk->msgs.push_back(msg ? msg : "(null)");
            sk->levels.push_back(level);
        },
        &s);
    ember_log_set_level(EMBER_LOG_DEBUG);
    {
        ember_test_model_ptr   m   = load_tiny();
        ember_test_context_ptr ctx = make_ctx(m.get());
        ember_model *          bad = nullptr;
        ember_model_load((ember_test_tmp_dir() + "/missing.gguf").c_str(), nullptr, &bad);
    }
    size_t n_before;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        n_before = s.msgs.size();
        CHECK(n_before > 0);
        for (size_t i = 0; i < s.msgs.size(); i++) {
            CAPTURE(s.msgs[i]);
            CHECK(!s.msgs[i].empty());
            CHECK(s.msgs[i].back() != '\n');
            CHECK(s.levels[i] >= EMBER_LOG_ERROR);
            CHECK(s.levels[i] <= EMBER_LOG_DEBUG);
        }
    }
    ember_log_set(nullptr, nullptr);
    ember_log_set_level(EMBER_LOG_WARN);
    {
        ember_test_model_ptr m = load_tiny();
        ember_model *        bad = nullptr;
        ember_model_load((ember_test_tmp_dir() + "/missing.gguf").c_str(), nullptr, &bad);
    }
    std::lock_guard<std::mutex> lock(s.mu);
    CHECK(s.msgs.size() == n_before);
}

//
// Threads
//

TEST_CASE("[c-api] two contexts on one model decode concurrently like sequentially") {
    ember_test_model_ptr m = load_tiny();
    const int32_t        V = ember_model_n_vocab(m.get());
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41},
                                                       {1, 60, 2, 44, 7, 7, 7, 30, 12}};
    auto run = [&](const std::vector<int32_t> & p, std::vector<float> & out, ember_status & st) {
        ember_context_params cp = ember_context_default_params();
        cp.n_ctx                = 64;
        cp.n_batch              = 16;
        cp.n_ubatch             = 16;
        cp.n_threads            = 1;
        ember_context * c       = nullptr;
        st                      = ember_context_create(m.get(), &cp, &c);
        if (st != EMBER_OK) return;
        // The prompt, then 8 greedy steps.
        std::vector<int32_t> cur = p;
        for (int step = 0; step < 9 && st == EMBER_OK; step++) {
            ember_batch b = ember_batch_one(cur.data(), static_cast<int32_t>(cur.size()));
            st            = ember_decode(c, &b);
            if (st != EMBER_OK) break;
            const float * row = ember_get_logits_ith(c, -1);
            if (!row) {
                st = EMBER_ERR_INTERNAL;
                break;
            }
            out.insert(out.end(), row, row + V);
            cur = {ember_test_argmax(row, V)};
        }
        ember_context_free(c);
    };
    std::vector<float> seq0, seq1, par0, par1;
    ember_status       s0 = EMBER_OK, s1 = EMBER_OK, p0 = EMBER_OK, p1 = EMBER_OK;
    run(prompts[0], seq0, s0);
    run(prompts[1], seq1, s1);
    REQUIRE(s0 == EMBER_OK);
    REQUIRE(s1 == EMBER_OK);
    for (int rep = 0; rep < 3; rep++) {
        par0.clear();
        par1.clear();
        std::thread a([&] { run(prompts[0], par0, p0); });
        std::thread b([&] { run(prompts[1], par1, p1); });
        a.join();
        b.join();
        REQUIRE(p0 == EMBER_OK);
        REQUIRE(p1 == EMBER_OK);
        CHECK(par0 == seq0);  // same threads, same shapes: bit-identical
        CHECK(par1 == seq1);
    }
}

TEST_CASE("[c-api] last error is per thread") {
    ember_model * m = nullptr;
    CHECK(ember_model_load(nullptr, nullptr, &m) == EMBER_ERR_INVALID_ARG);
    const std::string mine = last_error();
    CHECK(!mine.empty());
    std::string other;
    std::thread t([&] { other = ember_last_error(); });
    t.join();
    CHECK(other.empty());
}

}  // TEST_SUITE
