// How a value from a file or a command line appears in a message: quoted,
// escaped and cut short, so that a message stays one short line of valid UTF-8
// whatever the value holds (invalid UTF-8, control characters, megabytes, a JSON
// value nested 400,000 deep). Every message that quotes such a value goes
// through quoted_bytes() or quoted_json(); nothing here throws. (Not named
// quoted(): argument-dependent lookup would find std::quoted for a std::string.)
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <cstddef>
#include <string>
#include <string_view>

namespace attnlab {

// The most of a value a message shows: about kQuotedBytes bytes of its text,
// and arrays and objects kQuotedDepth deep (deeper ones as [...] and {...}).
constexpr size_t kQuotedBytes = 64;
constexpr int kQuotedDepth = 4;

// A byte string as a JSON string literal: "..." with \" \\ \n \r \t, \u00XX for
// the other C0 and C1 control characters and DEL, \u2028 and \u2029; a byte
// that is not part of valid UTF-8 as \xFF. A longer one is cut after about
// kQuotedBytes (never inside a character or an escape): "abc..." (N bytes).
std::string quoted_bytes(std::string_view bytes);

// A JSON value as compact JSON (strings as quoted_bytes(), without the byte count):
// containers deeper than kQuotedDepth as [...] or {...}, and once about
// kQuotedBytes are out, the rest of a container as "...".
std::string quoted_json(const nlohmann::json& value);

// Text shown without quotes, escaped as quoted_bytes() escapes it (quotes and
// backslashes left as they are), cut after about max_bytes: "...(N bytes)".
// For another library's message (nlohmann's parse errors quote the text they
// last read, a whole string of the file if they must), and the CLI's line.
constexpr size_t kLibraryMessageBytes = 240;
std::string escaped(std::string_view text, size_t max_bytes = kLibraryMessageBytes);

// The deepest nesting of arrays and objects a JSON file attnlab reads may have:
// serde_json's default limit, which Hugging Face's safetensors and tokenizers
// parse with, so that no file they read is refused. Deeper text is refused
// before it is parsed: nlohmann's copies, comparisons and dump() recurse.
constexpr size_t kMaxJsonDepth = 128;

// "" when `text` nests arrays and objects at most kMaxJsonDepth deep (strings
// skipped, escapes included), else the problem, in words:
// "arrays and objects nested more than 128 deep at byte 128" (counting from 0).
std::string json_nesting_problem(std::string_view text);

}  // namespace attnlab
