// Datasets: their declared type and shape, checked against what a reader
// expects and against the storage the file holds; whole and row reads, appends.
#include "data/h5file.h"
#include "data/h5file_detail.h"

#include <cstring>
#include <utility>

namespace attnlab::h5 {

using namespace detail;

namespace {

// The two dataspaces of a transfer of rows [first, first + count) of `dataset`
// (its current extent `dims`): the rows selected in the file, and a memory space of their shape.
struct RowSpaces {
    Id file, memory;
};
RowSpaces row_spaces(hid_t dataset, const std::vector<hsize_t>& dims, size_t first, size_t count, const Where& where) {
    std::vector<hsize_t> start(dims.size(), 0), extent = dims;
    start[0] = first;
    extent[0] = count;
    Id file_space = make(H5Dget_space(dataset), H5Sclose, where, "cannot read its dataspace");
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr), where,
          "cannot select rows");
    return {std::move(file_space), simple_space(extent, nullptr, where)};
}

// An integer of `size` bytes (1, 2, 4 or 8), as int64 (a uint64 above 2^63 wraps).
int64_t integer_at(const unsigned char* bytes, size_t size, bool is_signed) {
    switch (size) {
        case 1: { int8_t s; uint8_t u; std::memcpy(&s, bytes, 1); std::memcpy(&u, bytes, 1); return is_signed ? s : u; }
        case 2: { int16_t s; uint16_t u; std::memcpy(&s, bytes, 2); std::memcpy(&u, bytes, 2); return is_signed ? s : u; }
        case 4: { int32_t s; uint32_t u; std::memcpy(&s, bytes, 4); std::memcpy(&u, bytes, 4); return is_signed ? s : static_cast<int64_t>(u); }
        default: { int64_t s; std::memcpy(&s, bytes, 8); return s; }
    }
}

bool is_word_size(size_t size) { return size == 1 || size == 2 || size == 4 || size == 8; }

const char* type_words(Expect::Type type) {
    switch (type) {
        case Expect::Type::integers: return "integers";
        case Expect::Type::floats: return "floats";
        case Expect::Type::integers_or_bools: return "integers or bools";
    }
    return "";
}

}  // namespace

// ---- datasets ----------------------------------------------------------------

std::vector<hsize_t> Dataset::dims() const {
    Id space = make(H5Dget_space(id()), H5Sclose, where_, "cannot read its dataspace");
    if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) where_.fail("holds no data (a null dataspace)", false);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) where_.fail("cannot read its rank");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
        where_.fail("cannot read its shape");
    return dims;
}

Shape Dataset::shape() const {
    const std::vector<hsize_t> d = dims();
    return Shape(d.begin(), d.end());
}

size_t Dataset::rows() const {
    const std::vector<hsize_t> d = dims();
    if (d.empty()) where_.fail("is a scalar, not a series", false);
    return d[0];
}

H5T_class_t Dataset::type_class() const {
    Id type = make(H5Dget_type(id()), H5Tclose, where_, "cannot read its type");
    return H5Tget_class(type.get());
}

size_t Dataset::type_size() const {
    Id type = make(H5Dget_type(id()), H5Tclose, where_, "cannot read its type");
    return H5Tget_size(type.get());
}

bool Dataset::type_signed() const {
    Id type = make(H5Dget_type(id()), H5Tclose, where_, "cannot read its type");
    if (H5Tget_class(type.get()) == H5T_ENUM) type = make(H5Tget_super(type.get()), H5Tclose, where_, "cannot read its type");
    return H5Tget_class(type.get()) == H5T_INTEGER ? H5Tget_sign(type.get()) == H5T_SGN_2 : true;
}

std::string Dataset::type_name() const {
    const std::string bits = std::to_string(8 * type_size());
    switch (type_class()) {
        case H5T_FLOAT: return "float" + bits;
        case H5T_INTEGER: return (type_signed() ? "int" : "uint") + bits;
        case H5T_ENUM: return std::string("enum(") + (type_signed() ? "int" : "uint") + bits + ")";
        case H5T_STRING: return "string";
        default: return "a non-numeric type";
    }
}

uint64_t Dataset::numel_backed() const {
    const std::vector<hsize_t> d = dims();
    const Shape declared(d.begin(), d.end());
    uint64_t count = 1;
    for (hsize_t extent : d)
        if (extent == 0) return 0;
    for (hsize_t extent : d) {
        if (count > kMaxElements / extent)
            where_.fail("declares shape " + shape_str(declared) + ", more than 2^32 elements", false);
        count *= extent;
    }
    const uint64_t element = type_size();
    if (element == 0 || count > UINT64_MAX / element) where_.fail("declares elements of an unusable size", false);
    const uint64_t bytes = count * element;

    Id creation = make(H5Dget_create_plist(id()), H5Pclose, where_, "cannot read its creation properties");
    const H5D_layout_t layout = H5Pget_layout(creation.get());
    if (layout == H5D_VIRTUAL) where_.fail("is a virtual dataset (its data lives in other files); not read", false);
    if (H5Pget_external_count(creation.get()) != 0)
        where_.fail("keeps its data in external files; not read", false);
    const uint64_t stored = H5Dget_storage_size(id());
    const uint64_t file_size = file_size_of(id(), where_);
    if (stored > file_size)
        where_.fail("claims " + bytes_str(stored) + " of storage in a file of " + bytes_str(file_size) + " (corrupt?)",
                    false);
    const uint64_t most = layout == H5D_CHUNKED ? stored * kMaxCompression : stored;
    if (bytes > most)
        where_.fail("declares shape " + shape_str(declared) + " of " + type_name() + " (" + bytes_str(bytes) +
                        ") but the file stores " + bytes_str(stored) + " of data for it",
                    false);
    return count;
}

Shape Dataset::require(const Expect& expect) const {
    const Shape found = shape();
    const H5T_class_t found_class = type_class();
    const bool word = is_word_size(type_size());
    bool type_ok = false;
    switch (expect.type) {
        case Expect::Type::integers: type_ok = found_class == H5T_INTEGER && word; break;
        case Expect::Type::floats: type_ok = found_class == H5T_FLOAT && (type_size() == 4 || type_size() == 8); break;
        case Expect::Type::integers_or_bools:
            type_ok = (found_class == H5T_INTEGER || found_class == H5T_ENUM) && word;
            break;
    }
    bool shape_ok = found.size() <= kMaxRank;
    if (expect.extents) {
        shape_ok = found.size() == expect.extents->size();
        for (size_t axis = 0; shape_ok && axis < found.size(); ++axis)
            shape_ok = (*expect.extents)[axis] == Expect::kAny || (*expect.extents)[axis] == found[axis];
    }
    if (!type_ok || !shape_ok)
        where_.fail("is " + type_name() + " " + shape_str(found) + ", expected " + type_words(expect.type) +
                        (expect.shape.empty() ? "" : " " + expect.shape),
                    false);
    numel_backed();
    return found;
}

std::vector<int64_t> Dataset::read_enum_integers(uint64_t count) const {
    Id stored = make(H5Dget_type(id()), H5Tclose, where_, "cannot read its type");
    Id memory = make(H5Tget_native_type(stored.get(), H5T_DIR_ASCEND), H5Tclose, where_, "cannot read its type");
    const size_t size = H5Tget_size(memory.get());
    if (!is_word_size(size)) where_.fail("is " + type_name() + ", an enum of an unusable size", false);
    const bool is_signed = type_signed();
    std::vector<unsigned char> raw(count * size);
    if (count > 0) read_raw(memory.get(), raw.data());
    std::vector<int64_t> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = integer_at(raw.data() + i * size, size, is_signed);
    return values;
}

void Dataset::read_raw(hid_t memory_type, void* out) const {
    check(H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), where_, "cannot read");
}

void Dataset::check_rows(size_t first, size_t count) const {
    const size_t n = rows();
    if (first > n || count > n - first)
        where_.fail("rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") out of " +
                        std::to_string(n),
                    false);
    numel_backed();
}

void Dataset::read_rows_raw(hid_t memory_type, size_t first, size_t count, void* out) const {
    check_rows(first, count);
    if (count == 0) return;
    const RowSpaces rows = row_spaces(id(), dims(), first, count, where_);
    check(H5Dread(id(), memory_type, rows.memory.get(), rows.file.get(), H5P_DEFAULT, out), where_, "cannot read rows");
}

void Dataset::append_raw(hid_t memory_type, const void* values, size_t count) {
    if (count == 0) return;
    std::vector<hsize_t> d = dims();
    if (d.empty()) where_.fail("is a scalar, not a series", false);
    const size_t first = d[0];
    d[0] += count;
    check(H5Dset_extent(id(), d.data()), where_, "cannot extend to " + std::to_string(d[0]) + " rows");
    const RowSpaces rows = row_spaces(id(), d, first, count, where_);  // the new extent: the new rows exist
    check(H5Dwrite(id(), memory_type, rows.memory.get(), rows.file.get(), H5P_DEFAULT, values), where_, "cannot append rows");
}

void Dataset::resize(size_t rows) {
    std::vector<hsize_t> d = dims();
    if (d.empty()) where_.fail("is a scalar, not a series", false);
    d[0] = rows;
    check(H5Dset_extent(id(), d.data()), where_, "cannot resize to " + std::to_string(rows) + " rows");
}

void Dataset::close() {
    if (id_.reset() < 0) where_.fail("cannot close");
}

}  // namespace attnlab::h5
