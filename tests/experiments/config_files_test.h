// What the config tests share (test_config.cpp, test_config_errors.cpp): a
// temporary folder per test for the TOML files it writes, and the message of
// the ConfigError a bad file gives.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "experiments/config/config.h"

namespace attnlab::config_test {

namespace fs = std::filesystem;

// A temporary folder per test for the TOML files it writes.
class ConfigFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("attnlab_test_config_" + std::to_string(getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        path_ = (dir_ / "bad.toml").string();
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& text) const {
        const std::string path = (dir_ / name).string();
        std::ofstream(path) << text;
        return path;
    }

    // The message of the ConfigError that loading `text` throws ("" and a failure if none).
    std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
        write("bad.toml", text);
        try {
            load_config(path_, overrides);
        } catch (const ConfigError& e) {
            return e.what();
        }
        ADD_FAILURE() << "no ConfigError for:\n" << text;
        return "";
    }

    fs::path dir_;
    std::string path_;  // load_error's file
};

}  // namespace attnlab::config_test
