#pragma once
// Reading a user's file safely: a path that is not a regular file (a FIFO, a
// device, a socket; a symlink is judged by what it points to) is refused
// before anything waits on it, and a file larger than the reader expects is
// refused before a byte is read. UserError names the file and the reason.
#include <cstdint>
#include <string>

namespace remat {

// Opens `path` for reading without blocking (a FIFO with no writer would
// wait forever) and returns the descriptor of a regular file; UserError
// naming `what` otherwise. The caller closes it.
int open_regular_file(const std::string& path, const std::string& what);

// The whole file as text, if it is a regular file of at most `max_bytes`.
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const std::string& what);

}  // namespace remat
