#pragma once
// Work that will take a while says so before it starts, and shows where it
// is within each step. A LongRunNotice estimates a command's FLOPs (the
// conventional 6 x parameters x tokens plus attention, per step) and the
// rate of this machine (a GEMM timed at start), and when the work comes to
// more than about ten seconds it prints the estimate and, for its lifetime,
// the progress of each step: forward block i of L, recomputation, backward.
// (REMAT_LONG_RUN_SECONDS moves the threshold, for tests.)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "zoo/model.hpp"

namespace remat {

class LongRunNotice {
 public:
  // `steps`: the training steps the command will run; `activation_bytes`:
  // its memory estimate, printed beside the time.
  LongRunNotice(const ModelSetup& setup, std::int64_t steps, std::int64_t memory_bytes, bool speaks = true);
  ~LongRunNotice();
  LongRunNotice(const LongRunNotice&) = delete;
  LongRunNotice& operator=(const LongRunNotice&) = delete;

  bool active() const { return scope_ != nullptr; }
  double flops_per_step() const { return flops_; }
  double seconds_expected() const { return seconds_; }

 private:
  class Progress;
  double flops_ = 0, seconds_ = 0;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<BlockHooksScope> scope_;
};

}  // namespace remat
