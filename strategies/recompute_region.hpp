#pragma once
// A checkpoint region (PyTorch's non-reentrant checkpoint, on saved-tensor
// hooks): in forward it runs one or more block bodies storing only its
// inputs; every tensor the ops save becomes a placeholder recording shape and
// dtype. The first placeholder unpacked in backward re-runs the bodies once,
// with the random-op cursor rewound, filling the placeholders in save order;
// it stops as soon as the last is filled, checks each against what forward
// saved, and hands each tensor over to its consumer, so a region's
// recomputed tensors are freed as its backward consumes them.
//
// Multi-level (rotor, Revolve): the segment's `inner` policy may split the
// recomputation again. A sub-segment keeps only its input during the
// recomputation (its blocks run without saving, or not at all if it ends the
// region) and is recomputed, by the same rules, when backward first needs
// one of its tensors; the inner policy may also drop tensors by tag, filled
// from their recipes when unpacked.
//
// Fine-tuning: a region whose inputs need no gradient saves them only once
// one of its blocks saves anything; blocks that save nothing (frozen ones
// below every trainable parameter) are left out of it, so it keeps nothing
// for them and never recomputes them.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "autodiff/saved_tensor.hpp"
#include "core/error.hpp"
#include "strategies/policy.hpp"
#include "strategies/storage.hpp"
#include "strategies/trace.hpp"

namespace remat {

// A saved tensor dropped now and computed again from its recipe (what its
// producing op saved anyway) the first time backward unpacks it; `where`
// names it in a mismatch error; what the recipe runs is counted in `trace`'s
// recomputed ops (if not null).
std::shared_ptr<Packed> recompute_later(const Tensor& t, std::string where, RegionTrace* trace = nullptr);

class RecomputeRegion : public std::enable_shared_from_this<RecomputeRegion> {
 public:
  // Saves `inputs` through `storage` (one group named after the region),
  // but for the last `context` ones (BlockInfo::context), which it holds as
  // they are: they are kept once for every block anyway. `inner` (may be
  // null: keep everything) runs the recomputation.
  static std::shared_ptr<RecomputeRegion> begin(const std::string& name, const Tensors& inputs, Storage& storage,
                                                RegionTrace* trace, std::shared_ptr<const Policy> inner = nullptr,
                                                int context = 0);
  // Runs one block of the region; its saves become placeholders.
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body);
  const std::string& name() const { return name_; }

  struct Span;

 private:
  friend class RegionPlaceholder;
  friend class RegionHooks;
  friend class CaptureHooks;
  struct Slot {
    Shape shape;
    DType dtype;
    const char* op;
    Tensor value;
    std::shared_ptr<Packed> later;  // dropped by the inner policy: its recipe
    // Its placeholder is gone without being unpacked (a recipe's handle that
    // backward never needed): recomputation checks it and keeps nothing.
    bool abandoned = false;
  };

  void save_inputs(const Tensors& inputs);
  void recompute(Span& span);
  Tensors span_inputs(const Span& span);
  std::size_t open_sub_span(Span& span, std::size_t k, const Segment& seg, const Tensors& x);
  void fill(std::size_t index);  // recomputes the spans `index` lies in, outermost first
  Tensor take(std::size_t index);
  void abandon(std::size_t index);

  std::string name_;
  Storage* storage_ = nullptr;
  bool inputs_saved_ = false;
  // Inputs that need no gradient are saved only once a block of the region
  // saves anything: a region whose blocks record nothing (frozen, below
  // every trainable parameter) keeps nothing, and starts again at the next
  // block.
  Tensors pending_;
  std::vector<SavedTensor> inputs_;
  int context_count_ = 0;
  Tensors context_;  // the context inputs, held as they are
  std::vector<Shape> input_shapes_;
  std::vector<bool> input_requires_grad_;
  std::vector<BlockBody> bodies_;
  std::vector<BlockInfo> infos_;
  std::vector<std::size_t> first_slot_;  // of each body; one more entry: the end
  std::vector<Slot> slots_;
  std::unique_ptr<Span> root_;
  RegionTrace* trace_ = nullptr;
};

}  // namespace remat
