#pragma once
// What a model saves, block by block, as measured by one probe forward pass
// (strategies/profile.cpp): the input to each strategy's memory prediction.
#include <cstdint>
#include <map>
#include <vector>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/region.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tensor.hpp"

namespace remat {

// One tensor a block saves (or takes as input), as a policy sees it.
struct SavedRecord {
  const char* tag;
  Shape shape;
  std::int64_t bytes = 0;
  bool recomputable = false;  // has a recipe
};

struct BlockSaves {
  std::string name;
  std::int64_t saved = 0;  // bytes the block's ops save, each storage once
  std::int64_t input = 0;  // bytes of the block's inputs
  std::vector<SavedRecord> tensors;  // what makes up `saved`, in save order, each storage once
  std::vector<SavedRecord> inputs;   // what makes up `input`
  // The most bytes live during the block's forward / backward beyond what
  // the other blocks' saved tensors held then: its own saved tensors (all of
  // them, as under full) and its working set.
  std::int64_t forward_peak = 0, backward_peak = 0;
};

struct SaveProfile {
  std::vector<BlockSaves> blocks;  // in forward order
  // The most bytes live outside the blocks' phases (embeddings, head, loss)
  // beyond what the blocks' saved tensors held then.
  std::int64_t outside_peak = 0;
};

// The bytes a strategy keeps at its peak, in the device pool and the offload pool.
struct MemoryPrediction {
  std::int64_t device = 0;
  std::int64_t offload = 0;
};

// Records a SaveProfile while a step runs under it: make it the block runner
// and the outermost hooks; everything is kept, as with `full`. The bytes it
// keeps are reported to the memory tracker as pools "saved <block>" (and
// "saved" outside blocks) while they live; finish() reads the timeline.
class SaveProfiler final : public BlockRunner, public SavedTensorHooks {
 public:
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override;
  std::shared_ptr<Packed> pack(const Tensor& t) override;  // outside blocks
  static constexpr const char* kSavedPool = "saved";
  // From the tracker's timeline of the step, with `base` live before it.
  SaveProfile finish(const std::vector<MemoryTracker::Event>& timeline, const std::vector<std::string>& phases,
                     const std::string& pool, std::int64_t base);

 private:
  SaveProfile profile_;
};



}  // namespace remat
