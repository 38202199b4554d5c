// The modular-arithmetic task and finite training sets (task.train_size): each
// example's answer is the documented arithmetic, a training set holds N distinct
// examples and every epoch visits each once, held-out batches never hold a
// training example, a resumed set continues exactly where it was, and the
// training set written as a token file reads back as the same sequences.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "data/finite_task.h"
#include "data/token_file.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

TaskConfig modular(size_t p, const std::string& op) {
    TaskConfig c;
    c.name = "modular";
    c.modulus = p;
    c.op = op;
    c.vocab = p + kFirstContent;
    return c;
}

// The (a, b, c) of each row of a modular batch, checking its layout on the way.
std::vector<std::array<int64_t, 3>> triples(const Batch& batch) {
    std::vector<std::array<int64_t, 3>> out;
    const size_t B = batch.inputs.shape[0];
    EXPECT_EQ(batch.inputs.shape[1], 3u);
    for (size_t b = 0; b < B; ++b) {
        const int32_t* in = &batch.inputs.values[b * 3];
        const int32_t* target = &batch.targets.values[b * 3];
        EXPECT_EQ(in[2], kSep);  // "="
        EXPECT_EQ(target[0], in[1]);
        EXPECT_EQ(target[1], kSep);
        EXPECT_EQ(batch.lengths[b], 3u);
        EXPECT_EQ(batch.loss_mask.values[b * 3 + 0], 0);
        EXPECT_EQ(batch.loss_mask.values[b * 3 + 1], 0);
        EXPECT_EQ(batch.loss_mask.values[b * 3 + 2], 1);  // only the answer counts
        out.push_back({in[0] - kFirstContent, in[1] - kFirstContent, target[2] - kFirstContent});
    }
    return out;
}

TEST(Modular, AnswersAreTheArithmeticModP) {
    const int64_t p = 13;
    for (const std::string op : {"+", "-", "*", "/"}) {
        TaskGenerator gen(modular(p, op), 3, 0);
        for (const auto& [a, b, c] : triples(gen.next(400))) {
            ASSERT_TRUE(a >= 0 && a < p && b >= 0 && b < p && c >= 0 && c < p) << op;
            if (op == "+") EXPECT_EQ(c, (a + b) % p);
            if (op == "-") EXPECT_EQ((c + b) % p, a);
            if (op == "*") EXPECT_EQ(c, a * b % p);
            if (op == "/") {
                ASSERT_NE(b, 0);  // no division by zero
                EXPECT_EQ(c * b % p, a) << a << " / " << b;
            }
        }
    }
}

TEST(Modular, RefusesWhatItCannotHold) {
    auto message = [](const TaskConfig& c) {
        try {
            TaskGenerator gen(c, 0, 0);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    TaskConfig small = modular(23, "+");
    small.vocab = 25;
    EXPECT_NE(message(small).find("needs at least 26"), std::string::npos) << message(small);
    EXPECT_NE(message(modular(12, "/")).find("prime modulus"), std::string::npos);
    EXPECT_NE(message(modular(7, "^")).find("unknown op"), std::string::npos);
}

TEST(TrainingSet, HoldsDistinctExamplesAndVisitsEachOncePerEpoch) {
    const size_t N = 50;
    TrainingSet set(modular(11, "+"), N, 5);
    ASSERT_EQ(set.size(), N);
    std::set<std::vector<int32_t>> distinct;
    for (const Example& e : set.examples()) distinct.insert(example_key(e));
    EXPECT_EQ(distinct.size(), N);
    // batches of 7 cross epoch ends: each run of N examples from an epoch start is the whole set once
    std::vector<std::array<int64_t, 3>> seen;
    for (int i = 0; i < 3 * 50 / 7 + 1; ++i)
        for (const auto& t : triples(set.next(7))) seen.push_back(t);
    ASSERT_GE(seen.size(), 3 * N);
    for (size_t epoch = 0; epoch < 3; ++epoch) {
        const std::set<std::array<int64_t, 3>> in_epoch(seen.begin() + static_cast<std::ptrdiff_t>(epoch * N),
                                                        seen.begin() + static_cast<std::ptrdiff_t>((epoch + 1) * N));
        EXPECT_EQ(in_epoch.size(), N) << "epoch " << epoch;
    }
    // reshuffled: the epochs' orders differ
    EXPECT_FALSE(std::equal(seen.begin(), seen.begin() + N, seen.begin() + N));
}

TEST(TrainingSet, HeldOutNeverHoldsATrainingExample) {
    const TaskConfig c = modular(11, "*");
    TrainingSet set(c, 100, 9);  // of 121 pairs: 21 are held out
    HeldOutTask held_out(c, 9, 1, set.keys());
    std::set<std::array<int64_t, 3>> train, test;
    for (const auto& t : triples(set.next(100))) train.insert(t);
    for (const auto& t : triples(held_out.next(500))) test.insert(t);
    EXPECT_EQ(train.size(), 100u);
    EXPECT_EQ(test.size(), 21u);  // 500 draws find every held-out pair
    for (const auto& t : test) EXPECT_FALSE(train.count(t)) << t[0] << " * " << t[1];
}

TEST(TrainingSet, SameSeedSameSetOtherSeedAnother) {
    const TaskConfig c = modular(31, "+");
    TrainingSet a(c, 40, 1), b(c, 40, 1), other(c, 40, 2);
    EXPECT_EQ(triples(a.next(40)), triples(b.next(40)));
    EXPECT_NE(*a.keys(), *other.keys());
}

TEST(TrainingSet, ResumesMidEpochExactly) {
    const TaskConfig c = modular(17, "-");
    TrainingSet run(c, 60, 4);
    for (int i = 0; i < 13; ++i) run.next(9);  // into the second epoch
    const Rng::State rng = run.rng().state();
    const std::vector<int64_t> at = run.position();
    std::vector<Batch> expected;
    for (int i = 0; i < 20; ++i) expected.push_back(run.next(9));  // across the next epoch ends

    TrainingSet resumed(c, 60, 4);  // a new process: the set drawn again, then the saved state
    resumed.rng().set_state(rng);
    resumed.set_position(at);
    for (const Batch& batch : expected) EXPECT_EQ(triples(resumed.next(9)), triples(batch));
    EXPECT_THROW(resumed.set_position({61}), Error);
    EXPECT_THROW(resumed.set_position({}), Error);
}

TEST(TrainingSet, RefusesMoreExamplesThanTheTaskHas) {
    try {
        TrainingSet set(modular(5, "+"), 26, 0);  // 25 pairs
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("only about 25 distinct examples"), std::string::npos) << e.what();
    }
    TrainingSet full(modular(5, "+"), 25, 0);  // all of them is fine for training
    HeldOutTask none(modular(5, "+"), 0, 1, full.keys());
    EXPECT_THROW(none.next(1), Error);  // but nothing is left to evaluate on
}

TEST(TrainingSet, WrittenAsATokenFileReadsBackAsTheSameSequences) {
    test::TempDir dir("finite_task");
    const std::string path = (dir.path() / "train_set.h5").string();
    TrainingSet set(modular(7, "+"), 20, 3);
    write_training_set(path, set);
    const TokenFile file = read_token_file(path, 7 + kFirstContent);
    ASSERT_EQ(file.tokens.shape, (Shape{20, 4}));
    for (size_t n = 0; n < 20; ++n) {
        const Example& e = set.examples()[n];
        EXPECT_EQ(file.lengths[n], 4u);
        for (size_t t = 0; t < 4; ++t) {
            EXPECT_EQ(file.tokens.values[n * 4 + t], e.seq[t]);
            EXPECT_EQ(file.loss_mask.values[n * 4 + t], t == 3 ? 1 : 0);  // the answer's position
        }
    }
}

}  // namespace
}  // namespace attnlab
