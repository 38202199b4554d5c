// Neural-network ops with fused forward and backward: softmax, log_softmax,
// masked_fill, embedding, layer_norm, rms_norm, dropout, cross_entropy.
#include <cmath>
#include <numeric>

#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/cpu/kernels.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "autograd/shape.h"
#include "autograd/cpu/threads.h"

namespace attnlab {

Tensor softmax(const Tensor& x, int axis_in) {
    constexpr const char* op = "softmax";
    check_defined(op, x, "input");
    const size_t axis = normalize_axis(op, axis_in, x.shape());
    if (on_device(x)) return softmax_device(op, x, axis, false);
    const AxisSplit s = split_at_axis(x.shape(), axis);
    return dispatch(x.dtype(), [&]<class T>() {
        const T* X = values_of<T>(x).data();
        Array<T> out = make_array<T>(x.shape());
        T* Y = out.data();
        // y_j = exp(x_j - max) / sum_k exp(x_k - max), along the axis (stride `inner`)
        for (size_t o = 0; o < s.outer; ++o)
            for (size_t i = 0; i < s.inner; ++i) {
                const size_t base = o * s.n * s.inner + i;
                T m = X[base];
                for (size_t j = 1; j < s.n; ++j) m = std::max(m, X[base + j * s.inner]);
                T total = 0;
                for (size_t j = 0; j < s.n; ++j) total += Y[base + j * s.inner] = std::exp(X[base + j * s.inner] - m);
                for (size_t j = 0; j < s.n; ++j) Y[base + j * s.inner] /= total;
            }
        return record<T>(op, std::move(out), {x}, [x, s](const Array<T>& g, const Array<T>& y) {
            // dx_j = y_j (g_j - sum_k g_k y_k)
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                for (size_t o = 0; o < s.outer; ++o)
                    for (size_t i = 0; i < s.inner; ++i) {
                        const size_t base = o * s.n * s.inner + i;
                        T dot = 0;
                        for (size_t j = 0; j < s.n; ++j) dot += g.data()[base + j * s.inner] * y.data()[base + j * s.inner];
                        for (size_t j = 0; j < s.n; ++j) {
                            const size_t k = base + j * s.inner;
                            gx.data()[k] = y.data()[k] * (g.data()[k] - dot);
                        }
                    }
                return gx;
            });
        });
    });
}

Tensor log_softmax(const Tensor& x, int axis_in) {
    constexpr const char* op = "log_softmax";
    check_defined(op, x, "input");
    const size_t axis = normalize_axis(op, axis_in, x.shape());
    if (on_device(x)) return softmax_device(op, x, axis, true);
    const AxisSplit s = split_at_axis(x.shape(), axis);
    return dispatch(x.dtype(), [&]<class T>() {
        const T* X = values_of<T>(x).data();
        Array<T> out = make_array<T>(x.shape());
        T* Y = out.data();
        // y_j = x_j - max - log sum_k exp(x_k - max)
        for (size_t o = 0; o < s.outer; ++o)
            for (size_t i = 0; i < s.inner; ++i) {
                const size_t base = o * s.n * s.inner + i;
                T m = X[base];
                for (size_t j = 1; j < s.n; ++j) m = std::max(m, X[base + j * s.inner]);
                T total = 0;
                for (size_t j = 0; j < s.n; ++j) total += std::exp(X[base + j * s.inner] - m);
                const T log_total = m + std::log(total);
                for (size_t j = 0; j < s.n; ++j) Y[base + j * s.inner] = X[base + j * s.inner] - log_total;
            }
        return record<T>(op, std::move(out), {x}, [x, s](const Array<T>& g, const Array<T>& y) {
            // dx_j = g_j - softmax_j sum_k g_k
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                for (size_t o = 0; o < s.outer; ++o)
                    for (size_t i = 0; i < s.inner; ++i) {
                        const size_t base = o * s.n * s.inner + i;
                        T total = 0;
                        for (size_t j = 0; j < s.n; ++j) total += g.data()[base + j * s.inner];
                        for (size_t j = 0; j < s.n; ++j) {
                            const size_t k = base + j * s.inner;
                            gx.data()[k] = g.data()[k] - std::exp(y.data()[k]) * total;
                        }
                    }
                return gx;
            });
        });
    });
}

Tensor masked_fill(const Tensor& x, const Mask& mask, double value) {
    constexpr const char* op = "masked_fill";
    check_defined(op, x, "input");
    if (broadcast_shapes(op, mask.shape, x.shape()) != x.shape())
        fail(op, "mask " + shape_str(mask.shape) + " does not broadcast to input " + shape_str(x.shape()));
    // the mask expanded to x's shape, one byte per element
    std::vector<uint8_t> fill(x.numel());
    {
        auto m = xt::adapt(mask.values, mask.shape);
        Array<uint8_t> expanded = xt::broadcast(m, x.shape());
        std::copy(expanded.begin(), expanded.end(), fill.begin());
    }
    if (on_device(x)) return masked_fill_device(x, fill, value);
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = values_of<T>(x);
        for (size_t k = 0; k < fill.size(); ++k)
            if (fill[k]) out.data()[k] = static_cast<T>(value);
        return record<T>(op, std::move(out), {x}, [x, fill = std::move(fill)](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] {
                Array<T> gx = g;
                for (size_t k = 0; k < fill.size(); ++k)
                    if (fill[k]) gx.data()[k] = T(0);
                return gx;
            });
        });
    });
}

// Where row r's member starts in stacked members' parameters, per rows a member and
// `size` values of one member's (a norm's D, an embedding table's V rows): (r / per)
// size; 0 when unstacked (per = rows), without a division per row.
inline size_t member_offset(size_t r, size_t per, size_t rows, size_t size) { return per == rows ? 0 : r / per * size; }

// body(r, end) for each piece of rows [r0, r1) that lies within one member's
// block of `per` rows (the whole range when unstacked).
template <class Body>
void member_spans(size_t r0, size_t r1, size_t per, Body body) {
    for (size_t r = r0, end; r < r1; r = end) {
        end = std::min(r1, (r / per + 1) * per);
        body(r, end);
    }
}

Tensor embedding(const Tensor& weight, const Indices& ids) {
    constexpr const char* op = "embedding";
    check_defined(op, weight, "weight");
    // (V, D), or stacked members' (K, V, D): ids' leading axis in K equal blocks, block m reading table m
    const bool stacked = weight.dim() == 3;
    if (weight.dim() != 2 && !stacked) fail(op, "weight must be (V,D), got " + shape_str(weight.shape()));
    const size_t members = stacked ? weight.shape()[0] : 1, V = weight.shape()[stacked ? 1 : 0], D = weight.shape().back();
    const size_t per_member = ids.values.size() / std::max<size_t>(members, 1);  // positions of each member
    if (stacked && (ids.shape.empty() || members == 0 || ids.shape[0] % members != 0))
        fail(op, "ids " + shape_str(ids.shape) + ": the leading axis is not a multiple of the " + std::to_string(members) +
                     " members of weight " + shape_str(weight.shape()));
    for (size_t k = 0; k < ids.values.size(); ++k)
        if (ids.values[k] < 0 || static_cast<size_t>(ids.values[k]) >= V)
            fail(op, "index " + std::to_string(ids.values[k]) + " at position " + std::to_string(k) +
                         " out of range for weight " + shape_str(weight.shape()));
    Shape out_shape = ids.shape;
    out_shape.push_back(D);
    if (on_device(weight)) {
        if (!stacked) return embedding_device(weight, ids, out_shape);
        Indices rows = ids;  // stacked: the (K V, D) table's rows, member m's ids offset by m V
        for (size_t k = 0; k < rows.values.size(); ++k)
            rows.values[k] += static_cast<int32_t>(member_offset(k, per_member, rows.values.size(), V));
        return embedding_device(weight, rows, out_shape);
    }
    return dispatch(weight.dtype(), [&]<class T>() {
        const T* W = values_of<T>(weight).data();
        const size_t n = ids.values.size();
        Array<T> out = make_array<T>(out_shape);  // (..., D); position k reads row (its member's V) + id of the (members V, D) table
        for (size_t k = 0; k < n; ++k)
            std::copy_n(W + (member_offset(k, per_member, n, V) + static_cast<size_t>(ids.values[k])) * D, D, out.data() + k * D);
        return record<T>(op, std::move(out), {weight}, [weight, ids, V, per_member, D](const Array<T>& g, const Array<T>&) {
            // scatter-add: each row of the weight receives the sum of the gradients of its uses
            send_grad<T>(weight, [&] {
                Array<T> gw = make_array<T>(weight.shape());
                gw.fill(T(0));
                const size_t n = ids.values.size();
                for (size_t k = 0; k < n; ++k) {
                    T* row = gw.data() + (member_offset(k, per_member, n, V) + static_cast<size_t>(ids.values[k])) * D;
                    const T* src = g.data() + k * D;
                    for (size_t d = 0; d < D; ++d) row[d] += src[d];
                }
                return gw;
            });
        });
    });
}

// The gradient of a norm's weight (D), or of stacked members' (K, D): the sum over
// (each member's) rows of g * xhat, both (rows, D).
template <class T>
Array<T> norm_weight_grad(const Array<T>& g, const T* xhat, size_t rows, size_t D, const Shape& weight_shape) {
    Array<T> gw = make_array<T>(weight_shape);
    const size_t members = weight_shape.size() == 2 ? weight_shape[0] : 1, per = rows / members;
    for (size_t m = 0; m < members; ++m) {
        const T* G = g.data() + m * per * D;
        const T* H = xhat + m * per * D;
        sum_rows_of(per, D, gw.data() + m * D, [G, H](size_t e) { return G[e] * H[e]; });
    }
    return gw;
}

// A norm's weight and bias: (D), or stacked members' (K, D) with the rows in K equal
// blocks. Returns K (1 when not stacked); a shape that is neither fails naming `what`.
size_t norm_members(const char* op, const Tensor& x, const Tensor& p, const char* what) {
    const size_t D = x.shape().back(), rows = x.numel() / std::max<size_t>(D, 1);
    if (p.shape() == Shape{D}) return 1;
    if (p.dim() == 2 && p.shape()[1] == D && p.shape()[0] > 0 && rows % p.shape()[0] == 0) return p.shape()[0];
    fail(op, std::string(what) + " must be (" + std::to_string(D) + "), or (members, " + std::to_string(D) +
                 ") with the rows a multiple of the members, for input " + shape_str(x.shape()) + ", got " + shape_str(p.shape()));
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
    constexpr const char* op = "layer_norm";
    check_defined(op, x, "input");
    if (x.dim() == 0) fail(op, "input must have at least one axis");
    const size_t D = x.shape().back(), rows = x.numel() / std::max<size_t>(D, 1);
    size_t members = 1;
    for (const Tensor* p : {&weight, &bias})
        if (p->defined()) {
            check_same_dtype(op, x, *p);
            members = norm_members(op, x, *p, "weight and bias");
        }
    if (weight.defined() && bias.defined() && weight.shape() != bias.shape())
        fail(op, "weight " + shape_str(weight.shape()) + " and bias " + shape_str(bias.shape()) + " differ");
    const size_t per = rows / members;  // rows of each member; member r / per's weight at W + (r / per) D
    check_same_device(op, {&x, &weight, &bias});
    if (on_device(x)) return layer_norm_device(x, weight, bias, eps, members);
    return dispatch(x.dtype(), [&]<class T>() {
        const T* X = values_of<T>(x).data();
        const T* W = weight.defined() ? values_of<T>(weight).data() : nullptr;
        const T* Bv = bias.defined() ? values_of<T>(bias).data() : nullptr;
        Array<T> out = make_array<T>(x.shape());
        Array<T> xhat = make_array<T>(x.shape());  // (x - mean) / sqrt(var + eps), kept for backward
        std::vector<T> rstd(rows);                 // 1 / sqrt(var + eps) per row
        parallel_for(rows, [&](size_t r0, size_t r1) {
            member_spans(r0, r1, per, [&](size_t r, size_t end) {  // xhat = (x - mean) rstd, out = xhat w + b
                const size_t at = member_offset(r, per, rows, D);
                kernels::layer_norm_rows(X + r * D, W ? W + at : W, Bv ? Bv + at : Bv, static_cast<T>(eps), xhat.data() + r * D,
                                         out.data() + r * D, rstd.data() + r, end - r, D);
            });
        }, std::max<size_t>(1, kElementGrain / std::max<size_t>(D, 1)));
        return record<T>(op, std::move(out), {x, weight, bias},
                         [x, weight, bias, xhat = std::move(xhat), rstd = std::move(rstd), rows, D, per](const Array<T>& g, const Array<T>&) {
            const T* W = weight.defined() ? values_of<T>(weight).data() : nullptr;
            const T* H = xhat.data();
            // dx = rstd (dh - mean(dh) - xhat mean(dh xhat)), dh = g w
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                parallel_for(rows, [&](size_t r0, size_t r1) {
                    member_spans(r0, r1, per, [&](size_t r, size_t end) {
                        kernels::layer_norm_rows_backward(g.data() + r * D, W ? W + member_offset(r, per, rows, D) : W, H + r * D,
                                                          rstd.data() + r, gx.data() + r * D, end - r, D);
                    });
                }, std::max<size_t>(1, kElementGrain / std::max<size_t>(D, 1)));
                return gx;
            });
            // dw = sum over rows of g xhat; db = sum over rows of g
            send_grad<T>(weight, [&] { return norm_weight_grad<T>(g, H, rows, D, weight.shape()); });
            send_grad<T>(bias, [&] {
                Array<T> gb = make_array<T>(bias.shape());
                for (size_t m = 0; m * per < rows; ++m) sum_rows<T>(g.data() + m * per * D, per, D, gb.data() + m * D);
                return gb;
            });
        });
    });
}

// y = x / rms(x) * w, rms(x) = sqrt(mean(x^2) + eps) over the last axis (Zhang & Sennrich 2019):
// LayerNorm without the mean subtraction and without a bias.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
    constexpr const char* op = "rms_norm";
    check_defined(op, x, "input");
    if (x.dim() == 0) fail(op, "input must have at least one axis");
    const size_t D = x.shape().back(), rows = x.numel() / std::max<size_t>(D, 1);
    size_t members = 1;
    if (weight.defined()) {
        check_same_dtype(op, x, weight);
        members = norm_members(op, x, weight, "weight");
    }
    const size_t per = rows / members;  // rows of each member; member r / per's weight at W + (r / per) D
    check_same_device(op, {&x, &weight});
    if (on_device(x)) return rms_norm_device(x, weight, eps, members);
    const size_t grain = std::max<size_t>(1, kElementGrain / std::max<size_t>(D, 1));
    return dispatch(x.dtype(), [&]<class T>() {
        const T* X = values_of<T>(x).data();
        const T* W = weight.defined() ? values_of<T>(weight).data() : nullptr;
        Array<T> out = make_array<T>(x.shape());
        Array<T> xhat = make_array<T>(x.shape());  // x / rms(x), kept for backward
        std::vector<T> rinv(rows);                 // 1 / rms(x) per row
        parallel_for(rows, [&](size_t r0, size_t r1) {
            for (size_t r = r0; r < r1; ++r) {
                const T* xr = X + r * D;
                T* h = xhat.data() + r * D;
                T* o = out.data() + r * D;
                const T* w = W ? W + member_offset(r, per, rows, D) : W;
                rinv[r] = T(1) / std::sqrt(kernels::dot(xr, xr, D) / static_cast<T>(D) + static_cast<T>(eps));
                for (size_t d = 0; d < D; ++d) {
                    h[d] = xr[d] * rinv[r];
                    o[d] = w ? h[d] * w[d] : h[d];
                }
            }
        }, grain);
        return record<T>(op, std::move(out), {x, weight},
                         [x, weight, xhat = std::move(xhat), rinv = std::move(rinv), rows, D, grain, per](const Array<T>& g, const Array<T>&) {
            const T* W = weight.defined() ? values_of<T>(weight).data() : nullptr;
            const T* H = xhat.data();
            // dx = (dh - xhat mean(dh xhat)) / rms(x), dh = g w
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                parallel_for(rows, [&](size_t r0, size_t r1) {
                    for (size_t r = r0; r < r1; ++r) {
                        T* dx = gx.data() + r * D;  // dh, then dx in place
                        const T* gr = g.data() + r * D;
                        const T* hr = H + r * D;
                        const T* w = W ? W + member_offset(r, per, rows, D) : W;
                        for (size_t d = 0; d < D; ++d) dx[d] = w ? gr[d] * w[d] : gr[d];
                        const T mean_dh_h = kernels::dot(dx, hr, D) / static_cast<T>(D);
                        for (size_t d = 0; d < D; ++d) dx[d] = rinv[r] * (dx[d] - hr[d] * mean_dh_h);
                    }
                }, grain);
                return gx;
            });
            // dw = sum over rows of g xhat
            send_grad<T>(weight, [&] { return norm_weight_grad<T>(g, H, rows, D, weight.shape()); });
        });
    });
}

Tensor dropout(const Tensor& x, double p, bool training, Rng& rng) {
    constexpr const char* op = "dropout";
    check_defined(op, x, "input");
    if (!(p >= 0.0 && p <= 1.0)) fail(op, "probability " + std::to_string(p) + " is outside [0, 1]");
    if (!training || p == 0.0) return x;
    if (on_device(x)) return dropout_device(x, p, rng);
    return dispatch(x.dtype(), [&]<class T>() {
        // keep_scale is 1/(1-p) where kept, 0 where dropped (all dropped when p = 1)
        Array<T> keep_scale = make_array<T>(x.shape());
        const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
        for (T& k : keep_scale) k = rng.bernoulli(p) ? T(0) : scale;
        Array<T> out = values_of<T>(x) * keep_scale;
        return record<T>(op, std::move(out), {x}, [x, keep_scale = std::move(keep_scale)](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] { return Array<T>(g * keep_scale); });
        });
    });
}

namespace {

// Rows [k0, k1) of logits Z (positions, C): each counted row's softmax into
// probs, and the sum over them of -log softmax(z)[t], in row order.
template <class T>
T cross_entropy_rows(const T* Z, const Indices& targets, const Mask* loss_mask, size_t k0, size_t k1, size_t C, T* probs) {
    T total = 0;
    for (size_t k = k0; k < k1; ++k) {
        if (loss_mask && !(*loss_mask)(k)) continue;
        const T* z = Z + k * C;
        const T m = kernels::max(z, C);
        T* __restrict p = probs + k * C;  // restrict: the division vectorises
        const T sum_exp = kernels::exp_shifted(z, m, p, C);
        for (size_t c = 0; c < C; ++c) p[c] /= sum_exp;
        // -log softmax(z)[t] = log sum exp(z - m) - (z_t - m)
        total += std::log(sum_exp) - (z[targets.values[k]] - m);
    }
    return total;
}

// Its gradient on rows [k0, k1): d loss / d z = (softmax(z) - onehot(t)) scale on
// counted rows (scale: the incoming gradient over the count), 0 elsewhere.
template <class T>
void cross_entropy_rows_grad(const T* __restrict probs, const Indices& targets, const Mask* loss_mask, size_t k0, size_t k1, size_t C,
                             T scale, T* __restrict gz) {
    for (size_t e = k0 * C; e < k1 * C; ++e) gz[e] = probs[e] * scale;
    for (size_t k = k0; k < k1; ++k)
        if (!loss_mask || (*loss_mask)(k)) gz[k * C + static_cast<size_t>(targets.values[k])] -= scale;
}

// Every target of a counted position is a class of C.
void check_targets(const char* op, const Indices& targets, const Mask* loss_mask, size_t C) {
    for (size_t k = 0; k < targets.values.size(); ++k) {
        if (loss_mask && !(*loss_mask)(k)) continue;
        if (targets.values[k] < 0 || static_cast<size_t>(targets.values[k]) >= C)
            fail(op, "target " + std::to_string(targets.values[k]) + " at position " + std::to_string(k) +
                         " out of range for " + std::to_string(C) + " classes");
    }
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Indices& targets, const Mask& loss_mask) {
    constexpr const char* op = "cross_entropy";
    check_defined(op, logits, "logits");
    if (logits.dim() < 1) fail(op, "logits must have a class axis");
    const size_t C = logits.shape().back();
    const Shape positions_shape(logits.shape().begin(), logits.shape().end() - 1);
    if (targets.shape != positions_shape)
        fail(op, "targets " + shape_str(targets.shape) + " do not match logits " + shape_str(logits.shape()));
    const bool masked = !loss_mask.values.empty() || !loss_mask.shape.empty();
    if (masked && loss_mask.shape != positions_shape)
        fail(op, "loss mask " + shape_str(loss_mask.shape) + " does not match targets " + shape_str(targets.shape));
    const Mask* mask = masked ? &loss_mask : nullptr;
    check_targets(op, targets, mask, C);
    const size_t positions = targets.values.size();
    size_t counted = 0;
    for (size_t k = 0; k < positions; ++k) counted += !masked || loss_mask(k);
    if (on_device(logits)) return cross_entropy_device(logits, targets, loss_mask, counted);
    return dispatch(logits.dtype(), [&]<class T>() {
        // probs (positions, C): softmax of each counted row, kept for the backward
        Array<T> probs = make_array<T>({positions, C});
        probs.fill(T(0));
        const T total = cross_entropy_rows<T>(values_of<T>(logits).data(), targets, mask, 0, positions, C, probs.data());
        const T inv_count = counted ? T(1) / static_cast<T>(counted) : T(0);
        Array<T> out = make_array<T>({});
        out() = total * inv_count;
        return record<T>(op, std::move(out), {logits},
                         [logits, targets, loss_mask, masked, probs = std::move(probs), inv_count, C, positions](const Array<T>& g, const Array<T>&) {
            send_grad<T>(logits, [&] {
                Array<T> gz = make_array<T>(logits.shape());
                cross_entropy_rows_grad<T>(probs.data(), targets, masked ? &loss_mask : nullptr, 0, positions, C, g() * inv_count, gz.data());
                return gz;
            });
        });
    });
}

Tensor cross_entropy_members(const Tensor& logits, const Indices& targets, const std::vector<size_t>& rows) {
    constexpr const char* op = "cross_entropy_members";
    check_defined(op, logits, "logits");
    if (logits.dim() != 2) fail(op, "logits must be (positions, classes), got " + shape_str(logits.shape()));
    const size_t N = logits.size(0), C = logits.size(1), K = rows.size();
    if (targets.shape != Shape{N}) fail(op, "targets " + shape_str(targets.shape) + " do not match logits " + shape_str(logits.shape()));
    if (std::accumulate(rows.begin(), rows.end(), size_t{0}) != N)
        fail(op, "the members' rows add up to " + std::to_string(std::accumulate(rows.begin(), rows.end(), size_t{0})) + ", not the " +
                     std::to_string(N) + " positions");
    check_targets(op, targets, nullptr, C);
    if (on_device(logits)) return cross_entropy_members_device(logits, targets, rows);
    return dispatch(logits.dtype(), [&]<class T>() {
        Array<T> probs = make_array<T>({N, C});
        probs.fill(T(0));
        Array<T> out = make_array<T>({K});
        std::vector<T> inv_counts(K);
        for (size_t m = 0, first = 0; m < K; first += rows[m], ++m) {  // each member as cross_entropy of its rows alone
            const T total = cross_entropy_rows<T>(values_of<T>(logits).data(), targets, nullptr, first, first + rows[m], C, probs.data());
            inv_counts[m] = rows[m] ? T(1) / static_cast<T>(rows[m]) : T(0);
            out(m) = total * inv_counts[m];
        }
        return record<T>(op, std::move(out), {logits},
                         [logits, targets, rows, probs = std::move(probs), inv_counts = std::move(inv_counts), C](const Array<T>& g, const Array<T>&) {
            send_grad<T>(logits, [&] {
                Array<T> gz = make_array<T>(logits.shape());
                for (size_t m = 0, first = 0; m < rows.size(); first += rows[m], ++m)
                    cross_entropy_rows_grad<T>(probs.data(), targets, nullptr, first, first + rows[m], C, g(m) * inv_counts[m], gz.data());
                return gz;
            });
        });
    });
}

void add_nn_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(15);
    auto in = [&](const Shape& s, double lo = -1.0, double hi = 1.0) { return gradcheck_input(rng, s, lo, hi); };
    using V = const std::vector<Tensor>&;
    cases.push_back({"softmax", "last axis of (2,3,4)", {in({2, 3, 4}, -2, 2)}, [](V t) { return softmax(t[0], -1); }});
    cases.push_back({"softmax", "middle axis of (2,3,4)", {in({2, 3, 4}, -2, 2)}, [](V t) { return softmax(t[0], 1); }});
    cases.push_back({"log_softmax", "last axis of (3,5)", {in({3, 5}, -2, 2)}, [](V t) { return log_softmax(t[0], -1); }});
    cases.push_back({"log_softmax", "axis 0 of (4,2)", {in({4, 2}, -2, 2)}, [](V t) { return log_softmax(t[0], 0); }});
    const Mask upper({3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0});
    cases.push_back({"masked_fill", "(3,3) upper triangle, then softmax", {in({3, 3})},
                     [upper](V t) { return softmax(masked_fill(t[0], upper, -1e9), -1); }});
    const Mask row({1, 4}, {1, 0, 0, 1});
    cases.push_back({"masked_fill", "broadcast mask (1,4) over (2,4)", {in({2, 4})},
                     [row](V t) { return masked_fill(t[0], row, 0.5); }});
    const Indices ids({2, 3}, {0, 2, 2, 4, 1, 0});
    cases.push_back({"embedding", "(5,3) weight, ids (2,3) with repeats", {in({5, 3})},
                     [ids](V t) { return embedding(t[0], ids); }});
    cases.push_back({"layer_norm", "(2,3,4) with weight and bias", {in({2, 3, 4}), in({4}, 0.5, 1.5), in({4})},
                     [](V t) { return layer_norm(t[0], t[1], t[2]); }});
    cases.push_back({"layer_norm", "(3,5) without affine", {in({3, 5})},
                     [](V t) { return layer_norm(t[0], Tensor(), Tensor()); }});
    cases.push_back({"rms_norm", "(2,3,4) with weight", {in({2, 3, 4}), in({4}, 0.5, 1.5)},
                     [](V t) { return rms_norm(t[0], t[1]); }});
    cases.push_back({"embedding", "stacked (2,5,3) weight, ids (4,2) in 2 members", {in({2, 5, 3})},
                     [](V t) { return embedding(t[0], Indices({4, 2}, {0, 4, 4, 1, 2, 2, 0, 3})); }});
    cases.push_back({"layer_norm", "stacked: (4,2,3) with weight and bias (2,3)", {in({4, 2, 3}), in({2, 3}, 0.5, 1.5), in({2, 3})},
                     [](V t) { return layer_norm(t[0], t[1], t[2]); }});
    cases.push_back({"rms_norm", "stacked: (6,4) with weight (3,4)", {in({6, 4}), in({3, 4}, 0.5, 1.5)},
                     [](V t) { return rms_norm(t[0], t[1]); }});
    cases.push_back({"rms_norm", "(3,5) without weight", {in({3, 5})}, [](V t) { return rms_norm(t[0], Tensor()); }});
    cases.push_back({"dropout", "p=0.5, fixed seed, train", {in({4, 4})}, [](V t) {
        Rng r(99);
        return dropout(t[0], 0.5, true, r);
    }});
    const Indices targets({2, 3}, {1, 0, 3, 2, 2, 0});
    const Mask counted({2, 3}, {1, 1, 0, 1, 0, 1});
    cases.push_back({"cross_entropy", "(2,3,4) logits with a loss mask", {in({2, 3, 4}, -2, 2)},
                     [targets, counted](V t) { return cross_entropy(t[0], targets, counted); }});
    cases.push_back({"cross_entropy", "(6,4) logits, every position", {in({6, 4}, -2, 2)},
                     [targets](V t) { return cross_entropy(t[0], Indices({6}, targets.values)); }});
    cases.push_back({"cross_entropy_members", "(6,4) logits in members of 2, 0, 3 and 1 rows", {in({6, 4}, -2, 2)},
                     [targets](V t) { return cross_entropy_members(t[0], Indices({6}, targets.values), {2, 0, 3, 1}); }});
}

}  // namespace attnlab
