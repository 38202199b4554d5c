#include "experiments/files/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "autograd/tensor.h"
#include "experiments/files/run_files.h"
#include "experiments/files/temp_files.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

std::string error_text(int error) { return std::strerror(error); }

// rename(2) that never replaces: false when `to` exists (another writer's file, which is kept).
bool rename_new(const std::string& from, const std::string& to, const std::string& tag) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
    int error = errno;
    if (error == EINVAL || error == ENOSYS) {  // a filesystem without RENAME_NOREPLACE: link(2) never replaces either
        if (::link(from.c_str(), to.c_str()) == 0) {
            ::unlink(from.c_str());
            return true;
        }
        error = errno;
    }
    if (error == EEXIST) return false;
    throw Error(tag + " " + to + ": cannot rename " + from + " to it (" + error_text(error) + ")");
}

// Holds an flock on a folder while replace_seen writers in it check and rename
// (microseconds), so that two of them cannot both see the same file and replace it.
class FolderLock {
public:
    FolderLock(const fs::path& dir, const std::string& tag) {
        fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) {
            const int error = errno;
            if (fd_ >= 0) ::close(fd_);
            throw Error(tag + " cannot lock the folder " + dir.string() + " (" + error_text(error) + ")");
        }
    }
    ~FolderLock() { ::close(fd_); }
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;

private:
    int fd_ = -1;
};

std::string kept(const std::string& tag, const fs::path& path, const std::string& what) {
    return tag + " " + path.string() + " was " + what +
           " by another process while this one ran; it is kept and nothing was written (give another name)";
}

// NAME-n: before the extension ("x.circuit.h5" -> "x.circuit-2.h5"), as train's runs/default-2.
fs::path numbered(const fs::path& path, int n) {
    if (n == 1) return path;
    return path.parent_path() / (path.stem().string() + "-" + std::to_string(n) + path.extension().string());
}

// Gives the finished temporary its name; returns that name.
fs::path commit(const std::string& tmp, const OutputFile& out, const std::string& tag) {
    const fs::path dir = out.path.parent_path().empty() ? fs::path(".") : out.path.parent_path();
    switch (out.existing) {
        case Existing::replace:
            if (std::rename(tmp.c_str(), out.path.c_str()) != 0)
                throw Error(tag + " " + out.path.string() + ": cannot rename " + tmp + " to it (" + error_text(errno) + ")");
            return out.path;
        case Existing::refuse:
            if (!rename_new(tmp, out.path.string(), tag)) throw Error(kept(tag, out.path, "created"));
            return out.path;
        case Existing::replace_seen: {
            const FolderLock lock(dir, tag);
            const std::optional<FileId> now = file_id(out.path);
            if (!now) {  // removed meanwhile: a new file
                if (!rename_new(tmp, out.path.string(), tag)) throw Error(kept(tag, out.path, "created"));
            } else if (*now != out.seen) {
                throw Error(kept(tag, out.path, "replaced"));
            } else if (std::rename(tmp.c_str(), out.path.c_str()) != 0) {
                throw Error(tag + " " + out.path.string() + ": cannot rename " + tmp + " to it (" + error_text(errno) + ")");
            }
            return out.path;
        }
        case Existing::number:
            for (int n = 1; n <= kMaxNameSuffix; ++n)
                if (rename_new(tmp, numbered(out.path, n).string(), tag)) return numbered(out.path, n);
            throw Error(tag + " " + out.path.string() + ": every name from it to " + numbered(out.path, kMaxNameSuffix).string() +
                        " is taken; give another name");
    }
    throw Error(tag + " unknown output policy");
}

}  // namespace

std::optional<FileId> file_id(const fs::path& path) {
    struct stat s;
    if (::lstat(path.c_str(), &s) != 0) return std::nullopt;
    return FileId{static_cast<uint64_t>(s.st_dev), static_cast<uint64_t>(s.st_ino)};
}

fs::path temporary_name(const fs::path& path) {
    // A random start (the kernel's entropy, once per process), then one more per name: never the same twice in a
    // process, on any thread, and another process with this pid (a later one) draws another start.
    static const uint32_t start = std::random_device{}();
    static std::atomic<uint32_t> count{0};
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".%d.%08x.tmp", static_cast<int>(::getpid()), static_cast<unsigned>(start + count++));
    std::string name = path.filename().string();
    const size_t room = 255 - std::strlen(suffix);
    if (name.size() > room) name.resize(room);
    return path.parent_path() / (name + suffix);
}

void fsync_path(const std::string& path, bool directory, const std::string& tag) {
    const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) throw Error(tag + " cannot open " + path + " to sync it (" + error_text(errno) + ")");
    const int rc = ::fsync(fd);
    const int saved = errno;
    ::close(fd);
    if (rc != 0) throw Error(tag + " cannot sync " + path + " (" + error_text(saved) + ")");
}

fs::path write_output(const OutputFile& out, const std::string& tag, const std::function<void(const std::string&)>& write) {
    if (out.existing == Existing::replace || out.existing == Existing::replace_seen) {
        // The rename would replace a device (/dev/full), a FIFO or a symbolic link itself.
        std::error_code ec;
        const fs::file_status status = fs::symlink_status(out.path, ec);
        if (fs::exists(status) && !fs::is_regular_file(status))
            throw Error(tag + " " + out.path.string() + " exists and is not a regular file; refusing to replace it");
    }
    const std::string tmp = temporary_name(out.path).string();
    const InFlight removed_on_signals(tmp);
    try {
        write(tmp);
        fsync_path(tmp, false, tag);
        const fs::path written = commit(tmp, out, tag);
        const fs::path dir = written.parent_path();
        fsync_path(dir.empty() ? "." : dir.string(), true, tag);  // makes the rename itself durable
        return written;
    } catch (...) {
        std::error_code ignored;
        fs::remove(tmp, ignored);  // gone already when the rename happened
        throw;
    }
}

void write_atomically(const fs::path& path, const std::string& tag, const std::function<void(const std::string&)>& write) {
    write_output({path, Existing::replace, {}}, tag, write);
}

void write_text_atomically(const fs::path& path, const std::string& text, const std::string& tag, Existing existing) {
    write_output({path, existing, {}}, tag, [&](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary);
        out << text;
        out.close();
        if (!out) throw Error(tag + " cannot write " + tmp);
    });
}

void write_output_folder(const fs::path& dir, const std::string& tag, const std::function<void(const fs::path&)>& fill) {
    const fs::path tmp = temporary_name(dir);
    // registered before it exists: a signal between the two would otherwise leave it behind
    const InFlight removed_on_signals(tmp.string(), InFlight::Kind::folder);
    std::error_code ec;
    if (!fs::create_directory(tmp, ec))
        throw Error(tag + " cannot create the temporary folder " + tmp.string() + " (" + (ec ? ec.message() : "it exists") + ")");
    try {
        fill(tmp);
        fsync_path(tmp.string(), true, tag);
        // rename(2) replaces an empty folder, and refuses one that has filled meanwhile (another writer's)
        if (std::rename(tmp.c_str(), dir.c_str()) != 0) {
            const int error = errno;
            if (error == ENOTEMPTY || error == EEXIST) throw Error(kept(tag, dir, "filled"));
            throw Error(tag + " cannot rename " + tmp.string() + " to " + dir.string() + " (" + error_text(error) + ")");
        }
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    const fs::path parent = dir.parent_path();
    fsync_path(parent.empty() ? "." : parent.string(), true, tag);
}

}  // namespace attnlab
