// TensorBoard event files (train.tensorboard = true): scalars under
// <run>/tb/events.out.tfevents.<seconds>.<host>.<pid>, one file per process of a
// run (a resumed run adds one; TensorBoard reads them together).
//
// The file is TensorFlow's record format: for each serialised Event,
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   length bytes of data          | uint32 masked CRC-32C of the data,
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. The first Event holds
// file_version = "brain.Event:2".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

// CRC-32C (Castagnoli) of `size` bytes, masked as TensorFlow's records store it.
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
public:
    // Creates `folder` if needed and a new event file in it.
    explicit TensorBoardWriter(const std::string& folder);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // One Event at `step` holding a scalar per (tag, value).
    void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
    // To the operating system, so that a TensorBoard reading the file sees every row.
    void flush();

    const std::string& path() const { return path_; }

private:
    void write_record(const std::string& data);
    std::string path_;
    std::FILE* file_ = nullptr;
};

}  // namespace attnlab
