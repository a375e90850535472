#include "step/step_scope.hpp"

namespace remat {

StepScope::StepScope(std::uint64_t seed, std::uint64_t step)
    : peaks_(MemoryTracker::instance().begin_peaks()),
      counts_(stats::exchange({})),
      copy_times_(transfer::exchange_copy_times({})),
      random_(random_ops::state()) {
  random_ops::begin_step(seed, step);
}

StepScope::~StepScope() {
  random_ops::restore(random_);
  transfer::exchange_copy_times(copy_times_);
  stats::exchange(counts_);
  MemoryTracker::instance().end_peaks(peaks_);
}

}  // namespace remat
