// The toy tasks: each sequence has the documented structure, padding is on the
// right and never counts, the loss mask marks exactly the documented positions,
// and the same seed and stream give the same batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/tasks.h"

namespace attnlab {
namespace {

TaskConfig config(const std::string& name, size_t vocab = 16, size_t min_len = 2, size_t max_len = 5) {
    TaskConfig c;
    c.name = name;
    c.vocab = vocab;
    c.min_len = min_len;
    c.max_len = max_len;
    c.queries = 3;
    return c;
}

// Row b of a (B, T) tensor, up to its length.
std::vector<int32_t> row(const Indices& x, size_t b, size_t length) {
    const size_t T = x.shape[1];
    return std::vector<int32_t>(x.values.begin() + static_cast<std::ptrdiff_t>(b * T),
                                x.values.begin() + static_cast<std::ptrdiff_t>(b * T + length));
}

std::vector<uint8_t> mask_row(const Mask& m, size_t b, size_t length) {
    const size_t T = m.shape[1];
    return std::vector<uint8_t>(m.values.begin() + static_cast<std::ptrdiff_t>(b * T),
                                m.values.begin() + static_cast<std::ptrdiff_t>(b * T + length));
}

// Common to decoder-only tasks: targets are inputs shifted by one, padding is right and masked.
void expect_next_token_layout(const Batch& batch) {
    const size_t B = batch.inputs.shape[0], T = batch.inputs.shape[1];
    for (size_t b = 0; b < B; ++b) {
        const size_t L = batch.lengths[b];
        ASSERT_LE(L, T);
        for (size_t t = 0; t + 1 < L; ++t) EXPECT_EQ(batch.targets.values[b * T + t], batch.inputs.values[b * T + t + 1]);
        for (size_t t = L; t < T; ++t) {
            EXPECT_EQ(batch.inputs.values[b * T + t], kPad);
            EXPECT_EQ(batch.loss_mask.values[b * T + t], 0) << "padding counts at row " << b << " position " << t;
        }
    }
}

TEST(Tasks, CopyReverseSortStructure) {
    for (const std::string name : {"copy", "reverse", "sort"}) {
        TaskGenerator gen(config(name), 1, 0);
        Batch batch = gen.next(16);
        expect_next_token_layout(batch);
        for (size_t b = 0; b < 16; ++b) {
            const size_t L = batch.lengths[b];  // inputs: x SEP y[0..n-2], L = 2n
            ASSERT_EQ(L % 2, 0u);
            const size_t n = L / 2;
            std::vector<int32_t> seq = row(batch.inputs, b, L);
            seq.push_back(batch.targets.values[b * batch.inputs.shape[1] + L - 1]);  // full x SEP y
            std::vector<int32_t> x(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(n));
            std::vector<int32_t> y(seq.begin() + static_cast<std::ptrdiff_t>(n + 1), seq.end());
            EXPECT_EQ(seq[n], kSep);
            std::vector<int32_t> want = x;
            if (name == "reverse") std::reverse(want.begin(), want.end());
            if (name == "sort") std::sort(want.begin(), want.end());
            EXPECT_EQ(y, want) << name;
            // counted: the targets that are y, i.e. target positions n .. 2n-1
            std::vector<uint8_t> counts = mask_row(batch.loss_mask, b, L);
            for (size_t t = 0; t < L; ++t) EXPECT_EQ(counts[t], t >= n ? 1 : 0) << name << " position " << t;
            for (int32_t token : x) EXPECT_GE(token, kFirstContent);
        }
    }
}

TEST(Tasks, RecallAnswersAreTheQueriedKeysValues) {
    TaskGenerator gen(config("recall", 24, 2, 5), 3, 0);
    Batch batch = gen.next(16);
    expect_next_token_layout(batch);
    const size_t T = batch.inputs.shape[1];
    for (size_t b = 0; b < 16; ++b) {
        const size_t L = batch.lengths[b];
        std::vector<int32_t> in = row(batch.inputs, b, L);
        const auto sep = static_cast<size_t>(std::find(in.begin(), in.end(), kSep) - in.begin());
        ASSERT_EQ(sep % 2, 0u);
        std::map<int32_t, int32_t> value_of;
        for (size_t i = 0; i < sep; i += 2) {
            EXPECT_EQ(value_of.count(in[i]), 0u) << "keys must be distinct";
            value_of[in[i]] = in[i + 1];
        }
        size_t counted = 0;
        for (size_t t = 0; t < L; ++t) {
            if (!batch.loss_mask.values[b * T + t]) continue;
            ++counted;
            ASSERT_GT(t, sep);
            ASSERT_EQ(value_of.count(in[t]), 1u) << "a counted position must follow a queried key";
            EXPECT_EQ(batch.targets.values[b * T + t], value_of[in[t]]);
        }
        EXPECT_EQ(counted, 3u);  // one per query
    }
}

TEST(Tasks, InductionCountsTheRepeatAfterItsFirstToken) {
    TaskGenerator gen(config("induction"), 4, 0);
    Batch batch = gen.next(8);
    expect_next_token_layout(batch);
    const size_t T = batch.inputs.shape[1];
    for (size_t b = 0; b < 8; ++b) {
        const size_t L = batch.lengths[b];  // 2n - 1
        const size_t n = (L + 1) / 2;
        std::vector<int32_t> in = row(batch.inputs, b, L);
        for (size_t t = n; t < L; ++t) EXPECT_EQ(in[t], in[t - n]);
        for (size_t t = 0; t < L; ++t) EXPECT_EQ(batch.loss_mask.values[b * T + t], t >= n ? 1 : 0);
    }
}

TEST(Tasks, TranslateIsMappedReversedSourceBehindBos) {
    TaskGenerator gen(config("translate"), 5, 0);
    ASSERT_TRUE(gen.encoder_decoder());
    Batch batch = gen.next(8);
    const size_t T = batch.inputs.shape[1], S = batch.src.shape[1];
    for (size_t b = 0; b < 8; ++b) {
        const size_t n = batch.src_lengths[b];
        ASSERT_EQ(batch.lengths[b], n + 1);
        EXPECT_EQ(batch.inputs.values[b * T], kBos);
        for (size_t t = 0; t < n; ++t)
            EXPECT_EQ(batch.targets.values[b * T + t], gen.translate_token(batch.src.values[b * S + n - 1 - t]));
        EXPECT_EQ(batch.targets.values[b * T + n], kSep);
        for (size_t t = 1; t <= n; ++t) EXPECT_EQ(batch.inputs.values[b * T + t], batch.targets.values[b * T + t - 1]);
        for (size_t t = 0; t < T; ++t) EXPECT_EQ(batch.loss_mask.values[b * T + t], t <= n ? 1 : 0);
        for (size_t s = n; s < S; ++s) EXPECT_EQ(batch.src.values[b * S + s], kPad);
    }
    // the mapping is a permutation of the content tokens
    std::vector<int32_t> image;
    for (int32_t t = kFirstContent; t < 16; ++t) image.push_back(gen.translate_token(t));
    std::sort(image.begin(), image.end());
    for (size_t i = 0; i < image.size(); ++i) EXPECT_EQ(image[i], kFirstContent + static_cast<int32_t>(i));
}

TEST(Tasks, SameSeedSameBatchesAndEvalStreamDiffers) {
    TaskGenerator a(config("copy"), 7, 0), b(config("copy"), 7, 0), eval(config("copy"), 7, 1);
    Batch x = a.next(8), y = b.next(8), z = eval.next(8);
    EXPECT_EQ(x.inputs.values, y.inputs.values);
    EXPECT_EQ(x.loss_mask.values, y.loss_mask.values);
    EXPECT_NE(x.inputs.values, z.inputs.values);
}

TEST(Tasks, LengthsVaryAndStayWithinTheTable) {
    TaskGenerator gen(config("recall", 24, 2, 5), 9, 0);
    Batch batch = gen.next(64);
    const auto [lo, hi] = std::minmax_element(batch.lengths.begin(), batch.lengths.end());
    EXPECT_LT(*lo, *hi);
    EXPECT_LE(*hi, gen.max_sequence_length());
    EXPECT_EQ(gen.max_sequence_length(), 2u * 5 + 2 * 3);
}

TEST(Tasks, BadConfigsThrowNamingTheProblem) {
    auto message = [](const TaskConfig& c) {
        try {
            TaskGenerator g(c, 0, 0);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message(config("bogus")).rfind("[task] unknown task \"bogus\"", 0), 0u);
    EXPECT_NE(message(config("copy", 4)).find("vocab 4"), std::string::npos);
    EXPECT_NE(message(config("copy", 16, 6, 3)).find("min_len <= max_len"), std::string::npos);
    EXPECT_NE(message(config("recall", 10, 2, 5)).find("distinct keys"), std::string::npos);
}

// task.pack = N: each row is whole examples, each led by <BOS>, in at most N input
// positions; the unpacked examples of the same seed, in order, with the example
// that did not fit dropped; each example's counted positions and no others count
// (not a <BOS>, nor the token before it).
TEST(Tasks, PackedRowsHoldWholeExamplesLedByBos) {
    for (const std::string& name : {"copy", "recall", "induction"}) {
        SCOPED_TRACE(name);
        TaskConfig packed = config(name);
        packed.pack = 40;
        TaskGenerator p(packed, 7, 0), one(config(name), 7, 0);
        EXPECT_EQ(p.max_sequence_length(), 40u);
        const Batch batch = p.next(3);
        const size_t T = batch.inputs.shape[1];
        EXPECT_LE(T, 40u);
        for (size_t b = 0; b < 3; ++b) {
            const size_t L = batch.lengths[b];
            std::vector<int32_t> seq = row(batch.inputs, b, L);
            seq.push_back(batch.targets.values[b * T + L - 1]);
            const std::vector<uint8_t> counts(batch.loss_mask.values.begin() + static_cast<std::ptrdiff_t>(b * T),
                                              batch.loss_mask.values.begin() + static_cast<std::ptrdiff_t>(b * T + L));
            ASSERT_EQ(seq[0], kBos);
            size_t at = 0, examples = 0;
            while (at < seq.size()) {  // walk the row example by example, against the unpacked stream
                const Batch single = one.next(1);
                const size_t n = single.lengths[0];
                std::vector<int32_t> ex = row(single.inputs, 0, n);
                ex.push_back(single.targets.values[n - 1]);
                if (at + 1 + ex.size() > seq.size()) break;  // the dropped example ends the row
                ASSERT_EQ(seq[at], kBos) << "example " << examples;
                EXPECT_EQ(std::vector<int32_t>(seq.begin() + static_cast<std::ptrdiff_t>(at + 1),
                                               seq.begin() + static_cast<std::ptrdiff_t>(at + 1 + ex.size())), ex);
                EXPECT_EQ(counts[at], 0) << "<BOS> predicting the first token";
                if (at > 0) EXPECT_EQ(counts[at - 1], 0) << "the token before <BOS>";
                for (size_t t = 0; t + 1 < ex.size(); ++t) EXPECT_EQ(counts[at + 1 + t], single.loss_mask.values[t]) << t;
                at += 1 + ex.size();
                ++examples;
            }
            EXPECT_EQ(at, seq.size()) << "the row is whole examples";
            if (at == seq.size()) (void)one.next(1);  // the example that did not fit, dropped
            EXPECT_GE(examples, 2u);
            for (size_t t = L; t < T; ++t) EXPECT_EQ(batch.loss_mask.values[b * T + t], 0) << "padding counts";
        }
    }
    TaskConfig translate = config("translate");
    translate.pack = 40;
    EXPECT_THROW(TaskGenerator(translate, 0, 0), Error);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// mqar (Zoology's multi-query associative recall): n distinct pairs, each key
// asked once at an even offset after them, the target there its value; the
// query slots cluster near the pairs (weight (g+1)^(a-1)).
TaskConfig small_mqar() {  // 6 pairs from 40 content tokens, 48 positions
    TaskConfig c;
    c.name = "mqar";
    c.vocab = 3 + 40;
    c.max_len = 6;  // pairs
    c.seq_len = 48;
    return c;
}

TEST(Tasks, MqarStructure) {
    const TaskConfig c = small_mqar();
    TaskGenerator gen(c, 5, 0);
    EXPECT_EQ(gen.max_sequence_length(), 48u);
    const Batch batch = gen.next(200);
    ASSERT_EQ(batch.inputs.shape, (Shape{200, 48}));
    std::vector<size_t> slot_counts(18, 0);  // (48 - 12) / 2 query slots
    for (size_t b = 0; b < 200; ++b) {
        const int32_t* in = &batch.inputs.values[b * 48];
        const int32_t* target = &batch.targets.values[b * 48];
        const uint8_t* counts = &batch.loss_mask.values[b * 48];
        EXPECT_EQ(batch.lengths[b], 48u);
        std::map<int32_t, int32_t> pairs;
        for (size_t i = 0; i < 6; ++i) {
            EXPECT_GE(in[2 * i], 3);
            EXPECT_LT(in[2 * i], 3 + 20);           // keys: the first half of the content tokens
            EXPECT_GE(in[2 * i + 1], 3 + 20);       // values: the second half
            EXPECT_TRUE(pairs.emplace(in[2 * i], in[2 * i + 1]).second) << "a repeated key";
        }
        std::set<int32_t> values;
        for (const auto& [k, v] : pairs) values.insert(v);
        EXPECT_EQ(values.size(), 6u) << "values are distinct";
        std::set<int32_t> asked;
        for (size_t t = 0; t < 48; ++t) {
            if (!counts[t]) continue;
            ASSERT_GE(t, 12u);
            ASSERT_EQ((t - 12) % 2, 0u) << "a query at an odd offset";
            ASSERT_TRUE(pairs.count(in[t])) << "a query that is no key";
            EXPECT_EQ(target[t], pairs[in[t]]);
            EXPECT_TRUE(asked.insert(in[t]).second) << "a key asked twice";
            ++slot_counts[(t - 12) / 2];
        }
        EXPECT_EQ(asked.size(), 6u);
    }
    // 1200 queries over 18 slots: the first slots are asked more often than the last
    EXPECT_GT(slot_counts[0], slot_counts[17]);
    EXPECT_GT(slot_counts[0] + slot_counts[1] + slot_counts[2], slot_counts[15] + slot_counts[16] + slot_counts[17]);
}

// task.fill = "pad" (Zoology's random_non_queries = False): every position
// after the pairs that is neither a query nor its value holds <PAD>.
TEST(Tasks, MqarPadFill) {
    TaskConfig c = small_mqar();
    c.fill = "pad";
    TaskGenerator padded(c, 5, 0);
    const Batch b = padded.next(50);
    ASSERT_EQ(b.inputs.shape, (Shape{50, 48}));
    size_t pads = 0;
    for (size_t r = 0; r < 50; ++r) {
        for (size_t t = 0; t < 48; ++t) {
            const size_t i = r * 48 + t;
            const bool query = b.loss_mask.values[i] != 0, value = t > 0 && b.loss_mask.values[i - 1] != 0;
            if (t < 12) {
                EXPECT_NE(b.inputs.values[i], kPad) << "the pairs";
            } else if (query || value) {
                EXPECT_NE(b.inputs.values[i], kPad) << "row " << r << " position " << t;
            } else {
                EXPECT_EQ(b.inputs.values[i], kPad) << "row " << r << " position " << t;
                ++pads;
            }
            if (query) EXPECT_EQ(b.targets.values[i], b.inputs.values[i + 1]) << "the value follows its query";
        }
    }
    EXPECT_EQ(pads, 50u * (48 - 12 - 2 * 6));
}

TEST(Tasks, MqarRefusesWhatCannotFit) {
    TaskConfig c = small_mqar();
    c.vocab = 3 + 10;
    EXPECT_THROW(TaskGenerator(c, 0, 0), Error);  // 6 keys from 5
    c.vocab = 3 + 40;
    c.seq_len = 20;
    EXPECT_THROW(TaskGenerator(c, 0, 0), Error);  // 4 x 6 > 20
    c.seq_len = 25;
    EXPECT_THROW(TaskGenerator(c, 0, 0), Error);  // odd
}

}  // namespace
}  // namespace attnlab
