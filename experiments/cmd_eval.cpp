// attnlab eval CHECKPOINT [--batches N] [--seed S]: loss, token accuracy and
// sequence accuracy of a checkpoint on fresh data (a data stream that neither
// training nor the run's held-out evaluation used).
#include <cstdio>

#include "experiments/checkpoint.h"
#include "experiments/command_line.h"
#include "experiments/config.h"
#include "experiments/evaluate.h"
#include "experiments/model_factory.h"

namespace attnlab {

int cmd_eval(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab eval", "Evaluate a checkpoint on fresh data from its task.");
    options.positional_help("CHECKPOINT");
    options.add_options()("batches", "number of batches", cxxopts::value<int>()->default_value("16"))
                         ("seed", "data seed (default: the run's seed)", cxxopts::value<int64_t>())
                         ("h,help", "this help")
                         ("checkpoint", "checkpoint file", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"checkpoint"});
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s", options.help().c_str());
        return 0;
    }
    if (!parsed.count("checkpoint") || parsed["checkpoint"].as<std::vector<std::string>>().size() != 1)
        throw UsageError("give exactly one CHECKPOINT (see --help)");
    const int batches = parsed["batches"].as<int>();
    if (batches < 1) throw UsageError("--batches must be at least 1, got " + std::to_string(batches));
    const std::string path = parsed["checkpoint"].as<std::vector<std::string>>()[0];

    const CheckpointData checkpoint = read_checkpoint(path);
    const Config config = parse_config(checkpoint.config_toml, path + " (config attribute)");
    const LoadedModel loaded = load_model(config, checkpoint, path);
    const uint64_t seed = static_cast<uint64_t>(parsed.count("seed") ? parsed["seed"].as<int64_t>() : config.run.seed);
    const std::unique_ptr<BatchSource> fresh = make_batch_source(config, seed, 2);  // 0 trains, 1 is the run's held-out set
    std::vector<Batch> data;
    for (int i = 0; i < batches; ++i) data.push_back(fresh->next(static_cast<size_t>(config.train.batch)));
    const Score s = evaluate(*loaded.model, data);
    std::printf("checkpoint %s (step %lld): loss %.4f  token accuracy %.4f  sequence accuracy %.4f  (%zu sequences, %zu counted tokens)\n",
                path.c_str(), static_cast<long long>(checkpoint.step), s.loss, s.token_acc, s.seq_acc, s.sequences, s.counted);
    return 0;
}

}  // namespace attnlab
