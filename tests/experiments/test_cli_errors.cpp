// main() turns every exception into one line and an exit status (never an abort);
// run_files never replaces what is not a regular file.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

#include "autograd/tensor.h"
#include "experiments/cli/commands.h"
#include "experiments/files/run_files.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

struct Outcome {
    int status;
    std::string line;
};

template <class Body> Outcome run(Body body) {
    std::ostringstream err;
    const int status = exit_status_of("train", body, err);
    return {status, err.str()};
}

TEST(CliErrors, BadInputIsExit2WithOneLine) {
    const Outcome usage = run([]() -> int { throw UsageError("--batches: expected an integer, got 'abc'"); });
    EXPECT_EQ(usage.status, 2);
    EXPECT_EQ(usage.line, "attnlab train: --batches: expected an integer, got 'abc'\n");
    const Outcome input = run([]() -> int { throw Error("[checkpoint] x.h5: not HDF5\n(a second line)"); });
    EXPECT_EQ(input.status, 2);
    EXPECT_EQ(input.line, "attnlab train: [checkpoint] x.h5: not HDF5 (a second line)\n");  // folded to one line
    const Outcome path = run([]() -> int {
        throw std::filesystem::filesystem_error("cannot create directory", "runs/x",
                                                std::make_error_code(std::errc::permission_denied));
    });
    EXPECT_EQ(path.status, 2);
    EXPECT_NE(path.line.find("runs/x"), std::string::npos) << path.line;
}

TEST(CliErrors, TheLineIsValidUtf8WithControlCharactersEscaped) {
    // a path's bytes, or another library's quote of a file, may be anything (issue 51)
    const Outcome raw = run([]() -> int { throw Error("runs/\xff\xfe/x.h5: \x1b[31mred\x1b[0m\tand caf\xc3\xa9"); });
    EXPECT_EQ(raw.status, 2);
    EXPECT_EQ(raw.line, "attnlab train: runs/\\xFF\\xFE/x.h5: \\u001B[31mred\\u001B[0m\\tand caf\xc3\xa9\n");
}

TEST(CliErrors, OurOwnBugsAreExit1InternalError) {
    const Outcome bug = run([]() -> int { throw std::out_of_range("vector::_M_range_check: __n (which is 7)"); });
    EXPECT_EQ(bug.status, 1);
    EXPECT_EQ(bug.line, "attnlab train: internal error: vector::_M_range_check: __n (which is 7) (please report it with the command line)\n");
    const Outcome memory = run([]() -> int { throw std::bad_alloc(); });
    EXPECT_EQ(memory.status, 1);
    EXPECT_EQ(memory.line.rfind("attnlab train: out of memory", 0), 0u) << memory.line;
    const Outcome odd = run([]() -> int { throw 42; });
    EXPECT_EQ(odd.status, 1);
    EXPECT_NE(odd.line.find("internal error"), std::string::npos);
}

TEST(RunFiles, WriteAtomicallyNeverReplacesWhatIsNoRegularFile) {
    // The rename would put a file in place of a FIFO, a device (as root:
    // /dev/full) or a symbolic link; refused, and nothing is left behind.
    const test::TempDir temp("attnlab_run_files_");  // removed also when an assertion ends the test
    const std::filesystem::path& dir = temp.path();
    const std::filesystem::path fifo = dir / "fifo", link = dir / "link", target = dir / "target";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    write_text_atomically(target, "keep", "[test]");
    std::filesystem::create_symlink(target, link);
    for (const auto& path : {fifo, link}) {
        try {
            write_text_atomically(path, "new", "[test]");
            ADD_FAILURE() << "replaced " << path;
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), "[test] " + path.string() + " exists and is not a regular file; refusing to replace it");
        }
    }
    EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
    EXPECT_TRUE(std::filesystem::is_symlink(std::filesystem::symlink_status(link)));
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 3);  // fifo, link, target: no temporary left
    write_text_atomically(target, "replaced", "[test]");  // a regular file is replaced whole
    std::ifstream in(target);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "replaced");
}

TEST(CliErrors, TheBodysStatusPassesThrough) {
    std::ostringstream err;
    EXPECT_EQ(exit_status_of("train", [] { return 130; }, err), 130);
    EXPECT_EQ(err.str(), "");
}

}  // namespace
}  // namespace attnlab
