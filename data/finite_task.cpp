#include "data/finite_task.h"

#include <algorithm>
#include <numeric>

#include "data/h5file.h"

namespace attnlab {

namespace {

// Draws in a row that may find nothing new before a task counts as exhausted:
// far beyond the wait for the last unseen example of any set this size.
size_t patience(size_t size) { return std::max<size_t>(100000, 20 * size); }

// The next example of `generator` that `wanted` takes; `exhausted(draws)` (which
// throws) when patience(size) draws in a row are refused.
template <class Wanted, class Exhausted>
Example draw_wanted(TaskGenerator& generator, size_t size, Wanted&& wanted, Exhausted&& exhausted) {
    for (size_t refused = 0;;) {
        Example example = generator.make_example();
        if (wanted(example)) return example;
        if (++refused == patience(size)) exhausted(refused);
    }
}

}  // namespace

std::vector<int32_t> example_key(const Example& example) {
    std::vector<int32_t> key = example.src;
    if (!key.empty()) key.push_back(-1);
    key.insert(key.end(), example.seq.begin(), example.seq.end());
    return key;
}

TrainingSet::TrainingSet(const TaskConfig& config, size_t size, uint64_t seed)
    : generator_(config, seed, 0), keys_(std::make_shared<Keys>()), epoch_rng_(seed, 4), next_epoch_rng_(seed, 4) {
    if (config.pack > 0) fail("task", "task.train_size: a finite set trains one example per row; task.pack must be 0");
    if (size == 0) fail("task", "task.train_size must be at least 1");
    while (examples_.size() < size)
        examples_.push_back(draw_wanted(
            generator_, size, [&](const Example& e) { return keys_->insert(example_key(e)).second; },
            [&](size_t draws) {
                fail("task", "task.train_size = " + std::to_string(size) + ": task \"" + config.name + "\" has only about " +
                                 std::to_string(examples_.size()) + " distinct examples (" + std::to_string(draws) +
                                 " draws in a row found no new one); lower task.train_size");
            }));
    draw_order();
}

void TrainingSet::draw_order() {
    order_.resize(examples_.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    next_epoch_rng_ = epoch_rng_;
    for (size_t i = order_.size(); i > 1; --i)
        std::swap(order_[i - 1], order_[static_cast<size_t>(next_epoch_rng_.integer(0, static_cast<int64_t>(i)))]);
    next_ = 0;
}

void TrainingSet::set_position(const std::vector<int64_t>& position) {
    if (position.size() != 1 || position[0] < 0 || static_cast<size_t>(position[0]) > examples_.size())
        throw Error("[data] a training set of " + std::to_string(examples_.size()) + " examples cannot resume at position " +
                    (position.size() == 1 ? std::to_string(position[0]) : "of " + std::to_string(position.size()) + " values"));
    draw_order();
    next_ = static_cast<size_t>(position[0]);
}

Batch TrainingSet::next(size_t batch_size) {
    std::vector<Example> rows;
    rows.reserve(batch_size);
    while (rows.size() < batch_size) {
        if (next_ == order_.size()) {  // the next epoch, in a new order
            epoch_rng_ = next_epoch_rng_;
            draw_order();
        }
        rows.push_back(examples_[order_[next_++]]);
    }
    return generator_.batch_of(rows);
}

std::vector<Batch> TrainingSet::evaluation_batches(size_t count, size_t batch_size) const {
    std::vector<Batch> batches;
    count = std::min(count, examples_.size());
    for (size_t begin = 0; begin < count; begin += batch_size) {
        const auto first = examples_.begin() + static_cast<std::ptrdiff_t>(begin);
        batches.push_back(generator_.batch_of({first, first + static_cast<std::ptrdiff_t>(std::min(batch_size, count - begin))}));
    }
    return batches;
}

void write_training_set(const std::string& path, const TrainingSet& set) {
    const std::vector<Example>& examples = set.examples();
    const bool enc_dec = set.encoder_decoder();
    size_t S = 0, S_src = 0;
    for (const Example& e : examples) S = std::max(S, e.seq.size()), S_src = std::max(S_src, e.src.size());
    const size_t N = examples.size();
    std::vector<int32_t> tokens(N * S, kPad), src(N * S_src, kPad);
    std::vector<uint8_t> loss_mask(N * S, 0);
    std::vector<int64_t> lengths, src_lengths;
    for (size_t n = 0; n < N; ++n) {
        const Example& e = examples[n];
        std::copy(e.seq.begin(), e.seq.end(), tokens.begin() + static_cast<std::ptrdiff_t>(n * S));
        // counts[t] is about the prediction of seq[t + 1] (translate: of seq[t], from <BOS> on)
        for (size_t t = 0; t < e.counts.size(); ++t) loss_mask[n * S + t + (enc_dec ? 0 : 1)] = e.counts[t];
        lengths.push_back(static_cast<int64_t>(e.seq.size()));
        std::copy(e.src.begin(), e.src.end(), src.begin() + static_cast<std::ptrdiff_t>(n * S_src));
        src_lengths.push_back(static_cast<int64_t>(e.src.size()));
    }
    const h5::File f = h5::File::create(path, "train_set");
    f.write_attr_string("format", "attnlab-tokens");
    f.write("tokens", {N, S}, tokens.data());
    f.write("lengths", lengths);
    f.write("loss_mask", {N, S}, loss_mask.data());
    if (enc_dec) {
        f.write("src", {N, S_src}, src.data());
        f.write("src_lengths", src_lengths);
    }
}

HeldOutTask::HeldOutTask(const TaskConfig& config, uint64_t seed, uint64_t stream, std::shared_ptr<const TrainingSet::Keys> training)
    : generator_(config, seed, stream), training_(std::move(training)) {}

Batch HeldOutTask::next(size_t batch_size) {
    std::vector<Example> rows;
    const size_t size = training_->size();
    while (rows.size() < batch_size)
        rows.push_back(draw_wanted(
            generator_, size, [&](const Example& e) { return !training_->count(example_key(e)); },
            [&](size_t draws) {
                fail("task", "task.train_size = " + std::to_string(size) + " leaves no held-out example: " + std::to_string(draws) +
                                 " draws in a row were all in the training set; lower task.train_size");
            }));
    return generator_.batch_of(rows);
}

}  // namespace attnlab
