// config.json as `attnlab import` reads it (experiments/interop/import.h), in a
// folder whose model.safetensors holds no tensor (seeds: tests/fuzz/corpus/
// fuzz_import/, a GPT-2, a GPT-NeoX and a TransformerLens config). Every field
// check of the format runs; a config that passes them all ends at its first
// tensor, which is missing. 0x01 and a count byte repeat the byte before them
// (fuzz::expanded), so rope_scaling nested a million deep or a field of
// megabytes is a few bytes of input. Bad input may only throw Error, whose
// message is one short line of valid UTF-8 (data/quoted.h).
#include <cstdlib>
#include <filesystem>
#include <string>

#include "experiments/interop/import.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const char* tmp = std::getenv("TMPDIR");
    std::string folder = std::string(tmp && *tmp ? tmp : "/tmp") + "/attnlab_fuzz_import_XXXXXX";
    if (mkdtemp(folder.data()) == nullptr) std::abort();
    const std::string config = fuzz::expanded(data, size);
    const std::string no_tensors = std::string("\x08\0\0\0\0\0\0\0{}      ", 16);  // an 8-byte header "{}" padded
    std::ofstream(folder + "/config.json", std::ios::binary).write(config.data(), static_cast<std::streamsize>(config.size()));
    std::ofstream(folder + "/model.safetensors", std::ios::binary).write(no_tensors.data(), static_cast<std::streamsize>(no_tensors.size()));
    fuzz::expect_quoted_refusal_only([&] { import_model(folder); });
    std::filesystem::remove_all(folder);
    return 0;
}
