// Identifiers, errors and files; what the parts share (h5file_detail.h). Datasets
// are in h5file_dataset.cpp, groups and attributes in h5file_group.cpp.
#include "data/h5file.h"
#include "data/h5file_detail.h"

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

// ---- what the parts share (h5file_detail.h) ---------------------------------

namespace detail {

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

Id simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>* max_dims, const Where& where) {
    if (dims.empty()) return make(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot make a scalar dataspace");
    return make(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims ? max_dims->data() : nullptr),
                H5Sclose, where, "cannot make a dataspace");
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

}  // namespace detail

using namespace detail;

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
