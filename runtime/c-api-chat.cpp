// C API: chat templates (include/ember.h, "Chat templates").
#include "ember.h"
#include "runtime/c-api-internal.h"
#include "runtime/chat-template.h"
#include "runtime/jinja.h"

namespace {

// Runs `render` and copies its text out snprintf-style; -1 with the last error on failure.
template <typename F> int32_t chat_render_out(const char * fn, char * buf, int32_t buf_size, F && render) {
    if (buf_size < 0 || (!buf && buf_size > 0)) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: buf is NULL or buf_size is negative", fn), -1;
    }
    int32_t            n  = -1;
    const ember_status st = ember_api_guarded([&]() -> ember_status {
        const std::string text = render();
        if (text.size() > size_t(INT32_MAX)) return ember_api_fail(EMBER_ERR_INVALID_ARG, "%s: the rendered text is too long", fn);
        n = ember_api_copy_out(text, buf, size_t(buf_size));
        return EMBER_OK;
    });
    return st == EMBER_OK ? n : -1;
}

}  // namespace

extern "C" {

EMBER_API int32_t ember_chat_apply_template(const ember_model * model, const char * tmpl, const ember_chat_message * messages,
                                            size_t n_messages, uint8_t add_generation_prompt, char * buf, int32_t buf_size) {
    if (!model && !tmpl) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_chat_apply_template: model and tmpl are both NULL"), -1;
    if (!messages && n_messages > 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_chat_apply_template: messages is NULL"), -1;
    return chat_render_out("ember_chat_apply_template", buf, buf_size, [&] {
        return ember_chat_apply(model, tmpl, messages, n_messages, add_generation_prompt != 0, ember_chat_default_options());
    });
}

EMBER_API int32_t ember_chat_render_json(const char * tmpl, const char * variables_json, char * buf, int32_t buf_size) {
    if (!tmpl || !variables_json) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_chat_render_json: tmpl or variables_json is NULL"), -1;
    return chat_render_out("ember_chat_render_json", buf, buf_size,
                           [&] { return ember_jinja_render_json(tmpl, variables_json, ember_chat_default_options()); });
}

EMBER_API const char * ember_chat_builtin_template(const char * name) {
    ember_api_last_error().clear();
    const char * t = ember_chat_builtin(name);
    if (!t) ember_api_fail(EMBER_ERR_INVALID_ARG, "no built-in chat template named '%s'", name ? name : "(null)");
    return t;
}

}  // extern "C"
