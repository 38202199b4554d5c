// Compiled in place of attention_dense.cu and attention_flash.cu without CUDA.
// Unreachable in practice (no Context can be made), but every entry point still
// refuses, saying why.
#include "autograd/device/attention.h"
#include "autograd/device/backend.h"

namespace attnlab::device {

namespace {
[[noreturn]] void refuse(const std::string& where) { fail("cuda", where + ": " + probe().reason); }
}  // namespace

void attention_scores(Context&, const AttentionDims&, const float*, const float*, const MaskView&, float, float*) {
    refuse("attention_scores");
}
void dense_attention_forward(Context&, const AttentionDims&, const float*, const float*, const float*, const MaskView&,
                             float, float*, float*, const WeightDropout&) {
    refuse("dense_attention_forward");
}
void dense_attention_backward(Context&, const AttentionDims&, const float*, const float*, const float*, const float*,
                              const float*, float, float*, float*, float*, float*, const WeightDropout&,
                              const MaskView&) {
    refuse("dense_attention_backward");
}
void flash_attention_forward(Context&, const AttentionDims&, const float*, const float*, const float*, const MaskView&,
                             float, float*, float*, AttentionLayout) {
    refuse("flash_attention_forward");
}
void flash_attention_backward(Context&, const AttentionDims&, const float*, const float*, const float*, const float*,
                              const float*, const float*, const MaskView&, float, float*, float*, float*, float*,
                              AttentionLayout) {
    refuse("flash_attention_backward");
}

std::vector<KernelResources> flash_kernel_resources(Context&) { refuse("flash_kernel_resources"); }
std::vector<KernelResources> dense_kernel_resources(Context&) { refuse("dense_kernel_resources"); }

}  // namespace attnlab::device
