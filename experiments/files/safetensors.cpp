// safetensors reading and writing (format and checks: safetensors.h).
#include "experiments/files/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "data/quoted.h"
#include "experiments/files/run_files.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Values go through their bit patterns (std::bit_cast), assembled byte by byte
// in little-endian order, so the code is right on any host with IEEE floats.
static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559);

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the Rust implementation's MAX_HEADER_SIZE

[[noreturn]] void refuse(const std::string& path, const std::string& what) { throw Error(path + ": " + what); }

std::string where(const std::string& name) { return "tensor " + quoted_bytes(name) + ": "; }

// The format's dtypes with their element sizes in bytes; `other`: not read (safetensors.h).
struct KnownDType {
    const char* name;
    SafeDType dtype;
    size_t size;
};
constexpr KnownDType kDTypes[] = {
    {"F16", SafeDType::f16, 2},    {"BF16", SafeDType::bf16, 2},  {"F32", SafeDType::f32, 4},    {"F64", SafeDType::f64, 8},
    {"BOOL", SafeDType::other, 1}, {"U8", SafeDType::other, 1},    {"I8", SafeDType::other, 1},    {"F8_E5M2", SafeDType::other, 1},
    {"F8_E4M3", SafeDType::other, 1}, {"I16", SafeDType::other, 2}, {"U16", SafeDType::other, 2},  {"I32", SafeDType::other, 4},
    {"U32", SafeDType::other, 4},  {"I64", SafeDType::other, 8},   {"U64", SafeDType::other, 8}};

uint64_t load_le(const unsigned char* bytes, size_t count) {
    uint64_t value = 0;
    for (size_t i = count; i-- > 0;) value = value << 8 | bytes[i];
    return value;
}

void store_le(uint64_t value, size_t count, char* out) {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<char>(value >> (8 * i) & 0xff);
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every half is a
// float: normals rebias the exponent to 127 (+112), subnormals are mantissa *
// 2^-24 (exact), and inf/NaN keep their mantissa (the NaN payload) in its top bits.
float half_to_float(uint16_t half) {
    const uint32_t sign = static_cast<uint32_t>(half >> 15) << 31;
    const uint32_t exponent = half >> 10 & 0x1f, mantissa = half & 0x3ff;
    if (exponent == 0) {
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    const uint32_t float_exponent = exponent == 0x1f ? 0xff : exponent + 112;
    return std::bit_cast<float>(sign | float_exponent << 23 | mantissa << 13);
}

// bfloat16 is the top half of a float.
float bfloat16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// One tensor's header entry, checked on its own.
struct Entry {
    std::string name;
    KnownDType dtype;
    Shape shape;
    uint64_t numel = 1, begin = 0, end = 0;
};

// Parses the header, refusing a key given twice in any object (nlohmann keeps
// the last silently): the parser reports every key, and a set per open object
// (a stack, as objects nest) remembers those seen. A repeated key inside an
// entry names the entry: the key read last in the header object when it opened.
json parse_header(const std::string& path, const std::string& text) {
    if (text.empty() || text[0] != '{') refuse(path, "the header does not start with '{': not a safetensors file");
    if (const std::string deep = json_nesting_problem(text); !deep.empty()) refuse(path, "the header has " + deep);
    std::vector<std::pair<std::string, std::set<std::string>>> objects;  // [open objects]: (entry name, keys seen)
    std::string entry_name;
    const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) objects.emplace_back(entry_name, std::set<std::string>{});
        if (event == json::parse_event_t::object_end) objects.pop_back();
        if (event != json::parse_event_t::key) return true;
        const std::string key = parsed.get<std::string>();
        if (objects.size() == 1) entry_name = key;
        if (objects.back().second.insert(key).second) return true;
        if (objects.size() == 1) refuse(path, where(key) + "the name appears twice in the header");
        const std::string& entry = objects[1].first;
        refuse(path, (entry == "__metadata__" ? "\"__metadata__\": " : where(entry)) + "the key " + quoted_bytes(key) +
                         " appears twice in one object");
    };
    try {
        return json::parse(text, check_keys);
    } catch (const json::exception& e) {  // parse errors, and number overflow (1e999)
        refuse(path, "the header is not valid JSON: " + escaped(e.what()));
    }
}

// A JSON number that is a non-negative integer ("3", not "3.0" or "-1").
bool read_count(const json& value, uint64_t& out) {
    if (value.is_number_unsigned()) out = value.get<uint64_t>();
    else if (value.is_number_integer() && value.get<int64_t>() >= 0) out = static_cast<uint64_t>(value.get<int64_t>());
    else return false;
    return true;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& info) {
    const std::string at = where(name);
    if (!info.is_object()) refuse(path, at + "the entry is not a JSON object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!info.contains(field)) refuse(path, at + "the entry has no \"" + field + "\"");
    Entry entry{name, kDTypes[2], {}};

    const json& dtype = info["dtype"];
    if (!dtype.is_string()) refuse(path, at + "\"dtype\" is not a string");
    const std::string dtype_name = dtype.get<std::string>();
    const auto* found = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const KnownDType& k) { return dtype_name == k.name; });
    if (found == std::end(kDTypes))
        refuse(path, at + "dtype " + quoted_bytes(dtype_name) + " is not a safetensors dtype (attnlab reads F16, BF16, F32, F64)");
    entry.dtype = *found;

    const json& shape = info["shape"];
    if (!shape.is_array()) refuse(path, at + "\"shape\" is not a JSON array");
    for (size_t axis = 0; axis < shape.size(); ++axis) {
        uint64_t extent = 0;
        if (!read_count(shape[axis], extent))
            refuse(path, at + "shape entry " + std::to_string(axis) + " (" + quoted_json(shape[axis]) + ") is not a non-negative integer");
        entry.shape.push_back(extent);
    }
    // As the Rust implementation does: numel checked at each step, then numel * element size
    // (so [2^62, 0] is an empty tensor, and [2^33, 2^33, 0] is refused).
    uint64_t bytes = 0;
    bool overflow = false;
    for (size_t extent : entry.shape) overflow = overflow || __builtin_mul_overflow(entry.numel, extent, &entry.numel);
    if (overflow || __builtin_mul_overflow(entry.numel, entry.dtype.size, &bytes))
        refuse(path, at + "shape " + shape_str(entry.shape) + " of " + dtype_name + " is more than 2^64 bytes");

    const json& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !read_count(offsets[0], entry.begin) || !read_count(offsets[1], entry.end))
        refuse(path, at + "\"data_offsets\" (" + quoted_json(offsets) + ") is not two non-negative integers");
    const std::string span = "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
    if (entry.end < entry.begin) refuse(path, at + span + " end before they begin");
    if (entry.end - entry.begin != bytes)
        refuse(path, at + span + " hold " + std::to_string(entry.end - entry.begin) + " bytes, but shape " +
                         shape_str(entry.shape) + " of " + dtype_name + " needs " + std::to_string(bytes));
    return entry;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& metadata) {
    std::map<std::string, std::string> out;
    if (metadata.is_null()) return out;  // serde's Option: the Rust implementation reads null as none
    if (!metadata.is_object()) refuse(path, "\"__metadata__\" is not a JSON object of strings");
    for (const auto& [key, value] : metadata.items()) {
        if (!value.is_string())
            refuse(path, "\"__metadata__\" entry " + quoted_bytes(key) + " is not a string (" + quoted_json(value) + ")");
        out[key] = value.get<std::string>();
    }
    return out;
}

// Puts the entries in file order and checks that they tile the data section:
// each begins where the previous one ends, and the last ends at its end.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
    for (const Entry& entry : entries)
        if (entry.end > data_size)
            refuse(path, where(entry.name) + "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                             "] reach past the data section (" + std::to_string(data_size) + " bytes)");
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name); });
    uint64_t covered = 0;  // bytes [0, covered) belong to the entries so far
    for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& entry = entries[i];
        if (entry.begin < covered)
            refuse(path, where(entry.name) + "its data [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                             ") overlaps tensor " + quoted_bytes(entries[i - 1].name) + "'s [" + std::to_string(entries[i - 1].begin) +
                             ", " + std::to_string(entries[i - 1].end) + ")");
        if (entry.begin > covered)
            refuse(path, where(entry.name) + "bytes [" + std::to_string(covered) + ", " + std::to_string(entry.begin) +
                             ") before its data belong to no tensor (tensors must cover the data section without gaps)");
        covered = entry.end;
    }
    if (covered != data_size)
        refuse(path, "the last " + std::to_string(data_size - covered) + " bytes of the data section (" +
                         std::to_string(data_size) + " bytes) belong to no tensor");
}

void read_exact(std::ifstream& in, const std::string& path, uint64_t offset, void* out, uint64_t count) {
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(out), static_cast<std::streamsize>(count));
    if (!in || static_cast<uint64_t>(in.gcount()) != count)
        refuse(path, "cannot read " + std::to_string(count) + " bytes at byte " + std::to_string(offset) + " (did the file change?)");
}

// The entry's values from its bytes (entry.numel * element size of them).
SafeTensor decode(const Entry& entry, const std::vector<unsigned char>& bytes) {
    SafeTensor tensor{entry.name, entry.dtype.dtype, entry.shape, {}, {}, entry.dtype.name};
    if (entry.dtype.dtype == SafeDType::other) return tensor;  // not read
    const size_t size = entry.dtype.size;
    if (entry.dtype.dtype == SafeDType::f64) tensor.doubles.resize(entry.numel);
    else tensor.floats.resize(entry.numel);
    for (size_t i = 0; i < entry.numel; ++i) {
        const uint64_t bits = load_le(bytes.data() + i * size, size);
        switch (entry.dtype.dtype) {
            case SafeDType::f16: tensor.floats[i] = half_to_float(static_cast<uint16_t>(bits)); break;
            case SafeDType::bf16: tensor.floats[i] = bfloat16_to_float(static_cast<uint16_t>(bits)); break;
            case SafeDType::f32: tensor.floats[i] = std::bit_cast<float>(static_cast<uint32_t>(bits)); break;
            case SafeDType::f64: tensor.doubles[i] = std::bit_cast<double>(bits); break;
            case SafeDType::other: break;
        }
    }
    return tensor;
}

// nlohmann refuses to write a string that is not UTF-8; refuse it first, in our words.
void check_utf8(const std::string& path, const std::string& what, const std::string& text) {
    try {
        (void)json(text).dump();
    } catch (const json::type_error&) {
        refuse(path, what + " is not valid UTF-8");
    }
}

}  // namespace

std::string to_string(SafeDType dtype) {
    switch (dtype) {
        case SafeDType::f16: return "F16";
        case SafeDType::bf16: return "BF16";
        case SafeDType::f32: return "F32";
        case SafeDType::f64: return "F64";
        case SafeDType::other: return "other";
    }
    return "?";
}

SafetensorsFile read_safetensors(const std::string& path) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) refuse(path, "no such file");
    if (error) refuse(path, "cannot look at it (" + error.message() + ")");
    if (!fs::is_regular_file(status)) refuse(path, "not a regular file");
    const uint64_t file_size = fs::file_size(path, error);
    if (error) refuse(path, "cannot read its size (" + error.message() + ")");
    std::ifstream in(path, std::ios::binary);
    if (!in) refuse(path, std::string("cannot open it (") + std::strerror(errno) + ")");

    if (file_size < 8)
        refuse(path, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header size: not a safetensors file");
    unsigned char size_bytes[8];
    read_exact(in, path, 0, size_bytes, 8);
    const uint64_t header_size = load_le(size_bytes, 8);
    if (header_size > kMaxHeaderSize)
        refuse(path, "the header size, " + std::to_string(header_size) + " bytes, is over the limit of " +
                         std::to_string(kMaxHeaderSize) + ": not a safetensors file, or a damaged one");
    if (header_size > file_size - 8)
        refuse(path, "the header size, " + std::to_string(header_size) + " bytes, reaches past the end of the file (" +
                         std::to_string(file_size) + " bytes)");
    std::string header_text(header_size, '\0');
    read_exact(in, path, 8, header_text.data(), header_size);
    const json header = parse_header(path, header_text);

    SafetensorsFile file;
    std::vector<Entry> entries;
    for (const auto& [name, info] : header.items()) {
        if (name == "__metadata__") file.metadata = parse_metadata(path, info);
        else entries.push_back(parse_entry(path, name, info));
    }
    const uint64_t data_start = 8 + header_size;
    check_layout(path, entries, file_size - data_start);

    std::vector<unsigned char> bytes;
    for (const Entry& entry : entries) {  // in file order; each fits in the file, as checked
        if (entry.dtype.dtype == SafeDType::other) {  // its bytes are not read
            file.tensors.push_back(decode(entry, {}));
            continue;
        }
        bytes.resize(entry.end - entry.begin);
        read_exact(in, path, data_start + entry.begin, bytes.data(), bytes.size());
        file.tensors.push_back(decode(entry, bytes));
    }
    return file;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::set<std::string> names;
    for (const SafeTensor& tensor : tensors) {
        if (tensor.name.empty()) refuse(path, "a tensor has an empty name");
        if (tensor.name == "__metadata__") refuse(path, "a tensor is named \"__metadata__\", the header's metadata key");
        if (!names.insert(tensor.name).second) refuse(path, where(tensor.name) + "the name is given twice");
        check_utf8(path, "tensor name " + quoted_bytes(tensor.name), tensor.name);
        size_t numel = 1;
        for (size_t extent : tensor.shape)
            if (__builtin_mul_overflow(numel, extent, &numel)) refuse(path, where(tensor.name) + "shape " + shape_str(tensor.shape) + " is too large");
        if (tensor.dtype == SafeDType::other)
            refuse(path, where(tensor.name) + "dtype " + (tensor.file_dtype.empty() ? "other" : tensor.file_dtype) +
                             " is not written (attnlab writes F32 and F64)");
        const bool f64 = tensor.dtype == SafeDType::f64;
        const size_t held = f64 ? tensor.doubles.size() : tensor.floats.size();
        if (held != numel)
            refuse(path, where(tensor.name) + "shape " + shape_str(tensor.shape) + " has " + std::to_string(numel) + " values, but " +
                             (f64 ? "doubles" : "floats") + " holds " + std::to_string(held));
        if (f64 ? !tensor.floats.empty() : !tensor.doubles.empty())
            refuse(path, where(tensor.name) + "dtype " + to_string(tensor.dtype) + " is written from " + (f64 ? "doubles" : "floats") +
                             ", but it holds " + (f64 ? "floats" : "doubles") + " too");
    }
    for (const auto& [key, value] : metadata) {
        check_utf8(path, "metadata key " + quoted_bytes(key), key);
        check_utf8(path, "metadata value of " + quoted_bytes(key), value);
    }

    std::vector<const SafeTensor*> order;  // F64 first, then F32, each by name (the Rust implementation's order)
    for (const SafeTensor& tensor : tensors) order.push_back(&tensor);
    std::sort(order.begin(), order.end(), [](const SafeTensor* a, const SafeTensor* b) {
        return std::make_tuple(a->dtype != SafeDType::f64, std::cref(a->name)) < std::make_tuple(b->dtype != SafeDType::f64, std::cref(b->name));
    });
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const SafeTensor* tensor : order) {
        const bool f64 = tensor->dtype == SafeDType::f64;
        const uint64_t bytes = (f64 ? tensor->doubles.size() * 8 : tensor->floats.size() * 4);
        header[tensor->name] = {{"dtype", f64 ? "F64" : "F32"}, {"shape", tensor->shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string header_text = header.dump();
    header_text.append((8 - header_text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

    write_atomically(path, "[safetensors]", [&](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary);
        char size_bytes[8];
        store_le(header_text.size(), 8, size_bytes);
        out.write(size_bytes, 8);
        out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
        std::vector<char> bytes;
        for (const SafeTensor* tensor : order) {
            const bool f64 = tensor->dtype == SafeDType::f64;
            bytes.resize(f64 ? tensor->doubles.size() * 8 : tensor->floats.size() * 4);
            if (f64)
                for (size_t i = 0; i < tensor->doubles.size(); ++i) store_le(std::bit_cast<uint64_t>(tensor->doubles[i]), 8, &bytes[i * 8]);
            else
                for (size_t i = 0; i < tensor->floats.size(); ++i) store_le(std::bit_cast<uint32_t>(tensor->floats[i]), 4, &bytes[i * 4]);
            out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        }
        out.close();
        if (!out) refuse(path, "cannot write its temporary file " + tmp + " (" + std::strerror(errno) + ")");
    });
}

}  // namespace attnlab
