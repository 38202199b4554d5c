// A checkpoint ready for analysis, loaded one way for every command: the file
// read (libhdf5 first in a child, data/h5_probe.h), its config parsed as a
// saved config, the model built with its parameters and placed on the device,
// and this process's compute threads set from the config's train.threads.
#pragma once

#include <string>

#include "autograd/tensor.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

struct LoadedCheckpoint {
    std::string path;           // the checkpoint file
    CheckpointData checkpoint;  // as read
    Config config;              // its config attribute
    LoadedModel loaded;         // its model, in eval mode, on the device
};

// `path`: a checkpoint file (a run folder is resolved by the caller).
LoadedCheckpoint load_checkpoint(const std::string& path, Device device);

// The model moved to `device` (Module::to: its parameters as one block there).
void place_model(const LoadedModel& loaded, Device device);

// The compute threads a config asks for: train.threads, or every core when 0.
// The trainer and every analysis command run with this many.
int config_threads(const Config& config);

}  // namespace attnlab
