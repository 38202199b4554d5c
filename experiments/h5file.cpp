#include "experiments/h5file.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

namespace attnlab::h5 {

// ---- identifiers and errors ------------------------------------------------

Id::Id(Id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}

Id& Id::operator=(Id&& other) noexcept {
    if (this != &other) {
        reset();
        id_ = std::exchange(other.id_, H5I_INVALID_HID);
        close_ = other.close_;
    }
    return *this;
}

herr_t Id::reset() {
    herr_t status = 0;
    if (id_ >= 0 && close_) status = close_(id_);
    id_ = H5I_INVALID_HID;
    return status;
}

void silence_errors() {
    static const bool silenced = [] {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)silenced;
}

std::string take_error() {
    std::string message;
    // Upward: the first entry is where the error was first detected (most specific).
    H5Ewalk2(
        H5E_DEFAULT, H5E_WALK_UPWARD,
        [](unsigned n, const H5E_error2_t* error, void* out) -> herr_t {
            if (n == 0 && error->desc) *static_cast<std::string*>(out) = error->desc;
            return 0;
        },
        &message);
    H5Eclear2(H5E_DEFAULT);
    return message;
}

void Where::fail(const std::string& problem, bool with_hdf5_reason) const {
    std::string message = "[" + tag + "] " + file + ": ";
    if (!object.empty()) message += object + ": ";
    message += problem;
    if (with_hdf5_reason) {
        const std::string reason = take_error();
        if (!reason.empty()) message += " (HDF5: " + reason + ")";
    }
    throw Error(message);
}

namespace {

Where child(const Where& parent, const std::string& name) {
    Where where = parent;
    where.object = (parent.object.empty() || parent.object == "/") ? "/" + name : parent.object + "/" + name;
    return where;
}

Where attribute(const Where& parent, const std::string& name) {
    Where where = parent;
    where.object = (parent.object.empty() ? "/" : parent.object) + " attribute '" + name + "'";
    return where;
}

Id make(hid_t id, herr_t (*close)(hid_t), const Where& where, const std::string& problem) {
    if (id < 0) where.fail(problem);
    return Id(id, close);
}

void check(herr_t status, const Where& where, const std::string& problem) {
    if (status < 0) where.fail(problem);
}

std::vector<hsize_t> to_dims(const Shape& shape) { return std::vector<hsize_t>(shape.begin(), shape.end()); }

Id simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>* max_dims, const Where& where) {
    if (dims.empty()) return make(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot make a scalar dataspace");
    return make(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims ? max_dims->data() : nullptr),
                H5Sclose, where, "cannot make a dataspace");
}

Id scalar_space(const Where& where) { return make(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot make a dataspace"); }

// Opens `name` under `parent` and checks it is a group or a dataset.
Id open_object(const Group& parent, const std::string& name, H5I_type_t expected, const Where& where) {
    const char* kind = expected == H5I_GROUP ? "group" : "dataset";
    if (!parent.has(name)) where.fail(std::string("no such ") + kind, false);
    hid_t id = H5Oopen(parent.id(), name.c_str(), H5P_DEFAULT);
    if (id < 0) where.fail(std::string("cannot open ") + kind);
    if (H5Iget_type(id) != expected) {
        H5Oclose(id);
        where.fail(std::string("is not a ") + kind, false);
    }
    return Id(id, H5Oclose);
}

Id open_attr(const Group& owner, const std::string& name, const Where& where) {
    if (!owner.has_attr(name)) where.fail("missing", false);
    return make(H5Aopen(owner.id(), name.c_str(), H5P_DEFAULT), H5Aclose, where, "cannot open");
}

// Number of elements of an attribute's dataspace; our attributes are single values.
void check_single(const Id& attr, const Where& where) {
    Id space = make(H5Aget_space(attr.get()), H5Sclose, where, "cannot read its dataspace");
    if (H5Sget_simple_extent_npoints(space.get()) != 1) where.fail("is not a single value", false);
}

}  // namespace

// ---- datasets ----------------------------------------------------------------

std::vector<hsize_t> Dataset::dims() const {
    Id space = make(H5Dget_space(id()), H5Sclose, where_, "cannot read its dataspace");
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

void Dataset::read_raw(hid_t memory_type, void* out) const {
    check(H5Dread(id(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), where_, "cannot read");
}

void Dataset::read_rows_raw(hid_t memory_type, size_t first, size_t count, void* out) const {
    std::vector<hsize_t> d = dims();
    if (d.empty()) where_.fail("is a scalar, not a series", false);
    if (first + count > d[0])
        where_.fail("rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") out of " +
                        std::to_string(d[0]),
                    false);
    if (count == 0) return;
    std::vector<hsize_t> start(d.size(), 0), extent = d;
    start[0] = first;
    extent[0] = count;
    Id file_space = make(H5Dget_space(id()), H5Sclose, where_, "cannot read its dataspace");
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr),
          where_, "cannot select rows");
    Id memory_space = simple_space(extent, nullptr, where_);
    check(H5Dread(id(), memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out), where_,
          "cannot read rows");
}

void Dataset::append_raw(hid_t memory_type, const void* values, size_t count) {
    if (count == 0) return;
    std::vector<hsize_t> d = dims();
    if (d.empty()) where_.fail("is a scalar, not a series", false);
    std::vector<hsize_t> start(d.size(), 0), extent = d;
    start[0] = d[0];
    extent[0] = count;
    d[0] += count;
    check(H5Dset_extent(id(), d.data()), where_, "cannot extend to " + std::to_string(d[0]) + " rows");
    Id file_space = make(H5Dget_space(id()), H5Sclose, where_, "cannot read its dataspace");
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr),
          where_, "cannot select rows");
    Id memory_space = simple_space(extent, nullptr, where_);
    check(H5Dwrite(id(), memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, values), where_,
          "cannot append rows");
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

// ---- groups ------------------------------------------------------------------

bool Group::has(const std::string& name) const {
    if (name.empty()) return false;
    size_t end = 0;
    do {
        end = name.find('/', end + 1);
        if (H5Lexists(id(), name.substr(0, end).c_str(), H5P_DEFAULT) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            return false;
        }
    } while (end != std::string::npos);
    return true;
}

bool Group::is_group(const std::string& name) const {
    if (!has(name)) return false;
    hid_t id = H5Oopen(this->id(), name.c_str(), H5P_DEFAULT);
    if (id < 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
    }
    const bool group = H5Iget_type(id) == H5I_GROUP;
    H5Oclose(id);
    return group;
}

std::vector<std::string> Group::members() const {
    Id plist = make(H5Gget_create_plist(id()), H5Pclose, where_, "cannot read its creation properties");
    unsigned order_flags = 0;
    check(H5Pget_link_creation_order(plist.get(), &order_flags), where_, "cannot read its creation properties");
    const H5_index_t index = (order_flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    std::vector<std::string> names;
    check(H5Literate(
              id(), index, H5_ITER_INC, nullptr,
              [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
                  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
                  return 0;
              },
              &names),
          where_, "cannot list members");
    return names;
}

Group Group::group(const std::string& name) const {
    const Where where = child(where_, name);
    return Group(open_object(*this, name, H5I_GROUP, where), where);
}

Group Group::create_group(const std::string& name) const {
    const Where where = child(where_, name);
    Id plist = make(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, where, "cannot make group properties");
    check(H5Pset_link_creation_order(plist.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), where,
          "cannot make group properties");
    return Group(make(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Gclose, where,
                      "cannot create group"),
                 where);
}

Dataset Group::dataset(const std::string& name) const {
    const Where where = child(where_, name);
    return Dataset(open_object(*this, name, H5I_DATASET, where), where);
}

Dataset Group::write_raw(const std::string& name, const Shape& shape, hid_t type, const void* values) const {
    const Where where = child(where_, name);
    Id space = simple_space(to_dims(shape), nullptr, where);
    Dataset dataset(make(H5Dcreate2(id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose, where, "cannot create dataset"),
                    where);
    if (numel_of(shape) > 0)
        check(H5Dwrite(dataset.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), where, "cannot write");
    return dataset;
}

Dataset Group::create_extendible_raw(const std::string& name, const Shape& row_shape, size_t chunk_rows, hid_t type,
                                     const void* fill) const {
    const Where where = child(where_, name);
    if (chunk_rows == 0 || numel_of(row_shape) == 0) where.fail("rows and chunks must not be empty", false);
    std::vector<hsize_t> dims{0}, max_dims{H5S_UNLIMITED}, chunk{chunk_rows};
    for (size_t extent : row_shape) {
        dims.push_back(extent);
        max_dims.push_back(extent);
        chunk.push_back(extent);
    }
    Id space = simple_space(dims, &max_dims, where);
    Id plist = make(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, where, "cannot make dataset properties");
    check(H5Pset_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data()), where, "cannot set chunking");
    check(H5Pset_fill_value(plist.get(), type, fill), where, "cannot set the fill value");
    return Dataset(make(H5Dcreate2(id(), name.c_str(), type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT),
                        H5Dclose, where, "cannot create dataset"),
                   where);
}

bool Group::has_attr(const std::string& name) const {
    const htri_t exists = H5Aexists(id(), name.c_str());
    if (exists < 0) attribute(where_, name).fail("cannot look up");
    return exists > 0;
}

namespace {

// Replaces any attribute of that name (attributes cannot be rewritten in SWMR mode).
Id create_attr(const Group& owner, const std::string& name, hid_t type, const Where& where) {
    if (owner.has_attr(name)) check(H5Adelete(owner.id(), name.c_str()), where, "cannot replace");
    Id space = scalar_space(where);
    return make(H5Acreate2(owner.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, where,
                "cannot create");
}

Id string_type(bool variable, size_t size, const Where& where) {
    Id type = make(H5Tcopy(H5T_C_S1), H5Tclose, where, "cannot make a string type");
    check(H5Tset_size(type.get(), variable ? H5T_VARIABLE : size), where, "cannot make a string type");
    check(H5Tset_cset(type.get(), H5T_CSET_UTF8), where, "cannot make a string type");
    if (!variable) check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), where, "cannot make a string type");
    return type;
}

}  // namespace

Dataset Group::write_strings(const std::string& name, const std::vector<std::string>& values) const {
    const Where where = attribute(where_, name);
    Id type = string_type(true, 0, where);
    std::vector<const char*> pointers;
    for (const std::string& v : values) pointers.push_back(v.c_str());
    return write_raw(name, Shape{values.size()}, type.get(), pointers.data());
}

void Group::write_attr_string(const std::string& name, const std::string& value) const {
    const Where where = attribute(where_, name);
    Id type = string_type(true, 0, where);
    Id attr = create_attr(*this, name, type.get(), where);
    const char* text = value.c_str();
    check(H5Awrite(attr.get(), type.get(), &text), where, "cannot write");
}

void Group::write_attr_int(const std::string& name, int64_t value) const {
    const Where where = attribute(where_, name);
    Id attr = create_attr(*this, name, H5T_NATIVE_INT64, where);
    check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), where, "cannot write");
}

void Group::write_attr_double(const std::string& name, double value) const {
    const Where where = attribute(where_, name);
    Id attr = create_attr(*this, name, H5T_NATIVE_DOUBLE, where);
    check(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value), where, "cannot write");
}

std::string Group::read_attr_string(const std::string& name) const {
    const Where where = attribute(where_, name);
    Id attr = open_attr(*this, name, where);
    check_single(attr, where);
    Id stored = make(H5Aget_type(attr.get()), H5Tclose, where, "cannot read its type");
    if (H5Tget_class(stored.get()) != H5T_STRING) where.fail("is not a string", false);
    if (H5Tis_variable_str(stored.get()) > 0) {
        Id memory = string_type(true, 0, where);
        char* text = nullptr;
        check(H5Aread(attr.get(), memory.get(), &text), where, "cannot read");
        std::string value = text ? text : "";
        H5free_memory(text);
        return value;
    }
    const size_t size = H5Tget_size(stored.get());
    Id memory = string_type(false, size, where);
    std::string text(size, '\0');
    check(H5Aread(attr.get(), memory.get(), text.data()), where, "cannot read");
    return text.substr(0, text.find('\0'));
}

int64_t Group::read_attr_int(const std::string& name) const {
    const Where where = attribute(where_, name);
    Id attr = open_attr(*this, name, where);
    check_single(attr, where);
    Id stored = make(H5Aget_type(attr.get()), H5Tclose, where, "cannot read its type");
    if (H5Tget_class(stored.get()) != H5T_INTEGER) where.fail("is not an integer", false);
    int64_t value = 0;
    check(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), where, "cannot read");
    return value;
}

double Group::read_attr_double(const std::string& name) const {
    const Where where = attribute(where_, name);
    Id attr = open_attr(*this, name, where);
    check_single(attr, where);
    Id stored = make(H5Aget_type(attr.get()), H5Tclose, where, "cannot read its type");
    const H5T_class_t type_class = H5Tget_class(stored.get());
    if (type_class != H5T_INTEGER && type_class != H5T_FLOAT) where.fail("is not a number", false);
    double value = 0;
    check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), where, "cannot read");
    return value;
}

// ---- files -------------------------------------------------------------------

namespace {

Id file_access(const Where& where, bool latest_format, bool clear_write_flags) {
    Id plist = make(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, where, "cannot make file access properties");
    if (latest_format)
        check(H5Pset_libver_bounds(plist.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), where,
              "cannot select the latest file format");
    if (clear_write_flags) {
        // The private property h5clear sets; HDF5 1.10 registers it on every file access list.
        hbool_t clear = true;
        check(H5Pset(plist.get(), "clear_status_flags", &clear), where,
              "cannot ask HDF5 to clear the file's open-for-write mark (run h5clear -s on it)");
    }
    return plist;
}

}  // namespace

File File::create(const std::string& path, const std::string& tag, bool latest_format) {
    silence_errors();
    const Where where{tag, path, ""};
    Id access = file_access(where, latest_format, false);
    Id creation = make(H5Pcreate(H5P_FILE_CREATE), H5Pclose, where, "cannot make file creation properties");
    check(H5Pset_link_creation_order(creation.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), where,
          "cannot make file creation properties");
    File file;
    file.id_ = make(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, creation.get(), access.get()), H5Fclose, where,
                    "cannot create file");
    file.where_ = Where{tag, path, "/"};
    return file;
}

File File::open(const std::string& path, const std::string& tag, Access access, bool latest_format, bool swmr_read,
                bool clear_write_flags) {
    silence_errors();
    const Where where{tag, path, ""};
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) where.fail("no such file", false);
    if (std::filesystem::is_directory(status)) where.fail("is a directory, not a file", false);
    const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
    if (is_hdf5 == 0) where.fail("not an HDF5 file", false);
    if (is_hdf5 < 0) where.fail("cannot read");
    Id plist = file_access(where, latest_format, clear_write_flags);
    unsigned flags = access == Access::read ? H5F_ACC_RDONLY : H5F_ACC_RDWR;
    if (swmr_read && access == Access::read) flags |= H5F_ACC_SWMR_READ;
    File file;
    file.id_ = make(H5Fopen(path.c_str(), flags, plist.get()), H5Fclose, where,
                    "HDF5 cannot open it");
    file.where_ = Where{tag, path, "/"};
    return file;
}

void File::start_swmr_write() { check(H5Fstart_swmr_write(id()), where_, "cannot start SWMR writing"); }

void File::flush() { check(H5Fflush(id(), H5F_SCOPE_GLOBAL), where_, "cannot flush"); }

void File::close() {
    if (id_.reset() < 0) where_.fail("cannot close");
}

}  // namespace attnlab::h5
