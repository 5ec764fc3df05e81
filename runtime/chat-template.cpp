// Built-in chat templates and the model's template and special tokens (see chat-template.h).
#include "runtime/chat-template.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "runtime/error.h"
#include "runtime/model.h"

namespace {

// The families' official templates for plain system/user/assistant conversations. Where the
// official template rejects a system message (Gemma, early Mistral), the system text goes in
// front of the first user message, as the families' later templates do.
struct builtin_template {
    const char * name;
    const char * text;
};

const builtin_template k_builtins[] = {
    {"llama3",
     "{% set loop_messages = messages %}"
     "{% for message in loop_messages %}"
     "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}"
     "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
     "{{ content }}"
     "{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
    {"chatml",
     "{% for message in messages %}"
     "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
     "{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
    {"mistral",
     "{%- if messages[0]['role'] == 'system' %}\n"
     "    {%- set system_message = messages[0]['content'] %}\n"
     "    {%- set loop_messages = messages[1:] %}\n"
     "{%- else %}\n"
     "    {%- set loop_messages = messages %}\n"
     "{%- endif %}\n"
     "{{- bos_token }}\n"
     "{%- for message in loop_messages %}\n"
     "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
     "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
     "    {%- endif %}\n"
     "    {%- if message['role'] == 'user' %}\n"
     "        {%- if loop.first and system_message is defined %}\n"
     "            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
     "        {%- else %}\n"
     "            {{- '[INST] ' + message['content'] + ' [/INST]' }}\n"
     "        {%- endif %}\n"
     "    {%- elif message['role'] == 'assistant' %}\n"
     "        {{- ' ' + message['content'] + eos_token }}\n"
     "    {%- else %}\n"
     "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"},
    {"gemma",
     "{{ bos_token }}\n"
     "{%- if messages[0]['role'] == 'system' -%}\n"
     "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
     "    {%- set loop_messages = messages[1:] -%}\n"
     "{%- else -%}\n"
     "    {%- set first_user_prefix = '' -%}\n"
     "    {%- set loop_messages = messages -%}\n"
     "{%- endif -%}\n"
     "{%- for message in loop_messages -%}\n"
     "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
     "        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
     "    {%- endif -%}\n"
     "    {%- if message['role'] == 'assistant' -%}\n"
     "        {%- set role = 'model' -%}\n"
     "    {%- else -%}\n"
     "        {%- set role = message['role'] -%}\n"
     "    {%- endif -%}\n"
     "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}\n"
     "    {{ '<start_of_turn>model\\n' }}\n"
     "{%- endif -%}\n"},
    {"phi3",
     "{% for message in messages %}"
     "{% if message['role'] == 'system' and message['content'] %}{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
     "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
     "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}"
     "{% endif %}"
     "{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"},
};

}  // namespace

const char * ember_chat_builtin(const char * name) {
    if (!name) return nullptr;
    for (const builtin_template & b : k_builtins) {
        if (std::strcmp(name, b.name) == 0) return b.text;
    }
    return nullptr;
}

bool ember_chat_model_template(const ember_model & model, std::string & out) {
    if (!model.gguf) return false;
    const ember_gguf_value * v = model.gguf->find("tokenizer.chat_template");
    if (!v) return false;
    if (v->type != EMBER_GGUF_STRING) ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.chat_template is not a string");
    out = v->str;
    return true;
}

std::string ember_chat_model_token_text(const ember_model & model, const char * id_key) {
    if (!model.gguf) return "";
    const ember_gguf_value * id     = model.gguf->find(id_key);
    const ember_gguf_value * tokens = model.gguf->find("tokenizer.ggml.tokens");
    if (!id || !id->is_integer() || !tokens || tokens->type != EMBER_GGUF_ARRAY || tokens->arr_type != EMBER_GGUF_STRING) return "";
    const int64_t k = id->as_i64(id_key);
    if (k < 0 || uint64_t(k) >= tokens->arr_str.size()) return "";
    return tokens->arr_str[size_t(k)];
}

ember_jinja_options ember_chat_default_options() {
    ember_jinja_options opt;
    const char *        sde = std::getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) {
        char *          end = nullptr;
        errno               = 0;
        const long long t   = std::strtoll(sde, &end, 10);
        if (errno == 0 && end && *end == '\0') {
            const std::time_t tt = static_cast<std::time_t>(t);
            if (gmtime_r(&tt, &opt.now)) opt.has_now = true;
        }
    }
    return opt;
}

std::string ember_chat_apply(const ember_model * model, const char * tmpl, const ember_chat_message * messages, size_t n_messages,
                             bool add_generation_prompt, const ember_jinja_options & opt) {
    std::string source;
    if (tmpl) {
        source = tmpl;
    } else if (!model) {
        ember_throw(EMBER_ERR_INVALID_ARG, "no chat template given and no model to take one from");
    } else if (!ember_chat_model_template(*model, source)) {
        ember_throw(EMBER_ERR_INVALID_ARG, "the model has no chat template");
    }
    jinja_list msgs;
    msgs.reserve(n_messages);
    for (size_t k = 0; k < n_messages; k++) {
        if (!messages[k].role) ember_throw(EMBER_ERR_INVALID_ARG, "messages[%zu].role is NULL", k);
        jinja_value m = jinja_value::make_dict();
        m.dict->set("role", jinja_value::string(messages[k].role));
        m.dict->set("content", messages[k].content ? jinja_value::string(messages[k].content) : jinja_value::none());
        msgs.push_back(std::move(m));
    }
    jinja_value vars = jinja_value::make_dict();
    vars.dict->set("messages", jinja_value::make_list(std::move(msgs)));
    vars.dict->set("tools", jinja_value::none());
    vars.dict->set("documents", jinja_value::none());
    vars.dict->set("add_generation_prompt", jinja_value::boolean(add_generation_prompt));
    vars.dict->set("bos_token", jinja_value::string(model ? ember_chat_model_token_text(*model, "tokenizer.ggml.bos_token_id") : ""));
    vars.dict->set("eos_token", jinja_value::string(model ? ember_chat_model_token_text(*model, "tokenizer.ggml.eos_token_id") : ""));
    return ember_jinja_render(*ember_jinja_compile(source), vars, opt);
}
