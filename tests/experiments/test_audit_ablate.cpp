// `attnlab audit` and `attnlab ablate` as a library (experiments/analysis/audit.h,
// experiments/analysis/ablate.h), on the tiny checkpoints of tiny_runs.h (a
// decoder and an encoder-decoder, trained here):
//   - the audit of a trained model passes every live test, and its record has
//     the configured shapes and the cost figures computed by hand;
//   - ablation: zero-ablating a head changes the loss; a head whose out_proj
//     columns are zero changes nothing, exactly; rows sorted by effect; the
//     means are the traced head outputs' means; the files' layouts.
// That each live test can fail, and the dense reference, are tested in
// test_audit_live_tests.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/ops.h"
#include "data/h5file.h"
#include "experiments/analysis/ablate.h"
#include "experiments/analysis/audit.h"
#include "experiments/config/config.h"
#include "experiments/files/output_file.h"
#include "experiments/run/attention_metrics.h"
#include "experiments/run/evaluate.h"
#include "tests/temp_dir.h"
#include "tiny_runs.h"

namespace attnlab::analysis_test {
namespace {

AuditOptions quick() {
    AuditOptions o;
    o.batches = 2;
    o.timing = false;
    return o;
}

void expect_all_pass(const AuditRecord& rec) {
    EXPECT_TRUE(rec.passed());
    for (const LiveTest& t : rec.tests) EXPECT_TRUE(t.pass) << t.name << ": " << t.figure_name << " = " << t.figure << "; " << t.detail;
}

// --- the audit record ---

TEST(Audit, TrainedDecoderPassesEveryLiveTestAndRecordsItsShapes) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const AuditRecord rec = audit(*loaded.model, run.config, quick());
    expect_all_pass(rec);
    EXPECT_GE(rec.tests.size(), 12u);

    const size_t L = 2, D = 16, H = 2, H_kv = 1, d_h = 8;
    EXPECT_EQ(rec.layers, L);
    EXPECT_EQ(rec.width, D);
    EXPECT_EQ(rec.heads, H);
    EXPECT_EQ(rec.kv_heads, H_kv);
    EXPECT_EQ(rec.head_width, d_h);
    EXPECT_DOUBLE_EQ(rec.scale, 1.0 / std::sqrt(8.0));
    EXPECT_EQ(rec.masked_rows, "error");
    EXPECT_EQ(rec.dtype, "float32");
    // q, k, v, out: weight and bias per layer
    ASSERT_EQ(rec.projections.size(), L * 8);
    EXPECT_EQ(rec.projections[0].name, "blocks.0.attn.q_proj.weight");
    EXPECT_EQ(rec.projections[0].shape, (Shape{H * d_h, D}));
    EXPECT_EQ(rec.projections[2].name, "blocks.0.attn.k_proj.weight");
    EXPECT_EQ(rec.projections[2].shape, (Shape{H_kv * d_h, D}));
    EXPECT_EQ(rec.projections[6].name, "blocks.0.attn.out_proj.weight");
    EXPECT_EQ(rec.projections[6].shape, (Shape{D, H * d_h}));
    ASSERT_EQ(rec.masks.size(), 1u);
    EXPECT_TRUE(rec.masks[0].causal);

    // cost, by hand: K and V, per layer, per K/V head, d_h floats of 4 bytes
    EXPECT_EQ(rec.kv_bytes_per_token, 2 * L * H_kv * d_h * 4);
    EXPECT_EQ(rec.kv_bytes_per_token, 128u);
    EXPECT_EQ(rec.longest, make_batch_source(run.config, 0, 0)->max_sequence_length());
    EXPECT_EQ(rec.positional_max_len, loaded.max_len);
    EXPECT_EQ(rec.kv_bytes_at_longest, rec.kv_bytes_per_token * rec.longest);
    EXPECT_EQ(rec.kv_bytes_measured, rec.kv_bytes_at_longest);
    ASSERT_EQ(rec.costs.size(), 1u);
    EXPECT_EQ(rec.costs[0].score_elements, H * rec.longest * rec.longest);
    EXPECT_EQ(rec.costs[0].score_elements_batch, 8 * H * rec.longest * rec.longest * L);

    // statistics: one score range per layer, one row per head, no mass on ineligible keys
    ASSERT_EQ(rec.scores.size(), L);
    for (const ScoreRange& s : rec.scores) {
        EXPECT_LE(s.min, s.mean);
        EXPECT_LE(s.mean, s.max);
        EXPECT_GT(s.std, 0.0);
        EXPECT_GT(s.pairs, 0u);
    }
    ASSERT_EQ(rec.head_stats.size(), L * H);
    for (const HeadRecord& h : rec.head_stats) {
        EXPECT_EQ(h.masked_mass_max, 0.0);
        EXPECT_GT(h.entropy, 0.0);
        EXPECT_LE(h.entropy_norm, 1.0 + 1e-9);
    }
    EXPECT_EQ(rec.sequences, 2u * 8);
    EXPECT_LE(rec.max_length, rec.longest);
}

TEST(Audit, RebuiltSiteInputsReproduceTheTracedWeights) {
    // The audit computes scores and runs its layer tests on inputs rebuilt from
    // the hidden states: through the module they give the traced weights, bitwise.
    for (const Trained* run : {&decoder_run(), &enc_dec_run()}) {
        const LoadedModel loaded = run->load();
        const Batch batch = eval_data(run->config, 1)[0];
        NoGradGuard no_grad;
        const AttentionPass pass = attention_pass(*loaded.model, batch);
        const std::vector<AttentionSite> sites = attention_sites(*loaded.model);
        for (const AttentionSite& site : sites) {
            const AttentionMask& mask = pass.kind_of(site).mask;
            Hooks alone;  // the module run by itself: its points are named without the prefix
            alone.record("scores");
            HookScope scope(*site.attn, alone);
            const MultiHeadAttention::Output o = site.attn->forward(pass.at(site, "in"), pass.at(site, "in_kv"), mask, true);
            const std::vector<double> got = o.weights.values(), want = pass.at(site, "pattern").values();
            ASSERT_EQ(got.size(), want.size()) << site.name;
            for (size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], want[e]) << site.name;
            EXPECT_EQ(score_std({alone.last("scores")}, mask), score_std({pass.at(site, "scores")}, mask)) << site.name;
        }
    }
}

TEST(Audit, TrainedEncoderDecoderPassesEveryLiveTest) {
    const Trained& run = enc_dec_run();
    const LoadedModel loaded = run.load();
    const AuditRecord rec = audit(*loaded.model, run.config, quick());
    expect_all_pass(rec);
    ASSERT_EQ(rec.masks.size(), 3u);
    EXPECT_FALSE(rec.masks[0].causal);  // enc_self
    EXPECT_TRUE(rec.masks[1].causal);   // dec_self
    EXPECT_FALSE(rec.masks[2].causal);  // cross
    EXPECT_EQ(rec.scores.size(), 3u * 2);
    EXPECT_EQ(rec.head_stats.size(), 3u * 2 * 2);
    // decoder self-attention per target token, cross-attention per source token
    EXPECT_EQ(rec.cross_kv_bytes_per_token, rec.kv_bytes_per_token);
    EXPECT_EQ(rec.kv_bytes_measured, rec.kv_bytes_per_token * (rec.longest + rec.longest_source));
    bool has_bidirectional = false;
    for (const LiveTest& t : rec.tests) has_bidirectional = has_bidirectional || t.name.find("whole source") != std::string::npos;
    EXPECT_TRUE(has_bidirectional);
}

TEST(Audit, ModelWithPolicyZeroKeepsOtherSequencesUnchanged) {
    const Trained& run = decoder_run();
    Config config = run.config;
    apply_override(config, "model.masked_rows=zero");
    const LoadedModel loaded = load_model(config, run.checkpoint, run.path);
    const LiveTest t = masked_row_policy(*loaded.model, eval_data(config, 1)[0]);
    EXPECT_TRUE(t.pass) << t.detail;
    EXPECT_NE(t.name.find("policy zero"), std::string::npos);
}

// --- ablation ---

TEST(Ablate, ZeroAblatingAHeadChangesTheLossAndRowsAreSortedByEffect) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const std::vector<Batch> data = eval_data(run.config, 2);
    const std::vector<std::vector<HeadRef>> groups = {{parse_head_ref("1.0", *loaded.model)},
                                                      {parse_head_ref("self:0.0", *loaded.model), {"self", 0, 1}}};
    const Ablation a = ablate(*loaded.model, data, groups);
    ASSERT_EQ(a.rows.size(), 2u * 2);
    // a group of one head is that head's row; a group is named by its heads
    ASSERT_EQ(a.groups.size(), 2u);
    for (const AblationRow& r : a.rows)
        if (r.layer == 1 && r.head == 0) {
            EXPECT_EQ(a.groups[0].zero.loss, r.zero.loss);
            EXPECT_EQ(a.groups[0].mean.loss, r.mean.loss);
        }
    EXPECT_EQ(a.groups[1].name, "self 0.0 + self 0.1");
    EXPECT_NE(a.groups[1].zero.loss, a.baseline.loss);
    for (const char* bad : {"2.0", "0.2", "cross:0.0", "1", "1.x", ""}) EXPECT_THROW(parse_head_ref(bad, *loaded.model), Error) << bad;
    for (const AblationRow& r : a.rows) {
        EXPECT_NE(r.zero.loss, a.baseline.loss) << r.kind << " " << r.layer << "." << r.head;
        EXPECT_DOUBLE_EQ(r.effect, std::max(r.zero.loss, r.mean.loss) - a.baseline.loss);
    }
    for (size_t i = 1; i < a.rows.size(); ++i) EXPECT_GE(a.rows[i - 1].effect, a.rows[i].effect);
    // the baseline is a plain evaluation, and no ablation hook stays attached afterwards
    // (an evaluation after ablate() is the baseline again)
    EXPECT_EQ(a.baseline.loss, evaluate(*loaded.model, data).loss);
    const std::string table = ablation_table(a);
    EXPECT_NE(table.find("baseline: loss"), std::string::npos);
}

TEST(Ablate, AHeadWhoseOutputProjectionIsZeroChangesNothingExactly) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const AttentionSite attn = attention_sites(*loaded.model)[1];  // blocks.1.attn (a copy: the vector is a temporary)
    Tensor out_proj;  // a handle on the parameter blocks.1.attn.out_proj.weight
    for (const auto& [name, p] : loaded.model->module().state_dict())
        if (name == "blocks.1.attn.out_proj.weight") out_proj = p;
    ASSERT_TRUE(out_proj.defined());
    const size_t head = 1, d_h = attn.head_width, in = attn.heads * d_h;
    std::vector<double> w = out_proj.values();  // [D, H*d_h]
    for (size_t row = 0; row < w.size() / in; ++row)
        for (size_t c = head * d_h; c < (head + 1) * d_h; ++c) w[row * in + c] = 0.0;
    out_proj.assign(Tensor::from_values(w, out_proj.shape()));

    const Ablation a = ablate(*loaded.model, eval_data(run.config, 2));
    bool found = false;
    for (const AblationRow& r : a.rows) {
        if (r.layer != 1 || r.head != head) {
            EXPECT_NE(r.zero.loss, a.baseline.loss);  // the other heads still matter
            continue;
        }
        found = true;
        EXPECT_EQ(r.zero.loss, a.baseline.loss);
        EXPECT_EQ(r.zero.token_acc, a.baseline.token_acc);
        EXPECT_EQ(r.zero.seq_acc, a.baseline.seq_acc);
        EXPECT_EQ(r.mean.loss, a.baseline.loss);
        EXPECT_EQ(r.mean.token_acc, a.baseline.token_acc);
        EXPECT_EQ(r.effect, 0.0);
    }
    EXPECT_TRUE(found);
}

TEST(Ablate, MeanOutputsAreTheTracedHeadOutputsAveragedOverValidPositions) {
    const Trained& run = decoder_run();
    const LoadedModel loaded = run.load();
    const std::vector<Batch> data = eval_data(run.config, 1);
    const auto means = mean_head_outputs(*loaded.model, data);  // [kind][layer][head][d_h]
    NoGradGuard no_grad;
    Hooks hooks;
    hooks.record("blocks.1.attn.z");
    loaded.model->forward(data[0], hooks);
    const Tensor& c = hooks.last("blocks.1.attn.z");  // (B, T, H, d_h)
    const size_t B = c.size(0), T = c.size(1), H = c.size(2), d = c.size(3);
    const std::vector<double> v = c.values();
    for (size_t h = 0; h < H; ++h)
        for (size_t e = 0; e < d; ++e) {
            double sum = 0;
            size_t n = 0;
            for (size_t b = 0; b < B; ++b)
                for (size_t t = 0; t < data[0].lengths[b]; ++t, ++n) sum += v[((b * T + t) * H + h) * d + e];
            EXPECT_NEAR(means[0][1][h][e], sum / static_cast<double>(n), 1e-12);
        }
    // both ablations move the loss (the means are not the heads' outputs)
    const Ablation a = ablate(*loaded.model, data);
    double zero_total = 0, mean_total = 0;
    for (const AblationRow& r : a.rows) {
        zero_total += std::abs(r.zero.loss - a.baseline.loss);
        mean_total += std::abs(r.mean.loss - a.baseline.loss);
    }
    EXPECT_GT(zero_total, 0.0);
    EXPECT_GT(mean_total, 0.0);
}

TEST(Ablate, FilesFollowTheirLayouts) {
    const Trained& run = enc_dec_run();
    const LoadedModel loaded = run.load();
    const std::vector<Batch> data = eval_data(run.config, 1);
    const Ablation a = ablate(*loaded.model, data);
    ASSERT_EQ(a.rows.size(), 3u * 2 * 2);  // enc_self, dec_self, cross x 2 layers x 2 heads
    const test::TempDir temp("attnlab_ablate_files_");  // removed also when an assertion ends the test
    const fs::path& dir = temp.path();
    const std::string table = (dir / "table.h5").string(), maps = (dir / "maps.h5").string();
    AblationSource source{run.path, run.checkpoint.step, run.checkpoint.config_toml, 0, 1};
    write_ablation_h5(OutputFile{table, Existing::refuse, {}}, a, source);
    write_maps_h5(OutputFile{maps, Existing::refuse, {}}, *loaded.model, data[0], source);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), {}), 2);  // the two files, no temporary
    {
        const h5::File f = h5::File::open(table, "test", h5::File::Access::read);
        EXPECT_EQ(f.read_attr_string("format"), "attnlab-ablation");
        EXPECT_EQ(f.read_attr_int("format_version"), 1);
        EXPECT_EQ(f.read_attr_double("baseline_loss"), a.baseline.loss);
        const std::vector<double> effect = f.dataset("ranked/effect").read<double>();
        ASSERT_EQ(effect.size(), a.rows.size());
        for (size_t i = 0; i < effect.size(); ++i) EXPECT_EQ(effect[i], a.rows[i].effect);
        EXPECT_EQ(f.dataset("ranked/layer").read<int64_t>().size(), a.rows.size());
        for (const char* kind : {"enc_self", "dec_self", "cross"}) {
            EXPECT_EQ(f.dataset(std::string(kind) + "/zero_loss").shape(), (Shape{2, 2}));
            EXPECT_EQ(f.dataset(std::string(kind) + "/mean_output").shape(), (Shape{2, 2, 8}));
        }
    }
    {
        const h5::File f = h5::File::open(maps, "test", h5::File::Access::read);
        EXPECT_EQ(f.read_attr_string("format"), "attnlab-maps");
        const Shape tgt = f.dataset("tgt").shape();
        const Shape src = f.dataset("src").shape();
        EXPECT_EQ(f.dataset("attention/dec_self/layer_1").shape(), (Shape{tgt[0], 2, tgt[1], tgt[1]}));
        EXPECT_EQ(f.dataset("attention/cross/layer_0").shape(), (Shape{tgt[0], 2, tgt[1], src[1]}));
        EXPECT_EQ(f.dataset("attention/enc_self/layer_0").shape(), (Shape{src[0], 2, src[1], src[1]}));
    }
}

}  // namespace
}  // namespace attnlab::analysis_test
