#include "experiments/run/load_checkpoint.h"

#include <unistd.h>

#include <algorithm>

#include "autograd/cpu/threads.h"

namespace attnlab {

LoadedCheckpoint load_checkpoint(const std::string& path, Device device) {
    LoadedCheckpoint out;
    out.path = path;
    out.checkpoint = read_checkpoint(path);
    out.config = parse_saved_config(out.checkpoint.config_toml, path + " (config attribute)");
    set_threads(config_threads(out.config));
    out.loaded = load_model(out.config, out.checkpoint, path);
    place_model(out.loaded, device);
    return out;
}

void place_model(const LoadedModel& loaded, Device device) {
    if (device != Device::cpu) loaded.model->module().to(device);
}

int config_threads(const Config& config) {
    if (config.train.threads > 0) return static_cast<int>(config.train.threads);
    return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace attnlab
