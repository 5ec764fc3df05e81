#include "support/ref-forward.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "quant/types.h"
#include "runtime/gguf.h"

//
// Loading: every tensor to double
//

namespace {

// A tensor as a (rows, cols) double matrix, cols = ne0 (contiguous). Checks the shape.
std::vector<double> read_tensor(const ember_gguf_file & f, const std::string & name, int64_t ne0, int64_t ne1,
                                bool required = true) {
    const ember_gguf_tensor_info * t = f.tensor(name);
    if (!t) {
        if (required) throw std::runtime_error("ref: missing tensor " + name);
        return {};
    }
    int64_t rows = 1;
    for (int d = 1; d < 4; d++) rows *= t->ne[d];
    if (t->ne[0] != ne0 || rows != ne1) {
        throw std::runtime_error("ref: tensor " + name + " has shape [" + std::to_string(t->ne[0]) + ", " +
                                 std::to_string(rows) + "], expected [" + std::to_string(ne0) + ", " +
                                 std::to_string(ne1) + "]");
    }
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    if (!tr || !tr->to_float) throw std::runtime_error("ref: tensor " + name + " has a type with no dequantizer");
    const uint8_t * data = f.tensor_data(*t);
    if (!data) throw std::runtime_error("ref: tensor " + name + " has no data");
    const size_t row_bytes = ember_row_size(t->type, ne0);

    std::vector<double> out(static_cast<size_t>(ne0 * ne1));
    std::vector<float>  row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < ne1; r++) {
        tr->to_float(data + r * row_bytes, row.data(), ne0);
        for (int64_t c = 0; c < ne0; c++) out[static_cast<size_t>(r * ne0 + c)] = row[static_cast<size_t>(c)];
    }
    return out;
}

}  // namespace

ember_ref_model ember_ref_load(const std::string & path) {
    std::unique_ptr<ember_gguf_file> fp = ember_gguf_open(path);
    const ember_gguf_file &          f  = *fp;

    ember_ref_model    m;
    ember_ref_config & c = m.cfg;
    c.arch               = f.get_str("general.architecture", "");
    if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3") {
        throw std::runtime_error("ref: unsupported architecture '" + c.arch + "'");
    }
    const std::string A = c.arch + ".";
    c.n_embd     = static_cast<int32_t>(f.require_u32(A + "embedding_length"));
    c.n_layer    = static_cast<int32_t>(f.require_u32(A + "block_count"));
    c.n_ff       = static_cast<int32_t>(f.require_u32(A + "feed_forward_length"));
    c.n_head     = static_cast<int32_t>(f.require_u32(A + "attention.head_count"));
    c.n_head_kv  = static_cast<int32_t>(f.get_u32(A + "attention.head_count_kv", static_cast<uint32_t>(c.n_head)));
    c.head_dim_k = static_cast<int32_t>(f.get_u32(A + "attention.key_length", static_cast<uint32_t>(c.n_embd / c.n_head)));
    c.head_dim_v = static_cast<int32_t>(f.get_u32(A + "attention.value_length", static_cast<uint32_t>(c.head_dim_k)));
    c.n_rot      = static_cast<int32_t>(f.get_u32(A + "rope.dimension_count", static_cast<uint32_t>(c.head_dim_k)));
    c.freq_base  = f.get_f32(A + "rope.freq_base", 10000.0f);
    c.rms_eps    = f.get_f32(A + "attention.layer_norm_rms_epsilon", 1e-5f);
    c.rope_neox  = (c.arch == "qwen2" || c.arch == "qwen3");

    const std::string scaling = f.get_str(A + "rope.scaling.type", "");
    if (scaling == "linear") {
        const double factor = f.get_f32(A + "rope.scaling.factor", 0.0f);
        if (factor > 0) c.freq_scale = 1.0 / factor;
    } else if (scaling.empty()) {
        const double factor = f.get_f32(A + "rope.scale_linear", 0.0f);  // the older key
        if (factor > 0) c.freq_scale = 1.0 / factor;
    } else if (scaling != "none") {
        throw std::runtime_error("ref: unsupported rope scaling '" + scaling + "'");
    }
    if (c.n_head <= 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0 || c.n_rot > c.head_dim_k ||
        c.n_rot % 2 != 0) {
        throw std::runtime_error("ref: inconsistent attention hyperparameters");
    }

    const ember_gguf_tensor_info * te = f.tensor("token_embd.weight");
    if (!te) throw std::runtime_error("ref: missing tensor token_embd.weight");
    c.n_vocab = static_cast<int32_t>(te->ne[1]);

    const int64_t E = c.n_embd, Q = int64_t(c.n_head) * c.head_dim_k, K = int64_t(c.n_head_kv) * c.head_dim_k,
                  V = int64_t(c.n_head_kv) * c.head_dim_v, O = int64_t(c.n_head) * c.head_dim_v;
    m.token_embd = read_tensor(f, "token_embd.weight", E, c.n_vocab);
    m.layers.resize(static_cast<size_t>(c.n_layer));
    for (int32_t il = 0; il < c.n_layer; il++) {
        ember_ref_layer & L = m.layers[static_cast<size_t>(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = read_tensor(f, p + "attn_norm.weight", E, 1);
        L.wq        = read_tensor(f, p + "attn_q.weight", E, Q);
        L.wk        = read_tensor(f, p + "attn_k.weight", E, K);
        L.wv        = read_tensor(f, p + "attn_v.weight", E, V);
        L.bq        = read_tensor(f, p + "attn_q.bias", Q, 1, false);
        L.bk        = read_tensor(f, p + "attn_k.bias", K, 1, false);
        L.bv        = read_tensor(f, p + "attn_v.bias", V, 1, false);
        L.q_norm    = read_tensor(f, p + "attn_q_norm.weight", c.head_dim_k, 1, false);
        L.k_norm    = read_tensor(f, p + "attn_k_norm.weight", c.head_dim_k, 1, false);
        L.wo        = read_tensor(f, p + "attn_output.weight", O, E);
        L.ffn_norm  = read_tensor(f, p + "ffn_norm.weight", E, 1);
        L.w_gate    = read_tensor(f, p + "ffn_gate.weight", E, c.n_ff);
        L.w_up      = read_tensor(f, p + "ffn_up.weight", E, c.n_ff);
        L.w_down    = read_tensor(f, p + "ffn_down.weight", c.n_ff, E);
        if (c.arch == "qwen2" && (L.bq.empty() || L.bk.empty() || L.bv.empty())) {
            throw std::runtime_error("ref: qwen2 layer " + std::to_string(il) + " lacks q/k/v biases");
        }
        if (c.arch == "qwen3" && (L.q_norm.empty() || L.k_norm.empty())) {
            throw std::runtime_error("ref: qwen3 layer " + std::to_string(il) + " lacks q/k norms");
        }
    }
    m.output_norm = read_tensor(f, "output_norm.weight", E, 1);
    m.output      = read_tensor(f, "output.weight", E, c.n_vocab, false);
    if (m.output.empty()) m.output = m.token_embd;  // tied embeddings
    m.rope_freqs = read_tensor(f, "rope_freqs.weight", c.n_rot / 2, 1, false);
    return m;
}

//
// The forward pass
//

namespace {

// out = rmsnorm(x) * w
void rmsnorm(double * out, const double * x, const double * w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

// out (d) = W (d, n) x (n) [+ b]
void matmul(double * out, const std::vector<double> & W, const double * x, int64_t n, int64_t d,
            const std::vector<double> & b = {}) {
    for (int64_t i = 0; i < d; i++) {
        const double * row = W.data() + i * n;
        double         s   = 0;
        for (int64_t j = 0; j < n; j++) s += row[j] * x[j];
        out[i] = s + (b.empty() ? 0.0 : b[static_cast<size_t>(i)]);
    }
}

// Rotates the first n_rot dims of one head in place. Normal mode pairs (2i, 2i+1),
// NeoX mode pairs (i, i + n_rot/2); theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i.
void rope(double * head, int32_t pos, const ember_ref_config & c, const std::vector<double> & freqs) {
    const int32_t half = c.n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        double theta = pos * std::pow(c.freq_base, -2.0 * i / c.n_rot);
        if (!freqs.empty()) theta /= freqs[static_cast<size_t>(i)];
        theta *= c.freq_scale;
        const double cs = std::cos(theta), sn = std::sin(theta);
        const int32_t i0 = c.rope_neox ? i : 2 * i;
        const int32_t i1 = c.rope_neox ? i + half : 2 * i + 1;
        const double  a = head[i0], b = head[i1];
        head[i0] = a * cs - b * sn;
        head[i1] = a * sn + b * cs;
    }
}

// Rounds a row through a tensor type (as storing it in a cache of that type would).
void round_through(double * x, int64_t n, int32_t type) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || !tr->from_float || !tr->to_float || n % tr->block_size != 0) {
        throw std::runtime_error("ref: cannot round through type " + std::to_string(type));
    }
    std::vector<float>   f(x, x + n);
    std::vector<uint8_t> q(ember_row_size(static_cast<ember_type>(type), n));
    tr->from_float(f.data(), q.data(), n);
    tr->to_float(q.data(), f.data(), n);
    for (int64_t i = 0; i < n; i++) x[i] = f[static_cast<size_t>(i)];
}

}  // namespace

std::vector<double> ember_ref_forward(const ember_ref_model & m, const std::vector<int32_t> & tokens,
                                      const ember_ref_options & opts) {
    const ember_ref_config & c = m.cfg;
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t E = c.n_embd, F = c.n_ff, HK = c.head_dim_k, HV = c.head_dim_v;
    const int64_t Q = c.n_head * HK, K = c.n_head_kv * HK, V = c.n_head_kv * HV, O = c.n_head * HV;
    const int32_t group = c.n_head / c.n_head_kv;  // query heads per KV head

    // residual stream x (T, E) and per-token scratch
    std::vector<double> x(static_cast<size_t>(T * E));
    for (int64_t t = 0; t < T; t++) {
        const int32_t tok = tokens[static_cast<size_t>(t)];
        if (tok < 0 || tok >= c.n_vocab) throw std::runtime_error("ref: token id out of range");
        for (int64_t i = 0; i < E; i++) x[t * E + i] = m.token_embd[static_cast<size_t>(tok * E + i)];
    }
    std::vector<double> h(E), q(static_cast<size_t>(T * Q)), k(static_cast<size_t>(T * K)),
        v(static_cast<size_t>(T * V)), att(static_cast<size_t>(O)), proj(E), gate(F), up(F), scores(T);

    for (const ember_ref_layer & L : m.layers) {
        // attention
        for (int64_t t = 0; t < T; t++) {
            rmsnorm(h.data(), &x[t * E], L.attn_norm.data(), E, c.rms_eps);
            matmul(&q[t * Q], L.wq, h.data(), E, Q, L.bq);
            matmul(&k[t * K], L.wk, h.data(), E, K, L.bk);
            matmul(&v[t * V], L.wv, h.data(), E, V, L.bv);
            for (int32_t hh = 0; hh < c.n_head; hh++) {
                double * qh = &q[t * Q + hh * HK];
                if (!L.q_norm.empty()) rmsnorm(qh, qh, L.q_norm.data(), HK, c.rms_eps);
                rope(qh, static_cast<int32_t>(t), c, m.rope_freqs);
            }
            for (int32_t hh = 0; hh < c.n_head_kv; hh++) {
                double * kh = &k[t * K + hh * HK];
                if (!L.k_norm.empty()) rmsnorm(kh, kh, L.k_norm.data(), HK, c.rms_eps);
                rope(kh, static_cast<int32_t>(t), c, m.rope_freqs);
            }
            if (opts.kv_type_k >= 0) round_through(&k[t * K], K, opts.kv_type_k);
            if (opts.kv_type_v >= 0) round_through(&v[t * V], V, opts.kv_type_v);
        }
        for (int64_t t = 0; t < T; t++) {
            for (int32_t hh = 0; hh < c.n_head; hh++) {
                const int32_t  kvh = hh / group;
                const double * qh  = &q[t * Q + hh * HK];
                double         mx  = -INFINITY;
                for (int64_t s = 0; s <= t; s++) {  // causal: keys at positions <= t
                    const double * kh = &k[s * K + kvh * HK];
                    double         d  = 0;
                    for (int64_t i = 0; i < HK; i++) d += qh[i] * kh[i];
                    scores[s] = d / std::sqrt(static_cast<double>(HK));
                    mx        = std::max(mx, scores[s]);
                }
                double sum = 0;
                for (int64_t s = 0; s <= t; s++) {
                    scores[s] = std::exp(scores[s] - mx);
                    sum += scores[s];
                }
                double * out = &att[hh * HV];
                for (int64_t i = 0; i < HV; i++) out[i] = 0;
                for (int64_t s = 0; s <= t; s++) {
                    const double * vh = &v[s * V + kvh * HV];
                    const double   p  = scores[s] / sum;
                    for (int64_t i = 0; i < HV; i++) out[i] += p * vh[i];
                }
            }
            matmul(proj.data(), L.wo, att.data(), O, E);
            for (int64_t i = 0; i < E; i++) x[t * E + i] += proj[i];
        }
        // feed-forward (SwiGLU)
        for (int64_t t = 0; t < T; t++) {
            rmsnorm(h.data(), &x[t * E], L.ffn_norm.data(), E, c.rms_eps);
            matmul(gate.data(), L.w_gate, h.data(), E, F);
            matmul(up.data(), L.w_up, h.data(), E, F);
            for (int64_t i = 0; i < F; i++) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
            matmul(proj.data(), L.w_down, gate.data(), F, E);
            for (int64_t i = 0; i < E; i++) x[t * E + i] += proj[i];
        }
    }

    std::vector<double> logits(static_cast<size_t>(T * c.n_vocab));
    for (int64_t t = 0; t < T; t++) {
        rmsnorm(h.data(), &x[t * E], m.output_norm.data(), E, c.rms_eps);
        matmul(&logits[static_cast<size_t>(t * c.n_vocab)], m.output, h.data(), E, c.n_vocab);
    }
    return logits;
}
