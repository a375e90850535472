#include "harness/check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "autodiff/error.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/random.hpp"
#include "autodiff/tape.hpp"
#include "strategies/registry.hpp"
#include "strategies/storage.hpp"

namespace remat {

std::vector<std::vector<float>> gradients(const ParamStore& params) {
  std::vector<std::vector<float>> out;
  for (const auto& t : params.tensors()) {
    if (!t.requires_grad()) {  // frozen: no gradient
      out.emplace_back();
      continue;
    }
    const auto g = t.grad().to_host_f64();
    out.emplace_back(g.begin(), g.end());
  }
  return out;
}

GradientComparison compare_gradients(const ParamStore& params, const std::vector<std::vector<float>>& got,
                                     const std::vector<std::vector<float>>& reference, double loss,
                                     double reference_loss, double floor) {
  GradientComparison c;
  double largest = 0;
  for (const auto& r : reference)
    for (float v : r) largest = std::max(largest, double(std::abs(v)));
  // A NaN anywhere is a mismatch, never a zero error (NaN compares false).
  const double inf = std::numeric_limits<double>::infinity();
  auto gap = [inf](double a, double b) { return std::isfinite(a) && std::isfinite(b) ? std::abs(a - b) : inf; };
  c.loss_diff = gap(loss, reference_loss);
  c.bitwise = std::memcmp(&loss, &reference_loss, sizeof loss) == 0 && std::isfinite(loss);
  for (std::size_t i = 0; i < got.size(); ++i) {
    double diff = 0, scale = 0;
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      diff = std::max(diff, gap(got[i][j], reference[i][j]));
      scale = std::max(scale, double(std::abs(reference[i][j])));
    }
    c.bitwise = c.bitwise && diff == 0 && got[i].size() == reference[i].size() &&
                (got[i].empty() ||  // a frozen parameter: no gradient on either side
                 std::memcmp(got[i].data(), reference[i].data(), got[i].size() * sizeof(float)) == 0);
    c.max_abs = std::max(c.max_abs, diff);
    scale = std::max(scale, floor * largest);
    const double rel = diff == inf ? inf : scale > 0 ? diff / scale : diff;
    c.abs_by_param.push_back(diff);
    c.rel_by_param.push_back(rel);
    if (rel > c.max_rel || c.worst.empty()) {
      c.max_rel = std::max(c.max_rel, rel);
      c.worst = params.names()[i];
    }
  }
  return c;
}

SaveProfile profile_saves(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention) {
  ops::AttentionKernelScope kernel(attention);
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  params.zero_grad();
  ExecSpace().fence();
  const std::int64_t base = tracker.stats(pool).live;
  SaveProfiler profiler;
  random_ops::begin_step(0, 0);
  tracker.start_timeline();
  {
    Tensor loss;
    {
      BlockRunnerScope runner(profiler);
      SavedTensorHooksScope hooks(profiler);
      loss = model.loss(params, batch);
    }
    backward(loss);
  }
  tracker.stop_timeline();
  return profiler.finish(tracker.timeline(), tracker.phases(), pool, base);
}

SaveProfile measure_costs(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed, int repeats) {
  SaveProfile p = profile_saves(model, params, batch, attention);
  auto full = make_strategy("full");
  StepOptions step{full.get(), seed, 0};
  step.attention = attention;
  std::vector<double> steps;
  for (int i = 0; i < repeats; ++i) {
    const StepResult r = run_step(model, params, batch, step);
    steps.push_back(r.seconds);
    p.measured_peak = std::max(p.measured_peak, r.activation_peak);
  }
  p.step_seconds = median(steps);
  std::vector<std::vector<double>> forward(p.blocks.size());
  std::vector<std::vector<std::vector<double>>> recipes(p.blocks.size());
  for (int i = 0; i < repeats; ++i) {
    CostTimer timer;
    {
      ops::AttentionKernelScope kernel(attention);
      random_ops::begin_step(seed, 0);
      BlockRunnerScope runner(timer);
      model.loss(params, batch);
    }
    current_tape().clear();
    if (timer.times().size() != p.blocks.size())
      throw std::logic_error("measure_costs: the timed pass ran " + std::to_string(timer.times().size()) +
                             " blocks, the probe " + std::to_string(p.blocks.size()));
    for (std::size_t b = 0; b < p.blocks.size(); ++b) {
      forward[b].push_back(timer.times()[b].forward);
      recipes[b].resize(timer.times()[b].recipes.size());
      for (std::size_t k = 0; k < recipes[b].size(); ++k) recipes[b][k].push_back(timer.times()[b].recipes[k]);
    }
  }
  for (std::size_t b = 0; b < p.blocks.size(); ++b) {
    p.blocks[b].forward_seconds = median(forward[b]);
    for (std::size_t k = 0; k < p.blocks[b].tensors.size() && k < recipes[b].size(); ++k)
      p.blocks[b].tensors[k].recompute_seconds = median(recipes[b][k]);
  }
  if (OffloadStorage::copies()) {  // the offload pool's copies: out and back, 16 MB, median of `repeats`
    const std::size_t n = std::size_t(16) << 20;
    Kokkos::View<unsigned char*, MemSpace> device("offload probe", n);
    Kokkos::View<unsigned char*, Kokkos::HostSpace> host("offload probe host", n);
    std::vector<double> seconds;
    for (int i = 0; i < std::max(1, repeats); ++i) {
      ExecSpace().fence();
      const auto t0 = std::chrono::steady_clock::now();
      Kokkos::deep_copy(host, device);
      Kokkos::deep_copy(device, host);
      ExecSpace().fence();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    p.offload_seconds_per_byte = median(seconds) / double(n);
  }
  p.timed = true;
  return p;
}

void prepare_strategy(Strategy& strategy, const Model& model, const ParamStore& params, const Batch& batch,
                      ops::AttentionKernel attention, std::uint64_t seed, const SaveProfile* costs) {
  if (!strategy.needs_costs()) return;
  if (costs) return strategy.plan(*costs);
  strategy.plan(measure_costs(model, params, batch, attention, seed));
}

std::vector<std::string> tags_produced(const std::string& model, ops::AttentionKernel kernel) {
  static std::map<std::pair<std::string, ops::AttentionKernel>, std::vector<std::string>> cache;
  auto& tags = cache[{model, kernel}];
  if (!tags.empty()) return tags;
  struct Collect final : SavedTensorHooks {
    std::set<std::string> tags;
    std::shared_ptr<Packed> pack(const Tensor& t) override {
      tags.insert(t.tag());
      return keep.pack(t);
    }
    KeepHooks keep;
  } collect;
  Sizes z = preset_sizes("tiny");
  z.dropout = 0.1;
  const auto m = models().find(model).make(z);
  ParamStore params(m->params(), DType::f32);
  initialize(params, 1, z.L);
  {
    ops::AttentionKernelScope scope(kernel);
    random_ops::begin_step(1, 0);
    SavedTensorHooksScope hooks(collect);
    m->loss(params, random_batch(z.B, z.S, z.V, 1));
  }
  current_tape().clear();
  tags.assign(collect.tags.begin(), collect.tags.end());
  return tags;
}

std::vector<std::string> strategies_for(const std::string& model, const std::string& list, ops::AttentionKernel kernel) {
  const ModelInfo& info = models().find(model);
  const ModelTraits traits{info.reversible};
  auto specs = parse_strategy_list(list, traits);
  for (const auto& s : specs) {
    std::string why;
    if (!strategy_applies(s, traits, &why)) {
      std::string reversible;
      for (const auto& m : models().all())
        if (m.reversible) reversible += (reversible.empty() ? "" : ", ") + m.name;
      throw UserError(why + " (" + reversible + "), not " + model);
    }
    const auto produced = tags_produced(model, kernel);
    for (const auto& name : tags_named_by(s)) {
      const auto expanded = expand_tag(name);
      if (std::any_of(expanded.begin(), expanded.end(),
                      [&](const std::string& t) { return std::count(produced.begin(), produced.end(), t) > 0; }))
        continue;
      std::string list_of;
      for (const auto& t : produced) list_of += (list_of.empty() ? "" : ", ") + t;
      throw UserError("strategy '" + s + "': " + model + " (" + ops::attention_kernel_name(kernel) +
                      " attention) produces no tag '" + name + "'; its tags: " + list_of +
                      "; groups: attn-core, mlp-act, norm, matmul, gelu (see `remat strategies`)");
    }
  }
  return specs;
}

bool within_limit(std::int64_t limit, const std::function<void()>& fn) {
  auto& tracker = MemoryTracker::instance();
  tracker.set_limit(limit);
  try {
    fn();
  } catch (const OutOfMemory&) {  // over --mem-limit
    tracker.set_limit(0);
    current_tape().clear();
    return false;
  } catch (const std::bad_alloc&) {  // the device (or the host) itself is full: the same for the report
    tracker.set_limit(0);
    current_tape().clear();
    return false;
  } catch (...) {
    tracker.set_limit(0);
    throw;
  }
  tracker.set_limit(0);
  return true;
}

CheckReport run_check(const Model& model, const ParamStore& params, const Batch& batch,
                                const std::vector<std::string>& strategies, const CheckOptions& options) {
  // A warm-up step: one-time allocations (gradients, runtime scratch) must
  // not be counted against the first strategy measured.
  auto full = make_strategy("full");
  StepOptions step{full.get(), options.seed, 0};
  step.attention = options.attention;
  forward_backward(model, params, batch, step);
  const SaveProfile profile = profile_saves(model, params, batch, options.attention);

  CheckReport report;
  report.full = run_step(model, params, batch, step);
  require_finite_result(report.full.loss, params);
  const auto ref_grads = gradients(params);

  std::optional<SaveProfile> costs;  // measured once, for the first planned strategy
  if (options.costs) costs = *options.costs;
  for (const auto& spec : strategies) {
    if (options.progress) options.progress(report.rows.size(), strategies.size(), spec);
    auto strategy = make_strategy(spec);
    if (strategy->needs_costs()) {
      if (!costs) costs = measure_costs(model, params, batch, options.attention, options.seed);
      strategy->plan(*costs);
    }
    strategy->trace().enabled = options.trace;
    CheckRow row;
    row.strategy = spec;
    row.exact = strategy->exact();
    if (!within_limit(options.mem_limit, [&] {
          row.step = run_step(model, params, batch,
                              {strategy.get(), options.seed, 0, options.timeline, options.attention});
        })) {
      row.oom = true;
      report.rows.push_back(std::move(row));
      continue;
    }
    const auto grads = gradients(params);
    row.vs_full = compare_gradients(params, grads, ref_grads, row.step.loss, report.full.loss);
    if (options.golden)
      row.vs_golden = compare_gradients(params, grads, *options.golden, row.step.loss, options.golden_loss, 1e-6);
    row.predicted = strategy->predict(profile);
    if (options.trace) {
      row.trace = strategy->trace().to_string();
      if (!strategy->plan_summary().empty()) row.trace = "plan: " + strategy->plan_summary() + "\n" + row.trace;
    }  // the measured step's, before any other
    if (!row.exact) {  // a second, unmeasured step that keeps the true inputs to compare
      strategy->set_verify(true);
      forward_backward(model, params, batch, {strategy.get(), options.seed, 0, false, options.attention});
      row.reconstruction = strategy->reconstruction();
      strategy->set_verify(false);
    }
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace remat
