// bench_train: the workloads of the CPU-performance issue in attnlab, one per
// process (so that peak memory is the workload's own):
//
//   mha   MultiHeadAttention forward+backward, loss = sum of outputs, causal,
//         float32, need_weights off, x (B, S, D) -> (B, S, D)
//   attention  the attention op alone, forward+backward (loss = sum of the
//         context), causal, (B, H, S, d), on the dense or the blockwise path:
//         for peak memory against S
//   train one training step of a pre-LayerNorm decoder LM (token embedding,
//         vocabulary 32, learned positions, L blocks of causal MHA + FFN
//         D -> 4D GELU -> D, final LayerNorm, linear head, cross-entropy on
//         every position, AdamW lr 1e-3) on random tokens
//
// bench/bench_train.py runs the same workloads in PyTorch and prints the same
// JSON lines with "framework": "torch"; bench/run_train.sh alternates the two.
//
// FLOP convention (shared with bench_train.py): multiply-adds x 2, attention
// over the full S x S score matrix (what PyTorch computes under a causal mask),
// backward = 2 x forward. Per token and layer, forward: projections 8 D^2,
// FFN 16 D^2, scores and context 4 S D; the head 2 D V.
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <iostream>
#include <sstream>
#include <string>

#include <cxxopts.hpp>

#include "autograd/cpu/blas.h"
#include "autograd/cpu/jit_gemm.h"
#include "autograd/cpu/memory.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/cpu/threads.h"
#include "autograd/cpu/kernels.h"
#include "bench/bench_common.h"
#include "bench/fma_peak.h"
#include "autograd/device/backend.h"
#include "autograd/device/context.h"
#include "data/tasks.h"
#include "layers/models.h"
#include "optim/optimizer.h"

namespace attnlab {
namespace {

struct Timing {
    double warmup_seconds = 1.0;  // at least 2 steps
    double seconds = 3.0;         // timed steps: at least min_reps, until this long
    size_t min_reps = 5;
};

// Runs `step` through the warm-up, then times it; returns every timed step's seconds.
std::vector<double> time_steps(const std::function<void()>& step, const Timing& timing) {
    using clock = std::chrono::steady_clock;
    auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    const auto warm_start = clock::now();
    for (int n = 0; n < 2 || seconds_since(warm_start) < timing.warmup_seconds; ++n) step();
    std::vector<double> times;
    const auto start = clock::now();
    while (times.size() < timing.min_reps || seconds_since(start) < timing.seconds) {
        const auto t0 = clock::now();
        step();
        times.push_back(seconds_since(t0));
    }
    return times;
}

struct Result {
    std::string workload;
    std::string shape;   // human-readable workload parameters
    double flops;        // per step
    std::vector<double> times;
    std::string device = "cpu";  // where the step ran
};

std::string label;  // --label: which setting of the benchmark driver ran this process

void print_result(const Result& r, int threads) {
    const double med = bench::median(r.times);
    std::ostringstream line;
    line.precision(6);
    line << "{\"framework\": \"attnlab\", \"label\": " << bench::json_string(label)
         << ", \"workload\": " << bench::json_string(r.workload)
         << ", \"shape\": " << bench::json_string(r.shape) << ", \"device\": " << bench::json_string(r.device)
         << ", \"threads\": " << threads
         << ", \"reps\": " << r.times.size() << ", \"median_s\": " << med << ", \"steps_per_s\": " << 1.0 / med
         << ", \"gflops\": " << r.flops / med * 1e-9 << ", \"peak_rss_mib\": " << bench::peak_rss_mib()
         << ", \"times_s\": [";
    for (size_t i = 0; i < r.times.size(); ++i) line << (i ? ", " : "") << r.times[i];
    line << "]}";
    std::cout << line.str() << std::endl;
}

// ---- MultiHeadAttention forward+backward ----

// The token rules' tokens (--documents L, --prefix-lm): rows of S tokens, a
// document every L positions (<BOS> first), each prefix its first L/2 tokens
// (<SEP> last); plain causal rows hold neither token.
Indices bench_tokens(size_t B, size_t S, size_t document) {
    Indices tokens({B, S}, std::vector<int32_t>(B * S, 5));
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; document > 0 && t < S; ++t) {
            const size_t at = t % document;
            if (at == 0) tokens.values[b * S + t] = AttentionVariant{}.bos_token;
            if (at + 1 == std::max<size_t>(document / 2, 1)) tokens.values[b * S + t] = AttentionVariant{}.sep_token;
        }
    return tokens;
}

// The causal mask with an attention variant (autograd/variant.h): --window, --softcap,
// --prefix-lm, --documents (document: L, whose tokens the token rules read).
AttentionMask causal_with(const AttentionVariant& variant, size_t B, size_t S, size_t document) {
    AttentionMask mask;
    mask.causal = true;
    mask.variant = variant;
    mask.spans = token_spans(variant, bench_tokens(B, S, document), {});
    return mask;
}

// " window=W softcap=C" for the variant's fields that are on
std::string variant_text(const AttentionVariant& variant) {
    std::string text;
    if (variant.window > 0) text += " window=" + std::to_string(variant.window);
    if (variant.prefix_lm) text += " prefix_lm";
    if (variant.documents) text += " documents";
    if (variant.sinks) text += " sinks";
    if (variant.rel_buckets > 0) text += " rel_buckets=" + std::to_string(variant.rel_buckets);
    if (variant.softcap > 0) {
        std::ostringstream c;
        c << variant.softcap;
        text += " softcap=" + c.str();
    }
    return text;
}

Result bench_mha(size_t B, size_t S, size_t D, size_t H, const AttentionVariant& variant, size_t document,
                 const Timing& timing) {
    Rng init(1), data(2);
    AttentionConfig config;
    config.width = D;
    config.heads = H;
    config.variant = variant;  // its parameters, as the model gives its self-attention
    MultiHeadAttention mha(config, init, nullptr);
    const Tensor x = data.normal({B, S, D}, 0, 1).set_requires_grad(true);  // (B, S, D)
    const AttentionMask causal = causal_with(variant, B, S, document);
    auto step = [&] {
        Tensor out = mha.forward(x, x, causal, false).out;  // (B, S, D)
        sum(out).backward();
        for (auto& [name, p] : mha.named_parameters()) p.zero_grad();
        Tensor(x).zero_grad();
    };
    const double flops = 3.0 * (8.0 * B * S * D * D + 4.0 * B * S * S * D);
    return {"mha", "B=" + std::to_string(B) + " S=" + std::to_string(S) + " D=" + std::to_string(D) +
                       " H=" + std::to_string(H) + variant_text(variant) +
                       (variant.documents ? " L=" + std::to_string(document) : ""),
            flops, time_steps(step, timing)};
}

// ---- the attention op alone ----

Result bench_attention(size_t B, size_t H, size_t S, size_t d, const std::string& path, const AttentionVariant& variant,
                       const Timing& timing) {
    Rng data(2);
    const Tensor q = data.normal({B, H, S, d}, 0, 1).set_requires_grad(true);  // (B, H, S, d)
    const Tensor k = data.normal({B, H, S, d}, 0, 1).set_requires_grad(true);
    const Tensor v = data.normal({B, H, S, d}, 0, 1).set_requires_grad(true);
    const AttentionMask causal = causal_with(variant, B, S, 0);  // the op takes eligibility rules, not score modifiers
    AttentionOptions options;
    options.scale = 1.0 / std::sqrt(static_cast<double>(d));
    if (path == "dense") options.path = AttentionPath::dense;
    else if (path == "blockwise") options.path = AttentionPath::blockwise;
    else throw Error("[bench_train] --path must be dense or blockwise, got \"" + path + "\"");
    auto step = [&] {
        sum(attention(q, k, v, causal, options).context).backward();
        for (Tensor t : {q, k, v}) t.zero_grad();
    };
    return {"attention_" + path,
            "B=" + std::to_string(B) + " H=" + std::to_string(H) + " S=" + std::to_string(S) + " d=" + std::to_string(d) +
                variant_text(variant),
            3.0 * 4.0 * B * H * S * S * d, time_steps(step, timing)};
}

// ---- decoder training step ----

struct ModelSize {
    std::string name;
    size_t D, H, L, S, B;
    size_t V = 32;  // vocabulary
};

// nanogpt: nanoGPT's shakespeare_char CPU setting (width 128, 4 heads, 4 layers,
// context 64, batch 12, its 65 characters), without its tied embeddings and dropout.
ModelSize model_size(const std::string& name) {
    if (name == "small") return {name, 32, 2, 1, 16, 32};
    if (name == "medium") return {name, 128, 4, 2, 64, 64};
    if (name == "large") return {name, 256, 8, 4, 128, 32};
    if (name == "nanogpt") return {name, 128, 4, 4, 64, 12, 65};
    throw Error("[bench_train] --size must be small, medium, large or nanogpt, got \"" + name + "\"");
}

// on_device: the model moved to the device, where the whole step runs (as train.device = "cuda").
Result bench_train_step(const ModelSize& m, const Timing& timing, bool on_device, Activation activation) {
    ModelConfig config;
    config.vocab = m.V;
    config.layers = m.L;
    config.max_len = m.S;
    config.positional = Positional::learned;
    config.block.attention.width = m.D;
    config.block.attention.heads = m.H;
    config.block.ffn = 4 * m.D;
    config.block.activation = activation;
    config.block.norm = Norm::pre;
    Rng init(1), data(2);
    DecoderLM model(config, init, nullptr);
    model.train();
    if (on_device) model.to(Device::cuda);
    auto optimizer = make_adamw(model.named_parameters(), 1e-3);

    // A few fixed batches of random tokens and targets, used in turn.
    std::vector<std::pair<Indices, Indices>> batches;
    for (int i = 0; i < 4; ++i) {
        auto random_ids = [&] {
            std::vector<int32_t> ids(m.B * m.S);
            for (int32_t& id : ids) id = static_cast<int32_t>(data.integer(0, static_cast<int64_t>(m.V)));
            return Indices({m.B, m.S}, std::move(ids));
        };
        batches.emplace_back(random_ids(), random_ids());
    }
    size_t next = 0;
    auto step = [&] {
        const auto& [tokens, targets] = batches[next++ % batches.size()];
        Tensor loss = cross_entropy(model.forward(tokens), targets);  // logits (B, S, V)
        loss.backward();
        optimizer->step();
        optimizer->zero_grad();
        if (on_device) (void)loss.item();  // waits for the device: the step is done
    };
    const double per_token = m.L * (24.0 * m.D * m.D + 4.0 * m.S * m.D) + 2.0 * m.D * m.V;
    return {"train_" + m.name,
            "D=" + std::to_string(m.D) + " H=" + std::to_string(m.H) + " L=" + std::to_string(m.L) +
                " S=" + std::to_string(m.S) + " B=" + std::to_string(m.B) +
                (activation == Activation::gelu ? "" : " " + activation_choices().name(activation)),
            3.0 * per_token * m.B * m.S, time_steps(step, timing)};
}

int run(int argc, char** argv) {
    cxxopts::Options options("bench_train", "attnlab MultiHeadAttention and training-step benchmarks");
    options.add_options()
        ("workload", "mha | attention | train", cxxopts::value<std::string>())
        ("threads", "threads (attnlab's pool and OpenBLAS together)", cxxopts::value<int>()->default_value("1"))
        ("seconds", "timed seconds (at least --min-reps steps)", cxxopts::value<double>()->default_value("3"))
        ("warmup", "warm-up seconds (at least 2 steps)", cxxopts::value<double>()->default_value("1"))
        ("min-reps", "minimum timed steps", cxxopts::value<size_t>()->default_value("5"))
        ("size", "train: small | medium | large | nanogpt", cxxopts::value<std::string>()->default_value("small"))
        ("shape", "mha: B,S,D,H; attention: B,H,S,d", cxxopts::value<std::vector<size_t>>()->default_value("8,128,256,8"))
        ("path", "attention: dense | blockwise", cxxopts::value<std::string>()->default_value("blockwise"))
        ("device", "train: cpu | cuda (the whole step on the GPU, as train.device)",
         cxxopts::value<std::string>()->default_value("cpu"))
        ("window", "mha, attention: a sliding window of W keys (model.window)", cxxopts::value<size_t>()->default_value("0"))
        ("softcap", "mha: logit soft-capping at C (model.softcap; attention composed of ops)",
         cxxopts::value<double>()->default_value("0"))
        ("sinks", "mha: attention sinks (model.sinks; composed of ops)")
        ("prefix-lm", "mha: prefix-LM (model.prefix_lm), each document's first half its prefix (one document a row without --documents)")
        ("documents", "mha: packed documents of L tokens each (model.documents); 0 = off", cxxopts::value<size_t>()->default_value("0"))
        ("rel-buckets", "mha: T5's relative bias with N buckets (model.rel_buckets; composed of ops)",
         cxxopts::value<size_t>()->default_value("0"))
        ("activation", "train: the feed-forward's activation, gelu | gelu_tanh | relu (model.activation)",
         cxxopts::value<std::string>()->default_value("gelu"))
        ("openblas", "float32 GEMMs on OpenBLAS's sgemm instead of libxsmm's kernels (autograd/cpu/jit_gemm.h)")
        ("no-probe", "skip the sgemm probe at start and end (for profiling under valgrind, where it takes minutes)")
        ("label", "a name for this setting, copied to the output", cxxopts::value<std::string>()->default_value(""))
        ("h,help", "show this help");
    const auto args = options.parse(argc, argv);
    if (args.count("help") || !args.count("workload")) {
        std::cout << options.help() << std::endl;
        return args.count("help") ? 0 : 2;
    }
    const int threads = args["threads"].as<int>();
    if (threads < 1) throw Error("[bench_train] --threads must be at least 1");
    set_threads(threads);
    set_jit_gemm(args.count("openblas") == 0);
    Timing timing;
    timing.seconds = args["seconds"].as<double>();
    timing.warmup_seconds = args["warmup"].as<double>();
    timing.min_reps = args["min-reps"].as<size_t>();
    label = args["label"].as<std::string>();
    const std::string device = args["device"].as<std::string>();
    if (device != "cpu" && device != "cuda") throw Error("[bench_train] --device must be cpu or cuda, got \"" + device + "\"");
    if (device == "cuda") device::require_device("bench_train --device");  // refused here, before any output, without a GPU

    const bool no_probe = args.count("no-probe") > 0;
    const kernels::Isa isa = kernels::isa();  // ATTNLAB_ISA=avx2 measures the AVX2 paths on an AVX-512 CPU
    const double fma_peak = no_probe ? 0.0 : isa == kernels::Isa::avx512 ? bench::fma_peak_avx512() : bench::fma_peak_avx2();
    std::cout << "{\"framework\": \"attnlab\", \"meta\": true, \"threads\": " << threads
              << ", \"cpu\": " << bench::json_string(bench::cpu_model()) << ", \"isa\": " << bench::json_string(kernels::isa_name(isa))
              << ", \"fma_peak_gflops_one_core\": " << fma_peak
              << ", \"openblas_corename\": " << bench::json_string(openblas_get_corename())
              << ", \"gemm\": " << bench::json_string(jit_gemm() ? "libxsmm" : "openblas") << "}" << std::endl;
    // The probe is plain OpenBLAS sgemm at `threads` threads (attnlab itself keeps it at one).
    auto probe = [threads, no_probe](const char* when) {
        if (no_probe) return;
        set_blas_threads(threads);
        bench::print_probe(when, threads);
        set_blas_threads(1);
    };
    probe("start");
    const std::string workload = args["workload"].as<std::string>();
    AttentionVariant variant;
    variant.window = args["window"].as<size_t>();
    variant.softcap = args["softcap"].as<double>();
    variant.sinks = args.count("sinks") > 0;
    variant.rel_buckets = args["rel-buckets"].as<size_t>();
    variant.prefix_lm = args.count("prefix-lm") > 0;
    variant.documents = args["documents"].as<size_t>() > 0;
    if (variant.reads_tokens() && workload != "mha") throw Error("[bench_train] --prefix-lm and --documents are for --workload mha");
    if (variant.rel_buckets > 0 && variant.rel_buckets < 4) throw Error("[bench_train] --rel-buckets must be 0 or at least 4");
    if ((variant.sinks || variant.rel_buckets > 0) && workload != "mha")
        throw Error("[bench_train] --sinks and --rel-buckets are for --workload mha");
    if (!(variant.softcap >= 0)) throw Error("[bench_train] --softcap must be >= 0");
    if (variant.softcap > 0 && workload != "mha") throw Error("[bench_train] --softcap is for --workload mha");
    if (workload == "mha") {
        const auto s = args["shape"].as<std::vector<size_t>>();
        if (s.size() != 4) throw Error("[bench_train] --shape takes B,S,D,H");
        // the rows' layout: documents of L tokens, or one a row (prefix-LM alone)
        const size_t document = variant.documents ? args["documents"].as<size_t>() : variant.prefix_lm ? s[1] : 0;
        print_result(bench_mha(s[0], s[1], s[2], s[3], variant, document, timing), threads);
    } else if (workload == "attention") {
        const auto s = args["shape"].as<std::vector<size_t>>();
        if (s.size() != 4) throw Error("[bench_train] --shape takes B,H,S,d for attention");
        print_result(bench_attention(s[0], s[1], s[2], s[3], args["path"].as<std::string>(), variant, timing), threads);
    } else if (workload == "train") {
        const Activation activation = activation_choices().parse(args["activation"].as<std::string>());
        Result result = bench_train_step(model_size(args["size"].as<std::string>()), timing, device == "cuda", activation);
        result.device = device;
        print_result(result, threads);
    } else {
        throw Error("[bench_train] --workload must be mha, attention or train, got \"" + workload + "\"");
    }
    probe("end");
    return 0;
}

}  // namespace
}  // namespace attnlab

int main(int argc, char** argv) {
    attnlab::keep_freed_memory();  // as the attnlab CLI does
    try {
        return attnlab::run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "bench_train: " << e.what() << std::endl;
        return 2;
    }
}
