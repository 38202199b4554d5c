// Reading an HDF5 file attnlab did not write in this process. libhdf5 1.10.8
// crashes, loops forever or allocates without bound on some corrupt metadata,
// before any check of ours can run (tests/fuzz/libhdf5_crashes/). So the
// reader runs twice: first in a forked child under a time and a memory limit,
// and only once the child has read the whole file through cleanly does the
// caller's process open it. What the child met becomes one line, and the
// caller's process never touches the file:
//
//   [checkpoint] x.h5: libhdf5 crashed reading this file (signal SIGSEGV): it is damaged or crafted
//   [checkpoint] x.h5: libhdf5 did not finish reading this file within 10 s: ...
//   [checkpoint] x.h5: /params/head.weight: is int64 (32,16), expected floats   (the reader's own error)
//
// The child runs the caller's own reader, so it takes every path the caller
// will take (the same lookups, attributes, conversions and reads).
//
// Environment: ATTNLAB_H5_PROBE_SECONDS sets the time limit (default 10 s, plus
// 1 s per 100 MB of file); ATTNLAB_H5_PROBE=0 reads without the child (files
// you trust, or measuring what the probe costs: bench/run_h5_probe.sh).
#pragma once

#include <functional>
#include <string>

namespace attnlab::h5 {

// Runs `read` (which opens `path` through data/h5file.h and reads it the way
// the caller will) in a forked child and waits for it. Returns when `read`
// returned there; throws attnlab::Error naming `tag` and `path` when the child
// crashed, ran past the time limit or out of memory, or when `read` threw
// attnlab::Error (the same message; another exception comes back as a
// std::runtime_error, our own bug). `read` must only read: whatever it
// builds is lost with the child.
void probe(const std::string& path, const std::string& tag, const std::function<void()>& read);

// `read()` in this process once probe() has seen it run cleanly in a child.
template <class Read>
auto read_probed(const std::string& path, const std::string& tag, Read&& read) {
    probe(path, tag, [&] { (void)read(); });
    return read();
}

}  // namespace attnlab::h5
