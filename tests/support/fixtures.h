// Reference data for the model tests: the llama.cpp fixtures (shared/fixtures/models), the
// default model's reference files (shared/models), their tolerances, logit comparison, and
// small helpers that run Ember through the public C API.
#ifndef EMBER_TESTS_FIXTURES_H
#define EMBER_TESTS_FIXTURES_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember.h"

//
// Files
//
// Reads a whole file; false when it cannot be read.
bool ember_test_read_file(const std::string & path, std::string & out);
// Token ids separated by spaces, commas or newlines. False on any other character or overflow.
bool ember_test_parse_ids(const std::string & text, std::vector<int32_t> & out);
// Raw little-endian float32 values. False when unreadable or the size is not a multiple of 4.
bool ember_test_read_f32(const std::string & path, std::vector<float> & out);

//
// Tolerances (shared/fixtures/models/README.md), all relative to scale = max |reference logit|
//
struct ember_test_tolerance {
    const char * what;
    double       max_abs;  // max |got - ref| over all logits < max_abs * scale
    double       rms;      // RMS(got - ref) < rms * RMS(ref); 0 = not checked
    double       margin;   // top-1 must match where the reference top1-top2 margin > margin * scale
};
// "F32" -> 1e-3; "F16" and "BF16" -> 4e-3; anything else (a quant type) -> 6e-2 / RMS 5e-2.
ember_test_tolerance ember_test_tolerance_for(const std::string & weights);

// File weight types the conformance test runs (the one list; other quant types are a later issue).
const std::vector<std::string> & ember_test_conformance_types();

//
// Reference sets
//
struct ember_test_reference {
    std::string                        name;     // "tiny-llama-Q8_0", "ember-kjv-25m-f16"
    std::string                        arch;     // "llama"
    std::string                        weights;  // "F32", "F16", "Q8_0", ... (upper case)
    std::string                        model_path;
    std::vector<int32_t>               tokens;
    int32_t                            n_vocab = 0;
    std::vector<float>                 logits;         // [tokens.size() * n_vocab]
    std::vector<double>                margin;         // reference top1 - top2 at each position
    std::vector<int32_t>               greedy;         // reference greedy continuation
    std::vector<double>                greedy_margin;  // its margins (manifest), empty when unknown
    std::map<std::string, std::string> tensor_types;   // manifest: tensor -> "Q6_K", empty when unknown
    double                             scale = 0;      // max |reference logit|
};

// Names of the fixture models present ("tiny-llama-F32", ...), sorted; empty when the data
// directory is absent.
std::vector<std::string> ember_test_fixture_names();
// Splits "tiny-ARCH-WEIGHTS" (weights may contain '_' but no '-'). False if it does not match.
bool ember_test_split_fixture_name(const std::string & name, std::string & arch, std::string & weights);
// Loads fixtures/models/NAME.* and its manifest entry. False with *err set when anything is missing.
bool ember_test_load_fixture(const std::string & name, ember_test_reference & out, std::string & err);
// Loads models/ember-kjv-25m-VARIANT.* (VARIANT "f16" or "q8_0").
bool ember_test_load_default_model(const std::string & variant, ember_test_reference & out, std::string & err);

//
// Comparing logits
//
int32_t ember_test_argmax(const float * row, int32_t n);  // lowest id on ties
double  ember_test_margin(const float * row, int32_t n);  // top1 - top2
int32_t ember_test_argmax(const double * row, int32_t n);
double  ember_test_margin(const double * row, int32_t n);

struct ember_test_logit_diff {
    int32_t              n_rows  = 0;
    double               scale   = 0;  // max |ref|
    double               max_abs = 0;  // max |got - ref|
    double               rms     = 0;  // RMS(got - ref)
    double               rms_ref = 0;  // RMS(ref)
    int32_t              argmax_checked = 0;  // rows whose reference margin exceeded the threshold
    std::vector<int32_t> argmax_bad;          // of those, the rows whose top-1 differs
    std::vector<int32_t> argmax_differ_any;   // all rows whose top-1 differs (informational)
    bool                 finite = true;       // every got value is finite

    double rel_max() const { return scale > 0 ? max_abs / scale : max_abs; }
    double rel_rms() const { return rms_ref > 0 ? rms / rms_ref : rms; }
    std::string summary() const;
};
// ref and got are [n_rows * n_vocab]; margin_abs is the absolute reference-margin threshold.
ember_test_logit_diff ember_test_compare_logits(const std::vector<double> & ref, const std::vector<float> & got,
                                                int32_t n_vocab, double margin_abs);
ember_test_logit_diff ember_test_compare_logits(const std::vector<float> & ref, const std::vector<float> & got,
                                                int32_t n_vocab, double margin_abs);

//
// Running Ember through the C API
//
struct ember_test_model_free {
    void operator()(ember_model * m) const { ember_model_free(m); }
};
struct ember_test_context_free {
    void operator()(ember_context * c) const { ember_context_free(c); }
};
using ember_test_model_ptr   = std::unique_ptr<ember_model, ember_test_model_free>;
using ember_test_context_ptr = std::unique_ptr<ember_context, ember_test_context_free>;

struct ember_test_run_params {
    uint32_t n_ctx     = 0;  // 0 = tokens + greedy steps + 16
    uint32_t n_batch   = 0;  // 0 = max(n_tokens, 1)
    uint32_t n_ubatch  = 0;  // 0 = n_batch
    uint32_t n_seq_max = 1;
    int32_t  n_threads = 1;
    int32_t  type_k    = EMBER_TYPE_F32;  // the reference runs used an F32 KV cache
    int32_t  type_v    = EMBER_TYPE_F32;
};

// Loads with default model params; on failure returns the status and sets err.
ember_status ember_test_load_model(const std::string & path, ember_test_model_ptr & out, std::string & err);
// A context for n_needed tokens (n_ctx/n_batch left 0 in p are derived from it).
ember_status ember_test_make_context(ember_model * model, const ember_test_run_params & p, uint32_t n_needed,
                                     ember_test_context_ptr & out, std::string & err);
// One ember_decode of `tokens` in sequence `seq` at positions pos0, pos0+1, ..., with logits for
// every row (copied to *logits when not NULL, [n * n_vocab]).
ember_status ember_test_decode(ember_context * ctx, const std::vector<int32_t> & tokens, int32_t pos0, int32_t seq,
                               std::vector<float> * logits, std::string & err);
// Greedy continuation: argmax of `last_row`, then each token decoded alone at positions pos0,
// pos0+1, ... in sequence 0. ids/margins get n entries: Ember's argmax and top1-top2 margin at
// each step. With `forced` (n entries), forced[s] is decoded instead of Ember's own choice
// (teacher forcing of a reference continuation): ids[s] then says what Ember would have picked.
ember_status ember_test_greedy(ember_context * ctx, const float * last_row, int32_t n_vocab, int32_t pos0, int32_t n,
                               std::vector<int32_t> & ids, std::vector<double> & margins, std::string & err,
                               const std::vector<int32_t> * forced = nullptr);

// The full fixture protocol: fresh context, the prompt in one decode (all rows), then `n_greedy`
// greedy tokens. Returns the status of the first failing call.
struct ember_test_run_result {
    std::vector<float>   logits;  // [n_tokens * n_vocab]
    std::vector<int32_t> greedy;
    std::vector<double>  greedy_margin;
};
ember_status ember_test_run(ember_model * model, const std::vector<int32_t> & tokens, int32_t n_greedy,
                            const ember_test_run_params & p, ember_test_run_result & out, std::string & err,
                            const std::vector<int32_t> * forced = nullptr);

#endif  // EMBER_TESTS_FIXTURES_H
