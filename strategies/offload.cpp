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
  // Peak on the device: the end of forward (last block and head), or a
  // block's backward with the previous block prefetched.
  MemoryPrediction predict(const SaveProfile& p) const override {
    const auto& b = p.blocks;
    const std::size_t n = b.size();
    MemoryPrediction m{p.outside + b[n - 1].saved, 0};
    for (std::size_t i = 0; i + 1 < n; ++i) m.offload += b[i].saved;
    for (std::size_t i = 1; i + 1 < n; ++i) m.device = std::max(m.device, b[i].saved + b[i - 1].saved);
    return m;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_offload() { return std::make_unique<Offload>(); }

}  // namespace remat
