// An AttentionMask copied to the device. Plain C++ over the Context interface,
// compiled in both builds (without CUDA no Context exists to call it with).
#include <cstdint>
#include <vector>

#include "autograd/device/attention.h"

namespace attnlab::device {

DeviceMask::DeviceMask(Context& context, const AttentionMask& mask, const AttentionDims& dims) {
    if (mask.variant.restricts_keys()) {
        // A variant's eligibility rule reaches the kernels as what AttentionMask::allows
        // says of each (b, i, j), causal and the explicit mask included: one definition,
        // (B, Tq, Tk) bytes. The key lengths stay, so that padded K/V rows are never read.
        std::vector<uint8_t> values(dims.B * dims.Tq * dims.Tk);
        for (size_t b = 0; b < dims.B; ++b)
            for (size_t i = 0; i < dims.Tq; ++i)
                for (size_t j = 0; j < dims.Tk; ++j)
                    values[(b * dims.Tq + i) * dims.Tk + j] = mask.allows(b, i, j, dims.Tq, dims.Tk) ? 1 : 0;
        AttentionMask rules;
        rules.key_lengths = mask.key_lengths;
        rules.variant.alibi = mask.variant.alibi;
        rules.eligible = Mask({dims.B, dims.Tq, dims.Tk}, std::move(values));
        *this = DeviceMask(context, rules, dims);
        return;
    }
    view_.causal = mask.causal;
    view_.alibi = mask.variant.alibi;
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
