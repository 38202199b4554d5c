// GPT-2's byte-level BPE (data/bpe_tokenizer.h).
//
// Bpe.*: a hand-written vocabulary and merges, with every expected id worked
// out below by hand from encoder.py's rules; bad files and bad input, each one
// line naming the file and what/where.
// BpeReference.*: a tokenizer trained by tests/reference/bpe_reference.py (its
// own encoder.py in Python, pre-tokenising without PCRE2) on the repository's
// docs and a multilingual text; ids of the corpus, hand-picked and random
// strings must equal the reference's, for vocab.json + merges.txt and three
// tokenizer.json files. CTest runs the script first and passes its file in
// ATTNLAB_BPE_FIXTURES; without it the BpeReference.* tests FAIL, never skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/quoted.h"
#include "tests/error_of.h"
#include "tests/reference/h5_reader.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

using Ids = std::vector<int32_t>;
using test::error_of;

const test::TempDir& temp_dir() {
    static const test::TempDir dir("attnlab_bpe_");
    return dir;
}

// Byte symbols (encoder.py's bytes_to_unicode): printable bytes are themselves,
// the others 256 + their rank among the 68 non-printable bytes (0x00..0x20 are
// ranks 0..32, 0x7F..0xA0 ranks 33..66, 0xAD rank 67):
//   ' ' 0x20 -> U+0120 "Ġ"    '\n' 0x0A -> U+010A "Ċ"    '\t' 0x09 -> U+0109 "ĉ"
//   0x97 -> 256+33+24 = U+0139 "Ĺ"   0x9C -> U+013E "ľ"   0x9F -> U+0141 "Ł"
//   0x98 -> U+013A "ĺ"   0x80 -> U+0122 "Ģ"   0xA0 -> U+0142 "ł"   0x8E -> U+0130 "İ"
// é = C3 A9 -> "Ã©"; 日 = E6 97 A5 -> "æĹ¥"; 本 = E6 9C AC -> "æľ¬";
// 😀 = F0 9F 98 80 -> "ðŁĺĢ"; U+180E = E1 A0 8E -> "áłİ".
const char* const kVocab = R"({
  "Ġ": 0, "Ċ": 1, "ĉ": 2, "h": 3, "e": 4, "l": 5, "o": 6, "'": 7, "s": 8, "I": 9,
  "1": 10, "2": 11, "3": 12, "!": 13, "Ã": 14, "©": 15, "æ": 16, "Ĺ": 17, "¥": 18, "ľ": 19,
  "¬": 20, "ð": 21, "Ł": 22, "ĺ": 23, "Ģ": 24, "á": 25, "ł": 26, "İ": 27, "t": 28, "<|endoftext|>": 29,
  "ll": 30, "he": 31, "hell": 32, "hello": 33, "Ġhello": 34, "ĊĊ": 35, "12": 36, "Ã©": 37, "æĹ": 38, "æĹ¥": 39,
  "ĠĠ": 40, "'s": 41, "İ!": 42, "lo": 43
})";
// rank 0 .. 13, in this order
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}, {"Ċ", "Ċ"}, {"1", "2"},
    {"Ã", "©"}, {"æ", "Ĺ"}, {"æĹ", "¥"}, {"Ġ", "Ġ"}, {"'", "s"}, {"İ", "!"}, {"l", "o"}};

std::string merges_txt() {
    std::string text = "#version: 0.2\n";
    for (const auto& [left, right] : kMerges) text += left + " " + right + "\n";
    return text;
}

BpeTokenizer hand_tokenizer(const std::vector<std::string>& special_tokens = {}) {
    return BpeTokenizer::from_vocab_merges(temp_dir().write("vocab.json", kVocab), temp_dir().write("merges.txt", merges_txt()), special_tokens);
}

// The same vocabulary in Hugging Face's layout, merges as ["a", "b"], with
// added tokens 44 "<|x|>", 45 "<|x|>!" and (matched in the second pass) 46 "h<|".
std::string tokenizer_json(const std::string& pre_tokenizer = R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})",
                           const std::string& normalizer = "null") {
    std::string merges;
    for (const auto& [left, right] : kMerges) merges += (merges.empty() ? "[\"" : ", [\"") + left + "\", \"" + right + "\"]";
    const auto added = [](int id, const std::string& content, bool normalized, bool special) {
        return R"({"id": )" + std::to_string(id) + R"(, "content": ")" + content +
               R"(", "single_word": false, "lstrip": false, "rstrip": false, "normalized": )" + (normalized ? "true" : "false") +
               R"(, "special": )" + (special ? "true" : "false") + "}";
    };
    return R"({"version": "1.0", "added_tokens": [)" + added(29, "<|endoftext|>", false, true) + ", " + added(44, "<|x|>", false, true) +
           ", " + added(45, "<|x|>!", false, true) + ", " + added(46, "h<|", true, false) + R"(], "normalizer": )" + normalizer +
           R"(, "pre_tokenizer": )" + pre_tokenizer + R"(, "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                     "fuse_unk": false, "byte_fallback": false, "vocab": )" +
           kVocab + R"(, "merges": [)" + merges + "]}}";
}

Ids encode(const BpeTokenizer& tokenizer, std::string_view text) { return tokenizer.encode(text); }

TEST(Bpe, MergesByRankEveryOccurrenceLeftToRight) {
    const BpeTokenizer bpe = hand_tokenizer();
    EXPECT_EQ(bpe.vocab_size(), 44);
    // h e l l o: (l,l) rank 0 -> h e ll o; (h,e) 1 -> he ll o; (he,ll) 2 -> hell o; (hell,o) 3 -> hello.
    // (l,o) has rank 13, so it never gets the chance: had it gone first, "h e l lo" would stick.
    EXPECT_EQ(encode(bpe, "hello"), (Ids{33}));
    EXPECT_EQ(encode(bpe, "lo"), (Ids{43}));
    EXPECT_EQ(encode(bpe, "lll"), (Ids{30, 5}));  // (l,l) at 0 merged, the third l has no partner left
    EXPECT_EQ(encode(bpe, "llll"), (Ids{30, 30}));
    EXPECT_EQ(encode(bpe, ""), Ids{});
}

TEST(Bpe, SpacesNewlinesAndTabsSplitAsGpt2Does) {
    const BpeTokenizer bpe = hand_tokenizer();
    EXPECT_EQ(encode(bpe, " hello"), (Ids{34}));         // " ?\p{L}+": Ġ h e l l o -> ... Ġ hello -> Ġhello (rank 4)
    EXPECT_EQ(encode(bpe, "  hello"), (Ids{0, 34}));     // \s+(?!\S) keeps the last space for " hello": "Ġ", "Ġhello"
    EXPECT_EQ(encode(bpe, "hello "), (Ids{33, 0}));      // a trailing space is its own piece
    EXPECT_EQ(encode(bpe, "hello  "), (Ids{33, 40}));    // a trailing run whole: Ġ Ġ -> ĠĠ (rank 10)
    EXPECT_EQ(encode(bpe, "hello\n\n"), (Ids{33, 35}));  // Ċ Ċ -> ĊĊ (rank 5)
    EXPECT_EQ(encode(bpe, "\n\nhello"), (Ids{1, 1, 33}));  // run less its last "\n", then that "\n" alone (\s+), then hello
    EXPECT_EQ(encode(bpe, "\n\n hello"), (Ids{35, 34}));   // "\n\n" and " hello"
    EXPECT_EQ(encode(bpe, "\thello"), (Ids{2, 33}));
    EXPECT_EQ(encode(bpe, "hello!!"), (Ids{33, 13, 13}));
    // " 12" is one piece (" ?\p{N}+"): Ġ 1 2 -> Ġ 12; "123": 1 2 3 -> 12 3
    EXPECT_EQ(encode(bpe, "123 12"), (Ids{36, 12, 0, 36}));
}

TEST(Bpe, ContractionsComeFirst) {
    const BpeTokenizer bpe = hand_tokenizer();
    EXPECT_EQ(encode(bpe, "he's"), (Ids{31, 41}));   // "he" + "'s" (' s -> 's, rank 11)
    EXPECT_EQ(encode(bpe, "'sh"), (Ids{41, 3}));     // "'s" + "h", not "'" + "sh"
    EXPECT_EQ(encode(bpe, "I'll"), (Ids{9, 7, 30}));  // "I" + "'ll": ' l l -> ' ll ("' ll" is no merge)
}

TEST(Bpe, NonAsciiBytes) {
    const BpeTokenizer bpe = hand_tokenizer();
    EXPECT_EQ(encode(bpe, "h\u00e9"), (Ids{3, 37}));  // é is a letter: one piece h Ã © -> h Ã© (rank 7)
    EXPECT_EQ(encode(bpe, " \u00e9"), (Ids{0, 37}));
    // 日本: one piece æ Ĺ ¥ æ ľ ¬; (æ,Ĺ) rank 8 only at 0 (the second æ is followed by ľ), then (æĹ,¥) rank 9
    EXPECT_EQ(encode(bpe, "\u65e5\u672c"), (Ids{39, 16, 19, 20}));
    EXPECT_EQ(encode(bpe, "hello \U0001F600"), (Ids{33, 0, 21, 22, 23, 24}));  // " ?[^\s\p{L}\p{N}]+": Ġ ð Ł ĺ Ģ
    // U+180E is no White_Space (Python's regex module; PCRE2's \s would take it): "\u180e!" is one
    // piece á ł İ !, and (İ,!) merges (rank 12). As white space it would be "\u180e", "!": 25 26 27 13.
    EXPECT_EQ(encode(bpe, "\u180e!"), (Ids{25, 26, 42}));
}

TEST(Bpe, DecodeGivesTheTextBack) {
    const BpeTokenizer bpe = hand_tokenizer();
    for (const std::string text : {"hello", "  hello", "hello  ", "\n\nhello", "\thello!!", "he's I'll", "123 12", "h\u00e9",
                                   "\u65e5\u672c", "hello \U0001F600", "\u180e!", "lll"})
        EXPECT_EQ(bpe.decode(bpe.encode(text)), text);
    EXPECT_EQ(bpe.decode(Ids{21, 22}), "\xf0\x9f");  // half an emoji: its bytes as they are
    EXPECT_EQ(bpe.decode(Ids{29}), "<|endoftext|>");
}

// A model's tokenizer (task.tokenizer): a folder of at most as many tokens as
// the model has embedding rows. Every Pythia model has 50304 rows for 50277
// tokens; here 50 rows for the hand vocabulary's 44: ids 44..49 decode as
// "<id>", ids beyond the rows are still an error, and more tokens than rows,
// a missing folder or a file are refused naming the folder.
TEST(Bpe, ModelTokenizerDecodesTheRowsItLacksAsIds) {
    const test::TempDir folder("attnlab_bpe_model_");
    folder.write("vocab.json", kVocab);
    folder.write("merges.txt", merges_txt());
    const std::string at = folder.path().string();
    const BpeTokenizer bpe = BpeTokenizer::for_model(at, 50);
    EXPECT_EQ(bpe.vocab_size(), 44);
    EXPECT_EQ(bpe.decode(Ids{33, 44, 31, 49}), "hello<44>he<49>");
    EXPECT_EQ(bpe.encode("hello"), Ids{33});
    EXPECT_EQ(error_of([&] { bpe.decode(Ids{50}); }),
              "[bpe] " + at + "/vocab.json: decode: id 50 at position 0 is outside the vocabulary [0, 50)");
    EXPECT_EQ(BpeTokenizer::for_model(at, 44).decode(Ids{43}), "lo");  // as many rows as tokens
    EXPECT_EQ(error_of([&] { BpeTokenizer::for_model(at, 43); }),
              "[bpe] " + at + ": the tokenizer has 44 tokens, more than the model's vocabulary of 43");
    EXPECT_EQ(error_of([&] { BpeTokenizer::for_model(at + "/none", 50); }), "[bpe] " + at + "/none: no such folder");
    EXPECT_EQ(error_of([&] { BpeTokenizer::for_model(at + "/vocab.json", 50); }), "[bpe] " + at + "/vocab.json: not a folder");
    const test::TempDir empty("attnlab_bpe_empty_");
    EXPECT_EQ(error_of([&] { BpeTokenizer::for_model(empty.path().string(), 50); }),
              "[bpe] " + empty.path().string() + ": no tokenizer.json, nor vocab.json and merges.txt");
}

TEST(Bpe, SpecialTokensOfVocabMergesAreMatchedLiterally) {
    const BpeTokenizer bpe = hand_tokenizer({"<|endoftext|>"});
    ASSERT_EQ(bpe.added_tokens().size(), 1u);
    EXPECT_EQ(bpe.added_tokens()[0].id, 29);
    EXPECT_EQ(encode(bpe, "hello<|endoftext|> hello"), (Ids{33, 29, 34}));
    EXPECT_EQ(encode(bpe, "<|endoftext|><|endoftext|>"), (Ids{29, 29}));
    // without it, encoder.py's way: "<|" is text, and '<' has no byte symbol here
    EXPECT_NE(error_of([] { hand_tokenizer().encode("<|endoftext|>"); }).find("byte 0x3C"), std::string::npos);
}

TEST(Bpe, TokenizerJsonAddedTokens) {
    const BpeTokenizer bpe = BpeTokenizer::from_tokenizer_json(temp_dir().write("tokenizer.json", tokenizer_json()));
    EXPECT_EQ(bpe.vocab_size(), 47);
    EXPECT_EQ(bpe.added_tokens().size(), 4u);
    EXPECT_EQ(bpe.normalizer(), "");
    EXPECT_EQ(encode(bpe, "hello<|endoftext|> hello"), (Ids{33, 29, 34}));
    EXPECT_EQ(encode(bpe, "<|x|>!"), (Ids{45}));   // the longest added token starting there
    EXPECT_EQ(encode(bpe, "<|x|>h"), (Ids{44, 3}));
    // "<|x|>" (not normalized) is cut out first, so "h<|" (normalized) cannot take its "<|"
    EXPECT_EQ(encode(bpe, "h<|x|>"), (Ids{3, 44}));
    EXPECT_EQ(encode(bpe, "h<|o"), (Ids{46, 6}));
    EXPECT_EQ(bpe.decode(Ids{46, 6, 44}), "h<|o<|x|>");
}

TEST(Bpe, TokenizerJsonAddPrefixSpaceAndNfc) {
    const std::string prefix = R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true})";
    const BpeTokenizer bpe = BpeTokenizer::from_tokenizer_json(temp_dir().write("prefix.json", tokenizer_json(prefix, R"({"type": "NFC"})")));
    EXPECT_EQ(bpe.normalizer(), "NFC");
    // each text segment between added tokens gets a space unless it has one
    EXPECT_EQ(encode(bpe, "hello<|endoftext|>hello"), (Ids{34, 29, 34}));
    EXPECT_EQ(encode(bpe, " hello"), (Ids{34}));
    EXPECT_EQ(encode(bpe, "<|endoftext|>"), (Ids{29}));
    EXPECT_EQ(encode(bpe, ""), Ids{});
    // NFC: e + U+0301 (combining acute) is the precomposed U+00E9 first
    EXPECT_EQ(encode(bpe, "he\xcc\x81"), encode(bpe, "h\xc3\xa9"));
    // without the normalizer the text is taken as given: its byte 0xCC has no entry in this vocabulary
    EXPECT_THROW(encode(hand_tokenizer({}), "he\xcc\x81"), Error);
}

TEST(Bpe, BadTextAndIds) {
    const BpeTokenizer bpe = hand_tokenizer({"<|endoftext|>"});
    const std::string vocab = temp_dir().file("vocab.json");
    EXPECT_EQ(error_of([&] { bpe.encode("hello<"); }),
              "[bpe] " + vocab + ": encode: byte 0x3C (text byte 5) has no vocabulary entry (symbol \"<\")");
    EXPECT_EQ(error_of([&] { bpe.encode("hello\xff"); }), "[bpe] " + vocab + ": encode: the text is not UTF-8 at byte 5");
    // after valid multi-byte characters, and in a segment after an added token
    EXPECT_EQ(error_of([&] { bpe.encode("h\xc3\xa9llo \x80"); }), "[bpe] " + vocab + ": encode: the text is not UTF-8 at byte 7");
    EXPECT_EQ(error_of([&] { bpe.encode("<|endoftext|>h\xc3"); }), "[bpe] " + vocab + ": encode: the text is not UTF-8 at byte 14");
    EXPECT_EQ(error_of([&] { bpe.decode(Ids{33, 44}); }), "[bpe] " + vocab + ": decode: id 44 at position 1 is outside the vocabulary [0, 44)");
    EXPECT_EQ(error_of([&] { bpe.decode(Ids{-1}); }), "[bpe] " + vocab + ": decode: id -1 at position 0 is outside the vocabulary [0, 44)");
}

TEST(Bpe, BadVocabAndMergesFiles) {
    const std::string merges = temp_dir().write("ok_merges.txt", merges_txt()), vocab = temp_dir().write("ok_vocab.json", kVocab);
    const auto load = [&](const std::string& vocab_path, const std::string& merges_path) {
        return error_of([&] { BpeTokenizer::from_vocab_merges(vocab_path, merges_path); });
    };
    const std::string missing = temp_dir().file("missing.json");
    EXPECT_EQ(load(missing, merges), "[bpe] " + missing + ": no such file");
    EXPECT_EQ(load(vocab, missing), "[bpe] " + missing + ": no such file");
    EXPECT_EQ(load(temp_dir().path().string(), merges), "[bpe] " + temp_dir().path().string() + ": not a regular file");
    const std::string bad_json = temp_dir().write("bad.json", "{\"a\": 0,}");
    EXPECT_EQ(load(bad_json, merges).rfind("[bpe] " + bad_json + ": not valid JSON: parse error at line 1, column 9: ", 0), 0u)
        << load(bad_json, merges);
    const auto vocab_error = [&](const std::string& json) { return load(temp_dir().write("v.json", json), merges); };
    const std::string v = temp_dir().file("v.json");
    EXPECT_EQ(vocab_error("[1, 2]"), "[bpe] " + v + ": the vocabulary is not a JSON object of token -> id");
    EXPECT_EQ(vocab_error(R"({"a": 0, "b": 5})"), "[bpe] " + v + ": id 5 of \"b\" is beyond the 2 tokens (ids must be 0..N-1, each given once)");
    EXPECT_EQ(vocab_error(R"({"a": 0, "b": 0})"), "[bpe] " + v + ": id 0 is given to both \"a\" and \"b\"");
    EXPECT_EQ(vocab_error(R"({"a": -1})"), "[bpe] " + v + ": token \"a\" has id -1, not an integer in [0, 2^31)");
    EXPECT_EQ(vocab_error(R"({"a": "0"})"), "[bpe] " + v + ": token \"a\" has id \"0\", not an integer in [0, 2^31)");

    const auto merges_error = [&](const std::string& text) { return load(vocab, temp_dir().write("m.txt", text)); };
    const std::string m = temp_dir().file("m.txt");
    EXPECT_EQ(merges_error("#version: 0.2\nl l\nh e l\n"), "[bpe] " + m + ":3: expected two symbols separated by one space, got \"h e l\"");
    EXPECT_EQ(merges_error("l l\nhello\n"), "[bpe] " + m + ":2: expected two symbols separated by one space, got \"hello\"");
    EXPECT_EQ(merges_error("l l\n\nh e\n"), "[bpe] " + m + ":2: expected two symbols separated by one space, got \"\"");
    EXPECT_EQ(merges_error("#version: 0.2\nl l\nq l\n"), "[bpe] " + m + ":3: \"q\" is not in the vocabulary");
    EXPECT_EQ(merges_error("h o\n"), "[bpe] " + m + ":1: the merged symbol \"ho\" is not in the vocabulary");
    EXPECT_EQ(error_of([&] { BpeTokenizer::from_vocab_merges(vocab, merges, {"<|nope|>"}); }),
              "[bpe] " + vocab + ": special token \"<|nope|>\" is not in the vocabulary");
}

TEST(Bpe, BadTokenizerJson) {
    const std::string good = tokenizer_json();
    const std::string path = temp_dir().file("t.json");
    // `good` with its first `from` replaced by `to`
    const auto error_with = [&](const std::string& from, const std::string& to) {
        std::string text = good;
        const size_t at = text.find(from);
        if (at == std::string::npos) return "test bug: no " + from;
        temp_dir().write("t.json", text.replace(at, from.size(), to));
        return error_of([&] { BpeTokenizer::from_tokenizer_json(path); });
    };
    EXPECT_EQ(error_with("{\"version\"", "{{").rfind("[bpe] " + path + ": not valid JSON: parse error at line 1, column 2: ", 0), 0u);
    EXPECT_EQ(error_with(R"("type": "BPE")", R"("type": "WordPiece")"), "[bpe] " + path + ": model.type is \"WordPiece\", expected \"BPE\"");
    EXPECT_EQ(error_with(R"("dropout": null)", R"("dropout": 0.1)"),
              "[bpe] " + path + ": model.dropout 0.1 is not supported (BPE dropout samples its merges)");
    EXPECT_EQ(error_with(R"("pre_tokenizer": {"type": "ByteLevel")", R"("pre_tokenizer": {"type": "Sequence")"),
              "[bpe] " + path + ": pre_tokenizer \"Sequence\" is not supported (only ByteLevel)");
    EXPECT_EQ(error_with(R"("normalizer": null)", R"("normalizer": {"type": "Lowercase"})"),
              "[bpe] " + path + ": normalizer \"Lowercase\" is not supported (only none or NFC)");
    EXPECT_EQ(error_with(R"("use_regex": true)", R"("use_regex": false)"),
              "[bpe] " + path + ": pre_tokenizer.use_regex false is not supported (GPT-2's pattern always splits)");
    EXPECT_EQ(error_with(R"("decoder": {"type": "ByteLevel"})", R"("decoder": {"type": "WordPiece"})"),
              "[bpe] " + path + ": decoder \"WordPiece\" is not supported (only none or ByteLevel)");
    EXPECT_EQ(error_with(R"("byte_fallback": false)", R"("byte_fallback": true)"),
              "[bpe] " + path + ": model.byte_fallback true is not supported (only GPT-2's merging is carried out)");
    EXPECT_EQ(error_with(R"("content": "<|x|>")", R"("content": "")"),
              "[bpe] " + path + ": added_tokens[1]: content \"\" is not a non-empty string");
    EXPECT_EQ(error_with(R"("lstrip": false)", R"("lstrip": true)"),
              "[bpe] " + path + ": added_tokens[0]: lstrip true is not supported (only literal matching)");
    EXPECT_EQ(error_with(R"("id": 44)", R"("id": 29)"), "[bpe] " + path + ": id 29 is given to both \"<|endoftext|>\" and \"<|x|>\"");
    EXPECT_EQ(error_with(R"(["l", "l"])", R"(["l"])"),
              "[bpe] " + path + ": model.merges[0]: expected \"left right\" or [\"left\", \"right\"], got [\"l\"]");
    EXPECT_EQ(error_with(R"(["l", "l"])", R"("l l l")"),
              "[bpe] " + path + ": model.merges[0]: expected \"left right\" or [\"left\", \"right\"], got \"l l l\"");
    EXPECT_EQ(error_with(R"(["h", "e"])", R"("h o")"), "[bpe] " + path + ": model.merges[1]: the merged symbol \"ho\" is not in the vocabulary");
    // an id only an added token could fill, and none does: 46 "h<|" moved to 47
    EXPECT_EQ(error_with(R"("id": 46)", R"("id": 47)"), "[bpe] " + path + ": no token has id 46 (ids must be 0..N-1, each given once)");
    const std::string missing = temp_dir().file("no_tokenizer.json");
    EXPECT_EQ(error_of([&] { BpeTokenizer::from_tokenizer_json(missing); }), "[bpe] " + missing + ": no such file");
}

// Issue 51: a value a message quotes is escaped and cut short (data/quoted.h),
// whatever the file holds, and JSON nested more than kMaxJsonDepth deep is
// refused before it is parsed (dumping, copying or comparing it recursed until
// the stack ran out: SIGSEGV). Invalid UTF-8 in merges.txt once made the JSON
// library throw while quoting it ("internal error").
TEST(Bpe, DeepLongAndInvalidValuesAreQuotedShort) {
    const std::string vocab = temp_dir().write("ok_vocab.json", kVocab), merges = temp_dir().write("ok_merges.txt", merges_txt());
    const std::string m = temp_dir().file("m.txt"), v = temp_dir().file("v.json");
    const auto merges_error = [&](const std::string& text) {
        temp_dir().write("m.txt", text);
        return error_of([&] { BpeTokenizer::from_vocab_merges(vocab, m); });
    };
    EXPECT_EQ(merges_error("\xff\xfe\n"), "[bpe] " + m + ":1: expected two symbols separated by one space, got \"\\xFF\\xFE\"");
    EXPECT_EQ(merges_error("l l\n\xff \xfe\n"), "[bpe] " + m + ":2: \"\\xFF\" is not in the vocabulary");
    EXPECT_EQ(merges_error(std::string(1 << 20, 'x') + "\n"),
              "[bpe] " + m + ":1: expected two symbols separated by one space, got \"" + std::string(kQuotedBytes, 'x') + "...\" (1048576 bytes)");
    const auto vocab_error = [&](const std::string& json) {
        temp_dir().write("v.json", json);
        return error_of([&] { BpeTokenizer::from_vocab_merges(v, merges); });
    };
    EXPECT_EQ(vocab_error(R"({"a": 1e999})"), "[bpe] " + v + ": not valid JSON: number overflow parsing '1e999'");
    EXPECT_EQ(vocab_error(R"({"a": [[[[[[1]]]]]]})"), "[bpe] " + v + ": token \"a\" has id [[[[[...]]]]], not an integer in [0, 2^31)");

    const std::string deep = std::string(400'000, '[') + std::string(400'000, ']');
    const std::string hundred = std::string(100, '[') + std::string(100, ']');
    const std::string path = temp_dir().file("t.json");
    const auto error_with = [&](const std::string& from, const std::string& to) {  // tokenizer_json() with `from` replaced
        std::string text = tokenizer_json();
        const size_t at = text.find(from);
        if (at == std::string::npos) return "test bug: no " + from;
        temp_dir().write("t.json", text.replace(at, from.size(), to));
        return error_of([&] { BpeTokenizer::from_tokenizer_json(path); });
    };
    const std::string too_deep = "[bpe] " + path + ": the JSON has arrays and objects nested more than 128 deep at byte ";
    EXPECT_EQ(error_with(R"("normalizer": null)", R"("normalizer": {"type": )" + deep + "}").rfind(too_deep, 0), 0u);
    EXPECT_EQ(error_with(R"("normalizer": null)", R"("normalizer": )" + deep).rfind(too_deep, 0), 0u);
    EXPECT_EQ(error_with(R"(["l", "l"])", deep).rfind(too_deep, 0), 0u);
    EXPECT_EQ(error_with(R"("normalizer": null)", R"("normalizer": {"type": )" + hundred + "}"),
              "[bpe] " + path + ": normalizer [[[[[...]]]]] is not supported (only none or NFC)");
    EXPECT_EQ(error_with(R"(["l", "l"])", hundred),
              "[bpe] " + path + ": model.merges[0]: expected \"left right\" or [\"left\", \"right\"], got [[[[[...]]]]]");
    std::string words;
    for (int i = 0; i < 100'000; ++i) words += "l ";
    EXPECT_EQ(error_with(R"(["l", "l"])", "\"" + words + "\""),
              "[bpe] " + path + ": model.merges[0]: expected \"left right\" or [\"left\", \"right\"], got \"" + words.substr(0, kQuotedBytes) + "...\"");
    // the parser's own message quotes what it last read, here a 1 MiB string cut by an invalid byte
    const std::string unread = error_with(R"("normalizer": null)", "\"normalizer\": \"" + std::string(1 << 20, 'a') + "\xff\"");
    EXPECT_EQ(unread.rfind("[bpe] " + path + ": not valid JSON: parse error at line ", 0), 0u) << unread.substr(0, 400);
    EXPECT_LT(unread.size(), path.size() + 400) << unread.substr(0, 400);
    EXPECT_EQ(unread.find('\xff'), std::string::npos);
}

// ---- against tests/reference/bpe_reference.py ----

constexpr const char* kFormat = "attnlab-bpe-reference";
constexpr const char* kHowToGenerate =
    "generate the fixtures with\n"
    "    /usr/bin/python3 tests/reference/bpe_reference.py build/bpe_reference_fixtures.h5\n"
    "    export ATTNLAB_BPE_FIXTURES=$PWD/build/bpe_reference_fixtures.h5\n"
    "(needs python3-h5py, python3-numpy), or run the suite through ctest, which does both:\n"
    "    ctest --test-dir build -L bpe --output-on-failure";

std::unique_ptr<FixtureFile> open_fixtures() {
    const char* path = std::getenv("ATTNLAB_BPE_FIXTURES");
    if (path == nullptr || *path == '\0') {
        ADD_FAILURE() << "ATTNLAB_BPE_FIXTURES is not set; " << kHowToGenerate;
        return nullptr;
    }
    if (!std::filesystem::is_regular_file(path)) {
        ADD_FAILURE() << "ATTNLAB_BPE_FIXTURES=" << path << " does not exist; " << kHowToGenerate;
        return nullptr;
    }
    auto file = std::make_unique<FixtureFile>(path);
    if (file->attr_string("/", "format") != kFormat) {
        ADD_FAILURE() << path << " is no " << kFormat << " file; " << kHowToGenerate;
        return nullptr;
    }
    return file;
}

// Item t of a concatenated dataset (bytes or ids) and its offsets [T+1].
template <class T>
std::vector<std::vector<T>> split(const std::vector<long long>& flat, const std::vector<long long>& offsets) {
    std::vector<std::vector<T>> items;
    for (size_t t = 0; t + 1 < offsets.size(); ++t) items.emplace_back(flat.begin() + offsets[t], flat.begin() + offsets[t + 1]);
    return items;
}

template <class T>
std::string bytes_of(const std::vector<T>& chars) { return std::string(chars.begin(), chars.end()); }

// A file the reference wrote, from /files/NAME.
std::string fixture_file(const FixtureFile& fixtures, const std::string& name) { return bytes_of(fixtures.integers("/files/" + name)); }

// The last 80 bytes of `text`, control characters as \xNN (failure messages stay readable).
std::string printable(const std::string& text) {
    std::string out;
    for (char c : text.substr(text.size() > 80 ? text.size() - 80 : 0)) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned char>(c));
        out += static_cast<unsigned char>(c) < 0x20 ? std::string(hex) : std::string(1, c);
    }
    return out;
}

void check_variant(const FixtureFile& fixtures, const std::string& variant, const BpeTokenizer& bpe, int expected_vocab_size) {
    EXPECT_EQ(bpe.vocab_size(), expected_vocab_size) << variant;
    const auto texts = split<char>(fixtures.integers("/texts/bytes"), fixtures.integers("/texts/offsets"));
    const auto ids = split<int32_t>(fixtures.integers("/" + variant + "/ids"), fixtures.integers("/" + variant + "/offsets"));
    const auto decoded = split<char>(fixtures.integers("/" + variant + "/decoded"), fixtures.integers("/" + variant + "/decoded_offsets"));
    ASSERT_EQ(ids.size(), texts.size());
    size_t matched_texts = 0, tokens = 0;
    for (size_t t = 0; t < texts.size(); ++t) {
        const std::string text = bytes_of(texts[t]);
        const Ids ours = bpe.encode(text);
        if (ours == ids[t]) {
            ++matched_texts;
            tokens += ours.size();
        } else {
            size_t first = 0;
            while (first < ours.size() && first < ids[t].size() && ours[first] == ids[t][first]) ++first;
            ADD_FAILURE() << variant << ": text " << t << " (" << text.size() << " bytes): " << ours.size() << " ids, reference "
                          << ids[t].size() << "; first difference at id " << first << " (decoded so far: \""
                          << printable(bpe.decode(std::span(ours).first(first))) << "\")";
        }
        EXPECT_EQ(bpe.decode(ids[t]), bytes_of(decoded[t])) << variant << ": text " << t;
        if (variant != "tokenizer_prefix") EXPECT_EQ(bpe.decode(ours), text) << variant << ": text " << t;
    }
    EXPECT_EQ(matched_texts, texts.size()) << variant;
    std::cout << "[ reference] " << variant << ": " << matched_texts << "/" << texts.size() << " texts, " << tokens
              << " tokens equal (corpus " << texts[0].size() << " bytes -> " << ids[0].size() << " tokens)\n";
}

TEST(BpeReference, VocabJsonAndMergesTxt) {
    const auto fixtures = open_fixtures();
    if (!fixtures) return;
    const BpeTokenizer bpe = BpeTokenizer::from_vocab_merges(temp_dir().write("ref_vocab.json", fixture_file(*fixtures, "vocab.json")),
                                                             temp_dir().write("ref_merges.txt", fixture_file(*fixtures, "merges.txt")));
    check_variant(*fixtures, "vocab_merges", bpe, static_cast<int>(fixtures->attr_int("/", "vocab_size")) - 1);
}

TEST(BpeReference, TokenizerJson) {
    const auto fixtures = open_fixtures();
    if (!fixtures) return;
    for (const std::string variant : {"tokenizer_json", "tokenizer_pairs", "tokenizer_prefix"}) {
        const std::string name = variant == "tokenizer_json" ? "tokenizer.json" : variant + ".json";
        const BpeTokenizer bpe = BpeTokenizer::from_tokenizer_json(temp_dir().write("ref_" + name, fixture_file(*fixtures, name)));
        check_variant(*fixtures, variant, bpe, static_cast<int>(fixtures->attr_int("/", "vocab_size")));
    }
}

}  // namespace
}  // namespace attnlab
