// Values of the chat-template interpreter, with the Python semantics templates rely on:
// str()/repr() text, truthiness, equality (1 == 1.0 == True), dicts that keep insertion order,
// and lists/dicts/namespaces shared by reference like Python objects. Strings are UTF-8;
// lengths, indices and slices count code points, as Python's str does.
#ifndef EMBER_RUNTIME_JINJA_VALUE_H
#define EMBER_RUNTIME_JINJA_VALUE_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

struct ember_json;
struct jinja_context;
struct jinja_value;

enum class jinja_kind : uint8_t {
    undefined,  // jinja2's default Undefined: prints as "", falsy, iterates as empty
    none,
    boolean,
    integer,
    floating,
    string,
    list,
    tuple,      // a list that prints as (a, b) and is not equal to a list
    dict,
    ns,         // namespace(): a dict of attributes, the one thing templates may mutate
    callable,   // global function, macro, bound method, loop.cycle
};

using jinja_list = std::vector<jinja_value>;

// Positional and keyword arguments of a call.
struct jinja_call_args {
    std::vector<jinja_value>                          pos;
    std::vector<std::pair<std::string, jinja_value>> kw;
};

using jinja_fn = std::function<jinja_value(jinja_context & ctx, jinja_call_args & args)>;

struct jinja_callable {
    std::string name;
    jinja_fn    fn;
    jinja_list  bound;  // the values fn holds (a bound method's object), for jinja_reaches
};

struct jinja_dict;

struct jinja_value {
    jinja_kind                      kind = jinja_kind::undefined;
    bool                            b    = false;
    int64_t                         i    = 0;
    double                          f    = 0.0;
    std::string                     s;     // string; for undefined: the error to raise when it is used
    std::shared_ptr<jinja_list>     list;  // list, tuple
    std::shared_ptr<jinja_dict>     dict;  // dict, ns
    std::shared_ptr<jinja_callable> fn;    // callable

    static jinja_value undefined(std::string hint = "");
    static jinja_value none();
    static jinja_value boolean(bool v);
    static jinja_value integer(int64_t v);
    static jinja_value floating(double v);
    static jinja_value string(std::string v);
    static jinja_value make_list(jinja_list items = {});
    static jinja_value make_tuple(jinja_list items);
    static jinja_value make_dict();
    static jinja_value make_ns();
    static jinja_value function(std::string name, jinja_fn fn, jinja_list bound = {});

    // Containers are released one at a time, not recursively: a list nested 100000 deep is
    // freed without 100000 nested destructor calls on the stack.
    jinja_value()                                   = default;
    jinja_value(const jinja_value &)                = default;
    jinja_value(jinja_value &&) noexcept            = default;
    jinja_value & operator=(const jinja_value &)    = default;
    jinja_value & operator=(jinja_value &&) noexcept = default;
    ~jinja_value();

    bool is_undefined() const { return kind == jinja_kind::undefined; }
    bool is_none() const { return kind == jinja_kind::none; }
    bool is_string() const { return kind == jinja_kind::string; }
    bool is_int() const { return kind == jinja_kind::integer; }         // bool excluded
    bool is_number() const {                                            // bool included (Python)
        return kind == jinja_kind::integer || kind == jinja_kind::floating || kind == jinja_kind::boolean;
    }
    bool is_sequence() const { return kind == jinja_kind::list || kind == jinja_kind::tuple; }
    bool is_dict() const { return kind == jinja_kind::dict; }
    double as_double() const;  // for numbers

    // Python type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
    const char * type_name() const;
};

// An insertion-ordered dict. String keys are indexed; other keys are found by a scan.
struct jinja_dict {
    std::vector<std::pair<jinja_value, jinja_value>> items;
    std::unordered_map<std::string, size_t>          index;  // string key -> position in items

    const jinja_value * find(const jinja_value & key) const;
    const jinja_value * find(const std::string & key) const;
    void                set(const jinja_value & key, jinja_value v);
    void                set(const std::string & key, jinja_value v);
};

// The recursive walks over values (repr, equality, ordering) fail with EMBER_ERR_INVALID_ARG
// past this many levels of nesting, or past this many values visited in one walk (a value built
// of shared parts, [a, a] nested 40 times, has 2^40 paths): hostile templates build both.
constexpr int      k_jinja_max_nesting     = 1000;
constexpr uint64_t k_jinja_max_walk_values = 20000000;
struct jinja_walk_guard {
    jinja_walk_guard();
    ~jinja_walk_guard();
    jinja_walk_guard(const jinja_walk_guard &)             = delete;
    jinja_walk_guard & operator=(const jinja_walk_guard &) = delete;
};

// Whether `target` (a namespace's dict) can be reached from v through lists, dicts, namespaces
// and the values callables hold; *visited counts the containers looked at. Namespaces are the
// one thing templates mutate, so storing v in target is what could close a reference cycle.
bool jinja_reaches(const jinja_value & v, const jinja_dict * target, uint64_t * visited);

// Python semantics.
bool        jinja_truthy(const jinja_value & v);
bool        jinja_equal(const jinja_value & a, const jinja_value & b);
std::string jinja_str(const jinja_value & v);   // str(v); "" for undefined
std::string jinja_repr(const jinja_value & v);  // repr(v)
void        jinja_repr_string(std::string & out, const std::string & s);

// JSON input (object key order kept).
jinja_value jinja_from_json(const ember_json & j);

//
// UTF-8 and Python str helpers
//
// Code point count.
size_t                jinja_utf8_len(const std::string & s);
// Byte offset of every code point, plus s.size() at the end.
std::vector<size_t>   jinja_utf8_offsets(const std::string & s);
// Decodes one code point at s[*pos] and advances; an invalid byte stands for itself.
uint32_t              jinja_utf8_next(const std::string & s, size_t * pos);
void                  jinja_utf8_put(std::string & out, uint32_t cp);
std::vector<uint32_t> jinja_utf8_decode(const std::string & s);
// Python str.isspace() for one code point.
bool                  jinja_is_space(uint32_t cp);
// Simple case mapping (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic); upper may expand (ß -> SS).
void                  jinja_append_upper(std::string & out, uint32_t cp);
void                  jinja_append_lower(std::string & out, uint32_t cp);
bool                  jinja_is_cased_letter(uint32_t cp);
bool                  jinja_is_upper_cp(uint32_t cp);
bool                  jinja_is_lower_cp(uint32_t cp);
std::string           jinja_upper(const std::string & s);
std::string           jinja_lower(const std::string & s);
std::string           jinja_capitalize(const std::string & s);  // str.capitalize()
std::string           jinja_py_title(const std::string & s);    // str.title()

// str.strip/lstrip/rstrip: chars == nullptr strips Unicode whitespace, else any of chars' code points.
std::string jinja_strip(const std::string & s, const std::string * chars, bool left, bool right);
// str.split / str.rsplit: sep == nullptr splits on runs of whitespace; maxsplit < 0 is unlimited.
std::vector<std::string> jinja_split(const std::string & s, const std::string * sep, int64_t maxsplit, bool from_right);
// str.splitlines() (without keepends).
std::vector<std::string> jinja_splitlines(const std::string & s);
// str.replace with count < 0 for all. False (out untouched) when the result would be longer than max_size.
bool jinja_replace(const std::string & s, const std::string & old, const std::string & with, int64_t count, size_t max_size,
                   std::string & out);

#endif  // EMBER_RUNTIME_JINJA_VALUE_H
