#include "data/tasks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/variant.h"

namespace attnlab {

// The attention variants' token rules (prefix-LM, packed documents) read these tokens.
static_assert(AttentionVariant{}.sep_token == kSep && AttentionVariant{}.bos_token == kBos);

namespace {

bool is_prime(size_t n) {
    if (n < 2) return false;
    for (size_t d = 2; d * d <= n; ++d)
        if (n % d == 0) return false;
    return true;
}

// b^e mod p, for the inverse b^(p-2) of Fermat's little theorem (p prime, p < 2^24).
uint64_t power_mod(uint64_t b, uint64_t e, uint64_t p) {
    uint64_t result = 1;
    for (b %= p; e > 0; e >>= 1, b = b * b % p)
        if (e & 1) result = result * b % p;
    return result;
}

void check_modular(const TaskConfig& c) {
    static const std::vector<std::string> ops = {"+", "-", "*", "/"};
    if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) fail("task", "modular: unknown op \"" + c.op + "\" (+, -, *, /)");
    if (c.modulus < 2) fail("task", "modular: the modulus must be at least 2, got " + std::to_string(c.modulus));
    if (c.vocab < c.modulus + kFirstContent)
        fail("task", "modular: vocab " + std::to_string(c.vocab) + " cannot hold the numbers 0.." + std::to_string(c.modulus - 1) +
                         " and the 3 special tokens (needs at least " + std::to_string(c.modulus + kFirstContent) + ")");
    if (c.op == "/" && !is_prime(c.modulus))
        fail("task", "modular: division needs a prime modulus (every b != 0 invertible), got " + std::to_string(c.modulus));
}

void check_config(const TaskConfig& c) {
    static const std::vector<std::string> names = {"copy", "reverse", "sort", "recall", "induction", "translate", "modular", "mqar"};
    if (std::find(names.begin(), names.end(), c.name) == names.end())
        fail("task", "unknown task \"" + c.name + "\" (copy, reverse, sort, recall, induction, translate, modular, mqar)");
    if (c.vocab < kFirstContent + 2) fail("task", "vocab " + std::to_string(c.vocab) + " leaves fewer than 2 content tokens");
    if (c.name == "modular") return check_modular(c);
    if (c.name == "mqar") {
        const size_t content = c.vocab - kFirstContent, n = c.max_len;
        if (n > content / 2 || n > content - content / 2)
            fail("task", "mqar needs distinct keys and values: max_len " + std::to_string(n) + " pairs but only " +
                             std::to_string(content / 2) + " key tokens in vocab " + std::to_string(c.vocab));
        if (c.seq_len % 2 != 0 || c.seq_len < 4 * n)
            fail("task", "mqar: seq_len " + std::to_string(c.seq_len) + " must be even and at least 4 x max_len = " +
                             std::to_string(4 * n) + " (the pairs, and a query slot for each)");
    }
    if (c.min_len < 1 || c.min_len > c.max_len)
        fail("task", "lengths must satisfy 1 <= min_len <= max_len, got " + std::to_string(c.min_len) + " and " + std::to_string(c.max_len));
    if (c.name == "recall") {
        const size_t content = c.vocab - kFirstContent;
        if (c.max_len > content / 2)
            fail("task", "recall needs distinct keys: max_len " + std::to_string(c.max_len) + " pairs but only " +
                             std::to_string(content / 2) + " key tokens in vocab " + std::to_string(c.vocab));
        if (c.queries < 1) fail("task", "recall needs at least one query");
    }
    if (c.pack > 0 && c.name == "translate") fail("task", "translate (encoder-decoder) does not pack");
}

}  // namespace

TaskGenerator::TaskGenerator(const TaskConfig& config, uint64_t seed, uint64_t stream) : config_(config), rng_(seed, stream) {
    check_config(config_);
    // translate's mapping: a permutation drawn from a generator of its own, so it is
    // the same for train and eval streams and every seed of a given vocab
    mapping_.resize(config_.vocab - kFirstContent);
    std::iota(mapping_.begin(), mapping_.end(), kFirstContent);
    Rng shuffle(0x7a11, config_.vocab);
    for (size_t i = mapping_.size(); i > 1; --i) std::swap(mapping_[i - 1], mapping_[static_cast<size_t>(shuffle.integer(0, static_cast<int64_t>(i)))]);
}

int32_t TaskGenerator::translate_token(int32_t token) const { return mapping_[static_cast<size_t>(token - kFirstContent)]; }

size_t TaskGenerator::max_sequence_length() const {
    if (config_.pack > 0) return packed_row();
    const size_t n = config_.max_len;
    if (config_.name == "recall") return 2 * n + 1 + 2 * config_.queries - 1;
    if (config_.name == "induction") return 2 * n - 1;
    if (config_.name == "translate") return n + 1;
    if (config_.name == "modular") return 3;  // a b SEP
    if (config_.name == "mqar") return config_.seq_len;
    return 2 * n;  // x SEP y minus the last token
}

TaskGenerator::Example TaskGenerator::make_example() {
    const TaskConfig& c = config_;
    if (c.name == "modular") {
        const auto p = static_cast<int64_t>(c.modulus);
        const int64_t a = rng_.integer(0, p), b = rng_.integer(c.op == "/" ? 1 : 0, p);
        int64_t answer = 0;
        if (c.op == "+") answer = (a + b) % p;
        if (c.op == "-") answer = (a - b + p) % p;
        if (c.op == "*") answer = a * b % p;
        if (c.op == "/") answer = a * static_cast<int64_t>(power_mod(static_cast<uint64_t>(b), static_cast<uint64_t>(p - 2), static_cast<uint64_t>(p))) % p;
        auto number = [](int64_t n) { return static_cast<int32_t>(kFirstContent + n); };
        return Example{{number(a), number(b), kSep, number(answer)}, {0, 0, 1}, {}};
    }
    if (c.name == "mqar") return make_mqar_example();
    const auto n = static_cast<size_t>(rng_.integer(static_cast<int64_t>(c.min_len), static_cast<int64_t>(c.max_len) + 1));
    auto token = [&] { return static_cast<int32_t>(rng_.integer(kFirstContent, static_cast<int64_t>(c.vocab))); };
    Example ex;
    std::vector<int32_t>& seq = ex.seq;
    size_t counted_from = 0;  // first index of seq whose prediction counts
    if (c.name == "copy" || c.name == "reverse" || c.name == "sort") {
        std::vector<int32_t> x(n);
        for (auto& t : x) t = token();
        std::vector<int32_t> y = x;
        if (c.name == "reverse") std::reverse(y.begin(), y.end());
        if (c.name == "sort") std::sort(y.begin(), y.end());
        seq = x;
        seq.push_back(kSep);
        seq.insert(seq.end(), y.begin(), y.end());
        counted_from = n + 1;
        ex.counts.assign(seq.size() - 1, 0);
        for (size_t i = counted_from; i < seq.size(); ++i) ex.counts[i - 1] = 1;
    } else if (c.name == "recall") {
        // keys from the first half of the content tokens, values from the second
        const int64_t half = static_cast<int64_t>(c.vocab - kFirstContent) / 2;
        std::vector<int32_t> keys(static_cast<size_t>(half));
        std::iota(keys.begin(), keys.end(), kFirstContent);
        for (size_t i = 0; i < n; ++i) std::swap(keys[i], keys[static_cast<size_t>(rng_.integer(static_cast<int64_t>(i), half))]);
        std::vector<int32_t> values(n);
        for (auto& v : values) v = static_cast<int32_t>(rng_.integer(kFirstContent + half, static_cast<int64_t>(c.vocab)));
        for (size_t i = 0; i < n; ++i) {
            seq.push_back(keys[i]);
            seq.push_back(values[i]);
        }
        seq.push_back(kSep);
        ex.counts.assign(seq.size() + 2 * c.queries - 1, 0);
        for (size_t q = 0; q < c.queries; ++q) {
            const auto which = static_cast<size_t>(rng_.integer(0, static_cast<int64_t>(n)));
            seq.push_back(keys[which]);
            seq.push_back(values[which]);
            ex.counts[seq.size() - 2] = 1;  // the target position that predicts this value
        }
    } else if (c.name == "induction") {
        std::vector<int32_t> r(n);
        for (auto& t : r) t = token();
        seq = r;
        seq.insert(seq.end(), r.begin(), r.end());
        ex.counts.assign(seq.size() - 1, 0);
        for (size_t i = n + 1; i < seq.size(); ++i) ex.counts[i - 1] = 1;
    } else {  // translate
        ex.src.resize(n);
        for (auto& t : ex.src) t = token();
        for (size_t i = n; i-- > 0;) seq.push_back(translate_token(ex.src[i]));
        seq.push_back(kSep);
        ex.counts.assign(seq.size(), 1);
    }
    return ex;
}

TaskGenerator::Example TaskGenerator::make_mqar_example() {
    const TaskConfig& c = config_;
    const size_t n = c.max_len, S = c.seq_len, half = (c.vocab - kFirstContent) / 2;
    // the first n of a shuffle of [first, first + count): distinct tokens
    auto distinct = [&](int32_t first, size_t count) {
        std::vector<int32_t> pool(count);
        std::iota(pool.begin(), pool.end(), first);
        for (size_t i = 0; i < n; ++i) std::swap(pool[i], pool[static_cast<size_t>(rng_.integer(static_cast<int64_t>(i), static_cast<int64_t>(count)))]);
        return std::vector<int32_t>(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(n));
    };
    const std::vector<int32_t> keys = distinct(kFirstContent, half);
    const std::vector<int32_t> values = distinct(static_cast<int32_t>(kFirstContent + half), c.vocab - kFirstContent - half);
    Example ex;
    for (size_t i = 0; i < n; ++i) ex.seq.insert(ex.seq.end(), {keys[i], values[i]});
    const bool pad = c.fill == "pad";  // else random content tokens
    for (size_t t = 0; t < S - 2 * n + 1; ++t)
        ex.seq.push_back(pad ? kPad : static_cast<int32_t>(rng_.integer(kFirstContent, static_cast<int64_t>(c.vocab))));
    ex.counts.assign(S, 0);
    // the query slots g in [0, space), n of them without replacement, weight (g+1)^(a-1)
    constexpr double a = 0.01;
    const size_t space = (S - 2 * n) / 2;
    std::vector<double> weight(space);
    for (size_t g = 0; g < space; ++g) weight[g] = std::pow(static_cast<double>(g + 1), a - 1.0);
    for (size_t i = 0; i < n; ++i) {
        double total = 0;
        for (double w : weight) total += w;
        double pick = rng_.uniform() * total;
        size_t g = 0;
        while (g + 1 < space && (weight[g] == 0 || pick >= weight[g])) pick -= weight[g++];
        while (weight[g] == 0) --g;  // rounding past the end: the last slot still free
        weight[g] = 0;
        const size_t at = 2 * n + 2 * g;
        ex.seq[at] = keys[i];
        ex.seq[at + 1] = values[i];
        ex.counts[at] = 1;  // the query's position predicts the value
    }
    return ex;
}

size_t TaskGenerator::packed_row() const {
    TaskConfig one = config_;
    one.pack = 0;
    return std::max(config_.pack, TaskGenerator(one, 0, 0).max_sequence_length() + 1);  // + its <BOS>
}

Batch TaskGenerator::next_packed(size_t batch_size) {
    const size_t row = packed_row();
    std::vector<std::vector<int32_t>> seqs(batch_size);  // <BOS> x ... <BOS> x ...
    std::vector<std::vector<uint8_t>> counts(batch_size);  // per input position of seqs[b]
    size_t T = 0;
    for (size_t b = 0; b < batch_size; ++b) {
        std::vector<int32_t>& seq = seqs[b];
        std::vector<uint8_t>& count = counts[b];
        while (true) {
            const Example ex = make_example();
            if (!seq.empty() && seq.size() + ex.seq.size() > row) break;  // its inputs would pass the row: dropped
            if (!seq.empty()) count.push_back(0);  // the last token before it predicts its <BOS>
            seq.push_back(kBos);
            count.push_back(0);  // <BOS> predicts the example's first token
            seq.insert(seq.end(), ex.seq.begin(), ex.seq.end());
            count.insert(count.end(), ex.counts.begin(), ex.counts.end());
        }
        T = std::max(T, seq.size() - 1);
    }
    std::vector<int32_t> inputs(batch_size * T, kPad), targets(batch_size * T, kPad);
    std::vector<uint8_t> loss(batch_size * T, 0);
    Batch batch;
    for (size_t b = 0; b < batch_size; ++b) {
        const size_t L = seqs[b].size() - 1;
        for (size_t t = 0; t < L; ++t) {
            inputs[b * T + t] = seqs[b][t];
            targets[b * T + t] = seqs[b][t + 1];
            loss[b * T + t] = counts[b][t];
        }
        batch.lengths.push_back(L);
    }
    batch.inputs = Indices({batch_size, T}, std::move(inputs));
    batch.targets = Indices({batch_size, T}, std::move(targets));
    batch.loss_mask = Mask({batch_size, T}, std::move(loss));
    return batch;
}

Batch TaskGenerator::next(size_t batch_size) {
    if (config_.pack > 0) return next_packed(batch_size);
    std::vector<Example> examples;
    for (size_t b = 0; b < batch_size; ++b) examples.push_back(make_example());
    return batch_of(examples);
}

Batch TaskGenerator::batch_of(const std::vector<Example>& examples) const {
    const size_t batch_size = examples.size();
    Batch batch;
    const bool enc_dec = encoder_decoder();
    size_t T = 0, S = 0;
    for (const auto& ex : examples) {
        T = std::max(T, enc_dec ? ex.seq.size() : ex.seq.size() - 1);
        S = std::max(S, ex.src.size());
    }
    std::vector<int32_t> inputs(batch_size * T, kPad), targets(batch_size * T, kPad), src(batch_size * S, kPad);
    std::vector<uint8_t> counts(batch_size * T, 0);
    for (size_t b = 0; b < batch_size; ++b) {
        const Example& ex = examples[b];
        if (enc_dec) {
            // decoder input: <BOS> target[0 .. L-2]; targets: target
            for (size_t t = 0; t < ex.seq.size(); ++t) {
                inputs[b * T + t] = t == 0 ? kBos : ex.seq[t - 1];
                targets[b * T + t] = ex.seq[t];
                counts[b * T + t] = ex.counts[t];
            }
            batch.lengths.push_back(ex.seq.size());
            std::copy(ex.src.begin(), ex.src.end(), src.begin() + static_cast<std::ptrdiff_t>(b * S));
            batch.src_lengths.push_back(ex.src.size());
        } else {
            const size_t L = ex.seq.size() - 1;
            for (size_t t = 0; t < L; ++t) {
                inputs[b * T + t] = ex.seq[t];
                targets[b * T + t] = ex.seq[t + 1];
                counts[b * T + t] = ex.counts[t];
            }
            batch.lengths.push_back(L);
        }
    }
    batch.inputs = Indices({batch_size, T}, std::move(inputs));
    batch.targets = Indices({batch_size, T}, std::move(targets));
    batch.loss_mask = Mask({batch_size, T}, std::move(counts));
    if (enc_dec) batch.src = Indices({batch_size, S}, std::move(src));
    return batch;
}

namespace {

template <class Values>
Values rows_of(const Values& all, size_t row_size, size_t begin, size_t end) {
    return Values(all.begin() + static_cast<std::ptrdiff_t>(begin * row_size),
                  all.begin() + static_cast<std::ptrdiff_t>(end * row_size));
}

}  // namespace

Batch batch_rows(const Batch& batch, size_t begin, size_t end) {
    const size_t B = batch.targets.shape[0], T = batch.targets.shape[1];
    if (begin > end || end > B)
        throw Error("[batch_rows] rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a batch of " +
                    std::to_string(B));
    const size_t n = end - begin;
    Batch out;
    out.inputs = Indices({n, batch.inputs.shape[1]}, rows_of(batch.inputs.values, batch.inputs.shape[1], begin, end));
    out.targets = Indices({n, T}, rows_of(batch.targets.values, T, begin, end));
    out.loss_mask = Mask({n, T}, rows_of(batch.loss_mask.values, T, begin, end));
    out.lengths = rows_of(batch.lengths, 1, begin, end);
    if (!batch.src.values.empty()) {
        out.src = Indices({n, batch.src.shape[1]}, rows_of(batch.src.values, batch.src.shape[1], begin, end));
        out.src_lengths = rows_of(batch.src_lengths, 1, begin, end);
    }
    return out;
}

size_t counted_positions(const Batch& batch) {
    size_t n = 0;
    for (uint8_t v : batch.loss_mask.values) n += v != 0;
    return n;
}

Indices counted_rows(const Batch& batch) {
    std::vector<int32_t> rows;
    for (size_t i = 0; i < batch.loss_mask.values.size(); ++i)
        if (batch.loss_mask.values[i] != 0) rows.push_back(static_cast<int32_t>(i));
    const size_t n = rows.size();  // before the move
    return Indices({n}, std::move(rows));
}

Indices counted_targets(const Batch& batch) {
    Indices targets = counted_rows(batch);
    for (int32_t& row : targets.values) row = batch.targets.values[static_cast<size_t>(row)];
    return targets;
}

}  // namespace attnlab
