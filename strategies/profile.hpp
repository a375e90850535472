#pragma once
// What a model saves, block by block, as measured by one probe forward pass
// (strategies/profile.cpp): the input to each strategy's memory prediction.
#include <cstdint>
#include <map>
#include <vector>

#include <set>

#include "autodiff/region.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tensor.hpp"

namespace remat {

struct BlockSaves {
  std::int64_t saved = 0;  // bytes the block's ops save, each storage once
  std::int64_t input = 0;  // bytes of the block's inputs
  std::map<OpKind, std::int64_t> recomputable;  // of `saved`, by producing kind, tensors that have a recipe
};

struct SaveProfile {
  std::vector<BlockSaves> blocks;  // in forward order
  std::int64_t outside = 0;        // saved outside blocks (embeddings, head, loss)
};

// The bytes a strategy keeps at its peak, in the device pool and the offload pool.
struct MemoryPrediction {
  std::int64_t device = 0;
  std::int64_t offload = 0;
};

// Records a SaveProfile while a forward pass runs under it: make it the
// block runner and the outermost hooks; everything is kept, as with `full`.
class SaveProfiler final : public BlockRunner, public SavedTensorHooks {
 public:
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override;
  std::shared_ptr<Packed> pack(const Tensor& t) override;  // outside blocks
  const SaveProfile& profile() const { return profile_; }

 private:
  SaveProfile profile_;
  std::set<const void*> seen_;
  KeepHooks keep_;
};

}  // namespace remat
