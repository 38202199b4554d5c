// Uses the HDF5 C API directly: data/ may not depend on experiments/ (where the
// general HDF5 helpers live), and reading three integer datasets takes little.
#include "data/token_file.h"

#include <hdf5.h>

#include <cstring>
#include <filesystem>

#include "data/tasks.h"

namespace attnlab {

namespace {

// Closes an HDF5 identifier when it goes out of scope.
struct Owned {
    hid_t id;
    herr_t (*close)(hid_t);
    Owned(hid_t id_, herr_t (*close_)(hid_t)) : id(id_), close(close_) {}
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned() {
        if (id >= 0) close(id);
    }
};

std::string index_str(size_t i, size_t j) { return "[" + std::to_string(i) + ", " + std::to_string(j) + "]"; }

class Reader {
public:
    explicit Reader(const std::string& path) : path_(path), file_(H5I_INVALID_HID, H5Fclose) {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) fail("", "no such file");
        if (H5Fis_hdf5(path.c_str()) <= 0) fail("", "not an HDF5 file");
        file_.id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file_.id < 0) fail("", "HDF5 cannot open it (truncated or corrupt?)");
    }

    [[noreturn]] void fail(const std::string& dataset, const std::string& problem) const {
        throw Error("[token_file] " + path_ + ": " + (dataset.empty() ? "" : dataset + ": ") + problem);
    }

    bool has(const std::string& name) const { return H5Lexists(file_.id, name.c_str(), H5P_DEFAULT) > 0; }

    // An integer (or, with allow_enum, h5py-bool enum) dataset of `rank`, as int64.
    std::vector<int64_t> integers(const std::string& name, size_t rank, Shape& shape, bool allow_enum = false) const {
        if (!has(name)) fail(name, "missing dataset");
        Owned dataset(H5Dopen2(file_.id, name.c_str(), H5P_DEFAULT), H5Dclose);
        if (dataset.id < 0) fail(name, "cannot open (is it a dataset?)");
        Owned space(H5Dget_space(dataset.id), H5Sclose);
        const int ndims = H5Sget_simple_extent_ndims(space.id);
        if (ndims != static_cast<int>(rank))
            fail(name, "has rank " + std::to_string(ndims) + ", expected " + std::to_string(rank) +
                           (rank == 2 ? " [N, S]" : " [N]"));
        std::vector<hsize_t> dims(rank);
        H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
        shape.assign(dims.begin(), dims.end());
        std::vector<int64_t> values(numel_of(shape));

        Owned stored(H5Dget_type(dataset.id), H5Tclose);
        const H5T_class_t type_class = H5Tget_class(stored.id);
        if (type_class == H5T_INTEGER) {
            if (!values.empty() && H5Dread(dataset.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
                fail(name, "cannot read");
        } else if (type_class == H5T_ENUM && allow_enum) {
            // h5py stores bool as an enum over int8 {FALSE = 0, TRUE = 1}; HDF5
            // converts enums only to enums, so read the raw integers of its base.
            Owned memory(H5Tget_native_type(stored.id, H5T_DIR_ASCEND), H5Tclose);
            Owned base(H5Tget_super(memory.id), H5Tclose);
            const size_t size = H5Tget_size(memory.id);
            const bool is_signed = H5Tget_sign(base.id) == H5T_SGN_2;
            std::vector<unsigned char> raw(values.size() * size);
            if (!values.empty() && H5Dread(dataset.id, memory.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
                fail(name, "cannot read");
            for (size_t i = 0; i < values.size(); ++i) values[i] = as_integer(raw.data() + i * size, size, is_signed);
        } else {
            fail(name, std::string("is not an integer") + (allow_enum ? " or bool" : "") + " dataset");
        }
        return values;
    }

private:
    static int64_t as_integer(const unsigned char* bytes, size_t size, bool is_signed) {
        switch (size) {
            case 1: { int8_t s; uint8_t u; std::memcpy(&s, bytes, 1); std::memcpy(&u, bytes, 1); return is_signed ? s : u; }
            case 2: { int16_t s; uint16_t u; std::memcpy(&s, bytes, 2); std::memcpy(&u, bytes, 2); return is_signed ? s : u; }
            case 4: { int32_t s; uint32_t u; std::memcpy(&s, bytes, 4); std::memcpy(&u, bytes, 4); return is_signed ? s : static_cast<int64_t>(u); }
            default: { int64_t s; std::memcpy(&s, bytes, 8); return s; }
        }
    }

    std::string path_;
    Owned file_;
};

}  // namespace

TokenFile read_token_file(const std::string& path, size_t vocab) {
    Reader reader(path);
    if (vocab == 0) reader.fail("", "vocab must be positive");

    Shape token_shape, length_shape;
    const std::vector<int64_t> tokens = reader.integers("tokens", 2, token_shape);
    const size_t n = token_shape[0], s = token_shape[1];
    if (n == 0 || s == 0) reader.fail("tokens", "is empty " + shape_str(token_shape) + ": no sequences");
    const std::vector<int64_t> lengths = reader.integers("lengths", 1, length_shape);
    if (length_shape[0] != n)
        reader.fail("lengths", "has " + std::to_string(length_shape[0]) + " entries but tokens has N = " +
                                   std::to_string(n) + " rows");

    TokenFile file;
    file.lengths.resize(n);
    for (size_t i = 0; i < n; ++i) {
        if (lengths[i] < 1 || lengths[i] > static_cast<int64_t>(s))
            reader.fail("lengths", "lengths[" + std::to_string(i) + "] = " + std::to_string(lengths[i]) +
                                       " is outside [1, S = " + std::to_string(s) + "]");
        file.lengths[i] = static_cast<size_t>(lengths[i]);
    }

    std::vector<int32_t> ids(n * s, kPad);  // padded positions become <PAD>
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < file.lengths[i]; ++j) {
            const int64_t token = tokens[i * s + j];
            if (token < 0 || token >= static_cast<int64_t>(vocab))
                reader.fail("tokens", "tokens" + index_str(i, j) + " = " + std::to_string(token) +
                                          " is outside [0, vocab = " + std::to_string(vocab) + ")");
            ids[i * s + j] = static_cast<int32_t>(token);
        }
    file.tokens = Indices({n, s}, std::move(ids));

    if (reader.has("loss_mask")) {
        Shape mask_shape;
        const std::vector<int64_t> mask = reader.integers("loss_mask", 2, mask_shape, /*allow_enum=*/true);
        if (mask_shape != token_shape)
            reader.fail("loss_mask", "has shape " + shape_str(mask_shape) + " but tokens has " + shape_str(token_shape));
        std::vector<uint8_t> flags(n * s, 0);
        for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < s; ++j) {
                const int64_t value = mask[i * s + j];
                if (value != 0 && value != 1)
                    reader.fail("loss_mask", "loss_mask" + index_str(i, j) + " = " + std::to_string(value) + " is not 0 or 1");
                if (value == 1 && j >= file.lengths[i])
                    reader.fail("loss_mask", "loss_mask" + index_str(i, j) + " = 1 at a padded position (length " +
                                                 std::to_string(file.lengths[i]) + ")");
                flags[i * s + j] = static_cast<uint8_t>(value);
            }
        file.loss_mask = Mask({n, s}, std::move(flags));
    }
    return file;
}

}  // namespace attnlab
