// Reductions across the 32 lanes of a warp (every lane gets the result), and
// the maximum every kernel reduces with.
#pragma once

namespace attnlab::device {

// max(a, b), NaN if either is NaN. fmaxf would drop the NaN (fmaxf(NaN, x) = x),
// so a row of NaN scores would look like a row without eligible keys; this way
// a NaN score gives its row a NaN output, as on the CPU (autograd/attention.h).
__device__ __forceinline__ float max_or_nan(float a, float b) { return a > b || a != a ? a : b; }

__device__ __forceinline__ float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = max_or_nan(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

}  // namespace attnlab::device
