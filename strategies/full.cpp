// full: keep every saved tensor on the device. The reference every other
// strategy is compared with.
#include "strategies/registry.hpp"

namespace remat {

void register_full(StrategyRegistry& r) {
  StrategyEntry e;
  e.name = e.usage = "full";
  e.description = "keep every saved tensor on the device (the reference)";
  e.policy = [](const std::string&) {
    Policy p;
    p.decide = [](const SavedTensorInfo&) { return Decision::keep; };
    return p;
  };
  e.in_all = {"full"};
  r.add(std::move(e));
}

}  // namespace remat
