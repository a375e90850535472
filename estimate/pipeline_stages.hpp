#pragma once
// What each pipeline stage holds (--pp): every rank's passes run shape-only,
// one rank at a time, the tensors its neighbours would send made where it
// would receive them. Each stage's activation peak is the one `remat grads
// --pp` measures on that rank, micro-batches in flight under the schedule
// included; its state is that of the parameters it reads.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "estimate/shape_only_step.hpp"
#include "pipeline/schedule.hpp"
#include "zoo/model.hpp"

namespace remat {

struct DeviceModel;

struct StageEstimate {
  int rank = 0;
  std::string layers;      // "0-3", interleaved "0-1, 4-5"
  int most_in_flight = 0;  // micro-batch chunks forwarded and not yet backwarded at once, by the schedule
  std::int64_t activation_peak = 0, offload_peak = 0;
  std::int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;  // of the parameters it reads
  std::int64_t weight_copy_bytes = 0;  // their 16-bit copies (0 at fp32; none of a quantized weight)
  std::int64_t quantized_bytes = 0;    // the quantized weights it reads (--quantize), scales included
  std::int64_t parameter_count = 0;
  std::vector<std::size_t> reads;      // the parameters it reads, by index in the model's store
  std::map<std::string, std::int64_t> pool_peaks;  // each of ShapeOnlyExtras::pools' peaks over its passes
  double modelled_busy_seconds = 0;  // with a device: its passes' modelled time
  std::int64_t total() const {
    std::int64_t pools = 0;
    for (const auto& [pool, peak] : pool_peaks) pools += peak;
    return parameter_bytes + quantized_bytes + gradient_bytes + optimizer_bytes + weight_copy_bytes + activation_peak +
           pools;
  }
};

// A strategy's stages, and with a device the step as its device model
// prices it: each rank's passes timed by the model's clock, replayed under
// the schedule with each tensor between ranks crossing the peer link.
struct PipelineEstimate {
  std::vector<StageEstimate> stages;
  double modelled_step_seconds = 0;  // 0: no device with rates
  double modelled_bubble = 0;        // the stages' idle share of it
};

// Per strategy (in the order given). `extras` as a whole model's shape-only
// run takes them: fine-tuning applied to the store first, something
// installed on it (sharded parameters), the pools whose peaks each stage
// reports. UserError for a layout the schedule refuses or a model without
// stages.
std::vector<PipelineEstimate> pipeline_stage_estimates(const ModelSetup& setup, const std::vector<std::string>& strategies,
                                                       const pipeline::PipelineSettings& pipe, ops::AttentionKernel kernel,
                                                       Precision precision, const std::string& optimizer,
                                                       const DeviceModel* device = nullptr,
                                                       const ShapeOnlyExtras& extras = {});

}  // namespace remat
