#pragma once
// `remat estimate`'s work, below the CLI: a grid of (S, B) points, each a
// shape-only run of every strategy (estimate/shape_only_step.hpp), with what
// a data-parallel rank keeps (sharded under ZeRO-3, as training shards:
// train/param_shards.hpp) and whether it fits a device.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "estimate/devices.hpp"
#include "estimate/pipeline_stages.hpp"
#include "pipeline/schedule.hpp"
#include "finetune/fine_tuning.hpp"
#include "zoo/model.hpp"

namespace remat {

struct EstimateRequest {
  ModelSetup base;                 // the model and its sizes; S and B are the grid's
  bool published = false;          // a published configuration: its S_max holds unless allow_longer
  bool allow_longer = false;
  std::vector<int> seqs, batches;  // the grid (empty: the base's)
  std::vector<std::string> strategies;
  ops::AttentionKernel attention = ops::AttentionKernel::fused;
  Precision precision = Precision::fp32;
  std::string optimizer = "adamw";
  int ranks = 1;
  bool shard_params = false;
  FineTuning finetune;     // frozen parameters, LoRA, quantized weights (QLoRA)
  std::uint64_t seed = 1;  // LoRA's initialisation (shapes only: no value is computed)
  Device device;  // name "": none
  pipeline::PipelineSettings pipe;  // --pp: a row per stage (estimate/pipeline_stages.hpp)
};

// One strategy at one point, per rank.
struct EstimateRow {
  std::string strategy;
  std::int64_t activation = 0, offload = 0;
  std::int64_t gathered = 0, reducing = 0;  // --shard-params: whole parameters gathered, whole gradients reducing
  std::int64_t total = 0;                   // the state + the copy + activation + gathered + reducing
  double flops = 0, recompute_flops = 0, modelled_seconds = 0;
  double comm_bytes = 0, recompute_comm_bytes = 0;  // sent to the other ranks (--tp)
  double modelled_comm_seconds = 0;                 // of modelled_seconds, the collectives' (a device given)
  std::int64_t headroom = 0;  // the device's usable memory less the total (a device given)
  double dequantize_flops = 0, recompute_dequantize_flops = 0;  // quantized weights' dequantizations (QLoRA)
  double modelled_copy_wait_seconds = 0;  // of modelled_seconds, waits for offload copies not hidden
  // The device's host memory less the offload peak (a device with a host memory size given; else 0).
  std::int64_t host_headroom = 0;
  bool fits() const { return headroom >= 0 && host_headroom >= 0; }
};

struct EstimatePoint {
  ModelSetup setup;
  std::int64_t parameter_count = 0;
  std::int64_t parameters = 0, gradients = 0, optimizer = 0, weight_copy = 0;  // per rank
  std::int64_t quantized = 0;  // the quantized frozen weights (QLoRA), scales included
  std::int64_t trainable = 0;  // of `parameters`, the trainable ones' (LoRA: the adapters)
  std::int64_t dequantize = 0;  // of each step's activations, the largest dequantization workspace
  std::vector<EstimateRow> rows;  // a row per strategy, in the order asked
  std::int64_t largest_total() const;
};

// Every point of the grid, validated (UserError on the first bad size,
// sequence past S_max, or planned strategy without a device to cost it):
// nothing runs before all of them are known good.
std::vector<ModelSetup> estimate_points(const EstimateRequest& r);

// One point, shape-only; `progress` is told each stage.
EstimatePoint estimate_point(const EstimateRequest& r, const ModelSetup& setup,
                             const std::function<void(const std::string&)>& progress = nullptr);

// `f` applied to a shape-only run's store (ShapeOnlyExtras::prepare), as a
// command applies it to its weights; null where `f` changes nothing.
std::function<void(std::unique_ptr<ParamStore>&, const Model&, const Batch&)> fine_tuning_prepare(
    const FineTuning& f, std::uint64_t seed, const ModelSetup& setup);

// --pp: each stage's rows per strategy at `setup` (estimate/pipeline_stages.hpp),
// fine-tuning applied as asked and, under --shard-params, each stage's
// parameters sharded over the r.ranks data-parallel replicas of the
// pipeline (ZeRO-3 within each stage): its state its shards' (gathered at
// 16 bits as 16-bit values: no whole 16-bit copy), its gathered and reducing
// peaks measured over its passes.
std::vector<PipelineEstimate> stage_estimates(const EstimateRequest& r, const ModelSetup& setup);

// For a strategy that does not fit the device at a point: the largest
// batch that does (S kept), the longest sequence (S halved until it fits,
// B kept) and, sharded (--shard-params), the fewest ranks (doubled) at
// which it does; 0 where none does (down to B 1, to the shortest valid S,
// up to 65536 ranks). Each from a shape-only run, as exact as the point's.
struct Refit {
  std::string strategy;
  int batch = 0, seq = 0, ranks = 0;
};
std::vector<Refit> what_would_fit(const EstimateRequest& r, const EstimatePoint& p);
// The same under --pp, where a strategy fits when every stage does: the
// largest B per micro-batch, the longest S, the fewest sharded ranks.
std::vector<Refit> what_would_fit(const EstimateRequest& r, const ModelSetup& setup,
                                  const std::vector<PipelineEstimate>& stages);
// Whether every stage fits `d` (and its offload pool the host, where known).
bool stages_fit(const Device& d, const PipelineEstimate& e);

}  // namespace remat
