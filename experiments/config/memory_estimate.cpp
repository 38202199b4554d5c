#include "experiments/config/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace attnlab {

namespace {

constexpr double kFloat = 4;  // bytes of a float32

std::string gib(double bytes) {
    char text[64];
    std::snprintf(text, sizeof text, bytes < 1e3 * (1 << 30) ? "%.1f GiB" : "%.3g GiB", bytes / (1 << 30));
    return text;
}

}  // namespace

MemoryEstimate estimate_training_memory(const Config& c, double longest) {
    const Config::Model& m = c.model;
    const double D = static_cast<double>(m.width), L = static_cast<double>(m.layers), H = static_cast<double>(m.heads);
    const double Hkv = m.kv_heads > 0 ? static_cast<double>(m.kv_heads) : H;
    const double dh = m.head_width > 0 ? static_cast<double>(m.head_width) : D / H;
    const double F = static_cast<double>(m.ffn), V = static_cast<double>(c.task.vocab);
    const double T = m.max_len > 0 ? std::max(static_cast<double>(m.max_len), longest) : longest;
    const double B = static_cast<double>(batch_size(c));
    const bool enc_dec = m.kind == "encoder-decoder";

    // Parameters: q and out projections D x H dh, k and v D x Hkv dh (with biases),
    // the FFN's two D x F layers, two or three LayerNorms per block.
    const double attention = 2 * D * H * dh + 2 * D * Hkv * dh + 2 * H * dh + 2 * Hkv * dh;
    const double ffn = F > 0 ? 2 * D * F + F + D : 0;
    const double block = attention + ffn + 6 * D;
    const double blocks = enc_dec ? L * block + L * (block + attention + 2 * D) : L * block;
    const double embeddings = (enc_dec ? 2 : 1) * (V * D + T * D) + V * D + V;  // tokens, positions, the head
    const double params = blocks + embeddings;
    // weights + gradients, and Adam's two moments (SGD: one momentum buffer)
    const double per_param = c.optim.name == "sgd" ? 3 : 4;

    // Activations per block and step: a few (B, T, D) tensors per sublayer, the
    // (B, H, T, dh) projections, the FFN hidden, and the (B, H, T, T) scores and
    // weights of the dense path; the logits and their softmax over the vocabulary.
    const double tokens = B * T;
    const double per_block = tokens * (12 * D + 6 * H * dh + 3 * F) + 2 * B * H * T * T;
    const double stacks = enc_dec ? 2.5 : 1;  // the decoder's cross-attention adds about half a stack
    const double activations = stacks * L * per_block + 3 * tokens * V;

    MemoryEstimate e;
    e.parameters = kFloat * per_param * params;
    e.activations = kFloat * activations;
    e.data = static_cast<double>(c.train.eval_batches) * tokens * 4 * sizeof(int32_t);  // tokens, targets, mask, source
    if (c.task.name == "text") {  // the file's characters as int32 tokens, held once (at most one per byte)
        std::error_code ec;
        const uintmax_t bytes = std::filesystem::file_size(c.task.path, ec);
        if (!ec) e.data += static_cast<double>(bytes) * sizeof(int32_t);
    }
    return e;
}

double machine_memory_bytes() {
    static const double bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    return bytes;
}

void check_table_fits(const std::string& option, const std::string& table, double bytes) {
    const double have = machine_memory_bytes();
    if (bytes <= have) return;
    char sizes[96];
    std::snprintf(sizes, sizeof sizes, " need %.1f GB, this machine has %.1f GB", bytes / 1e9, have / 1e9);
    throw Error(option + ": " + table + sizes);
}

void check_table_fits(const std::string& option, const TableSize& size) { check_table_fits(option, size.table, size.bytes); }

void check_fits_in_memory(const Config& config, double longest, const std::string& length_key) {
    const MemoryEstimate need = estimate_training_memory(config, longest);
    const double have = machine_memory_bytes();
    if (need.total() <= have) return;

    // The key to name: the size whose default value would save the most.
    Config defaults;
    struct Size {
        const char* key;
        std::function<int64_t&(Config&)> get;
    };
    const std::vector<Size> sizes = {
        {"model.width", [](Config& c) -> int64_t& { return c.model.width; }},
        {"model.layers", [](Config& c) -> int64_t& { return c.model.layers; }},
        {"model.heads", [](Config& c) -> int64_t& { return c.model.heads; }},
        {"model.kv_heads", [](Config& c) -> int64_t& { return c.model.kv_heads; }},
        {"model.head_width", [](Config& c) -> int64_t& { return c.model.head_width; }},
        {"model.ffn", [](Config& c) -> int64_t& { return c.model.ffn; }},
        {"model.max_len", [](Config& c) -> int64_t& { return c.model.max_len; }},
        {"task.vocab", [](Config& c) -> int64_t& { return c.task.vocab; }},
        {"train.batch", [](Config& c) -> int64_t& { return c.train.batch; }},
        {"train.eval_batches", [](Config& c) -> int64_t& { return c.train.eval_batches; }},
    };
    const Size* worst = nullptr;  // none: the sequence length, which no size key sets alone
    double least = need.total();
    for (const Size& size : sizes) {
        Config smaller = config;
        size.get(smaller) = size.get(defaults);
        const double total = estimate_training_memory(smaller, longest).total();
        if (total < least) least = total, worst = &size;
    }
    Config copy = config;
    const std::string key = worst ? worst->key : length_key;
    const std::string value = worst ? (worst->get(copy) == 0 && key == "train.batch" ? "\"all\"" : std::to_string(worst->get(copy)))
                              : length_key == "train.eval_lengths"
                                  ? "[" + std::to_string(config.train.eval_lengths[0]) + ", " + std::to_string(config.train.eval_lengths[1]) + "]"
                                  : std::to_string(config.task.max_len);
    throw ConfigError(key, key + " = " + value +
                                      ": training this config would need about " + gib(need.total()) + " (parameters and optimiser state " +
                                      gib(need.parameters) + ", activations of one step " + gib(need.activations) +
                                      ", held-out data " + gib(need.data) + "), and this machine has " + gib(have));
}

}  // namespace attnlab
