// The `text` task: next-character prediction over a UTF-8 text file. The
// vocabulary is the file's characters (Unicode code points), sorted, token id =
// index: the alphabet, which the run's config keeps (task.alphabet) so that every
// checkpoint can read and write text without the file. A batch row is a window
// of max_len + 1 characters at a random offset: inputs its first max_len,
// targets its last max_len, every position counted. The last tenth of the file
// (at least one window) is held out: stream 0 samples windows from the rest,
// any other stream from the held-out end.
#pragma once

#include <string>
#include <vector>

#include "data/tasks.h"

namespace attnlab {

// The code points of UTF-8 `bytes`; "[text] <where>: not UTF-8 at byte N" otherwise.
std::u32string decode_utf8(const std::string& bytes, const std::string& where);
std::string encode_utf8(const std::u32string& text);
std::string read_text_file(const std::string& path);  // "[text] <path>: cannot read it (...)"
// The sorted distinct characters of the file at `path`, as UTF-8.
std::string text_alphabet(const std::string& path);
// Characters -> token ids of `alphabet`; "[text] <where>: 'c' (U+XXXX) at character N is not in the
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
    std::vector<int32_t> tokens_;
    size_t window_ = 0;
    size_t first_ = 0, last_ = 0;  // [first, last): where this stream's windows may start
    Rng rng_;
};

}  // namespace attnlab
