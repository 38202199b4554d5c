// attnlab cache CHECKPOINT --hooks NAME,... --out F.h5 [--batches N] [--seed S]
// Named activations (hook points, layers/hooks.h) over N batches of the task's
// fresh data (the `attnlab eval` stream), streamed batch by batch into chunked,
// growing HDF5 datasets: memory holds one batch's activations at a time.
#include <cstdio>
#include <filesystem>
#include <map>

#include "experiments/files/provenance.h"
#include "data/h5file.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/run_files.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* kCacheHelp = R"(
--hooks: hook point names or globs (README, "Hook points"), e.g.
"blocks.*.attn.z,blocks.1.resid_post". Each batch is padded to the task's longest
sequence so that every row has one shape; /lengths says which positions are real.

--out F.h5: attrs format = "attnlab-cache", format_version, checkpoint, step, config,
seed, batches; /tokens [N, T] (int32), /lengths [N] (int64), /targets [N, T]
(int32) and /loss_mask [N, T] (uint8: 1 where the task scores the prediction;
the loss `attnlab eval` reports is the mean cross-entropy there), for an
encoder-decoder /src [N, S] and /src_lengths [N]; /hooks/<point> [N, ...]
float32, one row per sequence, chunked by batch.

Before anything is written, the first batch is run once to size the output:
its bytes per batch times --batches must fit in the free space of --out's
folder (with 10% to spare), else one line and exit 2. A signal during the
write removes the temporary file.
)";

// `x` (B, T) right-padded with 0 (<PAD>, or false for a mask) to `width` columns.
template <class Grid>
Grid padded(const Grid& x, size_t width) {
    const size_t B = x.shape[0], T = x.shape[1];
    decltype(x.values) v(B * width, 0);
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < T && t < width; ++t) v[b * width + t] = x.values[b * T + t];
    return Grid({B, width}, v);
}

// The next batch of `source`, padded to the task's longest sequence (T) and
// source (S) so that every row of the file has one shape, run through the model
// with `hooks` recording (eval mode, no graph).
Batch recorded_batch(BatchSource& source, const CheckpointInput& in, Hooks& hooks) {
    const size_t T = source.max_sequence_length(), S = static_cast<size_t>(in.config.task.max_len);
    Batch batch = source.next(static_cast<size_t>(in.config.train.batch));
    batch.inputs = padded(batch.inputs, T);
    batch.targets = padded(batch.targets, T);
    batch.loss_mask = padded(batch.loss_mask, T);
    if (in.loaded.model->encoder_decoder()) batch.src = padded(batch.src, S);
    hooks.clear_recorded();
    NoGradGuard no_grad;
    in.loaded.model->module().eval();
    in.loaded.model->forward(batch, hooks);
    return batch;
}

// Refuses, before anything is written, an output that would not fit: the first
// batch's recorded activations (and its tokens) times the batches against the
// free space of the output's folder, with 10% to spare.
void check_fits_on_disk(const std::string& out, const CheckpointInput& in, Hooks& hooks) {
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, in.seed, 2);
    const Batch batch = recorded_batch(*source, in, hooks);  // at the width the file stores
    double per_batch = static_cast<double>(batch.inputs.values.size()) * 13.0;  // tokens, targets, mask, lengths
    for (const std::string& point : in.loaded.model->module().hook_points())
        if (hooks.has_recorded(point)) per_batch += 4.0 * static_cast<double>(hooks.last(point).numel());  // float32
    hooks.clear_recorded();
    const double needed = per_batch * static_cast<double>(in.batches) * 1.1;
    const std::filesystem::path folder = std::filesystem::path(out).parent_path();
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(folder.empty() ? "." : folder, ec);
    if (ec) return;  // no figure to check against
    if (needed > static_cast<double>(space.available))
        throw UsageError("--out " + out + ": " + std::to_string(in.batches) + " batches need about " +
                         std::to_string(static_cast<long long>(needed / 1e6)) + " MB, and its folder has " +
                         std::to_string(static_cast<long long>(static_cast<double>(space.available) / 1e6)) +
                         " MB free (lower --batches or record fewer --hooks)");
}

// Every batch's activations appended to `out` as it comes; returns the sequences written.
size_t stream_cache(const std::string& out, const CheckpointInput& in, Hooks& hooks) {
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, in.seed, 2);
    const size_t T = source->max_sequence_length(), S = static_cast<size_t>(in.config.task.max_len);
    const size_t batch_size = static_cast<size_t>(in.config.train.batch);
    size_t rows = 0;
    const TaskModel& model = *in.loaded.model;
    write_atomically(std::filesystem::path(out), "[cache]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "cache");
        write_provenance_attrs(f, provenance());
        f.write_attr_string("format", "attnlab-cache");
        f.write_attr_int("format_version", 1);
        f.write_attr_string("checkpoint", in.path);
        f.write_attr_int("step", in.checkpoint.step);
        f.write_attr_string("config", in.checkpoint.config_toml);
        f.write_attr_int("seed", static_cast<int64_t>(in.seed));
        f.write_attr_int("batches", in.batches);
        h5::Dataset tokens = f.create_extendible<int32_t>("tokens", {T}, batch_size);
        h5::Dataset lengths = f.create_extendible<int64_t>("lengths", {}, batch_size);
        h5::Dataset targets = f.create_extendible<int32_t>("targets", {T}, batch_size);
        h5::Dataset loss_mask = f.create_extendible<uint8_t>("loss_mask", {T}, batch_size);
        h5::Dataset src, src_lengths;
        if (model.encoder_decoder()) {
            src = f.create_extendible<int32_t>("src", {S}, batch_size);
            src_lengths = f.create_extendible<int64_t>("src_lengths", {}, batch_size);
        }
        const h5::Group group = f.create_group("hooks");
        std::map<std::string, h5::Dataset> datasets;
        for (int i = 0; i < in.batches; ++i) {
            const Batch batch = recorded_batch(*source, in, hooks);
            const size_t B = batch.inputs.shape[0];
            tokens.append(batch.inputs.values.data(), B);
            targets.append(batch.targets.values.data(), B);
            loss_mask.append(batch.loss_mask.values.data(), B);
            const std::vector<int64_t> n(batch.lengths.begin(), batch.lengths.end());
            lengths.append(n.data(), B);
            if (model.encoder_decoder()) {
                src.append(batch.src.values.data(), B);
                const std::vector<int64_t> m(batch.src_lengths.begin(), batch.src_lengths.end());
                src_lengths.append(m.data(), B);
            }
            for (const std::string& point : model.module().hook_points()) {
                if (!hooks.has_recorded(point)) continue;
                const Tensor& value = hooks.last(point);
                if (!datasets.count(point)) {
                    const Shape row(value.shape().begin() + 1, value.shape().end());
                    datasets[point] = group.create_extendible<float>(point, row, B);
                    group.write_attr_string(point, model.module().hook_point_axes(point));  // "batch pos d_model"
                }
                const std::vector<double> v = value.values();
                const std::vector<float> values(v.begin(), v.end());
                datasets[point].append(values.data(), B);
            }
            rows += B;
        }
        for (auto& [point, d] : datasets) d.close();
        for (h5::Dataset* d : {&tokens, &lengths, &targets, &loss_mask, &src, &src_lengths})
            if (model.encoder_decoder() || (d != &src && d != &src_lengths)) d->close();
        f.close();
    });
    return rows;
}

}  // namespace

int cmd_cache(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab cache", "Named activations over batches of the task's data, streamed to HDF5.");
    add_checkpoint_options(options, "4");
    options.add_options()("hooks", "hook point names or globs, comma-separated", cxxopts::value<std::string>())
                         ("out", "HDF5 file to write", cxxopts::value<std::string>())
                         ("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kCacheHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    checkpoint_batches(parsed);
    if (!parsed.count("hooks")) throw UsageError("--hooks is required (e.g. --hooks \"blocks.*.attn.z\")");
    if (!parsed.count("out")) throw UsageError("--out is required (the HDF5 file to write)");
    const std::string out = parsed["out"].as<std::string>();
    check_output("--out", out, {path}, "attnlab-cache");
    const CheckpointInput in = load_checkpoint_input(parsed);
    const TaskModel& model = *in.loaded.model;
    Hooks hooks;
    for (const std::string& name : list_option(parsed, "hooks")) hooks.record(name);
    if (hooks.patterns().empty()) throw UsageError("--hooks: no hook point named");
    { HookScope check(model.module(), hooks); }  // an unknown name fails before anything is written

    check_fits_on_disk(out, in, hooks);
    const size_t rows = stream_cache(out, in, hooks);
    std::printf("cache %s (step %lld): %zu sequences, %zu hook points -> %s\n", in.path.c_str(),
                static_cast<long long>(in.checkpoint.step), rows, [&] {
                    size_t n = 0;
                    for (const std::string& p : model.module().hook_points()) n += hooks.has_recorded(p);
                    return n;
                }(), out.c_str());
    return 0;
}

}  // namespace attnlab
