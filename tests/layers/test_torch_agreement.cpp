// Agreement with PyTorch: MultiHeadAttention against torch.nn.MultiheadAttention
// and against an attention reference written in torch ops (the stand-in for
// F.scaled_dot_product_attention, which torch 1.13 lacks), with the same float32
// weights. Output, per-head weights, and the gradients of sum(out * R) with
// respect to both inputs and every parameter must agree within 1e-5.
//
// The fixtures come from tests/reference/torch_attention_fixtures.py (its
// docstring gives the file layout); CTest runs it first and passes the file in
// ATTNLAB_TORCH_FIXTURES. Without the file these tests FAIL, never skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "layers/multihead.h"
#include "tests/reference/compare.h"
#include "tests/reference/h5_reader.h"

namespace attnlab {
namespace {

constexpr double kTolerance = 1e-5;  // float32 against float32; never loosen to make a case pass
constexpr const char* kFormat = "attnlab-torch-attention-fixtures";
constexpr const char* kHowToGenerate =
    "generate the fixtures with\n"
    "    /usr/bin/python3 tests/reference/torch_attention_fixtures.py build/torch_attention_fixtures.h5\n"
    "    export ATTNLAB_TORCH_FIXTURES=$PWD/build/torch_attention_fixtures.h5\n"
    "(needs python3-torch, python3-h5py, python3-numpy), or run the suite through ctest, which does both:\n"
    "    ctest --test-dir build -R 'torch|TorchAgreement' --output-on-failure";

// The file named by ATTNLAB_TORCH_FIXTURES, or a message saying what is missing and how to make it.
std::unique_ptr<FixtureFile> open_fixtures(std::string& why) {
    const char* path = std::getenv("ATTNLAB_TORCH_FIXTURES");
    if (path == nullptr || *path == '\0') {
        why = std::string("ATTNLAB_TORCH_FIXTURES is not set; ") + kHowToGenerate;
        return nullptr;
    }
    if (!std::filesystem::is_regular_file(path)) {
        why = std::string("ATTNLAB_TORCH_FIXTURES=") + path + " does not exist; " + kHowToGenerate;
        return nullptr;
    }
    auto file = std::make_unique<FixtureFile>(path);
    const std::string format = file->attr_string("/", "format");
    if (format != kFormat) {
        why = std::string(path) + " has format \"" + format + "\", expected \"" + kFormat + "\"; " + kHowToGenerate;
        return nullptr;
    }
    return file;
}

// ---- one case ----

struct Quantity {
    std::string name;
    Tensor ours;
};

void check_case(const std::string& name, const std::vector<std::string>& references) {
    std::string why;
    std::unique_ptr<FixtureFile> file;
    try {
        file = open_fixtures(why);
    } catch (const std::exception& e) {
        FAIL() << e.what() << "; " << kHowToGenerate;
    }
    if (!file) FAIL() << why;
    ASSERT_TRUE(file->has(name)) << "the fixture file has no case " << name << "; regenerate it. " << kHowToGenerate;

    // config; kv_heads and head_width explicit, as the fixture states them
    AttentionConfig config;
    config.width = static_cast<size_t>(file->attr_int(name, "width"));
    config.kv_width = static_cast<size_t>(file->attr_int(name, "kv_width"));
    config.heads = static_cast<size_t>(file->attr_int(name, "heads"));
    config.kv_heads = static_cast<size_t>(file->attr_int(name, "kv_heads"));
    config.head_width = static_cast<size_t>(file->attr_int(name, "head_width"));
    config.scale = file->attr_string(name, "scale");
    const bool self_attention = file->attr_int(name, "self_attention") != 0;
    Rng init(0);
    MultiHeadAttention mha(config, init, nullptr);
    EXPECT_NEAR(mha.scale, file->attr_double(name, "scale_value"), 1e-15) << "scale \"" << config.scale << "\"";

    NamedTensors state;
    for (const auto& [param, unused] : mha.named_parameters()) state.emplace_back(param, file->tensor(name + "/params/" + param));
    mha.load_state_dict(state);

    // mask: causal + key lengths, in our polarity; it must equal the eligibility the generator used
    AttentionMask mask;
    mask.causal = file->attr_int(name, "causal") != 0;
    for (long long length : file->integers(name + "/key_lengths")) mask.key_lengths.push_back(static_cast<size_t>(length));
    const Tensor eligible = file->tensor(name + "/eligible");  // (B, Tq, Tk), 1 = may attend
    const size_t B = eligible.size(0), Tq = eligible.size(1), Tk = eligible.size(2);
    size_t polarity_mismatches = 0;
    for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < Tq; ++i)
            for (size_t j = 0; j < Tk; ++j)
                polarity_mismatches += mask.allows(b, i, j, Tq, Tk) != (eligible.at({b, i, j}) != 0.0);
    EXPECT_EQ(polarity_mismatches, 0u) << "AttentionMask disagrees with the fixture's eligibility mask";

    // separate leaves for the query and key/value inputs (equal values in self-attention)
    const Tensor R = file->tensor(name + "/R");  // (B, Tq, D)
    Tensor x_q = file->tensor(name + "/x_q", true), x_kv = file->tensor(name + "/x_kv", true);
    MultiHeadAttention::Output result = mha.forward(x_q, x_kv, mask, /*need_weights=*/true);
    sum(result.out * R).backward();
    std::vector<Quantity> ours = {{"output", result.out}, {"weights", result.weights},
                                  {"grads/x_q", x_q.grad()}, {"grads/x_kv", x_kv.grad()}};
    for (const auto& [param, p] : mha.named_parameters()) ours.push_back({"grads/" + param, p.grad()});

    // self-attention as the models call it: one tensor as query, key and value
    if (self_attention) {
        mha.zero_grad();
        Tensor x = file->tensor(name + "/x_q", true);
        sum(mha.forward(x, x, mask, /*need_weights=*/true).out * R).backward();
        ours.push_back({"grads/x", x.grad()});
    }

    for (const std::string& reference : references) {
        const std::string group = name + "/torch/" + reference;
        ASSERT_TRUE(file->has(group)) << "the fixture file has no " << group << "; regenerate it. " << kHowToGenerate;
        for (const Quantity& q : ours) {
            const std::string what = group + "/" + q.name;
            ASSERT_TRUE(file->has(what)) << "the fixture file has no " << what;
            const double diff = max_abs_difference(q.ours, file->tensor(what), what);
            std::printf("[torch agreement] %-20s %-24s %-22s max |attnlab - torch| = %.3e\n", name.c_str(),
                        reference.c_str(), q.name.c_str(), diff);
            EXPECT_LE(diff, kTolerance) << what << ": attnlab and torch disagree (NaN: a NaN or a shape mismatch)";
        }
    }
    std::fflush(stdout);
}

const std::vector<std::string> kBothReferences = {"nn_multihead_attention", "reference_attention"};

TEST(TorchAgreement, CausalSelfAttention) { check_case("causal_self", kBothReferences); }
TEST(TorchAgreement, KeyPadding) { check_case("key_padding", kBothReferences); }
TEST(TorchAgreement, CausalAndKeyPadding) { check_case("causal_and_padding", kBothReferences); }
TEST(TorchAgreement, CrossAttentionTqNotTk) { check_case("cross", kBothReferences); }
// nn.MultiheadAttention has no grouped K/V: the reference repeats K and V heads explicitly
TEST(TorchAgreement, GroupedKV) { check_case("grouped_kv", {"reference_attention"}); }

}  // namespace
}  // namespace attnlab
