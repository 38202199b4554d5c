#include "experiments/run/head_scores.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "experiments/config/config.h"
#include "experiments/run/model_factory.h"

namespace attnlab {

HeadScoreBatch repeated_token_batch(size_t rows, size_t half, int32_t first, int32_t last, uint64_t seed) {
    const size_t tokens = static_cast<size_t>(last - first + 1);
    if (half < 2 || half > tokens || rows == 0)
        fail("head scores", "a repeated-token batch needs 2 <= n <= " + std::to_string(tokens) + " distinct tokens and rows > 0 (n = " +
                                std::to_string(half) + ", rows " + std::to_string(rows) + ")");
    const size_t T = 2 * half - 1;  // inputs r r without the last token
    Rng rng(seed, 0);
    std::vector<int32_t> inputs(rows * T), targets(rows * T);
    std::vector<uint8_t> counts(rows * T, 0);
    std::vector<int32_t> pool(tokens);
    std::iota(pool.begin(), pool.end(), first);
    std::vector<size_t> swapped(half);
    for (size_t b = 0; b < rows; ++b) {
        // r: the first n of a Fisher-Yates shuffle of [first, last]
        for (size_t i = 0; i < half; ++i) {
            swapped[i] = i + static_cast<size_t>(rng.integer(0, static_cast<int64_t>(tokens - i)));
            std::swap(pool[i], pool[swapped[i]]);
        }
        for (size_t t = 0; t < T; ++t) {
            inputs[b * T + t] = pool[t % half];
            targets[b * T + t] = pool[(t + 1) % half];
            counts[b * T + t] = t >= half ? 1 : 0;
        }
        // the pool in order again, undone swap by swap: O(n) a row, not O(vocabulary)
        for (size_t i = half; i-- > 0;) std::swap(pool[i], pool[swapped[i]]);
    }
    HeadScoreBatch out;
    out.half = half;
    out.batch.inputs = Indices({rows, T}, std::move(inputs));
    out.batch.targets = Indices({rows, T}, std::move(targets));
    out.batch.loss_mask = Mask({rows, T}, std::move(counts));
    out.batch.lengths.assign(rows, T);
    return out;
}

HeadScoreBatch head_score_batch(const Config& config, size_t max_positions, size_t rows, uint64_t seed) {
    if (config.model.kind != "decoder") fail("head scores", "head scores need a decoder model (this one is " + config.model.kind + ")");
    // a generated task's content tokens; a text or file task's whole vocabulary
    const bool generated = config.task.name != "text" && config.task.name != "file" && config.task.name != "none";
    const int32_t first = generated ? kFirstContent : 0, last = static_cast<int32_t>(config.task.vocab) - 1;
    const size_t distinct = last >= first ? static_cast<size_t>(last - first + 1) : 0;
    const size_t half = std::min((max_positions + 1) / 2, distinct);
    if (half < 2)
        fail("head scores", "need a repeat of at least 2 tokens: the model covers " + std::to_string(max_positions) + " positions and " +
                                std::to_string(distinct) + " distinct tokens");
    return repeated_token_batch(rows, half, first, last, seed);
}

HeadScores attention_scores(const std::vector<Tensor>& patterns, size_t half) {
    HeadScores s;
    s.layers = patterns.size();
    if (patterns.empty()) return s;
    const Shape shape = patterns[0].shape();
    const size_t T = 2 * half - 1;
    if (shape.size() != 4 || shape[2] != T || shape[3] != T)
        fail("head scores", "patterns must be (B, H, " + std::to_string(T) + ", " + std::to_string(T) + "), got " + shape_str(shape));
    const size_t B = shape[0], H = shape[1];
    s.heads = H;
    for (size_t l = 0; l < s.layers; ++l) {
        if (patterns[l].shape() != shape)
            fail("head scores", "layer " + std::to_string(l) + " pattern " + shape_str(patterns[l].shape()) + " differs from layer 0's");
        const std::vector<double> a = patterns[l].to(Device::cpu).values();
        for (size_t h = 0; h < H; ++h) {
            double previous = 0, duplicate = 0, induction = 0;
            for (size_t b = 0; b < B; ++b) {
                const double* head = a.data() + (b * H + h) * T * T;  // (T, T): row t, key j at head[t * T + j]
                for (size_t t = 1; t < T; ++t) previous += head[t * T + t - 1];
                for (size_t t = half; t < T; ++t) {
                    duplicate += head[t * T + t - half];
                    induction += head[t * T + t - half + 1];
                }
            }
            s.previous_token.push_back(previous / static_cast<double>(B * (T - 1)));
            s.duplicate_token.push_back(duplicate / static_cast<double>(B * (T - half)));
            s.induction.push_back(induction / static_cast<double>(B * (T - half)));
        }
    }
    return s;
}

namespace {

extern "C" void dgeev_(const char* jobvl, const char* jobvr, const int* n, double* a, const int* lda, double* wr, double* wi,
                       double* vl, const int* ldvl, double* vr, const int* ldvr, double* work, const int* lwork, int* info);

// sum Re(lambda) / sum |lambda| over the eigenvalues of the n x n row-major matrix `m` (0 when all are 0).
double copying_of(std::vector<double> m, int n) {
    // LAPACK reads column-major: the transpose, which has the same eigenvalues
    std::vector<double> wr(static_cast<size_t>(n)), wi(static_cast<size_t>(n)), work(static_cast<size_t>(8 * n + 8));
    const int lwork = static_cast<int>(work.size()), one = 1;
    int info = 0;
    dgeev_("N", "N", &n, m.data(), &n, wr.data(), wi.data(), nullptr, &one, nullptr, &one, work.data(), &lwork, &info);
    if (info != 0) fail("head scores", "the OV circuit's eigenvalues did not converge (LAPACK dgeev info " + std::to_string(info) + ")");
    double real = 0, magnitude = 0;
    for (int i = 0; i < n; ++i) {
        real += wr[static_cast<size_t>(i)];
        magnitude += std::hypot(wr[static_cast<size_t>(i)], wi[static_cast<size_t>(i)]);
    }
    return magnitude > 0 ? real / magnitude : 0.0;
}

}  // namespace

namespace {

Tensor cpu_parameter(const NamedTensors& params, const std::string& name, const std::string& what) {
    for (const auto& [n, p] : params)
        if (n == name) return p.detach().to(Device::cpu);
    fail(what, "the model has no parameter " + name);
}

}  // namespace

Tensor cpu_parameter(const TaskModel& model, const std::string& name, const std::string& what) {
    return cpu_parameter(model.module().named_parameters(), name, what);
}

std::vector<HeadWeights> head_weights(const TaskModel& model) {
    const size_t L = model.layers(), H = model.heads();
    const NamedTensors params = model.module().named_parameters();
    std::vector<HeadWeights> out;
    for (size_t l = 0; l < L; ++l) {
        const std::string block = "blocks." + std::to_string(l) + ".attn.";
        const Tensor w_q = cpu_parameter(params, block + "q_proj.weight", "head weights");    // (H d_h, D)
        const Tensor w_k = cpu_parameter(params, block + "k_proj.weight", "head weights");    // (H_kv d_h, D)
        const Tensor w_v = cpu_parameter(params, block + "v_proj.weight", "head weights");    // (H_kv d_h, D)
        const Tensor w_o = cpu_parameter(params, block + "out_proj.weight", "head weights");  // (D, H d_h)
        const size_t d_h = w_q.size(0) / H, group = H / (w_k.size(0) / d_h);
        for (size_t h = 0; h < H; ++h) {
            const size_t kv = h / group;  // the K/V head query head h reads
            out.push_back({slice(w_q, 0, h * d_h, (h + 1) * d_h), slice(w_k, 0, kv * d_h, (kv + 1) * d_h),
                           slice(w_v, 0, kv * d_h, (kv + 1) * d_h), slice(w_o, 1, h * d_h, (h + 1) * d_h)});
        }
    }
    return out;
}

std::vector<double> copying_scores(const TaskModel& model) {
    const DecoderLM* lm = model.decoder_lm();
    if (lm == nullptr) fail("head scores", "copying scores need a decoder model");
    NoGradGuard no_grad;
    // W_U^T W_E (D, D): every token's logit, back in the stream (in the model's dtype:
    // the products are small, and only the last d_h x d_h one goes to LAPACK, in float64)
    const Tensor readout = matmul(transpose(cpu_parameter(model, lm->unembedding_name(), "head scores"), 0, 1),
                                  cpu_parameter(model, "tok_emb.weight", "head scores"));
    std::vector<double> out;
    for (const HeadWeights& w : head_weights(model)) {
        // B A = W_O,h^T W_U^T W_E W_V,h^T (d_h, d_h): the nonzero eigenvalues of M = W_E W_V,h^T W_O,h^T W_U^T
        const Tensor ba = matmul(matmul(transpose(w.o, 0, 1), readout), transpose(w.v, 0, 1));
        out.push_back(copying_of(ba.values(), static_cast<int>(w.v.size(0))));
    }
    return out;
}

HeadScores head_scores(const TaskModel& model, const HeadScoreBatch& input) {
    if (model.encoder_decoder()) fail("head scores", "head scores need a decoder model (this one is an encoder-decoder)");
    Module& module = model.module();
    const bool was_training = module.is_training();
    NoGradGuard no_grad;
    module.eval();
    const Batch& batch = input.batch;
    const size_t half = input.half;

    Hooks hooks;
    hooks.record("blocks.*.attn.pattern");
    const Tensor logits = model.forward(batch, hooks);
    const AttentionKind kind = model.kinds_for(batch).front();  // the decoder's self-attention
    HeadScores s = attention_scores(recorded_per_layer(hooks, kind, "pattern"), half);
    s.repeat_loss = cross_entropy(logits, batch.targets, batch.loss_mask).item();
    s.copying = copying_scores(model);

    module.train(was_training);
    return s;
}

const std::vector<std::string>& head_score_names() {
    static const std::vector<std::string> names{"previous_token", "duplicate_token", "induction", "copying"};
    return names;
}

const std::vector<double>& head_score_values(const HeadScores& scores, size_t which) {
    switch (which) {
        case 0: return scores.previous_token;
        case 1: return scores.duplicate_token;
        case 2: return scores.induction;
        case 3: return scores.copying;
        default: fail("head scores", "no score " + std::to_string(which));
    }
}

}  // namespace attnlab
