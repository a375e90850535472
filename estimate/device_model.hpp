#pragma once
// Step time at real size without a probe: a shape-only run (no kernel to
// time) priced by a device model. The GEMM FLOPs it would run over the
// device's peak rate, and the bytes of the tensors it would make over its
// memory bandwidth, each at one efficiency factor per op class (documented in
// docs/estimates.md): the costs a planner needs (SaveProfile), the same
// object a timed probe produces, so `budget:...` plans at any size.
#include <cstdint>
#include <functional>
#include <map>

#include "autodiff/stats.hpp"
#include "autodiff/transfer.hpp"

#include "estimate/devices.hpp"
#include "strategies/profile.hpp"
#include "datasets/batch.hpp"
#include "zoo/model.hpp"
#include "zoo/params.hpp"

namespace remat {

struct DeviceModel {
  Device device;
  // Share of the peak rate a training step's GEMMs reach (large, well-shaped
  // products on tensor cores reach 60-80% of the datasheet's dense rate).
  double gemm_efficiency = 0.7;
  // Share of the memory bandwidth elementwise kernels, norms and softmax
  // reach; each made byte is written once and read about twice.
  double memory_efficiency = 0.8;
  double bytes_touched_per_byte_made = 3;
  // bf16: GEMMs at the device's 16-bit (tensor-core) peak, and the step
  // shape-only at bf16 (its bytes are 16-bit); fp32: at the fp32 peak.
  Precision precision = Precision::fp32;
  // Share of the peer link's bandwidth a collective reaches (tensor
  // parallelism's, between the GPUs of one node).
  double link_efficiency = 0.8;

  // Modelled seconds for the work counted since `origin` (a copy of
  // autodiff/stats.hpp's work() taken then). Priced from the counts'
  // differences, which are exact (whole FLOPs and bytes), so a step's price
  // does not depend on what the process did before it: seconds computed
  // from totals since the process began would carry their rounding. The
  // waits for offload copies are a ModelledCopies' own (waited()).
  double seconds_since(const stats::Work& origin) const;
  // Of those, the communication's: the bytes sent to other ranks over the peer link.
  double comm_seconds_since(const stats::Work& origin) const;
  // Moving one byte to the host offload pool and back.
  double offload_seconds_per_byte() const;
};

// While it lives, a shape-only run's offload copies are priced on this
// thread: each crosses the host link at the device's stated bandwidth, one
// copy at a time on a copy stream of its own (as autodiff/transfer.hpp's),
// beside the compute that runs meanwhile; where the step waits for a copy
// not yet done, the rest of it is a wait the step's clock adds (waited()).
// Its times are modelled seconds since it was made; its waits are its own, so
// one per step prices that step alone, whatever ran before it.
class ModelledCopies final : public transfer::CopyListener {
 public:
  explicit ModelledCopies(const DeviceModel& device);
  ~ModelledCopies() override;
  ModelledCopies(const ModelledCopies&) = delete;
  ModelledCopies& operator=(const ModelledCopies&) = delete;

  void copy_out(const void* group, std::int64_t bytes) override;
  void copy_in(const void* group, std::int64_t bytes) override;
  void wait(const void* group) override;

  // Modelled seconds waited so far for copies the compute did not hide.
  double waited() const { return waited_; }
  // Modelled seconds since it was made, its waits included.
  double now() const { return device_.seconds_since(origin_) + waited_; }

 private:
  double enqueue(std::int64_t bytes);  // when a copy issued now is done

  struct Pending {
    double done = 0;   // modelled time its copy is done
    bool out = false;  // a copy out (not yet waited for)
  };
  const DeviceModel& device_;
  const stats::Work origin_;
  double stream_free_ = 0;  // when the copy stream has done all it was given
  double waited_ = 0;
  std::map<const void*, Pending> pending_;
  transfer::CopyListener* previous_;
};

// UserError for a device without rates (mem:<size>).
void require_rates(const Device& device);

// The planner's costs for `setup` on `device`, from shape-only runs at the
// device model's precision, priced by it.
SaveProfile modelled_costs(const ModelSetup& setup, ops::AttentionKernel kernel, const DeviceModel& device);
// The same on a model, weights and batch made inside a ShapeOnlyScope.
SaveProfile modelled_costs(const Model& model, const ParamStore& params, const Batch& batch,
                           ops::AttentionKernel kernel, const DeviceModel& device);

}  // namespace remat
