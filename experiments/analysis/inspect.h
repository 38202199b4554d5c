// What `attnlab inspect` writes: one forward pass of a checkpoint (eval mode, no
// graph) as the analysis tools and the PyTorch bridge (tools/torch_bridge.py) read
// it: logits, every head's weights and score std, the residual stream, and any
// hook point asked for (format "attnlab-inspect", docs/file_formats.md).
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "data/tasks.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/run/model_factory.h"
#include "layers/hooks.h"

namespace attnlab {

struct Inspection {
    std::string checkpoint_path;
    const CheckpointData* checkpoint;
    const TaskModel* model;
    const Batch* batch;
    Tensor logits;
    const Hooks* hooks;  // every attention module's pattern and scores, the residual stream
    std::vector<std::string> extra;  // the points --hooks asked for, in the model's order
};

// The inspect file at `path` (the caller writes it atomically: a temporary
// path, then a rename).
void write_inspection(const std::string& path, const Inspection& in);

}  // namespace attnlab
