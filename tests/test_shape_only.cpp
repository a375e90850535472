// A shape-only step (autodiff/shape_only.hpp) holds what a measured step
// holds, to the byte, and counts the FLOPs it runs: every model, every
// fixed strategy, every precision, on tiny, small, deep at several depths
// and long at several lengths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <random>

#include "autodiff/backend.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "datasets/batch.hpp"
#include "estimate/device_model.hpp"
#include "estimate/pipeline_stages.hpp"
#include "estimate/shape_only_step.hpp"
#include "harness/estimate_grid.hpp"
#include "helpers.hpp"
#include "optim/optimizer.hpp"
#include "step/probe.hpp"
#include "step/step.hpp"
#include "strategies/planner/plan.hpp"
#include "strategies/planner/solver.hpp"
#include "strategies/registry.hpp"
#include "strategies/storage.hpp"
#include "zoo/params.hpp"

using namespace remat;

namespace {

// The measured side, as `remat check` measures: a warm-up step, then a step
// per strategy on initialised weights and a random batch.
std::vector<StepResult> measured(const ModelSetup& setup, const std::vector<std::string>& specs,
                                 ops::AttentionKernel kernel, Precision precision) {
  const auto model = models().find(setup.model).make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, setup.sizes.L);
  const Batch batch = random_batch(setup.sizes.B, setup.sizes.S, setup.sizes.V, 1);
  auto full = make_strategy("full");
  StepOptions warm{full.get(), 1, 0, false, kernel};
  warm.precision = precision;
  forward_backward(*model, params, batch, warm);
  std::vector<StepResult> out;
  for (const auto& spec : specs) {
    auto strategy = make_strategy(spec);
    StepOptions o{strategy.get(), 1, 0, false, kernel};
    o.precision = precision;
    out.push_back(run_step(*model, params, batch, o));
  }
  return out;
}

void require_same(const ModelSetup& setup, ops::AttentionKernel kernel = ops::AttentionKernel::fused,
                  const std::string& strategies = "all", Precision precision = Precision::fp32) {
  const auto specs = strategies_for(setup.model, strategies, kernel);
  const auto real = measured(setup, specs, kernel, precision);
  const ShapeOnlyRun shape = shape_only_run(setup, specs, kernel, "adamw", nullptr, precision);
  REQUIRE(shape.steps.size() == specs.size());
  CHECK(shape.state.weight_copy_bytes == real.front().weight_copy_bytes);
  CHECK((shape.state.weight_copy_bytes > 0) == (precision != Precision::fp32));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(setup.model << " L" << setup.sizes.L << " S" << setup.sizes.S << " B" << setup.sizes.B << " "
                     << specs[i] << " " << ops::attention_kernel_name(kernel) << " " << precision_name(precision));
    CHECK(shape.steps[i].activation_peak == real[i].activation_peak);
    CHECK(shape.steps[i].offload_peak == real[i].offload_peak);
    CHECK(shape.steps[i].flops == real[i].flops);
    CHECK(shape.steps[i].recompute_flops == real[i].recompute_flops);
  }
}

ModelSetup sized(const std::string& model, const std::string& preset, int L = 0, int S = 0, int B = 0) {
  ModelSetup s{model, preset, preset_sizes(preset)};
  if (L) s.sizes.L = L;
  if (S) s.sizes.S = s.sizes.S_max = S;
  if (B) s.sizes.B = B;
  return s;
}

}  // namespace

namespace {

const Precision kPrecisions[] = {Precision::fp32, Precision::bf16, Precision::fp16};

// Every model at one precision per run, drawn by the run's sample seed (the
// failure prints it; REMAT_SAMPLE_SEED=N repeats it): a precision changes
// the dtypes, not the code path, and tiny and the sweep above hold all three
// on every run.
Precision sampled_precision(const std::string& model) {
  const auto& names = models().names();
  const auto index = std::size_t(std::find(names.begin(), names.end(), model) - names.begin());
  return kPrecisions[(test::sample_seed() + index) % std::size(kPrecisions)];
}

}  // namespace

TEST_CASE("shape-only: every model and strategy holds the measured bytes on tiny", "[shape_only]") {
  for (const auto precision : kPrecisions)
    for (const auto& model : models().names()) {
      require_same(sized(model, "tiny"), ops::AttentionKernel::fused, "all", precision);
      require_same(sized(model, "tiny"), ops::AttentionKernel::plain, "all", precision);
    }
}

TEST_CASE("shape-only: the same at several depths and lengths", "[shape_only][slow]") {
  for (const auto& model : models().names())
    for (int L : {4, 6})
      for (int S : {8, 24})
        for (const auto precision : kPrecisions)
          require_same(sized(model, "tiny", L, S, 3), ops::AttentionKernel::fused, "all", precision);
}

// At the presets' own widths: every model x every strategy, each a real
// step, at the model's sampled precision.
TEST_CASE("shape-only: the same on deep at several depths and long at several lengths", "[shape_only][small][slow]") {
  const std::string model = GENERATE(from_range(models().names()));
  const Precision precision = sampled_precision(model);
  INFO("sample seed " << test::sample_seed() << ": " << precision_name(precision));
  for (int L : {2, 6}) require_same(sized(model, "deep", L), ops::AttentionKernel::fused, "all", precision);
  for (int S : {128, 384}) require_same(sized(model, "long", 2, S), ops::AttentionKernel::fused, "all", precision);
}

TEST_CASE("shape-only: the same on small", "[shape_only][small][slow]") {
  const std::string model = GENERATE(from_range(models().names()));
  const Precision precision = sampled_precision(model);
  INFO("sample seed " << test::sample_seed() << ": " << precision_name(precision));
  require_same(sized(model, "small", 4, 64, 2), ops::AttentionKernel::fused, "all", precision);
}

TEST_CASE("shape-only: parameters, gradients and optimizer state as allocated for real", "[shape_only]") {
  for (const auto& model : models().names()) {
    const ModelSetup setup = sized(model, "tiny");
    const ShapeOnlyRun shape = shape_only_run(setup, {"full"}, ops::AttentionKernel::fused);
    auto& tracker = MemoryTracker::instance();
    const std::string pool = MemoryTracker::default_pool();
    const auto before = tracker.stats(pool).live;
    ParamStore params(models().find(model).make(setup.sizes)->params(), DType::f32);
    CHECK(shape.state.parameter_count == params.count());
    CHECK(shape.state.parameter_bytes == tracker.stats(pool).live - before);
    CHECK(shape.state.parameter_bytes == params.bytes());
    params.zero_grad();
    CHECK(shape.state.gradient_bytes == tracker.stats(pool).live - before - shape.state.parameter_bytes);
    const auto at = tracker.stats(pool).live;
    const auto optimizer = make_optimizer(OptimizerConfig{}, params.tensors());
    CHECK(shape.state.optimizer_bytes == tracker.stats(pool).live - at);
  }
}

TEST_CASE("shape-only: offloading with copies (a GPU build's path) holds the measured bytes, and no host memory",
          "[shape_only][offload]") {
  backend::OffloadCopiesScope copies(true);
  for (const std::string model : {"gpt2", "llama", "encdec"})
    for (const auto precision : kPrecisions)
      require_same(sized(model, "tiny", 4), ops::AttentionKernel::fused,
                   "offload,offload-checkpoint,sqrt+offload,selective+offload", precision);
  auto& tracker = MemoryTracker::instance();
  MemoryTracker::instance().pool_for_label(OffloadStorage::kLabel, OffloadStorage::kPool);
  const auto before = tracker.stats(OffloadStorage::kPool).live;
  {
    ShapeOnlyScope scope;
    const backend::HostBuffer huge(std::size_t(1) << 42, OffloadStorage::kLabel);  // 4 TiB, never allocated
    CHECK(huge.view().data() == nullptr);
    CHECK(huge.bytes() == (std::size_t(1) << 42));
    CHECK(tracker.stats(OffloadStorage::kPool).live - before == (std::int64_t(1) << 42));
  }
  CHECK(tracker.stats(OffloadStorage::kPool).live == before);
}

TEST_CASE("shape-only: no storage, and the scope ends", "[shape_only]") {
  {
    ShapeOnlyScope scope;
    const Tensor t = Tensor::empty({1 << 20, 1 << 20}, DType::f32, "huge");  // 4 TiB, never allocated
    CHECK(t.raw() == nullptr);
    CHECK(t.nbytes() == (std::size_t(1) << 42));
    CHECK(t.label() == "huge");
  }
  CHECK_FALSE(shape_only());
  const Tensor t = Tensor::empty({4}, DType::f32);
  CHECK(t.raw() != nullptr);
}

TEST_CASE("shape-only: a plan costed by a device model keeps its budget, measured, and is bitwise full",
          "[shape_only]") {
  DeviceModel device;
  device.device = find_device("a100-40gb");
  for (const std::string name : {"gpt2", "llama"}) {
    const ModelSetup setup = sized(name, "tiny", 6);
    const SaveProfile costs = modelled_costs(setup, ops::AttentionKernel::fused, device);
    CHECK(costs.timed);
    CHECK(costs.step_seconds > 0);
    const auto model = models().find(name).make(setup.sizes);
    ParamStore params(model->params(), DType::f32);
    initialize(params, 1, setup.sizes.L);
    const Batch batch = random_batch(setup.sizes.B, setup.sizes.S, setup.sizes.V, 1);
    auto full = make_strategy("full");
    forward_backward(*model, params, batch, {full.get(), 1, 0});
    const StepResult reference = run_step(*model, params, batch, {full.get(), 1, 0});
    std::vector<std::vector<double>> want;
    for (const auto& t : params.tensors()) want.push_back(t.grad().to_host_f64());
    for (const std::string spec : {"budget:min", "budget:range:50%"}) {
      INFO(name << " " << spec);
      auto planned = make_strategy(spec);
      planned->plan(costs);
      const StepResult r = run_step(*model, params, batch, {planned.get(), 1, 0});  // throws over the budget
      CHECK(r.activation_peak <= planned->activation_budget());
      CHECK(r.activation_peak < reference.activation_peak);
      CHECK(r.loss == reference.loss);
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(params.tensors()[i].grad().to_host_f64() == want[i]);
      const ShapeOnlyRun shape = shape_only_run(setup, {spec}, ops::AttentionKernel::fused, "adamw", &device);
      CHECK(shape.steps[0].activation_peak == r.activation_peak);
      CHECK(shape.steps[0].modelled_seconds > 0);
    }
  }
}

// Offloaded bytes cross the host link twice; the step waits where the
// compute beside a copy did not hide it. With a link too fast to matter the
// step costs what full's does; with one far too slow it costs at least the
// link's busy time (every byte out and back, one copy at a time) and at most
// that and the compute; and a host memory smaller than the offload pool
// does not fit. Both offload paths (a GPU build's copies, the host's moves)
// are priced alike.
TEST_CASE("the device model prices offload copies on the host link, and checks the host memory",
          "[shape_only][estimate]") {
  const bool copies = GENERATE(false, true);
  INFO("copies " << copies);
  backend::OffloadCopiesScope path(copies);
  const ModelSetup setup = sized("gpt2", "tiny", 4);
  const auto priced = [&](double host_link) {
    DeviceModel device;
    device.device = find_device("a100-40gb");
    device.device.host_link = host_link;
    return shape_only_run(setup, {"full", "offload"}, ops::AttentionKernel::fused, "adamw", &device);
  };
  const ShapeOnlyRun fast = priced(1e30);
  const ShapeOnlyStep &full = fast.steps[0], &hidden = fast.steps[1];
  REQUIRE(hidden.offload_peak > 0);
  CHECK(full.modelled_copy_wait_seconds == 0);
  CHECK(hidden.modelled_copy_wait_seconds == Approx(0).margin(1e-15));
  CHECK(hidden.modelled_seconds == Approx(full.modelled_seconds).epsilon(1e-9));

  // Copies ten times the compute.
  const double slow_link = 2.0 * double(hidden.offload_peak) / (10 * full.modelled_seconds);
  const ShapeOnlyRun slow = priced(slow_link);
  const ShapeOnlyStep& waited = slow.steps[1];
  // A step's waits are its own: the same step alone in a run, or after
  // another that waited, and after the runs above, costs the same to the bit.
  {
    DeviceModel device;
    device.device = find_device("a100-40gb");
    device.device.host_link = slow_link;
    const auto run = [&](std::vector<std::string> strategies) {
      return shape_only_run(setup, strategies, ops::AttentionKernel::fused, "adamw", &device).steps.back();
    };
    for (const ShapeOnlyStep& again : {run({"offload"}), run({"offload", "full", "offload"})}) {
      CHECK(again.modelled_seconds == waited.modelled_seconds);
      CHECK(again.modelled_copy_wait_seconds == waited.modelled_copy_wait_seconds);
    }
  }
  const double link_busy = 2.0 * double(waited.offload_peak) / slow_link;
  CHECK(waited.modelled_seconds >= link_busy * (1 - 1e-12));
  CHECK(waited.modelled_seconds <= link_busy + full.modelled_seconds);
  CHECK(waited.modelled_copy_wait_seconds == Approx(waited.modelled_seconds - full.modelled_seconds).epsilon(1e-9));

  EstimateRequest r;
  r.base = setup;
  r.strategies = {"full", "offload"};
  r.device = find_device("a100-40gb");
  const EstimatePoint roomy = estimate_point(r, setup);
  CHECK(roomy.rows[1].host_headroom == r.device.host_memory_bytes - roomy.rows[1].offload);
  CHECK(roomy.rows[1].fits());
  r.device.host_memory_bytes = roomy.rows[1].offload - 1;
  const EstimatePoint cramped = estimate_point(r, setup);
  CHECK(cramped.rows[0].fits());  // full offloads nothing
  CHECK(cramped.rows[1].host_headroom == -1);
  CHECK_FALSE(cramped.rows[1].fits());
}

// Sharded (ZeRO-3), each gather of a parameter and each reduce-scatter of
// its gradient crosses the peer link: a recomputing strategy gathers again.
TEST_CASE("the device model prices sharded gathers and reduce-scatters on the peer link", "[shape_only][estimate]") {
  EstimateRequest r;
  r.base = sized("gpt2", "tiny", 4);
  r.strategies = {"full", "per-layer"};
  r.device = find_device("a100-40gb");
  r.ranks = 4;
  r.shard_params = true;
  const EstimatePoint p = estimate_point(r, r.base);
  const EstimateRow &full = p.rows[0], &per_layer = p.rows[1];
  // At least every parameter gathered and every gradient reduced: 3/4 of the model each way.
  CHECK(full.comm_bytes >= 2 * 0.75 * double(p.parameters) * 4);
  CHECK(full.recompute_comm_bytes == 0);
  CHECK(per_layer.recompute_comm_bytes > 0);
  CHECK(per_layer.comm_bytes == full.comm_bytes + per_layer.recompute_comm_bytes);
  const DeviceModel model{};
  CHECK(full.modelled_comm_seconds ==
        Approx(full.comm_bytes / (r.device.peer_link * model.link_efficiency)).epsilon(1e-9));
}

// Under --pp a device prices each stage's passes and replays the schedule:
// the step is at least the busiest stage's passes and the bubble a share.
TEST_CASE("the device model prices a pipeline's step and its bubble", "[shape_only][estimate][pipeline]") {
  ModelSetup setup = sized("llama", "tiny", 4);
  pipeline::PipelineSettings pipe;
  pipe.stages = 2;
  pipe.micro_batches = 4;
  DeviceModel device;
  device.device = find_device("a100-40gb");
  const auto priced = pipeline_stage_estimates(setup, {"full", "per-layer"}, pipe, ops::AttentionKernel::fused,
                                               Precision::fp32, "adamw", &device);
  const auto unpriced = pipeline_stage_estimates(setup, {"full", "per-layer"}, pipe, ops::AttentionKernel::fused,
                                                 Precision::fp32, "adamw");
  for (std::size_t k = 0; k < priced.size(); ++k) {
    double busiest = 0, all = 0;
    for (std::size_t s = 0; s < priced[k].stages.size(); ++s) {
      const StageEstimate &e = priced[k].stages[s], &plain = unpriced[k].stages[s];
      CHECK(e.activation_peak == plain.activation_peak);  // a clock changes no byte
      CHECK(e.modelled_busy_seconds > 0);
      busiest = std::max(busiest, e.modelled_busy_seconds);
      all += e.modelled_busy_seconds;
    }
    CHECK(priced[k].modelled_step_seconds >= busiest);
    CHECK(priced[k].modelled_bubble > 0);
    CHECK(priced[k].modelled_bubble < 1);
    CHECK(priced[k].modelled_bubble == Approx(1 - all / (2 * priced[k].modelled_step_seconds)).epsilon(1e-9));
    CHECK(unpriced[k].modelled_step_seconds == 0);
  }
  // Recomputing costs time.
  CHECK(priced[1].modelled_step_seconds > priced[0].modelled_step_seconds);
}

// The planner's costs under a busy neighbour: a clock (a device model's, so
// that every pass costs the same) that another process robs of time at
// random moments. Block and recipe costs are the fastest of the timed
// passes, so the costs and the plans are those of a quiet machine; one pass
// alone is swayed (the neighbour is felt).
TEST_CASE("a busy neighbour does not change a plan: each cost is the fastest of the timed passes",
          "[shape_only][planner]") {
  DeviceModel device;
  device.device = find_device("a100-40gb");
  const ModelSetup setup = sized("gpt2", "tiny", 6);
  ShapeOnlyScope shape_only;
  const auto model = models().find("gpt2").make(setup.sizes);
  const ParamStore params(model->params(), DType::f32);
  const Batch batch = shape_only_batch(setup.sizes);
  const stats::Work origin = stats::work();
  const CostClock quiet{[&] { return device.seconds_since(origin); }, device.offload_seconds_per_byte()};
  const SaveProfile calm = measure_costs(*model, params, batch, ops::AttentionKernel::fused, 1, 5, &quiet);
  std::mt19937_64 rng(7);
  double stolen = 0;  // the neighbour's share so far: a third of the readings come after a burst of it
  const double burst = 10 * calm.blocks[0].forward_seconds;
  const CostClock busy{[&] {
                         if (rng() % 3 == 0) stolen += burst;
                         return device.seconds_since(origin) + stolen;
                       },
                       device.offload_seconds_per_byte()};
  const SaveProfile loaded = measure_costs(*model, params, batch, ops::AttentionKernel::fused, 1, 5, &busy);
  REQUIRE(loaded.blocks.size() == calm.blocks.size());
  // (Equal to rounding: the busy clock's readings carry the stolen time.)
  for (std::size_t b = 0; b < calm.blocks.size(); ++b) {
    INFO("block " << b);
    CHECK(loaded.blocks[b].forward_seconds == Approx(calm.blocks[b].forward_seconds).epsilon(1e-6));
    for (std::size_t k = 0; k < calm.blocks[b].tensors.size(); ++k)
      CHECK(loaded.blocks[b].tensors[k].recompute_seconds ==
            Approx(calm.blocks[b].tensors[k].recompute_seconds).epsilon(1e-6).margin(1e-15));
  }
  // The plan made under load is as fast as the quiet machine's best, by the
  // quiet machine's costs (the blocks are alike: ties may break either way).
  const planner::ChainCosts quiet_costs = planner::chain_costs(calm), loaded_costs = planner::chain_costs(loaded);
  const std::int64_t low = planner::smallest_budget(quiet_costs, calm), high = calm.measured_peak;
  for (const double share : {0.0, 0.25, 0.5}) {
    INFO("budget " << share << " of the way from the smallest to full's");
    const std::int64_t budget = low + std::int64_t(share * double(high - low));
    const auto best = planner::solve(quiet_costs, calm, budget), chosen = planner::solve(loaded_costs, loaded, budget);
    REQUIRE(best);
    REQUIRE(chosen);
    CHECK(planner::recompute_seconds(quiet_costs, calm, chosen->parts) ==
          Approx(best->recompute_seconds).epsilon(1e-6));
  }
  // One pass alone: the neighbour shows in the costs.
  const SaveProfile once = measure_costs(*model, params, batch, ops::AttentionKernel::fused, 1, 1, &busy);
  bool swayed = false;
  for (std::size_t b = 0; b < calm.blocks.size(); ++b)
    swayed = swayed || once.blocks[b].forward_seconds > 1.5 * calm.blocks[b].forward_seconds;
  CHECK(swayed);
}
