#pragma once
// What a command will hold, known before it allocates anything: the
// shape-only run of its step (estimate/shape_only_step.hpp), which is exact,
// so a command that cannot fit is refused in one line instead of swapping or
// running out of device memory minutes in.
#include <cstdint>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "zoo/model.hpp"

namespace remat {

struct StepNeed {
  std::int64_t parameters = 0;   // bytes of one copy of the weights (float32)
  std::int64_t activations = 0;  // the hungriest asked strategy's activation peak, device and offload pools
  std::int64_t total(int parameter_copies) const { return parameter_copies * parameters + activations; }
};

// `strategies` empty: the weights only, and no step is run. A strategy that
// plans under a budget is counted as full, which its plan never exceeds.
StepNeed step_need(const ModelSetup& setup, ops::AttentionKernel kernel, const std::vector<std::string>& strategies,
                   Precision precision = Precision::fp32);

// Refuses (UserError, core/memory.hpp's require_memory) a command holding
// `parameter_copies` copies of the weights (weights, gradients, reference
// gradients...) and a step under `strategies` that would not fit, unless
// `force`; `what` names it. The weights are checked first, counted without
// running anything, so sizes that cannot hold even those are refused at once.
// Returns the bytes it will hold.
std::int64_t require_step_fits(const ModelSetup& setup, ops::AttentionKernel kernel,
                               const std::vector<std::string>& strategies, int parameter_copies,
                               const std::string& what, std::int64_t limit, bool force,
                               Precision precision = Precision::fp32);

}  // namespace remat
