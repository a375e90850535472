#pragma once
// What a command will need, known before it allocates anything: the
// parameters from the model's own parameter shapes, and each strategy's
// activations from its memory prediction applied to a profile estimated from
// those shapes (a block saves about the inputs and outputs of its linear
// layers, plus the attention probabilities with the plain kernel). Coarse by
// design: it tells a run that fits from one that cannot, so that a command
// that would exhaust the machine is refused in one line instead of swapping
// for minutes. The exact figures come from the probe step and the tracker.
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "zoo/sizes.hpp"

namespace remat {

struct MemoryNeed {
  std::int64_t parameters = 0;   // bytes of one copy of the weights
  std::int64_t activations = 0;  // bytes a step keeps at its peak under the strategies asked for
  std::int64_t total(int parameter_copies) const { return parameter_copies * parameters + activations; }
};

// `strategies` empty: parameters only. Cheap even for absurd sizes (the
// model is instantiated with two and four blocks, never with L).
MemoryNeed estimate_need(const std::string& model, const Sizes& sizes, bool plain_attention,
                         const std::vector<std::string>& strategies);


}  // namespace remat
