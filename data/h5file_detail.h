// The helpers the parts of data/h5file.h share (h5file.cpp: identifiers, errors,
// files; h5file_dataset.cpp: datasets; h5file_group.cpp: groups and their
// attributes). Internal to data/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/h5file.h"

namespace attnlab::h5::detail {

// Where messages place a member of `parent` ("/train/loss") and an attribute ("/ attribute 'step'").
Where child(const Where& parent, const std::string& name);
Where attribute(const Where& parent, const std::string& name);

// `id` owned with `close`; a negative id (or status) fails with `problem` and HDF5's reason.
Id make(hid_t id, herr_t (*close)(hid_t), const Where& where, const std::string& problem);
void check(herr_t status, const Where& where, const std::string& problem);

// The link access list of every lookup: external links are never traversed.
hid_t no_external_links();

// A dataspace of `dims` (empty: scalar), at most `max_dims` when given.
Id simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>* max_dims, const Where& where);

// The size in bytes of the file `object` lives in.
uint64_t file_size_of(hid_t object, const Where& where);
std::string bytes_str(uint64_t bytes);  // "1 byte", "8 bytes"

}  // namespace attnlab::h5::detail
