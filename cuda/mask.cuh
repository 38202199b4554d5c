// The mask as the kernels evaluate it: the same rules as AttentionMask::allows
// and key_end in autograd/attention.h, on a MaskView of device pointers.
#pragma once

#include "autograd/device/attention.h"

namespace attnlab::device {

// Keys j >= mask_key_end(...) are ineligible by the causal and padding parts.
__device__ __forceinline__ int mask_key_end(const MaskView& mask, int b, int i, int Tq, int Tk) {
    int end = Tk;
    if (mask.causal) end = i + Tk >= Tq ? min(Tk, i + Tk - Tq + 1) : 0;  // bottom-right aligned
    if (mask.key_lengths != nullptr) end = min(end, mask.key_lengths[b]);
    return end;
}

__device__ __forceinline__ bool mask_allows(const MaskView& mask, int b, int i, int j, int Tq, int Tk) {
    if (mask.causal && j + Tq > i + Tk) return false;  // j > i + (Tk - Tq)
    if (mask.key_lengths != nullptr && j >= mask.key_lengths[b]) return false;
    if (mask.eligible != nullptr) {
        const size_t offset = mask.eligible_per_batch ? size_t(b) * Tq * Tk : 0;
        if (mask.eligible[offset + size_t(i) * Tk + j] == 0) return false;
    }
    return true;
}

// ALiBi's slope of query head h (0 without ALiBi): once per thread, not per score.
__device__ __forceinline__ float alibi_slope_of(const MaskView& mask, int h, int H) {
    return mask.alibi ? float(alibi_slope(size_t(h), size_t(H))) : 0.0f;
}
// The bias of query i and key j: -slope |i + Tk - Tq - j| (autograd/attention.h, alibi_bias).
__device__ __forceinline__ float alibi_term(float slope, int i, int j, int Tq, int Tk) {
    return -slope * fabsf(float(i + Tk - Tq - j));
}

}  // namespace attnlab::device
