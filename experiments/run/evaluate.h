// Loss and accuracy over the positions a task's loss mask counts.
//   token_acc: correct argmax predictions / counted positions
//   seq_acc:   sequences whose every counted position is correct / sequences
#pragma once

#include <functional>
#include <vector>

#include "data/tasks.h"

namespace attnlab {

class TaskModel;

struct Score {
    double loss = 0.0;        // mean cross-entropy over counted positions
    double token_acc = 0.0;
    double seq_acc = 0.0;
    size_t counted = 0;       // positions that count
    size_t sequences = 0;
    size_t tokens_correct = 0, sequences_correct = 0;
};

// Accuracy of logits (B, T, V), or (N, V) at the counted positions only
// (TaskModel::forward_counted), against a batch (loss is left 0).
Score accuracy(const Tensor& logits, const Batch& batch);

class Hooks;
class World;

// Eval mode, no graph, averaged over the batches (weighted by counted positions);
// with `hooks` attached to every forward when given (an intervention's effect).
Score evaluate(const TaskModel& model, const std::vector<Batch>& batches, Hooks* hooks = nullptr);
// The same from any source of logits (B, T, V) per batch, e.g. the device step's.
Score evaluate(const std::vector<Batch>& batches, const std::function<Tensor(const Batch&)>& logits_of);
// Split across the ranks of `world`: rank r evaluates a contiguous block of the
// batches, every rank gets every batch's totals and adds them in batch order,
// so the result has the same bits at any rank count.
Score evaluate(const TaskModel& model, const std::vector<Batch>& batches, const World& world);

}  // namespace attnlab
