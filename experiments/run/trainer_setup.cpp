// Building a run: its state from a config (everything that can fail on the
// config fails before the run folder is created), a new run's folder and logs,
// and a resume from the newest checkpoint. The loop itself is in trainer.cpp.
#include "experiments/run/trainer.h"
#include "experiments/run/trainer_state.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "autograd/device/backend.h"
#include "data/finite_task.h"
#include "experiments/config/memory_estimate.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

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
                                                 "train.target_accuracy", "train.tensorboard", "optim.schedule_steps", "run.name", "run.out_dir"};

bool resumable(const std::string& change) {  // "train.steps (80, was 40)"
    const std::string key = change.substr(0, change.find(' '));
    return std::find(kResumableKeys.begin(), kResumableKeys.end(), key) != kResumableKeys.end();
}

// How train.batch splits across the ranks of an mpirun launch (none to check for one process).
void check_split(const Config& c, const World& world) {
    const int64_t n = world.size();
    if (n == 1) return;
    const std::string ranks = std::to_string(n) + " ranks (mpirun -np " + std::to_string(n) + ")";
    if (c.train.device == "cuda")
        throw Error("[train] train.device = \"cuda\" with " + ranks + ": data parallelism runs on the cpu only "
                    "(the GPU's would be NCCL's); train on one process, or set train.device = \"cpu\"");
    if (c.train.reduce == "fast" && batch_size(c) % n != 0)
        throw ConfigError("train.batch", "train.batch = " + std::to_string(batch_size(c)) + " cannot be split across " + ranks +
                                             ": it must be a multiple of " + std::to_string(n));
    if (c.train.reduce == "deterministic" && ((n & (n - 1)) != 0 || c.train.micro_batches % n != 0))
        throw ConfigError("train.micro_batches", "train.reduce = \"deterministic\" with " + ranks +
                                                     ": the rank count must be a power of two dividing train.micro_batches = " +
                                                     std::to_string(c.train.micro_batches));
}

// Runs `phase` on this rank (when `mine`), then agrees with every rank: see World::agree.
template <class F>
void on_every_rank(const World& world, bool mine, F&& phase) {
    std::exception_ptr failure;
    if (mine) {
        try {
            phase();
        } catch (...) {
            failure = std::current_exception();
        }
    }
    world.agree(failure);
}

std::string joined(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
}

// What a resume does to the learning-rate schedule when its end moved (train.steps
// raised with optim.schedule_steps = 0): the rate at `step` before and now, and
// how to keep the old schedule instead. Empty when nothing changes.
std::string schedule_change(const Config& saved, const Config& now, int64_t step) {
    const Schedule schedule = parse_schedule(now.optim.schedule);
    const int64_t before = schedule_horizon(saved), after = schedule_horizon(now);
    if (schedule == Schedule::constant || before == after) return "";
    char text[512];
    std::snprintf(text, sizeof text,
                  "the %s schedule now ends at step %lld instead of %lld, so the learning rate at step %lld goes from %.3g to %.3g; "
                  "to keep the old schedule (and its floor after step %lld), set optim.schedule_steps = %lld in config.toml",
                  now.optim.schedule.c_str(), static_cast<long long>(after), static_cast<long long>(before), static_cast<long long>(step),
                  scheduled_lr(saved.optim.lr, schedule, step, saved.optim.warmup, before, saved.optim.min_lr),
                  scheduled_lr(now.optim.lr, schedule, step, now.optim.warmup, after, now.optim.min_lr), static_cast<long long>(before),
                  static_cast<long long>(before));
    return text;
}

// `model` with a positional table of config.model.max_len rows: its parameters,
// and a learned table's rows beyond the drawn ones from a stream of their own
// (they are used only by train.eval_lengths' evaluations, never trained).
std::unique_ptr<TaskModel> with_wider_table(std::unique_ptr<TaskModel> model, const Config& config, size_t longest, Rng* dropout_rng) {
    Rng extra_rows(static_cast<uint64_t>(config.run.seed), 12);
    auto wider = std::make_unique<TaskModel>(config, longest, extra_rows, dropout_rng);
    NamedTensors narrow = model->module().named_parameters(), values;
    for (const auto& [name, w] : wider->module().named_parameters()) {
        const auto same = std::find_if(narrow.begin(), narrow.end(), [&](const auto& p) { return p.first == name; });
        if (same == narrow.end()) fail("train", "the wider model has a parameter " + name + " the drawn one lacks");
        if (same->second.shape() == w.shape()) {
            values.emplace_back(name, same->second);
            continue;
        }
        std::vector<double> rows = w.values();  // (max_len, D): the drawn rows first
        const std::vector<double> drawn = same->second.values();
        std::copy(drawn.begin(), drawn.end(), rows.begin());
        values.emplace_back(name, Tensor::from_values(rows, w.shape(), w.dtype()));
    }
    wider->module().load_state_dict(values);
    return wider;
}

// train.freeze: the parameters its patterns name take no gradient (and so no
// update); the others, returned, are what the optimiser and clipping see. A
// pattern that names no parameter, or one that freezes them all, is refused.
NamedTensors trainable_parameters(const Config& config, const NamedTensors& all) {
    std::vector<std::string> names;
    for (const auto& [name, p] : all) names.push_back(name);
    for (const std::string& pattern : config.train.freeze)
        if (std::none_of(names.begin(), names.end(), [&](const std::string& name) { return hook_pattern_matches(pattern, name); }))
            throw ConfigError("train.freeze", "train.freeze: \"" + pattern + "\" names no parameter of the model (nearest: " +
                                                  nearest_names(pattern, names) + ")");
    NamedTensors trainable;
    for (const auto& [name, p] : all) {
        const bool frozen = std::any_of(config.train.freeze.begin(), config.train.freeze.end(),
                                        [&](const std::string& pattern) { return hook_pattern_matches(pattern, name); });
        if (frozen) Tensor(p).set_requires_grad(false);
        else trainable.emplace_back(name, p);
    }
    if (trainable.empty()) throw ConfigError("train.freeze", "train.freeze: freezes every parameter; nothing would train");
    return trainable;
}

}  // namespace

Trainer::State::State(const Config& c)
    : config(c), init_rng(static_cast<uint64_t>(c.run.seed), 10), dropout_rng(static_cast<uint64_t>(c.run.seed), 11) {
    const auto seed = static_cast<uint64_t>(config.run.seed);
    resolve_text_task(config);  // before anything reads task.vocab
    if (!config.task.tokenizer.empty()) model_tokenizer(config);  // a folder the run records: checked, as import checks it
    train_data = make_batch_source(config, seed, 0);
    // held out: a stream of its own, the same batches at every evaluation
    const std::unique_ptr<BatchSource> eval_data = make_batch_source(config, seed, 1);
    const auto batch = static_cast<size_t>(batch_size(config));
    for (int64_t i = 0; i < config.train.eval_batches; ++i) eval_batches.push_back(eval_data->next(batch));
    // a finite training set: its first examples, as many as an evaluation holds, evaluated beside the held-out ones
    if (const auto* set = dynamic_cast<const TrainingSet*>(train_data.get()))
        eval_train_batches = set->evaluation_batches(static_cast<size_t>(config.train.eval_batches) * batch, batch);
    const size_t trained = train_data->max_sequence_length();
    size_t longest = trained;
    if (const auto [lo, hi] = config.train.eval_lengths; hi > 0) {  // and at other lengths: a stream of their own
        const std::unique_ptr<BatchSource> at = make_batch_source(with_task_lengths(config, lo, hi), seed, 3);
        for (int64_t i = 0; i < config.train.eval_batches; ++i)
            eval_length_batches.push_back(at->next(batch));
        longest = std::max(longest, at->max_sequence_length());  // a learned table covers them (untrained beyond training)
    }
    check_fits_in_memory(config, static_cast<double>(longest),  // a token file's lengths are known only now
                         longest > trained ? "train.eval_lengths" : "task.max_len");
    if (config.model.max_len > 0 && static_cast<size_t>(config.model.max_len) < longest)
        throw ConfigError("model.max_len", "model.max_len: " + std::to_string(config.model.max_len) +
                                               " is shorter than the longest sequence of " + config.task.path + " (" +
                                               std::to_string(longest) + " inputs)");
    // The resolved config names the positional table it built, so a checkpoint
    // describes its model without the task's data (a moved token file).
    // The model is drawn as training alone would draw it (the table training needs,
    // or model.max_len), whatever the evaluation lengths: an evaluation option
    // never changes the initialisation, hence never the training series.
    Config drawn = config;
    if (drawn.model.max_len == 0) drawn.model.max_len = static_cast<int64_t>(trained);
    model = std::make_unique<TaskModel>(drawn, trained, init_rng, &dropout_rng);
    if (config.model.max_len == 0) config.model.max_len = static_cast<int64_t>(longest);
    if (config.model.max_len != drawn.model.max_len) model = with_wider_table(std::move(model), config, longest, &dropout_rng);
    // train.device = "cuda": the same model, moved; the optimiser made after it keeps its state there too
    if (config.train.device == "cuda") model->module().to(Device::cuda);  // "[cuda] Context: <reason>" without a device
    trainable = trainable_parameters(config, model->module().named_parameters());
    optimizer = make_optimizer(config, trainable);
    // the same batch at every evaluation, for every run of this model's shape (seed 0)
    if (config.train.head_scores) head_score_input = head_score_batch(config, trained, kHeadScoreRows, 0);
}

Trainer::Trainer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Trainer::~Trainer() = default;
const std::string& Trainer::run_dir() const { return state_->dir.native(); }
const RunSummary& Trainer::summary() const { return state_->summary; }

// Everything that can fail on the config fails here, before anything is written.
std::unique_ptr<Trainer::State> Trainer::build_state(const Config& config, const World& world) {
    validate(config);
    check_split(config, world);
    if (config.train.device == "cuda") device::require_device("train.device");
    auto state = std::make_unique<State>(config);
    state->world = &world;
    return state;
}

void Trainer::check_runnable(const Config& config) { build_state(config, single_world()); }

std::unique_ptr<Trainer> Trainer::start(const Config& config, const std::string& run_dir, const World& world) {
    std::unique_ptr<State> state;
    on_every_rank(world, true, [&] { state = build_state(config, world); });
    // From the first write of the run's folder, SIGINT and SIGTERM wait for the
    // loop: it checkpoints at step 0 and stops, leaving a run that resumes. Before
    // it (reading data, building the model) they end the process, nothing written.
    install_stop_handlers();
    on_every_rank(world, world.root(), [&] { state->dir = create_run(*state, run_dir); });
    state->dir = world.broadcast(state->dir.string());
    return std::unique_ptr<Trainer>(new Trainer(std::move(state)));
}

// A new run's folder, lock, config.toml, metrics.h5 and step-0 attention (rank 0).
fs::path new_run_folder(const Config& config, const std::string& run_dir, const std::string& when_taken) {
    if (run_dir.empty()) return claim_new_folder(config.run.out_dir, config.run.name, "[train]");
    // exactly there, as a sweep's cell: the folder must be new (mkdir is exclusive)
    const fs::path dir = folder_path(run_dir);
    if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path());
    std::error_code ec;
    if (!fs::create_directory(dir, ec) || ec)
        throw Error("[train] --run-dir " + run_dir + (fs::exists(dir) ? " already exists" + when_taken
                                                                     : ": cannot create it (" + ec.message() + ")"));
    return dir;
}

fs::path Trainer::create_run(State& s, const std::string& run_dir) {
    const Config& config = s.config;
    const fs::path dir = new_run_folder(config, run_dir, " (resume it with --resume)");
    s.dir = dir;
    s.lock.emplace(dir, "[train]");
    fs::create_directories(dir / "checkpoints");
    write_text_atomically(dir / "config.toml", to_toml(config), "[train]");
    if (const auto* set = dynamic_cast<const TrainingSet*>(s.train_data.get()))  // what a finite run trains on, for analysis
        write_atomically(dir / "train_set.h5", "[train]", [&](const std::string& tmp) { write_training_set(tmp, *set); });
    std::vector<std::string> evals;  // beside /eval
    if (!s.eval_length_batches.empty()) evals.push_back("eval_lengths");
    if (!s.eval_train_batches.empty()) evals.push_back("eval_train");
    s.log.emplace(MetricsLog::create((dir / "metrics.h5").string(), to_toml(config), s.model->layers(), s.model->heads(),
                                     s.model->kinds(), evals, s.head_score_input ? head_score_names() : std::vector<std::string>{}));
    s.open_tensorboard();
    s.log_initial_attention();
    return dir;
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& run_dir, const World& world) {
    // From here a signal waits for the loop, which checkpoints at the resumed step
    // and exits 130: the setup below takes the run's lock and cuts its metrics back.
    install_stop_handlers();
    std::unique_ptr<State> state;
    on_every_rank(world, true, [&] { state = resumed_state(run_dir, world); });
    return std::unique_ptr<Trainer>(new Trainer(std::move(state)));
}

std::unique_ptr<Trainer::State> Trainer::resumed_state(const std::string& run_dir, const World& world) {
    const fs::path dir(run_dir);
    const std::string where = "[train] --resume " + run_dir + ": ";
    if (!fs::exists(dir / "config.toml")) {
        std::vector<std::string> runs;  // a train.seeds folder: its members resume one by one
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec))
            if (fs::exists(entry.path() / "config.toml")) runs.push_back(entry.path().filename().string());
        std::sort(runs.begin(), runs.end());
        if (!runs.empty())
            throw Error(where + "not a run directory but a folder of " + std::to_string(runs.size()) + " runs (" + runs.front() +
                        (runs.size() > 1 ? ", ... " + runs.back() : std::string()) +
                        "; train.seeds writes one per seed): resume each, `attnlab train --resume " + (dir / runs.front()).string() + "`");
        throw Error(where + "not a run directory (no config.toml)");
    }
    std::optional<RunLock> lock;  // rank 0's, before anything is read: a second writer is refused here
    if (world.root()) lock.emplace(dir, "[train]");
    const Config config = load_saved_config((dir / "config.toml").string());
    check_split(config, world);  // any rank count resumes, if it splits the batch
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
    const Config saved_config = parse_saved_config(data.config_toml, newest + " (config attribute)");
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
    state->world = &world;
    state->dir = dir;
    if (lock) state->lock.emplace(std::move(*lock));
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
    const auto position = std::find_if(data.data.begin(), data.data.end(), [](const auto& d) { return d.first == "train_position"; });
    try {  // a finite training set continues where it was in its epoch
        state->train_data->set_position(position == data.data.end() ? std::vector<int64_t>{} : position->second);
    } catch (const Error& e) {
        throw Error("[train] " + newest + ": data/train_position: " + e.what());
    }
    if (!state->train_data->position().empty() && position == data.data.end())
        throw Error("[train] " + newest + ": has no data/train_position, which a run with task.train_size needs to resume");
    for (const auto& [name, values] : data.data) {
        if (name == "first_step_at_target" && !values.empty() && values[0] >= 0) state->summary.first_step_at_target = values[0];
        if (name == "wall_ms" && !values.empty()) state->wall_before = static_cast<double>(values[0]) / 1000.0;
        if (name == "tokens" && !values.empty()) state->tokens_before = values[0];
    }
    state->step = data.step;
    if (!world.root()) return state;
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
    if (const std::string note = schedule_change(saved_config, config, data.step); !note.empty())
        std::fprintf(stderr, "attnlab train: %s\n", note.c_str());
    return state;
}

}  // namespace attnlab
