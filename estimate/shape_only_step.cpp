#include "estimate/shape_only_step.hpp"

#include <optional>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "estimate/device_model.hpp"
#include "datasets/batch.hpp"
#include "optim/optimizer.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/params.hpp"

namespace remat {

Batch shape_only_batch(const Sizes& z) { return empty_batch(z.B, z.S); }

namespace {

// The model's state, counted by the tracker as it is made: the weights (made
// by the caller), a gradient buffer per trainable parameter, and the optimizer's state (made
// and dropped again: a step's activations are measured beside weights and
// gradients, as in check).
ShapeOnlyState count_state(ParamStore& params, std::int64_t parameter_bytes, const std::string& optimizer) {
  auto& tracker = MemoryTracker::instance();
  const auto live = [&] { return tracker.stats(MemoryTracker::default_pool()).live; };
  ShapeOnlyState state;
  state.parameter_count = params.count();
  state.parameter_bytes = parameter_bytes;
  const std::int64_t before = live();
  params.zero_grad();
  state.gradient_bytes = live() - before;
  std::vector<Tensor> trainable;
  for (std::size_t i = 0; i < params.tensors().size(); ++i)
    if (params.trainable(i)) trainable.push_back(params.tensors()[i]);
  const std::int64_t at = live();
  OptimizerConfig config;
  config.kind = optimizer;
  const auto made = make_optimizer(config, trainable);
  state.optimizer_bytes = live() - at;
  return state;
}

// What fine-tuning leaves of the weights: the trainable ones' bytes (LoRA's
// adapters), and the largest buffer a quantized weight is dequantized into
// at `precision` (a step's activations hold one at a time).
void count_fine_tuning(const ParamStore& params, Precision precision, ShapeOnlyState& state) {
  const std::size_t compute_size = dtype_size(compute_dtype(precision, DType::f32));
  for (std::size_t i = 0; i < params.names().size(); ++i) {
    if (params.trainable(i)) state.trainable_bytes += std::int64_t(params.tensors()[i].nbytes());
    if (const QuantizedWeight* q = params.quantized(params.names()[i]))
      state.dequantize_bytes = std::max(
          state.dequantize_bytes, std::int64_t(MemoryTracker::counted_bytes(std::uint64_t(q->numel()) * compute_size)));
  }
}

// The device model's costs, once for every planned strategy (none: nothing
// planned), measured on parameters with nothing installed (the profile's
// gradients are whole buffers made before the step, which sharding would
// free mid-backward).
std::optional<SaveProfile> costs_to_plan(const std::vector<std::string>& strategies, const Model& model,
                                         const ParamStore& params, const Batch& batch, ops::AttentionKernel kernel,
                                         const DeviceModel* device, Precision precision) {
  for (const auto& spec : strategies) {
    if (!parse_strategy(spec).planned) continue;
    if (!device)
      throw UserError("strategy '" + spec + "': a budget is planned from costs, and a shape-only run has no kernel "
                      "to time: name a --device to cost it with (docs/estimates.md)");
    DeviceModel priced = *device;
    priced.precision = precision;
    return modelled_costs(model, params, batch, kernel, priced);
  }
  return std::nullopt;
}

// One shape-only step of `options`: its peaks, counts and (with a device)
// modelled seconds. Its offload copies are priced on a copy stream of its
// own (made after the costs: the planner prices offloading on its own), so
// its waits are its alone.
ShapeOnlyStep shape_only_step(const Model& model, ParamStore& params, const Batch& batch, const StepOptions& options,
                              const DeviceModel* device, const std::vector<std::string>& pools) {
  auto& tracker = MemoryTracker::instance();
  std::optional<ModelledCopies> copies;
  if (device) copies.emplace(*device);
  const stats::Work origin = stats::work();
  std::map<std::string, std::int64_t> base;
  for (const auto& pool : pools) base[pool] = tracker.stats(pool).live;
  const StepResult r = run_step(model, params, batch, options);  // (its peaks counted afresh, in its own scope)
  ShapeOnlyStep step{"", r.activation_peak, r.offload_peak, r.flops, r.recompute_flops, r.comm_bytes,
                     r.recompute_comm_bytes, 0, 0, 0, {}, r.dequantize_flops, r.recompute_dequantize_flops};
  if (device) {
    step.modelled_copy_wait_seconds = copies->waited();
    step.modelled_seconds = device->seconds_since(origin) + step.modelled_copy_wait_seconds;
    step.modelled_comm_seconds = device->comm_seconds_since(origin);
  }
  for (const auto& pool : pools) {
    const auto peak = r.pool_peaks.find(pool);
    step.pool_peaks[pool] = (peak == r.pool_peaks.end() ? base[pool] : peak->second) - base[pool];
  }
  return step;
}

}  // namespace

ShapeOnlyRun shape_only_run(const ModelSetup& setup, const std::vector<std::string>& strategies,
                            ops::AttentionKernel kernel, const std::string& optimizer, const DeviceModel* device,
                            Precision precision, const ShapeOnlyExtras& extras) {
  ShapeOnlyScope shape_only;
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  const auto live = [&] { return tracker.stats(pool).live; };

  ShapeOnlyRun run;
  const auto model = models().find(setup.model).make(setup.sizes);
  const Batch batch = shape_only_batch(setup.sizes);
  const std::int64_t before = live(), quantized_before = tracker.stats(kQuantPool).live;
  auto store = std::make_unique<ParamStore>(model->params(), DType::f32);
  if (extras.prepare) extras.prepare(store, *model, batch);
  ParamStore& params = *store;
  run.state = count_state(params, live() - before, optimizer);
  run.state.quantized_bytes = tracker.stats(kQuantPool).live - quantized_before;
  count_fine_tuning(params, precision, run.state);

  // Before anything is installed: as train plans before it shards.
  const std::optional<SaveProfile> costs = costs_to_plan(strategies, *model, params, batch, kernel, device, precision);
  const std::shared_ptr<void> installed = extras.install ? extras.install(params) : nullptr;
  const bool zero_grad = !installed;
  // A warm-up step, as run_check makes: one-time allocations are no strategy's.
  const auto say = [&](const std::string& stage) {
    if (extras.progress) extras.progress(stage);
  };
  say("warm-up step");
  auto full = make_strategy("full");
  const RunSettings settings{1, kernel, precision};
  StepOptions warm = step_options(settings, full.get());
  warm.zero_grad = zero_grad;
  run.state.weight_copy_bytes = run_step(*model, params, batch, warm).weight_copy_bytes;  // full offloads nothing
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    const std::string& spec = strategies[i];
    say("strategy " + spec + " (" + std::to_string(i + 1) + " of " + std::to_string(strategies.size()) + ")");
    auto strategy = make_strategy(spec);
    if (strategy->needs_costs()) {
      if (!costs) throw std::logic_error("shape_only_run: '" + spec + "' needs costs that were not made");
      strategy->plan(*costs);
    }
    StepOptions o = step_options(settings, strategy.get());
    o.zero_grad = zero_grad;
    run.steps.push_back(shape_only_step(*model, params, batch, o, device, extras.pools));
    run.steps.back().strategy = spec;
  }
  return run;
}

}  // namespace remat
