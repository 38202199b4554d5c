#include "experiments/analysis/cache.h"

#include <filesystem>
#include <map>

#include "data/h5file.h"
#include "experiments/files/provenance.h"
#include "experiments/files/output_file.h"

namespace attnlab {

namespace {

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
Batch recorded_batch(BatchSource& source, const LoadedCheckpoint& in, Hooks& hooks) {
    const size_t T = source.max_sequence_length(), S = static_cast<size_t>(in.config.task.max_len);
    Batch batch = source.next(static_cast<size_t>(batch_size(in.config)));
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

}  // namespace

double cache_bytes_needed(const CacheRequest& request, Hooks& hooks) {
    const LoadedCheckpoint& in = *request.checkpoint;
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, request.seed, 2);
    const Batch batch = recorded_batch(*source, in, hooks);  // at the width the file stores
    double per_batch = static_cast<double>(batch.inputs.values.size()) * 13.0;  // tokens, targets, mask, lengths
    for (const std::string& point : in.loaded.model->module().hook_points())
        if (hooks.has_recorded(point)) per_batch += 4.0 * static_cast<double>(hooks.last(point).numel());  // float32
    hooks.clear_recorded();
    return per_batch * static_cast<double>(request.batches);
}

size_t write_cache(const OutputFile& out, const CacheRequest& request, Hooks& hooks) {
    const LoadedCheckpoint& in = *request.checkpoint;
    const std::unique_ptr<BatchSource> source = make_batch_source(in.config, request.seed, 2);
    const size_t T = source->max_sequence_length(), S = static_cast<size_t>(in.config.task.max_len);
    const auto rows_per_batch = static_cast<size_t>(batch_size(in.config));
    size_t rows = 0;
    const TaskModel& model = *in.loaded.model;
    write_output(out, "[cache]", [&](const std::string& tmp) {
        h5::File f = h5::File::create(tmp, "cache");
        write_output_attrs(f, "attnlab-cache", in.path, in.checkpoint.step);
        f.write_attr_string("config", in.checkpoint.config_toml);
        f.write_attr_int("seed", static_cast<int64_t>(request.seed));
        f.write_attr_int("batches", request.batches);
        h5::Dataset tokens = f.create_extendible<int32_t>("tokens", {T}, rows_per_batch);
        h5::Dataset lengths = f.create_extendible<int64_t>("lengths", {}, rows_per_batch);
        h5::Dataset targets = f.create_extendible<int32_t>("targets", {T}, rows_per_batch);
        h5::Dataset loss_mask = f.create_extendible<uint8_t>("loss_mask", {T}, rows_per_batch);
        h5::Dataset src, src_lengths;
        if (model.encoder_decoder()) {
            src = f.create_extendible<int32_t>("src", {S}, rows_per_batch);
            src_lengths = f.create_extendible<int64_t>("src_lengths", {}, rows_per_batch);
        }
        const h5::Group group = f.create_group("hooks");
        std::map<std::string, h5::Dataset> datasets;
        for (int i = 0; i < request.batches; ++i) {
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

}  // namespace attnlab
