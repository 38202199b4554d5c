// A token file as `task.name = "file"` reads it: read_token_file, then the
// training and held-out streams of FileTask and a batch from each. The input
// is a recipe of edits to a valid token file (hdf5_recipe.h), or an HDF5
// file's bytes (seeds: tests/fuzz/corpus/fuzz_token_file/ and, for raw files,
// tests/fuzz/corpus/fuzz_token_file_files/).
#include "autograd/cpu/threads.h"
#include "data/file_task.h"
#include "data/h5file.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/hdf5_recipe.h"

namespace {

using namespace attnlab;

// A valid token file, 6 rows of width 5 with a loss mask, as bytes (written once).
std::string base_token_file() {
    const fuzz::TempFile file(nullptr, 0, ".h5");
    {
        h5::File h5 = h5::File::create(file.path(), "fuzz");
        std::vector<int32_t> tokens(30);
        std::vector<uint8_t> mask(30, 0);
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + i % 20);
        const std::vector<int64_t> lengths{5, 4, 3, 5, 2, 5};
        for (size_t r = 0; r < 6; ++r)
            for (size_t j = 1; j < static_cast<size_t>(lengths[r]); ++j) mask[r * 5 + j] = 1;
        h5.write<int32_t>("tokens", {6, 5}, tokens.data());
        h5.write<int64_t>("lengths", lengths);
        h5.write<uint8_t>("loss_mask", {6, 5}, mask.data());
    }
    return fuzz::file_bytes(file.path());
}

const std::string* base = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    set_threads(1);
    h5::silence_errors();
    base = new std::string(base_token_file());
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::load_hdf5_input(data, size, *base, {"tokens", "lengths", "loss_mask"}, [](const std::string& path) {
        read_token_file(path, 32);
        for (uint64_t stream : {0, 1}) {
            FileTask task(path, 32, 7, stream);
            const Batch batch = task.next(4);
            if (batch.inputs.shape[0] != 4) std::abort();
        }
    });
    return 0;
}
