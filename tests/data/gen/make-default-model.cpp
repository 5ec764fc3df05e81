// Writes the bundled default model models/ember-kjv-25m-q8_0.gguf with Ember's own GGUF writer:
// the reference Q8_0 file of ../shared/models (tensors copied byte for byte) plus the chat
// template models/ember-kjv-25m.chat-template.jinja as tokenizer.chat_template.
//
//   build/bin/make-default-model ../shared/models/ember-kjv-25m-q8_0.gguf
//       models/ember-kjv-25m.chat-template.jinja models/ember-kjv-25m-q8_0.gguf  (one line)
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/gguf.h"

int main(int argc, char ** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: make-default-model REFERENCE.gguf TEMPLATE.jinja OUT.gguf\n");
        return 1;
    }
    try {
        std::unique_ptr<ember_gguf_file> in = ember_gguf_open(argv[1]);
        std::ifstream                    t(argv[2], std::ios::binary);
        std::stringstream                tmpl;
        tmpl << t.rdbuf();
        if (!t) {
            std::fprintf(stderr, "make-default-model: cannot read %s\n", argv[2]);
            return 1;
        }
        ember_gguf_writer w;
        w.alignment = in->alignment;
        w.copy_kv_from(*in);
        w.set_str("tokenizer.chat_template", tmpl.str());
        for (const ember_gguf_tensor_info & ti : in->tensors) w.add_tensor(ti.name, ti.type, ti.n_dims, ti.ne, in->tensor_data(ti));
        w.write_to_file(argv[3]);
    } catch (const ember_error & e) {
        std::fprintf(stderr, "make-default-model: %s\n", e.what());
        return 1;
    }
    return 0;
}
