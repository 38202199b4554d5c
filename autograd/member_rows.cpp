// MemberRows (member_rows.h): one copy per parameter and member, or on the device
// one launch each way over a table of the parameters' offsets.
#include "autograd/member_rows.h"

#include <optional>

#include "autograd/device_ops.h"

namespace attnlab {

namespace {

// Where a device tensor's values (or its gradient home's) start in their block, or nothing.
std::optional<size_t> offset_in(const TensorImpl& impl, const device::DeviceBuffer* block) {
    if (impl.device != Device::cuda || impl.device_block.get() != block || block == nullptr) return std::nullopt;
    return static_cast<size_t>(impl.device_data - block->floats());
}

}  // namespace

// The device plan: piece p = parameter p, at table[3p] in the stacked block (K rows)
// and at table[3p + 1] in each member's (table[3p + 2] floats); gradients at the same
// offsets in the gradient blocks.
struct MemberRows::Device {
    size_t pieces = 0;
    device::DeviceBuffer table, value_blocks, grad_blocks;  // the offsets, and the members' K block pointers each way
    float* stacked_values = nullptr;
    float* stacked_grads = nullptr;
};

MemberRows::MemberRows(NamedTensors stacked, std::vector<NamedTensors> members)
    : stacked_(std::move(stacked)), members_(std::move(members)) {
    for (size_t m = 0; m < members_.size(); ++m) {
        if (members_[m].size() != stacked_.size())
            fail("MemberRows", "member " + std::to_string(m) + " has " + std::to_string(members_[m].size()) + " parameters, the stacked model " +
                                   std::to_string(stacked_.size()));
        for (size_t i = 0; i < stacked_.size(); ++i)
            if (stacked_[i].second.dim() == 0 || stacked_[i].second.size(0) != members_.size())
                fail("MemberRows", stacked_[i].first + " " + shape_str(stacked_[i].second.shape()) + " is not stacked for " +
                                       std::to_string(members_.size()) + " members");
    }
    if (stacked_.empty() || members_.empty() || stacked_.size() > 65535) return;
    // the one-launch plan: every tensor on the device, each model in one values block and one gradient block
    auto plan = std::make_unique<Device>();
    const auto block_of = [](const Tensor& t) { return t.impl().device_block.get(); };
    const auto grad_block_of = [](const Tensor& t) { return t.impl().grad_home ? t.impl().grad_home->device_block.get() : nullptr; };
    std::vector<size_t> table;
    for (size_t i = 0; i < stacked_.size(); ++i) {
        const Tensor& s = stacked_[i].second;
        const std::optional<size_t> at = offset_in(s.impl(), block_of(stacked_.front().second));
        if (!at || !s.impl().grad_home || offset_in(*s.impl().grad_home, grad_block_of(stacked_.front().second)) != at) return;
        const std::optional<size_t> own = offset_in(members_[0][i].second.impl(), block_of(members_[0].front().second));
        if (!own) return;
        for (const NamedTensors& member : members_) {
            const TensorImpl& p = member[i].second.impl();
            if (offset_in(p, block_of(member.front().second)) != own || !p.grad_home ||
                offset_in(*p.grad_home, grad_block_of(member.front().second)) != own)
                return;
        }
        table.insert(table.end(), {*at, *own, members_[0][i].second.numel()});
    }
    std::vector<const float*> values;
    std::vector<float*> grads;
    for (const NamedTensors& member : members_) {
        values.push_back(block_of(member.front().second)->floats());
        grads.push_back(grad_block_of(member.front().second)->floats());
    }
    plan->pieces = stacked_.size();
    plan->table = upload(table.data(), table.size() * sizeof(size_t));
    plan->value_blocks = upload(values.data(), values.size() * sizeof(float*));
    plan->grad_blocks = upload(grads.data(), grads.size() * sizeof(float*));
    plan->stacked_values = block_of(stacked_.front().second)->floats();
    plan->stacked_grads = grad_block_of(stacked_.front().second)->floats();
    device_ = std::move(plan);
}

MemberRows::~MemberRows() = default;

void MemberRows::set_values() const {
    if (device_) {
        device::members_to_stacked(device_context(), members_.size(), device_->pieces,
                                   static_cast<const size_t*>(device_->table.data()),
                                   static_cast<const float* const*>(device_->value_blocks.data()), device_->stacked_values);
        return;
    }
    for (size_t m = 0; m < members_.size(); ++m)
        for (size_t i = 0; i < stacked_.size(); ++i) set_member_values(stacked_[i].second, m, members_[m][i].second);
}

void MemberRows::add_grads() const {
    // one launch when every stacked gradient is in its home and every member's goes to
    // its home, all of them added to (a gradient there already) or all written
    std::optional<bool> accumulate;
    bool together = device_ != nullptr;
    for (size_t i = 0; i < stacked_.size() && together; ++i)
        together = stacked_[i].second.impl().grad && stacked_[i].second.impl().grad == stacked_[i].second.impl().grad_home;
    for (size_t m = 0; m < members_.size() && together; ++m)
        for (size_t i = 0; i < stacked_.size() && together; ++i) {
            const TensorImpl& p = members_[m][i].second.impl();
            const bool has = p.grad != nullptr;
            together = p.requires_grad && (!has || p.grad == p.grad_home) && accumulate.value_or(has) == has;
            accumulate = has;
        }
    if (together) {
        for (const NamedTensors& member : members_)
            for (const auto& [name, p] : member) grad_target(p);  // each gradient now its home
        device::stacked_to_members(device_context(), members_.size(), device_->pieces, static_cast<const size_t*>(device_->table.data()),
                                   device_->stacked_grads, static_cast<float* const*>(device_->grad_blocks.data()), *accumulate);
        return;
    }
    for (size_t m = 0; m < members_.size(); ++m)
        for (size_t i = 0; i < stacked_.size(); ++i) add_member_grad(stacked_[i].second, m, members_[m][i].second);
}

}  // namespace attnlab
