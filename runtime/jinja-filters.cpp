// jinja2's builtin filters (jinja2/filters.py) that chat templates use, plus transformers'
// tojson. Generators in jinja2 (map, select, reverse, ...) return lists here.
#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"
#include "runtime/jinja-eval.h"
#include "runtime/json.h"

namespace {

using args_t = jinja_call_args;

int64_t int_arg(jinja_context & ctx, const jinja_value & v, const char * what) {
    if (v.kind == jinja_kind::integer || v.kind == jinja_kind::boolean) return v.i;
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s must be an integer, not %s", what, v.type_name());
}

std::string str_arg(jinja_context & ctx, const jinja_value & v, const char * what) {
    if (v.is_string()) return v.s;
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s must be a string, not %s", what, v.type_name());
}

jinja_value list_value(jinja_list items) { return jinja_value::make_list(std::move(items)); }

// make_attrgetter: "a.b.0" looks up a, then b, then item 0 (digits become integers).
jinja_value get_attr_path(jinja_context & ctx, jinja_value item, const jinja_value & path, const jinja_value * def) {
    std::vector<jinja_value> parts;
    if (path.is_string()) {
        size_t start = 0;
        for (;;) {
            const size_t dot  = path.s.find('.', start);
            std::string  part = path.s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            const bool   num  = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
            parts.push_back(num ? jinja_value::integer(std::strtoll(part.c_str(), nullptr, 10)) : jinja_value::string(part));
            if (dot == std::string::npos) break;
            start = dot + 1;
        }
    } else {
        parts.push_back(path);
    }
    for (const jinja_value & p : parts) {
        item = jinja_getitem(ctx, item, p);
        if (def && !def->is_none() && item.is_undefined()) item = *def;
    }
    return item;
}

// Sort key of jinja2's ignore_case: strings compare lower-cased.
jinja_value case_key(const jinja_value & v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return jinja_value::string(jinja_lower(v.s));
    return v;
}

void sort_values(jinja_context & ctx, std::vector<std::pair<jinja_value, jinja_value>> & keyed, bool reverse) {
    jinja_step(ctx, keyed.size());
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto & a, const auto & b) {
        return reverse ? jinja_compare(ctx, b.first, a.first) < 0 : jinja_compare(ctx, a.first, b.first) < 0;
    });
}

//
// Filters
//
jinja_value f_abs(jinja_context & ctx, jinja_value & v, args_t &) {
    if (v.kind == jinja_kind::floating) return jinja_value::floating(std::fabs(v.f));
    if (v.kind == jinja_kind::integer || v.kind == jinja_kind::boolean) {
        if (v.i == INT64_MIN) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "integer overflow");
        return jinja_value::integer(v.i < 0 ? -v.i : v.i);
    }
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "bad operand type for abs(): '%s'", v.type_name());
}

jinja_value f_attr(jinja_context & ctx, jinja_value & v, args_t & a) {
    // Python getattr(): a dict's keys are not its attributes
    const jinja_bound_args b    = jinja_bind(ctx, "attr", a, {"name"});
    const std::string      name = str_arg(ctx, b[0], "attr name");
    if (v.is_dict()) {
        jinja_value m = jinja_getattr(ctx, v, name);
        if (m.kind == jinja_kind::callable || m.is_undefined()) return m;
        return jinja_value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return jinja_getattr(ctx, v, name);
}

jinja_value f_batch(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "batch", a, {"linecount", "fill_with"});
    const int64_t          n = int_arg(ctx, b[0], "batch linecount");
    if (n <= 0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "batch linecount must be positive");
    jinja_list out, tmp;
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        if (int64_t(tmp.size()) == n) {
            out.push_back(list_value(std::move(tmp)));
            tmp.clear();
        }
        tmp.push_back(item);
    }
    if (!tmp.empty()) {
        if (b.has(1) && !b[1].is_none()) {
            while (int64_t(tmp.size()) < n) tmp.push_back(b[1]);
        }
        out.push_back(list_value(std::move(tmp)));
    }
    return list_value(std::move(out));
}

jinja_value f_capitalize(jinja_context &, jinja_value & v, args_t &) { return jinja_value::string(jinja_capitalize(jinja_str(v))); }

jinja_value f_center(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b     = jinja_bind(ctx, "center", a, {"width"});
    const int64_t          width = b.has(0) ? int_arg(ctx, b[0], "center width") : 80;
    jinja_check_size(ctx, size_t(std::max<int64_t>(width, 0)));
    std::string   s   = jinja_str(v);
    const int64_t len = int64_t(jinja_utf8_len(s));
    if (width <= len) return jinja_value::string(s);
    // Python's str.center: the extra space goes left when the padding is odd and width is odd
    const int64_t marg = width - len;
    const int64_t left = marg / 2 + (marg & width & 1);
    return jinja_value::string(std::string(size_t(left), ' ') + s + std::string(size_t(marg - left), ' '));
}

jinja_value f_default(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b       = jinja_bind(ctx, "default", a, {"default_value", "boolean"});
    const bool             boolean = b.has(1) && jinja_truthy(b[1]);
    if (v.is_undefined() || (boolean && !jinja_truthy(v))) return b.has(0) ? b[0] : jinja_value::string("");
    return v;
}

jinja_value f_dictsort(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "dictsort", a, {"case_sensitive", "by", "reverse"});
    if (v.is_undefined()) jinja_fail_undefined(ctx, v);
    if (!v.is_dict()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "dictsort needs a mapping, not %s", v.type_name());
    const bool  cs      = b.has(0) && jinja_truthy(b[0]);
    const bool  by_val  = b.has(1) && b[1].is_string() && b[1].s == "value";
    if (b.has(1) && !(b[1].is_string() && (b[1].s == "key" || b[1].s == "value"))) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "You can only sort by either \"key\" or \"value\"");
    }
    std::vector<std::pair<jinja_value, jinja_value>> keyed;
    for (const auto & kv : v.dict->items) {
        keyed.emplace_back(case_key(by_val ? kv.second : kv.first, cs), jinja_value::make_tuple({kv.first, kv.second}));
    }
    sort_values(ctx, keyed, b.has(2) && jinja_truthy(b[2]));
    jinja_list out;
    for (auto & k : keyed) out.push_back(std::move(k.second));
    return list_value(std::move(out));
}

jinja_value f_escape(jinja_context &, jinja_value & v, args_t &) {
    const std::string s = jinja_str(v);
    std::string       out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return jinja_value::string(std::move(out));
}

jinja_value f_first(jinja_context & ctx, jinja_value & v, args_t &) {
    auto items = jinja_iterate(ctx, v);
    if (items->empty()) return jinja_value::undefined("No first item, sequence was empty.");
    return items->front();
}

jinja_value f_last(jinja_context & ctx, jinja_value & v, args_t &) {
    auto items = jinja_iterate(ctx, v);
    if (items->empty()) return jinja_value::undefined("No last item, sequence was empty.");
    return items->back();
}

// Python float() of a string; false when it is not a float literal.
bool parse_py_float(const std::string & text, double * out) {
    std::string s = jinja_strip(text, nullptr, true, true);
    std::string t;
    for (size_t k = 0; k < s.size(); k++) {
        if (s[k] == '_') {
            if (k == 0 || k + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) ||
                !std::isdigit(static_cast<unsigned char>(s[k + 1]))) {
                return false;
            }
            continue;
        }
        t += s[k];
    }
    if (t.empty()) return false;
    const std::string low  = jinja_lower(t);
    const size_t      sign = (low[0] == '+' || low[0] == '-') ? 1 : 0;
    const std::string body = low.substr(sign);
    if (body == "inf" || body == "infinity" || body == "nan") {
        const double v = body == "nan" ? std::nan("") : HUGE_VAL;
        *out           = low[0] == '-' ? -v : v;
        return true;
    }
    size_t k = sign, digits = 0;
    while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) k++, digits++;
    if (k < t.size() && t[k] == '.') {
        k++;
        while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) k++, digits++;
    }
    if (digits == 0) return false;
    if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
        k++;
        if (k < t.size() && (t[k] == '+' || t[k] == '-')) k++;
        const size_t e0 = k;
        while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) k++;
        if (k == e0) return false;
    }
    if (k != t.size()) return false;
    *out = std::strtod(t.c_str(), nullptr);
    return true;
}

// Python int(str, base); false when it does not parse.
bool parse_py_int(const std::string & text, int64_t base, int64_t * out) {
    std::string s = jinja_strip(text, nullptr, true, true);
    bool        neg = false;
    size_t      k   = 0;
    if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
    if (k + 1 < s.size() && s[k] == '0') {
        const char p = char(std::tolower(static_cast<unsigned char>(s[k + 1])));
        const int  pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            k += 2;
            if (k < s.size() && s[k] == '_') k++;
        }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || k >= s.size()) return false;
    uint64_t v       = 0;
    bool     any     = false;
    bool     prev_us = false;
    for (; k < s.size(); k++) {
        const char c = s[k];
        if (c == '_') {
            if (!any || prev_us) return false;
            prev_us = true;
            continue;
        }
        int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > (uint64_t(INT64_MAX) - uint64_t(d)) / uint64_t(base)) return false;
        v       = v * uint64_t(base) + uint64_t(d);
        any     = true;
        prev_us = false;
    }
    if (!any || prev_us) return false;
    *out = neg ? -int64_t(v) : int64_t(v);
    return true;
}

jinja_value f_float(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b   = jinja_bind(ctx, "float", a, {"default"});
    const jinja_value      def = b.has(0) ? b[0] : jinja_value::floating(0.0);
    if (v.is_undefined()) jinja_fail_undefined(ctx, v);
    if (v.is_number()) return jinja_value::floating(v.as_double());
    double d = 0;
    if (v.is_string() && parse_py_float(v.s, &d)) return jinja_value::floating(d);
    return def;
}

jinja_value f_format(jinja_context & ctx, jinja_value & v, args_t & a) {
    if (!a.pos.empty() && !a.kw.empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "can't handle positional and keyword arguments at the same time");
    if (!a.kw.empty()) {
        jinja_value d = jinja_value::make_dict();
        for (auto & kw : a.kw) d.dict->set(kw.first, kw.second);
        return jinja_value::string(jinja_percent_format(ctx, jinja_str(v), d));
    }
    return jinja_value::string(jinja_percent_format(ctx, jinja_str(v), jinja_value::make_tuple(a.pos)));
}

jinja_value f_indent(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "indent", a, {"width", "first", "blank"});
    if (v.is_undefined()) jinja_fail_undefined(ctx, v);
    if (!v.is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "unsupported operand type(s) for +=: '%s' and 'str'", v.type_name());
    std::string ind = "    ";
    if (b.has(0)) {
        if (b[0].is_string()) {
            ind = b[0].s;
        } else {
            const int64_t w = int_arg(ctx, b[0], "indent width");
            jinja_check_size(ctx, size_t(std::max<int64_t>(w, 0)));
            ind = std::string(size_t(std::max<int64_t>(w, 0)), ' ');
        }
    }
    const bool                     first = b.has(1) && jinja_truthy(b[1]);
    const bool                     blank = b.has(2) && jinja_truthy(b[2]);
    const std::vector<std::string> lines = jinja_splitlines(v.s + "\n");
    jinja_check_size(ctx, v.s.size() + lines.size() * (ind.size() + 1));
    std::string rv;
    for (size_t k = 0; k < lines.size(); k++) {
        if (k) {
            rv += '\n';
            if (blank || !lines[k].empty()) rv += ind;
        }
        rv += lines[k];
    }
    if (first) rv = ind + rv;
    return jinja_value::string(std::move(rv));
}

jinja_value f_int(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b    = jinja_bind(ctx, "int", a, {"default", "base"});
    const jinja_value      def  = b.has(0) ? b[0] : jinja_value::integer(0);
    const int64_t          base = b.has(1) ? int_arg(ctx, b[1], "int base") : 10;
    if (v.is_undefined()) jinja_fail_undefined(ctx, v);
    if (v.kind == jinja_kind::integer || v.kind == jinja_kind::boolean) return jinja_value::integer(v.i);
    double d = 0;
    if (v.kind == jinja_kind::floating) {
        d = v.f;
    } else if (v.is_string()) {
        int64_t i = 0;
        if (parse_py_int(v.s, base, &i)) return jinja_value::integer(i);
        if (!parse_py_float(v.s, &d)) return def;
    } else {
        return def;
    }
    if (std::isnan(d) || std::isinf(d)) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "cannot convert float %s to integer", jinja_str(jinja_value::floating(d)).c_str());
    if (std::fabs(d) >= 9.2e18) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "integer overflow");
    return jinja_value::integer(int64_t(std::trunc(d)));
}

jinja_value f_items(jinja_context & ctx, jinja_value & v, args_t &) {
    if (v.is_undefined()) return list_value({});
    if (!v.is_dict()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Can only get item pairs from a mapping.");
    jinja_list out;
    for (const auto & kv : v.dict->items) out.push_back(jinja_value::make_tuple({kv.first, kv.second}));
    return list_value(std::move(out));
}

jinja_value f_join(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b   = jinja_bind(ctx, "join", a, {"d", "attribute"});
    const std::string      sep = b.has(0) ? jinja_str(b[0]) : "";
    std::string            out;
    bool                   first = true;
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        const std::string s = jinja_str(b.has(1) && !b[1].is_none() ? get_attr_path(ctx, item, b[1], nullptr) : item);
        jinja_check_size(ctx, out.size() + sep.size() + s.size());
        if (!first) out += sep;
        out += s;
        first = false;
    }
    return jinja_value::string(std::move(out));
}

jinja_value f_length(jinja_context & ctx, jinja_value & v, args_t &) { return jinja_value::integer(jinja_length(ctx, v)); }

jinja_value f_list(jinja_context & ctx, jinja_value & v, args_t &) { return list_value(*jinja_iterate(ctx, v)); }

jinja_value f_lower(jinja_context &, jinja_value & v, args_t &) { return jinja_value::string(jinja_lower(jinja_str(v))); }
jinja_value f_upper(jinja_context &, jinja_value & v, args_t &) { return jinja_value::string(jinja_upper(jinja_str(v))); }

jinja_value f_map(jinja_context & ctx, jinja_value & v, args_t & a) {
    jinja_list out;
    if (!jinja_truthy(v)) return list_value({});
    const auto items = jinja_iterate(ctx, v);
    if (a.pos.empty()) {
        const jinja_value * attr = nullptr;
        const jinja_value * def  = nullptr;
        for (const auto & kw : a.kw) {
            if (kw.first == "attribute") attr = &kw.second;
            else if (kw.first == "default") def = &kw.second;
            else jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Unexpected keyword argument '%s'", kw.first.c_str());
        }
        if (!attr) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "map needs a filter name or attribute=");
        for (const jinja_value & item : *items) {
            jinja_step(ctx);
            out.push_back(get_attr_path(ctx, item, *attr, def));
        }
        return list_value(std::move(out));
    }
    const std::string     name = str_arg(ctx, a.pos[0], "map filter name");
    const jinja_filter_fn fn   = jinja_find_filter(name);
    if (!fn) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "unknown filter '%s'", name.c_str());
    for (const jinja_value & item : *items) {
        jinja_step(ctx);
        jinja_call_args fa;
        fa.pos.assign(a.pos.begin() + 1, a.pos.end());
        fa.kw        = a.kw;
        jinja_value x = item;
        out.push_back(fn(ctx, x, fa));
    }
    return list_value(std::move(out));
}

jinja_value min_max(jinja_context & ctx, jinja_value & v, args_t & a, bool want_max) {
    const jinja_bound_args b  = jinja_bind(ctx, want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
    const bool             cs = b.has(0) && jinja_truthy(b[0]);
    const auto             items = jinja_iterate(ctx, v);
    if (items->empty()) return jinja_value::undefined("No aggregated item, sequence was empty.");
    size_t      best = 0;
    jinja_value best_key;
    for (size_t k = 0; k < items->size(); k++) {
        jinja_value key = case_key(b.has(1) && !b[1].is_none() ? get_attr_path(ctx, (*items)[k], b[1], nullptr) : (*items)[k], cs);
        if (k == 0 || (want_max ? jinja_compare(ctx, key, best_key) > 0 : jinja_compare(ctx, key, best_key) < 0)) {
            best     = k;
            best_key = std::move(key);
        }
    }
    return (*items)[best];
}

jinja_value f_max(jinja_context & ctx, jinja_value & v, args_t & a) { return min_max(ctx, v, a, true); }
jinja_value f_min(jinja_context & ctx, jinja_value & v, args_t & a) { return min_max(ctx, v, a, false); }

// select / reject / selectattr / rejectattr
jinja_value select_or_reject(jinja_context & ctx, jinja_value & v, args_t & a, bool keep, bool by_attr) {
    if (!jinja_truthy(v)) return list_value({});
    size_t off = 0;
    if (by_attr) {
        if (a.pos.empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Missing parameter for attribute name");
        off = 1;
    }
    jinja_test_fn test = nullptr;
    jinja_call_args targs;
    if (a.pos.size() > off) {
        const std::string name = str_arg(ctx, a.pos[off], "test name");
        test                   = jinja_find_test(name);
        if (!test) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "unknown test '%s'", name.c_str());
        targs.pos.assign(a.pos.begin() + long(off) + 1, a.pos.end());
        targs.kw = a.kw;
    }
    jinja_list out;
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        jinja_step(ctx);
        const jinja_value x  = by_attr ? get_attr_path(ctx, item, a.pos[0], nullptr) : item;
        const bool        ok = test ? test(ctx, x, targs) : jinja_truthy(x);
        if (ok == keep) out.push_back(item);
    }
    return list_value(std::move(out));
}

jinja_value f_select(jinja_context & ctx, jinja_value & v, args_t & a) { return select_or_reject(ctx, v, a, true, false); }
jinja_value f_reject(jinja_context & ctx, jinja_value & v, args_t & a) { return select_or_reject(ctx, v, a, false, false); }
jinja_value f_selectattr(jinja_context & ctx, jinja_value & v, args_t & a) { return select_or_reject(ctx, v, a, true, true); }
jinja_value f_rejectattr(jinja_context & ctx, jinja_value & v, args_t & a) { return select_or_reject(ctx, v, a, false, true); }

jinja_value f_replace(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "replace", a, {"old", "new", "count"});
    if (!b.has(0) || !b.has(1)) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "replace() needs old and new");
    const int64_t count = b.has(2) && !b[2].is_none() ? int_arg(ctx, b[2], "replace count") : -1;
    std::string   out;
    if (!jinja_replace(jinja_str(v), jinja_str(b[0]), jinja_str(b[1]), count, ctx.opt.max_output, out)) {
        jinja_check_size(ctx, ctx.opt.max_output + 1);
    }
    return jinja_value::string(std::move(out));
}

jinja_value f_reverse(jinja_context & ctx, jinja_value & v, args_t &) {
    if (v.is_string()) {
        std::vector<uint32_t> cps = jinja_utf8_decode(v.s);
        std::string           out;
        for (size_t k = cps.size(); k-- > 0;) jinja_utf8_put(out, cps[k]);
        return jinja_value::string(std::move(out));
    }
    jinja_list items = *jinja_iterate(ctx, v);
    std::reverse(items.begin(), items.end());
    return list_value(std::move(items));
}

// Python round(x, ndigits): round-half-even on the exact binary value.
double py_round(double x, int64_t nd) {
    if (!std::isfinite(x)) return x;
    if (nd >= 0) {
        if (nd > 300) return x;
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.*f", int(nd), x);  // glibc rounds exactly, ties to even
        return std::strtod(buf, nullptr);
    }
    const double p = std::pow(10.0, double(-nd));
    double       q = x / p;
    double       r = std::nearbyint(q);  // default rounding mode: ties to even
    return r * p;
}

jinja_value f_round(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b         = jinja_bind(ctx, "round", a, {"precision", "method"});
    const int64_t          precision = b.has(0) ? int_arg(ctx, b[0], "round precision") : 0;
    const std::string      method    = b.has(1) ? jinja_str(b[1]) : "common";
    if (method != "common" && method != "ceil" && method != "floor") jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "method must be common, ceil or floor");
    if (!v.is_number()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "type %s doesn't define __round__ method", v.type_name());
    if (method == "common") {
        if (v.kind != jinja_kind::floating) {
            if (precision >= 0) return jinja_value::integer(v.i);
            return jinja_value::integer(int64_t(py_round(double(v.i), precision)));
        }
        return jinja_value::floating(py_round(v.f, precision));
    }
    const double p = std::pow(10.0, double(precision));
    const double x = v.as_double() * p;
    return jinja_value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

jinja_value f_safe(jinja_context &, jinja_value & v, args_t &) { return jinja_value::string(jinja_str(v)); }

jinja_value f_sort(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b  = jinja_bind(ctx, "sort", a, {"reverse", "case_sensitive", "attribute"});
    const bool             cs = b.has(1) && jinja_truthy(b[1]);
    std::vector<std::pair<jinja_value, jinja_value>> keyed;
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        keyed.emplace_back(case_key(b.has(2) && !b[2].is_none() ? get_attr_path(ctx, item, b[2], nullptr) : item, cs), item);
    }
    sort_values(ctx, keyed, b.has(0) && jinja_truthy(b[0]));
    jinja_list out;
    for (auto & k : keyed) out.push_back(std::move(k.second));
    return list_value(std::move(out));
}

jinja_value f_string(jinja_context &, jinja_value & v, args_t &) { return jinja_value::string(jinja_str(v)); }

jinja_value f_sum(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b     = jinja_bind(ctx, "sum", a, {"attribute", "start"});
    jinja_value            total = b.has(1) ? b[1] : jinja_value::integer(0);
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        total = jinja_binary_op(ctx, "+", total, b.has(0) && !b[0].is_none() ? get_attr_path(ctx, item, b[0], nullptr) : item);
    }
    return total;
}

jinja_value f_title(jinja_context &, jinja_value & v, args_t &) {
    // jinja2's title (not str.title): a word starts after '-', whitespace, '(', '{', '[' or '<'
    const std::string s = jinja_str(v);
    std::string       out;
    bool              word_start = true;
    size_t            pos        = 0;
    while (pos < s.size()) {
        const uint32_t cp = jinja_utf8_next(s, &pos);
        if (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jinja_is_space(cp)) {
            jinja_utf8_put(out, cp);
            word_start = true;
            continue;
        }
        if (word_start) jinja_append_upper(out, cp);
        else jinja_append_lower(out, cp);
        word_start = false;
    }
    return jinja_value::string(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
ember_json to_json(jinja_context & ctx, const jinja_value & v, int depth) {
    if (depth > 512) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "tojson: nesting too deep");
    ember_json j;
    switch (v.kind) {
        case jinja_kind::none: break;
        case jinja_kind::boolean:
            j.kind = EMBER_JSON_BOOL;
            j.b    = v.b;
            break;
        case jinja_kind::integer:
            j.kind = EMBER_JSON_INT;
            j.i    = v.i;
            break;
        case jinja_kind::floating:
            j.kind = EMBER_JSON_FLOAT;
            j.f    = v.f;
            break;
        case jinja_kind::string:
            j.kind = EMBER_JSON_STRING;
            j.str  = v.s;
            break;
        case jinja_kind::list:
        case jinja_kind::tuple:
            j.kind = EMBER_JSON_ARRAY;
            for (const jinja_value & item : *v.list) j.arr.push_back(to_json(ctx, item, depth + 1));
            break;
        case jinja_kind::dict:
            j.kind = EMBER_JSON_OBJECT;
            for (const auto & kv : v.dict->items) {
                std::string key;
                switch (kv.first.kind) {
                    case jinja_kind::string: key = kv.first.s; break;
                    case jinja_kind::integer: key = std::to_string(kv.first.i); break;
                    case jinja_kind::floating: key = ember_json_format_double(kv.first.f); break;
                    case jinja_kind::boolean: key = kv.first.b ? "true" : "false"; break;
                    case jinja_kind::none: key = "null"; break;
                    default:
                        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "keys must be str, int, float, bool or None, not %s", kv.first.type_name());
                }
                j.obj.emplace_back(std::move(key), to_json(ctx, kv.second, depth + 1));
            }
            break;
        default: jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Object of type %s is not JSON serializable", v.type_name());
    }
    return j;
}

jinja_value f_tojson(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args  b = jinja_bind(ctx, "tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    ember_json_dump_options o;
    o.max_size     = ctx.opt.max_output;
    o.ensure_ascii = b.has(0) && jinja_truthy(b[0]);
    if (b.has(1) && !b[1].is_none()) {
        if (b[1].is_string()) {
            o.indent     = 0;
            o.indent_str = b[1].s;
        } else {
            const int64_t ind = std::max<int64_t>(int_arg(ctx, b[1], "tojson indent"), 0);
            jinja_check_size(ctx, size_t(ind));
            o.indent = int(ind);
        }
        o.item_sep = ",";
    }
    if (b.has(2) && !b[2].is_none()) {
        if (!b[2].is_sequence() || b[2].list->size() != 2 || !(*b[2].list)[0].is_string() || !(*b[2].list)[1].is_string()) {
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "tojson separators must be a pair of strings");
        }
        o.item_sep = (*b[2].list)[0].s;
        o.key_sep  = (*b[2].list)[1].s;
    }
    o.sort_keys = b.has(3) && jinja_truthy(b[3]);
    return jinja_value::string(ember_json_dump(to_json(ctx, v, 0), o));
}

jinja_value f_trim(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b = jinja_bind(ctx, "trim", a, {"chars"});
    if (b.has(0) && !b[0].is_none()) {
        const std::string chars = jinja_str(b[0]);
        return jinja_value::string(jinja_strip(jinja_str(v), &chars, true, true));
    }
    return jinja_value::string(jinja_strip(jinja_str(v), nullptr, true, true));
}

jinja_value f_unique(jinja_context & ctx, jinja_value & v, args_t & a) {
    const jinja_bound_args b  = jinja_bind(ctx, "unique", a, {"case_sensitive", "attribute"});
    const bool             cs = b.has(0) && jinja_truthy(b[0]);
    jinja_list             seen, out;
    const auto seq = jinja_iterate(ctx, v);  // keeps a fresh list (of a str or dict) alive
    for (const jinja_value & item : *seq) {
        jinja_step(ctx, seen.size() + 1);
        jinja_value key = case_key(b.has(1) && !b[1].is_none() ? get_attr_path(ctx, item, b[1], nullptr) : item, cs);
        bool        dup = false;
        for (const jinja_value & s : seen) {
            if (jinja_equal(s, key)) {
                dup = true;
                break;
            }
        }
        if (dup) continue;
        seen.push_back(std::move(key));
        out.push_back(item);
    }
    return list_value(std::move(out));
}

struct filter_entry {
    const char *    name;
    jinja_filter_fn fn;
};

const filter_entry k_filters[] = {
    {"abs", f_abs},         {"attr", f_attr},     {"batch", f_batch},       {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_length},  {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},    {"escape", f_escape},     {"first", f_first},
    {"float", f_float},     {"format", f_format}, {"indent", f_indent},     {"int", f_int},
    {"items", f_items},     {"join", f_join},     {"last", f_last},         {"length", f_length},
    {"list", f_list},       {"lower", f_lower},   {"map", f_map},           {"max", f_max},
    {"min", f_min},         {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round},   {"safe", f_safe},         {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},   {"sum", f_sum},
    {"title", f_title},     {"tojson", f_tojson}, {"trim", f_trim},         {"unique", f_unique},
    {"upper", f_upper},
};

}  // namespace

jinja_filter_fn jinja_find_filter(const std::string & name) {
    for (const filter_entry & e : k_filters) {
        if (name == e.name) return e.fn;
    }
    return nullptr;
}
