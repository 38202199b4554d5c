// Structure-aware inputs for the HDF5 loaders. Random bytes given to libhdf5 as
// a file mostly exercise libhdf5's own parser (HDF5 1.10.8 has crashes of its
// own there, README of tests/fuzz); a recipe instead builds a well-formed file
// through the HDF5 API, starting from a valid base file (a real checkpoint or
// token file) and then applying edits the bytes choose: delete an object, put
// a dataset of any type, shape and layout (compact, contiguous, chunked,
// compressed, unallocated) in its place, set an attribute of any type, add a
// soft, hard (loops) or external link, write a value (NaN, inf, huge) into an
// existing dataset. What the loaders see is then any structure a user or a
// broken tool could write.
//
// An input that starts with the HDF5 signature is taken as the file itself.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

namespace attnlab::fuzz {

inline bool is_hdf5_image(const uint8_t* data, size_t size) {
    static const char signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
    return size >= 8 && std::memcmp(data, signature, 8) == 0;
}

class Recipe {
public:
    // `names`: dataset and attribute names worth trying ("tokens", "params", ...).
    Recipe(FuzzedDataProvider& in, std::vector<std::string> names) : in_(in), names_(std::move(names)) {}

    // Applies up to 12 edits to the HDF5 file at `path`.
    void apply(const std::string& path) {
        const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);  // closing the file closes whatever an edit left open
        file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl);
        H5Pclose(fapl);
        if (file_ < 0) return;
        for (int edit = 0; edit < 12 && in_.remaining_bytes() > 0; ++edit) {
            collect_paths();
            switch (in_.ConsumeIntegralInRange(0, 7)) {
                case 0: H5Ldelete(file_, pick_path().c_str(), H5P_DEFAULT); break;
                case 1: replace_with_dataset(); break;
                case 2: set_attribute(); break;
                case 3: H5Lcreate_soft(pick_path().c_str(), file_, new_path().c_str(), H5P_DEFAULT, H5P_DEFAULT); break;
                case 4: H5Lcreate_hard(file_, pick_path().c_str(), file_, new_path().c_str(), H5P_DEFAULT, H5P_DEFAULT); break;
                case 5: add_external_link(path); break;
                case 6: replace_with_group(); break;
                case 7: poke_value(); break;
            }
        }
        H5Fclose(file_);
        H5Eclear2(H5E_DEFAULT);
    }

private:
    void collect_paths() {
        paths_ = {"/"};
        H5Ovisit2(file_, H5_INDEX_NAME, H5_ITER_INC,
                 [](hid_t, const char* name, const H5O_info_t*, void* out) -> herr_t {
                     if (std::strcmp(name, ".") != 0) static_cast<std::vector<std::string>*>(out)->push_back("/" + std::string(name));
                     return 0;
                 },
                 &paths_, H5O_INFO_BASIC);
    }

    std::string pick_path() { return paths_[in_.ConsumeIntegralInRange<size_t>(0, paths_.size() - 1)]; }

    std::string pick_name() {
        if (in_.ConsumeBool()) return names_[in_.ConsumeIntegralInRange<size_t>(0, names_.size() - 1)];
        std::string name = in_.ConsumeRandomLengthString(12);
        for (char& c : name)
            if (c == '/' || c == '\0') c = '_';
        return name.empty() || name == "." ? "x" : name;
    }

    // A new link: a name under an existing object (a group, or the root).
    std::string new_path() {
        const std::string parent = pick_path();
        return (parent == "/" ? "" : parent) + "/" + pick_name();
    }

    void replace_with_group() {
        const std::string path = pick_path();
        if (path != "/") H5Ldelete(file_, path.c_str(), H5P_DEFAULT);
        const hid_t group = H5Gcreate2(file_, path == "/" ? new_path().c_str() : path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (group >= 0) H5Gclose(group);
    }

    void add_external_link(const std::string& self) {
        const char* files[] = {"missing.h5", "/dev/zero", "/proc/self/fd/0"};
        const size_t choice = in_.ConsumeIntegralInRange<size_t>(0, 3);
        const std::string target = choice == 3 ? self : files[choice];  // 3: the file itself
        H5Lcreate_external(target.c_str(), "/", file_, new_path().c_str(), H5P_DEFAULT, H5P_DEFAULT);
    }

    hid_t make_type() {
        switch (in_.ConsumeIntegralInRange(0, 15)) {
            case 0: return H5Tcopy(H5T_STD_I8LE);
            case 1: return H5Tcopy(H5T_STD_U8LE);
            case 2: return H5Tcopy(H5T_STD_I16BE);
            case 3: return H5Tcopy(H5T_STD_U32LE);
            case 4: return H5Tcopy(H5T_STD_I32LE);
            case 5: return H5Tcopy(H5T_STD_I64LE);
            case 6: return H5Tcopy(H5T_STD_U64LE);
            case 7: return H5Tcopy(H5T_IEEE_F32LE);
            case 8: return H5Tcopy(H5T_IEEE_F64BE);
            case 9: {  // h5py's bool
                const hid_t type = H5Tenum_create(H5T_NATIVE_INT8);
                int8_t no = 0, yes = 1;
                H5Tenum_insert(type, "FALSE", &no);
                H5Tenum_insert(type, "TRUE", &yes);
                return type;
            }
            case 10: {
                const hid_t type = H5Tcopy(H5T_C_S1);
                H5Tset_size(type, in_.ConsumeBool() ? H5T_VARIABLE : in_.ConsumeIntegralInRange<size_t>(1, 64));
                return type;
            }
            case 11: {
                const hid_t type = H5Tcreate(H5T_COMPOUND, 8);
                H5Tinsert(type, "a", 0, H5T_NATIVE_INT32);
                H5Tinsert(type, "b", 4, H5T_NATIVE_FLOAT);
                return type;
            }
            case 12: return H5Tcreate(H5T_OPAQUE, in_.ConsumeIntegralInRange<size_t>(1, 16));
            case 13: {
                const hsize_t dims[1] = {3};
                return H5Tarray_create2(H5T_NATIVE_INT32, 1, dims);
            }
            case 14: {  // an integer of unusual precision
                const hid_t type = H5Tcopy(H5T_STD_I64LE);
                H5Tset_precision(type, in_.ConsumeIntegralInRange<size_t>(1, 63));
                return type;
            }
            default: return half_type();
        }
    }

    // HDF5 1.10 has no half type of its own: an IEEE half from a float's fields.
    static hid_t half_type() {
        const hid_t type = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(type, 15, 10, 5, 0, 10);
        H5Tset_precision(type, 16);
        H5Tset_size(type, 2);
        H5Tset_ebias(type, 15);
        return type;
    }

    std::vector<hsize_t> make_dims(bool& huge) {
        const hsize_t choices[] = {0, 1, 2, 3, 4, 5, 6, 8, 16, 33};
        std::vector<hsize_t> dims(in_.ConsumeIntegralInRange(0, 3));
        for (hsize_t& d : dims) {
            if (in_.ConsumeIntegralInRange(0, 9) == 0) {
                d = hsize_t{1} << in_.ConsumeIntegralInRange(16, 40);
                huge = true;
            } else {
                d = choices[in_.ConsumeIntegralInRange<size_t>(0, 9)];
            }
        }
        return dims;
    }

    void replace_with_dataset() {
        const std::string path = in_.ConsumeBool() ? pick_path() : new_path();
        if (path == "/") return;
        H5Ldelete(file_, path.c_str(), H5P_DEFAULT);
        const hid_t type = make_type();
        bool huge = false;
        const std::vector<hsize_t> dims = make_dims(huge);
        const int layout = in_.ConsumeIntegralInRange(0, 3);  // contiguous, chunked, compressed, compact
        const hid_t space = in_.ConsumeIntegralInRange(0, 15) == 0 ? H5Screate(H5S_NULL)
                            : dims.empty() ? H5Screate(H5S_SCALAR)
                                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if ((layout == 1 || layout == 2 || huge) && !dims.empty()) {
            std::vector<hsize_t> chunk(dims.size());
            for (size_t i = 0; i < dims.size(); ++i) chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(dims[i], 4));
            H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
            if (layout == 2) H5Pset_deflate(dcpl, 6);
        } else if (layout == 3) {
            H5Pset_layout(dcpl, H5D_COMPACT);
        }
        const hid_t dataset = H5Dcreate2(file_, path.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (dataset >= 0) {
            if (!huge && in_.ConsumeBool()) write_values(dataset, type, space);
            H5Dclose(dataset);
        }
        H5Pclose(dcpl);
        H5Sclose(space);
        H5Tclose(type);
    }

    // Bytes from the input as the stored values (strings as short texts).
    void write_values(hid_t dataset, hid_t type, hid_t space) {
        const hssize_t count = H5Sget_simple_extent_npoints(space);
        if (count <= 0 || count > 4096) return;
        if (H5Tis_variable_str(type) > 0) {
            std::vector<std::string> texts;
            std::vector<const char*> pointers;
            for (hssize_t i = 0; i < count; ++i) texts.push_back(in_.ConsumeRandomLengthString(16));
            for (const std::string& t : texts) pointers.push_back(t.c_str());
            H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data());
            return;
        }
        std::vector<uint8_t> bytes = in_.ConsumeBytes<uint8_t>(static_cast<size_t>(count) * H5Tget_size(type));
        bytes.resize(static_cast<size_t>(count) * H5Tget_size(type), 0);
        H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    }

    // One element of an existing numeric dataset set to an interesting value.
    void poke_value() {
        const hid_t dataset = H5Dopen2(file_, pick_path().c_str(), H5P_DEFAULT);
        if (dataset < 0) return;
        const hid_t space = H5Dget_space(dataset);
        const hssize_t count = H5Sget_simple_extent_npoints(space);
        if (count > 0) {
            const double values[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                     -std::numeric_limits<double>::infinity(), 1e300, -1, 0, 1, 2, 255, 1e10, -1e18};
            const double value = values[in_.ConsumeIntegralInRange<size_t>(0, 10)];
            const hsize_t index = in_.ConsumeIntegralInRange<hsize_t>(0, static_cast<hsize_t>(count) - 1);
            const int rank = H5Sget_simple_extent_ndims(space);
            std::vector<hsize_t> dims(static_cast<size_t>(rank)), start(static_cast<size_t>(rank));
            H5Sget_simple_extent_dims(space, dims.data(), nullptr);
            hsize_t rest = index;
            for (int axis = rank - 1; axis >= 0; --axis) {
                start[axis] = rest % dims[axis];
                rest /= dims[axis];
            }
            const hsize_t one = 1;
            const hid_t memory = H5Screate_simple(1, &one, nullptr);
            if (rank > 0) {
                std::vector<hsize_t> extent(static_cast<size_t>(rank), 1);
                H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
            }
            H5Dwrite(dataset, H5T_NATIVE_DOUBLE, memory, space, H5P_DEFAULT, &value);
            H5Sclose(memory);
        }
        H5Sclose(space);
        H5Dclose(dataset);
    }

    void set_attribute() {
        const std::string owner = pick_path();
        const std::string name = pick_name();
        const hid_t object = H5Oopen(file_, owner.c_str(), H5P_DEFAULT);
        if (object < 0) return;
        if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
        const hid_t type = make_type();
        const hsize_t n = in_.ConsumeIntegralInRange<hsize_t>(0, 3);
        const hid_t space = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
        const hid_t attr = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (attr >= 0) {
            const size_t count = n == 0 ? 1 : n;
            if (H5Tis_variable_str(type) > 0) {
                std::vector<std::string> texts;
                std::vector<const char*> pointers;
                for (size_t i = 0; i < count; ++i) texts.push_back(attribute_text());
                for (const std::string& t : texts) pointers.push_back(t.c_str());
                H5Awrite(attr, type, pointers.data());
            } else {
                std::vector<uint8_t> bytes = in_.ConsumeBytes<uint8_t>(count * H5Tget_size(type));
                bytes.resize(count * H5Tget_size(type), 0);
                H5Awrite(attr, type, bytes.data());
            }
            H5Aclose(attr);
        }
        H5Sclose(space);
        H5Tclose(type);
        H5Oclose(object);
    }

    // Text for a string attribute: a config-like document or the format name, or bytes.
    std::string attribute_text() {
        switch (in_.ConsumeIntegralInRange(0, 3)) {
            case 0: return "attnlab-checkpoint";
            case 1: return "";
            case 2: return "[model]\nwidth = " + std::to_string(in_.ConsumeIntegral<int32_t>()) + "\n";
            default: return in_.ConsumeRandomLengthString(64);
        }
    }

    FuzzedDataProvider& in_;
    std::vector<std::string> names_;
    std::vector<std::string> paths_;
    hid_t file_ = H5I_INVALID_HID;
};

// The bytes of the file at `path`.
inline std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// One input of an HDF5 loader's target: an HDF5 image is the file itself; any
// other input is a recipe of edits to `base` (the bytes of a real tiny file) over
// the object and attribute `names`. `load(path)` reads the file: only bad-input
// exceptions may leave it, and no HDF5 object may stay open afterwards.
//
// An image is read as the CLI reads a user's file: through the probe of
// data/h5_probe.h, which runs the loader in a forked child first, so a crash
// or hang inside libhdf5 must come back as an attnlab::Error. A recipe's file
// was just written by this process through the HDF5 API, so it is read
// without the probe (ATTNLAB_H5_PROBE=0), as attnlab reads files it wrote
// itself: the loader then runs here, where libFuzzer sees its coverage (it
// sees none of a child's).
template <class Load>
void load_hdf5_input(const uint8_t* data, size_t size, const std::string& base, std::vector<std::string> names,
                     Load&& load) {
    {
        const bool raw = is_hdf5_image(data, size);
        const TempFile file(raw ? data : reinterpret_cast<const uint8_t*>(base.data()), raw ? size : base.size(), ".h5");
        if (!raw) {
            FuzzedDataProvider in(data, size);
            Recipe(in, std::move(names)).apply(file.path());
        }
        setenv("ATTNLAB_H5_PROBE", raw ? "1" : "0", 1);
        if (raw) ++probe_tally().inputs;
        expect_bad_input_only([&] { load(file.path()); });
    }
    expect_nothing_open();
}

}  // namespace attnlab::fuzz
