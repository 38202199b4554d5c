#include "experiments/run/metrics_log.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "data/h5_probe.h"
#include "experiments/files/provenance.h"

namespace attnlab {

namespace {

const char* const kTag = "metrics";
const char* const kFormat = "attnlab-metrics";
constexpr int64_t kFormatVersion = 1;

const std::vector<std::string> kTrainValues{"loss", "lr", "grad_norm", "tokens_per_s", "wall_s"};
const std::vector<std::string> kEvalValues{"loss", "token_acc", "seq_acc"};
// The evaluations a log may have beside /eval, each laid out as it (docs/file_formats.md).
const std::vector<std::string> kOptionalEvals{"eval_lengths", "eval_train"};
// score_std: standard deviation of the scaled scores (scale * q.k) over eligible
// pairs, per head: the seed chapter's Figure 21.5 statistic (row 0 is at init).
const std::vector<std::string> kAttentionValues{"entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"};
// /head_scores (train.head_scores): per-head scores [K, layers, heads] named by the
// writer (experiments/run/head_scores.h), then the model's loss on the repeat [K].
const char* const kHeadScores = "head_scores";
const char* const kRepeatLoss = "repeat_loss";

constexpr size_t kChunkRows = 1024;          // 1-D series: 8 KiB chunks
constexpr size_t kAttentionChunkValues = 8192;  // [rows, layers, heads] chunks of about 64 KiB
constexpr int64_t kUnwrittenStep = -1;        // fill values: what a reader sees of a row not yet written
constexpr double kUnwrittenValue = std::numeric_limits<double>::quiet_NaN();

// One group of the log: its step series and its value series, in layout order.
struct Series {
    h5::Dataset step;
    std::vector<h5::Dataset> values;
    int64_t last_step = -1;
};

Series open_series(const h5::Group& group, const std::vector<std::string>& value_names) {
    Series series;
    series.step = group.dataset("step");
    for (const std::string& name : value_names) series.values.push_back(group.dataset(name));
    return series;
}

void create_series(const h5::Group& group, const std::vector<std::string>& value_names, const Shape& row_shape) {
    group.create_extendible<int64_t>("step", {}, kChunkRows, kUnwrittenStep);
    const size_t chunk_rows = row_shape.empty() ? kChunkRows : std::max<size_t>(1, kAttentionChunkValues / numel_of(row_shape));
    for (const std::string& name : value_names)
        group.create_extendible<double>(name, row_shape, chunk_rows, kUnwrittenValue);
}

// The steps of the rows every dataset of `series` holds (a crash may leave
// one dataset shorter than another).
std::vector<int64_t> steps_of(const Series& series) {
    size_t rows = series.step.rows();
    for (const h5::Dataset& values : series.values) rows = std::min(rows, values.rows());
    return series.step.read_rows<int64_t>(0, rows);
}

// Cuts every dataset of `series` to the longest prefix of written rows whose
// step is <= `step`.
void truncate(Series& series, int64_t step) {
    const std::vector<int64_t> steps = steps_of(series);
    const size_t rows = steps.size();
    size_t keep = 0;
    while (keep < rows && steps[keep] >= 0 && steps[keep] <= step && (keep == 0 || steps[keep] >= steps[keep - 1]))
        ++keep;
    series.step.resize(keep);
    for (h5::Dataset& values : series.values) values.resize(keep);
    series.last_step = keep > 0 ? steps[keep - 1] : -1;
}

void append_step(Series& series, int64_t step) {
    if (step < 0 || step < series.last_step)
        series.step.where().fail("step " + std::to_string(step) + " after step " + std::to_string(series.last_step) +
                                     ": steps must be >= 0 and never decrease",
                                 false);
    series.step.append(&step, 1);
    series.last_step = step;
}

}  // namespace

struct MetricsLog::State {
    h5::File file;
    size_t layers = 0, heads = 0;
    Series train, eval;
    // The optional evaluations, each laid out as /eval, that this log has: /eval_lengths, /eval_train
    std::vector<std::pair<std::string, Series>> more_evals;
    std::vector<std::pair<std::string, Series>> attention;  // in the order of `kinds`
    std::optional<Series> head_scores;  // its per-head series, then repeat_loss
    std::vector<std::string> head_score_names;

    // The per-head series of an existing /head_scores: its members but step and repeat_loss.
    void find_head_score_names() {
        head_score_names.clear();
        if (!file.has(kHeadScores)) return;
        for (const std::string& name : file.group(kHeadScores).members())
            if (name != "step" && name != kRepeatLoss) head_score_names.push_back(name);
    }

    // Opens every series' datasets (after SWMR writing has started).
    void open_all(const std::vector<std::string>& kinds) {
        train = open_series(file.group("train"), kTrainValues);
        eval = open_series(file.group("eval"), kEvalValues);
        more_evals.clear();
        for (const std::string& group : kOptionalEvals)
            if (file.has(group)) more_evals.emplace_back(group, open_series(file.group(group), kEvalValues));
        attention.clear();
        const h5::Group groups = file.group("attention");
        for (const std::string& kind : kinds) attention.emplace_back(kind, open_series(groups.group(kind), kAttentionValues));
        head_scores.reset();
        if (file.has(kHeadScores)) {
            std::vector<std::string> names = head_score_names;
            names.push_back(kRepeatLoss);
            head_scores = open_series(file.group(kHeadScores), names);
        }
    }

    // Checks the attributes and the series of an existing log against the
    // layout; returns its attention kinds, with every series open.
    std::vector<std::string> read_layout(const std::string& path);

    // Datasets before the file, so that closing the file really closes it.
    void close_all() {
        train = Series{};
        eval = Series{};
        more_evals.clear();
        attention.clear();
        head_scores.reset();
    }
};

MetricsLog::MetricsLog(std::unique_ptr<State> state) : state_(std::move(state)) {}
MetricsLog::MetricsLog(MetricsLog&&) noexcept = default;
MetricsLog& MetricsLog::operator=(MetricsLog&&) noexcept = default;

MetricsLog::~MetricsLog() {
    try {
        close();
    } catch (const Error&) {
        // A destructor cannot report; close() explicitly to see the error.
    }
}

MetricsLog MetricsLog::create(const std::string& path, const std::string& config_toml, size_t layers, size_t heads,
                              std::vector<std::string> kinds, const std::vector<std::string>& optional_evals,
                              const std::vector<std::string>& head_scores) {
    const h5::Where where{kTag, path, ""};
    if (layers == 0 || heads == 0)
        where.fail("layers and heads must be positive (got " + std::to_string(layers) + " layers, " +
                       std::to_string(heads) + " heads)",
                   false);
    if (kinds.empty()) where.fail("needs at least one attention kind", false);
    for (const std::string& group : optional_evals)
        if (std::find(kOptionalEvals.begin(), kOptionalEvals.end(), group) == kOptionalEvals.end())
            where.fail("'" + group + "' is not an optional evaluation of the layout (eval_lengths, eval_train)", false);
    std::set<std::string> seen;
    for (const std::string& kind : kinds) {
        if (kind.empty() || kind == "." || kind.find('/') != std::string::npos)
            where.fail("attention kind '" + kind + "' is not a valid group name", false);
        if (!seen.insert(kind).second) where.fail("attention kind '" + kind + "' given twice", false);
    }

    auto state = std::make_unique<State>();
    state->layers = layers;
    state->heads = heads;
    state->file = h5::File::create(path, kTag, /*latest_format=*/true);  // SWMR needs the latest format
    const h5::File& file = state->file;
    file.write_attr_string("format", kFormat);
    file.write_attr_int("format_version", kFormatVersion);
    file.write_attr_string("config", config_toml);
    write_provenance_attrs(file, provenance());  // the process that started the run
    file.write_attr_int("layers", static_cast<int64_t>(layers));
    file.write_attr_int("heads", static_cast<int64_t>(heads));
    create_series(file.create_group("train"), kTrainValues, {});
    create_series(file.create_group("eval"), kEvalValues, {});
    for (const std::string& group : kOptionalEvals)  // in the layout's order
        if (std::find(optional_evals.begin(), optional_evals.end(), group) != optional_evals.end())
            create_series(file.create_group(group), kEvalValues, {});
    const h5::Group attention = file.create_group("attention");
    for (const std::string& kind : kinds) create_series(attention.create_group(kind), kAttentionValues, {layers, heads});
    if (!head_scores.empty()) {
        for (const std::string& name : head_scores)
            if (name.empty() || name == "step" || name == kRepeatLoss || name.find('/') != std::string::npos)
                where.fail("head score '" + name + "' is not a valid dataset name", false);
        const h5::Group group = file.create_group(kHeadScores);
        create_series(group, head_scores, {layers, heads});
        group.create_extendible<double>(kRepeatLoss, {}, kChunkRows, kUnwrittenValue);
        state->head_score_names = head_scores;
    }

    // Everything is created: SWMR mode allows no new objects or attributes.
    state->file.start_swmr_write();
    state->open_all(kinds);
    return MetricsLog(std::move(state));
}

std::vector<std::string> MetricsLog::State::read_layout(const std::string& path) {
    const h5::Where where{kTag, path, ""};
    if (!file.has_attr("format") || file.read_attr_string("format") != kFormat)
        where.fail("not an attnlab metrics log (no format=\"attnlab-metrics\" attribute)", false);
    const int64_t version = file.read_attr_int("format_version");
    if (version != kFormatVersion)
        where.fail("format_version " + std::to_string(version) + " is not supported (this build reads version " +
                       std::to_string(kFormatVersion) + ")",
                   false);
    const int64_t stored_layers = file.read_attr_int("layers"), stored_heads = file.read_attr_int("heads");
    if (stored_layers <= 0 || stored_heads <= 0) where.fail("layers and heads attributes must be positive", false);
    layers = static_cast<size_t>(stored_layers);
    heads = static_cast<size_t>(stored_heads);
    const std::vector<std::string> kinds = file.group("attention").members();
    find_head_score_names();

    open_all(kinds);
    const Shape row_shape{layers, heads};
    for (auto& [kind, series] : attention)
        for (const h5::Dataset& values : series.values) {
            Shape shape = values.shape();
            if (shape.size() != 3 || Shape(shape.begin() + 1, shape.end()) != row_shape)
                values.where().fail("shape " + shape_str(shape) + " is not (K," + std::to_string(layers) + "," +
                                        std::to_string(heads) + ")",
                                    false);
        }
    if (head_scores)
        for (size_t i = 0; i < head_score_names.size(); ++i) {
            const Shape shape = head_scores->values[i].shape();
            if (shape.size() != 3 || Shape(shape.begin() + 1, shape.end()) != row_shape)
                head_scores->values[i].where().fail("shape " + shape_str(shape) + " is not (K," + std::to_string(layers) + "," +
                                                        std::to_string(heads) + ")",
                                                    false);
        }
    return kinds;
}

MetricsLog MetricsLog::resume(const std::string& path, int64_t step) {
    // A log from an earlier process is read first in a child (data/h5_probe.h:
    // libhdf5 crashes on some crafted files), read-only, as below. A log whose
    // writer died is marked "open for write", which only SWMR read accepts.
    h5::probe(path, kTag, [&] {
        State probe;
        try {
            probe.file = h5::File::open(path, kTag, h5::File::Access::read, true);
        } catch (const Error& first) {
            try {
                probe.file = h5::File::open(path, kTag, h5::File::Access::read, true, /*swmr_read=*/true);
            } catch (const Error&) {
                throw first;
            }
        }
        probe.read_layout(path);
        for (const Series* series : {&probe.train, &probe.eval}) steps_of(*series);
        for (const auto& [group, series] : probe.more_evals) steps_of(series);
        for (const auto& [kind, series] : probe.attention) steps_of(series);
        if (probe.head_scores) steps_of(*probe.head_scores);
    });
    auto state = std::make_unique<State>();
    try {
        state->file = h5::File::open(path, kTag, h5::File::Access::write, /*latest_format=*/true);
    } catch (const Error& first) {
        // A run that died leaves the file marked "open for write"; clearing the
        // mark is what resuming after a crash needs. Anything else fails again.
        try {
            state->file = h5::File::open(path, kTag, h5::File::Access::write, true, false, /*clear_write_flags=*/true);
        } catch (const Error&) {
            throw first;
        }
    }
    const std::vector<std::string> kinds = state->read_layout(path);
    truncate(state->train, step);
    truncate(state->eval, step);
    for (auto& [group, series] : state->more_evals) truncate(series, step);
    for (auto& [kind, series] : state->attention) truncate(series, step);
    if (state->head_scores) truncate(*state->head_scores, step);
    const int64_t head_scores_last = state->head_scores ? state->head_scores->last_step : -1;
    const int64_t train_last = state->train.last_step, eval_last = state->eval.last_step;
    std::vector<int64_t> evals_last;
    for (auto& [group, series] : state->more_evals) evals_last.push_back(series.last_step);
    std::vector<int64_t> attention_last;
    for (auto& [kind, series] : state->attention) attention_last.push_back(series.last_step);

    state->close_all();
    state->file.start_swmr_write();
    state->open_all(kinds);
    state->train.last_step = train_last;
    state->eval.last_step = eval_last;
    for (size_t i = 0; i < evals_last.size(); ++i) state->more_evals[i].second.last_step = evals_last[i];
    for (size_t i = 0; i < attention_last.size(); ++i) state->attention[i].second.last_step = attention_last[i];
    if (state->head_scores) state->head_scores->last_step = head_scores_last;
    return MetricsLog(std::move(state));
}

MetricsLog::State& MetricsLog::live() const {
    if (!state_) throw Error("[metrics] the log is closed");
    return *state_;
}

void MetricsLog::append_train(int64_t step, double loss, double lr, double grad_norm, double tokens_per_s,
                              double wall_s) {
    Series& series = live().train;
    const double values[] = {loss, lr, grad_norm, tokens_per_s, wall_s};
    append_step(series, step);
    for (size_t i = 0; i < series.values.size(); ++i) series.values[i].append(&values[i], 1);
}

void MetricsLog::append_eval(const std::string& group, int64_t step, double loss, double token_acc, double seq_acc) {
    State& state = live();
    const auto found = std::find_if(state.more_evals.begin(), state.more_evals.end(), [&](const auto& g) { return g.first == group; });
    if (found == state.more_evals.end()) h5::Where{kTag, state.file.path(), ""}.fail("this log has no /" + group + " group", false);
    Series& series = found->second;
    const double values[] = {loss, token_acc, seq_acc};
    append_step(series, step);
    for (size_t i = 0; i < series.values.size(); ++i) series.values[i].append(&values[i], 1);
}

void MetricsLog::append_eval(int64_t step, double loss, double token_acc, double seq_acc) {
    Series& series = live().eval;
    const double values[] = {loss, token_acc, seq_acc};
    append_step(series, step);
    for (size_t i = 0; i < series.values.size(); ++i) series.values[i].append(&values[i], 1);
}

void MetricsLog::append_attention(const std::string& kind, int64_t step, const std::vector<double>& entropy,
                                  const std::vector<double>& entropy_norm, const std::vector<double>& masked_mass,
                                  const std::vector<double>& masked_mass_max, const std::vector<double>& score_std) {
    State& state = live();
    auto found = std::find_if(state.attention.begin(), state.attention.end(),
                              [&](const auto& entry) { return entry.first == kind; });
    if (found == state.attention.end())
        h5::Where{kTag, state.file.path(), ""}.fail("no attention kind '" + kind + "' in this log (it has " +
                                    std::to_string(state.attention.size()) + ")",
                                false);
    Series& series = found->second;
    const size_t expected = state.layers * state.heads;
    const std::vector<double> unknown(score_std.empty() ? expected : 0, kUnwrittenValue);  // not measured: NaN
    const std::vector<const std::vector<double>*> values{&entropy, &entropy_norm, &masked_mass, &masked_mass_max,
                                                         score_std.empty() ? &unknown : &score_std};
    for (size_t i = 0; i < values.size(); ++i)
        if (values[i]->size() != expected)
            series.values[i].where().fail(std::to_string(values[i]->size()) + " values given, expected layers * heads = " +
                                              std::to_string(expected),
                                          false);
    append_step(series, step);
    for (size_t i = 0; i < values.size(); ++i) series.values[i].append(values[i]->data(), 1);
}

void MetricsLog::append_head_scores(int64_t step, const std::vector<std::pair<std::string, std::vector<double>>>& per_head,
                                    double repeat_loss) {
    State& state = live();
    const h5::Where where{kTag, state.file.path(), ""};
    if (!state.head_scores) where.fail("this log has no /head_scores group", false);
    Series& series = *state.head_scores;
    const std::vector<std::string>& names = state.head_score_names;
    const size_t expected = state.layers * state.heads;
    // each of the log's series once, found by name (a resumed log lists them in HDF5's order)
    std::vector<const std::vector<double>*> rows(names.size(), nullptr);
    for (const auto& [name, values] : per_head) {
        const auto found = std::find(names.begin(), names.end(), name);
        if (found == names.end()) where.fail("this log has no /head_scores/" + name, false);
        const size_t i = static_cast<size_t>(found - names.begin());
        if (values.size() != expected)
            series.values[i].where().fail(std::to_string(values.size()) + " values given, expected layers * heads = " +
                                              std::to_string(expected),
                                          false);
        rows[i] = &values;
    }
    for (size_t i = 0; i < names.size(); ++i)
        if (rows[i] == nullptr) where.fail("no values given for /head_scores/" + names[i], false);
    append_step(series, step);
    for (size_t i = 0; i < names.size(); ++i) series.values[i].append(rows[i]->data(), 1);
    series.values.back().append(&repeat_loss, 1);
}

bool MetricsLog::has_head_scores() const { return live().head_scores.has_value(); }

void MetricsLog::flush() { live().file.flush(); }

void MetricsLog::close() {
    if (!state_) return;
    std::unique_ptr<State> state = std::move(state_);
    state->close_all();
    state->file.close();
}

const std::string& MetricsLog::path() const { return live().file.path(); }
size_t MetricsLog::layers() const { return live().layers; }
size_t MetricsLog::heads() const { return live().heads; }

std::vector<std::string> MetricsLog::kinds() const {
    std::vector<std::string> kinds;
    for (const auto& [kind, series] : live().attention) kinds.push_back(kind);
    return kinds;
}

}  // namespace attnlab
