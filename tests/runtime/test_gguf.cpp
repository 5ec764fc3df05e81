// GGUF reader and writer: round trips, the real fixture files, and hostile input.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/gguf.h"
#include "gguf-builder.h"
#include "support/data-path.h"

namespace {

//
// Helpers
//

std::unique_ptr<ember_gguf_file> parse(const std::vector<uint8_t> & b) { return ember_gguf_parse(b.data(), b.size()); }

// The ember_error that parsing `b` throws; a file that parses becomes a failed check.
ember_error parse_error(const std::vector<uint8_t> & b) {
    try {
        parse(b);
    } catch (const ember_error & e) {
        return e;
    }
    return ember_error(EMBER_OK, "(the file parsed)");
}

bool contains(const std::string & s, const std::string & needle) { return s.find(needle) != std::string::npos; }

// Rejected with `status`, and the message holds every needle (the key or tensor it names).
#define CHECK_REJECTED(bytes, status_, ...)                                                         \
    do {                                                                                            \
        ember_error e_ = parse_error(bytes);                                                        \
        INFO("message: ", e_.what());                                                               \
        CHECK(e_.status == (status_));                                                              \
        for (const char * n_ : {__VA_ARGS__}) CHECK_MESSAGE(contains(e_.what(), n_), "expected: ", n_); \
    } while (0)

template <typename T> ember_gguf_value array_of(ember_gguf_type t, const std::vector<T> & xs) {
    ember_gguf_value v;
    v.type     = EMBER_GGUF_ARRAY;
    v.arr_type = t;
    v.arr_n    = xs.size();
    v.arr_data.resize(xs.size() * sizeof(T));
    if (!xs.empty()) std::memcpy(v.arr_data.data(), xs.data(), v.arr_data.size());
    return v;
}

ember_gguf_value array_of_arrays(const std::vector<ember_gguf_value> & xs) {
    ember_gguf_value v;
    v.type     = EMBER_GGUF_ARRAY;
    v.arr_type = EMBER_GGUF_ARRAY;
    v.arr_n    = xs.size();
    v.arr_arr  = xs;
    return v;
}

// Deep equality; floats compare by bits so NaN payloads and -0 count.
bool same_value(const ember_gguf_value & a, const ember_gguf_value & b) {
    if (a.type != b.type) return false;
    switch (a.type) {
        case EMBER_GGUF_STRING: return a.str == b.str;
        case EMBER_GGUF_ARRAY:
            if (a.arr_type != b.arr_type || a.arr_n != b.arr_n || a.arr_data != b.arr_data || a.arr_str != b.arr_str ||
                a.arr_arr.size() != b.arr_arr.size()) {
                return false;
            }
            for (size_t i = 0; i < a.arr_arr.size(); i++) {
                if (!same_value(a.arr_arr[i], b.arr_arr[i])) return false;
            }
            return true;
        case EMBER_GGUF_FLOAT32: {
            float fa = static_cast<float>(a.num.f64), fb = static_cast<float>(b.num.f64);
            return std::memcmp(&fa, &fb, sizeof(fa)) == 0;
        }
        default: return a.num.u64 == b.num.u64;
    }
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937         rng(seed);
    std::vector<uint8_t> b(n);
    for (uint8_t & x : b) x = static_cast<uint8_t>(rng());
    return b;
}

// Every metadata type: scalars at their limits, strings, arrays of each type, nested arrays.
void add_all_metadata(ember_gguf_writer & w) {
    w.set_u8("t.u8", 255);
    w.set_i8("t.i8", -128);
    w.set_u16("t.u16", 65535);
    w.set_i16("t.i16", -32768);
    w.set_u32("t.u32", 4294967295u);
    w.set_i32("t.i32", std::numeric_limits<int32_t>::min());
    w.set_u64("t.u64", std::numeric_limits<uint64_t>::max());
    w.set_i64("t.i64", std::numeric_limits<int64_t>::min());
    w.set_f32("t.f32", 0.1f);
    w.set_f32("t.f32_neg_zero", -0.0f);
    w.set_f32("t.f32_inf", std::numeric_limits<float>::infinity());
    w.set_f64("t.f64", 1e300);
    w.set_bool("t.true", true);
    w.set_bool("t.false", false);
    w.set_str("t.str_empty", "");
    w.set_str("t.str_utf8", "h\xc3\xa9llo w\xc3\xb6rld \xf0\x9f\x94\xa5 \xe4\xb8\xad\xe6\x96\x87");
    w.set_str("t.str_nul", std::string("a\0b", 3));

    w.set_value("t.arr_u8", array_of<uint8_t>(EMBER_GGUF_UINT8, {0, 1, 255}));
    w.set_value("t.arr_i8", array_of<int8_t>(EMBER_GGUF_INT8, {-128, 0, 127}));
    w.set_value("t.arr_u16", array_of<uint16_t>(EMBER_GGUF_UINT16, {0, 65535}));
    w.set_value("t.arr_i16", array_of<int16_t>(EMBER_GGUF_INT16, {-32768, 32767}));
    w.set_value("t.arr_u32", array_of<uint32_t>(EMBER_GGUF_UINT32, {1, 2, 4294967295u}));
    w.set_arr_i32("t.arr_i32", {-1, 0, 1, 2147483647});
    w.set_arr_f32("t.arr_f32", {0.5f, -1.25f, 3.0e38f});
    w.set_value("t.arr_bool", array_of<uint8_t>(EMBER_GGUF_BOOL, {1, 0, 1}));
    w.set_value("t.arr_u64", array_of<uint64_t>(EMBER_GGUF_UINT64, {0, std::numeric_limits<uint64_t>::max()}));
    w.set_value("t.arr_i64", array_of<int64_t>(EMBER_GGUF_INT64, {std::numeric_limits<int64_t>::min(), 7}));
    w.set_value("t.arr_f64", array_of<double>(EMBER_GGUF_FLOAT64, {1.5, -2.5e-300}));
    w.set_arr_str("t.arr_str", {"", "a", "\xe2\x82\xac", "with space"});

    // Empty arrays of every element type.
    for (uint32_t t = 0; t < EMBER_GGUF_TYPE_COUNT; t++) {
        ember_gguf_value v;
        v.type     = EMBER_GGUF_ARRAY;
        v.arr_type = static_cast<ember_gguf_type>(t);
        w.set_value(std::string("t.empty_") + ember_gguf_type_name(v.arr_type), v);
    }

    // [[1, 2], [3]], [["x"], []], and three levels deep.
    w.set_value("t.nested_i32", array_of_arrays({array_of<int32_t>(EMBER_GGUF_INT32, {1, 2}),
                                                 array_of<int32_t>(EMBER_GGUF_INT32, {3})}));
    ember_gguf_value strs;
    strs.type     = EMBER_GGUF_ARRAY;
    strs.arr_type = EMBER_GGUF_STRING;
    strs.arr_n    = 1;
    strs.arr_str  = {"x"};
    ember_gguf_value empty_strs;
    empty_strs.type     = EMBER_GGUF_ARRAY;
    empty_strs.arr_type = EMBER_GGUF_STRING;
    w.set_value("t.nested_str", array_of_arrays({strs, empty_strs}));
    w.set_value("t.nested_3", array_of_arrays({array_of_arrays({array_of<double>(EMBER_GGUF_FLOAT64, {2.0})}),
                                               array_of_arrays({})}));
}

struct test_tensor {
    const char * name;
    ember_type   type;
    int32_t      n_dims;
    int64_t      ne[4];
};

// Odd sizes on purpose: most of them need padding after their data.
const test_tensor k_tensors[] = {
    {"f32.odd", EMBER_TYPE_F32, 2, {7, 3, 1, 1}},
    {"f16.vec", EMBER_TYPE_F16, 1, {65, 1, 1, 1}},
    {"q8_0.mat", EMBER_TYPE_Q8_0, 2, {64, 3, 1, 1}},
    {"q4_0.cube", EMBER_TYPE_Q4_0, 3, {32, 3, 2, 1}},
    {"f32.empty", EMBER_TYPE_F32, 2, {0, 4, 1, 1}},
    {"f32.4d", EMBER_TYPE_F32, 4, {2, 3, 1, 5}},
};

size_t tensor_bytes(const test_tensor & t) {
    size_t rows = 1;
    for (int d = 1; d < t.n_dims; d++) rows *= static_cast<size_t>(t.ne[d]);
    return ember_row_size(t.type, t.ne[0]) * rows;
}

ember_gguf_writer make_writer(uint32_t version, uint64_t alignment) {
    ember_gguf_writer w;
    w.version   = version;
    w.alignment = alignment;
    add_all_metadata(w);
    uint32_t seed = 1;
    for (const test_tensor & t : k_tensors) {
        std::vector<uint8_t> data = random_bytes(tensor_bytes(t), seed++);
        w.add_tensor(t.name, t.type, t.n_dims, t.ne, data.data());
    }
    return w;
}

// Everything the writer put in is in the parsed file, data bytes included.
void check_matches_writer(const ember_gguf_file & f, const ember_gguf_writer & w) {
    CHECK(f.version == w.version);
    CHECK(f.alignment == w.alignment);
    CHECK(f.data_offset % w.alignment == 0);
    size_t n_kv = w.kv.size() + (w.alignment != 32 ? 1 : 0);
    REQUIRE(f.kv.size() == n_kv);
    for (const ember_gguf_kv & kv : w.kv) {
        CAPTURE(kv.key);
        const ember_gguf_value * v = f.find(kv.key);
        REQUIRE(v != nullptr);
        CHECK(same_value(*v, kv.value));
    }
    if (w.alignment != 32) CHECK(f.get_u32("general.alignment", 0) == w.alignment);
    REQUIRE(f.tensors.size() == w.tensors.size());
    for (size_t i = 0; i < w.tensors.size(); i++) {
        const ember_gguf_tensor_info & wt = w.tensors[i];
        CAPTURE(wt.name);
        const ember_gguf_tensor_info * t = f.tensor(wt.name);
        REQUIRE(t != nullptr);
        CHECK(f.find_tensor(wt.name) == static_cast<int64_t>(i));
        CHECK(t->type == wt.type);
        CHECK(t->n_dims == wt.n_dims);
        for (int d = 0; d < 4; d++) CHECK(t->ne[d] == wt.ne[d]);
        CHECK(t->nbytes == w.tensor_bytes[i].size());
        CHECK(t->offset % w.alignment == 0);
        const uint8_t * p = f.tensor_data(*t);
        REQUIRE(p != nullptr);
        // The read buffer is 64-byte aligned and a mapping page-aligned, so data addresses
        // are as aligned as their file offsets (up to 64).
        CHECK(reinterpret_cast<uintptr_t>(p) % std::min<uint64_t>(w.alignment, 64) == 0);
        CHECK((w.tensor_bytes[i].empty() || std::memcmp(p, w.tensor_bytes[i].data(), t->nbytes) == 0));
    }
}

void write_file(const std::string & path, const std::vector<uint8_t> & b) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Uses every parsed field, so that under ASan a bad pointer or size in the result shows up.
uint64_t touch_everything(const ember_gguf_file & f) {
    uint64_t sum = 0;
    for (const ember_gguf_kv & kv : f.kv) sum += kv.key.size() + kv.value.to_string(4).size();
    for (const ember_gguf_tensor_info & t : f.tensors) {
        const uint8_t * p = f.tensor_data(t);
        if (p && t.nbytes > 0) sum += p[0] + p[t.nbytes - 1];
    }
    return sum;
}

// A small valid file for the truncation and mutation tests: a little of everything.
std::vector<uint8_t> small_valid_file(uint32_t version, uint64_t alignment) {
    ember_gguf_writer w;
    w.version   = version;
    w.alignment = alignment;
    w.set_str("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_f32("llama.rope.freq_base", 10000.0f);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_arr_str("tokenizer.ggml.tokens", {"<s>", "a", ""});
    w.set_arr_f32("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f});
    w.set_value("x.nested", array_of_arrays({array_of<int32_t>(EMBER_GGUF_INT32, {1, 2}), array_of_arrays({})}));
    const int64_t ne_a[2] = {8, 2};
    const int64_t ne_b[1] = {32};
    w.add_tensor("a", EMBER_TYPE_F32, 2, ne_a, random_bytes(64, 7).data());
    w.add_tensor("b", EMBER_TYPE_Q8_0, 1, ne_b, random_bytes(34, 8).data());
    return w.write_to_buffer();
}

// Bytes a file needs: the end of its last tensor (what follows is only padding).
uint64_t required_size(const ember_gguf_file & f) {
    uint64_t end = f.data_offset;
    for (const ember_gguf_tensor_info & t : f.tensors) end = std::max(end, f.data_offset + t.offset + t.nbytes);
    return end;
}

}  // namespace

TEST_SUITE("gguf") {

//
// Round trips
//

TEST_CASE("[gguf] writer round trip: every value type, tensors, versions and alignments") {
    for (uint32_t version : {2u, 3u}) {
        for (uint64_t alignment : {32ull, 64ull, 1ull, 256ull}) {
            CAPTURE(version);
            CAPTURE(alignment);
            ember_gguf_writer    w   = make_writer(version, alignment);
            std::vector<uint8_t> buf = w.write_to_buffer();
            CHECK(buf.size() % alignment == 0);
            auto f = parse(buf);
            check_matches_writer(*f, w);
            CHECK(f->file_size == buf.size());
            CHECK_FALSE(f->is_mmapped());
            REQUIRE(f->file_data() != nullptr);
            CHECK(std::memcmp(f->file_data(), buf.data(), buf.size()) == 0);
        }
    }
}

TEST_CASE("[gguf] write_to_file matches write_to_buffer and opens with and without mmap") {
    ember_gguf_writer w    = make_writer(3, 64);
    std::string       path = ember_test_tmp_dir() + "/round-trip.gguf";
    w.write_to_file(path);
    CHECK(read_file(path) == w.write_to_buffer());

    SUBCASE("mmap") {
        ember_gguf_open_params p;
        p.use_mmap = true;
        auto f     = ember_gguf_open(path, p);
        CHECK(f->is_mmapped());
        check_matches_writer(*f, w);
    }
    SUBCASE("read") {
        ember_gguf_open_params p;
        p.use_mmap = false;
        auto f     = ember_gguf_open(path, p);
        CHECK_FALSE(f->is_mmapped());
        check_matches_writer(*f, w);
    }
    SUBCASE("no_data") {
        for (bool mmap : {true, false}) {
            ember_gguf_open_params p;
            p.use_mmap = mmap;
            p.no_data  = true;
            auto f     = ember_gguf_open(path, p);
            CHECK(f->file_data() == nullptr);
            CHECK(f->tensors.size() == w.tensors.size());
            CHECK(f->tensor_data(f->tensors[0]) == nullptr);
            CHECK(f->get_str("t.str_utf8", "").size() > 0);
        }
    }
}

TEST_CASE("[gguf] writer: replacing keys, alignment key, copy_kv_from") {
    ember_gguf_writer w;
    w.set_u32("a", 1);
    w.set_str("a", "two");  // replaces, keeps one entry
    CHECK(w.kv.size() == 1);
    w.set_u32("general.alignment", 128);  // routed to the field
    CHECK(w.alignment == 128);
    CHECK(w.kv.size() == 1);
    auto f = parse(w.write_to_buffer());
    CHECK(f->alignment == 128);
    CHECK(f->get_str("a", "") == "two");

    ember_gguf_writer w2;
    w2.copy_kv_from(*f);
    CHECK(w2.alignment == 128);
    auto f2 = parse(w2.write_to_buffer());
    CHECK(f2->kv.size() == f->kv.size());
    CHECK(f2->get_str("a", "") == "two");
}

TEST_CASE("[gguf] writer refuses what the reader would reject") {
    ember_gguf_writer w;
    const int64_t     ne[2] = {33, 1};
    auto status_of = [](auto && fn) -> ember_status {
        try {
            fn();
        } catch (const ember_error & e) {
            return e.status;
        }
        return EMBER_OK;
    };
    CHECK(status_of([&] { w.add_tensor("q", EMBER_TYPE_Q8_0, 2, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.add_tensor(std::string(64, 'n'), EMBER_TYPE_F32, 1, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.add_tensor("d0", EMBER_TYPE_F32, 0, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.add_tensor("d5", EMBER_TYPE_F32, 5, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.add_tensor("bad", static_cast<ember_type>(1000), 1, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.add_tensor("ok", EMBER_TYPE_F32, 1, ne, nullptr); }) == EMBER_OK);  // nullptr: zeros
    CHECK(status_of([&] { w.add_tensor("ok", EMBER_TYPE_F32, 1, ne, nullptr); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.set_u32("", 1); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.set_u64("general.alignment", 64); }) == EMBER_ERR_INVALID_ARG);
    CHECK(status_of([&] { w.set_u32("general.alignment", 48); }) == EMBER_ERR_INVALID_ARG);

    ember_gguf_value bad = array_of<int32_t>(EMBER_GGUF_INT32, {1, 2});
    bad.arr_n            = 3;  // claims more than it holds
    w.set_value("bad", bad);
    CHECK(status_of([&] { w.write_to_buffer(); }) == EMBER_ERR_INVALID_ARG);
    w.set_value("bad", array_of<int32_t>(EMBER_GGUF_INT32, {1, 2}));
    CHECK(status_of([&] { w.write_to_buffer(); }) == EMBER_OK);

    ember_gguf_value deep = array_of<int32_t>(EMBER_GGUF_INT32, {1});
    for (int i = 0; i < 8; i++) deep = array_of_arrays({deep});  // 9 levels
    w.set_value("deep", deep);
    CHECK(status_of([&] { w.write_to_buffer(); }) == EMBER_ERR_INVALID_ARG);
    w.set_value("deep", array_of<int32_t>(EMBER_GGUF_INT32, {1}));

    w.version = 1;
    CHECK(status_of([&] { w.write_to_buffer(); }) == EMBER_ERR_INVALID_ARG);
    w.version   = 3;
    w.alignment = 24;
    CHECK(status_of([&] { w.write_to_buffer(); }) == EMBER_ERR_INVALID_ARG);
    w.alignment = 32;
    CHECK(status_of([&] { w.write_to_file(ember_test_tmp_dir() + "/no/such/dir/x.gguf"); }) == EMBER_ERR_IO);
    auto f = parse(w.write_to_buffer());
    REQUIRE(f->tensor("ok") != nullptr);
    const uint8_t * p = f->tensor_data(*f->tensor("ok"));
    CHECK(std::all_of(p, p + 33 * 4, [](uint8_t b) { return b == 0; }));
}

//
// Getters
//

TEST_CASE("[gguf] typed getters convert within range and name the key otherwise") {
    ember_gguf_writer w;
    w.set_u8("u8", 200);
    w.set_i32("neg", -5);
    w.set_u64("big", 1ull << 40);
    w.set_u64("huge", std::numeric_limits<uint64_t>::max());
    w.set_f32("f32", 1.5f);
    w.set_f64("f64", 2.25);
    w.set_f64("f64_big", 1e300);
    w.set_bool("flag", true);
    w.set_str("s", "text");
    w.set_arr_i32("arr", {1, 2, 3, 4, 5});
    auto f = parse(w.write_to_buffer());

    CHECK(f->get_u32("u8", 0) == 200);
    CHECK(f->get_u32("absent", 7) == 7);
    CHECK(f->get_f32("f32", 0) == 1.5f);
    CHECK(f->get_f32("f64", 0) == 2.25f);
    CHECK(f->get_bool("flag", false));
    CHECK(f->get_str("s", "") == "text");
    CHECK(f->require_u32("u8") == 200);
    CHECK(f->find("neg")->as_i64("neg") == -5);
    CHECK(f->find("big")->as_u64("big") == (1ull << 40));
    CHECK(f->find("u8")->as_f64("u8") == 200.0);
    CHECK(f->find("arr")->to_string(3) == "[1, 2, 3, ...]");
    CHECK(f->find("f32")->to_string() == "1.5");
    CHECK(f->find("s")->is_integer() == false);
    CHECK(f->find("flag")->is_integer());
    CHECK(f->find("f64")->is_number());

    auto message_of = [&](auto && fn) -> std::string {
        try {
            fn();
        } catch (const ember_error & e) {
            CHECK(e.status == EMBER_ERR_BAD_FORMAT);
            return e.what();
        }
        return "(no error)";
    };
    CHECK(contains(message_of([&] { f->get_u32("neg", 0); }), "neg"));
    CHECK(contains(message_of([&] { f->get_u32("big", 0); }), "big"));
    CHECK(contains(message_of([&] { f->get_u32("s", 0); }), "'s'"));
    CHECK(contains(message_of([&] { f->get_f32("u8", 0); }), "u8"));
    CHECK(contains(message_of([&] { f->get_f32("f64_big", 0); }), "f64_big"));
    CHECK(contains(message_of([&] { f->get_bool("u8", false); }), "u8"));
    CHECK(contains(message_of([&] { f->get_str("u8", ""); }), "u8"));
    CHECK(contains(message_of([&] { f->require_u32("missing.key"); }), "missing key 'missing.key'"));
    CHECK(contains(message_of([&] { f->find("huge")->as_i64("huge"); }), "huge"));
    CHECK(contains(message_of([&] { f->find("neg")->as_u64("neg"); }), "neg"));
}

//
// Real files
//

TEST_CASE("[gguf] known values of tiny-llama-F32") {
    std::string path = ember_test_data_path("fixtures/models/tiny-llama-F32.gguf");
    if (path.empty()) {
        MESSAGE("skipped: no data dir (pass --data-dir)");
        return;
    }
    for (bool mmap : {true, false}) {
        CAPTURE(mmap);
        ember_gguf_open_params p;
        p.use_mmap = mmap;
        auto f     = ember_gguf_open(path, p);
        CHECK(f->version == 3);
        CHECK(f->alignment == 32);
        CHECK(f->kv.size() == 25);
        CHECK(f->tensors.size() == 21);
        CHECK(f->data_offset == 12960);  // header ends at 12952
        CHECK(f->file_size == 7358112);
        CHECK(f->get_str("general.architecture", "") == "llama");
        CHECK(f->require_u32("llama.block_count") == 2);
        CHECK(f->require_u32("llama.embedding_length") == 256);
        CHECK(f->get_f32("llama.rope.freq_base", 0) == 10000.0f);
        CHECK(f->get_bool("tokenizer.ggml.add_bos_token", false));
        const ember_gguf_value * tokens = f->find("tokenizer.ggml.tokens");
        REQUIRE(tokens != nullptr);
        CHECK(tokens->arr_type == EMBER_GGUF_STRING);
        REQUIRE(tokens->arr_str.size() == 512);
        CHECK(tokens->arr_str[0] == "<unk>");
        const ember_gguf_tensor_info * t = f->tensor("token_embd.weight");
        REQUIRE(t != nullptr);
        CHECK(t->n_dims == 2);
        CHECK(t->ne[0] == 256);
        CHECK(t->ne[1] == 512);
        CHECK(t->type == EMBER_TYPE_F32);
        CHECK(t->nbytes == 256 * 512 * 4);
        CHECK(f->tensor("output.weight")->offset == 6820864);
        // The file was written by llama.cpp; re-writing it must give the same bytes.
        ember_gguf_writer w;
        w.copy_kv_from(*f);
        for (const ember_gguf_tensor_info & ti : f->tensors) {
            w.add_tensor(ti.name, ti.type, ti.n_dims, ti.ne, f->tensor_data(ti));
        }
        std::vector<uint8_t> again = w.write_to_buffer();
        CHECK(again.size() == f->file_size);
        CHECK((again.size() == f->file_size && std::memcmp(again.data(), f->file_data(), again.size()) == 0));
    }
}

TEST_CASE("[gguf] every fixture and model file opens and validates, with and without mmap") {
    if (ember_test_data_dir().empty()) {
        MESSAGE("skipped: no data dir (pass --data-dir)");
        return;
    }
    std::vector<std::string> paths;
    for (const char * dir : {"fixtures/models", "fixtures/vocab", "models"}) {
        std::string d = ember_test_data_path(dir);
        if (d.empty()) continue;
        for (const auto & e : std::filesystem::directory_iterator(d)) {
            if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
        }
    }
    std::sort(paths.begin(), paths.end());
    CHECK(paths.size() > 0);
    int opened = 0, unsupported = 0;
    for (const std::string & path : paths) {
        CAPTURE(path);
        ember_gguf_open_params p_map, p_read, p_head;
        p_read.use_mmap = false;
        p_head.no_data  = true;
        std::unique_ptr<ember_gguf_file> fm;
        try {
            fm = ember_gguf_open(path, p_map);
        } catch (const ember_error & e) {
            // A valid file whose tensor types this build lacks (k-quants, i-quants, ...).
            INFO(e.what());
            CHECK(e.status == EMBER_ERR_UNSUPPORTED);
            CHECK(contains(e.what(), "is not supported by this build"));
            // Only quantized models may need types the build lacks.
            CHECK(contains(path, "fixtures/models/"));
            CHECK_FALSE(contains(path, "-F32."));
            CHECK_FALSE(contains(path, "-F16."));
            unsupported++;
            continue;
        }
        auto fr = ember_gguf_open(path, p_read);
        auto fh = ember_gguf_open(path, p_head);
        opened++;
        CHECK(fm->is_mmapped());
        CHECK_FALSE(fr->is_mmapped());
        CHECK(std::memcmp(fm->file_data(), fr->file_data(), fm->file_size) == 0);
        for (const ember_gguf_file * f : {fr.get(), fh.get()}) {
            CHECK(f->file_size == fm->file_size);
            CHECK(f->data_offset == fm->data_offset);
            REQUIRE(f->kv.size() == fm->kv.size());
            for (size_t i = 0; i < f->kv.size(); i++) CHECK(same_value(f->kv[i].value, fm->kv[i].value));
            REQUIRE(f->tensors.size() == fm->tensors.size());
            for (size_t i = 0; i < f->tensors.size(); i++) {
                CHECK(f->tensors[i].name == fm->tensors[i].name);
                CHECK(f->tensors[i].offset == fm->tensors[i].offset);
                CHECK(f->tensors[i].nbytes == fm->tensors[i].nbytes);
            }
        }
        CHECK(fm->get_str("general.architecture", "").size() > 0);
        for (const ember_gguf_tensor_info & t : fm->tensors) {
            CHECK(t.nbytes == ember_row_size(t.type, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]));
            CHECK(fm->tensor_data(t) != nullptr);
            CHECK(fh->tensor_data(t) == nullptr);
        }
        touch_everything(*fm);
    }
    MESSAGE(opened << " files opened, " << unsupported << " need tensor types this build lacks");
    // The F32/F16 fixtures, the vocab files and the project models use only supported types.
    CHECK(opened >= 11);
}

TEST_CASE("[gguf] models/ember-kjv-25m-q8_0 and a vocab file") {
    std::string model = ember_test_data_path("models/ember-kjv-25m-q8_0.gguf");
    std::string vocab = ember_test_data_path("fixtures/vocab/ggml-vocab-gpt-2.gguf");
    if (model.empty() || vocab.empty()) {
        MESSAGE("skipped: no data dir (pass --data-dir)");
        return;
    }
    auto f = ember_gguf_open(model);
    CHECK(f->tensors.size() == 74);
    CHECK(f->require_u32("llama.block_count") == 8);
    const ember_gguf_tensor_info * t = f->tensor("token_embd.weight");
    REQUIRE(t != nullptr);
    CHECK(t->type == EMBER_TYPE_Q8_0);
    CHECK(t->ne[0] == 384);
    CHECK(t->ne[1] == 32000);
    CHECK(t->nbytes == 384 / 32 * 34 * 32000);

    // No tensors: the header runs to the last byte and the (empty) data section lies past it.
    ember_gguf_open_params p;
    p.no_data = true;
    auto v    = ember_gguf_open(vocab, p);
    CHECK(v->tensors.empty());
    CHECK(v->data_offset >= v->file_size);
    CHECK(v->find("tokenizer.ggml.tokens")->arr_str.size() == 50257);
    CHECK(v->find("tokenizer.ggml.merges")->arr_str.size() == 50000);
    CHECK(v->get_str("tokenizer.ggml.model", "") == "gpt2");
}

//
// Hostile input
//

TEST_CASE("[gguf] missing and unreadable files are I/O errors naming the path") {
    std::string missing = ember_test_tmp_dir() + "/does-not-exist.gguf";
    for (bool no_data : {false, true}) {
        for (bool mmap : {true, false}) {
            ember_gguf_open_params p;
            p.use_mmap = mmap;
            p.no_data  = no_data;
            try {
                ember_gguf_open(missing, p);
                FAIL("opened a missing file");
            } catch (const ember_error & e) {
                CHECK(e.status == EMBER_ERR_IO);
                CHECK(contains(e.what(), missing));
                CHECK(contains(e.what(), std::strerror(ENOENT)));
            }
            try {
                ember_gguf_open(ember_test_tmp_dir(), p);  // a directory
                FAIL("opened a directory");
            } catch (const ember_error & e) {
                CHECK(e.status == EMBER_ERR_IO);
            }
        }
    }
    std::string empty = ember_test_tmp_dir() + "/empty.gguf";
    write_file(empty, {});
    try {
        ember_gguf_open(empty);
        FAIL("opened an empty file");
    } catch (const ember_error & e) {
        CHECK(e.status == EMBER_ERR_BAD_FORMAT);
        CHECK(contains(e.what(), empty));
    }
}

TEST_CASE("[gguf] a file truncated at every length is rejected") {
    for (uint64_t alignment : {32ull, 64ull}) {
        std::vector<uint8_t> full = small_valid_file(3, alignment);
        const uint64_t       need = required_size(*parse(full));
        CAPTURE(alignment);
        for (size_t len = 0; len < full.size(); len++) {
            CAPTURE(len);
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
            if (len < need) {
                ember_error e = parse_error(cut);
                CHECK(e.status == EMBER_ERR_BAD_FORMAT);
            } else {
                CHECK(parse(cut)->tensors.size() == 2);  // only trailing padding is gone
            }
        }
    }
    // The streamed header-only path too (it reads the file in chunks).
    std::vector<uint8_t> full = small_valid_file(3, 32);
    const uint64_t       need = parse(full)->data_offset;
    std::string          path = ember_test_tmp_dir() + "/truncated.gguf";
    for (size_t len = 0; len < need; len += 7) {
        CAPTURE(len);
        write_file(path, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len)));
        ember_gguf_open_params p;
        p.no_data  = true;
        p.use_mmap = false;
        try {
            ember_gguf_open(path, p);
            FAIL("a header-only open accepted tensors past the end of the file");
        } catch (const ember_error & e) {
            CHECK(e.status == EMBER_ERR_BAD_FORMAT);
        }
    }
}

TEST_CASE("[gguf] the header of a real model truncated at every length is rejected") {
    std::string path = ember_test_data_path("fixtures/models/tiny-llama-F32.gguf");
    if (path.empty()) {
        MESSAGE("skipped: no data dir (pass --data-dir)");
        return;
    }
    auto                 f    = ember_gguf_open(path);
    std::vector<uint8_t> head(f->file_data(), f->file_data() + f->data_offset + 64);
    for (size_t len = 0; len < head.size(); len++) {
        CAPTURE(len);
        ember_error e = parse_error(std::vector<uint8_t>(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(len)));
        CHECK(e.status == EMBER_ERR_BAD_FORMAT);
    }
}

TEST_CASE("[gguf] random corruption either parses or throws ember_error") {
    // Values that tend to hit edge cases when written over a count, length, type or offset.
    const uint64_t interesting[] = {0,          1,          2,          3,          4,         5,        13,
                                    31,         32,         33,         63,         0x7f,      0x80,     0xff,
                                    0xffff,     0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32, 1ull << 40,
                                    1ull << 62, 1ull << 63, ~0ull,      ~0ull - 7};
    int parsed = 0, rejected = 0;
    for (uint32_t base_id = 0; base_id < 2; base_id++) {
        std::vector<uint8_t> base = base_id == 0 ? small_valid_file(3, 32) : small_valid_file(2, 64);
        std::mt19937         rng(1234 + base_id);
        for (int iter = 0; iter < 2500; iter++) {
            CAPTURE(base_id);
            CAPTURE(iter);
            std::vector<uint8_t> b         = base;
            int                  mutations = 1 + static_cast<int>(rng() % 4);
            for (int m = 0; m < mutations; m++) {
                size_t pos = rng() % b.size();
                switch (rng() % 4) {
                    case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                    case 1: b[pos] = static_cast<uint8_t>(rng()); break;
                    case 2: {
                        uint64_t v = interesting[rng() % (sizeof(interesting) / sizeof(interesting[0]))];
                        size_t   n = std::min<size_t>(rng() % 2 ? 8 : 4, b.size() - pos);
                        std::memcpy(b.data() + pos, &v, n);
                        break;
                    }
                    default: b.resize(pos); break;  // truncate as well
                }
                if (b.empty()) break;
            }
            try {
                auto f = parse(b);
                touch_everything(*f);
                parsed++;
            } catch (const ember_error & e) {
                CHECK((e.status == EMBER_ERR_BAD_FORMAT || e.status == EMBER_ERR_UNSUPPORTED));
                rejected++;
            } catch (const std::exception & e) {
                FAIL("unexpected exception: ", e.what());
            }
        }
    }
    MESSAGE(parsed << " mutated files parsed, " << rejected << " rejected");
    CHECK(rejected > 0);
}

TEST_CASE("[gguf] hand-crafted hostile headers are rejected with a precise message") {
    const uint64_t huge = 1ull << 62;

    SUBCASE("bad magic, versions") {
        gguf_builder b;
        b.raw("GGML", 4).u32(3).u64(0).u64(0);
        CHECK_REJECTED(b.b, EMBER_ERR_BAD_FORMAT, "bad magic");
        CHECK_REJECTED(gguf_builder().header(0, 0, 1).b, EMBER_ERR_BAD_FORMAT, "version 1");
        CHECK_REJECTED(gguf_builder().header(0, 0, 4).b, EMBER_ERR_BAD_FORMAT, "version 4");
        CHECK_REJECTED(gguf_builder().header(0, 0, 0x03000000).b, EMBER_ERR_BAD_FORMAT, "big-endian");
        CHECK(parse(gguf_builder().header(0, 0, 2).b)->version == 2);
        CHECK(parse(gguf_builder().header(0, 0, 3).b)->kv.empty());
        CHECK_REJECTED(gguf_builder().raw("GGUF", 4).u32(3).b, EMBER_ERR_BAD_FORMAT, "too small");
    }
    SUBCASE("huge counts") {
        CHECK_REJECTED(gguf_builder().header(0, huge).b, EMBER_ERR_BAD_FORMAT, "cannot fit");
        CHECK_REJECTED(gguf_builder().header(huge, 0).b, EMBER_ERR_BAD_FORMAT, "cannot fit");
        CHECK_REJECTED(gguf_builder().header(~0ull, ~0ull).zeros(1000).b, EMBER_ERR_BAD_FORMAT, "cannot fit");
        // Claims a bit more than the bytes could hold at the minimum size per kv.
        CHECK_REJECTED(gguf_builder().header(0, 10).zeros(100).b, EMBER_ERR_BAD_FORMAT, "cannot fit");
    }
    SUBCASE("huge string lengths") {
        CHECK_REJECTED(gguf_builder().header(0, 1).u64(huge).zeros(16).b, EMBER_ERR_BAD_FORMAT, "key length");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("my.key", 8).u64(~0ull).zeros(16).b, EMBER_ERR_BAD_FORMAT,
                       "key 'my.key'", "string value length");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("my.key", 8).u64(17).zeros(16).b, EMBER_ERR_BAD_FORMAT,
                       "key 'my.key'", "exceeds");
    }
    SUBCASE("huge arrays") {
        CHECK_REJECTED(gguf_builder().header(0, 1).key("arr.u8", 9).u32(0).u64(huge).zeros(64).b,
                       EMBER_ERR_BAD_FORMAT, "key 'arr.u8'", "cannot fit");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("arr.str", 9).u32(8).u64(~0ull).zeros(64).b,
                       EMBER_ERR_BAD_FORMAT, "key 'arr.str'", "cannot fit");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("arr.arr", 9).u32(9).u64(huge).zeros(64).b,
                       EMBER_ERR_BAD_FORMAT, "key 'arr.arr'", "cannot fit");
        // Fits the per-element minimum but the strings themselves run off the end.
        CHECK_REJECTED(gguf_builder().header(0, 1).key("arr.str", 9).u32(8).u64(8).u64(0).u64(1000).zeros(48).b,
                       EMBER_ERR_BAD_FORMAT, "key 'arr.str'");
    }
    SUBCASE("nesting") {
        auto nested = [](int levels) {
            gguf_builder b;
            b.header(0, 1).key("bomb", 9);
            for (int i = 0; i < levels - 1; i++) b.u32(9).u64(1);  // array of one array of ...
            b.u32(4).u64(1).u32(42);
            return b.b;
        };
        auto f = parse(nested(8));
        CHECK(f->find("bomb")->arr_arr.size() == 1);
        CHECK_REJECTED(nested(9), EMBER_ERR_BAD_FORMAT, "key 'bomb'", "nested deeper");
        CHECK_REJECTED(nested(100000), EMBER_ERR_BAD_FORMAT, "key 'bomb'", "nested deeper");
    }
    SUBCASE("bad value types") {
        CHECK_REJECTED(gguf_builder().header(0, 1).key("t.bad", 13).u64(0).b, EMBER_ERR_BAD_FORMAT, "key 't.bad'",
                       "value type 13");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("t.bad", 0xffffffff).u64(0).b, EMBER_ERR_BAD_FORMAT,
                       "key 't.bad'");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("t.arr", 9).u32(77).u64(0).zeros(8).b, EMBER_ERR_BAD_FORMAT,
                       "key 't.arr'", "element type 77");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("t.bool", 7).u8(2).zeros(8).b, EMBER_ERR_BAD_FORMAT,
                       "key 't.bool'", "bool");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("t.bools", 9).u32(7).u64(3).u8(1).u8(0).u8(9).zeros(8).b,
                       EMBER_ERR_BAD_FORMAT, "key 't.bools'", "element 2");
    }
    SUBCASE("bad keys") {
        CHECK_REJECTED(gguf_builder().header(0, 1).key("", 4).u32(1).zeros(8).b, EMBER_ERR_BAD_FORMAT, "empty key");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("a\nb", 4).u32(1).zeros(8).b, EMBER_ERR_BAD_FORMAT,
                       "control character");
        CHECK_REJECTED(gguf_builder().header(0, 2).kv_u32("dup.key", 1).kv_u32("dup.key", 2).b, EMBER_ERR_BAD_FORMAT,
                       "key 'dup.key'", "duplicate");
    }
    SUBCASE("general.alignment") {
        CHECK_REJECTED(gguf_builder().header(0, 1).kv_u32("general.alignment", 0).zeros(8).b, EMBER_ERR_BAD_FORMAT,
                       "general.alignment", "power of two");
        CHECK_REJECTED(gguf_builder().header(0, 1).kv_u32("general.alignment", 3).zeros(8).b, EMBER_ERR_BAD_FORMAT,
                       "general.alignment", "power of two");
        CHECK_REJECTED(gguf_builder().header(0, 1).key("general.alignment", 10).u64(64).zeros(8).b,
                       EMBER_ERR_BAD_FORMAT, "general.alignment", "must be u32");
        CHECK_REJECTED(gguf_builder().header(0, 1).kv_str("general.alignment", "32").zeros(8).b,
                       EMBER_ERR_BAD_FORMAT, "general.alignment", "must be u32");
        CHECK(parse(gguf_builder().header(0, 1).kv_u32("general.alignment", 1).b)->alignment == 1);
    }

    // A file with tensor infos, then its data section: padding + `data_bytes` zero bytes.
    auto with_tensors = [](const std::function<void(gguf_builder &)> & infos, uint64_t n_tensors,
                           size_t data_bytes, uint32_t alignment = 32) {
        gguf_builder b;
        b.header(n_tensors, alignment == 32 ? 0 : 1);
        if (alignment != 32) b.kv_u32("general.alignment", alignment);
        infos(b);
        b.pad(alignment).zeros(data_bytes);
        return b.b;
    };
    using gb = gguf_builder;

    SUBCASE("a valid hand-built file parses (the base of the cases below)") {
        auto f = parse(with_tensors([](gb & b) { b.tensor("w", {4, 2}, 0, 0).tensor("v", {32}, 8, 32); }, 2, 128));
        CHECK(f->tensors.size() == 2);
        CHECK(f->tensor("v")->nbytes == 34);
    }
    SUBCASE("n_dims") {
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.zero", {}, 0, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.zero'", "n_dims is 0");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.five", {1, 1, 1, 1, 1}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.five'", "n_dims is 5");
    }
    SUBCASE("element count and size overflow") {
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.big", {huge, 4}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.big'", "overflow");
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.bytes", {huge}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.bytes'", "overflow");
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.neg", {1ull << 63}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.neg'", "negative");
        // Empty, but the other dims still may not overflow (strides are built from them).
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.zero_big", {0, huge, huge}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.zero_big'", "overflow");
        auto f = parse(with_tensors([](gb & b) { b.tensor("t.empty", {0, 7}, 0, 0); }, 1, 0));
        CHECK(f->tensor("t.empty")->nbytes == 0);
        // Big but not overflowing: then it simply does not fit the file.
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.past", {1ull << 40}, 0, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.past'", "past the end");
    }
    SUBCASE("tensor types") {
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.type", {4}, 1000, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.type'", "unknown tensor type id 1000");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.retired", {4}, 4, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.retired'", "unknown tensor type id 4");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.neg_id", {4}, 0x80000000u, 0); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.neg_id'");
        // A real ggml type this build may lack is "unsupported", not "malformed".
        for (uint32_t id : {12u, 14u, 23u, 39u}) {
            if (ember_type_get_traits(static_cast<int32_t>(id))) continue;
            CAPTURE(id);
            CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor("t.k", {256}, id, 0); }, 1, 1024),
                           EMBER_ERR_UNSUPPORTED, "tensor 't.k'", "not supported");
        }
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.q8", {33}, 8, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.q8'", "not a multiple of the q8_0 block size 32");
    }
    SUBCASE("offsets") {
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.mis", {4}, 0, 4); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.mis'", "alignment 32");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.mis64", {4}, 0, 32); }, 1, 128, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.mis64'", "alignment 64");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.eof", {4}, 0, 64); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.eof'", "past the end");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.far", {4}, 0, ~0ull - 31); }, 1, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.far'", "past the end");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.edge", {4}, 0, 0); }, 1, 15), EMBER_ERR_BAD_FORMAT,
                       "tensor 't.edge'", "past the end");
        CHECK(parse(with_tensors([](gb & b) { b.tensor("t.edge", {4}, 0, 0); }, 1, 16))->tensors.size() == 1);
    }
    SUBCASE("overlapping tensors") {
        CHECK_REJECTED(
            with_tensors([](gb & b) { b.tensor("t.first", {16}, 0, 0).tensor("t.second", {8}, 0, 32); }, 2, 128),
            EMBER_ERR_BAD_FORMAT, "tensor 't.second'", "overlaps tensor 't.first'");
        // Listed out of order: the check sorts by offset.
        CHECK_REJECTED(
            with_tensors([](gb & b) { b.tensor("t.late", {8}, 0, 96).tensor("t.wide", {64}, 0, 0); }, 2, 256),
            EMBER_ERR_BAD_FORMAT, "tensor 't.late'", "overlaps tensor 't.wide'");
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.a", {8}, 0, 0).tensor("t.b", {8}, 0, 0); }, 2, 64),
                       EMBER_ERR_BAD_FORMAT, "overlaps");
        // Touching is fine.
        CHECK(parse(with_tensors([](gb & b) { b.tensor("t.a", {8}, 0, 0).tensor("t.b", {8}, 0, 32); }, 2, 64))
                  ->tensors.size() == 2);
    }
    SUBCASE("tensor names") {
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("t.dup", {8}, 0, 0).tensor("t.dup", {8}, 0, 32); }, 2, 64),
                       EMBER_ERR_BAD_FORMAT, "tensor 't.dup'", "duplicate");
        std::string long_name(64, 'x');
        CHECK_REJECTED(with_tensors([&](gb & b) { b.tensor(long_name, {8}, 0, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "xxxxxxxx", "limit is 63");
        CHECK(parse(with_tensors([&](gb & b) { b.tensor(std::string(63, 'y'), {8}, 0, 0); }, 1, 64))->tensors.size() ==
              1);
        CHECK_REJECTED(with_tensors([](gb & b) { b.tensor("", {8}, 0, 0); }, 1, 64), EMBER_ERR_BAD_FORMAT,
                       "empty tensor name");
    }
    SUBCASE("hostile text is escaped in messages") {
        ember_error e = parse_error(gguf_builder().header(0, 2).kv_u32("k\x1b[31m", 1).kv_u32("k\x1b[31m", 1).b);
        CHECK(e.status == EMBER_ERR_BAD_FORMAT);
        CHECK(std::string(e.what()).find('\x1b') == std::string::npos);
        CHECK(contains(e.what(), "\\x1b"));
    }
}

}  // TEST_SUITE("gguf")
