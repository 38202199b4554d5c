// The training loop of `attnlab train` (Trainer::run): steps, logs, evaluations,
// checkpoints, the stop on a signal or a non-finite loss, and summary.json at
// the end. Building the run (start, resume) is in trainer_setup.cpp.
#include "experiments/files/provenance.h"
#include "experiments/run/trainer.h"
#include "experiments/run/load_checkpoint.h"
#include "experiments/run/trainer_state.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "autograd/cpu/threads.h"
#include "autograd/ops.h"
#include "experiments/files/json_text.h"

namespace attnlab {

namespace {

// Set by SIGINT/SIGTERM; the loop finishes its step, checkpoints and exits 130.
// (A signal handler can only reach state like this.)
volatile std::sig_atomic_t stop_signal = 0;
extern "C" void request_stop(int signal) { stop_signal = signal; }

using Clock = std::chrono::steady_clock;

double peak_rss_mb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string format_duration(double seconds) {
    const long s = std::lround(std::max(0.0, seconds));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

// "train acc": of this step's training batch; the held-out accuracy is the last evaluation's
void print_progress(int64_t step, int64_t steps, double loss, double train_acc, const std::string& last_eval,
                    double tokens_per_s, double steps_per_s, bool tty) {
    std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  train acc %.3f%s  %.0f tok/s  ETA %s%s", tty ? "\r\033[K" : "",
                 static_cast<long long>(step), static_cast<long long>(steps), loss, train_acc, last_eval.c_str(),
                 tokens_per_s, format_duration(static_cast<double>(steps - step) / std::max(steps_per_s, 1e-9)).c_str(),
                 tty ? "" : "\n");
}

}  // namespace

int Trainer::State::stop_on_non_finite(int64_t next, double loss, double grad_norm, bool tty) {
    if (!writes()) return 1;  // every rank saw the same summed loss and norm
    const auto writing_now = writing();
    flush_logs();
    const auto saved = list_checkpoints((dir / "checkpoints").string());
    std::fprintf(stderr, "%sattnlab train: step %lld: %s is %s; stopping (last good checkpoint: %s)\n", tty ? "\n" : "",
                 static_cast<long long>(next), std::isfinite(loss) ? "gradient norm" : "loss",
                 std::isnan(std::isfinite(loss) ? grad_norm : loss) ? "NaN" : "infinite",
                 saved.empty() ? "none" : saved.back().c_str());
    return 1;
}

void Trainer::State::log_train_step(const StepValues& values, double lr, double tokens_per_s, const Hooks& hooks) {
    log->append_train(step, values.loss, lr, values.grad_norm, tokens_per_s, elapsed());
    if (tensorboard)
        tensorboard->scalars(step, {{"train/loss", values.loss}, {"train/lr", lr}, {"train/grad_norm", values.grad_norm},
                                    {"train/tokens_per_s", tokens_per_s}, {"train/token_acc", values.token_acc}});
    log_attention(values.seen, hooks);
    flush_logs();
}

void Trainer::State::evaluate_and_log(std::string& last_eval) {
    const Score e = evaluate_now();
    if (!summary.first_step_at_target && e.token_acc >= config.train.target_accuracy) summary.first_step_at_target = step;
    const Score l = eval_length_batches.empty() ? Score{} : evaluate(*model, eval_length_batches, *world);
    const Score t = eval_train_batches.empty() ? Score{} : evaluate(*model, eval_train_batches, *world);
    if (!writes()) return;
    log->append_eval(step, e.loss, e.token_acc, e.seq_acc);
    if (tensorboard)
        tensorboard->scalars(step, {{"eval/loss", e.loss}, {"eval/token_acc", e.token_acc}, {"eval/seq_acc", e.seq_acc}});
    char text[128];
    if (eval_train_batches.empty())
        std::snprintf(text, sizeof text, "  held-out acc %.3f (step %lld)", e.token_acc, static_cast<long long>(step));
    else  // a finite training set: how well it is learnt beside how well that generalises
        std::snprintf(text, sizeof text, "  held-out acc %.3f, train-set acc %.3f (step %lld)", e.token_acc, t.token_acc,
                      static_cast<long long>(step));
    last_eval = text;
    // an optional evaluation's row in metrics.h5 and its scalars <group>/* in TensorBoard
    auto log_optional = [&](const std::string& group, const Score& s) {
        log->append_eval(group, step, s.loss, s.token_acc, s.seq_acc);
        if (tensorboard)
            tensorboard->scalars(step, {{group + "/loss", s.loss}, {group + "/token_acc", s.token_acc}, {group + "/seq_acc", s.seq_acc}});
    };
    if (!eval_train_batches.empty()) log_optional("eval_train", t);
    if (const double repeat_loss = log_head_scores(); !std::isnan(repeat_loss)) {  // train.head_scores
        std::snprintf(text, sizeof text, ", repeat loss %.3f", repeat_loss);
        last_eval += text;
    }
    if (!eval_length_batches.empty()) {  // train.eval_lengths: the same model at other lengths
        log_optional("eval_lengths", l);
        std::snprintf(text, sizeof text, ", at lengths %lld..%lld %.3f", static_cast<long long>(config.train.eval_lengths[0]),
                      static_cast<long long>(config.train.eval_lengths[1]), l.token_acc);
        last_eval += text;
    }
    flush_logs();
}

void Trainer::State::finish() {
    const auto writing_now = writing();  // its evaluations too: short, once
    const Score final_score = evaluate_now();
    RunSummary& r = summary;
    r.steps = step;
    r.eval_loss = final_score.loss;
    r.eval_token_acc = final_score.token_acc;
    r.eval_seq_acc = final_score.seq_acc;
    const Score l = eval_length_batches.empty() ? Score{} : evaluate(*model, eval_length_batches, *world);
    const Score t = eval_train_batches.empty() ? Score{} : evaluate(*model, eval_train_batches, *world);
    if (!writes()) return;
    std::string optional;  // summary.json's figures at train.eval_lengths and on the training set, when they are set
    if (!eval_length_batches.empty()) {
        std::ostringstream more;
        more.precision(10);
        more << ",\n  \"eval_lengths\": [" << config.train.eval_lengths[0] << ", " << config.train.eval_lengths[1]
             << "],\n  \"eval_lengths_loss\": " << l.loss << ",\n  \"eval_lengths_token_acc\": " << l.token_acc
             << ",\n  \"eval_lengths_seq_acc\": " << l.seq_acc;
        optional = more.str();
    }
    if (!eval_train_batches.empty()) {  // task.train_size: the final evaluation on the training set
        std::ostringstream more;
        more.precision(10);
        more << ",\n  \"train_size\": " << config.task.train_size << ",\n  \"train_set_loss\": " << t.loss
             << ",\n  \"train_set_token_acc\": " << t.token_acc << ",\n  \"train_set_seq_acc\": " << t.seq_acc;
        optional += more.str();
    }
    r.wall_s = elapsed();
    // over the whole run, earlier processes of a resumed run included
    r.tokens_per_s = static_cast<double>(tokens_before + static_cast<int64_t>(tokens_total)) / std::max(r.wall_s, 1e-9);
    r.peak_rss_mb = peak_rss_mb();
    std::ostringstream json;
    json.precision(10);
    json << "{\n  \"run_dir\": " << json_string(dir.string()) << ",\n  \"steps\": " << r.steps << ",\n  \"eval_loss\": " << r.eval_loss
         << ",\n  \"eval_token_acc\": " << r.eval_token_acc << ",\n  \"eval_seq_acc\": " << r.eval_seq_acc
         << ",\n  \"target_accuracy\": " << config.train.target_accuracy << ",\n  \"first_step_at_target\": "
         << (r.first_step_at_target ? std::to_string(*r.first_step_at_target) : "null") << optional << ",\n  \"wall_s\": " << r.wall_s
         << ",\n  \"tokens_per_s\": " << r.tokens_per_s << ",\n  \"peak_rss_mb\": " << r.peak_rss_mb << ",\n  "
         << provenance_json_members(provenance(config.train.threads > 0 ? static_cast<long>(config.train.threads) : 0)) << "\n}\n";
    write_text_atomically(dir / "summary.json", json.str(), "[train]");
    std::printf("run %s: %lld steps, eval loss %.4f, token accuracy %.4f, sequence accuracy %.4f, %.1f s, %.0f tokens/s, peak memory %.0f MB\n",
                dir.c_str(), static_cast<long long>(r.steps), r.eval_loss, r.eval_token_acc, r.eval_seq_acc, r.wall_s,
                r.tokens_per_s, r.peak_rss_mb);
}

void install_stop_handlers() {
    // A signal already noted (one that came while the run's folder was being
    // written) stays noted: the loop checkpoints at its first step and stops.
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
}

bool stop_requested() { return stop_signal != 0; }

void Trainer::State::begin_loop(const std::string& label, bool may_rewrite) {
    const Config& c = config;
    Loop& l = loop.emplace();
    l.schedule = parse_schedule(c.optim.schedule);
    l.clip = c.optim.clip > 0 ? c.optim.clip : std::numeric_limits<double>::infinity();
    l.tty = may_rewrite && isatty(STDERR_FILENO) && writes();
    l.label = label;
    l.first_step = step;
    l.last_log = l.run_start = Clock::now();
    l.hooks = metrics_hooks();
    model->module().train();
    if (c.train.device == "cuda" && writes())
        std::fprintf(stderr, "attnlab train: train.device = \"cuda\": the whole training step runs on the GPU\n");
}

int Trainer::State::on_signal() {
    // A signal on any rank stops every rank at the same step (one process: its own).
    if (world->max(stop_signal) == 0) return 0;
    const auto writing_now = writing();
    checkpoint();
    if (writes())
        std::fprintf(stderr, "%sattnlab train: %sinterrupted at step %lld; checkpoint written; resume with `attnlab train --resume %s`\n",
                     loop->tty ? "\n" : "", loop->label.c_str(), static_cast<long long>(step), dir.c_str());
    return 130;
}

Trainer::State::StepInput Trainer::State::next_input() {
    const Config& c = config;
    StepInput in;
    in.batch = train_data->next(static_cast<size_t>(batch_size(c)));
    in.lr = scheduled_lr(c.optim.lr, loop->schedule, step, c.optim.warmup, schedule_horizon(c), c.optim.min_lr);
    optimizer->lr = in.lr;
    in.next = step + 1;
    in.log_now = in.next % c.train.log_every == 0 || in.next == c.train.steps;
    loop->hooks.clear_recorded();  // this step's record, when it logs
    return in;
}

int Trainer::State::finish_step(const StepInput& in, const StepValues& values, bool updated) {
    const Config& c = config;
    Loop& l = *loop;
    if (!std::isfinite(values.loss) || !std::isfinite(values.grad_norm)) return stop_on_non_finite(in.next, values.loss, values.grad_norm, l.tty);
    if (!updated) update();
    step = in.next;
    size_t tokens = 0;
    for (size_t length : in.batch.lengths) tokens += length;
    tokens_total += tokens;
    l.tokens_since_log += tokens;

    if (in.log_now && writes()) {
        const auto writing_now = writing();
        const double since = std::chrono::duration<double>(Clock::now() - l.last_log).count();
        const double tokens_per_s = static_cast<double>(l.tokens_since_log) / std::max(since, 1e-9);
        l.last_log = Clock::now();
        l.tokens_since_log = 0;
        log_train_step(values, in.lr, tokens_per_s, l.hooks);
        const double rate = static_cast<double>(step - l.first_step) /
                            std::max(std::chrono::duration<double>(Clock::now() - l.run_start).count(), 1e-9);
        if (!l.label.empty()) std::fprintf(stderr, "%s", l.label.c_str());
        print_progress(step, c.train.steps, values.loss, values.token_acc, l.last_eval, tokens_per_s, rate, l.tty);
    }
    if (step % c.train.eval_every == 0 || step == c.train.steps) {
        const auto writing_now = writing();
        evaluate_and_log(l.last_eval);
    }
    if (step % c.train.checkpoint_every == 0 || step == c.train.steps) {
        const auto writing_now = writing();
        checkpoint();
    }
    return 0;
}

int Trainer::run() {
    State& s = *state_;
    set_threads(config_threads(s.config));  // the stop handlers are in since start() or resume()
    s.begin_loop();
    while (s.step < s.config.train.steps) {
        if (const int status = s.on_signal()) return status;
        const State::StepInput in = s.next_input();
        const State::StepValues values = s.forward_backward(in.batch, s.loop->clip, s.trainable, in.log_now, s.loop->hooks);
        if (const int status = s.finish_step(in, values)) return status;
    }
    if (s.loop->tty) std::fprintf(stderr, "\n");
    s.finish();
    return 0;
}

}  // namespace attnlab
