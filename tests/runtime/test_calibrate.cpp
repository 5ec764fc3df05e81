// Calibration (runtime/calibrate.h): the importance matrix Ember measures on a text equals a
// float64 recomputation, survives the legacy .dat round trip, and guides INT4 quantization
// towards logits closer to the unquantized model's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/calibrate.h"
#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/imatrix.h"
#include "runtime/model.h"
#include "runtime/vocab.h"
#include "support/data-path.h"
#include "support/ref-forward.h"
#include "support/tiny-model.h"

namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string & name) {
    const std::string d = ember_test_tmp_dir() + "/calibrate-" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

// Words made of the tiny vocabulary's letters, seeded: a text of many hundred tokens.
std::string make_text(const std::string & path, int n_words, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string     text;
    for (int i = 0; i < n_words; i++) {
        const int len = 1 + int(rng() % 4);
        if (i) text += (i % 13 == 0) ? "\n" : " ";
        for (int c = 0; c < len; c++) text += char('a' + rng() % 26);
    }
    std::ofstream(path, std::ios::binary) << text;
    return text;
}

tiny_model_spec spec() {
    tiny_model_spec s;
    s.weight_type = 0;  // F32
    s.n_embd      = 128;  // INT4 blocks hold 128 values
    s.n_ff        = 256;
    s.n_ctx_train = 256;  // chunks of 256 tokens
    s.name        = "calib-f32";
    return s;
}

// The tokens of chunk c as the calibration makes them (first token BOS).
std::vector<int32_t> chunk_tokens(const std::string & model_path, const std::string & text, int c, int n_ctx) {
    ember_model_load_options lo;
    lo.vocab_only = true;
    const auto           m = ember_model_load_file(model_path, lo);
    std::vector<int32_t> toks;
    m->vocab->tokenize(text, false, false, toks);
    REQUIRE(int(toks.size()) >= (c + 1) * n_ctx);
    std::vector<int32_t> out(toks.begin() + c * n_ctx, toks.begin() + (c + 1) * n_ctx);
    out[0] = m->vocab->token_bos;
    return out;
}

double logit_mse(const std::vector<double> & a, const std::vector<double> & b) {
    REQUIRE(a.size() == b.size());
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += (a[i] - b[i]) * (a[i] - b[i]);
    return s / double(a.size());
}

std::vector<uint8_t> file_bytes(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("[calibrate] mean squared activations equal a float64 recomputation; the .dat round trip keeps them") {
    const std::string dir   = fresh_dir("stats");
    const std::string model = ember_test_make_tiny_model(spec(), dir);
    const std::string text  = make_text(dir + "/calib.txt", 1500, 7);

    ember_calibration_options o;
    o.text_path = dir + "/calib.txt";
    o.n_chunks  = 2;
    o.n_threads = 2;
    const ember_imatrix m = ember_calibrate(model, o);
    CHECK(m.chunk_count == 2);
    REQUIRE(m.datasets.size() == 1);
    CHECK(m.entries.size() == 2 * 7);  // q k v o gate up down per layer
    for (const char * name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.1.attn_output.weight", "blk.1.ffn_down.weight"}) {
        INFO(name);
        const std::vector<float> * e = m.find(name);
        REQUIRE(e);
        for (float v : *e) CHECK((std::isfinite(v) && v >= 0));
    }
    CHECK(m.find("output.weight") == nullptr);
    CHECK(m.find("blk.0.ffn_down.weight")->size() == 256u);

    // attn_q's input: rms_norm(embedding) * attn_norm, over both chunks' tokens.
    const ember_ref_model ref = ember_ref_load(model);
    const int             E   = ref.cfg.n_embd;
    std::vector<double>   want(size_t(E), 0.0);
    int                   rows = 0;
    for (int c = 0; c < 2; c++) {
        for (int32_t t : chunk_tokens(model, text, c, 256)) {
            const double * x  = &ref.token_embd[size_t(t) * size_t(E)];
            double         ss = 0;
            for (int i = 0; i < E; i++) ss += x[i] * x[i];
            const double r = 1.0 / std::sqrt(ss / E + ref.cfg.rms_eps);
            for (int i = 0; i < E; i++) {
                const double y = x[i] * r * ref.layers[0].attn_norm[size_t(i)];
                want[size_t(i)] += y * y;
            }
            rows++;
        }
    }
    const std::vector<float> & got = *m.find("blk.0.attn_q.weight");
    REQUIRE(got.size() == size_t(E));
    double max_rel = 0;
    for (int i = 0; i < E; i++) {
        const double w = want[size_t(i)] / rows;
        max_rel        = std::max(max_rel, std::fabs(got[size_t(i)] - w) / w);
    }
    CHECK(max_rel < 1e-4);
    // attn_k reads the same tensor.
    CHECK(*m.find("blk.0.attn_k.weight") == got);

    // Legacy .dat: written, read back to the same means.
    ember_imatrix_save_legacy(m, dir + "/out.dat");
    const ember_imatrix back = ember_imatrix_load(dir + "/out.dat");
    CHECK(back.legacy);
    CHECK(back.chunk_count == 2);
    REQUIRE(back.datasets.size() == 1);
    CHECK(back.datasets[0] == o.text_path);
    REQUIRE(back.entries.size() == m.entries.size());
    for (const auto & it : m.entries) {
        const std::vector<float> * b = back.find(it.first);
        REQUIRE(b);
        REQUIRE(b->size() == it.second.size());
        for (size_t i = 0; i < b->size(); i++) CHECK((*b)[i] == doctest::Approx(it.second[i]).epsilon(1e-6));
    }
}

TEST_CASE("[calibrate] ember_model_quantize with a calibration text: different INT4 bytes, logits closer to F32, metadata") {
    const std::string dir   = fresh_dir("quantize");
    const std::string model = ember_test_make_tiny_model(spec(), dir);
    const std::string text  = make_text(dir + "/calib.txt", 1500, 11);
    const std::string calib = dir + "/calib.txt";

    ember_quantize_params p = ember_quantize_default_params();
    CHECK(p.calibration_chunks == 16);
    p.ftype     = "INT4";
    p.n_threads = 2;
    REQUIRE(ember_model_quantize(model.c_str(), (dir + "/plain.gguf").c_str(), &p) == EMBER_OK);
    p.calibration_path   = calib.c_str();
    p.calibration_chunks = 2;
    const std::string dat = dir + "/calib.dat";
    p.imatrix_out_path    = dat.c_str();
    REQUIRE(ember_model_quantize(model.c_str(), (dir + "/calib.gguf").c_str(), &p) == EMBER_OK);
    CHECK(file_bytes(dir + "/plain.gguf") != file_bytes(dir + "/calib.gguf"));
    CHECK(ember_imatrix_load(dat).entries.size() == 14);

    {
        const auto f = ember_gguf_open(dir + "/calib.gguf");
        const ember_gguf_value * c = f->find("ember.quantization.imatrix.calibration");
        REQUIRE(c);
        CHECK(c->str == calib);
        const ember_gguf_value * n = f->find("ember.quantization.imatrix.calibration_chunks");
        REQUIRE(n);
        CHECK(n->as_i64("chunks") == 2);
        CHECK(f->find("ember.quantization.imatrix.file") == nullptr);
    }

    // The importance-guided INT4 is closer to F32 on the calibration text.
    const std::vector<int32_t> toks = chunk_tokens(model, text, 0, 256);
    const std::vector<double>  f32  = ember_ref_forward(ember_ref_load(model), toks);
    const double mse_plain = logit_mse(ember_ref_forward(ember_ref_load(dir + "/plain.gguf"), toks), f32);
    const double mse_calib = logit_mse(ember_ref_forward(ember_ref_load(dir + "/calib.gguf"), toks), f32);
    MESSAGE("INT4 logit MSE vs F32: plain " << mse_plain << ", calibrated " << mse_calib);
    CHECK(mse_plain > 0);
    CHECK(mse_calib <= mse_plain);

    // Refusals: both an imatrix and a text; an imatrix output without a text; no chunks.
    p.imatrix_path = dat.c_str();
    CHECK(ember_model_quantize(model.c_str(), (dir + "/x.gguf").c_str(), &p) == EMBER_ERR_INVALID_ARG);
    p.imatrix_path     = nullptr;
    p.calibration_path = nullptr;
    CHECK(ember_model_quantize(model.c_str(), (dir + "/x.gguf").c_str(), &p) == EMBER_ERR_INVALID_ARG);
    p.calibration_path   = calib.c_str();
    p.calibration_chunks = 0;
    CHECK(ember_model_quantize(model.c_str(), (dir + "/x.gguf").c_str(), &p) == EMBER_ERR_INVALID_ARG);
    p.calibration_chunks = 2;
    p.imatrix_out_path   = nullptr;
    const std::string missing = dir + "/missing.txt";
    p.calibration_path         = missing.c_str();
    CHECK(ember_model_quantize(model.c_str(), (dir + "/x.gguf").c_str(), &p) == EMBER_ERR_IO);
    CHECK(!fs::exists(dir + "/x.gguf"));

    // An older caller's struct (without the calibration fields) still works.
    ember_quantize_params old = ember_quantize_default_params();
    old.struct_size           = uint32_t(offsetof(ember_quantize_params, calibration_path));
    old.ftype                 = "INT4";
    old.n_threads             = 2;
    old.calibration_path      = "/nonexistent";  // beyond struct_size: must be ignored
    REQUIRE(ember_model_quantize(model.c_str(), (dir + "/old.gguf").c_str(), &old) == EMBER_OK);
    CHECK(file_bytes(dir + "/old.gguf") == file_bytes(dir + "/plain.gguf"));
}
