#include "estimate/pipeline_stages.hpp"

#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "estimate/device_model.hpp"
#include "estimate/shape_only_step.hpp"
#include "optim/optimizer.hpp"
#include "pipeline/stage_runner.hpp"
#include "strategies/registry.hpp"
#include "zoo/params.hpp"

namespace remat {
namespace {

// The state of the parameters in `read`: weights, gradients, the
// optimizer's state as made for them (counted by the tracker), and their
// 16-bit copies at a 16-bit precision.
void count_stage_state(const ParamStore& params, const std::set<std::size_t>& read, const std::string& optimizer,
                       Precision precision, StageEstimate& e) {
  std::vector<Tensor> trainable;
  const std::size_t copy_size = precision == Precision::fp32 ? 0 : dtype_size(compute_dtype(precision, DType::f32));
  for (std::size_t i : read) {
    const Tensor& t = params.tensors()[i];
    e.reads.push_back(i);
    if (const QuantizedWeight* q = params.quantized(params.names()[i])) {  // its bytes; no 16-bit copy, no gradient
      e.parameter_count += q->numel();
      e.quantized_bytes += std::int64_t(MemoryTracker::counted_bytes(t.nbytes()));
      continue;
    }
    e.parameter_count += t.numel();
    e.parameter_bytes += std::int64_t(MemoryTracker::counted_bytes(t.nbytes()));
    e.weight_copy_bytes += std::int64_t(MemoryTracker::counted_bytes(std::uint64_t(t.numel()) * copy_size));
    if (!params.trainable(i)) continue;
    trainable.push_back(t);
    e.gradient_bytes += std::int64_t(MemoryTracker::counted_bytes(t.nbytes()));
  }
  auto& tracker = MemoryTracker::instance();
  const auto at = tracker.stats(MemoryTracker::default_pool()).live;
  OptimizerConfig config;
  config.kind = optimizer;
  const auto made = make_optimizer(config, trainable);
  e.optimizer_bytes = tracker.stats(MemoryTracker::default_pool()).live - at;
}

// The step under the schedule, each pass at its modelled time, what crosses
// between ranks over the peer link (the largest crossing: one micro-batch's
// tensors at one boundary, one way; they are alike but for the first of
// encdec's decoder stages, whose crossings carry the encoder's output too).
void price_schedule(PipelineEstimate& e, const pipeline::Schedule& schedule, const pipeline::Layout& layout, int M,
                    const std::vector<std::map<std::tuple<int, int, int>, double>>& seconds,
                    const pipeline::EdgeShapes& shapes, const DeviceModel& device) {
  std::map<std::tuple<int, int, bool>, std::int64_t> crossing;  // (boundary, micro-batch, gradient): its tensors' bytes
  for (const auto& [edge, shape] : shapes)
    crossing[{std::get<0>(edge), std::get<1>(edge), std::get<2>(edge)}] +=
        std::int64_t(dtype_size(shape.dtype)) * numel(shape.shape);
  std::int64_t bytes = 0;
  for (const auto& [key, sum] : crossing) bytes = std::max(bytes, sum);
  const double transfer = double(bytes) / (device.device.peer_link * device.link_efficiency);
  const pipeline::Simulation sim = pipeline::simulate(
      schedule, layout.stages, M,
      [&](int r, const pipeline::Pass& p) { return seconds[std::size_t(r)].at({int(p.kind), p.micro_batch, p.chunk}); },
      transfer);
  e.modelled_step_seconds = sim.makespan;
  e.modelled_bubble = sim.bubble;
}

// Each pass's modelled seconds into `out`, by (kind, micro-batch, chunk); returns their sum.
double pass_seconds(const std::vector<pipeline::PassTiming>& passes, std::map<std::tuple<int, int, int>, double>& out) {
  double sum = 0;
  for (const auto& p : passes) {
    out[{int(p.pass.kind), p.pass.micro_batch, p.pass.chunk}] = p.end - p.start;
    sum += p.end - p.start;
  }
  return sum;
}

// Rank r's passes, shape-only, what crosses to it made from `shapes`: its
// activation and offload peaks and each of `pools`' into `e`, the
// parameters it reads into `read` (beside any hook installed on them).
pipeline::RankResult run_stage(ParamStore& params, const pipeline::StageStep& step, const pipeline::Schedule& schedule,
                               const pipeline::Layout& layout, int r, const pipeline::EdgeShapes& shapes,
                               const std::vector<std::string>& pools, std::set<std::size_t>& read, StageEstimate& e) {
  const ReadHookScope reads(params, [&read](std::size_t i) { read.insert(i); });
  const auto link = pipeline::shape_link(shapes);
  auto& tracker = MemoryTracker::instance();
  struct Window {  // the pools' peaks over this rank's passes, closed however it ends
    MemoryTracker& tracker;
    const std::map<std::string, MemoryTracker::PoolStats> outer = tracker.begin_peaks();
    ~Window() { tracker.end_peaks(outer); }
  } window{tracker};
  std::map<std::string, std::int64_t> base;
  for (const std::string& pool : pools) base[pool] = tracker.stats(pool).live;
  pipeline::RankResult measured = pipeline::run_rank(step, schedule, layout, r, *link);
  for (const std::string& pool : pools) e.pool_peaks[pool] = tracker.stats(pool).peak - base[pool];
  e.activation_peak = measured.activation_peak;
  e.offload_peak = measured.offload_peak;
  return measured;
}

// The model's parameters as a command's step finds them: fine-tuned as
// `extras` says, anything it installs installed, and their gradient
// buffers made (sharded: the shards'). What is installed goes first: it
// hooks into the store.
struct PreparedStore {
  std::unique_ptr<ParamStore> store;
  std::shared_ptr<void> installed;
};
PreparedStore prepared_store(const Model& model, const Batch& batch, const ShapeOnlyExtras& extras) {
  PreparedStore p{std::make_unique<ParamStore>(model.params(), DType::f32), nullptr};
  if (extras.prepare) extras.prepare(p.store, model, batch);
  p.installed = extras.install ? extras.install(*p.store) : nullptr;
  if (!p.installed) p.store->zero_grad();
  return p;
}

}  // namespace

std::vector<PipelineEstimate> pipeline_stage_estimates(const ModelSetup& setup, const std::vector<std::string>& strategies,
                                                       const pipeline::PipelineSettings& pipe, ops::AttentionKernel kernel,
                                                       Precision precision, const std::string& optimizer,
                                                       const DeviceModel* device, const ShapeOnlyExtras& extras) {
  const int N = pipe.stages, M = pipe.micro_batches, L = setup.sizes.L;
  const pipeline::Schedule schedule = pipeline::parse_schedule(pipe.schedule);
  pipeline::validate(schedule, L, N, M, pipe.stage_layers);
  const pipeline::Layout layout = pipeline::make_layout(schedule, L, N, pipe.stage_layers);
  const pipeline::Simulation sim = pipeline::simulate(schedule, N, M, 1, 2);
  ShapeOnlyScope shape_only;
  pipeline::require_stages(setup.model, setup.sizes);
  const auto model = models().find(setup.model).make(setup.sizes);
  const std::vector<Batch> batches(std::size_t(M), shape_only_batch(setup.sizes));
  const PreparedStore prepared = prepared_store(*model, batches.front(), extras);
  ParamStore& params = *prepared.store;
  std::vector<PipelineEstimate> out;
  DeviceModel priced;
  const bool rates = device && device->device.fp32_flops > 0;
  if (rates) priced = *device, priced.precision = precision;
  for (const std::string& spec : strategies) {
    auto strategy = make_strategy(spec);
    if (strategy->needs_costs()) throw UserError("--pp with a budget ('" + spec + "'): not yet");
    pipeline::StageStep step;
    step.model = model.get();
    step.params = &params;
    step.micro_batches = &batches;
    step.options.strategy = strategy.get();
    step.options.attention = kernel;
    step.options.precision = precision;
    // Each rank's offload copies priced beside its passes, as in a whole
    // step; a pass's seconds include the waits for them.
    std::optional<ModelledCopies> copies;
    const stats::Work origin = stats::work();
    if (rates)
      step.clock = [&priced, &copies, origin] {
        return priced.seconds_since(origin) + (copies ? copies->waited() : 0.0);
      };
    // Every rank in this process first: the edges' shapes, and what a step
    // makes once (as the command's warm-up would).
    pipeline::EdgeShapes shapes;
    pipeline::run_in_process(step, schedule, layout, &shapes);
    PipelineEstimate estimate;
    std::vector<StageEstimate>& rows = estimate.stages;
    std::vector<std::map<std::tuple<int, int, int>, double>> seconds(static_cast<std::size_t>(N));  // per rank, per pass
    for (int r = 0; r < N; ++r) {
      if (rates) copies.emplace(priced);
      std::set<std::size_t> read;
      StageEstimate e;
      e.rank = r;
      e.layers = layout.layers_of(r);
      e.most_in_flight = sim.most_in_flight[std::size_t(r)];
      const pipeline::RankResult measured = run_stage(params, step, schedule, layout, r, shapes, extras.pools, read, e);
      copies.reset();
      count_stage_state(params, read, optimizer, precision, e);
      e.modelled_busy_seconds = pass_seconds(measured.passes, seconds[std::size_t(r)]);
      rows.push_back(e);
    }
    if (rates) price_schedule(estimate, schedule, layout, M, seconds, shapes, priced);
    out.push_back(estimate);
  }
  return out;
}

}  // namespace remat
