#include "harness/estimate_grid.hpp"

#include <algorithm>
#include <optional>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "estimate/device_model.hpp"
#include "estimate/shape_only_step.hpp"
#include "optim/optimizer.hpp"
#include "strategies/registry.hpp"
#include "train/param_shards.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

// What one rank keeps under --shard-params, as training shards: 1/ranks of
// each parameter rounded up to whole chunks of 1024 values, the gradients of
// those that train (frozen ones, as --freeze and --lora leave them, none)
// and the optimizer's state over them, counted by the tracker in a
// shape-only run; for each of `parts` (the parameters each pipeline stage
// reads, by index), or (none given) for all of them, from one sharded store.
// (Plain data parallelism keeps all of them on every rank.)
std::vector<ShapeOnlyState> sharded_states(const EstimateRequest& r, const ModelSetup& setup,
                                           std::vector<std::vector<std::size_t>> parts = {}) {
  ShapeOnlyScope shape_only;
  const auto model = models().find(setup.model).make(setup.sizes);
  auto params = std::make_unique<ParamStore>(model->params(), DType::f32);
  if (r.finetune.applies())
    apply_fine_tuning(params, *model, shape_only_batch(setup.sizes), r.finetune, r.seed, setup);
  const ParamShards shards(*params, Precision::fp32, r.ranks);
  if (parts.empty()) {
    parts.emplace_back(params->names().size());
    for (std::size_t i = 0; i < parts[0].size(); ++i) parts[0][i] = i;
  }
  std::vector<ShapeOnlyState> out;
  for (const std::vector<std::size_t>& part : parts) {
    ShapeOnlyState& s = out.emplace_back();
    std::vector<Tensor> trained;
    for (std::size_t i : part) {
      const Tensor& shard = shards.shards()[i];
      s.parameter_bytes += std::int64_t(shard.nbytes());
      if (!params->trainable(i)) continue;
      trained.push_back(shard);
      if (shard.slot() && shard.slot()->grad) s.gradient_bytes += std::int64_t(shard.slot()->grad->nbytes());
    }
    auto& tracker = MemoryTracker::instance();
    const std::int64_t before = tracker.stats(MemoryTracker::default_pool()).live;
    OptimizerConfig config;
    config.kind = r.optimizer;
    const auto state = make_optimizer(config, trained);
    s.optimizer_bytes = tracker.stats(MemoryTracker::default_pool()).live - before;
  }
  return out;
}

// Refuses sizes whose largest per-step tensors would overflow 64-bit byte
// counts (or come near it): one line, before any tensor is made.
void require_countable(const Sizes& z) {
  const long double tokens = (long double)z.B * z.S;
  const long double widest = std::max<long double>({(long double)z.V, (long double)z.F * std::max(1, z.E),
                                                    (long double)z.D * 4, (long double)z.H * z.S});
  const long double bytes = tokens * widest * 4.0L * (z.L + 2);
  if (bytes > 4e18L)
    throw UserError("sizes B " + std::to_string(z.B) + ", S " + std::to_string(z.S) + ", L " + std::to_string(z.L) +
                    " overflow 64-bit byte counts (about " + fixed(double(bytes / 1e18L), 1) + "e18 bytes a step)");
}

// Under --shard-params the shape-only run shards as training does: what a
// rank gathers whole while a block runs, and the whole gradients awaiting
// their reduce-scatter, are counted by the tracker in pools of their own.
ShapeOnlyExtras sharding_extras(const EstimateRequest& r) {
  ShapeOnlyExtras extras;
  if (!r.shard_params) return extras;
  const int ranks = r.ranks;
  const Precision precision = r.precision;
  extras.install = [ranks, precision](ParamStore& p) {
    return std::shared_ptr<void>(std::make_shared<ParamShards>(p, precision, ranks));
  };
  extras.pools = {ParamShards::kGatheredPool, ParamShards::kReducingPool};
  return extras;
}

std::int64_t pool_peak(const ShapeOnlyStep& step, const char* pool) {
  const auto it = step.pool_peaks.find(pool);
  return it == step.pool_peaks.end() ? std::int64_t(0) : it->second;
}

}  // namespace

std::int64_t EstimatePoint::largest_total() const {
  std::int64_t largest = parameters + quantized + gradients + optimizer + weight_copy;
  for (const auto& row : rows) largest = std::max(largest, row.total);
  return largest;
}

namespace {

// The request's model at S and B, validated with its layout (UserError if
// it cannot be); a preset's S_max moves with S, as everywhere.
ModelSetup grid_point(const EstimateRequest& r, int S, int B) {
  ModelSetup setup = r.base;
  setup.sizes.S = S;
  setup.sizes.B = B;
  if (!r.published || S > setup.sizes.S_max) setup.sizes.S_max = S;
  validate(setup.sizes);
  cp::validate(setup.model, setup.sizes);  // first: tensor parallelism's --sp splits each --cp rank's rows
  tp::validate(setup.model, setup.sizes);
  ep::validate(setup.model, setup.sizes);
  require_countable(setup.sizes);
  return setup;
}

}  // namespace

std::vector<ModelSetup> estimate_points(const EstimateRequest& r) {
  if (r.ranks < 1) throw UserError("--ranks: at least 1");
  if (r.shard_params && r.ranks < 2) throw UserError("--shard-params shards across ranks: give --ranks 2 or more");
  if (r.base.sizes.ep.split() && r.finetune.lora.any()) throw UserError("--ep with --lora: not yet");
  if (r.shard_params && models().find(r.base.model).reversible)
    throw UserError("--shard-params: " + r.base.model + "'s reversible blocks rebuild their inputs in backward, which "
                    "sharded parameters do not support yet");
  const std::vector<int> seqs = r.seqs.empty() ? std::vector<int>{r.base.sizes.S} : r.seqs;
  const std::vector<int> batches = r.batches.empty() ? std::vector<int>{r.base.sizes.B} : r.batches;
  for (int s : seqs)
    if (r.published && s > r.base.sizes.S_max && !r.allow_longer)
      throw UserError("--seq " + std::to_string(s) + ": beyond " + r.base.preset + "'s " +
                      std::to_string(r.base.sizes.S_max) +
                      " positions (S_max); --allow-longer estimates it anyway, as if the model had that many");
  std::vector<ModelSetup> grid;
  for (int b : batches)
    for (int s : seqs) grid.push_back(grid_point(r, s, b));
  const Device& d = r.device;
  for (const auto& spec : r.strategies)
    if (parse_strategy(spec).planned && d.fp32_flops <= 0)
      throw UserError("strategy '" + spec + "': a budget is planned from costs, and a shape-only run has no kernel to "
                      "time: name a --device to cost it with (" + (d.name.empty() ? "none given" : d.name + " has no rates") +
                      "; docs/estimates.md)");
  return grid;
}

EstimatePoint estimate_point(const EstimateRequest& r, const ModelSetup& setup,
                             const std::function<void(const std::string&)>& progress) {
  DeviceModel device_model;
  device_model.device = r.device;
  device_model.precision = r.precision;
  const bool rates = r.device.fp32_flops > 0;
  ShapeOnlyExtras extras = sharding_extras(r);
  extras.progress = progress;
  extras.prepare = fine_tuning_prepare(r.finetune, r.seed, setup);
  const ShapeOnlyRun run = shape_only_run(setup, r.strategies, r.attention, r.optimizer,
                                          rates ? &device_model : nullptr, r.precision, extras);
  // Sharded, a rank keeps its shards (and gathers 16-bit values at 16 bits: no whole 16-bit copy, as the warm-up shows).
  const ShapeOnlyState kept = r.shard_params ? sharded_states(r, setup).front() : run.state;
  EstimatePoint p{setup, run.state.parameter_count, kept.parameter_bytes, kept.gradient_bytes, kept.optimizer_bytes,
                  run.state.weight_copy_bytes, run.state.quantized_bytes, run.state.trainable_bytes,
                  run.state.dequantize_bytes, {}};
  const std::int64_t state = p.parameters + p.quantized + p.gradients + p.optimizer + p.weight_copy;
  for (const auto& step : run.steps) {
    EstimateRow row{step.strategy, step.activation_peak, step.offload_peak,
                    pool_peak(step, ParamShards::kGatheredPool), pool_peak(step, ParamShards::kReducingPool),
                    0, step.flops, step.recompute_flops, step.modelled_seconds, step.comm_bytes,
                    step.recompute_comm_bytes, step.modelled_comm_seconds, 0, step.dequantize_flops,
                    step.recompute_dequantize_flops};
    row.total = state + row.activation + row.gathered + row.reducing;
    row.modelled_copy_wait_seconds = step.modelled_copy_wait_seconds;
    row.headroom = r.device.name.empty() ? 0 : r.device.usable() - row.total;
    row.host_headroom = r.device.host_memory_bytes > 0 ? r.device.host_memory_bytes - row.offload : 0;
    p.rows.push_back(row);
  }
  return p;
}

namespace {

// Whether `strategy` fits at these sizes and ranks, as `estimate --seq S
// --batch B` says; no value where the sizes are not valid for the model's layout.
std::optional<bool> fits_at(const EstimateRequest& r, const std::string& strategy, int S, int B, int ranks) {
  ModelSetup setup;
  try {
    setup = grid_point(r, S, B);
  } catch (const UserError&) {
    return std::nullopt;
  }
  EstimateRequest one = r;
  one.strategies = {strategy};
  one.ranks = ranks;
  if (r.pipe.split()) return stages_fit(r.device, stage_estimates(one, setup).at(0));
  return estimate_point(one, setup).rows.at(0).fits();
}

// For each strategy of `fits` that does not fit (at `setup`): the sizes
// and, sharded, the ranks at which it would, each from a shape-only run.
std::vector<Refit> refits(const EstimateRequest& r, const ModelSetup& setup,
                          const std::vector<std::pair<std::string, bool>>& fits) {
  std::vector<Refit> out;
  const int S = setup.sizes.S, B = setup.sizes.B;
  for (const auto& [strategy, fit] : fits) {
    if (fit) continue;
    Refit f{strategy};
    for (int b = B / 2; b >= 1 && !f.batch; b /= 2)
      if (fits_at(r, strategy, S, b, r.ranks).value_or(false)) f.batch = b;
    for (int step = f.batch / 2; step >= 1; step /= 2)  // then the largest: b fits, 2b does not
      if (fits_at(r, strategy, S, f.batch + step, r.ranks).value_or(false)) f.batch += step;
    for (int s = S / 2; s >= 1 && !f.seq; s /= 2) {
      const std::optional<bool> at = fits_at(r, strategy, s, B, r.ranks);
      if (!at) break;  // shorter ones break the layout too (S no longer divides)
      if (*at) f.seq = s;
    }
    for (int ranks = r.ranks * 2; r.shard_params && ranks <= 65536 && !f.ranks; ranks *= 2)
      if (fits_at(r, strategy, S, B, ranks).value_or(false)) f.ranks = ranks;
    out.push_back(f);
  }
  return out;
}

}  // namespace

std::function<void(std::unique_ptr<ParamStore>&, const Model&, const Batch&)> fine_tuning_prepare(
    const FineTuning& f, std::uint64_t seed, const ModelSetup& setup) {
  if (!f.applies()) return nullptr;
  return [f, seed, setup](std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch) {
    apply_fine_tuning(params, model, batch, f, seed, setup);
  };
}

std::vector<PipelineEstimate> stage_estimates(const EstimateRequest& r, const ModelSetup& setup) {
  DeviceModel device;
  device.device = r.device;
  ShapeOnlyExtras extras = sharding_extras(r);
  extras.prepare = fine_tuning_prepare(r.finetune, r.seed, setup);
  std::vector<PipelineEstimate> stages =
      pipeline_stage_estimates(setup, r.strategies, r.pipe, r.attention, r.precision, r.optimizer, &device, extras);
  if (!r.shard_params) return stages;
  // A stage's state: its reads' shards (gathered 16-bit values: no 16-bit copy kept).
  std::vector<std::vector<std::size_t>> reads;
  for (const PipelineEstimate& per_strategy : stages)
    for (const StageEstimate& e : per_strategy.stages) reads.push_back(e.reads);
  const std::vector<ShapeOnlyState> kept = sharded_states(r, setup, reads);
  std::size_t k = 0;
  for (PipelineEstimate& per_strategy : stages)
    for (StageEstimate& e : per_strategy.stages) {
      e.parameter_bytes = kept[k].parameter_bytes, e.gradient_bytes = kept[k].gradient_bytes;
      e.optimizer_bytes = kept[k++].optimizer_bytes, e.weight_copy_bytes = 0;
    }
  return stages;
}

std::vector<Refit> what_would_fit(const EstimateRequest& r, const EstimatePoint& p) {
  std::vector<std::pair<std::string, bool>> fits;
  for (const EstimateRow& row : p.rows) fits.emplace_back(row.strategy, row.fits());
  return refits(r, p.setup, fits);
}

bool stages_fit(const Device& d, const PipelineEstimate& e) {
  for (const StageEstimate& s : e.stages)
    if (s.total() > d.usable() || (d.host_memory_bytes > 0 && s.offload_peak > d.host_memory_bytes)) return false;
  return true;
}

std::vector<Refit> what_would_fit(const EstimateRequest& r, const ModelSetup& setup,
                                  const std::vector<PipelineEstimate>& stages) {
  std::vector<std::pair<std::string, bool>> fits;
  for (std::size_t k = 0; k < stages.size(); ++k) fits.emplace_back(r.strategies[k], stages_fit(r.device, stages[k]));
  return refits(r, setup, fits);
}

}  // namespace remat
