// The Python tools in tools/ that commands run (inspect --png: plot_attention.py;
// report: report.py): where the script is, which interpreter runs it, and running it.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "experiments/cli/commands.h"

extern char** environ;

namespace attnlab {

// The running attnlab binary (/proc/self/exe), for a tool that runs attnlab itself.
inline std::filesystem::path self_executable() {
    std::error_code ec;
    return std::filesystem::read_symlink("/proc/self/exe", ec);
}

// "context: " for the errors below ("--png: "), or nothing for an empty context.
inline std::string tool_error_prefix(const std::string& context) { return context.empty() ? "" : context + ": "; }

// tools/<name>, looked for in order: $ATTNLAB_TOOLS; an installation's
// <prefix>/share/attnlab/tools beside <prefix>/bin/attnlab (cmake --install); tools/
// beside the executable or up to three folders above it (build/attnlab -> the
// source tree); the source tree this binary was built from (a build folder
// anywhere else). `context` ("--png", or "" for a command that is the tool)
// starts the UsageError when it is not found.
inline std::filesystem::path find_tool(const std::string& name, const std::string& context) {
    namespace fs = std::filesystem;
    const std::string prefix = tool_error_prefix(context);
    if (const char* dir = std::getenv("ATTNLAB_TOOLS")) {
        const fs::path p = fs::path(dir) / name;
        if (fs::is_regular_file(p)) return p;
        throw UsageError(prefix + "no " + name + " in ATTNLAB_TOOLS=" + dir);
    }
    const fs::path exe = self_executable();
    if (const fs::path p = exe.parent_path().parent_path() / "share" / "attnlab" / "tools" / name; fs::is_regular_file(p)) return p;
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
        const fs::path p = dir / "tools" / name;
        if (fs::is_regular_file(p)) return p;
        if (dir == dir.parent_path()) break;
    }
#ifdef ATTNLAB_SOURCE_TOOLS
    if (const fs::path p = fs::path(ATTNLAB_SOURCE_TOOLS) / name; fs::is_regular_file(p)) return p;
#endif
    throw UsageError(prefix + "cannot find tools/" + name + " near " + exe.string() +
                     " (set ATTNLAB_TOOLS to the folder that holds it)");
}

// $ATTNLAB_PYTHON, else Debian's /usr/bin/python3, whose packages the tools use
// (`needs` names them in the error).
inline std::string python_interpreter(const std::string& context, const std::string& needs) {
    const char* env = std::getenv("ATTNLAB_PYTHON");
    const std::string python = env && *env ? env : "/usr/bin/python3";
    if (access(python.c_str(), X_OK) != 0)
        throw UsageError(tool_error_prefix(context) + python + " is not an executable (it needs " + needs + ")");
    return python;
}

// Runs words[0] with arguments words (stdin, stdout and stderr shared) and waits for it:
// its exit status, or -1 when it could not be started or was killed by a signal.
inline int run_program(const std::vector<std::string>& words) {
    std::vector<std::string> copy = words;
    std::vector<char*> argv;
    for (auto& w : copy) argv.push_back(w.data());
    argv.push_back(nullptr);
    std::cout.flush();
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace attnlab
