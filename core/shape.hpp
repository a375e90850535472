#pragma once
// The shape of an array, row-major: what tensors and files
// share without anything else of the autodiff.
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "[2, 3]"

}  // namespace remat
