// A small JSON reader and writer that keeps object key order.
//
// Reading follows Python's json.loads: integers without a fraction or exponent stay integers
// (int64; larger ones become doubles), an object that repeats a key keeps the first position
// and the last value, and NaN/Infinity literals are accepted. Writing follows json.dumps as
// transformers' `tojson` calls it: separators ", " and ": " (or "," and ": " with an indent),
// floats in Python's shortest repr, non-ASCII written as-is unless ensure_ascii.
// Malformed input throws ember_error(EMBER_ERR_INVALID_ARG, "JSON line L column C: ...").
#ifndef EMBER_RUNTIME_JSON_H
#define EMBER_RUNTIME_JSON_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

enum ember_json_kind : uint8_t {
    EMBER_JSON_NULL,
    EMBER_JSON_BOOL,
    EMBER_JSON_INT,
    EMBER_JSON_FLOAT,
    EMBER_JSON_STRING,
    EMBER_JSON_ARRAY,
    EMBER_JSON_OBJECT,
};

struct ember_json {
    ember_json_kind                                  kind = EMBER_JSON_NULL;
    bool                                             b    = false;
    int64_t                                          i    = 0;
    double                                           f    = 0.0;
    std::string                                      str;
    std::vector<ember_json>                          arr;
    std::vector<std::pair<std::string, ember_json>> obj;  // in file order

    // The value of `key` in an object, nullptr when absent or not an object.
    const ember_json * find(const std::string & key) const;
};

struct ember_json_dump_options {
    int         indent       = -1;     // < 0: one line; >= 0: newline + indent spaces per level
    std::string indent_str;            // used instead of `indent` spaces when not empty
    std::string item_sep     = ", ";   // json.dumps defaults ("," when indenting)
    std::string key_sep      = ": ";
    bool        ensure_ascii = false;  // \uXXXX for non-ASCII
    bool        sort_keys    = false;
    size_t      max_size     = 0;      // 0: unlimited; else throw EMBER_ERR_INVALID_ARG past it
};

// Parses a whole JSON text (surrounding whitespace allowed). Nesting deeper than 512 throws.
ember_json  ember_json_parse(const std::string & text);
std::string ember_json_dump(const ember_json & v, const ember_json_dump_options & opt = {});

// Appends `s` as a JSON string literal (with the quotes), escaped as json.dumps does.
void        ember_json_write_string(std::string & out, const std::string & s, bool ensure_ascii);
// Python's repr() of a float: shortest round-trip digits, "1.0", "1e+16", "1e-05", "inf", "nan".
std::string ember_json_format_double(double v);

#endif  // EMBER_RUNTIME_JSON_H
