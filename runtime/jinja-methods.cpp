// Python methods of str, dict and list that templates call (message.content.strip(),
// tool.items(), ...), '%' string formatting and str.format.
#include <cctype>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"
#include "runtime/jinja-eval.h"

namespace {

using args_t    = jinja_call_args;
using method_fn = jinja_value (*)(jinja_context & ctx, const jinja_value & self, args_t & a);

const std::string * opt_str(jinja_context & ctx, const jinja_bound_args & b, size_t k, const char * what) {
    if (!b.has(k) || b[k].is_none()) return nullptr;
    if (!b[k].is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s arg must be None or str, not %s", what, b[k].type_name());
    return &b.v[k].s;
}

int64_t opt_int(jinja_context & ctx, const jinja_bound_args & b, size_t k, int64_t def, const char * what) {
    if (!b.has(k) || b[k].is_none()) return def;
    if (b[k].kind != jinja_kind::integer && b[k].kind != jinja_kind::boolean) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'%s' object cannot be interpreted as an integer (%s)", b[k].type_name(), what);
    }
    return b[k].i;
}

jinja_value str_list(std::vector<std::string> parts) {
    jinja_list items;
    items.reserve(parts.size());
    for (auto & p : parts) items.push_back(jinja_value::string(std::move(p)));
    return jinja_value::make_list(std::move(items));
}

//
// str
//
jinja_value s_strip_impl(jinja_context & ctx, const jinja_value & self, args_t & a, bool left, bool right, const char * name) {
    const jinja_bound_args b = jinja_bind(ctx, name, a, {"chars"});
    return jinja_value::string(jinja_strip(self.s, opt_str(ctx, b, 0, name), left, right));
}
jinja_value s_strip(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_strip_impl(ctx, self, a, true, true, "strip"); }
jinja_value s_lstrip(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_strip_impl(ctx, self, a, true, false, "lstrip"); }
jinja_value s_rstrip(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_strip_impl(ctx, self, a, false, true, "rstrip"); }

jinja_value s_split_impl(jinja_context & ctx, const jinja_value & self, args_t & a, bool from_right, const char * name) {
    const jinja_bound_args b   = jinja_bind(ctx, name, a, {"sep", "maxsplit"});
    const std::string *    sep = opt_str(ctx, b, 0, name);
    if (sep && sep->empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "empty separator");
    return str_list(jinja_split(self.s, sep, opt_int(ctx, b, 1, -1, "maxsplit"), from_right));
}
jinja_value s_split(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_split_impl(ctx, self, a, false, "split"); }
jinja_value s_rsplit(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_split_impl(ctx, self, a, true, "rsplit"); }

jinja_value s_splitlines(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "splitlines", a, {"keepends"});
    if (b.has(0) && jinja_truthy(b[0])) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "splitlines(keepends=True) is not supported");
    return str_list(jinja_splitlines(self.s));
}

// Code point range [start, end) given Python-style optional bounds, as byte offsets.
void sub_range(jinja_context & ctx, const std::string & s, const jinja_bound_args & b, size_t k, size_t * lo, size_t * hi) {
    const std::vector<size_t> off = jinja_utf8_offsets(s);
    const int64_t             n   = int64_t(off.size() - 1);
    auto norm = [&](int64_t v) {
        if (v < 0) v += n;
        return std::min<int64_t>(std::max<int64_t>(v, 0), n);
    };
    const int64_t st = norm(opt_int(ctx, b, k, 0, "start"));
    const int64_t en = norm(opt_int(ctx, b, k + 1, n, "end"));
    *lo              = off[size_t(st)];
    *hi              = off[size_t(std::max(st, en))];
}

jinja_value s_starts_ends(jinja_context & ctx, const jinja_value & self, args_t & a, bool ends) {
    const char *           name = ends ? "endswith" : "startswith";
    const jinja_bound_args b    = jinja_bind(ctx, name, a, {"prefix", "start", "end"});
    size_t                 lo = 0, hi = 0;
    sub_range(ctx, self.s, b, 1, &lo, &hi);
    const std::string  part = self.s.substr(lo, hi - lo);
    std::vector<const jinja_value *> cands;
    if (b[0].kind == jinja_kind::tuple) {
        for (const jinja_value & x : *b[0].list) cands.push_back(&x);
    } else {
        cands.push_back(&b[0]);
    }
    for (const jinja_value * c : cands) {
        if (!c->is_string()) {
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s first arg must be str or a tuple of str, not %s", name, c->type_name());
        }
        const std::string & x = c->s;
        if (x.size() > part.size()) continue;
        if (ends ? part.compare(part.size() - x.size(), x.size(), x) == 0 : part.compare(0, x.size(), x) == 0) return jinja_value::boolean(true);
    }
    return jinja_value::boolean(false);
}
jinja_value s_startswith(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_starts_ends(ctx, self, a, false); }
jinja_value s_endswith(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_starts_ends(ctx, self, a, true); }

jinja_value s_replace(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "replace", a, {"old", "new", "count"});
    if (!b[0].is_string() || !b[1].is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "replace() arguments must be str");
    std::string out;
    if (!jinja_replace(self.s, b[0].s, b[1].s, opt_int(ctx, b, 2, -1, "count"), ctx.opt.max_output, out)) {
        jinja_check_size(ctx, ctx.opt.max_output + 1);
    }
    return jinja_value::string(std::move(out));
}

jinja_value s_upper(jinja_context &, const jinja_value & self, args_t &) { return jinja_value::string(jinja_upper(self.s)); }
jinja_value s_lower(jinja_context &, const jinja_value & self, args_t &) { return jinja_value::string(jinja_lower(self.s)); }
jinja_value s_title(jinja_context &, const jinja_value & self, args_t &) { return jinja_value::string(jinja_py_title(self.s)); }
jinja_value s_capitalize(jinja_context &, const jinja_value & self, args_t &) { return jinja_value::string(jinja_capitalize(self.s)); }

jinja_value s_swapcase(jinja_context &, const jinja_value & self, args_t &) {
    std::string out;
    size_t      pos = 0;
    while (pos < self.s.size()) {
        const uint32_t cp = jinja_utf8_next(self.s, &pos);
        if (jinja_is_upper_cp(cp)) jinja_append_lower(out, cp);
        else jinja_append_upper(out, cp);
    }
    return jinja_value::string(std::move(out));
}

jinja_value s_find_impl(jinja_context & ctx, const jinja_value & self, args_t & a, bool reverse, bool strict, const char * name) {
    const jinja_bound_args b = jinja_bind(ctx, name, a, {"sub", "start", "end"});
    if (!b[0].is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "must be str, not %s", b[0].type_name());
    size_t lo = 0, hi = 0;
    sub_range(ctx, self.s, b, 1, &lo, &hi);
    const std::string part = self.s.substr(lo, hi - lo);
    const size_t      hit  = reverse ? part.rfind(b[0].s) : part.find(b[0].s);
    if (hit == std::string::npos) {
        if (strict) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "substring not found");
        return jinja_value::integer(-1);
    }
    return jinja_value::integer(int64_t(jinja_utf8_len(self.s.substr(0, lo + hit))));  // in code points
}
jinja_value s_find(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_find_impl(ctx, self, a, false, false, "find"); }
jinja_value s_rfind(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_find_impl(ctx, self, a, true, false, "rfind"); }
jinja_value s_index(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_find_impl(ctx, self, a, false, true, "index"); }
jinja_value s_rindex(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_find_impl(ctx, self, a, true, true, "rindex"); }

jinja_value s_count(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "count", a, {"sub", "start", "end"});
    if (!b[0].is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "must be str, not %s", b[0].type_name());
    size_t lo = 0, hi = 0;
    sub_range(ctx, self.s, b, 1, &lo, &hi);
    const std::string part = self.s.substr(lo, hi - lo);
    if (b[0].s.empty()) return jinja_value::integer(int64_t(jinja_utf8_len(part)) + 1);
    int64_t n = 0;
    for (size_t p = part.find(b[0].s); p != std::string::npos; p = part.find(b[0].s, p + b[0].s.size())) n++;
    return jinja_value::integer(n);
}

jinja_value s_join(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "join", a, {"iterable"});
    std::string            out;
    size_t                 k = 0;
    const auto seq = jinja_iterate(ctx, b[0]);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        if (!item.is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "sequence item %zu: expected str instance, %s found", k, item.type_name());
        jinja_check_size(ctx, out.size() + self.s.size() + item.s.size());
        if (k++) out += self.s;
        out += item.s;
    }
    return jinja_value::string(std::move(out));
}

jinja_value s_pad_impl(jinja_context & ctx, const jinja_value & self, args_t & a, int align, const char * name) {
    const jinja_bound_args b     = jinja_bind(ctx, name, a, {"width", "fillchar"});
    const int64_t          width = opt_int(ctx, b, 0, 0, "width");
    std::string            fill  = " ";
    if (b.has(1)) {
        if (!b[1].is_string() || jinja_utf8_len(b[1].s) != 1) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "The fill character must be exactly one character long");
        fill = b[1].s;
    }
    const int64_t len = int64_t(jinja_utf8_len(self.s));
    if (width <= len) return self;
    jinja_check_size(ctx, size_t(width) * fill.size());
    const int64_t marg  = width - len;
    const int64_t left  = align < 0 ? 0 : align > 0 ? marg : marg / 2 + (marg & width & 1);
    std::string   out;
    for (int64_t k = 0; k < left; k++) out += fill;
    out += self.s;
    for (int64_t k = 0; k < marg - left; k++) out += fill;
    return jinja_value::string(std::move(out));
}
jinja_value s_center(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_pad_impl(ctx, self, a, 0, "center"); }
jinja_value s_ljust(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_pad_impl(ctx, self, a, -1, "ljust"); }
jinja_value s_rjust(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_pad_impl(ctx, self, a, 1, "rjust"); }

jinja_value s_zfill(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b     = jinja_bind(ctx, "zfill", a, {"width"});
    const int64_t          width = opt_int(ctx, b, 0, 0, "width");
    const int64_t          len   = int64_t(jinja_utf8_len(self.s));
    if (width <= len) return self;
    jinja_check_size(ctx, size_t(width));
    std::string s    = self.s;
    const bool  sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    s.insert(sign ? 1 : 0, std::string(size_t(width - len), '0'));
    return jinja_value::string(std::move(s));
}

template <bool (*pred)(uint32_t)> jinja_value s_is(jinja_context &, const jinja_value & self, args_t &) {
    if (self.s.empty()) return jinja_value::boolean(false);
    size_t pos = 0;
    while (pos < self.s.size()) {
        if (!pred(jinja_utf8_next(self.s, &pos))) return jinja_value::boolean(false);
    }
    return jinja_value::boolean(true);
}
bool cp_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }
bool cp_alpha(uint32_t cp) { return (cp < 0x80 && std::isalpha(int(cp))) || (cp >= 0x80 && !jinja_is_space(cp)); }
bool cp_alnum(uint32_t cp) { return cp_digit(cp) || cp_alpha(cp); }

jinja_value s_islower(jinja_context &, const jinja_value & self, args_t &) {
    bool   cased = false;
    size_t pos   = 0;
    while (pos < self.s.size()) {
        const uint32_t cp = jinja_utf8_next(self.s, &pos);
        if (jinja_is_upper_cp(cp)) return jinja_value::boolean(false);
        cased = cased || jinja_is_lower_cp(cp);
    }
    return jinja_value::boolean(cased);
}

jinja_value s_isupper(jinja_context &, const jinja_value & self, args_t &) {
    bool   cased = false;
    size_t pos   = 0;
    while (pos < self.s.size()) {
        const uint32_t cp = jinja_utf8_next(self.s, &pos);
        if (jinja_is_lower_cp(cp)) return jinja_value::boolean(false);
        cased = cased || jinja_is_upper_cp(cp);
    }
    return jinja_value::boolean(cased);
}

jinja_value s_partition_impl(jinja_context & ctx, const jinja_value & self, args_t & a, bool reverse) {
    const jinja_bound_args b = jinja_bind(ctx, reverse ? "rpartition" : "partition", a, {"sep"});
    if (!b[0].is_string() || b[0].s.empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "partition() needs a non-empty str separator");
    const size_t hit = reverse ? self.s.rfind(b[0].s) : self.s.find(b[0].s);
    jinja_list   parts;
    if (hit == std::string::npos) {
        parts = reverse ? jinja_list{jinja_value::string(""), jinja_value::string(""), self}
                        : jinja_list{self, jinja_value::string(""), jinja_value::string("")};
    } else {
        parts = {jinja_value::string(self.s.substr(0, hit)), b[0], jinja_value::string(self.s.substr(hit + b[0].s.size()))};
    }
    return jinja_value::make_tuple(std::move(parts));
}
jinja_value s_partition(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_partition_impl(ctx, self, a, false); }
jinja_value s_rpartition(jinja_context & ctx, const jinja_value & self, args_t & a) { return s_partition_impl(ctx, self, a, true); }

jinja_value s_removeprefix(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "removeprefix", a, {"prefix"});
    const std::string      p = jinja_str(b[0]);
    return self.s.compare(0, p.size(), p) == 0 ? jinja_value::string(self.s.substr(p.size())) : self;
}

jinja_value s_removesuffix(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "removesuffix", a, {"suffix"});
    const std::string      p = jinja_str(b[0]);
    if (!p.empty() && self.s.size() >= p.size() && self.s.compare(self.s.size() - p.size(), p.size(), p) == 0) {
        return jinja_value::string(self.s.substr(0, self.s.size() - p.size()));
    }
    return self;
}

std::string apply_format_spec(jinja_context & ctx, const jinja_value & v, const std::string & spec);

jinja_value s_format(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const std::string & f = self.s;
    std::string         out;
    size_t              auto_idx = 0;
    for (size_t k = 0; k < f.size(); k++) {
        const char c = f[k];
        if (c == '}') {
            if (k + 1 < f.size() && f[k + 1] == '}') k++;
            else jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (k + 1 < f.size() && f[k + 1] == '{') {
            out += '{';
            k++;
            continue;
        }
        const size_t close = f.find('}', k);
        if (close == std::string::npos) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Single '{' encountered in format string");
        std::string field = f.substr(k + 1, close - k - 1);
        k                 = close;
        std::string spec, conv;
        if (const size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (const size_t bang = field.find('!'); bang != std::string::npos) {
            conv = field.substr(bang + 1);
            field.resize(bang);
        }
        // first part: index or name, then .attr / [key] accessors
        size_t      p    = 0;
        while (p < field.size() && field[p] != '.' && field[p] != '[') p++;
        const std::string head = field.substr(0, p);
        jinja_value       v;
        if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
            const size_t idx = head.empty() ? auto_idx++ : size_t(std::strtoull(head.c_str(), nullptr, 10));
            if (idx >= a.pos.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Replacement index %zu out of range for positional args tuple", idx);
            v = a.pos[idx];
        } else {
            bool found = false;
            for (const auto & kw : a.kw) {
                if (kw.first == head) {
                    v     = kw.second;
                    found = true;
                }
            }
            if (!found) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "KeyError: '%s'", head.c_str());
        }
        while (p < field.size()) {
            if (field[p] == '.') {
                size_t q = p + 1;
                while (q < field.size() && field[q] != '.' && field[q] != '[') q++;
                v = jinja_getattr(ctx, v, field.substr(p + 1, q - p - 1));
                p = q;
            } else {
                const size_t q = field.find(']', p);
                if (q == std::string::npos) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Missing ']' in format string");
                const std::string key = field.substr(p + 1, q - p - 1);
                const bool num = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
                v = jinja_getitem(ctx, v, num ? jinja_value::integer(std::strtoll(key.c_str(), nullptr, 10)) : jinja_value::string(key));
                p = q + 1;
            }
        }
        if (conv == "r" || conv == "a") v = jinja_value::string(jinja_repr(v));
        else if (conv == "s") v = jinja_value::string(jinja_str(v));
        else if (!conv.empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Unknown conversion specifier %s", conv.c_str());
        out += apply_format_spec(ctx, v, spec);
        jinja_check_size(ctx, out.size());
    }
    return jinja_value::string(std::move(out));
}

// A subset of Python's format-spec mini-language: [[fill]align][sign][0][width][,][.precision][type].
std::string apply_format_spec(jinja_context & ctx, const jinja_value & v, const std::string & spec) {
    if (spec.empty()) return jinja_str(v);
    const std::vector<uint32_t> cps = jinja_utf8_decode(spec);
    size_t                      k   = 0;
    uint32_t                    fill = ' ';
    char                        align = 0;
    auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (cps.size() >= 2 && is_align(cps[1])) {
        fill  = cps[0];
        align = char(cps[1]);
        k     = 2;
    } else if (!cps.empty() && is_align(cps[0])) {
        align = char(cps[0]);
        k     = 1;
    }
    char sign = '-';
    if (k < cps.size() && (cps[k] == '+' || cps[k] == '-' || cps[k] == ' ')) sign = char(cps[k++]);
    if (k < cps.size() && cps[k] == '0') {
        if (!align) {
            fill  = '0';
            align = '=';
        }
        k++;
    }
    int64_t width = 0, precision = -1;
    while (k < cps.size() && cps[k] >= '0' && cps[k] <= '9') width = width * 10 + int64_t(cps[k++] - '0');
    char group = 0;
    if (k < cps.size() && (cps[k] == ',' || cps[k] == '_')) group = char(cps[k++]);
    if (k < cps.size() && cps[k] == '.') {
        k++;
        precision = 0;
        while (k < cps.size() && cps[k] >= '0' && cps[k] <= '9') precision = precision * 10 + int64_t(cps[k++] - '0');
    }
    char type = 0;
    if (k < cps.size()) type = char(cps[k++]);
    if (k != cps.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Invalid format specifier '%s'", spec.c_str());
    jinja_check_size(ctx, size_t(width));

    std::string body;
    bool        numeric = false;
    if (v.is_string() && (type == 0 || type == 's')) {
        body = v.s;
        if (precision >= 0) {
            const std::vector<size_t> off = jinja_utf8_offsets(body);
            if (size_t(precision) < off.size() - 1) body.resize(off[size_t(precision)]);
        }
        if (!align) align = '<';
    } else if (v.is_number() && v.kind != jinja_kind::floating && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
        numeric           = true;
        const int64_t   i = v.i;
        const uint64_t  m = i < 0 ? 0 - uint64_t(i) : uint64_t(i);
        char            buf[80];
        if (type == 'b') {
            std::string bits;
            for (uint64_t x = m; x; x >>= 1) bits.insert(bits.begin(), char('0' + (x & 1)));
            body = bits.empty() ? "0" : bits;
        } else {
            std::snprintf(buf, sizeof(buf), type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu", (unsigned long long) m);
            body = buf;
        }
        if (i < 0) body = "-" + body;
        else if (sign != '-') body = std::string(1, sign) + body;
    } else if (v.is_number() && (type == 0 || type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' || type == '%')) {
        numeric   = true;
        double  x = v.as_double();
        char    buf[512];
        if (type == 0 && precision < 0) {
            body = v.kind == jinja_kind::floating ? jinja_str(v) : std::to_string(v.i);
        } else {
            const int p = int(std::min<int64_t>(precision < 0 ? 6 : precision, 300));
            if (type == '%') x *= 100.0;
            const char t = type == 0 ? 'g' : type == '%' ? 'f' : type;
            char       f[16];
            std::snprintf(f, sizeof(f), "%%.%d%c", p, t);
            std::snprintf(buf, sizeof(buf), f, x);
            body = buf;
            if (type == '%') body += '%';
        }
        if (sign != '-' && !body.empty() && body[0] != '-') body = std::string(1, sign) + body;
    } else {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Unknown format code '%c' for object of type '%s'", type ? type : '?', v.type_name());
    }
    if (group && numeric) {
        // thousands separators in the integer digits
        size_t b0 = 0;
        while (b0 < body.size() && !std::isdigit(static_cast<unsigned char>(body[b0]))) b0++;
        size_t e0 = b0;
        while (e0 < body.size() && std::isdigit(static_cast<unsigned char>(body[e0]))) e0++;
        for (size_t at = e0; at > b0 + 3; at -= 3) body.insert(at - 3, 1, group);
    }
    if (!align) align = numeric ? '>' : '<';
    const int64_t len = int64_t(jinja_utf8_len(body));
    if (width <= len) return body;
    std::string fills;
    for (int64_t n = 0; n < width - len; n++) jinja_utf8_put(fills, fill);
    const size_t n_fill = size_t(width - len);
    auto         take   = [&](size_t count) {
        std::string r;
        for (size_t n = 0; n < count; n++) jinja_utf8_put(r, fill);
        return r;
    };
    switch (align) {
        case '<': return body + fills;
        case '>': return fills + body;
        case '^': return take(n_fill / 2) + body + take(n_fill - n_fill / 2);
        default: {  // '=': padding after the sign
            const size_t s = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
            return body.substr(0, s) + fills + body.substr(s);
        }
    }
}

//
// dict
//
jinja_value d_get(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "get", a, {"key", "default"});
    if (const jinja_value * v = self.dict->find(b[0])) return *v;
    return b.has(1) ? b[1] : jinja_value::none();
}

jinja_value d_items(jinja_context & ctx, const jinja_value & self, args_t & a) {
    jinja_bind(ctx, "items", a, {});
    jinja_list out;
    for (const auto & kv : self.dict->items) out.push_back(jinja_value::make_tuple({kv.first, kv.second}));
    return jinja_value::make_list(std::move(out));
}

jinja_value d_keys(jinja_context & ctx, const jinja_value & self, args_t & a) {
    jinja_bind(ctx, "keys", a, {});
    jinja_list out;
    for (const auto & kv : self.dict->items) out.push_back(kv.first);
    return jinja_value::make_list(std::move(out));
}

jinja_value d_values(jinja_context & ctx, const jinja_value & self, args_t & a) {
    jinja_bind(ctx, "values", a, {});
    jinja_list out;
    for (const auto & kv : self.dict->items) out.push_back(kv.second);
    return jinja_value::make_list(std::move(out));
}

jinja_value d_copy(jinja_context & ctx, const jinja_value & self, args_t & a) {
    jinja_bind(ctx, "copy", a, {});
    jinja_value d = jinja_value::make_dict();
    *d.dict       = *self.dict;
    return d;
}

//
// list / tuple
//
jinja_value l_count(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "count", a, {"value"});
    int64_t                n = 0;
    for (const jinja_value & x : *self.list) n += jinja_equal(x, b[0]) ? 1 : 0;
    return jinja_value::integer(n);
}

jinja_value l_index(jinja_context & ctx, const jinja_value & self, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "index", a, {"value"});
    for (size_t k = 0; k < self.list->size(); k++) {
        if (jinja_equal((*self.list)[k], b[0])) return jinja_value::integer(int64_t(k));
    }
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s is not in list", jinja_repr(b[0]).c_str());
}

jinja_value l_copy(jinja_context & ctx, const jinja_value & self, args_t & a) {
    jinja_bind(ctx, "copy", a, {});
    return jinja_value::make_list(*self.list);
}

struct method_entry {
    const char * name;
    method_fn    fn;
};

const method_entry k_str_methods[] = {
    {"capitalize", s_capitalize}, {"casefold", s_lower},       {"center", s_center},       {"count", s_count},
    {"endswith", s_endswith},     {"find", s_find},            {"format", s_format},       {"index", s_index},
    {"isalnum", s_is<cp_alnum>},  {"isalpha", s_is<cp_alpha>}, {"isdecimal", s_is<cp_digit>}, {"isdigit", s_is<cp_digit>},
    {"islower", s_islower},       {"isnumeric", s_is<cp_digit>}, {"isspace", s_is<jinja_is_space>}, {"isupper", s_isupper},
    {"join", s_join},             {"ljust", s_ljust},          {"lower", s_lower},         {"lstrip", s_lstrip},
    {"partition", s_partition},   {"removeprefix", s_removeprefix}, {"removesuffix", s_removesuffix}, {"replace", s_replace},
    {"rfind", s_rfind},           {"rindex", s_rindex},        {"rjust", s_rjust},         {"rpartition", s_rpartition},
    {"rsplit", s_rsplit},         {"rstrip", s_rstrip},        {"split", s_split},         {"splitlines", s_splitlines},
    {"startswith", s_startswith}, {"strip", s_strip},          {"swapcase", s_swapcase},   {"title", s_title},
    {"upper", s_upper},           {"zfill", s_zfill},
};

const method_entry k_dict_methods[] = {
    {"copy", d_copy}, {"get", d_get}, {"items", d_items}, {"keys", d_keys}, {"values", d_values},
};

const method_entry k_list_methods[] = {
    {"copy", l_copy}, {"count", l_count}, {"index", l_index},
};

template <size_t N> const method_entry * find_entry(const method_entry (&table)[N], const std::string & name) {
    for (const method_entry & e : table) {
        if (name == e.name) return &e;
    }
    return nullptr;
}

}  // namespace

bool jinja_find_method(jinja_context &, const jinja_value & obj, const std::string & name, jinja_value & out) {
    const method_entry * e = nullptr;
    if (obj.is_string()) e = find_entry(k_str_methods, name);
    else if (obj.is_dict()) e = find_entry(k_dict_methods, name);
    else if (obj.kind == jinja_kind::list) e = find_entry(k_list_methods, name);
    else if (obj.kind == jinja_kind::tuple && name != "copy") e = find_entry(k_list_methods, name);
    if (!e) return false;
    const method_fn fn   = e->fn;
    const jinja_value self = obj;
    out = jinja_value::function(name, [fn, self](jinja_context & c, jinja_call_args & a) { return fn(c, self, a); }, {self});
    return true;
}

//
// '%' formatting
//
std::string jinja_percent_format(jinja_context & ctx, const std::string & fmt, const jinja_value & args) {
    std::vector<jinja_value> pos;
    const jinja_value *      mapping = nullptr;
    if (args.kind == jinja_kind::tuple) pos = *args.list;
    else pos.push_back(args);
    if (args.is_dict()) mapping = &args;  // '%(key)s' looks keys up; a plain '%s' prints the dict
    size_t      next = 0;
    std::string out;
    auto take = [&]() -> const jinja_value & {
        if (next >= pos.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "not enough arguments for format string");
        return pos[next++];
    };
    for (size_t k = 0; k < fmt.size(); k++) {
        if (fmt[k] != '%') {
            out += fmt[k];
            continue;
        }
        if (++k >= fmt.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "incomplete format");
        const jinja_value * arg = nullptr;
        if (fmt[k] == '(') {
            const size_t close = fmt.find(')', k);
            if (close == std::string::npos) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "incomplete format key");
            if (!mapping) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "format requires a mapping");
            const jinja_value * v = mapping->dict->find(fmt.substr(k + 1, close - k - 1));
            if (!v) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "KeyError: '%s'", fmt.substr(k + 1, close - k - 1).c_str());
            arg = v;
            k   = close + 1;
        }
        std::string flags;
        while (k < fmt.size() && std::strchr("-+ #0", fmt[k])) flags += fmt[k++];
        int64_t width = -1, precision = -1;
        if (k < fmt.size() && fmt[k] == '*') {
            const jinja_value & w = take();
            width                 = w.i;
            k++;
        } else {
            while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) width = std::max<int64_t>(width, 0) * 10 + (fmt[k++] - '0');
        }
        if (k < fmt.size() && fmt[k] == '.') {
            k++;
            precision = 0;
            while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) precision = precision * 10 + (fmt[k++] - '0');
        }
        while (k < fmt.size() && std::strchr("hlL", fmt[k])) k++;
        if (k >= fmt.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "incomplete format");
        const char conv = fmt[k];
        if (conv == '%') {
            out += '%';
            continue;
        }
        const jinja_value & v = arg ? *arg : take();
        if (width > int64_t(ctx.opt.max_output)) jinja_check_size(ctx, size_t(width));
        std::string piece;
        const bool  left = flags.find('-') != std::string::npos;
        if (conv == 's' || conv == 'r' || conv == 'a') {
            piece = conv == 's' ? jinja_str(v) : jinja_repr(v);
            if (precision >= 0) {
                const std::vector<size_t> off = jinja_utf8_offsets(piece);
                if (size_t(precision) < off.size() - 1) piece.resize(off[size_t(precision)]);
            }
            const int64_t len = int64_t(jinja_utf8_len(piece));
            if (width > len) piece = left ? piece + std::string(size_t(width - len), ' ') : std::string(size_t(width - len), ' ') + piece;
        } else if (std::strchr("diuoxXeEfFgGc", conv)) {
            if (v.is_undefined()) jinja_fail_undefined(ctx, v);
            char spec[48], buf[600];
            std::string f = "%" + flags;
            if (width >= 0) f += std::to_string(width);
            if (precision >= 0) f += "." + std::to_string(std::min<int64_t>(precision, 300));
            if (conv == 'c') {
                if (v.is_string() && jinja_utf8_len(v.s) == 1) piece = v.s;
                else if (v.kind == jinja_kind::integer) jinja_utf8_put(piece, uint32_t(v.i));
                else jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%%c requires int or char");
            } else if (std::strchr("diuoxX", conv)) {
                if (!v.is_number()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%%%c format: a real number is required, not %s", conv, v.type_name());
                if (v.kind == jinja_kind::floating && std::strchr("oxX", conv)) {
                    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%%%c format: an integer is required, not float", conv);
                }
                const long long i = v.kind == jinja_kind::floating ? (long long) std::trunc(v.f) : (long long) v.i;
                std::snprintf(spec, sizeof(spec), "%sll%c", f.c_str(), conv == 'u' || conv == 'i' ? 'd' : conv);
                std::snprintf(buf, sizeof(buf), spec, i);
                piece = buf;
            } else {
                if (!v.is_number()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "must be real number, not %s", v.type_name());
                std::snprintf(spec, sizeof(spec), "%s%c", f.c_str(), conv);
                std::snprintf(buf, sizeof(buf), spec, v.as_double());
                piece = buf;
            }
        } else {
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "unsupported format character '%c'", conv);
        }
        out += piece;
        jinja_check_size(ctx, out.size());
    }
    if (!mapping && next < pos.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "not all arguments converted during string formatting");
    return out;
}
