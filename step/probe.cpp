#include "step/probe.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "autodiff/backend.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/tape.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "step/step.hpp"
#include "step/step_scope.hpp"
#include "strategies/registry.hpp"

namespace remat {

SaveProfile profile_saves(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed) {
  ops::AttentionKernelScope kernel(attention);
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  params.zero_grad();
  ExecSpace().fence();
  const std::int64_t base = tracker.stats(pool).live;
  SaveProfiler profiler;
  const StepScope scope(seed, 0);
  tracker.start_timeline();
  {
    Tensor loss;
    {
      BlockRunnerScope runner(profiler);
      SavedTensorHooksScope hooks(profiler);
      loss = model.loss(params, batch);
    }
    profiler.forward_over();
    backward(loss);
  }
  tracker.stop_timeline();
  SaveProfile p = profiler.finish(tracker.timeline(), tracker.phases(), pool, base);
  p.copies_in_flight = backend::offload_copies();
  return p;
}

namespace {

// Calls f on every figure of a timed profile a planner reads: times and bytes.
template <class F>
void each_figure(SaveProfile& p, F f) {
  const auto bytes = [&](std::int64_t& b) {
    double v = double(b);
    f(v);
    b = std::int64_t(v);
  };
  for (BlockSaves& b : p.blocks) {
    for (std::int64_t* n : {&b.saved, &b.input, &b.context, &b.forward_peak, &b.backward_peak, &b.recompute_beside,
                            &b.outside_before, &b.backward_before_read, &b.backward_after_read})
      bytes(*n);
    for (auto& e : b.inputs_saved_earlier) bytes(e.bytes);
    for (SavedRecord& t : b.tensors) {
      bytes(t.bytes);
      f(t.recompute_seconds);
    }
    for (SavedRecord& t : b.inputs) bytes(t.bytes);
    for (BlockSaves::Moment& m : b.forward_moments) bytes(m.live);
    f(b.forward_seconds);
  }
  for (std::int64_t* n : {&p.outside_peak, &p.tail_peak, &p.measured_peak}) bytes(*n);
  f(p.step_seconds);
  f(p.offload_seconds_per_byte);
}

// Every rank's `mine` (as many values on each), gathered over g.
std::vector<double> gathered(const std::vector<double>& mine, comm::Group g) {
  const int ranks = comm::size(g);
  const double count = double(mine.size());
  std::vector<double> counts(std::size_t(ranks), 0.0);
  comm::gather_all(&count, 1, counts.data(), g);
  for (const double c : counts)
    if (c != count) throw std::logic_error("agree_on_costs: the ranks profiled different blocks");
  std::vector<double> all(mine.size() * std::size_t(ranks));
  comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data(), g);
  return all;
}

// The blocks' forward moments alike on every rank: where every rank has as
// many, a drop frees bytes at a moment only where it does on every rank
// (their live bytes are agreed with the other figures); elsewhere (routing
// made the ranks allocate differently) one moment, the forward peak, at
// which no drop frees anything.
void agree_on_moments(SaveProfile& p, comm::Group g) {
  const int ranks = comm::size(g);
  std::vector<double> counts;
  for (const BlockSaves& b : p.blocks) counts.push_back(double(b.forward_moments.size()));
  const std::vector<double> all_counts = gathered(counts, g);
  std::vector<double> flags;
  for (std::size_t b = 0; b < p.blocks.size(); ++b) {
    BlockSaves& block = p.blocks[b];
    bool alike = true;
    for (int r = 0; r < ranks; ++r) alike = alike && all_counts[std::size_t(r) * counts.size() + b] == counts[b];
    if (!alike) block.forward_moments = {{block.forward_peak, {}}};
    for (const BlockSaves::Moment& m : block.forward_moments) {
      for (std::size_t k = 0; k < block.tensors.size(); ++k)
        flags.push_back(std::count(m.held_only_saved.begin(), m.held_only_saved.end(), int(k)) ? 1.0 : 0.0);
      flags.push_back(m.recomputed ? 1.0 : 0.0);
    }
  }
  const std::vector<double> all_flags = gathered(flags, g);
  std::size_t i = 0;
  for (BlockSaves& block : p.blocks)
    for (BlockSaves::Moment& m : block.forward_moments) {
      m.held_only_saved.clear();
      for (std::size_t k = 0; k < block.tensors.size(); ++k, ++i) {
        bool everywhere = true;
        for (int r = 0; r < ranks; ++r) everywhere = everywhere && all_flags[std::size_t(r) * flags.size() + i] > 0;
        if (everywhere) m.held_only_saved.push_back(int(k));
      }
      // Reached by a recomputation on any rank: counted where it is on one.
      m.recomputed = false;
      for (int r = 0; r < ranks; ++r) m.recomputed = m.recomputed || all_flags[std::size_t(r) * flags.size() + i] > 0;
      ++i;
    }
}

// A total that is its parts and a rest (a block's saved bytes and the
// tensors it saved; its input and the inputs; a forward moment's live bytes
// and the tensors only their saved copies held then), as the rest alone
// (`sign` -1) or whole again (+1). Agreed as rest and parts, each the
// ranks' largest, a total less any parts a plan drops is at least every
// rank's: where the ranks' shapes differ (expert parallelism's routing) the
// plan's predicted peak bounds each rank's, which the largest totals alone
// would not (rank A keeping 10 bytes and dropping none, rank B keeping none
// and dropping 10: both total 10, and 10 less the 10 dropped is 0).
void split_totals(SaveProfile& p, int sign) {
  const auto sum = [](const std::vector<SavedRecord>& parts) {
    std::int64_t n = 0;
    for (const SavedRecord& t : parts) n += t.bytes;
    return n;
  };
  for (BlockSaves& b : p.blocks) {
    b.saved += sign * sum(b.tensors);
    b.input += sign * sum(b.inputs);
    for (BlockSaves::Moment& m : b.forward_moments)
      for (int k : m.held_only_saved) m.live += sign * b.tensors[std::size_t(k)].bytes;
  }
}

}  // namespace

void agree_on_costs(SaveProfile& p, comm::Group g) {
  const int ranks = comm::size(g);
  if (ranks == 1) return;
  agree_on_moments(p, g);
  split_totals(p, -1);
  std::vector<double> mine;
  each_figure(p, [&](double& v) { mine.push_back(v); });
  const std::vector<double> all = gathered(mine, g);
  std::size_t i = 0;
  each_figure(p, [&](double& v) {
    for (int r = 0; r < ranks; ++r) v = std::max(v, all[std::size_t(r) * mine.size() + i]);
    ++i;
  });
  split_totals(p, +1);
}

SaveProfile measure_costs(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed, int repeats, const CostClock* clock) {
  SaveProfile p = profile_saves(model, params, batch, attention, seed);
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
  agree_on_costs(p, comm::Group::model);  // the ranks of a split model (every axis) recompute alike
  return p;
}

void refuse_planned_under_experts(const Sizes& z, const std::vector<std::string>& strategies, bool training) {
  if (!z.ep.split() || !training) return;
  for (const std::string& spec : strategies)
    if (parse_strategy(spec).planned)
      throw UserError("--ep with " + spec + " in train: not yet (one plan from the probe's routing, and each batch "
                      "routes its tokens anew, and so each rank's memory)");
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
