// A checkpoint as `attnlab eval`, `inspect`, `ablate`, `audit` and `generate`
// load it: read_checkpoint, its config attribute, load_model. The input is a
// recipe of edits to a real tiny checkpoint (hdf5_recipe.h), or an HDF5 file's
// bytes (seeds: tests/fuzz/corpus/fuzz_checkpoint/ and, for raw files,
// tests/fuzz/corpus/fuzz_checkpoint_files/).
#include "autograd/rng.h"
#include "autograd/cpu/threads.h"
#include "experiments/files/checkpoint.h"
#include "experiments/config/config.h"
#include "data/h5file.h"
#include "experiments/run/model_factory.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/hdf5_recipe.h"

namespace {

using namespace attnlab;

const char* const kTinyConfig =
    "[task]\nname = \"copy\"\nvocab = 5\nmin_len = 1\nmax_len = 2\n"
    "[model]\nwidth = 4\nheads = 1\nlayers = 1\nffn = 4\nbias = false\n";

// A valid checkpoint of the tiny model, as bytes (written once).
std::string base_checkpoint() {
    const Config config = parse_config(kTinyConfig, "tiny.toml");
    Rng init(0);
    const TaskModel model(config, 8, init, nullptr);
    CheckpointData data;
    data.step = 1;
    data.config_toml = to_toml(config);
    data.params = model.module().named_parameters();
    data.optimizer = {{"step.head.weight", Tensor::scalar(1.0, DType::f64)}};
    data.rng = {{"train_data", {1, 2, 3, 4}}, {"dropout", {5, 6, 7, 8}}};
    data.data = {{"tokens", {10}}, {"wall_ms", {3}}};
    const fuzz::TempFile file(nullptr, 0, ".h5");
    write_checkpoint(file.path(), data);
    return fuzz::file_bytes(file.path());
}

const std::string* base = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    set_threads(1);
    h5::silence_errors();
    base = new std::string(base_checkpoint());
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::load_hdf5_input(data, size, *base,
                          {"params", "optimizer", "rng", "data", "format", "format_version", "step", "config", "head.weight",
                           "tok_emb.weight", "pos_emb.weight", "blocks.0.attn.q_proj.weight", "blocks.0.ffn.fc1.weight",
                           "step.head.weight", "train_data", "tokens"},
                          [](const std::string& path) {
                              const CheckpointData checkpoint = read_checkpoint(path);
                              const Config config = parse_config(checkpoint.config_toml, path + " (config attribute)");
                              load_model(config, checkpoint, path);
                          });
    return 0;
}
