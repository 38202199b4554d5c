// Configs: defaults validate, a full file lands in the right fields, to_toml
// reads back equal, overrides of every type. Bad input of every kind (one line
// naming the key and, for a file, path:line:column) is in test_config_errors.cpp.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "config_files_test.h"
#include "experiments/config/config.h"
#include "experiments/config/memory_estimate.h"

namespace attnlab::config_test {
namespace {

const char* full_toml = R"([run]
name = "recall-big"
seed = 7
out_dir = "/tmp/runs"

[task]
name = "translate"
vocab = 40
min_len = 2
max_len = 6

[model]
kind = "encoder-decoder"
layers = 3
width = 96
heads = 6
kv_heads = 2
head_width = 0
ffn = 48
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
    EXPECT_EQ(c.model.kind, "encoder-decoder");
    EXPECT_EQ(c.model.layers, 3);
    EXPECT_EQ(c.model.width, 96);
    EXPECT_EQ(c.model.heads, 6);
    EXPECT_EQ(c.model.kv_heads, 2);
    EXPECT_EQ(c.model.head_width, 0);
    EXPECT_EQ(c.model.ffn, 48);
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

// The keys that the full file's settings do not read (recall's queries, adam's
// betas and eps), under settings that read them.
TEST_F(ConfigFiles, KeysOfOtherSettingsLand) {
    const Config c = load_config(write("adam.toml", "[task]\nname = \"recall\"\nqueries = 2\n[model]\npositional = \"rotary\"\n"
                                                    "rotary_base = 500.0\n[optim]\nname = \"adam\"\nbetas = [0.8, 0.95]\neps = 1e-6\n"));
    EXPECT_EQ(c.task.queries, 2);
    EXPECT_EQ(c.model.rotary_base, 500.0);
    EXPECT_EQ(c.optim.betas, (std::array<double, 2>{0.8, 0.95}));
    EXPECT_EQ(c.optim.eps, 1e-6);
}

// A text task holds its file's characters as int32 tokens while it trains.
TEST_F(ConfigFiles, TheMemoryEstimateCountsATextTasksTokens) {
    Config c;
    c.task.name = "text";
    c.task.path = write("a.txt", std::string(1000, 'a'));
    const double with_file = estimate_training_memory(c, 64).data;
    c.task.path = (dir_ / "missing.txt").string();
    EXPECT_EQ(with_file - estimate_training_memory(c, 64).data, 4000.0);
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

}  // namespace
}  // namespace attnlab::config_test
