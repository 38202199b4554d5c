// A small reader over the HDF5 C API for the reference fixtures that the
// generators in this folder write with h5py (float datasets, int64 datasets,
// numeric and string attributes). Shared by the PyTorch agreement tests:
// tests/layers/test_torch_agreement.cpp, tests/optim/test_optim.cpp.
#pragma once

#include <hdf5.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

// Closes an HDF5 identifier when it goes out of scope.
class Hid {
public:
    Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
    ~Hid() {
        if (id_ >= 0) close_(id_);
    }
    Hid(const Hid&) = delete;
    Hid& operator=(const Hid&) = delete;
    operator hid_t() const { return id_; }
    bool ok() const { return id_ >= 0; }

private:
    hid_t id_;
    herr_t (*close_)(hid_t);
};

class FixtureFile {
public:
    explicit FixtureFile(const std::string& path) : path_(path), file_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose) {
        if (!file_.ok()) throw std::runtime_error("cannot open " + path + " as HDF5");
    }

    // Whether every link along "a/b/c" exists (H5Lexists wants each parent to exist).
    bool has(const std::string& object) const {
        size_t end = 0;
        do {
            end = object.find('/', end + 1);
            if (H5Lexists(file_, object.substr(0, end).c_str(), H5P_DEFAULT) <= 0) return false;
        } while (end != std::string::npos);
        return true;
    }

    // A float dataset as a float32 tensor (read as double: float32 -> double -> float32 is exact),
    // or as a float64 one (a float64 dataset keeps every bit).
    Tensor tensor(const std::string& object, bool requires_grad = false, DType dtype = DType::f32) const {
        Shape shape;
        std::vector<double> values = read(object, H5T_NATIVE_DOUBLE, shape);
        return Tensor::from_values(values, shape, dtype, requires_grad);
    }

    std::vector<long long> integers(const std::string& object) const {
        Shape shape;
        return read<long long>(object, H5T_NATIVE_LLONG, shape);
    }

    long long attr_int(const std::string& object, const std::string& name) const {
        long long value = 0;
        Hid attr = open_attr(object, name);
        check(H5Aread(attr, H5T_NATIVE_LLONG, &value), object + " attribute " + name);
        return value;
    }

    double attr_double(const std::string& object, const std::string& name) const {
        double value = 0;
        Hid attr = open_attr(object, name);
        check(H5Aread(attr, H5T_NATIVE_DOUBLE, &value), object + " attribute " + name);
        return value;
    }

    // Fixed-length (numpy bytes) or variable-length (Python str) string attribute.
    std::string attr_string(const std::string& object, const std::string& name) const {
        Hid attr = open_attr(object, name);
        Hid stored(H5Aget_type(attr), H5Tclose);
        Hid memory(H5Tcopy(H5T_C_S1), H5Tclose);
        if (H5Tis_variable_str(stored) > 0) {
            H5Tset_size(memory, H5T_VARIABLE);
            char* text = nullptr;
            check(H5Aread(attr, memory, &text), object + " attribute " + name);
            std::string value = text ? text : "";
            H5free_memory(text);
            return value;
        }
        const size_t size = H5Tget_size(stored);
        H5Tset_size(memory, size);
        H5Tset_strpad(memory, H5T_STR_NULLPAD);
        std::vector<char> text(size, '\0');
        check(H5Aread(attr, memory, text.data()), object + " attribute " + name);
        return std::string(text.data(), strnlen(text.data(), size));
    }

private:
    template <class T = double>
    std::vector<T> read(const std::string& object, hid_t memory_type, Shape& shape) const {
        if (!has(object)) throw std::runtime_error(path_ + " has no dataset " + object);
        Hid dataset(H5Dopen2(file_, object.c_str(), H5P_DEFAULT), H5Dclose);
        Hid space(H5Dget_space(dataset), H5Sclose);
        const int rank = H5Sget_simple_extent_ndims(space);
        std::vector<hsize_t> dims(static_cast<size_t>(rank));
        H5Sget_simple_extent_dims(space, dims.data(), nullptr);
        shape.assign(dims.begin(), dims.end());
        std::vector<T> values(numel_of(shape));
        check(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), object);
        return values;
    }

    Hid open_attr(const std::string& object, const std::string& name) const {
        if (H5Aexists_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
            throw std::runtime_error(path_ + ": " + object + " has no attribute " + name);
        return Hid(H5Aopen_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    }

    void check(herr_t status, const std::string& what) const {
        if (status < 0) throw std::runtime_error(path_ + ": cannot read " + what);
    }

    std::string path_;
    Hid file_;
};

}  // namespace attnlab
