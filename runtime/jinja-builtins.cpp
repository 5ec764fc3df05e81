// jinja2's builtin tests (jinja2/tests.py), the globals templates call (range, namespace,
// dict, joiner, and transformers' raise_exception and strftime_now), and argument binding.
#include <cstring>
#include <ctime>

#include "runtime/error.h"
#include "runtime/jinja-eval.h"

jinja_bound_args jinja_bind(jinja_context & ctx, const char * fname, const jinja_call_args & args,
                            std::initializer_list<const char *> names) {
    jinja_bound_args b;
    b.v.resize(names.size());
    b.given.assign(names.size(), false);
    if (args.pos.size() > names.size()) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s() takes at most %zu arguments (%zu given)", fname, names.size(), args.pos.size());
    }
    for (size_t k = 0; k < args.pos.size(); k++) {
        b.v[k]     = args.pos[k];
        b.given[k] = true;
    }
    for (const auto & kw : args.kw) {
        size_t k = 0;
        for (const char * n : names) {
            if (kw.first == n) break;
            k++;
        }
        if (k == names.size()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s() got an unexpected keyword argument '%s'", fname, kw.first.c_str());
        if (b.given[k]) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s() got multiple values for argument '%s'", fname, kw.first.c_str());
        b.v[k]     = kw.second;
        b.given[k] = true;
    }
    return b;
}

namespace {

using args_t = jinja_call_args;

// Python's arity errors: jinja2 passes `x is test arg` as test(x, arg).
void check_arity(jinja_context & ctx, const args_t & a, size_t n, const char * test) {
    if (a.pos.size() != n || !a.kw.empty()) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "test '%s' takes %zu argument%s (%zu given)", test, n, n == 1 ? "" : "s", a.pos.size() + a.kw.size());
    }
}

const jinja_value & test_arg(jinja_context & ctx, const args_t & a, const char * test) {
    check_arity(ctx, a, 1, test);
    return a.pos[0];
}

// A test of the value alone.
template <bool (*pred)(jinja_context &, const jinja_value &)> bool unary(jinja_context & ctx, const jinja_value & v, args_t & a) {
    check_arity(ctx, a, 0, "the");
    return pred(ctx, v);
}

bool t_defined(jinja_context &, const jinja_value & v) { return !v.is_undefined(); }
bool t_undefined(jinja_context &, const jinja_value & v) { return v.is_undefined(); }
bool t_none(jinja_context &, const jinja_value & v) { return v.is_none(); }
bool t_boolean(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::boolean; }
bool t_false(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::boolean && !v.b; }
bool t_true(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::boolean && v.b; }
bool t_integer(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::integer; }
bool t_float(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::floating; }
bool t_number(jinja_context &, const jinja_value & v) { return v.is_number(); }
bool t_string(jinja_context &, const jinja_value & v) { return v.is_string(); }
bool t_mapping(jinja_context &, const jinja_value & v) { return v.is_dict(); }
bool t_escaped(jinja_context &, const jinja_value &) { return false; }

bool t_iterable(jinja_context &, const jinja_value & v) {
    // Undefined has __iter__, so it is iterable (and a sequence) in jinja2
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

bool t_callable(jinja_context &, const jinja_value & v) { return v.kind == jinja_kind::callable || v.is_undefined(); }

bool t_odd(jinja_context & ctx, const jinja_value & v) {
    return jinja_equal(jinja_binary_op(ctx, "%", v, jinja_value::integer(2)), jinja_value::integer(1));
}

bool t_even(jinja_context & ctx, const jinja_value & v) {
    return jinja_equal(jinja_binary_op(ctx, "%", v, jinja_value::integer(2)), jinja_value::integer(0));
}

bool t_divisibleby(jinja_context & ctx, const jinja_value & v, args_t & a) {
    return jinja_equal(jinja_binary_op(ctx, "%", v, test_arg(ctx, a, "divisibleby")), jinja_value::integer(0));
}

bool t_eq(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_equal(v, test_arg(ctx, a, "eq")); }
bool t_ne(jinja_context & ctx, const jinja_value & v, args_t & a) { return !jinja_equal(v, test_arg(ctx, a, "ne")); }
bool t_lt(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_compare(ctx, v, test_arg(ctx, a, "lt")) < 0; }
bool t_le(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_compare(ctx, v, test_arg(ctx, a, "le")) <= 0; }
bool t_gt(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_compare(ctx, v, test_arg(ctx, a, "gt")) > 0; }
bool t_ge(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_compare(ctx, v, test_arg(ctx, a, "ge")) >= 0; }
bool t_in(jinja_context & ctx, const jinja_value & v, args_t & a) { return jinja_contains(ctx, test_arg(ctx, a, "in"), v); }

bool t_sameas(jinja_context & ctx, const jinja_value & v, args_t & a) {
    // Python `is`: singletons compare by value, containers by identity
    const jinja_value & o = test_arg(ctx, a, "sameas");
    if (v.kind != o.kind) return false;
    switch (v.kind) {
        case jinja_kind::undefined:
        case jinja_kind::none: return true;
        case jinja_kind::boolean: return v.b == o.b;
        case jinja_kind::integer: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
        case jinja_kind::list:
        case jinja_kind::tuple: return v.list == o.list;
        case jinja_kind::dict:
        case jinja_kind::ns: return v.dict == o.dict;
        case jinja_kind::callable: return v.fn == o.fn;
        default: return false;
    }
}

// str.islower() / str.isupper(): some cased character, and none of the other case.
bool case_test(const jinja_value & v, bool want_lower) {
    const std::string s     = jinja_str(v);
    bool              cased = false;
    size_t            pos   = 0;
    while (pos < s.size()) {
        const uint32_t cp = jinja_utf8_next(s, &pos);
        if (want_lower ? jinja_is_upper_cp(cp) : jinja_is_lower_cp(cp)) return false;
        if (want_lower ? jinja_is_lower_cp(cp) : jinja_is_upper_cp(cp)) cased = true;
    }
    return cased;
}

bool t_lower(jinja_context &, const jinja_value & v) { return case_test(v, true); }
bool t_upper(jinja_context &, const jinja_value & v) { return case_test(v, false); }

bool t_filter(jinja_context &, const jinja_value & v) { return v.is_string() && jinja_find_filter(v.s) != nullptr; }
bool t_test(jinja_context &, const jinja_value & v) { return v.is_string() && jinja_find_test(v.s) != nullptr; }

struct test_entry {
    const char *  name;
    jinja_test_fn fn;
};

const test_entry k_tests[] = {
    {"boolean", unary<t_boolean>},   {"callable", unary<t_callable>}, {"defined", unary<t_defined>}, {"divisibleby", t_divisibleby},
    {"eq", t_eq},                    {"equalto", t_eq},               {"==", t_eq},                  {"escaped", unary<t_escaped>},
    {"even", unary<t_even>},         {"false", unary<t_false>},       {"filter", unary<t_filter>},   {"float", unary<t_float>},
    {"ge", t_ge},                    {">=", t_ge},                    {"gt", t_gt},                  {">", t_gt},
    {"greaterthan", t_gt},           {"in", t_in},                    {"integer", unary<t_integer>}, {"iterable", unary<t_iterable>},
    {"le", t_le},                    {"<=", t_le},                    {"lower", unary<t_lower>},     {"lt", t_lt},
    {"<", t_lt},                     {"lessthan", t_lt},              {"mapping", unary<t_mapping>}, {"ne", t_ne},
    {"!=", t_ne},                    {"none", unary<t_none>},         {"number", unary<t_number>},   {"odd", unary<t_odd>},
    {"sameas", t_sameas},            {"sequence", unary<t_iterable>}, {"string", unary<t_string>},   {"test", unary<t_test>},
    {"true", unary<t_true>},         {"undefined", unary<t_undefined>}, {"upper", unary<t_upper>},
};

//
// strftime in the C locale (Python's strftime on Linux passes through to glibc, whose C
// locale names are these); flags such as "%-d" go to the C library unchanged.
//
const char * const k_days[]   = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
const char * const k_months[] = {"January", "February", "March",     "April",   "May",      "June",
                                 "July",    "August",   "September", "October", "November", "December"};

std::string c_strftime(const std::string & fmt, const std::tm & tm) {
    std::string out;
    for (size_t k = 0; k < fmt.size(); k++) {
        if (fmt[k] != '%' || k + 1 >= fmt.size()) {
            out += fmt[k];
            continue;
        }
        size_t      j = k + 1;
        std::string flags;
        while (j < fmt.size() && std::strchr("-_0^#", fmt[j])) flags += fmt[j++];
        while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9') flags += fmt[j++];
        if (j >= fmt.size()) {
            out += fmt.substr(k);
            break;
        }
        const char  conv = fmt[j];
        std::string piece;
        switch (conv) {
            case 'a': piece = std::string(k_days[tm.tm_wday % 7]).substr(0, 3); break;
            case 'A': piece = k_days[tm.tm_wday % 7]; break;
            case 'b':
            case 'h': piece = std::string(k_months[tm.tm_mon % 12]).substr(0, 3); break;
            case 'B': piece = k_months[tm.tm_mon % 12]; break;
            case 'p': piece = tm.tm_hour < 12 ? "AM" : "PM"; break;
            case 'P': piece = tm.tm_hour < 12 ? "am" : "pm"; break;
            case 'c': piece = c_strftime("%a %b %e %H:%M:%S %Y", tm); break;
            case 'x': piece = c_strftime("%m/%d/%y", tm); break;
            case 'X': piece = c_strftime("%H:%M:%S", tm); break;
            default: {
                char              buf[128];
                const std::string spec = "%" + flags + conv;
                const size_t      n    = std::strftime(buf, sizeof(buf), spec.c_str(), &tm);
                piece.assign(buf, n);
                k = j;
                out += piece;
                continue;
            }
        }
        if (flags.find('^') != std::string::npos) piece = jinja_upper(piece);
        out += piece;
        k = j;
    }
    return out;
}

//
// Globals
//
jinja_value g_range(jinja_context & ctx, jinja_call_args & a) {
    if (!a.kw.empty()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "range expected 1 to 3 arguments, got %zu", a.pos.size());
    int64_t v[3] = {0, 0, 1};
    for (size_t k = 0; k < a.pos.size(); k++) {
        const jinja_value & x = a.pos[k];
        if (x.kind != jinja_kind::integer && x.kind != jinja_kind::boolean) {
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'%s' object cannot be interpreted as an integer", x.type_name());
        }
    }
    if (a.pos.size() == 1) {
        v[1] = a.pos[0].i;
    } else {
        v[0] = a.pos[0].i;
        v[1] = a.pos[1].i;
        if (a.pos.size() == 3) v[2] = a.pos[2].i;
    }
    if (v[2] == 0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "range() arg 3 must not be zero");
    const long double span = (long double) v[1] - (long double) v[0];
    long double       n    = v[2] > 0 ? (span + v[2] - 1) / v[2] : (span + v[2] + 1) / v[2];
    if (n < 0) n = 0;
    // the sandbox's MAX_RANGE, also our guard against range(10**9)
    if (n > 100000) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jinja_list items;
    for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) items.push_back(jinja_value::integer(x));
    return jinja_value::make_list(std::move(items));
}

// dict(mapping or pairs, **kwargs) and namespace(...) take the same arguments.
void fill_mapping(jinja_context & ctx, jinja_dict & d, jinja_call_args & a, const char * fname) {
    if (a.pos.size() > 1) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s expected at most 1 positional argument, got %zu", fname, a.pos.size());
    if (!a.pos.empty()) {
        const jinja_value & src = a.pos[0];
        if (src.is_dict() || src.kind == jinja_kind::ns) {
            for (const auto & kv : src.dict->items) d.set(kv.first, kv.second);
        } else {
            const auto seq = jinja_iterate(ctx, src);  // keeps a fresh list (of a str or dict) alive
            for (const jinja_value & pair : *seq) {
                if (!pair.is_sequence() || pair.list->size() != 2) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s: each item must be a pair", fname);
                d.set((*pair.list)[0], (*pair.list)[1]);
            }
        }
    }
    for (auto & kw : a.kw) d.set(kw.first, kw.second);
}

jinja_value g_dict(jinja_context & ctx, jinja_call_args & a) {
    jinja_value d = jinja_value::make_dict();
    fill_mapping(ctx, *d.dict, a, "dict");
    return d;
}

jinja_value g_namespace(jinja_context & ctx, jinja_call_args & a) {
    jinja_value ns = jinja_value::make_ns();
    fill_mapping(ctx, *ns.dict, a, "namespace");
    return ns;
}

jinja_value g_raise_exception(jinja_context & ctx, jinja_call_args & a) {
    const jinja_bound_args b = jinja_bind(ctx, "raise_exception", a, {"message"});
    // the template's own message, unprefixed: it is meant for the user
    ember_throw(EMBER_ERR_INVALID_ARG, "%s", jinja_str(b[0]).c_str());
}

jinja_value g_strftime_now(jinja_context & ctx, jinja_call_args & a) {
    const jinja_bound_args b = jinja_bind(ctx, "strftime_now", a, {"format"});
    if (!b[0].is_string()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "strftime_now() argument must be str, not %s", b[0].type_name());
    std::tm tm = ctx.opt.now;
    if (!ctx.opt.has_now) {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
    }
    return jinja_value::string(c_strftime(b[0].s, tm));
}

jinja_value g_joiner(jinja_context & ctx, jinja_call_args & a) {
    const jinja_bound_args b    = jinja_bind(ctx, "joiner", a, {"sep"});
    const std::string      sep  = b.has(0) ? jinja_str(b[0]) : ", ";
    auto                   used = std::make_shared<bool>(false);
    return jinja_value::function("joiner", [sep, used](jinja_context &, jinja_call_args &) {
        if (!*used) {
            *used = true;
            return jinja_value::string("");
        }
        return jinja_value::string(sep);
    });
}

}  // namespace

jinja_test_fn jinja_find_test(const std::string & name) {
    for (const test_entry & e : k_tests) {
        if (name == e.name) return e.fn;
    }
    return nullptr;
}

void jinja_add_globals(jinja_frame & globals) {
    globals.set("range", jinja_value::function("range", g_range));
    globals.set("dict", jinja_value::function("dict", g_dict));
    globals.set("namespace", jinja_value::function("namespace", g_namespace));
    globals.set("joiner", jinja_value::function("joiner", g_joiner));
    globals.set("raise_exception", jinja_value::function("raise_exception", g_raise_exception));
    globals.set("strftime_now", jinja_value::function("strftime_now", g_strftime_now));
}
