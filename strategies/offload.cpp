// offload: every tensor a block saves moves to the host offload pool when the
// block's forward ends and comes back, the previous block's prefetched, when
// its backward starts. The last block stays: its backward comes right away.
#include <algorithm>

#include "strategies/builtin.hpp"

namespace remat {
namespace {

class Offload final : public Strategy {
 public:
  Offload() : Strategy("offload", true) {}
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override {
    const bool last = info.index == info.count - 1;
    return run_stored(last ? device_ : *storage_, info, inputs, body);
  }
  // Device: a block's own tensors while its forward runs; in its backward,
  // its own plus the previous block's, prefetched; the last block and the
  // head at the end of forward. Pool: every block but the last.
  MemoryPrediction predict(const SaveProfile& p) const override {
    const auto& b = p.blocks;
    MemoryPrediction m{b.back().saved + p.outside_peak, 0};
    for (std::size_t i = 0; i < b.size(); ++i) {
      const bool last = i + 1 == b.size();
      const std::int64_t prefetched = (i > 0 && !last) ? b[i - 1].saved : 0;
      m.device = std::max({m.device, b[i].forward_peak, prefetched + b[i].backward_peak});
      if (!last) m.offload += b[i].saved;
    }
    return m;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_offload() { return std::make_unique<Offload>(); }

}  // namespace remat
