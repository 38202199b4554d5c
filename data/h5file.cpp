#include "data/h5file.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
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

// The link access list of every lookup here: external links (to other files)
// are never traversed, so a file can make attnlab open no other file (nor
// block on a FIFO it names). Created once, kept for the process.
hid_t no_external_links() {
    static const hid_t lapl = [] {
        const hid_t plist = H5Pcreate(H5P_LINK_ACCESS);
        H5Pset_elink_cb(
            plist, [](const char*, const char*, const char*, const char*, unsigned*, hid_t, void*) -> herr_t { return -1; },
            nullptr);
        return plist;
    }();
    return lapl;
}

std::vector<hsize_t> to_dims(const Shape& shape) { return std::vector<hsize_t>(shape.begin(), shape.end()); }

Id simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>* max_dims, const Where& where) {
    if (dims.empty()) return make(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot make a scalar dataspace");
    return make(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims ? max_dims->data() : nullptr),
                H5Sclose, where, "cannot make a dataspace");
}

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

Id scalar_space(const Where& where) { return make(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot make a dataspace"); }

// Opens `name` under `parent` and checks it is a group or a dataset.
Id open_object(const Group& parent, const std::string& name, H5I_type_t expected, const Where& where) {
    const char* kind = expected == H5I_GROUP ? "group" : "dataset";
    if (!parent.has(name)) where.fail(std::string("no such ") + kind, false);
    hid_t id = H5Oopen(parent.id(), name.c_str(), no_external_links());
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

// The size in bytes of the file an object lives in: as on disk now (a file
// another process appends to in SWMR mode grows after it was opened), else as
// HDF5 saw it.
uint64_t file_size_of(hid_t object, const Where& where) {
    std::error_code ec;
    const uintmax_t on_disk = std::filesystem::file_size(where.file, ec);
    if (!ec) return on_disk;
    Id file = make(H5Iget_file_id(object), H5Fclose, where, "cannot find its file");
    hsize_t size = 0;
    check(H5Fget_filesize(file.get(), &size), where, "cannot read the file's size");
    return size;
}

std::string bytes_str(uint64_t bytes) { return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes"); }

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

// ---- groups ------------------------------------------------------------------

bool Group::has(const std::string& name) const {
    if (name.empty()) return false;
    size_t end = 0;
    do {
        end = name.find('/', end + 1);
        const std::string prefix = name.substr(0, end);
        if (H5Lexists(id(), prefix.c_str(), no_external_links()) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            return false;
        }
        H5L_info_t link;
        if (H5Lget_info(id(), prefix.c_str(), &link, no_external_links()) >= 0 && link.type == H5L_TYPE_EXTERNAL)
            child(where_, prefix).fail("is an external link (to another file); not followed", false);
        H5Eclear2(H5E_DEFAULT);
    } while (end != std::string::npos);
    return true;
}

bool Group::is_group(const std::string& name) const {
    if (!has(name)) return false;
    hid_t id = H5Oopen(this->id(), name.c_str(), no_external_links());
    if (id < 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
    }
    const bool group = H5Iget_type(id) == H5I_GROUP;
    H5Oclose(id);
    return group;
}

namespace {

struct Link {
    std::string name;
    H5L_type_t type;
};

// The group's links, in creation order when the group tracks it, else by name.
std::vector<Link> links_of(hid_t group, const Where& where) {
    Id plist = make(H5Gget_create_plist(group), H5Pclose, where, "cannot read its creation properties");
    unsigned order_flags = 0;
    check(H5Pget_link_creation_order(plist.get(), &order_flags), where, "cannot read its creation properties");
    const H5_index_t index = (order_flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    std::vector<Link> links;
    check(H5Literate(
              group, index, H5_ITER_INC, nullptr,
              [](hid_t, const char* name, const H5L_info_t* info, void* out) -> herr_t {
                  static_cast<std::vector<Link>*>(out)->push_back({name, info->type});
                  return 0;
              },
              &links),
          where, "cannot list members");
    return links;
}

haddr_t address_of(hid_t object, const Where& where) {
    H5O_info_t info;
    check(H5Oget_info2(object, &info, H5O_INFO_BASIC), where, "cannot read its object header");
    return info.addr;
}

using DatasetVisitor = std::function<void(const Dataset&, const std::string&)>;

void visit_below(const Group& group, const std::string& prefix, int depth, std::set<haddr_t>& seen,
                 const DatasetVisitor& visit) {
    if (depth > Group::kMaxDepth)
        group.where().fail("is nested more than " + std::to_string(Group::kMaxDepth) + " groups deep", false);
    for (const Link& link : links_of(group.id(), group.where())) {
        const Where where = child(group.where(), link.name);
        if (link.type == H5L_TYPE_SOFT) where.fail("is a soft link; not followed", false);
        if (link.type != H5L_TYPE_HARD) where.fail("is an external link (to another file); not followed", false);
        hid_t raw = H5Oopen(group.id(), link.name.c_str(), no_external_links());
        if (raw < 0) where.fail("cannot open");
        Id object(raw, H5Oclose);
        const H5I_type_t type = H5Iget_type(raw);
        if (type == H5I_GROUP) {
            if (!seen.insert(address_of(raw, where)).second)
                where.fail("links back to a group already visited (a loop)", false);
            visit_below(Group(std::move(object), where), prefix + link.name + "/", depth + 1, seen, visit);
        } else if (type == H5I_DATASET) {
            visit(Dataset(std::move(object), where), prefix + link.name);
        } else {
            where.fail("is neither a group nor a dataset", false);
        }
    }
}

}  // namespace

std::vector<std::string> Group::members() const {
    std::vector<std::string> names;
    for (Link& link : links_of(id(), where_)) names.push_back(std::move(link.name));
    return names;
}

void Group::visit_datasets(const std::function<void(const Dataset&, const std::string&)>& visit) const {
    std::set<haddr_t> seen{address_of(id(), where_)};
    visit_below(*this, "", 1, seen, visit);
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
    const uint64_t file_size = file_size_of(attr.get(), where);
    if (size > file_size)
        where.fail("declares a string of " + bytes_str(size) + " in a file of " + bytes_str(file_size), false);
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
    if (!std::filesystem::is_regular_file(status)) where.fail("is not a regular file", false);
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
