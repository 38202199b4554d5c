// The device interface (cuda/context.h, cuda/attention.h, cuda/train_ops.h)
// carried out on the host with plain loops, linked in place of the CPU build's
// stubs into test_device_host: the device step's composition (the flat buffers,
// the stacked projections, every block's wiring, the loss weights, the Adam
// scalars, download and upload) then runs on a machine without a GPU and is
// compared with the autograd model by tests/cuda/test_device_step.cpp, and the
// trainer's device path by tests/cuda/test_device_trainer.cpp. It says
// nothing about the CUDA kernels themselves: those are checked against the same
// references by the same tests in test_cuda on a GPU.
//
// Memory handed out is filled with NaN, as a stand-in for uninitialised device
// memory: an op that reads what nothing wrote makes the comparison fail.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/tensor.h"
#include "cuda/attention.h"
#include "cuda/backend.h"
#include "cuda/context.h"
#include "cuda/train_ops.h"

namespace attnlab::cuda {

// ---- the device: one, the host ----

bool built_with_cuda() { return false; }

DeviceInfo probe() {
    DeviceInfo info;
    info.available = true;
    info.device_count = 1;
    info.name = "the host (test_device_host)";
    return info;
}

void require_device(const std::string&) {}

// ---- context and memory ----

DeviceBuffer DeviceAllocator::allocate(size_t bytes) {
    if (bytes == 0) return {};
    const size_t rounded = rounded_size(bytes);
    void* block = std::malloc(rounded);
    if (block == nullptr) fail("cuda", "host device: out of memory");
    std::memset(block, 0xff, rounded);  // every float a NaN
    stats_.bytes_in_use += rounded;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    ++stats_.device_allocations;
    return DeviceBuffer(this, block, bytes);
}
void DeviceAllocator::recycle(void* block, size_t bytes) {
    stats_.bytes_in_use -= rounded_size(bytes);
    std::free(block);
}
void DeviceAllocator::empty_cache() {}
DeviceAllocator::~DeviceAllocator() = default;

Context::Context(int device) : device_(device) {}
Context::~Context() = default;
void Context::synchronize(const char*) const {}

DeviceBuffer to_device(Context& context, const void* values, size_t bytes) {
    DeviceBuffer buffer = context.allocate(bytes);
    if (bytes > 0) std::memcpy(buffer.data(), values, bytes);
    return buffer;
}
DeviceBuffer to_device(Context& context, const std::vector<float>& values) {
    return to_device(context, values.data(), values.size() * sizeof(float));
}
void to_host(Context&, const DeviceBuffer& buffer, void* values, size_t bytes) {
    if (bytes > 0) std::memcpy(values, buffer.data(), bytes);
}
std::vector<float> to_host_floats(Context& context, const DeviceBuffer& buffer, size_t count) {
    std::vector<float> values(count);
    to_host(context, buffer, values.data(), count * sizeof(float));
    return values;
}

// ---- attention: one (b, h, i) row at a time ----

namespace {

bool allows(const MaskView& mask, size_t b, size_t i, size_t j, size_t Tq, size_t Tk) {
    if (mask.causal && j + Tq > i + Tk) return false;
    if (mask.key_lengths != nullptr && j >= size_t(mask.key_lengths[b])) return false;
    if (mask.eligible != nullptr) {
        const size_t offset = mask.eligible_per_batch ? b * Tq * Tk : 0;
        if (mask.eligible[offset + i * Tk + j] == 0) return false;
    }
    return true;
}

struct Row {
    const float *q, *k, *v;  // q (d); k, v of the row's K/V head, (Tk, d), (Tk, d_v)
    size_t b, i;
};

Row row_of(const AttentionDims& s, const float* q, const float* k, const float* v, size_t n) {
    const size_t i = n % s.Tq, h = (n / s.Tq) % s.H, b = n / (s.Tq * s.H), kv = h / (s.H / s.H_kv);
    return {q + n * s.d, k + (b * s.H_kv + kv) * s.Tk * s.d, v + (b * s.H_kv + kv) * s.Tk * s.d_v, b, i};
}

// Softmax over the eligible keys of one row (zeros elsewhere); returns the log-sum-exp (-inf: none eligible).
float row_weights(const AttentionDims& s, const Row& r, const MaskView& mask, float scale, std::vector<float>& p) {
    p.assign(s.Tk, 0.0f);
    float top = -std::numeric_limits<float>::infinity();
    std::vector<float> score(s.Tk, 0.0f);
    for (size_t j = 0; j < s.Tk; ++j) {
        if (!allows(mask, r.b, r.i, j, s.Tq, s.Tk)) continue;
        float dot = 0.0f;
        for (size_t c = 0; c < s.d; ++c) dot += r.q[c] * r.k[j * s.d + c];
        score[j] = scale * dot;
        top = top > score[j] || std::isnan(top) ? top : score[j];  // NaN wins, as in the kernels' max_or_nan
    }
    if (top == -std::numeric_limits<float>::infinity()) return top;
    float total = 0.0f;
    for (size_t j = 0; j < s.Tk; ++j)
        if (allows(mask, r.b, r.i, j, s.Tq, s.Tk)) total += std::exp(score[j] - top);
    for (size_t j = 0; j < s.Tk; ++j)
        if (allows(mask, r.b, r.i, j, s.Tq, s.Tk)) p[j] = std::exp(score[j] - top) / total;
    return top + std::log(total);
}

// The keep scale of element e of a dropout call (cuda/train_ops.h's dropout_forward).
float keep_scale(uint64_t seed, size_t e, float p) {
    const float u = float(mix_seed(seed, e) >> 40) * (1.0f / 16777216.0f);
    return u < p ? 0.0f : (p < 1.0f ? 1.0f / (1.0f - p) : 0.0f);
}

void attention_forward(const AttentionDims& s, const float* q, const float* k, const float* v, const MaskView& mask,
                       float scale, float* context, float* weights, float* lse, const WeightDropout& dropout = {}) {
    std::vector<float> p;
    for (size_t n = 0; n < s.B * s.H * s.Tq; ++n) {
        const Row r = row_of(s, q, k, v, n);
        const float row_lse = row_weights(s, r, mask, scale, p);
        if (weights != nullptr) std::copy(p.begin(), p.end(), weights + n * s.Tk);
        if (dropout.p > 0)
            for (size_t j = 0; j < s.Tk; ++j) {
                p[j] *= keep_scale(dropout.seed, n * s.Tk + j, dropout.p);
                dropout.dropped[n * s.Tk + j] = p[j];
            }
        for (size_t c = 0; c < s.d_v; ++c) {
            float sum = 0.0f;
            for (size_t j = 0; j < s.Tk; ++j) sum += p[j] * r.v[j * s.d_v + c];
            context[n * s.d_v + c] = sum;
        }
        if (lse != nullptr) lse[n] = row_lse;
    }
}

// From each row's weights (given, or recomputed from the mask): dq, dk, dv overwritten.
void attention_backward(const AttentionDims& s, const float* q, const float* k, const float* v, const float* weights,
                        const MaskView* mask, const float* dcontext, float scale, float* dq, float* dk, float* dv,
                        const WeightDropout& dropout = {}) {
    std::fill(dk, dk + s.B * s.H_kv * s.Tk * s.d, 0.0f);
    std::fill(dv, dv + s.B * s.H_kv * s.Tk * s.d_v, 0.0f);
    std::vector<float> p;
    for (size_t n = 0; n < s.B * s.H * s.Tq; ++n) {
        const Row r = row_of(s, q, k, v, n);
        if (weights != nullptr) p.assign(weights + n * s.Tk, weights + (n + 1) * s.Tk);
        else row_weights(s, r, *mask, scale, p);
        const float* dc = dcontext + n * s.d_v;
        std::vector<float> dp(s.Tk, 0.0f), used(p);  // used: the weights the context was made of
        for (size_t j = 0; j < s.Tk && dropout.p > 0; ++j) {
            used[j] = dropout.dropped[n * s.Tk + j];
        }
        float dot = 0.0f;
        for (size_t j = 0; j < s.Tk; ++j) {
            for (size_t c = 0; c < s.d_v; ++c) dp[j] += dc[c] * r.v[j * s.d_v + c];
            if (dropout.p > 0) dp[j] *= keep_scale(dropout.seed, n * s.Tk + j, dropout.p);
            dot += p[j] * dp[j];
        }
        float* dqr = dq + n * s.d;
        std::fill(dqr, dqr + s.d, 0.0f);
        float* dkr = dk + (r.k - k);
        float* dvr = dv + (r.v - v);
        for (size_t j = 0; j < s.Tk; ++j) {
            const float ds = scale * p[j] * (dp[j] - dot);
            for (size_t c = 0; c < s.d; ++c) {
                dqr[c] += ds * r.k[j * s.d + c];
                dkr[j * s.d + c] += ds * r.q[c];
            }
            for (size_t c = 0; c < s.d_v; ++c) dvr[j * s.d_v + c] += used[j] * dc[c];
        }
    }
}

}  // namespace

void dense_attention_forward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                             const MaskView& mask, float scale, float* out_context, float* weights,
                             const WeightDropout& dropout) {
    attention_forward(dims, q, k, v, mask, scale, out_context, weights, nullptr, dropout);
}
void dense_attention_backward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                              const float* weights, const float* dcontext, float scale, float* dq, float* dk,
                              float* dv, float*, const WeightDropout& dropout, const MaskView&) {
    attention_backward(dims, q, k, v, weights, nullptr, dcontext, scale, dq, dk, dv, dropout);
}
void flash_attention_forward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                             const MaskView& mask, float scale, float* out_context, float* lse) {
    attention_forward(dims, q, k, v, mask, scale, out_context, nullptr, lse);
}
void flash_attention_backward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                              const float*, const float*, const float* dcontext, const MaskView& mask, float scale,
                              float* dq, float* dk, float* dv, float*) {
    attention_backward(dims, q, k, v, nullptr, &mask, dcontext, scale, dq, dk, dv);
}

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
                        float eps, float* y, float* mean, float* rstd) {
    for (size_t r = 0; r < rows; ++r) {
        const float* xr = x + r * D;
        float mu = 0.0f, var = 0.0f;
        for (size_t c = 0; c < D; ++c) mu += xr[c];
        mu /= float(D);
        for (size_t c = 0; c < D; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        const float inv = 1.0f / std::sqrt(var / float(D) + eps);
        for (size_t c = 0; c < D; ++c) y[r * D + c] = (xr[c] - mu) * inv * gamma[c] + beta[c];
        mean[r] = mu;
        rstd[r] = inv;
    }
}
void layer_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx, bool accumulate,
                         float* dgamma, float* dbeta, float* scratch) {
    for (size_t r = 0; r < rows; ++r) {
        float a = 0.0f, b = 0.0f;
        for (size_t c = 0; c < D; ++c) {
            const float xhat = (x[r * D + c] - mean[r]) * rstd[r], dxhat = dy[r * D + c] * gamma[c];
            a += dxhat;
            b += dxhat * xhat;
        }
        a /= float(D);
        b /= float(D);
        for (size_t c = 0; c < D; ++c) {
            const float xhat = (x[r * D + c] - mean[r]) * rstd[r], dxhat = dy[r * D + c] * gamma[c];
            const float g = rstd[r] * (dxhat - a - xhat * b);
            dx[r * D + c] = accumulate ? dx[r * D + c] + g : g;
            scratch[r * D + c] = dy[r * D + c] * xhat;
        }
    }
    column_sums(context, rows, D, scratch, dgamma, true);
    column_sums(context, rows, D, dy, dbeta, true);
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

void dropout_forward(Context&, size_t n, const float* x, float p, uint64_t seed, float* y) {
    for (size_t e = 0; e < n; ++e) y[e] = x[e] * keep_scale(seed, e, p);
}
void dropout_backward(Context& context, size_t n, const float* dy, float p, uint64_t seed, float* dx) {
    dropout_forward(context, n, dy, p, seed, dx);
}

void add_into(Context&, size_t n, const float* a, float* out) {
    for (size_t e = 0; e < n; ++e) out[e] += a[e];
}
void column_sums(Context&, size_t rows, size_t cols, const float* x, float* out, bool accumulate) {
    for (size_t c = 0; c < cols; ++c) {
        float sum = 0.0f;
        for (size_t r = 0; r < rows; ++r) sum += x[r * cols + c];
        out[c] = accumulate ? out[c] + sum : sum;
    }
}

void split_qkv(Context&, size_t B, size_t T, size_t H, size_t H_kv, size_t d, const float* qkv, float* q, float* k,
               float* v) {
    const size_t W = (H + 2 * H_kv) * d;
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < T; ++t)
            for (size_t i = 0; i < d; ++i) {
                const float* row = qkv + (b * T + t) * W;
                for (size_t h = 0; h < H; ++h) q[((b * H + h) * T + t) * d + i] = row[h * d + i];
                for (size_t h = 0; h < H_kv; ++h) {
                    k[((b * H_kv + h) * T + t) * d + i] = row[(H + h) * d + i];
                    v[((b * H_kv + h) * T + t) * d + i] = row[(H + H_kv + h) * d + i];
                }
            }
}
void merge_qkv(Context&, size_t B, size_t T, size_t H, size_t H_kv, size_t d, const float* dq, const float* dk,
               const float* dv, float* dqkv) {
    const size_t W = (H + 2 * H_kv) * d;
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < T; ++t)
            for (size_t i = 0; i < d; ++i) {
                float* row = dqkv + (b * T + t) * W;
                for (size_t h = 0; h < H; ++h) row[h * d + i] = dq[((b * H + h) * T + t) * d + i];
                for (size_t h = 0; h < H_kv; ++h) {
                    row[(H + h) * d + i] = dk[((b * H_kv + h) * T + t) * d + i];
                    row[(H + H_kv + h) * d + i] = dv[((b * H_kv + h) * T + t) * d + i];
                }
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

void score_moments(Context&, const AttentionDims& s, const float* q, const float* k, const MaskView& mask, float scale,
                   double* moments) {
    for (size_t n = 0; n < s.B * s.H * s.Tq; ++n) {
        const Row r = row_of(s, q, k, k, n);
        const size_t h = (n / s.Tq) % s.H;
        for (size_t j = 0; j < s.Tk; ++j) {
            if (!allows(mask, r.b, r.i, j, s.Tq, s.Tk)) continue;
            float dot = 0.0f;
            for (size_t c = 0; c < s.d; ++c) dot += r.q[c] * r.k[j * s.d + c];
            const double score = double(scale * dot);
            moments[h * 3] += 1;
            moments[h * 3 + 1] += score;
            moments[h * 3 + 2] += score * score;
        }
    }
}

void sum_to_double(Context&, size_t n, const float* x, bool squares, double* out, double*) {
    double total = 0.0;
    for (size_t e = 0; e < n; ++e) total += squares ? double(x[e]) * double(x[e]) : double(x[e]);
    *out = total;
}

void linear_forward(Context&, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b, float* y) {
    for (size_t m = 0; m < M; ++m)
        for (size_t n = 0; n < N; ++n) {
            float sum = b != nullptr ? b[n] : 0.0f;
            for (size_t k = 0; k < K; ++k) sum += x[m * K + k] * W[n * K + k];
            y[m * N + n] = sum;
        }
}
void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db) {
    if (dx != nullptr)
        for (size_t m = 0; m < M; ++m)
            for (size_t k = 0; k < K; ++k) {
                float sum = 0.0f;
                for (size_t n = 0; n < N; ++n) sum += dy[m * N + n] * W[n * K + k];
                dx[m * K + k] = accumulate ? dx[m * K + k] + sum : sum;
            }
    for (size_t n = 0; n < N; ++n)
        for (size_t k = 0; k < K; ++k) {
            float sum = 0.0f;
            for (size_t m = 0; m < M; ++m) sum += dy[m * N + n] * x[m * K + k];
            dW[n * K + k] += sum;
        }
    if (db != nullptr) column_sums(context, M, N, dy, db, true);
}

void adam_update(Context&, size_t n, size_t n_decay, float* P, const float* G, float* M, float* V,
                 const AdamScalars& s, const double* stats) {
    if (!std::isfinite(stats[0]) || !std::isfinite(stats[1])) return;
    const double factor = s.max_norm / (std::sqrt(stats[1]) + 1e-6);
    for (size_t e = 0; e < n; ++e) {
        float g = factor < 1.0 ? G[e] * float(factor) : G[e];
        float p = P[e];
        if (s.decoupled && e < n_decay) p *= s.shrink;
        if (!s.decoupled && e < n_decay) g = g + s.weight_decay * p;
        M[e] = s.beta1 * M[e] + s.one_minus_beta1 * g;
        V[e] = s.beta2 * V[e] + s.one_minus_beta2 * g * g;
        P[e] = p - s.step_size * M[e] / (std::sqrt(V[e]) / s.sqrt_c2 + s.eps);
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

}  // namespace attnlab::cuda
