// `attnlab audit` and `attnlab ablate` as a library (experiments/analysis/audit.h,
// experiments/analysis/ablate.h), on tiny checkpoints trained here (a decoder and an
// encoder-decoder, well under a second each):
//   - the audit of a trained model passes every live test, and its record has
//     the configured shapes and the cost figures computed by hand;
//   - the live tests can fail: a mask built without `causal` (or without key
//     padding) makes the perturbation (padding) test FAIL, a reference with
//     another mask disagrees with the op;
//   - the dense reference on hand-computed values and on all-masked rows;
//   - ablation: zero-ablating a head changes the loss; a head whose out_proj
//     columns are zero changes nothing, exactly; rows sorted by effect; the
//     means are the traced head outputs' means; the files' layouts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "autograd/ops.h"
#include "experiments/analysis/ablate.h"
#include "experiments/analysis/audit.h"
#include "experiments/files/checkpoint.h"
#include "experiments/config/config.h"
#include "data/h5file.h"
#include "experiments/run/model_factory.h"
#include "experiments/run/trainer.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

struct Trained {
    Config config;
    CheckpointData checkpoint;
    std::string path;
    LoadedModel load() const { return load_model(config, checkpoint, path); }
};

// Trains a tiny model for 40 steps into a temporary folder (removed at exit).
Trained train_tiny(const std::vector<std::string>& overrides) {
    static const fs::path root = [] {
        const fs::path dir = fs::temp_directory_path() / ("attnlab_audit_test_" + std::to_string(::getpid()));
        fs::create_directories(dir);
        static struct Cleanup {
            fs::path dir;
            ~Cleanup() {
                std::error_code ignored;
                fs::remove_all(dir, ignored);
            }
        } cleanup{dir};
        return dir;
    }();
    Config config = default_config();
    for (const char* o : {"model.width=16", "model.heads=2", "model.kv_heads=1", "model.layers=2", "model.ffn=32",
                          "train.steps=40", "train.batch=8", "train.log_every=20", "train.eval_every=20",
                          "train.checkpoint_every=40", "train.eval_batches=1", "train.threads=1"})
        apply_override(config, o);
    for (const std::string& o : overrides) apply_override(config, o);
    validate(config);
    static int runs = 0;
    const fs::path dir = root / ("run" + std::to_string(runs++));
    std::unique_ptr<Trainer> trainer = Trainer::start(config, dir.string());
    EXPECT_EQ(trainer->run(), 0);
    Trained t;
    t.path = list_checkpoints((dir / "checkpoints").string()).back();
    t.checkpoint = read_checkpoint(t.path);
    t.config = parse_config(t.checkpoint.config_toml, t.path);
    return t;
}

const Trained& decoder_run() {
    static const Trained t = train_tiny({});
    return t;
}

const Trained& enc_dec_run() {
    static const Trained t = train_tiny({"task.name=translate", "model.kind=encoder-decoder"});
    return t;
}

AuditOptions quick() {
    AuditOptions o;
    o.batches = 2;
    o.timing = false;
    return o;
}

std::vector<Batch> eval_data(const Config& config, size_t batches) {
    const std::unique_ptr<BatchSource> source = make_batch_source(config, 0, 2);
    std::vector<Batch> data;
    for (size_t i = 0; i < batches; ++i) data.push_back(source->next(static_cast<size_t>(config.train.batch)));
    return data;
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

// --- the tests can fail ---

struct SiteInputs {
    Tensor x_q, x_kv;  // the hook points <module>.in and <module>.in_kv
};

struct LayerInputs {
    LoadedModel loaded;
    Batch batch;
    std::vector<SiteInputs> inputs;
    std::vector<AttentionKind> kinds;
    const MultiHeadAttention* attn = nullptr;  // layer 0
};

LayerInputs layer_inputs(const Trained& run) {
    LayerInputs in;
    in.loaded = run.load();
    in.batch = eval_data(run.config, 1)[0];
    NoGradGuard no_grad;
    const AttentionPass pass = attention_pass(*in.loaded.model, in.batch);
    for (const AttentionSite& site : attention_sites(*in.loaded.model))
        in.inputs.push_back({pass.at(site, "in"), pass.at(site, "in_kv")});
    in.kinds = pass.kinds;
    in.attn = attention_sites(*in.loaded.model)[0].attn;
    return in;
}

TEST(Audit, CausalPerturbationFailsWithAMaskBuiltWithoutCausal) {
    const LayerInputs in = layer_inputs(decoder_run());
    const AttentionKind& self = in.kinds[0];
    ASSERT_TRUE(self.mask.causal);
    Rng rng(3);
    const LiveTest good = causal_perturbation(*in.attn, in.inputs[0].x_q, self.query_lengths, self.mask, rng, "correct mask");
    EXPECT_TRUE(good.pass) << good.detail;
    EXPECT_EQ(good.figure, 0.0);

    AttentionMask broken = self.mask;  // the library's mask for this batch, without its causal part
    broken.causal = false;
    const LiveTest bad = causal_perturbation(*in.attn, in.inputs[0].x_q, self.query_lengths, broken, rng, "no causal");
    EXPECT_FALSE(bad.pass);
    EXPECT_GT(bad.figure, 100 * bad.tolerance);
}

TEST(Audit, PaddingInvarianceFailsWithAMaskBuiltWithoutKeyPadding) {
    // the encoder's self-attention: key padding is all that keeps padded source positions out
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& enc = in.kinds[0];
    ASSERT_EQ(enc.name, "enc_self");
    ASSERT_FALSE(enc.mask.key_lengths.empty());
    Rng rng(4);
    const SiteInputs& x = in.inputs[0];
    const LiveTest good = padding_invariance(*in.attn, x.x_q, x.x_kv, enc.query_lengths, enc.mask.key_lengths, enc.mask, rng, "ok");
    EXPECT_TRUE(good.pass) << good.detail;
    AttentionMask broken = enc.mask;
    broken.key_lengths.clear();
    const LiveTest bad = padding_invariance(*in.attn, x.x_q, x.x_kv, enc.query_lengths, enc.mask.key_lengths, broken, rng, "no padding");
    EXPECT_FALSE(bad.pass);
    EXPECT_GT(bad.figure, 100 * bad.tolerance);
}

TEST(Audit, CausalSelfAttentionNeedsNoKeyPaddingForItsValidRows) {
    // Right padding sits after every valid query, so the causal mask alone keeps it
    // out of valid rows: the decoder's padding test passes even without key padding
    // (the key padding only matters for padded query rows, which count nowhere).
    const LayerInputs in = layer_inputs(decoder_run());
    const AttentionKind& self = in.kinds[0];
    Rng rng(4);
    const SiteInputs& x = in.inputs[0];
    AttentionMask causal_only = self.mask;
    causal_only.key_lengths.clear();
    EXPECT_TRUE(padding_invariance(*in.attn, x.x_q, x.x_kv, self.query_lengths, self.mask.key_lengths, causal_only, rng, "").pass);
    AttentionMask neither;
    EXPECT_FALSE(padding_invariance(*in.attn, x.x_q, x.x_kv, self.query_lengths, self.mask.key_lengths, neither, rng, "").pass);
}

TEST(Audit, CrossAttentionPaddingFailsWithoutTheSourceMask) {
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& cross = in.kinds[2];
    ASSERT_EQ(cross.name, "cross");
    const std::vector<AttentionSite> sites = attention_sites(*in.loaded.model);
    size_t s = 0;
    while (sites[s].kind != "cross") ++s;
    Rng rng(5);
    const LiveTest good = padding_invariance(*sites[s].attn, in.inputs[s].x_q, in.inputs[s].x_kv, cross.query_lengths,
                                             cross.mask.key_lengths, cross.mask, rng, "ok");
    EXPECT_TRUE(good.pass) << good.detail;
    const LiveTest bad = padding_invariance(*sites[s].attn, in.inputs[s].x_q, in.inputs[s].x_kv, cross.query_lengths,
                                            cross.mask.key_lengths, AttentionMask{}, rng, "no mask");
    EXPECT_FALSE(bad.pass);
}

TEST(Audit, EncoderBidirectionalTestFailsForACausalEncoderMask) {
    const LayerInputs in = layer_inputs(enc_dec_run());
    const AttentionKind& enc = in.kinds[0];
    ASSERT_EQ(enc.name, "enc_self");
    Rng rng(6);
    EXPECT_TRUE(bidirectional(*in.attn, in.inputs[0].x_q, enc.query_lengths, enc.mask, rng, "ok").pass);
    AttentionMask causal = enc.mask;
    causal.causal = true;
    const LiveTest bad = bidirectional(*in.attn, in.inputs[0].x_q, enc.query_lengths, causal, rng, "causal encoder");
    EXPECT_FALSE(bad.pass);
    EXPECT_EQ(bad.figure, 0.0);
}

// --- the dense reference ---

TEST(DenseReference, HandComputedValues) {
    // one query (1, 0), keys (1, 0) and (0, 1), scale 1: scores 1 and 0
    const Tensor q = Tensor::from_values({1, 0}, {1, 1, 1, 2}, DType::f64);
    const Tensor k = Tensor::from_values({1, 0, 0, 1}, {1, 1, 2, 2}, DType::f64);
    const Tensor v = Tensor::from_values({1, 2, 3, 4}, {1, 1, 2, 2}, DType::f64);
    const double a = std::exp(1.0) / (std::exp(1.0) + 1.0);
    DenseAttention r = dense_reference_attention(q, k, v, {}, 1.0, MaskedRows::error);
    EXPECT_NEAR(r.weights[0], a, 1e-15);
    EXPECT_NEAR(r.weights[1], 1 - a, 1e-15);
    EXPECT_NEAR(r.context[0], a * 1 + (1 - a) * 3, 1e-15);
    EXPECT_NEAR(r.context[1], a * 2 + (1 - a) * 4, 1e-15);
    // causal with Tq 1 < Tk 2 is bottom-right aligned: the one query sees both keys
    AttentionMask causal;
    causal.causal = true;
    r = dense_reference_attention(q, k, v, causal, 1.0, MaskedRows::error);
    EXPECT_NEAR(r.weights[1], 1 - a, 1e-15);
    // key padding to length 1: all weight on key 0
    AttentionMask padding;
    padding.key_lengths = {1};
    r = dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::error);
    EXPECT_EQ(r.weights[0], 1.0);
    EXPECT_EQ(r.weights[1], 0.0);
    EXPECT_EQ(r.context[1], 2.0);
    // length 0: "error" names the row, "zero" gives zeros
    padding.key_lengths = {0};
    try {
        dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::error);
        ADD_FAILURE() << "no error for an all-masked row";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("batch item 0, query position 0"), std::string::npos) << e.what();
    }
    r = dense_reference_attention(q, k, v, padding, 1.0, MaskedRows::zero);
    for (double x : r.weights) EXPECT_EQ(x, 0.0);
    for (double x : r.context) EXPECT_EQ(x, 0.0);
}

TEST(DenseReference, AgreesWithTheOpForEveryMaskKindAndDisagreesUnderAnotherMask) {
    for (DType dtype : {DType::f32, DType::f64}) {
        const LiveTest t = reference_agreement_random(dtype);
        EXPECT_TRUE(t.pass) << t.name << ": " << t.figure << "; " << t.detail;
    }
    Rng rng(9);
    const Tensor q = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64), k = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64),
                 v = rng.normal({1, 2, 4, 3}, 0, 1, DType::f64);
    AttentionMask causal;
    causal.causal = true;
    AttentionOptions options;
    options.scale = 0.5;
    const std::vector<double> op = attention(q, k, v, causal, options).context.values();
    const DenseAttention same = dense_reference_attention(q, k, v, causal, 0.5, MaskedRows::error);
    const DenseAttention other = dense_reference_attention(q, k, v, {}, 0.5, MaskedRows::error);
    double same_diff = 0, other_diff = 0;
    for (size_t e = 0; e < op.size(); ++e) {
        same_diff = std::max(same_diff, std::abs(op[e] - same.context[e]));
        other_diff = std::max(other_diff, std::abs(op[e] - other.context[e]));
    }
    EXPECT_LE(same_diff, 1e-12);
    EXPECT_GT(other_diff, 1e-2);
}

TEST(DenseReference, AllMaskedRowPolicyOfTheOp) {
    const LiveTest t = masked_row_policy_op();
    EXPECT_TRUE(t.pass) << t.detail;
    EXPECT_EQ(t.figure, 0.0);
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
    const AttentionSite& attn = attention_sites(*loaded.model)[1];  // blocks.1.attn
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
    const fs::path dir = fs::temp_directory_path() / ("attnlab_ablate_files_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string table = (dir / "table.h5").string(), maps = (dir / "maps.h5").string();
    AblationSource source{run.path, run.checkpoint.step, run.checkpoint.config_toml, 0, 1};
    write_ablation_h5(table, a, source);
    write_maps_h5(maps, *loaded.model, data[0], source);
    EXPECT_FALSE(fs::exists(table + ".tmp"));
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
    fs::remove_all(dir);
}

}  // namespace
}  // namespace attnlab
