#pragma once
// What one step counts, owned by one object. A step opens a StepScope; inside
// it the tracker's peaks and allocation counts, the op and FLOP counts, the
// offload copy times and the dropout stream start afresh, and when it closes
// the enclosing figures come back (the peaks taking the step's in). Nothing
// is reset by hand, so work run between or inside steps (a shape-only
// estimate, a probe, another step) neither adds to a step's figures nor wipes
// another's.
#include <cstdint>
#include <map>
#include <string>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/transfer.hpp"

namespace remat {

class StepScope {
 public:
  // The dropout stream of training step `step` under `seed`.
  StepScope(std::uint64_t seed, std::uint64_t step);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  std::map<std::string, MemoryTracker::PoolStats> peaks_;
  stats::Counts counts_;
  transfer::CopyTimes copy_times_;
  random_ops::State random_;
};

}  // namespace remat
