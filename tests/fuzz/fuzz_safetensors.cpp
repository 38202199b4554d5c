// A safetensors file as read_safetensors reads it (seeds:
// tests/fuzz/corpus/fuzz_safetensors/). An input is a file's bytes, or, when it
// starts with '{', the header's JSON, a NUL byte and the data: the target puts
// the header's size in front itself, so that a mutation that changes the JSON's
// length still reaches the checks after parsing (in a file's bytes it mostly
// ends at a header size that no longer fits). In that JSON, 0x01 and a count
// byte repeat the byte before them (fuzz::expanded), so a header nested a
// million deep or a name of megabytes is a few bytes of input. Bad input may
// only throw Error, whose message is one short line of valid UTF-8; a
// file that reads must also write back (write_safetensors) and read again to
// the same names, shapes, values (bit for bit: F16 and BF16 come back as F32
// holding the same floats) and metadata.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <optional>
#include <string>

#include "experiments/files/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace attnlab;

std::vector<SafeTensor> by_name(std::vector<SafeTensor> tensors) {
    std::sort(tensors.begin(), tensors.end(), [](const SafeTensor& a, const SafeTensor& b) { return a.name < b.name; });
    return tensors;
}

bool same_values(const SafeTensor& a, const SafeTensor& b) {
    if (a.floats.size() != b.floats.size() || a.doubles.size() != b.doubles.size()) return false;
    for (size_t i = 0; i < a.floats.size(); ++i)
        if (std::bit_cast<uint32_t>(a.floats[i]) != std::bit_cast<uint32_t>(b.floats[i])) return false;
    for (size_t i = 0; i < a.doubles.size(); ++i)
        if (std::bit_cast<uint64_t>(a.doubles[i]) != std::bit_cast<uint64_t>(b.doubles[i])) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string bytes(reinterpret_cast<const char*>(data), size);
    if (!bytes.empty() && bytes[0] == '{') {  // JSON, NUL, data
        const size_t json_end = std::min(bytes.find('\0'), bytes.size());
        const std::string header = fuzz::expanded(data, json_end);
        std::string header_size_bytes(8, '\0');
        for (size_t i = 0; i < 8; ++i) header_size_bytes[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i) & 0xff);
        bytes = header_size_bytes + header + bytes.substr(std::min(json_end + 1, bytes.size()));
    }
    std::optional<SafetensorsFile> read;
    {
        const fuzz::TempFile file(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), ".safetensors");
        fuzz::expect_quoted_refusal_only([&] { read = read_safetensors(file.path()); });
    }
    if (!read) return 0;
    // The format allows an empty name, and dtypes whose values are not read (`other`:
    // BOOL, I64, ...), both of which the writer refuses on purpose (safetensors.h).
    for (const SafeTensor& tensor : read->tensors)
        if (tensor.name.empty() || tensor.dtype == SafeDType::other) return 0;

    const fuzz::TempFile copy(nullptr, 0, ".safetensors");
    write_safetensors(copy.path(), read->tensors, read->metadata);  // any exception here is a finding
    const SafetensorsFile again = read_safetensors(copy.path());
    if (again.metadata != read->metadata) std::abort();
    const std::vector<SafeTensor> before = by_name(read->tensors), after = by_name(again.tensors);
    if (before.size() != after.size()) std::abort();
    for (size_t i = 0; i < before.size(); ++i) {
        if (after[i].name != before[i].name || after[i].shape != before[i].shape || !same_values(before[i], after[i])) std::abort();
        const SafeDType written = before[i].dtype == SafeDType::f64 ? SafeDType::f64 : SafeDType::f32;
        if (after[i].dtype != written) std::abort();
    }
    return 0;
}
