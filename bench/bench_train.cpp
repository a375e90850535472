// Training's own costs beside the step it wraps: one AdamW update of 10M
// parameters, and a training step of gpt2 small (micro-batch, gradient norm,
// update, record) against the bare forward+backward of the same batch size.
#include <benchmark/benchmark.h>

#include "optim/optimizer.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "train/trainer.hpp"
#include "zoo/model.hpp"

namespace {

void BM_adamw_10M(benchmark::State& state) {
  // 10M parameters as 40 matrices of 500 x 500, with gradients.
  std::vector<remat::Tensor> params;
  for (int i = 0; i < 40; ++i) {
    remat::Tensor p = remat::Tensor::parameter({500, 500}, remat::DType::f32, "p" + std::to_string(i));
    p.slot()->grad = std::make_shared<remat::Tensor>(remat::Tensor::zeros({500, 500}, remat::DType::f32, "grad"));
    params.push_back(p);
  }
  remat::OptimizerConfig c;
  c.weight_decay = 0.1;
  auto opt = remat::make_optimizer(c, params);
  for (auto _ : state) {
    opt->step(1e-3);
    remat::ExecSpace().fence();
  }
  state.counters["params/s"] = benchmark::Counter(1e7, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_adamw_10M)->Unit(benchmark::kMillisecond)->UseRealTime();

remat::TrainConfig gpt2_small() {
  remat::TrainConfig c;
  c.setup = {"gpt2", "small", remat::preset_sizes("small")};
  c.steps = 1000000;  // never done: the benchmark decides how many
  c.schedule.lr = 1e-4;
  c.grad_clip = 1.0;
  c.optimizer.weight_decay = 0.1;
  return c;
}

void BM_train_step(benchmark::State& state) {
  remat::Trainer trainer(gpt2_small());
  trainer.step();  // warm-up
  for (auto _ : state) trainer.step();
}
BENCHMARK(BM_train_step)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(4.0);

void BM_bare_step(benchmark::State& state) {
  const remat::TrainConfig c = gpt2_small();
  const auto model = remat::models().find("gpt2").make(c.setup.sizes);
  remat::ParamStore params(model->params(), remat::DType::f32);
  remat::initialize(params, 1, c.setup.sizes.L);
  auto full = remat::make_strategy("full");
  const remat::Sizes& z = c.setup.sizes;
  std::uint64_t step = 0;
  remat::forward_backward(*model, params, remat::random_batch(z.B, z.S, z.V, 1), {full.get(), 1, 0});
  for (auto _ : state) {
    // The batch comes from the same generator the trainer reads.
    const remat::Batch batch = remat::random_batch(z.B, z.S, z.V, 1 + step);
    remat::forward_backward(*model, params, batch, {full.get(), 1, step++});
    remat::ExecSpace().fence();
  }
}
BENCHMARK(BM_bare_step)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(4.0);

}  // namespace
