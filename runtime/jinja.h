// Chat-template interpreter: the subset of Jinja that Hugging Face chat templates use, rendered
// the way transformers renders them (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, plus the globals
// raise_exception and strftime_now and transformers' tojson filter).
//
// Errors are ember_error with a message "chat template line N: ...":
//   EMBER_ERR_INVALID_ARG  syntax errors, Python errors while rendering (undefined variable used,
//                          'str' + 'int', ...), limits exceeded, and raise_exception(msg), whose
//                          message is exactly msg;
//   EMBER_ERR_UNSUPPORTED  valid Jinja this interpreter does not implement (a filter, test or
//                          tag it does not know).
#ifndef EMBER_RUNTIME_JINJA_H
#define EMBER_RUNTIME_JINJA_H

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "runtime/jinja-value.h"

struct jinja_node;

struct ember_jinja_options {
    bool     has_now    = false;     // strftime_now() formats `now` instead of the current local time
    std::tm  now        = {};
    size_t   max_output = 64u << 20;  // bytes of output, and of any one string or list built while rendering
    uint64_t max_steps  = 10000000;   // evaluation steps (loop iterations, expressions, calls)
    int      max_depth  = 200;        // nested evaluation: macro calls, nested statements and expressions
};

// A parsed template. Immutable; one may be rendered by several threads at once.
struct ember_jinja_template {
    std::vector<jinja_node> nodes;
    ~ember_jinja_template();
};

std::unique_ptr<ember_jinja_template> ember_jinja_compile(const std::string & source);

// Renders with the variables of `vars` (a dict; a top-level name not in it is undefined).
std::string ember_jinja_render(const ember_jinja_template & tmpl, const jinja_value & vars, const ember_jinja_options & opt = {});

// Compile + render with variables given as a JSON object text.
std::string ember_jinja_render_json(const std::string & source, const std::string & vars_json, const ember_jinja_options & opt = {});

#endif  // EMBER_RUNTIME_JINJA_H
