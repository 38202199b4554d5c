// safetensors files (experiments/files/safetensors.h): round trips, F16 and
// BF16 bit patterns, one file built byte by byte for each kind of refusal, and
// files exchanged with an independent Python reader and writer
// (safetensors_reference.py, run with Debian's /usr/bin/python3: struct, json, numpy).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "data/quoted.h"
#include "experiments/files/safetensors.h"
#include "tests/temp_dir.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

std::string le_bytes(uint64_t value, size_t count) {
    std::string out;
    for (size_t i = 0; i < count; ++i) out += static_cast<char>(value >> (8 * i) & 0xff);
    return out;
}

// A safetensors file: the header's size, the header, the data.
std::string file_of(const std::string& header, const std::string& data = "") { return le_bytes(header.size(), 8) + header + data; }

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// The one-line message read_safetensors refuses `path` with ("" when it reads it).
std::string refusal(const std::string& path) {
    try {
        read_safetensors(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

SafeTensor floats(const std::string& name, Shape shape, std::vector<float> values) {
    return {name, SafeDType::f32, std::move(shape), std::move(values), {}};
}

SafeTensor doubles(const std::string& name, Shape shape, std::vector<double> values) {
    return {name, SafeDType::f64, std::move(shape), {}, std::move(values)};
}

// Equal values, NaN included, and the same sign of zero.
void expect_same(double expected, double actual, const std::string& where) {
    if (std::isnan(expected)) EXPECT_TRUE(std::isnan(actual)) << where;
    else EXPECT_EQ(expected, actual) << where;
    EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << where;
}

TEST(Safetensors, RoundTripKeepsValuesShapesAndMetadata) {
    const test::TempDir dir("attnlab_safetensors_");
    const std::string path = dir.file("round.safetensors");
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<SafeTensor> tensors = {
        floats("w", {2, 3}, {1.5f, -0.0f, 3e-45f, inf, nan, 1e38f}),
        doubles("d", {2}, {0.1, -5e-324}),
        floats("empty", {0, 3}, {}),
        floats("scalar", {}, {7.25f}),
        doubles("x.scalar", {}, {-2.0}),
    };
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "caf\u00e9, \"quoted\"\n"}};
    write_safetensors(path, tensors, metadata);

    const SafetensorsFile file = read_safetensors(path);
    EXPECT_EQ(file.metadata, metadata);
    // F64 first, then F32, each by name: every tensor aligned to its element size
    const std::vector<std::string> order = {"d", "x.scalar", "empty", "scalar", "w"};
    ASSERT_EQ(file.tensors.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
        const SafeTensor& got = file.tensors[i];
        const SafeTensor& want = *std::find_if(tensors.begin(), tensors.end(), [&](const SafeTensor& t) { return t.name == order[i]; });
        EXPECT_EQ(got.name, order[i]);
        EXPECT_EQ(got.dtype, want.dtype) << got.name;
        EXPECT_EQ(got.shape, want.shape) << got.name;
        ASSERT_EQ(got.floats.size(), want.floats.size()) << got.name;
        ASSERT_EQ(got.doubles.size(), want.doubles.size()) << got.name;
        for (size_t j = 0; j < want.floats.size(); ++j)  // bit for bit, the NaN's payload too
            EXPECT_EQ(std::bit_cast<uint32_t>(got.floats[j]), std::bit_cast<uint32_t>(want.floats[j])) << got.name << "[" << j << "]";
        for (size_t j = 0; j < want.doubles.size(); ++j)
            EXPECT_EQ(std::bit_cast<uint64_t>(got.doubles[j]), std::bit_cast<uint64_t>(want.doubles[j])) << got.name << "[" << j << "]";
    }

    // The header is padded with spaces to a multiple of 8 bytes, and the data fills the rest exactly
    const std::string bytes = read_bytes(path);
    const uint64_t header_size = static_cast<unsigned char>(bytes[0]) | static_cast<uint64_t>(static_cast<unsigned char>(bytes[1])) << 8;
    EXPECT_EQ(bytes.substr(2, 6), std::string(6, '\0'));
    EXPECT_EQ(header_size % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + header_size + (2 + 1) * 8 + (6 + 1) * 4);
    const std::string header = bytes.substr(8, header_size);
    EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);  // no temporary left
}

TEST(Safetensors, EmptyFileHasNoTensors) {
    const test::TempDir dir("attnlab_safetensors_");
    write_safetensors(dir.file("none.safetensors"), {});
    const SafetensorsFile file = read_safetensors(dir.file("none.safetensors"));
    EXPECT_TRUE(file.tensors.empty());
    EXPECT_TRUE(file.metadata.empty());
    EXPECT_EQ(read_bytes(dir.file("none.safetensors")), file_of("{}      "));
}

// Two-byte values of one dtype in a file built byte by byte, read as floats.
std::vector<float> read_halves(const std::string& dtype, const std::vector<uint16_t>& bits) {
    const test::TempDir dir("attnlab_safetensors_");
    std::string data;
    for (uint16_t b : bits) data += le_bytes(b, 2);
    const std::string header = "{\"h\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + std::to_string(bits.size()) +
                               "],\"data_offsets\":[0," + std::to_string(data.size()) + "]}}";
    write_bytes(dir.file("h.safetensors"), file_of(header, data));
    const SafetensorsFile file = read_safetensors(dir.file("h.safetensors"));
    EXPECT_EQ(to_string(file.tensors.at(0).dtype), dtype);
    EXPECT_TRUE(file.tensors.at(0).doubles.empty());
    return file.tensors.at(0).floats;
}

TEST(Safetensors, HalfBitPatternsConvertExactly) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<std::pair<uint16_t, float>> cases = {
        {0x3c00, 1.0f},           {0xc000, -2.0f},  {0x7bff, 65504.0f},
        {0x0001, 0x1p-24f},       // smallest subnormal
        {0x03ff, 0x3ffp-24f},     // largest subnormal
        {0x0400, 0x1p-14f},       // smallest normal
        {0x3555, 0.333251953125f}, {0x8000, -0.0f}, {0x0000, 0.0f}, {0x7c00, inf}, {0xfc00, -inf}};
    std::vector<uint16_t> bits;
    for (const auto& [pattern, value] : cases) bits.push_back(pattern);
    bits.push_back(0x7e00);  // quiet NaN
    bits.push_back(0xfd01);  // a negative signalling NaN with a payload
    const std::vector<float> values = read_halves("F16", bits);
    ASSERT_EQ(values.size(), bits.size());
    for (size_t i = 0; i < cases.size(); ++i) expect_same(cases[i].second, values[i], "half " + std::to_string(bits[i]));
    // NaN stays NaN, its payload in the top mantissa bits
    EXPECT_EQ(std::bit_cast<uint32_t>(values[cases.size()]), 0x7fc00000u);
    EXPECT_EQ(std::bit_cast<uint32_t>(values[cases.size() + 1]), 0xffa02000u);
}

TEST(Safetensors, BFloat16BitPatternsConvertExactly) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<std::pair<uint16_t, float>> cases = {
        {0x3f80, 1.0f},      {0xc000, -2.0f},        {0x4049, 3.140625f}, {0x7f7f, 0x1.fep127f},  // largest finite
        {0x0001, 0x1p-133f},  // smallest subnormal
        {0x0080, 0x1p-126f},  // smallest normal
        {0x8000, -0.0f},     {0x7f80, inf},          {0xff80, -inf}};
    std::vector<uint16_t> bits;
    for (const auto& [pattern, value] : cases) bits.push_back(pattern);
    bits.push_back(0x7fc1);
    const std::vector<float> values = read_halves("BF16", bits);
    ASSERT_EQ(values.size(), bits.size());
    for (size_t i = 0; i < cases.size(); ++i) expect_same(cases[i].second, values[i], "bfloat16 " + std::to_string(bits[i]));
    EXPECT_EQ(std::bit_cast<uint32_t>(values.back()), 0x7fc10000u);
}

TEST(Safetensors, ReadsInFileOrderFromBytes) {
    // "b" (F64 0.1) lies before "a" (F32 pi); an empty tensor and a scalar at the end; trailing-space padding
    const test::TempDir dir("attnlab_safetensors_");
    const std::string header =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}, \"__metadata__\":{\"k\":\"v\"},"
        " \"b\":{\"shape\":[1,1],\"dtype\":\"F64\",\"data_offsets\":[0,8]},"
        " \"e\":{\"dtype\":\"BF16\",\"shape\":[4611686018427387904,0],\"data_offsets\":[12,12]},"
        " \"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[12,14]}}   ";
    write_bytes(dir.file("b.safetensors"), file_of(header, le_bytes(0x3fb999999999999a, 8) + le_bytes(0x40490fdb, 4) + le_bytes(0xc500, 2)));
    const SafetensorsFile file = read_safetensors(dir.file("b.safetensors"));
    ASSERT_EQ(file.tensors.size(), 4u);
    EXPECT_EQ(file.tensors[0].name, "b");
    EXPECT_EQ(file.tensors[0].shape, (Shape{1, 1}));
    EXPECT_EQ(file.tensors[0].doubles, std::vector<double>{0.1});
    EXPECT_EQ(file.tensors[1].name, "a");
    EXPECT_EQ(file.tensors[1].floats, std::vector<float>{3.14159274f});
    EXPECT_EQ(file.tensors[2].name, "e");
    EXPECT_EQ(file.tensors[2].shape, (Shape{size_t{1} << 62, 0}));  // empty, however large its other extents
    EXPECT_TRUE(file.tensors[2].floats.empty());
    EXPECT_EQ(file.tensors[3].name, "s");
    EXPECT_EQ(file.tensors[3].shape, Shape{});
    EXPECT_EQ(file.tensors[3].floats, std::vector<float>{-5.0f});
    EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
}

// The format's other dtypes (a tool's buffers: GPT-NeoX's BOOL causal mask, an
// I64 position table) are read as `other`: checked, their values not read.
TEST(Safetensors, OtherDTypesAreCheckedButNotRead) {
    const test::TempDir dir("attnlab_safetensors_");
    const std::string header = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                               "\"p\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]},"
                               "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}";
    write_bytes(dir.file("o.safetensors"), file_of(header, std::string("\x01\x00\x01\x01", 4) + le_bytes(7, 8) + le_bytes(0x3f800000, 4)));
    const SafetensorsFile file = read_safetensors(dir.file("o.safetensors"));
    ASSERT_EQ(file.tensors.size(), 3u);
    EXPECT_EQ(file.tensors[0].dtype, SafeDType::other);
    EXPECT_EQ(file.tensors[0].file_dtype, "BOOL");
    EXPECT_EQ(file.tensors[0].shape, (Shape{2, 2}));
    EXPECT_TRUE(file.tensors[0].floats.empty() && file.tensors[0].doubles.empty());
    EXPECT_EQ(file.tensors[1].file_dtype, "I64");
    EXPECT_EQ(file.tensors[2].floats, std::vector<float>{1.0f});
    EXPECT_EQ(file.tensors[2].file_dtype, "F32");
    // and never written
    EXPECT_THROW(write_safetensors(dir.file("back.safetensors"), {file.tensors[0]}), Error);
}

// A header entry for a tensor.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, RefusesEachKindOfBadFileInOneLine) {
    const std::string a8 = entry("a", "F32", "[2]", "[0,8]"), d8(8, '\0');
    const struct {
        const char* what;
        std::string bytes, message;
    } cases[] = {
        {"short", "abc", "the file has 3 bytes, fewer than the 8 of the header size"},
        {"header limit", le_bytes(100'000'001, 8) + "{}", "the header size, 100000001 bytes, is over the limit of 100000000"},
        {"header past end", le_bytes(50, 8) + "{}", "the header size, 50 bytes, reaches past the end of the file (10 bytes)"},
        {"invalid JSON", file_of("{\"a\":"), "the header is not valid JSON: [json.exception.parse_error.101]"},
        {"not UTF-8", file_of("{\"\xff\":1}"), "the header is not valid JSON"},
        {"huge number", file_of("{\"a\":1e999}"), "the header is not valid JSON"},
        {"not an object", file_of("[1,2]"), "the header does not start with '{'"},
        {"leading space", file_of(" {}"), "the header does not start with '{'"},
        {"entry not an object", file_of("{\"a\":3}"), "tensor \"a\": the entry is not a JSON object"},
        {"no data_offsets", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d8), "tensor \"a\": the entry has no \"data_offsets\""},
        {"no dtype", file_of("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d8), "tensor \"a\": the entry has no \"dtype\""},
        {"dtype not a string", file_of("{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", d8), "tensor \"a\": \"dtype\" is not a string"},
        {"integer dtype, wrong span", file_of("{" + entry("a", "I64", "[2]", "[0,8]") + "}", d8), "tensor \"a\": data_offsets [0, 8] hold 8 bytes, but shape (2) of I64 needs 16"},
        {"unknown dtype", file_of("{" + entry("a", "f32", "[2]", "[0,8]") + "}", d8), "tensor \"a\": dtype \"f32\" is not a safetensors dtype"},
        {"shape not array", file_of("{" + entry("a", "F32", "2", "[0,8]") + "}", d8), "tensor \"a\": \"shape\" is not a JSON array"},
        {"negative extent", file_of("{" + entry("a", "F32", "[2,-1]", "[0,8]") + "}", d8), "tensor \"a\": shape entry 1 (-1) is not a non-negative integer"},
        {"float extent", file_of("{" + entry("a", "F32", "[2.0]", "[0,8]") + "}", d8), "tensor \"a\": shape entry 0 (2.0) is not a non-negative integer"},
        {"extent past 2^64", file_of("{" + entry("a", "F32", "[18446744073709551616]", "[0,8]") + "}", d8), "tensor \"a\": shape entry 0"},
        {"bytes overflow", file_of("{" + entry("a", "F32", "[4611686018427387904]", "[0,0]") + "}"), "tensor \"a\": shape (4611686018427387904) of F32 is more than 2^64 bytes"},
        {"numel overflow", file_of("{" + entry("a", "F16", "[4294967296,4294967296,0]", "[0,0]") + "}"), "is more than 2^64 bytes"},
        {"one offset", file_of("{" + entry("a", "F32", "[2]", "[0]") + "}", d8), "tensor \"a\": \"data_offsets\" ([0]) is not two non-negative integers"},
        {"offsets strings", file_of("{" + entry("a", "F32", "[2]", "[\"0\",\"8\"]") + "}", d8), "tensor \"a\": \"data_offsets\" ([\"0\",\"8\"]) is not two"},
        {"offsets object", file_of("{" + entry("a", "F32", "[2]", "{}") + "}", d8), "tensor \"a\": \"data_offsets\" ({}) is not two"},
        {"negative offset", file_of("{" + entry("a", "F32", "[2]", "[-8,0]") + "}", d8), "tensor \"a\": \"data_offsets\" ([-8,0]) is not two"},
        {"decreasing", file_of("{" + entry("a", "F32", "[2]", "[8,0]") + "}", d8), "tensor \"a\": data_offsets [8, 0] end before they begin"},
        {"past the data", file_of("{" + entry("a", "F32", "[2]", "[8,16]") + "}", d8), "tensor \"a\": data_offsets [8, 16] reach past the data section (8 bytes)"},
        {"size mismatch", file_of("{" + entry("a", "F32", "[3]", "[0,8]") + "}", d8), "tensor \"a\": data_offsets [0, 8] hold 8 bytes, but shape (3) of F32 needs 12"},
        {"overlap", file_of("{" + a8 + "," + entry("b", "F32", "[2]", "[4,12]") + "}", std::string(12, '\0')),
         "tensor \"b\": its data [4, 12) overlaps tensor \"a\"'s [0, 8)"},
        {"empty inside another", file_of("{" + a8 + "," + entry("b", "F32", "[0]", "[4,4]") + "}", d8), "tensor \"b\": its data [4, 4) overlaps tensor \"a\"'s"},
        {"gap", file_of("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}", std::string(12, '\0')),
         "tensor \"b\": bytes [4, 8) before its data belong to no tensor"},
        {"gap first", file_of("{" + entry("a", "F32", "[1]", "[4,8]") + "}", d8), "tensor \"a\": bytes [0, 4) before its data belong to no tensor"},
        {"bytes after", file_of("{" + entry("a", "F32", "[1]", "[0,4]") + "}", d8), "the last 4 bytes of the data section (8 bytes) belong to no tensor"},
        {"data without tensors", file_of("{}", d8), "the last 8 bytes of the data section (8 bytes) belong to no tensor"},
        {"duplicate name", file_of("{" + a8 + "," + a8 + "}", d8), "tensor \"a\": the name appears twice in the header"},
        {"duplicate field", file_of("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8),
         "tensor \"a\": the key \"dtype\" appears twice in one object"},
        {"duplicate metadata", file_of("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), "\"__metadata__\": the key \"k\" appears twice in one object"},
        {"duplicate deeper", file_of("{\"a\":{\"x\":[{\"y\":1,\"y\":2}]}}"), "tensor \"a\": the key \"y\" appears twice in one object"},
        {"metadata array", file_of("{\"__metadata__\":[1]}"), "\"__metadata__\" is not a JSON object of strings"},
        {"metadata number", file_of("{\"__metadata__\":{\"k\":1}}"), "\"__metadata__\" entry \"k\" is not a string (1)"},
        {"newline in a name", file_of("{\"a\\nb\":3}"), "tensor \"a\\nb\": the entry is not a JSON object"},
    };
    const test::TempDir dir("attnlab_safetensors_");
    for (const auto& c : cases) {
        const std::string path = dir.file("bad.safetensors");
        write_bytes(path, c.bytes);
        const std::string message = refusal(path);
        EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << c.what << ": " << message;
        EXPECT_NE(message.find(c.message), std::string::npos) << c.what << ": " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << c.what << ": " << message;
    }
    EXPECT_EQ(refusal(dir.file("missing.safetensors")), dir.file("missing.safetensors") + ": no such file");
    EXPECT_EQ(refusal(dir.path().string()), dir.path().string() + ": not a regular file");
}

// Issue 51: a value a message quotes is escaped and cut short (data/quoted.h),
// and a header nested more than kMaxJsonDepth deep is refused before it is
// parsed (quoting a shape nested 400,000 deep recursed until SIGSEGV).
TEST(Safetensors, DeepLongAndInvalidValuesAreQuotedShort) {
    const std::string deep = std::string(400'000, '[') + std::string(400'000, ']');
    const std::string hundred = std::string(100, '[') + std::string(100, ']');
    const std::string long_name(1 << 20, 'n');
    const test::TempDir dir("attnlab_safetensors_");
    const std::string path = dir.file("bad.safetensors");
    const std::string too_deep = path + ": the header has arrays and objects nested more than 128 deep at byte ";
    const struct {
        const char* what;
        std::string header, message;
    } cases[] = {
        {"deep shape", "{" + entry("a", "F32", "[" + deep + "]", "[0,0]") + "}", too_deep},
        {"deep metadata", "{\"__metadata__\":{\"k\":" + deep + "}}", too_deep},
        {"deep in an entry", "{\"a\":{\"x\":" + deep + "}}", too_deep},
        {"hundred-deep shape entry", "{" + entry("a", "F32", "[" + hundred + "]", "[0,0]") + "}",
         path + ": tensor \"a\": shape entry 0 ([[[[[...]]]]]) is not a non-negative integer"},
        {"hundred-deep offsets", "{" + entry("a", "F32", "[0]", hundred) + "}",
         path + ": tensor \"a\": \"data_offsets\" ([[[[[...]]]]]) is not two non-negative integers"},
        {"hundred-deep metadata", "{\"__metadata__\":{\"k\":" + hundred + "}}",
         path + ": \"__metadata__\" entry \"k\" is not a string ([[[[[...]]]]])"},
        {"long metadata", "{\"__metadata__\":{\"k\":[\"" + long_name + "\"]}}",
         path + ": \"__metadata__\" entry \"k\" is not a string ([\"" + std::string(kQuotedBytes - 1, 'n') + "...\"])"},
        {"long name", "{\"" + long_name + "\":3}",
         path + ": tensor \"" + std::string(kQuotedBytes, 'n') + "...\" (1048576 bytes): the entry is not a JSON object"},
        {"long dtype", "{" + entry("a", long_name, "[0]", "[0,0]") + "}",
         path + ": tensor \"a\": dtype \"" + std::string(kQuotedBytes, 'n') + "...\" (1048576 bytes) is not a safetensors dtype (attnlab reads F16, BF16, F32, F64)"},
    };
    for (const auto& c : cases) {
        write_bytes(path, file_of(c.header));
        const std::string message = refusal(path);
        EXPECT_EQ(message.rfind(c.message, 0), 0u) << c.what << ": " << message.substr(0, 400);
        EXPECT_LT(message.size(), path.size() + 240) << c.what << ": " << message.substr(0, 400);
    }
    // the writer's refusal of a name that is not UTF-8 shows its bytes escaped
    try {
        write_safetensors(dir.file("w.safetensors"), {floats("\xc3(", {}, {1.0f})});
        ADD_FAILURE() << "written";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), dir.file("w.safetensors") + ": tensor name \"\\xC3(\" is not valid UTF-8");
    }
}

TEST(Safetensors, MetadataNullIsNone) {  // as the Rust implementation reads it (an Option)
    const test::TempDir dir("attnlab_safetensors_");
    write_bytes(dir.file("n.safetensors"), file_of("{\"__metadata__\":null}"));
    EXPECT_TRUE(read_safetensors(dir.file("n.safetensors")).metadata.empty());
}

TEST(Safetensors, WriterRefusesBadTensorsAndLeavesTheFileAlone) {
    const test::TempDir dir("attnlab_safetensors_");
    const std::string path = dir.file("keep.safetensors");
    write_safetensors(path, {floats("old", {1}, {1.0f})});
    const std::string before = read_bytes(path);
    SafeTensor both = floats("both", {1}, {1.0f});
    both.doubles = {2.0};
    const struct {
        const char* what;
        std::vector<SafeTensor> tensors;
        std::map<std::string, std::string> metadata;
        std::string message;
    } cases[] = {
        {"empty name", {floats("", {1}, {1.0f})}, {}, "a tensor has an empty name"},
        {"twice", {floats("x", {1}, {1.0f}), doubles("x", {1}, {1.0})}, {}, "tensor \"x\": the name is given twice"},
        {"metadata name", {floats("__metadata__", {}, {1.0f})}, {}, "a tensor is named \"__metadata__\""},
        {"count", {floats("x", {2, 2}, {1.0f, 2.0f, 3.0f})}, {}, "tensor \"x\": shape (2,2) has 4 values, but floats holds 3"},
        {"f64 count", {doubles("x", {}, {})}, {}, "tensor \"x\": shape () has 1 values, but doubles holds 0"},
        {"both vectors", {both}, {}, "tensor \"both\": dtype F32 is written from floats, but it holds doubles too"},
        {"shape overflow", {floats("x", {1ull << 32, 1ull << 32, 2}, {})}, {}, "tensor \"x\": shape (4294967296,4294967296,2) is too large"},
        {"name not UTF-8", {floats("\xc3(", {}, {1.0f})}, {}, "is not valid UTF-8"},
        {"metadata not UTF-8", {}, {{"k", "\xff"}}, "metadata value of \"k\" is not valid UTF-8"},
    };
    for (const auto& c : cases) {
        try {
            write_safetensors(path, c.tensors, c.metadata);
            ADD_FAILURE() << c.what << ": written";
        } catch (const Error& e) {
            const std::string message = e.what();
            EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << c.what << ": " << message;
            EXPECT_NE(message.find(c.message), std::string::npos) << c.what << ": " << message;
        }
        EXPECT_EQ(read_bytes(path), before) << c.what;
    }
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);  // no temporary left
}

// ---- the independent Python reader and writer ---------------------------------

const fs::path kReference = fs::path(ATTNLAB_SOURCE_DIR) / "tests" / "experiments" / "safetensors_reference.py";  // not __FILE__, which a ccache base_dir makes relative

int run_reference(const std::string& mode, const std::string& file, const std::string& dump) {
    const std::string command = "/usr/bin/python3 " + kReference.string() + " " + mode + " " + file + " " + dump;
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Dumped {
    std::string name, dtype;
    Shape shape;
    std::vector<double> values;
};

// The reference script's dump (its docstring gives the format), in file order.
std::vector<Dumped> read_dump(const std::string& path, std::map<std::string, std::string>& metadata) {
    std::vector<Dumped> tensors;
    std::istringstream lines(read_bytes(path));
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        Dumped tensor;
        words >> tensor.name;
        if (tensor.name == "__metadata__") {
            metadata = nlohmann::json::parse(line.substr(tensor.name.size())).get<std::map<std::string, std::string>>();
            continue;
        }
        size_t rank = 0;
        words >> tensor.dtype >> rank;
        tensor.shape.resize(rank);
        for (size_t& extent : tensor.shape) words >> extent;
        std::string word;
        while (words >> word) tensor.values.push_back(std::strtod(word.c_str(), nullptr));
        tensors.push_back(tensor);
    }
    return tensors;
}

void expect_matches(const std::vector<Dumped>& dumped, const SafetensorsFile& file) {
    ASSERT_EQ(dumped.size(), file.tensors.size());
    for (size_t i = 0; i < dumped.size(); ++i) {
        const SafeTensor& tensor = file.tensors[i];
        EXPECT_EQ(tensor.name, dumped[i].name);
        EXPECT_EQ(to_string(tensor.dtype), dumped[i].dtype) << tensor.name;
        EXPECT_EQ(tensor.shape, dumped[i].shape) << tensor.name;
        std::vector<double> values(tensor.floats.begin(), tensor.floats.end());
        if (tensor.dtype == SafeDType::f64) values = tensor.doubles;
        ASSERT_EQ(values.size(), dumped[i].values.size()) << tensor.name;
        for (size_t j = 0; j < values.size(); ++j) expect_same(dumped[i].values[j], values[j], tensor.name + "[" + std::to_string(j) + "]");
    }
}

TEST(Safetensors, ReadsWhatThePythonReferenceWrote) {
    const test::TempDir dir("attnlab_safetensors_");
    ASSERT_EQ(run_reference("write", dir.file("py.safetensors"), dir.file("py.dump")), 0);
    std::map<std::string, std::string> metadata;
    const std::vector<Dumped> dumped = read_dump(dir.file("py.dump"), metadata);
    ASSERT_EQ(dumped.size(), 6u);  // F16, BF16, F32, F64, a scalar and an empty tensor
    const SafetensorsFile file = read_safetensors(dir.file("py.safetensors"));
    expect_matches(dumped, file);
    EXPECT_EQ(file.metadata, metadata);
    EXPECT_EQ(file.metadata.at("note"), "caf\u00e9 \u2713");  // written as \u escapes
}

TEST(Safetensors, PythonReferenceReadsWhatWeWrote) {
    const test::TempDir dir("attnlab_safetensors_");
    const std::string path = dir.file("ours.safetensors");
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "\u00e9 \"x\""}};
    write_safetensors(path,
                      {floats("b.weight", {2, 3}, {1.0f / 3, -2.5f, 0.0f, 1e-40f, -1e30f, 6.0f}), doubles("z", {}, {std::numbers::pi}),
                       floats("a.bias", {3}, {0.5f, -0.0f, 7.0f}), floats("c.none", {4, 0}, {}), doubles("y", {2}, {1e-310, -1.0 / 3})},
                      metadata);
    ASSERT_EQ(run_reference("read", path, dir.file("ours.dump")), 0);
    std::map<std::string, std::string> dumped_metadata;
    const std::vector<Dumped> dumped = read_dump(dir.file("ours.dump"), dumped_metadata);
    expect_matches(dumped, read_safetensors(path));
    EXPECT_EQ(dumped_metadata, metadata);
}

}  // namespace
}  // namespace attnlab
