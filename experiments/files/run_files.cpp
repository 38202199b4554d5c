#include "experiments/files/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "autograd/tensor.h"
#include "experiments/files/fnv_hash.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

std::string in_use(const std::string& tag, const std::string& what, int fd) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    const std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown";
    return tag + " " + what + " is in use by another attnlab process (pid " + pid + "); wait for it to finish or stop it first";
}

}  // namespace

RunLock::RunLock(const fs::path& dir, const std::string& tag) : RunLock(dir / ".lock", dir.string(), tag) {}

RunLock::RunLock(const fs::path& file, const std::string& what, const std::string& tag) {
    const std::string path = file.string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(tag + " cannot open the lock file " + path + " (" + std::strerror(errno) + ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int saved = errno;
        const std::string message = saved == EWOULDBLOCK ? in_use(tag, what, fd_) : "";
        ::close(fd_);
        fd_ = -1;
        if (saved != EWOULDBLOCK) throw Error(tag + " cannot lock " + path + " (" + std::strerror(saved) + ")");
        throw Error(message);
    }
    // The holder's pid, for the message above; emptied again on release, so a
    // process that only read the folder leaves it byte for byte as it was.
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        const int saved = errno;
        ::close(fd_);
        fd_ = -1;
        throw Error(tag + " cannot write the lock file " + path + " (" + std::strerror(saved) + ")");
    }
}

void RunLock::check_free(const fs::path& file, const std::string& what, const std::string& tag) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // no lock file: nobody holds it (anything else shows when the lock is taken)
    // A shared lock conflicts with a holder's exclusive one only; it is dropped at once.
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    const std::string message = held ? in_use(tag, what, fd) : "";
    ::close(fd);
    if (held) throw Error(message);
}

RunLock::~RunLock() {
    if (fd_ < 0) return;
    (void)::ftruncate(fd_, 0);
    ::close(fd_);  // drops the flock
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

fs::path folder_path(const std::string& given) {
    fs::path folder = fs::path(given).lexically_normal();
    if (!folder.has_filename() && folder.has_parent_path()) folder = folder.parent_path();
    return folder;
}

fs::path claim_new_folder(const fs::path& parent, const std::string& name, const std::string& tag) {
    fs::create_directories(parent);
    for (int n = 1; n <= kMaxNameSuffix; ++n) {
        const fs::path candidate = parent / (n == 1 ? name : name + "-" + std::to_string(n));
        if (::mkdir(candidate.c_str(), 0755) == 0) return candidate;
        if (errno != EEXIST)
            throw Error(tag + " cannot create " + candidate.string() + " (" + std::strerror(errno) + ")");
    }
    throw Error(tag + " " + (parent / name).string() + ": every name from " + name + " to " + name + "-" +
                std::to_string(kMaxNameSuffix) + " is taken; choose another run.name");
}

std::string unquote(const std::string& value) {
    return value.size() >= 2 && value.front() == '"' && value.back() == '"' ? value.substr(1, value.size() - 2) : value;
}

std::string cell_name(size_t index, size_t count, const std::vector<std::string>& assignments) {
    const size_t digits = std::to_string(std::max<size_t>(count, 1) - 1).size();
    std::string name = std::to_string(index);
    name = std::string(digits > name.size() ? digits - name.size() : 0, '0') + name + "_";
    std::string all;  // the assignments one per line, for the hash of a shortened name
    for (size_t i = 0; i < assignments.size(); ++i) {
        const size_t eq = assignments[i].find('=');
        name += (i ? "," : "") + assignments[i].substr(0, eq + 1) + unquote(assignments[i].substr(eq + 1));
        all += (i ? "\n" : "") + assignments[i];
    }
    for (char& ch : name)
        if (ch == '/' || ch == ' ' || ch == '"' || ch == '[' || ch == ']' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
            ch = '_';
    if (name.size() <= kMaxFolderName) return name;
    char hash[17];  // a stable hash of the assignments, as 16 hex digits
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(all.data(), all.size())));
    const std::string tail = std::string("~") + hash;
    size_t keep = kMaxFolderName - tail.size();
    while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 character
    return name.substr(0, keep) + tail;
}

}  // namespace attnlab
