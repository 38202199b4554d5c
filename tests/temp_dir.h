// A fresh folder for the files a test writes, removed with everything in it
// when the object goes: at the end of a test, when an assertion or an
// exception leaves it early, or (for a static one) when the binary exits.
// Tests leave nothing behind in the temporary directory.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace attnlab::test {

class TempDir {
public:
    // <temporary directory>/<prefix>XXXXXX, made by mkdtemp (a new name every time)
    explicit TempDir(const std::string& prefix) {
        std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
        if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + " failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;  // a test may have made something read-only: make it removable first
        std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ignored);
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    // A file of exactly these bytes in the folder; its path.
    std::string write(const std::string& name, const std::string& bytes) const {
        const std::string path = file(name);
        std::ofstream(path, std::ios::binary) << bytes;
        return path;
    }

private:
    std::filesystem::path path_;
};

}  // namespace attnlab::test
