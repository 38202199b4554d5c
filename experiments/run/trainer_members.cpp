// train.seeds (Trainer::train_members): the runs of one config at several seeds,
// in one process, step by step side by side.
//
// Each member is a whole run (Trainer::State) of the config at run.seed = s: its
// data streams, model, optimiser, logs, evaluations and checkpoints are what
// `attnlab train` builds at that seed, in a folder of its own. The members share
// the process in one of two ways (train.seeds_mode):
//   threads  each of the pool's threads trains its own members to the end, a
//            step of each in turn, their ops serial there: what a solo run
//            computes at one thread, op for op. No thread waits for another
//            between steps; a member's files are written one member at a time
//            (State::files) while the other threads step. On the device the
//            members take turns;
//   stacked  a stacked model (Module::stack_members) holds the members'
//            parameters along a leading axis and reads their batches side by
//            side, each member's block through the GEMMs and reductions of its
//            solo run at its solo sizes (autograd/ops.h); its gradients go back
//            to the members (MemberRows), which clip and update as alone. Steps
//            that log, and steps whose batches differ in padded width, run as in
//            threads. Every member's loss is one op (cross_entropy_members). On
//            the device the members share each kernel of the pass (the GEMMs
//            batched over them), the members' values go in and their gradients
//            out in one launch each way, their losses and gradient norms come
//            back in one copy each (clip_grad_norms), and their clipping, AdamW
//            updates and zeroing are one launch each (step_together, zero_grads).
// On the cpu a member's files are its solo run's, bit for bit (tests/cli/test_seeds.py);
// on the device, stacked, bit for bit on the host loops and the emulation, and to
// float32 rounding on a GPU (cuBLAS may take other kernels for batched GEMMs, and
// the embedding's scatter-add is atomic): DeviceTrainer.StackedSeedsShareEachPassAndTrainAsTheirSoloRuns.
#include "experiments/run/trainer.h"
#include "experiments/run/trainer_state.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

#include "autograd/cpu/threads.h"
#include "autograd/member_rows.h"
#include "autograd/ops.h"
#include "experiments/run/load_checkpoint.h"
#include "experiments/files/run_files.h"
#include "optim/optimizer.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

// The model.* keys whose stacked form is written: every layer that reads them
// takes the members' leading axis (Module::stack_members), so that a stacked step
// is each member's solo step, bit for bit (model.kind and the dropouts are
// listed, their values decided below). A key not listed, set away from its default, runs the
// members on threads until its stacked form is written: the learned attention
// variants (model.sinks, model.rel_buckets), and any key added to the schema later
// (tests/experiments/test_config_reads.cpp walks every model key through stacking).
const std::set<std::string>& keys_stacked() {
    static const std::set<std::string> keys = {
        "model.kind", "model.layers", "model.width", "model.heads", "model.kv_heads", "model.head_width", "model.ffn",
        "model.norm", "model.norm_type", "model.positional", "model.rotary_base", "model.rotary_dims", "model.scale",
        "model.masked_rows", "model.window", "model.prefix_lm", "model.documents", "model.softcap", "model.dropout",
        "model.attn_dropout", "model.bias", "model.ffn_bias", "model.norm_bias", "model.norm_eps", "model.parallel",
        "model.head_bias", "model.init", "model.tie_embeddings", "model.activation", "model.max_len", "model.ablate_heads"};
    return keys;
}


// Why the members cannot share a stacked model ("" when they can): the settings
// whose stacked form is not written, by allow-list. Their members run on threads instead.
std::string unstackable(const Config& c) {
    const Config::Model& m = c.model;
    if (m.kind != "decoder") return "model.kind = \"" + m.kind + "\"";
    if (c.train.reduce != "fast") return "train.reduce = \"" + c.train.reduce + "\"";
    if (m.dropout > 0 || m.attn_dropout > 0) return "dropout (model.dropout, model.attn_dropout)";
    if (!one_of(m.norm, {"pre", "post", "none"})) return "model.norm = \"" + m.norm + "\"";
    if (m.norm != "none" && !one_of(m.norm_type, {"layernorm", "rmsnorm"})) return "model.norm_type = \"" + m.norm_type + "\"";
    if (!one_of(m.positional, {"learned", "sinusoidal", "none", "rotary", "alibi"})) return "model.positional = \"" + m.positional + "\"";
    if (!one_of(m.activation, {"gelu", "gelu_tanh", "relu"})) return "model.activation = \"" + m.activation + "\"";
    return first_unlisted_model_key(c, keys_stacked());
}

// The members' batches side by side: member m's rows at [m B, (m + 1) B). All of
// one batch size and padded width (decoder tasks: no source).
Batch side_by_side(const std::vector<const Batch*>& batches) {
    Batch out;
    const size_t B = batches.front()->targets.shape[0], T = batches.front()->targets.shape[1], K = batches.size();
    out.inputs.shape = out.targets.shape = out.loss_mask.shape = {K * B, T};
    for (const Batch* b : batches) {
        out.inputs.values.insert(out.inputs.values.end(), b->inputs.values.begin(), b->inputs.values.end());
        out.targets.values.insert(out.targets.values.end(), b->targets.values.begin(), b->targets.values.end());
        out.loss_mask.values.insert(out.loss_mask.values.end(), b->loss_mask.values.begin(), b->loss_mask.values.end());
        out.lengths.insert(out.lengths.end(), b->lengths.begin(), b->lengths.end());
    }
    return out;
}

// The stacked model: the members' parameters copied into its rows before each
// pass, each member's gradient copied out after it.
class StackedMembers {
public:
    // `config` a member's (its resolved max_len), `trained` the task's longest training sequence.
    StackedMembers(const Config& config, size_t trained, const std::vector<const Module*>& members) {
        for (const Module* m : members) own_.push_back(m->named_parameters());  // handles: they follow every update
        Rng unused(0, 0);  // every value is overwritten by the members' before a pass
        model_ = std::make_unique<TaskModel>(config, trained, unused, nullptr);
        model_->module().stack_members(members.size());
        if (config.train.device == "cuda") model_->module().to(Device::cuda);  // stacked on the cpu, then moved
        params_ = model_->module().named_parameters();
        const NamedTensors& own = own_.front();
        for (size_t i = 0; i < params_.size() && reason_.empty(); ++i) {
            const std::string& name = params_[i].first;
            Shape row = params_[i].second.shape();
            row.erase(row.begin());
            if (i >= own.size() || own[i].first != name || own[i].second.shape() != row) reason_ = "parameter " + name + "'s shape";
            else if (name.ends_with(".sink") || name.ends_with(".rel_bias")) reason_ = "the learned attention variant " + name;
        }
        if (params_.size() != own.size() && reason_.empty()) reason_ = "the parameter list";
        if (reason_.empty()) rows_ = std::make_unique<MemberRows>(params_, own_);
    }
    const std::string& reason() const { return reason_; }

    // One forward and backward of every member's batch (each with a counted position,
    // all of one shape): their losses; their gradients added to theirs.
    std::vector<double> step(const std::vector<const Batch*>& batches) {
        zero_grad(params_);  // the last pass's gradients gone (on the device: their homes zeroed, one memset a run)
        rows_->set_values();
        const Tensor logits = model_->forward_counted(side_by_side(batches), nullptr);  // (N, V), member by member
        Indices targets({0}, {});
        std::vector<size_t> rows;  // each member's counted positions
        for (const Batch* b : batches) {
            const Indices own = counted_targets(*b);
            targets.values.insert(targets.values.end(), own.values.begin(), own.values.end());
            rows.push_back(own.values.size());
        }
        targets.shape = {targets.values.size()};
        const Tensor losses = cross_entropy_members(logits, targets, rows);  // (K): each member's mean, as alone
        sum(losses).backward();  // each member's loss seeded with 1, as its own backward would be
        rows_->add_grads();
        return losses.values();  // one copy from the device for every member
    }

private:
    std::vector<NamedTensors> own_;  // each member's parameters, in the stacked model's order
    std::unique_ptr<TaskModel> model_;
    NamedTensors params_;
    std::unique_ptr<MemberRows> rows_;  // the members' values in, their gradients out
    std::string reason_;
};

// Whether the members' batches can go through the stacked model together: one
// padded width, and a counted position in each (else a solo run's path differs).
bool stack_together(const std::vector<const Batch*>& batches) {
    for (const Batch* b : batches)
        if (b->targets.shape != batches.front()->targets.shape || counted_positions(*b) == 0) return false;
    return true;
}

// work(i) for i in [0, n), one member at a time on each of the pool's threads,
// each thread taking the next member not yet taken (members' steps differ in
// length: a padded width, a log step), work(i)'s ops serial on its thread.
// One after another (`together` false) where the members share a device: its
// context is the process's one, not made for two threads at once.
template <class Work>
void for_each_member(size_t n, bool together, Work&& work) {
    if (!together) {
        for (size_t i = 0; i < n; ++i) work(i);
        return;
    }
    std::atomic<size_t> next{0};
    parallel_for(static_cast<size_t>(std::max(1, threads())), [&](size_t, size_t) {
        for (size_t i = next++; i < n; i = next++) work(i);
    });
}

}  // namespace

// train.seeds_mode = "threads" on the cpu: members t, t + T, t + 2T, ... on
// thread t of the pool's T, each thread stepping its members in turn until
// each has finished (its summary written), stopped on a NaN (status 1), or a
// signal came (each checkpoints: 130). One lock, `files`, is held by whichever
// member writes (logs, evaluations, checkpoints: see State::files). A thread that
// throws stops the others at their next step; the error is then rethrown.
int Trainer::members_apart(std::vector<std::unique_ptr<State>>& members) {
    std::mutex files;
    for (auto& m : members) m->files = &files;
    // every thread of the pool, even one with no member: a member's ops then run serial
    const size_t T = static_cast<size_t>(std::max(1, threads()));
    std::vector<int> stopped(members.size(), 0);  // each member's, written by its thread alone
    std::atomic<bool> failed{false};
    parallel_for(T, [&](size_t t0, size_t t1) {
        try {
            for (size_t t = t0; t < t1; ++t) {
                std::vector<size_t> going;  // this thread's members still training
                for (size_t m = t; m < members.size(); m += T) going.push_back(m);
                while (!going.empty() && !failed) {
                    for (size_t i = 0; i < going.size() && !failed;) {
                        const size_t m = going[i];
                        State& s = *members[m];
                        if (s.step >= s.config.train.steps) {
                            s.finish();
                        } else if (stop_requested()) {
                            stopped[m] = s.on_signal();
                        } else {
                            const State::StepInput in = s.next_input();
                            const State::StepValues v =
                                s.forward_backward(in.batch, s.loop->clip, s.trainable, in.log_now, s.loop->hooks);
                            const bool finite = std::isfinite(v.loss) && std::isfinite(v.grad_norm);
                            if (finite) s.update();
                            stopped[m] = s.finish_step(in, v, finite);
                            if (stopped[m] == 0) {  // goes on: the next member
                                ++i;
                                continue;
                            }
                        }
                        going.erase(going.begin() + static_cast<std::ptrdiff_t>(i));  // finished or stopped
                    }
                }
            }
        } catch (...) {
            failed = true;
            throw;
        }
    });
    for (auto& m : members) m->files = nullptr;
    return *std::max_element(stopped.begin(), stopped.end());  // 130 after a signal, 1 after a NaN, else 0
}

int Trainer::train_members(const Config& config, const std::string& group_dir) {
    const std::vector<int64_t> seeds = config.train.seeds;
    if (seeds.empty()) throw Error("[train] train.seeds is empty: nothing to train side by side");
    // Every member is built (and so checked) before anything is written.
    std::vector<std::unique_ptr<State>> members;
    for (const int64_t seed : seeds) {
        Config member = config;
        member.run.seed = seed;
        member.train.seeds.clear();
        member.train.seeds_mode = default_config().train.seeds_mode;  // unread by a single run
        members.push_back(build_state(member, single_world()));
    }
    install_stop_handlers();  // from the first write on, as a single run (Trainer::start)
    const fs::path group = new_run_folder(config, group_dir, "");
    std::fprintf(stderr, "attnlab train: writing %s: %zu runs (train.seeds), one folder each\n", group.c_str(), seeds.size());
    std::vector<std::string> labels;
    for (size_t m = 0; m < members.size(); ++m) {  // each where a sweep over run.seed puts its cell
        const std::string cell = cell_name(m, seeds.size(), {"run.seed=" + std::to_string(seeds[m])});
        members[m]->config.run.out_dir = group.string();
        members[m]->config.run.name = cell;
        members[m]->dir = create_run(*members[m], (group / cell).string());
        labels.push_back("seed " + std::to_string(seeds[m]) + ": ");
    }
    return side_by_side(members, config.train.seeds_mode, labels, "train.seeds");
}

int Trainer::train_runs(const std::vector<GroupRun>& runs, const std::string& mode) {
    if (runs.empty()) throw Error("[train] no runs to train side by side");
    if (mode != "threads" && mode != "stacked") throw Error("[train] mode \"" + mode + "\": \"threads\" or \"stacked\" (as train.seeds_mode)");
    // The new runs are built first (nothing written), then the resumed ones (each
    // takes its folder's lock and cuts its metrics back to its checkpoint), then the
    // new runs' folders are made.
    std::vector<std::unique_ptr<State>> members(runs.size());
    for (size_t m = 0; m < runs.size(); ++m)
        if (runs[m].config) {
            const fs::path dir = folder_path(runs[m].dir);
            std::error_code ec;
            if (fs::exists(fs::symlink_status(dir, ec)))  // refused before any run's folder is made
                throw Error("[train] " + runs[m].dir + " already exists: a new run's dir must not (list it as resume = ... to continue it)");
            Config config = *runs[m].config;
            config.run.out_dir = dir.parent_path().string();  // the folder's place and name, as a sweep's cell
            config.run.name = dir.filename().string();
            members[m] = build_state(config, single_world());
        }
    install_stop_handlers();  // from the first write on, as Trainer::resume
    for (size_t m = 0; m < runs.size(); ++m)
        if (!runs[m].config) members[m] = resumed_state(runs[m].dir, single_world());
    // One config, but for the seed and the folder: what stacking (and one thread count) needs.
    for (size_t m = 1; m < runs.size(); ++m) {
        const std::vector<std::string> differ =
            differing_keys(members.front()->config, members[m]->config, {"run.seed", "run.name", "run.out_dir"});
        if (!differ.empty())
            throw Error("[train] the runs " + runs.front().dir + " and " + runs[m].dir + " differ in " + differ.front() +
                        (differ.size() > 1 ? " (and " + std::to_string(differ.size() - 1) + " more keys)" : std::string()) +
                        "; runs trained side by side differ only in run.seed");
    }
    std::vector<std::string> labels;
    for (size_t m = 0; m < runs.size(); ++m) {
        if (runs[m].config) members[m]->dir = create_run(*members[m], runs[m].dir);
        labels.push_back(members[m]->dir.filename().string() + ": ");
    }
    std::fprintf(stderr, "attnlab train: %zu runs side by side (%s)\n", runs.size(), mode.c_str());
    return side_by_side(members, mode, labels, "train --runs");
}

int Trainer::side_by_side(std::vector<std::unique_ptr<State>>& members, const std::string& mode,
                          const std::vector<std::string>& labels, const char* source) {
    const Config& config = members.front()->config;  // the members differ only in their seeds and folders
    set_threads(config_threads(config));
    std::vector<const Module*> modules;
    for (size_t m = 0; m < members.size(); ++m) {
        members[m]->begin_loop(labels[m], false);  // a line each, not one rewritten
        modules.push_back(&members[m]->model->module());
    }
    std::unique_ptr<StackedMembers> stacked;
    if (mode == "stacked" && members.size() > 1) {
        std::string reason = unstackable(config);
        if (reason.empty()) {
            stacked = std::make_unique<StackedMembers>(config, members.front()->train_data->max_sequence_length(), modules);
            reason = stacked->reason();
        }
        if (!reason.empty()) {
            stacked.reset();
            std::fprintf(stderr, "attnlab train: train.seeds_mode = \"stacked\": %s has no stacked form yet; the members run on threads "
                                 "(\"threads\", the same results)\n", reason.c_str());
        }
    }

    const bool on_threads = config.train.device == "cpu";  // cuda: one member at a time
    if (on_threads && !stacked) return members_apart(members);
    int status = 0;
    int64_t steps = 0, together = 0;  // steps taken, and of those the stacked ones
    std::vector<bool> active(members.size(), true);
    while (true) {
        std::vector<size_t> going;  // the members still training
        for (size_t m = 0; m < members.size(); ++m)
            if (active[m] && members[m]->step < members[m]->config.train.steps) going.push_back(m);
        if (going.empty()) break;
        if (members[going.front()]->on_signal() != 0) {  // each member checkpoints and says how to resume
            for (size_t i = 1; i < going.size(); ++i) members[going[i]]->on_signal();
            return 130;
        }
        std::vector<State::StepInput> inputs(going.size());  // each member's batch drawn on its thread
        for_each_member(going.size(), on_threads, [&](size_t i) { inputs[i] = members[going[i]]->next_input(); });
        std::vector<const Batch*> batches;
        bool logs = false;  // a member logs this step (resumed members may be at different steps)
        for (const State::StepInput& in : inputs) {
            batches.push_back(&in.batch);
            logs = logs || in.log_now;
        }
        std::vector<State::StepValues> values(going.size());
        std::vector<uint8_t> updated(going.size(), 0);
        const bool together_now = stacked && going.size() == members.size() && !logs && stack_together(batches);
        std::vector<double> losses;
        if (together_now) losses = stacked->step(batches);
        ++steps;
        together += together_now;
        if (together_now && !on_threads) {
            // the device: every member's norm back in one copy, each clipped as alone; the
            // members with finite values updated (State::update), one launch for all
            std::vector<const NamedTensors*> trainables;
            for (const size_t m : going) trainables.push_back(&members[m]->trainable);
            const std::vector<double> norms = clip_grad_norms(trainables, members.front()->loop->clip);
            std::vector<Optimizer*> stepping;
            std::vector<const NamedTensors*> zeroing;
            for (size_t i = 0; i < going.size(); ++i) {
                values[i].loss = losses[i];
                values[i].grad_norm = norms[i];
                if (!std::isfinite(values[i].loss) || !std::isfinite(values[i].grad_norm)) continue;
                Optimizer& optimizer = *members[going[i]]->optimizer;
                stepping.push_back(&optimizer);
                zeroing.push_back(&optimizer.params());
                updated[i] = 1;
            }
            step_together(stepping);
            zero_grads(zeroing);
        } else {
            // each member on a thread of the pool, its ops serial there
            for_each_member(going.size(), on_threads, [&](size_t i) {
                State& s = *members[going[i]];
                if (together_now) {  // its gradients are in; clipped as alone
                    values[i].loss = losses[i];
                    values[i].grad_norm = clip_grad_norm(s.trainable, s.loop->clip);
                } else {
                    values[i] = s.forward_backward(inputs[i].batch, s.loop->clip, s.trainable, inputs[i].log_now, s.loop->hooks);
                }
                if (std::isfinite(values[i].loss) && std::isfinite(values[i].grad_norm)) {
                    s.update();
                    updated[i] = 1;
                }
            });
        }
        // then one at a time: the logs, evaluations and checkpoints (the files)
        for (size_t i = 0; i < going.size(); ++i)
            if (const int stopped = members[going[i]]->finish_step(inputs[i], values[i], updated[i] != 0); stopped != 0) {
                active[going[i]] = false;  // this run stops as it would alone; the others go on
                status = std::max(status, stopped);
            }
    }
    if (stacked)
        std::fprintf(stderr, "attnlab train: %s: %lld of %lld steps stacked (the others logged, or their batches differed in width)\n",
                     source, static_cast<long long>(together), static_cast<long long>(steps));
    for (size_t m = 0; m < members.size(); ++m)
        if (active[m]) members[m]->finish();
    return status;
}

}  // namespace attnlab
