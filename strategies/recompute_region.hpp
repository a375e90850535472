#pragma once
// A checkpoint region (PyTorch's non-reentrant checkpoint, on saved-tensor
// hooks): in forward it runs one or more block bodies storing only its
// inputs; every tensor the ops save becomes a placeholder recording shape and
// dtype. The first placeholder unpacked in backward re-runs the bodies once,
// with the random-op cursor rewound, filling the placeholders in save order;
// it stops as soon as the last is filled, checks each against what forward
// saved, and hands each tensor over to its consumer, so a region's
// recomputed tensors are freed as its backward consumes them.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "autodiff/saved_tensor.hpp"
#include "strategies/storage.hpp"
#include "strategies/trace.hpp"

namespace remat {

// A recomputation that does not reproduce the forward pass: never a silently
// wrong gradient.
class RecomputeMismatch : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class RecomputeRegion : public std::enable_shared_from_this<RecomputeRegion> {
 public:
  // Saves `inputs` through `storage` (one group named after the region).
  static std::shared_ptr<RecomputeRegion> begin(const std::string& name, const Tensors& inputs, Storage& storage,
                                                RegionTrace* trace);
  // Runs one block of the region; its saves become placeholders.
  Tensors run(const Tensors& inputs, const BlockBody& body);
  const std::string& name() const { return name_; }

 private:
  friend class RegionPlaceholder;
  friend class RegionHooks;
  friend class CaptureHooks;
  struct Slot {
    Shape shape;
    DType dtype;
    const char* op;
    Tensor value;
  };

  void recompute();
  Tensor take(std::size_t index);

  std::string name_;
  std::vector<SavedTensor> inputs_;
  std::vector<Shape> input_shapes_;
  std::vector<bool> input_requires_grad_;
  std::vector<BlockBody> bodies_;
  std::vector<Slot> slots_;
  std::uint64_t random_cursor_ = 0;
  bool recomputed_ = false;
  RegionTrace* trace_ = nullptr;
};

}  // namespace remat
