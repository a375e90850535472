#pragma once
// Step time at real size without a probe: a shape-only run (no kernel to
// time) priced by a device model. The GEMM FLOPs it would run over the
// device's peak rate, and the bytes of the tensors it would make over its
// memory bandwidth, each at one efficiency factor per op class (documented in
// docs/estimates.md): the costs a planner needs (SaveProfile), the same
// object a timed probe produces, so `budget:...` plans at any size.
#include <functional>

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

  // Modelled seconds for the work counted since the process started
  // (autodiff/stats.hpp's work()).
  double seconds_now() const;
  // Of those, the communication's: the bytes sent to other ranks over the peer link.
  double comm_seconds_now() const;
  // Moving one byte to the host offload pool and back.
  double offload_seconds_per_byte() const;
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
