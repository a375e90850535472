// One training step (forward + backward) per model x strategy at a preset's
// sizes. Reported: seconds per step (Time), tokens/s, and model FLOP/s
// (6 x params x tokens plus attention), to compare with the sgemm rate
// measured in the same run (bench_gemm.cpp), and the rate of the GEMM FLOPs
// the step actually runs (what a mixture of experts is compared by).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "autodiff/ops/ops.hpp"
#include "autodiff/tensor.hpp"
#include "harness/check.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

namespace {

long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void BM_step(benchmark::State& state, const std::string& model_name, const std::string& strategy_spec,
             remat::ops::AttentionKernel kernel) {
  const remat::Sizes z = remat::preset_sizes("small");
  const auto model = remat::models().find(model_name).make(z);
  remat::ParamStore params(model->params(), remat::DType::f32);
  remat::initialize(params, 1, z.L);
  const remat::Batch batch = remat::random_batch(z.B, z.S, z.V, 1);
  auto strategy = remat::make_strategy(strategy_spec);
  remat::StepOptions options{strategy.get(), 1, 0};
  options.attention = kernel;
  remat::forward_backward(*model, params, batch, options);  // warm-up
  // The GEMM FLOPs a step runs, counted by the GEMM front door (a mixture of
  // experts runs only its routed experts' products; recomputation included).
  const double gemm_flops = remat::run_step(*model, params, batch, options).flops;
  const long faults_before = minor_page_faults();
  for (auto _ : state) {
    remat::forward_backward(*model, params, batch, options);
    remat::ExecSpace().fence();
  }
  // Steady-state steps should reuse memory the heap already holds: a page
  // fault costs about 8 us here.
  state.counters["faults/step"] = benchmark::Counter(double(minor_page_faults() - faults_before),
                                                     benchmark::Counter::kAvgIterations);
  const double tokens = double(z.B) * z.S;
  const double attention = 6.0 * z.L * z.B * double(z.S) * z.S * z.D;  // QK^T and PV, forward and backward
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(6.0 * double(params.count()) * tokens + attention,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GEMM FLOP/s"] = benchmark::Counter(gemm_flops, benchmark::Counter::kIsIterationInvariantRate);
}

void add(const std::string& name, const std::string& model, const std::string& strategy,
         remat::ops::AttentionKernel kernel) {
  benchmark::RegisterBenchmark(name.c_str(), BM_step, model, strategy, kernel)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(2.0);
}

// Every model with every strategy that applies to it, registered at start-up;
// and gpt2's full and selective:attn-core with the plain attention kernel,
// whose probabilities are what selective:attn-core drops (BM_step_plain).
[[maybe_unused]] const bool registered_steps = [] {
  using remat::ops::AttentionKernel;
  for (const auto& m : remat::models().all())
    for (const auto& s : remat::all_strategies(remat::ModelTraits{m.reversible}))
      add("BM_step/" + m.name + "/" + s, m.name, s, AttentionKernel::fused);
  for (const char* s : {"full", "selective:attn-core"})
    add(std::string("BM_step_plain/gpt2/") + s, "gpt2", s, AttentionKernel::plain);
  return true;
}();

}  // namespace
