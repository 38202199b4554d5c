// Compiled in place of train_nn.cu, train_norm.cu, train_linear.cu and train_optim.cu without
// CUDA. Unreachable in practice (no Context can be made), but every entry
// point still refuses, saying why.
#include "autograd/tensor.h"
#include "autograd/device/backend.h"
#include "autograd/device/kernels.h"

namespace attnlab::device {

namespace {
[[noreturn]] void refuse(const std::string& where) { fail("cuda", where + ": " + probe().reason); }
}  // namespace

void embedding_forward(Context&, size_t, size_t, size_t, const int32_t*, const float*, const float*, float*) {
    refuse("embedding_forward");
}
void embedding_backward(Context&, size_t, size_t, size_t, const int32_t*, const float*, float*, float*) {
    refuse("embedding_backward");
}
void layer_norm_forward(Context&, size_t, size_t, const float*, const float*, const float*, float, float*, float*,
                        float*, size_t) {
    refuse("layer_norm_forward");
}
void layer_norm_backward(Context&, size_t, size_t, const float*, const float*, const float*, const float*,
                         const float*, float*, bool, float*, float*, float*, size_t) {
    refuse("layer_norm_backward");
}
void rms_norm_forward(Context&, size_t, size_t, const float*, const float*, float, float*, float*, size_t) {
    refuse("rms_norm_forward");
}
void rms_norm_backward(Context&, size_t, size_t, const float*, const float*, const float*, const float*, float*, bool,
                       float*, float*, size_t) {
    refuse("rms_norm_backward");
}
void activation_forward(Context&, DeviceActivation, size_t, const float*, float*) { refuse("activation_forward"); }
void activation_backward(Context&, DeviceActivation, size_t, const float*, const float*, float*) {
    refuse("activation_backward");
}
void dropout_forward(Context&, size_t, const float*, float, uint64_t, float*) { refuse("dropout_forward"); }
void dropout_backward(Context&, size_t, const float*, float, uint64_t, float*) { refuse("dropout_backward"); }
void add_into(Context&, size_t, const float*, float*) { refuse("add_into"); }
void copy_rows(Context&, size_t, size_t, const float*, size_t, float*, size_t, bool) { refuse("copy_rows"); }
void rotary(Context&, size_t, size_t, size_t, size_t, size_t, double, double, const float*, float*) { refuse("rotary"); }
void add_broadcast(Context&, size_t, size_t, const float*, const float*, float*) { refuse("add_broadcast"); }
void scale(Context&, size_t, const float*, float, const float*, float*, bool) { refuse("scale"); }
void column_sums(Context&, size_t, size_t, const float*, float*, bool, size_t) { refuse("column_sums"); }
void merge_heads(Context&, size_t, size_t, size_t, size_t, const float*, float*) { refuse("merge_heads"); }
void split_heads(Context&, size_t, size_t, size_t, size_t, const float*, float*) { refuse("split_heads"); }
void cross_entropy_forward_backward(Context&, size_t, size_t, const float*, const int32_t*, const float*, float*,
                                    float*) {
    refuse("cross_entropy_forward_backward");
}
void score_moments(Context&, const AttentionDims&, const float*, const float*, const MaskView&, float, double*) {
    refuse("score_moments");
}
void sums_to_double(Context&, const std::vector<SumPiece>&, bool, double*) { refuse("sums_to_double"); }
void linear_forward(Context&, size_t, size_t, size_t, const float*, const float*, const float*, float*, size_t) {
    refuse("linear_forward");
}
void linear_backward(Context&, size_t, size_t, size_t, const float*, const float*, const float*, float*, bool, float*,
                     float*, size_t) {
    refuse("linear_backward");
}
void linear_members_forward(Context&, size_t, size_t, size_t, size_t, const float*, const float*, const float*, float*) {
    refuse("linear_members_forward");
}
void linear_members_backward(Context&, size_t, size_t, size_t, size_t, const float*, const float*, const float*, float*,
                             bool, float*, float*) {
    refuse("linear_members_backward");
}
void adam_update(Context&, const std::vector<AdamRun>&, const double*) { refuse("adam_update"); }
void scale_pieces(Context&, const std::vector<ScalePiece>&) { refuse("scale_pieces"); }
void zero_pieces(Context&, const std::vector<ScalePiece>&) { refuse("zero_pieces"); }
void sgd_update(Context&, size_t, float*, const float*, float*, const SgdScalars&, const double*) {
    refuse("sgd_update");
}
void fill_zero(Context&, void*, size_t) { refuse("fill_zero"); }
void members_to_stacked(Context&, size_t, size_t, const size_t*, const float* const*, float*) { refuse("members_to_stacked"); }
void stacked_to_members(Context&, size_t, size_t, const size_t*, const float*, float* const*, bool) {
    refuse("stacked_to_members");
}

}  // namespace attnlab::device
