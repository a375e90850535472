#pragma once
// Work that will take a while says so before it starts, and shows where it
// is within each step. A LongRunNotice estimates a command's FLOPs (the
// conventional 6 x parameters x tokens plus attention, per step) and the
// rate of this machine (a GEMM timed at start), and when the work comes to
// more than about ten seconds it prints the estimate and, for its lifetime,
// the progress of each step: forward block i of L, recomputation, backward.
// (REMAT_LONG_RUN_SECONDS moves the threshold, for tests.)
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "zoo/model.hpp"

namespace remat {

class LongRunNotice {
 public:
  // `steps`: the training steps the command will run; `memory_bytes`: what
  // it will hold, printed beside the time (asked only when the run is long).
  LongRunNotice(const ModelSetup& setup, std::int64_t steps, const std::function<std::int64_t()>& memory_bytes,
                bool speaks = true);
  LongRunNotice(const ModelSetup& setup, std::int64_t steps, std::int64_t memory_bytes, bool speaks = true)
      : LongRunNotice(setup, steps, [memory_bytes] { return memory_bytes; }, speaks) {}
  ~LongRunNotice();
  LongRunNotice(const LongRunNotice&) = delete;
  LongRunNotice& operator=(const LongRunNotice&) = delete;

  bool active() const { return scope_ != nullptr; }
  double flops_per_step() const { return flops_; }
  double seconds_expected() const { return seconds_; }

 private:
  friend class ProgressAfterAWhile;
  class Progress;
  double flops_ = 0, seconds_ = 0;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<BlockHooksScope> scope_;
};

// For work whose time no FLOP count predicts (a shape-only estimate runs no
// kernels; a stack of thousands of tiny blocks is all overhead): silent for
// its first ten seconds (REMAT_LONG_RUN_SECONDS), then on stderr, every few
// seconds, the stage the caller names and, within a step, the block.
class ProgressAfterAWhile {
 public:
  explicit ProgressAfterAWhile(int blocks);
  ~ProgressAfterAWhile();
  ProgressAfterAWhile(const ProgressAfterAWhile&) = delete;
  ProgressAfterAWhile& operator=(const ProgressAfterAWhile&) = delete;
  void stage(const std::string& what);  // "S 32768 B 4: strategy sqrt (3 of 9)", said at once
  void item(const std::string& what);   // "tensor 257 of 3604": said every few seconds at most

 private:
  std::unique_ptr<LongRunNotice::Progress> progress_;
  std::unique_ptr<BlockHooksScope> scope_;
};

}  // namespace remat
