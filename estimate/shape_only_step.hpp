#pragma once
// A training step of any size run shape-only (autodiff/shape_only.hpp): the
// model's own code, the strategy's own decisions, the tracker's own counts,
// no data and no kernel. Its activation peak is the one a measured step of
// the same setup would show, to the byte (tests/test_shape_only.cpp checks it
// on every size that runs here), and its FLOPs are the GEMMs the step would
// run, recomputation included.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "datasets/batch.hpp"
#include "zoo/model.hpp"

namespace remat {

struct ShapeOnlyStep {
  std::string strategy;
  std::int64_t activation_peak = 0;  // device pool: the step's peak minus what was live before it
  std::int64_t offload_peak = 0;     // the offload pool (host)
  double flops = 0, recompute_flops = 0;  // GEMM FLOPs of the step, and of them those recomputing
  double comm_bytes = 0, recompute_comm_bytes = 0;  // sent to the other ranks of a split layer (tensor parallelism)
  double modelled_seconds = 0;            // the device model's price of the step (0: no device given)
  double modelled_comm_seconds = 0;       // of which its collectives
  double modelled_copy_wait_seconds = 0;  // of which waits for offload copies its compute did not hide
  std::map<std::string, std::int64_t> pool_peaks;  // ShapeOnlyExtras::pools: each one's peak minus its live before
  double dequantize_flops = 0, recompute_dequantize_flops = 0;  // quantized weights' dequantizations (QLoRA)
};

// What does not depend on the strategy: the model's state.
struct ShapeOnlyState {
  std::int64_t parameter_count = 0;
  std::int64_t parameter_bytes = 0;  // the weights (fp32 master copy)
  std::int64_t gradient_bytes = 0;   // one gradient buffer per trainable parameter
  std::int64_t optimizer_bytes = 0;  // the optimizer's state (AdamW: m and v)
  std::int64_t weight_copy_bytes = 0;  // the per-step 16-bit copy of the weights (0 at fp32)
  std::int64_t quantized_bytes = 0;    // quantized frozen weights (QLoRA), scales included: their own pool
  std::int64_t trainable_bytes = 0;    // of parameter_bytes, the trainable parameters' (LoRA: the adapters)
  std::int64_t dequantize_bytes = 0;   // the largest buffer a quantized weight is dequantized into (part of activations)
};

struct ShapeOnlyRun {
  ShapeOnlyState state;
  std::vector<ShapeOnlyStep> steps;  // one per strategy, in the order asked
};

struct DeviceModel;

// What a caller adds around the steps: hooks installed on the model's store
// after the state is counted and before the warm-up step (data-parallel
// sharding: train/param_shards.hpp), which then own the gradients (the
// steps do not zero them), and the tracker pools to report a peak of.
struct ShapeOnlyExtras {
  // Applied to the store before its state is counted (fine-tuning: frozen
  // parameters, LoRA adapters, quantized weights), with the model and the
  // shape-only batch; null: the model as it is.
  std::function<void(std::unique_ptr<ParamStore>&, const Model&, const Batch&)> prepare;
  std::function<std::shared_ptr<void>(ParamStore&)> install;  // null: nothing installed
  std::vector<std::string> pools;
  std::function<void(const std::string& stage)> progress;  // told the stage: "warm-up step", "strategy sqrt (3 of 9)"
};

// A batch of B x S token ids with no values (inside a ShapeOnlyScope).
Batch shape_only_batch(const Sizes& sizes);

// Every strategy in `strategies` on one model instance, shape-only. A
// strategy that plans from costs (budget:...) is planned from the device
// model's (with no kernel there is nothing to time), and refused without one.
ShapeOnlyRun shape_only_run(const ModelSetup& setup, const std::vector<std::string>& strategies,
                            ops::AttentionKernel kernel, const std::string& optimizer = "adamw",
                            const DeviceModel* device = nullptr, Precision precision = Precision::fp32,
                            const ShapeOnlyExtras& extras = {});

}  // namespace remat
