#pragma once
// Whether a command fits the machine, asked before it allocates: the memory
// this process can use, and a one-line refusal when an estimate exceeds it.
#include <cstddef>
#include <cstdint>
#include <string>

namespace remat {

// Memory this process can use: the host's available memory (MemAvailable).
std::int64_t available_memory();

// Throws UserError naming the estimate and the available memory if `bytes`
// exceed it (or `limit`, when the user set one), unless `force`.
void require_memory(std::int64_t bytes, const std::string& what, std::int64_t limit, bool force);

// Asks the kernel to back a large host buffer, not yet touched, with 2 MiB
// pages where it can (Linux transparent huge pages in "madvise" mode, the
// usual default): one page fault per 2 MiB instead of 512. Faults are most of
// the cost of a buffer first written, above all in a virtual machine, where
// each is a trap to the hypervisor (`check` at real size: 2.3 s against 4.4).
// Buffers without a whole 2 MiB page inside, and systems without it, are
// left as they are.
void advise_huge_pages(void* data, std::size_t bytes);

}  // namespace remat
