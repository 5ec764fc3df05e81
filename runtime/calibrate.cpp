// Importance matrix from a calibration text (see calibrate.h): the model runs chunk by chunk
// on the CPU with the context's observation hook on, and the activations every block matrix
// reads are summed in float64 (sum of x^2 per input column, and the rows seen).
#include "runtime/calibrate.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "ember.h"
#include "runtime/context.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/model.h"
#include "runtime/quantize-writer.h"
#include "runtime/vocab.h"

namespace {

struct column_sums {
    std::vector<double> sum2;  // per input column
    int64_t             rows = 0;
};

std::string read_text(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) ember_throw(EMBER_ERR_IO, "calibration text %s: cannot open: %s", path.c_str(), std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) ember_throw(EMBER_ERR_IO, "calibration text %s: read error", path.c_str());
    return ss.str();
}

// Adds x (F32 [ne0, rows...], rows possibly strided) to s.
void accumulate(column_sums & s, const ember_tensor * x) {
    if (x->type != EMBER_TYPE_F32 || x->nb[0] != sizeof(float) || !x->data) {
        ember_throw(EMBER_ERR_INTERNAL, "calibration: activations '%s' are not F32 rows in host memory", x->name);
    }
    const int64_t ne0 = x->ne[0];
    if (s.sum2.empty()) s.sum2.assign(static_cast<size_t>(ne0), 0.0);
    if (int64_t(s.sum2.size()) != ne0) ember_throw(EMBER_ERR_INTERNAL, "calibration: activations '%s' changed width", x->name);
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
            for (int64_t i1 = 0; i1 < x->ne[1]; i1++) {
                const float * row = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + i1 * x->nb[1] + i2 * x->nb[2] +
                                                                    i3 * x->nb[3]);
                for (int64_t c = 0; c < ne0; c++) s.sum2[size_t(c)] += double(row[c]) * double(row[c]);
            }
        }
    }
    s.rows += ember_nrows(x);
}

}  // namespace

ember_imatrix ember_calibrate(const std::string & model_path, const ember_calibration_options & o) {
    if (o.n_chunks < 1) ember_throw(EMBER_ERR_INVALID_ARG, "calibration: the chunk count must be at least 1 (got %d)", o.n_chunks);
    if (o.n_ctx < 8) ember_throw(EMBER_ERR_INVALID_ARG, "calibration: chunks of %d tokens are too short (at least 8)", o.n_ctx);
    const std::string text = read_text(o.text_path);

    ember_model_load_options lo;
    lo.n_gpu_layers = 0;  // the hook reads activations in host memory
    const std::unique_ptr<ember_model> model = ember_model_load_file(model_path, lo);
    if (!model->vocab || !model->vocab->unsupported.empty()) {
        ember_throw(EMBER_ERR_UNSUPPORTED, "calibration: %s has no tokenizer Ember can run%s%s", model_path.c_str(),
                    model->vocab ? ": " : "", model->vocab ? model->vocab->unsupported.c_str() : "");
    }
    std::vector<int32_t> tokens;
    model->vocab->tokenize(text, /*add_special=*/false, /*parse_special=*/false, tokens);

    // Chunks as llama-imatrix makes them: consecutive runs of n_ctx tokens, the first token of
    // each replaced by BOS when the model adds one.
    int32_t n_ctx = std::min<int32_t>(o.n_ctx, int32_t(std::max<uint32_t>(model->hp.n_ctx_train, 8)));
    if (int64_t(tokens.size()) < n_ctx) n_ctx = int32_t(tokens.size());
    if (n_ctx < 8) {
        ember_throw(EMBER_ERR_INVALID_ARG, "calibration text %s has %zu tokens; at least 8 are needed", o.text_path.c_str(), tokens.size());
    }
    const int32_t n_chunks = int32_t(std::min<int64_t>(o.n_chunks, int64_t(tokens.size()) / n_ctx));

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx     = uint32_t(n_ctx);
    cp.n_batch   = uint32_t(n_ctx);
    cp.n_ubatch  = uint32_t(n_ctx);
    cp.n_threads = o.n_threads;
    ember_context ctx(*model, cp);

    std::map<std::string, column_sums> sums;
    ctx.observe_mul_mat = [&](const ember_tensor * w, const ember_tensor * x) {
        // llama-imatrix's default: the blocks' matrices (not the output head).
        if (std::strncmp(w->name, "blk.", 4) != 0) return;
        accumulate(sums[w->name], x);
    };

    const bool add_bos = model->vocab->add_bos && model->vocab->token_bos >= 0;
    ember_log(EMBER_LOG_INFO, "calibration: %s, %zu tokens, %d chunks of %d", o.text_path.c_str(), tokens.size(), n_chunks, n_ctx);
    std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
    for (int32_t c = 0; c < n_chunks; c++) {
        std::copy_n(tokens.begin() + int64_t(c) * n_ctx, n_ctx, chunk.begin());
        if (add_bos) chunk[0] = model->vocab->token_bos;
        ctx.kv.clear();
        ember_batch b;
        std::memset(&b, 0, sizeof(b));
        b.n_tokens = n_ctx;
        b.token    = chunk.data();
        ctx.decode(b);
    }

    ember_imatrix m;
    m.chunk_count = n_chunks;
    m.datasets.push_back(o.text_path);
    for (const auto & it : sums) {
        std::vector<float> v(it.second.sum2.size());
        for (size_t i = 0; i < v.size(); i++) v[i] = float(it.second.sum2[i] / double(std::max<int64_t>(it.second.rows, 1)));
        m.entries.emplace(it.first, std::move(v));
    }
    if (m.entries.empty()) ember_throw(EMBER_ERR_UNSUPPORTED, "calibration: %s has no block matrices to measure", model_path.c_str());
    return m;
}

void ember_imatrix_save_legacy(const ember_imatrix & m, const std::string & path) {
    ember_atomic_file f(path);
    auto i32 = [&](int32_t v) { f.write(&v, sizeof(v)); };
    const int32_t ncall = std::max(1, m.chunk_count);
    i32(int32_t(m.entries.size()));
    std::vector<float> scaled;
    for (const auto & it : m.entries) {
        i32(int32_t(it.first.size()));
        f.write(it.first.data(), it.first.size());
        i32(ncall);
        i32(int32_t(it.second.size()));
        scaled.resize(it.second.size());
        for (size_t i = 0; i < scaled.size(); i++) scaled[i] = it.second[i] * float(ncall);
        f.write(scaled.data(), scaled.size() * sizeof(float));
    }
    i32(m.chunk_count);
    const std::string dataset = m.datasets.empty() ? std::string() : m.datasets[0];
    i32(int32_t(dataset.size()));
    f.write(dataset.data(), dataset.size());
    f.commit();
}
