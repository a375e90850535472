#pragma once
// Integer token arrays stored in HDF5 (any shape, read flattened).
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

// Throws UserError if the file or dataset is missing, not integer, or holds
// a token outside [0, V).
std::vector<std::int32_t> read_token_file(const std::string& path, const std::string& dataset, std::int64_t V);

}  // namespace remat
