#include "experiments/run/evaluate.h"

#include "autograd/ops.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

Score accuracy(const Tensor& logits, const Batch& batch) {
    const size_t B = batch.targets.shape[0], T = batch.targets.shape[1], V = logits.size(-1);
    const std::vector<double> z = logits.values();
    Score s;
    s.sequences = B;
    size_t correct = 0, sequences_correct = 0;
    for (size_t b = 0; b < B; ++b) {
        bool all = true;
        for (size_t t = 0; t < T; ++t) {
            if (!batch.loss_mask(b * T + t)) continue;
            const double* row = z.data() + (b * T + t) * V;
            size_t best = 0;
            for (size_t v = 1; v < V; ++v)
                if (row[v] > row[best]) best = v;
            const bool hit = static_cast<int32_t>(best) == batch.targets.values[b * T + t];
            correct += hit;
            all = all && hit;
            ++s.counted;
        }
        sequences_correct += all;
    }
    s.token_acc = s.counted ? static_cast<double>(correct) / static_cast<double>(s.counted) : 0.0;
    s.seq_acc = B ? static_cast<double>(sequences_correct) / static_cast<double>(B) : 0.0;
    return s;
}

Score evaluate(const std::vector<Batch>& batches, const std::function<Tensor(const Batch&)>& logits_of) {
    NoGradGuard no_grad;
    Score total;
    double loss_sum = 0, token_hits = 0, seq_hits = 0;
    for (const Batch& batch : batches) {
        Tensor logits = logits_of(batch);
        Score s = accuracy(logits, batch);
        loss_sum += cross_entropy(logits, batch.targets, batch.loss_mask).item() * static_cast<double>(s.counted);
        token_hits += s.token_acc * static_cast<double>(s.counted);
        seq_hits += s.seq_acc * static_cast<double>(s.sequences);
        total.counted += s.counted;
        total.sequences += s.sequences;
    }
    if (total.counted) {
        total.loss = loss_sum / static_cast<double>(total.counted);
        total.token_acc = token_hits / static_cast<double>(total.counted);
    }
    if (total.sequences) total.seq_acc = seq_hits / static_cast<double>(total.sequences);
    return total;
}

Score evaluate(const TaskModel& model, const std::vector<Batch>& batches, Hooks* hooks) {
    Module& module = model.module();
    const bool was_training = module.is_training();
    module.eval();
    const Score score = evaluate(batches, [&](const Batch& batch) { return hooks ? model.forward(batch, *hooks) : model.forward(batch); });
    module.train(was_training);
    return score;
}

}  // namespace attnlab
