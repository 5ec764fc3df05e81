// Unicode for the tokenizers: lenient UTF-8 decoding, general categories and White_Space
// (from a table generated out of the Unicode Character Database, runtime/unicode-tables.cpp),
// simple lower-casing, and GPT-2's byte <-> code point alphabet.
#ifndef EMBER_RUNTIME_UNICODE_H
#define EMBER_RUNTIME_UNICODE_H

#include <cstddef>
#include <cstdint>
#include <string>

// General categories. Values index tables in unicode.cpp; EMBER_UCAT_CN (unassigned) is 0.
enum ember_ucat : uint8_t {
    EMBER_UCAT_CN = 0,
    EMBER_UCAT_LU, EMBER_UCAT_LL, EMBER_UCAT_LT, EMBER_UCAT_LM, EMBER_UCAT_LO,
    EMBER_UCAT_MN, EMBER_UCAT_MC, EMBER_UCAT_ME,
    EMBER_UCAT_ND, EMBER_UCAT_NL, EMBER_UCAT_NO,
    EMBER_UCAT_PC, EMBER_UCAT_PD, EMBER_UCAT_PS, EMBER_UCAT_PE, EMBER_UCAT_PI, EMBER_UCAT_PF, EMBER_UCAT_PO,
    EMBER_UCAT_SM, EMBER_UCAT_SC, EMBER_UCAT_SK, EMBER_UCAT_SO,
    EMBER_UCAT_ZS, EMBER_UCAT_ZL, EMBER_UCAT_ZP,
    EMBER_UCAT_CC, EMBER_UCAT_CF, EMBER_UCAT_CS, EMBER_UCAT_CO,
    EMBER_UCAT_COUNT
};

// Flags of a code point: the regex classes \p{L}, \p{N}, \p{P}, \p{S}, \p{M}, \p{Z}, \p{C}
// (one of them, from the general category; unassigned code points are \p{C}) plus \s
// (the White_Space property, as in Rust's and Python's regex engines).
enum : uint16_t {
    EMBER_UFLAG_LETTER     = 1u << 0,
    EMBER_UFLAG_NUMBER     = 1u << 1,
    EMBER_UFLAG_PUNCT      = 1u << 2,
    EMBER_UFLAG_SYMBOL     = 1u << 3,
    EMBER_UFLAG_MARK       = 1u << 4,
    EMBER_UFLAG_SEPARATOR  = 1u << 5,
    EMBER_UFLAG_OTHER      = 1u << 6,
    EMBER_UFLAG_WHITESPACE = 1u << 7,
};

ember_ucat ember_unicode_category(uint32_t cpt);
uint16_t   ember_unicode_flags(uint32_t cpt);
uint32_t   ember_unicode_tolower(uint32_t cpt);  // simple mapping; cpt when it has none

// Decodes the code point at s[i] (n bytes in all) and advances i. Never fails: an invalid or
// truncated sequence yields U+FFFD and advances by one byte (the bytes themselves stay in
// the text, so tokenizers still see them).
uint32_t ember_utf8_decode(const char * s, size_t n, size_t & i);
// Appends the UTF-8 encoding of cpt (U+FFFD for anything above U+10FFFF).
void     ember_utf8_append(std::string & out, uint32_t cpt);
// Bytes of the sequence that starts with `lead`, from its high bits alone (1 for a stray
// continuation byte), as SentencePiece splits text into characters.
size_t   ember_utf8_seq_len(uint8_t lead);
// Length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// UTF-8 sequence: what a streaming decoder can hand out now.
size_t   ember_utf8_complete_prefix(const char * s, size_t n);

// GPT-2's byte-level alphabet: every byte is shown as a printable code point.
uint32_t ember_gpt2_byte_to_cpt(uint8_t byte);
int32_t  ember_gpt2_cpt_to_byte(uint32_t cpt);  // -1 when cpt is not in the alphabet

//
// Generated tables (runtime/unicode-tables.cpp)
//
struct ember_unicode_cat_range {
    uint32_t first;  // the range runs to the next entry's first - 1
    uint8_t  cat;    // ember_ucat
};
struct ember_unicode_span {
    uint32_t first, last;  // inclusive
};
struct ember_unicode_case_run {
    uint32_t first, last;  // every stride-th code point in [first, last] maps to cpt + delta
    int32_t  delta;
    uint8_t  stride;
};
extern const ember_unicode_cat_range ember_unicode_cat_ranges[];
extern const size_t                  ember_unicode_n_cat_ranges;
extern const ember_unicode_span      ember_unicode_ws_ranges[];
extern const size_t                  ember_unicode_n_ws_ranges;
extern const ember_unicode_case_run  ember_unicode_lower_runs[];
extern const size_t                  ember_unicode_n_lower_runs;

#endif  // EMBER_RUNTIME_UNICODE_H
