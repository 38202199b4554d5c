// attnlab eval CHECKPOINT [--batches N] [--seed S] [--min-len A] [--max-len B]:
// loss, token accuracy and sequence accuracy of a checkpoint on fresh data (a
// data stream that neither training nor the run's held-out evaluation used),
// at the run's task lengths or at A..B (length generalisation).
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
    options.add_options()("min-len", "shortest task length to draw (default: the run's task.min_len)", cxxopts::value<std::string>())
                         ("max-len", "longest task length to draw (default: the run's task.max_len); beyond the "
                                     "training lengths a learned position table refuses", cxxopts::value<std::string>())
                         ("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s", options.help().c_str());
        return 0;
    }
    CheckpointInput in = load_checkpoint_input(parsed);
    std::string lengths;  // "  at lengths 11..20 (trained on 3..10)" when they are not the run's
    if (parsed.count("min-len") && in.config.task.name == "text")
        throw UsageError("--min-len: task \"text\" draws windows of exactly task.max_len characters; give --max-len "
                         "alone to evaluate on windows of another length");
    if (parsed.count("min-len") || parsed.count("max-len")) {
        const int64_t lo = parsed.count("min-len") ? number_option<int64_t>(parsed, "min-len", 1, 1 << 20) : in.config.task.min_len;
        const int64_t hi = parsed.count("max-len") ? number_option<int64_t>(parsed, "max-len", 1, 1 << 20) : in.config.task.max_len;
        if (in.config.task.name == "text")  // one window length, no range
            lengths = "  on windows of " + std::to_string(hi) + " characters (trained on " + std::to_string(in.config.task.max_len) + ")";
        else
            lengths = "  at lengths " + std::to_string(lo) + ".." + std::to_string(hi) + " (trained on " +
                      std::to_string(in.config.task.min_len) + ".." + std::to_string(in.config.task.max_len) + ")";
        set_task_lengths(in, lo, hi);
    }
    check_held_batches_fit(in);
    check_batch_forward_fits(in);
    const Score s = evaluate(*in.loaded.model, fresh_batches(in));
    std::printf("checkpoint %s (step %lld): loss %.4f  token accuracy %.4f  sequence accuracy %.4f  (%zu sequences, %zu counted tokens)%s\n",
                in.path.c_str(), static_cast<long long>(in.checkpoint.step), s.loss, s.token_acc, s.seq_acc, s.sequences, s.counted,
                lengths.c_str());
    return 0;
}

}  // namespace attnlab
