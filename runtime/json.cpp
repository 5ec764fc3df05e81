// JSON reader and writer with Python json semantics (see json.h).
#include "runtime/json.h"

#include <unordered_map>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

const ember_json * ember_json::find(const std::string & key) const {
    if (kind != EMBER_JSON_OBJECT) return nullptr;
    for (const auto & kv : obj) {
        if (kv.first == key) return &kv.second;
    }
    return nullptr;
}

//
// Reader
//
namespace {

constexpr int k_max_depth = 512;

struct json_reader {
    const std::string & text;
    size_t              pos = 0;

    [[noreturn]] void fail(const char * what) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < pos && i < text.size(); i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        ember_throw(EMBER_ERR_INVALID_ARG, "JSON line %zu column %zu: %s", line, col, what);
    }

    void skip_ws() {
        while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')) pos++;
    }

    bool match(const char * lit) {
        const size_t n = std::strlen(lit);
        if (text.compare(pos, n, lit) != 0) return false;
        pos += n;
        return true;
    }

    unsigned hex4() {
        if (pos + 4 > text.size()) fail("truncated \\u escape");
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
            const char c = text[pos++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= unsigned(c - '0');
            else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
            else fail("bad \\u escape");
        }
        return v;
    }

    static void put_utf8(std::string & out, unsigned cp) {
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6));
            out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | (cp >> 18));
            out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        }
    }

    std::string string_body() {
        // at the opening quote
        pos++;
        std::string out;
        for (;;) {
            if (pos >= text.size()) fail("unterminated string");
            const unsigned char c = static_cast<unsigned char>(text[pos]);
            if (c == '"') {
                pos++;
                return out;
            }
            if (c < 0x20) fail("control character in string");
            if (c != '\\') {
                out += char(c);
                pos++;
                continue;
            }
            pos++;
            if (pos >= text.size()) fail("unterminated string");
            const char e = text[pos++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    unsigned cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00 && pos + 6 <= text.size() && text[pos] == '\\' && text[pos + 1] == 'u') {
                        const size_t save = pos;
                        pos += 2;
                        const unsigned lo = hex4();
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else pos = save;
                    }
                    put_utf8(out, cp);  // a lone surrogate is kept as its 3-byte form, like Python keeps it
                    break;
                }
                default: pos--; fail("bad escape in string");
            }
        }
    }

    ember_json number() {
        const size_t start = pos;
        if (text[pos] == '-') pos++;
        if (pos < text.size() && text[pos] == 'I') {
            if (!match("Infinity")) fail("bad number");
            ember_json v;
            v.kind = EMBER_JSON_FLOAT;
            v.f    = -HUGE_VAL;
            return v;
        }
        const size_t int_start = pos;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') pos++;
        if (pos == int_start) fail("bad number");
        if (text[int_start] == '0' && pos - int_start > 1) fail("leading zero in number");
        bool is_float = false;
        if (pos < text.size() && text[pos] == '.') {
            is_float = true;
            pos++;
            const size_t f0 = pos;
            while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') pos++;
            if (pos == f0) fail("bad number");
        }
        if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
            is_float = true;
            pos++;
            if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) pos++;
            const size_t e0 = pos;
            while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') pos++;
            if (pos == e0) fail("bad number");
        }
        ember_json v;
        const char * b = text.data() + start;
        const char * e = text.data() + pos;
        if (!is_float) {
            int64_t i = 0;
            auto    r = std::from_chars(b, e, i);
            if (r.ec == std::errc() && r.ptr == e) {
                v.kind = EMBER_JSON_INT;
                v.i    = i;
                return v;
            }
            // out of int64 range: Python would keep a big integer; a double is the closest we have
        }
        v.kind = EMBER_JSON_FLOAT;
        v.f    = std::strtod(std::string(b, e).c_str(), nullptr);
        return v;
    }

    ember_json value(int depth) {
        if (depth > k_max_depth) fail("nesting too deep");
        skip_ws();
        if (pos >= text.size()) fail("unexpected end of input");
        ember_json v;
        const char c = text[pos];
        if (c == '{') {
            v.kind = EMBER_JSON_OBJECT;
            pos++;
            skip_ws();
            if (pos < text.size() && text[pos] == '}') {
                pos++;
                return v;
            }
            std::unordered_map<std::string, size_t> index;  // key -> position, once the object is large
            for (;;) {
                skip_ws();
                if (pos >= text.size() || text[pos] != '"') fail("expected a string key");
                std::string key = string_body();
                skip_ws();
                if (pos >= text.size() || text[pos] != ':') fail("expected ':'");
                pos++;
                ember_json item = value(depth + 1);
                // Like a Python dict: a repeated key keeps its first position and takes the last value.
                if (v.obj.size() >= 16 && index.empty()) {
                    for (size_t k = 0; k < v.obj.size(); k++) index.emplace(v.obj[k].first, k);
                }
                if (!index.empty()) {
                    auto hit = index.find(key);
                    if (hit != index.end()) {
                        v.obj[hit->second].second = std::move(item);
                    } else {
                        index.emplace(key, v.obj.size());
                        v.obj.emplace_back(std::move(key), std::move(item));
                    }
                } else {
                    auto it = std::find_if(v.obj.begin(), v.obj.end(), [&](const auto & kv) { return kv.first == key; });
                    if (it != v.obj.end()) it->second = std::move(item);
                    else v.obj.emplace_back(std::move(key), std::move(item));
                }
                skip_ws();
                if (pos < text.size() && text[pos] == ',') {
                    pos++;
                    continue;
                }
                if (pos < text.size() && text[pos] == '}') {
                    pos++;
                    return v;
                }
                fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.kind = EMBER_JSON_ARRAY;
            pos++;
            skip_ws();
            if (pos < text.size() && text[pos] == ']') {
                pos++;
                return v;
            }
            for (;;) {
                v.arr.push_back(value(depth + 1));
                skip_ws();
                if (pos < text.size() && text[pos] == ',') {
                    pos++;
                    continue;
                }
                if (pos < text.size() && text[pos] == ']') {
                    pos++;
                    return v;
                }
                fail("expected ',' or ']'");
            }
        }
        if (c == '"') {
            v.kind = EMBER_JSON_STRING;
            v.str  = string_body();
            return v;
        }
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        if (match("true")) {
            v.kind = EMBER_JSON_BOOL;
            v.b    = true;
            return v;
        }
        if (match("false")) {
            v.kind = EMBER_JSON_BOOL;
            return v;
        }
        if (match("null")) return v;
        if (match("NaN")) {
            v.kind = EMBER_JSON_FLOAT;
            v.f    = std::nan("");
            return v;
        }
        if (match("Infinity")) {
            v.kind = EMBER_JSON_FLOAT;
            v.f    = HUGE_VAL;
            return v;
        }
        fail("unexpected character");
    }
};

}  // namespace

ember_json ember_json_parse(const std::string & text) {
    json_reader r{text};
    ember_json  v = r.value(0);
    r.skip_ws();
    if (r.pos != text.size()) r.fail("extra data after the value");
    return v;
}

//
// Writer
//
std::string ember_json_format_double(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
    char buf[64];
    auto r  = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    *r.ptr  = '\0';
    // buf is "[-]d[.ddd]e[+-]XX": split into sign, digits and decimal exponent
    std::string s(buf);
    bool        neg = false;
    if (s[0] == '-') {
        neg = true;
        s.erase(0, 1);
    }
    const size_t epos   = s.find('e');
    const int    exp10  = std::atoi(s.c_str() + epos + 1);
    std::string  digits = s.substr(0, epos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();

    std::string out = neg ? "-" : "";
    if (exp10 < -4 || exp10 >= 16) {
        // Python repr switches to exponent notation outside [1e-4, 1e16)
        out += digits[0];
        if (digits.size() > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        out += e;
    } else if (exp10 < 0) {
        out += "0." + std::string(size_t(-exp10 - 1), '0') + digits;
    } else {
        const size_t n_int = size_t(exp10) + 1;
        if (digits.size() <= n_int) {
            out += digits + std::string(n_int - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, n_int) + "." + digits.substr(n_int);
        }
    }
    return out;
}

void ember_json_write_string(std::string & out, const std::string & s, bool ensure_ascii) {
    static const char hex[] = "0123456789abcdef";
    out += '"';
    for (size_t i = 0; i < s.size(); i++) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (c < 0x20) {
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else if (c < 0x80 || !ensure_ascii) {
            out += char(c);
        } else {
            // decode one UTF-8 sequence (an invalid byte stands for itself)
            unsigned cp  = c;
            size_t   len = 1;
            if ((c & 0xE0) == 0xC0) {
                cp  = c & 0x1F;
                len = 2;
            } else if ((c & 0xF0) == 0xE0) {
                cp  = c & 0x0F;
                len = 3;
            } else if ((c & 0xF8) == 0xF0) {
                cp  = c & 0x07;
                len = 4;
            }
            if (len > 1 && i + len <= s.size()) {
                bool ok = true;
                for (size_t k = 1; k < len; k++) {
                    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
                    if ((cc & 0xC0) != 0x80) ok = false;
                    cp = (cp << 6) | (cc & 0x3F);
                }
                if (ok) i += len - 1;
                else cp = c;
            } else {
                cp = c;
            }
            auto put16 = [&](unsigned u) {
                out += "\\u";
                for (int sh = 12; sh >= 0; sh -= 4) out += hex[(u >> sh) & 15];
            };
            if (cp >= 0x10000) {
                cp -= 0x10000;
                put16(0xD800 + (cp >> 10));
                put16(0xDC00 + (cp & 0x3FF));
            } else {
                put16(cp);
            }
        }
    }
    out += '"';
}

namespace {

struct json_writer {
    const ember_json_dump_options & opt;
    std::string                     out;
    std::string                     unit;  // one level of indentation

    void check() const {
        if (opt.max_size && out.size() > opt.max_size) {
            ember_throw(EMBER_ERR_INVALID_ARG, "JSON output is larger than the limit of %zu bytes", opt.max_size);
        }
    }

    void newline(int level) {
        // checked before appending: a huge indent must fail before it allocates
        if (opt.max_size && out.size() + 1 + size_t(level) * unit.size() > opt.max_size) {
            ember_throw(EMBER_ERR_INVALID_ARG, "JSON output is larger than the limit of %zu bytes", opt.max_size);
        }
        out += '\n';
        for (int k = 0; k < level; k++) out += unit;
    }

    void write(const ember_json & v, int level) {
        const bool pretty = opt.indent >= 0 || !opt.indent_str.empty();
        switch (v.kind) {
            case EMBER_JSON_NULL: out += "null"; break;
            case EMBER_JSON_BOOL: out += v.b ? "true" : "false"; break;
            case EMBER_JSON_INT: out += std::to_string(v.i); break;
            case EMBER_JSON_FLOAT:
                if (std::isnan(v.f)) out += "NaN";
                else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
                else out += ember_json_format_double(v.f);
                break;
            case EMBER_JSON_STRING: ember_json_write_string(out, v.str, opt.ensure_ascii); break;
            case EMBER_JSON_ARRAY:
                if (v.arr.empty()) {
                    out += "[]";
                    break;
                }
                out += '[';
                for (size_t k = 0; k < v.arr.size(); k++) {
                    if (k) out += opt.item_sep;
                    if (pretty) newline(level + 1);
                    write(v.arr[k], level + 1);
                }
                if (pretty) newline(level);
                out += ']';
                break;
            case EMBER_JSON_OBJECT: {
                if (v.obj.empty()) {
                    out += "{}";
                    break;
                }
                std::vector<size_t> order(v.obj.size());
                for (size_t k = 0; k < order.size(); k++) order[k] = k;
                if (opt.sort_keys) {
                    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v.obj[a].first < v.obj[b].first; });
                }
                out += '{';
                for (size_t k = 0; k < order.size(); k++) {
                    if (k) out += opt.item_sep;
                    if (pretty) newline(level + 1);
                    ember_json_write_string(out, v.obj[order[k]].first, opt.ensure_ascii);
                    out += opt.key_sep;
                    write(v.obj[order[k]].second, level + 1);
                }
                if (pretty) newline(level);
                out += '}';
                break;
            }
        }
        check();
    }
};

}  // namespace

std::string ember_json_dump(const ember_json & v, const ember_json_dump_options & opt) {
    json_writer w{opt, {}, {}};
    w.unit = !opt.indent_str.empty() ? opt.indent_str : std::string(size_t(std::max(opt.indent, 0)), ' ');
    w.write(v, 0);
    return std::move(w.out);
}
