// ember-tokenize: print the tokens of a text with a model's tokenizer. Uses nothing but
// include/ember.h.
//
//   ember-tokenize -m MODEL --prompt "Hello world" --ids      one line: 15043 3186
//   ember-tokenize -m MODEL --file PATH                       one line per token: id 'piece'
//   ember-tokenize -m MODEL --file PATH --separator SEP --ids one line of ids per text
//
// The interface is stable: conformance checks drive it.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"

namespace {

void usage(FILE * f, const char * argv0) {
    std::fprintf(f,
                 "usage: %s -m MODEL [--vocab-only] (--prompt TEXT | --file PATH) [--no-bos] [--parse-special] [--ids]\n"
                 "\n"
                 "Tokenizes the text with the model's tokenizer (its GGUF metadata).\n"
                 "  -m, --model PATH     GGUF model\n"
                 "  --vocab-only         load only the vocabulary (works for files without weights and for\n"
                 "                       architectures Ember cannot run)\n"
                 "  -p, --prompt TEXT    the text\n"
                 "  -f, --file PATH      the text is the whole file, byte for byte\n"
                 "  --no-bos             add no BOS/EOS tokens (add_special = 0); by default they are added\n"
                 "                       as the model's metadata asks\n"
                 "  --parse-special      text that spells a control or user-defined token becomes that token\n"
                 "  --ids                print only the ids, separated by spaces, on one line\n"
                 "  --separator SEP      the input holds several texts, each one ended by SEP (a last\n"
                 "                       text without it counts too); each is tokenized on its own and\n"
                 "                       printed in turn (with --ids: one line each), the model loaded once\n"
                 "  -h, --help           this text\n"
                 "Without --ids, each token is printed on its own line: its id, then its text in quotes.\n",
                 argv0);
}

bool read_file(const char * path, std::string & out) {
    FILE * f = std::fopen(path, "rb");
    if (!f) return false;
    char   buf[65536];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

// Tokenizes one text and prints it (ids on one line, or a line per token); false on an error
// (printed).
bool print_tokens(const ember_model * model, const std::string & text, uint8_t add_special, bool parse_special, bool ids_only) {
    const int32_t        len = static_cast<int32_t>(text.size());
    std::vector<int32_t> tokens(text.size() + 2);
    int32_t n = ember_tokenize(model, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()), add_special, parse_special);
    if (n > static_cast<int32_t>(tokens.size())) {
        tokens.resize(static_cast<size_t>(n));
        n = ember_tokenize(model, text.data(), len, tokens.data(), n, add_special, parse_special);
    }
    if (n < 0) {
        std::fprintf(stderr, "ember-tokenize: %s\n", ember_last_error());
        return false;
    }
    tokens.resize(static_cast<size_t>(n));
    if (ids_only) {
        for (int32_t i = 0; i < n; i++) std::printf(i ? " %d" : "%d", tokens[i]);
        std::printf("\n");
        return true;
    }
    std::vector<char> piece(256);
    for (int32_t t : tokens) {
        int32_t k = ember_token_to_piece(model, t, piece.data(), static_cast<int32_t>(piece.size()), 1);
        if (k > static_cast<int32_t>(piece.size())) {
            piece.resize(static_cast<size_t>(k));
            k = ember_token_to_piece(model, t, piece.data(), k, 1);
        }
        if (k < 0) {
            std::fprintf(stderr, "ember-tokenize: token %d: %s\n", t, ember_last_error());
            return false;
        }
        std::printf("%6d '", t);
        std::fwrite(piece.data(), 1, static_cast<size_t>(k), stdout);
        std::printf("'\n");
    }
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    const char * argv0 = argc > 0 ? argv[0] : "ember-tokenize";
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        std::fprintf(stderr, "ember-tokenize: library ABI %u does not match this program's ABI %u\n",
                     static_cast<unsigned>(ember_abi_version()), static_cast<unsigned>(EMBER_ABI_VERSION));
        return 1;
    }

    std::string model_path, text, text_source, separator;  // separator: empty without --separator
    bool        vocab_only = false, no_bos = false, parse_special = false, ids_only = false, have_text = false;
    for (int i = 1; i < argc; i++) {
        const std::string a     = argv[i];
        auto              value = [&](const char * name) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ember-tokenize: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        const char * v = nullptr;
        if (a == "-h" || a == "--help") {
            usage(stdout, argv0);
            return 0;
        } else if (a == "-m" || a == "--model") {
            if (!(v = value("--model"))) return 2;
            model_path = v;
        } else if (a == "-p" || a == "--prompt") {
            if (!(v = value("--prompt"))) return 2;
            if (have_text) {
                std::fprintf(stderr, "ember-tokenize: give one of --prompt and --file, once\n");
                return 2;
            }
            text      = v;
            have_text = true;
        } else if (a == "-f" || a == "--file") {
            if (!(v = value("--file"))) return 2;
            if (have_text) {
                std::fprintf(stderr, "ember-tokenize: give one of --prompt and --file, once\n");
                return 2;
            }
            if (!read_file(v, text)) {
                std::fprintf(stderr, "ember-tokenize: cannot read '%s': %s\n", v, std::strerror(errno));
                return 1;
            }
            have_text = true;
        } else if (a == "--vocab-only") {
            vocab_only = true;
        } else if (a == "--no-bos") {
            no_bos = true;
        } else if (a == "--parse-special") {
            parse_special = true;
        } else if (a == "--ids") {
            ids_only = true;
        } else if (a == "--separator") {
            if (!(v = value("--separator"))) return 2;
            separator = v;
            if (separator.empty()) {
                std::fprintf(stderr, "ember-tokenize: --separator needs a non-empty value\n");
                return 2;
            }
        } else {
            std::fprintf(stderr, "ember-tokenize: unknown argument '%s'\n", a.c_str());
            usage(stderr, argv0);
            return 2;
        }
    }
    if (model_path.empty() || !have_text) {
        std::fprintf(stderr, "ember-tokenize: -m MODEL and one of --prompt / --file are required\n");
        usage(stderr, argv0);
        return 2;
    }
    if (text.size() > static_cast<size_t>(INT32_MAX)) {
        std::fprintf(stderr, "ember-tokenize: the text is larger than 2 GiB\n");
        return 1;
    }

    ember_model_params mp = ember_model_default_params();
    mp.vocab_only         = vocab_only ? 1 : 0;
    ember_model *      model = nullptr;
    const ember_status st    = ember_model_load(model_path.c_str(), &mp, &model);
    if (st != EMBER_OK) {
        std::fprintf(stderr, "ember-tokenize: cannot load '%s': %s: %s\n", model_path.c_str(), ember_status_str(st), ember_last_error());
        return 1;
    }

    // The texts: the whole input, or its parts each ended by the separator.
    std::vector<std::string> texts;
    if (!separator.empty()) {
        size_t at = 0;
        for (size_t hit; (hit = text.find(separator, at)) != std::string::npos; at = hit + separator.size()) {
            texts.push_back(text.substr(at, hit - at));
        }
        if (at < text.size()) texts.push_back(text.substr(at));
    } else {
        texts.push_back(std::move(text));
    }
    int rc = 0;
    for (const std::string & t : texts) {
        if (!print_tokens(model, t, no_bos ? 0 : 1, parse_special, ids_only)) {
            rc = 1;
            break;
        }
    }
    if (std::fflush(stdout) != 0) rc = 1;
    ember_model_free(model);
    return rc;
}
