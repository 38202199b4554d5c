#include "experiments/run/evaluate.h"

#include "autograd/ops.h"
#include "experiments/distributed/world.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

// One batch's totals, in the order combine() reads them.
constexpr size_t kTotals = 5;  // loss * counted, tokens correct, sequences correct, counted, sequences

// `logits` (B, T, V), or (N, V) at the counted positions (TaskModel::forward_counted).
void append_totals(std::vector<double>& totals, const Tensor& logits, const Batch& batch) {
    const Score s = accuracy(logits, batch);
    const double loss = !s.counted          ? 0.0
                        : logits.dim() == 2 ? cross_entropy(logits, counted_targets(batch)).item()
                                            : cross_entropy(logits, batch.targets, batch.loss_mask).item();
    totals.insert(totals.end(), {loss * static_cast<double>(s.counted), static_cast<double>(s.tokens_correct),
                                 static_cast<double>(s.sequences_correct), static_cast<double>(s.counted),
                                 static_cast<double>(s.sequences)});
}

// The batches' totals added in batch order, then the means.
Score combine(const std::vector<double>& totals) {
    Score total;
    double loss_sum = 0;
    for (size_t i = 0; i + kTotals <= totals.size(); i += kTotals) {
        loss_sum += totals[i];
        total.tokens_correct += static_cast<size_t>(totals[i + 1]);
        total.sequences_correct += static_cast<size_t>(totals[i + 2]);
        total.counted += static_cast<size_t>(totals[i + 3]);
        total.sequences += static_cast<size_t>(totals[i + 4]);
    }
    if (total.counted) {
        total.loss = loss_sum / static_cast<double>(total.counted);
        total.token_acc = static_cast<double>(total.tokens_correct) / static_cast<double>(total.counted);
    }
    if (total.sequences) total.seq_acc = static_cast<double>(total.sequences_correct) / static_cast<double>(total.sequences);
    return total;
}

// Batches [begin, end) in eval mode, without a graph: their totals.
std::vector<double> totals_of(const TaskModel& model, const std::vector<Batch>& batches, size_t begin, size_t end,
                              Hooks* hooks) {
    NoGradGuard no_grad;
    Module& module = model.module();
    const bool was_training = module.is_training();
    module.eval();
    std::vector<double> totals;
    for (size_t i = begin; i < end; ++i) {
        // the head only where the loss counts; with hooks, every position (a hook may read or replace the logits)
        const bool counted = !hooks && counted_positions(batches[i]) > 0;
        append_totals(totals, hooks ? model.forward(batches[i], *hooks)
                              : counted ? model.forward_counted(batches[i], nullptr) : model.forward(batches[i]),
                      batches[i]);
    }
    module.train(was_training);
    return totals;
}

}  // namespace

Score accuracy(const Tensor& logits, const Batch& batch) {
    const size_t B = batch.targets.shape[0], T = batch.targets.shape[1], V = logits.size(-1);
    const bool counted_only = logits.dim() == 2;  // (N, V): row n is the n-th counted position
    const std::vector<double> z = logits.values();
    Score s;
    s.sequences = B;
    for (size_t b = 0; b < B; ++b) {
        bool all = true;
        for (size_t t = 0; t < T; ++t) {
            if (!batch.loss_mask(b * T + t)) continue;
            const double* row = z.data() + (counted_only ? s.counted : b * T + t) * V;
            size_t best = 0;
            for (size_t v = 1; v < V; ++v)
                if (row[v] > row[best]) best = v;
            const bool hit = static_cast<int32_t>(best) == batch.targets.values[b * T + t];
            s.tokens_correct += hit;
            all = all && hit;
            ++s.counted;
        }
        s.sequences_correct += all;
    }
    s.token_acc = s.counted ? static_cast<double>(s.tokens_correct) / static_cast<double>(s.counted) : 0.0;
    s.seq_acc = B ? static_cast<double>(s.sequences_correct) / static_cast<double>(B) : 0.0;
    return s;
}

Score evaluate(const std::vector<Batch>& batches, const std::function<Tensor(const Batch&)>& logits_of) {
    NoGradGuard no_grad;
    std::vector<double> totals;
    for (const Batch& batch : batches) append_totals(totals, logits_of(batch), batch);
    return combine(totals);
}

Score evaluate(const TaskModel& model, const std::vector<Batch>& batches, Hooks* hooks) {
    return combine(totals_of(model, batches, 0, batches.size(), hooks));
}

Score evaluate(const TaskModel& model, const std::vector<Batch>& batches, const World& world) {
    const auto n = batches.size(), ranks = static_cast<size_t>(world.size()), r = static_cast<size_t>(world.rank());
    return combine(world.gather_all(totals_of(model, batches, r * n / ranks, (r + 1) * n / ranks, nullptr)));
}

}  // namespace attnlab
