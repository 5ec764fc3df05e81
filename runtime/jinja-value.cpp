// Chat-template values with Python semantics, and the UTF-8 / str helpers they need.
#include "runtime/jinja-value.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "runtime/error.h"
#include "runtime/json.h"

//
// Construction
//
jinja_value jinja_value::undefined(std::string hint) {
    jinja_value v;
    v.s = std::move(hint);
    return v;
}

jinja_value jinja_value::none() {
    jinja_value v;
    v.kind = jinja_kind::none;
    return v;
}

jinja_value jinja_value::boolean(bool x) {
    jinja_value v;
    v.kind = jinja_kind::boolean;
    v.b    = x;
    v.i    = x ? 1 : 0;
    return v;
}

jinja_value jinja_value::integer(int64_t x) {
    jinja_value v;
    v.kind = jinja_kind::integer;
    v.i    = x;
    return v;
}

jinja_value jinja_value::floating(double x) {
    jinja_value v;
    v.kind = jinja_kind::floating;
    v.f    = x;
    return v;
}

jinja_value jinja_value::string(std::string x) {
    jinja_value v;
    v.kind = jinja_kind::string;
    v.s    = std::move(x);
    return v;
}

jinja_value jinja_value::make_list(jinja_list items) {
    jinja_value v;
    v.kind = jinja_kind::list;
    v.list = std::make_shared<jinja_list>(std::move(items));
    return v;
}

jinja_value jinja_value::make_tuple(jinja_list items) {
    jinja_value v = make_list(std::move(items));
    v.kind        = jinja_kind::tuple;
    return v;
}

jinja_value jinja_value::make_dict() {
    jinja_value v;
    v.kind = jinja_kind::dict;
    v.dict = std::make_shared<jinja_dict>();
    return v;
}

jinja_value jinja_value::make_ns() {
    jinja_value v = make_dict();
    v.kind        = jinja_kind::ns;
    return v;
}

jinja_value jinja_value::function(std::string name, jinja_fn f, jinja_list bound) {
    jinja_value v;
    v.kind = jinja_kind::callable;
    v.fn   = std::make_shared<jinja_callable>(jinja_callable{std::move(name), std::move(f), std::move(bound)});
    return v;
}

namespace {

// The containers whose last reference is gone, waiting to be freed by the outermost release
// on this thread (null when none is running). A plain pointer: nothing to destroy at thread exit.
thread_local std::vector<std::shared_ptr<void>> * t_release_queue = nullptr;

void release_last(std::shared_ptr<void> p) {
    if (t_release_queue) {
        t_release_queue->push_back(std::move(p));
        return;
    }
    std::vector<std::shared_ptr<void>> queue;
    t_release_queue = &queue;
    p.reset();  // its items' containers queue themselves instead of freeing their own items
    while (!queue.empty()) {
        std::shared_ptr<void> q = std::move(queue.back());
        queue.pop_back();
        q.reset();
    }
    t_release_queue = nullptr;
}

}  // namespace

jinja_value::~jinja_value() {
    if (list && list.use_count() == 1) release_last(std::move(list));
    if (dict && dict.use_count() == 1) release_last(std::move(dict));
    if (fn && fn.use_count() == 1) release_last(std::move(fn));
}

namespace {

thread_local int      t_walk_depth  = 0;
thread_local uint64_t t_walk_values = 0;

}  // namespace

jinja_walk_guard::jinja_walk_guard() {
    if (t_walk_depth == 0) t_walk_values = 0;
    if (t_walk_depth >= k_jinja_max_nesting) {
        ember_throw(EMBER_ERR_INVALID_ARG, "a value nested more than %d levels deep (a reference cycle?)", k_jinja_max_nesting);
    }
    if (++t_walk_values > k_jinja_max_walk_values) {
        ember_throw(EMBER_ERR_INVALID_ARG, "comparing or printing a value visited more than %llu values",
                    static_cast<unsigned long long>(k_jinja_max_walk_values));
    }
    t_walk_depth++;
}

jinja_walk_guard::~jinja_walk_guard() { t_walk_depth--; }

bool jinja_reaches(const jinja_value & v, const jinja_dict * target, uint64_t * visited) {
    std::vector<const jinja_value *> todo{&v};
    std::unordered_set<const void *> seen;
    while (!todo.empty()) {
        const jinja_value * x = todo.back();
        todo.pop_back();
        if (x->list && seen.insert(x->list.get()).second) {
            ++*visited;
            for (const jinja_value & item : *x->list) todo.push_back(&item);
        }
        if (x->dict) {
            if (x->dict.get() == target) return true;
            if (seen.insert(x->dict.get()).second) {
                ++*visited;
                for (const auto & kv : x->dict->items) {
                    todo.push_back(&kv.first);
                    todo.push_back(&kv.second);
                }
            }
        }
        if (x->fn && seen.insert(x->fn.get()).second) {
            ++*visited;
            for (const jinja_value & item : x->fn->bound) todo.push_back(&item);
        }
    }
    return false;
}

double jinja_value::as_double() const {
    if (kind == jinja_kind::floating) return f;
    return static_cast<double>(kind == jinja_kind::boolean ? (b ? 1 : 0) : i);
}

const char * jinja_value::type_name() const {
    switch (kind) {
        case jinja_kind::undefined: return "Undefined";
        case jinja_kind::none: return "NoneType";
        case jinja_kind::boolean: return "bool";
        case jinja_kind::integer: return "int";
        case jinja_kind::floating: return "float";
        case jinja_kind::string: return "str";
        case jinja_kind::list: return "list";
        case jinja_kind::tuple: return "tuple";
        case jinja_kind::dict: return "dict";
        case jinja_kind::ns: return "Namespace";
        case jinja_kind::callable: return "function";
    }
    return "object";
}

//
// Dict
//
const jinja_value * jinja_dict::find(const std::string & key) const {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &items[it->second].second;
}

const jinja_value * jinja_dict::find(const jinja_value & key) const {
    if (key.kind == jinja_kind::string) return find(key.s);
    for (const auto & kv : items) {
        if (jinja_equal(kv.first, key)) return &kv.second;
    }
    return nullptr;
}

void jinja_dict::set(const std::string & key, jinja_value v) { set(jinja_value::string(key), std::move(v)); }

void jinja_dict::set(const jinja_value & key, jinja_value v) {
    if (key.kind == jinja_kind::string) {
        auto it = index.find(key.s);
        if (it != index.end()) {
            items[it->second].second = std::move(v);
            return;
        }
        index.emplace(key.s, items.size());
        items.emplace_back(key, std::move(v));
        return;
    }
    for (auto & kv : items) {
        if (jinja_equal(kv.first, key)) {
            kv.second = std::move(v);
            return;
        }
    }
    items.emplace_back(key, std::move(v));
}

//
// Python semantics
//
bool jinja_truthy(const jinja_value & v) {
    switch (v.kind) {
        case jinja_kind::undefined:
        case jinja_kind::none: return false;
        case jinja_kind::boolean: return v.b;
        case jinja_kind::integer: return v.i != 0;
        case jinja_kind::floating: return v.f != 0.0;
        case jinja_kind::string: return !v.s.empty();
        case jinja_kind::list:
        case jinja_kind::tuple: return !v.list->empty();
        case jinja_kind::dict: return !v.dict->items.empty();
        case jinja_kind::ns:
        case jinja_kind::callable: return true;
    }
    return false;
}

bool jinja_equal(const jinja_value & a, const jinja_value & b) {
    const jinja_walk_guard guard;
    if (a.is_number() && b.is_number()) {
        if (a.kind != jinja_kind::floating && b.kind != jinja_kind::floating) return a.i == b.i;
        return a.as_double() == b.as_double();
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case jinja_kind::undefined:
        case jinja_kind::none: return true;
        case jinja_kind::string: return a.s == b.s;
        case jinja_kind::list:
        case jinja_kind::tuple: {
            if (a.list == b.list) return true;
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); k++) {
                if (!jinja_equal((*a.list)[k], (*b.list)[k])) return false;
            }
            return true;
        }
        case jinja_kind::dict: {
            if (a.dict == b.dict) return true;
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto & kv : a.dict->items) {
                const jinja_value * other = b.dict->find(kv.first);
                if (!other || !jinja_equal(kv.second, *other)) return false;
            }
            return true;
        }
        case jinja_kind::ns: return a.dict == b.dict;
        case jinja_kind::callable: return a.fn == b.fn;
        default: return false;
    }
}

namespace {

bool is_printable_cp(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F) return false;
    if (cp < 0x80) return true;
    if (cp <= 0xA0 || cp == 0xAD) return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) return false;
    if (cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return false;
    if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates and private use
    return cp <= 0x10FFFF;
}

}  // namespace

void jinja_repr_string(std::string & out, const std::string & s) {
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    const char quote      = has_single && !has_double ? '"' : '\'';
    out += quote;
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t   start = pos;
        const uint32_t cp    = jinja_utf8_next(s, &pos);
        char           buf[16];
        if (cp == uint32_t(quote) || cp == '\\') {
            out += '\\';
            out += char(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (is_printable_cp(cp)) {
            out.append(s, start, pos - start);
        } else {
            if (cp <= 0xFF) std::snprintf(buf, sizeof(buf), "\\x%02x", unsigned(cp));
            else if (cp <= 0xFFFF) std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(cp));
            else std::snprintf(buf, sizeof(buf), "\\U%08x", unsigned(cp));
            out += buf;
        }
    }
    out += quote;
}

namespace {

void repr_into(std::string & out, const jinja_value & v);

void repr_items(std::string & out, const jinja_list & items) {
    for (size_t k = 0; k < items.size(); k++) {
        if (k) out += ", ";
        repr_into(out, items[k]);
    }
}

void repr_dict(std::string & out, const jinja_dict & d) {
    out += '{';
    for (size_t k = 0; k < d.items.size(); k++) {
        if (k) out += ", ";
        repr_into(out, d.items[k].first);
        out += ": ";
        repr_into(out, d.items[k].second);
    }
    out += '}';
}

void repr_into(std::string & out, const jinja_value & v) {
    const jinja_walk_guard guard;
    switch (v.kind) {
        case jinja_kind::undefined: out += "Undefined"; break;
        case jinja_kind::string: jinja_repr_string(out, v.s); break;
        case jinja_kind::list:
            out += '[';
            repr_items(out, *v.list);
            out += ']';
            break;
        case jinja_kind::tuple:
            out += '(';
            repr_items(out, *v.list);
            if (v.list->size() == 1) out += ',';
            out += ')';
            break;
        case jinja_kind::dict: repr_dict(out, *v.dict); break;
        case jinja_kind::ns:
            out += "<Namespace ";
            repr_dict(out, *v.dict);
            out += '>';
            break;
        default: out += jinja_str(v); break;
    }
}

}  // namespace

std::string jinja_repr(const jinja_value & v) {
    std::string out;
    repr_into(out, v);
    return out;
}

std::string jinja_str(const jinja_value & v) {
    switch (v.kind) {
        case jinja_kind::undefined: return "";
        case jinja_kind::none: return "None";
        case jinja_kind::boolean: return v.b ? "True" : "False";
        case jinja_kind::integer: return std::to_string(v.i);
        case jinja_kind::floating: return ember_json_format_double(v.f);
        case jinja_kind::string: return v.s;
        case jinja_kind::callable: return "<function " + v.fn->name + ">";
        default: return jinja_repr(v);
    }
}

jinja_value jinja_from_json(const ember_json & j) {
    switch (j.kind) {
        case EMBER_JSON_NULL: return jinja_value::none();
        case EMBER_JSON_BOOL: return jinja_value::boolean(j.b);
        case EMBER_JSON_INT: return jinja_value::integer(j.i);
        case EMBER_JSON_FLOAT: return jinja_value::floating(j.f);
        case EMBER_JSON_STRING: return jinja_value::string(j.str);
        case EMBER_JSON_ARRAY: {
            jinja_list items;
            items.reserve(j.arr.size());
            for (const ember_json & e : j.arr) items.push_back(jinja_from_json(e));
            return jinja_value::make_list(std::move(items));
        }
        case EMBER_JSON_OBJECT: {
            jinja_value d = jinja_value::make_dict();
            for (const auto & kv : j.obj) d.dict->set(kv.first, jinja_from_json(kv.second));
            return d;
        }
    }
    return jinja_value::none();
}

//
// UTF-8
//
uint32_t jinja_utf8_next(const std::string & s, size_t * pos) {
    const unsigned char c = static_cast<unsigned char>(s[*pos]);
    size_t              len;
    uint32_t            cp;
    if (c < 0x80) {
        (*pos)++;
        return c;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp  = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp  = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp  = c & 0x07;
    } else {
        (*pos)++;
        return c;
    }
    if (*pos + len > s.size()) {
        (*pos)++;
        return c;
    }
    for (size_t k = 1; k < len; k++) {
        const unsigned char cc = static_cast<unsigned char>(s[*pos + k]);
        if ((cc & 0xC0) != 0x80) {
            (*pos)++;
            return c;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    *pos += len;
    return cp;
}

void jinja_utf8_put(std::string & out, uint32_t cp) {
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

size_t jinja_utf8_len(const std::string & s) {
    size_t n = 0, pos = 0;
    while (pos < s.size()) {
        jinja_utf8_next(s, &pos);
        n++;
    }
    return n;
}

std::vector<size_t> jinja_utf8_offsets(const std::string & s) {
    std::vector<size_t> off;
    off.reserve(s.size() + 1);
    size_t pos = 0;
    while (pos < s.size()) {
        off.push_back(pos);
        jinja_utf8_next(s, &pos);
    }
    off.push_back(s.size());
    return off;
}

std::vector<uint32_t> jinja_utf8_decode(const std::string & s) {
    std::vector<uint32_t> cps;
    size_t                pos = 0;
    while (pos < s.size()) cps.push_back(jinja_utf8_next(s, &pos));
    return cps;
}

bool jinja_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

//
// Case mapping: a small table of ranges where upper and lower case differ by a fixed
// offset or alternate in pairs, which covers Latin, Greek, Cyrillic and Armenian.
//
namespace {

struct case_range {
    uint32_t lo, hi;  // upper-case code points [lo, hi]
    int32_t  delta;   // lower = upper + delta; 1 with `pairs`: alternating upper/lower
    bool     pairs;
};

const case_range k_case_ranges[] = {
    {0x0041, 0x005A, 32, false},   {0x00C0, 0x00D6, 32, false},   {0x00D8, 0x00DE, 32, false},
    {0x0100, 0x012F, 1, true},     {0x0132, 0x0137, 1, true},     {0x0139, 0x0148, 1, true},
    {0x014A, 0x0177, 1, true},     {0x0179, 0x017E, 1, true},     {0x0386, 0x0386, 38, false},
    {0x0388, 0x038A, 37, false},   {0x038C, 0x038C, 64, false},   {0x038E, 0x038F, 63, false},
    {0x0391, 0x03A1, 32, false},   {0x03A3, 0x03AB, 32, false},   {0x0400, 0x040F, 80, false},
    {0x0410, 0x042F, 32, false},   {0x0460, 0x0481, 1, true},     {0x048A, 0x04BF, 1, true},
    {0x04D0, 0x04FF, 1, true},     {0x0531, 0x0556, 48, false},   {0x1E00, 0x1E95, 1, true},
    {0x1EA0, 0x1EFF, 1, true},     {0xFF21, 0xFF3A, 32, false},
};

// The lower-case form of an upper-case cp, or 0.
uint32_t lower_of(uint32_t cp) {
    for (const case_range & r : k_case_ranges) {
        if (r.pairs) {
            if (cp >= r.lo && cp <= r.hi && ((cp - r.lo) % 2) == 0) return cp + 1;
        } else if (cp >= r.lo && cp <= r.hi) {
            return cp + uint32_t(r.delta);
        }
    }
    if (cp == 0x0178) return 0x00FF;
    return 0;
}

// The upper-case form of a lower-case cp, or 0.
uint32_t upper_of(uint32_t cp) {
    for (const case_range & r : k_case_ranges) {
        if (r.pairs) {
            if (cp > r.lo && cp <= r.hi + 1 && ((cp - r.lo) % 2) == 1 && cp - 1 <= r.hi) return cp - 1;
        } else if (cp >= r.lo + uint32_t(r.delta) && cp <= r.hi + uint32_t(r.delta)) {
            return cp - uint32_t(r.delta);
        }
    }
    switch (cp) {
        case 0x00FF: return 0x0178;
        case 0x00B5: return 0x039C;
        case 0x0131: return 0x0049;
        case 0x017F: return 0x0053;
        case 0x03C2: return 0x03A3;
        default: return 0;
    }
}

}  // namespace

bool jinja_is_upper_cp(uint32_t cp) { return lower_of(cp) != 0 || cp == 0x0130; }
bool jinja_is_lower_cp(uint32_t cp) { return upper_of(cp) != 0 || cp == 0x00DF; }
bool jinja_is_cased_letter(uint32_t cp) { return jinja_is_upper_cp(cp) || jinja_is_lower_cp(cp); }

void jinja_append_upper(std::string & out, uint32_t cp) {
    if (cp == 0x00DF) {
        out += "SS";
        return;
    }
    const uint32_t u = upper_of(cp);
    jinja_utf8_put(out, u ? u : cp);
}

void jinja_append_lower(std::string & out, uint32_t cp) {
    if (cp == 0x0130) {
        out += "i\xCC\x87";  // İ -> i + combining dot above, as Python does
        return;
    }
    const uint32_t l = lower_of(cp);
    jinja_utf8_put(out, l ? l : cp);
}

std::string jinja_upper(const std::string & s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) jinja_append_upper(out, jinja_utf8_next(s, &pos));
    return out;
}

std::string jinja_lower(const std::string & s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) jinja_append_lower(out, jinja_utf8_next(s, &pos));
    return out;
}

std::string jinja_capitalize(const std::string & s) {
    std::string out;
    size_t      pos = 0;
    if (pos < s.size()) jinja_append_upper(out, jinja_utf8_next(s, &pos));
    while (pos < s.size()) jinja_append_lower(out, jinja_utf8_next(s, &pos));
    return out;
}

std::string jinja_py_title(const std::string & s) {
    std::string out;
    bool        prev_cased = false;
    size_t      pos        = 0;
    while (pos < s.size()) {
        const uint32_t cp = jinja_utf8_next(s, &pos);
        if (prev_cased) jinja_append_lower(out, cp);
        else jinja_append_upper(out, cp);
        prev_cased = jinja_is_cased_letter(cp);
    }
    return out;
}

//
// str methods
//
std::string jinja_strip(const std::string & s, const std::string * chars, bool left, bool right) {
    std::vector<uint32_t> set;
    if (chars) set = jinja_utf8_decode(*chars);
    auto strip_cp = [&](uint32_t cp) {
        return chars ? std::find(set.begin(), set.end(), cp) != set.end() : jinja_is_space(cp);
    };
    const std::vector<size_t> off = jinja_utf8_offsets(s);
    size_t                    b = 0, e = off.size() - 1;  // code point range [b, e)
    auto cp_at = [&](size_t k) {
        size_t p = off[k];
        return jinja_utf8_next(s, &p);
    };
    if (left) {
        while (b < e && strip_cp(cp_at(b))) b++;
    }
    if (right) {
        while (e > b && strip_cp(cp_at(e - 1))) e--;
    }
    return s.substr(off[b], off[e] - off[b]);
}

namespace {

// Byte length of the whitespace code point at s[pos], or 0.
size_t space_len_at(const std::string & s, size_t pos) {
    size_t         p  = pos;
    const uint32_t cp = jinja_utf8_next(s, &p);
    return jinja_is_space(cp) ? p - pos : 0;
}

// Byte length of the whitespace code point that ends at s[end], or 0.
size_t space_len_before(const std::string & s, size_t end) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) start--;
    size_t         p  = start;
    const uint32_t cp = jinja_utf8_next(s, &p);
    if (p == end && jinja_is_space(cp)) return end - start;
    return 0;
}

}  // namespace

std::vector<std::string> jinja_split(const std::string & s, const std::string * sep, int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (sep) {
        if (!from_right) {
            size_t pos = 0;
            while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
                const size_t hit = s.find(*sep, pos);
                if (hit == std::string::npos) break;
                parts.push_back(s.substr(pos, hit - pos));
                pos = hit + sep->size();
            }
            parts.push_back(s.substr(pos));
            return parts;
        }
        size_t end = s.size();
        while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
            if (end < sep->size()) break;
            const size_t hit = s.rfind(*sep, end - sep->size());
            if (hit == std::string::npos) break;
            parts.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
            end = hit;
        }
        parts.push_back(s.substr(0, end));
        std::reverse(parts.begin(), parts.end());
        return parts;
    }
    // runs of whitespace; no empty strings at either end
    if (!from_right) {
        size_t pos = 0;
        for (;;) {
            while (pos < s.size() && space_len_at(s, pos)) pos += space_len_at(s, pos);
            if (pos >= s.size()) break;
            if (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) {
                parts.push_back(s.substr(pos));
                break;
            }
            size_t end = pos;
            while (end < s.size() && !space_len_at(s, end)) {
                jinja_utf8_next(s, &end);
            }
            parts.push_back(s.substr(pos, end - pos));
            pos = end;
        }
        return parts;
    }
    size_t end = s.size();
    for (;;) {
        while (end > 0 && space_len_before(s, end)) end -= space_len_before(s, end);
        if (end == 0) break;
        if (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) {
            parts.push_back(s.substr(0, end));
            break;
        }
        size_t start = end;
        while (start > 0 && !space_len_before(s, start)) {
            start--;
            while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) start--;
        }
        parts.push_back(s.substr(start, end - start));
        end = start;
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
}

std::vector<std::string> jinja_splitlines(const std::string & s) {
    std::vector<std::string> lines;
    size_t                   start = 0, pos = 0;
    while (pos < s.size()) {
        const size_t   at = pos;
        const uint32_t cp = jinja_utf8_next(s, &pos);
        const bool     br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                        cp == 0x2028 || cp == 0x2029;
        if (!br) continue;
        lines.push_back(s.substr(start, at - start));
        if (cp == '\r' && pos < s.size() && s[pos] == '\n') pos++;
        start = pos;
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    return lines;
}

bool jinja_replace(const std::string & s, const std::string & old, const std::string & with, int64_t count, size_t max_size,
                   std::string & out) {
    // count the replacements first so an explosive one fails before it allocates
    std::vector<size_t> hits;
    if (old.empty()) {
        const std::vector<size_t> off = jinja_utf8_offsets(s);
        for (size_t k = 0; k < off.size() && (count < 0 || int64_t(hits.size()) < count); k++) hits.push_back(off[k]);
    } else {
        size_t pos = 0;
        while (count < 0 || int64_t(hits.size()) < count) {
            const size_t h = s.find(old, pos);
            if (h == std::string::npos) break;
            hits.push_back(h);
            pos = h + old.size();
        }
    }
    const double size = double(s.size()) + double(hits.size()) * (double(with.size()) - double(old.size()));
    if (size > double(max_size)) return false;
    std::string r;
    r.reserve(size_t(size));
    size_t pos = 0;
    for (size_t h : hits) {
        r.append(s, pos, h - pos);
        r += with;
        pos = h + old.size();
    }
    r.append(s, pos, std::string::npos);
    out = std::move(r);
    return true;
}
