// The data files a config names (data/data_file.h): only a regular file of at
// most the reader's limit is read, what anything else is gets named, and the
// bytes arrive in order in chunks of the size asked for.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "data/data_file.h"
#include "tests/autograd/expect.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

class DataFileTest : public ::testing::Test {
protected:
    DataPath at(const std::string& name) const { return DataPath{"text", "task.path", dir_.file(name)}; }
    std::string write(const std::string& name, const std::string& bytes) const {
        std::ofstream(dir_.file(name), std::ios::binary) << bytes;
        return dir_.file(name);
    }
    // The message of check_data_file and of read_data_file (which must agree) for `file`.
    std::string refusal(const DataPath& file, uint64_t max_bytes = 1000) const {
        const auto check = [&] { check_data_file(file, max_bytes, "a text task"); };
        const auto read = [&] { read_data_file(file, max_bytes, "a text task", [](std::string_view) {}); };
        const std::string message = testing::error_message(check);
        EXPECT_EQ(testing::error_message(read), message);
        return message;
    }
    test::TempDir dir_{"attnlab_data_file_"};
};

TEST_F(DataFileTest, ARegularFileIsReadInOrderInChunks) {
    write("t.txt", "abcdefghij");
    std::vector<std::string> chunks;
    read_data_file(at("t.txt"), 10, "a text task", [&](std::string_view c) { chunks.emplace_back(c); }, 3);
    EXPECT_EQ(chunks, (std::vector<std::string>{"abc", "def", "ghi", "j"}));
    EXPECT_EQ(check_data_file(at("t.txt"), 10, "a text task"), 10u);
    write("empty.txt", "");
    chunks.clear();
    read_data_file(at("empty.txt"), 10, "a text task", [&](std::string_view c) { chunks.emplace_back(c); });
    EXPECT_TRUE(chunks.empty());
}

TEST_F(DataFileTest, WhatIsNotARegularFileIsNamed) {
    const DataPath fifo = at("pipe.txt");
    ASSERT_EQ(mkfifo(fifo.path.c_str(), 0600), 0);
    EXPECT_EQ(refusal(fifo), "[text] task.path " + fifo.path + ": not a regular file (a FIFO)");  // never opened: no hang
    EXPECT_EQ(refusal(DataPath{"text", "task.path", dir_.path().string()}),
              "[text] task.path " + dir_.path().string() + ": not a regular file (a directory)");
    if (access("/dev/zero", R_OK) == 0)
        EXPECT_EQ(refusal(DataPath{"token_file", "task.path", "/dev/zero"}),
                  "[token_file] task.path /dev/zero: not a regular file (a character device)");

    const DataPath socket_file = at("s.sock");
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(s, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(socket_file.path.size(), sizeof address.sun_path);
    std::strcpy(address.sun_path, socket_file.path.c_str());
    ASSERT_EQ(bind(s, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(refusal(socket_file), "[text] task.path " + socket_file.path + ": not a regular file (a socket)");
    close(s);

    EXPECT_EQ(refusal(at("none.txt")), "[text] task.path " + at("none.txt").path + ": no such file");
    ASSERT_EQ(symlink(at("gone.txt").path.c_str(), at("link.txt").path.c_str()), 0);
    EXPECT_EQ(refusal(at("link.txt")), "[text] task.path " + at("link.txt").path + ": a symbolic link to nothing");
    write("real.txt", "ab");  // a link to a regular file is read
    ASSERT_EQ(symlink(at("real.txt").path.c_str(), at("good_link.txt").path.c_str()), 0);
    EXPECT_EQ(check_data_file(at("good_link.txt"), 10, "a text task"), 2u);
}

TEST_F(DataFileTest, AFileLargerThanTheReadersLimitIsRefusedBeforeItIsRead) {
    write("nine.txt", "123456789");
    EXPECT_EQ(refusal(at("nine.txt"), 8), "[text] task.path " + at("nine.txt").path + ": 9 bytes, more than the 8 a text task reads");
    EXPECT_EQ(check_data_file(at("nine.txt"), 9, "a text task"), 9u);  // the limit itself is allowed
    // 2 GiB of nothing (a sparse file): refused at once, whatever it would decode to
    const std::string sparse = write("sparse.txt", "");
    ASSERT_EQ(truncate(sparse.c_str(), off_t{1} << 31), 0);
    EXPECT_EQ(refusal(at("sparse.txt"), uint64_t{256} << 20),
              "[text] task.path " + sparse + ": 2147483648 bytes, more than the 268435456 (256 MiB) a text task reads");
}

}  // namespace
}  // namespace attnlab
