#include "experiments/run/tensorboard.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "autograd/tensor.h"
#include "tensorboard_event.pb.h"

namespace attnlab {

namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
    // CRC-32C: polynomial 0x1EDC6F41, reflected, initial and final XOR 0xFFFFFFFF.
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
    crc.process_bytes(data, size);
    const uint32_t c = crc.checksum();
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
    std::filesystem::create_directories(folder);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const auto seconds = static_cast<long long>(now_seconds());
    path_ = (std::filesystem::path(folder) /
             ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(getpid()))).string();
    file_ = std::fopen(path_.c_str(), "wbx");  // x: a new file, never another process's
    if (!file_) throw Error("[tensorboard] cannot create " + path_ + " (" + std::strerror(errno) + ")");
    tensorboard::Event event;
    event.set_wall_time(now_seconds());
    event.set_file_version("brain.Event:2");
    write_record(event.SerializeAsString());
    flush();
}

TensorBoardWriter::~TensorBoardWriter() {
    if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
    tensorboard::Event event;
    event.set_wall_time(now_seconds());
    event.set_step(step);
    tensorboard::Summary* summary = event.mutable_summary();
    for (const auto& [tag, value] : values) {
        tensorboard::Summary::Value* v = summary->add_value();
        v->set_tag(tag);
        v->set_simple_value(static_cast<float>(value));
    }
    write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
    uint8_t header[8];
    const uint64_t length = data.size();
    for (int i = 0; i < 8; ++i) header[i] = static_cast<uint8_t>(length >> (8 * i));  // little-endian
    const uint32_t header_crc = masked_crc32c(header, sizeof header), data_crc = masked_crc32c(data.data(), data.size());
    uint8_t crcs[2][4];
    for (int i = 0; i < 4; ++i) {
        crcs[0][i] = static_cast<uint8_t>(header_crc >> (8 * i));
        crcs[1][i] = static_cast<uint8_t>(data_crc >> (8 * i));
    }
    const bool ok = std::fwrite(header, 1, 8, file_) == 8 && std::fwrite(crcs[0], 1, 4, file_) == 4 &&
                    std::fwrite(data.data(), 1, data.size(), file_) == data.size() && std::fwrite(crcs[1], 1, 4, file_) == 4;
    if (!ok) throw Error("[tensorboard] cannot write " + path_ + " (" + std::strerror(errno) + ")");
}

void TensorBoardWriter::flush() {
    if (std::fflush(file_) != 0) throw Error("[tensorboard] cannot write " + path_ + " (" + std::strerror(errno) + ")");
}

}  // namespace attnlab
