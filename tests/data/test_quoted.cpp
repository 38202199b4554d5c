// Values quoted in messages (data/quoted.h): every escape by hand, the length
// and depth bounds, and random bytes always giving short, valid UTF-8 without
// control characters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "data/quoted.h"
#include "data/text_task.h"

namespace attnlab {
namespace {

using nlohmann::json;

// Whether `text` is valid UTF-8 holding no control character (C0, DEL, C1).
bool valid_and_printable(const std::string& text) {
    try {
        for (const char32_t c : decode_utf8(text, "test"))
            if (c < 0x20 || (c >= 0x7F && c <= 0x9F)) return false;
    } catch (const Error&) {
        return false;
    }
    return true;
}

// An array nested `depth` deep, built without recursion (as the parser builds one).
json nested_array(size_t depth) {
    json value = json::array();
    for (size_t i = 1; i < depth; ++i) {
        json outer = json::array();
        outer.push_back(std::move(value));
        value = std::move(outer);
    }
    return value;
}

TEST(Quoted, BytesAreEscapedByHand) {
    EXPECT_EQ(quoted_bytes(""), "\"\"");
    EXPECT_EQ(quoted_bytes("merges.txt"), "\"merges.txt\"");
    EXPECT_EQ(quoted_bytes("\xff\xfe"), "\"\\xFF\\xFE\"");  // a merges.txt line of issue 51
    EXPECT_EQ(quoted_bytes("a\"b\\c"), "\"a\\\"b\\\\c\"");
    EXPECT_EQ(quoted_bytes("1\n2\r3\t4"), "\"1\\n2\\r3\\t4\"");
    EXPECT_EQ(quoted_bytes(std::string("\0\x1b\x7f", 3)), "\"\\u0000\\u001B\\u007F\"");
    EXPECT_EQ(quoted_bytes("\xc2\x85\xc2\x9b"), "\"\\u0085\\u009B\"");                // C1 controls (NEL, CSI)
    EXPECT_EQ(quoted_bytes("\xe2\x80\xa8\xe2\x80\xa9"), "\"\\u2028\\u2029\"");      // line and paragraph separators
    EXPECT_EQ(quoted_bytes("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xc2\xa0"), "\"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xc2\xa0\"");
    // not UTF-8: overlong '/', a surrogate, past U+10FFFF, a lone continuation, a cut character
    EXPECT_EQ(quoted_bytes("\xc0\xaf"), "\"\\xC0\\xAF\"");
    EXPECT_EQ(quoted_bytes("\xed\xa0\x80"), "\"\\xED\\xA0\\x80\"");
    EXPECT_EQ(quoted_bytes("\xf4\x90\x80\x80"), "\"\\xF4\\x90\\x80\\x80\"");
    EXPECT_EQ(quoted_bytes("a\x80z"), "\"a\\x80z\"");
    EXPECT_EQ(quoted_bytes("\xe6\x97"), "\"\\xE6\\x97\"");
}

TEST(Quoted, LongBytesAreCutWithTheirSize) {
    EXPECT_EQ(quoted_bytes(std::string(kQuotedBytes, 'x')), "\"" + std::string(kQuotedBytes, 'x') + "\"");
    EXPECT_EQ(quoted_bytes(std::string(1 << 20, 'x')), "\"" + std::string(kQuotedBytes, 'x') + "...\" (1048576 bytes)");
    // never inside a character: 21 of the 3-byte characters are 63 bytes, a 22nd would be 66
    std::string days;
    for (int i = 0; i < 100; ++i) days += "\xe6\x97\xa5";
    std::string shown;
    for (int i = 0; i < 21; ++i) shown += "\xe6\x97\xa5";
    EXPECT_EQ(quoted_bytes(days), "\"" + shown + "...\" (300 bytes)");
    // nor inside an escape: 10 of the 6-byte \u0001 are 60 bytes
    std::string escapes;
    for (int i = 0; i < 10; ++i) escapes += "\\u0001";
    EXPECT_EQ(quoted_bytes(std::string(100, '\x01')), "\"" + escapes + "...\" (100 bytes)");
}

TEST(Quoted, RandomBytesGiveShortValidUtf8) {
    std::mt19937 rng(51);
    for (int trial = 0; trial < 2000; ++trial) {
        std::string bytes(rng() % 300, '\0');
        for (char& b : bytes) b = static_cast<char>(rng() % 4 == 0 ? 0x80 + rng() % 0x80 : rng() % 0x100);
        const std::string shown = quoted_bytes(bytes);
        ASSERT_TRUE(valid_and_printable(shown)) << shown;
        ASSERT_LE(shown.size(), kQuotedBytes + 24) << shown;
        const std::string text = escaped(bytes, 100);
        ASSERT_TRUE(valid_and_printable(text)) << text;
        ASSERT_LE(text.size(), 100u + 20) << text;
    }
}

TEST(Quoted, JsonValuesAreCompactAndBounded) {
    EXPECT_EQ(quoted_json(json::parse(R"({"type": "Lowercase", "n": [1, 2.5, -3, true, null]})")),
              R"({"n":[1,2.5,-3,true,null],"type":"Lowercase"})");
    EXPECT_EQ(quoted_json(json("l l l")), "\"l l l\"");
    EXPECT_EQ(quoted_json(json::array()), "[]");
    EXPECT_EQ(quoted_json(json::object()), "{}");
    // kQuotedDepth containers, then [...] / {...}
    EXPECT_EQ(quoted_json(nested_array(4)), "[[[[]]]]");
    EXPECT_EQ(quoted_json(nested_array(5)), "[[[[[]]]]]");  // an empty one shows whole
    EXPECT_EQ(quoted_json(nested_array(6)), "[[[[[...]]]]]");
    EXPECT_EQ(quoted_json(json::parse(R"({"a":{"b":{"c":{"d":{"e":1}}}}})")), R"({"a":{"b":{"c":{"d":{...}}}}})");
    // 400,000 deep, as the parser builds it from a file: no recursion past kQuotedDepth
    EXPECT_EQ(quoted_json(nested_array(400'000)), "[[[[[...]]]]]");
    // a million elements: the first ones, then ...
    const std::string wide = quoted_json(json(std::vector<int>(1'000'000, 7)));
    EXPECT_EQ(wide.substr(0, 6), "[7,7,7");
    EXPECT_EQ(wide.substr(wide.size() - 5), ",...]");
    EXPECT_LE(wide.size(), kQuotedBytes + 8);
    // strings in a value are cut too, and bytes nlohmann would refuse to dump are escaped
    const std::string long_string = quoted_json(json::array({std::string(1 << 20, 'z')}));
    EXPECT_EQ(long_string, "[\"" + std::string(kQuotedBytes - 1, 'z') + "...\"]");  // the [ counts
    EXPECT_EQ(quoted_json(json{{"\xff", "\xfe"}}), "{\"\\xFF\":\"\\xFE\"}");
}

TEST(Quoted, LibraryMessagesAreEscapedAndCut) {
    EXPECT_EQ(escaped("parse error: last read: '\"ab\\'"), "parse error: last read: '\"ab\\'");  // quotes kept
    EXPECT_EQ(escaped("x\xff\ty"), "x\\xFF\\ty");
    EXPECT_EQ(escaped(std::string(1000, 'q')), std::string(kLibraryMessageBytes, 'q') + "...(1000 bytes)");
    EXPECT_EQ(escaped(std::string(1000, 'q'), std::string::npos), std::string(1000, 'q'));
}

TEST(Quoted, JsonNestingIsBounded) {
    const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    EXPECT_EQ(json_nesting_problem(nested(kMaxJsonDepth)), "");
    EXPECT_EQ(json_nesting_problem(nested(kMaxJsonDepth + 1)), "arrays and objects nested more than 128 deep at byte 128");
    EXPECT_EQ(json_nesting_problem(nested(400'000)), "arrays and objects nested more than 128 deep at byte 128");
    EXPECT_EQ(json_nesting_problem("{\"a\": " + nested(kMaxJsonDepth) + "}"), "arrays and objects nested more than 128 deep at byte 133");
    // siblings do not add up, and brackets inside strings (an escaped quote too) do not count
    std::string siblings = "[";
    for (int i = 0; i < 1000; ++i) siblings += nested(100) + ",";
    EXPECT_EQ(json_nesting_problem(siblings + "0]"), "");
    EXPECT_EQ(json_nesting_problem("[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]"), "");
    EXPECT_EQ(json_nesting_problem("{\"\\\\\": " + nested(kMaxJsonDepth + 1) + "}"), "arrays and objects nested more than 128 deep at byte 134");
}

}  // namespace
}  // namespace attnlab
