// A config's [sweep] grid as `attnlab sweep CONFIG` checks it before any cell
// starts: the input is the body of a [sweep] table (after a valid base config),
// parsed, validated (every cell) and expanded by sweep_cells, whose product
// must match the axes (seeds: tests/fuzz/corpus/fuzz_sweep/).
#include <string>

#include "experiments/config/config.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const char* const kBase =
    "[model]\nwidth = 16\nheads = 2\nlayers = 1\nffn = 32\n"
    "[train]\nsteps = 40\nbatch = 8\n"
    "[sweep]\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const std::string text = kBase + std::string(reinterpret_cast<const char*>(data), size);
    fuzz::expect_bad_input_only([&] {
        const Config config = parse_config(text, "sweep.toml");
        size_t cells = 1;
        for (const SweepAxis& axis : config.sweep) cells *= axis.values.size();
        if (sweep_cells(config).size() != cells) std::abort();
    });
    return 0;
}
