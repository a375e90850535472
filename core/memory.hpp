#pragma once
// Whether a command fits the machine, asked before it allocates: the memory
// this process can use, and a one-line refusal when an estimate exceeds it.
#include <cstdint>
#include <string>

namespace remat {

// Memory this process can use: the host's available memory (MemAvailable).
std::int64_t available_memory();

// Throws UserError naming the estimate and the available memory if `bytes`
// exceed it (or `limit`, when the user set one), unless `force`.
void require_memory(std::int64_t bytes, const std::string& what, std::int64_t limit, bool force);

}  // namespace remat
