#pragma once
// The two kinds of failure, and how the CLI reports them:
// - UserError: something wrong in what the user asked for or gave (a bad
//   file, name, shape, option or data; a full disk; a run that does not fit
//   in memory). One line, exit code 2.
// - everything else (std::logic_error, std::invalid_argument from an op's
//   own checks, ...): a bug in remat. "internal error", exit code 3.
// An op's check of its arguments is a bug check: the harness validates what
// the user gives before it reaches an op.
#include <stdexcept>
#include <string>

namespace remat {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// An allocation that would exceed the memory limit set on the tracker (a
// simulated smaller device).
class OutOfMemory : public UserError {
 public:
  explicit OutOfMemory(const std::string& what) : UserError(what) {}
};

// A recomputation that does not reproduce the forward pass (a checkpoint
// region that saved other tensors, a router that chose other experts): a
// bug in a model or a strategy, never a silently wrong gradient.
class RecomputeMismatch : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace remat
