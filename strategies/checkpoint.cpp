// every:K (per-layer = every:1, sqrt = every:floor(sqrt(L))): segments of K
// blocks keep only their input; what they save is recomputed in backward.
// The segment holding the last block runs plainly: its backward follows its
// forward at once, so keeping it costs no extra peak and saves its recompute.
// With +offload the segment inputs live in the offload pool.
#include <algorithm>
#include <cmath>

#include "strategies/builtin.hpp"
#include "strategies/recompute_region.hpp"

namespace remat {
namespace {

class Checkpoint final : public Strategy {
 public:
  Checkpoint(std::string spec, int k, bool offload) : Strategy(std::move(spec), offload), k_(k) {}

  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override {
    const int k = segment_size(info.count);
    const int segment = info.index / k, first = segment * k, last = std::min(first + k, info.count) - 1;
    if (segment == (info.count - 1) / k) {
      region_.reset();
      return run_stored(device_, info, inputs, body);
    }
    const std::string name = k == 1 ? info.name : "blocks " + std::to_string(first) + "-" + std::to_string(last);
    RegionTrace* trace = trace_region(name);
    if (info.index == first) region_ = RecomputeRegion::begin(name, inputs, storage(), trace);
    return run_traced(trace, [&] { return region_->run(inputs, body); });
  }

  // Device, at each moment: the segment inputs kept so far (only the one
  // prefetched with +offload), the saved tensors of the blocks of the
  // current segment before the current block (recomputed, or kept for the
  // last segment), and the block's own peak; the head at the end of forward.
  // A recomputation is a forward pass that runs while the gradient of the
  // segment's output (the size of a block input) is live.
  MemoryPrediction predict(const SaveProfile& p) const override {
    const int L = int(p.blocks.size()), k = segment_size(L), last = (L - 1) / k;
    const bool pool = storage_ != nullptr;
    auto input_of = [&](int s) { return s >= 0 ? p.blocks[std::size_t(s * k)].input : 0; };
    MemoryPrediction m;
    std::int64_t inputs = 0;  // of the segments before the current one
    for (int s = 0; s <= last; ++s) {
      const std::int64_t held = pool ? input_of(s - 1) : inputs;  // in backward
      const std::int64_t own = s == last || pool ? 0 : input_of(s);  // in forward, the segment's own input
      std::int64_t segment = 0;  // saved by the segment's blocks before the current one
      for (int i = s * k; i < std::min(L, s * k + k); ++i) {
        const auto& b = p.blocks[std::size_t(i)];
        const std::int64_t fwd = s == last ? segment + b.forward_peak : b.forward_peak - b.saved;
        const std::int64_t recompute = s == last ? 0 : held + segment + b.forward_peak + b.input;
        m.device = std::max({m.device, (pool ? 0 : inputs) + own + fwd, held + segment + b.backward_peak, recompute});
        segment += b.saved;
      }
      if (s == last) m.device = std::max(m.device, (pool ? 0 : inputs) + segment + p.outside_peak);
      inputs += s == last ? 0 : input_of(s);
    }
    if (pool) m.offload = inputs;
    return m;
  }

 private:
  int segment_size(int blocks) const {
    return k_ > 0 ? k_ : std::max(1, int(std::floor(std::sqrt(double(blocks)))));
  }
  void reset() override { region_.reset(); }
  int k_;  // 0: floor(sqrt(L))
  std::shared_ptr<RecomputeRegion> region_;
};

}  // namespace

std::unique_ptr<Strategy> make_checkpoint(const std::string& spec, int k, bool offload) {
  return std::make_unique<Checkpoint>(spec, k, offload);
}

}  // namespace remat
