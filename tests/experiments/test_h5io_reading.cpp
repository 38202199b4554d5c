// What reading an HDF5 file trusts: nothing it declares. A dataset's type and
// shape are checked against what the reader expects, its data must be in the
// file, visiting follows hard links only and always ends, and only regular
// files are opened.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <vector>

#include "data/h5file.h"
#include "data/token_file.h"
#include "experiments/files/checkpoint.h"
#include "h5io_test.h"

namespace attnlab::h5io_test {
namespace {

// ---- what reading trusts: declared types, shapes and storage ------------------

TEST_F(H5Test, RequireChecksTypeAndShapeBeforeReading) {
    using h5::Expect;
    const std::string file = path("d.h5");
    {
        h5::File h5 = h5::File::create(file, "test");
        h5.write<int32_t>("ints", {2, 3}, std::vector<int32_t>{1, 2, 3, 4, 5, 6}.data());
        h5.write<float>("nine", Shape(9, 1), std::vector<float>{1.5f}.data());
        h5.write_strings("names", {"a", "b"});
    }
    const h5::File h5 = h5::File::open(file, "tag", h5::File::Access::read);
    const h5::Dataset ints = h5.dataset("ints");
    const Expect rows = Expect::array(Expect::Type::integers, {Expect::kAny, Expect::kAny}, "[N, S]");
    EXPECT_EQ(ints.require(rows), (Shape{2, 3}));
    EXPECT_EQ(ints.read<int64_t>(rows), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(ints.read<int64_t>(Expect::array(Expect::Type::integers_or_bools, {2, 3}, "")).size(), 6u);
    EXPECT_ERROR(ints.require(Expect::tensor(Expect::Type::floats)), file + ": /ints: is int32 (2,3), expected floats",
                 "[tag]");
    EXPECT_ERROR(ints.require(Expect::array(Expect::Type::integers, {3, Expect::kAny}, "[3, S]")), file,
                 "/ints: is int32 (2,3), expected integers [3, S]");
    EXPECT_ERROR(ints.require(Expect::array(Expect::Type::integers, {Expect::kAny}, "[n]")), file,
                 "/ints: is int32 (2,3), expected integers [n]");
    EXPECT_ERROR(h5.dataset("nine").require(Expect::tensor(Expect::Type::floats)), file,
                 "/nine: is float32 (1,1,1,1,1,1,1,1,1), expected floats");  // rank above kMaxRank
    EXPECT_ERROR(h5.dataset("names").read<int64_t>(rows), file, "/names: is string (2), expected integers [N, S]");
}

TEST_F(H5Test, DeclaredDataMustBeInTheFile) {
    using h5::Expect;
    const std::string file = path("d.h5");
    const std::vector<float> zeros(100000, 0.0f);
    const std::string raw = path("raw.bin");
    write_text(raw, std::string(400, '\0'));
    {
        h5::File h5 = h5::File::create(file, "test");
        make_dataset(h5, "beyond", H5T_IEEE_F32LE, {1 << 20, 1 << 20}, {1, 1024});  // 2^40 elements
        make_dataset(h5, "unwritten", H5T_IEEE_F32LE, {1 << 16, 1 << 15}, {16, 1024});  // 8 GiB, none stored
        make_dataset(h5, "late", H5T_STD_I64LE, {1000});  // contiguous, never written
        // Compressed zeros: declared bytes far above the stored ones, within deflate's ratio.
        const hsize_t n = zeros.size(), chunk = 25000;
        const hid_t space = H5Screate_simple(1, &n, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 1, &chunk);
        H5Pset_deflate(dcpl, 9);
        const hid_t packed = H5Dcreate2(h5.id(), "packed", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Dwrite(packed, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
        H5Dclose(packed);
        H5Pclose(dcpl);
        // Raw data in another file.
        const hsize_t hundred = 100;
        const hid_t outside = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(outside, raw.c_str(), 0, 400);
        const hid_t small = H5Screate_simple(1, &hundred, nullptr);
        H5Dclose(H5Dcreate2(h5.id(), "external", H5T_IEEE_F32LE, small, H5P_DEFAULT, outside, H5P_DEFAULT));
        H5Sclose(small);
        H5Pclose(outside);
        H5Sclose(space);
        const hid_t null_space = H5Screate(H5S_NULL);
        H5Dclose(H5Dcreate2(h5.id(), "null", H5T_IEEE_F32LE, null_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(null_space);
    }
    const h5::File h5 = h5::File::open(file, "tag", h5::File::Access::read);
    const Expect any = Expect::tensor(Expect::Type::floats);
    EXPECT_ERROR(h5.dataset("beyond").require(any), file, "/beyond: declares shape (1048576,1048576), more than 2^32 elements");
    EXPECT_ERROR(h5.dataset("unwritten").read<float>(), file,
                 "/unwritten: declares shape (65536,32768) of float32 (8589934592 bytes) but the file stores 0 bytes");
    EXPECT_ERROR(h5.dataset("late").read<int64_t>(), file, "/late: declares shape (1000) of int64 (8000 bytes) but the file stores 0 bytes");
    EXPECT_EQ(h5.dataset("packed").read<float>(any), zeros);
    EXPECT_ERROR(h5.dataset("external").read<float>(any), file, "/external: keeps its data in external files; not read");
    EXPECT_ERROR(h5.dataset("null").read<float>(), file, "/null: holds no data (a null dataspace)");
    EXPECT_ERROR(h5.dataset("unwritten").read_rows<float>(0, 1), file, "stores 0 bytes");
}

TEST_F(H5Test, VisitingFollowsHardLinksOnlyAndAlwaysEnds) {
    const std::string file = path("v.h5");
    auto fresh = [&] {
        h5::File h5 = h5::File::create(file, "test");
        const h5::Group top = h5.create_group("top");
        top.write<int64_t>("x", std::vector<int64_t>{1});
        top.create_group("a").create_group("b").write<int64_t>("y", std::vector<int64_t>{2});
        top.write<int64_t>("z", std::vector<int64_t>{3});
        return h5;
    };
    auto visited = [&] {
        const h5::File h5 = h5::File::open(file, "tag", h5::File::Access::read);
        std::vector<std::string> names;
        h5.group("top").visit_datasets([&](const h5::Dataset& d, const std::string& name) {
            names.push_back(name + "=" + std::to_string(d.read<int64_t>()[0]));
        });
        return names;
    };
    { fresh(); }
    EXPECT_EQ(visited(), (std::vector<std::string>{"x=1", "a/b/y=2", "z=3"}));  // creation order, depth first

    {
        h5::File h5 = fresh();
        H5Lcreate_soft("/top", h5.group("top/a").id(), "up", H5P_DEFAULT, H5P_DEFAULT);
    }
    EXPECT_ERROR(visited(), file, "/top/a/up: is a soft link; not followed");
    {
        h5::File h5 = fresh();
        H5Lcreate_hard(h5.id(), "/top", h5.group("top/a/b").id(), "again", H5P_DEFAULT, H5P_DEFAULT);
    }
    EXPECT_ERROR(visited(), file, "/top/a/b/again: links back to a group already visited (a loop)");
    {
        h5::File h5 = fresh();
        H5Lcreate_external(file.c_str(), "/", h5.group("top").id(), "self", H5P_DEFAULT, H5P_DEFAULT);
    }
    EXPECT_ERROR(visited(), file, "/top/self: is an external link (to another file); not followed");
    {
        const h5::File h5 = h5::File::open(file, "tag", h5::File::Access::read);
        EXPECT_ERROR(h5.has("top/self/top"), file, "/top/self: is an external link (to another file); not followed");
    }
    {
        h5::File h5 = fresh();
        const hid_t type = H5Tcopy(H5T_NATIVE_INT);
        H5Tcommit2(h5.group("top").id(), "kind", type, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Tclose(type);
    }
    EXPECT_ERROR(visited(), file, "/top/kind: is neither a group nor a dataset");
    {
        h5::File h5 = fresh();
        h5::Group deep = h5.group("top");
        for (int depth = 0; depth <= h5::Group::kMaxDepth; ++depth) deep = deep.create_group("g");
    }
    EXPECT_ERROR(visited(), file, "is nested more than 16 groups deep");
}

TEST_F(H5Test, OnlyRegularFilesAreOpened) {
    const std::string fifo = path("pipe.h5");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_ERROR(h5::File::open(fifo, "tag", h5::File::Access::read), fifo, "is not a regular file");  // would block
    EXPECT_ERROR(read_checkpoint(fifo), fifo, "is not a regular file");
    EXPECT_ERROR(read_token_file(fifo, 8), fifo, "task.path " + fifo + ": not a regular file (a FIFO)");  // before libhdf5
}

}  // namespace
}  // namespace attnlab::h5io_test
