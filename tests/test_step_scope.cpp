// A step's figures are its own (step/step_scope.hpp): nothing resets them by
// hand, so other work between steps, or around one, changes none of them.
#include "autodiff/memory_tracker.hpp"
#include "autodiff/stats.hpp"
#include "catch.hpp"
#include "estimate/step_need.hpp"
#include "fixtures.hpp"
#include "step/probe.hpp"
#include "step/step.hpp"
#include "step/step_scope.hpp"
#include "strategies/registry.hpp"

using namespace remat;

namespace {

void same_figures(const StepResult& a, const StepResult& b) {
  CHECK(a.loss == b.loss);
  CHECK(a.activation_peak == b.activation_peak);
  CHECK(a.offload_peak == b.offload_peak);
  CHECK(a.flops == b.flops);
  CHECK(a.recompute_flops == b.recompute_flops);
  CHECK(a.forward_ops == b.forward_ops);
  CHECK(a.recomputed_ops == b.recomputed_ops);
}

}  // namespace

TEST_CASE("two steps interleaved with other work give the figures each gives alone", "[step][memory]") {
  test::TinyModel a = test::tiny_model("gpt2", 3, 1, 0.1), b = test::tiny_model("llama", 2, 2);
  auto per_layer = make_strategy("per-layer"), offload = make_strategy("offload");
  const StepOptions on_a{per_layer.get(), 7, 3}, on_b{offload.get(), 1, 0};
  run_step(*a.model, *a.params, a.batch, on_a);  // one-time allocations belong to no step
  run_step(*b.model, *b.params, b.batch, on_b);
  const StepResult a_alone = run_step(*a.model, *a.params, a.batch, on_a);
  const StepResult b_alone = run_step(*b.model, *b.params, b.batch, on_b);

  // Between them: a probe (its own steps), a shape-only estimate, the other model's step.
  measure_costs(*b.model, *b.params, b.batch, ops::AttentionKernel::fused, 1);
  step_need(a.setup, ops::AttentionKernel::fused, {"full", "sqrt"});
  const StepResult b_again = run_step(*b.model, *b.params, b.batch, on_b);
  const StepResult a_again = run_step(*a.model, *a.params, a.batch, on_a);
  same_figures(a_again, a_alone);
  same_figures(b_again, b_alone);
}

TEST_CASE("a step inside an open scope neither takes its figures nor leaves its own behind", "[step][memory]") {
  test::TinyModel a = test::tiny_model("gpt2", 2, 1);
  auto sqrt = make_strategy("sqrt");
  const StepOptions on_a{sqrt.get(), 1, 0};
  run_step(*a.model, *a.params, a.batch, on_a);
  const StepResult alone = run_step(*a.model, *a.params, a.batch, on_a);

  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  const StepScope outer(5, 5);
  const std::int64_t before = tracker.stats(pool).live;
  { Tensor big = Tensor::empty({std::int64_t(alone.activation_peak)}, DType::f32); }  // 4x the step's peak
  stats::count_forward("outer_op");
  const StepResult inside = run_step(*a.model, *a.params, a.batch, on_a);
  same_figures(inside, alone);
  // The outer scope keeps what it counted, and saw the inner step's memory.
  CHECK(stats::counts().forward == std::map<std::string, std::int64_t>{{"outer_op", 1}});
  CHECK(tracker.stats(pool).peak >= before + 4 * alone.activation_peak);
}
