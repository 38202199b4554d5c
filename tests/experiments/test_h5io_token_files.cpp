// The token files of the `file` task (data/token_file.h): a good file, other
// integer types and h5py's bools, and every kind of bad file refused with one
// line naming the path and the dataset.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/h5file.h"
#include "data/token_file.h"
#include "h5io_test.h"

namespace attnlab::h5io_test {
namespace {

// ---- token files ---------------------------------------------------------------

struct TokenSpec {
    std::vector<int32_t> tokens{3, 4, 5, 1, /**/ 6, 7, 99, -5};  // padding may hold anything
    Shape token_shape{2, 4};
    std::vector<int64_t> lengths{4, 2};
    Shape length_shape{2};
    std::vector<uint8_t> mask{0, 1, 1, 1, /**/ 0, 1, 0, 0};
    bool with_mask = true;
};

void write_tokens(const std::string& file, const TokenSpec& spec) {
    h5::File h5 = h5::File::create(file, "test");
    h5.write<int32_t>("tokens", spec.token_shape, spec.tokens.data());
    h5.write<int64_t>("lengths", spec.length_shape, spec.lengths.data());
    if (spec.with_mask) h5.write<uint8_t>("loss_mask", spec.token_shape, spec.mask.data());
}

TEST_F(H5Test, TokenFileReadsAGoodFile) {
    const std::string file = path("tokens.h5");
    write_tokens(file, TokenSpec{});
    const TokenFile tokens = read_token_file(file, 8);
    EXPECT_EQ(tokens.tokens.shape, (Shape{2, 4}));
    EXPECT_EQ(tokens.tokens.values, (std::vector<int32_t>{3, 4, 5, 1, 6, 7, 0, 0}));  // padding -> <PAD>
    EXPECT_EQ(tokens.lengths, (std::vector<size_t>{4, 2}));
    EXPECT_EQ(tokens.loss_mask.shape, (Shape{2, 4}));
    EXPECT_EQ(tokens.loss_mask.values, (std::vector<uint8_t>{0, 1, 1, 1, 0, 1, 0, 0}));

    TokenSpec no_mask;
    no_mask.with_mask = false;
    write_tokens(file, no_mask);
    EXPECT_TRUE(read_token_file(file, 8).loss_mask.shape.empty());
}

TEST_F(H5Test, TokenFileAcceptsOtherIntegerTypesAndH5pyBools) {
    // int64 tokens, int16 lengths, and a loss mask as h5py stores numpy bool:
    // an enum over int8 {FALSE = 0, TRUE = 1}.
    const std::string file = path("tokens.h5");
    {
        h5::File h5 = h5::File::create(file, "test");
        h5.write<int64_t>("tokens", {1, 3}, std::vector<int64_t>{5, 6, 7}.data());
        const std::vector<int16_t> lengths{2};
        const hsize_t n = 1, dims[2] = {1, 3};
        hid_t space = H5Screate_simple(1, &n, nullptr);
        hid_t dataset = H5Dcreate2(h5.id(), "lengths", H5T_STD_I16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(dataset, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, lengths.data());
        H5Dclose(dataset);
        H5Sclose(space);
        hid_t boolean = H5Tenum_create(H5T_NATIVE_INT8);
        int8_t false_value = 0, true_value = 1;
        H5Tenum_insert(boolean, "FALSE", &false_value);
        H5Tenum_insert(boolean, "TRUE", &true_value);
        space = H5Screate_simple(2, dims, nullptr);
        dataset = H5Dcreate2(h5.id(), "loss_mask", boolean, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const int8_t mask[3] = {0, 1, 0};
        ASSERT_GE(H5Dwrite(dataset, boolean, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask), 0);
        H5Dclose(dataset);
        H5Sclose(space);
        H5Tclose(boolean);
    }
    const TokenFile tokens = read_token_file(file, 8);
    EXPECT_EQ(tokens.tokens.values, (std::vector<int32_t>{5, 6, 0}));
    EXPECT_EQ(tokens.lengths, std::vector<size_t>{2});
    EXPECT_EQ(tokens.loss_mask.values, (std::vector<uint8_t>{0, 1, 0}));
}

// Rewrites `file` from `spec`; reading it must then fail saying `what`.
void expect_token_error(const std::string& file, const TokenSpec& spec, const std::string& what, size_t vocab = 8) {
    write_tokens(file, spec);
    EXPECT_ERROR(read_token_file(file, vocab), file, what);
}

TEST_F(H5Test, TokenFileMustExistAndBeHdf5) {
    const std::string file = path("tokens.h5");
    EXPECT_ERROR(read_token_file(path("none.h5"), 8), path("none.h5"), "no such file");
    write_text(file, "3 4 5\n");
    EXPECT_ERROR(read_token_file(file, 8), file, "not an HDF5 file");
}

TEST_F(H5Test, TokenFileNeedsTokensAndLengthsAsIntegers) {
    const std::string file = path("tokens.h5");
    {
        h5::File h5 = h5::File::create(file, "test");
        h5.write<int64_t>("lengths", std::vector<int64_t>{1});
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "tokens: missing dataset");
    {
        h5::File h5 = h5::File::create(file, "test");
        h5.write<int32_t>("tokens", {1, 2}, std::vector<int32_t>{3, 4}.data());
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "lengths: missing dataset");
    {
        h5::File h5 = h5::File::create(file, "test");
        h5.write<float>("tokens", {1, 2}, std::vector<float>{3, 4}.data());
        h5.write<int64_t>("lengths", std::vector<int64_t>{1});
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "/tokens: is float32 (1,2), expected integers [N, S]");
}

TEST_F(H5Test, TokenFileShapesMustAgree) {
    const std::string file = path("tokens.h5");
    TokenSpec rank1;
    rank1.token_shape = {8};
    expect_token_error(file, rank1, "/tokens: is int32 (8), expected integers [N, S]");
    TokenSpec lengths_rank2;
    lengths_rank2.length_shape = {2, 1};
    expect_token_error(file, lengths_rank2, "/lengths: is int64 (2,1), expected integers [2] (N, one per row of /tokens)");
    TokenSpec mismatch;
    mismatch.lengths = {4, 2, 1};
    mismatch.length_shape = {3};
    expect_token_error(file, mismatch, "/lengths: is int64 (3), expected integers [2] (N, one per row of /tokens)");
}

TEST_F(H5Test, TokenFileLengthsAndTokensMustBeInRange) {
    const std::string file = path("tokens.h5");
    TokenSpec zero;
    zero.lengths = {4, 0};
    expect_token_error(file, zero, "lengths: lengths[1] = 0 is outside [1, S = 4]");
    TokenSpec too_long;
    too_long.lengths = {5, 2};
    expect_token_error(file, too_long, "lengths: lengths[0] = 5 is outside [1, S = 4]");
    TokenSpec big;
    big.tokens[5] = 8;
    expect_token_error(file, big, "tokens: tokens[1, 1] = 8 is outside [0, vocab = 8)");
    TokenSpec negative;
    negative.tokens[2] = -1;
    expect_token_error(file, negative, "tokens: tokens[0, 2] = -1 is outside [0, vocab = 8)");
    expect_token_error(file, TokenSpec{}, "tokens: tokens[0, 2] = 5 is outside [0, vocab = 5)", 5);
}

TEST_F(H5Test, TokenFileLossMaskMustSelectValidTargets) {
    const std::string file = path("tokens.h5");
    TokenSpec mask_value;
    mask_value.mask[1] = 2;
    expect_token_error(file, mask_value, "loss_mask: loss_mask[0, 1] = 2 is not 0 or 1");
    TokenSpec mask_padding;
    mask_padding.mask[7] = 1;
    expect_token_error(file, mask_padding, "loss_mask: loss_mask[1, 3] = 1 at a padded position (length 2)");
    TokenSpec mask_zero;
    mask_zero.mask.assign(8, 0);
    expect_token_error(file, mask_zero, "/loss_mask: selects no target (no 1 at a position >= 1)");
    TokenSpec mask_first;
    mask_first.mask = {1, 0, 0, 0, /**/ 1, 0, 0, 0};
    expect_token_error(file, mask_first, "/loss_mask: selects no target");
    {
        write_tokens(file, TokenSpec{});
        h5::File h5 = h5::File::open(file, "test", h5::File::Access::write);
        H5Ldelete(h5.id(), "loss_mask", H5P_DEFAULT);
        h5.write<uint8_t>("loss_mask", {2, 3}, std::vector<uint8_t>(6, 1).data());
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "/loss_mask: is uint8 (2,3), expected integers or bools [N, S] = (2,4)");
}

TEST_F(H5Test, TokenFileTokensMustBeABackedNonEmptyDataset) {
    const std::string file = path("tokens.h5");
    {
        write_tokens(file, TokenSpec{});
        h5::File h5 = h5::File::open(file, "test", h5::File::Access::write);
        H5Ldelete(h5.id(), "tokens", H5P_DEFAULT);
        make_dataset(h5, "tokens", H5T_STD_I32LE, {1 << 20, 1 << 20}, {1, 4096});
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "/tokens: declares shape (1048576,1048576), more than 2^32 elements");
    {
        write_tokens(file, TokenSpec{});
        h5::File h5 = h5::File::open(file, "test", h5::File::Access::write);
        H5Ldelete(h5.id(), "tokens", H5P_DEFAULT);
        h5.create_group("tokens");
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "/tokens: is not a dataset");

    TokenSpec empty;
    empty.tokens.clear();
    empty.token_shape = {0, 4};
    empty.lengths.clear();
    empty.length_shape = {0};
    empty.with_mask = false;
    expect_token_error(file, empty, "tokens: is empty (0,4)");
}

}  // namespace
}  // namespace attnlab::h5io_test
