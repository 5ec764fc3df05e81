// The pre-tokenizers (runtime/pretokenizer.cpp) against splits written by hand from the
// semantics of the reference regular expressions: leftmost match, alternatives in order,
// greedy quantifiers, and the text between matches kept as its own piece.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "runtime/pretokenizer.h"

namespace {

std::vector<std::string> split(ember_pre_type type, const std::string & text) {
    std::vector<ember_pre_span> spans;
    ember_pretokenize(type, text.data(), text.size(), spans);
    std::vector<std::string> out;
    size_t                   at = 0;
    for (const ember_pre_span & s : spans) {
        CHECK(s.begin == at);  // pieces cover the text, in order
        CHECK(s.end > s.begin);
        out.push_back(text.substr(s.begin, s.end - s.begin));
        at = s.end;
    }
    CHECK(at == text.size());
    return out;
}

using pieces = std::vector<std::string>;

}  // namespace

TEST_SUITE("tokenizer") {

TEST_CASE("[pretokenizer] names map to families") {
    struct {
        const char *   name;
        ember_pre_type type;
    } const cases[] = {
        {"default", EMBER_PRE_DEFAULT},        {"llama-bpe", EMBER_PRE_LLAMA3},  {"llama3", EMBER_PRE_LLAMA3},
        {"qwen2", EMBER_PRE_QWEN2},            {"gpt-2", EMBER_PRE_GPT2},        {"phi-2", EMBER_PRE_GPT2},
        {"mpt", EMBER_PRE_GPT2},               {"starcoder", EMBER_PRE_STARCODER}, {"refact", EMBER_PRE_STARCODER},
        {"command-r", EMBER_PRE_STARCODER},    {"smollm", EMBER_PRE_STARCODER}, {"falcon", EMBER_PRE_FALCON},
        {"deepseek-llm", EMBER_PRE_DEEPSEEK_LLM}, {"deepseek-coder", EMBER_PRE_DEEPSEEK_CODER},
    };
    for (const auto & c : cases) {
        const std::string name = c.name;
        CAPTURE(name);
        const ember_pre_info * i = ember_pre_find(c.name);
        REQUIRE(i != nullptr);
        CHECK(i->type == c.type);
    }
    CHECK(ember_pre_find("llama-bpe")->ignore_merges);
    CHECK(ember_pre_find("llama-bpe")->add_bos);
    CHECK(!ember_pre_find("qwen2")->clean_spaces);
    CHECK(ember_pre_find("gpt-2")->clean_spaces);
    CHECK(ember_pre_find("no-such-pre") == nullptr);
    CHECK(ember_pre_find("") == nullptr);
}

TEST_CASE("[pretokenizer] llama-bpe (Llama 3)") {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    CHECK(split(EMBER_PRE_LLAMA3, "Hello world") == pieces{"Hello", " world"});
    // Contractions are case-insensitive; one after a space is not a contraction.
    CHECK(split(EMBER_PRE_LLAMA3, "I'm can't HE'S we'LL 'S") == pieces{"I", "'m", " can", "'t", " HE", "'S", " we", "'LL", " '", "S"});
    CHECK(split(EMBER_PRE_LLAMA3, "they'd've") == pieces{"they", "'d", "'ve"});
    // Numbers in groups of up to three, from the left; a space before a number stands alone.
    CHECK(split(EMBER_PRE_LLAMA3, "12345 1234567") == pieces{"123", "45", " ", "123", "456", "7"});
    // Any one non-letter, non-number character (not a newline) leads a word.
    CHECK(split(EMBER_PRE_LLAMA3, "(hello) $x \tfoo") == pieces{"(hello", ")", " $", "x", " ", "\tfoo"});
    CHECK(split(EMBER_PRE_LLAMA3, "a\nb") == pieces{"a", "\n", "b"});
    // Punctuation runs take an optional space before and newlines after.
    CHECK(split(EMBER_PRE_LLAMA3, "end.\n\nNext !!!\r\n") == pieces{"end", ".\n\n", "Next", " !!!\r\n"});
    // Whitespace: up to the last newline of a run; otherwise all but the space before a word.
    CHECK(split(EMBER_PRE_LLAMA3, "a  \n\n  b") == pieces{"a", "  \n\n", " ", " b"});
    CHECK(split(EMBER_PRE_LLAMA3, "a   b  ") == pieces{"a", "  ", " b", "  "});
    CHECK(split(EMBER_PRE_LLAMA3, "    Hello\n    Hello") == pieces{"   ", " Hello", "\n", "   ", " Hello"});
    // Non-Latin letters and digits are letters and numbers too.
    CHECK(split(EMBER_PRE_LLAMA3, "нещо на Български ١٢٣٤") == pieces{"нещо", " на", " Български", " ", "١٢٣", "٤"});
    CHECK(split(EMBER_PRE_LLAMA3, "") == pieces{});
}

TEST_CASE("[pretokenizer] qwen2: as Llama 3 with single digits") {
    CHECK(split(EMBER_PRE_QWEN2, "12345 abc's") == pieces{"1", "2", "3", "4", "5", " abc", "'s"});
    CHECK(split(EMBER_PRE_QWEN2, "x=42;\n") == pieces{"x", "=", "4", "2", ";\n"});
}

TEST_CASE("[pretokenizer] gpt-2") {
    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    CHECK(split(EMBER_PRE_GPT2, "Hello  world 123 !!  \n\n x") == pieces{"Hello", " ", " world", " 123", " !!", "  \n\n", " x"});
    // Case-sensitive contractions.
    CHECK(split(EMBER_PRE_GPT2, "don't DON'T") == pieces{"don", "'t", " DON", "'", "T"});
    // Whole number runs; letters and numbers do not mix.
    CHECK(split(EMBER_PRE_GPT2, "w048 7tuijk") == pieces{"w", "048", " 7", "tuijk"});
    CHECK(split(EMBER_PRE_GPT2, "\t\n") == pieces{"\t\n"});
    // An invalid byte is U+FFFD for the classes and stays in the text as it was.
    CHECK(split(EMBER_PRE_GPT2, "a\xff b") == pieces{"a", "\xff", " b"});
}

TEST_CASE("[pretokenizer] starcoder: single digits, then gpt-2") {
    CHECK(split(EMBER_PRE_STARCODER, "a 123") == pieces{"a", " ", "1", "2", "3"});
    CHECK(split(EMBER_PRE_STARCODER, "x1y") == pieces{"x", "1", "y"});
}

TEST_CASE("[pretokenizer] default and falcon: punctuation runs, gpt-2, digit triples") {
    CHECK(split(EMBER_PRE_DEFAULT, "Hello, world!! 1234567") == pieces{"Hello", ",", " world", "!!", " ", "123", "456", "7"});
    CHECK(split(EMBER_PRE_DEFAULT, "a+b=c") == pieces{"a", "+", "b", "=", "c"});
    CHECK(split(EMBER_PRE_FALCON, "a+b=`c 1234") == pieces{"a", "+", "b", "=`", "c", " ", "123", "4"});
}

TEST_CASE("[pretokenizer] deepseek-llm") {
    // [\r\n] | \s?[Latin-like letters]+ | \s?[ASCII/CJK punctuation]+ | \s+$ | [CJK]+ | \p{N}+
    CHECK(split(EMBER_PRE_DEEPSEEK_LLM, "Hello, 世界! 123\n") == pieces{"Hello", ",", " ", "世界", "!", " ", "123", "\n"});
    CHECK(split(EMBER_PRE_DEEPSEEK_LLM, "ied 4 ½ months") == pieces{"ied", " ", "4", " ", "½", " months"});
    CHECK(split(EMBER_PRE_DEEPSEEK_LLM, "a \n") == pieces{"a", " ", "\n"});
    CHECK(split(EMBER_PRE_DEEPSEEK_LLM, "a  ") == pieces{"a", "  "});
}

TEST_CASE("[pretokenizer] deepseek-coder") {
    // [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [CJK]+ | \p{N}
    CHECK(split(EMBER_PRE_DEEPSEEK_CODER, "foo(12, bar)\n") == pieces{"foo", "(", "1", "2", ",", " bar", ")", "\n"});
}

TEST_CASE("[pretokenizer] deepseek-v3, bloom and viking") {
    CHECK(split(EMBER_PRE_DEEPSEEK3, "ab 1234 かな") == pieces{"ab", " ", "123", "4", " ", "かな"});
    CHECK(split(EMBER_PRE_DEEPSEEK3, "(Hello) .x") == pieces{"(Hello", ")", " .", "x"});
    CHECK(split(EMBER_PRE_BLOOM, "Hello, world. Hi") == pieces{"Hello", ",", " world", ".", " Hi"});
    CHECK(split(EMBER_PRE_VIKING, "abc12 x") == pieces{"abc", "1", "2", " x"});
}

}  // TEST_SUITE
