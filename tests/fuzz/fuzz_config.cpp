// The config reader as `attnlab train CONFIG key=value ...` uses it. The input
// is TOML text, then after a NUL byte one override per line; an accepted
// config must come back equal from its own to_toml (seeds:
// tests/fuzz/corpus/fuzz_config/, the example configs with overrides).
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t split = input.find('\0');
    const std::string text = input.substr(0, split);
    std::vector<std::string> overrides;
    if (split != std::string::npos) {
        size_t start = split + 1;
        while (start <= input.size()) {
            const size_t end = std::min(input.find('\n', start), input.size());
            overrides.push_back(input.substr(start, end - start));
            start = end + 1;
        }
    }
    fuzz::expect_bad_input_only([&] {
        const Config config = parse_config(text, "fuzz.toml", overrides);
        const std::string resolved = to_toml(config);
        if (!(parse_config(resolved, "resolved.toml") == config)) {
            std::fprintf(stderr, "fuzz: to_toml does not read back to the same config:\n%s\n", resolved.c_str());
            std::abort();
        }
    });
    return 0;
}
