// Template parser: recursive descent with jinja2's grammar and operator precedence
// (jinja2/parser.py), producing the tree of jinja-ast.h.
#include <cstdarg>
#include <cstring>

#include "runtime/error.h"
#include "runtime/jinja-ast.h"
#include "runtime/jinja-eval.h"

namespace {

constexpr int k_max_parse_depth = 128;

struct parser {
    explicit parser(const std::vector<jinja_token> & tokens) : t(tokens) {}

    const std::vector<jinja_token> & t;
    size_t                           p          = 0;
    int                              depth      = 0;
    int                              loop_depth = 0;
    // jinja2 reports an unknown filter or test when it compiles the template, except inside
    // an if statement or a conditional expression ("soft" frames), where it fails only if
    // the filter runs. Unknown names outside those wait here until their expression is done.
    bool                                 soft = false;
    std::vector<std::pair<std::string, int>> pending_unknown;  // message, line

    // Nesting guard: deep input fails cleanly instead of overflowing the stack.
    struct depth_guard {
        parser & ps;
        explicit depth_guard(parser & s) : ps(s) {
            if (++ps.depth > k_max_parse_depth) {
                ember_throw(EMBER_ERR_INVALID_ARG, "chat template line %d: nesting deeper than %d levels", ps.cur().line, k_max_parse_depth);
            }
        }
        ~depth_guard() { ps.depth--; }
    };

    const jinja_token & cur() const { return t[p]; }
    const jinja_token & look(size_t k = 1) const { return t[p + k < t.size() ? p + k : t.size() - 1]; }
    void                next() {
        if (p + 1 < t.size()) p++;
    }

    static std::string describe(const jinja_token & tk) {
        switch (tk.kind) {
            case jinja_tok::text: return "template text";
            case jinja_tok::var_begin: return "'{{'";
            case jinja_tok::var_end: return "'}}'";
            case jinja_tok::block_begin: return "'{%'";
            case jinja_tok::block_end: return "'%}'";
            case jinja_tok::string: return "a string";
            case jinja_tok::integer:
            case jinja_tok::floating: return "a number";
            case jinja_tok::eof: return "the end of the template";
            default: return "'" + tk.text + "'";
        }
    }

    [[noreturn]] void fail_status(ember_status st, const char * fmt, ...) const
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
    {
        char    buf[512];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        ember_throw(st, "chat template line %d: %s", cur().line, buf);
    }

    [[noreturn]] void unexpected(const char * expected) const {
        fail_status(EMBER_ERR_INVALID_ARG, "unexpected %s, expected %s", describe(cur()).c_str(), expected);
    }

    bool is_op(const char * s) const { return cur().kind == jinja_tok::op && cur().text == s; }
    bool is_name(const char * s) const { return cur().kind == jinja_tok::name && cur().text == s; }
    bool skip_op(const char * s) {
        if (!is_op(s)) return false;
        next();
        return true;
    }
    bool skip_name(const char * s) {
        if (!is_name(s)) return false;
        next();
        return true;
    }
    void expect_op(const char * s) {
        if (!skip_op(s)) unexpected((std::string("'") + s + "'").c_str());
    }
    std::string expect_name() {
        if (cur().kind != jinja_tok::name) unexpected("a name");
        std::string n = cur().text;
        next();
        return n;
    }
    void expect_block_end() {
        if (cur().kind != jinja_tok::block_end) unexpected("'%}'");
        next();
    }
    // The %} that opens a statement's body; jinja2 accepts a Python-style ':' before it.
    void expect_body_start() {
        skip_op(":");
        expect_block_end();
    }

    jinja_expr_ptr make(jinja_expr_kind kind, int line) {
        auto e  = std::make_unique<jinja_expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }

    // An unknown filter or test: an error now, or when it runs if we are in a soft frame.
    void note_unknown(const char * what, const std::string & name, int line) {
        if (soft) return;
        pending_unknown.emplace_back(ember_format("unknown %s '%s'", what, name.c_str()), line);
    }

    // Fails for the first unknown filter or test that no conditional expression covered.
    void check_unknown() {
        if (pending_unknown.empty()) return;
        ember_throw(EMBER_ERR_UNSUPPORTED, "chat template line %d: %s", pending_unknown[0].second, pending_unknown[0].first.c_str());
    }

    // Sets `soft` for a scope.
    struct soft_scope {
        parser & ps;
        bool     saved;
        soft_scope(parser & s, bool value) : ps(s), saved(s.soft) { s.soft = value; }
        ~soft_scope() { ps.soft = saved; }
    };

    //
    // Expressions
    //
    bool is_tuple_end(const char * extra_end) const {
        if (cur().kind == jinja_tok::var_end || cur().kind == jinja_tok::block_end || is_op(")")) return true;
        return extra_end && is_name(extra_end);
    }

    jinja_expr_ptr parse_tuple(bool with_condexpr = true, const char * extra_end = nullptr, bool explicit_parens = false) {
        const int                   line = cur().line;
        std::vector<jinja_expr_ptr> items;
        bool                        is_tuple = false;
        for (;;) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(with_condexpr ? parse_expression() : parse_or());
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) unexpected("an expression");
        }
        auto e  = make(jinja_expr_kind::tuple, line);
        e->args = std::move(items);
        return e;
    }

    jinja_expr_ptr parse_expression() {
        depth_guard    g(*this);
        const int      line = cur().line;
        const size_t   mark = pending_unknown.size();
        jinja_expr_ptr expr = parse_or();
        while (skip_name("if")) {
            auto c = make(jinja_expr_kind::cond, line);
            c->args.push_back(parse_or());
            c->args.push_back(std::move(expr));
            c->args.push_back(skip_name("else") ? parse_expression() : nullptr);
            expr = std::move(c);
            pending_unknown.resize(mark);  // a conditional expression is a soft frame
        }
        return expr;
    }

    jinja_expr_ptr binary(const char * op, jinja_expr_ptr l, jinja_expr_ptr r, int line) {
        auto e  = make(jinja_expr_kind::binary, line);
        e->name = op;
        e->args.push_back(std::move(l));
        e->args.push_back(std::move(r));
        return e;
    }

    jinja_expr_ptr parse_or() {
        jinja_expr_ptr l = parse_and();
        while (is_name("or")) {
            const int line = cur().line;
            next();
            l = binary("or", std::move(l), parse_and(), line);
        }
        return l;
    }

    jinja_expr_ptr parse_and() {
        jinja_expr_ptr l = parse_not();
        while (is_name("and")) {
            const int line = cur().line;
            next();
            l = binary("and", std::move(l), parse_not(), line);
        }
        return l;
    }

    jinja_expr_ptr parse_not() {
        depth_guard g(*this);
        if (is_name("not")) {
            auto e  = make(jinja_expr_kind::unary, cur().line);
            e->name = "not";
            next();
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    jinja_expr_ptr parse_compare() {
        const int      line = cur().line;
        jinja_expr_ptr expr = parse_math1();
        jinja_expr_ptr cmp;
        for (;;) {
            std::string op;
            if (cur().kind == jinja_tok::op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                next();
            } else if (is_name("in")) {
                op = "in";
                next();
            } else if (is_name("not") && look().kind == jinja_tok::name && look().text == "in") {
                op = "not in";
                next();
                next();
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(jinja_expr_kind::compare, line);
                cmp->args.push_back(std::move(expr));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(expr);
    }

    jinja_expr_ptr parse_math1() {
        jinja_expr_ptr l = parse_concat();
        while (is_op("+") || is_op("-")) {
            const std::string op   = cur().text;
            const int         line = cur().line;
            next();
            l = binary(op.c_str(), std::move(l), parse_concat(), line);
        }
        return l;
    }

    jinja_expr_ptr parse_concat() {
        jinja_expr_ptr l = parse_math2();
        while (is_op("~")) {
            const int line = cur().line;
            next();
            l = binary("~", std::move(l), parse_math2(), line);
        }
        return l;
    }

    jinja_expr_ptr parse_math2() {
        jinja_expr_ptr l = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const std::string op   = cur().text;
            const int         line = cur().line;
            next();
            l = binary(op.c_str(), std::move(l), parse_pow(), line);
        }
        return l;
    }

    jinja_expr_ptr parse_pow() {
        jinja_expr_ptr l = parse_unary(true);
        while (is_op("**")) {
            const int line = cur().line;
            next();
            l = binary("**", std::move(l), parse_unary(true), line);
        }
        return l;
    }

    jinja_expr_ptr parse_unary(bool with_filter) {
        depth_guard    g(*this);
        jinja_expr_ptr node;
        if (is_op("-") || is_op("+")) {
            node       = make(jinja_expr_kind::unary, cur().line);
            node->name = cur().text;
            next();
            node->args.push_back(parse_unary(false));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    jinja_expr_ptr parse_primary() {
        depth_guard         g(*this);
        const jinja_token & tk = cur();
        if (tk.kind == jinja_tok::name) {
            auto e = make(jinja_expr_kind::literal, tk.line);
            if (tk.text == "true" || tk.text == "True") e->value = jinja_value::boolean(true);
            else if (tk.text == "false" || tk.text == "False") e->value = jinja_value::boolean(false);
            else if (tk.text == "none" || tk.text == "None") e->value = jinja_value::none();
            else {
                e->kind = jinja_expr_kind::name;
                e->name = tk.text;
            }
            next();
            return e;
        }
        if (tk.kind == jinja_tok::string) {
            auto        e = make(jinja_expr_kind::literal, tk.line);
            std::string s;
            while (cur().kind == jinja_tok::string) {  // adjacent literals concatenate
                s += cur().text;
                next();
            }
            e->value = jinja_value::string(std::move(s));
            return e;
        }
        if (tk.kind == jinja_tok::integer || tk.kind == jinja_tok::floating) {
            auto e   = make(jinja_expr_kind::literal, tk.line);
            e->value = tk.kind == jinja_tok::integer ? jinja_value::integer(tk.i) : jinja_value::floating(tk.f);
            next();
            return e;
        }
        if (is_op("(")) {
            next();
            jinja_expr_ptr e = parse_tuple(true, nullptr, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            auto e = make(jinja_expr_kind::list, tk.line);
            next();
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression());
            }
            next();
            return e;
        }
        if (is_op("{")) {
            auto e = make(jinja_expr_kind::dict, tk.line);
            next();
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression());
                expect_op(":");
                e->args.push_back(parse_expression());
            }
            next();
            return e;
        }
        unexpected("an expression");
    }

    jinja_expr_ptr parse_postfix(jinja_expr_ptr node) {
        for (;;) {
            if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
            else if (is_op("(")) node = parse_call(std::move(node));
            else return node;
        }
    }

    jinja_expr_ptr parse_filter_expr(jinja_expr_ptr node) {
        for (;;) {
            if (is_op("|")) node = parse_filter(std::move(node));
            else if (is_name("is")) node = parse_test(std::move(node));
            else if (is_op("(")) node = parse_call(std::move(node));
            else return node;
        }
    }

    jinja_expr_ptr parse_subscript(jinja_expr_ptr node) {
        const int line = cur().line;
        if (skip_op(".")) {
            if (cur().kind == jinja_tok::name) {
                auto e  = make(jinja_expr_kind::getattr, line);
                e->name = cur().text;
                e->args.push_back(std::move(node));
                next();
                return e;
            }
            if (cur().kind == jinja_tok::integer) {
                auto e = make(jinja_expr_kind::getitem, line);
                e->args.push_back(std::move(node));
                auto idx   = make(jinja_expr_kind::literal, line);
                idx->value = jinja_value::integer(cur().i);
                e->args.push_back(std::move(idx));
                next();
                return e;
            }
            unexpected("an attribute name");
        }
        expect_op("[");
        std::vector<jinja_expr_ptr> subs;
        while (!is_op("]")) {
            if (!subs.empty()) expect_op(",");
            if (is_op("]")) break;
            subs.push_back(parse_subscribed());
        }
        next();
        if (subs.empty()) subs.push_back(make(jinja_expr_kind::tuple, line));  // x[] is x[()]
        if (subs.size() > 1) {
            for (const auto & sub : subs) {
                if (sub->kind == jinja_expr_kind::slice) fail_status(EMBER_ERR_UNSUPPORTED, "multi-dimensional slices are not supported");
            }
            auto tup  = make(jinja_expr_kind::tuple, line);
            tup->args = std::move(subs);
            subs.clear();
            subs.push_back(std::move(tup));
        }
        if (subs[0]->kind == jinja_expr_kind::slice) {
            subs[0]->args.insert(subs[0]->args.begin(), std::move(node));  // the object being sliced
            return std::move(subs[0]);
        }
        auto e = make(jinja_expr_kind::getitem, line);
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(subs[0]));
        return e;
    }

    // An index, or a slice a:b:c (a slice node holding start, stop, step; the object is added by the caller).
    jinja_expr_ptr parse_subscribed() {
        const int                   line = cur().line;
        std::vector<jinja_expr_ptr> parts;
        if (is_op(":")) {
            next();
            parts.push_back(nullptr);
        } else {
            jinja_expr_ptr node = parse_expression();
            if (!is_op(":")) return node;
            next();
            parts.push_back(std::move(node));
        }
        if (is_op(":")) parts.push_back(nullptr);
        else if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression());
        else parts.push_back(nullptr);
        if (skip_op(":")) {
            if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression());
            else parts.push_back(nullptr);
        } else {
            parts.push_back(nullptr);
        }
        auto e  = make(jinja_expr_kind::slice, line);
        e->args = std::move(parts);
        return e;
    }

    void parse_call_args(jinja_expr & call) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail_status(EMBER_ERR_UNSUPPORTED, "*args and **kwargs in calls are not supported");
            if (cur().kind == jinja_tok::name && look().kind == jinja_tok::op && look().text == "=") {
                std::string key = cur().text;
                next();
                next();
                call.kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!call.kwargs.empty()) fail_status(EMBER_ERR_INVALID_ARG, "positional argument after a keyword argument");
                call.args.push_back(parse_expression());
            }
        }
        next();
    }

    jinja_expr_ptr parse_call(jinja_expr_ptr node) {
        auto e = make(jinja_expr_kind::call, cur().line);
        e->args.push_back(std::move(node));
        parse_call_args(*e);
        return e;
    }

    std::string dotted_name() {
        std::string name = expect_name();
        while (is_op(".")) {
            next();
            name += "." + expect_name();
        }
        return name;
    }

    jinja_expr_ptr parse_filter(jinja_expr_ptr node) {
        while (is_op("|")) {
            next();
            auto e  = make(jinja_expr_kind::filter, cur().line);
            e->name = dotted_name();
            e->filter_fn = jinja_find_filter(e->name);
            if (!e->filter_fn) note_unknown("filter", e->name, e->line);
            e->args.push_back(std::move(node));
            if (is_op("(")) parse_call_args(*e);
            node = std::move(e);
        }
        return node;
    }

    jinja_expr_ptr parse_test(jinja_expr_ptr node) {
        auto e = make(jinja_expr_kind::test, cur().line);
        next();  // "is"
        e->negated = skip_name("not");
        e->name    = dotted_name();
        e->test_fn = jinja_find_test(e->name);
        if (!e->test_fn) note_unknown("test", e->name, e->line);
        e->args.push_back(std::move(node));
        if (is_op("(")) {
            parse_call_args(*e);
        } else if ((cur().kind == jinja_tok::name || cur().kind == jinja_tok::string || cur().kind == jinja_tok::integer ||
                    cur().kind == jinja_tok::floating || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_status(EMBER_ERR_INVALID_ARG, "you cannot chain multiple tests with is");
            e->args.push_back(parse_postfix(parse_primary()));
        }
        return e;
    }

    //
    // Statements
    //
    // Parses nodes until a block tag named in `ends`; returns that name with the cursor on it.
    std::string subparse(std::vector<jinja_node> & out, std::initializer_list<const char *> ends) {
        for (;;) {
            const jinja_token & tk = cur();
            if (tk.kind == jinja_tok::eof) {
                if (ends.size() == 0) return "";
                fail_status(EMBER_ERR_INVALID_ARG, "unexpected end of template, expected '%s'", *(ends.end() - 1));
            }
            if (tk.kind == jinja_tok::text) {
                jinja_node n;
                n.kind = jinja_node_kind::text;
                n.line = tk.line;
                n.text = tk.text;
                out.push_back(std::move(n));
                next();
                continue;
            }
            if (tk.kind == jinja_tok::var_begin) {
                jinja_node n;
                n.kind = jinja_node_kind::output;
                n.line = tk.line;
                next();
                n.expr = parse_tuple();
                if (cur().kind != jinja_tok::var_end) unexpected("'}}'");
                check_unknown();
                next();
                out.push_back(std::move(n));
                continue;
            }
            if (tk.kind != jinja_tok::block_begin) unexpected("template text or a tag");
            next();
            if (cur().kind != jinja_tok::name) unexpected("a tag name");
            for (const char * e : ends) {
                if (cur().text == e) return e;
            }
            parse_statement(out);
            check_unknown();
        }
    }

    // Consumes an end tag name (cursor on it) and its %}.
    void end_tag() {
        next();
        expect_block_end();
    }

    // After "if": the condition, the body, and the elif/else branches up to the shared endif.
    // An elif is an if_ node (marked elif) alone in the else_body of the branch before it;
    // the chain is built and run iteratively, so long chains cost no stack.
    void parse_if(jinja_node & first) {
        soft_scope   ss(*this, true);
        jinja_node * node = &first;
        for (int n_elif = 0;; n_elif++) {
            if (n_elif > 1000) fail_status(EMBER_ERR_INVALID_ARG, "more than 1000 elif branches");
            node->kind = jinja_node_kind::if_;
            node->expr = parse_tuple(false);
            expect_body_start();
            const std::string end = subparse(node->body, {"elif", "else", "endif"});
            if (end == "elif") {
                jinja_node elif;
                elif.line = cur().line;
                elif.elif = true;
                next();
                node->else_body.push_back(std::move(elif));
                node = &node->else_body.back();
                continue;
            }
            if (end == "else") {
                next();
                expect_body_start();
                subparse(node->else_body, {"endif"});
            }
            end_tag();
            return;
        }
    }

    void parse_statement(std::vector<jinja_node> & out) {
        depth_guard       g(*this);
        const std::string tag  = cur().text;
        const int         line = cur().line;
        jinja_node        n;
        n.line = line;
        next();
        if (tag == "if") {
            parse_if(n);
        } else if (tag == "for") {
            n.kind    = jinja_node_kind::for_;
            n.targets = parse_target_names();
            if (!skip_name("in")) unexpected("'in'");
            n.expr = parse_tuple(false, "recursive");
            std::string end;
            {
                soft_scope ss(*this, false);  // the loop filter and body have their own frame
                if (skip_name("if")) n.cond = parse_expression();
                if (is_name("recursive")) fail_status(EMBER_ERR_UNSUPPORTED, "recursive loops are not supported");
                expect_body_start();
                loop_depth++;
                end = subparse(n.body, {"else", "endfor"});
                loop_depth--;
            }
            if (end == "else") {
                next();
                expect_body_start();
                subparse(n.else_body, {"endfor"});
            }
            end_tag();
        } else if (tag == "set") {
            if (cur().kind == jinja_tok::name && look().kind == jinja_tok::op && look().text == ".") {
                n.kind = jinja_node_kind::set;
                n.targets.push_back(cur().text);
                next();
                next();
                n.attr = expect_name();
                expect_op("=");
                n.expr = parse_tuple();
                expect_block_end();
            } else {
                n.targets = parse_target_names();
                if (skip_op("=")) {
                    n.kind = jinja_node_kind::set;
                    n.expr = parse_tuple();
                    expect_block_end();
                } else {
                    if (n.targets.size() != 1) unexpected("'='");
                    soft_scope ss(*this, false);
                    n.kind = jinja_node_kind::set_block;
                    if (is_op("|")) n.expr = parse_filter(block_placeholder(line));
                    expect_body_start();
                    subparse(n.body, {"endset"});
                    end_tag();
                }
            }
        } else if (tag == "macro") {
            soft_scope ss(*this, false);
            n.kind = jinja_node_kind::macro;
            n.text = expect_name();
            parse_signature(n.params);
            expect_body_start();
            const int saved_loop = loop_depth;
            loop_depth           = 0;
            subparse(n.body, {"endmacro"});
            loop_depth = saved_loop;
            end_tag();
        } else if (tag == "call") {
            n.kind = jinja_node_kind::call_block;
            if (is_op("(")) {
                soft_scope ss(*this, false);
                parse_signature(n.params);
            }
            n.expr = parse_expression();
            if (n.expr->kind != jinja_expr_kind::call) fail_status(EMBER_ERR_INVALID_ARG, "expected a call after 'call'");
            expect_body_start();
            soft_scope ss(*this, false);
            subparse(n.body, {"endcall"});
            end_tag();
        } else if (tag == "filter") {
            soft_scope ss(*this, false);
            n.kind = jinja_node_kind::filter_block;
            if (!is_op("|")) {
                // "{% filter upper %}" has no leading pipe: parse as if it had one
                auto e       = make(jinja_expr_kind::filter, cur().line);
                e->name      = dotted_name();
                e->filter_fn = jinja_find_filter(e->name);
                if (!e->filter_fn) note_unknown("filter", e->name, e->line);
                e->args.push_back(block_placeholder(line));
                if (is_op("(")) parse_call_args(*e);
                n.expr = parse_filter(std::move(e));
            } else {
                n.expr = parse_filter(block_placeholder(line));
            }
            expect_body_start();
            subparse(n.body, {"endfilter"});
            end_tag();
        } else if (tag == "with") {
            n.kind = jinja_node_kind::with;
            while (cur().kind != jinja_tok::block_end) {
                if (!n.params.empty()) expect_op(",");
                std::string name = expect_name();
                expect_op("=");
                n.params.emplace_back(std::move(name), parse_expression());
            }
            expect_block_end();
            soft_scope ss(*this, false);
            subparse(n.body, {"endwith"});
            end_tag();
        } else if (tag == "break" || tag == "continue") {
            if (loop_depth == 0) fail_status(EMBER_ERR_INVALID_ARG, "'%s' outside of a loop", tag.c_str());
            n.kind = tag == "break" ? jinja_node_kind::break_ : jinja_node_kind::continue_;
            expect_block_end();
        } else if (tag == "generation") {
            // transformers' {% generation %} marks assistant text for masks; it renders its body
            expect_block_end();
            subparse(out, {"endgeneration"});
            end_tag();
            return;
        } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" || tag == "autoescape" ||
                   tag == "do" || tag == "trans") {
            p--;
            fail_status(EMBER_ERR_UNSUPPORTED, "unsupported tag '%s'", tag.c_str());
        } else {
            p--;
            fail_status(EMBER_ERR_INVALID_ARG, "unknown tag '%s'", tag.c_str());
        }
        out.push_back(std::move(n));
    }

    jinja_expr_ptr block_placeholder(int line) {
        auto e  = make(jinja_expr_kind::name, line);
        e->name = JINJA_BLOCK_VALUE_NAME;
        return e;
    }

    // "a", "a, b" or "(a, b)".
    std::vector<std::string> parse_target_names() {
        std::vector<std::string> names;
        const bool               paren = skip_op("(");
        for (;;) {
            names.push_back(expect_name());
            if (!skip_op(",")) break;
            if (paren && is_op(")")) break;
        }
        if (paren) expect_op(")");
        return names;
    }

    void parse_signature(std::vector<std::pair<std::string, jinja_expr_ptr>> & params) {
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            std::string    name = expect_name();
            jinja_expr_ptr def;
            if (skip_op("=")) def = parse_expression();
            params.emplace_back(std::move(name), std::move(def));
        }
        next();
    }
};

}  // namespace

std::vector<jinja_node> jinja_parse(const std::vector<jinja_token> & tokens) {
    parser                  ps(tokens);
    std::vector<jinja_node> nodes;
    ps.subparse(nodes, {});
    return nodes;
}
