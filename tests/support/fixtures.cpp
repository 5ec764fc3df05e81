#include "support/fixtures.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/json.h"
#include "support/data-path.h"

//
// JSON (the runtime's reader: runtime/json.h, tested on its own in tests/runtime)
//
namespace {

// Elements of a numeric array as doubles (non-numbers are skipped).
std::vector<double> json_numbers(const ember_json & a) {
    std::vector<double> v;
    if (a.kind != EMBER_JSON_ARRAY) return v;
    for (const ember_json & e : a.arr) {
        if (e.kind == EMBER_JSON_INT) v.push_back(static_cast<double>(e.i));
        if (e.kind == EMBER_JSON_FLOAT) v.push_back(e.f);
    }
    return v;
}

}  // namespace

//
// Files
//

bool ember_test_read_file(const std::string & path, std::string & out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return false;
    out = ss.str();
    return true;
}

bool ember_test_parse_ids(const std::string & text, std::vector<int32_t> & out) {
    out.clear();
    size_t i = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t') {
            i++;
            continue;
        }
        bool neg = false;
        if (c == '-') {
            neg = true;
            i++;
        }
        if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return false;
        int64_t v = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
            v = v * 10 + (text[i] - '0');
            if (v > INT32_MAX) return false;
            i++;
        }
        out.push_back(static_cast<int32_t>(neg ? -v : v));
    }
    return true;
}

bool ember_test_read_f32(const std::string & path, std::vector<float> & out) {
    std::string bytes;
    if (!ember_test_read_file(path, bytes) || bytes.size() % 4 != 0) return false;
    out.resize(bytes.size() / 4);
    // The files are little-endian; so is every platform Ember targets.
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return true;
}

//
// Tolerances
//

ember_test_tolerance ember_test_tolerance_for(const std::string & weights) {
    if (weights == "F32") return {"F32", 1e-3, 0.0, 2e-3};
    if (weights == "F16" || weights == "BF16") return {"F16/BF16", 4e-3, 0.0, 8e-3};
    return {"quantized", 6e-2, 5e-2, 3e-2};
}

const std::vector<std::string> & ember_test_conformance_types() {
    static const std::vector<std::string> types = {"F32",    "F16",    "BF16",   "Q8_0",   "Q4_0",
                                                   "Q4_1",   "Q5_0",   "Q5_1",   "Q2_K",   "Q3_K_M",
                                                   "Q4_K_M", "Q5_K_M", "Q6_K",   "IQ4_NL", "IQ4_XS"};
    return types;
}

//
// Reference sets
//

std::vector<std::string> ember_test_fixture_names() {
    std::vector<std::string> names;
    const std::string        dir = ember_test_data_path("fixtures/models");
    if (dir.empty()) return names;
    std::error_code ec;
    for (const auto & e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string fn = e.path().filename().string();
        if (fn.size() > 5 && fn.compare(fn.size() - 5, 5, ".gguf") == 0) names.push_back(fn.substr(0, fn.size() - 5));
    }
    std::sort(names.begin(), names.end());
    return names;
}

bool ember_test_split_fixture_name(const std::string & name, std::string & arch, std::string & weights) {
    if (name.compare(0, 5, "tiny-") != 0) return false;
    const size_t dash = name.find('-', 5);
    if (dash == std::string::npos || dash == 5 || dash + 1 >= name.size()) return false;
    if (name.find('-', dash + 1) != std::string::npos) return false;
    arch    = name.substr(5, dash - 5);
    weights = name.substr(dash + 1);
    return true;
}

namespace {

void finish_reference(ember_test_reference & r) {
    const int32_t n = static_cast<int32_t>(r.tokens.size());
    r.scale         = 0;
    for (float v : r.logits) r.scale = std::max(r.scale, static_cast<double>(std::fabs(v)));
    r.margin.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; i++) {
        r.margin[static_cast<size_t>(i)] =
            ember_test_margin(r.logits.data() + static_cast<size_t>(i) * static_cast<size_t>(r.n_vocab), r.n_vocab);
    }
}

bool load_common(const std::string & base, ember_test_reference & r, std::string & err) {
    std::string text;
    if (!ember_test_read_file(base + ".tokens.txt", text) || !ember_test_parse_ids(text, r.tokens) ||
        r.tokens.empty()) {
        err = "cannot read " + base + ".tokens.txt";
        return false;
    }
    if (!ember_test_read_file(base + ".greedy.txt", text) || !ember_test_parse_ids(text, r.greedy)) {
        err = "cannot read " + base + ".greedy.txt";
        return false;
    }
    if (!ember_test_read_f32(base + ".logits.f32", r.logits) || r.logits.empty() ||
        r.logits.size() % r.tokens.size() != 0) {
        err = "cannot read " + base + ".logits.f32 (or its size does not fit the token count)";
        return false;
    }
    r.n_vocab = static_cast<int32_t>(r.logits.size() / r.tokens.size());
    finish_reference(r);
    return true;
}

const ember_json * manifest() {
    static bool       loaded = false;
    static ember_json json;
    static bool       ok = false;
    if (!loaded) {
        loaded                 = true;
        const std::string path = ember_test_data_path("fixtures/models/manifest.json");
        std::string       text;
        if (!path.empty() && ember_test_read_file(path, text)) {
            try {
                json = ember_json_parse(text);
                ok   = true;
            } catch (const std::exception &) {
                ok = false;
            }
        }
    }
    return ok ? &json : nullptr;
}

}  // namespace

bool ember_test_load_fixture(const std::string & name, ember_test_reference & r, std::string & err) {
    r = ember_test_reference();
    if (!ember_test_split_fixture_name(name, r.arch, r.weights)) {
        err = "not a fixture name: " + name;
        return false;
    }
    r.name       = name;
    r.model_path = ember_test_data_path("fixtures/models/" + name + ".gguf");
    if (r.model_path.empty()) {
        err = "missing fixtures/models/" + name + ".gguf";
        return false;
    }
    const std::string base = r.model_path.substr(0, r.model_path.size() - 5);
    if (!load_common(base, r, err)) return false;

    const ember_json * m = manifest();
    if (!m) {
        err = "cannot read or parse fixtures/models/manifest.json";
        return false;
    }
    const ember_json * files = m->find("files");
    if (!files || files->kind != EMBER_JSON_ARRAY) {
        err = "manifest.json has no files array";
        return false;
    }
    for (const auto & f : files->arr) {
        const ember_json * fn = f.find("file");
        if (!fn || fn->str != name + ".gguf") continue;
        if (const ember_json * g = f.find("greedy_top1_top2_margin")) r.greedy_margin = json_numbers(*g);
        if (const ember_json * tt = f.find("tensor_types")) {
            for (const auto & kv : tt->obj) r.tensor_types[kv.first] = kv.second.str;
        }
        // Prefer the manifest's margins (same numbers, as llama.cpp computed them).
        if (const ember_json * mg = f.find("top1_top2_margin")) {
            std::vector<double> v = json_numbers(*mg);
            if (v.size() == r.tokens.size()) r.margin = v;
        }
        return true;
    }
    err = "manifest.json has no entry for " + name;
    return false;
}

bool ember_test_load_default_model(const std::string & variant, ember_test_reference & r, std::string & err) {
    r            = ember_test_reference();
    r.name       = "ember-kjv-25m-" + variant;
    r.arch       = "llama";
    r.weights    = variant == "f16" ? "F16" : variant == "q8_0" ? "Q8_0" : variant;
    r.model_path = ember_test_data_path("models/" + r.name + ".gguf");
    if (r.model_path.empty()) {
        err = "missing models/" + r.name + ".gguf";
        return false;
    }
    return load_common(r.model_path.substr(0, r.model_path.size() - 5), r, err);
}

//
// Comparing logits
//

namespace {

template <typename T> int32_t argmax_t(const T * row, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (row[i] > row[best]) best = i;
    }
    return best;
}

template <typename T> double margin_t(const T * row, int32_t n) {
    if (n < 2) return 0;
    double a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        const double v = static_cast<double>(row[i]);
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    return a - b;
}

template <typename R>
ember_test_logit_diff compare_t(const std::vector<R> & ref, const std::vector<float> & got, int32_t n_vocab,
                                double margin_abs) {
    ember_test_logit_diff d;
    if (n_vocab <= 0 || ref.size() != got.size() || ref.size() % static_cast<size_t>(n_vocab) != 0) {
        d.finite = false;
        d.max_abs = INFINITY;
        return d;
    }
    d.n_rows = static_cast<int32_t>(ref.size() / static_cast<size_t>(n_vocab));
    double ss = 0, ss_ref = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double r = static_cast<double>(ref[i]);
        const double g = static_cast<double>(got[i]);
        if (!std::isfinite(g)) d.finite = false;
        d.scale   = std::max(d.scale, std::fabs(r));
        d.max_abs = std::max(d.max_abs, std::isfinite(g) ? std::fabs(g - r) : INFINITY);
        ss += (g - r) * (g - r);
        ss_ref += r * r;
    }
    d.rms     = std::sqrt(ss / static_cast<double>(ref.size()));
    d.rms_ref = std::sqrt(ss_ref / static_cast<double>(ref.size()));
    for (int32_t row = 0; row < d.n_rows; row++) {
        const R *     rr = ref.data() + static_cast<size_t>(row) * static_cast<size_t>(n_vocab);
        const float * gr = got.data() + static_cast<size_t>(row) * static_cast<size_t>(n_vocab);
        const bool    differ = argmax_t(rr, n_vocab) != argmax_t(gr, n_vocab);
        if (differ) d.argmax_differ_any.push_back(row);
        if (margin_t(rr, n_vocab) > margin_abs) {
            d.argmax_checked++;
            if (differ) d.argmax_bad.push_back(row);
        }
    }
    return d;
}

}  // namespace

int32_t ember_test_argmax(const float * row, int32_t n) { return argmax_t(row, n); }
double  ember_test_margin(const float * row, int32_t n) { return margin_t(row, n); }
int32_t ember_test_argmax(const double * row, int32_t n) { return argmax_t(row, n); }
double  ember_test_margin(const double * row, int32_t n) { return margin_t(row, n); }

ember_test_logit_diff ember_test_compare_logits(const std::vector<double> & ref, const std::vector<float> & got,
                                                int32_t n_vocab, double margin_abs) {
    return compare_t(ref, got, n_vocab, margin_abs);
}
ember_test_logit_diff ember_test_compare_logits(const std::vector<float> & ref, const std::vector<float> & got,
                                                int32_t n_vocab, double margin_abs) {
    return compare_t(ref, got, n_vocab, margin_abs);
}

std::string ember_test_logit_diff::summary() const {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "rows %d scale %.4g max|d| %.3g (%.3g of scale) rms %.3g (%.3g of rms ref), "
                                    "top-1 differs at %zu rows (%zu of %d checked)",
                  n_rows, scale, max_abs, rel_max(), rms, rel_rms(), argmax_differ_any.size(), argmax_bad.size(),
                  argmax_checked);
    return buf;
}

//
// Running Ember through the C API
//

ember_status ember_test_load_model(const std::string & path, ember_test_model_ptr & out, std::string & err) {
    out.reset();
    ember_model_params mp = ember_model_default_params();
    ember_model *      m  = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    if (st != EMBER_OK) {
        err = std::string("ember_model_load(") + path + "): " + ember_status_str(st) + ": " + ember_last_error();
        return st;
    }
    out.reset(m);
    return EMBER_OK;
}

ember_status ember_test_make_context(ember_model * model, const ember_test_run_params & p, uint32_t n_needed,
                                     ember_test_context_ptr & out, std::string & err) {
    out.reset();
    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = p.n_ctx ? p.n_ctx : n_needed + 16;
    cp.n_batch              = p.n_batch ? p.n_batch : std::max<uint32_t>(n_needed, 1);
    cp.n_ubatch             = p.n_ubatch ? p.n_ubatch : cp.n_batch;
    cp.n_seq_max            = p.n_seq_max;
    cp.n_threads            = p.n_threads;
    cp.type_k               = p.type_k;
    cp.type_v               = p.type_v;
    ember_context *    c    = nullptr;
    const ember_status st   = ember_context_create(model, &cp, &c);
    if (st != EMBER_OK) {
        err = std::string("ember_context_create: ") + ember_status_str(st) + ": " + ember_last_error();
        return st;
    }
    out.reset(c);
    return EMBER_OK;
}

ember_status ember_test_decode(ember_context * ctx, const std::vector<int32_t> & tokens, int32_t pos0, int32_t seq,
                               std::vector<float> * logits, std::string & err) {
    const int32_t        n = static_cast<int32_t>(tokens.size());
    std::vector<int32_t> pos(tokens.size()), sid(tokens.size(), seq);
    std::vector<int8_t>  want(tokens.size(), 1);
    for (int32_t i = 0; i < n; i++) pos[static_cast<size_t>(i)] = pos0 + i;
    ember_batch b;
    b.n_tokens            = n;
    b.token               = tokens.data();
    b.pos                 = pos.data();
    b.seq_id              = sid.data();
    b.logits              = want.data();
    const ember_status st = ember_decode(ctx, &b);
    if (st != EMBER_OK) {
        err = std::string("ember_decode: ") + ember_status_str(st) + ": " + ember_last_error();
        return st;
    }
    if (logits) {
        const int32_t n_vocab = ember_model_n_vocab(ember_context_model(ctx));
        logits->assign(static_cast<size_t>(n) * static_cast<size_t>(n_vocab), 0.0f);
        for (int32_t i = 0; i < n; i++) {
            const float * row = ember_get_logits_ith(ctx, i);
            if (!row) {
                err = "ember_get_logits_ith(" + std::to_string(i) + ") returned NULL: " + ember_last_error();
                return EMBER_ERR_INTERNAL;
            }
            std::memcpy(logits->data() + static_cast<size_t>(i) * static_cast<size_t>(n_vocab), row,
                        sizeof(float) * static_cast<size_t>(n_vocab));
        }
    }
    return EMBER_OK;
}

ember_status ember_test_greedy(ember_context * ctx, const float * last_row, int32_t n_vocab, int32_t pos0, int32_t n,
                               std::vector<int32_t> & ids, std::vector<double> & margins, std::string & err,
                               const std::vector<int32_t> * forced) {
    if (forced && forced->size() < static_cast<size_t>(n)) {
        err = "forced continuation shorter than the greedy steps";
        return EMBER_ERR_INVALID_ARG;
    }
    ids.clear();
    margins.clear();
    std::vector<float> row(last_row, last_row + n_vocab);
    for (int32_t step = 0; step < n; step++) {
        const int32_t id = ember_test_argmax(row.data(), n_vocab);
        ids.push_back(id);
        margins.push_back(ember_test_margin(row.data(), n_vocab));
        if (step + 1 == n) break;
        std::vector<float> out;
        const int32_t      next = forced ? (*forced)[static_cast<size_t>(step)] : id;
        const ember_status st   = ember_test_decode(ctx, {next}, pos0 + step, 0, &out, err);
        if (st != EMBER_OK) return st;
        row = out;
    }
    return EMBER_OK;
}

ember_status ember_test_run(ember_model * model, const std::vector<int32_t> & tokens, int32_t n_greedy,
                            const ember_test_run_params & p, ember_test_run_result & out, std::string & err,
                            const std::vector<int32_t> * forced) {
    out = ember_test_run_result();
    ember_test_context_ptr ctx;
    ember_test_run_params  q = p;
    if (!q.n_batch) q.n_batch = static_cast<uint32_t>(tokens.size());
    if (!q.n_ctx) q.n_ctx = static_cast<uint32_t>(tokens.size()) + static_cast<uint32_t>(n_greedy) + 16;
    ember_status st = ember_test_make_context(model, q, static_cast<uint32_t>(tokens.size()), ctx, err);
    if (st != EMBER_OK) return st;
    st = ember_test_decode(ctx.get(), tokens, 0, 0, &out.logits, err);
    if (st != EMBER_OK || n_greedy <= 0) return st;
    const int32_t n_vocab = ember_model_n_vocab(model);
    const float * last    = out.logits.data() + (tokens.size() - 1) * static_cast<size_t>(n_vocab);
    return ember_test_greedy(ctx.get(), last, n_vocab, static_cast<int32_t>(tokens.size()), n_greedy, out.greedy,
                             out.greedy_margin, err, forced);
}
