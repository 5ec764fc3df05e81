// chat.cpp: a multi-turn chat with ember.hpp, the C++ wrappers over Ember's C ABI.
// Each line on stdin is a user turn; the answer streams to stdout. The conversation is
// rendered with the model's chat template, and only the tokens that are new since the last
// turn are evaluated (the KV cache keeps the rest).
//
//   chat MODEL.gguf [n_tokens_per_answer] [temperature] < questions.txt
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ember.hpp"

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::cerr << "usage: " << argv[0] << " MODEL.gguf [n_tokens_per_answer] [temperature] < turns.txt\n";
        return 2;
    }
    const int   n_answer    = argc > 2 ? std::atoi(argv[2]) : 128;
    const float temperature = argc > 3 ? static_cast<float>(std::atof(argv[3])) : 0.7f;
    try {
        const ember::Model m(argv[1]);
        ember::Context     ctx(m);  // defaults: the trained context length, all cores
        ember::Sampler::Params sp;
        sp.temperature = temperature;
        sp.seed        = 42;  // reproducible answers
        ember::Sampler sampler(sp);

        const std::string bos = m.token_bos() >= 0 ? m.token_to_piece(m.token_bos(), true) : "";
        std::vector<ember::ChatMessage> messages;
        std::vector<int32_t>            cached;  // what the KV cache holds
        std::string                     line;
        while (std::getline(std::cin, line)) {
            if (line.empty()) continue;
            messages.push_back({ "user", line });
            // Render the whole conversation; the template spells special tokens, so parse them,
            // and add BOS only when the template did not write it.
            const std::string    text   = m.apply_chat_template(messages);
            const bool           add_bos = bos.empty() || text.compare(0, bos.size(), bos) != 0;
            std::vector<int32_t> prompt = m.tokenize(text, add_bos, true);
            if (prompt.size() + static_cast<size_t>(n_answer) > ctx.n_ctx()) {
                std::cerr << "chat: the conversation no longer fits in " << ctx.n_ctx() << " tokens\n";
                break;
            }
            // Keep the cached prefix the new prompt shares, evaluate the rest (at least one token).
            size_t keep = 0;
            while (keep < cached.size() && keep + 1 < prompt.size() && cached[keep] == prompt[keep]) keep++;
            ctx.seq_rm(0, static_cast<int32_t>(keep));
            ctx.decode(ember::span<const int32_t>(prompt.data() + keep, prompt.size() - keep));
            cached = prompt;

            ember::TokenStream stream(m);
            std::string        answer;
            for (int i = 0; i < n_answer; i++) {
                int32_t tok = sampler.sample(ctx);
                if (m.is_eog(tok)) break;
                const std::string piece = stream.push(tok);
                std::cout << piece << std::flush;
                answer += piece;
                ctx.decode({ &tok, 1 });
                cached.push_back(tok);
            }
            const std::string tail = stream.flush();
            answer += tail;
            std::cout << tail << "\n" << std::flush;
            messages.push_back({ "assistant", answer });
        }
    } catch (const ember::Error & e) {
        std::cerr << "chat: " << e.what() << " (" << e.status_name() << ")\n";
        return 1;
    }
    return 0;
}
