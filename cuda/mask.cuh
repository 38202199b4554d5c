// The mask as the kernels evaluate it: the same rules as AttentionMask::allows
// and key_end in autograd/attention.h, on a MaskView of device pointers.
#pragma once

#include "autograd/device/attention.h"

namespace attnlab::cuda {

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

}  // namespace attnlab::cuda
