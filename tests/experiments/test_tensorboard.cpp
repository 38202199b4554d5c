// TensorBoard event files read back record by record: the length and its
// masked CRC-32C, the data and its masked CRC-32C, then the Event it holds.
#include <gtest/gtest.h>


#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "experiments/config/config.h"
#include "experiments/run/tensorboard.h"
#include "experiments/run/trainer.h"
#include "tensorboard_event.pb.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

uint32_t le32(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }

// Every Event of an event file; fails the test on a bad length, CRC or message.
std::vector<tensorboard::Event> read_events(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<tensorboard::Event> events;
    size_t at = 0;
    while (at < bytes.size()) {
        EXPECT_GE(bytes.size() - at, 12u) << "a record header cut short at byte " << at;
        if (bytes.size() - at < 12) break;
        const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
        uint64_t length = 0;
        for (int i = 7; i >= 0; --i) length = length << 8 | p[i];
        EXPECT_EQ(le32(p + 8), masked_crc32c(p, 8)) << "length CRC of the record at byte " << at;
        EXPECT_LE(at + 12 + length + 4, bytes.size()) << "a record cut short at byte " << at;
        if (at + 12 + length + 4 > bytes.size()) break;
        EXPECT_EQ(le32(p + 12 + length), masked_crc32c(p + 12, length)) << "data CRC of the record at byte " << at;
        tensorboard::Event event;
        EXPECT_TRUE(event.ParseFromArray(p + 12, static_cast<int>(length))) << "record at byte " << at;
        events.push_back(event);
        at += 12 + length + 4;
    }
    return events;
}


TEST(TensorBoard, MaskedCrc32cOfTheCheckString) {
    // CRC-32C("123456789") = 0xE3069283, the Castagnoli check value (RFC 3720, B.4);
    // masked as TensorFlow's record writer does.
    const uint32_t crc = 0xE3069283u;
    EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
    const uint32_t empty = 0;  // CRC-32C of no bytes
    EXPECT_EQ(masked_crc32c("", 0), ((empty >> 15) | (empty << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarsReadBackRecordByRecord) {
    const test::TempDir temp("attnlab_tb_test_");  // removed also when an assertion ends the test
    const fs::path dir = temp.path() / "writer";
    std::string path;
    {
        TensorBoardWriter writer(dir.string());
        path = writer.path();
        writer.scalars(5, {{"train/loss", 2.5}, {"train/lr", 1e-3}});
        writer.scalars(10, {{"train/loss", 1.25}});
        writer.flush();
    }
    EXPECT_EQ(fs::path(path).parent_path(), dir);
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    const std::vector<tensorboard::Event> events = read_events(path);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[0].file_version(), "brain.Event:2");
    EXPECT_EQ(events[1].step(), 5);
    ASSERT_EQ(events[1].summary().value_size(), 2);
    EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
    EXPECT_EQ(events[1].summary().value(0).simple_value(), 2.5f);
    EXPECT_EQ(events[1].summary().value(1).simple_value(), 1e-3f);
    EXPECT_EQ(events[2].step(), 10);
    EXPECT_EQ(events[2].summary().value(0).simple_value(), 1.25f);
    EXPECT_GT(events[2].wall_time(), 1.7e9);  // seconds since the epoch
}

TEST(TensorBoard, ATrainingRunWritesEveryScalar) {
    const test::TempDir temp("attnlab_tb_test_");
    const fs::path dir = temp.path() / "run";
    Config config = default_config();
    for (const char* o : {"model.width=16", "model.heads=2", "model.layers=2", "model.ffn=32", "train.steps=20", "train.batch=8",
                          "train.log_every=5", "train.eval_every=10", "train.checkpoint_every=20", "train.eval_batches=1",
                          "train.tensorboard=true"})
        apply_override(config, o);
    validate(config);
    ASSERT_EQ(Trainer::start(config, dir.string())->run(), 0);
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir / "tb")) files.push_back(entry.path());
    ASSERT_EQ(files.size(), 1u);
    std::map<std::string, std::set<int64_t>> steps;  // tag -> steps it was logged at
    for (const tensorboard::Event& e : read_events(files[0].string()))
        for (const auto& v : e.summary().value()) {
            steps[v.tag()].insert(e.step());
            EXPECT_TRUE(std::isfinite(v.simple_value())) << v.tag();
        }
    const std::set<int64_t> logged = {5, 10, 15, 20}, evaluated = {10, 20}, attention = {0, 5, 10, 15, 20};
    for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/token_acc"})
        EXPECT_EQ(steps[tag], logged) << tag;
    for (const char* tag : {"eval/loss", "eval/token_acc", "eval/seq_acc"}) EXPECT_EQ(steps[tag], evaluated) << tag;
    for (const char* series : {"entropy", "masked_mass"})
        for (const char* head : {"L0.H0", "L0.H1", "L1.H0", "L1.H1"})
            EXPECT_EQ(steps[std::string("attention/self/") + series + "/" + head], attention) << series << " " << head;
    EXPECT_EQ(steps.size(), 5u + 3u + 8u);
}

}  // namespace
}  // namespace attnlab
