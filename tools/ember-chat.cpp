// ember-chat: interactive chat with streaming output, on the bundled default model unless -m
// says otherwise. Uses nothing but include/ember.h.
//
// Each turn renders the whole conversation with the model's chat template, tokenizes it, and
// prefills only what differs from the tokens already in the KV cache (normally just the new
// turn). Works on a terminal and with stdin from a pipe (one user turn per line).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"

namespace {

const char * k_default_model = "ember-kjv-25m-q8_0.gguf";

struct options {
    std::string model;
    std::string prompt;  // one-shot when set
    std::string system;
    std::string chat_template;  // built-in name or file; "" = the model's own
    std::string device;
    int32_t     n_predict      = 256;  // -1: until the end of the turn or a full context
    int32_t     n_ctx          = 0;
    int32_t     n_threads      = 0;
    int32_t     n_gpu_layers   = -1;
    float       temp           = 0.8f;
    int32_t     top_k          = 40;
    float       top_p          = 0.95f;
    float       min_p          = 0.05f;
    float       repeat_penalty = 1.1f;
    int32_t     repeat_last_n  = 64;
    uint32_t    seed           = 0;
    bool        seed_set       = false;
    std::string ctk = "f16", ctv = "f16";
    int32_t     device_top_k   = 0;  // > 0: only the best N candidates per step come back from the device
    bool        verbose = false;
};

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: ember-chat [options]\n"
                 "  -m, --model FILE        GGUF model (default: the bundled %s)\n"
                 "  -p, --prompt TEXT       one-shot: answer TEXT and exit\n"
                 "  -sys, --system TEXT     system prompt\n"
                 "  -n, --n-predict N       max tokens per answer (default 256; -1 = until the end of the turn)\n"
                 "  -c, --ctx-size N        context size in tokens (default: the model's)\n"
                 "  -t, --threads N         CPU threads (default: all cores)\n"
                 "  --temp T                temperature (default 0.8; 0 = greedy)\n"
                 "  --top-k N               (default 40; 0 = off)\n"
                 "  --top-p P               (default 0.95; 1 = off)\n"
                 "  --min-p P               (default 0.05; 0 = off)\n"
                 "  --repeat-penalty R      (default 1.1; 1 = off), over the last 64 tokens\n"
                 "  --seed N                random seed (default: random)\n"
                 "  --ctk TYPE, --ctv TYPE  KV cache types: f16 (default), f32, q8_0, q4_0, fp8_e4m3, fp8_e5m2\n"
                 "  --device-top-k N        only the best N candidates of each step leave the device, not the\n"
                 "                          logits (default 0 = off); needs --repeat-penalty 1 and --top-k <= N\n"
                 "                          (or --temp 0): sampling is then exactly as with full logits\n"
                 "  -ngl, --n-gpu-layers N  layers to offload (default: all), with --device\n"
                 "  --device NAME           cpu, cuda, cuda:1, vulkan:0, ...\n"
                 "  --chat-template NAME    use a built-in template (llama3, chatml, mistral, gemma, phi3)\n"
                 "                          or a Jinja file instead of the model's own\n"
                 "  -v, --verbose           log from the library\n"
                 "In a chat: Ctrl-C stops the answer, a second Ctrl-C quits; /reset clears the\n"
                 "conversation, /exit (or end of input) quits.\n",
                 k_default_model);
}

bool parse_int(const char * s, int32_t & out) {
    char * end = nullptr;
    long   v   = std::strtol(s, &end, 10);
    if (!*s || *end || v < INT32_MIN || v > INT32_MAX) return false;
    out = static_cast<int32_t>(v);
    return true;
}

bool parse_float(const char * s, float & out) {
    char * end = nullptr;
    out        = std::strtof(s, &end);
    return *s && !*end && std::isfinite(out);
}

// Returns 0 on success, 1 to exit with an error, 2 to exit successfully (--help).
int parse_args(int argc, char ** argv, options & o) {
    for (int i = 1; i < argc; i++) {
        const std::string a    = argv[i];
        auto              next = [&](const char * what) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ember-chat: %s needs a value\n", what);
                return nullptr;
            }
            return argv[++i];
        };
        const char * v  = nullptr;
        bool         ok = true;
        if (a == "-h" || a == "--help") {
            usage(stdout);
            return 2;
        } else if (a == "-v" || a == "--verbose") {
            o.verbose = true;
        } else if (a == "-m" || a == "--model") {
            ok = (v = next("-m")) != nullptr;
            if (ok) o.model = v;
        } else if (a == "-p" || a == "--prompt") {
            ok = (v = next("-p")) != nullptr;
            if (ok) o.prompt = v;
        } else if (a == "-sys" || a == "--system") {
            ok = (v = next("-sys")) != nullptr;
            if (ok) o.system = v;
        } else if (a == "--chat-template") {
            ok = (v = next("--chat-template")) != nullptr;
            if (ok) o.chat_template = v;
        } else if (a == "--device") {
            ok = (v = next("--device")) != nullptr;
            if (ok) o.device = v;
        } else if (a == "--ctk" || a == "--ctv") {
            ok = (v = next(a.c_str())) != nullptr;
            if (ok) (a == "--ctk" ? o.ctk : o.ctv) = v;
        } else if (a == "-n" || a == "--n-predict") {
            ok = (v = next("-n")) && parse_int(v, o.n_predict) && o.n_predict >= -1;
        } else if (a == "-c" || a == "--ctx-size") {
            ok = (v = next("-c")) && parse_int(v, o.n_ctx) && o.n_ctx >= 0;
        } else if (a == "-t" || a == "--threads") {
            ok = (v = next("-t")) && parse_int(v, o.n_threads) && o.n_threads >= 0;
        } else if (a == "-ngl" || a == "--n-gpu-layers") {
            ok = (v = next("-ngl")) && parse_int(v, o.n_gpu_layers) && o.n_gpu_layers >= -1;
        } else if (a == "--temp") {
            ok = (v = next("--temp")) && parse_float(v, o.temp);
        } else if (a == "--top-k") {
            ok = (v = next("--top-k")) && parse_int(v, o.top_k);
        } else if (a == "--top-p") {
            ok = (v = next("--top-p")) && parse_float(v, o.top_p) && o.top_p >= 0 && o.top_p <= 1;
        } else if (a == "--min-p") {
            ok = (v = next("--min-p")) && parse_float(v, o.min_p) && o.min_p >= 0 && o.min_p <= 1;
        } else if (a == "--repeat-penalty") {
            ok = (v = next("--repeat-penalty")) && parse_float(v, o.repeat_penalty) && o.repeat_penalty > 0;
        } else if (a == "--device-top-k") {
            ok = (v = next("--device-top-k")) && parse_int(v, o.device_top_k) && o.device_top_k >= 0;
        } else if (a == "--seed") {
            int32_t s = 0;
            ok        = (v = next("--seed")) && parse_int(v, s);
            o.seed     = static_cast<uint32_t>(s);
            o.seed_set = true;
        } else {
            std::fprintf(stderr, "ember-chat: unknown argument '%s' (see --help)\n", a.c_str());
            return 1;
        }
        if (!ok) {
            if (v) std::fprintf(stderr, "ember-chat: bad value '%s' for %s\n", v, a.c_str());
            return 1;
        }
    }
    // The sampler runs on the kept candidates only when they decide its pick (ember.h,
    // ember_sampler_sample): say so now rather than fail at the first token.
    if (o.device_top_k > 0 && (o.repeat_penalty != 1.0f || (o.temp > 0.0f && (o.top_k <= 0 || o.top_k > o.device_top_k)))) {
        std::fprintf(stderr,
                     "ember-chat: --device-top-k %d keeps only %d candidates per token; sampling needs --repeat-penalty 1 "
                     "(penalties can lift any token) and --top-k between 1 and %d, or --temp 0\n",
                     o.device_top_k, o.device_top_k, o.device_top_k);
        return 1;
    }
    return 0;
}

bool file_exists(const std::string & p) { return access(p.c_str(), R_OK) == 0; }

// The bundled model: next to the build tree (build/bin/../../models), an install
// (bin/../share/ember/models) or the current directory's models/.
std::string find_default_model(const char * argv0) {
    if (const char * env = std::getenv("EMBER_DEFAULT_MODEL")) return env;
    std::string exe_dir = ".";
    char        buf[4096];
    ssize_t     n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n]  = '\0';
        exe_dir = buf;
    } else {
        exe_dir = argv0;
    }
    exe_dir = exe_dir.substr(0, exe_dir.find_last_of('/') == std::string::npos ? 0 : exe_dir.find_last_of('/'));
    for (const std::string & c : {exe_dir + "/../../models/", exe_dir + "/../share/ember/models/", std::string("models/")}) {
        if (file_exists(c + k_default_model)) return c + k_default_model;
    }
    return std::string("models/") + k_default_model;
}

//
// Signals: Ctrl-C stops the answer; a second one quits.
//
std::atomic<int> g_interrupts{0};
std::atomic<bool> g_generating{false};

void on_sigint(int) {
    const int n = ++g_interrupts;
    if (n >= 2 || !g_generating) {
        // Second press, or none is being generated: quit now. write() is async-signal-safe.
        const char msg[] = "\n";
        ssize_t    r     = write(STDERR_FILENO, msg, 1);
        (void) r;
        _exit(130);
    }
}

int abort_decode(void *) { return g_interrupts.load() > 0 ? 1 : 0; }

int on_progress(float p, void * ud) {
    int & last = *static_cast<int *>(ud);
    const int pct = static_cast<int>(p * 100.0f);
    if (pct == last) return 0;
    last = pct;
    if (isatty(STDERR_FILENO)) {
        const int width = 30, fill = pct * width / 100;
        std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", fill, "##############################", width - fill, "", pct);
        if (pct >= 100) std::fprintf(stderr, "\n");
    }
    return g_interrupts.load() > 0 ? 1 : 0;  // Ctrl-C cancels the load
}

void log_quiet(int32_t level, const char * msg, void *) {
    if (level <= EMBER_LOG_WARN) std::fprintf(stderr, "ember: %s\n", msg);
}

std::string read_file(const std::string & path, bool & ok) {
    std::ifstream     f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    ok = static_cast<bool>(f);
    return ss.str();
}

struct chat_stats {
    int64_t n_prefill = 0, n_decode = 0;
    double  t_prefill = 0, t_decode = 0;
};

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct chat {
    const options &                 opt;
    ember_model *                   model   = nullptr;
    ember_context *                 ctx     = nullptr;
    ember_sampler *                 sampler = nullptr;
    std::string                     tmpl;
    std::vector<std::string>        roles, contents;  // the conversation
    std::vector<int32_t>            cached;           // tokens in the KV cache, in order
    std::vector<int32_t>            scratch;
    chat_stats                      stats;
    bool                            interactive = false;

    explicit chat(const options & o) : opt(o) {}
    ~chat() {
        ember_sampler_free(sampler);
        ember_context_free(ctx);
        ember_model_free(model);
    }

    std::string render(bool add_generation_prompt) {
        std::vector<ember_chat_message> msgs;
        for (size_t i = 0; i < roles.size(); i++) msgs.push_back({roles[i].c_str(), contents[i].c_str()});
        const char * t = tmpl.empty() ? nullptr : tmpl.c_str();
        int32_t n = ember_chat_apply_template(model, t, msgs.data(), msgs.size(), add_generation_prompt, nullptr, 0);
        if (n < 0) return std::string("\x01") + ember_last_error();  // marks an error
        std::string out(static_cast<size_t>(n) + 1, '\0');
        ember_chat_apply_template(model, t, msgs.data(), msgs.size(), add_generation_prompt, &out[0], n + 1);
        out.resize(static_cast<size_t>(n));
        return out;
    }

    std::string bos_text;  // the BOS token's text, "" when the model has none

    bool tokenize(const std::string & text, std::vector<int32_t> & out) {
        // The rendered template spells special tokens: parse them. When the template writes
        // the BOS token itself the tokenizer must not add another one.
        const bool add_special = bos_text.empty() || text.compare(0, bos_text.size(), bos_text) != 0;
        int32_t    n = ember_tokenize(model, text.data(), static_cast<int32_t>(text.size()), nullptr, 0, add_special, 1);
        if (n < 0) return false;
        out.resize(static_cast<size_t>(n));
        return ember_tokenize(model, text.data(), static_cast<int32_t>(text.size()), out.data(), n, add_special, 1) == n;
    }

    // Renders and tokenizes the conversation into `scratch`. When it does not fit with room
    // for the answer, says so and (asking first on a terminal) keeps the system prompt and
    // drops the oldest turns. False when it cannot fit or the user declines.
    bool make_room(size_t need_extra) {
        const uint32_t n_ctx  = ember_context_n_ctx(ctx);
        bool           agreed = false;
        for (;;) {
            std::string text = render(true);
            if (!text.empty() && text[0] == '\x01') return false;
            if (!tokenize(text, scratch)) return false;
            if (scratch.size() + need_extra <= n_ctx) return true;
            const size_t first = !roles.empty() && roles[0] == "system" ? 1 : 0;
            if (roles.size() <= first + 1) return false;  // only the new turn is left: it does not fit
            if (!agreed) {
                std::fprintf(stderr, "ember-chat: context full: the conversation needs %zu of %u tokens.\n", scratch.size() + need_extra, n_ctx);
                if (interactive) {
                    std::fprintf(stderr, "Keep the system prompt and drop the oldest turns? [Y/n] ");
                    std::string answer;
                    if (!std::getline(std::cin, answer) || (!answer.empty() && (answer[0] == 'n' || answer[0] == 'N'))) return false;
                } else {
                    std::fprintf(stderr, "ember-chat: keeping the system prompt and dropping the oldest turns.\n");
                }
                agreed = true;
            }
            roles.erase(roles.begin() + static_cast<long>(first));
            contents.erase(contents.begin() + static_cast<long>(first));
        }
    }

    // Prefills `tokens` after what is cached, reusing the common prefix.
    ember_status prefill(const std::vector<int32_t> & tokens) {
        size_t common = 0;
        while (common < cached.size() && common < tokens.size() && cached[common] == tokens[common]) common++;
        if (common == tokens.size() && common > 0) common--;  // re-decode the last token for fresh logits
        ember_kv_cache_seq_rm(ctx, 0, static_cast<int32_t>(common), -1);
        cached.resize(common);
        const uint32_t n_batch = ember_context_n_batch(ctx);
        const double   t0      = now_s();
        for (size_t i = common; i < tokens.size(); i += n_batch) {
            const int32_t n = static_cast<int32_t>(std::min<size_t>(n_batch, tokens.size() - i));
            ember_batch   b = ember_batch_one(&tokens[i], n);
            ember_status  st = ember_decode(ctx, &b);
            if (st != EMBER_OK) return st;
            cached.insert(cached.end(), tokens.begin() + static_cast<long>(i), tokens.begin() + static_cast<long>(i) + n);
        }
        stats.n_prefill += static_cast<int64_t>(tokens.size() - common);
        stats.t_prefill += now_s() - t0;
        return EMBER_OK;
    }

    // One user turn: prints the streamed answer to stdout. False on a fatal error.
    bool turn(const std::string & user) {
        roles.push_back("user");
        contents.push_back(user);
        const uint32_t n_ctx   = ember_context_n_ctx(ctx);
        // Room kept for the answer: up to a quarter of the context (an answer may still be cut).
        const size_t   reserve = std::min<size_t>(opt.n_predict > 0 ? static_cast<size_t>(opt.n_predict) : 256, n_ctx / 4);
        if (!make_room(reserve)) {
            std::string text = render(true);
            if (!text.empty() && text[0] == '\x01') {
                std::fprintf(stderr, "ember-chat: cannot render the chat template: %s\n", text.c_str() + 1);
                return false;
            }
            std::fprintf(stderr, "ember-chat: the message was not sent: the context (%u tokens) has no room for it and an answer "
                         "(try a larger -c, or /reset)\n", n_ctx);
            roles.pop_back();
            contents.pop_back();
            return true;
        }
        std::vector<int32_t> prompt = scratch;
        g_generating                = true;  // from here a Ctrl-C stops the answer (its prefill too)
        ember_status         st     = prefill(prompt);
        if (st == EMBER_ERR_CANCELLED) {
            g_generating = false;
            return answer_interrupted();
        }
        if (st != EMBER_OK) {
            g_generating = false;
            std::fprintf(stderr, "ember-chat: %s\n", ember_last_error());
            return false;
        }
        for (int32_t t : prompt) ember_sampler_accept(sampler, t);

        ember_token_stream * ts = nullptr;
        ember_token_stream_create(model, 0, &ts);
        std::string answer;
        char        piece[256];
        const double t0    = now_s();
        int64_t      n_gen = 0;
        bool         full  = false;
        for (;;) {
            if (g_interrupts.load() > 0) break;
            if (opt.n_predict >= 0 && n_gen >= opt.n_predict) break;
            int32_t tok = ember_sampler_sample(sampler, ctx, -1);
            if (tok < 0) {
                std::fprintf(stderr, "\nember-chat: sampling failed: %s\n", ember_last_error());
                break;
            }
            if (ember_token_is_eog(model, tok)) break;
            int32_t n = ember_token_stream_push(ts, tok, piece, sizeof(piece));
            if (n > 0) {
                std::fwrite(piece, 1, static_cast<size_t>(n), stdout);
                std::fflush(stdout);
                answer.append(piece, static_cast<size_t>(n));
            }
            if (cached.size() >= n_ctx) {
                full = true;
                break;
            }
            ember_batch b = ember_batch_one(&tok, 1);
            st            = ember_decode(ctx, &b);
            if (st == EMBER_ERR_CONTEXT_FULL) {
                full = true;
                break;
            }
            if (st == EMBER_ERR_CANCELLED) break;
            if (st != EMBER_OK) {
                std::fprintf(stderr, "\nember-chat: %s\n", ember_last_error());
                break;
            }
            cached.push_back(tok);
            n_gen++;
        }
        int32_t n = ember_token_stream_flush(ts, piece, sizeof(piece));
        if (n > 0) {
            std::fwrite(piece, 1, static_cast<size_t>(n), stdout);
            answer.append(piece, static_cast<size_t>(n));
        }
        ember_token_stream_free(ts);
        g_generating = false;
        stats.n_decode += n_gen;
        stats.t_decode += now_s() - t0;
        std::fputc('\n', stdout);
        std::fflush(stdout);
        roles.push_back("assistant");
        contents.push_back(answer);
        if (full) {
            std::fprintf(stderr, "ember-chat: context full (%u tokens): the answer was cut. The next turn keeps the system "
                         "prompt and drops the oldest turns.\n", n_ctx);
        }
        if (g_interrupts.load() > 0) return answer_interrupted();
        return true;
    }

    bool answer_interrupted() {
        std::fprintf(stderr, "[stopped; Ctrl-C again to quit]\n");
        g_interrupts = 0;
        return true;
    }

    void print_stats() const {
        std::fprintf(stderr, "ember-chat: prefill %lld tokens at %.1f tokens/s, decode %lld tokens at %.1f tokens/s\n",
                     static_cast<long long>(stats.n_prefill), stats.t_prefill > 0 ? stats.n_prefill / stats.t_prefill : 0.0,
                     static_cast<long long>(stats.n_decode), stats.t_decode > 0 ? stats.n_decode / stats.t_decode : 0.0);
    }
};

ember_status build_sampler(const options & o, int32_t n_vocab, ember_sampler ** out) {
    (void) n_vocab;
    ember_sampler * chain = nullptr;
    ember_status    st    = ember_sampler_chain_create(&chain);
    if (st != EMBER_OK) return st;
    // Each link is created, then handed to the chain (which owns it from then on).
    ember_sampler * link = nullptr;
    auto add = [&](ember_status created) {
        if (st == EMBER_OK) st = created;
        if (st == EMBER_OK) st = ember_sampler_chain_add(chain, link);
        link = nullptr;
    };
    if (o.repeat_penalty != 1.0f) add(ember_sampler_create_penalties(o.repeat_last_n, o.repeat_penalty, 0.0f, 0.0f, &link));
    if (o.temp <= 0.0f) {
        add(ember_sampler_create_greedy(&link));
    } else {
        if (o.top_k > 0) add(ember_sampler_create_top_k(o.top_k, &link));
        if (o.top_p < 1.0f) add(ember_sampler_create_top_p(o.top_p, 1, &link));
        if (o.min_p > 0.0f) add(ember_sampler_create_min_p(o.min_p, 1, &link));
        add(ember_sampler_create_temp(o.temp, &link));
        const uint32_t seed = o.seed_set ? o.seed : static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
        add(ember_sampler_create_dist(seed, &link));
    }
    if (st != EMBER_OK) {
        ember_sampler_free(chain);
        return st;
    }
    *out = chain;
    return EMBER_OK;
}

}  // namespace

int main(int argc, char ** argv) {
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        std::fprintf(stderr, "ember-chat: %s\n", ember_last_error());
        return 1;
    }
    options o;
    if (int r = parse_args(argc, argv, o)) return r == 2 ? 0 : 1;
    if (o.model.empty()) o.model = find_default_model(argv[0]);
    if (!o.verbose) ember_log_set(log_quiet, nullptr);
    else ember_log_set_level(EMBER_LOG_INFO);

    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: a blocked read returns

    chat c(o);
    c.interactive = isatty(STDIN_FILENO) && o.prompt.empty();

    int                progress_last = -1;
    ember_model_params mp            = ember_model_default_params();
    mp.progress_callback             = on_progress;
    mp.progress_user_data            = &progress_last;
    mp.n_gpu_layers                  = o.n_gpu_layers;
    mp.device                        = o.device.empty() ? nullptr : o.device.c_str();
    if (ember_model_load(o.model.c_str(), &mp, &c.model) != EMBER_OK) {
        std::fprintf(stderr, "ember-chat: cannot load model '%s': %s\n", o.model.c_str(), ember_last_error());
        return 1;
    }

    // The chat template: the model's own, or the one asked for.
    if (!o.chat_template.empty()) {
        if (const char * builtin = ember_chat_builtin_template(o.chat_template.c_str())) {
            c.tmpl = builtin;
        } else {
            bool ok = false;
            c.tmpl  = read_file(o.chat_template, ok);
            if (!ok) {
                std::fprintf(stderr, "ember-chat: --chat-template '%s' is neither a built-in name (llama3, chatml, mistral, gemma, phi3) "
                             "nor a readable file\n", o.chat_template.c_str());
                return 1;
            }
        }
    } else if (ember_model_meta_val_str(c.model, "tokenizer.chat_template", nullptr, 0) < 0) {
        std::fprintf(stderr, "ember-chat: the model has no chat template (tokenizer.chat_template); pass --chat-template NAME "
                     "to use a built-in one (llama3, chatml, mistral, gemma, phi3) or a Jinja file\n");
        return 1;
    }

    ember_context_params cp = ember_context_default_params();
    cp.n_ctx                = static_cast<uint32_t>(o.n_ctx);
    cp.n_threads            = o.n_threads;
    cp.type_k               = ember_type_from_name(o.ctk.c_str());
    cp.type_v               = ember_type_from_name(o.ctv.c_str());
    cp.abort_callback       = abort_decode;
    cp.device_top_k         = o.device_top_k;
    if (cp.type_k < 0 || cp.type_v < 0) {
        std::fprintf(stderr, "ember-chat: unknown KV cache type '%s'\n", (cp.type_k < 0 ? o.ctk : o.ctv).c_str());
        return 1;
    }
    if (ember_context_create(c.model, &cp, &c.ctx) != EMBER_OK) {
        std::fprintf(stderr, "ember-chat: cannot create a context: %s\n", ember_last_error());
        return 1;
    }
    if (build_sampler(o, ember_model_n_vocab(c.model), &c.sampler) != EMBER_OK) {
        std::fprintf(stderr, "ember-chat: bad sampling options: %s\n", ember_last_error());
        return 1;
    }
    if (int32_t bos = ember_token_bos(c.model); bos >= 0) {
        char    buf[128];
        int32_t n = ember_token_to_piece(c.model, bos, buf, sizeof(buf), 1);
        if (n > 0 && n <= static_cast<int32_t>(sizeof(buf))) c.bos_text.assign(buf, static_cast<size_t>(n));
    }
    if (!o.system.empty()) {
        c.roles.push_back("system");
        c.contents.push_back(o.system);
    }

    // Validate the template once before the first turn.
    {
        std::string probe = c.render(true);
        if (!probe.empty() && probe[0] == '\x01') {
            std::fprintf(stderr, "ember-chat: cannot render the chat template: %s\n(pass --chat-template NAME to use a built-in one)\n",
                         probe.c_str() + 1);
            return 1;
        }
    }

    bool ok = true;
    if (!o.prompt.empty()) {
        ok = c.turn(o.prompt);
    } else {
        if (c.interactive) {
            char desc[256];
            ember_model_desc(c.model, desc, sizeof(desc));
            std::fprintf(stderr, "ember-chat: %s, context %u tokens. Ctrl-C stops an answer; /exit quits.\n", desc,
                         ember_context_n_ctx(c.ctx));
        }
        std::string line;
        for (;;) {
            if (c.interactive) {
                std::fputs("> ", stdout);
                std::fflush(stdout);
            }
            if (!std::getline(std::cin, line)) break;
            if (line == "/exit" || line == "/quit") break;
            if (line == "/reset") {
                c.roles.resize(o.system.empty() ? 0 : 1);
                c.contents.resize(c.roles.size());
                continue;
            }
            if (line.empty()) continue;
            if (!c.turn(line)) {
                ok = false;
                break;
            }
        }
    }
    c.print_stats();
    return ok ? 0 : 1;
}
