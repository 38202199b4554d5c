// The `text` task: UTF-8 decoding (and what is not UTF-8), the alphabet of a
// file, windows shifted by one character, and the held-out end of the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "data/text_task.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

using test::error_of;

const test::TempDir& temp_dir() {
    static const test::TempDir dir("attnlab_text_task_");
    return dir;
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
    const std::string path = temp_dir().write("attnlab_text_alphabet.txt", "b\u00e9a\nab ");
    EXPECT_EQ(text_alphabet(path), "\n ab\u00e9");
    EXPECT_EQ(text_to_tokens("ab\u00e9\n", text_alphabet(path), "--prompt"), (std::vector<int32_t>{2, 3, 4, 0}));
    EXPECT_EQ(tokens_to_text({4, 2, 1}, text_alphabet(path)), "\u00e9a ");
    EXPECT_EQ(error_of([&] { text_to_tokens("abz", text_alphabet(path), "--prompt"); }),
              "[text] --prompt: U+007A at character 2 is not in the model's alphabet (task.alphabet)");
}

TEST(TextTask, WindowsAreShiftedByOneAndTheEndIsHeldOut) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);  // abc...z abc...
    const std::string path = temp_dir().write("attnlab_text_windows.txt", text);
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
    const std::string path = temp_dir().write("attnlab_text_short.txt", "abcdefghij");
    EXPECT_EQ(error_of([&] { TextTask(path, text_alphabet(path), 8, 0, 0); }),
              "[text] task.path " + path + ": 10 characters; windows of task.max_len + 1 = 9 need at least 18 (one to train on, one held out)");
    EXPECT_EQ(error_of([&] { text_alphabet("/nonexistent/attnlab.txt"); }), "[text] task.path /nonexistent/attnlab.txt: no such file");
    const std::string one = temp_dir().write("attnlab_text_one.txt", "aaaa");
    EXPECT_EQ(error_of([&] { text_alphabet(one); }), "[text] task.path " + one + ": 1 distinct character(s); nothing to predict");
}

// Opens the FIFO's writing end (and closes it) while the test waits, so that a
// reader that opened the FIFO gets an end of file instead of hanging the test.
class FifoUnblocker {
public:
    explicit FifoUnblocker(std::string path)
        : thread_([this, path = std::move(path)] {
              for (int i = 0; i < 300 && !done_; ++i) {  // 3 s at most
                  const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO while nobody reads
                  if (fd >= 0) close(fd);
                  std::this_thread::sleep_for(std::chrono::milliseconds(10));
              }
          }) {}
    ~FifoUnblocker() {
        done_ = true;
        thread_.join();
    }

private:
    std::atomic<bool> done_{false};
    std::thread thread_;
};

// A FIFO, a directory, a device or a file beyond kMaxTextBytes is refused, named,
// before anything is read (it used to hang, exhaust memory or read as empty text).
TEST(TextTask, OnlyARegularFileWithinTheLimitIsRead) {
    const std::string fifo = temp_dir().file("pipe.txt");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string dir = temp_dir().path().string();
    const std::string alphabet = "ab";
    const std::pair<std::string, std::string> cases[] = {{fifo, "a FIFO"}, {dir, "a directory"}, {"/dev/null", "a character device"}};
    for (const auto& [path, what] : cases) {
        const std::string want = "[text] task.path " + path + ": not a regular file (" + what + ")";
        const FifoUnblocker unblock(fifo);
        EXPECT_EQ(error_of([&] { text_alphabet(path); }), want);
        EXPECT_EQ(error_of([&] { TextTask(path, alphabet, 4, 0, 0); }), want);
    }
    const std::string big = temp_dir().write("attnlab_text_big.txt", "");
    ASSERT_EQ(truncate(big.c_str(), static_cast<off_t>(kMaxTextBytes + 1)), 0);  // sparse: nothing on disk
    const std::string want = "[text] task.path " + big + ": 268435457 bytes, more than the 268435456 (256 MiB) a text task reads";
    EXPECT_EQ(error_of([&] { text_alphabet(big); }), want);
    EXPECT_EQ(error_of([&] { TextTask(big, alphabet, 4, 0, 0); }), want);
}

// The file is read in chunks of 1 MiB: a character cut by a chunk's end is
// decoded whole, and a bad byte far in is reported at its offset in the file.
TEST(TextTask, UTF8IsDecodedAcrossChunks) {
    std::string text = "a";
    while (text.size() < (size_t{1} << 20) + 100) text += "\u00e9";  // bytes 1 + 2k: one cut at byte 2^20
    const std::string path = temp_dir().write("attnlab_text_chunks.txt", text);
    EXPECT_EQ(text_alphabet(path), "a\u00e9");
    const size_t characters = 1 + (text.size() - 1) / 2;
    TextTask task(path, text_alphabet(path), 4, 0, 1);
    const Batch b = task.next(8);
    for (const int32_t t : b.inputs.values) EXPECT_EQ(t, 1);  // the held-out end: all 'é'
    // every character counted once: a window as long as the file names their number
    const std::string too_short = error_of([&] { TextTask(path, text_alphabet(path), characters, 0, 0); });
    EXPECT_EQ(too_short.rfind("[text] task.path " + path + ": " + std::to_string(characters) + " characters;", 0), 0u) << too_short;
    text[(size_t{1} << 20) + 10] = '\xff';  // a continuation byte replaced, past the first chunk
    const std::string bad = temp_dir().write("attnlab_text_bad_late.txt", text);
    EXPECT_EQ(error_of([&] { text_alphabet(bad); }),
              "[text] task.path " + bad + ": not UTF-8 at byte " + std::to_string((size_t{1} << 20) + 9));
    const std::string cut = temp_dir().write("attnlab_text_cut.txt", "ab\xc3");  // the last character cut by the end of the file
    EXPECT_EQ(error_of([&] { text_alphabet(cut); }), "[text] task.path " + cut + ": not UTF-8 at byte 2");
}

// A model's alphabet is its characters in code point order, each once: the
// token id of a character is its index, so anything else reads wrong letters.
TEST(TextTask, AnAlphabetIsSortedWithoutRepeats) {
    EXPECT_EQ(alphabet_letters("\n ab\u00e9", "task.alphabet"), std::u32string(U"\n ab\u00e9"));
    EXPECT_EQ(error_of([&] { alphabet_letters("aab", "task.alphabet"); }),
              "[text] task.alphabet: U+0061 at character 1 repeats character 0 (an alphabet lists each character once)");
    EXPECT_EQ(error_of([&] { alphabet_letters("acb", "task.alphabet"); }),
              "[text] task.alphabet: U+0062 at character 2 comes before U+0063 at character 1 (an alphabet is sorted by code point: "
              "token id = index)");
    EXPECT_EQ(error_of([&] { alphabet_letters("a", "task.alphabet"); }),
              "[text] task.alphabet: 1 character(s); a text model needs at least 2");
    EXPECT_EQ(error_of([&] { alphabet_letters("a\xff", "task.alphabet"); }), "[text] task.alphabet: not UTF-8 at byte 1");
    // what reads and writes text refuses such an alphabet instead of giving wrong letters
    EXPECT_EQ(error_of([&] { text_to_tokens("ab", "ba", "--prompt"); }).rfind("[text] task.alphabet: U+0061 at character 1 comes before", 0),
              0u);
    EXPECT_EQ(error_of([&] { tokens_to_text({0, 1}, "aab"); }).rfind("[text] task.alphabet: U+0061 at character 1 repeats", 0), 0u);
}

}  // namespace
}  // namespace attnlab
