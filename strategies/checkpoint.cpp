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

  // Peak: the end of forward (kept segment inputs, the last segment, the
  // head) or the backward of a recomputed segment (the inputs before it and
  // the segment's saved tensors, its own input among them).
  MemoryPrediction predict(const SaveProfile& p) const override {
    const int L = int(p.blocks.size()), k = segment_size(L), last = (L - 1) / k;
    const bool pool = storage_ != nullptr;
    MemoryPrediction m;
    std::int64_t inputs_before = 0, end_of_forward = p.outside;
    for (int s = 0; s <= last; ++s) {
      std::int64_t segment = 0;
      for (int b = s * k; b < std::min(L, s * k + k); ++b) segment += p.blocks[std::size_t(b)].saved;
      const std::int64_t input = p.blocks[std::size_t(s * k)].input;
      if (s == last) {
        end_of_forward += segment;
      } else {
        // With the inputs in the pool, the previous segment's is prefetched.
        const std::int64_t before = pool ? (s > 0 ? p.blocks[std::size_t((s - 1) * k)].input : 0) : inputs_before;
        m.device = std::max(m.device, before + segment);
        inputs_before += input;
      }
    }
    if (pool)
      m.offload = inputs_before;
    else
      end_of_forward += inputs_before;
    m.device = std::max(m.device, end_of_forward);
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
