// full: keep every saved tensor on the device. The reference.
#include <algorithm>

#include "strategies/builtin.hpp"

namespace remat {
namespace {

class Full final : public Strategy {
 public:
  Full() : Strategy("full", false) {}
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override {
    return run_stored(device_, info, inputs, body);
  }
  // Nothing is dropped: every moment holds all the saved tensors before it.
  MemoryPrediction predict(const SaveProfile& p) const override {
    MemoryPrediction m;
    std::int64_t before = 0;
    for (const auto& b : p.blocks) {
      m.device = std::max({m.device, before + b.forward_peak, before + b.backward_peak});
      before += b.saved;
    }
    m.device = std::max(m.device, before + p.outside_peak);
    return m;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_full() { return std::make_unique<Full>(); }

}  // namespace remat
