// safetensors files (Hugging Face's format for model weights), read and written
// with every bound checked, so that a downloaded or crafted file can only end in
// one line naming what is wrong.
//
// The format: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (maybe
// padded with trailing spaces), then the raw little-endian data:
//
//   {"__metadata__": {"format": "pt"},                           optional, string -> string
//    "wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]}, ...}
//
// data_offsets are [begin, end) in bytes from the first byte after the header.
// We follow the Rust reference implementation (huggingface/safetensors), which
// requires the tensors, taken in offset order, to cover the data section exactly:
// no gap, no overlap, no byte after the last tensor. Like it we limit the header
// to 100 MB and require it to start with '{'; unlike it we refuse a key given
// twice anywhere in the header (JSON parsers keep one of them silently).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

// The dtypes attnlab reads. F16 and BF16 become float exactly (every half and
// bfloat16 value, subnormals, infinities and NaN included, is a float), so they
// share F32's storage; the enum keeps the file's own dtype for callers that care.
// The format's other dtypes (BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F8_E5M2,
// F8_E4M3: a tool's buffers, such as GPT-NeoX's boolean causal mask) are `other`:
// their entries are checked as every entry is, their values not read, and a
// caller that needs one refuses it. A dtype name outside the format is refused.
enum class SafeDType { f16, bf16, f32, f64, other };
std::string to_string(SafeDType dtype);  // "F16", "BF16", "F32", "F64" (the names in the file), "other"

struct SafeTensor {
    std::string name;
    SafeDType dtype = SafeDType::f32;
    Shape shape;                  // [] for a scalar (one value); a 0 anywhere for an empty tensor
    std::vector<float> floats;    // F16, BF16, F32: numel values, row-major (C order)
    std::vector<double> doubles;  // F64: numel values, row-major; the other vector stays empty
    std::string file_dtype;       // the dtype's name in the file ("F32", "BOOL", ...): what an `other` tensor was
};

struct SafetensorsFile {
    std::vector<SafeTensor> tensors;  // in file order (by data offset; equal offsets, of empty tensors, by name)
    std::map<std::string, std::string> metadata;
};

// Reads and checks a whole file. Throws attnlab::Error, one line starting with
// the path and naming the tensor where there is one, for: a missing or
// unreadable file; a file shorter than 8 bytes; a header size over 100 MB or past
// the end of the file; a header that is not a JSON object (invalid JSON or
// UTF-8, not starting with '{'); a key given twice; an entry that is not an
// object, or lacks dtype, shape or data_offsets, or holds one of the wrong JSON
// type; a dtype name the format does not have; a negative or non-integer dimension; a
// size in bytes past 2^64; data_offsets that are not two non-decreasing
// integers, reach past the data section, or span other than numel * dtype size
// bytes; tensors that overlap, leave a gap, or leave bytes after the last one;
// metadata that is not an object of strings. Nothing is allocated for the data
// before the header has been checked against the file's size.
SafetensorsFile read_safetensors(const std::string& path);

// Writes `tensors` atomically (experiments/files/run_files.h: nothing
// half-written on failure): F64 for dtype f64 (from `doubles`), F32 for the
// others (from `floats`: an F16 or BF16 tensor read earlier is written as F32,
// holding the same values). As the Rust implementation does, F64 tensors come
// first and then F32 ones, each sorted by name, at contiguous offsets, and the
// header is padded with spaces to a multiple of 8 bytes, so that every tensor
// starts aligned to its element size (for readers that map the file). Empty
// `metadata` writes no "__metadata__". Refuses (an Error starting with the path;
// the file is not touched) an empty, repeated or "__metadata__" name, a name or
// metadata string that is not UTF-8, and a value count other than the shape's
// numel (or values in the vector the dtype does not use).
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace attnlab
