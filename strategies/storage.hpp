#pragma once
// Where a strategy puts the tensors it keeps: on the device (KeepStorage) or
// in the host offload pool (OffloadStorage). Tensors are grouped per block or
// region; a group is moved out when its forward ends and brought back, with
// the group before it prefetched, when its backward first needs it.
#include <memory>
#include <string>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/saved_tensor.hpp"
#include "strategies/trace.hpp"

namespace remat {

class Storage : public SavedTensorHooks {
 public:
  virtual void begin_group(const std::string& name, RegionTrace* trace) = 0;
  virtual void end_group() = 0;
  virtual void reset() {}  // a new step
};

class KeepStorage final : public Storage {
 public:
  std::shared_ptr<Packed> pack(const Tensor& t) override;
  void begin_group(const std::string&, RegionTrace* trace) override { trace_ = trace; }
  void end_group() override { trace_ = nullptr; }

 private:
  KeepHooks keep_;
  RegionTrace* trace_ = nullptr;
};

// The offload pool's bytes are reported to the memory tracker as pool
// "offload", apart from the device pool, so the two peaks are seen apart.
// On a device the pool is pinned host memory, and the copies run on their
// own execution-space instance (transfer.hpp): a block's copy out overlaps
// the next block's forward, and a block's backward overlaps the copy back of
// the block before it. Where the device's memory is host memory (the host
// backends) nothing is copied: the pool takes the tensor as it is, as PyTorch's save_on_cpu does
// for CPU tensors, and the tracker moves its bytes from the device pool to
// the offload pool and back. A copy there would only add a memcpy and a
// second resident copy that no real host training run would make.
class OffloadStorage final : public Storage {
 public:
  // The host buffers' label, and the tracker's pool for them (on a device
  // build they are pinned host memory; the pool names them apart).
  static constexpr const char* kPool = "offload";
  static constexpr const char* kLabel = "offloaded";
  OffloadStorage();
  ~OffloadStorage() override;
  std::shared_ptr<Packed> pack(const Tensor& t) override;
  void begin_group(const std::string& name, RegionTrace* trace) override;
  void end_group() override;
  void reset() override;
  // Waits for the copies still in flight and lets their device tensors go
  // (the end of forward: the head and every backward run without them).
  void settle_in_flight();

  struct Group;

 private:
  std::shared_ptr<Group> current_, last_;  // last_: the last group that holds anything
  KeepHooks keep_;  // for anything saved outside a group
  RegionTrace* trace_ = nullptr;
};

}  // namespace remat
