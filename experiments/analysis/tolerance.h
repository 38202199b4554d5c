// How close two float32 computations of the same maths must agree: the one rule
// the audit's live tests and generate --check-cache share.
#pragma once

#include <algorithm>

namespace attnlab {

// float32 results compared with float32 results computed in another order (or
// with a double reference): 1e-5 relative to the size of what is compared (at
// least 1), so that logits near 13 get 1.3e-4 and probabilities get 1e-5.
inline double f32_tolerance(double magnitude, double relative = 1e-5) { return relative * std::max(1.0, magnitude); }
// Computations that read exactly the same numbers: only rounding-free identity
// is expected; this margin only keeps a different BLAS kernel from failing them.
inline double same_numbers_tolerance(double magnitude) { return 1e-6 * std::max(1.0, magnitude); }

}  // namespace attnlab
