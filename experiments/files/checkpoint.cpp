#include "experiments/files/checkpoint.h"
#include "experiments/files/provenance.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>

#include "autograd/tensor_impl.h"
#include "data/h5_probe.h"
#include "data/h5file.h"
#include "experiments/files/output_file.h"

namespace attnlab {

namespace fs = std::filesystem;

namespace {

const char* const kTag = "checkpoint";
const char* const kFormat = "attnlab-checkpoint";
constexpr int64_t kFormatVersion = 1;

// Calls write(parent, leaf) with the group that holds `name` ("a/b/c": group
// "a/b", created as needed) and the leaf name. Rejects names HDF5 would misread
// and names given twice.
template <class Write>
void write_named(const h5::Group& section, const std::string& name, Write&& write) {
    std::vector<std::string> segments;
    size_t start = 0;
    for (;;) {
        const size_t end = name.find('/', start);
        segments.push_back(name.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (segments.back().empty() || segments.back() == "." || segments.back() == "..")
            section.where().fail("invalid name '" + name + "'", false);
        if (end == std::string::npos) break;
        start = end + 1;
    }
    std::optional<h5::Group> nested;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
        const h5::Group& parent = nested ? *nested : section;
        nested = parent.has(segments[i]) ? parent.group(segments[i]) : parent.create_group(segments[i]);
    }
    const h5::Group& parent = nested ? *nested : section;
    if (parent.has(segments.back())) section.where().fail("name '" + name + "' given twice", false);
    write(parent, segments.back());
}

void write_tensor(const h5::Group& section, const std::string& name, const Tensor& tensor, DType stored) {
    if (!tensor.defined()) section.where().fail("tensor '" + name + "' is undefined", false);
    const Tensor on_cpu = tensor.to(Device::cpu);  // a model trained on the device is saved from a copy
    const Tensor converted = on_cpu.dtype() == stored ? on_cpu : on_cpu.to(stored);
    write_named(section, name, [&](const h5::Group& parent, const std::string& leaf) {
        if (stored == DType::f32)
            parent.write<float>(leaf, converted.shape(), converted.impl().array<float>().data());
        else
            parent.write<double>(leaf, converted.shape(), converted.impl().array<double>().data());
    });
}

template <class T>
void write_vectors(const h5::Group& section, const std::vector<std::pair<std::string, std::vector<T>>>& entries) {
    for (const auto& entry : entries)  // not a structured binding: clang 14 (the fuzz build) cannot capture one
        write_named(section, entry.first,
                    [&](const h5::Group& parent, const std::string& leaf) { parent.write<T>(leaf, entry.second); });
}

// "[3, 1]": the multi-index of flat element `flat` of `shape` (rank >= 1).
std::string index_str(const Shape& shape, size_t flat) {
    std::vector<size_t> index(shape.size());
    for (size_t axis = shape.size(); axis-- > 0;) {
        index[axis] = flat % shape[axis];
        flat /= shape[axis];
    }
    std::string text;
    for (size_t i : index) text += (text.empty() ? "[" : ", ") + std::to_string(i);
    return text + "]";
}

// Training never writes a NaN or an infinity (a non-finite step is refused),
// so one in a checkpoint is damage: refuse it rather than evaluate NaNs.
template <class T>
void check_finite(const h5::Dataset& dataset, const Shape& shape, const T* values, size_t count) {
    for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(values[i]))
            dataset.where().fail((shape.empty() ? "" : "element " + index_str(shape, i) + " ") + "is " +
                                     (std::isnan(values[i]) ? "NaN" : "infinite") +
                                     "; a checkpoint holds finite values only",
                                 false);
}

Tensor read_tensor(const h5::Dataset& dataset, bool keep_dtype) {
    const Shape shape = dataset.require(h5::Expect::tensor(h5::Expect::Type::floats));
    const DType dtype = keep_dtype && dataset.type_size() == 8 ? DType::f64 : DType::f32;
    Tensor tensor = Tensor::zeros(shape, dtype);
    if (tensor.numel() == 0) return tensor;
    if (dtype == DType::f32) {
        float* values = tensor.impl().array<float>().data();
        dataset.read_into(values);
        check_finite(dataset, shape, values, tensor.numel());
    } else {
        double* values = tensor.impl().array<double>().data();
        dataset.read_into(values);
        check_finite(dataset, shape, values, tensor.numel());
    }
    return tensor;
}

template <class T>
std::vector<T> read_vector(const h5::Dataset& dataset) {
    return dataset.read<T>(h5::Expect::array(h5::Expect::Type::integers, {h5::Expect::kAny}, "[n]"));
}

// A checkpoint's config is the resolved TOML of every key; text that sets
// nothing (empty, blank, comments only) would silently rebuild the default model.
bool sets_nothing(const std::string& toml) {
    std::istringstream lines(toml);
    for (std::string line; std::getline(lines, line);) {
        const size_t first = line.find_first_not_of(" \t\r");
        if (first != std::string::npos && line[first] != '#') return false;
    }
    return true;
}

// "step_0000123.h5" -> 123; -1 for any other name.
int64_t step_of(const std::string& file_name) {
    static const std::regex pattern(R"(step_(\d{7,18})\.h5)");
    std::smatch match;
    if (!std::regex_match(file_name, match, pattern)) return -1;
    return std::stoll(match[1].str());
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointData& checkpoint) {
    write_checkpoint(OutputFile{path, Existing::replace, {}}, checkpoint);
}

void write_checkpoint(const OutputFile& out, const CheckpointData& checkpoint) {
    write_output(out, "[checkpoint]", [&](const std::string& tmp) {
        h5::File file = h5::File::create(tmp, kTag);
        file.write_attr_string("format", kFormat);
        file.write_attr_int("format_version", kFormatVersion);
        file.write_attr_int("step", checkpoint.step);
        file.write_attr_string("config", checkpoint.config_toml);
        write_provenance_attrs(file, provenance());  // the process that wrote this checkpoint
        const h5::Group params = file.create_group("params");
        for (const auto& [name, tensor] : checkpoint.params) write_tensor(params, name, tensor, DType::f32);
        const h5::Group optimizer = file.create_group("optimizer");
        for (const auto& [name, tensor] : checkpoint.optimizer)
            write_tensor(optimizer, name, tensor, tensor.defined() ? tensor.dtype() : DType::f32);
        write_vectors(file.create_group("rng"), checkpoint.rng);
        write_vectors(file.create_group("data"), checkpoint.data);
        file.flush();
    });  // every group and dataset is closed before the file, then synced and renamed (output_file.h)
}

namespace {

CheckpointData read_checkpoint_file(const std::string& path) {
    const h5::File file = h5::File::open(path, kTag, h5::File::Access::read);
    const h5::Where where{kTag, path, ""};
    if (!file.has_attr("format")) where.fail("not an attnlab checkpoint (no 'format' attribute)", false);
    const std::string format = file.read_attr_string("format");
    if (format != kFormat)
        where.fail("not an attnlab checkpoint (format is \"" + format + "\", expected \"" + kFormat + "\")", false);
    const int64_t version = file.read_attr_int("format_version");
    if (version != kFormatVersion)
        where.fail("checkpoint format_version " + std::to_string(version) + " is not supported (this build reads " +
                       "format_version " + std::to_string(kFormatVersion) + ")",
                   false);
    for (const char* section : {"params", "optimizer", "rng", "data"}) {
        if (!file.has(section)) where.fail(std::string("missing group /") + section, false);
        if (!file.is_group(section)) where.fail(std::string("/") + section + " is not a group", false);
    }

    CheckpointData checkpoint;
    checkpoint.step = file.read_attr_int("step");
    if (checkpoint.step < 0) where.fail("step " + std::to_string(checkpoint.step) + " is negative", false);
    checkpoint.config_toml = file.read_attr_string("config");
    if (sets_nothing(checkpoint.config_toml))
        where.fail("the config attribute is empty (the model cannot be rebuilt without the run's config)", false);
    file.group("params").visit_datasets([&](const h5::Dataset& dataset, const std::string& name) {
        checkpoint.params.emplace_back(name, read_tensor(dataset, false));
    });
    file.group("optimizer").visit_datasets([&](const h5::Dataset& dataset, const std::string& name) {
        checkpoint.optimizer.emplace_back(name, read_tensor(dataset, true));
    });
    file.group("rng").visit_datasets([&](const h5::Dataset& dataset, const std::string& name) {
        checkpoint.rng.emplace_back(name, read_vector<uint64_t>(dataset));
    });
    file.group("data").visit_datasets([&](const h5::Dataset& dataset, const std::string& name) {
        checkpoint.data.emplace_back(name, read_vector<int64_t>(dataset));
    });
    return checkpoint;
}

}  // namespace

CheckpointData read_checkpoint(const std::string& path) {
    return h5::read_probed(path, kTag, [&] { return read_checkpoint_file(path); });
}

std::string checkpoint_name(int64_t step) {
    if (step < 0) throw Error("[checkpoint] step " + std::to_string(step) + " is negative");
    char name[40];
    std::snprintf(name, sizeof name, "step_%07lld.h5", static_cast<long long>(step));
    return name;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return {};
    if (!fs::is_directory(dir, ec)) throw Error("[checkpoint] " + dir + ": not a directory");
    std::vector<std::pair<int64_t, std::string>> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        const int64_t step = step_of(entry.path().filename().string());
        if (step >= 0 && entry.is_regular_file()) found.emplace_back(step, entry.path().string());
    }
    if (ec) throw Error("[checkpoint] " + dir + ": cannot list (" + ec.message() + ")");
    std::sort(found.begin(), found.end());
    std::vector<std::string> paths;
    for (auto& [step, path] : found) paths.push_back(std::move(path));
    return paths;
}

void prune_checkpoints(const std::string& dir, size_t keep) {
    const std::vector<std::string> paths = list_checkpoints(dir);
    for (size_t i = 0; i + keep < paths.size(); ++i) {
        std::error_code ec;
        if (!fs::remove(paths[i], ec) && ec) throw Error("[checkpoint] " + paths[i] + ": cannot delete (" + ec.message() + ")");
    }
}

}  // namespace attnlab
