// The planner's solver on a 64-block chain (the target: under a
// second), at two budgets; sizes and times like a gpt2 block's, with three
// droppable tags per block.
#include <benchmark/benchmark.h>

#include "strategies/planner/solver.hpp"
#include "strategies/policy_strategy.hpp"

namespace {

remat::SaveProfile chain(int blocks) {
  remat::SaveProfile p;
  p.timed = true;
  p.step_seconds = 1;
  p.outside_peak = 20 << 20;
  for (int b = 0; b < blocks; ++b) {
    remat::BlockSaves s;
    s.name = "h." + std::to_string(b);
    s.input = (2 + b % 3) << 20;
    s.recompute_beside = s.input;  // the output's gradient, the input's size
    s.inputs.push_back({"add", {1}, s.input, false, 0, true});
    s.tensors.push_back({"linear", {1}, (12 + b % 5) << 20, true, 0.004, false});
    s.tensors.push_back({"attention", {1}, (4 + b % 2) << 20, true, 0.006, false});
    s.tensors.push_back({"gelu_tanh", {1}, 8 << 20, true, 0.001, false});
    s.tensors.push_back({"layer_norm", {1}, 4 << 20, true, 0.0005, false});
    for (const auto& x : s.tensors) s.saved += x.bytes;
    s.forward_peak = s.saved + (4 << 20);
    s.backward_peak = s.saved + (8 << 20);
    s.forward_seconds = 0.02 + 0.001 * (b % 4);
    p.blocks.push_back(s);
  }
  return p;
}

void BM_planner_solve(benchmark::State& state) {
  const int blocks = int(state.range(0));
  const double share = double(state.range(1)) / 100;
  const remat::SaveProfile p = chain(blocks);
  const auto costs = remat::planner::chain_costs(p);
  const auto budget = std::int64_t(share * double(remat::predict_policy(p, remat::Policy{}).device));
  for (auto _ : state) {
    auto plan = remat::planner::solve(costs, p, budget);
    if (!plan) state.SkipWithError("infeasible");
    benchmark::DoNotOptimize(plan);
  }
  state.counters["blocks"] = blocks;
}
BENCHMARK(BM_planner_solve)->Args({12, 30})->Args({64, 10})->Args({64, 30})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
