// Configs: defaults validate, a full file lands in the right fields, to_toml
// reads back equal, overrides of every type, and bad input of every kind gives
// exactly one line naming the key and, for a file, path:line:column.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "experiments/config/config.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// A temporary folder per test for the TOML files it writes.
class ConfigFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("attnlab_test_config_" + std::to_string(getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        path_ = (dir_ / "bad.toml").string();
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& text) const {
        const std::string path = (dir_ / name).string();
        std::ofstream(path) << text;
        return path;
    }

    // The message of the ConfigError that loading `text` throws ("" and a failure if none).
    std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
        write("bad.toml", text);
        try {
            load_config(path_, overrides);
        } catch (const ConfigError& e) {
            return e.what();
        }
        ADD_FAILURE() << "no ConfigError for:\n" << text;
        return "";
    }

    fs::path dir_;
    std::string path_;  // load_error's file
};

std::string override_error(const std::string& assignment) {
    Config config;
    try {
        apply_override(config, assignment);
    } catch (const ConfigError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no ConfigError for override " << assignment;
    return "";
}

std::string validate_error(const Config& config) {
    try {
        validate(config);
    } catch (const ConfigError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no ConfigError from validate";
    return "";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

const char* full_toml = R"([run]
name = "recall-big"
seed = 7
out_dir = "/tmp/runs"

[task]
name = "translate"
vocab = 40
min_len = 2
max_len = 6
queries = 1

[model]
kind = "encoder-decoder"
layers = 3
width = 96
heads = 6
kv_heads = 2
head_width = 0
ffn = 0
norm = "post"
positional = "sinusoidal"
scale = 0.125
masked_rows = "zero"
dropout = 0.1
attn_dropout = 0.05
bias = false
activation = "relu"
max_len = 32

[train]
steps = 500
batch = 16
log_every = 10
eval_every = 100
eval_batches = 2
checkpoint_every = 250
keep_checkpoints = 0
device = "cuda"
threads = 2
target_accuracy = 0.95

[optim]
name = "sgd"
lr = 0.1
weight_decay = 0
betas = [0.8, 0.95]
eps = 1e-6
momentum = 0.5
nesterov = true
warmup = 0
schedule = "linear"
clip = 0

[sweep]
"run.seed" = [0, 1]
"model.heads" = [2, 4]
model.scale = ["sqrt", 0.25]
)";

TEST(Config, DefaultsAreTheDefaultExperimentAndValidate) {
    const Config c = default_config();
    EXPECT_EQ(c, Config{});
    EXPECT_NO_THROW(validate(c));
    EXPECT_EQ(c.run.name, "default");
    EXPECT_EQ(c.task.name, "recall");
    EXPECT_EQ(c.task.vocab, 32);
    EXPECT_EQ(c.model.kind, "decoder");
    EXPECT_EQ(c.model.scale, "sqrt");
    EXPECT_EQ(c.train.steps, 1500);
    EXPECT_EQ(c.optim.name, "adamw");
    EXPECT_EQ(c.optim.betas[1], 0.999);
    EXPECT_TRUE(c.sweep.empty());
    EXPECT_EQ(sweep_cells(c), std::vector<std::vector<std::string>>(1));
    const TaskConfig task = task_config(c);
    EXPECT_EQ(task.name, "recall");
    EXPECT_EQ(task.max_len, 6u);
    EXPECT_EQ(task.queries, 4u);
}

TEST_F(ConfigFiles, FullFileLandsInEveryField) {
    const Config c = load_config(write("full.toml", full_toml));
    EXPECT_EQ(c.run.name, "recall-big");
    EXPECT_EQ(c.run.seed, 7);
    EXPECT_EQ(c.run.out_dir, "/tmp/runs");
    EXPECT_EQ(c.task.name, "translate");
    EXPECT_EQ(c.task.vocab, 40);
    EXPECT_EQ(c.task.min_len, 2);
    EXPECT_EQ(c.task.max_len, 6);
    EXPECT_EQ(c.task.queries, 1);
    EXPECT_EQ(c.model.kind, "encoder-decoder");
    EXPECT_EQ(c.model.layers, 3);
    EXPECT_EQ(c.model.width, 96);
    EXPECT_EQ(c.model.heads, 6);
    EXPECT_EQ(c.model.kv_heads, 2);
    EXPECT_EQ(c.model.head_width, 0);
    EXPECT_EQ(c.model.ffn, 0);
    EXPECT_EQ(c.model.norm, "post");
    EXPECT_EQ(c.model.positional, "sinusoidal");
    EXPECT_EQ(c.model.scale, "0.125");
    EXPECT_EQ(c.model.masked_rows, "zero");
    EXPECT_EQ(c.model.dropout, 0.1);
    EXPECT_EQ(c.model.attn_dropout, 0.05);
    EXPECT_FALSE(c.model.bias);
    EXPECT_EQ(c.model.activation, "relu");
    EXPECT_EQ(c.model.max_len, 32);
    EXPECT_EQ(c.train.steps, 500);
    EXPECT_EQ(c.train.batch, 16);
    EXPECT_EQ(c.train.log_every, 10);
    EXPECT_EQ(c.train.eval_every, 100);
    EXPECT_EQ(c.train.eval_batches, 2);
    EXPECT_EQ(c.train.checkpoint_every, 250);
    EXPECT_EQ(c.train.keep_checkpoints, 0);
    EXPECT_EQ(c.train.device, "cuda");
    EXPECT_EQ(c.train.threads, 2);
    EXPECT_EQ(c.train.target_accuracy, 0.95);
    EXPECT_EQ(c.optim.name, "sgd");
    EXPECT_EQ(c.optim.lr, 0.1);
    EXPECT_EQ(c.optim.weight_decay, 0.0);  // an integer in the file, for a float key
    EXPECT_EQ(c.optim.betas, (std::array<double, 2>{0.8, 0.95}));
    EXPECT_EQ(c.optim.eps, 1e-6);
    EXPECT_EQ(c.optim.momentum, 0.5);
    EXPECT_TRUE(c.optim.nesterov);
    EXPECT_EQ(c.optim.warmup, 0);
    EXPECT_EQ(c.optim.schedule, "linear");
    EXPECT_EQ(c.optim.clip, 0.0);
    // sweep axes in file order (not toml++'s sorted order), values as canonical TOML
    ASSERT_EQ(c.sweep.size(), 3u);
    EXPECT_EQ(c.sweep[0], (SweepAxis{"run.seed", {"0", "1"}}));
    EXPECT_EQ(c.sweep[1], (SweepAxis{"model.heads", {"2", "4"}}));
    EXPECT_EQ(c.sweep[2], (SweepAxis{"model.scale", {"\"sqrt\"", "0.25"}}));
    const auto cells = sweep_cells(c);
    ASSERT_EQ(cells.size(), 8u);
    EXPECT_EQ(cells[0], (std::vector<std::string>{"run.seed=0", "model.heads=2", "model.scale=\"sqrt\""}));
    EXPECT_EQ(cells[1], (std::vector<std::string>{"run.seed=0", "model.heads=2", "model.scale=0.25"}));
    EXPECT_EQ(cells[7], (std::vector<std::string>{"run.seed=1", "model.heads=4", "model.scale=0.25"}));
    Config cell = c;
    cell.sweep.clear();
    for (const auto& assignment : cells[7]) apply_override(cell, assignment);
    EXPECT_EQ(cell.model.heads, 4);
    EXPECT_EQ(cell.model.scale, "0.25");
}

TEST_F(ConfigFiles, ToTomlReadsBackEqual) {
    Config odd;  // strings that need escaping, floats that print long in decimal
    odd.run.out_dir = "dir with \"quotes\", \\, # and \u00e9";  // (control characters are refused: below)
    odd.optim.lr = 0.1 + 0.2;
    odd.optim.eps = 1e-8;
    odd.optim.betas = {0.9, 0.98};
    odd.model.scale = "0.1";
    odd.train.target_accuracy = 1.0;
    odd.sweep = {{"optim.betas", {"[0.9, 0.98]", "[0.8, 0.99]"}}, {"model.norm", {"\"pre\"", "\"post\""}}};
    for (const Config& config : {default_config(), load_config(write("full.toml", full_toml)), odd}) {
        const std::string text = to_toml(config);
        const Config back = load_config(write("resolved.toml", text));
        EXPECT_EQ(back, config) << text;
        EXPECT_EQ(to_toml(back), text);
    }
    const std::string text = to_toml(default_config());
    EXPECT_NE(text.find("[model]\nkind = \"decoder\"\n"), std::string::npos) << text;
    EXPECT_NE(text.find("betas = [0.9, 0.999]\n"), std::string::npos) << text;
    EXPECT_NE(text.find("lr = 0.001\n"), std::string::npos) << text;
    EXPECT_NE(text.find("clip = 1.0\n"), std::string::npos) << text;
}

TEST(Config, StringsRefuseControlCharacters) {
    // A NUL or a newline would name another file than the one shown (a NUL once
    // made the free-name loop spin forever).
    for (const std::string section_key : {"run]\nname", "run]\nout_dir", "task]\npath", "model]\nnorm"}) {
        for (const std::string escaped : {"\\u0000", "\\n", "\\u007f", "\\t"}) {
            const std::string text = "[" + section_key + " = \"a" + escaped + "b\"\n";
            try {
                parse_config(text, "x.toml");
                ADD_FAILURE() << "accepted " << text;
            } catch (const ConfigError& e) {
                EXPECT_NE(std::string(e.what()).find(": must not hold control characters, got U+00"), std::string::npos) << e.what();
            }
        }
    }
}

TEST(Config, FloatsMustSurviveFloat32) {
    Config c;
    EXPECT_THROW(apply_override(c, "optim.eps=1e-320"), ConfigError);   // 0 in float32
    EXPECT_THROW(apply_override(c, "model.scale=1e300"), ConfigError);  // inf in float32
    EXPECT_THROW(apply_override(c, "optim.lr=1e-39"), ConfigError);     // subnormal
    apply_override(c, "optim.eps=1.2e-38");                              // the smallest normal float32 magnitude
    apply_override(c, "optim.weight_decay=0");
    EXPECT_EQ(c.optim.eps, 1.2e-38);
}

TEST(Config, SweepListsRefuseRepeatsAndKeysSweptTwice) {
    EXPECT_THROW(parse_config("[sweep]\n\"model.heads\" = [2, 4, 2]\n", "x.toml"), ConfigError);
    EXPECT_THROW(parse_config("[sweep]\n\"model.scale\" = [\"sqrt\", \"sqrt\"]\n", "x.toml"), ConfigError);
    EXPECT_THROW(parse_config("[sweep]\n\"optim.lr\" = [0.5, 5e-1]\n", "x.toml"), ConfigError);  // one value, two spellings
    EXPECT_THROW(parse_config("[sweep]\n\"model.heads\" = [1, 2]\nmodel.heads = [4]\n", "x.toml"), ConfigError);
    try {
        parse_config("[sweep]\n\"model.heads\" = [2, 4, 2]\n", "x.toml");
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), "x.toml:2:24: sweep.\"model.heads\"[2]: 2 repeats element 0 (each cell would run twice)");
    }
    EXPECT_EQ(parse_config("[sweep]\n\"model.heads\" = [1, 2]\n", "x.toml").sweep.size(), 1u);
}

TEST(Config, DifferingKeysNameOldAndNewValues) {
    Config a, b;
    EXPECT_TRUE(differing_keys(a, b).empty());
    b.model.heads = 8;
    b.train.steps = 3000;
    EXPECT_EQ(differing_keys(a, b), (std::vector<std::string>{"model.heads (8, was 4)", "train.steps (3000, was 1500)"}));
}

TEST(Config, OverridesOfEveryType) {
    Config c;
    apply_override(c, "model.heads=8");                 // integer
    apply_override(c, "optim.lr = 0.01");               // float, spaces around '='
    apply_override(c, "optim.clip=2");                  // an integer for a float key
    apply_override(c, "model.bias=false");              // boolean
    apply_override(c, "model.norm=post");               // choice, bare
    apply_override(c, "train.device=\"cuda\"");         // choice, quoted
    apply_override(c, "run.name=2024");                 // string key: bare text even if TOML reads a number
    apply_override(c, "task.path=data/tokens.h5");      // string with '/' and '.'
    apply_override(c, "optim.betas=[0.9,0.98]");        // array
    EXPECT_EQ(c.model.heads, 8);
    EXPECT_EQ(c.optim.lr, 0.01);
    EXPECT_EQ(c.optim.clip, 2.0);
    EXPECT_FALSE(c.model.bias);
    EXPECT_EQ(c.model.norm, "post");
    EXPECT_EQ(c.train.device, "cuda");
    EXPECT_EQ(c.run.name, "2024");
    EXPECT_EQ(c.task.path, "data/tokens.h5");
    EXPECT_EQ(c.optim.betas, (std::array<double, 2>{0.9, 0.98}));
    // scale: a name (bare or quoted) or a positive number, kept as its shortest text
    apply_override(c, "model.scale=linear");
    EXPECT_EQ(c.model.scale, "linear");
    apply_override(c, "model.scale=\"none\"");
    EXPECT_EQ(c.model.scale, "none");
    apply_override(c, "model.scale=0.1250");
    EXPECT_EQ(c.model.scale, "0.125");
    apply_override(c, "model.scale=2");
    EXPECT_EQ(c.model.scale, "2");
    // a failed override leaves the config as it was
    EXPECT_THROW(apply_override(c, "optim.betas=[0.5, \"x\"]"), ConfigError);
    EXPECT_EQ(c.optim.betas, (std::array<double, 2>{0.9, 0.98}));
}

TEST_F(ConfigFiles, OverridesApplyBeforeTheCrossFieldRules) {
    // the file alone breaks a rule (66 % 4), the override fixes it
    const std::string path = write("width.toml", "[model]\nwidth = 66\nheads = 4\n");
    const Config c = load_config(path, {"model.width=64", "train.steps=10"});
    EXPECT_EQ(c.model.width, 64);
    EXPECT_EQ(c.train.steps, 10);
    // a key set by an override has no position in the file
    EXPECT_EQ(load_error("[train]\nsteps = 5\n", {"model.width=66"}),
              path_ + ": model.width: 66 is not divisible by model.heads = 4 (change one, or set model.head_width)");
}

TEST(Config, DescribeKeysListsEveryKey) {
    const std::string help = describe_keys();
    for (const char* key : {"run.name", "task.queries", "model.masked_rows", "train.target_accuracy", "optim.betas", "optim.clip"})
        EXPECT_NE(help.find(key), std::string::npos) << key;
    EXPECT_NE(help.find("\"pre\" | \"post\" | \"none\""), std::string::npos) << help;
    EXPECT_NE(help.find("integer >= 1"), std::string::npos) << help;
}

// Bad files: one line each, path:line:column, the key.

TEST_F(ConfigFiles, SyntaxErrorGivesPosition) {
    const std::string e = load_error("[model]\nheads = \n");
    EXPECT_TRUE(starts_with(e, path_ + ":2:9: TOML syntax error: ")) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(ConfigFiles, UnknownKeysSuggestTheNearest) {
    EXPECT_EQ(load_error("[model]\nwidth = 64\nhead = 4\n"), path_ + ":3:1: unknown key model.head (did you mean model.heads?)");
    EXPECT_EQ(load_error("[modle]\nheads = 4\n"), path_ + ":2:1: unknown key modle.heads (did you mean model.heads?)");
    EXPECT_EQ(load_error("[model]\nsteps = 10\n"), path_ + ":2:1: unknown key model.steps (did you mean train.steps?)");
    EXPECT_EQ(load_error("steps = 10\n"), path_ + ":1:1: unknown key steps (did you mean train.steps?)");
    EXPECT_EQ(load_error("[trian]\n"), path_ + ":1:2: unknown section trian (did you mean train?)");
    EXPECT_EQ(load_error("[model]\nxyzzy = 1\n"),
              path_ + ":2:1: unknown key model.xyzzy (model keys: kind, layers, width, heads, kv_heads, head_width, ffn, norm, "
                      "positional, scale, masked_rows, dropout, attn_dropout, bias, activation, max_len)");
    // the first error in file order, not in toml++'s sorted order
    EXPECT_EQ(load_error("[run]\nzzz = 1\naaa = 2\n"), path_ + ":2:1: unknown key run.zzz (run keys: name, seed, out_dir)");
}

TEST_F(ConfigFiles, WrongTypes) {
    EXPECT_EQ(load_error("[model]\nheads = \"four\"\n"), path_ + ":2:9: model.heads: expected an integer, got a string");
    EXPECT_EQ(load_error("[model]\nheads = 4.0\n"), path_ + ":2:9: model.heads: expected an integer, got a float");
    EXPECT_EQ(load_error("[model]\nbias = 1\n"), path_ + ":2:8: model.bias: expected a boolean, got an integer");
    EXPECT_EQ(load_error("[optim]\nlr = \"fast\"\n"), path_ + ":2:6: optim.lr: expected a float, got a string");
    EXPECT_EQ(load_error("[optim]\nbetas = [0.9, 0.98, 0.999]\n"), path_ + ":2:9: optim.betas: expected an array of 2 floats, got an array of 3");
    EXPECT_EQ(load_error("[optim]\nbetas = [0.9, \"x\"]\n"), path_ + ":2:9: optim.betas: expected an array of 2 floats, got a string at index 1");
    EXPECT_EQ(load_error("[optim]\nbetas = 0.9\n"), path_ + ":2:9: optim.betas: expected an array of 2 floats, got a float");
    EXPECT_EQ(load_error("model = 3\n"), path_ + ":1:1: model: expected a table, got an integer");
}

TEST_F(ConfigFiles, OutOfRangeValues) {
    EXPECT_EQ(load_error("[train]\nsteps = 0\n"), path_ + ":2:9: train.steps: must be >= 1, got 0");
    EXPECT_EQ(load_error("[train]\nbatch = -4\n"), path_ + ":2:9: train.batch: must be >= 1, got -4");
    EXPECT_EQ(load_error("[train]\nlog_every = 0\n"), path_ + ":2:13: train.log_every: must be >= 1, got 0");
    EXPECT_EQ(load_error("[model]\nwidth = 0\n"), path_ + ":2:9: model.width: must be >= 1, got 0");
    EXPECT_EQ(load_error("[model]\ndropout = 1.0\n"), path_ + ":2:11: model.dropout: must be in [0, 1), got 1");
    EXPECT_EQ(load_error("[optim]\nlr = -0.001\n"), path_ + ":2:6: optim.lr: must be > 0, got -0.001");
    EXPECT_EQ(load_error("[optim]\nbetas = [0.9, 1.0]\n"), path_ + ":2:9: optim.betas: element 1 must be in [0, 1), got 1");
    EXPECT_EQ(load_error("[task]\nvocab = 4\n"), path_ + ":2:9: task.vocab: must be in [5, 16777216], got 4");
    EXPECT_EQ(load_error("[model]\nnorm = \"middle\"\n"),
              path_ + ":2:8: model.norm: must be one of \"pre\", \"post\", \"none\", got \"middle\"");
    EXPECT_EQ(load_error("[model]\nscale = -2\n"),
              path_ + ":2:9: model.scale: must be \"sqrt\", \"none\", \"linear\" or a positive number, got \"-2\"");
    EXPECT_EQ(load_error("[run]\nname = \"a/b\"\n"), path_ + ":2:8: run.name: must be a folder name (not empty, no '/'), got \"a/b\"");
}

TEST_F(ConfigFiles, CrossFieldRules) {
    EXPECT_EQ(load_error("[task]\nname = \"copy\"\nmin_len = 9\nmax_len = 8\n"),
              path_ + ":3:11: task.min_len: 9 is greater than task.max_len = 8");
    EXPECT_EQ(load_error("[model]\nwidth = 66\nheads = 4\n"),
              path_ + ":2:9: model.width: 66 is not divisible by model.heads = 4 (change one, or set model.head_width)");
    // width left at its default: the position is that of the key the file does set
    EXPECT_EQ(load_error("[model]\nheads = 3\n"),
              path_ + ":2:9: model.width: 64 is not divisible by model.heads = 3 (change one, or set model.head_width)");
    EXPECT_EQ(load_error("[model]\nheads = 4\nkv_heads = 3\n"), path_ + ":3:12: model.kv_heads: 3 does not divide model.heads = 4");
    EXPECT_EQ(load_error("[task]\nname = \"translate\"\n"),
              path_ + ":2:8: model.kind: task.name = \"translate\" needs \"encoder-decoder\", got \"decoder\"");
    EXPECT_EQ(load_error("[task]\nname = \"copy\"\n[model]\nkind = \"encoder-decoder\"\n"),
              path_ + ":4:8: model.kind: task.name = \"copy\" needs \"decoder\", got \"encoder-decoder\"");
    EXPECT_EQ(load_error("[task]\nname = \"file\"\n"), path_ + ":2:8: task.path: required when task.name = \"file\"");
    EXPECT_EQ(load_error("[task]\npath = \"x.h5\"\n"), path_ + ":2:8: task.path: only used when task.name = \"file\" (task.name = \"recall\")");
    // recall: 20 tokens = 6 pairs, SEP, 4 queries with answers, minus the last
    EXPECT_EQ(load_error("[model]\nmax_len = 16\n"),
              path_ + ":2:11: model.max_len: 16 is shorter than the longest sequence of task \"recall\" (20 tokens; 0 derives it)");
    // the task generator's own check, rethrown with the task keys
    EXPECT_EQ(load_error("[task]\nvocab = 14\n"),
              path_ + ":1:1: task.vocab = 14, task.min_len = 3, task.max_len = 6, task.queries = 4: "
                      "recall needs distinct keys: max_len 6 pairs but only 5 key tokens in vocab 14");
    EXPECT_EQ(load_error("[optim]\nnesterov = true\n"),
              path_ + ":2:12: optim.nesterov: needs optim.name = \"sgd\" and optim.momentum > 0 (got \"adamw\", 0.9)");
}

TEST_F(ConfigFiles, BadSweeps) {
    EXPECT_EQ(load_error("[sweep]\n\"model.head\" = [1, 2]\n"), path_ + ":2:1: unknown sweep key model.head (did you mean model.heads?)");
    EXPECT_EQ(load_error("[sweep]\n\"model.heads\" = [1, \"two\"]\n"),
              path_ + ":2:21: sweep.\"model.heads\"[1]: expected an integer, got a string");
    EXPECT_EQ(load_error("[sweep]\n\"model.heads\" = []\n"),
              path_ + ":2:17: sweep.\"model.heads\": expected a non-empty array of values, got an empty array");
    EXPECT_EQ(load_error("[sweep]\n\"optim.betas\" = [0.9, 0.95]\n"),
              path_ + ":2:18: sweep.\"optim.betas\"[0]: expected an array of 2 floats, got a float");
    // every cell is validated before anything runs
    EXPECT_EQ(load_error("[sweep]\n\"model.heads\" = [4, 3]\n"),
              path_ + ":1:1: sweep cell model.heads=3: model.width: 64 is not divisible by model.heads = 3 "
                      "(change one, or set model.head_width)");
}

TEST_F(ConfigFiles, MissingFile) {
    const std::string path = (dir_ / "nope.toml").string();
    try {
        load_config(path);
        ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), path + ": no such config file");
    }
}

TEST(Config, BadOverrides) {
    EXPECT_EQ(override_error("model.heads=abc"), "override model.heads=abc: expected an integer, got a string");
    EXPECT_EQ(override_error("model.head=8"), "override model.head=8: unknown key model.head (did you mean model.heads?)");
    EXPECT_EQ(override_error("model.heads"), "override model.heads: expected key=value (e.g. model.heads=8)");
    EXPECT_EQ(override_error("model.norm=mid"), "override model.norm=mid: must be one of \"pre\", \"post\", \"none\", got \"mid\"");
    EXPECT_EQ(override_error("train.steps=0"), "override train.steps=0: must be >= 1, got 0");
    EXPECT_EQ(override_error("model.scale=-1"),
              "override model.scale=-1: must be \"sqrt\", \"none\", \"linear\" or a positive number, got \"-1\"");
    EXPECT_EQ(override_error("optim.betas=[0.9]"), "override optim.betas=[0.9]: expected an array of 2 floats, got an array of 1");
    EXPECT_TRUE(starts_with(override_error("optim.betas=[0.9,"), "override optim.betas=[0.9,: TOML syntax error: "));
}

TEST(Config, ValidateNamesTheKey) {
    Config c;
    c.model.heads = 0;
    EXPECT_EQ(validate_error(c), "model.heads: must be >= 1, got 0");
    c = Config{};
    c.model.head_width = 16;  // an explicit d_h lifts the divisibility rule
    c.model.width = 66;
    EXPECT_NO_THROW(validate(c));
    c = Config{};
    c.sweep = {{"model.hedas", {"1"}}};
    EXPECT_EQ(validate_error(c), "sweep: unknown key model.hedas (did you mean model.heads?)");
    c.sweep = {{"model.heads", {}}};
    EXPECT_EQ(validate_error(c), "sweep.\"model.heads\": needs at least one value");
    c = Config{};
    c.task.name = "file";
    c.task.path = "tokens.h5";
    EXPECT_NO_THROW(validate(c));  // the file's lengths are checked when it is read
}

}  // namespace
}  // namespace attnlab
