// The normalisations of a training step on the device (autograd/device/kernels.h):
// LayerNorm and RMSNorm over the last axis, one warp per row, forward beside
// backward; the weight and bias gradients are column sums (train_nn.cu). With
// stacked members the rows are `members` equal blocks, block m scaled (and
// shifted) by row m of the (members, D) weight (and bias).
#include <algorithm>
#include <cmath>

#include "autograd/device/kernels.h"
#include "cuda/check.cuh"
#include "cuda/warp.cuh"

namespace attnlab::device {

namespace {

constexpr int rows_per_block = 8;  // 8 warps of 32 lanes, a row each
int row_grid(size_t rows) { return int(std::max<size_t>((rows + rows_per_block - 1) / rows_per_block, 1)); }

// ---- layer norm: one warp per row ----

__global__ void layer_norm_forward_kernel(size_t rows, size_t per, int D, const float* x, const float* gamma,
                                          const float* beta, float eps, float* y, float* mean_out, float* rstd_out) {
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps leave together
    const int lane = threadIdx.x % 32;
    gamma += row / per * D;  // the row's member's weight and bias
    beta += row / per * D;
    const float* xr = x + row * D;
    float sum = 0.0f;
    for (int c = lane; c < D; c += 32) sum += xr[c];
    const float mean = warp_sum(sum) / float(D);
    float squares = 0.0f;
    for (int c = lane; c < D; c += 32) squares += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = 1.0f / sqrtf(warp_sum(squares) / float(D) + eps);  // biased variance, as torch
    float* yr = y + row * D;
    for (int c = lane; c < D; c += 32) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

__global__ void layer_norm_backward_kernel(size_t rows, size_t per, int D, const float* x, const float* gamma,
                                           const float* mean, const float* rstd, const float* dy, float* dx,
                                           bool accumulate, float* dy_xhat) {
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    gamma += row / per * D;
    const float mu = mean[row], r = rstd[row];
    const float *xr = x + row * D, *dyr = dy + row * D;
    float dxhat_sum = 0.0f, dxhat_xhat_sum = 0.0f;
    for (int c = lane; c < D; c += 32) {
        const float xhat = (xr[c] - mu) * r, dxhat = dyr[c] * gamma[c];
        dxhat_sum += dxhat;
        dxhat_xhat_sum += dxhat * xhat;
    }
    const float mean_dxhat = warp_sum(dxhat_sum) / float(D), mean_dxhat_xhat = warp_sum(dxhat_xhat_sum) / float(D);
    float* dxr = dx + row * D;
    float* sr = dy_xhat + row * D;
    for (int c = lane; c < D; c += 32) {
        const float xhat = (xr[c] - mu) * r, dxhat = dyr[c] * gamma[c];
        const float g = r * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
        dxr[c] = accumulate ? dxr[c] + g : g;
        sr[c] = dyr[c] * xhat;
    }
}

// ---- RMS norm: one warp per row ----

__global__ void rms_norm_forward_kernel(size_t rows, size_t per, int D, const float* x, const float* w, float eps,
                                        float* y, float* rstd_out) {
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    w += row / per * D;
    const float* xr = x + row * D;
    float squares = 0.0f;
    for (int c = lane; c < D; c += 32) squares += xr[c] * xr[c];
    const float rstd = 1.0f / sqrtf(warp_sum(squares) / float(D) + eps);
    float* yr = y + row * D;
    for (int c = lane; c < D; c += 32) yr[c] = xr[c] * rstd * w[c];
    if (lane == 0) rstd_out[row] = rstd;
}

__global__ void rms_norm_backward_kernel(size_t rows, size_t per, int D, const float* x, const float* w,
                                         const float* rstd, const float* dy, float* dx, bool accumulate,
                                         float* dy_xhat) {
    const size_t row = size_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    w += row / per * D;
    const float r = rstd[row];
    const float *xr = x + row * D, *dyr = dy + row * D;
    float dxhat_xhat_sum = 0.0f;
    for (int c = lane; c < D; c += 32) dxhat_xhat_sum += dyr[c] * w[c] * xr[c] * r;
    const float mean_dxhat_xhat = warp_sum(dxhat_xhat_sum) / float(D);
    float* dxr = dx + row * D;
    float* sr = dy_xhat + row * D;
    for (int c = lane; c < D; c += 32) {
        const float xhat = xr[c] * r;
        const float g = r * (dyr[c] * w[c] - xhat * mean_dxhat_xhat);
        dxr[c] = accumulate ? dxr[c] + g : g;
        sr[c] = dyr[c] * xhat;
    }
}

// The rows of each member (all of them for one weight).
size_t rows_per_member(size_t rows, size_t members) { return rows / std::max<size_t>(members, 1); }
// The kernels' divisor: a row's member is row / per (no rows: any).
size_t divisor(size_t per) { return std::max<size_t>(per, 1); }

}  // namespace

void layer_norm_forward(Context& context, size_t rows, size_t D, const float* x, const float* gamma, const float* beta,
                        float eps, float* y, float* mean, float* rstd, size_t members) {
    layer_norm_forward_kernel<<<row_grid(rows), rows_per_block * 32, 0, context.stream()>>>(
        rows, divisor(rows_per_member(rows, members)), int(D), x, gamma, beta, eps, y, mean, rstd);
    check_launch("layer_norm_forward");
}

void rms_norm_forward(Context& context, size_t rows, size_t D, const float* x, const float* w, float eps, float* y,
                      float* rstd, size_t members) {
    rms_norm_forward_kernel<<<row_grid(rows), rows_per_block * 32, 0, context.stream()>>>(
        rows, divisor(rows_per_member(rows, members)), int(D), x, w, eps, y, rstd);
    check_launch("rms_norm_forward");
}

void rms_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* w, const float* rstd,
                       const float* dy, float* dx, bool accumulate, float* dw, float* scratch, size_t members) {
    const size_t per = rows_per_member(rows, members);
    rms_norm_backward_kernel<<<row_grid(rows), rows_per_block * 32, 0, context.stream()>>>(
        rows, divisor(per), int(D), x, w, rstd, dy, dx, accumulate, scratch);
    check_launch("rms_norm_backward");
    column_sums(context, per, D, scratch, dw, true, members);  // each member's sum of dy xhat
}

void layer_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx, bool accumulate,
                         float* dgamma, float* dbeta, float* scratch, size_t members) {
    const size_t per = rows_per_member(rows, members);
    layer_norm_backward_kernel<<<row_grid(rows), rows_per_block * 32, 0, context.stream()>>>(
        rows, divisor(per), int(D), x, gamma, mean, rstd, dy, dx, accumulate, scratch);
    check_launch("layer_norm_backward");
    column_sums(context, per, D, scratch, dgamma, true, members);  // each member's sum of dy xhat
    column_sums(context, per, D, dy, dbeta, true, members);
}

}  // namespace attnlab::device
