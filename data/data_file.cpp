#include "data/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

namespace {

// What a file that is not a regular one is, in words.
std::string kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "neither a file nor a directory";
}

// Closes the descriptor on every way out.
struct Descriptor {
    int fd = -1;
    ~Descriptor() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

void DataPath::fail(const std::string& problem) const { throw Error("[" + tag + "] " + where() + ": " + problem); }

std::string bytes_text(uint64_t bytes) {
    std::string text = std::to_string(bytes);
    if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0)
        text += " (" + std::to_string(bytes >> 20) + " MiB)";
    return text;
}

uint64_t check_data_file(const DataPath& file, uint64_t max_bytes, const std::string& reader) {
    struct stat status {};
    if (::stat(file.path.c_str(), &status) != 0) {
        const int error = errno;
        struct stat link {};
        if (error == ENOENT && ::lstat(file.path.c_str(), &link) == 0) file.fail("a symbolic link to nothing");
        if (error == ENOENT) file.fail("no such file");
        file.fail(std::string("cannot read it (") + std::strerror(error) + ")");
    }
    if (!S_ISREG(status.st_mode)) file.fail("not a regular file (" + kind_of(status.st_mode) + ")");
    const auto size = static_cast<uint64_t>(status.st_size);
    if (size > max_bytes) file.fail(std::to_string(size) + " bytes, more than the " + bytes_text(max_bytes) + " " + reader + " reads");
    return size;
}

void read_data_file(const DataPath& file, uint64_t max_bytes, const std::string& reader,
                    const std::function<void(std::string_view)>& consume, size_t chunk_bytes) {
    check_data_file(file, max_bytes, reader);
    // O_NONBLOCK: opening a FIFO that replaced the file since the check returns at once
    Descriptor in{::open(file.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
    if (in.fd < 0) file.fail(std::string("cannot read it (") + std::strerror(errno) + ")");
    struct stat status {};
    if (::fstat(in.fd, &status) != 0) file.fail(std::string("cannot read it (") + std::strerror(errno) + ")");
    if (!S_ISREG(status.st_mode)) file.fail("not a regular file (" + kind_of(status.st_mode) + ")");
    std::vector<char> buffer(chunk_bytes);
    uint64_t total = 0;
    while (true) {
        const ssize_t n = ::read(in.fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) file.fail(std::string("cannot read it (") + std::strerror(errno) + ")");
        if (n == 0) return;
        total += static_cast<uint64_t>(n);
        if (total > max_bytes) file.fail("grew past the " + bytes_text(max_bytes) + " " + reader + " reads while it was read");
        consume(std::string_view(buffer.data(), static_cast<size_t>(n)));
    }
}

}  // namespace attnlab
