#include "data/text_task.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace attnlab {

namespace {

std::string code_point_name(char32_t c) {
    char text[16];
    std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(c));
    return text;
}

}  // namespace

std::u32string decode_utf8(const std::string& bytes, const std::string& where) {
    std::u32string out;
    for (size_t i = 0; i < bytes.size();) {
        const auto lead = static_cast<unsigned char>(bytes[i]);
        const size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
        if (n == 0 || i + n > bytes.size()) fail("text", where + ": not UTF-8 at byte " + std::to_string(i));
        char32_t c = n == 1 ? lead : lead & (0x7f >> n);
        for (size_t k = 1; k < n; ++k) {
            const auto next = static_cast<unsigned char>(bytes[i + k]);
            if ((next >> 6) != 0x2) fail("text", where + ": not UTF-8 at byte " + std::to_string(i));
            c = (c << 6) | (next & 0x3f);
        }
        // overlong forms, surrogates and values past U+10FFFF are not UTF-8 either
        const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (c < least[n] || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
            fail("text", where + ": not UTF-8 at byte " + std::to_string(i));
        out.push_back(c);
        i += n;
    }
    return out;
}

std::string encode_utf8(const std::u32string& text) {
    std::string out;
    for (const char32_t c : text) {
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x800) {
            out += static_cast<char>(0xc0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            out += static_cast<char>(0xe0 | (c >> 12));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (c & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (c >> 18));
            out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (c & 0x3f));
        }
    }
    return out;
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("text", path + ": cannot read it (" + std::strerror(errno) + ")");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

std::string text_alphabet(const std::string& path) {
    const std::u32string text = decode_utf8(read_text_file(path), path);
    const std::set<char32_t> distinct(text.begin(), text.end());
    return encode_utf8(std::u32string(distinct.begin(), distinct.end()));
}

std::vector<int32_t> text_to_tokens(const std::string& text, const std::string& alphabet, const std::string& where) {
    const std::u32string letters = decode_utf8(alphabet, "task.alphabet"), chars = decode_utf8(text, where);
    std::vector<int32_t> out;
    for (size_t i = 0; i < chars.size(); ++i) {
        const auto at = std::lower_bound(letters.begin(), letters.end(), chars[i]);
        if (at == letters.end() || *at != chars[i])
            fail("text", where + ": " + code_point_name(chars[i]) + " at character " + std::to_string(i) +
                             " is not in the model's alphabet (task.alphabet)");
        out.push_back(static_cast<int32_t>(at - letters.begin()));
    }
    return out;
}

std::string tokens_to_text(const std::vector<int32_t>& tokens, const std::string& alphabet) {
    const std::u32string letters = decode_utf8(alphabet, "task.alphabet");
    std::u32string out;
    for (const int32_t t : tokens) out.push_back(t >= 0 && static_cast<size_t>(t) < letters.size() ? letters[t] : U'\uFFFD');
    return encode_utf8(out);
}

TextTask::TextTask(const std::string& path, const std::string& alphabet, size_t window, uint64_t seed, uint64_t stream)
    : tokens_(text_to_tokens(read_text_file(path), alphabet, path)), window_(window), rng_(seed, stream) {
    const size_t n = tokens_.size(), span = window + 1;  // a window's characters
    const size_t held_out = std::max(n / 10, span);
    if (n < held_out + span)
        fail("text", path + ": " + std::to_string(n) + " characters; windows of task.max_len + 1 = " + std::to_string(span) +
                         " need at least " + std::to_string(held_out + span) + " (one to train on, one held out)");
    first_ = stream == 0 ? 0 : n - held_out;
    last_ = (stream == 0 ? n - held_out : n) - span + 1;
}

Batch TextTask::next(size_t batch_size) {
    const size_t T = window_;
    std::vector<int32_t> inputs(batch_size * T), targets(batch_size * T);
    Batch batch;
    for (size_t b = 0; b < batch_size; ++b) {
        const size_t start = first_ + static_cast<size_t>(rng_.integer(0, static_cast<int64_t>(last_ - first_)));
        std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(start), T, inputs.begin() + static_cast<std::ptrdiff_t>(b * T));
        std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(start + 1), T, targets.begin() + static_cast<std::ptrdiff_t>(b * T));
        batch.lengths.push_back(T);
    }
    batch.inputs = Indices({batch_size, T}, std::move(inputs));
    batch.targets = Indices({batch_size, T}, std::move(targets));
    batch.loss_mask = Mask({batch_size, T}, std::vector<uint8_t>(batch_size * T, 1));
    return batch;
}

}  // namespace attnlab
