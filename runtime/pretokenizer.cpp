// Pre-tokenizer expressions as matchers. Each matcher answers: how many code points does the
// expression match when the regex engine tries it at position p of the piece [.., e)? (0: no
// match there, the engine moves on by one). The reference patterns are quoted above each.
#include "runtime/pretokenizer.h"

#include <algorithm>
#include <cstring>

#include "runtime/unicode.h"

namespace {

const ember_pre_info k_pre_info[] = {
    // name               type                      clean  ignore_merges  add_bos
    {"default",           EMBER_PRE_DEFAULT,        true,  false,         false},
    {"llama3",            EMBER_PRE_LLAMA3,         true,  true,          true},
    {"llama-v3",          EMBER_PRE_LLAMA3,         true,  true,          true},
    {"llama-bpe",         EMBER_PRE_LLAMA3,         true,  true,          true},
    {"falcon3",           EMBER_PRE_LLAMA3,         true,  true,          true},
    {"pixtral",           EMBER_PRE_LLAMA3,         true,  true,          true},
    {"dbrx",              EMBER_PRE_LLAMA3,         true,  false,         false},
    {"smaug-bpe",         EMBER_PRE_LLAMA3,         true,  false,         false},
    {"qwen2",             EMBER_PRE_QWEN2,          false, false,         false},
    {"deepseek-r1-qwen",  EMBER_PRE_QWEN2,          false, false,         false},
    {"stablelm2",         EMBER_PRE_QWEN2,          true,  false,         false},
    {"megrez",            EMBER_PRE_QWEN2,          true,  false,         false},
    {"gpt-2",             EMBER_PRE_GPT2,           true,  false,         false},
    {"phi-2",             EMBER_PRE_GPT2,           true,  false,         false},
    {"mpt",               EMBER_PRE_GPT2,           true,  false,         false},
    {"olmo",              EMBER_PRE_GPT2,           true,  false,         false},
    {"jais",              EMBER_PRE_GPT2,           true,  false,         false},
    {"gigachat",          EMBER_PRE_GPT2,           true,  false,         false},
    {"starcoder",         EMBER_PRE_STARCODER,      true,  false,         false},
    {"refact",            EMBER_PRE_STARCODER,      true,  false,         false},
    {"codeshell",         EMBER_PRE_STARCODER,      true,  false,         false},
    {"exaone",            EMBER_PRE_STARCODER,      true,  false,         false},
    {"minerva-7b",        EMBER_PRE_STARCODER,      true,  false,         false},
    {"command-r",         EMBER_PRE_STARCODER,      false, false,         false},
    {"smollm",            EMBER_PRE_STARCODER,      false, false,         false},
    {"falcon",            EMBER_PRE_FALCON,         true,  false,         false},
    {"deepseek-llm",      EMBER_PRE_DEEPSEEK_LLM,   false, false,         false},
    {"deepseek-coder",    EMBER_PRE_DEEPSEEK_CODER, false, false,         false},
    {"deepseek-v3",       EMBER_PRE_DEEPSEEK3,      false, false,         false},
    {"bloom",             EMBER_PRE_BLOOM,          true,  false,         false},
    {"gpt3-finnish",      EMBER_PRE_BLOOM,          true,  false,         false},
    {"poro-chat",         EMBER_PRE_BLOOM,          false, false,         false},
    {"viking",            EMBER_PRE_VIKING,         false, false,         false},
};

//
// The text being split: code points with their flags.
//
struct pre_text {
    const uint32_t * cpt;
    const uint16_t * flags;

    bool has(size_t i, uint16_t f) const { return (flags[i] & f) != 0; }
    bool letter(size_t i) const { return has(i, EMBER_UFLAG_LETTER); }
    bool number(size_t i) const { return has(i, EMBER_UFLAG_NUMBER); }
    bool space(size_t i) const { return has(i, EMBER_UFLAG_WHITESPACE); }
    bool newline(size_t i) const { return cpt[i] == '\r' || cpt[i] == '\n'; }
    // [^\s\p{L}\p{N}]
    bool other(size_t i) const { return !has(i, EMBER_UFLAG_WHITESPACE | EMBER_UFLAG_LETTER | EMBER_UFLAG_NUMBER); }
};

using matcher = size_t (*)(const pre_text & t, size_t p, size_t e);

// Length of the run of code points from p that satisfy pred.
template <typename P> size_t run(const pre_text & t, size_t p, size_t e, P pred) {
    size_t q = p;
    while (q < e && pred(t, q)) q++;
    return q - p;
}

// \s?[class]+ : with the optional space when the class follows it, else without.
template <typename P> size_t opt_space_run(const pre_text & t, size_t p, size_t e, P pred) {
    if (t.space(p) && p + 1 < e && pred(t, p + 1)) return 1 + run(t, p + 1, e, pred);
    return run(t, p, e, pred);
}

bool in_ranges(uint32_t c, const ember_unicode_span * r, size_t n) {
    const ember_unicode_span * it =
        std::upper_bound(r, r + n, c, [](uint32_t v, const ember_unicode_span & s) { return v < s.first; });
    return it != r && c <= (it - 1)->last;
}

// The whitespace alternatives that end the patterns: \s+(?!\S)|\s+ , preceded by \s*[\r\n]+
// in the cl100k-style ones (with_newlines).
size_t whitespace_tail(const pre_text & t, size_t p, size_t e, bool with_newlines) {
    size_t q = p, last_nl = 0;
    while (q < e && t.space(q)) {
        if (t.newline(q)) last_nl = q + 1;
        q++;
    }
    if (with_newlines && last_nl > 0) return last_nl - p;  // ends after the run's last newline
    const size_t n = q - p;
    if (n == 0) return 0;
    if (q == e || n == 1) return n;  // (?!\S) holds at the end; a single space falls to \s+
    return n - 1;                    // leave the last space to the next piece
}

// The contractions 's 't 're 've 'm 'll 'd, case-insensitive when asked.
size_t contraction(const pre_text & t, size_t p, size_t e, bool any_case) {
    if (t.cpt[p] != '\'' || p + 1 >= e) return 0;
    auto low = [&](size_t i) { return any_case ? ember_unicode_tolower(t.cpt[i]) : t.cpt[i]; };
    const uint32_t c1 = low(p + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (p + 2 >= e) return 0;
    const uint32_t c2 = low(p + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t m_gpt2(const pre_text & t, size_t p, size_t e) {
    if (size_t n = contraction(t, p, e, false)) return n;
    const size_t q = (t.cpt[p] == ' ' && p + 1 < e) ? p + 1 : p;  // ' ?' then the class at q
    auto         letter = [](const pre_text & x, size_t i) { return x.letter(i); };
    auto         number = [](const pre_text & x, size_t i) { return x.number(i); };
    auto         other  = [](const pre_text & x, size_t i) { return x.other(i); };
    if (t.letter(q)) return (q - p) + run(t, q, e, letter);
    if (t.number(q)) return (q - p) + run(t, q, e, number);
    if (t.other(q)) return (q - p) + run(t, q, e, other);
    return whitespace_tail(t, p, e, false);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+       (Llama 3: D = 3; Qwen2: D = 1)
template <size_t D> size_t m_cl100k(const pre_text & t, size_t p, size_t e) {
    if (size_t n = contraction(t, p, e, true)) return n;
    auto letter = [](const pre_text & x, size_t i) { return x.letter(i); };
    if (t.letter(p)) return run(t, p, e, letter);
    if (!t.newline(p) && !t.number(p) && p + 1 < e && t.letter(p + 1)) return 1 + run(t, p + 1, e, letter);
    if (t.number(p)) {
        size_t n = 1;
        while (n < D && p + n < e && t.number(p + n)) n++;
        return n;
    }
    const size_t q = (t.cpt[p] == ' ' && p + 1 < e && t.other(p + 1)) ? p + 1 : p;
    if (t.other(q)) {
        size_t r = q;
        while (r < e && t.other(r)) r++;
        while (r < e && t.newline(r)) r++;
        return r - p;
    }
    return whitespace_tail(t, p, e, true);
}

// DeepSeek-V3: [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t m_deepseek3(const pre_text & t, size_t p, size_t e) {
    auto ascii_alpha = [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    };
    const uint32_t c = t.cpt[p];
    const bool     ascii_punct = c < 0x80 && c > 0x20 && c != 0x7F && !ascii_alpha(t, p) && !(c >= '0' && c <= '9');
    if (ascii_punct && p + 1 < e && ascii_alpha(t, p + 1)) return 1 + run(t, p + 1, e, ascii_alpha);
    auto lm = [](const pre_text & x, size_t i) { return x.has(i, EMBER_UFLAG_LETTER | EMBER_UFLAG_MARK); };
    auto ps = [](const pre_text & x, size_t i) { return x.has(i, EMBER_UFLAG_PUNCT | EMBER_UFLAG_SYMBOL); };
    if (lm(t, p)) return run(t, p, e, lm);
    if (!t.newline(p) && !t.has(p, EMBER_UFLAG_LETTER | EMBER_UFLAG_PUNCT | EMBER_UFLAG_SYMBOL) && p + 1 < e && lm(t, p + 1)) {
        return 1 + run(t, p + 1, e, lm);
    }
    const size_t q = (c == ' ' && p + 1 < e && ps(t, p + 1)) ? p + 1 : p;
    if (ps(t, q)) {
        size_t r = q + run(t, q, e, ps);
        while (r < e && t.newline(r)) r++;
        return r - p;
    }
    return whitespace_tail(t, p, e, true);
}

// [\p{P}\$\+<=>\^~\|]+  (Falcon adds the backtick)
template <bool BACKTICK> size_t m_punct_run(const pre_text & t, size_t p, size_t e) {
    return run(t, p, e, [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        return x.has(i, EMBER_UFLAG_PUNCT) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
               c == '~' || c == '|' || (BACKTICK && c == '`');
    });
}

// \p{N}+ , \p{N} , \p{N}{1,3}
size_t m_number_run(const pre_text & t, size_t p, size_t e) {
    return run(t, p, e, [](const pre_text & x, size_t i) { return x.number(i); });
}
size_t m_number_one(const pre_text & t, size_t p, size_t) { return t.number(p) ? 1 : 0; }
size_t m_number_1_3(const pre_text & t, size_t p, size_t e) {
    size_t n = 0;
    while (n < 3 && p + n < e && t.number(p + n)) n++;
    return n;
}

// [0-9][0-9][0-9]
size_t m_digit_triple(const pre_text & t, size_t p, size_t e) {
    if (p + 3 > e) return 0;
    for (size_t i = p; i < p + 3; i++) {
        if (t.cpt[i] < '0' || t.cpt[i] > '9') return 0;
    }
    return 3;
}

// [\r\n]
size_t m_newline(const pre_text & t, size_t p, size_t) { return t.newline(p) ? 1 : 0; }

// \s+$
size_t m_space_at_end(const pre_text & t, size_t p, size_t e) {
    const size_t n = run(t, p, e, [](const pre_text & x, size_t i) { return x.space(i); });
    return n > 0 && p + n == e ? n : 0;
}

// \s?\p{L}+ and \s?\p{P}+
size_t m_space_letters(const pre_text & t, size_t p, size_t e) {
    return opt_space_run(t, p, e, [](const pre_text & x, size_t i) { return x.letter(i); });
}
size_t m_space_punct(const pre_text & t, size_t p, size_t e) {
    return opt_space_run(t, p, e, [](const pre_text & x, size_t i) { return x.has(i, EMBER_UFLAG_PUNCT); });
}

// DeepSeek LLM's letters: \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+ (cased letters of an older Unicode,
// transcribed from the tokenizer's pattern).
const ember_unicode_span k_ds_letters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
size_t m_ds_letters(const pre_text & t, size_t p, size_t e) {
    return opt_space_run(t, p, e, [](const pre_text & x, size_t i) {
        return in_ranges(x.cpt[i], k_ds_letters, sizeof(k_ds_letters) / sizeof(k_ds_letters[0]));
    });
}

// \s?[!-/:-~！-／：-～‘-‟　-。]+
size_t m_ds_punct(const pre_text & t, size_t p, size_t e) {
    return opt_space_run(t, p, e, [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
               (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
    });
}

// [一-龥ࠀ-一가-퟿]+
size_t m_ds_cjk(const pre_text & t, size_t p, size_t e) {
    return run(t, p, e, [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF);
    });
}

// [一-龥぀-ゟ゠-ヿ]+
size_t m_cjk_kana(const pre_text & t, size_t p, size_t e) {
    return run(t, p, e, [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
    });
}

// " ?[^(\s|.,!?…。，、।۔،)]+"
size_t m_bloom(const pre_text & t, size_t p, size_t e) {
    auto word = [](const pre_text & x, size_t i) {
        const uint32_t c = x.cpt[i];
        if (x.space(i)) return false;
        for (uint32_t s : {0x28u, 0x7Cu, 0x2Eu, 0x2Cu, 0x21u, 0x3Fu, 0x2026u, 0x3002u, 0xFF0Cu, 0x3001u, 0x0964u, 0x06D4u,
                           0x060Cu, 0x29u}) {
            if (c == s) return false;
        }
        return true;
    };
    if (t.cpt[p] == ' ' && p + 1 < e && word(t, p + 1)) return 1 + run(t, p + 1, e, word);
    return run(t, p, e, word);
}

// The expressions of each family, applied in order.
struct pre_stages {
    int     n;
    matcher m[6];
};
const pre_stages k_stages[EMBER_PRE_COUNT] = {
    /* DEFAULT        */ {4, {m_punct_run<false>, m_gpt2, m_number_run, m_digit_triple}},
    /* LLAMA3         */ {1, {m_cl100k<3>}},
    /* QWEN2          */ {1, {m_cl100k<1>}},
    /* GPT2           */ {1, {m_gpt2}},
    /* STARCODER      */ {2, {m_number_one, m_gpt2}},
    /* FALCON         */ {3, {m_punct_run<true>, m_gpt2, m_digit_triple}},
    /* DEEPSEEK_LLM   */ {6, {m_newline, m_ds_letters, m_ds_punct, m_space_at_end, m_ds_cjk, m_number_run}},
    /* DEEPSEEK_CODER */ {5, {m_newline, m_space_letters, m_space_punct, m_ds_cjk, m_number_one}},
    /* DEEPSEEK3      */ {3, {m_number_1_3, m_cjk_kana, m_deepseek3}},
    /* BLOOM          */ {1, {m_bloom}},
    /* VIKING         */ {2, {m_bloom, m_number_one}},
};
static_assert(EMBER_PRE_COUNT == 11, "k_stages has one row per pre-tokenizer family");

struct cpt_span {
    size_t begin, end;  // code point indices
};

// One expression over every piece: matches and the gaps between them become pieces.
void split(const pre_text & t, matcher m, const std::vector<cpt_span> & in, std::vector<cpt_span> & out) {
    out.clear();
    for (const cpt_span & s : in) {
        size_t gap = s.begin, p = s.begin;
        while (p < s.end) {
            const size_t n = m(t, p, s.end);
            if (n == 0) {
                p++;
                continue;
            }
            if (p > gap) out.push_back({gap, p});
            out.push_back({p, p + n});
            p += n;
            gap = p;
        }
        if (gap < s.end) out.push_back({gap, s.end});
    }
}

}  // namespace

const ember_pre_info * ember_pre_find(const std::string & name) {
    for (const ember_pre_info & i : k_pre_info) {
        if (name == i.name) return &i;
    }
    return nullptr;
}

const ember_pre_info * ember_pre_list(size_t * n) {
    if (n) *n = sizeof(k_pre_info) / sizeof(k_pre_info[0]);
    return k_pre_info;
}

void ember_pretokenize(ember_pre_type type, const char * text, size_t n, std::vector<ember_pre_span> & out) {
    out.clear();
    if (n == 0) return;
    std::vector<uint32_t> cpts;
    std::vector<uint16_t> flags;
    std::vector<size_t>   offs;  // byte offset of each code point, and n at the end
    cpts.reserve(n);
    offs.reserve(n + 1);
    for (size_t i = 0; i < n;) {
        offs.push_back(i);
        cpts.push_back(ember_utf8_decode(text, n, i));
    }
    offs.push_back(n);
    flags.resize(cpts.size());
    for (size_t i = 0; i < cpts.size(); i++) flags[i] = ember_unicode_flags(cpts[i]);

    const pre_text          t{cpts.data(), flags.data()};
    std::vector<cpt_span>   a{{0, cpts.size()}}, b;
    const pre_stages &      st = k_stages[type];
    for (int i = 0; i < st.n; i++) {
        split(t, st.m[i], a, b);
        a.swap(b);
    }
    out.reserve(a.size());
    for (const cpt_span & s : a) out.push_back({offs[s.begin], offs[s.end]});
}
