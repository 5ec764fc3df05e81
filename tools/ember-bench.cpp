// ember-bench: prefill (pp) and decode (tg) tokens/s, in the style of llama-bench.
// Uses nothing but include/ember.h.
//
//   ember-bench -m MODEL [-p 512] [-n 128] [-d 0] [-t THREADS] [-r REPS] [--device NAME] [-ngl N]
//               [--ctk TYPE] [--ctv TYPE] [-ub N] [--device-top-k N] [--device-bw MIB] [-o md|json]
//   ember-bench --probe [-t THREADS]     memory read bandwidth of this machine
//
// Decode rows also give the weight bytes read per second (ember_model_decode_bytes x t/s),
// to compare with the --probe bandwidth. The output names the device and describes it
// (ember_device_description: the GPU's name, memory and CUDA driver); on a GPU it also measures
// the device's copy bandwidth before loading the model (ember_device_copy_bandwidth) and gives
// each decode row's share of it ("of bw"; JSON "device_bandwidth_gbs").
//
// Each test runs once to warm up (excluded), then -r times; a run starts from an empty KV
// cache. pp: one batch of p tokens (in micro-batches of -ub). tg: n single-token decodes
// after a one-token prompt. Tokens are random ids (fixed seed), as llama-bench does.
// -d N (llama-bench's --n-depth): each run first fills the cache with N prompt tokens, not
// timed, so pp and tg are measured at that depth ("pp512 @ d4096", "tg128 @ d4096").
// --device-top-k N: contexts keep only the best N candidates per row (device_top_k), computed
// where the logits are, and each decode step reads just the greedy token id with
// ember_get_top_k ("tg128 top-k1"; JSON "device_top_k"). Without it a step queues the copy of
// its whole logits row to the host (on a GPU, behind its kernels) and reads nothing, as
// llama-bench does; the host's work for the next step then overlaps this one's (ember_decode may
// return once queued; every timed run ends with ember_context_synchronize). Neither samples on
// the host.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ember.h"

namespace {

struct options {
    std::string              model;
    std::vector<int32_t>     n_prompt{512};
    std::vector<int32_t>     n_gen{128};
    std::vector<int32_t>     n_depth{0};
    std::vector<int32_t>     threads{0};
    int32_t                  reps         = 5;
    int32_t                  n_ubatch     = 512;
    int32_t                  n_gpu_layers = -1;
    std::string              device;
    std::string              ctk = "f16", ctv = "f16";
    std::string              output = "md";
    int32_t                  device_top_k = 0;
    int32_t                  device_bw    = -1;  // MiB for the device copy bandwidth; -1: 1024 on accelerators, none on the CPU
    bool                     probe  = false;
};

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: ember-bench -m MODEL [options]\n"
                 "  -p N[,N...]        prompt lengths for prefill tests (default 512; 0 = none)\n"
                 "  -n N[,N...]        tokens for decode tests (default 128; 0 = none)\n"
                 "  -d N[,N...]        depth: tokens in the KV cache before each test, not timed (default 0)\n"
                 "  -t N[,N...]        CPU threads (default: all cores)\n"
                 "  -r N               repetitions (default 5), after one warm-up run\n"
                 "  -ub N              micro-batch size for prefill (default 512)\n"
                 "  --device NAME      cpu, cuda, cuda:1, vulkan:0, ... (default: best available)\n"
                 "  -ngl N             layers to offload (default: all)\n"
                 "  --ctk T, --ctv T   KV cache types: f16 (default), f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2\n"
                 "  --device-top-k N   keep only the best N candidates per output row, found on the device;\n"
                 "                     decode then reads just the token id (default 0 = full logits rows)\n"
                 "  --device-bw MIB    measure the device's copy bandwidth with MIB MiB before loading the model\n"
                 "                     (default 1024 on a GPU, 0 = off; 0 on the CPU: see --probe)\n"
                 "  -o md|json         output format (default md)\n"
                 "  --probe            measure memory read bandwidth with -t threads, no model needed\n");
}

bool parse_list(const char * s, std::vector<int32_t> & out) {
    out.clear();
    std::string str = s;
    size_t      pos = 0;
    while (pos <= str.size()) {
        size_t      comma = str.find(',', pos);
        std::string item  = str.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char *      end   = nullptr;
        long        v     = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || v < 0 || v > 1 << 20) return false;
        out.push_back(static_cast<int32_t>(v));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return !out.empty();
}

int parse_args(int argc, char ** argv, options & o) {
    for (int i = 1; i < argc; i++) {
        const std::string a   = argv[i];
        const char *      val = i + 1 < argc ? argv[i + 1] : nullptr;
        auto need = [&]() {
            if (!val) std::fprintf(stderr, "ember-bench: %s needs a value\n", a.c_str());
            return val != nullptr;
        };
        std::vector<int32_t> one;
        bool                 ok = true;
        if (a == "-h" || a == "--help") {
            usage(stdout);
            return 2;
        } else if (a == "--probe") {
            o.probe = true;
            continue;
        } else if (a == "-m" || a == "--model") {
            ok = need() && (o.model = val, true);
        } else if (a == "-p" || a == "--n-prompt") {
            ok = need() && parse_list(val, o.n_prompt);
        } else if (a == "-n" || a == "--n-gen") {
            ok = need() && parse_list(val, o.n_gen);
        } else if (a == "-d" || a == "--n-depth") {
            ok = need() && parse_list(val, o.n_depth);
        } else if (a == "-t" || a == "--threads") {
            ok = need() && parse_list(val, o.threads);
        } else if (a == "-r" || a == "--repetitions") {
            ok = need() && parse_list(val, one) && one.size() == 1 && one[0] >= 1 && (o.reps = one[0], true);
        } else if (a == "-ub" || a == "--ubatch-size") {
            ok = need() && parse_list(val, one) && one.size() == 1 && one[0] >= 1 && (o.n_ubatch = one[0], true);
        } else if (a == "-ngl" || a == "--n-gpu-layers") {
            ok = need() && parse_list(val, one) && one.size() == 1 && (o.n_gpu_layers = one[0], true);
        } else if (a == "--device") {
            ok = need() && (o.device = val, true);
        } else if (a == "--ctk" || a == "-ctk") {
            ok = need() && (o.ctk = val, true);
        } else if (a == "--ctv" || a == "-ctv") {
            ok = need() && (o.ctv = val, true);
        } else if (a == "--device-top-k") {
            std::vector<int32_t> v;
            ok = need() && parse_list(val, v) && v.size() == 1 && (o.device_top_k = v[0], true);
        } else if (a == "--device-bw") {
            ok = need() && parse_list(val, one) && one.size() == 1 && one[0] >= 0 && one[0] <= 16384 && (o.device_bw = one[0], true);
        } else if (a == "-o" || a == "--output") {
            ok = need() && (o.output = val, o.output == "md" || o.output == "json");
        } else {
            std::fprintf(stderr, "ember-bench: unknown argument '%s' (see --help)\n", a.c_str());
            return 1;
        }
        if (!ok) {
            if (val) std::fprintf(stderr, "ember-bench: bad value '%s' for %s\n", val, a.c_str());
            return 1;
        }
        i++;  // every option above takes a value
    }
    if (o.model.empty() && !o.probe) {
        std::fprintf(stderr, "ember-bench: -m MODEL is required (see --help)\n");
        return 1;
    }
    return 0;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct result {
    int32_t             n_prompt = 0, n_gen = 0, n_depth = 0, n_threads = 0;
    std::vector<double> ts;  // tokens/s per repetition
    double mean() const {
        double s = 0;
        for (double v : ts) s += v;
        return ts.empty() ? 0 : s / ts.size();
    }
    double stddev() const {
        if (ts.size() < 2) return 0;
        double m = mean(), s = 0;
        for (double v : ts) s += (v - m) * (v - m);
        return std::sqrt(s / (ts.size() - 1));
    }
};

// Deterministic random token ids in [0, n_vocab).
std::vector<int32_t> random_tokens(int32_t n, int32_t n_vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t & v : t) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v    = static_cast<int32_t>((seed >> 33) % static_cast<uint64_t>(n_vocab));
    }
    return t;
}

// One timed run; returns tokens/s, or a negative value on error. The depth fill goes in
// batches of at most n_batch tokens and is not timed.
double run_once(ember_context * ctx, int32_t n_vocab, int32_t n_prompt, int32_t n_gen, int32_t n_depth, int32_t n_batch, bool read_id) {
    ember_kv_cache_clear(ctx);
    if (n_depth > 0) {
        std::vector<int32_t> toks = random_tokens(n_depth, n_vocab, 11);
        for (int32_t i = 0; i < n_depth; i += n_batch) {
            ember_batch b = ember_batch_one(toks.data() + i, std::min(n_batch, n_depth - i));
            if (ember_decode(ctx, &b) != EMBER_OK) return -1;
        }
    }
    // A GPU decode may return once queued: every timed run ends when its last step is done.
    if (ember_context_synchronize(ctx) != EMBER_OK) return -1;
    if (n_prompt > 0) {
        std::vector<int32_t> toks = random_tokens(n_prompt, n_vocab, 42);
        ember_batch          b    = ember_batch_one(toks.data(), n_prompt);
        const double         t0   = now_s();
        if (ember_decode(ctx, &b) != EMBER_OK || ember_context_synchronize(ctx) != EMBER_OK) return -1;
        return n_prompt / (now_s() - t0);
    }
    int32_t     tok = 1;
    ember_batch b   = ember_batch_one(&tok, 1);
    if (ember_decode(ctx, &b) != EMBER_OK || ember_context_synchronize(ctx) != EMBER_OK) return -1;
    std::vector<int32_t> toks = random_tokens(n_gen, n_vocab, 7);
    const double         t0   = now_s();
    for (int32_t i = 0; i < n_gen; i++) {
        b = ember_batch_one(&toks[i], 1);
        if (ember_decode(ctx, &b) != EMBER_OK) return -1;
        int32_t id = -1;  // the greedy token: what a generation loop would feed back
        if (read_id && ember_get_top_k(ctx, -1, &id, nullptr, 1) != 1) return -1;
    }
    if (ember_context_synchronize(ctx) != EMBER_OK) return -1;
    return n_gen / (now_s() - t0);
}

std::string json_escape(const std::string & s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            o += buf;
            continue;
        }
        o += c;
    }
    return o;
}

// Sums n words with wide loads where the CPU has them (tools get no ISA flags, so the loop is
// cloned per target and picked at load time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint64_t sum_words(const uint64_t * p, size_t n) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    size_t   i  = 0;
    for (; i + 8 <= n; i += 8) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
        a4 += p[i + 4];
        a5 += p[i + 5];
        a6 += p[i + 6];
        a7 += p[i + 7];
    }
    for (; i < n; i++) a0 += p[i];
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

// Read bandwidth: each thread sums its slice of a buffer much larger than the caches; the best
// of several passes, in GB/s (1e9 bytes).
double probe_bandwidth(int32_t n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    const size_t           n = (size_t(1) << 30) / sizeof(uint64_t);  // 1 GiB
    std::vector<uint64_t>  buf(n);
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;  // touch every page
    volatile uint64_t      sink = 0;
    double                 best = 0;
    for (int pass = 0; pass < 6; pass++) {
        std::vector<std::thread> th;
        std::vector<uint64_t>    sums(static_cast<size_t>(n_threads) * 8);
        const double             t0 = now_s();
        for (int32_t t = 0; t < n_threads; t++) {
            th.emplace_back([&, t]() {
                const size_t per = n / n_threads, b = per * t, e = t + 1 == n_threads ? n : b + per;
                sums[static_cast<size_t>(t) * 8] = sum_words(buf.data() + b, e - b);
            });
        }
        for (auto & x : th) x.join();
        const double dt = now_s() - t0;
        for (size_t t = 0; t < sums.size(); t += 8) sink = sink + sums[t];
        if (pass > 0) best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / dt / 1e9);  // pass 0 warms up
    }
    return best;
}

}  // namespace

int main(int argc, char ** argv) {
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        std::fprintf(stderr, "ember-bench: %s\n", ember_last_error());
        return 1;
    }
    options o;
    if (int r = parse_args(argc, argv, o)) return r == 2 ? 0 : 1;
    if (o.probe) {
        for (int32_t t : o.threads) {
            const double gbs = probe_bandwidth(t);
            if (o.output == "json") {
                std::printf("{\"probe\": \"memory_read\", \"n_threads\": %d, \"gb_per_s\": %.3f}\n",
                            t > 0 ? t : static_cast<int>(std::thread::hardware_concurrency()), gbs);
            } else {
                std::printf("memory read bandwidth: %.2f GB/s (%d threads)\n", gbs,
                            t > 0 ? t : static_cast<int>(std::thread::hardware_concurrency()));
            }
        }
        if (o.model.empty()) return 0;
    }
    const int32_t type_k = ember_type_from_name(o.ctk.c_str()), type_v = ember_type_from_name(o.ctv.c_str());
    if (type_k < 0 || type_v < 0) {
        std::fprintf(stderr, "ember-bench: unknown KV cache type '%s'\n", (type_k < 0 ? o.ctk : o.ctv).c_str());
        return 1;
    }

    // The device the model goes to (as ember_model_load picks it): its description, and its copy
    // bandwidth measured before the model takes the memory (decode rows give their share of it).
    const std::string backend = o.device.empty() ? (ember_device_count() > 1 ? ember_device_name(1) : "cpu") : o.device;
    int32_t           dev     = -1;
    for (int32_t i = 0; i < ember_device_count() && dev < 0; i++) {
        const std::string n = ember_device_name(i);
        if (n == backend || n.rfind(backend + ":", 0) == 0) dev = i;
    }
    const char *      dd       = dev >= 0 ? ember_device_description(dev) : nullptr;
    const std::string dev_desc = dd ? dd : "";
    double            dev_bw   = 0.0;
    const int32_t     bw_mib   = o.device_bw >= 0 ? o.device_bw : (dev > 0 ? 1024 : 0);
    if (dev >= 0 && bw_mib > 0 && ember_device_copy_bandwidth(dev, static_cast<uint64_t>(bw_mib) << 20, &dev_bw) != EMBER_OK) {
        std::fprintf(stderr, "ember-bench: device bandwidth not measured: %s\n", ember_last_error());
        dev_bw = 0.0;
    }

    ember_model_params mp = ember_model_default_params();
    mp.n_gpu_layers       = o.n_gpu_layers;
    mp.device             = o.device.empty() ? nullptr : o.device.c_str();
    ember_model * model   = nullptr;
    if (ember_model_load(o.model.c_str(), &mp, &model) != EMBER_OK) {
        std::fprintf(stderr, "ember-bench: cannot load model '%s': %s\n", o.model.c_str(), ember_last_error());
        return 1;
    }
    const int32_t n_vocab = ember_model_n_vocab(model);
    char          desc[256];
    ember_model_desc(model, desc, sizeof(desc));

    std::vector<result> results;
    for (int32_t threads : o.threads) {
        struct test {
            int32_t n_prompt, n_gen, n_depth;
        };
        std::vector<test> tests;
        for (int32_t d : o.n_depth) {
            for (int32_t p : o.n_prompt) {
                if (p > 0) tests.push_back({p, 0, d});
            }
            for (int32_t n : o.n_gen) {
                if (n > 0) tests.push_back({0, n, d});
            }
        }
        for (const test & t : tests) {
            // The cache holds the depth, then the prompt, or the one-token prompt and the generated tokens.
            const int32_t        n_batch = std::max({t.n_prompt, 1, std::min(t.n_depth, o.n_ubatch)});
            ember_context_params cp      = ember_context_default_params();
            cp.n_ctx                     = static_cast<uint32_t>(t.n_depth + std::max(t.n_prompt, t.n_gen + 1));
            cp.n_batch                   = static_cast<uint32_t>(n_batch);
            cp.n_ubatch             = static_cast<uint32_t>(o.n_ubatch);
            cp.n_threads            = threads;
            cp.type_k               = type_k;
            cp.type_v               = type_v;
            cp.device_top_k         = o.device_top_k;
            ember_context * ctx     = nullptr;
            if (ember_context_create(model, &cp, &ctx) != EMBER_OK) {
                std::fprintf(stderr, "ember-bench: cannot create a context: %s\n", ember_last_error());
                ember_model_free(model);
                return 1;
            }
            result r;
            r.n_prompt  = t.n_prompt;
            r.n_gen     = t.n_gen;
            r.n_depth   = t.n_depth;
            r.n_threads = ember_context_n_threads(ctx);
            for (int32_t rep = 0; rep <= o.reps; rep++) {
                const double ts = run_once(ctx, n_vocab, t.n_prompt, t.n_gen, t.n_depth, n_batch, o.device_top_k > 0);
                if (ts < 0) {
                    std::fprintf(stderr, "ember-bench: decode failed: %s\n", ember_last_error());
                    ember_context_free(ctx);
                    ember_model_free(model);
                    return 1;
                }
                if (rep > 0) r.ts.push_back(ts);  // the first run is the warm-up
            }
            ember_context_free(ctx);
            results.push_back(r);
        }
    }

    char         size_str[32], params_str[32];
    const double bytes = static_cast<double>(ember_model_size(model)), params = static_cast<double>(ember_model_n_params(model));
    if (bytes >= 1024.0 * 1024.0 * 1024.0) std::snprintf(size_str, sizeof(size_str), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    else std::snprintf(size_str, sizeof(size_str), "%.2f MiB", bytes / (1024.0 * 1024.0));
    if (params >= 1e9) std::snprintf(params_str, sizeof(params_str), "%.2f B", params / 1e9);
    else std::snprintf(params_str, sizeof(params_str), "%.2f M", params / 1e6);
    std::string  filename = o.model;
    const double decode_bytes = static_cast<double>(ember_model_decode_bytes(model));
    if (o.output == "json") {
        std::printf("[\n");
        for (size_t i = 0; i < results.size(); i++) {
            const result & r = results[i];
            std::printf("  {\n");
            std::printf("    \"build_commit\": \"%s\",\n", ember_version_string());
            std::printf("    \"model_filename\": \"%s\",\n", json_escape(filename).c_str());
            std::printf("    \"model_type\": \"%s\",\n", json_escape(desc).c_str());
            std::printf("    \"model_size\": %llu,\n", static_cast<unsigned long long>(ember_model_size(model)));
            std::printf("    \"model_n_params\": %llu,\n", static_cast<unsigned long long>(ember_model_n_params(model)));
            std::printf("    \"backends\": \"%s\",\n", json_escape(backend).c_str());
            std::printf("    \"n_threads\": %d,\n", r.n_threads);
            std::printf("    \"n_ubatch\": %d,\n", o.n_ubatch);
            std::printf("    \"type_k\": \"%s\",\n    \"type_v\": \"%s\",\n", o.ctk.c_str(), o.ctv.c_str());
            std::printf("    \"n_gpu_layers\": %d,\n", o.n_gpu_layers);
            std::printf("    \"device_top_k\": %d,\n", o.device_top_k);
            std::printf("    \"n_prompt\": %d,\n    \"n_gen\": %d,\n    \"n_depth\": %d,\n", r.n_prompt, r.n_gen, r.n_depth);
            std::printf("    \"samples_ts\": [");
            for (size_t j = 0; j < r.ts.size(); j++) std::printf("%s%.4f", j ? ", " : "", r.ts[j]);
            std::printf("],\n");
            std::printf("    \"decode_bytes_per_token\": %.0f,\n", decode_bytes);
            std::printf("    \"device\": \"%s\",\n", json_escape(dev >= 0 ? ember_device_name(dev) : backend).c_str());
            std::printf("    \"device_description\": \"%s\",\n", json_escape(dev_desc).c_str());
            std::printf("    \"device_bandwidth_gbs\": %.1f,\n", dev_bw);
            std::printf("    \"avg_ts\": %.6f,\n    \"stddev_ts\": %.6f\n", r.mean(), r.stddev());
            std::printf("  }%s\n", i + 1 < results.size() ? "," : "");
        }
        std::printf("]\n");
    } else {
        std::printf("device: %s (%s)", dev >= 0 ? ember_device_name(dev) : backend.c_str(), dev_desc.c_str());
        if (dev_bw > 0) std::printf(", copy bandwidth %.0f GB/s (read + write, %d MiB)", dev_bw, bw_mib);
        std::printf("\n\n| model | size | params | backend | threads | test | t/s | weights read |\n");
        std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
        for (const result & r : results) {
            char test[48];
            if (r.n_prompt > 0) std::snprintf(test, sizeof(test), "pp%d", r.n_prompt);
            else std::snprintf(test, sizeof(test), "tg%d", r.n_gen);
            if (r.n_depth > 0) std::snprintf(test + std::strlen(test), sizeof(test) - std::strlen(test), " @ d%d", r.n_depth);
            if (o.device_top_k > 0) std::snprintf(test + std::strlen(test), sizeof(test) - std::strlen(test), " top-k%d", o.device_top_k);
            char         gbs[48] = " |";
            const double rate    = r.mean() * decode_bytes / 1e9;  // weight bytes read per second, GB
            if (r.n_gen > 0 && dev_bw > 0) std::snprintf(gbs, sizeof(gbs), " %.1f GB/s (%.0f%% of bw) |", rate, 100.0 * rate / dev_bw);
            else if (r.n_gen > 0) std::snprintf(gbs, sizeof(gbs), " %.1f GB/s |", rate);
            std::printf("| %s | %s | %s | %s | %d | %s | %.2f ± %.2f |%s\n", desc, size_str, params_str, backend.c_str(), r.n_threads,
                        test, r.mean(), r.stddev(), gbs);
        }
    }
    ember_model_free(model);
    return 0;
}
