// The `file` task: inputs and targets are a token-file row shifted by one, the
// file's loss mask selects the counted targets, and the last tenth of the rows
// is held out for evaluation.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <set>

#include "data/file_task.h"
#include "data/h5file.h"
#include "tests/autograd/expect.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

const test::TempDir& temp_dir() {
    static const test::TempDir dir("attnlab_file_task_");
    return dir;
}

// N = 10 rows of width S = 5: row n is [n+3, n+4, ..., ] with length 2 + n % 4
std::string write_file(bool with_mask) {
    const std::string path = temp_dir().file(with_mask ? "attnlab_file_task_mask.h5" : "attnlab_file_task.h5");
    const size_t N = 10, S = 5;
    std::vector<int32_t> tokens(N * S, 0);
    std::vector<int64_t> lengths(N);
    std::vector<uint8_t> mask(N * S, 0);
    for (size_t n = 0; n < N; ++n) {
        lengths[n] = static_cast<int64_t>(2 + n % 4);
        for (size_t t = 0; t < static_cast<size_t>(lengths[n]); ++t) {
            tokens[n * S + t] = static_cast<int32_t>(n + 3 + t);
            mask[n * S + t] = t % 2;  // odd positions count
        }
    }
    h5::File f = h5::File::create(path, "test");
    f.write<int32_t>("tokens", {N, S}, tokens.data());
    f.write<int64_t>("lengths", {N}, lengths.data());
    if (with_mask) f.write<uint8_t>("loss_mask", {N, S}, mask.data());
    f.close();
    return path;
}

TEST(FileTask, RowsShiftedByOneAndPaddedRight) {
    FileTask task(write_file(false), 32, 0, 0);
    EXPECT_EQ(task.rows(), 9u);  // one of ten held out
    EXPECT_EQ(task.max_sequence_length(), 4u);
    Batch b = task.next(16);
    const size_t T = b.inputs.shape[1];
    for (size_t r = 0; r < 16; ++r) {
        const size_t L = b.lengths[r];
        const int32_t first = b.inputs.values[r * T];  // = n + 3 for row n
        const size_t n = static_cast<size_t>(first - 3);
        EXPECT_LT(n, 9u) << "a training batch used the held-out row";
        EXPECT_EQ(L, 1 + n % 4);
        for (size_t t = 0; t < L; ++t) {
            EXPECT_EQ(b.inputs.values[r * T + t], static_cast<int32_t>(n + 3 + t));
            EXPECT_EQ(b.targets.values[r * T + t], static_cast<int32_t>(n + 4 + t));
            EXPECT_EQ(b.loss_mask.values[r * T + t], 1);
        }
        for (size_t t = L; t < T; ++t) EXPECT_EQ(b.loss_mask.values[r * T + t], 0);
    }
}

TEST(FileTask, LossMaskSelectsTargetsAndEvalUsesHeldOutRows) {
    FileTask eval(write_file(true), 32, 0, 1);
    EXPECT_EQ(eval.rows(), 1u);
    Batch b = eval.next(3);
    const size_t T = b.inputs.shape[1];
    for (size_t r = 0; r < 3; ++r) {
        EXPECT_EQ(b.inputs.values[r * T], 12);  // row 9 only: tokens 12, 13; length 3
        ASSERT_EQ(b.lengths[r], 2u);
        // targets are positions 1 and 2 of the row; the mask counts odd positions
        EXPECT_EQ(b.loss_mask.values[r * T + 0], 1);
        EXPECT_EQ(b.loss_mask.values[r * T + 1], 0);
    }
}

TEST(FileTask, TooFewRowsIsAnError) {
    const std::string path = temp_dir().file("attnlab_file_task_one.h5");
    {
        h5::File f = h5::File::create(path, "test");
        const int32_t tokens[3] = {3, 4, 5};
        const int64_t lengths[1] = {3};
        f.write<int32_t>("tokens", {1, 3}, tokens);
        f.write<int64_t>("lengths", {1}, lengths);
        f.close();
    }
    try {
        FileTask t(path, 32, 0, 0);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("needs at least 2 sequences"), std::string::npos) << e.what();
    }
}

// A FIFO would hang libhdf5's open, and a directory or a device is no token
// file: refused, naming task.path and what the path is, before libhdf5 sees it.
TEST(FileTask, OnlyARegularFileIsOpened) {
    const std::string fifo = temp_dir().file("pipe.h5");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string dir = temp_dir().path().string();
    const std::pair<std::string, std::string> cases[] = {{fifo, "a FIFO"}, {dir, "a directory"}, {"/dev/null", "a character device"}};
    for (const auto& [path, what] : cases) {
        const std::string want = "[token_file] task.path " + path + ": not a regular file (" + what + ")";
        EXPECT_EQ(testing::error_message([&] { read_token_file(path, 32); }), want);
        EXPECT_EQ(testing::error_message([&] { FileTask(path, 32, 0, 0); }), want);
    }
}

// /tokens declaring more than kMaxFileTokens is refused from its declared shape,
// before its (here 256 MiB, sparse on disk) data is read into memory.
TEST(FileTask, TooManyTokensAreRefusedBeforeTheyAreRead) {
    const std::string path = temp_dir().file("attnlab_file_task_huge.h5");
    const hsize_t rows = (hsize_t{1} << 14) + 1, width = hsize_t{1} << 14;  // 2^28 + 2^14 int8 tokens
    {
        h5::File f = h5::File::create(path, "test");
        const hsize_t dims[2] = {rows, width};
        const hid_t space = H5Screate_simple(2, dims, nullptr);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);  // its storage allocated, never written
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
        const hid_t dataset = H5Dcreate2(f.id(), "tokens", H5T_STD_I8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ASSERT_GE(dataset, 0);
        H5Dclose(dataset);
        H5Pclose(dcpl);
        H5Sclose(space);
        f.close();
    }
    EXPECT_EQ(testing::error_message([&] { read_token_file(path, 32); }),
              "[token_file] " + path + ": /tokens: declares (16385,16384), 268451840 tokens, more than the 268435456 (2^28) a token "
              "file may hold");
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// 10 rows of width 4, all of length 4, with the given loss mask (row-major).
std::string write_masked(const std::string& name, const std::vector<uint8_t>& mask) {
    const std::string path = temp_dir().file(name);
    std::vector<int32_t> tokens(40, 5);
    h5::File f = h5::File::create(path, "test");
    f.write<int32_t>("tokens", {10, 4}, tokens.data());
    f.write<int64_t>("lengths", std::vector<int64_t>(10, 4));
    f.write<uint8_t>("loss_mask", {10, 4}, mask.data());
    f.close();
    return path;
}

std::string error_of(const std::string& path, uint64_t stream) {
    try {
        FileTask task(path, 32, 0, stream);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// A mask that selects no target would train (or evaluate) on a loss of exactly 0.
TEST(FileTask, AMaskThatSelectsNoTargetIsRefused) {
    const std::string none = write_masked("attnlab_file_task_none.h5", std::vector<uint8_t>(40, 0));
    EXPECT_EQ(error_of(none, 0), "[token_file] " + none +
                                     ": /loss_mask: selects no target (no 1 at a position >= 1): nothing to train or "
                                     "evaluate on");
    std::vector<uint8_t> first(40, 0);  // position 0 is never a target
    for (size_t r = 0; r < 10; ++r) first[r * 4] = 1;
    const std::string first_only = write_masked("attnlab_file_task_first.h5", first);
    EXPECT_NE(error_of(first_only, 0).find("/loss_mask: selects no target"), std::string::npos);

    std::vector<uint8_t> held_out(40, 0);  // row 9 is the held-out row
    held_out[9 * 4 + 2] = 1;
    const std::string eval_only = write_masked("attnlab_file_task_eval_only.h5", held_out);
    EXPECT_EQ(error_of(eval_only, 0),
              "[token_file] " + eval_only + ": /loss_mask: the training rows [0, 9) select no target: their loss would be 0");
    EXPECT_EQ(error_of(eval_only, 1), "(no error)");
    std::vector<uint8_t> train(40, 0);
    train[0 * 4 + 3] = 1;
    const std::string train_only = write_masked("attnlab_file_task_train_only.h5", train);
    EXPECT_EQ(error_of(train_only, 0), "(no error)");
    EXPECT_NE(error_of(train_only, 2).find("the held-out rows [9, 10) select no target"), std::string::npos);
}

}  // namespace
}  // namespace attnlab
