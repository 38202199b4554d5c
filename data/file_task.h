// The `file` task: next-token prediction over the sequences of a token file
// (data/token_file.h). The last tenth of the sequences (at least one) is held
// out: stream 0 samples training batches from the rest, any other stream
// samples from the held-out part. A row of length L gives inputs tokens[0..L-2]
// and targets tokens[1..L-1]; a target counts where the file's loss_mask is 1
// at that target's position (every valid target when the file has no mask);
// a stream whose rows select no target is refused.
#pragma once

#include "data/tasks.h"
#include "data/token_file.h"

namespace attnlab {

class FileTask : public BatchSource {
public:
    FileTask(const std::string& path, size_t vocab, uint64_t seed, uint64_t stream);
    Batch next(size_t batch_size) override;
    size_t max_sequence_length() const override { return file_.tokens.shape[1] - 1; }
    bool encoder_decoder() const override { return false; }
    Rng& rng() override { return rng_; }
    size_t rows() const { return last_ - first_; }  // sequences this stream samples from

private:
    bool selects_a_target() const;  // a loss_mask 1 at a target position of this stream's rows
    TokenFile file_;
    size_t first_ = 0, last_ = 0;  // [first, last) rows of this stream
    Rng rng_;
};

}  // namespace attnlab
