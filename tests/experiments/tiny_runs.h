// The tiny checkpoints the audit and ablate tests (test_audit_ablate.cpp,
// test_audit_live_tests.cpp) run on: a decoder and an encoder-decoder, each
// trained once per test process (well under a second each), and fresh
// evaluation data.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/run/model_factory.h"
#include "experiments/run/trainer.h"
#include "tests/temp_dir.h"

namespace attnlab::analysis_test {

namespace fs = std::filesystem;

struct Trained {
    Config config;
    CheckpointData checkpoint;
    std::string path;
    LoadedModel load() const { return load_model(config, checkpoint, path); }
};

// Trains a tiny model for 40 steps into a temporary folder (removed at exit).
inline Trained train_tiny(const std::vector<std::string>& overrides) {
    static const test::TempDir temp("attnlab_audit_test_");  // removed when the binary exits
    const fs::path& root = temp.path();
    Config config = default_config();
    for (const char* o : {"model.width=16", "model.heads=2", "model.kv_heads=1", "model.layers=2", "model.ffn=32",
                          "train.steps=40", "train.batch=8", "train.log_every=20", "train.eval_every=20",
                          "train.checkpoint_every=40", "train.eval_batches=1", "train.threads=1"})
        apply_override(config, o);
    for (const std::string& o : overrides) apply_override(config, o);
    validate(config);
    static int runs = 0;
    const fs::path dir = root / ("run" + std::to_string(runs++));
    std::unique_ptr<Trainer> trainer = Trainer::start(config, dir.string());
    EXPECT_EQ(trainer->run(), 0);
    Trained t;
    t.path = list_checkpoints((dir / "checkpoints").string()).back();
    t.checkpoint = read_checkpoint(t.path);
    t.config = parse_config(t.checkpoint.config_toml, t.path);
    return t;
}

inline const Trained& decoder_run() {
    static const Trained t = train_tiny({});
    return t;
}

inline const Trained& enc_dec_run() {
    static const Trained t = train_tiny({"task.name=translate", "model.kind=encoder-decoder"});
    return t;
}

inline std::vector<Batch> eval_data(const Config& config, size_t batches) {
    const std::unique_ptr<BatchSource> source = make_batch_source(config, 0, 2);
    std::vector<Batch> data;
    for (size_t i = 0; i < batches; ++i) data.push_back(source->next(static_cast<size_t>(config.train.batch)));
    return data;
}

}  // namespace attnlab::analysis_test
