// Values quoted in messages (data/quoted.h).
#include "data/quoted.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace attnlab {
namespace {

using json = nlohmann::json;

// The length of the valid UTF-8 sequence (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF) starting at bytes[at], or 0.
size_t utf8_length(std::string_view bytes, size_t at) {
    const auto byte = [&](size_t i) { return at + i < bytes.size() ? static_cast<unsigned char>(bytes[at + i]) : 0u; };
    const auto in = [](unsigned value, unsigned low, unsigned high) { return value >= low && value <= high; };
    const unsigned lead = byte(0), second = byte(1);
    if (in(lead, 0xC2, 0xDF)) return in(second, 0x80, 0xBF) ? 2 : 0;
    const bool three = (lead == 0xE0 && in(second, 0xA0, 0xBF)) || (in(lead, 0xE1, 0xEC) && in(second, 0x80, 0xBF)) ||
                       (lead == 0xED && in(second, 0x80, 0x9F)) || (in(lead, 0xEE, 0xEF) && in(second, 0x80, 0xBF));
    if (three) return in(byte(2), 0x80, 0xBF) ? 3 : 0;
    const bool four = (lead == 0xF0 && in(second, 0x90, 0xBF)) || (in(lead, 0xF1, 0xF3) && in(second, 0x80, 0xBF)) ||
                      (lead == 0xF4 && in(second, 0x80, 0x8F));
    if (four) return in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
    return 0;
}

std::string hex_escape(const char* format, unsigned value) {
    char text[8];
    std::snprintf(text, sizeof text, format, value);
    return text;
}

// The escaped form of the character (or invalid byte) at bytes[at], and how many bytes it takes.
std::string escaped_at(std::string_view bytes, size_t at, bool escape_quotes, size_t& taken) {
    const auto byte = static_cast<unsigned char>(bytes[at]);
    taken = 1;
    if (byte < 0x80) {
        if ((byte == '"' || byte == '\\') && escape_quotes) return std::string("\\") + static_cast<char>(byte);
        if (byte == '\n') return "\\n";
        if (byte == '\r') return "\\r";
        if (byte == '\t') return "\\t";
        if (byte < 0x20 || byte == 0x7F) return hex_escape("\\u%04X", byte);
        return std::string(1, static_cast<char>(byte));
    }
    taken = utf8_length(bytes, at);
    if (taken == 0) {
        taken = 1;
        return hex_escape("\\x%02X", byte);
    }
    const std::string_view character = bytes.substr(at, taken);
    if (byte == 0xC2 && static_cast<unsigned char>(character[1]) < 0xA0)  // C1 controls U+0080..U+009F
        return hex_escape("\\u%04X", static_cast<unsigned char>(character[1]));
    if (character == "\u2028" || character == "\u2029")  // line and paragraph separators
        return character == "\u2028" ? "\\u2028" : "\\u2029";
    return std::string(character);
}

// Appends `bytes` escaped, as long as `out` grows by at most `budget`; returns
// how many bytes of `bytes` went in (all of them, or a cut before a character).
size_t append_escaped(std::string& out, std::string_view bytes, size_t budget, bool escape_quotes) {
    size_t written = 0, at = 0;
    while (at < bytes.size()) {
        size_t taken = 0;
        const std::string piece = escaped_at(bytes, at, escape_quotes, taken);
        if (written + piece.size() > budget) break;
        out += piece;
        written += piece.size();
        at += taken;
    }
    return at;
}

void append_string(std::string& out, std::string_view text, size_t limit) {
    const size_t room = limit > out.size() ? limit - out.size() : 0;
    out += '"';
    out += append_escaped(out, text, room, true) < text.size() ? "...\"" : "\"";
}

// Compact JSON of `value` at nesting `depth`, until `out` reaches `limit` bytes.
// The recursion stops at kQuotedDepth, whatever the value's own depth.
void append_json(std::string& out, const json& value, int depth, size_t limit) {
    if (value.is_string()) return append_string(out, value.get_ref<const std::string&>(), limit);
    if (!value.is_array() && !value.is_object()) {
        out += value.dump();  // null, a boolean or a number: a few bytes, never throws
        return;
    }
    const bool array = value.is_array();
    if (value.empty()) {
        out += array ? "[]" : "{}";
        return;
    }
    if (depth >= kQuotedDepth) {
        out += array ? "[...]" : "{...}";
        return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
        if (out.size() >= limit) {
            out += first ? "..." : ",...";
            break;
        }
        if (!first) out += ',';
        first = false;
        if (!array) {
            append_string(out, it.key(), limit);
            out += ':';
        }
        append_json(out, it.value(), depth + 1, limit);
    }
    out += array ? ']' : '}';
}

}  // namespace

std::string quoted_bytes(std::string_view bytes) {
    std::string out = "\"";
    const size_t used = append_escaped(out, bytes, kQuotedBytes, true);
    if (used == bytes.size()) return out + "\"";
    return out + "...\" (" + std::to_string(bytes.size()) + " bytes)";
}

std::string quoted_json(const json& value) {
    std::string out;
    append_json(out, value, 0, kQuotedBytes);
    return out;
}

std::string escaped(std::string_view text, size_t max_bytes) {
    std::string out;
    const size_t used = append_escaped(out, text, max_bytes, false);
    if (used == text.size()) return out;
    return out + "...(" + std::to_string(text.size()) + " bytes)";
}

std::string json_nesting_problem(std::string_view text) {
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;  // the escaped character, a quote included
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                return "arrays and objects nested more than " + std::to_string(kMaxJsonDepth) + " deep at byte " + std::to_string(i);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return "";
}

}  // namespace attnlab
