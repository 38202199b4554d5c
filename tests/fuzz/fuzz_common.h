// What every fuzz target shares: bad input must end in one of the exceptions
// the CLI turns into one line and exit status 2 (attnlab::Error, and a
// filesystem_error for an unusable path); anything else (another exception, a
// crash, a sanitizer report, a timeout) is a finding.
#pragma once

#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab::fuzz {

// What the probe of data/h5_probe.h stopped in its child process (a libhdf5
// crash, hang or huge allocation, each an attnlab::Error here), printed when
// the run ends: the figures of a raw-bytes run (tests/fuzz/README.md).
struct ProbeTally {
    size_t crashes = 0, hangs = 0, memory = 0, inputs = 0;
    void count(const std::string& message) {
        if (message.find("libhdf5 crashed reading this file") != std::string::npos) ++crashes;
        if (message.find("libhdf5 did not finish reading this file") != std::string::npos) ++hangs;
        if (message.find("the limit for a file attnlab did not write") != std::string::npos) ++memory;
    }
    ~ProbeTally() {
        if (inputs > 0)
            std::fprintf(stderr, "fuzz: probe: %zu runs on HDF5 images, each read in a child first; it stopped %zu crashes, "
                                 "%zu hangs and %zu huge allocations of libhdf5 there\n",
                         inputs, crashes, hangs, memory);
    }
};

inline ProbeTally& probe_tally() {
    static ProbeTally tally;
    return tally;
}

template <class Load>
void expect_bad_input_only(Load&& load) {
    try {
        load();
    } catch (const Error& e) {
        probe_tally().count(e.what());
    } catch (const std::filesystem::filesystem_error&) {
    }
}

// The input as a file of its own (a fresh name each time: HDF5 keeps files it
// still has open by name, so reusing one could mix two inputs).
class TempFile {
public:
    TempFile(const uint8_t* data, size_t size, const char* suffix) {
        static unsigned long counter = 0;
        const char* dir = std::getenv("TMPDIR");
        path_ = std::string(dir && *dir ? dir : "/tmp") + "/attnlab_fuzz_" + std::to_string(getpid()) + "_" +
                std::to_string(counter++) + suffix;
        std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    ~TempFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// A loader must close every HDF5 object it opened, on every path.
inline void expect_nothing_open() {
    const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open <= 0) return;
    std::vector<hid_t> ids(static_cast<size_t>(open));
    H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_ALL, ids.size(), ids.data());
    for (hid_t id : ids) {
        char name[512] = "";
        H5Iget_name(id, name, sizeof name);
        std::fprintf(stderr, "fuzz: HDF5 object left open: type %d, name '%s'\n", static_cast<int>(H5Iget_type(id)), name);
    }
    std::abort();
}

}  // namespace attnlab::fuzz
