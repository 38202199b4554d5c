// The child of data/h5_probe.h: started with fork (no exec: it runs the
// caller's reader), limited with setrlimit, watched through a pipe that
// carries its verdict, killed when late, and reaped with waitpid.
#include "data/h5_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "autograd/tensor.h"  // Error
#include "data/h5file.h"
#include "data/quoted.h"

// Under a sanitizer (the fuzz build) a report in the child must not reach the
// fuzzer's death callback, which would save the input as a finding of its own.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLAB_H5_PROBE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ATTNLAB_H5_PROBE_SANITIZED 1
#endif
#ifdef ATTNLAB_H5_PROBE_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

namespace attnlab::h5 {

namespace {

constexpr double kDefaultSeconds = 10.0;
constexpr double kBytesPerSecond = 100e6;  // the time limit grows by 1 s per 100 MB of file
// The child may map this much beyond what it inherits: enough for any file
// attnlab writes (a reader holds about one copy of the data, two while
// converting), far below what a crafted size field asks for.
constexpr uint64_t kMemoryBase = uint64_t{4} << 30;
constexpr uint64_t kMemoryPerFileByte = 8;
constexpr size_t kMaxVerdict = 64 * 1024;

struct Limits {
    double seconds = kDefaultSeconds;
    uint64_t memory = 0;  // bytes the child may map beyond what it inherits
};

bool probe_enabled() {
    const char* value = std::getenv("ATTNLAB_H5_PROBE");
    if (!value || !*value || std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    throw Error("ATTNLAB_H5_PROBE=" + quoted_bytes(value) +
                " must be 1 (read an HDF5 file in a child process first, the default) or 0 (trusted files only)");
}

double base_seconds() {
    const char* value = std::getenv("ATTNLAB_H5_PROBE_SECONDS");
    if (!value || !*value) return kDefaultSeconds;
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(value, &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e6)
        throw Error("ATTNLAB_H5_PROBE_SECONDS=" + quoted_bytes(value) + " is not a number of seconds in (0, 1e6]");
    return seconds;
}

Limits limits_for(const std::string& path) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);  // 0 for what is not a regular file
    const uint64_t file_bytes = ec ? 0 : static_cast<uint64_t>(size);
    Limits limits;
    limits.seconds = base_seconds() + static_cast<double>(file_bytes) / kBytesPerSecond;
    limits.memory = kMemoryBase + kMemoryPerFileByte * file_bytes;
    return limits;
}

// The address space this process maps now (0 if unknown): the child's limit
// comes on top, since it inherits all of it (a sanitizer's shadow, a GPU
// runtime's reservations).
uint64_t mapped_bytes() {
    FILE* statm = std::fopen("/proc/self/statm", "r");
    if (!statm) return 0;
    unsigned long long pages = 0;
    const bool read = std::fscanf(statm, "%llu", &pages) == 1;
    std::fclose(statm);
    return read ? pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

void write_all(int fd, const std::string& text) {
    for (size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

// The child: limits, then the reader, then one verdict on the pipe and
// _exit (no atexit handler, HDF5's included, and no stdio buffer inherited
// from the parent is flushed). Only this thread exists here.
[[noreturn]] void run_child(int report, pid_t parent, uint64_t address_limit, const sigset_t& parent_mask,
                            const std::function<void()>& read) {
    // A crash ends the child with its signal, in no handler of the parent's
    // (a sanitizer's, libFuzzer's, the trainer's). Ctrl-C, Ctrl-Z and SIGTERM
    // to the process group are the parent's to handle: the child dies with it.
    for (int number = 1; number < NSIG; ++number)
        if (number != SIGKILL && number != SIGSTOP) ::signal(number, SIG_DFL);
    for (int number : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGTSTP}) ::signal(number, SIG_IGN);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
#ifdef ATTNLAB_H5_PROBE_SANITIZED
    __sanitizer_set_death_callback(nullptr);
#endif
    // libc's own messages ("free(): invalid pointer") would be a second line.
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
        ::dup2(null, STDIN_FILENO);
        ::dup2(null, STDOUT_FILENO);
        ::dup2(null, STDERR_FILENO);
    }
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    if (address_limit > 0) {
        rlimit space{};
        ::getrlimit(RLIMIT_AS, &space);
        space.rlim_cur = std::min<rlim_t>(space.rlim_cur, address_limit);  // a lower limit of the user's stays
        ::setrlimit(RLIMIT_AS, &space);
    }
    ::sigprocmask(SIG_SETMASK, &parent_mask, nullptr);

    std::string verdict;
    try {
        read();
        verdict = "K";
    } catch (const Error& e) {
        verdict = std::string("E") + e.what();
    } catch (const std::filesystem::filesystem_error& e) {
        verdict = std::string("E") + e.what();
    } catch (const std::bad_alloc&) {
        verdict = "M";
    } catch (const std::exception& e) {
        verdict = std::string("X") + e.what();
    } catch (...) {
        verdict = "Xan unknown exception";
    }
    write_all(report, verdict.substr(0, kMaxVerdict));
    ::_exit(0);
}

struct Ended {
    std::string verdict;     // what the child wrote: "K", "E<message>", ...
    bool timed_out = false;  // killed by us at the time limit
    bool reaped = false;     // status is the child's (false: someone else reaped it)
    int status = 0;
};

// Reads the verdict until the child closes the pipe (it exited or died) or
// the time runs out (then SIGKILL), and reaps the child either way.
Ended await_child(pid_t pid, int report, double seconds) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(seconds));
    Ended ended;
    for (;;) {
        // Past the deadline, one last look (0 ms): a parent stopped meanwhile
        // (Ctrl-Z) may find the verdict waiting.
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd readable{report, POLLIN, 0};
        const int ready = ::poll(&readable, 1, static_cast<int>(std::clamp<long long>(left, 0, 1 << 30)));
        if (ready < 0 && errno == EINTR) continue;  // a signal of the parent's (SIGCHLD, a fuzzer's SIGALRM)
        if (ready < 0) break;
        if (ready == 0) {
            if (left > 0) continue;
            ended.timed_out = true;
            break;
        }
        char buffer[4096];
        const ssize_t got = ::read(report, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;  // end of file: the child is gone
        if (ended.verdict.size() < kMaxVerdict) ended.verdict.append(buffer, static_cast<size_t>(got));
    }
    if (ended.timed_out) ::kill(pid, SIGKILL);
    for (;;) {
        const pid_t reaped = ::waitpid(pid, &ended.status, 0);
        if (reaped == pid) {
            ended.reaped = true;
            break;
        }
        if (reaped < 0 && errno == EINTR) continue;
        break;  // ECHILD: SIGCHLD is ignored, the kernel reaped it
    }
    return ended;
}

std::string signal_name(int signal) {
    const char* abbreviation = sigabbrev_np(signal);
    return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(signal);
}

std::string gib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
    return text;
}

std::string seconds_str(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g s", seconds);
    return text;
}

// Forks the child, gives it `read`, and waits for its end.
Ended run_in_child(const std::function<void()>& read, const Limits& limits, const Where& where) {
    const uint64_t mapped = mapped_bytes();
    const uint64_t address_limit = mapped > 0 ? mapped + limits.memory : 0;
    int pipe_ends[2];
    if (::pipe2(pipe_ends, O_CLOEXEC) != 0)
        where.fail(std::string("cannot start the process that reads it first (pipe: ") + std::strerror(errno) + ")",
                   false);
    // Every signal stays blocked across fork, so the child runs none of the
    // parent's handlers before it has reset them.
    sigset_t all, before;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &before);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(pipe_ends[0]);
        run_child(pipe_ends[1], parent, address_limit, before, read);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    ::close(pipe_ends[1]);
    if (pid < 0) {
        ::close(pipe_ends[0]);
        where.fail(std::string("cannot start the process that reads it first (fork: ") + std::strerror(fork_errno) +
                       ")",
                   false);
    }
    const Ended ended = await_child(pid, pipe_ends[0], limits.seconds);
    ::close(pipe_ends[0]);
    return ended;
}

// What the child's end means here: return (it read the file cleanly) or throw.
void judge(const Ended& ended, const Where& where, const Limits& limits) {
    const std::string damaged = ": it is damaged or crafted";
    if (ended.timed_out)
        where.fail("libhdf5 did not finish reading this file within " + seconds_str(limits.seconds) + damaged +
                       " (ATTNLAB_H5_PROBE_SECONDS sets the limit)",
                   false);
    if (ended.reaped && WIFSIGNALED(ended.status)) {
        const int signal = WTERMSIG(ended.status);
        if (signal == SIGKILL)
            where.fail("the process reading this file first was killed (SIGKILL; out of memory?)", false);
        where.fail("libhdf5 crashed reading this file (signal " + signal_name(signal) + ")" + damaged, false);
    }
    if (ended.verdict.empty() || (ended.reaped && WEXITSTATUS(ended.status) != 0))
        where.fail("libhdf5 ended the process reading this file first (exit status " +
                       std::to_string(ended.reaped ? WEXITSTATUS(ended.status) : -1) + ")" + damaged,
                   false);
    const std::string message = ended.verdict.substr(1);
    switch (ended.verdict[0]) {
        case 'K': return;
        case 'E': throw Error(message);  // the reader's own message
        case 'M':
            where.fail("reading this file needs more than " + gib(limits.memory) +
                           " of memory, the limit for a file attnlab did not write" + damaged +
                           " (ATTNLAB_H5_PROBE=0 reads a file you trust without the limit)",
                       false);
        default: throw std::runtime_error(message);  // another exception: our own bug
    }
}

}  // namespace

void probe(const std::string& path, const std::string& tag, const std::function<void()>& read) {
    if (!probe_enabled()) return;
    silence_errors();  // HDF5 set up once, here: every child inherits it
    const Where where{tag, path, ""};
    const Limits limits = limits_for(path);
    judge(run_in_child(read, limits, where), where, limits);
}

}  // namespace attnlab::h5
