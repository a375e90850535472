#pragma once
// The kinds of failure, and how the CLI reports them (each in one line):
// - UserError: something wrong in what the user asked for or gave (a bad
//   file, name, shape, option or data; a full disk; a run that does not fit
//   in memory). Exit code 2.
// - EnvironmentError: the machine or a library it provides failed at work
//   that was well asked (HDF5 could not set up a file, an MPI call failed,
//   cuBLAS or the CUDA runtime refused, a file could not be read back).
//   Exit code 4: nothing the user can fix in the command, nothing to report
//   as a bug either.
// - everything else (std::logic_error, std::invalid_argument from an op's
//   own checks, ...): a bug in remat. "internal error", exit code 3.
// An op's check of its arguments is a bug check: the harness validates what
// the user gives before it reaches an op.
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace remat {

// The process's exit codes (remat --help lists them).
enum ExitCode { kExitSuccess = 0, kExitCheckFailed = 1, kExitUserError = 2, kExitInternalError = 3, kExitEnvironment = 4 };

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

class EnvironmentError : public std::runtime_error {
 public:
  explicit EnvironmentError(const std::string& what) : std::runtime_error(what) {}
};

// An allocation that would exceed the memory limit set on the tracker (a
// simulated smaller device).
class OutOfMemory : public UserError {
 public:
  explicit OutOfMemory(const std::string& what) : UserError(what) {}
};

// The machine (or the device) itself could not give the memory asked for:
// a std::bad_alloc, so a run measured under a limit counts it as out of
// memory, with one line saying how much, for what, and where.
class AllocationFailure : public std::bad_alloc {
 public:
  explicit AllocationFailure(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// A recomputation that does not reproduce the forward pass (a checkpoint
// region that saved other tensors, a router that chose other experts): a
// bug in a model or a strategy, never a silently wrong gradient.
class RecomputeMismatch : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace remat
