// Checkpoints: a bitwise round trip, float64 parameters stored as float32, the
// atomic write, listing and pruning, and every kind of bad checkpoint (bad
// files, non-finite values, an empty config, a bad step, a huge declared
// parameter) refused with one line naming the path.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "autograd/tensor_impl.h"
#include "data/h5file.h"
#include "experiments/files/checkpoint.h"
#include "h5io_test.h"

namespace attnlab::h5io_test {
namespace {

// ---- checkpoints -------------------------------------------------------------

template <class T> std::vector<T> raw(const Tensor& t) {
    const auto& array = t.impl().array<T>();
    return std::vector<T>(array.data(), array.data() + array.size());
}

template <class T> bool bitwise_equal(const Tensor& a, const Tensor& b) {
    const std::vector<T> x = raw<T>(a), y = raw<T>(b);
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// Finite edge values only: a NaN or an infinity is refused on reading (below).
CheckpointData sample_checkpoint() {
    const double largest = std::numeric_limits<float>::max();
    CheckpointData data;
    data.step = 123;
    data.config_toml = "[run]\nname = \"h5 é\"\nseed = 7\n\n[model]\nheads = 4\n";
    std::vector<double> emb;
    for (int i = 0; i < 20; ++i) emb.push_back(std::sin(i * 1.7) * std::pow(10.0, i % 7 - 3));
    emb[3] = -0.0;
    emb[4] = largest;
    emb[5] = -largest;
    emb[6] = 1e-42;  // a float32 subnormal
    data.params = {
        {"tok_emb.weight", Tensor::from_values(emb, {5, 4})},
        {"blocks.0.attn.q_proj.weight", Tensor::from_values(std::vector<double>(16, 0.25), {4, 4})},
        {"head.bias", Tensor::from_values({1.5, -2.5, 3.0}, {3})},
        {"scale", Tensor::scalar(0.125)},
    };
    data.optimizer = {
        {"step.tok_emb.weight", Tensor::scalar(41.0, DType::f64)},
        {"m.tok_emb.weight", Tensor::from_values(emb, {5, 4})},
        {"v.head.bias", Tensor::from_values({0.1, 0.2, 1.0 / 3.0}, {3}, DType::f64)},
        {"adam/nested.state", Tensor::from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64)},
    };
    data.rng = {{"train", {1, std::numeric_limits<uint64_t>::max(), 3, 0x8000000000000000ull}}, {"empty", {}}};
    data.data = {{"train.position", {-1, 5, std::numeric_limits<int64_t>::max()}}, {"eval", {}}};
    return data;
}

TEST_F(H5Test, CheckpointRoundTripIsBitwise) {
    const CheckpointData written = sample_checkpoint();
    const std::string file = path(checkpoint_name(123));
    write_checkpoint(file, written);
    const CheckpointData read = read_checkpoint(file);

    EXPECT_EQ(read.step, 123);
    EXPECT_EQ(read.config_toml, written.config_toml);
    ASSERT_EQ(read.params.size(), written.params.size());
    for (size_t i = 0; i < read.params.size(); ++i) {
        SCOPED_TRACE(written.params[i].first);
        EXPECT_EQ(read.params[i].first, written.params[i].first);
        EXPECT_EQ(read.params[i].second.dtype(), DType::f32);
        EXPECT_EQ(read.params[i].second.shape(), written.params[i].second.shape());
        EXPECT_TRUE(bitwise_equal<float>(read.params[i].second, written.params[i].second));
    }
    ASSERT_EQ(read.optimizer.size(), written.optimizer.size());
    for (size_t i = 0; i < read.optimizer.size(); ++i) {
        SCOPED_TRACE(written.optimizer[i].first);
        const Tensor &a = read.optimizer[i].second, &b = written.optimizer[i].second;
        EXPECT_EQ(read.optimizer[i].first, written.optimizer[i].first);
        EXPECT_EQ(a.dtype(), b.dtype());
        EXPECT_EQ(a.shape(), b.shape());
        EXPECT_TRUE(a.dtype() == DType::f32 ? bitwise_equal<float>(a, b) : bitwise_equal<double>(a, b));
    }
    EXPECT_EQ(read.rng, written.rng);
    EXPECT_EQ(read.data, written.data);

    // The layout users see: dotted names directly under /params, stored dtypes, attributes.
    const h5::File h5 = h5::File::open(file, "test", h5::File::Access::read);
    EXPECT_EQ(h5.read_attr_string("format"), "attnlab-checkpoint");
    EXPECT_EQ(h5.read_attr_int("format_version"), 1);
    EXPECT_EQ(h5.read_attr_int("step"), 123);
    EXPECT_EQ(h5.group("params").members(),
              (std::vector<std::string>{"tok_emb.weight", "blocks.0.attn.q_proj.weight", "head.bias", "scale"}));
    EXPECT_EQ(h5.dataset("params/blocks.0.attn.q_proj.weight").type_name(), "float32");
    EXPECT_EQ(h5.dataset("params/scale").shape(), Shape{});
    EXPECT_EQ(h5.dataset("optimizer/v.head.bias").type_name(), "float64");
    EXPECT_EQ(h5.dataset("optimizer/adam/nested.state").shape(), (Shape{2, 3}));
    EXPECT_EQ(h5.dataset("rng/train").type_name(), "uint64");
    EXPECT_EQ(h5.dataset("data/train.position").type_name(), "int64");
}

TEST_F(H5Test, CheckpointStoresFloat64ParametersAsFloat32) {
    CheckpointData data;
    data.config_toml = "[model]\nheads = 2\n";
    data.params = {{"w", Tensor::from_values({0.1, 1.0 / 3.0}, {2}, DType::f64)}};
    write_checkpoint(path("c.h5"), data);
    const CheckpointData read = read_checkpoint(path("c.h5"));
    ASSERT_EQ(read.params.size(), 1u);
    EXPECT_EQ(read.params[0].second.dtype(), DType::f32);
    EXPECT_TRUE(bitwise_equal<float>(read.params[0].second, data.params[0].second.to(DType::f32)));
}

TEST_F(H5Test, CheckpointWriteIsAtomic) {
    const std::string file = path("step_0000001.h5");
    // A leftover of a write killed by SIGKILL is another process's temporary name:
    // kept as it is (nothing reads it), never written into.
    write_text(file + ".1234.0badcafe.tmp", "stale leftover of a crashed write");
    write_checkpoint(file, sample_checkpoint());
    EXPECT_EQ(files(), (std::vector<std::string>{"step_0000001.h5", "step_0000001.h5.1234.0badcafe.tmp"}));  // none of ours
    EXPECT_EQ(read_text(file + ".1234.0badcafe.tmp"), "stale leftover of a crashed write");
    fs::remove(file + ".1234.0badcafe.tmp");

    // A write that fails half-way (after /params is written) leaves the old file
    // untouched and no tmp file.
    CheckpointData broken = sample_checkpoint();
    broken.step = 2;
    broken.optimizer.emplace_back("undefined", Tensor());
    EXPECT_ERROR(write_checkpoint(file, broken), file, "undefined");
    EXPECT_EQ(files(), std::vector<std::string>{"step_0000001.h5"});
    EXPECT_EQ(read_checkpoint(file).step, 123);

    CheckpointData bad_name = sample_checkpoint();
    bad_name.params.emplace_back("a//b", Tensor::scalar(1.0));
    EXPECT_ERROR(write_checkpoint(path("x.h5"), bad_name), "x.h5." + std::to_string(::getpid()) + ".", "invalid name 'a//b'");
    CheckpointData twice = sample_checkpoint();
    twice.rng.emplace_back("train", std::vector<uint64_t>{1});
    EXPECT_ERROR(write_checkpoint(path("x.h5"), twice), "x.h5." + std::to_string(::getpid()) + ".", "'train' given twice");
    EXPECT_EQ(files(), std::vector<std::string>{"step_0000001.h5"});

    // A directory that does not exist: nothing anywhere.
    const std::string missing = path("no/such/dir/step_0000002.h5");
    EXPECT_ERROR(write_checkpoint(missing, sample_checkpoint()), missing + ".", "cannot create file");
    EXPECT_FALSE(fs::exists(path("no")));

    // An unwritable directory (root ignores permission bits, so only as a user).
    if (geteuid() != 0) {
        fs::create_directory(dir_ / "locked");
        fs::permissions(dir_ / "locked", fs::perms::owner_read | fs::perms::owner_exec);
        const std::string locked = path("locked/step_0000003.h5");
        EXPECT_ERROR(write_checkpoint(locked, sample_checkpoint()), locked, "cannot create file");
        fs::permissions(dir_ / "locked", fs::perms::owner_all);
        EXPECT_TRUE(fs::is_empty(dir_ / "locked"));
    }
}

TEST_F(H5Test, BadCheckpointsThrowNamingThePath) {
    const std::string missing = path("missing.h5");
    EXPECT_ERROR(read_checkpoint(missing), missing, "no such file");

    const std::string text = path("text.h5");
    write_text(text, "format = \"attnlab-checkpoint\"\nthis is not HDF5\n");
    EXPECT_ERROR(read_checkpoint(text), text, "not an HDF5 file");

    const std::string good = path("good.h5"), truncated = path("truncated.h5");
    write_checkpoint(good, sample_checkpoint());
    const std::string bytes = read_text(good);
    write_text(truncated, bytes.substr(0, bytes.size() / 2));
    EXPECT_ERROR(read_checkpoint(truncated), truncated, "HDF5 cannot open it (HDF5: truncated file");

    auto with_root = [&](const std::string& name, const std::string& format, int64_t version, bool groups) {
        h5::File file = h5::File::create(path(name), "test");
        file.write_attr_string("format", format);
        file.write_attr_int("format_version", version);
        file.write_attr_int("step", 5);
        file.write_attr_string("config", "[model]\nheads = 2\n");
        if (groups)
            for (const char* group : {"params", "optimizer", "rng", "data"}) file.create_group(group);
        return path(name);
    };
    const std::string metrics = with_root("metrics.h5", "attnlab-metrics", 1, true);
    EXPECT_ERROR(read_checkpoint(metrics), metrics,
                 "not an attnlab checkpoint (format is \"attnlab-metrics\", expected \"attnlab-checkpoint\")");
    const std::string v2 = with_root("v2.h5", "attnlab-checkpoint", 2, true);
    EXPECT_ERROR(read_checkpoint(v2), v2, "format_version 2 is not supported (this build reads format_version 1)");
    const std::string no_groups = with_root("no_groups.h5", "attnlab-checkpoint", 1, false);
    EXPECT_ERROR(read_checkpoint(no_groups), no_groups, "missing group /params");
    { h5::File::create(path("bare.h5"), "test"); }
    EXPECT_ERROR(read_checkpoint(path("bare.h5")), path("bare.h5"), "no 'format' attribute");
    EXPECT_EQ(read_checkpoint(with_root("empty.h5", "attnlab-checkpoint", 1, true)).step, 5);

    // A parameter stored as integers is refused, naming the dataset.
    const std::string ints = with_root("ints.h5", "attnlab-checkpoint", 1, true);
    {
        h5::File file = h5::File::open(ints, "test", h5::File::Access::write);
        file.group("params").write<int64_t>("w", std::vector<int64_t>{1, 2});
    }
    EXPECT_ERROR(read_checkpoint(ints), ints + ": /params/w: is int64 (2), expected floats", "[checkpoint]");
}

TEST_F(H5Test, ListAndPruneCheckpoints) {
    EXPECT_EQ(checkpoint_name(0), "step_0000000.h5");
    EXPECT_EQ(checkpoint_name(123), "step_0000123.h5");
    EXPECT_EQ(checkpoint_name(12345678), "step_12345678.h5");
    EXPECT_THROW(checkpoint_name(-1), Error);
    EXPECT_TRUE(list_checkpoints(path("absent")).empty());

    for (int64_t step : {100, 2, 12345678, 10}) write_text(path(checkpoint_name(step)), "");
    for (const char* other : {"step_0000005.h5.tmp", "notes.txt", "step_12.h5", "step_0000007.h5x"})
        write_text(path(other), "");
    fs::create_directory(dir_ / "step_0000003.h5");  // a directory is not a checkpoint
    EXPECT_EQ(list_checkpoints(dir_.string()),
              (std::vector<std::string>{path("step_0000002.h5"), path("step_0000010.h5"), path("step_0000100.h5"),
                                        path("step_12345678.h5")}));
    prune_checkpoints(dir_.string(), 2);
    EXPECT_EQ(list_checkpoints(dir_.string()),
              (std::vector<std::string>{path("step_0000100.h5"), path("step_12345678.h5")}));
    EXPECT_TRUE(fs::exists(path("notes.txt")));
    prune_checkpoints(dir_.string(), 5);
    EXPECT_EQ(list_checkpoints(dir_.string()).size(), 2u);
    prune_checkpoints(dir_.string(), 0);
    EXPECT_TRUE(list_checkpoints(dir_.string()).empty());
}

TEST_F(H5Test, CheckpointValuesMustBeFinite) {
    auto with = [&](const std::string& name, void (*change)(CheckpointData&)) {
        CheckpointData data = sample_checkpoint();
        change(data);
        write_checkpoint(path(name), data);
        return path(name);
    };
    const std::string param = with("nan.h5", [](CheckpointData& d) {
        std::vector<double> v(20, 0.5);
        v[1 * 4 + 2] = std::numeric_limits<double>::quiet_NaN();
        d.params[0].second = Tensor::from_values(v, {5, 4});
    });
    EXPECT_ERROR(read_checkpoint(param), param + ": /params/tok_emb.weight: element [1, 2] is NaN; a checkpoint holds finite values only",
                 "[checkpoint]");
    const std::string scalar = with("inf.h5", [](CheckpointData& d) {
        d.params[3].second = Tensor::scalar(-std::numeric_limits<double>::infinity());
    });
    EXPECT_ERROR(read_checkpoint(scalar), scalar, "/params/scale: is infinite");
    const std::string moment = with("moment.h5", [](CheckpointData& d) {
        d.optimizer[2].second = Tensor::from_values({0.1, std::numeric_limits<double>::infinity(), 0.3}, {3}, DType::f64);
    });
    EXPECT_ERROR(read_checkpoint(moment), moment, "/optimizer/v.head.bias: element [1] is infinite");
}

TEST_F(H5Test, CheckpointConfigMustSetSomethingAndStepMustBeValid) {
    for (const std::string& text : {std::string(""), std::string(" \n\t\n"), std::string("# a comment\n  # another\n")}) {
        CheckpointData data = sample_checkpoint();
        data.config_toml = text;
        write_checkpoint(path("c.h5"), data);
        EXPECT_ERROR(read_checkpoint(path("c.h5")), path("c.h5"), "the config attribute is empty");
    }
    CheckpointData data = sample_checkpoint();
    write_checkpoint(path("s.h5"), data);
    {
        h5::File h5 = h5::File::open(path("s.h5"), "test", h5::File::Access::write);
        h5.write_attr_int("step", -3);
    }
    EXPECT_ERROR(read_checkpoint(path("s.h5")), path("s.h5"), "step -3 is negative");
    {
        h5::File h5 = h5::File::open(path("s.h5"), "test", h5::File::Access::write);
        h5.write_attr_string("step", "three");
    }
    EXPECT_ERROR(read_checkpoint(path("s.h5")), path("s.h5"), "/ attribute 'step': is not an integer");
}

TEST_F(H5Test, CheckpointWithAHugeDeclaredParameterIsRefusedBeforeAllocating) {
    write_checkpoint(path("h.h5"), sample_checkpoint());
    {
        h5::File h5 = h5::File::open(path("h.h5"), "test", h5::File::Access::write);
        H5Ldelete(h5.id(), "params/head.bias", H5P_DEFAULT);
        make_dataset(h5, "params/head.bias", H5T_IEEE_F32LE, {hsize_t{1} << 31}, {4096});
    }
    EXPECT_ERROR(read_checkpoint(path("h.h5")), path("h.h5"),
                 "/params/head.bias: declares shape (2147483648) of float32 (8589934592 bytes) but the file stores 0 bytes");
}

}  // namespace
}  // namespace attnlab::h5io_test
