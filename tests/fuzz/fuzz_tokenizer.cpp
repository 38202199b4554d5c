// GPT-2's tokenizer files as BpeTokenizer reads them (seeds:
// tests/fuzz/corpus/fuzz_tokenizer/). An input is a tokenizer.json's bytes, or,
// when it holds a NUL byte, a vocab.json's bytes, the NUL and a merges.txt's;
// 0x01 and a count byte repeat the byte before them (fuzz::expanded), so a
// normalizer nested a million deep or a merge of megabytes is a few bytes of
// input. Bad input may only throw Error, whose message is one short line of
// valid UTF-8 (the messages quote symbols, merges and JSON values:
// data/quoted.h); a tokenizer that loads encodes a short text.
#include <string>

#include "data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const std::string input = fuzz::expanded(data, size);
    const size_t nul = input.find('\0');
    const std::string text = "hello world\n\t 12 'll caf\xc3\xa9 \xe6\x97\xa5<|endoftext|>";
    if (nul == std::string::npos) {
        const fuzz::TempFile file(reinterpret_cast<const uint8_t*>(input.data()), input.size(), ".json");
        fuzz::expect_quoted_refusal_only([&] { BpeTokenizer::from_tokenizer_json(file.path()).encode(text); });
    } else {
        const fuzz::TempFile vocab(reinterpret_cast<const uint8_t*>(input.data()), nul, ".json");
        const fuzz::TempFile merges(reinterpret_cast<const uint8_t*>(input.data()) + nul + 1, input.size() - nul - 1, ".txt");
        fuzz::expect_quoted_refusal_only([&] { BpeTokenizer::from_vocab_merges(vocab.path(), merges.path(), {"<|endoftext|>"}).encode(text); });
    }
    return 0;
}
