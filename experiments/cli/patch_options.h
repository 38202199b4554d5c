// The options patch, path-patch and circuit share: the checkpoint, the prompt
// pairs (--clean/--corrupt or --pairs FILE.h5), answers and --metric.
#pragma once

#include <cxxopts.hpp>

#include "experiments/analysis/patching.h"
#include "experiments/run/load_checkpoint.h"

namespace attnlab {

void add_prompt_options(cxxopts::Options& options);
// The prompts and answers from --clean/--corrupt/--positions/--answers or --pairs.
PromptPairs prompts_from(const cxxopts::ParseResult& parsed, const LoadedCheckpoint& checkpoint);
// The option the prompts came from, for a message: "--pairs" or "--clean".
inline std::string prompts_option(const cxxopts::ParseResult& parsed) { return parsed.count("pairs") ? "--pairs" : "--clean"; }
// The positional checkpoint (a file or a run folder), loaded on --device.
LoadedCheckpoint load_checkpoint_argument(const cxxopts::ParseResult& parsed);

}  // namespace attnlab
