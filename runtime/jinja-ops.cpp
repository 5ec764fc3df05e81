// Python operations on template values: attribute and item access as jinja2's sandbox does
// them, calls, ordering, `in`, iteration, len(), arithmetic and slicing.
#include <cmath>

#include "runtime/error.h"
#include "runtime/jinja-eval.h"

namespace {

// jinja2's object_type_repr: "dict object", "None", ...
std::string type_repr(const jinja_value & v) {
    if (v.is_none()) return "None";
    return std::string(v.type_name()) + " object";
}

bool is_unsafe_method(const jinja_value & obj, const std::string & name) {
    // ImmutableSandboxedEnvironment refuses the methods that modify a list or dict
    static const char * const list_mut[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
    static const char * const dict_mut[] = {"clear", "pop", "popitem", "setdefault", "update"};
    if (obj.is_sequence() && obj.kind == jinja_kind::list) {
        for (const char * m : list_mut) {
            if (name == m) return true;
        }
    }
    if (obj.is_dict()) {
        for (const char * m : dict_mut) {
            if (name == m) return true;
        }
    }
    return false;
}

jinja_value unsafe_undefined(const jinja_value & obj, const std::string & name) {
    return jinja_value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe");
}

// Python index normalisation for a sequence of n items; false when out of range.
bool norm_index(const jinja_value & key, int64_t n, int64_t * out) {
    if (key.kind != jinja_kind::integer && key.kind != jinja_kind::boolean) return false;
    int64_t k = key.i;
    if (k < 0) k += n;
    if (k < 0 || k >= n) return false;
    *out = k;
    return true;
}

bool is_ascii(const std::string & s) {
    for (char c : s) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
}

}  // namespace

jinja_value jinja_getattr(jinja_context & ctx, const jinja_value & obj, const std::string & name) {
    if (obj.is_undefined()) jinja_fail_undefined(ctx, obj);
    if (!name.empty() && name[0] == '_') return unsafe_undefined(obj, name);
    if (obj.kind == jinja_kind::ns) {
        if (const jinja_value * v = obj.dict->find(name)) return *v;
        return jinja_value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    // Python attributes (methods) come first, then items: message.items is the method
    if (is_unsafe_method(obj, name)) return unsafe_undefined(obj, name);
    jinja_value method;
    if (jinja_find_method(ctx, obj, name, method)) return method;
    if (obj.is_dict()) {
        if (const jinja_value * v = obj.dict->find(name)) return *v;
    }
    return jinja_value::undefined("'" + type_repr(obj) + "' has no attribute '" + name + "'");
}

jinja_value jinja_getitem(jinja_context & ctx, const jinja_value & obj, const jinja_value & key) {
    if (obj.is_undefined()) jinja_fail_undefined(ctx, obj);
    switch (obj.kind) {
        case jinja_kind::list:
        case jinja_kind::tuple: {
            int64_t k = 0;
            if (norm_index(key, int64_t(obj.list->size()), &k)) return (*obj.list)[size_t(k)];
            break;
        }
        case jinja_kind::string: {
            if (key.kind != jinja_kind::integer && key.kind != jinja_kind::boolean) break;
            if (is_ascii(obj.s)) {
                int64_t k = 0;
                if (norm_index(key, int64_t(obj.s.size()), &k)) return jinja_value::string(obj.s.substr(size_t(k), 1));
                break;
            }
            const std::vector<size_t> off = jinja_utf8_offsets(obj.s);
            int64_t                   k   = 0;
            if (norm_index(key, int64_t(off.size() - 1), &k)) {
                return jinja_value::string(obj.s.substr(off[size_t(k)], off[size_t(k) + 1] - off[size_t(k)]));
            }
            break;
        }
        case jinja_kind::dict:
            if (const jinja_value * v = obj.dict->find(key)) return *v;
            break;
        default: break;
    }
    // jinja2: obj[key] failed, so a string key falls back to the attribute
    if (key.is_string()) return jinja_getattr(ctx, obj, key.s);
    return jinja_value::undefined(type_repr(obj) + " has no element " + jinja_repr(key));
}

jinja_value jinja_call(jinja_context & ctx, const jinja_value & fn, jinja_call_args & args) {
    if (fn.is_undefined()) jinja_fail_undefined(ctx, fn);
    if (fn.kind != jinja_kind::callable) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'%s' object is not callable", fn.type_name());
    return fn.fn->fn(ctx, args);
}

int jinja_compare(jinja_context & ctx, const jinja_value & a, const jinja_value & b) {
    const jinja_walk_guard guard;
    if (a.is_undefined()) jinja_fail_undefined(ctx, a);
    if (b.is_undefined()) jinja_fail_undefined(ctx, b);
    if (a.is_number() && b.is_number()) {
        if (a.kind != jinja_kind::floating && b.kind != jinja_kind::floating) return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
        const double x = a.as_double(), y = b.as_double();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
    if (a.is_sequence() && a.kind == b.kind) {
        const jinja_list & x = *a.list;
        const jinja_list & y = *b.list;
        for (size_t k = 0; k < x.size() && k < y.size(); k++) {
            if (!jinja_equal(x[k], y[k])) return jinja_compare(ctx, x[k], y[k]);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'<' not supported between instances of '%s' and '%s'", a.type_name(), b.type_name());
}

bool jinja_contains(jinja_context & ctx, const jinja_value & container, const jinja_value & item) {
    switch (container.kind) {
        case jinja_kind::undefined: return false;  // iterates as empty
        case jinja_kind::string:
            if (!item.is_string()) {
                jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'in <string>' requires string as left operand, not %s", item.type_name());
            }
            return container.s.find(item.s) != std::string::npos;
        case jinja_kind::list:
        case jinja_kind::tuple:
            for (const jinja_value & v : *container.list) {
                if (jinja_equal(v, item)) return true;
            }
            return false;
        case jinja_kind::dict: return container.dict->find(item) != nullptr;
        default:
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "argument of type '%s' is not iterable", container.type_name());
    }
}

std::shared_ptr<const jinja_list> jinja_iterate(jinja_context & ctx, const jinja_value & v) {
    switch (v.kind) {
        case jinja_kind::undefined: return std::make_shared<jinja_list>();
        case jinja_kind::list:
        case jinja_kind::tuple: return v.list;
        case jinja_kind::dict: {
            auto keys = std::make_shared<jinja_list>();
            keys->reserve(v.dict->items.size());
            for (const auto & kv : v.dict->items) keys->push_back(kv.first);
            return keys;
        }
        case jinja_kind::string: {
            auto   chars = std::make_shared<jinja_list>();
            size_t pos   = 0;
            while (pos < v.s.size()) {
                const size_t start = pos;
                jinja_utf8_next(v.s, &pos);
                chars->push_back(jinja_value::string(v.s.substr(start, pos - start)));
            }
            return chars;
        }
        default: jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'%s' object is not iterable", v.type_name());
    }
}

int64_t jinja_length(jinja_context & ctx, const jinja_value & v) {
    switch (v.kind) {
        case jinja_kind::undefined: return 0;
        case jinja_kind::string: return int64_t(jinja_utf8_len(v.s));
        case jinja_kind::list:
        case jinja_kind::tuple: return int64_t(v.list->size());
        case jinja_kind::dict: return int64_t(v.dict->items.size());
        default: jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "object of type '%s' has no len()", v.type_name());
    }
}

//
// Arithmetic
//
namespace {

[[noreturn]] void bad_operands(jinja_context & ctx, const std::string & op, const jinja_value & a, const jinja_value & b) {
    if (op == "+" && (a.is_string() || a.is_sequence())) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "can only concatenate %s (not \"%s\") to %s", a.type_name(), b.type_name(), a.type_name());
    }
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "unsupported operand type(s) for %s: '%s' and '%s'", op.c_str(), a.type_name(), b.type_name());
}

[[noreturn]] void overflow(jinja_context & ctx) { jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "integer overflow (Python integers are unbounded)"); }

jinja_value repeat(jinja_context & ctx, const jinja_value & seq, int64_t n) {
    if (n < 0) n = 0;
    if (seq.is_string()) {
        if (n > 0 && seq.s.size() > ctx.opt.max_output / size_t(n)) jinja_check_size(ctx, ctx.opt.max_output + 1);
        std::string out;
        out.reserve(seq.s.size() * size_t(n));
        for (int64_t k = 0; k < n; k++) out += seq.s;
        return jinja_value::string(std::move(out));
    }
    const size_t item_bytes = sizeof(jinja_value);
    if (n > 0 && seq.list->size() * item_bytes > ctx.opt.max_output / size_t(n)) jinja_check_size(ctx, ctx.opt.max_output + 1);
    jinja_list out;
    out.reserve(seq.list->size() * size_t(n));
    for (int64_t k = 0; k < n; k++) out.insert(out.end(), seq.list->begin(), seq.list->end());
    return seq.kind == jinja_kind::tuple ? jinja_value::make_tuple(std::move(out)) : jinja_value::make_list(std::move(out));
}

// Python's float divmod.
void float_divmod(double x, double y, double * div_out, double * mod_out) {
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0) {
        if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
        }
    } else {
        mod = std::copysign(0.0, y);
    }
    double floordiv;
    if (div != 0.0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = std::copysign(0.0, x / y);
    }
    *div_out = floordiv;
    *mod_out = mod;
}

}  // namespace

jinja_value jinja_binary_op(jinja_context & ctx, const std::string & op, const jinja_value & a, const jinja_value & b) {
    if (op == "~") {
        std::string s = jinja_str(a);
        const std::string t = jinja_str(b);
        jinja_check_size(ctx, s.size() + t.size());
        return jinja_value::string(s + t);
    }
    if (a.is_undefined()) jinja_fail_undefined(ctx, a);
    if (op == "%" && a.is_string()) return jinja_value::string(jinja_percent_format(ctx, a.s, b));  // '%s' % undefined is ''
    if (b.is_undefined()) jinja_fail_undefined(ctx, b);
    if (op == "*") {
        if ((a.is_string() || a.is_sequence()) && (b.kind == jinja_kind::integer || b.kind == jinja_kind::boolean)) return repeat(ctx, a, b.i);
        if ((b.is_string() || b.is_sequence()) && (a.kind == jinja_kind::integer || a.kind == jinja_kind::boolean)) return repeat(ctx, b, a.i);
    }
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            jinja_check_size(ctx, a.s.size() + b.s.size());
            return jinja_value::string(a.s + b.s);
        }
        if (a.is_sequence() && a.kind == b.kind) {
            jinja_check_size(ctx, (a.list->size() + b.list->size()) * sizeof(jinja_value));
            jinja_list items = *a.list;
            items.insert(items.end(), b.list->begin(), b.list->end());
            return a.kind == jinja_kind::tuple ? jinja_value::make_tuple(std::move(items)) : jinja_value::make_list(std::move(items));
        }
    }
    if (!a.is_number() || !b.is_number()) bad_operands(ctx, op, a, b);

    const bool ints = a.kind != jinja_kind::floating && b.kind != jinja_kind::floating;
    if (op == "/") {
        if (b.as_double() == 0.0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "division by zero");
        return jinja_value::floating(a.as_double() / b.as_double());
    }
    if (ints) {
        const int64_t x = a.i, y = b.i;
        int64_t       r = 0;
        if (op == "+") {
            if (__builtin_add_overflow(x, y, &r)) overflow(ctx);
            return jinja_value::integer(r);
        }
        if (op == "-") {
            if (__builtin_sub_overflow(x, y, &r)) overflow(ctx);
            return jinja_value::integer(r);
        }
        if (op == "*") {
            if (__builtin_mul_overflow(x, y, &r)) overflow(ctx);
            return jinja_value::integer(r);
        }
        if (op == "//" || op == "%") {
            if (y == 0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) overflow(ctx);
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jinja_value::integer(op == "//" ? q : m);
        }
        if (op == "**") {
            if (y < 0) return jinja_value::floating(std::pow(double(x), double(y)));
            int64_t base = x, e = y;
            r = 1;
            while (e > 0) {
                if (e & 1) {
                    if (__builtin_mul_overflow(r, base, &r)) overflow(ctx);
                }
                e >>= 1;
                if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow(ctx);
            }
            return jinja_value::integer(r);
        }
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return jinja_value::floating(x + y);
    if (op == "-") return jinja_value::floating(x - y);
    if (op == "*") return jinja_value::floating(x * y);
    if (op == "//" || op == "%") {
        if (y == 0.0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "float division by zero");
        double d = 0, m = 0;
        float_divmod(x, y, &d, &m);
        return jinja_value::floating(op == "//" ? d : m);
    }
    if (op == "**") {
        if (x == 0.0 && y < 0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "0.0 cannot be raised to a negative power");
        return jinja_value::floating(std::pow(x, y));
    }
    bad_operands(ctx, op, a, b);
}

//
// Slicing
//
jinja_value jinja_slice(jinja_context & ctx, const jinja_value & obj, const jinja_value & start, const jinja_value & stop,
                        const jinja_value & step) {
    if (obj.is_undefined()) jinja_fail_undefined(ctx, obj);
    // jinja2 slices with Python's obj[a:b:c] directly (not through its getitem), so this is an error
    if (obj.is_dict()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "unhashable type: 'slice'");
    if (!obj.is_string() && !obj.is_sequence()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "'%s' object is not subscriptable", obj.type_name());
    for (const jinja_value * part : {&start, &stop, &step}) {
        if (!part->is_none() && part->kind != jinja_kind::integer && part->kind != jinja_kind::boolean) {
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "slice indices must be integers or None");
        }
    }
    const int64_t st = step.is_none() ? 1 : step.i;
    if (st == 0) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "slice step cannot be zero");

    std::vector<size_t> off;  // code point offsets of a non-ASCII string
    int64_t             n;
    if (obj.is_string()) {
        if (is_ascii(obj.s)) {
            n = int64_t(obj.s.size());
        } else {
            off = jinja_utf8_offsets(obj.s);
            n   = int64_t(off.size() - 1);
        }
    } else {
        n = int64_t(obj.list->size());
    }
    // PySlice_AdjustIndices
    auto adjust = [&](const jinja_value & v, int64_t def) {
        if (v.is_none()) return def;
        int64_t k = v.i;
        if (k < 0) {
            k += n;
            if (k < 0) k = st < 0 ? -1 : 0;
        } else if (k >= n) {
            k = st < 0 ? n - 1 : n;
        }
        return k;
    };
    const int64_t b = adjust(start, st < 0 ? n - 1 : 0);
    const int64_t e = adjust(stop, st < 0 ? -1 : n);

    std::vector<int64_t> idx;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
    if (obj.is_string()) {
        std::string out;
        if (off.empty() && st == 1 && !idx.empty()) return jinja_value::string(obj.s.substr(size_t(b), size_t(e - b)));
        for (int64_t k : idx) {
            if (off.empty()) out += obj.s[size_t(k)];
            else out.append(obj.s, off[size_t(k)], off[size_t(k) + 1] - off[size_t(k)]);
        }
        return jinja_value::string(std::move(out));
    }
    jinja_list items;
    items.reserve(idx.size());
    for (int64_t k : idx) items.push_back((*obj.list)[size_t(k)]);
    return obj.kind == jinja_kind::tuple ? jinja_value::make_tuple(std::move(items)) : jinja_value::make_list(std::move(items));
}
