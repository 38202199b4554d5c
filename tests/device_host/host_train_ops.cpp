// The training ops of autograd/device/kernels.h carried out on the host with plain loops,
// for test_device_host (see host_device.cpp, which holds the device, its memory,
// attention and the ops that share attention's helpers: dropout, score moments).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "autograd/device/context.h"
#include "autograd/device/kernels.h"

namespace attnlab::device {

// ---- the training ops ----

void embedding_forward(Context&, size_t B, size_t T, size_t D, const int32_t* tokens, const float* E, const float* P,
                       float* x) {
    for (size_t row = 0; row < B * T; ++row)
        for (size_t c = 0; c < D; ++c)
            x[row * D + c] = E[size_t(tokens[row]) * D + c] + (P != nullptr ? P[(row % T) * D + c] : 0.0f);
}
void embedding_backward(Context& context, size_t B, size_t T, size_t D, const int32_t* tokens, const float* dx,
                        float* dE, float* dP) {
    for (size_t row = 0; row < B * T; ++row)
        for (size_t c = 0; c < D; ++c) dE[size_t(tokens[row]) * D + c] += dx[row * D + c];
    if (dP != nullptr) column_sums(context, B, T * D, dx, dP, true);
}

void layer_norm_forward(Context&, size_t rows, size_t D, const float* x, const float* gamma, const float* beta,
                        float eps, float* y, float* mean, float* rstd, size_t members) {
    const size_t per = std::max<size_t>(rows / members, 1);  // rows of each member
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + r * D, *gamma_r = gamma + r / per * D, *beta_r = beta + r / per * D;
        float mu = 0.0f, var = 0.0f;
        for (size_t c = 0; c < D; ++c) mu += xr[c];
        mu /= float(D);
        for (size_t c = 0; c < D; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        const float inv = 1.0f / std::sqrt(var / float(D) + eps);
        for (size_t c = 0; c < D; ++c) y[r * D + c] = (xr[c] - mu) * inv * gamma_r[c] + beta_r[c];
        mean[r] = mu;
        rstd[r] = inv;
    }
}
void layer_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx, bool accumulate,
                         float* dgamma, float* dbeta, float* scratch, size_t members) {
    const size_t per = rows / members;  // rows of each member
    for (size_t r = 0; r < rows; ++r) {
        const float* gamma_r = gamma + r / per * D;
        float a = 0.0f, b = 0.0f;
        for (size_t c = 0; c < D; ++c) {
            const float xhat = (x[r * D + c] - mean[r]) * rstd[r], dxhat = dy[r * D + c] * gamma_r[c];
            a += dxhat;
            b += dxhat * xhat;
        }
        a /= float(D);
        b /= float(D);
        for (size_t c = 0; c < D; ++c) {
            const float xhat = (x[r * D + c] - mean[r]) * rstd[r], dxhat = dy[r * D + c] * gamma_r[c];
            const float g = rstd[r] * (dxhat - a - xhat * b);
            dx[r * D + c] = accumulate ? dx[r * D + c] + g : g;
            scratch[r * D + c] = dy[r * D + c] * xhat;
        }
    }
    column_sums(context, per, D, scratch, dgamma, true, members);
    column_sums(context, per, D, dy, dbeta, true, members);
}

void rms_norm_forward(Context&, size_t rows, size_t D, const float* x, const float* w, float eps, float* y,
                      float* rstd, size_t members) {
    const size_t per = std::max<size_t>(rows / members, 1);  // rows of each member
    for (size_t r = 0; r < rows; ++r) {
        const float* w_r = w + r / per * D;
        float squares = 0.0f;
        for (size_t c = 0; c < D; ++c) squares += x[r * D + c] * x[r * D + c];
        rstd[r] = 1.0f / std::sqrt(squares / float(D) + eps);
        for (size_t c = 0; c < D; ++c) y[r * D + c] = x[r * D + c] * rstd[r] * w_r[c];
    }
}
void rms_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* w, const float* rstd,
                       const float* dy, float* dx, bool accumulate, float* dw, float* scratch, size_t members) {
    const size_t per = rows / members;  // rows of each member
    for (size_t r = 0; r < rows; ++r) {
        const float* w_r = w + r / per * D;
        float b = 0.0f;
        for (size_t c = 0; c < D; ++c) b += dy[r * D + c] * w_r[c] * x[r * D + c] * rstd[r];
        b /= float(D);
        for (size_t c = 0; c < D; ++c) {
            const float xhat = x[r * D + c] * rstd[r];
            const float g = rstd[r] * (dy[r * D + c] * w_r[c] - xhat * b);
            dx[r * D + c] = accumulate ? dx[r * D + c] + g : g;
            scratch[r * D + c] = dy[r * D + c] * xhat;
        }
    }
    column_sums(context, per, D, scratch, dw, true, members);
}
void activation_forward(Context&, DeviceActivation activation, size_t n, const float* x, float* y) {
    for (size_t e = 0; e < n; ++e)
        y[e] = activation == DeviceActivation::gelu ? x[e] * 0.5f * (1.0f + std::erf(x[e] / std::sqrt(2.0f)))
                                                     : std::max(x[e], 0.0f);
}
void activation_backward(Context&, DeviceActivation activation, size_t n, const float* x, const float* dy, float* dx) {
    for (size_t e = 0; e < n; ++e) {
        const float v = x[e];
        const float slope = activation == DeviceActivation::gelu
                                ? 0.5f * (1.0f + std::erf(v / std::sqrt(2.0f))) +
                                      v * std::exp(-0.5f * v * v) / std::sqrt(2.0f * 3.14159265358979f)
                                : (v > 0.0f ? 1.0f : 0.0f);
        dx[e] = dy[e] * slope;
    }
}

void add_into(Context&, size_t n, const float* a, float* out) {
    for (size_t e = 0; e < n; ++e) out[e] += a[e];
}
void copy_rows(Context&, size_t rows, size_t width, const float* from, size_t from_ld, float* to, size_t to_ld,
               bool accumulate) {
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < width; ++c)
            to[r * to_ld + c] = accumulate ? to[r * to_ld + c] + from[r * from_ld + c] : from[r * from_ld + c];
}
void rotary(Context&, size_t B, size_t T, size_t H, size_t d, size_t offset, double base, double sign, const float* x,
            float* y) {
    const size_t half = d / 2;
    for (size_t row = 0; row < B * T * H; ++row)
        for (size_t c = 0; c < half; ++c) {
            const double angle = double(offset + (row / H) % T) * std::pow(base, -2.0 * double(c) / double(d));
            const float cs = float(std::cos(angle)), sn = float(sign * std::sin(angle));
            const float lo = x[row * d + c], hi = x[row * d + c + half];
            y[row * d + c] = lo * cs - hi * sn;
            y[row * d + c + half] = hi * cs + lo * sn;
        }
}
void add_broadcast(Context&, size_t n, size_t period, const float* a, const float* b, float* out) {
    for (size_t e = 0; e < n; ++e) out[e] = a[e] + b[e % period];
}
void scale(Context&, size_t n, const float* x, float factor, const float* device_factor, float* out, bool accumulate) {
    const float f = device_factor != nullptr ? factor * *device_factor : factor;
    for (size_t e = 0; e < n; ++e) out[e] = accumulate ? out[e] + x[e] * f : x[e] * f;
}
void column_sums(Context&, size_t rows, size_t cols, const float* x, float* out, bool accumulate, size_t groups) {
    for (size_t g = 0; g < groups; ++g)
        for (size_t c = 0; c < cols; ++c) {
            float sum = 0.0f;
            for (size_t r = 0; r < rows; ++r) sum += x[(g * rows + r) * cols + c];
            out[g * cols + c] = accumulate ? out[g * cols + c] + sum : sum;
        }
}

void merge_heads(Context&, size_t B, size_t H, size_t T, size_t d, const float* heads, float* merged) {
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t t = 0; t < T; ++t)
                for (size_t i = 0; i < d; ++i) merged[(b * T + t) * H * d + h * d + i] = heads[((b * H + h) * T + t) * d + i];
}
void split_heads(Context&, size_t B, size_t H, size_t T, size_t d, const float* dmerged, float* dheads) {
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t t = 0; t < T; ++t)
                for (size_t i = 0; i < d; ++i) dheads[((b * H + h) * T + t) * d + i] = dmerged[(b * T + t) * H * d + h * d + i];
}

void cross_entropy_forward_backward(Context&, size_t M, size_t V, const float* logits, const int32_t* targets,
                                    const float* weight, float* loss_rows, float* dlogits) {
    for (size_t r = 0; r < M; ++r) {
        const float* z = logits + r * V;
        float top = z[0];
        for (size_t j = 1; j < V; ++j) top = std::max(top, z[j]);
        float total = 0.0f;
        for (size_t j = 0; j < V; ++j) total += std::exp(z[j] - top);
        const float lse = top + std::log(total);
        for (size_t j = 0; j < V; ++j)
            dlogits[r * V + j] = weight[r] * (std::exp(z[j] - lse) - (int32_t(j) == targets[r] ? 1.0f : 0.0f));
        loss_rows[r] = weight[r] * (lse - z[targets[r]]);
    }
}

void sums_to_double(Context&, const std::vector<SumPiece>& pieces, bool squares, double*) {
    for (const SumPiece& p : pieces) {
        double total = 0.0;
        for (size_t e = 0; e < p.n; ++e) total += squares ? double(p.x[e]) * double(p.x[e]) : double(p.x[e]);
        *p.out = total;
    }
}

void linear_forward(Context&, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b, float* y,
                    size_t groups) {
    for (size_t g = 0; g < groups; ++g)
        for (size_t m = 0; m < M; ++m)
            for (size_t n = 0; n < N; ++n) {
                float sum = b != nullptr ? b[g * N + n] : 0.0f;
                for (size_t k = 0; k < K; ++k) sum += x[m * K + k] * W[(g * N + n) * K + k];
                y[(g * M + m) * N + n] = sum;
            }
}
void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db, size_t groups) {
    if (dx != nullptr)  // one product a group, each added onto the last (as the kernels' GEMMs with beta 1)
        for (size_t g = 0; g < groups; ++g)
            for (size_t m = 0; m < M; ++m)
                for (size_t k = 0; k < K; ++k) {
                    float sum = 0.0f;
                    for (size_t n = 0; n < N; ++n) sum += dy[(g * M + m) * N + n] * W[(g * N + n) * K + k];
                    dx[m * K + k] = accumulate || g > 0 ? dx[m * K + k] + sum : sum;
                }
    for (size_t g = 0; g < groups; ++g)
        for (size_t n = 0; n < N; ++n)
            for (size_t k = 0; k < K; ++k) {
                float sum = 0.0f;
                for (size_t m = 0; m < M; ++m) sum += dy[(g * M + m) * N + n] * x[m * K + k];
                dW[(g * N + n) * K + k] += sum;
            }
    if (db != nullptr) column_sums(context, M, N, dy, db, true, groups);
}
// Each member's block as linear_forward / linear_backward alone.
void linear_members_forward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                            const float* W, const float* b, float* y) {
    for (size_t g = 0; g < members; ++g)
        linear_forward(context, M, N, K, x + g * M * K, W + g * N * K, b != nullptr ? b + g * N : nullptr, y + g * M * N);
}
void linear_members_backward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                             const float* W, const float* dy, float* dx, bool accumulate, float* dW, float* db) {
    for (size_t g = 0; g < members; ++g)
        linear_backward(context, M, N, K, x + g * M * K, W + g * N * K, dy + g * M * N, dx != nullptr ? dx + g * M * K : nullptr,
                        accumulate, dW + g * N * K, db != nullptr ? db + g * N : nullptr);
}

void adam_update(Context&, const std::vector<AdamRun>& runs, const double* stats) {
    if (!std::isfinite(stats[0]) || !std::isfinite(stats[1])) return;
    const double norm = std::sqrt(stats[1]);
    for (const AdamRun& r : runs) {
        const AdamScalars& s = r.scalars;
        const double factor = s.max_norm / (norm + 1e-6);
        for (size_t e = 0; e < r.n; ++e) {
            float g = factor < 1.0 ? r.G[e] * float(factor) : r.G[e];
            float p = r.P[e];
            if (s.decoupled && e < r.n_decay) p *= s.shrink;
            if (!s.decoupled && e < r.n_decay) g = g + s.weight_decay * p;
            r.M[e] = s.beta1 * r.M[e] + s.one_minus_beta1 * g;
            r.V[e] = s.beta2 * r.V[e] + s.one_minus_beta2 * g * g;
            r.P[e] = p - s.step_size * r.M[e] / (std::sqrt(r.V[e]) / s.sqrt_c2 + s.eps);
        }
    }
}

void sgd_update(Context&, size_t n, float* P, const float* G, float* velocity, const SgdScalars& s,
                const double* stats) {
    if (!std::isfinite(stats[0]) || !std::isfinite(stats[1])) return;
    const double factor = s.max_norm / (std::sqrt(stats[1]) + 1e-6);
    for (size_t e = 0; e < n; ++e) {
        float d = (factor < 1.0 ? G[e] * float(factor) : G[e]) + s.weight_decay * P[e];
        if (s.momentum != 0.0f) {
            velocity[e] = s.started ? s.momentum * velocity[e] + d : d;
            d = s.nesterov ? d + s.momentum * velocity[e] : velocity[e];
        }
        P[e] -= s.lr * d;
    }
}

void fill_zero(Context&, void* data, size_t bytes) { std::memset(data, 0, bytes); }
void scale_pieces(Context&, const std::vector<ScalePiece>& pieces) {
    for (const ScalePiece& p : pieces)
        for (size_t e = 0; e < p.n; ++e) p.x[e] *= p.factor;
}
void zero_pieces(Context&, const std::vector<ScalePiece>& pieces) {
    for (const ScalePiece& p : pieces) std::fill_n(p.x, p.n, 0.0f);
}

void members_to_stacked(Context&, size_t members, size_t pieces, const size_t* table, const float* const* member_blocks,
                        float* stacked) {
    for (size_t p = 0; p < pieces; ++p) {
        const size_t *piece = table + 3 * p, count = piece[2];
        for (size_t i = 0; i < members * count; ++i) stacked[piece[0] + i] = member_blocks[i / count][piece[1] + i % count];
    }
}
void stacked_to_members(Context&, size_t members, size_t pieces, const size_t* table, const float* stacked,
                        float* const* member_blocks, bool accumulate) {
    for (size_t p = 0; p < pieces; ++p) {
        const size_t *piece = table + 3 * p, count = piece[2];
        for (size_t i = 0; i < members * count; ++i) {
            float& to = member_blocks[i / count][piece[1] + i % count];
            to = accumulate ? to + stacked[piece[0] + i] : stacked[piece[0] + i];
        }
    }
}

}  // namespace attnlab::device
