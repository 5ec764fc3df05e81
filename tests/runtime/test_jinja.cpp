// The chat-template interpreter construct by construct. Every expected string is what
// Python's jinja2 renders in transformers' configuration (trim_blocks, lstrip_blocks,
// loopcontrols, transformers' tojson), written out by hand from jinja2's semantics.
#include <doctest/doctest.h>

#include <string>

#include "runtime/error.h"
#include "runtime/jinja.h"

namespace {

struct render_case {
    const char * tmpl;
    const char * vars;  // JSON object
    const char * expected;
};

ember_jinja_options pinned_options() {
    ember_jinja_options o;
    o.has_now     = true;
    o.now.tm_year = 2024 - 1900;
    o.now.tm_mon  = 6;  // July
    o.now.tm_mday = 26;
    o.now.tm_wday = 5;  // Friday
    o.now.tm_yday = 207;
    return o;
}

std::string render(const std::string & tmpl, const std::string & vars = "{}") {
    return ember_jinja_render_json(tmpl, vars, pinned_options());
}

void check_cases(const render_case * cases, size_t n) {
    for (size_t k = 0; k < n; k++) {
        const render_case & c = cases[k];
        CAPTURE(c.tmpl);
        CAPTURE(c.vars);
        std::string got;
        try {
            got = render(c.tmpl, c.vars);
        } catch (const ember_error & e) {
            got = std::string("(error) ") + e.what();
        }
        CHECK(got == c.expected);
    }
}

#define CHECK_CASES(table) check_cases(table, sizeof(table) / sizeof(table[0]))

}  // namespace

TEST_SUITE("chat") {

TEST_CASE("[jinja] whitespace control: trim_blocks, lstrip_blocks, - and + markers") {
    static const render_case cases[] = {
        // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it
        {R"J(a
  {% if true %}
    b
  {% endif %}
c)J", "{}", "a\n    b\nc"},
        // lstrip_blocks leaves {{ }} alone, and text before a tag on the same line
        {"  {{ 'x' }}  \n  {% if 1 %}y{% endif %}", "{}", "  x  \ny"},
        {"a  {% if true %}b{% endif %}  \n  c", "{}", "a  b  \n  c"},
        {"x\n  {# comment #}\n  y", "{}", "x\n  y"},
        // "-" strips all whitespace (newlines too) on its side
        {"x {%- if 1 -%} \n y \n {%- endif -%} z", "{}", "xyz"},
        {"a {{- ' b ' -}} c", "{}", "a b c"},
        {"x {#- c -#} y", "{}", "xy"},
        // "+" turns lstrip_blocks and trim_blocks off for that tag
        {"x {%+ if 1 %} y {% endif +%}\nz", "{}", "x  y \nz"},
        // a single trailing newline of the template is dropped; \r\n is normalised
        {"trailing\n\n", "{}", "trailing\n"},
        {"l1\r\nl2\r\n{% if 1 %}\r\nx\r\n{% endif %}\r\n", "{}", "l1\nl2\nx\n"},
        // lstrip_blocks strips Unicode spaces too (U+3000), as Python's \s does
        {"\xE3\x80\x80{% if 1 %}x{% endif %}", "{}", "x"},
        {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "{}", "  1\n  2\n"},
        {"{%- set x = 5 -%}\n\n   {{- x -}}   \n\n", "{}", "5"},
        {"a\n    {%- if true %}\n  b\n{%- endif %}\nc", "{}", "a  bc"},
        // raw: the body is text; the opening tag has no trim_blocks
        {"{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}"},
        {"  {% raw %}\n {{ x }} \n  {% endraw %}\nq", "{}", "\n {{ x }} \nq"},
        {"{# a comment {{ x }} #}y", "{}", "y"},
        {"{% generation %}gen {{ 1 }}{% endgeneration %}", "{}", "gen 1"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] literals and printing follow Python's str()") {
    static const render_case cases[] = {
        {R"J({{ 'a\nb\t\x41\u00e9\\' }}|{{ "q'" }}|{{ 'x' 'y' }})J", "{}", "a\nb\tA\xC3\xA9\\|q'|xy"},
        {"{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1.5e3 }}|{{ 1e-7 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}", "{}",
         "1000|31|15|5|1500.0|1e-07|0.30000000000000004|0.3333333333333333"},
        {"{{ 1.0 }} {{ 1e16 }} {{ 1.5e16 }} {{ 123456789.123 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 10 / 2 }}", "{}",
         "1.0 1e+16 1.5e+16 123456789.123 0.0001 1e-05 -0.0 5.0"},
        {"{{ true }}{{ False }}{{ none }}{{ None }}", "{}", "TrueFalseNoneNone"},
        {"{{ [1, 'a', none, true, 1.0, [2], {'k': 'v'}] }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}", "{}",
         "[1, 'a', None, True, 1.0, [2], {'k': 'v'}]|(1,)|(1, 2)|()"},
        {R"J({{ ["it's", 'say "hi"', 'both \' "'] }})J", "{}", R"J(["it's", 'say "hi"', 'both \' "'])J"},
        {"{{ x }}|{{ x is none }}", R"J({"x": null})J", "None|True"},
        {"[{{ missing }}]", "{}", "[]"},
        // a backslash before a non-ASCII character keeps its escape (jinja2's backslashreplace decoding)
        {"{{ '\\\xEF\xBD\x9C' }}|{{ 'caf\xC3\xA9' }}", "{}", "\\uff5c|caf\xC3\xA9"},
        // names may use any script
        {"{% set caf\xC3\xA9 = 1 %}{{ caf\xC3\xA9 }}{{ \xCE\xB1\xCE\xB2 is defined }}", "{}", "1False"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] operators: arithmetic, comparison, logic, membership") {
    static const render_case cases[] = {
        {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 10 / 4 }} {{ 3 * 'ab' }} {{ [0] * 3 }}", "{}",
         "3 -4 1 2 1.5 1024 2.5 ababab [0, 0, 0]"},
        // jinja2's ** is left-associative; unary minus binds tighter than **
        {"{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ -7.5 // 2 }}", "{}", "3 9 64 4 -4.0"},
        {"{{ 'a' ~ 1 ~ none ~ true ~ missing }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}", "{}", "a1NoneTrue|[1, 2]|ab"},
        {"{{ 1 == 1.0 }} {{ [1,2] == [1,2] }} {{ (1, 2) == [1, 2] }} {{ {'a':1} == {'a':1} }} {{ true == 1 }} {{ 1 != 2 }}", "{}",
         "True True False True True True"},
        {"{{ 'b' > 'a' }} {{ [1,2] < [1,3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ not 1 == 2 }}", "{}", "True True True False True"},
        {"{{ 'ab' in 'xaby' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1] }} {{ 'a' in missing }}", "{}",
         "True True True True False"},
        {"{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 1 }}|{{ none or [] }}|{{ not [] }}", "{}", "x|y||[]|True"},
        {"{{ x if x else 'no' }}|{{ 'yes' if 1 }}|{{ 'a' if 0 else 'b' if 0 else 'c' }}|[{{ 'n' if 0 }}]", "{}", "no|yes|c|[]"},
        // filters bind tighter than the operators around them
        {"{{ '<' + ' x '|trim + '>' }}|{{ 2 * 3 ~ 4 }}|{{ 'a' ~ 2 * 3 }}", "{}", "<x>|64|a6"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] attribute, item and slice access") {
    static const render_case cases[] = {
        {"{{ x.y }}|{{ x['y'] }}|{{ x.z }}|{{ x['z'] }}", R"J({"x": {"y": 5}})J", "5|5||"},
        {"{{ l[0] }}{{ l[-1] }}{{ l[5] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[:-1] }}|{{ l[::2] }}|{{ l[5:] }}|{{ l[-10:2] }}|{{ l.0 }}",
         R"J({"l": [1, 2, 3, 4]})J", "14|[2, 3, 4]|[4, 3, 2, 1]|[1, 2, 3]|[1, 3]|[]|[1, 2]|1"},
        // strings index and slice by code point
        {"{{ s[0] }}|{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s|length }}|{{ s[10] }}", R"J({"s": "h\u00e9llo\ud83d\udc4b"})J",
         "h|\xF0\x9F\x91\x8B|\xC3\xA9l|\xF0\x9F\x91\x8Boll\xC3\xA9h|6|"},
        // attribute of None or of a missing key is undefined, not an error
        {"{{ none.x }}|{{ x.missing.y is defined }}", R"J({"x": {"missing": null}})J", "|False"},
        {"{{ d.items()|list }}|{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d.keys()|list }}|{{ d.values()|list }}",
         R"J({"d": {"a": 1, "b": 2}})J", "[('a', 1), ('b', 2)]|1|None|dflt|['a', 'b']|[1, 2]"},
        // a dict's methods shadow its keys for '.', not for []
        {"{{ d['items'] }}|{{ d.items is defined }}", R"J({"d": {"items": "key"}})J", "key|True"},
        {"{{ {'a': {'b': 1}}['a']['b'] }}{{ {1: 'x'}[1.0] }}{{ {1: 'x'}[true] }}", "{}", "1xx"},
        // x[] is x[()]: no such item
        {"[{{ l[] }}]", R"J({"l": [1]})J", "[]"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] if, for, loop variables, break and continue") {
    static const render_case cases[] = {
        {"{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}", R"J({"a": 0, "b": 0, "c": 1})J", "C"},
        {"{% if a %}A{% elif b %}B{% else %}D{% endif %}", "{}", "D"},
        {"{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }}{{ m.role }};{% endfor %}",
         R"J({"msgs": [{"role": "s"}, {"role": "u"}]})J", "1021TrueFalse2s;2110FalseTrue2u;"},
        {"{% for m in l %}{{ loop.previtem if loop.previtem is defined else '-' }}>{{ loop.nextitem if loop.nextitem is defined else '-' }};"
         "{% endfor %}",
         R"J({"l": [1, 2, 3]})J", "->2;1>3;2>-;"},
        // the inline filter runs first: loop.index and loop.length count what passes it
        {"{% for m in l if m != 2 %}{{ loop.index }}/{{ loop.length }}:{{ m }} {% endfor %}", R"J({"l": [1, 2, 3]})J", "1/2:1 2/2:3 "},
        {"{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}a{% else %}filtered{% endfor %}", "{}", "empty|filtered"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}",
         R"J({"d": {"z": 1, "a": 2, "m": 3}})J", "z=1,a=2,m=3,|zam|z1a2m3"},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'h\u00e9' %}[{{ c }}]{% endfor %}", "{}", "37|[h][\xC3\xA9]"},
        {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}", "0134"},
        {"{% for i in range(3) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}", "{}",
         "00 10 20 "},
        {"{% for x in [1, 2] %}{{ loop.cycle('a', 'b') }}{% endfor %}|{% for x in missing %}never{% endfor %}", "{}", "ab|"},
        // Python-style colons before %} are accepted, as jinja2 does
        {"{% if x: %}a{% elif y: %}b{% else: %}c{% endif %}{% for i in [1]: %}{{ i }}{% endfor %}", R"J({"y": 1})J", "b1"},
        // an unknown filter or test inside an if or a conditional expression fails only when it runs
        {"{% if false %}{{ x|no_such_filter }}{% elif false and x is no_such_test %}{% endif %}{{ y|nope if false else 'ok' }}", "{}", "ok"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] scoping: set, namespace, block set, with") {
    static const render_case cases[] = {
        // a set inside a loop body lasts for that iteration only
        {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }};{% endfor %}{{ x }}", "{}", "12;13;1"},
        // ...while a set inside an if is in the enclosing scope
        {"{% set t = 'a' %}{% set t = t ~ 'b' %}{{ t }}{% if true %}{% set t = 'c' %}{% endif %}{{ t }}", "{}", "abc"},
        {"{% set ns = namespace(c=0, items=[]) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}|{{ ns.items }}", "{}",
         "6|[]"},
        {"{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}[{{ ns.b }}]", "{}", "x[]"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}", "{}", "1234"},
        {"{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]|{% set y | upper %}up{% endset %}{{ y }}", "{}", "[inner 2]|UP"},
        {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "{}", "3[]"},
        // a template may rebind its own inputs
        {"{{ messages[0] }}{% set messages = messages[1:] %}{{ messages|length }}", R"J({"messages": [1, 2, 3]})J", "12"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] macros, call blocks and filter blocks") {
    static const render_case cases[] = {
        {"{% macro m(a, b='B', c=none) %}<{{ a }}|{{ b }}|{{ c }}|{{ varargs }}|{{ kwargs }}>{% endmacro %}"
         "{{ m(1) }}{{ m(1, 2, 3, 4) }}{{ m(1, c=5, z=6) }}{{ m() }}",
         "{}", "<1|B|None|()|{}><1|2|3|(4,)|{}><1|B|5|()|{'z': 6}><|B|None|()|{}>"},
        {"{% macro greet(name) %}Hi {{ name }}{% if caller is defined %}: {{ caller() }}{% endif %}{% endmacro %}"
         "{% call greet('bob') %}inside{% endcall %}",
         "{}", "Hi bob: inside"},
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", "{}", "54321"},
        // macros see the template's top-level names as they are when called
        {"{% macro m() %}{{ g }}{% endmacro %}{% set g = 1 %}{{ m() }}{% set g = 2 %}{{ m() }}", "{}", "12"},
        {"{% filter upper %}abc {{ 'd' }}{% endfilter %}", "{}", "ABC D"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] string filters") {
    static const render_case cases[] = {
        // trim strips exactly what str.strip() strips: Unicode whitespace, \r and \x1c included
        {"[{{ s|trim }}]|{{ 'xxhixx'|trim('x') }}", R"J({"s": "\u3000\u00a0 hi \r\n\u001c"})J", "[hi]|hi"},
        {"{{ 'Hello'|lower }}{{ 'Hello'|upper }}{{ 'hello world'|capitalize }}|{{ 'hello wORLD-x (y'|title }}", "{}",
         "helloHELLOHello world|Hello World-X (Y"},
        {"{{ '\xC3\x89" "COLE'|lower }}|{{ 'stra\xC3\x9F' + 'e'|upper }}|{{ 'stra\xC3\x9F'|upper }}", "{}", "\xC3\xA9" "cole|stra\xC3\x9F" "E|STRASS"},
        {"{{ 'aXbX'|replace('X', '-') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|replace('', '-') }}", "{}", "a-b-|bba|-a-b-"},
        {"{{ [1, 2, 3]|join(', ') }}|{{ ['a', 'b']|join }}|{{ l|join('/', attribute='n') }}", R"J({"l": [{"n": "x"}, {"n": "y"}]})J",
         "1, 2, 3|ab|x/y"},
        {"{{ 'x'|string }}{{ 1|string }}{{ none|string }}{{ [1]|string }}|{{ 1|safe }}", "{}", "x1None[1]|1"},
        {R"J({{ '<a href="x">&'|e }}|{{ "'"|escape }})J", "{}", "&lt;a href=&#34;x&#34;&gt;&amp;|&#39;"},
        {R"J({{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ') }})J", "{}",
         "a\n    b\n\n    c|  a\n  b|a\n  \n  b|a\n> b"},
        {"{{ 'x'|center(7) }}|{{ 'ab'|center(7) }}|{{ '%s-%s'|format(1, 'a') }}|{{ '%(a)s'|format(a=2) }}", "{}", "   x   |   ab  |1-a|2"},
        {"{{ 'abc'|reverse }}|{{ 'abc'|list }}|{{ 'abc'|first }}{{ 'abc'|last }}|{{ 'h\xC3\xA9llo'|length }}", "{}", "cba|['a', 'b', 'c']|ac|5"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] sequence and mapping filters") {
    static const render_case cases[] = {
        {"{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ 0|d('z', boolean=true) }}|{{ 'v'|default('d') }}", "{}",
         "d|None|d|z|v"},
        {"{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}[{{ []|first }}]{{ {'a': 1}|first }}|{{ [3, 1, 2]|length }}{{ {'a': 1}|count }}", "{}",
         "32[]a|31"},
        {"{{ {'b': 1, 'a': 2}|items|list }}|{{ {'b': 1}|list }}|{{ missing|items|list }}|{{ missing|list }}|{{ missing|length }}", "{}",
         "[('b', 1), ('a', 2)]|['b']|[]|[]|0"},
        {"{{ u|selectattr('active')|map(attribute='name')|list }}|{{ u|rejectattr('active')|map(attribute='name')|join(',') }}"
         "|{{ u|selectattr('role', 'equalto', 'admin')|list|length }}|{{ u|map(attribute='missing', default='?')|list }}",
         R"J({"u": [{"name": "a", "active": true, "role": "admin"}, {"name": "b", "active": false, "role": "user"}]})J",
         "['a']|b|1|['?', '?']"},
        {"{{ [1, 2, 3, 4, 5, 6]|select('even')|list }}|{{ [1, 2, 3]|reject('odd')|list }}|{{ [0, 1, '']|select|list }}"
         "|{{ ['a', 'b']|map('upper')|list }}|{{ [1, 2, 3]|reject('equalto', 2)|list }}",
         "{}", "[2, 4, 6]|[2]|[1]|['A', 'B']|[1, 3]"},
        {"{{ ['b', 'A', 'c', 'a']|unique|list }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}"
         "|{{ [3, 1, 2]|sort(reverse=true) }}|{{ u|sort(attribute='n')|map(attribute='n')|join }}",
         R"J({"u": [{"n": "z"}, {"n": "b"}]})J", "['b', 'A', 'c']|[1, 2, 3]|['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1]|bz"},
        {"{{ {'b': 1, 'a': 2, 'C': 0}|dictsort }}|{{ {'b': 1, 'a': 2}|dictsort(by='value') }}|{{ [1, 2, 3]|reverse|list }}", "{}",
         "[('a', 2), ('b', 1), ('C', 0)]|[('b', 1), ('a', 2)]|[3, 2, 1]"},
        {"{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 'x')|list }}", "{}", "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 'x']]"},
        {"{{ [3, 1, 2]|max }}{{ [3, 1, 2]|min }}{{ ['b', 'A']|max }}|{{ [1, 2, 3]|sum }}|{{ [{'v': 1}, {'v': 2}]|sum(attribute='v') }}", "{}",
         "31b|6|3"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] number filters") {
    static const render_case cases[] = {
        {"{{ '42'|int }}|{{ '4.7'|int }}|{{ 'abc'|int }}|{{ 'abc'|int(5) }}|{{ 4.9|int }}|{{ '0x10'|int(base=16) }}|{{ ' 1_000 '|int }}|{{ none|int }}",
         "{}", "42|4|0|5|4|16|1000|0"},
        {"{{ '3.5'|float }}|{{ 'x'|float }}|{{ 2|float }}|{{ '1e3'|float }}|{{ 'inf'|float }}", "{}", "3.5|0.0|2.0|1000.0|inf"},
        // Python's round: half to even on the exact binary value; an int stays an int
        {"{{ -3|abs }}|{{ -2.5|abs }}|{{ 3.14159|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 7|round }}"
         "|{{ 3.14159|round(2, 'floor') }}|{{ 3.1|round(0, 'ceil') }}|{{ 1234|round(-2) }}",
         "{}", "3|2.5|3.14|2.0|4.0|2.67|7|3.14|4.0|1200"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] tojson is json.dumps(ensure_ascii=False) with Python's separators") {
    static const render_case cases[] = {
        {"{{ d|tojson }}", R"J({"d": {"z": [1, 2.5, "\u00e9\n\"\\\u0001", null, true, false, {}, []], "a": {"x": -0.0, "y": 1e100}}})J",
         R"J({"z": [1, 2.5, "é\n\"\\\u0001", null, true, false, {}, []], "a": {"x": -0.0, "y": 1e+100}})J"},
        {"{{ d|tojson(indent=2) }}", R"J({"d": {"a": [1, {"c": []}], "b": {}}})J",
         "{\n  \"a\": [\n    1,\n    {\n      \"c\": []\n    }\n  ],\n  \"b\": {}\n}"},
        {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ {'b': 1, 'a': [2]}|tojson(separators=(',', ':')) }}|{{ '\xC3\xA9'|tojson(ensure_ascii=true) }}",
         "{}", R"J({"a": 2, "b": 1}|{"b":1,"a":[2]}|"\u00e9")J"},
        {"{{ 'str'|tojson }}|{{ 5|tojson }}|{{ none|tojson }}|{{ {1: 2, none: 3, 1.5: 4}|tojson }}|{{ {'a': 1}|tojson(indent='\\t') }}", "{}",
         "\"str\"|5|null|{\"1\": 2, \"null\": 3, \"1.5\": 4}|{\n\t\"a\": 1\n}"},
        // key order is the input's: this is what tool schemas rely on
        {"{{ t|tojson }}", R"J({"t": {"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}})J",
         R"J({"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}})J"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] tests (is / is not)") {
    static const render_case cases[] = {
        {"{{ 1 is odd }}{{ 2 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'a' is string }}{{ 1 is number }}{{ 1.0 is float }}"
         "{{ 1 is integer }}{{ true is boolean }}{{ true is integer }}{{ true is number }}",
         "{}", "TrueTrueTrueFalseTrueTrueTrueTrueTrueFalseTrue"},
        {"{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ 'a' is sequence }}"
         "{{ {} is sequence }}{{ none is none }}{{ 0 is none }}",
         "{}", "TrueFalseTrueTrueFalseTrueTrueTrueFalse"},
        {"{{ 'a' is lower }}{{ 'A' is upper }}{{ 'aB' is lower }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 1 is in [1] }}"
         "{{ x is sameas none }}{{ true is sameas true }}",
         R"J({"x": null})J", "TrueTrueFalseTrueTrueTrueTrueTrueTrueTrue"},
        {"{{ false is false }}{{ 0 is false }}{{ true is true }}{{ x is defined }}{{ x is not defined }}{{ y is undefined }}"
         "{{ 'upper' is filter }}{{ 'odd' is test }}{{ range is callable }}",
         R"J({"x": 1})J", "TrueFalseTrueTrueFalseTrueTrueTrueTrue"},
        // a string is iterable but not a mapping (Llama 3.x tool results rely on this)
        {"{{ v is string }}|{{ v is not string }}|{{ v is mapping or v is iterable }}|{{ missing is iterable }}", R"J({"v": "text"})J",
         "True|False|True|True"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] str, dict and list methods") {
    static const render_case cases[] = {
        {"[{{ s.strip() }}]|[{{ s.lstrip() }}]|[{{ s.rstrip() }}]|{{ 'xyhixy'.strip('xy') }}|{{ 'aab'.lstrip('a') }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}",
         R"J({"s": " \t hi \n "})J", "[hi]|[hi \n ]|[ \t hi]|hi|b|x\n"},
        {"{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ ' a b  c '.rsplit(None, 1) }}"
         "|{{ '  a b  c  '.split(None, 1) }}|{{ ''.split() }}|{{ ''.split(',') }}",
         "{}", "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|[' a b', 'c']|['a', 'b  c  ']|[]|['']"},
        {"{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
         R"J({"c": "<think>\nreason\n</think>\n\nanswer"})J", "answer|reason"},
        {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.startswith('b', 1) }}", "{}",
         "TrueTrueTrueTrue"},
        {"{{ 'hello'.replace('l', 'L') }}|{{ 'hello'.replace('l', 'L', 1) }}|{{ 'Hello'.upper() }}|{{ 'Hello'.lower() }}"
         "|{{ \"they're bill's\".title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aBc'.swapcase() }}",
         "{}", "heLLo|heLlo|HELLO|hello|They'Re Bill'S|Hello|AbC"},
        {"{{ 'h\xC3\xA9llo'.find('l') }}|{{ 'hello'.find('z') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.count('l') }}|{{ ', '.join(['a', 'b']) }}", "{}",
         "2|-1|3|2|a, b"},
        {"{{ '{} {}'.format(1, 2) }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{name}!'.format(name='x') }}|{{ '{:>4}|{:^5}'.format('a', 'c') }}"
         "|{{ '{:.3f}|{:05d}'.format(3.14159, 42) }}",
         "{}", "1 2|aba|x!|   a|  c  |3.142|00042"},
        {"{{ '%s and %s' % ('a', 'b') }}|{{ '%d%%' % 50 }}|{{ '%5.2f|%-5s|%05d|%x|%r' % (3.14159, 'ab', 42, 255, 'q') }}|{{ '%(k)s' % {'k': 'v'} }}",
         "{}", "a and b|50%| 3.14|ab   |00042|ff|'q'|v"},
        {"{{ 'a=b=c'.partition('=') }}|{{ '42'.zfill(5) }}|{{ '123'.isdigit() }}|{{ [1, 2, 1].count(1) }}|{{ [1, 2].index(2) }}", "{}",
         "('a', '=', 'b=c')|00042|True|2|1"},
        // iterating a str or a dict makes a fresh sequence: these must not read freed memory
        {"{{ '-'.join('abc') }}|{{ '-'.join({'x': 1, 'y': 2}) }}|{{ 'abc'|join('.') }}|{{ {'b': 1, 'a': 2}|sort }}|{{ 'bca'|unique|list }}", "{}",
         "a-b-c|x-y|a.b.c|['a', 'b']|['b', 'c', 'a']"},
        {"{{ '{:,}|{:_}|{:,.2f}|{:>10,}'.format(1234567, 1000, 1234.5, 99999) }}|{{ '%s|' % missing }}", "{}", "1,234,567|1_000|1,234.50|    99,999||"},
        // attr() is Python's getattr: a dict's keys are not attributes
        {"{{ d|attr('role') }}|{{ d|attr('items') is defined }}|{{ 'a'|attr('upper')() }}", R"J({"d": {"role": "user"}})J", "|True|A"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] globals: range, dict, namespace, joiner, strftime_now") {
    static const render_case cases[] = {
        {"{% for i in range(2, 10, 3) %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|{{ range(3)|list }}", "{}",
         "258|531|[0, 1, 2]"},
        {"{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}|{% set j = joiner(', ') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %}", "{}",
         "{'a': 1, 'b': 2}|1|1, 2, 3"},
        {"{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%A %a %j %m %y') }}|{{ strftime_now('%-d/%-m') }}", "{}",
         "26 Jul 2024|July 26, 2024|Friday Fri 208 07 24|26/7"},
    };
    CHECK_CASES(cases);
}

TEST_CASE("[jinja] a compiled template renders the same every time") {
    const auto tmpl = ember_jinja_compile("{% for m in messages %}{{ m.role }}:{{ m.content|trim }};{% endfor %}");
    jinja_value vars = jinja_value::make_dict();
    jinja_value msgs = jinja_value::make_list();
    for (int k = 0; k < 3; k++) {
        jinja_value m = jinja_value::make_dict();
        m.dict->set("role", jinja_value::string(k % 2 ? "assistant" : "user"));
        m.dict->set("content", jinja_value::string(" m" + std::to_string(k) + " "));
        msgs.list->push_back(m);
    }
    vars.dict->set("messages", msgs);
    const std::string a = ember_jinja_render(*tmpl, vars);
    CHECK(a == "user:m0;assistant:m1;user:m2;");
    CHECK(ember_jinja_render(*tmpl, vars) == a);
}

}  // TEST_SUITE
