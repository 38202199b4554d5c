// The `attnlab` command line: one function per subcommand. Each returns the
// process exit status; bad input throws UsageError (exit 2, one line).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int run_cli(int argc, char** argv);

// Splits `train`/`sweep` positionals: an existing file is the CONFIG, any other
// argument with '=' an override (key=value); a second config is a UsageError.
void split_config_and_overrides(const std::vector<std::string>& positionals, std::string& config_path,
                                std::vector<std::string>& overrides);

int cmd_gradcheck(const std::vector<std::string>& args);
int cmd_train(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_audit(const std::vector<std::string>& args);
int cmd_ablate(const std::vector<std::string>& args);

}  // namespace attnlab
