// The ordered JSON reader and writer behind ember_chat_render_json and tojson.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "runtime/error.h"
#include "runtime/json.h"

namespace {

ember_status parse_status(const std::string & text, std::string * msg = nullptr) {
    try {
        ember_json_parse(text);
    } catch (const ember_error & e) {
        if (msg) *msg = e.what();
        return e.status;
    }
    return EMBER_OK;
}

}  // namespace

TEST_SUITE("chat") {

TEST_CASE("[jinja] JSON: values, key order, duplicate keys") {
    const ember_json j = ember_json_parse(R"( {"z": 1, "a": [true, false, null, -2.5e3, "x\u00e9\ud83d\udc4b\n"], "m": {}, "z": 3} )");
    REQUIRE(j.kind == EMBER_JSON_OBJECT);
    REQUIRE(j.obj.size() == 3);
    // a repeated key keeps its first position and takes the last value, like a Python dict
    CHECK(j.obj[0].first == "z");
    CHECK(j.obj[0].second.i == 3);
    CHECK(j.obj[1].first == "a");
    CHECK(j.obj[2].first == "m");
    const ember_json & a = *j.find("a");
    REQUIRE(a.arr.size() == 5);
    CHECK(a.arr[0].kind == EMBER_JSON_BOOL);
    CHECK(a.arr[2].kind == EMBER_JSON_NULL);
    CHECK(a.arr[3].kind == EMBER_JSON_FLOAT);
    CHECK(a.arr[3].f == -2500.0);
    CHECK(a.arr[4].str == "x\xC3\xA9\xF0\x9F\x91\x8B\n");
    CHECK(j.find("nope") == nullptr);

    CHECK(ember_json_parse("12").kind == EMBER_JSON_INT);
    CHECK(ember_json_parse("12.0").kind == EMBER_JSON_FLOAT);
    CHECK(ember_json_parse("-0").kind == EMBER_JSON_INT);
    CHECK(std::isnan(ember_json_parse("NaN").f));
    CHECK(ember_json_parse("-Infinity").f == -HUGE_VAL);
}

TEST_CASE("[jinja] JSON: malformed input names line and column") {
    std::string msg;
    CHECK(parse_status("{\n  \"a\": tru }", &msg) == EMBER_ERR_INVALID_ARG);
    CHECK(msg.find("JSON line 2 column 8") != std::string::npos);
    for (const char * bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"abc", "\"\\q\"", "\"a\x01\"", "[1] x", "{'a': 1}", "\"\\u12\""}) {
        CAPTURE(bad);
        CHECK(parse_status(bad) == EMBER_ERR_INVALID_ARG);
    }
    std::string deep(100000, '[');
    CHECK(parse_status(deep) == EMBER_ERR_INVALID_ARG);
}

TEST_CASE("[jinja] JSON: dumps like Python's json.dumps") {
    const ember_json j = ember_json_parse(R"({"b": [1, 2.5, "\u00e9\"\\\t\u0001"], "a": {}, "c": []})");
    CHECK(ember_json_dump(j) == "{\"b\": [1, 2.5, \"\xC3\xA9\\\"\\\\\\t\\u0001\"], \"a\": {}, \"c\": []}");

    ember_json_dump_options pretty;
    pretty.indent   = 2;
    pretty.item_sep = ",";
    CHECK(ember_json_dump(j, pretty) == "{\n  \"b\": [\n    1,\n    2.5,\n    \"\xC3\xA9\\\"\\\\\\t\\u0001\"\n  ],\n  \"a\": {},\n  \"c\": []\n}");

    ember_json_dump_options ascii;
    ascii.ensure_ascii = true;
    ascii.sort_keys    = true;
    CHECK(ember_json_dump(ember_json_parse(R"({"b": "\u00e9\ud83d\udc4b", "a": 1})"), ascii) == R"({"a": 1, "b": "\u00e9\ud83d\udc4b"})");

    ember_json_dump_options small;
    small.max_size = 8;
    CHECK_THROWS_AS(ember_json_dump(j, small), ember_error);
}

TEST_CASE("[jinja] JSON: floats in Python's repr") {
    CHECK(ember_json_format_double(1.0) == "1.0");
    CHECK(ember_json_format_double(-2.0) == "-2.0");
    CHECK(ember_json_format_double(0.1 + 0.2) == "0.30000000000000004");
    CHECK(ember_json_format_double(812.5) == "812.5");
    CHECK(ember_json_format_double(1e16) == "1e+16");
    CHECK(ember_json_format_double(1.5e16) == "1.5e+16");
    CHECK(ember_json_format_double(9999999999999998.0) == "9999999999999998.0");
    CHECK(ember_json_format_double(1e-4) == "0.0001");
    CHECK(ember_json_format_double(1e-5) == "1e-05");
    CHECK(ember_json_format_double(1.234e-300) == "1.234e-300");
    CHECK(ember_json_format_double(0.0) == "0.0");
    CHECK(ember_json_format_double(-0.0) == "-0.0");
    CHECK(ember_json_format_double(HUGE_VAL) == "inf");
    ember_json inf;
    inf.kind = EMBER_JSON_FLOAT;
    inf.f    = -HUGE_VAL;
    CHECK(ember_json_dump(inf) == "-Infinity");
}

}  // TEST_SUITE
