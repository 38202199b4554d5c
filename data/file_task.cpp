#include "data/file_task.h"

#include <algorithm>

namespace attnlab {

FileTask::FileTask(const std::string& path, size_t vocab, uint64_t seed, uint64_t stream)
    : file_(read_token_file(path, vocab)), rng_(seed, stream) {
    const size_t N = file_.tokens.shape[0], S = file_.tokens.shape[1];
    if (N < 2) fail("token_file", path + ": needs at least 2 sequences (one is held out for evaluation), has " + std::to_string(N));
    if (S < 2) fail("token_file", path + ": sequences of width " + std::to_string(S) + " leave nothing to predict");
    for (size_t n = 0; n < N; ++n)
        if (file_.lengths[n] < 2)
            fail("token_file", path + ": lengths: sequence " + std::to_string(n) + " has length " +
                                   std::to_string(file_.lengths[n]) + "; next-token prediction needs at least 2");
    const size_t held_out = std::max<size_t>(1, N / 10);
    first_ = stream == 0 ? 0 : N - held_out;
    last_ = stream == 0 ? N - held_out : N;
    if (!file_.loss_mask.values.empty() && !selects_a_target())
        fail("token_file", path + ": /loss_mask: the " + (stream == 0 ? "training" : "held-out") + " rows [" +
                               std::to_string(first_) + ", " + std::to_string(last_) +
                               ") select no target: their loss would be 0");
}

bool FileTask::selects_a_target() const {
    const size_t S = file_.tokens.shape[1];
    for (size_t r = first_; r < last_; ++r)
        for (size_t t = 1; t < file_.lengths[r]; ++t)
            if (file_.loss_mask.values[r * S + t]) return true;
    return false;
}

Batch FileTask::next(size_t batch_size) {
    const size_t S = file_.tokens.shape[1];
    std::vector<size_t> rows(batch_size);
    size_t T = 0;
    for (size_t& r : rows) {
        r = first_ + static_cast<size_t>(rng_.integer(0, static_cast<int64_t>(last_ - first_)));
        T = std::max(T, file_.lengths[r] - 1);
    }
    const bool has_mask = !file_.loss_mask.values.empty();
    std::vector<int32_t> inputs(batch_size * T, kPad), targets(batch_size * T, kPad);
    std::vector<uint8_t> counts(batch_size * T, 0);
    Batch batch;
    for (size_t b = 0; b < batch_size; ++b) {
        const size_t r = rows[b], L = file_.lengths[r] - 1;
        for (size_t t = 0; t < L; ++t) {
            inputs[b * T + t] = file_.tokens.values[r * S + t];
            targets[b * T + t] = file_.tokens.values[r * S + t + 1];
            counts[b * T + t] = has_mask ? file_.loss_mask.values[r * S + t + 1] : 1;
        }
        batch.lengths.push_back(L);
    }
    batch.inputs = Indices({batch_size, T}, std::move(inputs));
    batch.targets = Indices({batch_size, T}, std::move(targets));
    batch.loss_mask = Mask({batch_size, T}, std::move(counts));
    return batch;
}

}  // namespace attnlab
