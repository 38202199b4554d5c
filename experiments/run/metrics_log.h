// metrics.h5: the HDF5 log a run appends to (layout fixed by docs/file_formats.md,
// "metrics.h5"). It is written in SWMR mode, so h5py can read it while the run
// goes on, and after a crash, up to the last flush():
//
//   h5py.File(path, "r", libver="latest", swmr=True)   # then dataset.refresh()
//
//   /                 attrs: format="attnlab-metrics", format_version=1, config, layers, heads
//   /train/step (int64), loss, lr, grad_norm, tokens_per_s, wall_s          [N]
//   /eval/step (int64), loss, token_acc, seq_acc                            [M]
//   /eval_lengths/step (int64), loss, token_acc, seq_acc   [M] only with train.eval_lengths:
//                     the same evaluations at those task lengths (beyond the original layout's list)
//   /eval_train/step (int64), loss, token_acc, seq_acc     [M] only with task.train_size: the
//                     same evaluations on the finite training set (beyond the original list)
//   /head_scores/step (int64)                              [J] only with train.head_scores:
//   /head_scores/<score>   [J, layers, heads]  each head's scores on a fixed repeated-token
//                          batch (experiments/run/head_scores.h: previous_token,
//                          duplicate_token, induction, copying)
//   /head_scores/repeat_loss                               [J] the model's loss on its repeat
//   /attention/<kind>/step (int64)                                          [K]
//   /attention/<kind>/entropy, entropy_norm, masked_mass, masked_mass_max   [K, layers, heads]
//   /attention/<kind>/score_std   [K, layers, heads]  std of scale * q.k over eligible pairs
//                                 (padded query rows included, unlike the entropies; beyond
//                                 the original layout's list; row 0 is the model at initialisation)
//
// Values are float64; every dataset is chunked with an unlimited first
// dimension. A row that a reader sees before its values are written reads as
// step -1 and NaN values (the fill values), and the datasets of one group may
// briefly differ in length: readers should use the shortest.
//
// Only plain SWMR readers may open the file while the log is open or after a
// crash: HDF5 1.10 refuses a non-SWMR open of a file marked "open for write".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/h5file.h"

namespace attnlab {

class MetricsLog {
public:
    // Creates (replacing any file at `path`) the whole layout for `kinds`
    // ("self", or "enc_self", "dec_self", "cross") and the optional evaluations
    // ("eval_lengths", "eval_train") and, when `head_scores` names any, the
    // /head_scores group with those per-head series, then starts SWMR writing.
    static MetricsLog create(const std::string& path, const std::string& config_toml, size_t layers, size_t heads,
                             std::vector<std::string> kinds, const std::vector<std::string>& optional_evals = {},
                             const std::vector<std::string>& head_scores = {});

    // Reopens an existing log for SWMR writing and cuts every series to its
    // rows with step <= `step` (the checkpoint a run resumes from), so the
    // resumed run appends where the checkpoint was. A log left marked "open for
    // write" by a run that died is reopened too (as `h5clear -s` would): no
    // other process may be writing it.
    static MetricsLog resume(const std::string& path, int64_t step);

    MetricsLog(MetricsLog&&) noexcept;
    MetricsLog& operator=(MetricsLog&&) noexcept;
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    ~MetricsLog();  // closes quietly; call close() to see errors

    // One row each. Steps must be >= 0 and never decrease within a series.
    void append_train(int64_t step, double loss, double lr, double grad_norm, double tokens_per_s, double wall_s);
    void append_eval(int64_t step, double loss, double token_acc, double seq_acc);
    // A row of an optional evaluation the log was made with ("eval_lengths", "eval_train").
    void append_eval(const std::string& group, int64_t step, double loss, double token_acc, double seq_acc);
    // Each vector holds layers * heads values, row-major [layer][head].
    void append_attention(const std::string& kind, int64_t step, const std::vector<double>& entropy,
                          const std::vector<double>& entropy_norm, const std::vector<double>& masked_mass,
                          const std::vector<double>& masked_mass_max, const std::vector<double>& score_std = {});

    // A row of /head_scores: each of its scores by name (layers * heads values,
    // row-major [layer][head]), and the loss on the repeat.
    void append_head_scores(int64_t step, const std::vector<std::pair<std::string, std::vector<double>>>& per_head,
                            double repeat_loss);
    bool has_head_scores() const;

    // Makes every row appended so far visible to readers and durable against a
    // crash. Call it once per log interval, and before writing a checkpoint.
    void flush();
    void close();

    const std::string& path() const;
    size_t layers() const;
    size_t heads() const;
    std::vector<std::string> kinds() const;

private:
    struct State;
    explicit MetricsLog(std::unique_ptr<State> state);
    State& live() const;  // throws once closed
    std::unique_ptr<State> state_;
};

}  // namespace attnlab
