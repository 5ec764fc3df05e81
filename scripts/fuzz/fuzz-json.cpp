// Mutation fuzzing of the JSON variables of ember_chat_render_json under ASan + UBSan
// (scripts/fuzz.sh): escapes, surrogates, huge numbers, truncation, random bytes.
//     fuzz-json SEED ITERATIONS
#include <ember.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
int main(int argc, char ** argv) {
    ember_log_set([](int32_t, const char *, void *) {}, nullptr);
    uint64_t seed = strtoull(argv[1], 0, 10); int iters = atoi(argv[2]);
    std::mt19937_64 rng(seed);
    const std::string base = "{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9llo \\ud83d\\ude00\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5e10, -0.0, true, null]}}}]}], \"tools\": [], \"add_generation_prompt\": true, \"x\": 1e308, \"y\": -9223372036854775808}";
    static const char * toks[] = {"{", "}", "[", "]", "\"", "\\", "\\u", "\\ud800", ",", ":", "1e99999", "-", "0", "00", "true", "nul", "\xff", "\xc0\x80", " ", "9999999999999999999999"};
    const char * tmpl = "{% for m in messages %}{{ m.role }}{{ m.content }}{{ m | tojson }}{% endfor %}{{ tools|tojson }}{{ x }}{{ y }}{{ x * 2 }}{{ y - 1 }}{{ y // -1 }}";
    static char buf[1 << 16];
    for (int it = 0; it < iters; it++) {
        std::string j = base;
        int nm = 1 + rng() % 4;
        for (int m = 0; m < nm; m++) {
            size_t pos = rng() % (j.size() + 1);
            switch (rng() % 3) {
            case 0: j.insert(pos, toks[rng() % 20]); break;
            case 1: if (pos < j.size()) j.erase(pos, 1 + rng() % 6); break;
            case 2: if (pos < j.size()) j[pos] = char(rng()); break;
            }
        }
        ember_chat_render_json(tmpl, j.c_str(), buf, sizeof buf);
    }
    printf("ok\n");
}
