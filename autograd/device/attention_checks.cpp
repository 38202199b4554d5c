// What the device attention refuses, checked on the host before any work.
// Plain C++, part of the engine (the seam says what a device call refuses; the
// kernels in cuda/ only carry calls out), compiled in both builds: the tests run
// these checks without a GPU.
#include <climits>
#include <cstdint>

#include "autograd/device/attention.h"

namespace attnlab::device {

namespace {

// a * b, or SIZE_MAX if that overflows (each factor is below 2^31, a product of three may not fit)
size_t saturating_product(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

// The launch limits the shapes meet (an H200, as every GPU since Kepler): the
// flash grids are (ceil(T / 64), H or H_kv, B), and gridDim.y and z are at most
// 65535; the row kernels (softmax, row_dot) put B H Tq rows, 8 per block, in
// gridDim.x (at most 2^31 - 1); the dense kernel's cuBLAS calls batch B H_kv
// products (an int).
void check_launch_limits(const AttentionDims& dims, AttentionKernel kernel, const std::string& dims_text) {
    constexpr size_t max_grid_yz = 65535, max_grid_x = 2147483647;
    const size_t rows = saturating_product(saturating_product(dims.B, dims.H), dims.Tq);
    const size_t row_blocks = rows / 8 + (rows % 8 != 0);
    if (kernel == AttentionKernel::flash && (dims.B > max_grid_yz || dims.H > max_grid_yz))
        fail("attention", dims_text + ": the flash kernel's grid takes at most 65535 batch items and 65535 heads "
                                      "(gridDim.z, gridDim.y); split the batch");
    if (row_blocks > max_grid_x)
        fail("attention", dims_text + ": B H Tq = " + std::to_string(rows) +
                              " query rows exceed the row kernels' grid (2^31 - 1 blocks of 8); split the batch");
    if (kernel == AttentionKernel::dense && saturating_product(dims.B, dims.H_kv) > size_t(INT_MAX))
        fail("attention", dims_text + ": B H_kv exceeds cuBLAS's batch count (2^31 - 1); split the batch");
}

}  // namespace

std::string to_string(AttentionKernel kernel) { return kernel == AttentionKernel::dense ? "dense" : "flash"; }

AttentionKernel parse_attention_kernel(const std::string& name) {
    if (name == "dense") return AttentionKernel::dense;
    if (name == "flash") return AttentionKernel::flash;
    fail("cuda", "attention kernel must be \"dense\" or \"flash\", got \"" + name + "\"");
}

AttentionKernel kernel_for_head_width(size_t head_width) {
    return head_width <= flash_max_head_width ? AttentionKernel::flash : AttentionKernel::dense;
}

AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v) {
    constexpr const char* op = "attention";
    if (!q.defined() || !k.defined() || !v.defined()) fail(op, "q, k and v must be defined tensors");
    const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape());
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail(op, shapes + ": expected (B, H, T, d) for each");
    for (const Tensor* t : {&q, &k, &v})
        if (t->dtype() != DType::f32) fail(op, shapes + ": the CUDA path takes float32 only, got " + to_string(t->dtype()));
    const AttentionDims dims{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
    if (k.size(0) != dims.B || v.size(0) != dims.B) fail(op, shapes + ": batch sizes differ");
    if (v.size(1) != dims.H_kv || v.size(2) != dims.Tk) fail(op, shapes + ": k and v disagree on heads or length");
    if (k.size(3) != dims.d) fail(op, shapes + ": q and k head widths differ");
    if (dims.H_kv == 0 || dims.H % dims.H_kv != 0)
        fail(op, shapes + ": K/V heads (" + std::to_string(dims.H_kv) + ") must divide query heads (" +
                     std::to_string(dims.H) + ")");
    return dims;
}

void check_attention(const AttentionDims& dims, const AttentionMask& mask, const AttentionOptions& options,
                     AttentionKernel kernel) {
    constexpr const char* op = "attention";
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const std::string dims_text = "(B, H, H_kv, Tq, Tk, d, d_v) = (" + std::to_string(B) + ", " + std::to_string(H) +
                                  ", " + std::to_string(H_kv) + ", " + std::to_string(Tq) + ", " + std::to_string(Tk) +
                                  ", " + std::to_string(d) + ", " + std::to_string(d_v) + ")";
    for (size_t n : {B, H, H_kv, Tq, Tk, d, d_v})
        if (n == 0 || n > size_t(INT_MAX)) fail(op, dims_text + ": the CUDA path needs every size in [1, 2^31)");
    if (H % H_kv != 0) fail(op, dims_text + ": K/V heads must divide query heads");
    check_launch_limits(dims, kernel, dims_text);
    check_attention_mask(op, dims, mask);
    if (mask.variant.softcap > 0.0)  // the CPU kernels take it (attention_kernels.h); the device's do not yet
        fail(op, "the device's attention kernels compute plain scores: the soft-cap runs composed of ops there "
                 "(as MultiHeadAttention does)");
    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        fail(op, "dropout " + std::to_string(options.dropout) + " is outside [0, 1)");
    if (kernel == AttentionKernel::flash) {
        if (options.training && options.dropout > 0.0)  // the dense kernel applies it to its weights
            fail(op, "the flash kernel keeps no weights to apply dropout " + std::to_string(options.dropout) +
                         " to in training; use the dense kernel");
        if (d > flash_max_head_width || d_v > flash_max_head_width)
            fail(op, "the flash kernel takes head widths up to " + std::to_string(flash_max_head_width) + ", got d = " +
                         std::to_string(d) + ", d_v = " + std::to_string(d_v) + "; use the dense kernel");
        if (options.need_weights)
            fail(op, "the flash kernel keeps no (Tq, Tk) weights; use the dense kernel for need_weights");
    }
    check_masked_rows(mask, options.masked_rows, B, Tq, Tk);
}

}  // namespace attnlab::device
