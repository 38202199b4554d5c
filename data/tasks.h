// Seeded toy sequence tasks with variable lengths, right padding and a loss mask.
//
// Token ids: 0 = <PAD>, 1 = <SEP> (also end of target), 2 = <BOS>, content tokens
// are 3 .. vocab-1. Decoder-only tasks are next-token prediction over one
// sequence: inputs = seq[0 .. L-2], targets = seq[1 .. L-1]; the loss mask
// marks the target positions that count in loss and accuracy.
//
//   copy       x SEP x              counts: the second x
//   reverse    x SEP reverse(x)     counts: reverse(x)
//   sort       x SEP sort(x)        counts: sort(x)
//   recall     k1 v1 .. kn vn SEP q1 a1 .. qm am   (keys distinct; each q is one
//              of the keys, a its value)   counts: every a
//   induction  r r  (r a random prefix)    counts: the repeat from its second
//              token on (its first token cannot be predicted)
//   packed     (task.pack = N, decoder-only tasks) each row holds whole examples,
//              each led by <BOS>, as many as fit in N input positions (the
//              example that does not fit is dropped); counts: each example's
//   translate  encoder-decoder: src = x, target = map(reverse(x)) SEP, with a
//              fixed permutation `map` of the content tokens; the decoder input
//              is the target shifted right behind <BOS>   counts: every target token
//   mqar       multi-query associative recall in Zoology's parameterisation (Arora
//              et al. 2023): S = task.seq_len inputs; k1 v1 .. kn vn (n = max_len
//              pairs, keys distinct from the first half of the content tokens,
//              values distinct from the second), then S - 2n + 1 random content
//              tokens (task.fill = "random"; "pad": <PAD>, Zoology's
//              random_non_queries = False) in which each key is asked once,
//              at even offset 2g from the pairs' end, g drawn without
//              replacement with weight (g+1)^(a-1),
//              a = 0.01 (queries cluster near the pairs), followed by its value
//              counts: the value after each query (Zoology labels the query's position
//              with it and leaves the next token random; here the next token IS the
//              value, which the causal model has not seen when it predicts it)
//   modular    a b SEP c  with c = a op b (mod p), op one of + - * / (Nanda et
//              al. 2023's grokking task; number n is token 3 + n, SEP plays "=";
//              for / the modulus is prime, b != 0 and c = a b^-1)   counts: c
//
// task.train_size = N (data/finite_task.h) trains on N distinct examples drawn
// once instead of fresh ones, and evaluates on examples outside them.
#pragma once

#include <string>
#include <vector>

#include "autograd/rng.h"
#include "autograd/tensor.h"

namespace attnlab {

constexpr int32_t kPad = 0, kSep = 1, kBos = 2, kFirstContent = 3;

struct TaskConfig {
    std::string name = "recall";
    size_t vocab = 32;       // including the 3 special tokens
    size_t min_len = 4;      // length of x (copy, reverse, sort, translate), of r
    size_t max_len = 8;      //   (induction), or number of pairs (recall)
    size_t queries = 4;      // recall: queries per sequence
    size_t pack = 0;         // input positions of a packed row (decoder-only tasks); 0 = one example per row
    size_t modulus = 113;    // modular: p, the numbers 0 .. p-1 (vocab >= p + 3)
    size_t seq_len = 64;     // mqar: input positions S (pairs: max_len)
    std::string op = "+";    // modular: + - * /
    std::string fill = "random";  // mqar: between the queries, random content tokens or <PAD> ("pad")
};

struct Batch {
    Indices inputs;               // (B, T) decoder input (decoder-only), or decoder input tgt_in
    Indices targets;              // (B, T)
    Mask loss_mask;               // (B, T)
    std::vector<size_t> lengths;  // valid length of each input row
    // encoder-decoder tasks only
    Indices src;                  // (B, S)
    std::vector<size_t> src_lengths;
};

// Rows [begin, end) of a batch, at its padded width (a rank's or a micro-batch's share).
Batch batch_rows(const Batch& batch, size_t begin, size_t end);
// Positions that count in its loss (the loss mask's true entries).
size_t counted_positions(const Batch& batch);
// Those positions as flat indices b T + t (N), row by row, and their targets (N).
Indices counted_rows(const Batch& batch);
Indices counted_targets(const Batch& batch);

// Where training and evaluation batches come from: a task generator, or a token file.
class BatchSource {
public:
    virtual ~BatchSource() = default;
    virtual Batch next(size_t batch_size) = 0;
    virtual size_t max_sequence_length() const = 0;  // longest input a batch can have
    virtual bool encoder_decoder() const = 0;
    virtual Rng& rng() = 0;  // its state for checkpoints, with position()
    // How far a finite source is through its data beyond rng() (data/finite_task.h); empty for the others.
    virtual std::vector<int64_t> position() const { return {}; }
    virtual void set_position(const std::vector<int64_t>& position) {
        if (!position.empty()) throw Error("[data] this data source has no position to restore");
    }
};

class TaskGenerator : public BatchSource {
public:
    // One drawn example, before it is laid out in a batch.
    struct Example {
        std::vector<int32_t> seq;       // whole sequence (decoder-only) or target (translate)
        std::vector<uint8_t> counts;    // per target position of seq[1..]
        std::vector<int32_t> src;       // translate only
    };

    // `stream` separates train (0) from held-out eval (1) batches of the same seed.
    TaskGenerator(const TaskConfig& config, uint64_t seed, uint64_t stream);
    Batch next(size_t batch_size) override;
    bool encoder_decoder() const override { return config_.name == "translate"; }
    size_t max_sequence_length() const override;
    const TaskConfig& config() const { return config_; }
    Rng& rng() override { return rng_; }

    // The fixed content-token permutation of `translate` (depends only on vocab).
    int32_t translate_token(int32_t token) const;

    // The next example of this stream, and examples laid out as one batch (one
    // per row, right-padded): what next() does unpacked.
    Example make_example();
    Batch batch_of(const std::vector<Example>& examples) const;

private:
    Batch next_packed(size_t batch_size);
    Example make_mqar_example();
    size_t packed_row() const;  // a packed row's input positions: task.pack, or more if an example needs them

    TaskConfig config_;
    Rng rng_;
    std::vector<int32_t> mapping_;
};

}  // namespace attnlab
