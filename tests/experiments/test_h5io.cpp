// The SWMR metrics log a run writes: read by h5py while it is open, resume,
// crash, bad input. Checkpoints, what reading trusts and token files are in
// test_h5io_checkpoints.cpp, test_h5io_reading.cpp and test_h5io_token_files.cpp.
//
// The h5py checks run tests/experiments/metrics_reader.py with Debian's
// /usr/bin/python3 (python3-h5py); its exit status is asserted.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "data/h5file.h"
#include "experiments/files/checkpoint.h"
#include "experiments/run/metrics_log.h"
#include "h5io_test.h"

namespace attnlab::h5io_test {
namespace {

const char* const kPython = "/usr/bin/python3";
const fs::path kReader = fs::path(ATTNLAB_SOURCE_DIR) / "tests" / "experiments" / "metrics_reader.py";  // not __FILE__, which a ccache base_dir makes relative

int run_python(const std::string& args) {
    const std::string command = std::string(kPython) + " " + kReader.string() + " " + args;
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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

TEST_F(H5Test, MetricsLogHeadScoresResumeByName) {
    // /head_scores: per-head series named at creation; after a resume (which
    // lists them in HDF5's order) each value still goes to its own name.
    const std::string file = path("metrics.h5");
    const std::vector<std::string> names{"previous_token", "duplicate_token", "induction"};
    auto row = [&](double base) {
        return std::vector<std::pair<std::string, std::vector<double>>>{
            {"previous_token", {base + 0.1, base + 0.2}}, {"duplicate_token", {base + 0.3, base + 0.4}}, {"induction", {base + 0.5, base + 0.6}}};
    };
    {
        MetricsLog log = MetricsLog::create(file, "cfg", 1, 2, {"self"}, {}, names);
        EXPECT_TRUE(log.has_head_scores());
        for (int64_t step : {0, 10, 20}) log.append_head_scores(step, row(static_cast<double>(step)), 4.0 - static_cast<double>(step) / 10);
    }
    {
        MetricsLog log = MetricsLog::resume(file, 10);
        EXPECT_TRUE(log.has_head_scores());
        log.append_head_scores(30, row(30), 0.5);
        EXPECT_ERROR(log.append_head_scores(40, {{"induction", {1, 2}}}, 0.0), file, "no values given for /head_scores/");
        EXPECT_ERROR(log.append_head_scores(40, {{"copying", {1, 2}}}, 0.0), file, "no /head_scores/copying");
    }
    EXPECT_EQ(steps_in(file, "head_scores"), (std::vector<int64_t>{0, 10, 30}));
    const h5::File h5 = h5::File::open(file, "test", h5::File::Access::read);
    EXPECT_EQ(h5.dataset("head_scores/induction").read<double>(), (std::vector<double>{0.5, 0.6, 10.5, 10.6, 30.5, 30.6}));
    EXPECT_EQ(h5.dataset("head_scores/previous_token").read<double>(), (std::vector<double>{0.1, 0.2, 10.1, 10.2, 30.1, 30.2}));
    EXPECT_EQ(h5.dataset("head_scores/repeat_loss").read<double>(), (std::vector<double>{4.0, 3.0, 0.5}));
    EXPECT_EQ(h5.dataset("head_scores/induction").shape(), (Shape{3, 1, 2}));
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

    EXPECT_ERROR(MetricsLog::create(file, "", 1, 2, {"self"}, {}, {"repeat_loss"}), file, "head score 'repeat_loss' is not a valid dataset name");
    MetricsLog log = MetricsLog::create(file, "", 1, 2, {"self"});
    EXPECT_FALSE(log.has_head_scores());
    EXPECT_ERROR(log.append_head_scores(0, {}, 0.0), file, "this log has no /head_scores group");
    EXPECT_ERROR(log.append_attention("cross", 0, {1, 2}, {1, 2}, {0, 0}, {0, 0}), file, "no attention kind 'cross'");
    EXPECT_ERROR(log.append_attention("self", 0, {1, 2}, {1, 2}, {0}, {0, 0}), file + ": /attention/self/masked_mass",
                 "1 values given, expected layers * heads = 2");
    EXPECT_ERROR(log.append_train(-1, 1.0, 0.1, 0.0, 0.0, 0.0), "/train/step", "steps must be >= 0");
    log.append_train(0, 1.0, 0.1, 0.0, 0.0, 0.0);
    log.close();
    EXPECT_EQ(steps_in(file, "train"), std::vector<int64_t>{0});
    EXPECT_TRUE(steps_in(file, "attention/self").empty());  // the refused rows left nothing
}

}  // namespace
}  // namespace attnlab::h5io_test
