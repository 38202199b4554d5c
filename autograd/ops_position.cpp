// Positions inside attention: rotary embeddings (RoPE, Su et al. 2021), one op
// with its backward and gradcheck cases, both devices.
//
// Convention: split halves (GPT-NeoX, Hugging Face's rotate_half, as the
// PyTorch bridge does it): within each head of width d the pairs are
// (c, c + d/2) for c < d/2, rotated by the angle p theta_c, theta_c = base^(-2c/d),
// at position p:
//   y_c = x_c cos - x_{c+d/2} sin,   y_{c+d/2} = x_{c+d/2} cos + x_c sin.
// The backward rotates the gradient by -p theta_c.
#include <cmath>

#include "autograd/device_ops.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/rng.h"

namespace attnlab {

namespace {

// cos and sin of (offset + t) theta_c, (T, d/2), in double
struct Angles {
    std::vector<double> cos, sin;
};
Angles angles_of(size_t T, size_t d, size_t offset, double base) {
    const size_t half = d / 2;
    Angles a{std::vector<double>(T * half), std::vector<double>(T * half)};
    for (size_t t = 0; t < T; ++t)
        for (size_t c = 0; c < half; ++c) {
            const double angle = static_cast<double>(offset + t) * std::pow(base, -2.0 * static_cast<double>(c) / static_cast<double>(d));
            a.cos[t * half + c] = std::cos(angle);
            a.sin[t * half + c] = std::sin(angle);
        }
    return a;
}

// y = R(sign * angle) x over x (B, T, n d), in place allowed
template <class T>
void rotate(const T* x, T* y, size_t B, size_t steps, size_t n, size_t d, const Angles& a, double sign) {
    const size_t half = d / 2;
    for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < steps; ++t)
            for (size_t h = 0; h < n; ++h) {
                const size_t row = ((b * steps + t) * n + h) * d;
                for (size_t c = 0; c < half; ++c) {
                    const T cs = static_cast<T>(a.cos[t * half + c]), sn = static_cast<T>(sign * a.sin[t * half + c]);
                    const T lo = x[row + c], hi = x[row + c + half];
                    y[row + c] = lo * cs - hi * sn;
                    y[row + c + half] = hi * cs + lo * sn;
                }
            }
}

}  // namespace

Tensor rotary(const Tensor& x, size_t heads, size_t offset, double base) {
    constexpr const char* op = "rotary";
    check_defined(op, x, "input");
    if (x.dim() != 3 || heads == 0 || x.size(2) % heads != 0 || (x.size(2) / heads) % 2 != 0)
        fail(op, "input " + shape_str(x.shape()) + " is not (B, T, " + std::to_string(heads) +
                     " d) with an even head width d");
    if (!(base > 1.0) || !std::isfinite(base)) fail(op, "base must be a finite number above 1, got " + std::to_string(base));
    const size_t B = x.size(0), steps = x.size(1), d = x.size(2) / heads;
    if (on_device(x)) return rotary_device(x, heads, offset, base);
    const Angles a = angles_of(steps, d, offset, base);
    return dispatch(x.dtype(), [&]<class T>() {
        Array<T> out = make_array<T>(x.shape());
        rotate<T>(values_of<T>(x).data(), out.data(), B, steps, heads, d, a, 1.0);
        return record<T>(op, std::move(out), {x}, [x, a, B, steps, heads, d](const Array<T>& g, const Array<T>&) {
            send_grad<T>(x, [&] {
                Array<T> gx = make_array<T>(x.shape());
                rotate<T>(g.data(), gx.data(), B, steps, heads, d, a, -1.0);  // R^T = R(-angle)
                return gx;
            });
        });
    });
}

void add_position_cases(std::vector<GradcheckCase>& cases) {
    Rng rng(17);
    using V = const std::vector<Tensor>&;
    cases.push_back({"rotary", "(2,3,2 x 4), offset 0", {gradcheck_input(rng, {2, 3, 8})},
                     [](V t) { return rotary(t[0], 2, 0, 10000.0); }});
    cases.push_back({"rotary", "(1,2,1 x 6), offset 5, base 100", {gradcheck_input(rng, {1, 2, 6})},
                     [](V t) { return rotary(t[0], 1, 5, 100.0); }});
}

}  // namespace attnlab
