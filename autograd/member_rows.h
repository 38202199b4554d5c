// Stacked members (train.seeds): a stacked model's parameters (Module::stack_members:
// each (K, ...)) and the K members' own, matched in order. Before a stacked pass the
// members' values go into their rows; after it each row's gradient goes to its
// member, as the member's own backward pass would leave it (set_member_values and
// add_member_grad, tensor.h, for every parameter and member).
//
// On the device, where each member's parameters and gradients lie in blocks of
// their own at the same offsets (Module::to moves a model as one block), each
// way is one launch for every parameter of every member; otherwise a copy each.
#pragma once

#include <memory>
#include <vector>

#include "autograd/named_tensors.h"

namespace attnlab {

class MemberRows {
public:
    // stacked: the stacked model's parameters; members[m]: member m's, in the same
    // order, each the shape of a row of the stacked one (checked).
    MemberRows(NamedTensors stacked, std::vector<NamedTensors> members);
    ~MemberRows();
    MemberRows(const MemberRows&) = delete;
    MemberRows& operator=(const MemberRows&) = delete;

    void set_values() const;  // row m of each stacked parameter = member m's values
    void add_grads() const;   // member m's gradients += row m of the stacked ones' (those that have one)
    bool one_launch() const { return device_ != nullptr; }  // each way one launch on the device

private:
    struct Device;
    NamedTensors stacked_;
    std::vector<NamedTensors> members_;
    std::unique_ptr<Device> device_;
};

}  // namespace attnlab
