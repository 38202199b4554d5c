// Numbers typed by a user (command-line options, token ids, head references,
// numbers in our own text files): the whole text or nothing, no locale, no
// exceptions, and a value outside T's range refused rather than wrapped.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace attnlab {

template <class T> std::optional<T> parse_whole(std::string_view text) {
    T value{};
    const char* end = text.data() + text.size();
    const auto result = std::from_chars(text.data(), end, value);
    if (text.empty() || result.ec != std::errc() || result.ptr != end) return std::nullopt;
    return value;
}

}  // namespace attnlab
