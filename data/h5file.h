// Small RAII helpers over the HDF5 C API for the files a run writes and reads
// (metrics log, checkpoints, token files). Every failure throws attnlab::Error
// naming the file and the object, with HDF5's own innermost reason when it has one:
//
//   [checkpoint] runs/a/checkpoints/step_0000100.h5: /params/head.weight: cannot read (HDF5: ...)
//
// The bracketed tag is chosen by whoever opens the file, so a checkpoint error
// reads as one. HDF5's automatic printing of its error stack is switched off
// the first time a file is opened or created here.
//
// Reading trusts nothing a file declares: a dataset is checked against what the
// reader expects (Expect) and against the storage the file really holds before
// anything is allocated; external links (to other files) are never followed,
// and visiting a group's datasets follows hard links only, bounded.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab::h5 {

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Id {
public:
    Id() = default;
    Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
    Id(Id&& other) noexcept;
    Id& operator=(Id&& other) noexcept;
    Id(const Id&) = delete;
    Id& operator=(const Id&) = delete;
    ~Id() { reset(); }

    hid_t get() const { return id_; }
    bool valid() const { return id_ >= 0; }
    herr_t reset();  // closes now (if open); returns the close status

private:
    hid_t id_ = H5I_INVALID_HID;
    herr_t (*close_)(hid_t) = nullptr;
};

// Turns off HDF5's automatic error printing (idempotent; called by File).
void silence_errors();
// The most specific message on HDF5's error stack ("" if empty), then clears it.
std::string take_error();

// The memory types of the element types we store.
template <class T> hid_t native_type();
template <> inline hid_t native_type<float>() { return H5T_NATIVE_FLOAT; }
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> inline hid_t native_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> inline hid_t native_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> inline hid_t native_type<uint64_t>() { return H5T_NATIVE_UINT64; }
template <> inline hid_t native_type<uint8_t>() { return H5T_NATIVE_UINT8; }

// What error messages say about an object: the tag, the file, the object's path.
struct Where {
    std::string tag;     // "checkpoint", "metrics", ...
    std::string file;
    std::string object;  // "/", "/train", "/train/loss"
    [[noreturn]] void fail(const std::string& problem, bool with_hdf5_reason = true) const;
};

// What a reader accepts of a dataset. Dataset::require compares it with the type
// and shape the file declares (metadata only: nothing is allocated or read)
// and refuses a mismatch with one line naming both:
//
//   [token_file] t.h5: /tokens: is float32 (8,10), expected integers [N, S]
struct Expect {
    enum class Type { integers, floats, integers_or_bools };  // bools: h5py's enum over int8
    static constexpr size_t kAny = static_cast<size_t>(-1);

    Type type = Type::integers;
    // The extent of each axis (kAny: any extent); unset: any rank up to kMaxRank.
    std::optional<std::vector<size_t>> extents;
    std::string shape;  // in messages: "[N, S]", "[n]", "[8] (one per row of /tokens)"

    static Expect array(Type type, std::vector<size_t> extents, std::string shape) {
        return Expect{type, std::move(extents), std::move(shape)};
    }
    static Expect tensor(Type type) { return Expect{type, std::nullopt, ""}; }
};

// Limits on what a file may declare, whatever its size.
constexpr size_t kMaxRank = 8;
constexpr uint64_t kMaxElements = uint64_t{1} << 32;
// Chunked datasets may be compressed: their declared bytes may exceed the bytes
// stored by at most this factor (deflate's ceiling is 1032).
constexpr uint64_t kMaxCompression = 1100;

class Dataset {
public:
    Dataset() = default;
    Dataset(Id id, Where where) : id_(std::move(id)), where_(std::move(where)) {}

    hid_t id() const { return id_.get(); }
    const Where& where() const { return where_; }
    Shape shape() const;   // () for a scalar dataset
    size_t rows() const;   // extent of the first dimension
    // The stored element type: its class (H5T_FLOAT, H5T_INTEGER, H5T_ENUM, ...),
    // size in bytes and signedness (integers and the integer base of enums).
    H5T_class_t type_class() const;
    size_t type_size() const;
    bool type_signed() const;
    std::string type_name() const;  // "float32", "int64", "uint8", "enum(int8)", ...

    // The number of elements, once the file is known to hold them: refuses a
    // null dataspace, more than kMaxElements, data kept outside the file
    // (external raw files, virtual datasets), and more bytes than the file
    // stores for the dataset (contiguous and compact layouts: all of them;
    // chunked: a kMaxCompression share).
    uint64_t numel_backed() const;
    // The declared shape, if the type and shape are what `expect` says and the
    // data is backed (numel_backed); else throws naming what was found.
    Shape require(const Expect& expect) const;

    // The whole dataset converted by HDF5 to T (numel_backed() elements).
    template <class T> std::vector<T> read() const;
    // require(expect), then the whole dataset as T; Type::integers_or_bools reads
    // the integers under an enum too (HDF5 converts enums only to enums).
    template <class T> std::vector<T> read(const Expect& expect) const;
    template <class T> void read_into(T* out) const { read_raw(native_type<T>(), out); }
    void read_raw(hid_t memory_type, void* out) const;
    // Rows [first, first + count) of the first dimension, converted to T.
    template <class T> std::vector<T> read_rows(size_t first, size_t count) const;
    void read_rows_raw(hid_t memory_type, size_t first, size_t count, void* out) const;

    // Extendible datasets (unlimited first dimension): adds `count` rows from
    // `values` (count * row size elements, row-major) at the end.
    template <class T> void append(const T* values, size_t count) { append_raw(native_type<T>(), values, count); }
    void append_raw(hid_t memory_type, const void* values, size_t count);
    void resize(size_t rows);  // sets the first dimension (grows with fill, or truncates)

    void close();  // closes now, throwing on failure (the destructor stays silent)

private:
    std::vector<hsize_t> dims() const;
    std::vector<int64_t> read_enum_integers(uint64_t count) const;
    void check_rows(size_t first, size_t count) const;  // in range, and the data backed
    Id id_;
    Where where_;
};

// A file or a group: where links, datasets and attributes live.
class Group {
public:
    Group() = default;
    Group(Id id, Where where) : id_(std::move(id)), where_(std::move(where)) {}

    hid_t id() const { return id_.get(); }
    const Where& where() const { return where_; }

    // Whether the link `name` ("a" or "a/b") exists; each parent is checked first.
    bool has(const std::string& name) const;
    bool is_group(const std::string& name) const;  // exists and is a group
    // Names of the direct members, in creation order when the group tracks it
    // (groups made with create_group do), else in name order.
    std::vector<std::string> members() const;
    // Every dataset below this group, depth first in member order, with its
    // path relative to this group ("a/b"). Follows hard links only, so it ends
    // on any file: a soft or external link, a group met twice (a hard-link
    // cycle), nesting deeper than kMaxDepth, and a member that is neither a
    // group nor a dataset are refused, naming it.
    static constexpr int kMaxDepth = 16;
    void visit_datasets(const std::function<void(const Dataset&, const std::string&)>& visit) const;

    Group group(const std::string& name) const;  // an existing group
    Group create_group(const std::string& name) const;  // tracks creation order
    Dataset dataset(const std::string& name) const;  // an existing dataset

    // A fixed-size dataset of `shape` (empty shape: scalar) holding `values`
    // (numel(shape) elements, row-major), stored as T.
    template <class T> Dataset write(const std::string& name, const Shape& shape, const T* values) const {
        return write_raw(name, shape, native_type<T>(), values);
    }
    template <class T> Dataset write(const std::string& name, const std::vector<T>& values) const {
        return write_raw(name, Shape{values.size()}, native_type<T>(), values.data());
    }
    Dataset write_raw(const std::string& name, const Shape& shape, hid_t type, const void* values) const;
    // A 1-D dataset of variable-length UTF-8 strings (h5py reads them as bytes or str).
    Dataset write_strings(const std::string& name, const std::vector<std::string>& values) const;

    // An empty dataset of shape [0, row_shape...], unlimited along the first
    // dimension, chunked `chunk_rows` rows at a time; unwritten rows read as
    // `fill` (converted to T: NaN for float series shows a row not yet written).
    template <class T> Dataset create_extendible(const std::string& name, const Shape& row_shape,
                                                 size_t chunk_rows, T fill = T{}) const {
        return create_extendible_raw(name, row_shape, chunk_rows, native_type<T>(), &fill);
    }
    Dataset create_extendible_raw(const std::string& name, const Shape& row_shape, size_t chunk_rows,
                                  hid_t type, const void* fill) const;

    // Attributes on this group (a file's are on its root group "/").
    bool has_attr(const std::string& name) const;
    void write_attr_string(const std::string& name, const std::string& value) const;  // UTF-8, variable length
    void write_attr_int(const std::string& name, int64_t value) const;
    void write_attr_double(const std::string& name, double value) const;
    std::string read_attr_string(const std::string& name) const;  // fixed or variable length
    int64_t read_attr_int(const std::string& name) const;          // integer attributes only
    double read_attr_double(const std::string& name) const;        // integer or float attributes

protected:
    Id id_;
    Where where_;
};

class File : public Group {
public:
    enum class Access { read, write };

    File() = default;

    // Creates `path`, replacing any file there. `latest_format` selects the
    // newest file format (libver bounds latest/latest), which SWMR requires.
    static File create(const std::string& path, const std::string& tag, bool latest_format = false);

    // Opens an existing file. A missing file, a file that is not HDF5, and one
    // HDF5 cannot open (truncated, corrupt) each get their own message.
    // `swmr_read`: read while another process writes in SWMR mode.
    // `clear_write_flags`: a writer that died leaves the file marked "open for
    // write", which HDF5 refuses to open again for writing (h5clear -s clears
    // the mark); this clears it, so use it only when no other process can be
    // writing the file.
    static File open(const std::string& path, const std::string& tag, Access access,
                     bool latest_format = false, bool swmr_read = false, bool clear_write_flags = false);

    const std::string& path() const { return where_.file; }

    // Single-writer/multiple-reader mode: from now on readers may open the file
    // with SWMR read while this process appends. No group, dataset or attribute
    // can be created after this call, and no attribute may be open during it.
    void start_swmr_write();
    void flush();  // everything written so far reaches the file (H5Fflush, global scope)
    void close();  // closes now, throwing on failure (the destructor stays silent)
};

template <class T> std::vector<T> Dataset::read() const {
    std::vector<T> values(numel_backed());
    if (!values.empty()) read_raw(native_type<T>(), values.data());
    return values;
}

template <class T> std::vector<T> Dataset::read(const Expect& expect) const {
    const uint64_t count = numel_of(require(expect));
    if (type_class() == H5T_ENUM) {
        const std::vector<int64_t> integers = read_enum_integers(count);
        return std::vector<T>(integers.begin(), integers.end());
    }
    std::vector<T> values(count);
    if (!values.empty()) read_raw(native_type<T>(), values.data());
    return values;
}

template <class T> std::vector<T> Dataset::read_rows(size_t first, size_t count) const {
    check_rows(first, count);
    Shape row_shape = shape();
    row_shape.erase(row_shape.begin());
    std::vector<T> values(count * numel_of(row_shape));
    if (!values.empty()) read_rows_raw(native_type<T>(), first, count, values.data());
    return values;
}

}  // namespace attnlab::h5
