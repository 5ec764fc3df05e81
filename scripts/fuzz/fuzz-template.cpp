// Mutation fuzzing of the chat template interpreter under ASan + UBSan (scripts/fuzz.sh): the
// built-in templates and one that uses most constructs, mutated with Jinja tokens, deletions,
// random bytes and copied spans, rendered with messages and with JSON variables. The template
// being rendered is at /tmp/ember-fuzz/template-SEED.txt when a sanitizer stops the run.
//     fuzz-template SEED ITERATIONS
#include <ember.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
int main(int argc, char ** argv) {
    uint64_t seed = strtoull(argv[1], 0, 10);
    int iters = atoi(argv[2]);
    ember_log_set([](int32_t, const char *, void *) {}, nullptr);
    std::vector<std::string> base;
    for (const char * n : {"llama3", "chatml", "mistral", "gemma", "phi3"}) base.push_back(ember_chat_builtin_template(n));
    base.push_back("{% for m in messages %}{{ m.role | upper }}:{{ m.content[1:] ~ loop.index }}{% if not loop.last %},{% endif %}{% endfor %}{% set x = namespace(a=1) %}{% set x.a = x.a + 1 %}{{ x.a }}{{ messages | map(attribute='role') | join('-') }}{{ range(3) | list | tojson }}{{ {'a': [1,2,{'b': none}]} | tojson(indent=2) }}{% macro f(a, b=2) %}{{ a * b }}{% endmacro %}{{ f(3) }}{{ 'abc'.split('b') }}{{ '%s-%d' % ('x', 3) }}{{ messages[0]['content'] is string }}{{ 10 // 3 }}{{ 2 ** 10 }}{{ -1 | abs }}{% raw %}{{x}}{% endraw %}{{ 'A' if true else 'B' }}{%- if messages|length > 1 -%}many{%- endif -%}");
    static const char * toks[] = {"{%", "%}", "{{", "}}", "{#", "#}", " for ", " in ", " if ", " endif ", " endfor ", " else ", " set ", "(", ")", "[", "]", "{", "}", "|", "'", "\"", ".", ",", ":", "~", "+", "*", "**", "//", "%", "-", "loop", "messages", "namespace(", "range(999999999)", "recursive", " macro ", " endmacro ", " call ", " filter ", "\\", "\n", "\xff", "0", "1e308", "-", "is ", "not ", "none", "}}{{", "{%-", "-%}", "[::-1]", "[1:2:0]", "tojson", "items()", "join", "map", "select", "selectattr", "raise_exception('x')", "strftime_now('%Y')", "x.y.z", "a=", "*args", "**kw"};
    std::mt19937_64 rng(seed);
    char * buf = (char *)malloc(1 << 16);
    for (int it = 0; it < iters; it++) {
        std::string t = base[rng() % base.size()];
        int nm = 1 + rng() % 5;
        for (int m = 0; m < nm; m++) {
            size_t pos = t.empty() ? 0 : rng() % (t.size() + 1);
            switch (rng() % 4) {
            case 0: t.insert(pos, toks[rng() % (sizeof toks / sizeof *toks)]); break;
            case 1: if (pos < t.size()) t.erase(pos, 1 + rng() % 8); break;
            case 2: if (pos < t.size()) t[pos] = char(rng()); break;
            case 3: { size_t src = rng() % (t.size() + 1), n = rng() % 40; if (src < t.size()) t.insert(pos, t.substr(src, n)); break; }
            }
        }
        ember_chat_message msgs[3] = {{"system", "sys"}, {"user", "hi there"}, {"assistant", "ok"}};
        FILE * f = fopen(("/tmp/ember-fuzz/template-" + std::to_string(seed) + ".txt").c_str(), "wb"); fwrite(t.data(), 1, t.size(), f); fclose(f);
        ember_chat_apply_template(nullptr, t.c_str(), msgs, 1 + rng() % 3, rng() % 2, buf, 1 << 16);
        ember_chat_render_json(t.c_str(), "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}], \"tools\": [{\"type\": \"function\"}], \"add_generation_prompt\": true}", buf, 1 << 16);
    }
    free(buf);
    printf("seed %llu done\n", (unsigned long long)seed);
}
