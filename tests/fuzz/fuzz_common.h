// What every fuzz target shares: bad input must end in one of the exceptions
// the CLI turns into one line and exit status 2 (attnlab::Error, and a
// filesystem_error for an unusable path); anything else (another exception, a
// crash, a sanitizer report, a timeout) is a finding.
#pragma once

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
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

// libFuzzer keeps inputs under 4 KiB (its -max_len default for these seeds),
// yet some bad input needs size: JSON nested 400,000 deep, a value of
// megabytes (issue 51). In the targets that read JSON or text, the byte 0x01
// followed by a count byte n stands for the byte before it repeated n * 4096
// times more (up to kMaxExpandedBytes in all), so one input of a few bytes nests
// a million deep. 0x01 has no meaning of its own in JSON text.
constexpr size_t kRepeatUnit = 4096;
constexpr size_t kMaxExpandedBytes = size_t{4} << 20;

inline std::string expanded(const uint8_t* data, size_t size) {
    std::string out;
    for (size_t i = 0; i < size; ++i) {
        if (data[i] != 0x01 || i + 1 == size || out.empty()) {
            out += static_cast<char>(data[i]);
            continue;
        }
        const size_t room = kMaxExpandedBytes > out.size() ? kMaxExpandedBytes - out.size() : 0;
        out.append(std::min(data[++i] * kRepeatUnit, room), out.back());
    }
    return out;
}

// Whether `text` is valid UTF-8 (RFC 3629), checked here without attnlab's code.
inline bool valid_utf8(const std::string& text) {
    for (size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        const size_t length = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
        if (length == 0 || i + length > text.size()) return false;
        uint32_t code = length == 1 ? lead : lead & (0x7F >> length);
        for (size_t k = 1; k < length; ++k) {
            const auto next = static_cast<unsigned char>(text[i + k]);
            if ((next & 0xC0) != 0x80) return false;
            code = code << 6 | (next & 0x3F);
        }
        const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
        if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
        i += length;
    }
    return true;
}

// expect_bad_input_only, for readers whose messages quote what the file holds
// (data/quoted.h): the message must also be one line of valid UTF-8 of at most
// kMaxMessageBytes, whatever the input (a value echoed whole, nested or raw
// bytes is a finding).
constexpr size_t kMaxMessageBytes = 1024;

template <class Load>
void expect_quoted_refusal_only(Load&& load) {
    try {
        load();
    } catch (const Error& e) {
        const std::string message = e.what();
        if (message.size() > kMaxMessageBytes || message.find('\n') != std::string::npos || !valid_utf8(message)) {
            std::fprintf(stderr, "fuzz: a message of %zu bytes that is not one short line of valid UTF-8: %.300s\n", message.size(),
                         message.c_str());
            std::abort();
        }
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
