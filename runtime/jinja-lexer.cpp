// Template lexer: a transcription of jinja2's Lexer.tokeniter for the configuration that
// transformers uses (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"
#include "runtime/jinja-ast.h"

namespace {

struct lexer {
    std::string              src;
    size_t                   pos           = 0;
    int                      line          = 1;
    size_t                   line_pos      = 0;  // src offset that `line` was counted up to
    bool                     line_starting = true;
    std::vector<jinja_token> out;

    int line_at(size_t p) {
        // positions only move forward, so count incrementally
        if (p < line_pos) {
            line     = 1;
            line_pos = 0;
        }
        for (; line_pos < p && line_pos < src.size(); line_pos++) {
            if (src[line_pos] == '\n') line++;
        }
        return line;
    }

    [[noreturn]] void fail(size_t p, const char * what) {
        ember_throw(EMBER_ERR_INVALID_ARG, "chat template line %d: %s", line_at(p), what);
    }

    bool starts(size_t p, const char * lit) const { return src.compare(p, std::strlen(lit), lit) == 0; }

    // Byte length of the whitespace (Python \s) code point at p, 0 if none.
    size_t space_at(size_t p) const {
        if (p >= src.size()) return 0;
        size_t         q  = p;
        const uint32_t cp = jinja_utf8_next(src, &q);
        return jinja_is_space(cp) ? q - p : 0;
    }

    // Byte length of a non-ASCII code point at p that can be part of a name, else 0. Python
    // identifiers allow letters of any script: this takes every code point except spaces,
    // punctuation and symbol blocks, and emoji.
    size_t name_cp_len(size_t p) const {
        if (p >= src.size() || static_cast<unsigned char>(src[p]) < 0x80) return 0;
        size_t         q  = p;
        const uint32_t cp = jinja_utf8_next(src, &q);
        if (cp < 0x80 || jinja_is_space(cp)) return 0;
        if (cp < 0xC0 && cp != 0xAA && cp != 0xB5 && cp != 0xBA) return 0;  // Latin-1 punctuation and signs
        if (cp == 0xD7 || cp == 0xF7) return 0;
        if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
            (cp >= 0xFF00 && cp <= 0xFF0F) || (cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0x1F000) {
            return 0;
        }
        return q - p;
    }

    size_t skip_spaces(size_t p) const {
        while (size_t n = space_at(p)) p += n;
        return p;
    }

    void emit(jinja_tok kind, std::string text, size_t at) {
        jinja_token t;
        t.kind = kind;
        t.text = std::move(text);
        t.line = line_at(at);
        out.push_back(std::move(t));
    }

    // The data before a tag, with "-" / lstrip_blocks applied (jinja2's OptionalLStrip).
    void emit_text(size_t begin, size_t end, char sign, bool is_variable) {
        std::string text = src.substr(begin, end - begin);
        if (sign == '-') {
            text = jinja_strip(text, nullptr, false, true);
        } else if (sign != '+' && !is_variable) {
            const size_t nl    = text.rfind('\n');
            const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
                bool   all_space = true;
                size_t p         = l_pos;
                while (p < text.size()) {
                    if (!jinja_is_space(jinja_utf8_next(text, &p))) {
                        all_space = false;
                        break;
                    }
                }
                if (all_space) text.resize(l_pos);
            }
        }
        if (!text.empty()) emit(jinja_tok::text, std::move(text), begin);
    }

    // Matches `{%[-+]?\s*NAME\s*` at p and returns the offset after it, or npos.
    size_t match_tag_name(size_t p, const char * name, char * sign) const {
        if (!starts(p, "{%")) return std::string::npos;
        p += 2;
        *sign = 0;
        if (p < src.size() && (src[p] == '-' || src[p] == '+')) *sign = src[p++];
        p = skip_spaces(p);
        if (!starts(p, name)) return std::string::npos;
        p += std::strlen(name);
        // "raw" must not continue as a longer name: the regex requires \s* then the tag end
        return skip_spaces(p);
    }

    // Matches a block end at p: "+%}", "-%}\s*" or "%}\n?" (trim_blocks). Returns the end offset or npos.
    size_t match_block_end(size_t p) const {
        if (starts(p, "+%}")) return p + 3;
        if (starts(p, "-%}")) return skip_spaces(p + 3);
        if (starts(p, "%}")) return p + 2 + (starts(p + 2, "\n") ? 1 : 0);
        return std::string::npos;
    }

    void lex_raw(size_t body) {
        // {% raw %} ... {% endraw %}: everything in between is text
        size_t q = body;
        for (;;) {
            q = src.find("{%", q);
            if (q == std::string::npos) fail(body, "missing end of raw directive");
            char         sign = 0;
            const size_t p    = match_tag_name(q, "endraw", &sign);
            if (p != std::string::npos) {
                const size_t end = match_block_end(p);
                if (end != std::string::npos) {
                    emit_text(body, q, sign, false);
                    pos           = end;
                    line_starting = end > 0 && src[end - 1] == '\n';
                    return;
                }
            }
            q += 2;
        }
    }

    void lex_comment(size_t body) {
        // the first "#}" ends it; a '-' or '+' right before it is the whitespace marker
        const size_t h = src.find("#}", body);
        if (h == std::string::npos) fail(body, "missing end of comment tag");
        size_t end;
        if (h > body && src[h - 1] == '-') end = skip_spaces(h + 2);
        else if (h > body && src[h - 1] == '+') end = h + 2;
        else end = h + 2 + (starts(h + 2, "\n") ? 1 : 0);
        pos           = end;
        line_starting = src[end - 1] == '\n';
    }

    // Scans `(\d+_)*\d+` at p; returns the end or p when there is no digit.
    size_t digits(size_t p) const {
        size_t q = p;
        while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) {
            while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) q++;
            if (q + 1 < src.size() && src[q] == '_' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) q++;
        }
        return q;
    }

    static std::string strip_underscores(std::string s) {
        std::string r;
        for (char c : s) {
            if (c != '_') r += c;
        }
        return r;
    }

    bool lex_number(size_t p) {
        const size_t int_end = digits(p);
        if (int_end == p) return false;
        // float: (\d+_)*\d+ ( (\.digits)? e[+-]?digits | \.digits ), not right after a '.'
        if (p == 0 || src[p - 1] != '.') {
            size_t q        = int_end;
            bool   has_frac = false;
            if (q < src.size() && src[q] == '.' && digits(q + 1) > q + 1) {
                q        = digits(q + 1);
                has_frac = true;
            }
            size_t exp_end = std::string::npos;
            if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
                size_t e = q + 1;
                if (e < src.size() && (src[e] == '+' || src[e] == '-')) e++;
                if (digits(e) > e) exp_end = digits(e);
            }
            if (exp_end != std::string::npos || has_frac) {
                const size_t end = exp_end != std::string::npos ? exp_end : q;
                jinja_token  t;
                t.kind = jinja_tok::floating;
                t.text = strip_underscores(src.substr(p, end - p));
                t.f    = std::strtod(t.text.c_str(), nullptr);
                t.line = line_at(p);
                out.push_back(std::move(t));
                pos = end;
                return true;
            }
        }
        // integer: 0b / 0o / 0x prefixes, [1-9](_?\d)*, 0(_?0)*
        int    base = 10;
        size_t q    = p;
        if (src[p] == '0' && p + 1 < src.size() && std::strchr("bBoOxX", src[p + 1]) && src[p + 1] != '\0') {
            const char k = char(std::tolower(static_cast<unsigned char>(src[p + 1])));
            base         = k == 'b' ? 2 : k == 'o' ? 8 : 16;
            q            = p + 2;
            auto ok      = [&](char c) {
                return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : (c >= '0' && c < char('0' + base));
            };
            const size_t d0 = q;
            while (q < src.size() && (ok(src[q]) || (src[q] == '_' && q + 1 < src.size() && ok(src[q + 1])))) q++;
            if (q == d0) {
                base = 10;
                q    = p;
            }
        }
        if (base == 10) {
            if (src[p] == '0') {
                q = p + 1;
                while (q < src.size() && (src[q] == '0' || (src[q] == '_' && q + 1 < src.size() && src[q + 1] == '0'))) q++;
            } else {
                q = int_end;
            }
        }
        const std::string digits_text = strip_underscores(src.substr(base == 10 ? p : p + 2, q - (base == 10 ? p : p + 2)));
        uint64_t          v           = 0;
        for (char c : digits_text) {
            const unsigned d = std::isdigit(static_cast<unsigned char>(c)) ? unsigned(c - '0') : unsigned(std::tolower(c) - 'a' + 10);
            if (v > (uint64_t(INT64_MAX) - d) / uint64_t(base)) {
                ember_throw(EMBER_ERR_UNSUPPORTED, "chat template line %d: integer literal too large", line_at(p));
            }
            v = v * uint64_t(base) + d;
        }
        jinja_token t;
        t.kind = jinja_tok::integer;
        t.text = src.substr(p, q - p);
        t.i    = int64_t(v);
        t.line = line_at(p);
        out.push_back(std::move(t));
        pos = q;
        return true;
    }

    void lex_string(size_t p) {
        const char  quote = src[p];
        size_t      q     = p + 1;
        std::string val;
        for (;;) {
            if (q >= src.size()) fail(p, "unterminated string literal");
            const char c = src[q];
            if (c == quote) break;
            if (c != '\\') {
                val += c;
                q++;
                continue;
            }
            if (q + 1 >= src.size()) fail(p, "unterminated string literal");
            const char e = src[q + 1];
            q += 2;
            // Python's unicode-escape decoding
            auto hex = [&](int n) {
                uint32_t cp = 0;
                for (int k = 0; k < n; k++) {
                    if (q >= src.size() || !std::isxdigit(static_cast<unsigned char>(src[q]))) fail(p, "truncated \\x/\\u escape in string literal");
                    const char h = char(std::tolower(static_cast<unsigned char>(src[q++])));
                    cp           = cp * 16 + uint32_t(h <= '9' ? h - '0' : h - 'a' + 10);
                }
                return cp;
            };
            switch (e) {
                case '\n': break;
                case '\\': val += '\\'; break;
                case '\'': val += '\''; break;
                case '"': val += '"'; break;
                case 'a': val += '\a'; break;
                case 'b': val += '\b'; break;
                case 'f': val += '\f'; break;
                case 'n': val += '\n'; break;
                case 'r': val += '\r'; break;
                case 't': val += '\t'; break;
                case 'v': val += '\v'; break;
                case 'x': jinja_utf8_put(val, hex(2)); break;
                case 'u': jinja_utf8_put(val, hex(4)); break;
                case 'U': {
                    const uint32_t cp = hex(8);
                    if (cp > 0x10FFFF) fail(p, "bad \\U escape in string literal");
                    jinja_utf8_put(val, cp);
                    break;
                }
                case 'N': ember_throw(EMBER_ERR_UNSUPPORTED, "chat template line %d: \\N{...} escapes are not supported", line_at(p));
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t cp = uint32_t(e - '0');
                        for (int k = 0; k < 2 && q < src.size() && src[q] >= '0' && src[q] <= '7'; k++) cp = cp * 8 + uint32_t(src[q++] - '0');
                        jinja_utf8_put(val, cp);
                    } else if (static_cast<unsigned char>(e) >= 0x80) {
                        // jinja2 decodes with .encode("ascii", "backslashreplace").decode("unicode-escape"):
                        // a backslash before a non-ASCII character keeps that character's escape as text
                        size_t         at = q - 1;
                        const uint32_t cp = jinja_utf8_next(src, &at);
                        q                 = at;
                        char buf[16];
                        std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(cp));
                        val += buf;
                    } else {
                        val += '\\';  // unknown escapes stay as written
                        val += e;
                    }
            }
        }
        jinja_token t;
        t.kind = jinja_tok::string;
        t.text = std::move(val);
        t.line = line_at(p);
        out.push_back(std::move(t));
        pos = q + 1;
    }

    // Tokens of one {{ }} or {% %} tag, starting after the opener.
    void lex_tag(bool is_block, size_t open_at) {
        std::vector<char> balance;
        for (;;) {
            if (pos >= src.size()) fail(open_at, is_block ? "unexpected end of template inside a {% %} tag" : "unexpected end of template inside a {{ }} tag");
            if (balance.empty()) {
                size_t end = std::string::npos;
                if (is_block) {
                    end = match_block_end(pos);
                } else if (starts(pos, "-}}")) {
                    end = skip_spaces(pos + 3);
                } else if (starts(pos, "}}")) {
                    end = pos + 2;
                }
                if (end != std::string::npos) {
                    emit(is_block ? jinja_tok::block_end : jinja_tok::var_end, "", pos);
                    pos           = end;
                    line_starting = src[end - 1] == '\n';
                    return;
                }
            }
            const unsigned char c = static_cast<unsigned char>(src[pos]);
            if (const size_t n = space_at(pos)) {
                pos += n;
                continue;
            }
            if (std::isdigit(c) && lex_number(pos)) continue;
            if (std::isalpha(c) || c == '_' || name_cp_len(pos)) {
                size_t q = pos;
                for (;;) {
                    if (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) q++;
                    else if (const size_t n = name_cp_len(q)) q += n;
                    else break;
                }
                emit(jinja_tok::name, src.substr(pos, q - pos), pos);
                pos = q;
                continue;
            }
            if (c == '\'' || c == '"') {
                lex_string(pos);
                continue;
            }
            static const char * const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
            bool                      done   = false;
            for (const char * op : ops2) {
                if (starts(pos, op)) {
                    emit(jinja_tok::op, op, pos);
                    pos += 2;
                    done = true;
                    break;
                }
            }
            if (done) continue;
            if (c && std::strchr("+-/*%~[](){}><=.:|,;", c)) {
                if (c == '(' || c == '[' || c == '{') {
                    balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
                } else if (c == ')' || c == ']' || c == '}') {
                    if (balance.empty()) fail(pos, ember_format("unexpected '%c'", c).c_str());
                    if (balance.back() != char(c)) fail(pos, ember_format("unexpected '%c', expected '%c'", c, balance.back()).c_str());
                    balance.pop_back();
                }
                emit(jinja_tok::op, std::string(1, char(c)), pos);
                pos++;
                continue;
            }
            fail(pos, ember_format("unexpected character '%c' in a tag", c >= 0x20 && c < 0x7F ? char(c) : '?').c_str());
        }
    }

    void run() {
        while (pos < src.size()) {
            size_t tag = pos;
            char   kind = 0;
            for (;;) {
                tag = src.find('{', tag);
                if (tag == std::string::npos || tag + 1 >= src.size()) {
                    tag = std::string::npos;
                    break;
                }
                const char k = src[tag + 1];
                if (k == '{' || k == '%' || k == '#') {
                    kind = k;
                    break;
                }
                tag++;
            }
            if (tag == std::string::npos) {
                emit(jinja_tok::text, src.substr(pos), pos);
                return;
            }
            const char sign = tag + 2 < src.size() && (src[tag + 2] == '-' || src[tag + 2] == '+') ? src[tag + 2] : 0;
            size_t     body = tag + 2 + (sign ? 1 : 0);

            if (kind == '%') {
                char         raw_sign = 0;
                const size_t p        = match_tag_name(tag, "raw", &raw_sign);
                if (p != std::string::npos) {
                    // the raw opener has no trim_blocks suffix: "-%}\s*" or "%}"
                    size_t end = std::string::npos;
                    if (starts(p, "-%}")) end = skip_spaces(p + 3);
                    else if (starts(p, "%}")) end = p + 2;
                    if (end != std::string::npos) {
                        emit_text(pos, tag, sign, false);
                        line_starting = src[end - 1] == '\n';
                        lex_raw(end);
                        continue;
                    }
                }
            }
            emit_text(pos, tag, sign, kind == '{');
            line_starting = false;
            if (kind == '#') {
                lex_comment(body);
                continue;
            }
            emit(kind == '%' ? jinja_tok::block_begin : jinja_tok::var_begin, "", tag);
            pos = body;
            lex_tag(kind == '%', tag);
        }
    }
};

}  // namespace

std::vector<jinja_token> jinja_lex(const std::string & source) {
    lexer lx;
    lx.src.reserve(source.size());
    for (size_t k = 0; k < source.size(); k++) {
        if (source[k] == '\r') {
            if (k + 1 < source.size() && source[k + 1] == '\n') k++;
            lx.src += '\n';
        } else {
            lx.src += source[k];
        }
    }
    if (!lx.src.empty() && lx.src.back() == '\n') lx.src.pop_back();  // keep_trailing_newline=False
    lx.run();
    jinja_token eof;
    eof.line = lx.line_at(lx.src.size());
    lx.out.push_back(eof);
    return std::move(lx.out);
}
