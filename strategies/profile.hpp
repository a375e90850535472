#pragma once
// What a model saves, block by block, as measured by one probe forward pass
// (strategies/profile.cpp): the input to each strategy's memory prediction.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
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
  double recompute_seconds = 0;  // running its recipe (timed profiles only)
  bool block_input = false;      // the block's own input (SavedTensorInfo::block_input)
};

struct BlockSaves {
  std::string name;
  std::int64_t saved = 0;  // bytes the block's ops save, each storage once (context excluded)
  std::int64_t input = 0;  // bytes of the block's inputs (context excluded)
  // Bytes of context inputs (BlockInfo::context) that no earlier block
  // read: kept on the device from this block on, by every strategy.
  std::int64_t context = 0;
  bool new_stack = false;  // BlockInfo::new_stack: no segment runs across it
  std::vector<SavedRecord> tensors;  // what makes up `saved`, in save order, each storage once
  std::vector<SavedRecord> inputs;   // what makes up `input`
  // Its inputs that an earlier block saved (revformer's first stream: the
  // block before saved it for its second half's norm). Its moments leave
  // them out, as they leave out every other block's saves: where that block
  // does not keep them on the device (a segment, a drop, an offload) they
  // are live beside this block's forward all the same, and count there.
  struct EarlierSave {
    std::size_t block;  // the block that saved it
    int index;          // in that block's `tensors` (-1: let go before backward)
    std::size_t input;  // in `inputs`
    std::int64_t bytes;
  };
  std::vector<EarlierSave> inputs_saved_earlier;
  bool input_requires_grad = true;   // false below every trainable parameter (fine-tuning)
  // The most bytes live during the block's forward / backward beyond what
  // the other blocks' saved tensors held then: its own saved tensors (all of
  // them, as under full) and its working set.
  std::int64_t forward_peak = 0, backward_peak = 0;
  // backward_peak before and from the backward's first read of anything the
  // block saved: an offloaded group is fetched at that read (and the group
  // before it sent for), so a backward that peaks before it (a quantized
  // product's dequantized weight for the input's gradient) peaks without them.
  std::int64_t backward_before_read = 0, backward_after_read = 0;
  // What a recomputation of a segment that ends at this block runs beside,
  // beyond what the block's forward ran beside: it starts at the first read
  // in the block's backward of a tensor it saved (other than its inputs),
  // with the output's gradient and whatever the backward made before that
  // read live (a LoRA product's scaled gradient, the loss). Measured as the
  // bytes live then beyond every saved tensor, less the bytes that
  // operations outside the blocks had saved when the block's forward ran
  // (its forward_peak counts those already).
  std::int64_t recompute_beside = 0;
  // The most bytes live outside every block's phases after the block before
  // began its forward and before this one's began (the embeddings before the
  // first block; between an encoder and a decoder, the encoder's last norm
  // and the decoder's embeddings, whose vocabulary-parallel all-reduce can
  // peak there under --tp), beyond what the blocks' saves held then: what a
  // strategy adds there to what the blocks before keep.
  std::int64_t outside_before = 0;
  double forward_seconds = 0;  // the block's forward (timed profiles only)
  // The forward, moment by moment, as far as a strategy that drops saved
  // tensors changes it: the bytes live then (as forward_peak counts them)
  // and which of `tensors` (by index) nothing but their saved copies held
  // then. Dropping one of those frees its bytes at that moment; dropping
  // any other does not (the model's code still holds it, as the input of
  // a row-parallel product is held through its all-reduce). Only the
  // moments that can be the peak under some drops are kept. Empty (made-up
  // profiles): every drop frees its bytes at forward_peak.
  struct Moment {
    std::int64_t live = 0;
    std::vector<int> held_only_saved;
    // At or before the block's last save: a recomputation of the block that
    // ends a segment reaches it (it stops once the last save is made again).
    bool recomputed = true;
  };
  std::vector<Moment> forward_moments;
};

// The block's forward peak when the tensors marked in `dropped` (indices
// into b.tensors) are not kept: forward_peak less what dropping frees at
// each moment. `recomputed`: over the moments a recomputation that ends at
// the block reaches (Moment::recomputed) only.
std::int64_t forward_peak_dropping(const BlockSaves& b, const std::vector<bool>& dropped, bool recomputed = false);

// The block's forward peak inside a checkpoint segment, where every save is
// a placeholder: a tensor it saves lives only while the forward still reads
// it. More than forward_peak - saved where the peak falls mid-block (a
// product's output beside the activation made from it). A later block's
// input counts, as in forward_peak (its forward reads it); the first
// block's does not: the segment keeps it, and counts it apart.
std::int64_t segment_forward_peak(const BlockSaves& b, bool first);

// The bytes of a block's inputs that it does not save itself (a segment
// starting at it keeps them beside what its blocks save).
std::int64_t unsaved_input(const BlockSaves& b);

// The bytes of BlockSaves::inputs_saved_earlier: the block's inputs that are
// not in its forward's moments (segment_forward_peak leaves them out for a
// later block of a segment; the caller adds them where nothing keeps them).
std::int64_t earlier_saved_input(const BlockSaves& b);

struct SaveProfile {
  std::vector<BlockSaves> blocks;  // in forward order
  // The most bytes live outside the blocks' phases once the last block's
  // forward has begun (head, loss, their backward) beyond what the blocks'
  // saved tensors held then, before the last block's backward ended: what
  // every strategy adds to all it keeps (earlier: BlockSaves::outside_before).
  std::int64_t outside_peak = 0;
  // The same after the last block's backward (the embeddings' gradients),
  // when no block's saves are held any more: a peak of its own, not added to
  // what the blocks keep (a device's column sums of a position embedding's
  // gradient can hold more there than the head does).
  std::int64_t tail_peak = 0;
  // Timed profiles (what a planner needs, harness measure_costs): the
  // median time and the measured activation peak of a step under `full`.
  bool timed = false;
  double step_seconds = 0;
  std::int64_t measured_peak = 0;
  // Moving a byte to the offload pool and back (0 where the pool is the
  // device's own memory and nothing is copied: the host backends).
  double offload_seconds_per_byte = 0;
  // Whether offloading copies (backend::offload_copies: a device, or a host
  // made to): a group's copy out runs while the next block computes, its
  // device tensors held until the next group's copies start or the last
  // block's forward ends: one group in flight in every block's forward
  // after the first offload.
  bool copies_in_flight = false;
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
  // Call when the forward pass has ended, before backward: a block's saved
  // tensor already let go (its op's node dropped: nothing needs its
  // gradient) is not one the block keeps.
  void forward_over();
  using Copies = std::vector<std::weak_ptr<Packed>>;
  static constexpr const char* kSavedPool = "saved";
  static constexpr const char* kContextPool = "saved context";
  // From the tracker's timeline of the step, with `base` live before it.
  SaveProfile finish(const std::vector<MemoryTracker::Event>& timeline, const std::vector<std::string>& phases,
                     const std::string& pool, std::int64_t base);

 private:
  SaveProfile profile_;
  std::vector<const void*> context_;  // the context tensors met so far
  // Per block, the timeline's event count at the first read in its backward
  // of a tensor it saved, not one of its inputs (BlockSaves::recompute_beside).
  std::vector<std::shared_ptr<std::optional<std::size_t>>> first_read_;
  // Per block, the timeline's event count at its last save (Moment::recomputed).
  std::vector<std::size_t> last_save_;
  // Per block, the timeline's event count at the first read in its backward
  // of anything it saved (BlockSaves::backward_before_read).
  std::vector<std::shared_ptr<std::optional<std::size_t>>> any_read_;
  // Per block, the saved copies of each of its tensors (BlockSaves::tensors),
  // and which were all let go before backward (forward_over()).
  std::vector<std::vector<Copies>> saved_copies_;
  std::vector<std::vector<bool>> let_go_;
  // At each event of a block's forward (by timeline index), which of its
  // saved tensors only their saved copies held (BlockSaves::forward_moments).
  std::unordered_map<std::size_t, std::vector<int>> held_only_saved_;
  // The block and index of an earlier block's save of this storage, if any.
  std::optional<std::pair<std::size_t, int>> saved_earlier(const void* storage) const;
};

// Times each block's forward and each recipe of what it saves, while a
// forward pass runs under it (everything kept): per block, the forward
// seconds and, in the order and with the dedup of BlockSaves::tensors, each
// saved tensor's recipe seconds (0 without a recipe).
class CostTimer final : public BlockRunner {
 public:
  // `clock`: seconds from any origin; none: the wall clock, after a fence
  // (a device model's clock prices a shape-only run instead).
  explicit CostTimer(std::function<double()> clock = {}) : clock_(std::move(clock)) {}
  struct BlockTimes {
    double forward = 0;
    std::vector<double> recipes;
  };
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override;
  const std::vector<BlockTimes>& times() const { return times_; }

 private:
  double now() const;
  std::function<double()> clock_;
  std::vector<BlockTimes> times_;
};

}  // namespace remat
