// ember_model_quantize: the llama.cpp fixtures re-made byte for byte, the per-tensor rules on
// generated models, the conversion loop, the metadata, refusals, cancellation, importance
// matrices and the streaming output.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ember.h"
#include "quant/types.h"
#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/imatrix.h"
#include "runtime/quantize-recipe.h"
#include "support/data-path.h"
#include "support/tiny-model.h"

namespace {

namespace fs = std::filesystem;

// A fresh directory per test case, so leftover files are easy to see.
std::string fresh_dir(const std::string & name) {
    const std::string d = ember_test_tmp_dir() + "/quantize-" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::vector<std::string> files_in(const std::string & dir) {
    std::vector<std::string> out;
    for (const auto & e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

ember_status quantize(const std::string & in, const std::string & out, const char * ftype, ember_quantize_params p) {
    p.ftype = ftype;
    return ember_model_quantize(in.c_str(), out.c_str(), &p);
}

ember_status quantize(const std::string & in, const std::string & out, const char * ftype) {
    ember_quantize_params p = ember_quantize_default_params();
    p.n_threads             = 2;
    return quantize(in, out, ftype, p);
}

std::map<std::string, ember_type> types_of(const ember_gguf_file & f) {
    std::map<std::string, ember_type> m;
    for (const ember_gguf_tensor_info & t : f.tensors) m[t.name] = t.type;
    return m;
}

// The bytes from_float (row by row) makes of a tensor of `src`, converting its type to floats
// first: what the quantizer must write without an imatrix.
std::vector<uint8_t> expected_bytes(const ember_gguf_file & src, const std::string & name, ember_type to) {
    const ember_gguf_tensor_info & t   = *src.tensor(name);
    const int64_t                  ne0 = t.ne[0], rows = t.ne[1] * t.ne[2] * t.ne[3];
    const ember_type_traits *      ti  = ember_type_get_traits(t.type);
    const ember_type_traits *      tt  = ember_type_get_traits(to);
    std::vector<float>             row(static_cast<size_t>(ne0));
    std::vector<uint8_t>           out(ember_row_size(to, ne0) * size_t(rows));
    for (int64_t r = 0; r < rows; r++) {
        ti->to_float(src.tensor_data(t) + ember_row_size(t.type, ne0) * size_t(r), row.data(), ne0);
        tt->from_float(row.data(), out.data() + ember_row_size(to, ne0) * size_t(r), ne0);
    }
    return out;
}

bool tensor_equals(const ember_gguf_file & f, const std::string & name, const std::vector<uint8_t> & bytes) {
    const ember_gguf_tensor_info * t = f.tensor(name);
    return t && t->nbytes == bytes.size() && std::memcmp(f.tensor_data(*t), bytes.data(), bytes.size()) == 0;
}

std::string read_all(const std::string & path) {
    std::ifstream      f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

tiny_model_spec spec_with(int32_t n_embd, int32_t n_ff, int32_t n_layer, int32_t weight_type, const std::string & name) {
    tiny_model_spec s;
    s.n_embd      = n_embd;
    s.n_ff        = n_ff;
    s.n_layer     = n_layer;
    s.n_vocab     = 256;
    s.weight_type = weight_type;
    s.name        = name;
    return s;
}

}  // namespace

TEST_SUITE("runtime") {

TEST_CASE("[quantize] the llama.cpp fixtures: same tensor types and bytes as llama-quantize") {
    const std::string src = ember_test_data_path("fixtures/models/tiny-llama-F32.gguf");
    if (src.empty()) {
        MESSAGE("shared fixtures absent (--data-dir): skipped");
        return;
    }
    const std::string dir = fresh_dir("fixtures");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"llama", "Q8_0"},   {"llama", "Q4_0"},   {"llama", "Q4_1"},   {"llama", "Q5_0"},   {"llama", "Q5_1"},
        {"llama", "Q2_K"},   {"llama", "Q3_K_M"}, {"llama", "Q4_K_M"}, {"llama", "Q5_K_M"}, {"llama", "Q6_K"},
        {"llama", "IQ4_NL"}, {"llama", "IQ4_XS"}, {"qwen3", "Q4_K_M"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.first);
        CAPTURE(c.second);
        const std::string in  = ember_test_data_path("fixtures/models/tiny-" + c.first + "-F32.gguf");
        const std::string ref = ember_test_data_path("fixtures/models/tiny-" + c.first + "-" + c.second + ".gguf");
        REQUIRE(!in.empty());
        REQUIRE(!ref.empty());
        const std::string out = dir + "/" + c.first + "-" + c.second + ".gguf";
        REQUIRE_MESSAGE(quantize(in, out, c.second.c_str()) == EMBER_OK, ember_last_error());
        const auto got  = ember_gguf_open(out);
        const auto want = ember_gguf_open(ref);
        REQUIRE(got->tensors.size() == want->tensors.size());
        int n_quantized = 0;
        for (const ember_gguf_tensor_info & w : want->tensors) {
            CAPTURE(w.name);
            const ember_gguf_tensor_info * g = got->tensor(w.name);
            REQUIRE(g != nullptr);
            CHECK(ember_type_get_name(g->type) == std::string(ember_type_get_name(w.type)));
            for (int d = 0; d < 4; d++) CHECK(g->ne[d] == w.ne[d]);
            REQUIRE(g->nbytes == w.nbytes);
            CHECK(std::memcmp(got->tensor_data(*g), want->tensor_data(w), w.nbytes) == 0);
            n_quantized += ember_type_get_traits(w.type)->is_quantized;
        }
        CHECK(n_quantized >= 14);  // every matrix of the two-layer models
        CHECK(got->get_u32("general.file_type", 999) == want->get_u32("general.file_type", 998));
        CHECK(got->get_u32("general.quantization_version", 0) == 2);
    }
    CHECK(files_in(dir).size() == cases.size());  // no temporary files left
}

TEST_CASE("[quantize] target names: llama-quantize's spellings, aliases and Ember's types") {
    ember_quant_ftype f;
    REQUIRE(ember_quant_ftype_from_name("q4_k_m", f));
    CHECK(f.name == "Q4_K_M");
    CHECK(f.file_type == 15);
    CHECK(f.base == EMBER_TYPE_Q4_K);
    REQUIRE(ember_quant_ftype_from_name("Q4_K", f));  // llama-quantize's alias
    CHECK(f.name == "Q4_K_M");
    REQUIRE(ember_quant_ftype_from_name("q5_k", f));
    CHECK(f.name == "Q5_K_M");
    REQUIRE(ember_quant_ftype_from_name("15", f));  // the file type number, as llama-quantize takes it
    CHECK(f.name == "Q4_K_M");
    REQUIRE(ember_quant_ftype_from_name("Q3_K_L", f));
    CHECK(f.file_type == 13);
    REQUIRE(ember_quant_ftype_from_name("q8_0", f));
    CHECK(f.file_type == 7);
    REQUIRE(ember_quant_ftype_from_name("bf16", f));
    CHECK(f.file_type == 32);
    REQUIRE(ember_quant_ftype_from_name("iq4_xs", f));
    CHECK(f.file_type == 30);
    for (const char * name : {"INT4", "int4_g32", "NF4", "FP8_E4M3", "fp8_e5m2", "FP8_E4M3_ROW", "fp8_e5m2_row"}) {
        CAPTURE(name);
        REQUIRE(ember_quant_ftype_from_name(name, f));
        CHECK_FALSE(f.llama);
        CHECK(f.file_type >= EMBER_QUANT_FILE_TYPE_FIRST);
        CHECK(f.base >= EMBER_TYPE_EMBER_FIRST);
        ember_quant_ftype back;
        REQUIRE(ember_quant_ftype_from_file_type(f.file_type, back));
        CHECK(back.base == f.base);
    }
    for (const char * bad : {"", "q4", "Q4_K_X", "q8_1", "q8_k", "i32", "IQ2_XXS", "Q4_0 ", "5", "99999", "123456"}) {
        CAPTURE(bad);
        CHECK_FALSE(ember_quant_ftype_from_name(bad, f));
    }
}

TEST_CASE("[quantize] rows that do not fit 256-blocks get llama.cpp's fallback types; bytes as from_float makes them") {
    // n_embd 64: every matrix but ffn_down (rows of n_ff = 512) needs a fallback.
    const std::string dir = fresh_dir("fallback");
    const std::string in  = ember_test_make_tiny_model(spec_with(64, 512, 2, EMBER_TYPE_F16, "f16-e64"), dir);
    const auto        src = ember_gguf_open(in);
    struct want {
        const char * ftype;
        ember_type   matrix, ffn_down_0, ffn_down_1, attn_v_1, output;
    };
    const want wants[] = {
        // llama.cpp: Q4_K -> Q5_0, Q6_K -> Q8_0, Q5_K -> Q5_1, Q2_K/Q3_K -> Q4_0; output -> Q8_0
        {"Q4_K_M", EMBER_TYPE_Q5_0, EMBER_TYPE_Q4_K, EMBER_TYPE_Q6_K, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0},
        {"Q5_K_S", EMBER_TYPE_Q5_1, EMBER_TYPE_Q5_K, EMBER_TYPE_Q5_K, EMBER_TYPE_Q5_1, EMBER_TYPE_Q8_0},
        {"Q2_K", EMBER_TYPE_Q4_0, EMBER_TYPE_Q3_K, EMBER_TYPE_Q3_K, EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0},
        {"Q6_K", EMBER_TYPE_Q8_0, EMBER_TYPE_Q6_K, EMBER_TYPE_Q6_K, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0},
        {"IQ4_XS", EMBER_TYPE_IQ4_NL, EMBER_TYPE_IQ4_XS, EMBER_TYPE_IQ4_XS, EMBER_TYPE_IQ4_NL, EMBER_TYPE_Q8_0},
        {"Q4_0", EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, EMBER_TYPE_Q4_0, EMBER_TYPE_Q8_0},
        {"Q8_0", EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0, EMBER_TYPE_Q8_0},
    };
    for (const want & w : wants) {
        CAPTURE(w.ftype);
        const std::string out = dir + "/" + w.ftype + ".gguf";
        REQUIRE_MESSAGE(quantize(in, out, w.ftype) == EMBER_OK, ember_last_error());
        const auto f = ember_gguf_open(out);
        auto       t = types_of(*f);
        CHECK(t["blk.0.attn_q.weight"] == w.matrix);
        CHECK(t["blk.1.ffn_gate.weight"] == w.matrix);
        CHECK(t["token_embd.weight"] == w.matrix);
        CHECK(t["blk.0.ffn_down.weight"] == w.ffn_down_0);
        CHECK(t["blk.1.ffn_down.weight"] == w.ffn_down_1);
        CHECK(t["blk.1.attn_v.weight"] == w.attn_v_1);
        CHECK(t["output.weight"] == w.output);
        CHECK(t["blk.0.attn_norm.weight"] == EMBER_TYPE_F32);
        CHECK(t["output_norm.weight"] == EMBER_TYPE_F32);
        for (const ember_gguf_tensor_info & ti : f->tensors) {
            CAPTURE(ti.name);
            if (ti.type == src->tensor(ti.name)->type) {
                CHECK(tensor_equals(*f, ti.name, std::vector<uint8_t>(src->tensor_data(*src->tensor(ti.name)),
                                                                      src->tensor_data(*src->tensor(ti.name)) + ti.nbytes)));
            } else {
                CHECK(tensor_equals(*f, ti.name, expected_bytes(*src, ti.name, ti.type)));
            }
        }
    }
}

TEST_CASE("[quantize] the use-more-bits layers of Q4_K_M and Q3_K_M (8 layers)") {
    // llama.cpp: with 8 layers, attn_v and ffn_down of layers 0, 3, 6, 7 get Q6_K in Q4_K_M;
    // in Q3_K_M the first two attn_v get Q5_K and the others Q4_K, attn_output Q4_K, and
    // ffn_down Q4_K (layer 0: 0 < 8/16 is false).
    const std::string dir = fresh_dir("more-bits");
    const std::string in  = ember_test_make_tiny_model(spec_with(256, 256, 8, EMBER_TYPE_F32, "f32-l8"), dir);
    REQUIRE(quantize(in, dir + "/q4km.gguf", "Q4_K_M") == EMBER_OK);
    REQUIRE(quantize(in, dir + "/q3km.gguf", "Q3_K_M") == EMBER_OK);
    auto q4 = types_of(*ember_gguf_open(dir + "/q4km.gguf"));
    auto q3 = types_of(*ember_gguf_open(dir + "/q3km.gguf"));
    for (int l = 0; l < 8; l++) {
        CAPTURE(l);
        const std::string b     = "blk." + std::to_string(l) + ".";
        const bool        more  = l == 0 || l == 3 || l == 6 || l == 7;
        CHECK(q4[b + "attn_v.weight"] == (more ? EMBER_TYPE_Q6_K : EMBER_TYPE_Q4_K));
        CHECK(q4[b + "ffn_down.weight"] == (more ? EMBER_TYPE_Q6_K : EMBER_TYPE_Q4_K));
        CHECK(q4[b + "attn_q.weight"] == EMBER_TYPE_Q4_K);
        CHECK(q3[b + "attn_v.weight"] == (l < 2 ? EMBER_TYPE_Q5_K : EMBER_TYPE_Q4_K));
        CHECK(q3[b + "attn_output.weight"] == EMBER_TYPE_Q4_K);
        CHECK(q3[b + "ffn_down.weight"] == EMBER_TYPE_Q4_K);
        CHECK(q3[b + "ffn_up.weight"] == EMBER_TYPE_Q3_K);
    }
    CHECK(q4["output.weight"] == EMBER_TYPE_Q6_K);
    CHECK(q3["output.weight"] == EMBER_TYPE_Q6_K);
    CHECK(q4["token_embd.weight"] == EMBER_TYPE_Q4_K);

    {
        // --pure: every matrix the one type
        ember_quantize_params p = ember_quantize_default_params();
        p.pure                  = 1;
        REQUIRE(quantize(in, dir + "/pure.gguf", "Q4_K_M", p) == EMBER_OK);
        for (const auto & e : types_of(*ember_gguf_open(dir + "/pure.gguf"))) {
            CAPTURE(e.first);
            CHECK(e.second == (e.first.find("norm") != std::string::npos ? EMBER_TYPE_F32 : EMBER_TYPE_Q4_K));
        }
    }
    {
        // explicit output and token embedding types
        ember_quantize_params p = ember_quantize_default_params();
        p.output_tensor_type    = EMBER_TYPE_Q8_0;
        p.token_embd_type       = EMBER_TYPE_F16;
        REQUIRE(quantize(in, dir + "/over.gguf", "Q4_K_M", p) == EMBER_OK);
        auto t = types_of(*ember_gguf_open(dir + "/over.gguf"));
        CHECK(t["output.weight"] == EMBER_TYPE_Q8_0);
        CHECK(t["token_embd.weight"] == EMBER_TYPE_F16);
        CHECK(t["blk.0.attn_q.weight"] == EMBER_TYPE_Q4_K);
    }
}

TEST_CASE("[quantize] tied embeddings: token_embd takes the output rule") {
    const std::string dir  = fresh_dir("tied");
    tiny_model_spec   spec = spec_with(256, 256, 2, EMBER_TYPE_F32, "tied");
    spec.tied              = true;
    const std::string in   = ember_test_make_tiny_model(spec, dir);
    REQUIRE(quantize(in, dir + "/q4.gguf", "Q4_0") == EMBER_OK);
    auto t = types_of(*ember_gguf_open(dir + "/q4.gguf"));
    CHECK(t.count("output.weight") == 0);
    CHECK(t["token_embd.weight"] == EMBER_TYPE_Q6_K);
    CHECK(t["blk.0.attn_q.weight"] == EMBER_TYPE_Q4_0);
}

TEST_CASE("[quantize] threads do not change a byte; F16 and BF16 targets; metadata") {
    const std::string dir = fresh_dir("threads");
    const std::string in  = ember_test_make_tiny_model(spec_with(256, 512, 2, EMBER_TYPE_F32, "f32"), dir);
    for (const char * ftype : {"Q4_K_M", "Q2_K", "IQ4_XS"}) {
        CAPTURE(ftype);
        ember_quantize_params p = ember_quantize_default_params();
        p.n_threads             = 1;
        REQUIRE(quantize(in, dir + "/t1.gguf", ftype, p) == EMBER_OK);
        p.n_threads = 7;
        REQUIRE(quantize(in, dir + "/t7.gguf", ftype, p) == EMBER_OK);
        CHECK(read_all(dir + "/t1.gguf") == read_all(dir + "/t7.gguf"));
    }
    for (const char * ftype : {"F16", "BF16", "F32"}) {
        CAPTURE(ftype);
        const std::string out = dir + "/" + ftype + ".gguf";
        REQUIRE(quantize(in, out, ftype) == EMBER_OK);
        const auto f   = ember_gguf_open(out);
        const auto src = ember_gguf_open(in);
        for (const ember_gguf_tensor_info & t : f->tensors) {
            CAPTURE(t.name);
            const bool matrix = t.name.find("norm") == std::string::npos;
            CHECK(t.type == (matrix ? ember_type_by_name(ftype) : EMBER_TYPE_F32));
            if (t.type != EMBER_TYPE_F32) CHECK(tensor_equals(*f, t.name, expected_bytes(*src, t.name, t.type)));
        }
    }
    // Metadata: every input key kept (file type replaced), plus the quantizer's.
    const auto src = ember_gguf_open(in);
    const auto out = ember_gguf_open(dir + "/t7.gguf");
    for (const ember_gguf_kv & kv : src->kv) {
        CAPTURE(kv.key);
        const ember_gguf_value * v = out->find(kv.key);
        REQUIRE(v != nullptr);
        if (kv.key != "general.file_type") CHECK(v->to_string(1u << 20) == kv.value.to_string(1u << 20));
    }
    CHECK(out->get_u32("general.file_type", 0) == 30);  // IQ4_XS
    CHECK(out->get_u32("general.quantization_version", 0) == 2);
    CHECK(out->get_str("ember.quantization.ftype", "") == "IQ4_XS");
    CHECK(out->get_str("ember.quantization.tool_version", "").find(ember_version_string()) != std::string::npos);
    CHECK(out->find("ember.quantization.imatrix.file") == nullptr);
    CHECK(files_in(dir).size() == 6);  // f32.gguf t1 t7 F16 BF16 F32: no temporary files
}

TEST_CASE("[quantize] refusals: bad type, same file, requantizing, broken input") {
    const std::string dir = fresh_dir("refuse");
    const std::string in  = ember_test_make_tiny_model(spec_with(64, 128, 2, EMBER_TYPE_F32, "f32"), dir);

    CHECK(quantize(in, dir + "/x.gguf", "Q4_K_X") == EMBER_ERR_INVALID_ARG);
    CHECK(std::string(ember_last_error()).find("Q4_K_X") != std::string::npos);
    CHECK(quantize(in, dir + "/x.gguf", "q8_1") == EMBER_ERR_INVALID_ARG);

    // The same file, by the same path and by another one (./, a hard link).
    CHECK(quantize(in, in, "Q8_0") == EMBER_ERR_INVALID_ARG);
    CHECK(quantize(in, dir + "/./f32.gguf", "Q8_0") == EMBER_ERR_INVALID_ARG);
    REQUIRE(::link(in.c_str(), (dir + "/hard.gguf").c_str()) == 0);
    CHECK(quantize(in, dir + "/hard.gguf", "Q8_0") == EMBER_ERR_INVALID_ARG);
    CHECK(std::string(ember_last_error()).find("input") != std::string::npos);
    ::unlink((dir + "/hard.gguf").c_str());

    CHECK(quantize(in, dir, "Q8_0") == EMBER_ERR_INVALID_ARG);                     // a directory
    CHECK(quantize(in, dir + "/no/such/dir/x.gguf", "Q8_0") == EMBER_ERR_IO);     // no directory
    CHECK(quantize(dir + "/missing.gguf", dir + "/x.gguf", "Q8_0") == EMBER_ERR_IO);

    // Already quantized input: refused unless allowed; tensors already of the target type pass.
    REQUIRE(quantize(in, dir + "/q8.gguf", "Q8_0") == EMBER_OK);
    CHECK(quantize(dir + "/q8.gguf", dir + "/x.gguf", "Q4_0") == EMBER_ERR_INVALID_ARG);
    CHECK(std::string(ember_last_error()).find("allow-requantize") != std::string::npos);
    CHECK(quantize(dir + "/q8.gguf", dir + "/same.gguf", "Q8_0") == EMBER_OK);
    ember_quantize_params p = ember_quantize_default_params();
    p.allow_requantize      = 1;
    REQUIRE(quantize(dir + "/q8.gguf", dir + "/re.gguf", "Q4_0", p) == EMBER_OK);
    {
        const auto q8 = ember_gguf_open(dir + "/q8.gguf");
        const auto re = ember_gguf_open(dir + "/re.gguf");
        CHECK(re->tensor("blk.0.attn_q.weight")->type == EMBER_TYPE_Q4_0);
        CHECK(tensor_equals(*re, "blk.0.attn_q.weight", expected_bytes(*q8, "blk.0.attn_q.weight", EMBER_TYPE_Q4_0)));
    }

    // A truncated GGUF file and a file that is not GGUF at all.
    const std::string whole = read_all(in);
    std::ofstream(dir + "/trunc.gguf", std::ios::binary) << whole.substr(0, whole.size() / 2);
    CHECK(quantize(dir + "/trunc.gguf", dir + "/x.gguf", "Q8_0") == EMBER_ERR_BAD_FORMAT);
    std::ofstream(dir + "/text.gguf", std::ios::binary) << "hello";
    CHECK(quantize(dir + "/text.gguf", dir + "/x.gguf", "Q8_0") == EMBER_ERR_BAD_FORMAT);

    // An explicit type that cannot hold the rows (64 columns, q4_k needs 256).
    p                    = ember_quantize_default_params();
    p.output_tensor_type = EMBER_TYPE_Q4_K;
    CHECK(quantize(in, dir + "/x.gguf", "Q8_0", p) == EMBER_ERR_INVALID_ARG);
    p.output_tensor_type = EMBER_TYPE_Q8_1;  // not a target
    CHECK(quantize(in, dir + "/x.gguf", "Q8_0", p) == EMBER_ERR_INVALID_ARG);

    // Bad arguments through the C API.
    CHECK(ember_model_quantize(nullptr, "x", nullptr) == EMBER_ERR_INVALID_ARG);
    CHECK(ember_model_quantize(in.c_str(), nullptr, nullptr) == EMBER_ERR_INVALID_ARG);
    p            = ember_quantize_default_params();
    p.struct_size = 0;
    CHECK(ember_model_quantize(in.c_str(), (dir + "/x.gguf").c_str(), &p) == EMBER_ERR_INVALID_ARG);

    const std::vector<std::string> want = {"f32.gguf", "q8.gguf", "re.gguf", "same.gguf", "text.gguf", "trunc.gguf"};
    CHECK(files_in(dir) == want);  // no x.gguf and no temporary file from any failed run
}

TEST_CASE("[quantize] cancelling from the progress callback leaves no output and keeps an older file") {
    const std::string dir = fresh_dir("cancel");
    const std::string in  = ember_test_make_tiny_model(spec_with(64, 128, 2, EMBER_TYPE_F32, "f32"), dir);
    const std::string out = dir + "/out.gguf";
    std::ofstream(out) << "an older file";
    struct counter {
        int calls = 0, stop_at = 3;
        std::vector<std::string> names;
    } c;
    ember_quantize_params p = ember_quantize_default_params();
    p.progress_user_data    = &c;
    p.progress_callback     = [](int32_t i, int32_t n, const char * name, int32_t type, double mbps, void * ud) -> int {
        counter * k = static_cast<counter *>(ud);
        k->calls++;
        CHECK(i == k->calls);
        CHECK(n > 3);
        CHECK(ember_type_name(type) != nullptr);
        CHECK(mbps >= 0);
        k->names.push_back(name);
        return k->calls == k->stop_at;
    };
    CHECK(quantize(in, out, "Q8_0", p) == EMBER_ERR_CANCELLED);
    CHECK(c.calls == 3);
    CHECK(read_all(out) == "an older file");
    CHECK(files_in(dir) == std::vector<std::string>{"f32.gguf", "out.gguf"});

    c = counter{};
    c.stop_at = -1;
    REQUIRE(quantize(in, out, "Q8_0", p) == EMBER_OK);
    const auto f = ember_gguf_open(out);
    CHECK(size_t(c.calls) == f->tensors.size());
    CHECK(c.names.front() == f->tensors.front().name);
}

TEST_CASE("[quantize] dry run writes nothing") {
    const std::string dir = fresh_dir("dry");
    const std::string in  = ember_test_make_tiny_model(spec_with(64, 128, 2, EMBER_TYPE_F32, "f32"), dir);
    ember_quantize_params p = ember_quantize_default_params();
    p.dry_run               = 1;
    CHECK(quantize(in, dir + "/x.gguf", "Q4_K_M", p) == EMBER_OK);
    CHECK(ember_model_quantize(in.c_str(), nullptr, &p) == EMBER_OK);
    CHECK(files_in(dir) == std::vector<std::string>{"f32.gguf"});
}

TEST_CASE("[quantize] importance matrices: legacy .dat and GGUF read alike; the imatrix rules apply") {
    const std::string dir = fresh_dir("imatrix");
    const std::string in  = ember_test_make_tiny_model(spec_with(64, 128, 8, EMBER_TYPE_F32, "f32-l8"), dir);
    const auto        src = ember_gguf_open(in);

    // Means of squares per column, stored as llama-imatrix stores them.
    std::map<std::string, std::vector<float>> means;
    for (const ember_gguf_tensor_info & t : src->tensors) {
        if (t.n_dims < 2 || t.name == "token_embd.weight") continue;
        std::vector<float> v(static_cast<size_t>(t.ne[0]));
        for (size_t i = 0; i < v.size(); i++) v[i] = 0.5f + 0.01f * float((i * 7 + t.name.size()) % 50);
        means[t.name] = v;
    }
    const int32_t ncall = 10;
    {
        std::ofstream f(dir + "/im.dat", std::ios::binary);
        auto          put = [&](int32_t x) { f.write(reinterpret_cast<const char *>(&x), 4); };
        put(int32_t(means.size()));
        for (const auto & e : means) {
            put(int32_t(e.first.size()));
            f.write(e.first.data(), std::streamsize(e.first.size()));
            put(ncall);
            put(int32_t(e.second.size()));
            for (float m : e.second) {
                const float stored = m * float(ncall);
                f.write(reinterpret_cast<const char *>(&stored), 4);
            }
        }
        put(42);  // chunk count
        put(4);
        f.write("wiki", 4);
    }
    {
        ember_gguf_writer w;
        w.set_str("general.type", "imatrix");
        w.set_arr_str("imatrix.datasets", {"wiki"});
        w.set_u32("imatrix.chunk_count", 42);
        w.set_u32("imatrix.chunk_size", 512);
        for (const auto & e : means) {
            const float          count = 24.0f;
            std::vector<float>   sums(e.second.size());
            for (size_t i = 0; i < sums.size(); i++) sums[i] = e.second[i] * count;
            const int64_t ne_s[2] = {int64_t(sums.size()), 1}, ne_c[2] = {1, 1};
            w.add_tensor(e.first + ".in_sum2", EMBER_TYPE_F32, 2, ne_s, sums.data());
            w.add_tensor(e.first + ".counts", EMBER_TYPE_F32, 2, ne_c, &count);
        }
        w.write_to_file(dir + "/im.gguf");
    }
    const ember_imatrix a = ember_imatrix_load(dir + "/im.dat");
    const ember_imatrix b = ember_imatrix_load(dir + "/im.gguf");
    CHECK(a.legacy);
    CHECK_FALSE(b.legacy);
    CHECK(a.chunk_count == 42);
    CHECK(b.chunk_count == 42);
    CHECK(a.datasets == std::vector<std::string>{"wiki"});
    CHECK(b.datasets == std::vector<std::string>{"wiki"});
    REQUIRE(a.entries.size() == means.size());
    REQUIRE(b.entries.size() == means.size());
    for (const auto & e : means) {
        CAPTURE(e.first);
        REQUIRE(a.find(e.first) != nullptr);
        REQUIRE(b.find(e.first) != nullptr);
        for (size_t i = 0; i < e.second.size(); i++) {
            CHECK((*a.find(e.first))[i] == doctest::Approx(e.second[i]).epsilon(1e-6));
            CHECK((*b.find(e.first))[i] == doctest::Approx(e.second[i]).epsilon(1e-6));
        }
    }

    // With an imatrix, Q4_0 guards the first eighth of the ffn_down layers with Q4_1.
    for (const char * im : {"/im.dat", "/im.gguf"}) {
        CAPTURE(im);
        ember_quantize_params p = ember_quantize_default_params();
        const std::string     path = dir + im;
        p.imatrix_path          = path.c_str();
        REQUIRE_MESSAGE(quantize(in, dir + "/q4.gguf", "Q4_0", p) == EMBER_OK, ember_last_error());
        const auto f = ember_gguf_open(dir + "/q4.gguf");
        CHECK(f->tensor("blk.0.ffn_down.weight")->type == EMBER_TYPE_Q4_1);
        CHECK(f->tensor("blk.1.ffn_down.weight")->type == EMBER_TYPE_Q4_0);
        CHECK(f->get_str("ember.quantization.imatrix.file", "") == path);
        CHECK(f->get_str("quantize.imatrix.dataset", "") == "wiki");
        CHECK(f->get_u32("quantize.imatrix.chunks_count", 0) == 42);
    }
    REQUIRE(quantize(in, dir + "/plain.gguf", "Q4_0") == EMBER_OK);
    CHECK(ember_gguf_open(dir + "/plain.gguf")->tensor("blk.0.ffn_down.weight")->type == EMBER_TYPE_Q4_0);

    // Broken matrices are refused with a reason.
    {
        std::ofstream(dir + "/bad.dat", std::ios::binary) << std::string("\x02\x00\x00\x00\x05\x00\x00\x00", 8);
        ember_quantize_params p = ember_quantize_default_params();
        const std::string     path = dir + "/bad.dat";
        p.imatrix_path          = path.c_str();
        CHECK(quantize(in, dir + "/x.gguf", "Q4_0", p) == EMBER_ERR_BAD_FORMAT);
        const std::string missing = dir + "/missing.dat";
        p.imatrix_path            = missing.c_str();
        CHECK(quantize(in, dir + "/x.gguf", "Q4_0", p) == EMBER_ERR_IO);
    }
    {
        // An entry of the wrong length for its matrix.
        std::ofstream f(dir + "/short.dat", std::ios::binary);
        auto          put = [&](int32_t x) { f.write(reinterpret_cast<const char *>(&x), 4); };
        const std::string name = "blk.0.attn_q.weight";
        put(1);
        put(int32_t(name.size()));
        f.write(name.data(), std::streamsize(name.size()));
        put(1);
        put(3);
        const float v[3] = {1, 1, 1};
        f.write(reinterpret_cast<const char *>(v), sizeof(v));
    }
    ember_quantize_params p = ember_quantize_default_params();
    const std::string     path = dir + "/short.dat";
    p.imatrix_path          = path.c_str();
    CHECK(quantize(in, dir + "/x.gguf", "Q4_0", p) == EMBER_ERR_INVALID_ARG);
    CHECK(!fs::exists(dir + "/x.gguf"));
}

TEST_CASE("[quantize] the default model to Q4_K_M loads and decodes") {
    const std::string in = ember_test_data_path("models/ember-kjv-25m-f16.gguf");
    if (in.empty()) {
        MESSAGE("shared default model absent (--data-dir): skipped");
        return;
    }
    const std::string dir = fresh_dir("default");
    const std::string out = dir + "/q4km.gguf";
    REQUIRE_MESSAGE(quantize(in, out, "Q4_K_M") == EMBER_OK, ember_last_error());
    {
        // n_embd 384: llama.cpp's fallbacks and the tied output rule.
        auto t = types_of(*ember_gguf_open(out));
        CHECK(t["token_embd.weight"] == EMBER_TYPE_Q8_0);
        CHECK(t["blk.1.attn_q.weight"] == EMBER_TYPE_Q5_0);
        CHECK(t["blk.0.attn_v.weight"] == EMBER_TYPE_Q8_0);
        CHECK(t["blk.1.attn_v.weight"] == EMBER_TYPE_Q5_0);
        CHECK(t["blk.0.ffn_down.weight"] == EMBER_TYPE_Q6_K);
        CHECK(t["blk.1.ffn_down.weight"] == EMBER_TYPE_Q4_K);
    }
    ember_model_params mp    = ember_model_default_params();
    ember_model *      model = nullptr;
    REQUIRE_MESSAGE(ember_model_load(out.c_str(), &mp, &model) == EMBER_OK, ember_last_error());
    ember_context_params cp  = ember_context_default_params();
    cp.n_ctx                 = 64;
    ember_context *      ctx = nullptr;
    REQUIRE(ember_context_create(model, &cp, &ctx) == EMBER_OK);
    int32_t     toks[3] = {1, 1126, 4177};
    ember_batch b       = ember_batch_one(toks, 3);
    CHECK(ember_decode(ctx, &b) == EMBER_OK);
    const float * logits = ember_get_logits_ith(ctx, -1);
    REQUIRE(logits != nullptr);
    CHECK(std::isfinite(logits[0]));
    ember_context_free(ctx);
    ember_model_free(model);
}

}  // TEST_SUITE
