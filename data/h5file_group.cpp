// Groups: links (never followed out of the file), members, visiting their
// datasets, creating groups and datasets; and the attributes on them.
#include "data/h5file.h"
#include "data/h5file_detail.h"

#include <set>
#include <utility>

namespace attnlab::h5 {

using namespace detail;

namespace {

std::vector<hsize_t> to_dims(const Shape& shape) { return std::vector<hsize_t>(shape.begin(), shape.end()); }

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

}  // namespace

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
    const Where where = child(where_, name);  // a dataset, named as one in errors
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

}  // namespace attnlab::h5
