// Reads through the HDF5 helpers of data/h5file.h, so a token file gets
// the same checks as every file attnlab reads (declared shape and type before
// anything is allocated, data kept in the file, no links to other files).
#include "data/token_file.h"

#include <limits>

#include "data/data_file.h"
#include "data/h5_probe.h"
#include "data/h5file.h"
#include "data/tasks.h"

namespace attnlab {

namespace {

const char* const kTag = "token_file";

std::string index_str(size_t i, size_t j) { return "[" + std::to_string(i) + ", " + std::to_string(j) + "]"; }

// The dataset `name`, which must exist.
h5::Dataset open_dataset(const h5::File& file, const std::string& name) {
    if (!file.has(name)) h5::Where{kTag, file.path(), "/" + name}.fail("missing dataset", false);
    return file.dataset(name);
}

h5::Expect integers(std::vector<size_t> extents, std::string shape,
                    h5::Expect::Type type = h5::Expect::Type::integers) {
    return h5::Expect::array(type, std::move(extents), std::move(shape));
}

std::vector<size_t> read_lengths(const h5::File& file, size_t n, size_t s) {
    const h5::Dataset dataset = open_dataset(file, "lengths");
    const std::vector<int64_t> stored =
        dataset.read<int64_t>(integers({n}, "[" + std::to_string(n) + "] (N, one per row of /tokens)"));
    std::vector<size_t> lengths(n);
    for (size_t i = 0; i < n; ++i) {
        if (stored[i] < 1 || stored[i] > static_cast<int64_t>(s))
            dataset.where().fail("lengths[" + std::to_string(i) + "] = " + std::to_string(stored[i]) +
                                     " is outside [1, S = " + std::to_string(s) + "]",
                                 false);
        lengths[i] = static_cast<size_t>(stored[i]);
    }
    return lengths;
}

// Valid positions checked against the vocabulary; padded ones become <PAD>.
Indices read_tokens(const h5::Dataset& dataset, const std::vector<int64_t>& stored, const std::vector<size_t>& lengths,
                    size_t s, size_t vocab) {
    const size_t n = lengths.size();
    std::vector<int32_t> ids(n * s, kPad);
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < lengths[i]; ++j) {
            const int64_t token = stored[i * s + j];
            if (token < 0 || token >= static_cast<int64_t>(vocab))
                dataset.where().fail("tokens" + index_str(i, j) + " = " + std::to_string(token) +
                                         " is outside [0, vocab = " + std::to_string(vocab) + ")",
                                     false);
            ids[i * s + j] = static_cast<int32_t>(token);
        }
    return Indices({n, s}, std::move(ids));
}

Mask read_loss_mask(const h5::File& file, const std::vector<size_t>& lengths, size_t s) {
    const size_t n = lengths.size();
    const h5::Dataset dataset = file.dataset("loss_mask");
    const std::vector<int64_t> stored = dataset.read<int64_t>(
        integers({n, s}, "[N, S] = " + shape_str({n, s}) + " (as /tokens)", h5::Expect::Type::integers_or_bools));
    std::vector<uint8_t> flags(n * s, 0);
    bool selects_a_target = false;
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < s; ++j) {
            const int64_t value = stored[i * s + j];
            if (value != 0 && value != 1)
                dataset.where().fail("loss_mask" + index_str(i, j) + " = " + std::to_string(value) + " is not 0 or 1",
                                     false);
            if (value == 1 && j >= lengths[i])
                dataset.where().fail("loss_mask" + index_str(i, j) + " = 1 at a padded position (length " +
                                         std::to_string(lengths[i]) + ")",
                                     false);
            selects_a_target = selects_a_target || (value == 1 && j >= 1);
            flags[i * s + j] = static_cast<uint8_t>(value);
        }
    // Position 0 is never a target (nothing precedes it): a mask with no 1
    // elsewhere would train on a loss of exactly 0.
    if (!selects_a_target)
        dataset.where().fail("selects no target (no 1 at a position >= 1): nothing to train or evaluate on", false);
    return Mask({n, s}, std::move(flags));
}

TokenFile read_token_file_unprobed(const std::string& path, size_t vocab) {
    const h5::File file = h5::File::open(path, kTag, h5::File::Access::read);
    if (vocab == 0) h5::Where{kTag, path, ""}.fail("vocab must be positive", false);

    const h5::Dataset tokens = open_dataset(file, "tokens");
    const h5::Expect tokens_shape = integers({h5::Expect::kAny, h5::Expect::kAny}, "[N, S]");
    const Shape shape = tokens.require(tokens_shape);
    const size_t n = shape[0], s = shape[1];
    if (n == 0 || s == 0) tokens.where().fail("is empty " + shape_str(shape) + ": no sequences", false);
    if (static_cast<uint64_t>(n) * s > kMaxFileTokens)
        tokens.where().fail("declares " + shape_str(shape) + ", " + std::to_string(static_cast<uint64_t>(n) * s) +
                                " tokens, more than the " + std::to_string(kMaxFileTokens) + " (2^28) a token file may hold",
                            false);
    const std::vector<int64_t> stored = tokens.read<int64_t>(tokens_shape);

    TokenFile result;
    result.lengths = read_lengths(file, n, s);
    result.tokens = read_tokens(tokens, stored, result.lengths, s, vocab);
    if (file.has("loss_mask")) result.loss_mask = read_loss_mask(file, result.lengths, s);
    return result;
}

}  // namespace

TokenFile read_token_file(const std::string& path, size_t vocab) {
    // What is no regular file is refused here, before the probe's child or libhdf5 opens it.
    // HDF5 reads only what the file's metadata points to, so the file's size in
    // bytes bounds nothing: the /tokens it declares does (kMaxFileTokens)
    check_data_file(DataPath{kTag, "task.path", path}, std::numeric_limits<uint64_t>::max(), "a token file");
    return h5::read_probed(path, kTag, [&] { return read_token_file_unprobed(path, vocab); });
}

}  // namespace attnlab
