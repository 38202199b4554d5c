#include "experiments/run/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "autograd/cpu/threads.h"
#include "autograd/cpu/blas.h"
#include "autograd/ops.h"
#include "cuda/backend.h"
#include "cuda/context.h"
#include "experiments/files/checkpoint.h"
#include "experiments/run/device_training.h"
#include "experiments/run/evaluate.h"
#include "experiments/run/metrics_log.h"
#include "experiments/config/memory_estimate.h"
#include "experiments/run/model_factory.h"
#include "experiments/files/json_text.h"
#include "experiments/files/run_files.h"
#include "experiments/run/tensorboard.h"
#include "optim/optimizer.h"

namespace fs = std::filesystem;

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

std::unique_ptr<Optimizer> make_optimizer(const Config& c, NamedTensors params) {
    const auto& o = c.optim;
    if (o.name == "sgd") return std::make_unique<SGD>(std::move(params), o.lr, o.momentum, o.nesterov, o.weight_decay);
    if (o.name == "adam")
        return std::make_unique<Adam>(std::move(params), o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, false);
    return make_adamw(std::move(params), o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay);
}

// Keys that may differ between a run's config.toml and its checkpoint on
// --resume: they change how long the run goes and what it logs, keeps and uses
// to compute, never the model, the data or the optimiser. (run.* names where the
// folder was; a moved folder is still the same run.)
const std::vector<std::string> kResumableKeys = {"train.steps", "train.log_every", "train.eval_every", "train.checkpoint_every",
                                                 "train.keep_checkpoints", "train.threads", "train.device",
                                                 "train.target_accuracy", "train.tensorboard", "run.name", "run.out_dir"};

bool resumable(const std::string& change) {  // "train.steps (80, was 40)"
    const std::string key = change.substr(0, change.find(' '));
    return std::find(kResumableKeys.begin(), kResumableKeys.end(), key) != kResumableKeys.end();
}

std::string joined(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
}

std::string format_duration(double seconds) {
    const long s = std::lround(std::max(0.0, seconds));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

}  // namespace

struct Trainer::State {
    Config config;
    fs::path dir;
    std::optional<RunLock> lock;  // held while this process writes into dir
    std::unique_ptr<BatchSource> train_data;
    std::vector<Batch> eval_batches;
    Rng init_rng, dropout_rng;
    std::unique_ptr<cuda::Context> cuda_context;  // train.device = "cuda"
    std::unique_ptr<TaskModel> model;
    std::unique_ptr<Optimizer> optimizer;
    // train.device = "cuda" and a model the device step supports: the whole step
    // runs there, and the host model and optimiser are brought up to date
    // (sync_host) only when something reads them. Otherwise only the attention
    // core runs on the device (set_attention_device).
    std::unique_ptr<DeviceTraining> device_step;
    bool host_current = true;  // the host model holds the device's parameters
    std::optional<MetricsLog> log;
    std::optional<TensorBoardWriter> tensorboard;  // train.tensorboard: the same scalars, for TensorBoard
    int64_t step = 0;
    double wall_before = 0;  // seconds spent by earlier processes of this run (resume)
    int64_t tokens_before = 0;  // valid tokens they trained on
    size_t tokens_total = 0;    // valid tokens this process trained on
    RunSummary summary;

    explicit State(const Config& c) : config(c), init_rng(static_cast<uint64_t>(c.run.seed), 10),
                                      dropout_rng(static_cast<uint64_t>(c.run.seed), 11) {
        const auto seed = static_cast<uint64_t>(config.run.seed);
        train_data = make_batch_source(config, seed, 0);
        // held out: a stream of its own, the same batches at every evaluation
        const std::unique_ptr<BatchSource> eval_data = make_batch_source(config, seed, 1);
        for (int64_t i = 0; i < config.train.eval_batches; ++i)
            eval_batches.push_back(eval_data->next(static_cast<size_t>(config.train.batch)));
        const size_t longest = train_data->max_sequence_length();
        check_fits_in_memory(config, static_cast<double>(longest));  // a token file's lengths are known only now
        if (config.model.max_len > 0 && static_cast<size_t>(config.model.max_len) < longest)
            throw ConfigError("model.max_len", "model.max_len: " + std::to_string(config.model.max_len) +
                                                   " is shorter than the longest sequence of " + config.task.path + " (" +
                                                   std::to_string(longest) + " inputs)");
        // The resolved config names the positional table it built, so a checkpoint
        // describes its model without the task's data (a moved token file).
        if (config.model.max_len == 0) config.model.max_len = static_cast<int64_t>(longest);
        model = std::make_unique<TaskModel>(config, longest, init_rng, &dropout_rng);
        optimizer = make_optimizer(config, model->module().named_parameters());
        if (config.train.device == "cuda") {
            cuda_context = std::make_unique<cuda::Context>();  // "[cuda] Context: <reason>" without a device
            model->set_attention_device(cuda_context.get());
        }
    }

    // On the device when the whole step runs there (in eval mode, as on the CPU: no dropout).
    Score evaluate_now() {
        if (!device_step) return evaluate(*model, eval_batches);
        return evaluate(eval_batches, [&](const Batch& batch) { return device_step->logits(batch); });
    }

    void sync_host() {
        if (device_step && !host_current) device_step->download();
        host_current = true;
    }

    void checkpoint() {
        sync_host();
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
        const fs::path folder = dir / "checkpoints";
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
    // step, from a forward pass with metrics_hooks() (or the device's trace).
    void log_attention(const Batch& batch, const Hooks* hooks, const AttentionMaps* device_maps) {
        for (const AttentionKind& kind : model->kinds_for(batch)) {
            std::vector<Tensor> weights;
            std::vector<double> score_std_flat;  // [layer][head]
            if (hooks) {
                weights = recorded_per_layer(*hooks, kind, "pattern");
                score_std_flat = score_std(recorded_per_layer(*hooks, kind, "scores"), kind.mask);
            } else {
                const AttentionTrace& trace = kind.name == "enc_self" ? device_maps->enc_self
                                              : kind.name == "cross"  ? device_maps->cross
                                                                      : device_maps->self;
                weights = trace.weights;
                for (const std::vector<double>& layer : trace.score_std)
                    score_std_flat.insert(score_std_flat.end(), layer.begin(), layer.end());
            }
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

    // The rows of metrics.h5 reach the disk (and TensorBoard's file the OS) at each log interval.
    void flush_logs() {
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
        log_attention(eval_batches.front(), &hooks, nullptr);
        flush_logs();
        model->module().train();
    }

    Clock::time_point started = Clock::now();
    double elapsed() const { return wall_before + std::chrono::duration<double>(Clock::now() - started).count(); }
};

Trainer::Trainer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Trainer::~Trainer() = default;
const std::string& Trainer::run_dir() const { return state_->dir.native(); }
const RunSummary& Trainer::summary() const { return state_->summary; }

// Everything that can fail on the config fails here, before anything is written.
std::unique_ptr<Trainer::State> Trainer::build_state(const Config& config) {
    validate(config);
    if (config.train.device == "cuda") cuda::require_device("train.device");
    return std::make_unique<State>(config);
}

void Trainer::check_runnable(const Config& config) { build_state(config); }

std::unique_ptr<Trainer> Trainer::start(const Config& config, const std::string& run_dir) {
    std::unique_ptr<State> state = build_state(config);
    fs::path dir;
    if (run_dir.empty()) {
        dir = claim_new_folder(config.run.out_dir, config.run.name, "[train]");
    } else {  // exactly there, as a sweep's cell: the folder must be new (mkdir is exclusive)
        dir = run_dir;
        if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path());
        std::error_code ec;
        if (!fs::create_directory(dir, ec) || ec)
            throw Error("[train] --run-dir " + run_dir + (fs::exists(dir) ? " already exists (resume it with --resume)"
                                                                         : ": cannot create it (" + ec.message() + ")"));
    }
    state->dir = dir;
    state->lock.emplace(dir, "[train]");
    fs::create_directories(dir / "checkpoints");
    write_text_atomically(dir / "config.toml", to_toml(state->config), "[train]");
    state->log.emplace(MetricsLog::create((dir / "metrics.h5").string(), to_toml(state->config), state->model->layers(),
                                          state->model->heads(), state->model->kinds()));
    state->open_tensorboard();
    state->log_initial_attention();
    return std::unique_ptr<Trainer>(new Trainer(std::move(state)));
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& run_dir) {
    const fs::path dir(run_dir);
    const std::string where = "[train] --resume " + run_dir + ": ";
    if (!fs::exists(dir / "config.toml")) throw Error(where + "not a run directory (no config.toml)");
    RunLock lock(dir, "[train]");  // before anything is read: a second writer is refused here
    const Config config = load_config((dir / "config.toml").string());
    const std::vector<std::string> saved = list_checkpoints((dir / "checkpoints").string());
    if (saved.empty()) throw Error(where + "no checkpoint in " + (dir / "checkpoints").string());
    const std::string& newest = saved.back();
    const CheckpointData data = read_checkpoint(newest);
    // The metrics are cut back to the checkpoint's step: a step that is not the one
    // its name says would truncate or rewrite logged rows.
    if (fs::path(newest).filename().string() != checkpoint_name(data.step))
        throw Error("[train] " + newest + ": its step attribute says " + std::to_string(data.step) +
                    ", its file name another step; refusing to resume from it");
    // config.toml must describe the checkpoint's model and run; only the keys of
    // kResumableKeys may have been edited.
    const Config saved_config = parse_config(data.config_toml, newest + " (config attribute)");
    std::vector<std::string> changed = differing_keys(saved_config, config), refused;
    std::copy_if(changed.begin(), changed.end(), std::back_inserter(refused), [](const std::string& c) { return !resumable(c); });
    if (!refused.empty())
        throw Error(where + (dir / "config.toml").string() + " differs from its checkpoint " + fs::path(newest).filename().string() +
                    " in " + joined(refused) + "; only " + joined(kResumableKeys) + " may change on resume");
    // A finished run is left as it is; one whose summary.json was lost only gets it written again.
    if (data.step >= config.train.steps && fs::exists(dir / "summary.json"))
        throw Error(where + "the run is finished (step " + std::to_string(data.step) + " of train.steps = " +
                    std::to_string(config.train.steps) + "); raise train.steps in " + (dir / "config.toml").string() +
                    " to train further");
    auto state = std::make_unique<State>(config);
    state->dir = dir;
    state->lock.emplace(std::move(lock));
    try {
        state->model->module().load_state_dict(data.params);
        state->optimizer->load_state(data.optimizer);
    } catch (const Error& e) {
        throw Error("[train] " + newest + ": " + e.what());
    }
    for (const auto& [name, words] : data.rng) {
        if (words.size() != 4) throw Error("[train] " + saved.back() + ": rng/" + name + " must hold 4 words");
        const Rng::State s{words[0], words[1], words[2], words[3]};
        if (name == "train_data") state->train_data->rng().set_state(s);
        if (name == "dropout") state->dropout_rng.set_state(s);
    }
    for (const auto& [name, values] : data.data) {
        if (name == "first_step_at_target" && !values.empty() && values[0] >= 0) state->summary.first_step_at_target = values[0];
        if (name == "wall_ms" && !values.empty()) state->wall_before = static_cast<double>(values[0]) / 1000.0;
        if (name == "tokens" && !values.empty()) state->tokens_before = values[0];
    }
    state->step = data.step;
    state->log.emplace(MetricsLog::resume((dir / "metrics.h5").string(), data.step));
    state->open_tensorboard();
    // Everything could be read: the edited keys are recorded beside the run, and said.
    changed.erase(std::remove_if(changed.begin(), changed.end(), [](const std::string& c) {
                      return c.rfind("run.", 0) == 0;  // where the folder is now, not a change to the run
                  }), changed.end());
    if (!changed.empty()) {
        std::ofstream(dir / "resumes.log", std::ios::app)
            << "step " << data.step << ": resumed with " << joined(changed) << "\n";
        std::fprintf(stderr, "attnlab train: resuming at step %lld with %s (config.toml edited; recorded in resumes.log)\n",
                     static_cast<long long>(data.step), joined(changed).c_str());
    }
    std::fprintf(stderr, "attnlab train: resuming %s from step %lld (%s)\n", run_dir.c_str(), static_cast<long long>(data.step),
                 fs::path(newest).filename().c_str());
    return std::unique_ptr<Trainer>(new Trainer(std::move(state)));
}

int Trainer::run() {
    State& s = *state_;
    const Config& c = s.config;
    set_threads(c.train.threads > 0 ? static_cast<int>(c.train.threads) : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
    stop_signal = 0;
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    const bool tty = isatty(STDERR_FILENO);
    const Schedule schedule = parse_schedule(c.optim.schedule);
    const double clip = c.optim.clip > 0 ? c.optim.clip : std::numeric_limits<double>::infinity();
    const NamedTensors params = s.model->module().named_parameters();
    s.model->module().train();
    if (s.cuda_context && !s.device_step) {
        DecoderLM* decoder = s.model->decoder_lm();
        EncoderDecoder* enc_dec = s.model->enc_dec();
        const std::string unsupported = decoder ? device_step_unsupported(*decoder, *s.optimizer)
                                                : device_step_unsupported(*enc_dec, *s.optimizer);
        if (unsupported.empty())
            s.device_step = decoder ? std::make_unique<DeviceTraining>(*s.cuda_context, *decoder, *s.optimizer)
                                    : std::make_unique<DeviceTraining>(*s.cuda_context, *enc_dec, *s.optimizer);
        std::fprintf(stderr, "attnlab train: train.device = \"cuda\": %s\n",
                     unsupported.empty() ? "the whole training step runs on the GPU"
                                         : ("only the attention core runs on the GPU (" + unsupported + ")").c_str());
    }

    size_t tokens_since_log = 0;
    std::string last_eval;  // "  held-out acc 0.990 (step 250)" once there was an evaluation
    const int64_t first_step = s.step;
    Clock::time_point last_log = Clock::now();
    const Clock::time_point run_start = Clock::now();
    while (s.step < c.train.steps) {
        if (stop_signal) {
            s.checkpoint();
            std::fprintf(stderr, "%sattnlab train: interrupted at step %lld; checkpoint written; resume with `attnlab train --resume %s`\n",
                         tty ? "\n" : "", static_cast<long long>(s.step), s.dir.c_str());
            return 130;
        }
        const Batch batch = s.train_data->next(static_cast<size_t>(c.train.batch));
        const double lr = scheduled_lr(c.optim.lr, schedule, s.step, c.optim.warmup, c.train.steps);
        s.optimizer->lr = lr;
        const int64_t next = s.step + 1;
        const bool log_now = next % c.train.log_every == 0 || next == c.train.steps;
        AttentionMaps device_maps;  // the device's trace at log steps
        Hooks hooks = State::metrics_hooks();  // the host's: recording never changes the result
        Tensor logits;
        double loss_value = 0, grad_norm = 0;
        if (s.device_step) {
            if (log_now) logits = s.device_step->trace(batch, device_maps);  // the metrics' forward, before the update
            const DeviceTraining::StepResult r = s.device_step->step(batch, lr, clip);
            s.host_current = false;
            loss_value = r.loss;
            grad_norm = r.grad_norm;
        } else {
            logits = log_now ? s.model->forward(batch, hooks) : s.model->forward(batch);
            Tensor loss = cross_entropy(logits, batch.targets, batch.loss_mask);
            loss_value = loss.item();
            loss.backward();
            grad_norm = clip_grad_norm(params, clip);
        }
        if (!std::isfinite(loss_value) || !std::isfinite(grad_norm)) {
            s.flush_logs();
            const auto saved = list_checkpoints((s.dir / "checkpoints").string());
            std::fprintf(stderr, "%sattnlab train: step %lld: %s is %s; stopping (last good checkpoint: %s)\n", tty ? "\n" : "",
                         static_cast<long long>(next), std::isfinite(loss_value) ? "gradient norm" : "loss",
                         std::isnan(std::isfinite(loss_value) ? grad_norm : loss_value) ? "NaN" : "infinite",
                         saved.empty() ? "none" : saved.back().c_str());
            return 1;
        }
        if (!s.device_step) {  // the device step has updated its parameters already
            s.optimizer->step();
            s.optimizer->zero_grad();
        }
        s.step = next;
        size_t tokens = 0;
        for (size_t length : batch.lengths) tokens += length;
        s.tokens_total += tokens;
        tokens_since_log += tokens;

        if (log_now) {
            const double since = std::chrono::duration<double>(Clock::now() - last_log).count();
            const double tokens_per_s = static_cast<double>(tokens_since_log) / std::max(since, 1e-9);
            last_log = Clock::now();
            tokens_since_log = 0;
            const Score train_score = accuracy(logits, batch);
            s.log->append_train(s.step, loss_value, lr, grad_norm, tokens_per_s, s.elapsed());
            if (s.tensorboard)
                s.tensorboard->scalars(s.step, {{"train/loss", loss_value}, {"train/lr", lr}, {"train/grad_norm", grad_norm},
                                                {"train/tokens_per_s", tokens_per_s}, {"train/token_acc", train_score.token_acc}});
            s.log_attention(batch, s.device_step ? nullptr : &hooks, &device_maps);
            s.flush_logs();
            const double rate = static_cast<double>(s.step - first_step) /
                                std::max(std::chrono::duration<double>(Clock::now() - run_start).count(), 1e-9);
            // "train acc": of this step's training batch; the held-out accuracy is the last evaluation's
            std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  train acc %.3f%s  %.0f tok/s  ETA %s%s", tty ? "\r\033[K" : "",
                         static_cast<long long>(s.step), static_cast<long long>(c.train.steps), loss_value,
                         train_score.token_acc, last_eval.c_str(), tokens_per_s,
                         format_duration(static_cast<double>(c.train.steps - s.step) / std::max(rate, 1e-9)).c_str(),
                         tty ? "" : "\n");
        }
        if (s.step % c.train.eval_every == 0 || s.step == c.train.steps) {
            const Score e = s.evaluate_now();
            s.log->append_eval(s.step, e.loss, e.token_acc, e.seq_acc);
            if (s.tensorboard)
                s.tensorboard->scalars(s.step, {{"eval/loss", e.loss}, {"eval/token_acc", e.token_acc}, {"eval/seq_acc", e.seq_acc}});
            s.flush_logs();
            char text[64];
            std::snprintf(text, sizeof text, "  held-out acc %.3f (step %lld)", e.token_acc, static_cast<long long>(s.step));
            last_eval = text;
            if (!s.summary.first_step_at_target && e.token_acc >= c.train.target_accuracy) s.summary.first_step_at_target = s.step;
        }
        if (s.step % c.train.checkpoint_every == 0 || s.step == c.train.steps) s.checkpoint();
    }
    if (tty) std::fprintf(stderr, "\n");

    s.sync_host();  // the host model is the run's result
    const Score final_score = s.evaluate_now();
    RunSummary& r = s.summary;
    r.steps = s.step;
    r.eval_loss = final_score.loss;
    r.eval_token_acc = final_score.token_acc;
    r.eval_seq_acc = final_score.seq_acc;
    r.wall_s = s.elapsed();
    // over the whole run, earlier processes of a resumed run included
    r.tokens_per_s = static_cast<double>(s.tokens_before + static_cast<int64_t>(s.tokens_total)) / std::max(r.wall_s, 1e-9);
    r.peak_rss_mb = peak_rss_mb();
    std::ostringstream json;
    json.precision(10);
    json << "{\n  \"run_dir\": " << json_string(s.dir.string()) << ",\n  \"steps\": " << r.steps << ",\n  \"eval_loss\": " << r.eval_loss
         << ",\n  \"eval_token_acc\": " << r.eval_token_acc << ",\n  \"eval_seq_acc\": " << r.eval_seq_acc
         << ",\n  \"target_accuracy\": " << c.train.target_accuracy << ",\n  \"first_step_at_target\": "
         << (r.first_step_at_target ? std::to_string(*r.first_step_at_target) : "null") << ",\n  \"wall_s\": " << r.wall_s
         << ",\n  \"tokens_per_s\": " << r.tokens_per_s << ",\n  \"peak_rss_mb\": " << r.peak_rss_mb << "\n}\n";
    write_text_atomically(s.dir / "summary.json", json.str(), "[train]");
    std::printf("run %s: %lld steps, eval loss %.4f, token accuracy %.4f, sequence accuracy %.4f, %.1f s, %.0f tokens/s, peak memory %.0f MB\n",
                s.dir.c_str(), static_cast<long long>(r.steps), r.eval_loss, r.eval_token_acc, r.eval_seq_acc, r.wall_s,
                r.tokens_per_s, r.peak_rss_mb);
    return 0;
}

}  // namespace attnlab
