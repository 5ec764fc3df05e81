// ember-template: render chat-template test cases and print the results. Uses nothing but
// include/ember.h.
//
//   ember-template --template FILE.jinja --cases FILE.cases.json
//
// The cases file is a JSON array of objects (the format of fixtures/templates/*.cases.json);
// each object's fields other than "name" and "expected" are the template's variables
// (messages, tools, add_generation_prompt, bos_token, eos_token, ...). Prints a JSON array of
// the rendered strings in case order. The interface is stable: conformance checks drive it.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"

namespace {

// strftime_now pins to this date unless --date or SOURCE_DATE_EPOCH says otherwise: the date
// the fixtures' expected renderings were made with.
const char * const k_default_date = "2024-07-26";

void usage(FILE * f, const char * argv0) {
    std::fprintf(f,
                 "usage: %s --template FILE --cases FILE [--date YYYY-MM-DD]\n"
                 "\n"
                 "Renders every case of a cases file with a chat template and prints a JSON array of the\n"
                 "results, in case order (strings UTF-8, JSON-escaped).\n"
                 "  --template FILE      the Jinja chat template\n"
                 "  --cases FILE         a JSON array of objects; the fields other than \"name\" and\n"
                 "                       \"expected\" are the template variables\n"
                 "  --date YYYY-MM-DD    the date strftime_now() formats (default: SOURCE_DATE_EPOCH when set,\n"
                 "                       else %s, the date of the reference renderings)\n"
                 "  -h, --help           this text\n"
                 "Exit status: 0 when every case rendered; 1 when one did not (each failure is reported on\n"
                 "stderr and nothing is printed); 2 for bad arguments or unreadable input.\n",
                 argv0, k_default_date);
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

// Seconds since the epoch of YYYY-MM-DD at 00:00 UTC; false when malformed.
bool parse_date(const char * s, long long & out) {
    int y = 0, m = 0, d = 0;
    char tail = 0;
    if (std::sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || y < 1970 || m < 1 || m > 12 || d < 1 || d > 31) return false;
    // days from civil (Howard Hinnant's algorithm)
    const int      yy  = y - (m <= 2 ? 1 : 0);
    const int      era = yy / 400;
    const unsigned yoe = unsigned(yy - era * 400);
    const unsigned doy = unsigned((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1);
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    out                = (static_cast<long long>(era) * 146097 + static_cast<long long>(doe) - 719468) * 86400;
    return true;
}

//
// A minimal JSON scanner: enough to split the cases array into per-case variable objects
// (the library parses and checks each one).
//
struct scanner {
    const std::string & s;
    size_t              pos = 0;
    std::string         error;

    void skip_ws() {
        while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) pos++;
    }

    bool fail(const char * what) {
        if (error.empty()) error = std::string(what) + " at byte " + std::to_string(pos);
        return false;
    }

    // Skips a string at pos (on its quote); decoded text into *out when given.
    bool string(std::string * out) {
        if (pos >= s.size() || s[pos] != '"') return fail("expected a string");
        pos++;
        while (pos < s.size()) {
            const char c = s[pos++];
            if (c == '"') return true;
            if (c != '\\') {
                if (out) *out += c;
                continue;
            }
            if (pos >= s.size()) break;
            const char e = s[pos++];
            if (!out) continue;
            switch (e) {
                case 'n': *out += '\n'; break;
                case 't': *out += '\t'; break;
                case 'r': *out += '\r'; break;
                case 'b': *out += '\b'; break;
                case 'f': *out += '\f'; break;
                case 'u': *out += '?'; pos += pos + 4 <= s.size() ? 4 : 0; break;  // names are for messages only
                default: *out += e;
            }
        }
        return fail("unterminated string");
    }

    // Skips any value, counting nesting without recursion.
    bool value() {
        skip_ws();
        if (pos >= s.size()) return fail("unexpected end of input");
        if (s[pos] == '"') return string(nullptr);
        if (s[pos] != '[' && s[pos] != '{') {
            const size_t start = pos;
            while (pos < s.size() && std::strchr(",]} \t\r\n", s[pos]) == nullptr) pos++;
            return pos > start ? true : fail("expected a value");
        }
        std::vector<char> stack;
        while (pos < s.size()) {
            const char c = s[pos];
            if (c == '"') {
                if (!string(nullptr)) return false;
                continue;
            }
            pos++;
            if (c == '[' || c == '{') {
                stack.push_back(c == '[' ? ']' : '}');
            } else if (c == ']' || c == '}') {
                if (stack.empty() || stack.back() != c) return fail("mismatched bracket");
                stack.pop_back();
                if (stack.empty()) return true;
            }
        }
        return fail("unexpected end of input");
    }
};

struct test_case {
    std::string name;
    std::string vars;  // the case object without "name" and "expected"
};

bool split_cases(const std::string & text, std::vector<test_case> & cases, std::string & error) {
    scanner sc{text, 0, {}};
    sc.skip_ws();
    if (sc.pos >= text.size() || text[sc.pos] != '[') {
        error = "the cases file is not a JSON array";
        return false;
    }
    sc.pos++;
    sc.skip_ws();
    if (sc.pos < text.size() && text[sc.pos] == ']') return true;
    for (;;) {
        sc.skip_ws();
        if (sc.pos >= text.size() || text[sc.pos] != '{') {
            error = "case " + std::to_string(cases.size()) + " is not a JSON object";
            return false;
        }
        sc.pos++;
        test_case tc;
        tc.name  = "#" + std::to_string(cases.size());
        tc.vars  = "{";
        bool first = true;
        sc.skip_ws();
        if (sc.pos < text.size() && text[sc.pos] == '}') {
            sc.pos++;
        } else {
            for (;;) {
                sc.skip_ws();
                const size_t key_start = sc.pos;
                std::string  key;
                if (!sc.string(&key)) break;
                const size_t key_end = sc.pos;
                sc.skip_ws();
                if (sc.pos >= text.size() || text[sc.pos] != ':') {
                    sc.fail("expected ':'");
                    break;
                }
                sc.pos++;
                sc.skip_ws();
                const size_t val_start = sc.pos;
                if (key == "name" && sc.pos < text.size() && text[sc.pos] == '"') {
                    std::string name;
                    if (!sc.string(&name)) break;
                    tc.name = "'" + name + "'";
                } else if (!sc.value()) {
                    break;
                }
                if (key != "name" && key != "expected") {
                    if (!first) tc.vars += ", ";
                    tc.vars += text.substr(key_start, key_end - key_start) + ": " + text.substr(val_start, sc.pos - val_start);
                    first = false;
                }
                sc.skip_ws();
                if (sc.pos < text.size() && text[sc.pos] == ',') {
                    sc.pos++;
                    continue;
                }
                if (sc.pos < text.size() && text[sc.pos] == '}') {
                    sc.pos++;
                    break;
                }
                sc.fail("expected ',' or '}'");
                break;
            }
        }
        if (!sc.error.empty()) {
            error = "case " + std::to_string(cases.size()) + ": " + sc.error;
            return false;
        }
        tc.vars += "}";
        cases.push_back(std::move(tc));
        sc.skip_ws();
        if (sc.pos < text.size() && text[sc.pos] == ',') {
            sc.pos++;
            continue;
        }
        if (sc.pos < text.size() && text[sc.pos] == ']') return true;
        error = "expected ',' or ']' after case " + std::to_string(cases.size() - 1);
        return false;
    }
}

void put_json_string(std::string & out, const std::string & s) {
    static const char hex[] = "0123456789abcdef";
    out += '"';
    for (char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    out += "\\u00";
                    out += hex[c >> 4];
                    out += hex[c & 15];
                } else {
                    out += ch;  // UTF-8 as is
                }
        }
    }
    out += '"';
}

// Renders one case; false with the library's message on failure.
bool render(const std::string & tmpl, const std::string & vars, std::string & out, std::string & error) {
    const int32_t n = ember_chat_render_json(tmpl.c_str(), vars.c_str(), nullptr, 0);
    if (n < 0) {
        error = ember_last_error();
        return false;
    }
    std::vector<char> buf(size_t(n) + 1);
    const int32_t     m = ember_chat_render_json(tmpl.c_str(), vars.c_str(), buf.data(), int32_t(buf.size()));
    if (m != n) {
        error = m < 0 ? ember_last_error() : "the rendering changed between two calls";
        return false;
    }
    out.assign(buf.data(), size_t(n));
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        std::fprintf(stderr, "%s: libember ABI mismatch: %s\n", argv[0], ember_last_error());
        return 2;
    }
    const char * template_path = nullptr;
    const char * cases_path    = nullptr;
    const char * date          = nullptr;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
                return nullptr;
            }
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage(stdout, argv[0]);
            return 0;
        } else if (a == "--template") {
            if (!(template_path = value())) return 2;
        } else if (a == "--cases") {
            if (!(cases_path = value())) return 2;
        } else if (a == "--date") {
            if (!(date = value())) return 2;
        } else {
            std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a.c_str());
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (!template_path || !cases_path) {
        usage(stderr, argv[0]);
        return 2;
    }
    // The library's strftime_now honours SOURCE_DATE_EPOCH.
    const char * sde = std::getenv("SOURCE_DATE_EPOCH");
    if (date || !sde || !*sde) {
        long long epoch = 0;
        if (!parse_date(date ? date : k_default_date, epoch)) {
            std::fprintf(stderr, "%s: bad --date '%s' (want YYYY-MM-DD)\n", argv[0], date);
            return 2;
        }
        setenv("SOURCE_DATE_EPOCH", std::to_string(epoch).c_str(), 1);
    }

    std::string tmpl, cases_text;
    if (!read_file(template_path, tmpl)) {
        std::fprintf(stderr, "%s: cannot read %s: %s\n", argv[0], template_path, std::strerror(errno));
        return 2;
    }
    if (!read_file(cases_path, cases_text)) {
        std::fprintf(stderr, "%s: cannot read %s: %s\n", argv[0], cases_path, std::strerror(errno));
        return 2;
    }
    if (tmpl.find('\0') != std::string::npos) {
        std::fprintf(stderr, "%s: %s contains a NUL byte\n", argv[0], template_path);
        return 2;
    }
    std::vector<test_case> cases;
    std::string            error;
    if (!split_cases(cases_text, cases, error)) {
        std::fprintf(stderr, "%s: %s: %s\n", argv[0], cases_path, error.c_str());
        return 2;
    }

    std::string out = "[";
    int         failed = 0;
    for (size_t k = 0; k < cases.size(); k++) {
        std::string text;
        if (!render(tmpl, cases[k].vars, text, error)) {
            std::fprintf(stderr, "%s: case %s (%zu of %zu) failed: %s\n", argv[0], cases[k].name.c_str(), k + 1, cases.size(), error.c_str());
            failed++;
            continue;
        }
        out += k ? ",\n  " : "\n  ";
        put_json_string(out, text);
    }
    out += cases.empty() ? "]\n" : "\n]\n";
    if (failed) return 1;
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 2;
}
