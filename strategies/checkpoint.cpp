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
    const int k = k_ > 0 ? k_ : std::max(1, int(std::floor(std::sqrt(double(info.count)))));
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

 private:
  void reset() override { region_.reset(); }
  int k_;  // 0: floor(sqrt(L))
  std::shared_ptr<RecomputeRegion> region_;
};

}  // namespace

std::unique_ptr<Strategy> make_checkpoint(const std::string& spec, int k, bool offload) {
  return std::make_unique<Checkpoint>(spec, k, offload);
}

}  // namespace remat
