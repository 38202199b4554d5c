// An AttentionMask copied to the device. Plain C++ over the Context interface,
// compiled in both builds (without CUDA no Context exists to call it with).
#include <cstdint>
#include <vector>

#include "autograd/device/attention.h"

namespace attnlab::device {

DeviceMask::DeviceMask(Context& context, const AttentionMask& mask, const AttentionDims& dims) {
    view_.causal = mask.causal;
    view_.alibi = mask.alibi;
    if (!mask.key_lengths.empty()) {
        const std::vector<int32_t> lengths(mask.key_lengths.begin(), mask.key_lengths.end());  // (B), each <= Tk < 2^31
        key_lengths_ = to_device(context, lengths.data(), lengths.size() * sizeof(int32_t));
        view_.key_lengths = static_cast<const int32_t*>(key_lengths_.data());
    }
    if (mask.has_explicit()) {
        const std::vector<uint8_t>& values = mask.eligible.values;  // (Tq, Tk) or (B, Tq, Tk)
        eligible_ = to_device(context, values.data(), values.size());
        view_.eligible = static_cast<const uint8_t*>(eligible_.data());
        view_.eligible_per_batch = mask.eligible.shape.size() == 3 && dims.B > 0;
    }
}

}  // namespace attnlab::device
