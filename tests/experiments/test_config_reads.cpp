// Every model.* key of the schema (`train --keys`) walked through each feature
// that must decide about it, at the value tests/model_key_changes.toml gives it
// and at every other choice the schema lists for it:
//   training  read by the model it configures or refused where nothing reads it
//             (config.cpp's unread keys): in the tiny base run and in a run of
//             the settings that read it, a changed value either fails validation
//             as unread ("only used when ...") or changes the model's parameters
//             after two training steps (their names, shapes or values: the
//             initial draw, the forward through the loss, dropout; two layers,
//             so that what a prefix or a document changes reaches the loss).
//             (model.rel_max_distance once trained silently without model.rel_buckets.)
//   export    --format hf and tl map it or refuse it in a line naming it (export.cpp's
//             allow-lists; tests/cli/test_model_keys.py checks each accepted export's numbers);
//   stacking  train.seeds_mode = "stacked" trains each member bit for bit as its solo
//             run, or says in its fallback line that the key has no stacked form;
//   audit     every live test passes with the option modelled, or the audit refuses
//             naming the key (audit.cpp's allow-list): no PASS of an option it ignores.
// A key of the schema missing from the table fails every walk, so a new key is
// decided by each feature when it is added; a new choice of a key is walked as
// soon as the schema lists it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "experiments/analysis/audit.h"
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
    std::string unseen;                // why no pair of training runs can show it, if none can
};

// Every model.* key: a value to change it to, and settings that read it (tests/model_key_changes.toml).
const std::map<std::string, Change>& changes() {
    static const std::map<std::string, Change> table = [] {
        std::map<std::string, Change> out;
        const toml::table file = toml::parse_file(ATTNLAB_SOURCE_DIR "/tests/model_key_changes.toml");
        for (const auto& [name, entry] : *file["model"].as_table()) {
            const toml::table& t = *entry.as_table();
            Change change{t["value"].value_or(std::string()), {}, t["unseen"].value_or(std::string())};
            if (const toml::array* reading = t["reading"].as_array())
                for (const toml::node& setting : *reading) change.reading.push_back(setting.value_or(std::string()));
            out["model." + std::string(name.str())] = change;
        }
        return out;
    }();
    return table;
}

// The choices the schema lists for a key, as override text ("\"post\"", "true"):
// the quoted alternatives and true | false of its allowed values (config_schema::Field::allowed).
std::vector<std::string> choices_of(const config_schema::Field& field) {
    std::vector<std::string> out;
    for (size_t begin = 0; begin <= field.allowed.size();) {
        size_t end = field.allowed.find(" | ", begin);
        if (end == std::string::npos) end = field.allowed.size();
        const std::string part = field.allowed.substr(begin, end - begin);
        if ((part.size() >= 2 && part.front() == '"' && part.back() == '"') || part == "true" || part == "false") out.push_back(part);
        begin = end + 3;
    }
    return out;
}

// One model key at one value, with the settings that read it.
struct Setting {
    std::string key, value;
    std::vector<std::string> reading;
    std::vector<std::string> overrides() const {
        std::vector<std::string> out = reading;
        out.push_back(key + "=" + value);
        return out;
    }
    // Whether `message` names the key, or a key of the settings that read it (which a feature may refuse first).
    bool named_in(const std::string& message) const {
        bool named = message.find(key) != std::string::npos;
        for (const std::string& setting : reading) named = named || message.find(setting.substr(0, setting.find('='))) != std::string::npos;
        return named;
    }
};
std::ostream& operator<<(std::ostream& out, const Setting& s) {
    out << s.key << "=" << s.value;
    for (size_t i = 0; i < s.reading.size(); ++i) out << (i ? ", " : " (with ") << s.reading[i] << (i + 1 == s.reading.size() ? ")" : "");
    return out;
}

// The settings as one line of text, for a test's log.
std::string listed(const std::vector<Setting>& settings) {
    std::ostringstream out;
    for (size_t i = 0; i < settings.size(); ++i) out << (i ? "; " : "") << settings[i];
    return settings.empty() ? "none" : out.str();
}

// Every model key of the schema, at the table's value and at each other choice
// of the schema: what the walks below take through each feature. A key the table
// lacks (or a key of the table the schema lacks) fails the calling test.
std::vector<Setting> model_settings() {
    std::vector<Setting> out;
    const Config defaults = default_config();
    size_t known = 0;
    for (const config_schema::Field& field : config_schema::fields()) {
        if (field.key.rfind("model.", 0) != 0) continue;
        const auto it = changes().find(field.key);
        if (it == changes().end()) {
            ADD_FAILURE() << field.key << ": a model key this test does not know; add it to tests/model_key_changes.toml "
                                          "with a value and the settings that read it";
            continue;
        }
        ++known;
        out.push_back({field.key, it->second.value, it->second.reading});
        for (const std::string& choice : choices_of(field))
            if (choice != field.write(defaults) && choice != it->second.value) out.push_back({field.key, choice, it->second.reading});
    }
    EXPECT_EQ(known, changes().size()) << "tests/model_key_changes.toml lists a key the schema does not have";
    return out;
}

// The parameters after the steps of the run the overrides describe, or "" with
// the validation's message when the config is refused.
struct Outcome {
    NamedTensors params;
    std::string refused;
    std::string checkpoint;  // its last checkpoint
};

// Each config trained once in the test process: the tests below ask for the same runs.
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
        ASSERT_NE(it, changes().end()) << field.key << ": a model key this test does not know; add it to tests/model_key_changes.toml "
                                                       "with a value and the settings that read it";
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
    for (const Setting& setting : model_settings()) {
        const Outcome run = train(setting.overrides());
        if (!run.refused.empty()) continue;  // unread here: EveryModelKeyIsReadOrRefusedAsUnread checks that
        const LoadedCheckpoint in = load_checkpoint(run.checkpoint, Device::cpu);
        for (ExportFormat format : {ExportFormat::hf, ExportFormat::tl}) {
            try {
                export_model(in, format);
            } catch (const Error& e) {
                EXPECT_TRUE(setting.named_in(e.what()))
                    << setting << ", --format " << export_format_choices().name(format) << ": refused without naming it: " << e.what();
            }
        }
    }
}

// Stacked seeds by allow-list (trainer_members.cpp, keys_stacked): every model
// key, set away from its default, either trains stacked, each member bit for bit
// as its solo run, or its members run on threads after a line that names it. The
// runs log at their last step only and draw sequences of one length (recall at 3
// pairs), so their other steps stack.
TEST(ConfigReads, EveryModelKeyStacksOrIsRefusedByName) {
    const std::vector<std::string> stacking = {"train.steps=3", "train.log_every=3", "train.checkpoint_every=3",
                                               "task.min_len=3", "task.max_len=3"};
    const std::vector<int64_t> seeds = {0, 1};
    const test::TempDir temp("attnlab_stacked_keys_");
    int groups = 0;
    std::vector<Setting> stacked, on_threads;  // for the log
    for (const Setting& setting : model_settings()) {
        std::vector<std::string> overrides = stacking;
        for (const std::string& o : setting.overrides()) overrides.push_back(o);
        std::vector<Outcome> solo;
        for (const int64_t seed : seeds) {
            std::vector<std::string> alone = overrides;
            alone.push_back("run.seed=" + std::to_string(seed));
            solo.push_back(train(alone));
        }
        if (!solo.front().refused.empty()) continue;  // unread here: EveryModelKeyIsReadOrRefusedAsUnread checks that
        Config config = default_config();
        for (const std::string& o : kTiny) apply_override(config, o);
        for (const std::string& o : overrides) apply_override(config, o);
        apply_override(config, "train.seeds=[0, 1]");
        apply_override(config, "train.seeds_mode=\"stacked\"");
        try {
            validate(config);
        } catch (const ConfigError& e) {
            EXPECT_TRUE(setting.named_in(e.what())) << setting << ": train.seeds refused without naming it: " << e.what();
            continue;
        }
        const fs::path group = temp.path() / ("group" + std::to_string(groups++));
        testing::internal::CaptureStderr();
        const int status = Trainer::train_members(config, group.string());
        const std::string said = testing::internal::GetCapturedStderr();
        ASSERT_EQ(status, 0) << setting << ": " << said;
        const size_t fallback = said.find("has no stacked form yet");
        if (fallback != std::string::npos) {
            const std::string line = said.substr(said.rfind('\n', fallback) + 1, said.find('\n', fallback) - said.rfind('\n', fallback) - 1);
            EXPECT_TRUE(setting.named_in(line)) << setting << ": the members ran on threads without naming it: " << line;
            on_threads.push_back(setting);
        } else {
            EXPECT_NE(said.find("train.seeds: 2 of 3 steps stacked"), std::string::npos)
                << setting << ": expected two stacked steps (the third logs): " << said;
            stacked.push_back(setting);
        }
        std::vector<fs::path> members;  // "0_run.seed=0", "1_run.seed=1"
        for (const fs::directory_entry& entry : fs::directory_iterator(group)) members.push_back(entry.path());
        std::sort(members.begin(), members.end());
        ASSERT_EQ(members.size(), seeds.size()) << setting;
        for (size_t m = 0; m < seeds.size(); ++m) {
            const NamedTensors params = read_checkpoint(list_checkpoints((members[m] / "checkpoints").string()).back()).params;
            EXPECT_TRUE(same_parameters(params, solo[m].params))
                << setting << ": member " << m << " (run.seed=" << seeds[m] << ") is not its solo run, bit for bit";
        }
    }
    std::printf("stacked, each member its solo run: %zu settings; on threads, named: %s\n", stacked.size(), listed(on_threads).c_str());
}

// The audit by allow-list (audit.cpp, keys_audited): every model key, set away
// from its default, either audits with every live test PASS (the option modelled
// by the dense reference and the live tests) or is refused in a line naming it.
// A FAIL here is an option the audit gets wrong, or a model the option breaks.
TEST(ConfigReads, EveryModelKeyAuditsOrIsRefusedByName) {
    AuditOptions options;
    options.batches = 2;
    options.timing = false;
    size_t passed = 0;
    std::vector<Setting> refused;  // for the log
    for (const Setting& setting : model_settings()) {
        const Outcome run = train(setting.overrides());
        if (!run.refused.empty()) continue;  // unread here: EveryModelKeyIsReadOrRefusedAsUnread checks that
        const LoadedCheckpoint in = load_checkpoint(run.checkpoint, Device::cpu);
        try {
            const AuditRecord record = audit(*in.loaded.model, in.config, options);
            for (const LiveTest& test : record.tests)
                EXPECT_TRUE(test.pass) << setting << ": audit FAIL: " << test.name << ": " << test.figure_name << " " << test.figure
                                       << " (tolerance " << test.tolerance << "); " << test.detail;
            passed += record.passed();
        } catch (const Error& e) {
            EXPECT_TRUE(setting.named_in(e.what())) << setting << ": the audit refused without naming it: " << e.what();
            refused.push_back(setting);
        }
    }
    std::printf("audit PASS: %zu settings; refused, named: %s\n", passed, listed(refused).c_str());
}

}  // namespace
}  // namespace attnlab
