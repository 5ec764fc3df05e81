// Chat-template failures: syntax errors and unsupported constructs name the construct and
// its line; Python errors while rendering are errors; raise_exception carries the template's
// message; and hostile templates hit a limit and fail cleanly instead of hanging or crashing.
#include <doctest/doctest.h>

#include <string>

#include "runtime/error.h"
#include "runtime/jinja.h"

namespace {

struct failure {
    ember_status status = EMBER_OK;
    std::string  message;
};

// The error rendering raises, or status EMBER_OK with the output when it renders.
failure render_error(const std::string & tmpl, const std::string & vars = "{}", const ember_jinja_options & opt = {}) {
    try {
        const std::string out = ember_jinja_render_json(tmpl, vars, opt);
        return {EMBER_OK, "(rendered) " + out};
    } catch (const ember_error & e) {
        return {e.status, e.what()};
    }
}

bool contains(const std::string & s, const std::string & needle) { return s.find(needle) != std::string::npos; }

#define CHECK_FAILS(tmpl, status_, needle)                      \
    do {                                                        \
        const failure f_ = render_error(tmpl);                  \
        INFO("template: ", tmpl, "\nmessage: ", f_.message);   \
        CHECK(f_.status == (status_));                          \
        CHECK(contains(f_.message, needle));                    \
    } while (0)

}  // namespace

TEST_SUITE("chat") {

TEST_CASE("[jinja] unknown filters, tests and tags name the construct and the line") {
    CHECK_FAILS("line 1\nline 2\n{{ x | foo }}", EMBER_ERR_UNSUPPORTED, "chat template line 3: unknown filter 'foo'");
    CHECK_FAILS("{% if x is wobbly %}{% endif %}", EMBER_ERR_UNSUPPORTED, "chat template line 1: unknown test 'wobbly'");
    // like jinja2, an unknown filter fails even where it never runs (outside an if)
    CHECK_FAILS("{% for m in [] %}\n{{ m | foo }}\n{% endfor %}", EMBER_ERR_UNSUPPORTED, "line 2: unknown filter 'foo'");
    CHECK_FAILS("\n{% include 'other.jinja' %}", EMBER_ERR_UNSUPPORTED, "chat template line 2: unsupported tag 'include'");
    CHECK_FAILS("{% extends 'base' %}", EMBER_ERR_UNSUPPORTED, "unsupported tag 'extends'");
    CHECK_FAILS("{% for x in y recursive %}{% endfor %}", EMBER_ERR_UNSUPPORTED, "recursive loops are not supported");
    CHECK_FAILS("{% frobnicate %}", EMBER_ERR_INVALID_ARG, "chat template line 1: unknown tag 'frobnicate'");
    // inside an if (jinja2's "soft" frame) the error waits until the filter runs...
    CHECK_FAILS("{% if true %}\n{{ x | foo }}{% endif %}", EMBER_ERR_UNSUPPORTED, "chat template line 2: unknown filter 'foo'");
    CHECK_FAILS("{{ 'a' if x is wobbly else 'b' }}", EMBER_ERR_UNSUPPORTED, "unknown test 'wobbly'");
    // ...but a loop or macro body inside the if is its own frame again
    CHECK_FAILS("{% if false %}{% for i in [] %}{{ i|foo }}{% endfor %}{% endif %}", EMBER_ERR_UNSUPPORTED, "unknown filter 'foo'");
    CHECK_FAILS("{{ f(*args) }}", EMBER_ERR_UNSUPPORTED, "*args and **kwargs in calls are not supported");
}

TEST_CASE("[jinja] syntax errors name the line") {
    CHECK_FAILS("{{ }}", EMBER_ERR_INVALID_ARG, "line 1: unexpected '}}', expected an expression");
    CHECK_FAILS("a\n{% if x %}\nb", EMBER_ERR_INVALID_ARG, "unexpected end of template, expected 'endif'");
    CHECK_FAILS("{% for x in y %}{% endif %}", EMBER_ERR_INVALID_ARG, "unknown tag 'endif'");
    CHECK_FAILS("\n\n{{ (1 }}", EMBER_ERR_INVALID_ARG, "line 3: unexpected '}', expected ')'");
    CHECK_FAILS("{{ 'abc }}", EMBER_ERR_INVALID_ARG, "unterminated string literal");
    CHECK_FAILS("{# never closed", EMBER_ERR_INVALID_ARG, "missing end of comment tag");
    CHECK_FAILS("{% raw %}xx", EMBER_ERR_INVALID_ARG, "missing end of raw directive");
    CHECK_FAILS("{% break %}", EMBER_ERR_INVALID_ARG, "'break' outside of a loop");
    CHECK_FAILS("{{ x y }}", EMBER_ERR_INVALID_ARG, "unexpected 'y', expected '}}'");
    CHECK_FAILS("{% if x %}{% else %}{% else %}{% endif %}", EMBER_ERR_INVALID_ARG, "unknown tag 'else'");
    CHECK_FAILS("{{ f(a=1, 2) }}", EMBER_ERR_INVALID_ARG, "positional argument after a keyword argument");
}

TEST_CASE("[jinja] Python errors while rendering are errors, with the line") {
    CHECK_FAILS("{{ x.y.z }}", EMBER_ERR_INVALID_ARG, "'x' is undefined");
    CHECK_FAILS("ok\n{{ foo + 1 }}", EMBER_ERR_INVALID_ARG, "chat template line 2: 'foo' is undefined");
    CHECK_FAILS("{{ foo() }}", EMBER_ERR_INVALID_ARG, "'foo' is undefined");
    CHECK_FAILS("{{ 'a' + 1 }}", EMBER_ERR_INVALID_ARG, "can only concatenate str (not \"int\") to str");
    CHECK_FAILS("{{ 1 / 0 }}", EMBER_ERR_INVALID_ARG, "division by zero");
    CHECK_FAILS("{{ 'a' < 1 }}", EMBER_ERR_INVALID_ARG, "'<' not supported between instances of 'str' and 'int'");
    CHECK_FAILS("{{ 'x'() }}", EMBER_ERR_INVALID_ARG, "'str' object is not callable");
    CHECK_FAILS("{% for x in none %}{% endfor %}", EMBER_ERR_INVALID_ARG, "'NoneType' object is not iterable");
    CHECK_FAILS("{{ missing|tojson }}", EMBER_ERR_INVALID_ARG, "Object of type Undefined is not JSON serializable");
    CHECK_FAILS("{% set a, b = [1] %}", EMBER_ERR_INVALID_ARG, "not enough values to unpack");
    CHECK_FAILS("{% set x = 1 %}{% set x.a = 2 %}", EMBER_ERR_INVALID_ARG, "cannot assign attribute on non-namespace object");
    // transformers' sandbox is immutable: list.append and dict.update are refused
    CHECK_FAILS("{% set l = [] %}{% set _ = l.append(1) %}", EMBER_ERR_INVALID_ARG, "access to attribute 'append' of 'list' object is unsafe");
    CHECK_FAILS("{{ {}.update({}) }}", EMBER_ERR_INVALID_ARG, "access to attribute 'update' of 'dict' object is unsafe");
    CHECK_FAILS("{{ 9223372036854775807 + 1 }}", EMBER_ERR_UNSUPPORTED, "integer overflow");
    // a test given the wrong number of arguments is a TypeError
    CHECK_FAILS("{{ x is string 'a' }}", EMBER_ERR_INVALID_ARG, "takes 0 arguments (1 given)");
    CHECK_FAILS("{{ x is defined not }}", EMBER_ERR_INVALID_ARG, "takes 0 arguments (1 given)");
    CHECK_FAILS("{{ 1 is divisibleby }}", EMBER_ERR_INVALID_ARG, "takes 1 argument (0 given)");
    // jinja2 slices with Python's obj[a:b] directly: no undefined fallback
    CHECK_FAILS("{% set d = {'a': 1} %}{{ d[1:] }}", EMBER_ERR_INVALID_ARG, "unhashable type: 'slice'");
    CHECK_FAILS("{% set b = true %}{{ b[1:] }}", EMBER_ERR_INVALID_ARG, "'bool' object is not subscriptable");
    // merely naming an unsafe attribute or an undefined value is fine, as in jinja2
    CHECK(render_error("{{ [].append is defined }}|{{ missing }}").message == "(rendered) False|");
}

TEST_CASE("[jinja] raise_exception stops rendering with the template's own message") {
    const failure f = render_error("before{{ raise_exception('System role not supported') }}after");
    CHECK(f.status == EMBER_ERR_INVALID_ARG);
    CHECK(f.message == "System role not supported");

    // the Gemma pattern: raise only for some inputs
    const char * gemma = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}ok";
    CHECK(render_error(gemma, R"({"messages": [{"role": "user"}]})").message == "(rendered) ok");
    CHECK(render_error(gemma, R"({"messages": [{"role": "system"}]})").message == "no system");
}

TEST_CASE("[jinja] bad variables JSON is an error") {
    CHECK(render_error("x", "[1, 2]").status == EMBER_ERR_INVALID_ARG);
    const failure f = render_error("x", "{\"a\": ");
    CHECK(f.status == EMBER_ERR_INVALID_ARG);
    CHECK(contains(f.message, "JSON line 1"));
}

TEST_CASE("[jinja] hostile templates fail cleanly") {
    SUBCASE("range(10**9) is refused up front, as the sandbox does") {
        CHECK_FAILS("{% for i in range(10**9) %}x{% endfor %}", EMBER_ERR_INVALID_ARG, "Range too big");
    }
    SUBCASE("nested loops hit the step limit") {
        ember_jinja_options opt;
        opt.max_steps   = 200000;
        const failure f = render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", opt);
        CHECK(f.status == EMBER_ERR_INVALID_ARG);
        CHECK(contains(f.message, "steps"));
    }
    SUBCASE("the default limits stop a quadrillion-step loop in reasonable time") {
        const failure f = render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
                                       "{% endfor %}{% endfor %}{% endfor %}");
        CHECK(f.status == EMBER_ERR_INVALID_ARG);
    }
    SUBCASE("output larger than the limit") {
        ember_jinja_options opt;
        opt.max_output  = 1 << 20;
        const failure f = render_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "{}", opt);
        CHECK(f.status == EMBER_ERR_INVALID_ARG);
        CHECK(contains(f.message, "larger than the limit"));
    }
    SUBCASE("string and list bombs fail before they allocate") {
        CHECK_FAILS("{{ 'x' * 100000 * 100000 * 100000 }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{{ [1] * 1000000000 }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{% set s = 'x' * 1000000 %}{{ s|replace('x', s) }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{% set s = 'x' * 1000000 %}{{ s.replace('x', s) }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{{ 'x'|center(10**12) }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{{ [[[[[1]]]]]|tojson(indent=100000000) }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{% set s = 'x\\n' * 1000000 %}{{ s|indent(1000) }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
        CHECK_FAILS("{{ '%999999999999d' % 1 }}", EMBER_ERR_INVALID_ARG, "larger than the limit");
    }
    SUBCASE("deep nesting in the source is refused by the parser") {
        std::string deep;
        for (int k = 0; k < 5000; k++) deep += "(";
        deep = "{{ " + deep + "1";
        for (int k = 0; k < 5000; k++) deep += ")";
        deep += " }}";
        CHECK(render_error(deep).status == EMBER_ERR_INVALID_ARG);

        std::string ifs;
        for (int k = 0; k < 5000; k++) ifs += "{% if true %}";
        for (int k = 0; k < 5000; k++) ifs += "{% endif %}";
        CHECK(render_error(ifs).status == EMBER_ERR_INVALID_ARG);

        std::string nots = "{{ ";
        for (int k = 0; k < 100000; k++) nots += "not ";
        CHECK(render_error(nots + "1 }}").status == EMBER_ERR_INVALID_ARG);
    }
    SUBCASE("runaway macro recursion hits the depth limit") {
        CHECK_FAILS("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", EMBER_ERR_INVALID_ARG, "nesting deeper than");
    }
    SUBCASE("exponential macro fan-out hits the step limit") {
        ember_jinja_options opt;
        opt.max_steps   = 1000000;
        const failure f = render_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(24) }}", "{}", opt);
        CHECK(f.status == EMBER_ERR_INVALID_ARG);
        CHECK(contains(f.message, "steps"));
    }
    SUBCASE("deeply nested JSON input") {
        std::string json = "{\"a\": ";
        for (int k = 0; k < 100000; k++) json += "[";
        CHECK(render_error("x", json).status == EMBER_ERR_INVALID_ARG);
    }
    // Found by mutation fuzzing of the built-in templates under ASan (session 63): each of these
    // overflowed the stack, leaked or read a frame that was gone.
    SUBCASE("a namespace that would hold itself is refused (the cycle would never be freed)") {
        CHECK_FAILS("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns.a }}", EMBER_ERR_UNSUPPORTED, "reference cycle");
        CHECK_FAILS("{% set ns = namespace(a=1) %}{% set ns.b = [1, {'x': ns}] %}", EMBER_ERR_UNSUPPORTED, "'ns.b' would hold 'ns'");
        // through another namespace, a loop object, and a bound method's object
        CHECK_FAILS("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}", EMBER_ERR_UNSUPPORTED, "reference cycle");
        CHECK_FAILS("{% for x in [1] %}{% set loop.me = [loop] %}{% endfor %}", EMBER_ERR_UNSUPPORTED, "reference cycle");
        CHECK_FAILS("{% set ns = namespace() %}{% set d = {'n': [ns]} %}{% set ns.f = d.get %}", EMBER_ERR_UNSUPPORTED, "reference cycle");
        // sharing without a cycle is fine
        const failure f = render_error("{% set a = namespace(v=1) %}{% set b = namespace(x=a, y=a) %}{% set a.v = [b.x.v, b.y.v] %}{{ a.v }}");
        CHECK(f.message == "(rendered) [1, 1]");
    }
    SUBCASE("values nested past the limit fail when printed or compared, and are freed without recursion") {
        std::string t = "{% set x = 1 %}";
        for (int k = 0; k < 60000; k++) t += "{% set x = [x] %}";
        CHECK(render_error(t + "{{ x|length }}").message == "(rendered) 1");  // built and freed: 60000 levels
        CHECK_FAILS(t + "{{ x }}", EMBER_ERR_INVALID_ARG, "nested more than");
        CHECK_FAILS(t + "{{ x == x[0] }}", EMBER_ERR_INVALID_ARG, "nested more than");
        CHECK_FAILS(t + "{{ x < x[0] }}", EMBER_ERR_INVALID_ARG, "nested more than");
        // a chain of 100000 namespaces, each holding the next
        const failure f = render_error("{% set ns = namespace(cur=namespace()) %}{% for i in range(100000) %}{% set nxt = namespace() %}"
                                       "{% set tmp = ns.cur %}{% set tmp.c = nxt %}{% set ns.cur = nxt %}{% endfor %}ok");
        CHECK(f.message == "(rendered) ok");
    }
    SUBCASE("comparing values of shared parts with 2^40 paths stops at the walk limit") {
        CHECK_FAILS("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}"
                    "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
                    EMBER_ERR_INVALID_ARG, "visited more than");
    }
    SUBCASE("caller() kept past its call block fails instead of reading the block's frame") {
        CHECK_FAILS("{% set ns = namespace(c=0) %}{% macro m() %}{% set ns.c = caller %}{% endmacro %}"
                    "{% for i in [1] %}{% set z = 'inner' %}{% call m() %}[{{ z }}]{% endcall %}{% endfor %}{{ ns.c() }}",
                    EMBER_ERR_UNSUPPORTED, "after its call block ended");
        // inside its block it works
        const failure f = render_error("{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}x{% endcall %}");
        CHECK(f.message == "(rendered) <x>");
    }
    SUBCASE("garbage bytes in the template") {
        std::string junk;
        for (int k = 0; k < 4096; k++) junk += char((k * 131 + 7) & 0xFF);
        const failure f = render_error("{{ " + junk + " }}");
        CHECK(f.status != EMBER_OK);
        CHECK(f.status != EMBER_ERR_INTERNAL);
    }
}

}  // TEST_SUITE
