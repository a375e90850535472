// docs/adding-a-strategy.md's worked example, compiled from the page itself
// (tests/CMakeLists.txt extracts it): registered beside the built-in
// strategies, it runs, it is exact, and its predicted memory is within 5%.
#include <cmath>

#include "catch.hpp"
#include "harness/check.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"

namespace remat {
void register_even_attn_core(StrategyRegistry& r);  // the page's example
}

using namespace remat;

TEST_CASE("the strategy in docs/adding-a-strategy.md is exact and predicted within 5%", "[strategies][docs][slow]") {
  StrategyRegistry registry = strategies();
  register_even_attn_core(registry);
  const StrategyEntry& entry = registry.find("even-attn-core");
  CHECK(entry.exact);
  CHECK(entry.description == "recompute the attention core in even blocks only");

  Sizes z = preset_sizes("small");
  z.L = 6;  // half the depth: the same blocks, even and odd, half the time
  const auto model = models().find("gpt2").make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  const auto plain = ops::AttentionKernel::plain;  // whose probabilities are the core it drops

  auto full = make_strategy("full", registry);
  auto even = make_strategy("even-attn-core", registry), all = make_strategy("selective:attn-core", registry);
  auto step = [&](Strategy& s) {
    StepOptions o{&s, 1, 0};
    o.attention = plain;
    return run_step(*model, params, batch, o);
  };
  forward_backward(*model, params, batch, {full.get(), 1, 0, false, plain});  // warm-up
  const StepResult f = step(*full);
  const auto reference = gradients(params);
  const StepResult r = step(*even);
  const auto grads = gradients(params);
  const StepResult a = step(*all);

  CHECK(compare_gradients(params, grads, reference, r.loss, f.loss).bitwise);
  // Half the blocks drop their probabilities: between full and selective:attn-core.
  CHECK(r.activation_peak < f.activation_peak);
  CHECK(r.activation_peak > a.activation_peak);
  const SaveProfile profile = profile_saves(*model, params, batch, plain);
  const double predicted = double(even->predict(profile).device);
  INFO("measured " << r.activation_peak << ", predicted " << predicted);
  CHECK(std::abs(predicted - double(r.activation_peak)) <= 0.05 * double(r.activation_peak));
  // It composes like any policy.
  CHECK_NOTHROW(make_strategy("even-attn-core+offload", registry));
  CHECK_THROWS_WITH(make_strategy("full+even-attn-core", registry), test::Contains("would have no effect"));
}
