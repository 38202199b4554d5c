// What the HDF5 tests share (test_h5io.cpp: the metrics log; test_h5io_checkpoints.cpp;
// test_h5io_reading.cpp: what reading trusts; test_h5io_token_files.cpp): a
// fresh directory per test, the one-line error check, files made by hand.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "data/h5file.h"

namespace attnlab::h5io_test {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class H5Test : public ::testing::Test {
protected:
    void SetUp() override {
        std::string pattern = (fs::temp_directory_path() / "attnlab_h5io_XXXXXX").string();
        ASSERT_NE(mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override {
        std::error_code ec;
        fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(dir_, ec);
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::vector<std::string> files() const {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
    fs::path dir_;
};

inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// The message names the path, says `what`, and is one line.
#define EXPECT_ERROR(statement, file, what)                                       \
    do {                                                                          \
        const std::string message = error_of([&] { statement; });                 \
        EXPECT_NE(message.find(file), std::string::npos) << message;              \
        EXPECT_NE(message.find(what), std::string::npos) << message;              \
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;              \
    } while (0)

inline void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// A dataset made with the C API: `type` stored, `dims` declared, chunked by
// `chunk` (empty: contiguous), written from `values` when given.
inline void make_dataset(const h5::File& file, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                         const std::vector<hsize_t>& chunk = {}, const void* values = nullptr, hid_t memory = H5I_INVALID_HID) {
    const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR)
                                     : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (!chunk.empty()) H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    const hid_t dataset = H5Dcreate2(file.id(), name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(dataset, 0) << name;
    if (values) ASSERT_GE(H5Dwrite(dataset, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
    H5Dclose(dataset);
    H5Pclose(dcpl);
    H5Sclose(space);
}

}  // namespace attnlab::h5io_test
