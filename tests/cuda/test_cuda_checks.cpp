// What the device attention refuses, checked on the host: these run in every
// build, with or without a GPU. The masked-row error must read exactly as the
// CPU op's, naming batch item and query position.
#include <functional>

#include "attention_reference.h"

namespace attnlab::cuda_test {
namespace {

using device::attention_dims;
using device::check_attention;

std::string error_of(const std::function<void()>& call) {
    try {
        call();
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const AttentionDims small{2, 2, 2, 4, 5, 3, 3};

TEST(CudaAttentionChecks, MaskedRowErrorNamesTheRowExactlyAsTheCpuOp) {
    AttentionMask mask;
    mask.key_lengths = {5, 5};
    mask.eligible = Mask::filled({2, 4, 5}, true);
    for (size_t j = 0; j < 5; ++j) mask.eligible.values[(1 * 4 + 2) * 5 + j] = 0;  // batch item 1, query 2
    const Inputs in = random_inputs(small, 1);
    const std::string cpu = error_of([&] { attention(in.q, in.k, in.v, mask, {}); });
    for (AttentionKernel kernel : {AttentionKernel::dense, AttentionKernel::flash}) {
        const std::string gpu = error_of([&] { check_attention(small, mask, {}, kernel); });
        EXPECT_EQ(gpu, cpu);
        EXPECT_EQ(gpu, "[attention] batch item 1, query position 2 has no eligible key (masked_rows = \"error\"; "
                       "use \"zero\" to allow it)");
    }
    AttentionOptions zero;
    zero.masked_rows = MaskedRows::zero;
    EXPECT_NO_THROW(check_attention(small, mask, zero, AttentionKernel::flash));
}

TEST(CudaAttentionChecks, EmptyRowsFromCausalAndPaddingAreFoundToo) {
    AttentionMask causal;
    causal.causal = true;  // Tq = 6 > Tk = 4: query 0 sees keys j <= 0 - 2, none
    const AttentionDims wide{1, 1, 1, 6, 4, 2, 2};
    EXPECT_EQ(error_of([&] { check_attention(wide, causal, {}, AttentionKernel::flash); }),
              "[attention] batch item 0, query position 0 has no eligible key (masked_rows = \"error\"; use \"zero\" "
              "to allow it)");
    AttentionMask padding;
    padding.key_lengths = {5, 0};
    EXPECT_TRUE(contains(error_of([&] { check_attention(small, padding, {}, AttentionKernel::dense); }),
                         "batch item 1, query position 0 has no eligible key"));
}

// Dropout in training is applied by the dense kernel to its weights (the
// device op picks it then); the flash kernel keeps none.
TEST(CudaAttentionChecks, DropoutInTrainingNeedsTheDenseKernel) {
    AttentionOptions options;
    options.dropout = 0.1;
    options.training = true;
    EXPECT_NO_THROW(check_attention(small, {}, options, AttentionKernel::dense));
    const std::string message = error_of([&] { check_attention(small, {}, options, AttentionKernel::flash); });
    EXPECT_TRUE(contains(message, "[attention] the flash kernel keeps no weights to apply dropout")) << message;
    options.training = false;  // evaluation ignores dropout, as the CPU op does
    EXPECT_NO_THROW(check_attention(small, {}, options, AttentionKernel::flash));
    options.dropout = 1.0;
    EXPECT_TRUE(contains(error_of([&] { check_attention(small, {}, options, AttentionKernel::dense); }), "outside [0, 1)"));
}

TEST(CudaAttentionChecks, FlashRefusesWideHeadsAndWeights) {
    const AttentionDims wide{1, 1, 1, 4, 4, 129, 8};
    const std::string message = error_of([&] { check_attention(wide, {}, {}, AttentionKernel::flash); });
    EXPECT_TRUE(contains(message, "head widths up to 128, got d = 129")) << message;
    EXPECT_NO_THROW(check_attention(wide, {}, {}, AttentionKernel::dense));
    AttentionOptions options;
    options.need_weights = true;
    EXPECT_TRUE(contains(error_of([&] { check_attention(small, {}, options, AttentionKernel::flash); }),
                         "keeps no (Tq, Tk) weights"));
}

// Shapes over a launch limit are refused here, with one line, before any device
// work (not by the first launch, mid-step): flash puts B in gridDim.z and H in
// gridDim.y (at most 65535 each); every kernel puts B H Tq rows, 8 per block, in
// gridDim.x (at most 2^31 - 1); dense batches B H_kv products per cuBLAS call (an int).
TEST(CudaAttentionChecks, LaunchLimitsAreRefusedUpFront) {
    const AttentionDims batch{70000, 1, 1, 1, 2, 8, 8}, heads{1, 70000, 1, 1, 2, 8, 8};
    EXPECT_EQ(error_of([&] { check_attention(batch, {}, {}, AttentionKernel::flash); }),
              "[attention] (B, H, H_kv, Tq, Tk, d, d_v) = (70000, 1, 1, 1, 2, 8, 8): the flash kernel's grid takes at "
              "most 65535 batch items and 65535 heads (gridDim.z, gridDim.y); split the batch");
    EXPECT_TRUE(contains(error_of([&] { check_attention(heads, {}, {}, AttentionKernel::flash); }), "65535 heads"));
    EXPECT_NO_THROW(check_attention(batch, {}, {}, AttentionKernel::dense));
    EXPECT_NO_THROW(check_attention(heads, {}, {}, AttentionKernel::dense));
    const AttentionDims rows{65536, 65536, 65536, 8, 2, 8, 8};  // 2^35 rows; B H_kv = 2^32
    EXPECT_TRUE(contains(error_of([&] { check_attention(rows, {}, {}, AttentionKernel::dense); }),
                         "B H Tq = 34359738368 query rows exceed the row kernels' grid"));
    const AttentionDims groups{65536, 65536, 65536, 1, 2, 8, 8};  // 2^32 rows fit; B H_kv = 2^32 does not
    EXPECT_TRUE(contains(error_of([&] { check_attention(groups, {}, {}, AttentionKernel::dense); }),
                         "B H_kv exceeds cuBLAS's batch count"));
}

TEST(CudaAttentionChecks, ShapesAndMasksAreCheckedAsTheCpuOpChecksThem) {
    Rng rng(2);
    const Tensor q = random_tensor(rng, {1, 4, 3, 2}), k = random_tensor(rng, {1, 3, 3, 2}), v = random_tensor(rng, {1, 3, 3, 2});
    EXPECT_TRUE(contains(error_of([&] { attention_dims(q, k, v); }), "K/V heads (3) must divide query heads (4)"));
    const Tensor q64 = Tensor::zeros({1, 1, 3, 2}, DType::f64), k1 = Tensor::zeros({1, 1, 3, 2});
    EXPECT_TRUE(contains(error_of([&] { attention_dims(q64, k1, k1); }), "float32 only, got float64"));
    AttentionMask mask;
    mask.eligible = Mask::filled({3, 4}, true);
    EXPECT_TRUE(contains(error_of([&] { check_attention(small, mask, {}, AttentionKernel::dense); }),
                         "mask (3,4) must be (Tq, Tk) = (4,5)"));
    AttentionMask lengths;
    lengths.key_lengths = {5, 6};
    EXPECT_TRUE(contains(error_of([&] { check_attention(small, lengths, {}, AttentionKernel::dense); }),
                         "key length 6 of batch item 1 exceeds key count 5"));
}

TEST(CudaAttentionChecks, KernelNames) {
    EXPECT_EQ(device::parse_attention_kernel("flash"), AttentionKernel::flash);
    EXPECT_EQ(device::to_string(AttentionKernel::dense), "dense");
    EXPECT_TRUE(contains(error_of([] { device::parse_attention_kernel("fast"); }), "\"dense\" or \"flash\""));
}

}  // namespace
}  // namespace attnlab::cuda_test
