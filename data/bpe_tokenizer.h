// GPT-2's byte-level BPE tokenizer (OpenAI's gpt-2 src/encoder.py), loaded from
// a vocab.json + merges.txt pair or from a Hugging Face tokenizer.json (GPT-2,
// GPT-NeoX / Pythia: model.type "BPE", pre_tokenizer ByteLevel).
//
// encode(text), text in UTF-8:
//   1. added tokens (tokenizer.json's added_tokens, or the special tokens given
//      to from_vocab_merges) are cut out literally, leftmost-longest, as Hugging
//      Face does: first those with "normalized": false, then in what remains
//      those with "normalized": true;
//   2. every other segment (with add_prefix_space, a space put in front unless
//      it starts with one) is split by GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      where \s is Unicode's White_Space, as in Python's `regex` module;
//   3. each piece's UTF-8 bytes become symbols (bytes_to_unicode: one printable
//      character a byte), and the adjacent pair of lowest merge rank is merged,
//      every occurrence left to right, until no pair has a rank (encoder.py's bpe());
//   4. each symbol's vocabulary id.
// decode(ids): each id's token string, its characters mapped back to bytes
// (a token with a character outside the 256, such as an added "    ", gives its
// own UTF-8 bytes, as Hugging Face's ByteLevel decoder does). The bytes are
// returned as they are: a cut through a multi-byte character is not replaced
// by U+FFFD. For text in UTF-8, decode(encode(text)) == text (without
// add_prefix_space). A model's tokenizer (for_model) also decodes the ids of
// the model's embedding rows that no token has, each as "<id>": every Pythia
// model has 50304 rows for 50277 tokens, and its argmax may be one of the 27.
//
// tokenizer.json's NFC normalizer (GPT-NeoX) is applied to the whole text with
// utf8proc before anything else (Hugging Face cuts its non-normalized added
// tokens first; the two differ only where such a token's edge meets a combining
// mark). Ignored: trim_offsets, which only moves offsets, which we do not give.
// Refused: other normalizers, pre-tokenizers, decoders and post-processors,
// BPE dropout, subword prefixes/suffixes, byte_fallback, ignore_merges, and
// added tokens with lstrip, rstrip or single_word.
//
// Errors are attnlab::Error, one line: "[bpe] PATH: problem" for a file that is
// missing, not JSON or not a tokenizer (ids not 0..N-1 each once, a merge of
// symbols not in the vocabulary: "[bpe] merges.txt:LINE: ..." for merges.txt,
// "model.merges[I]" for tokenizer.json), and from encode and decode for text
// that is not UTF-8, a byte with no vocabulary entry, or an id out of range.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attnlab {

// An added (special) token: its text is matched literally before pre-tokenising.
struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = true;      // Hugging Face's flag (skip_special_tokens); only reported here
    bool normalized = false;  // matched in the second pass (see above)
};

// The most bytes a tokenizer file may have (GPT-2's vocab.json: 1 MB; Llama 3's tokenizer.json: 9 MB).
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;

class BpeTokenizer {
public:
    // GPT-2's two files. `special_tokens` (each a vocab.json entry, e.g.
    // "<|endoftext|>") are matched as added tokens; encoder.py has none, and
    // splits "<|endoftext|>" in text like any other text.
    static BpeTokenizer from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                          const std::vector<std::string>& special_tokens = {});
    static BpeTokenizer from_tokenizer_json(const std::string& path);
    // A model's folder as Hugging Face saves it: its tokenizer.json, else its
    // vocab.json + merges.txt (with "<|endoftext|>" as a special token when the
    // vocabulary has it, as GPT2Tokenizer does); "[bpe] FOLDER: ..." when it has
    // neither, is not a folder or does not exist.
    static BpeTokenizer from_folder(const std::string& folder);
    // The tokenizer of a model with `rows` embedding rows (its vocabulary): the
    // folder's, refused when it has more tokens than the model has rows (an id
    // it gives would have no row). Fewer is allowed; decode then gives each id
    // in [vocab_size(), rows) as "<id>". The one check of task.tokenizer, for
    // import, train and every command that reads a model's tokens as text.
    static BpeTokenizer for_model(const std::string& folder, int64_t rows);
    static bool folder_has_one(const std::string& folder);

    std::vector<int32_t> encode(std::string_view text) const;
    // ids in [0, vocab_size()), or [0, rows) of for_model; any other is an error
    std::string decode(std::span<const int32_t> ids) const;
    // Ids are 0 .. vocab_size() - 1, every one a token (model vocabulary or added).
    int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
    const std::vector<AddedToken>& added_tokens() const { return added_; }
    // "NFC" for a tokenizer.json that declares it (not applied, see above), else "".
    const std::string& normalizer() const { return normalizer_; }

private:
    struct Merge {
        int32_t rank;    // place in the merges list: lower merges first
        int32_t merged;  // id of the two symbols joined
    };
    // What both loaders read, named for error messages: symbols[id] ("" for an
    // id only an added token has), merges as symbol pairs with where each came from.
    struct Source;
    explicit BpeTokenizer(const Source& source);

    void encode_segment(std::string_view segment, size_t text_offset, std::vector<int32_t>& ids) const;
    void merge(std::vector<int32_t>& word) const;

    std::string where_;                            // the file errors at encode time name
    std::vector<std::string> token_bytes_;         // [vocab_size] bytes each id decodes to
    std::array<int32_t, 256> byte_ids_{};          // id of each byte's one-character symbol, -1 if none
    std::unordered_map<uint64_t, Merge> merges_;   // (left id << 32 | right id) -> merge
    std::vector<AddedToken> added_;
    bool add_prefix_space_ = false;
    std::string normalizer_;
    int64_t model_rows_ = 0;                       // for_model's rows (>= vocab_size()), else 0
};

}  // namespace attnlab
