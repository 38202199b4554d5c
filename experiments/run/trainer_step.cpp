// One training step's forward and backward (Trainer::State::forward_backward):
// the whole batch in one pass (one process, the default), or in pieces whose
// gradients are summed: under mpirun each rank's share of the global batch, and
// with train.reduce = "deterministic" the fixed micro-batches of one tree.
//
// The loss is the mean cross-entropy over the batch's C counted positions. A
// piece with c of them contributes loss_piece * c / C, so its backward starts
// from the seed c / C, and the pieces' gradients add up to the whole batch's.
//
// Deterministic: the M micro-batches are summed in the tree
//   sum(lo, hi) = sum(lo, mid) + sum(mid, hi),  mid = lo + (hi - lo) / 2,
// leaves the micro-batches' gradients, each computed alone. With N ranks (a
// power of two dividing M) rank r holds micro-batches [r M/N, (r+1) M/N), a
// node of that tree; its partners in rounds 1, 2, 4, ... (r xor bit) hold the
// sibling nodes, so the rounds of exchange-and-add build the same tree's upper
// nodes (a + b = b + a exactly in floating point; only the grouping matters).
// The same bits at any N, one process included.
#include "experiments/run/trainer_state.h"

#include "autograd/ops.h"
#include "autograd/tensor_impl.h"
#include "experiments/distributed/gradients.h"
#include "experiments/files/fnv_hash.h"

namespace attnlab {

namespace {

// A node of the summation tree: the flat gradient (pack_gradients) and the
// scalars {loss share, correct tokens} of its micro-batches.
struct Partial {
    std::vector<float> grad;
    std::vector<double> scalars;
};

}  // namespace

Trainer::State::StepValues Trainer::State::forward_backward(const Batch& batch, double clip, const NamedTensors& params,
                                                            bool log_now, Hooks& hooks) {
    StepValues v = world->size() == 1 && config.train.reduce == "fast" ? whole_batch(batch, log_now, hooks)
                                                                      : in_pieces(batch, params, log_now, hooks);
    v.grad_norm = clip_grad_norm(params, clip);
    return v;
}

Trainer::State::StepValues Trainer::State::whole_batch(const Batch& batch, bool log_now, Hooks& hooks) {
    StepValues v;
    // the head only where the loss counts: (N, V) (a batch where nothing counts: every position, loss 0)
    const bool counts = counted_positions(batch) > 0;
    const Tensor logits = counts ? model->forward_counted(batch, log_now ? &hooks : nullptr)
                                 : (log_now ? model->forward(batch, hooks) : model->forward(batch));
    Tensor loss = counts ? cross_entropy(logits, counted_targets(batch)) : cross_entropy(logits, batch.targets, batch.loss_mask);
    v.loss = loss.item();
    loss.backward();
    if (log_now) {
        v.token_acc = accuracy(logits, batch).token_acc;
        v.seen = batch;
    }
    return v;
}

Trainer::State::StepValues Trainer::State::in_pieces(const Batch& batch, const NamedTensors& params, bool log_now,
                                                     Hooks& hooks) {
    const bool tree = config.train.reduce == "deterministic";
    const auto ranks = static_cast<size_t>(world->size()), rank = static_cast<size_t>(world->rank());
    const size_t pieces = tree ? static_cast<size_t>(config.train.micro_batches) : ranks;  // fast: one per rank
    const size_t rows = batch.targets.shape[0], per_rank = pieces / ranks;
    const double counted = static_cast<double>(counted_positions(batch));
    // Dropout: piece g draws from a stream of its own, Rng(step seed, g), whichever rank computes it.
    const uint64_t step_seed = dropout_rng.next_u64();
    const Rng::State main_stream = dropout_rng.state();
    StepValues v;

    // Micro-batch g alone: its share of the loss and of the gradient.
    const auto leaf = [&](size_t g) {
        for (const auto& [name, p] : params) Tensor(p).zero_grad();
        const Batch piece = batch_rows(batch, g * rows / pieces, (g + 1) * rows / pieces);
        dropout_rng.set_state(Rng(step_seed, g).state());
        const bool record = log_now && g == 0;  // rank 0's first piece: the attention metrics' rows
        Partial part{{}, {0.0, 0.0}};
        if (const size_t c = counted_positions(piece); c == 0) {
            if (record) model->forward(piece, hooks);  // nothing to learn from; the attention metrics' rows only
        } else {
            const Tensor logits = model->forward_counted(piece, record ? &hooks : nullptr);  // (N, V)
            const double share = static_cast<double>(c) / counted;
            Tensor loss = cross_entropy(logits, counted_targets(piece));
            part.scalars[0] = loss.item() * share;
            loss.backward(Tensor::scalar(share));
            if (log_now) part.scalars[1] = static_cast<double>(accuracy(logits, piece).tokens_correct);
        }
        if (record) v.seen = piece;
        part.grad = pack_gradients(params);
        return part;
    };
    const auto sum = [&](auto&& self, size_t lo, size_t hi) -> Partial {
        if (hi - lo == 1) return leaf(lo);
        const size_t mid = lo + (hi - lo) / 2;
        Partial left = self(self, lo, mid);
        const Partial right = self(self, mid, hi);
        add_into(left.grad, right.grad);
        add_into(left.scalars, right.scalars);
        return left;
    };
    Partial total = sum(sum, rank * per_rank, (rank + 1) * per_rank);
    dropout_rng.set_state(main_stream);

    if (ranks > 1 && tree) {
        for (size_t bit = 1; bit < ranks; bit <<= 1) {  // the tree's nodes above the ranks'
            const int partner = static_cast<int>(rank ^ bit);
            add_into(total.grad, world->exchange(partner, total.grad));
            add_into(total.scalars, world->exchange(partner, total.scalars));
        }
    } else if (ranks > 1) {  // fast: one allreduce of the gradients (MPI's order), one of the scalars
        world->sum(total.grad);
        world->sum(total.scalars);
    }
    unpack_gradients(params, total.grad);
    v.loss = total.scalars[0];
    if (log_now) v.token_acc = counted > 0 ? total.scalars[1] / counted : 0.0;
    return v;
}

void Trainer::State::check_ranks_agree() const {
    if (world->size() == 1) return;
    uint64_t hash = kFnvOffset;  // over every parameter's bytes, in registration order
    for (const auto& [name, p] : model->module().named_parameters()) {
        const Array<float>& a = p.impl().array<float>();
        hash = fnv1a(a.data(), a.size() * sizeof(float), hash);
    }
    const auto signed_hash = static_cast<int64_t>(hash >> 1);
    if (world->min(signed_hash) != world->max(signed_hash))
        throw Error("[train] step " + std::to_string(step) + ": the ranks' parameters differ (rank " +
                    std::to_string(world->rank()) + "); the ranks must run the same attnlab on the same kind of CPU");
}

}  // namespace attnlab
