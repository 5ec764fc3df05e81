// ember-quantize: quantize or convert a model, in the style of llama-quantize.
// Uses nothing but include/ember.h.
//
//   ember-quantize [options] IN OUT TYPE [THREADS]
//   ember-quantize --dry-run [options] IN TYPE
//
// IN is a GGUF file (F32/F16/BF16; an already quantized one with --allow-requantize) or a
// Hugging Face model folder. TYPE is a llama.cpp mix (Q4_K_M, Q5_K_S, Q3_K_L, Q2_K, ...) or a
// tensor type (q8_0, iq4_nl, f16, INT4, NF4, FP8_E4M3, ...), case-insensitive.
//
// One line per tensor and a summary go to stderr. Ctrl-C (SIGINT) or SIGTERM stops after the
// tensor being converted; the partly written output is removed and OUT is not created.
// Exit codes: 0 done, 1 bad arguments or a failed run, 128 + signal number when cancelled.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "ember.h"

namespace {

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
    if (g_signal == 0) {
        static const char msg[] = "\nember-quantize: stopping after the current tensor...\n";
        const ssize_t     n     = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void) n;
    }
    g_signal = sig;
}

int on_progress(int32_t, int32_t, const char *, int32_t, double, void *) { return g_signal != 0; }

void on_log(int32_t level, const char * message, void *) {
    if (level <= EMBER_LOG_WARN) {
        std::fprintf(stderr, "ember-quantize: %s: %s\n", level == EMBER_LOG_ERROR ? "error" : "warning", message);
    } else {
        std::fprintf(stderr, "%s\n", message);
    }
}

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: ember-quantize [options] IN OUT TYPE [THREADS]\n"
                 "       ember-quantize --dry-run [options] IN TYPE\n"
                 "\n"
                 "  IN    GGUF file (F32, F16, BF16; quantized only with --allow-requantize) or Hugging Face model folder\n"
                 "  OUT   GGUF file to write (never IN; written under a temporary name, renamed when complete)\n"
                 "  TYPE  llama.cpp mixes: Q4_K_M Q4_K_S Q5_K_M Q5_K_S Q3_K_M Q3_K_S Q3_K_L Q2_K Q6_K (Q4_K = Q4_K_M, ...)\n"
                 "        tensor types:   f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl iq4_xs\n"
                 "        Ember's types:  INT4 INT4_G32 NF4 FP8_E4M3 FP8_E5M2 FP8_E4M3_ROW FP8_E5M2_ROW\n"
                 "        (case-insensitive)\n"
                 "\n"
                 "options:\n"
                 "  --allow-requantize          accept an already quantized input (quality suffers)\n"
                 "  --pure                      every matrix gets TYPE: no per-tensor mix rules\n"
                 "  --output-tensor-type T      type of output.weight (token_embd.weight when tied)\n"
                 "  --token-embedding-type T    type of token_embd.weight\n"
                 "  --imatrix FILE              importance matrix from llama-imatrix (.dat or .gguf)\n"
                 "  --calibrate TEXT            measure the importance matrix on this text first (GGUF input)\n"
                 "  --calibrate-chunks N        chunks of 512 tokens to measure (default 16)\n"
                 "  --imatrix-out FILE          also save the measured matrix (llama.cpp legacy .dat)\n"
                 "  -t, --threads N             threads (default: all cores)\n"
                 "  --dry-run                   show the plan and the sizes, write nothing\n"
                 "  -h, --help                  this text\n");
}

bool parse_int(const char * s, int32_t & out) {
    char * end = nullptr;
    long   v   = std::strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > 4096) return false;
    out = static_cast<int32_t>(v);
    return true;
}

int fail(const char * fmt, const char * a, const char * b = "") {
    std::fprintf(stderr, "ember-quantize: ");
    std::fprintf(stderr, fmt, a, b);
    std::fprintf(stderr, " (see --help)\n");
    return 1;
}

}  // namespace

int main(int argc, char ** argv) {
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        std::fprintf(stderr, "ember-quantize: %s\n", ember_last_error());
        return 1;
    }
    ember_quantize_params    p = ember_quantize_default_params();
    std::vector<std::string> pos;
    std::string              imatrix, calibrate, imatrix_out;
    for (int i = 1; i < argc; i++) {
        const std::string a   = argv[i];
        const char *      val = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else if (a == "--allow-requantize") {
            p.allow_requantize = 1;
        } else if (a == "--pure") {
            p.pure = 1;
        } else if (a == "--dry-run") {
            p.dry_run = 1;
        } else if (a == "--output-tensor-type" || a == "--token-embedding-type") {
            if (!val) return fail("%s needs a type%s", a.c_str());
            const int32_t t = ember_type_from_name(val);
            if (t < 0) return fail("unknown tensor type '%s' for %s", val, a.c_str());
            (a == "--output-tensor-type" ? p.output_tensor_type : p.token_embd_type) = t;
            i++;
        } else if (a == "--imatrix") {
            if (!val) return fail("%s needs a file%s", a.c_str());
            imatrix = val;
            i++;
        } else if (a == "--calibrate" || a == "--imatrix-out") {
            if (!val) return fail("%s needs a file%s", a.c_str());
            (a == "--calibrate" ? calibrate : imatrix_out) = val;
            i++;
        } else if (a == "--calibrate-chunks") {
            if (!val || !parse_int(val, p.calibration_chunks)) return fail("%s needs a chunk count from 1 to 4096%s", a.c_str());
            i++;
        } else if (a == "-t" || a == "--threads") {
            if (!val || !parse_int(val, p.n_threads)) return fail("%s needs a thread count from 1 to 4096%s", a.c_str());
            i++;
        } else if (a.size() > 1 && a[0] == '-') {
            return fail("unknown option '%s'%s", a.c_str());
        } else {
            pos.push_back(a);
        }
    }
    // Positionals: IN OUT TYPE [THREADS], or IN TYPE for a dry run.
    if (p.dry_run && pos.size() == 2) pos.insert(pos.begin() + 1, std::string());
    if (pos.size() == 4) {
        if (!parse_int(pos[3].c_str(), p.n_threads)) return fail("bad thread count '%s'%s", pos[3].c_str());
        pos.pop_back();
    }
    if (pos.size() != 3) {
        std::fprintf(stderr, "ember-quantize: expected IN OUT TYPE, got %zu argument%s (see --help)\n", pos.size(), pos.size() == 1 ? "" : "s");
        return 1;
    }
    p.ftype             = pos[2].c_str();
    p.imatrix_path      = imatrix.empty() ? nullptr : imatrix.c_str();
    p.calibration_path  = calibrate.empty() ? nullptr : calibrate.c_str();
    p.imatrix_out_path  = imatrix_out.empty() ? nullptr : imatrix_out.c_str();
    p.progress_callback = on_progress;

    ember_log_set(on_log, nullptr);
    ember_log_set_level(EMBER_LOG_INFO);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    // A closed stderr pipe (ember-quantize ... 2>&1 | head) must fail writes, not kill the
    // process before it removes its temporary file.
    std::signal(SIGPIPE, SIG_IGN);

    const ember_status st = ember_model_quantize(pos[0].c_str(), p.dry_run ? nullptr : pos[1].c_str(), &p);
    if (st == EMBER_ERR_CANCELLED) {
        std::fprintf(stderr, "ember-quantize: cancelled: %s\n", ember_last_error());
        return 128 + (g_signal ? int(g_signal) : SIGINT);
    }
    if (st != EMBER_OK) {
        std::fprintf(stderr, "ember-quantize: %s\n", ember_last_error());
        return 1;
    }
    return 0;
}
