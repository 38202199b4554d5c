// output_file.h: every file is written under a temporary name of this process's
// own and given its name by one rename that replaces only what the output allows
// (a second writer of a new file is refused, a default name goes to NAME-2, an
// --out replaces only the file it saw); temporaries go on failure and on signals.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "autograd/tensor.h"
#include "experiments/files/output_file.h"
#include "experiments/files/temp_files.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

std::string text_of(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> names_in(const fs::path& dir) {
    std::set<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
}

// A write of `text` to its temporary, after `meanwhile` (what another writer does during it).
template <class Meanwhile> auto writing(const std::string& text, Meanwhile meanwhile) {
    return [text, meanwhile](const std::string& tmp) {
        meanwhile();
        std::ofstream(tmp, std::ios::binary) << text;
    };
}

std::string error_of(const std::function<void()>& body) {
    try {
        body();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(OutputFile, TemporaryNamesAreThisProcesssOwnAndNeverRepeat) {
    const fs::path path = "/some/folder/out.h5";
    const std::string pid = std::to_string(::getpid());
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        const fs::path tmp = temporary_name(path);
        EXPECT_EQ(tmp.parent_path(), path.parent_path());
        const std::string name = tmp.filename().string();
        EXPECT_EQ(name.rfind("out.h5." + pid + ".", 0), 0u) << name;
        EXPECT_TRUE(name.ends_with(".tmp")) << name;
        EXPECT_LE(name.size(), std::string("out.h5").size() + kTemporarySuffix) << name;
        EXPECT_TRUE(seen.insert(name).second) << name << " twice";
    }
    const fs::path longest = fs::path("/x") / std::string(255, 'a');  // cut to fit the filesystem's 255 bytes
    const std::string cut = temporary_name(longest).filename().string();
    EXPECT_EQ(cut.size(), 255u) << cut;
    EXPECT_EQ(cut.rfind("aaaa", 0), 0u) << cut;
}

TEST(OutputFile, ANewFileKeepsTheFileAnotherWriterMadeMeanwhile) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path out = temp.path() / "out.h5";
    const std::string error = error_of([&] {
        write_output({out, Existing::refuse, {}}, "[test]",
                     writing("second", [&] { write_output({out, Existing::refuse, {}}, "[test]", writing("first", [] {})); }));
    });
    EXPECT_EQ(error, "[test] " + out.string() +
                         " was created by another process while this one ran; it is kept and nothing was written (give another name)");
    EXPECT_EQ(text_of(out), "first");
    EXPECT_EQ(names_in(temp.path()), std::set<std::string>{"out.h5"});  // no temporary left
    // with nobody else: written
    const fs::path other = temp.path() / "other.h5";
    EXPECT_EQ(write_output({other, Existing::refuse, {}}, "[test]", writing("mine", [] {})), other);
    EXPECT_EQ(text_of(other), "mine");
}

TEST(OutputFile, ReplacesOnlyTheFileItSaw) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path out = temp.path() / "out.h5";
    std::ofstream(out) << "old";
    const FileId seen = *file_id(out);
    // another writer replaced it after the check: refused, theirs kept
    const std::string error = error_of([&] {
        write_output({out, Existing::replace_seen, seen}, "[test]", writing("mine", [&] {
            write_output({out, Existing::replace, {}}, "[test]", writing("theirs", [] {}));
        }));
    });
    EXPECT_EQ(error, "[test] " + out.string() +
                         " was replaced by another process while this one ran; it is kept and nothing was written (give another name)");
    EXPECT_EQ(text_of(out), "theirs");
    // the file it saw: replaced
    const FileId now = *file_id(out);
    EXPECT_EQ(write_output({out, Existing::replace_seen, now}, "[test]", writing("mine", [] {})), out);
    EXPECT_EQ(text_of(out), "mine");
    // removed meanwhile: written as a new file
    const FileId gone = *file_id(out);
    EXPECT_EQ(write_output({out, Existing::replace_seen, gone}, "[test]", writing("again", [&] { fs::remove(out); })), out);
    EXPECT_EQ(text_of(out), "again");
    EXPECT_EQ(names_in(temp.path()), std::set<std::string>{"out.h5"});
}

TEST(OutputFile, ADefaultNameTakesTheNextFreeNumber) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path out = temp.path() / "step_0000040.circuit.key.exact.prob.h5";
    const OutputFile numbered{out, Existing::number, {}};
    EXPECT_EQ(write_output(numbered, "[test]", writing("1", [] {})), out);
    const fs::path second = temp.path() / "step_0000040.circuit.key.exact.prob-2.h5";
    EXPECT_EQ(write_output(numbered, "[test]", writing("2", [] {})), second);
    // one taken meanwhile (another writer's) is skipped too
    const fs::path third = temp.path() / "step_0000040.circuit.key.exact.prob-3.h5";
    const fs::path fourth = temp.path() / "step_0000040.circuit.key.exact.prob-4.h5";
    EXPECT_EQ(write_output(numbered, "[test]", writing("4", [&] { std::ofstream(third) << "theirs"; })), fourth);
    EXPECT_EQ(text_of(out), "1");
    EXPECT_EQ(text_of(second), "2");
    EXPECT_EQ(text_of(third), "theirs");
    EXPECT_EQ(text_of(fourth), "4");
    EXPECT_EQ(names_in(temp.path()).size(), 4u);
}

TEST(OutputFile, AFailedWriteLeavesNothing) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path out = temp.path() / "out.h5";
    for (const Existing existing : {Existing::refuse, Existing::number, Existing::replace}) {
        const std::string error = error_of([&] {
            write_output({out, existing, {}}, "[test]", [](const std::string& tmp) {
                std::ofstream(tmp) << "half";
                throw Error("[test] failed halfway");
            });
        });
        EXPECT_EQ(error, "[test] failed halfway");
        EXPECT_TRUE(fs::is_empty(temp.path())) << *names_in(temp.path()).begin();
    }
}

TEST(OutputFile, ASecondFolderWriterIsRefused) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path dir = temp.path() / "export";
    const std::string error = error_of([&] {
        write_output_folder(dir, "[test]", [&](const fs::path& tmp) {
            std::ofstream(tmp / "mine.txt") << "mine";
            write_output_folder(dir, "[test]", [](const fs::path& theirs) { std::ofstream(theirs / "theirs.txt") << "theirs"; });
        });
    });
    EXPECT_EQ(error, "[test] " + dir.string() +
                         " was filled by another process while this one ran; it is kept and nothing was written (give another name)");
    EXPECT_EQ(names_in(temp.path()), std::set<std::string>{"export"});
    EXPECT_EQ(names_in(dir), std::set<std::string>{"theirs.txt"});
}

// A signal while a temporary folder of files is being filled removes the files and the folder.
TEST(OutputFile, ASignalRemovesATemporaryFolder) {
    const test::TempDir temp("attnlab_output_file_");
    const fs::path dir = temp.path() / "export";
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        remove_temporaries_on_signals();
        try {
            write_output_folder(dir, "[test]", [](const fs::path& tmp) {
                std::ofstream(tmp / "config.json") << "{}";
                write_text_atomically(tmp / "model.safetensors", "bytes", "[test]");
                const InFlight file((tmp / "half.bin").string());
                std::ofstream(tmp / "half.bin") << "half";
                ::raise(SIGTERM);
            });
        } catch (...) {
        }
        ::_exit(0);  // not reached: SIGTERM ends the child
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    EXPECT_TRUE(fs::is_empty(temp.path())) << *names_in(temp.path()).begin();
}

}  // namespace
}  // namespace attnlab
