// Every model.* key of the schema (`train --keys`) is either read by the model
// it configures or refused where nothing reads it (config.cpp's unread keys):
// for each key, in the tiny base run and in a run of the settings that read it,
// a changed value either fails validation as unread ("only used when ...") or
// changes the model: its parameters after two training steps (their names,
// shapes or values: the initial draw, the forward through the loss, dropout;
// two layers, so that what a prefix or a document changes reaches the loss).
// A key of the schema missing from the table below fails the test, so a new
// key is classified when it is added. (model.rel_max_distance once trained
// silently without model.rel_buckets.)
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "experiments/config/config_schema.h"
#include "experiments/files/checkpoint.h"
#include "experiments/interop/export.h"
#include "experiments/run/load_checkpoint.h"
#include "experiments/run/trainer.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTiny = {"model.width=16", "model.heads=2", "model.layers=2", "model.ffn=32", "train.steps=2",
                                        "train.batch=4", "train.log_every=1", "train.eval_every=100", "train.checkpoint_every=2",
                                        "train.eval_batches=1", "train.threads=1"};

struct Change {
    std::string value;                 // another value than the default
    std::vector<std::string> reading;  // settings under which the key is read
    std::string unseen = "";           // why no pair of training runs can show it, if none can
};

// Every model.* key: a value to change it to, and settings that read it.
const std::map<std::string, Change>& changes() {
    static const std::map<std::string, Change> table = {
        {"model.kind", {"\"encoder-decoder\"", {}, "the task decides it (translate needs encoder-decoder, every other task decoder)"}},
        {"model.layers", {"3", {}}},
        {"model.width", {"24", {}}},
        {"model.heads", {"4", {}}},
        {"model.kv_heads", {"1", {}}},
        {"model.head_width", {"4", {}}},
        {"model.ffn", {"0", {}}},
        {"model.norm", {"\"post\"", {}}},
        {"model.norm_type", {"\"rmsnorm\"", {}}},
        {"model.positional", {"\"rotary\"", {}}},
        {"model.rotary_base", {"100.0", {"model.positional=\"rotary\""}}},
        {"model.rotary_dims", {"4", {"model.positional=\"rotary\""}}},
        {"model.scale", {"\"none\"", {}}},
        {"model.masked_rows", {"\"zero\"", {}, "it acts on query rows with no eligible key, which the default (\"error\") refuses to train on"}},
        {"model.window", {"2", {}}},
        {"model.prefix_lm", {"true", {}}},
        {"model.documents", {"true", {"task.pack=64"}}},
        {"model.softcap", {"2.0", {}}},
        {"model.sinks", {"true", {}}},
        {"model.rel_buckets", {"8", {}}},
        {"model.rel_max_distance", {"5", {"model.rel_buckets=8"}}},
        {"model.dropout", {"0.5", {}}},
        {"model.attn_dropout", {"0.5", {}}},
        {"model.bias", {"false", {}}},
        {"model.ffn_bias", {"false", {}}},
        {"model.norm_bias", {"false", {}}},
        {"model.norm_eps", {"0.5", {}}},
        {"model.parallel", {"true", {}}},
        {"model.head_bias", {"true", {}}},
        {"model.init", {"\"gpt2\"", {}}},
        {"model.tie_embeddings", {"true", {}}},
        {"model.activation", {"\"relu\"", {}}},
        {"model.max_len", {"64", {}}},
        {"model.ablate_heads", {"[\"0.1\"]", {}}},
    };
    return table;
}

// The parameters after two steps of the run the overrides describe, or "" with
// the validation's message when the config is refused.
struct Outcome {
    NamedTensors params;
    std::string refused;
    std::string checkpoint;  // its last checkpoint
};

// Each config trained once in the test process: both tests below ask for the same runs.
Outcome train(const std::vector<std::string>& overrides) {
    static std::map<std::vector<std::string>, Outcome> trained;
    if (const auto it = trained.find(overrides); it != trained.end()) return it->second;
    static const test::TempDir temp("attnlab_config_reads_");
    static int runs = 0;
    Config config = default_config();
    for (const std::string& o : kTiny) apply_override(config, o);
    for (const std::string& o : overrides) apply_override(config, o);
    try {
        validate(config);
    } catch (const ConfigError& e) {
        return trained[overrides] = {{}, e.what(), ""};
    }
    const fs::path dir = temp.path() / ("run" + std::to_string(runs++));
    std::unique_ptr<Trainer> trainer = Trainer::start(config, dir.string());
    EXPECT_EQ(trainer->run(), 0);
    const std::string checkpoint = list_checkpoints((dir / "checkpoints").string()).back();
    return trained[overrides] = {read_checkpoint(checkpoint).params, "", checkpoint};
}

bool same_parameters(const NamedTensors& a, const NamedTensors& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape() || a[i].second.values() != b[i].second.values())
            return false;
    return true;
}

TEST(ConfigReads, EveryModelKeyIsReadOrRefusedAsUnread) {
    for (const config_schema::Field& field : config_schema::fields()) {
        if (field.key.rfind("model.", 0) != 0) continue;
        const auto it = changes().find(field.key);
        ASSERT_NE(it, changes().end()) << field.key << ": a model key this test does not know; add it to changes() with a value "
                                                       "and the settings that read it";
        const Change& change = it->second;
        if (!change.unseen.empty()) continue;
        for (const std::vector<std::string>& base : {std::vector<std::string>{}, change.reading}) {
            const Outcome before = train(base);
            EXPECT_EQ(before.refused, "") << field.key << ": the base settings are refused";
            if (!before.refused.empty()) continue;
            std::vector<std::string> changed = base;
            changed.push_back(field.key + "=" + change.value);
            const Outcome after = train(changed);
            if (!after.refused.empty()) {
                EXPECT_NE(after.refused.find("only used when"), std::string::npos)
                    << field.key << "=" << change.value << " is refused for another reason: " << after.refused;
                continue;
            }
            EXPECT_FALSE(same_parameters(before.params, after.params))
                << field.key << "=" << change.value << " (with " << ::testing::PrintToString(base)
                << ") trains exactly as without it: nothing reads it there, so it must be refused as unread (config.cpp, conditional_keys)";
        }
    }
}

// Export by allow-list (export.cpp, keys_mapped): every model key, set away from
// its default, either exports or is refused in a line that names it (or a key
// of the settings that read it, which the format may refuse first). A key the
// exporter does not list is refused; a value it does not name is refused.
TEST(ConfigReads, EveryModelKeyExportsOrIsRefusedByName) {
    for (const config_schema::Field& field : config_schema::fields()) {
        if (field.key.rfind("model.", 0) != 0) continue;
        const auto it = changes().find(field.key);
        ASSERT_NE(it, changes().end()) << field.key;
        const Change& change = it->second;
        if (!change.unseen.empty()) continue;
        std::vector<std::string> changed = change.reading;
        changed.push_back(field.key + "=" + change.value);
        const Outcome run = train(changed);
        if (!run.refused.empty()) continue;  // unread here: EveryModelKeyIsReadOrRefusedAsUnread checks that
        const LoadedCheckpoint in = load_checkpoint(run.checkpoint, Device::cpu);
        for (ExportFormat format : {ExportFormat::hf, ExportFormat::tl}) {
            try {
                export_model(in, format);
            } catch (const Error& e) {
                const std::string message = e.what();
                bool named = message.find(field.key) != std::string::npos;
                for (const std::string& setting : change.reading) named = named || message.find(setting.substr(0, setting.find('='))) != std::string::npos;
                EXPECT_TRUE(named) << field.key << "=" << change.value << ", --format " << export_format_choices().name(format)
                                   << ": refused without naming it: " << message;
            }
        }
    }
}

}  // namespace
}  // namespace attnlab
