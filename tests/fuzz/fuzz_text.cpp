// A text file as `task.name = "text"` reads it: its alphabet, the training and
// held-out streams of TextTask and a batch from each; and UTF-8 decoding and
// encoding read back to the same bytes. Any input is a file's bytes (seeds:
// tests/fuzz/corpus/fuzz_text/). Bad input may only throw Error.
#include <cstdlib>

#include "autograd/cpu/threads.h"
#include "data/text_task.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    attnlab::set_threads(1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const fuzz::TempFile file(data, size, ".txt");
    fuzz::expect_bad_input_only([&] {
        const std::string bytes(reinterpret_cast<const char*>(data), size);
        if (encode_utf8(decode_utf8(bytes, "fuzz")) != bytes) std::abort();  // UTF-8 reads back as itself
        const std::string alphabet = text_alphabet(file.path());
        if (tokens_to_text(text_to_tokens(bytes, alphabet, "fuzz"), alphabet) != bytes) std::abort();
        for (uint64_t stream : {0, 1}) {
            TextTask task(file.path(), alphabet, 4, 7, stream);
            const Batch batch = task.next(3);
            for (size_t r = 0; r < 3; ++r)  // targets are the inputs shifted by one character
                for (size_t t = 0; t + 1 < 4; ++t)
                    if (batch.targets.values[r * 4 + t] != batch.inputs.values[r * 4 + t + 1]) std::abort();
        }
    });
    return 0;
}
