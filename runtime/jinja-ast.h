// Tokens and syntax tree of the chat-template interpreter (lexer: jinja-lexer.cpp, parser:
// jinja-parser.cpp, evaluation: jinja-eval.cpp). The lexer applies all whitespace control
// (trim_blocks, lstrip_blocks, "-" and "+" markers), so the tree only holds the text to print.
#ifndef EMBER_RUNTIME_JINJA_AST_H
#define EMBER_RUNTIME_JINJA_AST_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/jinja-value.h"

//
// Tokens
//
enum class jinja_tok : uint8_t {
    text,         // template data, whitespace control already applied
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,
    string,       // escapes already decoded
    integer,
    floating,
    op,           // + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
    eof,
};

struct jinja_token {
    jinja_tok   kind = jinja_tok::eof;
    std::string text;
    int64_t     i    = 0;
    double      f    = 0.0;
    int         line = 1;
};

// Tokenizes a template the way jinja2's lexer does with trim_blocks and lstrip_blocks on:
// newlines normalized to "\n", one trailing newline dropped, comments removed, {% raw %}
// bodies turned into text. Throws ember_error(EMBER_ERR_INVALID_ARG) on a malformed tag.
std::vector<jinja_token> jinja_lex(const std::string & source);

//
// Expressions
//
enum class jinja_expr_kind : uint8_t {
    literal,   // value
    name,      // name
    list,      // args: items
    tuple,     // args: items
    dict,      // args: key, value, key, value, ...
    getattr,   // args[0].name
    getitem,   // args[0][args[1]]
    slice,     // args[0][args[1]:args[2]:args[3]], missing parts are nullptr
    call,      // args[0](args[1..], kwargs)
    filter,    // args[0] | name(args[1..], kwargs); filter_fn (nullptr: unknown, fails when run)
    test,      // args[0] is [not] name(args[1..], kwargs); test_fn (nullptr: unknown, fails when run)
    unary,     // name: "-", "+", "not"
    binary,    // name: "+", "-", "*", "/", "//", "%", "**", "~", "and", "or"
    compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
    cond,      // args[1] if args[0] else args[2] (args[2] may be nullptr)
};

struct jinja_expr;
struct jinja_context;
using jinja_expr_ptr  = std::unique_ptr<jinja_expr>;
using jinja_filter_fn = jinja_value (*)(jinja_context & ctx, jinja_value & value, jinja_call_args & args);
using jinja_test_fn   = bool (*)(jinja_context & ctx, const jinja_value & value, jinja_call_args & args);

struct jinja_expr {
    jinja_expr_kind                                     kind = jinja_expr_kind::literal;
    int                                                 line = 0;
    jinja_value                                         value;
    std::string                                         name;
    std::vector<jinja_expr_ptr>                         args;
    std::vector<std::pair<std::string, jinja_expr_ptr>> kwargs;
    std::vector<std::string>                            ops;
    bool                                                negated   = false;  // test: "is not"
    jinja_filter_fn                                     filter_fn = nullptr;
    jinja_test_fn                                       test_fn   = nullptr;
};

//
// Statements
//
enum class jinja_node_kind : uint8_t {
    text,          // text
    output,        // {{ expr }}
    if_,           // expr, body, else_body (an elif is an if_ marked elif, alone in else_body)
    for_,          // targets in expr [if cond], body, else_body
    set,           // targets = expr, or ns_attr set: targets[0].attr = expr
    set_block,     // targets[0] = rendered body, piped through expr (a filter chain) when set
    macro,         // text: name, params, body
    call_block,    // expr: the call, params: caller's parameters, body: caller's body
    filter_block,  // expr: a filter chain over the rendered body
    with,          // params: assignments, body
    break_,
    continue_,
};

struct jinja_node {
    jinja_node_kind                                     kind = jinja_node_kind::text;
    int                                                 line = 0;
    std::string                                         text;
    std::vector<std::string>                            targets;
    std::string                                         attr;
    jinja_expr_ptr                                      expr;
    jinja_expr_ptr                                      cond;
    std::vector<jinja_node>                             body;
    std::vector<jinja_node>                             else_body;
    std::vector<std::pair<std::string, jinja_expr_ptr>> params;  // default / value may be nullptr
    bool                                                elif = false;  // if_: an elif branch of the if_ above
};

// The placeholder a block filter chain (set_block, filter_block) applies to.
#define JINJA_BLOCK_VALUE_NAME "\x01block"

// Parses a token stream. Throws ember_error naming the line: EMBER_ERR_INVALID_ARG for a
// syntax error, EMBER_ERR_UNSUPPORTED for valid Jinja this interpreter does not implement
// (unknown filters and tests, include/extends/import, recursive loops).
std::vector<jinja_node> jinja_parse(const std::vector<jinja_token> & tokens);

#endif  // EMBER_RUNTIME_JINJA_AST_H
