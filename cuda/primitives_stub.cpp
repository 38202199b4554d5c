// Compiled in place of primitives.cu without CUDA. Unreachable in practice (no
// Context can be made), but every entry point still refuses, saying why.
#include "autograd/tensor.h"
#include "autograd/device/backend.h"
#include "autograd/device/primitives.h"

namespace attnlab::device {

namespace {
[[noreturn]] void refuse(const std::string& where) { fail("cuda", where + ": " + probe().reason); }
}  // namespace

void binary(Context&, BinaryOp, size_t, const float*, const Strided&, const float*, const Strided&, float*, bool) {
    refuse("binary");
}
void unary(Context&, UnaryOp, size_t, const float*, float, float*) { refuse("unary"); }
void unary_backward(Context&, UnaryOp, size_t, const float*, const float*, const float*, float, float*, bool) {
    refuse("unary_backward");
}
void pointwise(Context&, size_t, size_t, const float*, float, float*) { refuse("pointwise"); }
void pointwise_backward(Context&, size_t, size_t, const float*, const float*, float, float*, bool) {
    refuse("pointwise_backward");
}
void masked_fill(Context&, size_t, const float*, const uint8_t*, float, float*, bool) { refuse("masked_fill"); }
void copy_strided(Context&, size_t, const float*, const Strided&, float*, bool) { refuse("copy_strided"); }
void sum_rows(Context&, size_t, size_t, const float*, float, float*, bool) { refuse("sum_rows"); }
void max_rows(Context&, size_t, size_t, const float*, float*, int32_t*) { refuse("max_rows"); }
void scatter_rows(Context&, size_t, size_t, const int32_t*, const float*, float*) { refuse("scatter_rows"); }
void softmax_rows(Context&, size_t, size_t, const float*, bool, float*) { refuse("softmax_rows"); }
void softmax_rows_backward(Context&, size_t, size_t, const float*, const float*, bool, float*, bool) {
    refuse("softmax_rows_backward");
}
void gemm(Context&, size_t, size_t, size_t, size_t, float, const MatrixArg&, const MatrixArg&, float, float*) {
    refuse("gemm");
}

}  // namespace attnlab::device
