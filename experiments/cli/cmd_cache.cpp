// attnlab cache CHECKPOINT --hooks NAME,... --out F.h5 [--batches N] [--seed S]: the options and the
// free-space check; the cache itself (experiments/analysis/cache.h):
// Named activations (hook points, layers/hooks.h) over N batches of the task's
// fresh data (the `attnlab eval` stream), streamed batch by batch into chunked,
// growing HDF5 datasets: memory holds one batch's activations at a time.
#include <cstdio>
#include <filesystem>

#include "experiments/analysis/cache.h"
#include "experiments/cli/command_line.h"
#include "experiments/config/config.h"
#include "experiments/files/checkpoint.h"
#include "experiments/files/run_files.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

namespace {

constexpr const char* kCacheHelp = R"(
--hooks: hook point names or globs (README, "Hook points"), e.g.
"blocks.*.attn.z,blocks.1.resid_post". Each batch is padded to the task's longest
sequence so that every row has one shape; /lengths says which positions are real.

--out F.h5: attrs format = "attnlab-cache", format_version, checkpoint, step, config,
seed, batches; /tokens [N, T] (int32), /lengths [N] (int64), /targets [N, T]
(int32) and /loss_mask [N, T] (uint8: 1 where the task scores the prediction;
the loss `attnlab eval` reports is the mean cross-entropy there), for an
encoder-decoder /src [N, S] and /src_lengths [N]; /hooks/<point> [N, ...]
float32, one row per sequence, chunked by batch.

Before anything is written, the first batch is run once to size the output:
its bytes per batch times --batches must fit in the free space of --out's
folder (with 10% to spare), else one line and exit 2. A signal during the
write removes the temporary file.
)";

// Refuses, before anything is written, an output that would not fit: what the
// file needs (cache_bytes_needed) against the free space of its folder, with 10% to spare.
void check_fits_on_disk(const std::string& out, const CacheRequest& request, Hooks& hooks) {
    const double needed = cache_bytes_needed(request, hooks) * 1.1;
    const std::filesystem::path folder = std::filesystem::path(out).parent_path();
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(folder.empty() ? "." : folder, ec);
    if (ec) return;  // no figure to check against
    if (needed > static_cast<double>(space.available))
        throw UsageError("--out " + out + ": " + std::to_string(request.batches) + " batches need about " +
                         std::to_string(static_cast<long long>(needed / 1e6)) + " MB, and its folder has " +
                         std::to_string(static_cast<long long>(static_cast<double>(space.available) / 1e6)) +
                         " MB free (lower --batches or record fewer --hooks)");
}

}  // namespace

int cmd_cache(const std::vector<std::string>& args) {
    cxxopts::Options options("attnlab cache", "Named activations over batches of the task's data, streamed to HDF5.");
    add_checkpoint_options(options, "4");
    options.add_options()("hooks", "hook point names or globs, comma-separated", cxxopts::value<std::string>())
                         ("out", "HDF5 file to write", cxxopts::value<std::string>())
                         ("h,help", "this help");
    const cxxopts::ParseResult parsed = parse_command_line(options, args);
    if (parsed.count("help")) {
        std::printf("%s%s", options.help().c_str(), kCacheHelp);
        return 0;
    }
    const std::string path = checkpoint_argument(parsed);
    checkpoint_batches(parsed);
    if (!parsed.count("hooks")) throw UsageError("--hooks is required (e.g. --hooks \"blocks.*.attn.z\")");
    if (!parsed.count("out")) throw UsageError("--out is required (the HDF5 file to write)");
    const OutputFile out = check_output("--out", parsed["out"].as<std::string>(), {path}, "attnlab-cache");
    const CheckpointInput in = load_checkpoint_input(parsed);
    const TaskModel& model = *in.loaded.model;
    Hooks hooks;
    for (const std::string& name : list_option(parsed, "hooks")) hooks.record(name);
    if (hooks.patterns().empty()) throw UsageError("--hooks: no hook point named");
    { HookScope check(model.module(), hooks); }  // an unknown name fails before anything is written

    // one batch in memory at a time: its forward with the attention tables it records
    check_batch_forward_fits(in, recorded_attention_tables(model, hooks));
    const CacheRequest request{&in, in.seed, in.batches};
    check_fits_on_disk(out.path.string(), request, hooks);
    const size_t rows = write_cache(out, request, hooks);
    std::printf("cache %s (step %lld): %zu sequences, %zu hook points -> %s\n", in.path.c_str(),
                static_cast<long long>(in.checkpoint.step), rows, [&] {
                    size_t n = 0;
                    for (const std::string& p : model.module().hook_points()) n += hooks.has_recorded(p);
                    return n;
                }(), out.path.c_str());
    return 0;
}

}  // namespace attnlab
