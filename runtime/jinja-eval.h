// Render state and the Python operations shared by the evaluator (jinja-eval.cpp), the filters,
// tests and globals (jinja-builtins.cpp) and the str/dict/list methods (jinja-methods.cpp).
#ifndef EMBER_RUNTIME_JINJA_EVAL_H
#define EMBER_RUNTIME_JINJA_EVAL_H

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember.h"
#include "runtime/jinja-ast.h"
#include "runtime/jinja-value.h"
#include "runtime/jinja.h"

// A scope: the globals, the template's top level, a loop iteration, a macro call, a with block.
struct jinja_frame {
    std::vector<std::pair<std::string, jinja_value>> vars;
    jinja_frame *                                    parent = nullptr;

    jinja_value * find_local(const std::string & name);
    jinja_value * lookup(const std::string & name);  // this frame, then the parents
    void          set(const std::string & name, jinja_value v);
};

struct jinja_context {
    const ember_jinja_options & opt;
    std::string                 out;         // where text is rendered (swapped for macro and block bodies)
    int                         line  = 0;   // the line being evaluated, for error messages
    int                         depth = 0;
    uint64_t                    steps = 0;
    jinja_frame *               root  = nullptr;  // template top level: macros resolve names from here
};

// Throws ember_error(st, "chat template line N: ...").
[[noreturn]] void jinja_fail(const jinja_context & ctx, ember_status st, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
// Raises jinja2's UndefinedError for an undefined value that is used.
[[noreturn]] void jinja_fail_undefined(const jinja_context & ctx, const jinja_value & v);
// Counts work; fails past opt.max_steps.
void jinja_step(jinja_context & ctx, uint64_t n = 1);
// Fails when a string or list of n bytes/items would pass opt.max_output.
void jinja_check_size(const jinja_context & ctx, size_t n);

//
// Python operations
//
jinja_value jinja_getattr(jinja_context & ctx, const jinja_value & obj, const std::string & name);
jinja_value jinja_getitem(jinja_context & ctx, const jinja_value & obj, const jinja_value & key);
jinja_value jinja_call(jinja_context & ctx, const jinja_value & fn, jinja_call_args & args);
// Python ordering (<0, 0, >0); TypeError for values that do not order.
int         jinja_compare(jinja_context & ctx, const jinja_value & a, const jinja_value & b);
bool        jinja_contains(jinja_context & ctx, const jinja_value & container, const jinja_value & item);
// The items of iter(v): list/tuple items, dict keys, string characters; undefined is empty.
std::shared_ptr<const jinja_list> jinja_iterate(jinja_context & ctx, const jinja_value & v);
// len(v), or a TypeError.
int64_t     jinja_length(jinja_context & ctx, const jinja_value & v);
// Python `a op b` for + - * / // % ** ~.
jinja_value jinja_binary_op(jinja_context & ctx, const std::string & op, const jinja_value & a, const jinja_value & b);
// s[start:stop:step] with Python slice semantics over lists, tuples and strings.
jinja_value jinja_slice(jinja_context & ctx, const jinja_value & obj, const jinja_value & start, const jinja_value & stop,
                        const jinja_value & step);
// Renders a macro-like body with a fresh frame; used by macros and call blocks.
std::string jinja_render_body(jinja_context & ctx, const std::vector<jinja_node> & body, jinja_frame & frame);

//
// Builtins (jinja-builtins.cpp, jinja-methods.cpp)
//
jinja_filter_fn jinja_find_filter(const std::string & name);
jinja_test_fn   jinja_find_test(const std::string & name);
// The bound method `obj.name` of a str, dict or list; false when there is none.
bool            jinja_find_method(jinja_context & ctx, const jinja_value & obj, const std::string & name, jinja_value & out);
void            jinja_add_globals(jinja_frame & globals);
// Python '%' formatting: fmt % args.
std::string     jinja_percent_format(jinja_context & ctx, const std::string & fmt, const jinja_value & args);

// Binds call arguments to parameter names like Python; parameters not passed stay unset.
struct jinja_bound_args {
    std::vector<jinja_value> v;
    std::vector<bool>        given;
    const jinja_value &      operator[](size_t k) const { return v[k]; }
    bool                     has(size_t k) const { return given[k]; }
};
jinja_bound_args jinja_bind(jinja_context & ctx, const char * fname, const jinja_call_args & args,
                            std::initializer_list<const char *> names);

#endif  // EMBER_RUNTIME_JINJA_EVAL_H
