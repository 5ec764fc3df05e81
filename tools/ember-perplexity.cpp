// ember-perplexity: perplexity of a model over a text file, and KL divergence of a model against
// the saved log-probabilities of a base model, computed the way llama.cpp's perplexity tool
// computes them so that the numbers can be compared. Uses nothing but include/ember.h.
//
//   ember-perplexity -m MODEL -f TEXT [-c 512] [-b N] [-t N] [--chunks N] [--ctk T] [--ctv T] [-o md|json]
//   ember-perplexity -m BASE  -f TEXT --kl-divergence-base FILE [...]        (saves the base)
//   ember-perplexity -m MODEL [-f TEXT] --kl-divergence-base FILE --kl-divergence [...]
//
// Method (llama.cpp's perplexity() with its defaults): the whole text is tokenized once, with
// BOS when the model adds one, and cut into n_chunk = n_tokens / n_ctx chunks (the tail is
// dropped). Each chunk starts from an empty KV cache, its first token is replaced by BOS when
// the model adds BOS, and only its second half is scored: the logits at positions
// n_ctx/2 .. n_ctx-2 predict the tokens after them. The negative log-likelihood of a token is
// log-sum-exp(logits) - logit[token] in double; PPL = exp(mean NLL), and its error is
// PPL * sqrt(var(NLL) / (count - 1)). The KL-divergence statistics (mean with its standard
// error, percentiles, same top token, RMS of the change of the correct token's probability,
// the PPL ratio with the NLL covariance taken into account) follow llama.cpp's kl_divergence().
// One difference: the base distribution decoded from the file is renormalized before the KL
// sum, so that the rounding of the stored log-probabilities cannot bias the mean (the KLD of a
// model against its own base is about 1e-8, not the ~1e-5 noise of an unnormalized sum).
//
// Base file (--kl-divergence-base without --kl-divergence), version 1, little-endian:
//   offset  0  char     magic[8]   "EMBRKLD\0"
//           8  uint32   version    1
//          12  uint32   n_ctx      tokens per chunk
//          16  uint32   n_vocab
//          20  uint32   n_chunk
//          24  uint32   first      first scored position (n_ctx / 2)
//          28  uint32   flags      bit 0: BOS was put at each chunk's first position
//          32  int32    tokens[n_chunk * n_ctx]   the text's tokens (before the BOS substitution)
//   then, for each chunk and each scored position j = first .. n_ctx-2, one row:
//           float    scale      step of the codes, in nats
//           float    lp_min     log-probability of code 0
//           float    lp_tok     exact log-probability of the correct next token
//           int32    top        the base model's most likely token (lowest id on ties)
//           uint16   code[n_vocab rounded up to even]
//                               log p(i) ~= lp_min + scale * code[i]; the range is the row's own,
//                               at most 32 nats below its top (smaller log-probs are clamped)
//   A row is 16 + 2 * n_vocab bytes (64 KB for a 32000-token vocabulary), like llama.cpp's
//   uint16 files; the file is written under FILE.tmp and renamed when complete.
//
// -o json prints one object: ppl, ppl_err, n_tokens (scored tokens), n_chunk, n_ctx, chunk_ppl;
// with --kl-divergence also ppl_base, ppl_base_err, ln_ppl_ratio(_err), ppl_ratio(_err),
// ppl_diff(_err), kld_mean, kld_err, kld_median, kld_p90, kld_p95, kld_p99, kld_p999, kld_max,
// same_top_pct, same_top_err (percent), rms_dp, rms_dp_err, dp_mean, dp_max, dp_min (probabilities,
// not percent). Non-finite values are null. Progress then goes to stderr.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ember.h"

namespace {

constexpr char     k_magic[8]   = {'E', 'M', 'B', 'R', 'K', 'L', 'D', '\0'};
constexpr uint32_t k_version    = 1;
constexpr size_t   k_header     = 32;
constexpr size_t   k_row_header = 16;
constexpr double   k_lp_range   = 32.0;  // nats below the top log-prob that the codes cover

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: ember-perplexity -m MODEL -f TEXT [options]\n"
                 "  -m, --model PATH           GGUF model\n"
                 "  -f, --file PATH            text to score (UTF-8); optional with --kl-divergence, where it\n"
                 "                             is checked against the base file's tokens\n"
                 "  -c, --ctx-size N           tokens per chunk (default 512; at most the trained context)\n"
                 "  -b, --batch-size N         tokens per decode call (default: -c)\n"
                 "  -t, --threads N            CPU threads (default: all cores)\n"
                 "  --chunks N                 score at most N chunks (default: all)\n"
                 "  --ctk T, --ctv T           KV cache types: f16 (default), f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2\n"
                 "  --kl-divergence-base FILE  without --kl-divergence: save the tokens and the log-probs\n"
                 "                             of every scored position to FILE (about 64 KB per token\n"
                 "                             for a 32000-token vocabulary)\n"
                 "  --kl-divergence            compare the model with the base saved in FILE\n"
                 "  -o md|json                 output format (default md)\n"
                 "  -h, --help                 this text\n");
}

int fail(const char * fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fputs("ember-perplexity: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    return 1;
}

struct options {
    std::string model, text, base_file;
    std::string ctk = "f16", ctv = "f16", output = "md";
    long long   n_ctx = 512, n_batch = 0, n_threads = 0, n_chunks = -1;
    bool        n_ctx_set = false, kld = false;
};

bool parse_int(const char * s, long long lo, long long hi, long long & out) {
    if (!s || !*s) return false;
    errno            = 0;
    char *    end    = nullptr;
    long long v      = std::strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
    out = v;
    return true;
}

// 0 = go on, 1 = error (reported), 2 = --help printed.
int parse_args(int argc, char ** argv, options & o) {
    for (int i = 1; i < argc; i++) {
        const std::string a   = argv[i];
        const char *      val = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "-h" || a == "--help") {
            usage(stdout);
            return 2;
        }
        if (a == "--kl-divergence") {
            o.kld = true;
            continue;
        }
        const bool known = a == "-m" || a == "--model" || a == "-f" || a == "--file" || a == "-c" || a == "--ctx-size" ||
                           a == "-b" || a == "--batch-size" || a == "-t" || a == "--threads" || a == "--chunks" ||
                           a == "--ctk" || a == "-ctk" || a == "--ctv" || a == "-ctv" || a == "--kl-divergence-base" ||
                           a == "-o" || a == "--output";
        if (!known) return fail("unknown argument '%s' (see --help)", a.c_str());
        if (!val) return fail("%s needs a value", a.c_str());
        bool ok = true;
        if (a == "-m" || a == "--model") o.model = val;
        else if (a == "-f" || a == "--file") o.text = val;
        else if (a == "-c" || a == "--ctx-size") ok = o.n_ctx_set = parse_int(val, 4, 1 << 24, o.n_ctx);
        else if (a == "-b" || a == "--batch-size") ok = parse_int(val, 1, 1 << 24, o.n_batch);
        else if (a == "-t" || a == "--threads") ok = parse_int(val, 0, 4096, o.n_threads);
        else if (a == "--chunks") ok = parse_int(val, 1, 1 << 24, o.n_chunks);
        else if (a == "--ctk" || a == "-ctk") o.ctk = val;
        else if (a == "--ctv" || a == "-ctv") o.ctv = val;
        else if (a == "--kl-divergence-base") o.base_file = val;
        else ok = (o.output = val, o.output == "md" || o.output == "json");
        if (!ok) {
            const char * want = a == "-o" || a == "--output" ? " (md or json)"
                              : a == "-c" || a == "--ctx-size" ? " (an integer, at least 4)"
                              : a == "-t" || a == "--threads"  ? " (an integer, 0 = all cores)"
                                                               : " (a positive integer)";
            return fail("bad value '%s' for %s%s", val, a.c_str(), want);
        }
        i++;
    }
    if (o.model.empty()) return fail("-m MODEL is required (see --help)");
    if (o.kld && o.base_file.empty()) return fail("--kl-divergence needs --kl-divergence-base FILE (made by a run without --kl-divergence)");
    if (!o.kld && o.text.empty()) return fail("-f TEXT is required (see --help)");
    if (ember_type_from_name(o.ctk.c_str()) < 0) return fail("unknown K cache type '%s' (f16, f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2)", o.ctk.c_str());
    if (ember_type_from_name(o.ctv.c_str()) < 0) return fail("unknown V cache type '%s' (f16, f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2)", o.ctv.c_str());
    return 0;
}

bool read_text(const std::string & path, std::string & out) {
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    char   buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

// The text's tokens, with BOS (and EOS) as the model's metadata asks, specials not parsed:
// what llama.cpp's common_tokenize(ctx, text, true) gives.
bool tokenize(const ember_model * model, const std::string & text, std::vector<int32_t> & out) {
    if (text.size() > INT32_MAX) return false;
    const int32_t len = static_cast<int32_t>(text.size());
    const int32_t n   = ember_tokenize(model, text.data(), len, nullptr, 0, 1, 0);
    if (n < 0) return false;
    out.resize(static_cast<size_t>(n));
    return n == 0 || ember_tokenize(model, text.data(), len, out.data(), n, 1, 0) == n;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool little_endian() {
    const uint16_t one = 1;
    uint8_t        b;
    std::memcpy(&b, &one, 1);
    return b == 1;
}

// log-sum-exp of a row of logits (in double, after subtracting the max as llama.cpp does) and its
// argmax (lowest id on ties).
struct row_norm {
    double  log_z;
    int32_t top;
};

row_norm normalize(const float * l, int32_t n) {
    float   max = l[0];
    int32_t top = 0;
    for (int32_t i = 1; i < n; i++) {
        if (l[i] > max) max = l[i], top = i;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += std::exp(static_cast<double>(l[i]) - max);
    return {max + std::log(sum), top};
}

// Evaluates chunks and keeps the logits of the scored positions first .. n_ctx-2.
struct evaluator {
    ember_context *      ctx = nullptr;
    int32_t              n_ctx = 0, n_batch = 0, n_vocab = 0, first = 0, bos = -1;
    bool                 add_bos = false;
    std::vector<float>   logits;  // (n_ctx - 1 - first) rows of n_vocab
    std::vector<int32_t> tok, pos;
    std::vector<int8_t>  want;

    int32_t n_score() const { return n_ctx - 1 - first; }
    const float * row(int32_t j) const { return logits.data() + static_cast<size_t>(j - first) * n_vocab; }

    bool eval(const int32_t * chunk) {
        tok.assign(chunk, chunk + n_ctx);
        if (add_bos) tok[0] = bos;
        if (ember_kv_cache_clear(ctx) != EMBER_OK) return false;
        for (int32_t j0 = 0; j0 < n_ctx; j0 += n_batch) {
            const int32_t n = std::min(n_batch, n_ctx - j0);
            pos.resize(static_cast<size_t>(n));
            want.resize(static_cast<size_t>(n));
            for (int32_t k = 0; k < n; k++) {
                pos[k]  = j0 + k;
                want[k] = pos[k] >= first && pos[k] <= n_ctx - 2;
            }
            ember_batch b = ember_batch_one(tok.data() + j0, n);
            b.pos         = pos.data();
            b.logits      = want.data();
            if (ember_decode(ctx, &b) != EMBER_OK) return false;
            for (int32_t k = 0; k < n; k++) {
                if (!want[k]) continue;
                const float * l = ember_get_logits_ith(ctx, k);
                if (!l) return false;
                std::memcpy(logits.data() + static_cast<size_t>(pos[k] - first) * n_vocab, l, sizeof(float) * n_vocab);
            }
        }
        return true;
    }
};

// mean and standard error of the mean from running sums, as llama.cpp's mean_and_uncertainty
struct mean_err {
    double mean = 0, err = 0;
};
mean_err mean_and_err(double sum, double sum2, int64_t n) {
    mean_err r;
    if (n < 1) return r;
    r.mean    = sum / n;
    double v  = sum2 / n - r.mean * r.mean;
    r.err     = v > 0 && n > 10 ? std::sqrt(v / (n - 1)) : 0.0;
    return r;
}
double covariance(double sa, double sb, double sab, int64_t n) {
    if (n < 10) return 0.0;
    return (sab / n - (sa / n) * (sb / n)) / (n - 1);
}
// v sorted, not empty; linear interpolation between ranks as llama.cpp does
double percentile(const std::vector<double> & v, double f) {
    if (f <= 0) return v.front();
    if (f >= 1) return v.back();
    double p  = f * (v.size() - 1);
    size_t ip = static_cast<size_t>(p);
    p -= ip;
    return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}
double median(const std::vector<double> & v) {
    const size_t n = v.size();
    return n % 2 == 0 ? 0.5 * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

// JSON output: numbers with 10 significant digits, null when not finite.
struct json_obj {
    std::string s = "{";
    void key(const char * k) { s += (s.size() > 1 ? ", \"" : "\"") + std::string(k) + "\": "; }
    void num(const char * k, double v) {
        key(k);
        char buf[64];
        if (std::isfinite(v)) std::snprintf(buf, sizeof(buf), "%.10g", v);
        else std::snprintf(buf, sizeof(buf), "null");
        s += buf;
    }
    void str(const char * k, const std::string & v) {
        key(k);
        s += '"';
        for (unsigned char c : v) {
            if (c == '"' || c == '\\') s += '\\', s += static_cast<char>(c);
            else if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                s += buf;
            } else s += static_cast<char>(c);
        }
        s += '"';
    }
    void arr(const char * k, const std::vector<double> & v) {
        key(k);
        s += '[';
        for (size_t i = 0; i < v.size(); i++) {
            char buf[64];
            if (std::isfinite(v[i])) std::snprintf(buf, sizeof(buf), "%.10g", v[i]);
            else std::snprintf(buf, sizeof(buf), "null");
            s += (i ? ", " : "") + std::string(buf);
        }
        s += ']';
    }
    void print() { std::printf("%s}\n", s.c_str()); }
};

// ---- base file ----------------------------------------------------------------------------

size_t row_bytes(int32_t n_vocab) { return k_row_header + 2 * static_cast<size_t>((n_vocab + 1) / 2 * 2); }

void put_u32(unsigned char * p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t get_u32(const unsigned char * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Encodes one row of logits (see the format at the top) into `out` (row_bytes(n_vocab) bytes).
void encode_row(const float * l, int32_t n_vocab, const row_norm & q, int32_t next_tok, unsigned char * out) {
    float lmin = l[0];
    for (int32_t i = 1; i < n_vocab; i++) lmin = std::min(lmin, l[i]);
    const double lp_top = static_cast<double>(l[q.top]) - q.log_z;
    const double lp_low = std::max(static_cast<double>(lmin) - q.log_z, lp_top - k_lp_range);
    // the reader decodes with these float values, so the codes are computed from them too
    const float scale  = static_cast<float>((lp_top - lp_low) / 65535.0);
    const float lp_min = static_cast<float>(lp_low);
    const float lp_tok = static_cast<float>(static_cast<double>(l[next_tok]) - q.log_z);
    const int32_t top  = q.top;
    std::memcpy(out + 0, &scale, 4);
    std::memcpy(out + 4, &lp_min, 4);
    std::memcpy(out + 8, &lp_tok, 4);
    std::memcpy(out + 12, &top, 4);
    unsigned char * codes = out + k_row_header;
    std::memset(codes, 0, row_bytes(n_vocab) - k_row_header);
    if (scale <= 0.0f) return;  // a flat row: every log-prob is lp_min
    const double inv = 1.0 / scale;
    for (int32_t i = 0; i < n_vocab; i++) {
        const double c    = std::nearbyint((static_cast<double>(l[i]) - q.log_z - lp_min) * inv);
        const uint16_t v  = static_cast<uint16_t>(std::min(65535.0, std::max(0.0, c)));
        std::memcpy(codes + 2 * static_cast<size_t>(i), &v, 2);
    }
}

struct base_reader {
    FILE *               f = nullptr;
    uint32_t             n_ctx = 0, n_vocab = 0, n_chunk = 0, first = 0, flags = 0;
    std::vector<int32_t> tokens;
    ~base_reader() {
        if (f) std::fclose(f);
    }
};

// Opens and checks a base file; on failure returns false with `err` set.
bool open_base(const std::string & path, base_reader & b, std::string & err) {
    b.f = std::fopen(path.c_str(), "rb");
    if (!b.f) return err = "cannot open " + path + ": " + std::strerror(errno), false;
    unsigned char h[k_header];
    if (std::fread(h, 1, k_header, b.f) != k_header || std::memcmp(h, k_magic, 8) != 0)
        return err = path + " is not an ember-perplexity base file (bad magic; make one with --kl-divergence-base without --kl-divergence)", false;
    const uint32_t version = get_u32(h + 8);
    if (version != k_version) return err = path + ": unsupported base file version " + std::to_string(version) + " (this tool reads 1)", false;
    b.n_ctx   = get_u32(h + 12);
    b.n_vocab = get_u32(h + 16);
    b.n_chunk = get_u32(h + 20);
    b.first   = get_u32(h + 24);
    b.flags   = get_u32(h + 28);
    if (b.n_ctx < 4 || b.n_ctx > (1u << 24) || b.n_vocab < 1 || b.n_vocab > (1u << 24) || b.n_chunk < 1 ||
        b.n_chunk > (1u << 24) || b.first != b.n_ctx / 2 || static_cast<uint64_t>(b.n_chunk) * b.n_ctx > INT32_MAX)
        return err = path + ": corrupt header (n_ctx " + std::to_string(b.n_ctx) + ", n_vocab " + std::to_string(b.n_vocab) +
                     ", n_chunk " + std::to_string(b.n_chunk) + ", first " + std::to_string(b.first) + ")", false;
    const uint64_t n_tok    = static_cast<uint64_t>(b.n_chunk) * b.n_ctx;
    const uint64_t n_rows   = static_cast<uint64_t>(b.n_chunk) * (b.n_ctx - 1 - b.first);
    const uint64_t expected = k_header + 4 * n_tok + n_rows * row_bytes(static_cast<int32_t>(b.n_vocab));
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) return err = "cannot stat " + path + ": " + ec.message(), false;
    if (size != expected)
        return err = path + " is " + std::to_string(size) + " bytes, its header says " + std::to_string(expected) +
                     " (truncated or corrupt)", false;
    b.tokens.resize(static_cast<size_t>(n_tok));
    if (std::fread(b.tokens.data(), 4, b.tokens.size(), b.f) != b.tokens.size()) return err = "short read in " + path, false;
    for (size_t i = 0; i < b.tokens.size(); i++) {
        if (b.tokens[i] < 0 || static_cast<uint32_t>(b.tokens[i]) >= b.n_vocab)
            return err = path + ": token " + std::to_string(b.tokens[i]) + " at " + std::to_string(i) + " is out of the vocabulary", false;
    }
    return true;
}

// ---- statistics -----------------------------------------------------------------------------

struct ppl_sums {
    double  nll = 0, nll2 = 0;
    int64_t count = 0;
    void add(double v) { nll += v, nll2 += v * v, count++; }
    double ppl() const { return std::exp(nll / count); }
    double err() const {  // llama.cpp's "+/-": PPL * standard error of the mean NLL
        const double m = nll / count, v = nll2 / count - m * m;
        return v > 0 && count > 1 ? ppl() * std::sqrt(v / (count - 1)) : 0.0;
    }
};

struct kld_sums {
    double              nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0;
    double              kld = 0, kld2 = 0, dp = 0, dp2 = 0, dp4 = 0;
    int64_t             same_top = 0, count = 0;
    std::vector<double> kld_values, dp_values;
};

// One scored position: model logits `l` (normalized by q) against a base row.
void kld_row(const float * l, int32_t n_vocab, const row_norm & q, int32_t next_tok, const unsigned char * row,
             std::vector<double> & scratch, kld_sums & s) {
    float   scale, lp_min, lp_tok;
    int32_t top;
    std::memcpy(&scale, row + 0, 4);
    std::memcpy(&lp_min, row + 4, 4);
    std::memcpy(&lp_tok, row + 8, 4);
    std::memcpy(&top, row + 12, 4);
    const unsigned char * codes = row + k_row_header;

    // base log-probs a_i = lp_min + scale * code_i, renormalized (the codes are rounded)
    scratch.resize(static_cast<size_t>(n_vocab));
    double amax = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint16_t c;
        std::memcpy(&c, codes + 2 * static_cast<size_t>(i), 2);
        scratch[i] = static_cast<double>(lp_min) + static_cast<double>(scale) * c;
        amax       = std::max(amax, scratch[i]);
    }
    double z = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) z += std::exp(scratch[i] - amax);
    const double log_zb = amax + std::log(z);
    double       kl     = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const double lp = scratch[i] - log_zb;
        kl += std::exp(lp) * (lp - (static_cast<double>(l[i]) - q.log_z));
    }

    const double nll      = q.log_z - l[next_tok];
    const double nll_base = -static_cast<double>(lp_tok);
    s.nll += nll, s.nll2 += nll * nll;
    s.nll_base += nll_base, s.nll_base2 += nll_base * nll_base;
    s.nll_nll_base += nll * nll_base;
    s.kld += kl, s.kld2 += kl * kl;
    const double dp = std::exp(-nll) - std::exp(-nll_base);
    s.dp += dp, s.dp2 += dp * dp, s.dp4 += dp * dp * dp * dp;
    s.same_top += q.top == top;
    s.count++;
    s.kld_values.push_back(kl);
    s.dp_values.push_back(dp);
}

// ---- the two modes --------------------------------------------------------------------------

struct run_env {
    const options & o;
    evaluator &     ev;
    bool            json;
    FILE *          progress;  // stdout for md, stderr for json
};

void report_eta(double t0, int32_t n_chunk) {
    const double t = now_s() - t0;
    std::fprintf(stderr, "ember-perplexity: %.2f s per chunk, ETA %.1f min\n", t, t * (n_chunk - 1) / 60.0);
}

// The base file being written: FILE.tmp, renamed to FILE by finish(); removed if never finished.
struct base_writer {
    std::string path, tmp;
    FILE *      f = nullptr;
    bool open(const std::string & p) {
        path = p, tmp = p + ".tmp";
        f    = std::fopen(tmp.c_str(), "wb");
        return f != nullptr;
    }
    bool write(const void * data, size_t n) { return std::fwrite(data, 1, n, f) == n; }
    bool finish() {
        const bool ok = std::fclose(f) == 0 && std::rename(tmp.c_str(), path.c_str()) == 0;
        f             = nullptr;
        if (!ok) std::remove(tmp.c_str());
        return ok;
    }
    ~base_writer() {
        if (!f) return;  // never opened, or finished
        std::fclose(f);
        std::remove(tmp.c_str());
    }
};

int run_perplexity(const run_env & r, const std::vector<int32_t> & tokens, int32_t n_chunk, base_writer * out) {
    evaluator &   ev = r.ev;
    const int32_t n_ctx = ev.n_ctx, n_vocab = ev.n_vocab;

    std::vector<unsigned char> rowbuf;
    if (out) {
        unsigned char h[k_header];
        std::memcpy(h, k_magic, 8);
        put_u32(h + 8, k_version);
        put_u32(h + 12, static_cast<uint32_t>(n_ctx));
        put_u32(h + 16, static_cast<uint32_t>(n_vocab));
        put_u32(h + 20, static_cast<uint32_t>(n_chunk));
        put_u32(h + 24, static_cast<uint32_t>(ev.first));
        put_u32(h + 28, ev.add_bos ? 1u : 0u);
        if (!out->write(h, k_header) || !out->write(tokens.data(), 4 * static_cast<size_t>(n_chunk) * n_ctx))
            return fail("cannot write %s: %s", out->tmp.c_str(), std::strerror(errno));
        rowbuf.resize(row_bytes(n_vocab) * static_cast<size_t>(ev.n_score()));
    }

    ppl_sums            s;
    std::vector<double> chunk_ppl;
    for (int32_t c = 0; c < n_chunk; c++) {
        const double   t0    = now_s();
        const int32_t *chunk = tokens.data() + static_cast<size_t>(c) * n_ctx;
        if (!ev.eval(chunk)) return fail("decoding chunk %d failed: %s", c + 1, ember_last_error());
        for (int32_t j = ev.first; j <= n_ctx - 2; j++) {
            const float *  l = ev.row(j);
            const row_norm q = normalize(l, n_vocab);
            s.add(q.log_z - l[chunk[j + 1]]);
            if (out) encode_row(l, n_vocab, q, chunk[j + 1], rowbuf.data() + row_bytes(n_vocab) * (j - ev.first));
        }
        if (out && !out->write(rowbuf.data(), rowbuf.size())) return fail("cannot write %s: %s", out->tmp.c_str(), std::strerror(errno));
        if (c == 0) report_eta(t0, n_chunk);
        chunk_ppl.push_back(s.ppl());
        std::fprintf(r.progress, "[%d]%.4f,", c + 1, s.ppl());
        std::fflush(r.progress);
    }
    std::fprintf(r.progress, "\n");
    if (out) {
        if (!out->finish()) return fail("cannot write %s: %s", r.o.base_file.c_str(), std::strerror(errno));
        std::fprintf(stderr, "ember-perplexity: saved the tokens and log-probs of %lld scored positions to %s\n",
                     static_cast<long long>(s.count), r.o.base_file.c_str());
    }

    if (r.json) {
        json_obj j;
        j.str("model", r.o.model);
        j.num("n_ctx", n_ctx);
        j.num("n_chunk", n_chunk);
        j.num("n_tokens", static_cast<double>(s.count));
        j.num("ppl", s.ppl());
        j.num("ppl_err", s.err());
        j.arr("chunk_ppl", chunk_ppl);
        j.print();
    } else {
        std::printf("Final estimate: PPL = %.4f +/- %.5f\n", s.ppl(), s.err());
    }
    return 0;
}

int run_kld(const run_env & r, base_reader & b, int32_t n_chunk) {
    evaluator &                ev = r.ev;
    const int32_t              n_ctx = ev.n_ctx, n_vocab = ev.n_vocab;
    const size_t               rb    = row_bytes(n_vocab);
    std::vector<unsigned char> rows(rb * static_cast<size_t>(ev.n_score()));
    std::vector<double>        scratch;
    kld_sums                   s;

    auto ppl_stats = [&](mean_err & lq, mean_err & lb, double & cov) {
        lq  = mean_and_err(s.nll, s.nll2, s.count);
        lb  = mean_and_err(s.nll_base, s.nll_base2, s.count);
        cov = covariance(s.nll, s.nll_base, s.nll_nll_base, s.count);
    };
    auto same_top = [&](double & p, double & e) {
        p = static_cast<double>(s.same_top) / s.count;
        e = s.count > 1 ? std::sqrt(p * (1 - p) / (s.count - 1)) : 0.0;
    };
    auto rms_dp = [&](double & v, double & e) {
        const mean_err mse = mean_and_err(s.dp2, s.dp4, s.count);
        v                  = std::sqrt(mse.mean);
        e                  = v > 0 ? 0.5 / v * mse.err : 0.0;
    };

    std::fprintf(r.progress, "chunk          PPL          ln(PPL(Q)/PPL(base))       KL divergence            Δp RMS           Same top p\n");
    for (int32_t c = 0; c < n_chunk; c++) {
        const double   t0    = now_s();
        const int32_t *chunk = b.tokens.data() + static_cast<size_t>(c) * n_ctx;
        if (std::fread(rows.data(), 1, rows.size(), b.f) != rows.size()) return fail("short read in %s at chunk %d", r.o.base_file.c_str(), c + 1);
        if (!ev.eval(chunk)) return fail("decoding chunk %d failed: %s", c + 1, ember_last_error());
        for (int32_t j = ev.first; j <= n_ctx - 2; j++) {
            const float * l = ev.row(j);
            kld_row(l, n_vocab, normalize(l, n_vocab), chunk[j + 1], rows.data() + rb * (j - ev.first), scratch, s);
        }
        if (c == 0) report_eta(t0, n_chunk);
        mean_err lq, lb;
        double   cov, tp, tpe, dv, de;
        ppl_stats(lq, lb, cov);
        same_top(tp, tpe);
        rms_dp(dv, de);
        const mean_err kl = mean_and_err(s.kld, s.kld2, s.count);
        std::fprintf(r.progress, "%4d  %9.4f ± %8.4f  %10.5f ± %9.5f  %10.6f ± %9.6f  %6.3f ± %6.3f %%  %7.3f ± %6.3f %%\n", c + 1,
                     std::exp(lq.mean), std::exp(lq.mean) * lq.err, lq.mean - lb.mean,
                     std::sqrt(std::max(0.0, lq.err * lq.err + lb.err * lb.err - 2 * cov)), kl.mean, kl.err, 100 * dv, 100 * de,
                     100 * tp, 100 * tpe);
        std::fflush(r.progress);
    }

    mean_err lq, lb;
    double   cov, tp, tpe, dv, de;
    ppl_stats(lq, lb, cov);
    same_top(tp, tpe);
    rms_dp(dv, de);
    const mean_err kl        = mean_and_err(s.kld, s.kld2, s.count);
    const double   ppl       = std::exp(lq.mean), ppl_e = ppl * lq.err;
    const double   ppl_b     = std::exp(lb.mean), ppl_b_e = ppl_b * lb.err;
    const double   cor       = lq.err > 0 && lb.err > 0 ? cov / (lq.err * lb.err) : NAN;
    const double   lr        = lq.mean - lb.mean;
    const double   lr_e      = std::sqrt(std::max(0.0, lq.err * lq.err + lb.err * lb.err - 2 * cov));
    const double   ratio     = std::exp(lr), ratio_e = ratio * lr_e;
    const double   diff      = ppl - ppl_b;
    const double   diff_e    = std::sqrt(std::max(0.0, ppl_e * ppl_e + ppl_b_e * ppl_b_e - 2 * ppl * ppl_b * cov));
    std::sort(s.kld_values.begin(), s.kld_values.end());
    std::sort(s.dp_values.begin(), s.dp_values.end());
    const std::vector<double> & kv = s.kld_values;
    const std::vector<double> & dv_ = s.dp_values;
    const double dp_mean = s.dp / s.count;

    if (r.json) {
        json_obj j;
        j.str("model", r.o.model);
        j.str("base", r.o.base_file);
        j.num("n_ctx", n_ctx);
        j.num("n_chunk", n_chunk);
        j.num("n_tokens", static_cast<double>(s.count));
        j.num("ppl", ppl);
        j.num("ppl_err", ppl_e);
        j.num("ppl_base", ppl_b);
        j.num("ppl_base_err", ppl_b_e);
        j.num("ln_ppl_ratio", lr);
        j.num("ln_ppl_ratio_err", lr_e);
        j.num("ppl_ratio", ratio);
        j.num("ppl_ratio_err", ratio_e);
        j.num("ppl_diff", diff);
        j.num("ppl_diff_err", diff_e);
        j.num("kld_mean", kl.mean);
        j.num("kld_err", kl.err);
        j.num("kld_median", median(kv));
        j.num("kld_p90", percentile(kv, 0.90));
        j.num("kld_p95", percentile(kv, 0.95));
        j.num("kld_p99", percentile(kv, 0.99));
        j.num("kld_p999", percentile(kv, 0.999));
        j.num("kld_max", kv.back());
        j.num("same_top_pct", 100 * tp);
        j.num("same_top_err", 100 * tpe);
        j.num("rms_dp", dv);
        j.num("rms_dp_err", de);
        j.num("dp_mean", dp_mean);
        j.num("dp_max", dv_.back());
        j.num("dp_min", dv_.front());
        j.print();
        return 0;
    }
    std::printf("\n====== Perplexity statistics ======\n");
    std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl_e);
    std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_b, ppl_b_e);
    std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cor);
    std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, lr_e);
    std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", ratio, ratio_e);
    std::printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", diff, diff_e);
    std::printf("\n====== KL divergence statistics ======\n");
    std::printf("Mean    KLD: %10.6f ± %10.6f\n", kl.mean, kl.err);
    std::printf("Maximum KLD: %10.6f\n", kv.back());
    std::printf("99.9%%   KLD: %10.6f\n", percentile(kv, 0.999));
    std::printf("99.0%%   KLD: %10.6f\n", percentile(kv, 0.99));
    std::printf("95.0%%   KLD: %10.6f\n", percentile(kv, 0.95));
    std::printf("90.0%%   KLD: %10.6f\n", percentile(kv, 0.90));
    std::printf("Median  KLD: %10.6f\n", median(kv));
    std::printf("Minimum KLD: %10.6f\n", kv.front());
    std::printf("\n====== Token probability statistics ======\n");
    std::printf("Mean    Δp: %7.3f ± %5.3f %%\n", 100 * dp_mean, 100 * mean_and_err(s.dp, s.dp2, s.count).err);
    std::printf("Maximum Δp: %7.3f%%\n", 100 * dv_.back());
    std::printf("99.0%%   Δp: %7.3f%%\n", 100 * percentile(dv_, 0.99));
    std::printf("Median  Δp: %7.3f%%\n", 100 * median(dv_));
    std::printf("1.0%%    Δp: %7.3f%%\n", 100 * percentile(dv_, 0.01));
    std::printf("Minimum Δp: %7.3f%%\n", 100 * dv_.front());
    std::printf("RMS Δp    : %7.3f ± %5.3f %%\n", 100 * dv, 100 * de);
    std::printf("Same top p: %7.3f ± %5.3f %%\n", 100 * tp, 100 * tpe);
    return 0;
}

struct handles {
    ember_model *   model = nullptr;
    ember_context * ctx   = nullptr;
    ~handles() {
        ember_context_free(ctx);
        ember_model_free(model);
    }
};

}  // namespace

int main(int argc, char ** argv) {
    if (EMBER_CHECK_ABI() != EMBER_OK) return fail("libember is not compatible with this program: %s", ember_last_error());
    options o;
    if (const int rc = parse_args(argc, argv, o)) return rc == 2 ? 0 : 1;

    base_reader base;
    if (o.kld) {
        if (!little_endian()) return fail("base files are little-endian; this host is not");
        std::string err;
        if (!open_base(o.base_file, base, err)) return fail("%s", err.c_str());
        if (o.n_ctx_set && o.n_ctx != static_cast<long long>(base.n_ctx))
            return fail("%s was made with -c %u, not -c %lld", o.base_file.c_str(), base.n_ctx, o.n_ctx);
        o.n_ctx = base.n_ctx;
    }
    // a base file to write is created first, so that a bad path fails before any work
    base_writer writer;
    if (!o.kld && !o.base_file.empty()) {
        if (!little_endian()) return fail("base files are little-endian; this host is not");
        if (!writer.open(o.base_file)) return fail("cannot create %s: %s", writer.tmp.c_str(), std::strerror(errno));
    }

    handles            h;
    ember_model_params mp = ember_model_default_params();
    if (ember_model_load(o.model.c_str(), &mp, &h.model) != EMBER_OK)
        return fail("cannot load model %s: %s", o.model.c_str(), ember_last_error());
    const int32_t n_vocab   = ember_model_n_vocab(h.model);
    const int32_t n_train   = ember_model_n_ctx_train(h.model);
    const int32_t n_ctx     = static_cast<int32_t>(o.n_ctx);
    const bool    add_bos   = ember_model_add_bos(h.model) == 1 && ember_token_bos(h.model) >= 0;
    if (n_vocab <= 0) return fail("%s has no vocabulary", o.model.c_str());
    if (n_train > 0 && n_ctx > n_train)
        return fail("-c %d is larger than the model's trained context (%d)", n_ctx, n_train);

    std::vector<int32_t> tokens;
    if (!o.text.empty()) {
        std::string text;
        if (!read_text(o.text, text)) return fail("cannot read %s: %s", o.text.c_str(), std::strerror(errno));
        if (!tokenize(h.model, text, tokens)) return fail("cannot tokenize %s: %s", o.text.c_str(), ember_last_error());
    }

    int32_t n_chunk;
    if (o.kld) {
        if (base.n_vocab != static_cast<uint32_t>(n_vocab))
            return fail("%s was made with a vocabulary of %u tokens, %s has %d", o.base_file.c_str(), base.n_vocab, o.model.c_str(), n_vocab);
        if (((base.flags & 1u) != 0) != add_bos)
            return fail("%s was made %s BOS at the chunk starts, but %s %s BOS: different tokenizers", o.base_file.c_str(),
                        (base.flags & 1u) ? "with" : "without", o.model.c_str(), add_bos ? "adds" : "does not add");
        if (!o.text.empty()) {
            const size_t n = base.tokens.size();
            if (tokens.size() < n)
                return fail("%s tokenizes to %zu tokens, but %s holds %zu: not the same text", o.text.c_str(), tokens.size(),
                            o.base_file.c_str(), n);
            for (size_t i = 0; i < n; i++) {
                if (tokens[i] != base.tokens[i])
                    return fail("the tokens of %s differ from those in %s at position %zu (%d vs %d): not the same text or tokenizer",
                                o.text.c_str(), o.base_file.c_str(), i, tokens[i], base.tokens[i]);
            }
        }
        n_chunk = static_cast<int32_t>(base.n_chunk);
        if (o.n_chunks > 0 && o.n_chunks < n_chunk) n_chunk = static_cast<int32_t>(o.n_chunks);
    } else {
        if (tokens.size() < 2 * static_cast<size_t>(n_ctx))
            return fail("%s tokenizes to only %zu tokens; -c %d needs at least %d (two chunks)", o.text.c_str(), tokens.size(), n_ctx,
                        2 * n_ctx);
        n_chunk = static_cast<int32_t>(tokens.size() / n_ctx);
        if (o.n_chunks > 0 && o.n_chunks < n_chunk) n_chunk = static_cast<int32_t>(o.n_chunks);
    }

    evaluator ev;
    ev.n_ctx   = n_ctx;
    ev.n_batch = static_cast<int32_t>(o.n_batch > 0 ? std::min<long long>(o.n_batch, n_ctx) : n_ctx);
    ev.n_vocab = n_vocab;
    ev.first   = n_ctx / 2;
    ev.bos     = ember_token_bos(h.model);
    ev.add_bos = add_bos;
    try {
        ev.logits.resize(static_cast<size_t>(ev.n_score()) * n_vocab);
    } catch (const std::bad_alloc &) {
        return fail("out of memory for %d rows of %d logits", ev.n_score(), n_vocab);
    }

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = static_cast<uint32_t>(n_ctx);
    cp.n_batch              = static_cast<uint32_t>(ev.n_batch);
    cp.n_ubatch             = static_cast<uint32_t>(std::min(ev.n_batch, 512));
    cp.n_threads            = static_cast<int32_t>(o.n_threads);
    cp.type_k               = ember_type_from_name(o.ctk.c_str());
    cp.type_v               = ember_type_from_name(o.ctv.c_str());
    if (ember_context_create(h.model, &cp, &h.ctx) != EMBER_OK)
        return fail("cannot create a context of %d tokens (K %s, V %s): %s", n_ctx, o.ctk.c_str(), o.ctv.c_str(), ember_last_error());
    ev.ctx = h.ctx;

    char desc[256] = "";
    ember_model_desc(h.model, desc, sizeof(desc));
    std::fprintf(stderr, "ember-perplexity: %s; %zu tokens, %d chunks of %d (scoring positions %d..%d), batch %d, %d threads, KV %s/%s\n",
                 desc, o.kld ? base.tokens.size() : tokens.size(), n_chunk, n_ctx, ev.first, n_ctx - 2, ev.n_batch,
                 ember_context_n_threads(h.ctx), o.ctk.c_str(), o.ctv.c_str());

    const bool json = o.output == "json";
    run_env    r{o, ev, json, json ? stderr : stdout};
    try {
        return o.kld ? run_kld(r, base, n_chunk) : run_perplexity(r, tokens, n_chunk, writer.f ? &writer : nullptr);
    } catch (const std::bad_alloc &) {
        return fail("out of memory");
    }
}
