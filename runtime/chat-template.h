// Chat templates: built-in templates by family, the model's own template and special-token
// text from its GGUF metadata, and rendering a conversation the way transformers'
// apply_chat_template(..., tokenize=False) does.
#ifndef EMBER_RUNTIME_CHAT_TEMPLATE_H
#define EMBER_RUNTIME_CHAT_TEMPLATE_H

#include <cstddef>
#include <string>

#include "ember.h"
#include "runtime/jinja.h"

struct ember_model;

// A built-in template ("llama3", "chatml", "mistral", "gemma", "phi3"), or nullptr.
const char * ember_chat_builtin(const char * name);

// tokenizer.chat_template of the model's GGUF; false when absent.
bool ember_chat_model_template(const ember_model & model, std::string & out);

// The text of the token whose id is stored under `id_key` (tokenizer.ggml.bos_token_id,
// tokenizer.ggml.eos_token_id), read from tokenizer.ggml.tokens; "" when either is missing.
std::string ember_chat_model_token_text(const ember_model & model, const char * id_key);

// Render options for the C API: strftime_now uses SOURCE_DATE_EPOCH (seconds, UTC) when that
// environment variable is set to an integer, so renderings can be reproduced; else the local time.
ember_jinja_options ember_chat_default_options();

// Renders `messages` with a template (tmpl, or the model's when tmpl is nullptr). The
// variables are those transformers passes: messages, add_generation_prompt, bos_token,
// eos_token (the model's, "" without one), tools = None and documents = None. A message
// with content nullptr gets content None. Throws ember_error.
std::string ember_chat_apply(const ember_model * model, const char * tmpl, const ember_chat_message * messages, size_t n_messages,
                             bool add_generation_prompt, const ember_jinja_options & opt);

#endif  // EMBER_RUNTIME_CHAT_TEMPLATE_H
