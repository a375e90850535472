// The strategies' memory on realistic sizes, measured by the tracker:
// gpt2 `small` (L = 12) and the `deep` depth sweep.
#include <cmath>

#include "autodiff/ops/ops.hpp"
#include "catch.hpp"
#include "harness/check.hpp"
#include "harness/report/report.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"

using namespace remat;

namespace {

CheckReport check(const std::string& preset, int layers, const std::vector<std::string>& strategies,
                  ops::AttentionKernel kernel = ops::AttentionKernel::fused, int batch = 0) {
  Sizes z = preset_sizes(preset);
  if (layers) z.L = layers;
  if (batch) z.B = batch;
  const auto model = models().find("gpt2").make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  CheckOptions options;
  options.run.attention = kernel;
  return run_check(*model, params, random_batch(z.B, z.S, z.V, 1), strategies, options);
}

const CheckRow& row(const CheckReport& r, const std::string& spec) {
  for (const auto& x : r.rows)
    if (x.strategy == spec) return x;
  throw std::logic_error("no row " + spec);
}

}  // namespace

// small's depth, widths and length at batch 2: activations scale with the
// batch, so the ratios are small's (and the step a quarter of its time).
TEST_CASE("gpt2 small: per-layer under a third of full, selective below full with little recompute, "
          "every prediction within 5%, and the fused kernel keeps no probabilities",
          "[memory][small][slow]") {
  // With the plain kernel, which keeps the attention probabilities that
  // Megatron-style selective recomputation drops (the fused kernel never
  // keeps them; see below). One case, so that the plain runs serve both.
  const CheckReport plain = check("small", 0, all_strategies(), ops::AttentionKernel::plain, 2);
  const double full = double(plain.full.activation_peak);
  CHECK(double(row(plain, "per-layer").step.activation_peak) < full / 3);
  const StepResult& sel = row(plain, "selective").step;
  CHECK(double(sel.activation_peak) < full);
  CHECK(sel.recompute_flops / sel.flops < 0.10);
  for (const auto& x : plain.rows) {
    INFO(x.strategy << ": measured " << x.step.activation_peak << ", predicted " << x.predicted.device);
    CHECK(std::abs(double(x.step.activation_peak - x.predicted.device)) <= 0.05 * double(x.step.activation_peak));
    CHECK(x.vs_full.bitwise);
  }

  // The fused kernel: full+fused below selective:attn-core+plain.
  const CheckReport fused = check("small", 0, {"per-layer", "selective"}, ops::AttentionKernel::fused, 2);
  // Bare selective, which keeps only GEMM outputs, recomputes no GEMM and
  // keeps two thirds of full (gpt2: qkv, attention output, residual, fc1
  // output; not the norms' outputs or the GELU's).
  const StepResult& fused_sel = row(fused, "selective").step;
  CHECK(double(fused_sel.activation_peak) < 0.7 * double(fused.full.activation_peak));
  CHECK(fused_sel.recompute_flops == 0);
  CHECK(fused.full.activation_peak < row(plain, "selective:attn-core").step.activation_peak);
  CHECK(row(fused, "per-layer").step.activation_peak < plain.full.activation_peak / 3);
  for (const auto& x : fused.rows) CHECK(std::abs(double(x.step.activation_peak - x.predicted.device)) <= 0.05 * double(x.step.activation_peak));
}

TEST_CASE("depth sweep: full grows like L, sqrt like sqrt(L)", "[memory][depth][slow]") {
  std::vector<double> layers, full, sqrt;
  for (int L : {4, 8, 16, 32}) {
    const CheckReport r = check("deep", L, {"sqrt"});
    layers.push_back(L);
    full.push_back(double(r.full.activation_peak));
    sqrt.push_back(double(row(r, "sqrt").step.activation_peak));
  }
  const double full_slope = loglog_slope(layers, full), sqrt_slope = loglog_slope(layers, sqrt);
  INFO("log-log slopes: full " << full_slope << ", sqrt " << sqrt_slope);
  CHECK(full_slope == test::Approx(1.0).margin(0.1));
  CHECK(sqrt_slope == test::Approx(0.5).margin(0.15));
}
