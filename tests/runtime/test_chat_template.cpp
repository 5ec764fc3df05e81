// Chat templates through the C API: the reference renderings of real models' templates
// (fixtures/templates), a model's own template and special tokens from its GGUF, built-in
// templates, snprintf-style output and errors.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"
#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/jinja.h"
#include "runtime/json.h"
#include "support/data-path.h"

namespace {

const char * const k_fixture_names[] = {
    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",                  "microsoft-Phi-3.5-mini-instruct",  "google-gemma-2-2b-it",
    "mistralai-Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "HuggingFaceTB-SmolLM3-3B",
    "ibm-granite-granite-3.3-2B-Instruct",
};

// 2024-07-26 00:00 UTC: the date the fixtures' strftime_now renderings used.
const char * const k_fixture_epoch = "1721952000";

std::string slurp(const std::string & path) {
    std::ifstream     f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Sets an environment variable for the life of the object, then restores it.
struct scoped_env {
    std::string name, old;
    bool        had;
    scoped_env(const char * n, const char * value) : name(n) {
        const char * o = std::getenv(n);
        had            = o != nullptr;
        if (had) old = o;
        setenv(n, value, 1);
    }
    ~scoped_env() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

// The case's template variables: every field but name and expected.
std::string case_variables(const ember_json & c) {
    ember_json vars;
    vars.kind = EMBER_JSON_OBJECT;
    for (const auto & kv : c.obj) {
        if (kv.first != "name" && kv.first != "expected") vars.obj.push_back(kv);
    }
    return ember_json_dump(vars);
}

// ember_chat_render_json into a std::string, sized by a first call; "(error) ..." on failure.
std::string render_json(const std::string & tmpl, const std::string & vars) {
    const int32_t n = ember_chat_render_json(tmpl.c_str(), vars.c_str(), nullptr, 0);
    if (n < 0) return std::string("(error) ") + ember_last_error();
    std::string out(size_t(n) + 1, '\0');
    if (ember_chat_render_json(tmpl.c_str(), vars.c_str(), &out[0], n + 1) != n) return "(error) second call differs";
    out.resize(size_t(n));
    return out;
}

std::string apply(const ember_model * model, const char * tmpl, const std::vector<ember_chat_message> & msgs, bool add_gen) {
    const int32_t n = ember_chat_apply_template(model, tmpl, msgs.data(), msgs.size(), add_gen, nullptr, 0);
    if (n < 0) return std::string("(error) ") + ember_last_error();
    std::string out(size_t(n) + 1, '\0');
    if (ember_chat_apply_template(model, tmpl, msgs.data(), msgs.size(), add_gen, &out[0], n + 1) != n) return "(error) second call differs";
    out.resize(size_t(n));
    return out;
}

// A tensor-less GGUF with a tokenizer and, optionally, a chat template; loaded vocab-only.
ember_model * write_and_load(const std::string & name, const char * chat_template) {
    ember_gguf_writer w;
    w.set_str("general.architecture", "llama");
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<|im_end|>", "hello"});
    w.set_arr_f32("tokenizer.ggml.scores", {0, 0, 0, 0, -1});
    w.set_arr_i32("tokenizer.ggml.token_type", {2, 3, 3, 3, 1});
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    if (chat_template) w.set_str("tokenizer.chat_template", chat_template);
    const std::string path = ember_test_tmp_dir() + "/" + name;
    w.write_to_file(path);
    ember_model_params mp = ember_model_default_params();
    mp.vocab_only         = 1;
    ember_model * m       = nullptr;
    const ember_status st = ember_model_load(path.c_str(), &mp, &m);
    INFO("load: ", ember_last_error());
    REQUIRE(st == EMBER_OK);
    return m;
}

}  // namespace

TEST_SUITE("chat") {

TEST_CASE("[jinja] fixture templates render byte-exact, through the library and the C API") {
    const std::string dir = ember_test_data_path("fixtures/templates");
    if (dir.empty()) {
        MESSAGE("skipped: no fixtures/templates (pass --data-dir)");
        return;
    }
    scoped_env pin("SOURCE_DATE_EPOCH", k_fixture_epoch);
    ember_jinja_options opt;
    opt.has_now     = true;
    opt.now.tm_year = 2024 - 1900;
    opt.now.tm_mon  = 6;
    opt.now.tm_mday = 26;
    opt.now.tm_wday = 5;
    opt.now.tm_yday = 207;

    int n_cases = 0, n_files = 0;
    for (const char * name : k_fixture_names) {
        CAPTURE(name);
        const std::string tmpl = slurp(dir + "/" + name + ".jinja");
        REQUIRE(!tmpl.empty());
        const ember_json cases = ember_json_parse(slurp(dir + "/" + name + ".cases.json"));
        REQUIRE(cases.kind == EMBER_JSON_ARRAY);
        const auto compiled = ember_jinja_compile(tmpl);
        for (const ember_json & c : cases.arr) {
            const std::string case_name = c.find("name")->str;
            CAPTURE(case_name);
            const std::string & expected = c.find("expected")->str;
            const std::string   vars     = case_variables(c);
            CHECK(render_json(tmpl, vars) == expected);
            CHECK(ember_jinja_render(*compiled, jinja_from_json(ember_json_parse(vars)), opt) == expected);
            n_cases++;
        }
        n_files++;
    }
    CHECK(n_files == 10);
    CHECK(n_cases == 55);
}

TEST_CASE("[jinja] ember_chat_apply_template with a model's own template and tokens") {
    ember_model * m = write_and_load("chat-model.gguf",
                                     "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"
                                     "{% if add_generation_prompt %}[assistant]{% endif %}");
    const std::vector<ember_chat_message> msgs = {{"system", "Be brief."}, {"user", "hello"}};
    CHECK(apply(m, nullptr, msgs, true) == "<s>[system]Be brief.<|im_end|>[user]hello<|im_end|>[assistant]");
    CHECK(apply(m, nullptr, msgs, false) == "<s>[system]Be brief.<|im_end|>[user]hello<|im_end|>");
    // an explicit template wins over the model's, and still gets the model's tokens
    CHECK(apply(m, "{{ bos_token }}|{{ eos_token }}|{{ messages|length }}", msgs, false) == "<s>|<|im_end|>|2");
    // transformers passes tools=None and documents=None
    CHECK(apply(m, "{{ tools is none }}{{ documents is none }}{{ custom is defined }}", msgs, false) == "TrueTrueFalse");
    // a NULL content is None
    const std::vector<ember_chat_message> null_content = {{"assistant", nullptr}};
    CHECK(apply(m, "{{ messages[0].content is none }}", null_content, false) == "True");
    // no messages at all
    CHECK(apply(m, "[{{ messages|length }}]", {}, true) == "[0]");
    ember_model_free(m);

    ember_model * bare = write_and_load("chat-model-no-template.gguf", nullptr);
    CHECK(apply(bare, nullptr, msgs, true) == "(error) the model has no chat template");
    CHECK(apply(bare, "ok", msgs, true) == "ok");
    ember_model_free(bare);

    // without a model the tokens are empty
    CHECK(apply(nullptr, "[{{ bos_token }}][{{ eos_token }}]", msgs, true) == "[][]");
}

#ifdef EMBER_SOURCE_DIR
TEST_CASE("[jinja] the default model's own template renders") {
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/models/ember-kjv-25m-q8_0.gguf";
    ember_model_params mp = ember_model_default_params();
    mp.vocab_only         = 1;
    ember_model * m       = nullptr;
    if (ember_model_load(path.c_str(), &mp, &m) != EMBER_OK) {
        MESSAGE("skipped: cannot load ", path, ": ", ember_last_error());
        return;
    }
    if (ember_model_meta_val_str(m, "tokenizer.chat_template", nullptr, 0) < 0) {
        MESSAGE("skipped: the default model has no tokenizer.chat_template");
        ember_model_free(m);
        return;
    }
    const std::vector<ember_chat_message> msgs = {{"user", "In the beginning"}, {"assistant", " God created"}, {"user", "And"}};
    CHECK(apply(m, nullptr, msgs, true) == "In the beginning God created\n\nAnd");
    ember_model_free(m);
}
#endif

TEST_CASE("[jinja] output is snprintf style") {
    const char *  tmpl = "{{ 'abcdef' }}";
    char          buf[16];
    std::memset(buf, 'x', sizeof(buf));
    CHECK(ember_chat_render_json(tmpl, "{}", nullptr, 0) == 6);
    CHECK(ember_chat_render_json(tmpl, "{}", buf, 4) == 6);  // the full length, the text cut
    CHECK(std::string(buf) == "abc");
    CHECK(ember_chat_render_json(tmpl, "{}", buf, 6) == 6);
    CHECK(std::string(buf) == "abcde");
    CHECK(ember_chat_render_json(tmpl, "{}", buf, 7) == 6);
    CHECK(std::string(buf) == "abcdef");
    CHECK(ember_chat_render_json(tmpl, "{}", buf, 1) == 6);
    CHECK(buf[0] == '\0');
    CHECK(ember_chat_render_json(tmpl, "{}", buf, -1) == -1);
    CHECK(ember_chat_render_json(tmpl, "{}", nullptr, 5) == -1);
    CHECK(std::string(ember_last_error()).find("buf") != std::string::npos);

    const ember_chat_message msg = {"user", "hi"};
    CHECK(ember_chat_apply_template(nullptr, "{{ messages[0].content }}", &msg, 1, 0, buf, 2) == 2);
    CHECK(std::string(buf) == "h");
}

TEST_CASE("[jinja] C API errors: -1 and a last error naming the problem") {
    CHECK(ember_chat_render_json("{{ raise_exception('Conversation roles must alternate') }}", "{}", nullptr, 0) == -1);
    CHECK(std::string(ember_last_error()) == "Conversation roles must alternate");
    CHECK(ember_chat_render_json("x\n{{ y|nope }}", "{}", nullptr, 0) == -1);
    CHECK(std::string(ember_last_error()) == "chat template line 2: unknown filter 'nope'");
    CHECK(ember_chat_render_json("x", "{\"a\": }", nullptr, 0) == -1);
    CHECK(std::string(ember_last_error()).find("JSON") != std::string::npos);
    CHECK(ember_chat_render_json("x", "[]", nullptr, 0) == -1);
    CHECK(ember_chat_render_json(nullptr, "{}", nullptr, 0) == -1);
    CHECK(ember_chat_render_json("x", nullptr, nullptr, 0) == -1);
    // success clears the last error
    CHECK(ember_chat_render_json("x", "{}", nullptr, 0) == 1);
    CHECK(std::string(ember_last_error()).empty());

    const ember_chat_message msg = {"user", "hi"};
    CHECK(ember_chat_apply_template(nullptr, nullptr, &msg, 1, 1, nullptr, 0) == -1);
    CHECK(ember_chat_apply_template(nullptr, "x", nullptr, 1, 1, nullptr, 0) == -1);
    const ember_chat_message no_role = {nullptr, "hi"};
    CHECK(ember_chat_apply_template(nullptr, "x", &no_role, 1, 1, nullptr, 0) == -1);
    CHECK(std::string(ember_last_error()).find("role") != std::string::npos);
}

TEST_CASE("[jinja] built-in templates") {
    for (const char * name : {"llama3", "chatml", "mistral", "gemma", "phi3"}) {
        CAPTURE(name);
        const char * t = ember_chat_builtin_template(name);
        REQUIRE(t != nullptr);
        CHECK(ember_jinja_compile(t) != nullptr);
    }
    CHECK(ember_chat_builtin_template("nope") == nullptr);
    CHECK(std::string(ember_last_error()).find("nope") != std::string::npos);
    CHECK(ember_chat_builtin_template(nullptr) == nullptr);

    const std::string vars = R"({"messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";
    CHECK(render_json(ember_chat_builtin_template("llama3"), vars) ==
          "<s><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(render_json(ember_chat_builtin_template("chatml"), vars) ==
          "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    CHECK(render_json(ember_chat_builtin_template("mistral"), vars) == "<s>[INST] Sys\n\n Hi  [/INST] Hello</s>[INST] Bye [/INST]");
    CHECK(render_json(ember_chat_builtin_template("gemma"), vars) ==
          "<s><start_of_turn>user\nSys\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"
          "<start_of_turn>model\n");
    CHECK(render_json(ember_chat_builtin_template("phi3"), vars) ==
          "<|system|>\nSys<|end|>\n<|user|>\n Hi <|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
    // alternation is enforced as the official templates do
    CHECK(render_json(ember_chat_builtin_template("gemma"), R"({"messages": [{"role": "assistant", "content": "x"}]})") ==
          "(error) Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST_CASE("[jinja] built-in gemma and phi3 agree with the official templates on their fixtures") {
    const std::string dir = ember_test_data_path("fixtures/templates");
    if (dir.empty()) {
        MESSAGE("skipped: no fixtures/templates (pass --data-dir)");
        return;
    }
    const std::pair<const char *, const char *> pairs[] = {{"gemma", "google-gemma-2-2b-it"}, {"phi3", "microsoft-Phi-3.5-mini-instruct"}};
    for (const auto & p : pairs) {
        CAPTURE(p.first);
        const ember_json cases = ember_json_parse(slurp(dir + "/" + p.second + ".cases.json"));
        for (const ember_json & c : cases.arr) {
            if (c.find("name")->str == "tool_call") continue;
            CAPTURE(c.find("name")->str);
            CHECK(render_json(ember_chat_builtin_template(p.first), case_variables(c)) == c.find("expected")->str);
        }
    }
}

}  // TEST_SUITE
