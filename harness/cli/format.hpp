#pragma once
// How the commands print sizes and durations.
#include <cstdint>
#include <string>

namespace remat::cli {

// Bytes in MiB (what every table's "MB" means).
inline double mib(std::int64_t bytes) { return double(bytes) / 1048576.0; }

// A duration for progress lines: "42s", "3m05s", "2h07m".
std::string duration(double seconds);

}  // namespace remat::cli
