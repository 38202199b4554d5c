// A JSON string literal for the small JSON files and lines attnlab writes
// (summary.json, `audit --json`): quotes and backslashes escaped, a newline as
// \n, other control characters as \u00XX.
#pragma once

#include <cstdio>
#include <string>

namespace attnlab {

inline std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (const char ch : text) {
        const auto byte = static_cast<unsigned char>(ch);
        if (ch == '"' || ch == '\\') out += std::string("\\") + ch;
        else if (ch == '\n') out += "\\n";
        else if (byte < 0x20) {
            char code[8];
            std::snprintf(code, sizeof code, "\\u%04x", byte);
            out += code;
        } else out += ch;
    }
    return out + "\"";
}

}  // namespace attnlab
