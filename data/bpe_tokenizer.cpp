// GPT-2's byte-level BPE (data/bpe_tokenizer.h): the two loaders, which read
// their files into one Source, the checks that turn a Source into a tokenizer,
// and encode/decode.
#include "data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/tensor.h"
#include "data/quoted.h"
#include "data/text_task.h"

namespace attnlab {

using nlohmann::json;

// One merge as read, with where it came from for error messages.
struct MergeRule {
    std::string left, right;
    std::string where;  // "merges.txt:12" or "tokenizer.json: model.merges[11]"
};

struct BpeTokenizer::Source {
    std::string vocab_where;  // the file errors about the vocabulary, and at encode time, name
    json vocab;               // symbol -> id
    std::vector<MergeRule> merges;
    std::vector<AddedToken> added;
    bool add_prefix_space = false;
    std::string normalizer;
};

namespace {

[[noreturn]] void fail_at(const std::string& where, const std::string& problem) {
    throw Error("[bpe] " + where + ": " + problem);
}

// encoder.py's bytes_to_unicode(): bytes that print as themselves ('!'..'~',
// '¡'..'¬', '®'..'ÿ') keep their code point; the other 68 (controls, space,
// DEL, NBSP, soft hyphen) take 256, 257, ... in byte order, so that no symbol
// holds white space or a control character.
struct ByteAlphabet {
    std::array<char32_t, 256> char_of{};
    std::array<int16_t, 256 + 68> byte_of{};  // -1 for a character no byte has

    ByteAlphabet() {
        byte_of.fill(-1);
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool prints = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            char_of[b] = prints ? static_cast<char32_t>(b) : next++;
            byte_of[char_of[b]] = static_cast<int16_t>(b);
        }
    }
};
const ByteAlphabet kBytes;

// A token's bytes, as Hugging Face's ByteLevel decoder gives them: each
// character mapped back to its byte, or, if one has no byte (an added "    ",
// say), the token's own UTF-8.
std::string token_to_bytes(const std::string& token) {
    std::string bytes;
    for (char32_t c : decode_utf8(token, "token")) {  // valid: it came from JSON
        if (c >= kBytes.byte_of.size() || kBytes.byte_of[c] < 0) return token;
        bytes += static_cast<char>(kBytes.byte_of[c]);
    }
    return bytes;
}

std::string read_file(const std::string& path) {
    std::error_code error;
    const auto status = std::filesystem::status(path, error);
    if (!std::filesystem::exists(status)) fail_at(path, "no such file");
    if (!std::filesystem::is_regular_file(status)) fail_at(path, "not a regular file");
    if (std::filesystem::file_size(path, error) > kMaxTokenizerFileBytes)
        fail_at(path, "larger than " + std::to_string(kMaxTokenizerFileBytes >> 20) + " MiB, too large for a tokenizer file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_at(path, std::string("cannot open: ") + std::strerror(errno));
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (in.bad()) fail_at(path, "cannot read");
    return bytes.str();
}

json parse_json(const std::string& path) {
    const std::string text = read_file(path);
    if (const std::string deep = json_nesting_problem(text); !deep.empty()) fail_at(path, "the JSON has " + deep);
    try {
        return json::parse(text);
    } catch (const json::exception& e) {  // parse errors, and number overflow (1e999)
        const std::string message = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
        fail_at(path, "not valid JSON: " + escaped(message.substr(message.find("] ") + 2)));
    }
}

// A member of a JSON object, or null when absent (or when `object` is no object).
const json& member(const json& object, const char* key) {
    static const json absent;
    if (!object.is_object()) return absent;
    const auto it = object.find(key);
    return it == object.end() ? absent : *it;
}

bool is_id(const json& value) {
    return value.is_number_integer() && value.get<int64_t>() >= 0 &&
           value.get<int64_t>() <= std::numeric_limits<int32_t>::max();
}

// "left right" -> {left, right}: two non-empty symbols and one space (a byte-level
// symbol never holds a space, which is "Ġ"); false for anything else.
bool split_merge(const std::string& text, std::string& left, std::string& right) {
    const size_t space = text.find(' ');
    if (space == 0 || space == std::string::npos || space + 1 == text.size() || text.find(' ', space + 1) != std::string::npos)
        return false;
    left = text.substr(0, space);
    right = text.substr(space + 1);
    return true;
}

// merges.txt: "#version: 0.2" (optional), then one merge a line, "left right".
std::vector<MergeRule> read_merges_txt(const std::string& path) {
    const std::string text = read_file(path);
    std::vector<MergeRule> rules;
    size_t line_number = 0;
    for (size_t begin = 0; begin < text.size();) {
        const size_t end = std::min(text.find('\n', begin), text.size());
        std::string line = text.substr(begin, end - begin);
        begin = end + 1;
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
        MergeRule rule{"", "", path + ":" + std::to_string(line_number)};
        if (!split_merge(line, rule.left, rule.right)) fail_at(rule.where, "expected two symbols separated by one space, got " + quoted_bytes(line));
        rules.push_back(std::move(rule));
    }
    return rules;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                             const std::vector<std::string>& special_tokens) {
    Source source;
    source.vocab_where = vocab_path;
    source.vocab = parse_json(vocab_path);
    source.merges = read_merges_txt(merges_path);
    for (const std::string& token : special_tokens) {
        const json& id = member(source.vocab, token.c_str());
        if (!is_id(id)) fail_at(vocab_path, "special token " + quoted_bytes(token) + " is not in the vocabulary");
        source.added.push_back({id.get<int32_t>(), token, true, false});
    }
    return BpeTokenizer(source);
}

bool BpeTokenizer::folder_has_one(const std::string& folder) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path f(folder);
    return fs::is_regular_file(f / "tokenizer.json", ec) ||
           (fs::is_regular_file(f / "vocab.json", ec) && fs::is_regular_file(f / "merges.txt", ec));
}

BpeTokenizer BpeTokenizer::from_folder(const std::string& folder) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path f(folder);
    const fs::file_status status = fs::status(f, ec);
    if (!fs::exists(status)) fail_at(folder, "no such folder");
    if (!fs::is_directory(status)) fail_at(folder, "not a folder");
    if (fs::is_regular_file(f / "tokenizer.json", ec)) return from_tokenizer_json((f / "tokenizer.json").string());
    if (!fs::is_regular_file(f / "vocab.json", ec) || !fs::is_regular_file(f / "merges.txt", ec))
        throw Error("[bpe] " + folder + ": no tokenizer.json, nor vocab.json and merges.txt");
    Source source;
    source.vocab_where = (f / "vocab.json").string();
    source.vocab = parse_json(source.vocab_where);
    source.merges = read_merges_txt((f / "merges.txt").string());
    if (const json& end = member(source.vocab, "<|endoftext|>"); is_id(end)) source.added.push_back({end.get<int32_t>(), "<|endoftext|>", true, false});
    return BpeTokenizer(source);
}

BpeTokenizer BpeTokenizer::for_model(const std::string& folder, int64_t rows) {
    BpeTokenizer tokenizer = from_folder(folder);
    if (tokenizer.vocab_size() > rows)
        fail_at(folder, "the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " tokens, more than the model's vocabulary of " +
                            std::to_string(rows));
    tokenizer.model_rows_ = rows;
    return tokenizer;
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
    const json root = parse_json(path);
    Source source;
    source.vocab_where = path;
    const json& model = member(root, "model");
    if (member(model, "type") != "BPE") fail_at(path, "model.type is " + quoted_json(member(model, "type")) + ", expected \"BPE\"");
    // Options that would change the ids and that this tokenizer does not carry out.
    const auto refuse_unless = [&](bool fine, const std::string& field, const json& value, const char* why) {
        if (!fine) fail_at(path, field + " " + quoted_json(value) + " is not supported (" + why + ")");
    };
    const json& dropout = member(model, "dropout");
    refuse_unless(dropout.is_null() || dropout == 0, "model.dropout", dropout, "BPE dropout samples its merges");
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
        refuse_unless(member(model, affix).is_null() || member(model, affix) == "", std::string("model.") + affix,
                      member(model, affix), "byte-level BPE has no subword affixes");
    for (const char* flag : {"byte_fallback", "ignore_merges"})
        refuse_unless(member(model, flag).is_null() || member(model, flag) == false, std::string("model.") + flag,
                      member(model, flag), "only GPT-2's merging is carried out");

    source.vocab = member(model, "vocab");
    const json& merges = member(model, "merges");
    if (!merges.is_array()) fail_at(path, "model.merges is not an array");
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string where = path + ": model.merges[" + std::to_string(i) + "]";
        const json& merge = merges[i];  // "a b" (older files) or ["a", "b"] (tokenizers >= 0.20)
        MergeRule rule{"", "", where};
        const bool pair = merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string() &&
                          merge[0] != "" && merge[1] != "";
        if (pair) {
            rule.left = merge[0].get<std::string>();
            rule.right = merge[1].get<std::string>();
        } else if (!merge.is_string() || !split_merge(merge.get<std::string>(), rule.left, rule.right)) {
            fail_at(where, "expected \"left right\" or [\"left\", \"right\"], got " + quoted_json(merge));
        }
        source.merges.push_back(std::move(rule));
    }

    const json& added = member(root, "added_tokens");
    if (!added.is_null() && !added.is_array()) fail_at(path, "added_tokens is not an array");
    for (size_t i = 0; i < added.size(); ++i) {
        const std::string where = path + ": added_tokens[" + std::to_string(i) + "]";
        const json& token = added[i];
        if (!is_id(member(token, "id"))) fail_at(where, "id " + quoted_json(member(token, "id")) + " is not an integer in [0, 2^31)");
        if (!member(token, "content").is_string() || member(token, "content") == "")
            fail_at(where, "content " + quoted_json(member(token, "content")) + " is not a non-empty string");
        for (const char* flag : {"lstrip", "rstrip", "single_word"})
            if (!member(token, flag).is_null() && member(token, flag) != false)
                fail_at(where, std::string(flag) + " " + quoted_json(member(token, flag)) + " is not supported (only literal matching)");
        const bool special = member(token, "special") == true;
        const bool normalized = member(token, "normalized").is_boolean() ? member(token, "normalized").get<bool>() : !special;
        source.added.push_back({member(token, "id").get<int32_t>(), member(token, "content").get<std::string>(), special, normalized});
    }

    const json& normalizer = member(root, "normalizer");
    if (!normalizer.is_null() && member(normalizer, "type") != "NFC")
        fail_at(path, "normalizer " + quoted_json(member(normalizer, "type")) + " is not supported (only none or NFC)");
    if (!normalizer.is_null()) source.normalizer = "NFC";
    const json& pre_tokenizer = member(root, "pre_tokenizer");
    if (member(pre_tokenizer, "type") != "ByteLevel")
        fail_at(path, "pre_tokenizer " + quoted_json(member(pre_tokenizer, "type")) + " is not supported (only ByteLevel)");
    const json& use_regex = member(pre_tokenizer, "use_regex");
    refuse_unless(use_regex.is_null() || use_regex == true, "pre_tokenizer.use_regex", use_regex, "GPT-2's pattern always splits");
    const json& prefix = member(pre_tokenizer, "add_prefix_space");
    source.add_prefix_space = prefix.is_boolean() ? prefix.get<bool>() : true;  // Hugging Face's default
    for (const char* stage : {"decoder", "post_processor"}) {
        const json& value = member(root, stage);
        if (!value.is_null() && member(value, "type") != "ByteLevel")
            fail_at(path, std::string(stage) + " " + quoted_json(member(value, "type")) + " is not supported (only none or ByteLevel)");
    }
    return BpeTokenizer(source);
}

// The checks every tokenizer passes: ids 0..N-1 each given once (an id may be
// both a vocabulary symbol and an added token, as GPT-2's "<|endoftext|>"; the
// added content is what it decodes to, as in Hugging Face), and merges of
// symbols in the vocabulary whose concatenation is in it too.
BpeTokenizer::BpeTokenizer(const Source& source)
    : where_(source.vocab_where), added_(source.added), add_prefix_space_(source.add_prefix_space), normalizer_(source.normalizer) {
    const std::string& where = source.vocab_where;
    if (!source.vocab.is_object()) fail_at(where, "the vocabulary is not a JSON object of token -> id");
    const size_t entries = source.vocab.size() + source.added.size();  // ids are below this, or some id is missing
    std::vector<const std::string*> tokens(entries, nullptr);           // [entries] token string of each id
    std::vector<bool> added_id(entries, false);
    size_t count = 0;  // one past the highest id
    const auto place = [&](int32_t id, const std::string& token, bool added) {
        if (static_cast<size_t>(id) >= entries)
            fail_at(where, "id " + std::to_string(id) + " of " + quoted_bytes(token) + " is beyond the " + std::to_string(entries) +
                            " tokens (ids must be 0..N-1, each given once)");
        if (tokens[id] != nullptr && (!added || added_id[id]))
            fail_at(where, "id " + std::to_string(id) + " is given to both " + quoted_bytes(*tokens[id]) + " and " + quoted_bytes(token));
        tokens[id] = &token;
        added_id[id] = added;
        count = std::max(count, static_cast<size_t>(id) + 1);
    };
    std::unordered_map<std::string, int32_t> symbol_ids;
    for (const auto& [symbol, id] : source.vocab.items()) {
        if (!is_id(id)) fail_at(where, "token " + quoted_bytes(symbol) + " has id " + quoted_json(id) + ", not an integer in [0, 2^31)");
        place(id.get<int32_t>(), symbol, false);
        symbol_ids.emplace(symbol, id.get<int32_t>());
    }
    for (const AddedToken& token : source.added) place(token.id, token.content, true);
    for (size_t id = 0; id < count; ++id) {
        if (tokens[id] == nullptr) fail_at(where, "no token has id " + std::to_string(id) + " (ids must be 0..N-1, each given once)");
        token_bytes_.push_back(token_to_bytes(*tokens[id]));
    }

    for (int b = 0; b < 256; ++b) {
        const auto it = symbol_ids.find(encode_utf8(std::u32string(1, kBytes.char_of[b])));
        byte_ids_[b] = it == symbol_ids.end() ? -1 : it->second;
    }
    const auto symbol_id = [&](const std::string& symbol, const std::string& rule_where, const char* what) {
        const auto it = symbol_ids.find(symbol);
        if (it == symbol_ids.end()) fail_at(rule_where, std::string(what) + quoted_bytes(symbol) + " is not in the vocabulary");
        return static_cast<uint64_t>(it->second);
    };
    for (size_t rank = 0; rank < source.merges.size(); ++rank) {
        const MergeRule& rule = source.merges[rank];
        const uint64_t left = symbol_id(rule.left, rule.where, ""), right = symbol_id(rule.right, rule.where, "");
        const int32_t merged = static_cast<int32_t>(symbol_id(rule.left + rule.right, rule.where, "the merged symbol "));
        // a repeated merge takes its last rank, as encoder.py's dict(zip(merges, range(...))) does
        merges_.insert_or_assign(left << 32 | right, Merge{static_cast<int32_t>(rank), merged});
    }
}

namespace {

// GPT-2's pattern with \s spelled out as Unicode's White_Space, which is what
// Python's `regex` module (encoder.py's) matches: PCRE2's \s under PCRE2_UCP
// also takes U+180E (Mongolian vowel separator, white space before Unicode 6.3).
// (?!\S) becomes (?![^WS]): at the end of the text it holds, as it should.
#define ATTNLAB_WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ATTNLAB_WS "\\p{L}\\p{N}]+|[" ATTNLAB_WS
                                     "]+(?![^" ATTNLAB_WS "])|[" ATTNLAB_WS "]+";
#undef ATTNLAB_WS

// Compiled once, read-only afterwards (pcre2_match may share it across threads).
const pcre2_code* gpt2_pattern() {
    static const std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code = [] {
        int error = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
        if (compiled == nullptr) throw Error("[bpe] internal: GPT-2's pattern does not compile");
        pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);  // only faster; without JIT pcre2_match interprets
        return std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>(compiled, pcre2_code_free);
    }();
    return code.get();
}

struct Segment {
    size_t begin, end;  // bytes of the text
    int32_t added;      // the added token's id, or -1 for text to pre-tokenise
};

// Cuts the added tokens of one pass (normalized or not) out of the text
// segments, leftmost first, the longest of those starting there.
std::vector<Segment> cut_added(std::string_view text, const std::vector<Segment>& segments, const std::vector<AddedToken>& added,
                               bool normalized) {
    std::vector<Segment> out;
    for (const Segment& segment : segments) {
        if (segment.added >= 0) {
            out.push_back(segment);
            continue;
        }
        size_t start = segment.begin;
        for (size_t at = segment.begin; at < segment.end;) {
            const AddedToken* longest = nullptr;
            for (const AddedToken& token : added)
                if (token.normalized == normalized && token.content.size() <= segment.end - at &&
                    text.compare(at, token.content.size(), token.content) == 0 &&
                    (longest == nullptr || token.content.size() > longest->content.size()))
                    longest = &token;
            if (longest == nullptr) {
                ++at;
                continue;
            }
            if (start < at) out.push_back({start, at, -1});
            out.push_back({at, at + longest->content.size(), longest->id});
            at += longest->content.size();
            start = at;
        }
        if (start < segment.end) out.push_back({start, segment.end, -1});
    }
    return out;
}

}  // namespace

namespace {

// Unicode's canonical composition (NFC), by utf8proc; invalid UTF-8 is an Error.
std::string nfc(std::string_view text) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t size = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                               static_cast<utf8proc_ssize_t>(text.size()), &out,
                                               static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (size < 0) throw Error(std::string("[bpe] the text is not valid UTF-8 (") + utf8proc_errmsg(size) + ")");
    std::string normalized(reinterpret_cast<const char*>(out), static_cast<size_t>(size));
    std::free(out);
    return normalized;
}

}  // namespace

std::vector<int32_t> BpeTokenizer::encode(std::string_view raw) const {
    // tokenizer.json's NFC normalizer, over the whole text (Hugging Face cuts the
    // added tokens that are not normalized first: the two differ only where such a
    // token's edge meets a combining mark)
    const std::string normalized = normalizer_ == "NFC" ? nfc(raw) : std::string();
    const std::string_view text = normalizer_ == "NFC" ? std::string_view(normalized) : raw;
    std::vector<Segment> segments{{0, text.size(), -1}};
    if (!added_.empty())
        for (bool normalized : {false, true}) segments = cut_added(text, segments, added_, normalized);
    std::vector<int32_t> ids;
    for (const Segment& segment : segments) {
        if (segment.added >= 0)
            ids.push_back(segment.added);
        else if (segment.end > segment.begin)
            encode_segment(text.substr(segment.begin, segment.end - segment.begin), segment.begin, ids);
    }
    return ids;
}

void BpeTokenizer::encode_segment(std::string_view segment, size_t text_offset, std::vector<int32_t>& ids) const {
    std::string prefixed;
    size_t shift = 0;  // byte i of `segment` is byte text_offset + i - shift of the text
    if (add_prefix_space_ && segment.front() != ' ') {
        prefixed = " " + std::string(segment);
        segment = prefixed;
        shift = 1;
    }
    const pcre2_code* pattern = gpt2_pattern();
    const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(pattern, nullptr), pcre2_match_data_free);
    const auto subject = reinterpret_cast<PCRE2_SPTR>(segment.data());
    std::vector<int32_t> word;  // [symbols of one piece]
    for (size_t begin = 0; begin < segment.size();) {
        // The first match checks the whole segment's UTF-8 (PCRE2 checks from the offset to the end).
        const int found = pcre2_match(pattern, subject, segment.size(), begin, begin == 0 ? 0 : PCRE2_NO_UTF_CHECK, match.get(), nullptr);
        if (found <= PCRE2_ERROR_UTF8_ERR1 && found >= PCRE2_ERROR_UTF8_ERR21)
            fail_at(where_, "encode: the text is not UTF-8 at byte " + std::to_string(text_offset + pcre2_get_startchar(match.get()) - shift));
        const PCRE2_SIZE* piece = pcre2_get_ovector_pointer(match.get());  // [begin, end)
        // Every character is white space, a letter, a number or none of these, so
        // the pieces tile the segment; anything else is a bug of ours.
        if (found < 0 || piece[0] != begin || piece[1] <= begin)
            throw Error("[bpe] internal: GPT-2's pattern left bytes of the text unmatched");
        word.clear();
        for (size_t i = begin; i < piece[1]; ++i) {
            const auto byte = static_cast<uint8_t>(segment[i]);
            if (byte_ids_[byte] < 0) {
                const std::string at = i < shift ? "the prefix space" : "text byte " + std::to_string(text_offset + i - shift);
                char hex[8];
                std::snprintf(hex, sizeof hex, "0x%02X", byte);
                fail_at(where_, std::string("encode: byte ") + hex + " (" + at + ") has no vocabulary entry (symbol " +
                                 quoted_bytes(encode_utf8(std::u32string(1, kBytes.char_of[byte]))) + ")");
            }
            word.push_back(byte_ids_[byte]);
        }
        merge(word);
        ids.insert(ids.end(), word.begin(), word.end());
        begin = piece[1];
    }
}

// encoder.py's bpe(): while some adjacent pair has a merge, take the pair of
// lowest rank and merge every occurrence of it, left to right, without overlap
// ("a a a" with "a a" gives "aa a"). Quadratic in the piece's length, as there.
void BpeTokenizer::merge(std::vector<int32_t>& word) const {
    const auto key = [](int32_t left, int32_t right) { return static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right); };
    std::vector<int32_t> merged;
    while (word.size() > 1) {
        const Merge* best = nullptr;
        uint64_t best_pair = 0;
        for (size_t i = 0; i + 1 < word.size(); ++i) {
            const auto it = merges_.find(key(word[i], word[i + 1]));
            if (it != merges_.end() && (best == nullptr || it->second.rank < best->rank)) {
                best = &it->second;
                best_pair = it->first;
            }
        }
        if (best == nullptr) return;
        merged.clear();
        for (size_t i = 0; i < word.size(); ++i) {
            if (i + 1 < word.size() && key(word[i], word[i + 1]) == best_pair) {
                merged.push_back(best->merged);
                ++i;
            } else {
                merged.push_back(word[i]);
            }
        }
        word.swap(merged);
    }
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
    const int64_t rows = std::max<int64_t>(model_rows_, vocab_size());
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= rows)
            fail_at(where_, "decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                             std::to_string(rows) + ")");
        bytes += ids[i] < vocab_size() ? token_bytes_[ids[i]] : "<" + std::to_string(ids[i]) + ">";  // a row no token has
    }
    return bytes;
}

}  // namespace attnlab
