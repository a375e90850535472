// One training step (forward + backward) per model, at a preset's sizes.
// Reported: seconds per step, tokens/s, and model FLOP/s (6 x params x tokens
// plus attention), to compare against the sgemm rate in the same run.
#include <benchmark/benchmark.h>

#include "autodiff/tensor.hpp"
#include "harness/step.hpp"
#include "zoo/model.hpp"

namespace {

void BM_step(benchmark::State& state, const std::string& model_name, const std::string& preset) {
  const remat::Sizes z = remat::preset_sizes(preset);
  const auto model = remat::models().find(model_name).make(z);
  remat::ParamStore params(model->params(), remat::DType::f32);
  remat::initialize(params, 1, z.L);
  const remat::Batch batch = remat::random_batch(z.B, z.S, z.V, 1);
  remat::forward_backward(*model, params, batch);  // warm-up
  for (auto _ : state) {
    remat::forward_backward(*model, params, batch);
    remat::ExecSpace().fence();
  }
  const double tokens = double(z.B) * z.S;
  const double attention = 6.0 * z.L * z.B * double(z.S) * z.S * z.D;  // QK^T and PV, forward and backward
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(6.0 * params.count() * tokens + attention,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_step, gpt2_small, std::string("gpt2"), std::string("small"))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);
