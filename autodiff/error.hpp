#pragma once
// An error in what the user asked for (a bad file, name, shape or option),
// as opposed to a bug: the CLI prints its one-line message and exits 2.
#include <stdexcept>
#include <string>

namespace remat {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// An allocation that would exceed the memory limit set on the tracker (a
// simulated smaller device).
class OutOfMemory : public std::runtime_error {
 public:
  explicit OutOfMemory(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace remat
