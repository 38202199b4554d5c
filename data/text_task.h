// The `text` task: next-character prediction over a UTF-8 text file. The
// vocabulary is the file's characters (Unicode code points), sorted, token id =
// index: the alphabet, which the run's config keeps (task.alphabet) so that every
// checkpoint can read and write text without the file. A batch row is a window
// of max_len + 1 characters at a random offset: inputs its first max_len,
// targets its last max_len, every position counted. The last tenth of the file
// (at least one window) is held out: stream 0 samples windows from the rest,
// any other stream from the held-out end.
//
// The file (task.path) must be a regular file of at most kMaxTextBytes; it is
// read in chunks and decoded as it comes (data/data_file.h), never whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tasks.h"

namespace attnlab {

// The most bytes of text a text task reads: its tokens take 4 bytes a character
// (1 GiB at most), on top of what the model needs.
constexpr uint64_t kMaxTextBytes = uint64_t{256} << 20;

// The code points of UTF-8 `bytes`; "[text] <where>: not UTF-8 at byte N" otherwise.
std::u32string decode_utf8(const std::string& bytes, const std::string& where);
std::string encode_utf8(const std::u32string& text);
// The sorted distinct characters of the text file at `path` (task.path), as
// UTF-8; a file with fewer than two is refused (nothing to predict).
std::string text_alphabet(const std::string& path);
// The characters of a text model's alphabet, if it is one: UTF-8, in code point
// order with no repeats, at least two; else "[text] <where>: problem".
std::u32string alphabet_letters(const std::string& alphabet, const std::string& where);
// Characters -> token ids of `alphabet`; "[text] <where>: U+XXXX at character N is not in the
// model's alphabet" for one the model never saw.
std::vector<int32_t> text_to_tokens(const std::string& text, const std::string& alphabet, const std::string& where);
std::string tokens_to_text(const std::vector<int32_t>& tokens, const std::string& alphabet);

class TextTask : public BatchSource {
public:
    TextTask(const std::string& path, const std::string& alphabet, size_t window, uint64_t seed, uint64_t stream);
    Batch next(size_t batch_size) override;
    size_t max_sequence_length() const override { return window_; }
    bool encoder_decoder() const override { return false; }
    Rng& rng() override { return rng_; }

private:
    // The file's tokens, one array for every stream of this file in the process
    // (training and held-out evaluation read the same text): shared, never copied.
    std::shared_ptr<const std::vector<int32_t>> tokens_;
    size_t window_ = 0;
    size_t first_ = 0, last_ = 0;  // [first, last): where this stream's windows may start
    Rng rng_;
};

}  // namespace attnlab
