// Writes random-weight benchmark models with the exact shapes of well-known models, quantized
// to any type or mix ember-quantize knows, without ever holding the model in memory: the
// tensors are a model source (runtime/model-source.h) whose rows are drawn on demand, and the
// quantizer's streaming writer turns them into the GGUF file. The files are benchmark fixtures
// made at run time (scripts/bench-cpu.sh, scripts/bench-gpu.sh), never committed.
//
//   make-bench-model --shape 1b|8b|tiny [--type Q4_K_M] [-t THREADS] -o OUT.gguf
//
// Shapes: 1b = Llama-3.2-1B (n_embd 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab
// 128256, tied embeddings); 8b = Llama-3.1-8B (4096, 32 layers, 32/8 heads, ffn 14336, vocab
// 128256, untied); tiny = a 4-layer 256-wide model for quick checks.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ember.h"
#include "runtime/error.h"
#include "runtime/model-source.h"
#include "runtime/quantize.h"

namespace {

struct shape {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    bool    tied;
    float   rope_base;
};

// Weights: a cheap, deterministic, roughly normal draw (the sum of four uniforms from a
// splitmix64 stream keyed by tensor and index), so any element is computed independently and
// the threads need no shared state. Benchmarks need realistic magnitudes, not a true normal.
inline uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void fill(float * dst, int64_t n, uint64_t key, float mean, float std) {
    const int nt = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++) {
        th.emplace_back([=]() {
            const int64_t per = (n + nt - 1) / nt, b = per * t, e = std::min(n, b + per);
            for (int64_t i = b; i < e; i++) {
                const uint64_t r = splitmix(key * 0x100000001b3ull + static_cast<uint64_t>(i));
                // four 16-bit uniforms: mean 2, variance 4/12
                const float u = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) *
                                (1.0f / 65536.0f);
                dst[i] = mean + std * (u - 2.0f) * 1.7320508f;
            }
        });
    }
    for (auto & x : th) x.join();
}

std::unique_ptr<ember_model_source> make_source(const shape & s) {
    auto src  = std::make_unique<ember_model_source>();
    src->what = "random benchmark model";
    auto kv   = [&](const std::string & k, ember_gguf_value v) { src->kv.push_back({k, std::move(v)}); };
    const std::string A = "llama";
    kv("general.architecture", ember_gguf_string(A));
    kv("general.name", ember_gguf_string("ember-bench-random"));
    kv("general.file_type", ember_gguf_uint(EMBER_GGUF_UINT32, 0));
    kv(A + ".context_length", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_ctx));
    kv(A + ".embedding_length", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_embd));
    kv(A + ".block_count", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_layer));
    kv(A + ".feed_forward_length", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_ff));
    kv(A + ".attention.head_count", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_head));
    kv(A + ".attention.head_count_kv", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_head_kv));
    kv(A + ".attention.layer_norm_rms_epsilon", ember_gguf_float(EMBER_GGUF_FLOAT32, 1e-5f));
    kv(A + ".rope.freq_base", ember_gguf_float(EMBER_GGUF_FLOAT32, s.rope_base));
    kv(A + ".rope.dimension_count", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_embd / s.n_head));
    kv(A + ".vocab_size", ember_gguf_uint(EMBER_GGUF_UINT32, s.n_vocab));

    // A SentencePiece-style vocabulary of distinct pieces (benchmarks feed token ids directly).
    ember_gguf_value tokens, scores, types;
    tokens.type = scores.type = types.type = EMBER_GGUF_ARRAY;
    tokens.arr_type = EMBER_GGUF_STRING;
    scores.arr_type = EMBER_GGUF_FLOAT32;
    types.arr_type  = EMBER_GGUF_INT32;
    tokens.arr_n = scores.arr_n = types.arr_n = static_cast<uint64_t>(s.n_vocab);
    scores.arr_data.resize(4 * static_cast<size_t>(s.n_vocab));
    types.arr_data.resize(4 * static_cast<size_t>(s.n_vocab));
    for (int32_t i = 0; i < s.n_vocab; i++) {
        std::string piece;
        int32_t     ty = 1;
        if (i == 0) piece = "<unk>", ty = 2;
        else if (i == 1) piece = "<s>", ty = 3;
        else if (i == 2) piece = "</s>", ty = 3;
        else {
            piece = (i % 2 ? "\xe2\x96\x81" : "");
            for (int32_t v = i; v > 0; v /= 26) piece += static_cast<char>('a' + v % 26);
        }
        tokens.arr_str.push_back(piece);
        const float sc = i < 3 ? 0.0f : -static_cast<float>(i - 3);
        std::memcpy(&scores.arr_data[4 * static_cast<size_t>(i)], &sc, 4);
        std::memcpy(&types.arr_data[4 * static_cast<size_t>(i)], &ty, 4);
    }
    kv("tokenizer.ggml.model", ember_gguf_string("llama"));
    kv("tokenizer.ggml.pre", ember_gguf_string("default"));
    kv("tokenizer.ggml.tokens", tokens);
    kv("tokenizer.ggml.scores", scores);
    kv("tokenizer.ggml.token_type", types);
    kv("tokenizer.ggml.bos_token_id", ember_gguf_uint(EMBER_GGUF_UINT32, 1));
    kv("tokenizer.ggml.eos_token_id", ember_gguf_uint(EMBER_GGUF_UINT32, 2));
    kv("tokenizer.ggml.unknown_token_id", ember_gguf_uint(EMBER_GGUF_UINT32, 0));
    kv("tokenizer.ggml.add_bos_token", ember_gguf_uint(EMBER_GGUF_BOOL, true));

    uint64_t key = 1;
    auto add = [&](const std::string & name, int64_t ne0, int64_t ne1, float mean, float std) {
        ember_source_tensor t;
        t.name   = name;
        t.type   = EMBER_TYPE_F32;
        t.n_dims = ne1 > 1 ? 2 : 1;
        t.ne[0]  = ne0;
        t.ne[1]  = ne1;
        t.nbytes = static_cast<uint64_t>(ne0) * static_cast<uint64_t>(ne1) * 4;
        const uint64_t k = key++;
        t.read = [=](void * dst) { fill(static_cast<float *>(dst), ne0 * ne1, k, mean, std); };
        src->tensors.push_back(std::move(t));
    };
    const int64_t hd = s.n_embd / s.n_head, n_kv = hd * s.n_head_kv;
    const float   ws = 0.02f;
    add("token_embd.weight", s.n_embd, s.n_vocab, 0, ws);
    for (int32_t il = 0; il < s.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        add(p + "attn_norm.weight", s.n_embd, 1, 1, 0.1f);
        add(p + "attn_q.weight", s.n_embd, s.n_embd, 0, ws);
        add(p + "attn_k.weight", s.n_embd, n_kv, 0, ws);
        add(p + "attn_v.weight", s.n_embd, n_kv, 0, ws);
        add(p + "attn_output.weight", s.n_embd, s.n_embd, 0, ws);
        add(p + "ffn_norm.weight", s.n_embd, 1, 1, 0.1f);
        add(p + "ffn_gate.weight", s.n_embd, s.n_ff, 0, ws);
        add(p + "ffn_up.weight", s.n_embd, s.n_ff, 0, ws);
        add(p + "ffn_down.weight", s.n_ff, s.n_embd, 0, ws);
    }
    add("output_norm.weight", s.n_embd, 1, 1, 0.1f);
    if (!s.tied) add("output.weight", s.n_embd, s.n_vocab, 0, ws);
    return src;
}

}  // namespace

int main(int argc, char ** argv) {
    std::string shape_name, type = "F16", out;
    int32_t     threads = 0;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "make-bench-model: %s needs a value\n", a.c_str());
            return 1;
        }
        if (a == "--shape") shape_name = argv[++i];
        else if (a == "--type") type = argv[++i];
        else if (a == "-t") threads = std::atoi(argv[++i]);
        else if (a == "-o") out = argv[++i];
        else {
            std::fprintf(stderr, "usage: make-bench-model --shape 1b|8b|8bw|8bn|tiny [--type T] [-t N] -o OUT.gguf\n");
            return 1;
        }
    }
    shape s{};
    if (shape_name == "1b") s = {128256, 2048, 16, 32, 8, 8192, 131072, true, 500000.0f};
    else if (shape_name == "8b") s = {128256, 4096, 32, 32, 8, 14336, 131072, false, 500000.0f};
    // 8bw / 8bn: the 8B shape with a wider / narrower FFN (n_ff 16896 = 32 x 528, 12672 = 32 x 396), so
    // a decode gate / up launch of one block per 32 hidden units has exactly 4 / 3 blocks for each of
    // a 132-SM GPU's SMs where the 8B's 14336 gives 3.39: whether a grid's uneven last wave costs
    // the products their bandwidth (PERF-NOTES, session 70). Not a real model's shape.
    else if (shape_name == "8bw") s = {128256, 4096, 32, 32, 8, 16896, 131072, false, 500000.0f};
    else if (shape_name == "8bn") s = {128256, 4096, 32, 32, 8, 12672, 131072, false, 500000.0f};
    else if (shape_name == "tiny") s = {4096, 256, 4, 8, 4, 768, 2048, false, 10000.0f};
    else {
        std::fprintf(stderr, "make-bench-model: --shape must be 1b, 8b, 8bw, 8bn or tiny\n");
        return 1;
    }
    if (out.empty()) {
        std::fprintf(stderr, "make-bench-model: -o OUT.gguf is required\n");
        return 1;
    }
    ember_log_set_level(EMBER_LOG_INFO);
    try {
        ember_quantize_options o;
        o.ftype     = type;
        o.n_threads = threads;
        const ember_quantize_result r = ember_quantize_source(*make_source(s), out, o);
        std::fprintf(stderr, "make-bench-model: %s: %.2f GB in %.1f s\n", out.c_str(), r.file_bytes / 1e9, r.seconds);
    } catch (const ember_error & e) {
        std::fprintf(stderr, "make-bench-model: %s\n", e.what());
        return 1;
    }
    return 0;
}
