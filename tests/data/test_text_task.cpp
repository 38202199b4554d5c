// The `text` task: UTF-8 decoding (and what is not UTF-8), the alphabet of a
// file, windows shifted by one character, and the held-out end of the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "data/text_task.h"

namespace attnlab {
namespace {

std::string write_text(const std::string& name, const std::string& bytes) {
    const std::string path = (std::filesystem::temp_directory_path() / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TextTask, DecodesUtf8AndRefusesWhatIsNot) {
    EXPECT_EQ(decode_utf8("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "x"), std::u32string(U"a\u00e9\u20ac\U0001F600"));
    EXPECT_EQ(encode_utf8(U"a\u00e9\u20ac\U0001F600"), "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    for (const std::string bad : {std::string("ab\xff"), std::string("ab\xc3"), std::string("\xc0\xaf"),  // lead byte, cut, overlong
                                  std::string("x\xed\xa0\x80"), std::string("\xe2\x28\xa1")})           // surrogate, bad continuation
        EXPECT_NE(error_of([&] { decode_utf8(bad, "f.txt"); }).find("[text] f.txt: not UTF-8 at byte"), std::string::npos);
    EXPECT_EQ(error_of([&] { decode_utf8("ab\xff", "f.txt"); }), "[text] f.txt: not UTF-8 at byte 2");
}

TEST(TextTask, TheAlphabetIsTheFilesCharactersSorted) {
    const std::string path = write_text("attnlab_text_alphabet.txt", "b\u00e9a\nab ");
    EXPECT_EQ(text_alphabet(path), "\n ab\u00e9");
    EXPECT_EQ(text_to_tokens("ab\u00e9\n", text_alphabet(path), "--prompt"), (std::vector<int32_t>{2, 3, 4, 0}));
    EXPECT_EQ(tokens_to_text({4, 2, 1}, text_alphabet(path)), "\u00e9a ");
    EXPECT_EQ(error_of([&] { text_to_tokens("abz", text_alphabet(path), "--prompt"); }),
              "[text] --prompt: U+007A at character 2 is not in the model's alphabet (task.alphabet)");
}

TEST(TextTask, WindowsAreShiftedByOneAndTheEndIsHeldOut) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);  // abc...z abc...
    const std::string path = write_text("attnlab_text_windows.txt", text);
    const std::string alphabet = text_alphabet(path);
    TextTask train(path, alphabet, 8, 1, 0), held_out(path, alphabet, 8, 1, 1);
    EXPECT_EQ(train.max_sequence_length(), 8u);
    const Batch b = train.next(16), e = held_out.next(64);
    ASSERT_EQ(b.inputs.shape, (Shape{16, 8}));
    for (size_t r = 0; r < 16; ++r) {
        EXPECT_EQ(b.lengths[r], 8u);
        for (size_t t = 0; t < 8; ++t) {
            EXPECT_EQ(b.targets.values[r * 8 + t], (b.inputs.values[r * 8 + t] + 1) % 26);  // the next character
            EXPECT_EQ(b.loss_mask.values[r * 8 + t], 1);
        }
    }
    // held out: the last max(200 / 10, 9) = 20 characters, positions 180..199 ('y' 'z' 'a' ... 'r'):
    // each held-out window starts at 180..191, so its first input is one of those characters
    for (size_t r = 0; r < 64; ++r) {
        const int first = e.inputs.values[r * 8];
        bool from_end = false;
        for (int start = 180; start <= 191; ++start) from_end = from_end || first == start % 26;
        EXPECT_TRUE(from_end) << first;
    }
}

TEST(TextTask, AFileTooShortForItsWindowsIsRefused) {
    const std::string path = write_text("attnlab_text_short.txt", "abcdefghij");
    EXPECT_EQ(error_of([&] { TextTask(path, text_alphabet(path), 8, 0, 0); }),
              "[text] " + path + ": 10 characters; windows of task.max_len + 1 = 9 need at least 18 (one to train on, one held out)");
    EXPECT_NE(error_of([&] { text_alphabet("/nonexistent/attnlab.txt"); }).find("[text] /nonexistent/attnlab.txt: cannot read it"),
              std::string::npos);
}

}  // namespace
}  // namespace attnlab
