#include "data/text_task.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <string_view>

#include "data/data_file.h"

namespace attnlab {

namespace {

std::string code_point_name(char32_t c) {
    char text[16];
    std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(c));
    return text;
}

// The path a text task reads, as its messages name it.
DataPath text_file(const std::string& path) { return DataPath{"text", "task.path", path}; }
const char* const kReader = "a text task";

constexpr size_t kCut = static_cast<size_t>(-1);

// The character that starts at bytes[i]: its length in bytes, with its code
// point in `c`; 0 when the bytes there are not UTF-8; kCut when they begin a
// character that the end of `bytes` cuts.
size_t decode_at(std::string_view bytes, size_t i, char32_t& c) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    const size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    if (n == 0) return 0;
    if (i + n > bytes.size()) return kCut;
    c = n == 1 ? lead : lead & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
        const auto next = static_cast<unsigned char>(bytes[i + k]);
        if ((next >> 6) != 0x2) return 0;
        c = (c << 6) | (next & 0x3f);
    }
    // overlong forms, surrogates and values past U+10FFFF are not UTF-8 either
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[n] || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff) return 0;
    return n;
}

// UTF-8 decoded as its bytes arrive in chunks: a character cut by the end of
// one chunk waits for the next. Errors name the byte offset from the start.
class Utf8Decoder {
public:
    explicit Utf8Decoder(std::string where) : where_(std::move(where)) {}

    template <class Emit> void feed(std::string_view chunk, Emit&& emit) {
        std::string joined;
        if (!pending_.empty()) {  // at most 3 bytes carried, so only a chunk that follows a cut is copied
            joined = pending_;
            joined.append(chunk);
            chunk = joined;
            pending_.clear();
        }
        size_t i = 0;
        while (i < chunk.size()) {
            char32_t c = 0;
            const size_t n = decode_at(chunk, i, c);
            if (n == kCut) {
                pending_.assign(chunk.substr(i));
                break;
            }
            if (n == 0) fail("text", where_ + ": not UTF-8 at byte " + std::to_string(offset_ + i));
            emit(c);
            i += n;
        }
        offset_ += i;
    }

    // The end of the input: a character still cut is not UTF-8.
    void finish() const {
        if (!pending_.empty()) fail("text", where_ + ": not UTF-8 at byte " + std::to_string(offset_));
    }

private:
    std::string where_;
    std::string pending_;  // the first bytes of a character cut by the end of the last chunk
    uint64_t offset_ = 0;  // bytes decoded before pending_
};

// Token ids of an alphabet's characters: a table for ASCII, a binary search beyond.
class AlphabetIndex {
public:
    explicit AlphabetIndex(const std::string& alphabet) : letters_(alphabet_letters(alphabet, "task.alphabet")) {
        ascii_.fill(-1);
        for (size_t i = 0; i < letters_.size() && letters_[i] < 0x80; ++i) ascii_[letters_[i]] = static_cast<int32_t>(i);
    }
    int32_t find(char32_t c) const {  // -1 when absent
        if (c < 0x80) return ascii_[c];
        const auto at = std::lower_bound(letters_.begin(), letters_.end(), c);
        return at != letters_.end() && *at == c ? static_cast<int32_t>(at - letters_.begin()) : -1;
    }

private:
    std::u32string letters_;
    std::array<int32_t, 0x80> ascii_{};
};

// Appends the token ids of the characters fed to it; "<where>: U+XXXX at
// character N is not in the model's alphabet" for one the alphabet lacks.
struct Tokenizer {
    const AlphabetIndex& index;
    const std::string& where;
    std::vector<int32_t>& out;
    void operator()(char32_t c) const {
        const int32_t token = index.find(c);
        if (token < 0)
            fail("text", where + ": " + code_point_name(c) + " at character " + std::to_string(out.size()) +
                             " is not in the model's alphabet (task.alphabet)");
        out.push_back(token);
    }
};

}  // namespace

std::u32string decode_utf8(const std::string& bytes, const std::string& where) {
    std::u32string out;
    Utf8Decoder decoder(where);
    decoder.feed(bytes, [&](char32_t c) { out.push_back(c); });
    decoder.finish();
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

std::string text_alphabet(const std::string& path) {
    const DataPath file = text_file(path);
    std::vector<bool> seen(0x110000, false);  // one bit per code point
    Utf8Decoder decoder(file.where());
    read_data_file(file, kMaxTextBytes, kReader, [&](std::string_view chunk) { decoder.feed(chunk, [&](char32_t c) { seen[c] = true; }); });
    decoder.finish();
    std::u32string letters;
    for (char32_t c = 0; c < seen.size(); ++c)
        if (seen[c]) letters.push_back(c);
    if (letters.size() < 2) file.fail(std::to_string(letters.size()) + " distinct character(s); nothing to predict");
    return encode_utf8(letters);
}

std::u32string alphabet_letters(const std::string& alphabet, const std::string& where) {
    const std::u32string letters = decode_utf8(alphabet, where);
    for (size_t i = 1; i < letters.size(); ++i) {
        if (letters[i] == letters[i - 1])
            fail("text", where + ": " + code_point_name(letters[i]) + " at character " + std::to_string(i) + " repeats character " +
                             std::to_string(i - 1) + " (an alphabet lists each character once)");
        if (letters[i] < letters[i - 1])
            fail("text", where + ": " + code_point_name(letters[i]) + " at character " + std::to_string(i) + " comes before " +
                             code_point_name(letters[i - 1]) + " at character " + std::to_string(i - 1) +
                             " (an alphabet is sorted by code point: token id = index)");
    }
    if (letters.size() < 2)
        fail("text", where + ": " + std::to_string(letters.size()) + " character(s); a text model needs at least 2");
    return letters;
}

std::vector<int32_t> text_to_tokens(const std::string& text, const std::string& alphabet, const std::string& where) {
    const AlphabetIndex index(alphabet);
    std::vector<int32_t> out;
    Utf8Decoder decoder(where);
    decoder.feed(text, Tokenizer{index, where, out});
    decoder.finish();
    return out;
}

std::string tokens_to_text(const std::vector<int32_t>& tokens, const std::string& alphabet) {
    const std::u32string letters = alphabet_letters(alphabet, "task.alphabet");
    std::u32string out;
    for (const int32_t t : tokens) out.push_back(t >= 0 && static_cast<size_t>(t) < letters.size() ? letters[t] : U'\uFFFD');
    return encode_utf8(out);
}

namespace {

// The file's characters as token ids of `alphabet`, read in chunks.
std::vector<int32_t> read_text_tokens(const std::string& path, const std::string& alphabet) {
    const DataPath file = text_file(path);
    const AlphabetIndex index(alphabet);
    std::vector<int32_t> tokens;
    tokens.reserve(check_data_file(file, kMaxTextBytes, kReader));  // at most a character a byte (never copied to shrink)
    const std::string where = file.where();
    Utf8Decoder decoder(where);
    const Tokenizer tokenize{index, where, tokens};
    read_data_file(file, kMaxTextBytes, kReader, [&](std::string_view chunk) { decoder.feed(chunk, tokenize); });
    decoder.finish();
    return tokens;
}

// The tokens of (path, alphabet), read once while any task holds them: the
// training and evaluation streams of a run share one array (a 165 MB text is
// 660 MB of int32 tokens; two copies used to be held).
std::shared_ptr<const std::vector<int32_t>> shared_text_tokens(const std::string& path, const std::string& alphabet) {
    static std::mutex mutex;
    static std::map<std::pair<std::string, std::string>, std::weak_ptr<const std::vector<int32_t>>> held;
    const std::lock_guard<std::mutex> lock(mutex);
    std::weak_ptr<const std::vector<int32_t>>& entry = held[{path, alphabet}];
    if (std::shared_ptr<const std::vector<int32_t>> tokens = entry.lock()) return tokens;
    auto tokens = std::make_shared<const std::vector<int32_t>>(read_text_tokens(path, alphabet));
    entry = tokens;
    return tokens;
}

}  // namespace

TextTask::TextTask(const std::string& path, const std::string& alphabet, size_t window, uint64_t seed, uint64_t stream)
    : tokens_(shared_text_tokens(path, alphabet)), window_(window), rng_(seed, stream) {
    const size_t n = tokens_->size(), span = window + 1;  // a window's characters
    const size_t held_out = std::max(n / 10, span);
    if (n < held_out + span)
        text_file(path).fail(std::to_string(n) + " characters; windows of task.max_len + 1 = " + std::to_string(span) +
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
        std::copy_n(tokens_->begin() + static_cast<std::ptrdiff_t>(start), T, inputs.begin() + static_cast<std::ptrdiff_t>(b * T));
        std::copy_n(tokens_->begin() + static_cast<std::ptrdiff_t>(start + 1), T, targets.begin() + static_cast<std::ptrdiff_t>(b * T));
        batch.lengths.push_back(T);
    }
    batch.inputs = Indices({batch_size, T}, std::move(inputs));
    batch.targets = Indices({batch_size, T}, std::move(targets));
    batch.loss_mask = Mask({batch_size, T}, std::vector<uint8_t>(batch_size * T, 1));
    return batch;
}

}  // namespace attnlab
