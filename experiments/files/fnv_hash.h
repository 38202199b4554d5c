// FNV-1a, 64 bits: a stable hash of bytes (the same on every machine and
// standard library), for shortened cell names and for comparing the ranks'
// parameters. `hash` continues an earlier call's result over more bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnlab {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;

inline uint64_t fnv1a(const void* data, size_t size, uint64_t hash = kFnvOffset) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
    return hash;
}

}  // namespace attnlab
