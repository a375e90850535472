// QLoRA's cost, in one run: a linear layer over a quantized weight (nf4,
// int8: dequantized into bf16 for each product) beside the same product over
// a bf16 weight, at llama small's shapes; and a bf16 LoRA training step on a
// quantized base beside one on the float base (docs/fine-tuning.md: the
// target is a QLoRA step at most 1.3x the LoRA step).
#include <benchmark/benchmark.h>

#include "autodiff/ops/ops.hpp"
#include "autodiff/tape.hpp"
#include "datasets/batch.hpp"
#include "finetune/fine_tuning.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

namespace {

using remat::QuantFormat;

std::vector<float> weight_values(std::int64_t n) {
  std::vector<float> w(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) w[std::size_t(i)] = 0.02f * float((i * 7919) % 201 - 100) / 100.0f;
  return w;
}

// y = x W^T for x [tokens, in] in bf16, W [out, in] quantized (or bf16 for none).
void BM_linear(benchmark::State& state, QuantFormat format) {
  const std::int64_t tokens = state.range(0), out = state.range(1), in = state.range(2);
  const remat::Tensor x = remat::Tensor::zeros({tokens, in}, remat::DType::bf16);
  const remat::Tensor w32 = remat::Tensor::from_host(weight_values(out * in), {out, in});
  std::vector<remat::bf16> w16(std::size_t(out * in));
  const auto v = weight_values(out * in);
  for (std::size_t i = 0; i < v.size(); ++i) w16[i] = v[i];
  const remat::Tensor w = remat::Tensor::from_host(w16, {out, in});
  const remat::QuantizedWeight q = format == QuantFormat::none ? remat::QuantizedWeight{} : remat::quantize(w32, format);
  remat::NoGradScope no_grad;
  for (auto _ : state) {
    const remat::Tensor y = format == QuantFormat::none ? remat::ops::linear(x, w) : remat::ops::linear(x, q);
    remat::ExecSpace().fence();
    benchmark::DoNotOptimize(y.raw());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * double(tokens) * double(out) * double(in), benchmark::Counter::kIsIterationInvariantRate);
}

// llama small (B 8 x S 256 tokens, D 256, F 688): wq, w1 and w2.
void llama_small_shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 256, 256})->Args({2048, 688, 256})->Args({2048, 256, 688});
}

// A bf16 training step with LoRA 8 on llama small's default targets, the
// base frozen in float32 (none) or quantized.
void BM_lora_step(benchmark::State& state, QuantFormat format, const std::string& strategy_spec) {
  const remat::Sizes z = remat::preset_sizes("small");
  const auto model = remat::models().find("llama").make(z);
  auto params = std::make_unique<remat::ParamStore>(model->params(), remat::DType::f32);
  remat::initialize(*params, 1, z.L);
  const remat::Batch batch = remat::random_batch(z.B, z.S, z.V, 1);
  remat::FineTuning ft;
  ft.lora.rank = 8;
  ft.quantize = format;
  remat::apply_fine_tuning(params, *model, batch, ft, 1, {"llama", "small", z});
  auto strategy = remat::make_strategy(strategy_spec);
  remat::StepOptions options{strategy.get(), 1, 0};
  options.precision = remat::Precision::bf16;
  remat::forward_backward(*model, *params, batch, options);  // warm-up
  for (auto _ : state) {
    remat::forward_backward(*model, *params, batch, options);
    remat::ExecSpace().fence();
  }
  state.counters["tokens/s"] = benchmark::Counter(double(z.B) * z.S, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_linear, bf16, QuantFormat::none)->Apply(llama_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_linear, nf4, QuantFormat::nf4)->Apply(llama_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_linear, int8, QuantFormat::int8)->Apply(llama_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_lora_step, llama_lora_full, QuantFormat::none, "full")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_lora_step, llama_qlora_nf4_full, QuantFormat::nf4, "full")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_lora_step, llama_qlora_int8_full, QuantFormat::int8, "full")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_lora_step, llama_lora_per_layer, QuantFormat::none, "per-layer")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_lora_step, llama_qlora_nf4_per_layer, QuantFormat::nf4, "per-layer")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_lora_step, llama_qlora_int8_per_layer, QuantFormat::int8, "per-layer")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
