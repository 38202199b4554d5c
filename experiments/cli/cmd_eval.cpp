// attnlab eval CHECKPOINT [--batches N] [--seed S]: loss, token accuracy and
// sequence accuracy of a checkpoint on fresh data (a data stream that neither
// training nor the run's held-out evaluation used).
#include <cstdio>

#include "experiments/files/checkpoint.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/config.h"
#include "experiments/run/evaluate.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

int cmd_eval(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab eval", "Evaluate a checkpoint on fresh data from its task.");
    add_checkpoint_options(options, "16");
    options.add_options()("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s", options.help().c_str());
        return 0;
    }
    const CheckpointInput in = load_checkpoint_input(parsed);
    const Score s = evaluate(*in.loaded.model, fresh_batches(in));
    std::printf("checkpoint %s (step %lld): loss %.4f  token accuracy %.4f  sequence accuracy %.4f  (%zu sequences, %zu counted tokens)\n",
                in.path.c_str(), static_cast<long long>(in.checkpoint.step), s.loss, s.token_acc, s.seq_acc, s.sequences, s.counted);
    return 0;
}

}  // namespace attnlab
