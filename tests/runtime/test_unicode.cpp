// The generated Unicode tables (runtime/unicode-tables.cpp) and the UTF-8 and GPT-2 byte
// helpers of runtime/unicode.h, checked against code points whose properties are known.
#include <doctest/doctest.h>

#include <string>

#include "runtime/unicode.h"

TEST_SUITE("unicode") {

TEST_CASE("[unicode] the generated tables are sorted and start at U+0000") {
    REQUIRE(ember_unicode_n_cat_ranges > 1000);
    CHECK(ember_unicode_cat_ranges[0].first == 0);
    for (size_t i = 1; i < ember_unicode_n_cat_ranges; i++) {
        CAPTURE(i);
        CHECK(ember_unicode_cat_ranges[i - 1].first < ember_unicode_cat_ranges[i].first);
        CHECK(ember_unicode_cat_ranges[i - 1].cat != ember_unicode_cat_ranges[i].cat);  // ranges are maximal
        CHECK(ember_unicode_cat_ranges[i].cat < EMBER_UCAT_COUNT);
    }
    for (size_t i = 0; i < ember_unicode_n_ws_ranges; i++) {
        CHECK(ember_unicode_ws_ranges[i].first <= ember_unicode_ws_ranges[i].last);
        if (i > 0) CHECK(ember_unicode_ws_ranges[i - 1].last + 1 < ember_unicode_ws_ranges[i].first);
    }
    for (size_t i = 1; i < ember_unicode_n_lower_runs; i++) CHECK(ember_unicode_lower_runs[i - 1].last < ember_unicode_lower_runs[i].first);
}

TEST_CASE("[unicode] general categories of known code points") {
    struct {
        uint32_t   cpt;
        ember_ucat cat;
    } const cases[] = {
        {0x0000, EMBER_UCAT_CC},  {'\t', EMBER_UCAT_CC},    {' ', EMBER_UCAT_ZS},      {'!', EMBER_UCAT_PO},
        {'$', EMBER_UCAT_SC},     {'(', EMBER_UCAT_PS},     {'+', EMBER_UCAT_SM},      {'-', EMBER_UCAT_PD},
        {'0', EMBER_UCAT_ND},     {'A', EMBER_UCAT_LU},     {'^', EMBER_UCAT_SK},      {'_', EMBER_UCAT_PC},
        {'a', EMBER_UCAT_LL},     {0x00A0, EMBER_UCAT_ZS},  {0x00AB, EMBER_UCAT_PI},   {0x00AD, EMBER_UCAT_CF},
        {0x00B5, EMBER_UCAT_LL},  {0x00BD, EMBER_UCAT_NO},  {0x00D7, EMBER_UCAT_SM},   {0x01C5, EMBER_UCAT_LT},
        {0x02B0, EMBER_UCAT_LM},  {0x0301, EMBER_UCAT_MN},  {0x0378, EMBER_UCAT_CN},   {0x0416, EMBER_UCAT_LU},
        {0x0903, EMBER_UCAT_MC},  {0x20DD, EMBER_UCAT_ME},  {0x16EE, EMBER_UCAT_NL},   {0x2028, EMBER_UCAT_ZL},
        {0x2029, EMBER_UCAT_ZP},  {0x200B, EMBER_UCAT_CF},  {0x3000, EMBER_UCAT_ZS},   {0x4E00, EMBER_UCAT_LO},
        {0x9FA5, EMBER_UCAT_LO},  {0xAC00, EMBER_UCAT_LO},  {0xD7A3, EMBER_UCAT_LO},   {0xD800, EMBER_UCAT_CS},
        {0xE000, EMBER_UCAT_CO},  {0xFF10, EMBER_UCAT_ND},  {0xFFFD, EMBER_UCAT_SO},   {0x10400, EMBER_UCAT_LU},
        {0x1F600, EMBER_UCAT_SO}, {0x1F999, EMBER_UCAT_SO}, {0x20000, EMBER_UCAT_LO},  {0x10FFFF, EMBER_UCAT_CN},
        {0x110000, EMBER_UCAT_CN},
    };
    for (const auto & c : cases) {
        CAPTURE(c.cpt);
        CHECK(static_cast<int>(ember_unicode_category(c.cpt)) == static_cast<int>(c.cat));
    }
}

TEST_CASE("[unicode] regex classes and White_Space") {
    CHECK(ember_unicode_flags('a') == EMBER_UFLAG_LETTER);
    CHECK(ember_unicode_flags(0x0416) == EMBER_UFLAG_LETTER);
    CHECK(ember_unicode_flags('7') == EMBER_UFLAG_NUMBER);
    CHECK(ember_unicode_flags(0x00BD) == EMBER_UFLAG_NUMBER);   // ½ is \p{N} (No)
    CHECK(ember_unicode_flags(0x2167) == EMBER_UFLAG_NUMBER);   // Ⅷ (Nl)
    CHECK(ember_unicode_flags(',') == EMBER_UFLAG_PUNCT);
    CHECK(ember_unicode_flags(0x3002) == EMBER_UFLAG_PUNCT);    // 。
    CHECK(ember_unicode_flags('`') == EMBER_UFLAG_SYMBOL);
    CHECK(ember_unicode_flags(0x1F999) == EMBER_UFLAG_SYMBOL);  // 🦙
    CHECK(ember_unicode_flags(0x0301) == EMBER_UFLAG_MARK);
    CHECK(ember_unicode_flags(0x0378) == EMBER_UFLAG_OTHER);    // unassigned
    // \s: the White_Space property.
    for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u,
                       0x202Fu, 0x205Fu, 0x3000u}) {
        CAPTURE(c);
        CHECK((ember_unicode_flags(c) & EMBER_UFLAG_WHITESPACE) != 0);
    }
    for (uint32_t c : {0x00u, 0x1Cu, 0x1Fu, 0x200Bu, 0x180Eu, 0xFEFFu, 0x61u, 0x5Fu}) {
        CAPTURE(c);
        CHECK((ember_unicode_flags(c) & EMBER_UFLAG_WHITESPACE) == 0);
    }
    CHECK(ember_unicode_flags(' ') == (EMBER_UFLAG_SEPARATOR | EMBER_UFLAG_WHITESPACE));
    CHECK(ember_unicode_flags('\n') == (EMBER_UFLAG_OTHER | EMBER_UFLAG_WHITESPACE));
}

TEST_CASE("[unicode] simple lower-case mappings") {
    CHECK(ember_unicode_tolower('A') == 'a');
    CHECK(ember_unicode_tolower('Z') == 'z');
    CHECK(ember_unicode_tolower('a') == 'a');
    CHECK(ember_unicode_tolower('\'') == '\'');
    CHECK(ember_unicode_tolower(0x00C0) == 0x00E0);   // À
    CHECK(ember_unicode_tolower(0x00D7) == 0x00D7);   // × has none
    CHECK(ember_unicode_tolower(0x0100) == 0x0101);   // Ā (a stride-2 run)
    CHECK(ember_unicode_tolower(0x0101) == 0x0101);
    CHECK(ember_unicode_tolower(0x0130) == 0x0069);   // İ
    CHECK(ember_unicode_tolower(0x0416) == 0x0436);   // Ж
    CHECK(ember_unicode_tolower(0x1E9E) == 0x00DF);   // ẞ
    CHECK(ember_unicode_tolower(0x10400) == 0x10428); // Deseret
    CHECK(ember_unicode_tolower(0x1F999) == 0x1F999);
}

TEST_CASE("[unicode] UTF-8 decoding is lenient and complete prefixes") {
    auto decode = [](const std::string & s, size_t & i) { return ember_utf8_decode(s.data(), s.size(), i); };
    size_t i = 0;
    CHECK(decode("\xc3\xa9", i) == 0xE9);
    CHECK(i == 2);
    i = 0;
    CHECK(decode("\xf0\x9f\xa6\x99", i) == 0x1F999);
    CHECK(i == 4);
    for (const char * bad : {"\xff", "\x80", "\xe2\x82", "\xe2\x28\xa1"}) {
        i = 0;
        CHECK(decode(bad, i) == 0xFFFD);
        CHECK(i == 1);  // one byte at a time
    }
    std::string s;
    for (uint32_t c : {0x24u, 0xA2u, 0x20ACu, 0x10348u}) ember_utf8_append(s, c);
    CHECK(s == "$\xc2\xa2\xe2\x82\xac\xf0\x90\x8d\x88");

    auto prefix = [](const std::string & t) { return ember_utf8_complete_prefix(t.data(), t.size()); };
    CHECK(prefix("") == 0);
    CHECK(prefix("abc") == 3);
    CHECK(prefix("ab\xf0\x9f") == 2);
    CHECK(prefix("ab\xf0\x9f\xa6") == 2);
    CHECK(prefix("\xf0\x9f\xa6\x99") == 4);
    CHECK(prefix("a\xc3") == 1);
    CHECK(prefix("\x80\x80") == 2);      // stray continuation bytes are not held
    CHECK(prefix("\xc0") == 1);          // never a lead byte
    CHECK(prefix("x\xf5\x80") == 3);
}

TEST_CASE("[unicode] GPT-2 byte alphabet") {
    CHECK(ember_gpt2_byte_to_cpt('A') == 'A');
    CHECK(ember_gpt2_byte_to_cpt(' ') == 0x0120);   // Ġ
    CHECK(ember_gpt2_byte_to_cpt('\n') == 0x010A);  // Ċ
    CHECK(ember_gpt2_byte_to_cpt(0x7F) == 0x0121);
    CHECK(ember_gpt2_byte_to_cpt(0xAD) == 0x0143);
    CHECK(ember_gpt2_byte_to_cpt(0xFF) == 0xFF);
    for (int b = 0; b < 256; b++) {
        CAPTURE(b);
        CHECK(ember_gpt2_cpt_to_byte(ember_gpt2_byte_to_cpt(static_cast<uint8_t>(b))) == b);
    }
    CHECK(ember_gpt2_cpt_to_byte(' ') == -1);
    CHECK(ember_gpt2_cpt_to_byte(0x0144) == -1);
}

}  // TEST_SUITE
