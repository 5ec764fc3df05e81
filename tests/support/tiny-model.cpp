#include "support/tiny-model.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "quant/types.h"
#include "runtime/gguf.h"

namespace {

// Standard normal from a 64-bit Mersenne twister through Box-Muller. Written out (instead of
// std::normal_distribution, whose algorithm is implementation-defined) so files are identical
// on every platform.
struct normal_rng {
    std::mt19937_64 gen;
    explicit normal_rng(uint64_t seed) : gen(seed) {}

    double uniform() {  // [0, 1) with 53 random bits
        return static_cast<double>(gen() >> 11) * (1.0 / 9007199254740992.0);
    }
    double next() {
        const double u1 = 1.0 - uniform();  // (0, 1]
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
    }
};

// llama.cpp's general.file_type (LLAMA_FTYPE_MOSTLY_*) of a file whose 2-D tensors are `type`.
uint32_t file_type_of(int32_t type) {
    switch (type) {
        case EMBER_TYPE_F32:  return 0;
        case EMBER_TYPE_F16:  return 1;
        case EMBER_TYPE_Q4_0: return 2;
        case EMBER_TYPE_Q8_0: return 7;
        case EMBER_TYPE_BF16: return 32;
        default:              return 0;
    }
}

struct builder {
    const tiny_model_spec & spec;
    normal_rng              rng;
    ember_gguf_writer       w;

    builder(const tiny_model_spec & s) : spec(s), rng(s.seed) {}

    std::vector<float> draw(int64_t n, double mean, double std) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto & x : v) x = static_cast<float>(mean + std * rng.next());
        return v;
    }

    void add_f32(const std::string & name, const std::vector<float> & v) {
        const int64_t ne[1] = {static_cast<int64_t>(v.size())};
        w.add_tensor(name, EMBER_TYPE_F32, 1, ne, v.data());
    }

    // A [ne0, ne1] matrix (ne0 contiguous) stored in the spec's weight type.
    void add_matrix(const std::string & name, int64_t ne0, int64_t ne1) {
        const std::vector<float> v = draw(ne0 * ne1, 0.0, spec.w_std);
        const int64_t ne[2] = {ne0, ne1};
        const int32_t type = spec.weight_type;
        if (type == EMBER_TYPE_F32) {
            w.add_tensor(name, EMBER_TYPE_F32, 2, ne, v.data());
            return;
        }
        const ember_type_traits * tr = ember_type_get_traits(type);
        if (!tr || !tr->from_float) {
            throw std::runtime_error("tiny model: cannot produce tensor type " + std::to_string(type));
        }
        if (ne0 % tr->block_size != 0) {
            throw std::runtime_error("tiny model: " + name + " row of " + std::to_string(ne0) +
                                     " is not a multiple of the block size");
        }
        const size_t row = ember_row_size(static_cast<ember_type>(type), ne0);
        std::vector<uint8_t> q(row * static_cast<size_t>(ne1));
        for (int64_t r = 0; r < ne1; r++) {
            tr->from_float(v.data() + r * ne0, q.data() + r * row, ne0);
        }
        w.add_tensor(name, static_cast<ember_type>(type), 2, ne, q.data());
    }
};

}  // namespace

std::string ember_test_tiny_model_name(const tiny_model_spec & s) {
    const char * tn = ember_type_get_name(s.weight_type);
    std::string n = "tiny-" + s.arch + "-" + (tn ? tn : "t" + std::to_string(s.weight_type));
    n += "-v" + std::to_string(s.n_vocab) + "-e" + std::to_string(s.n_embd) + "-l" + std::to_string(s.n_layer) +
         "-h" + std::to_string(s.n_head) + "-kv" + std::to_string(s.n_head_kv) + "-f" + std::to_string(s.n_ff);
    if (s.head_dim) n += "-hd" + std::to_string(s.head_dim);
    if (s.n_rot) n += "-rot" + std::to_string(s.n_rot);
    if (s.tied) n += "-tied";
    if (s.rope_freqs) n += "-ropefreqs";
    if (s.rope_scale_linear > 0) n += "-linear" + std::to_string(static_cast<int>(s.rope_scale_linear * 100));
    if (s.rope_freq_base != 10000.0f) n += "-base" + std::to_string(static_cast<long long>(s.rope_freq_base));
    n += "-s" + std::to_string(s.seed);
    return n;
}

std::string ember_test_make_tiny_model(const tiny_model_spec & s, const std::string & dir) {
    const std::string & A = s.arch;
    if (A != "llama" && A != "qwen2" && A != "qwen3") throw std::runtime_error("tiny model: unknown arch " + A);
    if (s.n_embd <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_layer <= 0 || s.n_ff <= 0 || s.n_vocab < 8 ||
        s.n_head % s.n_head_kv != 0) {
        throw std::runtime_error("tiny model: bad hyperparameters");
    }
    const int32_t head_dim = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
    const int32_t n_rot    = s.n_rot ? s.n_rot : head_dim;
    const int64_t n_q      = static_cast<int64_t>(s.n_head) * head_dim;
    const int64_t n_kv     = static_cast<int64_t>(s.n_head_kv) * head_dim;

    builder b(s);
    ember_gguf_writer & w = b.w;

    // Metadata, in the order llama.cpp's converter writes it.
    w.set_str("general.architecture", A);
    w.set_str("general.name", "tiny-" + A);
    w.set_u32("general.file_type", file_type_of(s.weight_type));
    w.set_u32("general.quantization_version", 2);
    w.set_u32(A + ".context_length", static_cast<uint32_t>(s.n_ctx_train));
    w.set_u32(A + ".embedding_length", static_cast<uint32_t>(s.n_embd));
    w.set_u32(A + ".block_count", static_cast<uint32_t>(s.n_layer));
    w.set_u32(A + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32(A + ".attention.head_count", static_cast<uint32_t>(s.n_head));
    w.set_u32(A + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    w.set_f32(A + ".attention.layer_norm_rms_epsilon", s.rms_eps);
    w.set_f32(A + ".rope.freq_base", s.rope_freq_base);
    if (A == "llama" || s.n_rot) w.set_u32(A + ".rope.dimension_count", static_cast<uint32_t>(n_rot));
    if (A == "llama") w.set_u32(A + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
    if (A == "qwen3" || s.head_dim) {
        w.set_u32(A + ".attention.key_length", static_cast<uint32_t>(head_dim));
        w.set_u32(A + ".attention.value_length", static_cast<uint32_t>(head_dim));
    }
    if (s.rope_scale_linear > 0) {
        w.set_str(A + ".rope.scaling.type", "linear");
        w.set_f32(A + ".rope.scaling.factor", s.rope_scale_linear);
    }

    // A minimal SentencePiece-style vocabulary: <unk>, <s>, </s>, then distinct pieces.
    std::vector<std::string> tokens;
    std::vector<float>       scores;
    std::vector<int32_t>     types;
    for (int32_t i = 0; i < s.n_vocab; i++) {
        if (i == 0) {
            tokens.push_back("<unk>");
            types.push_back(2);
        } else if (i == 1) {
            tokens.push_back("<s>");
            types.push_back(3);
        } else if (i == 2) {
            tokens.push_back("</s>");
            types.push_back(3);
        } else {
            // "\xe2\x96\x81" is U+2581, SentencePiece's word-start marker.
            std::string piece = (i % 2 ? "\xe2\x96\x81" : "");
            for (int32_t v = i; v > 0; v /= 26) piece += static_cast<char>('a' + v % 26);
            tokens.push_back(piece);
            types.push_back(1);
        }
        scores.push_back(i < 3 ? 0.0f : -static_cast<float>(i - 3));
    }
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_str("tokenizer.ggml.pre", "default");
    w.set_arr_str("tokenizer.ggml.tokens", tokens);
    w.set_arr_f32("tokenizer.ggml.scores", scores);
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);

    // Tensors, drawn in file order.
    b.add_matrix("token_embd.weight", s.n_embd, s.n_vocab);
    for (int32_t il = 0; il < s.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        b.add_f32(p + "attn_norm.weight", b.draw(s.n_embd, 1.0, 0.1));
        b.add_matrix(p + "attn_q.weight", s.n_embd, n_q);
        b.add_matrix(p + "attn_k.weight", s.n_embd, n_kv);
        b.add_matrix(p + "attn_v.weight", s.n_embd, n_kv);
        if (A == "qwen2") {
            b.add_f32(p + "attn_q.bias", b.draw(n_q, 0.0, 0.1));
            b.add_f32(p + "attn_k.bias", b.draw(n_kv, 0.0, 0.1));
            b.add_f32(p + "attn_v.bias", b.draw(n_kv, 0.0, 0.1));
        }
        if (A == "qwen3") {
            b.add_f32(p + "attn_q_norm.weight", b.draw(head_dim, 1.0, 0.1));
            b.add_f32(p + "attn_k_norm.weight", b.draw(head_dim, 1.0, 0.1));
        }
        b.add_matrix(p + "attn_output.weight", n_q, s.n_embd);
        b.add_f32(p + "ffn_norm.weight", b.draw(s.n_embd, 1.0, 0.1));
        b.add_matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff);
        b.add_matrix(p + "ffn_up.weight", s.n_embd, s.n_ff);
        b.add_matrix(p + "ffn_down.weight", s.n_ff, s.n_embd);
    }
    b.add_f32("output_norm.weight", b.draw(s.n_embd, 1.0, 0.1));
    if (!s.tied) b.add_matrix("output.weight", s.n_embd, s.n_vocab);
    if (s.rope_freqs) {
        // llama3-style factors: 1 for the fastest pairs, growing towards the slow ones.
        std::vector<float> f(static_cast<size_t>(n_rot / 2));
        for (size_t i = 0; i < f.size(); i++) {
            const double t = static_cast<double>(i) / static_cast<double>(f.size());
            f[i] = static_cast<float>(1.0 + 7.0 * t * t + 0.25 * std::fabs(b.rng.next()));
        }
        b.add_f32("rope_freqs.weight", f);
    }

    const std::string path = dir + "/" + (s.name.empty() ? ember_test_tiny_model_name(s) : s.name) + ".gguf";
    w.write_to_file(path);
    return path;
}
