// Unicode lookups over the generated tables, UTF-8 helpers and the GPT-2 byte alphabet.
#include "runtime/unicode.h"

#include <algorithm>
#include <vector>

namespace {

// Regex class of each general category.
constexpr uint16_t k_cat_flags[EMBER_UCAT_COUNT] = {
    EMBER_UFLAG_OTHER,                                                                                  // Cn
    EMBER_UFLAG_LETTER, EMBER_UFLAG_LETTER, EMBER_UFLAG_LETTER, EMBER_UFLAG_LETTER, EMBER_UFLAG_LETTER,  // L*
    EMBER_UFLAG_MARK, EMBER_UFLAG_MARK, EMBER_UFLAG_MARK,                                               // M*
    EMBER_UFLAG_NUMBER, EMBER_UFLAG_NUMBER, EMBER_UFLAG_NUMBER,                                         // N*
    EMBER_UFLAG_PUNCT, EMBER_UFLAG_PUNCT, EMBER_UFLAG_PUNCT, EMBER_UFLAG_PUNCT,                         // Pc Pd Ps Pe
    EMBER_UFLAG_PUNCT, EMBER_UFLAG_PUNCT, EMBER_UFLAG_PUNCT,                                            // Pi Pf Po
    EMBER_UFLAG_SYMBOL, EMBER_UFLAG_SYMBOL, EMBER_UFLAG_SYMBOL, EMBER_UFLAG_SYMBOL,                     // S*
    EMBER_UFLAG_SEPARATOR, EMBER_UFLAG_SEPARATOR, EMBER_UFLAG_SEPARATOR,                                // Z*
    EMBER_UFLAG_OTHER, EMBER_UFLAG_OTHER, EMBER_UFLAG_OTHER, EMBER_UFLAG_OTHER,                         // Cc Cf Cs Co
};
static_assert(EMBER_UCAT_COUNT == 30, "k_cat_flags has one entry per category");

ember_ucat category_search(uint32_t cpt) {
    if (cpt > 0x10FFFF) return EMBER_UCAT_CN;
    const ember_unicode_cat_range * begin = ember_unicode_cat_ranges;
    const ember_unicode_cat_range * end   = begin + ember_unicode_n_cat_ranges;
    const ember_unicode_cat_range * it    = std::upper_bound(
        begin, end, cpt, [](uint32_t c, const ember_unicode_cat_range & r) { return c < r.first; });
    return it == begin ? EMBER_UCAT_CN : static_cast<ember_ucat>((it - 1)->cat);
}

bool whitespace_search(uint32_t cpt) {
    for (size_t i = 0; i < ember_unicode_n_ws_ranges; i++) {
        if (cpt >= ember_unicode_ws_ranges[i].first && cpt <= ember_unicode_ws_ranges[i].last) return true;
    }
    return false;
}

// Flags of the Basic Multilingual Plane, where almost all text lives, built once.
struct bmp_table {
    std::vector<uint8_t>  cat;
    std::vector<uint16_t> flags;
    bmp_table() : cat(0x10000), flags(0x10000) {
        for (uint32_t c = 0; c < 0x10000; c++) {
            cat[c]   = category_search(c);
            flags[c] = k_cat_flags[cat[c]] | (whitespace_search(c) ? EMBER_UFLAG_WHITESPACE : 0);
        }
    }
};

const bmp_table & bmp() {
    static const bmp_table t;
    return t;
}

struct gpt2_alphabet {
    uint32_t byte_to_cpt[256];
    int16_t  cpt_to_byte[324];  // the alphabet lies in [0, 324)
    gpt2_alphabet() {
        std::fill(cpt_to_byte, cpt_to_byte + 324, int16_t(-1));
        uint32_t n = 0;
        for (uint32_t b = 0; b < 256; b++) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            byte_to_cpt[b]       = printable ? b : 256 + n++;
            cpt_to_byte[byte_to_cpt[b]] = static_cast<int16_t>(b);
        }
    }
};

const gpt2_alphabet & gpt2() {
    static const gpt2_alphabet a;
    return a;
}

}  // namespace

ember_ucat ember_unicode_category(uint32_t cpt) {
    return cpt < 0x10000 ? static_cast<ember_ucat>(bmp().cat[cpt]) : category_search(cpt);
}

uint16_t ember_unicode_flags(uint32_t cpt) {
    if (cpt < 0x10000) return bmp().flags[cpt];
    return k_cat_flags[category_search(cpt)] | (whitespace_search(cpt) ? EMBER_UFLAG_WHITESPACE : 0);
}

uint32_t ember_unicode_tolower(uint32_t cpt) {
    const ember_unicode_case_run * begin = ember_unicode_lower_runs;
    const ember_unicode_case_run * end   = begin + ember_unicode_n_lower_runs;
    const ember_unicode_case_run * it    = std::upper_bound(
        begin, end, cpt, [](uint32_t c, const ember_unicode_case_run & r) { return c < r.first; });
    if (it == begin) return cpt;
    --it;
    if (cpt > it->last || (cpt - it->first) % it->stride != 0) return cpt;
    return static_cast<uint32_t>(static_cast<int64_t>(cpt) + it->delta);
}

size_t ember_utf8_seq_len(uint8_t lead) {
    static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k_len[lead >> 4];
}

uint32_t ember_utf8_decode(const char * s, size_t n, size_t & i) {
    const uint8_t c0 = static_cast<uint8_t>(s[i]);
    if (c0 < 0x80) {
        i += 1;
        return c0;
    }
    size_t   len = 0;
    uint32_t cpt = 0;
    if ((c0 & 0xE0) == 0xC0) {
        len = 2;
        cpt = c0 & 0x1F;
    } else if ((c0 & 0xF0) == 0xE0) {
        len = 3;
        cpt = c0 & 0x0F;
    } else if ((c0 & 0xF8) == 0xF0) {
        len = 4;
        cpt = c0 & 0x07;
    }
    if (len == 0 || i + len > n) {
        i += 1;
        return 0xFFFD;
    }
    for (size_t k = 1; k < len; k++) {
        const uint8_t c = static_cast<uint8_t>(s[i + k]);
        if ((c & 0xC0) != 0x80) {
            i += 1;
            return 0xFFFD;
        }
        cpt = (cpt << 6) | (c & 0x3F);
    }
    i += len;
    return cpt;
}

void ember_utf8_append(std::string & out, uint32_t cpt) {
    if (cpt > 0x10FFFF) cpt = 0xFFFD;
    if (cpt < 0x80) {
        out += static_cast<char>(cpt);
    } else if (cpt < 0x800) {
        out += static_cast<char>(0xC0 | (cpt >> 6));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    } else if (cpt < 0x10000) {
        out += static_cast<char>(0xE0 | (cpt >> 12));
        out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cpt >> 18));
        out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    }
}

size_t ember_utf8_complete_prefix(const char * s, size_t n) {
    // Look back over at most three continuation bytes for the lead byte of the last sequence.
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        const uint8_t c = static_cast<uint8_t>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;
        size_t need = 1;
        if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
            need = 2;
        } else if ((c & 0xF0) == 0xE0) {
            need = 3;
        } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
            need = 4;
        }
        return need > back ? n - back : n;
    }
    return n;  // stray continuation bytes: nothing will complete them
}

uint32_t ember_gpt2_byte_to_cpt(uint8_t byte) { return gpt2().byte_to_cpt[byte]; }

int32_t ember_gpt2_cpt_to_byte(uint32_t cpt) { return cpt < 324 ? gpt2().cpt_to_byte[cpt] : -1; }
