// The device seen from plain C++ (part of the device seam, autograd/device/):
// whether the backend was built, whether a device is usable here, and the one
// check every device entry point makes first. Code above the engine
// (experiments/, bench/) asks here and never includes cuda/.
//
// This header includes no CUDA header, so CPU-only code can call it. cuda/
// implements it: backend.cu, or backend_stub.cpp with -DATTNLAB_CUDA=OFF;
// callers never need an #ifdef, they ask built_with_cuda() or probe().
#pragma once

#include <string>

namespace attnlab::device {

struct DeviceInfo {
    bool available = false;  // at least one device can be used
    int device_count = 0;    // devices the runtime reports (0 when unavailable)
    std::string name;        // device 0's name, e.g. "NVIDIA H200"; empty when unavailable
    std::string reason;      // why unavailable; empty when available
};

// True when this binary holds the real backend (backend.cu), not the stub.
bool built_with_cuda();

// Asks the CUDA runtime which devices exist. Never throws; a missing driver or
// device is reported in `reason`, e.g. "no CUDA device present: <runtime error>".
DeviceInfo probe();

// Throws attnlab::Error("[cuda] <where>: <reason>") unless a device is available.
// `where` names the caller, e.g. "train.device" or "attention_forward".
void require_device(const std::string& where);

}  // namespace attnlab::device
