// Trainer::State: what a run holds between steps (the config, the data, the
// model and optimiser, the logs, the counters), shared by trainer_setup.cpp
// (building it, for start and resume) and trainer.cpp (the loop). Internal to
// experiments/run/.
#pragma once

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "experiments/distributed/world.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/run_files.h"
#include "experiments/run/attention_metrics.h"
#include "experiments/run/evaluate.h"
#include "experiments/run/head_scores.h"
#include "experiments/run/metrics_log.h"
#include "experiments/run/model_factory.h"
#include "experiments/run/tensorboard.h"
#include "experiments/run/trainer.h"
#include "optim/optimizer.h"

namespace attnlab {

// SIGINT and SIGTERM ask the loop to stop at the end of its step (trainer.cpp).
void install_stop_handlers();
// Whether one has arrived in this process (no other rank asked).
bool stop_requested();

// A new run's folder (trainer_setup.cpp): out_dir/name (name-2, ... when taken), or
// exactly `run_dir` when given, which must not exist (`when_taken` ends that error).
std::filesystem::path new_run_folder(const Config& config, const std::string& run_dir, const std::string& when_taken);

struct Trainer::State {
    using Clock = std::chrono::steady_clock;

    Config config;
    // The ranks of this run (one, without mpirun). Rank 0 alone writes: the run
    // folder, its lock, metrics.h5, TensorBoard, checkpoints, summary.json and the
    // progress line; the other ranks compute and hold the same model.
    const World* world = &single_world();
    bool writes() const { return world->root(); }
    std::filesystem::path dir;
    std::optional<RunLock> lock;  // held while this process writes into dir
    // Held while this run writes its files (metrics.h5, checkpoints, TensorBoard,
    // summary.json, the progress line), when it shares the process with other
    // runs that step at the same time (train.seeds' members on threads: HDF5 is
    // one library state for the whole process). Null for a run alone.
    std::mutex* files = nullptr;
    std::unique_lock<std::mutex> writing() { return files ? std::unique_lock<std::mutex>(*files) : std::unique_lock<std::mutex>(); }
    std::unique_ptr<BatchSource> train_data;
    std::vector<Batch> eval_batches;
    std::vector<Batch> eval_length_batches;  // train.eval_lengths: held out at other lengths (else empty)
    std::vector<Batch> eval_train_batches;   // task.train_size: the training set's first examples (else empty)
    std::optional<HeadScoreBatch> head_score_input;  // train.head_scores: the fixed repeated-token batch
    Rng init_rng, dropout_rng;
    // On train.device: with "cuda" the parameters, their gradients and the
    // optimiser's state live on the device, and a step moves the batch in and
    // the loss and gradient norm out (the logits too at log steps, for the metrics).
    std::unique_ptr<TaskModel> model;
    NamedTensors trainable;  // the parameters but train.freeze's: what the optimiser and clipping see
    std::unique_ptr<Optimizer> optimizer;
    std::optional<MetricsLog> log;
    std::optional<TensorBoardWriter> tensorboard;  // train.tensorboard: the same scalars, for TensorBoard
    int64_t step = 0;
    double wall_before = 0;  // seconds spent by earlier processes of this run (resume)
    int64_t tokens_before = 0;  // valid tokens they trained on
    size_t tokens_total = 0;    // valid tokens this process trained on
    RunSummary summary;

    // The data streams, the model and optimiser, the device (trainer_setup.cpp).
    explicit State(const Config& c);

    Score evaluate_now() { return evaluate(*model, eval_batches, *world); }  // on the model's device, split across ranks

    void checkpoint() {
        check_ranks_agree();
        if (!writes()) return;
        flush_logs();
        CheckpointData data;
        data.step = step;
        data.config_toml = to_toml(config);
        data.params = model->module().named_parameters();
        data.optimizer = optimizer->state();
        const auto rng_words = [](const Rng& r) { const Rng::State s = r.state(); return std::vector<uint64_t>(s.begin(), s.end()); };
        data.rng = {{"train_data", rng_words(train_data->rng())}, {"dropout", rng_words(dropout_rng)}};
        data.data = {{"first_step_at_target", {summary.first_step_at_target.value_or(-1)}},
                     {"wall_ms", {static_cast<int64_t>(std::llround(elapsed() * 1000.0))}},
                     {"tokens", {tokens_before + static_cast<int64_t>(tokens_total)}}};
        if (const std::vector<int64_t> at = train_data->position(); !at.empty()) data.data.emplace_back("train_position", at);
        const std::filesystem::path folder = dir / "checkpoints";
        write_checkpoint((folder / checkpoint_name(step)).string(), data);
        if (config.train.keep_checkpoints > 0) prune_checkpoints(folder.string(), static_cast<size_t>(config.train.keep_checkpoints));
    }

    // The hook points the attention metrics read: every module's pattern and scores.
    static Hooks metrics_hooks() {
        Hooks hooks;
        hooks.record("*attn.pattern").record("*attn.scores");
        return hooks;
    }

    // One row per attention kind: what every head does on `batch`, at the current
    // step, from a forward pass with metrics_hooks() (on either device).
    void log_attention(const Batch& batch, const Hooks& hooks) {
        for (const AttentionKind& kind : model->kinds_for(batch)) {
            const std::vector<Tensor> weights = recorded_per_layer(hooks, kind, "pattern");
            const std::vector<double> score_std_flat = score_std(recorded_per_layer(hooks, kind, "scores"), kind.mask);  // [layer][head]
            const HeadStats h = attention_stats(weights, kind.mask, kind.query_lengths);
            log->append_attention(kind.name, step, h.entropy, h.entropy_norm, h.masked_mass, h.masked_mass_max, score_std_flat);
            if (tensorboard) {
                std::vector<std::pair<std::string, double>> per_head;  // "attention/self/entropy/L0.H1"
                const size_t heads = model->heads();
                for (size_t i = 0; i < h.entropy.size(); ++i) {
                    const std::string head = "L" + std::to_string(i / heads) + ".H" + std::to_string(i % heads);
                    per_head.emplace_back("attention/" + kind.name + "/entropy/" + head, h.entropy[i]);
                    per_head.emplace_back("attention/" + kind.name + "/masked_mass/" + head, h.masked_mass[i]);
                }
                tensorboard->scalars(step, per_head);
            }
        }
    }

    // train.head_scores: a /head_scores row (and TensorBoard's head_scores/<score>/L<l>.H<h>)
    // at the current step; returns the model's loss on the repeat (NaN when off).
    double log_head_scores() {
        if (!head_score_input || !writes()) return std::numeric_limits<double>::quiet_NaN();
        const HeadScores h = head_scores(*model, *head_score_input);
        std::vector<std::pair<std::string, std::vector<double>>> rows;
        std::vector<std::pair<std::string, double>> scalars{{"head_scores/repeat_loss", h.repeat_loss}};
        const std::vector<std::string>& names = head_score_names();
        for (size_t i = 0; i < names.size(); ++i) {
            rows.emplace_back(names[i], head_score_values(h, i));
            for (size_t cell = 0; cell < rows.back().second.size(); ++cell)
                scalars.emplace_back("head_scores/" + names[i] + "/L" + std::to_string(cell / h.heads) + ".H" + std::to_string(cell % h.heads),
                                     rows.back().second[cell]);
        }
        log->append_head_scores(step, rows, h.repeat_loss);
        if (tensorboard) tensorboard->scalars(step, scalars);
        return h.repeat_loss;
    }

    // The rows of metrics.h5 reach the disk (and TensorBoard's file the OS) at each log interval.
    void flush_logs() {
        if (!writes()) return;
        log->flush();
        if (tensorboard) tensorboard->flush();
    }

    void open_tensorboard() {
        if (config.train.tensorboard) tensorboard.emplace((dir / "tb").string());
    }

    // Step 0: the model at initialisation, on the first held-out batch (so the
    // training stream is untouched), in eval mode and without a graph.
    void log_initial_attention() {
        NoGradGuard no_grad;
        model->module().eval();
        Hooks hooks = metrics_hooks();
        model->forward(eval_batches.front(), hooks);
        log_attention(eval_batches.front(), hooks);
        log_head_scores();
        flush_logs();
        model->module().train();
    }

    // ---- one step (trainer_step.cpp) ----

    // One step's forward and backward over the global batch, the gradients summed
    // across ranks and clipped; at log steps `hooks` record the metrics' points on
    // the rows in `seen` (rank 0's), and token_acc is the whole batch's.
    struct StepValues {
        double loss = 0, grad_norm = 0, token_acc = 0;
        Batch seen;
    };
    StepValues forward_backward(const Batch& batch, double clip, const NamedTensors& params, bool log_now, Hooks& hooks);
    // One process, train.reduce = "fast": the whole batch in one pass.
    StepValues whole_batch(const Batch& batch, bool log_now, Hooks& hooks);
    // Ranks, or train.reduce = "deterministic": the batch in pieces (a rank's
    // share, or the micro-batches), their gradients summed (trainer_step.cpp).
    StepValues in_pieces(const Batch& batch, const NamedTensors& params, bool log_now, Hooks& hooks);
    // Every rank holds the same parameters (a hash of them, compared at each
    // checkpoint); a difference is an Error naming the step.
    void check_ranks_agree() const;
    // A NaN or infinite loss or gradient norm at step `next`: the logs flushed, the reason said; returns 1.
    int stop_on_non_finite(int64_t next, double loss, double grad_norm, bool tty);
    // The train row of metrics.h5 (and TensorBoard) and the attention metrics (rank 0).
    void log_train_step(const StepValues& values, double lr, double tokens_per_s, const Hooks& hooks);
    // The held-out evaluation (and the training set's), logged; `last_eval` becomes its part of the progress line.
    void evaluate_and_log(std::string& last_eval);
    // The final evaluation, summary.json and the one-line report.
    void finish();

    // ---- the loop's parts (trainer.cpp) ----

    // What the loop carries from step to step (begin_loop makes it).
    struct Loop {
        Schedule schedule = Schedule::constant;
        double clip = 0;
        bool tty = false;           // the progress line rewrites itself on a terminal
        std::string label;          // before the progress line: "seed 3: " for a member of train.seeds
        int64_t first_step = 0;
        size_t tokens_since_log = 0;
        std::string last_eval;      // "  held-out acc 0.990 (step 250)" once there was an evaluation
        Clock::time_point last_log, run_start;
        Hooks hooks;                // the metrics' points: recording never changes the result
    };
    std::optional<Loop> loop;
    void begin_loop(const std::string& label = "", bool may_rewrite = true);
    // One step's input: its batch, learning rate, number and whether it logs.
    struct StepInput {
        Batch batch;
        double lr = 0;
        int64_t next = 0;
        bool log_now = false;
    };
    StepInput next_input();
    // After the step's forward and backward: the stop on a non-finite value, the
    // optimiser's update (unless made), the logs, evaluation and checkpoint. 0 to go on, else the
    // exit status (1: a NaN or infinite loss or gradient norm).
    int finish_step(const StepInput& input, const StepValues& values, bool updated = false);
    // The optimiser's update after a finite step; finish_step makes it unless the
    // caller did (`updated`: train.seeds' members update on their threads).
    void update() {
        optimizer->step();
        optimizer->zero_grad();
    }
    // A signal arrived (SIGINT, SIGTERM, on any rank): checkpoint, say how to resume, 130; else 0.
    int on_signal();


    Clock::time_point started = Clock::now();
    double elapsed() const { return wall_before + std::chrono::duration<double>(Clock::now() - started).count(); }
};

}  // namespace attnlab
