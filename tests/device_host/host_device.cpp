// The device interface (autograd/device/context.h, autograd/device/attention.h, autograd/device/kernels.h)
// carried out on the host with plain loops, linked in place of the CPU build's
// stubs into test_device_host: the device step's composition (the flat buffers,
// the stacked projections, every block's wiring, the loss weights, the Adam
// scalars, download and upload) then runs on a machine without a GPU and is
// compared with the autograd model by tests/cuda/test_device_step.cpp, and the
// trainer's device path by tests/cuda/test_device_trainer.cpp. It says
// nothing about the CUDA kernels themselves: those are checked against the same
// references by the same tests in test_cuda on a GPU. This file holds the
// device, its memory and attention (with the ops built on attention's row
// helpers); the other training ops are in host_train_ops.cpp.
//
// Memory handed out is filled with NaN, as a stand-in for uninitialised device
// memory: an op that reads what nothing wrote makes the comparison fail.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/tensor.h"
#include "autograd/device/attention.h"
#include "autograd/device/backend.h"
#include "autograd/device/context.h"
#include "autograd/device/kernels.h"

namespace attnlab::device {

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
void copy_to_device(Context&, const void* host, void* device, size_t bytes) {
    if (bytes > 0) std::memcpy(device, host, bytes);
}
void copy_to_host(Context&, const void* device, void* host, size_t bytes) {
    if (bytes > 0) std::memcpy(host, device, bytes);
}
void copy_device(Context&, const void* from, void* to, size_t bytes) {
    if (bytes > 0) std::memmove(to, from, bytes);
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
    size_t b, i, h;
};

// ALiBi's bias of the row's query and key j (0 without ALiBi).
float alibi_of(const MaskView& mask, const AttentionDims& s, const Row& r, size_t j) {
    return mask.alibi ? float(alibi_bias(r.h, s.H, r.i, j, s.Tq, s.Tk)) : 0.0f;
}

Row row_of(const AttentionDims& s, const float* q, const float* k, const float* v, size_t n) {
    const size_t i = n % s.Tq, h = (n / s.Tq) % s.H, b = n / (s.Tq * s.H), kv = h / (s.H / s.H_kv);
    return {q + n * s.d, k + (b * s.H_kv + kv) * s.Tk * s.d, v + (b * s.H_kv + kv) * s.Tk * s.d_v, b, i, h};
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
        score[j] = scale * dot + alibi_of(mask, s, r, j);
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

// The keep scale of element e of a dropout call (autograd/device/kernels.h's dropout_forward).
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

void attention_scores(Context&, const AttentionDims& s, const float* q, const float* k, const MaskView& mask, float scale,
                      float* scores) {
    for (size_t n = 0; n < s.B * s.H * s.Tq; ++n) {
        const Row r = row_of(s, q, k, k, n);
        float* row = scores + n * s.Tk;
        bool any = false;
        for (size_t j = 0; j < s.Tk; ++j) {
            float dot = 0.0f;
            for (size_t c = 0; c < s.d; ++c) dot += r.q[c] * r.k[j * s.d + c];
            row[j] = scale * dot;
            any = any || allows(mask, r.b, r.i, j, s.Tq, s.Tk);
        }
        for (size_t j = 0; j < s.Tk && any; ++j)
            row[j] = allows(mask, r.b, r.i, j, s.Tq, s.Tk) ? row[j] + alibi_of(mask, s, r, j)
                                                         : -std::numeric_limits<float>::infinity();
    }
}
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
// The packed layout (B, T, n w) <-> heads first (B, n, T, w), for the flash kernel's packed calls.
static std::vector<float> heads_first_copy(const float* packed, size_t B, size_t n, size_t T, size_t w) {
    std::vector<float> out(B * n * T * w);
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < n; ++h)
            for (size_t t = 0; t < T; ++t)
                for (size_t c = 0; c < w; ++c) out[((b * n + h) * T + t) * w + c] = packed[((b * T + t) * n + h) * w + c];
    return out;
}
static void to_packed(const std::vector<float>& heads, float* packed, size_t B, size_t n, size_t T, size_t w) {
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < n; ++h)
            for (size_t t = 0; t < T; ++t)
                for (size_t c = 0; c < w; ++c) packed[((b * T + t) * n + h) * w + c] = heads[((b * n + h) * T + t) * w + c];
}

void flash_attention_forward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                             const MaskView& mask, float scale, float* out_context, float* lse, AttentionLayout layout) {
    if (layout == AttentionLayout::heads_first) return attention_forward(dims, q, k, v, mask, scale, out_context, nullptr, lse);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const std::vector<float> qh = heads_first_copy(q, B, H, Tq, d), kh = heads_first_copy(k, B, H_kv, Tk, d),
                             vh = heads_first_copy(v, B, H_kv, Tk, d_v);
    std::vector<float> context(B * H * Tq * d_v);
    attention_forward(dims, qh.data(), kh.data(), vh.data(), mask, scale, context.data(), nullptr, lse);
    to_packed(context, out_context, B, H, Tq, d_v);
}
void flash_attention_backward(Context&, const AttentionDims& dims, const float* q, const float* k, const float* v,
                              const float*, const float*, const float* dcontext, const MaskView& mask, float scale,
                              float* dq, float* dk, float* dv, float*, AttentionLayout layout) {
    if (layout == AttentionLayout::heads_first)
        return attention_backward(dims, q, k, v, nullptr, &mask, dcontext, scale, dq, dk, dv);
    const auto [B, H, H_kv, Tq, Tk, d, d_v] = dims;
    const std::vector<float> qh = heads_first_copy(q, B, H, Tq, d), kh = heads_first_copy(k, B, H_kv, Tk, d),
                             vh = heads_first_copy(v, B, H_kv, Tk, d_v), dch = heads_first_copy(dcontext, B, H, Tq, d_v);
    std::vector<float> dqh(qh.size()), dkh(kh.size()), dvh(vh.size());
    attention_backward(dims, qh.data(), kh.data(), vh.data(), nullptr, &mask, dch.data(), scale, dqh.data(), dkh.data(),
                       dvh.data());
    to_packed(dqh, dq, B, H, Tq, d);
    to_packed(dkh, dk, B, H_kv, Tk, d);
    to_packed(dvh, dv, B, H_kv, Tk, d_v);
}

// ---- the training ops over attention's pieces (the rest: host_train_ops.cpp) ----

void dropout_forward(Context&, size_t n, const float* x, float p, uint64_t seed, float* y) {
    for (size_t e = 0; e < n; ++e) y[e] = x[e] * keep_scale(seed, e, p);
}
void dropout_backward(Context& context, size_t n, const float* dy, float p, uint64_t seed, float* dx) {
    dropout_forward(context, n, dy, p, seed, dx);
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
            const double score = double(scale * dot + alibi_of(mask, s, r, j));
            moments[h * 3] += 1;
            moments[h * 3 + 1] += score;
            moments[h * 3 + 2] += score * score;
        }
    }
}

}  // namespace attnlab::device
