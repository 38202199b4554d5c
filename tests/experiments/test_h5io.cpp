// HDF5 files a run writes and reads: checkpoints (round trip, atomic write, every
// kind of bad file), the SWMR metrics log (read by h5py while it is open, resume,
// crash), and the token files of the `file` task.
//
// The h5py checks run tests/experiments/metrics_reader.py with Debian's
// /usr/bin/python3 (python3-h5py); its exit status is asserted.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "autograd/tensor_impl.h"
#include "data/token_file.h"
#include "experiments/files/checkpoint.h"
#include "data/h5file.h"
#include "experiments/run/metrics_log.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

const char* const kPython = "/usr/bin/python3";
const fs::path kReader = fs::path(__FILE__).parent_path() / "metrics_reader.py";

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

std::string error_of(const std::function<void()>& f) {
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

int run_python(const std::string& args) {
    const std::string command = std::string(kPython) + " " + kReader.string() + " " + args;
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

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
    write_text(file + ".tmp", "stale leftover of a crashed write");
    write_checkpoint(file, sample_checkpoint());
    EXPECT_EQ(files(), std::vector<std::string>{"step_0000001.h5"});  // no tmp left

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
    EXPECT_ERROR(write_checkpoint(path("x.h5"), bad_name), "x.h5.tmp", "invalid name 'a//b'");
    CheckpointData twice = sample_checkpoint();
    twice.rng.emplace_back("train", std::vector<uint64_t>{1});
    EXPECT_ERROR(write_checkpoint(path("x.h5"), twice), "x.h5.tmp", "'train' given twice");
    EXPECT_EQ(files(), std::vector<std::string>{"step_0000001.h5"});

    // A directory that does not exist: nothing anywhere.
    const std::string missing = path("no/such/dir/step_0000002.h5");
    EXPECT_ERROR(write_checkpoint(missing, sample_checkpoint()), missing + ".tmp", "cannot create file");
    EXPECT_FALSE(fs::exists(missing));
    EXPECT_FALSE(fs::exists(missing + ".tmp"));

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

// ---- metrics log ---------------------------------------------------------------

std::vector<double> grid(size_t layers, size_t heads, double base) {
    std::vector<double> values;
    for (size_t l = 0; l < layers; ++l)
        for (size_t h = 0; h < heads; ++h) values.push_back(base + 0.1 * static_cast<double>(l) + 0.01 * static_cast<double>(h) + 1e-17);
    return values;
}

// What the h5py reader dumped: dataset path -> values as written by repr().
std::map<std::string, std::vector<double>> read_dump(const std::string& file) {
    std::map<std::string, std::vector<double>> dump;
    std::istringstream lines(read_text(file));
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string name, word;
        words >> name;
        std::vector<double>& values = dump[name];
        while (words >> word) values.push_back(std::strtod(word.c_str(), nullptr));
    }
    return dump;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST_F(H5Test, MetricsLogIsReadableByH5pyWhileOpen) {
    const std::string file = path("metrics.h5"), config = path("config.toml"), dump = path("dump.txt");
    const std::string toml = "[run]\nname = \"swmr\"\n[model]\nlayers = 2\nheads = 3\n";
    write_text(config, toml);
    MetricsLog log = MetricsLog::create(file, toml, 2, 3, {"enc_self", "dec_self", "cross"});
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t step : {0, 10, 20}) log.append_train(step, 2.5 / (step + 1.0), 1e-3, 0.7, 12345.5, 0.1 * step);
    log.append_eval(10, 1.25, 0.5, 0.125);
    log.append_eval(20, nan, 0.75, 0.25);
    for (const std::string kind : {"enc_self", "dec_self", "cross"})
        for (int64_t step : {0, 20})
            log.append_attention(kind, step, grid(2, 3, 1.0 + step), grid(2, 3, 0.5), grid(2, 3, 0.0), grid(2, 3, 1e-9));
    log.flush();

    const std::string args = " --layers 2 --heads 3 --kinds enc_self,dec_self,cross --config-file " + config;
    ASSERT_EQ(run_python("check " + file + args +
                         " --rows train=3,eval=2,enc_self=2,dec_self=2,cross=2 --dump " + dump),
              0);
    const auto values = read_dump(dump);
    EXPECT_EQ(values.at("train/step"), (std::vector<double>{0, 10, 20}));
    EXPECT_TRUE(same_bits(values.at("train/loss"), {2.5, 2.5 / 11.0, 2.5 / 21.0}));
    EXPECT_TRUE(same_bits(values.at("train/wall_s"), {0.0, 0.1 * 10, 0.1 * 20}));
    EXPECT_TRUE(same_bits(values.at("eval/seq_acc"), {0.125, 0.25}));
    EXPECT_TRUE(std::isnan(values.at("eval/loss")[1]));
    std::vector<double> entropy = grid(2, 3, 1.0), later = grid(2, 3, 21.0);
    entropy.insert(entropy.end(), later.begin(), later.end());
    EXPECT_TRUE(same_bits(values.at("attention/cross/entropy"), entropy));
    EXPECT_EQ(values.at("attention/dec_self/step"), (std::vector<double>{0, 20}));

    // More rows, flushed: a new reader sees them while the log is still open.
    log.append_train(30, 0.5, 1e-3, 0.7, 1.0, 3.0);
    log.append_attention("cross", 30, grid(2, 3, 3), grid(2, 3, 0.5), grid(2, 3, 0), grid(2, 3, 0));
    log.flush();
    EXPECT_EQ(run_python("check " + file + args + " --rows train=4,eval=2,enc_self=2,dec_self=2,cross=3"), 0);
    // A plain (non-SWMR) open is refused while the log is open (HDF5 1.10) ...
    EXPECT_NE(run_python("check " + file + args + " --rows train=4,eval=2,enc_self=2,dec_self=2,cross=3 --plain 2>/dev/null"), 0);
    log.close();
    // ... and works once it is closed.
    EXPECT_EQ(run_python("check " + file + args + " --rows train=4,eval=2,enc_self=2,dec_self=2,cross=3 --plain"), 0);
}

// Waits for the reader's verdict file PREFIX.n.
std::string verdict(const std::string& prefix, int n) {
    const std::string file = prefix + "." + std::to_string(n);
    for (int i = 0; i < 600; ++i) {  // up to 30 s; the file may exist a moment before its text
        const std::string text = fs::exists(file) ? read_text(file) : "";
        if (!text.empty()) return text;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "timed out waiting for " + file;
}

TEST_F(H5Test, MetricsLogLiveReaderSeesFlushedRows) {
    const std::string file = path("metrics.h5"), ready = path("ready");
    MetricsLog log = MetricsLog::create(file, "", 1, 2, {"self"});
    log.append_train(1, 1.0, 0.1, 0.0, 0.0, 0.0);
    log.flush();

    const std::string command = std::string(kPython) + " " + kReader.string() + " follow " + file + " --ready " + ready;
    std::signal(SIGPIPE, SIG_IGN);  // a reader that failed and exited must not kill the test
    FILE* reader = popen(command.c_str(), "w");
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(verdict(ready, 0), "ok");  // the reader holds the file open from here on
    auto expect_rows = [&](const std::string& line, int n) {
        std::fputs((line + "\n").c_str(), reader);
        std::fflush(reader);
        EXPECT_EQ(verdict(ready, n), "ok") << line;
    };
    expect_rows("train=1:1,eval=0:0,self=0:0", 1);
    for (int64_t step = 2; step <= 40; ++step) log.append_train(step, 1.0 / step, 0.1, 0.0, 0.0, 0.0);
    log.append_eval(40, 0.5, 0.9, 0.8);
    log.append_attention("self", 40, {1, 2}, {0.5, 0.25}, {0, 0}, {0, 0});
    log.flush();
    expect_rows("train=40:40,eval=1:40,self=1:40", 2);
    log.append_train(41, 0.1, 0.1, 0.0, 0.0, 0.0);
    log.flush();
    expect_rows("train=41:41,eval=1:40,self=1:40", 3);
    const int status = pclose(reader);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

std::vector<int64_t> steps_in(const std::string& file, const std::string& group) {
    const h5::File h5 = h5::File::open(file, "test", h5::File::Access::read);
    std::vector<int64_t> steps = h5.dataset(group + "/step").read<int64_t>();
    for (const std::string& member : h5.group(group).members())
        EXPECT_EQ(h5.dataset(group + "/" + member).rows(), steps.size()) << group << "/" << member;
    return steps;
}

TEST_F(H5Test, MetricsLogResumeTruncatesToTheCheckpointStep) {
    const std::string file = path("metrics.h5");
    {
        MetricsLog log = MetricsLog::create(file, "cfg", 1, 1, {"self"});
        for (int64_t step : {0, 10, 20, 30, 40}) log.append_train(step, 1.0, 0.1, 0.0, 0.0, 0.0);
        for (int64_t step : {10, 30}) log.append_eval(step, 1.0, 0.5, 0.5);
        for (int64_t step : {0, 20, 40}) log.append_attention("self", step, {1}, {1}, {0}, {0});
    }  // closed by the destructor
    {
        MetricsLog log = MetricsLog::resume(file, 20);
        EXPECT_EQ(log.layers(), 1u);
        EXPECT_EQ(log.kinds(), std::vector<std::string>{"self"});
        EXPECT_ERROR(log.append_train(15, 1.0, 0.1, 0.0, 0.0, 0.0), file, "step 15 after step 20");
        log.append_train(30, 2.0, 0.1, 0.0, 0.0, 0.0);
        log.append_eval(30, 2.0, 0.5, 0.5);
        MetricsLog moved = std::move(log);  // move-only: the handle travels
        moved.append_attention("self", 40, {2}, {1}, {0}, {0});
        moved.close();
        EXPECT_THROW(moved.flush(), Error);
    }
    EXPECT_EQ(steps_in(file, "train"), (std::vector<int64_t>{0, 10, 20, 30}));
    EXPECT_EQ(steps_in(file, "eval"), (std::vector<int64_t>{10, 30}));
    EXPECT_EQ(steps_in(file, "attention/self"), (std::vector<int64_t>{0, 20, 40}));
    {
        const h5::File h5 = h5::File::open(file, "test", h5::File::Access::read);
        EXPECT_EQ(h5.dataset("train/loss").read<double>(), (std::vector<double>{1, 1, 1, 2}));
        EXPECT_EQ(h5.read_attr_string("config"), "cfg");
    }  // HDF5 will not open a file for writing that this process has open for reading

    { MetricsLog::resume(file, -1); }  // before the first step: every series empty
    EXPECT_TRUE(steps_in(file, "train").empty());
    EXPECT_TRUE(steps_in(file, "attention/self").empty());
}

TEST_F(H5Test, MetricsLogSurvivesACrash) {
    const std::string file = path("metrics.h5");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // a run that dies without closing its log
        MetricsLog log = MetricsLog::create(file, "", 2, 1, {"self"});
        for (int64_t step = 1; step <= 5; ++step) log.append_train(step, 1.0, 0.1, 0.0, 0.0, 0.0);
        log.append_attention("self", 5, {1, 1}, {1, 1}, {0, 0}, {0, 0});
        log.flush();
        for (int64_t step = 6; step <= 8; ++step) log.append_train(step, 1.0, 0.1, 0.0, 0.0, 0.0);
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    // h5py reads it in SWMR mode, up to (at least) the last flush.
    EXPECT_EQ(run_python("check " + file + " --layers 2 --heads 1 --kinds self --rows train=5,eval=0,self=1"), 0);
    // Resuming clears HDF5's "open for write" mark and cuts the unflushed rows.
    MetricsLog log = MetricsLog::resume(file, 5);
    log.append_train(6, 2.0, 0.1, 0.0, 0.0, 0.0);
    log.close();
    EXPECT_EQ(steps_in(file, "train"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(H5Test, MetricsLogRejectsBadInput) {
    const std::string file = path("metrics.h5");
    EXPECT_ERROR(MetricsLog::create(file, "", 0, 2, {"self"}), file, "layers and heads must be positive");
    EXPECT_ERROR(MetricsLog::create(file, "", 1, 2, {}), file, "at least one attention kind");
    EXPECT_ERROR(MetricsLog::create(file, "", 1, 2, {"self", "self"}), file, "'self' given twice");
    EXPECT_ERROR(MetricsLog::create(file, "", 1, 2, {"a/b"}), file, "not a valid group name");
    EXPECT_ERROR(MetricsLog::resume(path("none.h5"), 0), path("none.h5"), "no such file");
    write_checkpoint(path("ckpt.h5"), CheckpointData{});
    EXPECT_ERROR(MetricsLog::resume(path("ckpt.h5"), 0), path("ckpt.h5"), "not an attnlab metrics log");

    MetricsLog log = MetricsLog::create(file, "", 1, 2, {"self"});
    EXPECT_ERROR(log.append_attention("cross", 0, {1, 2}, {1, 2}, {0, 0}, {0, 0}), file, "no attention kind 'cross'");
    EXPECT_ERROR(log.append_attention("self", 0, {1, 2}, {1, 2}, {0}, {0, 0}), file + ": /attention/self/masked_mass",
                 "1 values given, expected layers * heads = 2");
    EXPECT_ERROR(log.append_train(-1, 1.0, 0.1, 0.0, 0.0, 0.0), "/train/step", "steps must be >= 0");
    log.append_train(0, 1.0, 0.1, 0.0, 0.0, 0.0);
    log.close();
    EXPECT_EQ(steps_in(file, "train"), std::vector<int64_t>{0});
    EXPECT_TRUE(steps_in(file, "attention/self").empty());  // the refused rows left nothing
}

// ---- what reading trusts: declared types, shapes and storage ------------------

// A dataset made with the C API: `type` stored, `dims` declared, chunked by
// `chunk` (empty: contiguous), written from `values` when given.
void make_dataset(const h5::File& file, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
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
    EXPECT_ERROR(read_token_file(fifo, 8), fifo, "is not a regular file");
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

TEST_F(H5Test, TokenFileValidation) {
    const std::string file = path("tokens.h5");
    EXPECT_ERROR(read_token_file(path("none.h5"), 8), path("none.h5"), "no such file");
    write_text(file, "3 4 5\n");
    EXPECT_ERROR(read_token_file(file, 8), file, "not an HDF5 file");

    auto expect_error = [&](const TokenSpec& spec, const std::string& what, size_t vocab = 8) {
        write_tokens(file, spec);
        EXPECT_ERROR(read_token_file(file, vocab), file, what);
    };
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

    TokenSpec rank1;
    rank1.token_shape = {8};
    expect_error(rank1, "/tokens: is int32 (8), expected integers [N, S]");
    TokenSpec lengths_rank2;
    lengths_rank2.length_shape = {2, 1};
    expect_error(lengths_rank2, "/lengths: is int64 (2,1), expected integers [2] (N, one per row of /tokens)");
    TokenSpec mismatch;
    mismatch.lengths = {4, 2, 1};
    mismatch.length_shape = {3};
    expect_error(mismatch, "/lengths: is int64 (3), expected integers [2] (N, one per row of /tokens)");
    TokenSpec zero;
    zero.lengths = {4, 0};
    expect_error(zero, "lengths: lengths[1] = 0 is outside [1, S = 4]");
    TokenSpec too_long;
    too_long.lengths = {5, 2};
    expect_error(too_long, "lengths: lengths[0] = 5 is outside [1, S = 4]");
    TokenSpec big;
    big.tokens[5] = 8;
    expect_error(big, "tokens: tokens[1, 1] = 8 is outside [0, vocab = 8)");
    TokenSpec negative;
    negative.tokens[2] = -1;
    expect_error(negative, "tokens: tokens[0, 2] = -1 is outside [0, vocab = 8)");
    expect_error(TokenSpec{}, "tokens: tokens[0, 2] = 5 is outside [0, vocab = 5)", 5);
    TokenSpec mask_value;
    mask_value.mask[1] = 2;
    expect_error(mask_value, "loss_mask: loss_mask[0, 1] = 2 is not 0 or 1");
    TokenSpec mask_padding;
    mask_padding.mask[7] = 1;
    expect_error(mask_padding, "loss_mask: loss_mask[1, 3] = 1 at a padded position (length 2)");
    TokenSpec mask_zero;
    mask_zero.mask.assign(8, 0);
    expect_error(mask_zero, "/loss_mask: selects no target (no 1 at a position >= 1)");
    TokenSpec mask_first;
    mask_first.mask = {1, 0, 0, 0, /**/ 1, 0, 0, 0};
    expect_error(mask_first, "/loss_mask: selects no target");
    {
        write_tokens(file, TokenSpec{});
        h5::File h5 = h5::File::open(file, "test", h5::File::Access::write);
        H5Ldelete(h5.id(), "loss_mask", H5P_DEFAULT);
        h5.write<uint8_t>("loss_mask", {2, 3}, std::vector<uint8_t>(6, 1).data());
    }
    EXPECT_ERROR(read_token_file(file, 8), file, "/loss_mask: is uint8 (2,3), expected integers or bools [N, S] = (2,4)");
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
    expect_error(empty, "tokens: is empty (0,4)");
}

}  // namespace
}  // namespace attnlab
