// ember-eval: evaluate a token list with a model and dump the logits of every position, or
// print a greedy continuation. Uses nothing but include/ember.h.
//
//   ember-eval -m MODEL --tokens 1,2,3 --logits-out FILE      raw little-endian float32,
//                                                              n_tokens x n_vocab, row-major
//   ember-eval -m MODEL --tokens-file PATH --greedy 16         prints 16 token ids on one line
//
// The interface is stable: conformance checks drive it.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"

namespace {

void usage(FILE * f, const char * argv0) {
    std::fprintf(f,
                 "usage: %s -m MODEL (--tokens IDS | --tokens-file PATH) [--logits-out FILE] [--greedy N]\n"
                 "       [--threads N] [--device cpu|cuda|vulkan|NAME] [--ctk TYPE] [--ctv TYPE] [--ubatch N]\n"
                 "\n"
                 "Evaluates the tokens as one sequence from position 0 in a single decode.\n"
                 "  -m, --model PATH     GGUF model\n"
                 "  --tokens IDS         token ids separated by commas or spaces: 1,379,421\n"
                 "  --tokens-file PATH   token ids separated by spaces, commas or newlines\n"
                 "  --logits-out FILE    write the logits of every position as raw little-endian float32,\n"
                 "                       n_tokens x n_vocab, row-major\n"
                 "  --greedy N           print the N greedy next token ids (argmax, lowest id on ties) on one\n"
                 "                       line: the first from the last prompt row, then one token at a time\n"
                 "  --threads N          CPU threads (default: all cores)\n"
                 "  --device NAME        cpu, cuda, vulkan, or a device name such as cuda:1 (default: best)\n"
                 "  --ctk TYPE           K cache type: f16 (default), f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2\n"
                 "  --ctv TYPE           V cache type: same choices\n"
                 "  --ubatch N           tokens per compute step (default 512)\n"
                 "  -h, --help           this text\n",
                 argv0);
}

// Parses a whole decimal integer in [lo, hi].
bool parse_int(const char * s, long long lo, long long hi, long long & out) {
    if (!s || !*s) return false;
    errno                = 0;
    char *          end  = nullptr;
    const long long v    = std::strtoll(s, &end, 10);
    if (errno != 0 || !end || *end != '\0' || v < lo || v > hi) return false;
    out = v;
    return true;
}

// At most 32 characters of `s` with anything unprintable shown as '?', for messages.
std::string printable(const std::string & s) {
    std::string out;
    for (char c : s.substr(0, 32)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (s.size() > 32) out += "...";
    return out;
}

// Token ids separated by spaces, tabs, commas or newlines. Sets err on anything else.
bool parse_tokens(const std::string & text, std::vector<int32_t> & out, std::string & err) {
    size_t i = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (c == ' ' || c == '\t' || c == ',' || c == '\n' || c == '\r') {
            i++;
            continue;
        }
        size_t j = i;
        if (text[j] == '-' || text[j] == '+') j++;
        while (j < text.size() && text[j] >= '0' && text[j] <= '9') j++;
        const std::string word = text.substr(i, j - i);
        long long         v    = 0;
        if (j < text.size() && !(text[j] == ' ' || text[j] == '\t' || text[j] == ',' || text[j] == '\n' ||
                                 text[j] == '\r')) {
            // include the offending character in the message
            size_t k = j;
            while (k < text.size() && !(text[k] == ' ' || text[k] == ',' || text[k] == '\n')) k++;
            err = "bad token id '" + printable(text.substr(i, k - i)) + "'";
            return false;
        }
        if (!parse_int(word.c_str(), 0, INT32_MAX, v)) {
            err = "bad token id '" + printable(word) + "' (must be an integer in [0, 2147483647])";
            return false;
        }
        out.push_back(static_cast<int32_t>(v));
        i = j;
    }
    if (out.empty()) {
        err = "empty token list";
        return false;
    }
    return true;
}

bool read_file(const char * path, std::string & out) {
    FILE * f = std::fopen(path, "rb");
    if (!f) return false;
    char   buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

int32_t argmax(const float * row, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (row[i] > row[best]) best = i;
    }
    return best;
}

int fail(const char * what, ember_status st) {
    std::fprintf(stderr, "ember-eval: %s: %s: %s\n", what, ember_status_str(st), ember_last_error());
    return 1;
}

struct options {
    std::string model;
    std::string tokens_text;
    bool        have_tokens = false;
    std::string logits_out;
    long long   greedy    = -1;
    long long   threads   = 0;
    long long   ubatch    = 0;
    std::string device;
    std::string ctk, ctv;
};

}  // namespace

int main(int argc, char ** argv) {
    const char * argv0 = argc > 0 && argv[0] ? argv[0] : "ember-eval";
    {
        const ember_status st = EMBER_CHECK_ABI();
        if (st != EMBER_OK) {
            std::fprintf(stderr, "ember-eval: library ABI %u does not match this program's ABI %u: %s\n",
                         static_cast<unsigned>(ember_abi_version()), static_cast<unsigned>(EMBER_ABI_VERSION),
                         ember_status_str(st));
            return 1;
        }
    }

    options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto value = [&](const char * name) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ember-eval: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        const char * v = nullptr;
        if (a == "-h" || a == "--help") {
            usage(stdout, argv0);
            return 0;
        } else if (a == "-m" || a == "--model") {
            if (!(v = value(a.c_str()))) return 2;
            o.model = v;
        } else if (a == "--tokens") {
            if (!(v = value("--tokens"))) return 2;
            if (o.have_tokens) {
                std::fprintf(stderr, "ember-eval: give --tokens or --tokens-file once\n");
                return 2;
            }
            o.tokens_text = v;
            o.have_tokens = true;
        } else if (a == "--tokens-file") {
            if (!(v = value("--tokens-file"))) return 2;
            if (o.have_tokens) {
                std::fprintf(stderr, "ember-eval: give --tokens or --tokens-file once\n");
                return 2;
            }
            if (!read_file(v, o.tokens_text)) {
                std::fprintf(stderr, "ember-eval: cannot read token file '%s': %s\n", v, std::strerror(errno));
                return 1;
            }
            o.have_tokens = true;
        } else if (a == "--logits-out") {
            if (!(v = value("--logits-out"))) return 2;
            o.logits_out = v;
        } else if (a == "--greedy") {
            if (!(v = value("--greedy"))) return 2;
            if (!parse_int(v, 0, 1 << 20, o.greedy)) {
                std::fprintf(stderr, "ember-eval: --greedy wants a count in [0, 1048576], got '%s'\n", v);
                return 2;
            }
        } else if (a == "--threads" || a == "-t") {
            if (!(v = value(a.c_str()))) return 2;
            if (!parse_int(v, 0, 4096, o.threads)) {
                std::fprintf(stderr, "ember-eval: --threads wants a count in [0, 4096], got '%s'\n", v);
                return 2;
            }
        } else if (a == "--ubatch") {
            if (!(v = value("--ubatch"))) return 2;
            if (!parse_int(v, 1, INT32_MAX, o.ubatch)) {
                std::fprintf(stderr, "ember-eval: --ubatch wants a positive count, got '%s'\n", v);
                return 2;
            }
        } else if (a == "--device") {
            if (!(v = value("--device"))) return 2;
            o.device = v;
        } else if (a == "--ctk") {
            if (!(v = value("--ctk"))) return 2;
            o.ctk = v;
        } else if (a == "--ctv") {
            if (!(v = value("--ctv"))) return 2;
            o.ctv = v;
        } else {
            std::fprintf(stderr, "ember-eval: unknown argument '%s' (see --help)\n", a.c_str());
            return 2;
        }
    }
    if (o.model.empty() || !o.have_tokens || (o.logits_out.empty() && o.greedy < 0)) {
        std::fprintf(stderr, "ember-eval: need -m MODEL, --tokens or --tokens-file, and --logits-out or --greedy\n");
        usage(stderr, argv0);
        return 2;
    }

    std::vector<int32_t> tokens;
    {
        std::string err;
        if (!parse_tokens(o.tokens_text, tokens, err)) {
            std::fprintf(stderr, "ember-eval: %s\n", err.c_str());
            return 2;
        }
    }
    int32_t type_k = -1, type_v = -1;
    if (!o.ctk.empty() && (type_k = ember_type_from_name(o.ctk.c_str())) < 0) {
        std::fprintf(stderr, "ember-eval: unknown --ctk type '%s'\n", o.ctk.c_str());
        return 2;
    }
    if (!o.ctv.empty() && (type_v = ember_type_from_name(o.ctv.c_str())) < 0) {
        std::fprintf(stderr, "ember-eval: unknown --ctv type '%s'\n", o.ctv.c_str());
        return 2;
    }

    const long long n_tokens = static_cast<long long>(tokens.size());
    const long long n_greedy = o.greedy > 0 ? o.greedy : 0;
    if (n_tokens + n_greedy > INT32_MAX / 2) {
        std::fprintf(stderr, "ember-eval: too many tokens\n");
        return 2;
    }

    ember_model_params mp = ember_model_default_params();
    if (!o.device.empty()) mp.device = o.device.c_str();
    ember_model * model   = nullptr;
    ember_status  st      = ember_model_load(o.model.c_str(), &mp, &model);
    if (st != EMBER_OK) return fail(("cannot load model '" + o.model + "'").c_str(), st);

    const int32_t n_vocab = ember_model_n_vocab(model);
    for (size_t i = 0; i < tokens.size(); i++) {
        if (tokens[i] >= n_vocab) {
            std::fprintf(stderr, "ember-eval: token %d at index %zu is out of range (n_vocab %d)\n", tokens[i], i,
                         n_vocab);
            ember_model_free(model);
            return 2;
        }
    }

    ember_context_params cp = ember_context_default_params();
    const long long      need = n_tokens + n_greedy;
    cp.n_ctx     = static_cast<uint32_t>(need < 256 ? 256 : (need + 255) / 256 * 256);
    cp.n_batch   = static_cast<uint32_t>(n_tokens);
    cp.n_ubatch  = static_cast<uint32_t>(o.ubatch > 0 ? (o.ubatch < n_tokens ? o.ubatch : n_tokens)
                                                      : (n_tokens < 512 ? n_tokens : 512));
    cp.n_seq_max = 1;
    cp.n_threads = static_cast<int32_t>(o.threads);
    if (type_k >= 0) cp.type_k = type_k;
    if (type_v >= 0) cp.type_v = type_v;
    ember_context * ctx = nullptr;
    st                  = ember_context_create(model, &cp, &ctx);
    if (st != EMBER_OK) {
        const int rc = fail("cannot create context", st);
        ember_model_free(model);
        return rc;
    }

    int                  rc = 0;
    std::vector<int32_t> pos(tokens.size());
    std::vector<int8_t>  want(tokens.size(), 1);
    for (size_t i = 0; i < tokens.size(); i++) pos[i] = static_cast<int32_t>(i);
    ember_batch b = ember_batch_one(tokens.data(), static_cast<int32_t>(n_tokens));
    b.pos         = pos.data();
    b.logits      = want.data();
    st            = ember_decode(ctx, &b);
    if (st != EMBER_OK) rc = fail("decode failed", st);

    if (rc == 0 && !o.logits_out.empty()) {
        FILE * f = std::fopen(o.logits_out.c_str(), "wb");
        if (!f) {
            std::fprintf(stderr, "ember-eval: cannot open '%s' for writing: %s\n", o.logits_out.c_str(),
                         std::strerror(errno));
            rc = 1;
        } else {
            for (int32_t i = 0; i < static_cast<int32_t>(n_tokens) && rc == 0; i++) {
                const float * row = ember_get_logits_ith(ctx, i);
                if (!row) {
                    rc = fail("no logits for a prompt row", EMBER_ERR_INTERNAL);
                } else if (std::fwrite(row, sizeof(float), static_cast<size_t>(n_vocab), f) !=
                           static_cast<size_t>(n_vocab)) {
                    std::fprintf(stderr, "ember-eval: write to '%s' failed: %s\n", o.logits_out.c_str(),
                                 std::strerror(errno));
                    rc = 1;
                }
            }
            if (std::fclose(f) != 0 && rc == 0) {
                std::fprintf(stderr, "ember-eval: closing '%s' failed: %s\n", o.logits_out.c_str(),
                             std::strerror(errno));
                rc = 1;
            }
        }
    }

    if (rc == 0 && n_greedy > 0) {
        const float * row = ember_get_logits_ith(ctx, -1);
        std::string   line;
        for (long long step = 0; step < n_greedy && rc == 0; step++) {
            if (!row) {
                rc = fail("no logits", EMBER_ERR_INTERNAL);
                break;
            }
            int32_t id = argmax(row, n_vocab);
            if (!line.empty()) line += ' ';
            line += std::to_string(id);
            if (step + 1 == n_greedy) break;
            const int32_t p   = static_cast<int32_t>(n_tokens + step);
            const int8_t  one = 1;
            ember_batch   g   = ember_batch_one(&id, 1);
            g.pos             = &p;
            g.logits          = &one;
            st                = ember_decode(ctx, &g);
            if (st != EMBER_OK) {
                rc = fail("decode of a greedy token failed", st);
                break;
            }
            row = ember_get_logits_ith(ctx, 0);
        }
        if (rc == 0) std::printf("%s\n", line.c_str());
    } else if (rc == 0 && o.greedy == 0) {
        std::printf("\n");
    }

    ember_context_free(ctx);
    ember_model_free(model);
    if (rc == 0 && std::fflush(stdout) != 0) rc = 1;
    return rc;
}
