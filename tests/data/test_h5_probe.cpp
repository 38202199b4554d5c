// The probe of data/h5_probe.h: a reader runs first in a forked child, and
// what goes wrong there (a crash, a hang, a huge allocation, the reader's own
// error) becomes one attnlab::Error naming the file, while this process stays
// untouched: no zombie, no descriptor left open, no stdio buffer flushed
// twice, and other threads may run meanwhile. The kept libhdf5 crashes
// themselves run through the binary (tests/cli/test_libhdf5_crashes.py).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "data/h5_probe.h"
#include "data/h5file.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

// Sets an environment variable for one test, then restores it.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_) setenv(name_, old_->c_str(), 1);
        else unsetenv(name_);
    }

private:
    const char* name_;
    std::optional<std::string> old_;
};

// The message of the Error `statement` throws ("" if none).
template <class Statement>
std::string error_of(Statement&& statement) {
    try {
        statement();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

size_t open_descriptors() {
    DIR* dir = opendir("/proc/self/fd");
    size_t count = 0;
    while (readdir(dir)) ++count;
    closedir(dir);
    return count;
}

bool no_child_left() {
    errno = 0;
    return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

class H5Probe : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = dir_.file("t.h5");
        h5::File file = h5::File::create(path_, "test");
        file.write<int64_t>("tokens", std::vector<int64_t>{3, 1, 4, 1, 5});
        file.close();
    }
    std::vector<int64_t> read_tokens() const {
        const h5::File file = h5::File::open(path_, "test", h5::File::Access::read);
        return file.dataset("tokens").read<int64_t>();
    }
    test::TempDir dir_{"attnlab_h5_probe_"};
    std::string path_;
    ScopedEnv enabled_{"ATTNLAB_H5_PROBE", nullptr};
    ScopedEnv seconds_{"ATTNLAB_H5_PROBE_SECONDS", nullptr};
};

TEST_F(H5Probe, ACleanReadRunsInTheChildThenHere) {
    int runs_here = 0;
    const std::vector<int64_t> tokens = h5::read_probed(path_, "test", [&] {
        ++runs_here;  // the child's increment stays in the child
        return read_tokens();
    });
    EXPECT_EQ(tokens, (std::vector<int64_t>{3, 1, 4, 1, 5}));
    EXPECT_EQ(runs_here, 1);
    EXPECT_TRUE(no_child_left());
}

TEST_F(H5Probe, TheReadersErrorComesBackWithoutAReadHere) {
    int runs_here = 0;
    const std::string message = error_of([&] {
        h5::read_probed(path_, "test", [&] {
            ++runs_here;
            const h5::File file = h5::File::open(path_, "test", h5::File::Access::read);
            return file.dataset("missing").read<int64_t>();
        });
    });
    EXPECT_EQ(message, "[test] " + path_ + ": /missing: no such dataset");
    EXPECT_EQ(runs_here, 0);
}

TEST_F(H5Probe, ACrashIsOneLineNamingTheFileAndTheSignal) {
    EXPECT_EQ(error_of([&] { h5::probe(path_, "checkpoint", [] { std::raise(SIGSEGV); }); }),
              "[checkpoint] " + path_ + ": libhdf5 crashed reading this file (signal SIGSEGV): it is damaged or crafted");
    EXPECT_EQ(error_of([&] { h5::probe(path_, "checkpoint", [] { std::abort(); }); }),
              "[checkpoint] " + path_ + ": libhdf5 crashed reading this file (signal SIGABRT): it is damaged or crafted");
    EXPECT_TRUE(no_child_left());
}

TEST_F(H5Probe, AHangIsStoppedAtTheTimeLimit) {
    const ScopedEnv seconds("ATTNLAB_H5_PROBE_SECONDS", "0.5");
    const auto start = std::chrono::steady_clock::now();
    const std::string message = error_of([&] {
        h5::probe(path_, "token_file", [] {
            for (;;) pause();
        });
    });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(message.rfind("[token_file] " + path_ + ": libhdf5 did not finish reading this file within 0.5 s", 0), 0u)
        << message;
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 3.0);
    EXPECT_TRUE(no_child_left());  // killed and reaped
}

TEST_F(H5Probe, AHugeAllocationMeetsTheMemoryLimit) {
    const std::string message = error_of([&] {
        h5::probe(path_, "checkpoint", [] {
            // 8 GiB, as a crafted size field asks: without the limit the
            // kernel grants it (untouched pages cost nothing) and the read
            // would go on.
            static char* volatile huge = nullptr;
            huge = new char[size_t{8} << 30];
            huge[0] = 1;
        });
    });
    EXPECT_EQ(message.rfind("[checkpoint] " + path_ + ": reading this file needs more than 4.0 GiB of memory", 0), 0u)
        << message;
}

TEST_F(H5Probe, AnotherExceptionIsOurBugNotBadInput) {
    try {
        h5::probe(path_, "test", [] { throw std::logic_error("a bug of ours"); });
        FAIL() << "no exception";
    } catch (const Error& e) {
        FAIL() << "an attnlab::Error: " << e.what();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "a bug of ours");
    }
}

TEST_F(H5Probe, NothingOfThisProcessLeaks) {
    // A fully buffered stream with unwritten text: the child must not flush it.
    std::FILE* stream = std::tmpfile();
    ASSERT_NE(stream, nullptr);
    static char buffer[1024];
    std::setvbuf(stream, buffer, _IOFBF, sizeof buffer);
    std::fputs("once", stream);
    const size_t descriptors = open_descriptors();
    for (int i = 0; i < 20; ++i) h5::probe(path_, "test", [&] { read_tokens(); });
    EXPECT_EQ(open_descriptors(), descriptors);
    EXPECT_TRUE(no_child_left());
    std::fflush(stream);
    std::rewind(stream);
    char text[16] = {};
    EXPECT_EQ(std::fread(text, 1, sizeof text - 1, stream), 4u);
    EXPECT_STREQ(text, "once");
    std::fclose(stream);
}

TEST_F(H5Probe, WorksWhileOtherThreadsAllocate) {
    // After fork only the calling thread exists; a thread that held malloc's
    // lock at that moment must not leave the child stuck.
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&] {
            std::vector<std::vector<double>> held;
            for (size_t i = 0; !stop.load(); ++i) {
                held.emplace_back(100 + i % 7 * 20000);
                if (held.size() > 16) held.clear();
            }
        });
    const ScopedEnv seconds("ATTNLAB_H5_PROBE_SECONDS", "5");
    for (int i = 0; i < 20; ++i) EXPECT_EQ(h5::read_probed(path_, "test", [&] { return read_tokens(); }).size(), 5u);
    stop = true;
    for (std::thread& thread : threads) thread.join();
}

TEST_F(H5Probe, TheSwitchAndTheLimitAreChecked) {
    {
        const ScopedEnv off("ATTNLAB_H5_PROBE", "0");  // no child: the crash would happen here
        int runs_here = 0;
        h5::probe(path_, "test", [&] { ++runs_here; });
        EXPECT_EQ(runs_here, 0);
    }
    {
        const ScopedEnv bad("ATTNLAB_H5_PROBE", "yes");
        EXPECT_NE(error_of([&] { h5::probe(path_, "test", [] {}); }).find("ATTNLAB_H5_PROBE=\"yes\" must be 1"),
                  std::string::npos);
    }
    for (const char* bad : {"0", "-1", "ten", "1e9", "nan"}) {
        const ScopedEnv seconds("ATTNLAB_H5_PROBE_SECONDS", bad);
        EXPECT_NE(error_of([&] { h5::probe(path_, "test", [] {}); })
                      .find("ATTNLAB_H5_PROBE_SECONDS=\"" + std::string(bad) + "\" is not a number of seconds"),
                  std::string::npos)
            << bad;
    }
}

}  // namespace
}  // namespace attnlab
