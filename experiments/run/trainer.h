// The training loop of `attnlab train`: a model and a task from a Config,
// AdamW (or Adam/SGD) with warm-up and decay, per-head attention metrics and
// losses in metrics.h5, atomic checkpoints with everything an exact resume
// needs, and a summary.json at the end.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "experiments/distributed/world.h"

namespace attnlab {

struct RunSummary {
    int64_t steps = 0;
    double eval_loss = 0, eval_token_acc = 0, eval_seq_acc = 0;
    double wall_s = 0, tokens_per_s = 0, peak_rss_mb = 0;
    std::optional<int64_t> first_step_at_target;  // first eval step with token_acc >= target
};

class Trainer {
public:
    // A new run in out_dir/name (or name-2, name-3, ... when that exists: nothing
    // is overwritten). Validates everything before the folder is created.
    // With `run_dir`, exactly there instead (it must not exist: sweeps name their cells).
    // Under mpirun every rank calls it with the same config and `world`: each
    // builds the model, rank 0 alone creates and writes the folder; a failure on
    // any rank fails every rank (the lowest failing rank says why).
    static std::unique_ptr<Trainer> start(const Config& config, const std::string& run_dir = "",
                                          const World& world = single_world());
    // Throws what start() would throw for this config before it creates the run
    // folder (the config, the device, the data files, the memory estimate, the
    // model and optimiser it builds); writes nothing. A sweep checks every cell so.
    static void check_runnable(const Config& config);
    // Continues run_dir from its newest checkpoint, with its saved config.
    // Under mpirun every rank reads the checkpoint (a filesystem all ranks share);
    // rank 0 takes the run's lock and continues its logs. Any rank count resumes.
    static std::unique_ptr<Trainer> resume(const std::string& run_dir, const World& world = single_world());
    ~Trainer();

    // train.seeds: the runs of `config` at run.seed = each seed, trained side by side in
    // this process (experiments/run/trainer_members.cpp), in <out_dir>/<name> (name-2, ...
    // when taken; `group_dir` exactly, when given), member i in "<i>_run.seed=<s>" as a
    // sweep over run.seed names its cells. Each member's folder is what its own run would
    // write; each resumes alone (--resume). One process (no mpirun). Returns what run()
    // would: 0, 1 when a member stopped on a NaN/Inf (the others finish), 130 on a signal.
    static int train_members(const Config& config, const std::string& group_dir = "");

    // One run of a group that trains side by side (train_runs): a new run of `config`
    // written exactly to `dir` (which must not exist), or, without a config, the run
    // in `dir` resumed from its newest checkpoint.
    struct GroupRun {
        std::optional<Config> config;
        std::string dir;
    };
    // Runs of one config that differ only in run.seed (and their folders), each new or
    // resumed, trained side by side in this process as train.seeds trains its members,
    // `mode` being train.seeds_mode; `attnlab sweep --seeds-together` runs the cells of
    // a seed axis so. Every run is built and checked before anything is written (a
    // resumed run's metrics are cut back to its checkpoint, as any resume does). Returns
    // what train_members returns.
    static int train_runs(const std::vector<GroupRun>& runs, const std::string& mode);

    // 0: finished; 1: stopped on a NaN/Inf loss or gradient (the last good
    // checkpoint stays); 130: interrupted by SIGINT/SIGTERM after a checkpoint.
    int run();

    const std::string& run_dir() const;
    const RunSummary& summary() const;

private:
    struct State;
    static std::unique_ptr<State> build_state(const Config& config, const World& world);
    static std::filesystem::path create_run(State& state, const std::string& run_dir);
    static std::unique_ptr<State> resumed_state(const std::string& run_dir, const World& world);
    // train.seeds' members on the pool's threads, each thread stepping its own (trainer_members.cpp).
    static int members_apart(std::vector<std::unique_ptr<State>>& members);
    // The members, each with its folder and log (new or resumed), trained side by side
    // (`mode`: train.seeds_mode); `labels` start each member's progress lines, `source`
    // (train.seeds, train --runs) the line that says how many steps were stacked.
    static int side_by_side(std::vector<std::unique_ptr<State>>& members, const std::string& mode,
                            const std::vector<std::string>& labels, const char* source);
    explicit Trainer(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

}  // namespace attnlab
