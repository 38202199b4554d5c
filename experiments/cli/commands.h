// The `attnlab` command line: one function per subcommand. Each returns the
// process exit status; bad input throws UsageError (exit 2, one line).
#pragma once

#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int run_cli(int argc, char** argv);

// Runs a command's body and turns whatever escapes it into one line on `err`
// ("attnlab COMMAND: ...") and an exit status: 2 for bad input (UsageError,
// Error, a filesystem error), 1 for running out of memory or for any other
// exception, which is our own bug ("internal error: ..."). Never lets one through.
int exit_status_of(const std::string& command, const std::function<int()>& body, std::ostream& err);

// Splits `train`/`sweep` positionals: an existing file is the CONFIG, any other
// argument with '=' an override (key=value); a second config is a UsageError.
void split_config_and_overrides(const std::vector<std::string>& positionals, std::string& config_path,
                                std::vector<std::string>& overrides);

int cmd_gradcheck(const std::vector<std::string>& args);
class World;
int cmd_train(const std::vector<std::string>& args, const World& world);
int cmd_eval(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args, const World& world);
int cmd_generate(const std::vector<std::string>& args);
int cmd_audit(const std::vector<std::string>& args);
int cmd_ablate(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_patch(const std::vector<std::string>& args);
int cmd_path_patch(const std::vector<std::string>& args);
int cmd_circuit(const std::vector<std::string>& args);
int cmd_decompose(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_import(const std::vector<std::string>& args);
int cmd_lens(const std::vector<std::string>& args);
int cmd_cache(const std::vector<std::string>& args);
int cmd_heads(const std::vector<std::string>& args);
int cmd_example(const std::vector<std::string>& args);

}  // namespace attnlab
