#include "experiments/sweep/sweep_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string_view>

extern char** environ;

#include "autograd/tensor.h"  // Error

namespace attnlab {

namespace {

// A signal handler can only reach state like this: the handler writes the
// signal's number into a pipe, which wait() polls (so no signal is lost between
// a check and a wait, whichever thread the kernel delivers it to).
int signal_pipe[2] = {-1, -1};

extern "C" void note_signal(int signal) {
    const int saved = errno;
    const unsigned char byte = static_cast<unsigned char>(signal);
    (void)!::write(signal_pipe[1], &byte, 1);
    errno = saved;
}

struct sigaction old_int, old_term, old_chld;

}  // namespace

CellProcesses::CellProcesses() {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        throw Error(std::string("[sweep] cannot create a pipe (") + std::strerror(errno) + ")");
    struct sigaction action {};
    action.sa_handler = note_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &action, &old_int);
    ::sigaction(SIGTERM, &action, &old_term);
    ::sigaction(SIGCHLD, &action, &old_chld);
}

CellProcesses::~CellProcesses() {
    forward(SIGKILL);  // only after an exception: run_sweep waits for every cell
    for (const auto& [pid, name] : running_) ::waitpid(pid, nullptr, 0);
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    ::sigaction(SIGCHLD, &old_chld, nullptr);
    ::close(signal_pipe[0]);
    ::close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
}

void CellProcesses::start(const std::string& name, const std::vector<std::string>& args, const std::filesystem::path& log) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) {
        const std::string_view variable(*e);
        if (variable.rfind("OMPI_", 0) == 0 || variable.rfind("PMIX_", 0) == 0 || variable.rfind("PMI_", 0) == 0) continue;
        envp.push_back(*e);
    }
    envp.push_back(nullptr);
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) throw Error("[sweep] cannot open " + log.string() + " (" + std::strerror(errno) + ")");
    const pid_t parent = ::getpid();
    // Signals stay blocked across fork, so the child never runs note_signal.
    sigset_t all, before;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &before);
    const pid_t pid = ::fork();
    if (pid == 0) {  // the child: async-signal-safe calls only, up to exec
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGCHLD, SIG_DFL);
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the sweep died before prctl
        ::dup2(log_fd, STDOUT_FILENO);
        ::dup2(log_fd, STDERR_FILENO);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execve(argv[0], argv.data(), envp.data());
        const char* message = "attnlab sweep: cannot start the cell (exec failed)\n";
        (void)!::write(STDERR_FILENO, message, std::strlen(message));
        ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    ::close(log_fd);
    if (pid < 0) throw Error("[sweep] cannot start " + args[0] + " (" + std::strerror(fork_errno) + ")");
    running_[pid] = name;
    if (interrupted_) ::kill(pid, interrupted_);  // cannot happen in run_sweep, which checks first
}

void CellProcesses::forward(int signal) {
    for (const auto& [pid, name] : running_) ::kill(pid, signal);
}

bool CellProcesses::take_signals(int timeout_ms) {
    pollfd wake{signal_pipe[0], POLLIN, 0};
    if (::poll(&wake, 1, timeout_ms) <= 0) return false;
    bool interrupt = false;
    unsigned char bytes[64];
    for (ssize_t n; (n = ::read(signal_pipe[0], bytes, sizeof bytes)) > 0;) {  // ends: the pipe is non-blocking
        for (ssize_t i = 0; i < n; ++i) {
            if (bytes[i] != SIGINT && bytes[i] != SIGTERM) continue;  // SIGCHLD only wakes us
            if (!interrupted_) {
                interrupted_ = bytes[i];
                interrupted_at_ = std::chrono::steady_clock::now();
            }
            forward(++interrupts_ == 1 ? bytes[i] : SIGKILL);  // a second interrupt: no more waiting
            interrupt = true;
        }
    }
    return interrupt;
}

std::optional<CellProcesses::Ended> CellProcesses::wait(std::chrono::milliseconds patience) {
    // Each turn reaps, or waits at most a second: the loop ends when the cells
    // do, and they end, on their own or SIGKILLed after an interrupt.
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        if (running_.empty()) return std::nullopt;
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid > 0 && running_.count(pid)) {
            Ended ended{running_[pid], WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
            running_.erase(pid);
            return ended;
        }
        if (pid < 0 && errno == ECHILD) {  // none left to wait for (cannot happen): report one lost
            Ended ended{running_.begin()->second, 128 + SIGKILL};
            running_.erase(running_.begin());
            return ended;
        }
        if (pid > 0) continue;  // not a cell
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        if (waited >= patience) return std::nullopt;
        if (take_signals(static_cast<int>(std::min<std::chrono::milliseconds::rep>(1000, (patience - waited).count()))))
            return std::nullopt;
        if (interrupted_ && !killed_ && std::chrono::steady_clock::now() - interrupted_at_ > kStopGrace) {
            forward(SIGKILL);
            killed_ = true;
        }
    }
}

}  // namespace attnlab
