// A finite training set (task.train_size = N): memorisation, generalisation and
// grokking need the model to see the same examples again.
//
// TrainingSet draws N distinct examples once from the task's training stream
// (stream 0 of the run's seed) and trains on them in epochs: each epoch visits
// every example once, in an order drawn afresh, and a batch that passes the end
// of an epoch continues into the next. HeldOutTask draws the task's examples
// from another stream and skips every example of the training set, so an
// evaluation never sees a trained example. Two examples are the same when their
// tokens are (translate: source and target).
//
// Resuming: rng() is the order's generator as it was at the start of the current
// epoch and position() how far into the epoch the set is; set_position() draws
// that epoch's order again from rng() and continues there.
#pragma once

#include <memory>
#include <set>
#include <vector>

#include "data/tasks.h"

namespace attnlab {

using Example = TaskGenerator::Example;

class TrainingSet : public BatchSource {
public:
    TrainingSet(const TaskConfig& config, size_t size, uint64_t seed);
    Batch next(size_t batch_size) override;
    size_t max_sequence_length() const override { return generator_.max_sequence_length(); }
    bool encoder_decoder() const override { return generator_.encoder_decoder(); }
    Rng& rng() override { return epoch_rng_; }
    std::vector<int64_t> position() const override { return {static_cast<int64_t>(next_)}; }
    void set_position(const std::vector<int64_t>& position) override;

    size_t size() const { return examples_.size(); }
    // The first `count` examples in the order they were drawn, as batches of
    // `batch_size` rows: the training set's evaluation (the same every time).
    std::vector<Batch> evaluation_batches(size_t count, size_t batch_size) const;
    const std::vector<Example>& examples() const { return examples_; }  // in the order drawn
    using Keys = std::set<std::vector<int32_t>>;
    std::shared_ptr<const Keys> keys() const { return keys_; }

private:
    void draw_order();  // this epoch's order, from epoch_rng_

    TaskGenerator generator_;
    std::vector<Example> examples_;
    std::shared_ptr<Keys> keys_;
    Rng epoch_rng_;             // the order's generator at the start of this epoch
    Rng next_epoch_rng_;        // ... and after drawing it: the next epoch's start
    std::vector<size_t> order_;  // this epoch's order of examples_
    size_t next_ = 0;            // examples of this epoch already trained on
};

class HeldOutTask : public BatchSource {
public:
    // `training`: the examples to skip (TrainingSet::keys of the same task and seed).
    HeldOutTask(const TaskConfig& config, uint64_t seed, uint64_t stream, std::shared_ptr<const TrainingSet::Keys> training);
    Batch next(size_t batch_size) override;
    size_t max_sequence_length() const override { return generator_.max_sequence_length(); }
    bool encoder_decoder() const override { return generator_.encoder_decoder(); }
    Rng& rng() override { return generator_.rng(); }

private:
    TaskGenerator generator_;
    std::shared_ptr<const TrainingSet::Keys> training_;
};

// An example's identity: its tokens (translate: the source, a -1, then the target).
std::vector<int32_t> example_key(const Example& example);

// The training set as a token file (data/token_file.h), in the order it was drawn:
// /tokens [N, S] int32 (each whole sequence; translate: the target), /lengths [N]
// int64, /loss_mask [N, S] uint8 (1 where a token's prediction counts); translate
// adds /src [N, S_src] and /src_lengths [N]. A run writes it as train_set.h5.
void write_training_set(const std::string& path, const TrainingSet& set);

}  // namespace attnlab
