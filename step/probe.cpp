#include "step/probe.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "autodiff/backend.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "step/step.hpp"
#include "step/step_scope.hpp"
#include "strategies/registry.hpp"

namespace remat {

SaveProfile profile_saves(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention) {
  ops::AttentionKernelScope kernel(attention);
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  params.zero_grad();
  ExecSpace().fence();
  const std::int64_t base = tracker.stats(pool).live;
  SaveProfiler profiler;
  const StepScope scope(0, 0);
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
  SaveProfile p = profiler.finish(tracker.timeline(), tracker.phases(), pool, base);
  p.copies_in_flight = backend::offload_copies();
  return p;
}

SaveProfile measure_costs(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed, int repeats, const CostClock* clock) {
  SaveProfile p = profile_saves(model, params, batch, attention);
  auto full = make_strategy("full");
  const StepOptions step = step_options({seed, attention}, full.get());
  std::vector<double> steps;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = clock ? clock->now() : 0;
    const StepResult r = run_step(model, params, batch, step);
    steps.push_back(clock ? clock->now() - t0 : r.seconds);
    p.measured_peak = std::max(p.measured_peak, r.activation_peak);
  }
  p.step_seconds = median(steps);
  std::vector<std::vector<double>> forward(p.blocks.size());
  std::vector<std::vector<std::vector<double>>> recipes(p.blocks.size());
  for (int i = 0; i < repeats; ++i) {
    CostTimer timer(clock ? clock->now : std::function<double()>());
    {
      ops::AttentionKernelScope kernel(attention);
      const StepScope scope(seed, 0);
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
  // The fastest pass, not the median: a busy neighbour (another process, a
  // daemon) only ever adds time, and a plan is chosen by how the blocks'
  // costs compare, which one slowed pass in two must not decide.
  const auto fastest = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  for (std::size_t b = 0; b < p.blocks.size(); ++b) {
    p.blocks[b].forward_seconds = fastest(forward[b]);
    for (std::size_t k = 0; k < p.blocks[b].tensors.size() && k < recipes[b].size(); ++k)
      p.blocks[b].tensors[k].recompute_seconds = fastest(recipes[b][k]);
  }
  // The offload pool's copies: out and back, 16 MB, the fastest of `repeats` (0 where nothing is copied).
  p.offload_seconds_per_byte =
      clock ? clock->offload_seconds_per_byte : backend::offload_seconds_per_byte(std::size_t(16) << 20, repeats);
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
  // A pure function of (model, kernel), asked for every strategy list a
  // command parses: answered once per process. Guarded, since any thread
  // may ask; the answer is made outside the lock (it runs a step).
  static std::mutex mutex;
  static std::map<std::pair<std::string, ops::AttentionKernel>, std::vector<std::string>> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find({model, kernel}); it != cache.end()) return it->second;
  }
  std::vector<std::string> tags;
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
    const StepScope step(1, 0);
    SavedTensorHooksScope hooks(collect);
    m->loss(params, random_batch(z.B, z.S, z.V, 1));
  }
  current_tape().clear();
  tags.assign(collect.tags.begin(), collect.tags.end());
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(std::make_pair(model, kernel), tags).first->second;
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
    for (const auto& name : parse_strategy(s).tags) {
      const auto expanded = expand_tag(name);
      if (std::any_of(expanded.begin(), expanded.end(),
                      [&](const std::string& t) { return std::count(produced.begin(), produced.end(), t) > 0; }))
        continue;
      std::string list_of, groups;
      for (const auto& t : produced) list_of += (list_of.empty() ? "" : ", ") + t;
      for (const auto& [group, members] : tag_groups())  // only groups that name something here
        if (std::any_of(members.begin(), members.end(),
                        [&](const std::string& t) { return std::count(produced.begin(), produced.end(), t) > 0; }))
          groups += (groups.empty() ? "" : ", ") + group;
      throw UserError("strategy '" + s + "': " + model + " (" + ops::attention_kernel_name(kernel) +
                      " attention) produces no tag '" + name + "'; its tags: " + list_of + "; its groups: " + groups +
                      " (see `remat strategies`)");
    }
  }
  return specs;
}

}  // namespace remat
