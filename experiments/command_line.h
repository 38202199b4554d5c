// Option parsing shared by the subcommands: cxxopts over the arguments after
// the command name, its errors turned into UsageError (one line, exit 2).
#pragma once

// Vector-valued options (our positional CONFIG and key=value lists) must keep
// commas: "optim.betas=[0.9,0.98]" is one argument. Every command includes
// cxxopts through this header, so the setting is the same everywhere.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <string>
#include <vector>

#include "experiments/commands.h"

namespace attnlab {

inline cxxopts::ParseResult parse_command_line(cxxopts::Options& options, const std::vector<std::string>& args) {
    std::vector<const char*> argv{"attnlab"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
        return options.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(e.what());
    }
}

}  // namespace attnlab
