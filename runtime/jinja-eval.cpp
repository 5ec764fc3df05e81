// Template evaluation: statements and expressions over jinja2's scoping rules (a loop
// iteration, macro call or with block gets its own scope; `set` writes to the innermost
// one; namespaces carry values out of loops).
#include <cstdarg>
#include <cstdio>

#include "runtime/error.h"
#include "runtime/jinja-eval.h"
#include "runtime/json.h"

//
// Frames and context
//
jinja_value * jinja_frame::find_local(const std::string & name) {
    for (auto & kv : vars) {
        if (kv.first == name) return &kv.second;
    }
    return nullptr;
}

jinja_value * jinja_frame::lookup(const std::string & name) {
    for (jinja_frame * f = this; f; f = f->parent) {
        if (jinja_value * v = f->find_local(name)) return v;
    }
    return nullptr;
}

void jinja_frame::set(const std::string & name, jinja_value v) {
    if (jinja_value * old = find_local(name)) {
        *old = std::move(v);
        return;
    }
    vars.emplace_back(name, std::move(v));
}

void jinja_fail(const jinja_context & ctx, ember_status st, const char * fmt, ...) {
    char    buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    ember_throw(st, "chat template line %d: %s", ctx.line, buf);
}

void jinja_fail_undefined(const jinja_context & ctx, const jinja_value & v) {
    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s", v.s.empty() ? "undefined value" : v.s.c_str());
}

void jinja_step(jinja_context & ctx, uint64_t n) {
    ctx.steps += n;
    if (ctx.steps > ctx.opt.max_steps) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "rendering took more than %llu steps (a runaway loop?)", (unsigned long long) ctx.opt.max_steps);
    }
}

void jinja_check_size(const jinja_context & ctx, size_t n) {
    if (n > ctx.opt.max_output) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "output or value larger than the limit of %zu bytes", ctx.opt.max_output);
    }
}

namespace {

enum class flow { normal, brk, cont };

// Sets ctx.line for error messages while a node is evaluated; restores it after.
struct line_scope {
    jinja_context & ctx;
    int             saved;
    line_scope(jinja_context & c, int line) : ctx(c), saved(c.line) { c.line = line; }
    ~line_scope() { ctx.line = saved; }
};

struct depth_scope {
    jinja_context & ctx;
    explicit depth_scope(jinja_context & c) : ctx(c) {
        if (++ctx.depth > ctx.opt.max_depth) {
            ctx.depth--;
            jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "nesting deeper than %d levels (runaway recursion?)", ctx.opt.max_depth);
        }
    }
    ~depth_scope() { ctx.depth--; }
};

jinja_value eval(jinja_context & ctx, const jinja_expr & e, jinja_frame & f);
flow        exec(jinja_context & ctx, const std::vector<jinja_node> & body, jinja_frame & f);

void append_out(jinja_context & ctx, const std::string & s) {
    jinja_check_size(ctx, ctx.out.size() + s.size());
    ctx.out += s;
}

void eval_call_args(jinja_context & ctx, const jinja_expr & e, size_t first, jinja_frame & f, jinja_call_args & args) {
    for (size_t k = first; k < e.args.size(); k++) args.pos.push_back(eval(ctx, *e.args[k], f));
    for (const auto & kw : e.kwargs) args.kw.emplace_back(kw.first, eval(ctx, *kw.second, f));
}

bool compare_op(jinja_context & ctx, const std::string & op, const jinja_value & a, const jinja_value & b) {
    if (op == "==") return jinja_equal(a, b);
    if (op == "!=") return !jinja_equal(a, b);
    if (op == "in") return jinja_contains(ctx, b, a);
    if (op == "not in") return !jinja_contains(ctx, b, a);
    const int c = jinja_compare(ctx, a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
}

jinja_value eval(jinja_context & ctx, const jinja_expr & e, jinja_frame & f) {
    line_scope  ls(ctx, e.line);
    depth_scope ds(ctx);
    jinja_step(ctx);
    switch (e.kind) {
        case jinja_expr_kind::literal: return e.value;
        case jinja_expr_kind::name: {
            if (const jinja_value * v = f.lookup(e.name)) return *v;
            return jinja_value::undefined("'" + e.name + "' is undefined");
        }
        case jinja_expr_kind::list:
        case jinja_expr_kind::tuple: {
            jinja_list items;
            items.reserve(e.args.size());
            for (const auto & a : e.args) items.push_back(eval(ctx, *a, f));
            return e.kind == jinja_expr_kind::list ? jinja_value::make_list(std::move(items)) : jinja_value::make_tuple(std::move(items));
        }
        case jinja_expr_kind::dict: {
            jinja_value d = jinja_value::make_dict();
            for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
                jinja_value key = eval(ctx, *e.args[k], f);
                if (key.kind == jinja_kind::list || key.kind == jinja_kind::dict || key.kind == jinja_kind::ns) {
                    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "unhashable type: '%s'", key.type_name());
                }
                d.dict->set(key, eval(ctx, *e.args[k + 1], f));
            }
            return d;
        }
        case jinja_expr_kind::getattr: return jinja_getattr(ctx, eval(ctx, *e.args[0], f), e.name);
        case jinja_expr_kind::getitem: {
            const jinja_value obj = eval(ctx, *e.args[0], f);
            return jinja_getitem(ctx, obj, eval(ctx, *e.args[1], f));
        }
        case jinja_expr_kind::slice: {
            const jinja_value obj = eval(ctx, *e.args[0], f);
            jinja_value       part[3];
            for (int k = 0; k < 3; k++) part[k] = e.args[1 + k] ? eval(ctx, *e.args[1 + k], f) : jinja_value::none();
            return jinja_slice(ctx, obj, part[0], part[1], part[2]);
        }
        case jinja_expr_kind::call: {
            const jinja_value fn = eval(ctx, *e.args[0], f);
            jinja_call_args   args;
            eval_call_args(ctx, e, 1, f, args);
            return jinja_call(ctx, fn, args);
        }
        case jinja_expr_kind::filter: {
            jinja_value     v = eval(ctx, *e.args[0], f);
            jinja_call_args args;
            eval_call_args(ctx, e, 1, f, args);
            if (!e.filter_fn) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "unknown filter '%s'", e.name.c_str());
            return e.filter_fn(ctx, v, args);
        }
        case jinja_expr_kind::test: {
            const jinja_value v = eval(ctx, *e.args[0], f);
            jinja_call_args   args;
            eval_call_args(ctx, e, 1, f, args);
            if (!e.test_fn) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "unknown test '%s'", e.name.c_str());
            return jinja_value::boolean(e.test_fn(ctx, v, args) != e.negated);
        }
        case jinja_expr_kind::unary: {
            const jinja_value v = eval(ctx, *e.args[0], f);
            if (e.name == "not") return jinja_value::boolean(!jinja_truthy(v));
            if (v.is_undefined()) jinja_fail_undefined(ctx, v);
            if (!v.is_number()) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "bad operand type for unary %s: '%s'", e.name.c_str(), v.type_name());
            if (e.name == "+") return v.kind == jinja_kind::boolean ? jinja_value::integer(v.i) : v;
            if (v.kind == jinja_kind::floating) return jinja_value::floating(-v.f);
            if (v.i == INT64_MIN) jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "integer overflow");
            return jinja_value::integer(-v.i);
        }
        case jinja_expr_kind::binary: {
            jinja_value a = eval(ctx, *e.args[0], f);
            if (e.name == "and") return jinja_truthy(a) ? eval(ctx, *e.args[1], f) : a;
            if (e.name == "or") return jinja_truthy(a) ? a : eval(ctx, *e.args[1], f);
            const jinja_value b = eval(ctx, *e.args[1], f);
            return jinja_binary_op(ctx, e.name, a, b);
        }
        case jinja_expr_kind::compare: {
            jinja_value left = eval(ctx, *e.args[0], f);
            for (size_t k = 0; k < e.ops.size(); k++) {
                jinja_value right = eval(ctx, *e.args[k + 1], f);
                if (!compare_op(ctx, e.ops[k], left, right)) return jinja_value::boolean(false);
                left = std::move(right);
            }
            return jinja_value::boolean(true);
        }
        case jinja_expr_kind::cond: {
            if (jinja_truthy(eval(ctx, *e.args[0], f))) return eval(ctx, *e.args[1], f);
            if (e.args[2]) return eval(ctx, *e.args[2], f);
            return jinja_value::undefined(ember_format("the inline if-expression on line %d evaluated to false and no else section was defined", e.line));
        }
    }
    return jinja_value::undefined();
}

// Python-style unpacking of `v` into `names` (a single name takes the whole value).
void assign_targets(jinja_context & ctx, jinja_frame & f, const std::vector<std::string> & names, const jinja_value & v) {
    if (names.size() == 1) {
        f.set(names[0], v);
        return;
    }
    if (v.is_undefined()) jinja_fail_undefined(ctx, v);
    if (v.kind != jinja_kind::list && v.kind != jinja_kind::tuple && v.kind != jinja_kind::string && v.kind != jinja_kind::dict) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "cannot unpack non-iterable %s object", v.type_name());
    }
    const std::shared_ptr<const jinja_list> items = jinja_iterate(ctx, v);
    if (items->size() != names.size()) {
        jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "%s values to unpack (expected %zu, got %zu)",
                   items->size() > names.size() ? "too many" : "not enough", names.size(), items->size());
    }
    for (size_t k = 0; k < names.size(); k++) f.set(names[k], (*items)[k]);
}

flow exec_for(jinja_context & ctx, const jinja_node & n, jinja_frame & f) {
    const jinja_value                 seq   = eval(ctx, *n.expr, f);
    std::shared_ptr<const jinja_list> items = jinja_iterate(ctx, seq);
    if (n.cond) {
        // `for x in xs if cond`: the filter runs first, so loop.length counts what passes
        auto kept = std::make_shared<jinja_list>();
        for (const jinja_value & item : *items) {
            jinja_step(ctx);
            jinja_frame probe;
            probe.parent = &f;
            assign_targets(ctx, probe, n.targets, item);
            if (jinja_truthy(eval(ctx, *n.cond, probe))) kept->push_back(item);
        }
        items = kept;
    }
    if (items->empty()) {
        jinja_frame inner;
        inner.parent = &f;
        return exec(ctx, n.else_body, inner);  // outside the loop: a break here belongs to an outer loop
    }
    const int64_t len  = int64_t(items->size());
    jinja_value   loop = jinja_value::make_ns();
    jinja_dict &  ld   = *loop.dict;
    auto          counter = std::make_shared<int64_t>(0);
    ld.set("length", jinja_value::integer(len));
    ld.set("depth", jinja_value::integer(1));
    ld.set("depth0", jinja_value::integer(0));
    ld.set("cycle", jinja_value::function("loop.cycle", [counter](jinja_context & c, jinja_call_args & a) {
        if (a.pos.empty()) jinja_fail(c, EMBER_ERR_INVALID_ARG, "no items for cycling given");
        return a.pos[size_t(*counter % int64_t(a.pos.size()))];
    }));
    // the per-iteration fields, updated in place (positions in ld.items never move)
    static const char * const fields[] = {"index0", "index", "revindex", "revindex0", "first", "last", "previtem", "nextitem"};
    size_t                    pos[8];
    for (size_t k = 0; k < 8; k++) {
        pos[k] = ld.items.size();
        ld.set(fields[k], jinja_value::none());
    }
    jinja_frame iter;
    iter.parent = &f;
    for (int64_t k = 0; k < len; k++) {
        jinja_step(ctx);
        *counter                    = k;
        ld.items[pos[0]].second     = jinja_value::integer(k);
        ld.items[pos[1]].second     = jinja_value::integer(k + 1);
        ld.items[pos[2]].second     = jinja_value::integer(len - k);
        ld.items[pos[3]].second     = jinja_value::integer(len - k - 1);
        ld.items[pos[4]].second     = jinja_value::boolean(k == 0);
        ld.items[pos[5]].second     = jinja_value::boolean(k == len - 1);
        ld.items[pos[6]].second     = k > 0 ? (*items)[size_t(k - 1)] : jinja_value::undefined("there is no previous item");
        ld.items[pos[7]].second     = k + 1 < len ? (*items)[size_t(k + 1)] : jinja_value::undefined("there is no next item");
        iter.vars.clear();  // a fresh scope per iteration, reusing the storage
        iter.vars.emplace_back("loop", loop);
        assign_targets(ctx, iter, n.targets, (*items)[size_t(k)]);
        if (exec(ctx, n.body, iter) == flow::brk) break;
    }
    return flow::normal;
}

jinja_value call_macro(jinja_context & ctx, const jinja_node & m, jinja_call_args & args) {
    depth_scope ds(ctx);
    jinja_step(ctx);
    jinja_frame frame;
    frame.parent = ctx.root;
    const size_t n_params = m.params.size();
    std::vector<bool> given(n_params, false);
    jinja_list        varargs;
    for (size_t k = 0; k < args.pos.size(); k++) {
        if (k < n_params) {
            frame.set(m.params[k].first, args.pos[k]);
            given[k] = true;
        } else {
            varargs.push_back(args.pos[k]);
        }
    }
    jinja_value kwargs = jinja_value::make_dict();
    for (auto & kw : args.kw) {
        size_t k = 0;
        while (k < n_params && m.params[k].first != kw.first) k++;
        if (k < n_params) {
            if (given[k]) jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "macro '%s' got multiple values for argument '%s'", m.text.c_str(), kw.first.c_str());
            frame.set(kw.first, kw.second);
            given[k] = true;
        } else if (kw.first == "caller") {  // from a {% call %} block
            frame.set("caller", kw.second);
        } else {
            kwargs.dict->set(kw.first, kw.second);
        }
    }
    for (size_t k = 0; k < n_params; k++) {
        if (given[k]) continue;
        // defaults are evaluated at call time and may use the parameters before them
        frame.set(m.params[k].first, m.params[k].second ? eval(ctx, *m.params[k].second, frame)
                                                         : jinja_value::undefined("parameter '" + m.params[k].first + "' was not provided"));
    }
    frame.set("varargs", jinja_value::make_tuple(std::move(varargs)));
    frame.set("kwargs", kwargs);
    return jinja_value::string(jinja_render_body(ctx, m.body, frame));
}

flow exec_node(jinja_context & ctx, const jinja_node & n, jinja_frame & f) {
    line_scope  ls(ctx, n.line);
    depth_scope ds(ctx);
    jinja_step(ctx);
    switch (n.kind) {
        case jinja_node_kind::text: append_out(ctx, n.text); break;
        case jinja_node_kind::output: append_out(ctx, jinja_str(eval(ctx, *n.expr, f))); break;
        case jinja_node_kind::if_: {
            const jinja_node * branch = &n;
            for (;;) {
                ctx.line = branch->line;
                if (jinja_truthy(eval(ctx, *branch->expr, f))) return exec(ctx, branch->body, f);
                if (branch->else_body.size() != 1 || !branch->else_body[0].elif) return exec(ctx, branch->else_body, f);
                branch = &branch->else_body[0];
            }
        }
        case jinja_node_kind::for_: return exec_for(ctx, n, f);
        case jinja_node_kind::set: {
            jinja_value v = eval(ctx, *n.expr, f);
            if (!n.attr.empty()) {
                jinja_value * ns = f.lookup(n.targets[0]);
                if (!ns || ns->kind != jinja_kind::ns) {
                    jinja_fail(ctx, EMBER_ERR_INVALID_ARG, "cannot assign attribute on non-namespace object '%s'", n.targets[0].c_str());
                }
                // A namespace that would hold itself: Python allows the cycle; here it would never
                // be freed (shared references), so it is refused. The walk counts as steps.
                uint64_t visited = 0;
                const bool cycle = jinja_reaches(v, ns->dict.get(), &visited);
                jinja_step(ctx, visited);
                if (cycle) {
                    jinja_fail(ctx, EMBER_ERR_UNSUPPORTED, "'%s.%s' would hold '%s' itself (a reference cycle)", n.targets[0].c_str(),
                               n.attr.c_str(), n.targets[0].c_str());
                }
                ns->dict->set(n.attr, std::move(v));
            } else {
                assign_targets(ctx, f, n.targets, v);
            }
            break;
        }
        case jinja_node_kind::set_block: {
            jinja_frame inner;
            inner.parent = &f;
            jinja_value v = jinja_value::string(jinja_render_body(ctx, n.body, inner));
            if (n.expr) {
                inner.set(JINJA_BLOCK_VALUE_NAME, v);
                v = eval(ctx, *n.expr, inner);
            }
            f.set(n.targets[0], std::move(v));
            break;
        }
        case jinja_node_kind::macro: {
            const jinja_node * m = &n;
            f.set(n.text, jinja_value::function(n.text, [m](jinja_context & c, jinja_call_args & a) { return call_macro(c, *m, a); }));
            break;
        }
        case jinja_node_kind::call_block: {
            const jinja_node * body  = &n;
            jinja_frame *      outer = &f;
            // caller() reads the call block's frame: once the block has ended (a caller kept in a
            // namespace and called later) it fails instead of reading a frame that is gone.
            const auto        live   = std::make_shared<bool>(true);
            const jinja_value caller = jinja_value::function("caller", [body, outer, live](jinja_context & c, jinja_call_args & a) {
                if (!*live) jinja_fail(c, EMBER_ERR_UNSUPPORTED, "caller() called after its call block ended");
                jinja_frame frame;
                frame.parent = outer;
                for (size_t k = 0; k < body->params.size(); k++) {
                    const auto & p = body->params[k];
                    if (k < a.pos.size()) frame.set(p.first, a.pos[k]);
                    else frame.set(p.first, p.second ? eval(c, *p.second, frame) : jinja_value::undefined("'" + p.first + "' is undefined"));
                }
                for (auto & kw : a.kw) frame.set(kw.first, kw.second);
                return jinja_value::string(jinja_render_body(c, body->body, frame));
            });
            const jinja_expr & call = *n.expr;
            const jinja_value  fn   = eval(ctx, *call.args[0], f);
            jinja_call_args    args;
            eval_call_args(ctx, call, 1, f, args);
            args.kw.emplace_back("caller", caller);
            struct end_of_block {
                const std::shared_ptr<bool> & live;
                ~end_of_block() { *live = false; }
            } const ended{live};
            append_out(ctx, jinja_str(jinja_call(ctx, fn, args)));
            break;
        }
        case jinja_node_kind::filter_block: {
            jinja_frame inner;
            inner.parent = &f;
            inner.set(JINJA_BLOCK_VALUE_NAME, jinja_value::string(jinja_render_body(ctx, n.body, inner)));
            append_out(ctx, jinja_str(eval(ctx, *n.expr, inner)));
            break;
        }
        case jinja_node_kind::with: {
            jinja_frame inner;
            inner.parent = &f;
            for (const auto & p : n.params) inner.set(p.first, eval(ctx, *p.second, f));
            return exec(ctx, n.body, inner);
        }
        case jinja_node_kind::break_: return flow::brk;
        case jinja_node_kind::continue_: return flow::cont;
    }
    return flow::normal;
}

flow exec(jinja_context & ctx, const std::vector<jinja_node> & body, jinja_frame & f) {
    for (const jinja_node & n : body) {
        const flow fl = exec_node(ctx, n, f);
        if (fl != flow::normal) return fl;
    }
    return flow::normal;
}

}  // namespace

std::string jinja_render_body(jinja_context & ctx, const std::vector<jinja_node> & body, jinja_frame & frame) {
    std::string saved;
    saved.swap(ctx.out);
    exec(ctx, body, frame);  // break/continue cannot cross a body (the parser checks)
    saved.swap(ctx.out);
    return saved;
}

//
// Entry points
//
ember_jinja_template::~ember_jinja_template() = default;

std::unique_ptr<ember_jinja_template> ember_jinja_compile(const std::string & source) {
    auto t   = std::make_unique<ember_jinja_template>();
    t->nodes = jinja_parse(jinja_lex(source));
    return t;
}

std::string ember_jinja_render(const ember_jinja_template & tmpl, const jinja_value & vars, const ember_jinja_options & opt) {
    jinja_context ctx{opt, {}, 0, 0, 0, nullptr};
    if (!vars.is_dict()) ember_throw(EMBER_ERR_INVALID_ARG, "chat template variables must be a JSON object");
    jinja_frame globals;
    jinja_add_globals(globals);
    jinja_frame top;
    top.parent = &globals;
    for (const auto & kv : vars.dict->items) {
        if (kv.first.is_string()) top.set(kv.first.s, kv.second);
    }
    ctx.root = &top;
    exec(ctx, tmpl.nodes, top);
    return std::move(ctx.out);
}

std::string ember_jinja_render_json(const std::string & source, const std::string & vars_json, const ember_jinja_options & opt) {
    const jinja_value vars = jinja_from_json(ember_json_parse(vars_json));
    if (!vars.is_dict()) ember_throw(EMBER_ERR_INVALID_ARG, "chat template variables must be a JSON object");
    return ember_jinja_render(*ember_jinja_compile(source), vars, opt);
}
