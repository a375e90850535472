// The planner (budget:<size>): the solver is optimal over its plan space
// (against exhaustive enumeration on small chains), a plan's measured peak
// never exceeds its budget and is predicted within 5%, its gradients are
// bitwise full's, nested segments run exactly, and bad budgets are one clear
// error naming the smallest feasible one.
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <cstring>

#include "autodiff/backend.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/planner/solver.hpp"
#include "strategies/policy_strategy.hpp"
#include "strategies/registry.hpp"

using namespace remat;
using namespace remat::planner;

namespace {

constexpr std::int64_t kUnit = 1024;  // every synthetic size is a whole number of these: the solver rounds nothing

// A chain of `blocks` blocks with random sizes and times; `tags` droppable
// tags per block.
SaveProfile random_chain(int blocks, int tags, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto units = [&](int lo, int hi) { return kUnit * std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  auto seconds = [&] { return std::uniform_real_distribution<double>(0.001, 0.01)(rng); };
  static const char* names[] = {"attention", "gelu_tanh", "layer_norm"};
  SaveProfile p;
  p.timed = true;
  p.step_seconds = 1;
  p.outside_peak = units(5, 40);
  for (int b = 0; b < blocks; ++b) {
    BlockSaves s;
    s.name = "h." + std::to_string(b);
    s.input = units(1, 6);
    s.recompute_beside = s.input;  // the output's gradient, the input's size
    s.inputs.push_back({"add", {1}, s.input, false});
    s.tensors.push_back({"linear", {1}, units(4, 20), false, 0});
    for (int t = 0; t < tags; ++t) s.tensors.push_back({names[t], {1}, units(2, 15), true, seconds()});
    for (const auto& x : s.tensors) s.saved += x.bytes;
    s.forward_peak = s.saved + units(0, 10);
    s.backward_peak = s.saved + units(2, 20);
    s.forward_seconds = 5 * seconds();
    p.blocks.push_back(s);
  }
  return p;
}

// Every plan of the solver's space for blocks [first, last] of a
// recomputation: plain blocks (any of their variants) and sub-segments that
// end before `last`, nested the same way.
void span_plans(const ChainCosts& c, int first, int last, std::vector<PlanPart>& prefix,
                const std::function<void(const std::vector<PlanPart>&)>& emit) {
  if (first > last) return emit(prefix);
  for (const auto& v : c.blocks[std::size_t(first)].variants) {
    prefix.push_back({first, first, false, v.tags, {}, false});
    span_plans(c, first + 1, last, prefix, emit);
    prefix.pop_back();
  }
  for (int r = first; r < last; ++r) {
    std::vector<PlanPart> inner;
    span_plans(c, first, r, inner, [&](const std::vector<PlanPart>& in) {
      prefix.push_back({first, r, true, {}, in, false});
      span_plans(c, r + 1, last, prefix, emit);
      prefix.pop_back();
    });
  }
}

// Every top-level plan: plain blocks and segments [i, e] with any inner plan.
void top_plans(const ChainCosts& c, int first, std::vector<PlanPart>& prefix,
               const std::function<void(const std::vector<PlanPart>&)>& emit) {
  const int L = int(c.blocks.size());
  if (first == L) return emit(prefix);
  for (const auto& v : c.blocks[std::size_t(first)].variants) {
    prefix.push_back({first, first, false, v.tags, {}, false});
    top_plans(c, first + 1, prefix, emit);
    prefix.pop_back();
  }
  if (c.allow_offload) {
    prefix.push_back({first, first, false, {}, {}, true});
    top_plans(c, first + 1, prefix, emit);
    prefix.pop_back();
  }
  for (int e = first; e < L; ++e) {
    std::vector<PlanPart> inner;
    span_plans(c, first, e, inner, [&](const std::vector<PlanPart>& in) {
      prefix.push_back({first, e, true, {}, in, false});
      top_plans(c, e + 1, prefix, emit);
      prefix.pop_back();
    });
  }
}

struct Exhaustive {
  double best = INFINITY;
  std::int64_t count = 0;
};

Exhaustive exhaustive(const ChainCosts& c, const SaveProfile& p, std::int64_t budget) {
  Exhaustive x;
  std::vector<PlanPart> prefix;
  top_plans(c, 0, prefix, [&](const std::vector<PlanPart>& parts) {
    ++x.count;
    if (predict_policy(p, plan_policy(parts, "enumerated")).device <= budget)
      x.best = std::min(x.best, recompute_seconds(c, p, parts));
  });
  return x;
}

}  // namespace

TEST_CASE("the solver's plan is the cheapest of an exhaustive enumeration of its plan space", "[planner][exhaustive]") {
  // Chains of up to 8 blocks without droppable tags, of up to 5 with two
  // (every subset a variant), and with offloading allowed, its copies moved
  // or in flight through later blocks' forward (a GPU's, copies_in_flight):
  // the enumeration grows too fast beyond.
  struct Case {
    int blocks, tags;
    bool offload, in_flight;
  };
  for (const auto& [blocks, tags, offload, in_flight] : std::vector<Case>{
           {1, 0, false, false}, {3, 0, false, false}, {5, 0, false, false}, {8, 0, false, false},
           {2, 2, false, false}, {4, 2, false, false}, {5, 1, false, false}, {3, 1, true, false},
           {5, 0, true, false}, {6, 0, true, false}, {3, 1, true, true}, {5, 0, true, true}, {6, 0, true, true}}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      SaveProfile p = random_chain(blocks, tags, seed * 100 + std::uint64_t(blocks));
      p.offload_seconds_per_byte = 1e-9;  // as where the pool is copied to
      p.copies_in_flight = in_flight;
      const ChainCosts c = chain_costs(p, offload);
      const std::int64_t full = predict_policy(p, Policy{}).device;
      for (double share : {0.2, 0.35, 0.5, 0.75, 1.0}) {
        const std::int64_t units = std::max<std::int64_t>(1, std::int64_t(share * double(full)) / kUnit);
        const std::int64_t budget = units * kUnit;
        INFO(blocks << " blocks, " << tags << " tags, offload " << offload << " in flight " << in_flight << ", seed "
                    << seed << ", budget " << budget << " of full's " << full);
        const auto plan = solve(c, p, budget, int(units));  // a unit of exactly kUnit bytes
        const Exhaustive x = exhaustive(c, p, budget);
        REQUIRE(plan.has_value() == std::isfinite(x.best));
        if (!plan) continue;
        CHECK(plan->predicted_peak <= budget);
        CHECK(plan->recompute_seconds == Approx(x.best).epsilon(1e-5).margin(1e-9));
      }
    }
  }
}

TEST_CASE("the smallest budget is feasible and a little less is not", "[planner]") {
  const SaveProfile p = random_chain(10, 2, 7);
  const ChainCosts c = chain_costs(p);
  const std::int64_t smallest = smallest_budget(c, p);
  const auto plan = solve(c, p, smallest);
  REQUIRE(plan);
  CHECK(plan->predicted_peak <= smallest);
  CHECK_FALSE(solve(c, p, smallest * 98 / 100));
  // Everything kept costs nothing to recompute.
  const auto roomy = solve(c, p, predict_policy(p, Policy{}).device * 2);
  REQUIRE(roomy);
  CHECK(roomy->recompute_seconds == 0);
}

TEST_CASE("a planned schedule stays within its budget, is predicted within 5% and is bitwise full's", "[planner][models]") {
  for (const char* name : {"gpt2", "llama", "bert", "revformer"}) {
    test::TinyModel s = test::tiny_model(name, 6, 3, 0.1);
    const std::vector<std::string> specs{"budget:min", "budget:30%", "budget:50%", "budget:75%", "budget:100%",
                                         "budget:range:25%:offload", "budget:range:50%"};
    CheckOptions options;
    options.run.seed = 5;
    const CheckReport report = run_check(*s.model, *s.params, s.batch, specs, options);  // run_step throws over a budget
    for (const auto& row : report.rows) {
      INFO(name << " " << row.strategy);
      CHECK(row.vs_full.bitwise);
      CHECK(row.step.activation_peak <= row.predicted.device);  // the budget holds the prediction, which holds this
      // Tiny sizes: which plan is chosen depends on timings, and one that
      // drops tags inside a recomputation is over-predicted by up to about
      // 10% here (the backward working set is counted whole); the 5% bound
      // is checked on real sizes below.
      CHECK(double(row.predicted.device) <= 1.15 * double(row.step.activation_peak));
    }
    CHECK(report.rows[0].step.activation_peak < report.rows[1].step.activation_peak);
  }
}

TEST_CASE("on the small preset a plan's predicted peak is within 5% of the measured one", "[planner][small][slow]") {
  // gpt2 or llama, by the sample seed (each half a minute): the runs together cover both.
  const std::uint64_t seed = test::sample_seed();
  INFO("sample seed " << seed);
  const char* name = seed % 2 ? "llama" : "gpt2";
  Sizes z = preset_sizes("small");
  z.L = 6;  // half the depth: the same blocks, half the time
  const auto model = models().find(name).make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  CheckOptions options;
  const CheckReport report =
      run_check(*model, params, batch, {"budget:range:10%", "budget:35%", "budget:50%", "budget:75%"}, options);
  for (const auto& row : report.rows) {
    INFO(name << " " << row.strategy);
    CHECK(row.vs_full.bitwise);
    CHECK(row.step.activation_peak <= row.predicted.device);
    CHECK(double(row.predicted.device) <= 1.05 * double(row.step.activation_peak));
  }
}

TEST_CASE("nested segments with drops inside the recomputation run exactly as predicted", "[planner][nested]") {
  test::TinyModel s = test::tiny_model("gpt2", 6, 3, 0.1);
  // Blocks 0-4 one segment, recomputed as: [0-1 sub-segment: [0 keep] [1 keep]] [2 drop gelu] [3 sub-segment] [4 keep];
  // block 5 kept.
  auto plain = [](int b, std::vector<std::string> drops) { return PlanPart{b, b, false, std::move(drops), {}, false}; };
  auto segment = [](int a, int b, std::vector<PlanPart> inner) { return PlanPart{a, b, true, {}, std::move(inner), false}; };
  const std::vector<PlanPart> inner{segment(0, 1, {}), plain(2, {"gelu_tanh", "layer_norm"}), segment(3, 3, {}), plain(4, {})};
  const std::vector<PlanPart> parts{segment(0, 4, inner), plain(5, {})};
  PolicyStrategy nested("nested", plan_policy(parts, "nested"));
  auto full = make_strategy("full");
  const StepResult reference = run_step(*s.model, *s.params, s.batch, {full.get(), 5, 0});
  const auto ref = gradients(*s.params);
  const StepResult r = run_step(*s.model, *s.params, s.batch, {&nested, 5, 0});
  const GradientComparison cmp = compare_gradients(*s.params, gradients(*s.params), ref, r.loss, reference.loss);
  CHECK(cmp.bitwise);
  const SaveProfile profile = profile_saves(*s.model, *s.params, s.batch);
  const std::int64_t predicted = nested.predict(profile).device;
  CHECK(std::abs(double(predicted - r.activation_peak)) <= 0.05 * double(r.activation_peak));
  CHECK(r.activation_peak < reference.activation_peak);
}

// On a GPU an offloaded block's device tensors stay until the next group's
// copies start or the forward ends: a segment right after it runs its
// forward beside them, its own working set with every save a placeholder
// (segment_forward_peak), which may peak mid-block. Found on an H200, where
// budget:min:offload on gpt2 small ran 14 MiB over its budget.
TEST_CASE("under a GPU's offload copies, a segment's forward beside the group in flight is predicted to the byte",
          "[planner][offload]") {
  backend::OffloadCopiesScope copies(true);
  const double dropout = GENERATE(0.0, 0.1);
  INFO("dropout " << dropout);
  test::TinyModel s = test::tiny_model("gpt2", 4, 3, dropout);
  const PlanPart first{0, 0, false, {}, {}, false}, second{1, 1, false, {}, {}, false},
      offloaded{2, 2, false, {}, {}, true}, segment{3, 3, true, {}, {}, false};
  PolicyStrategy planned("offload then segment",
                         plan_policy({first, second, offloaded, segment}, "offload then segment"));
  auto full = make_strategy("full");
  const StepResult reference = run_step(*s.model, *s.params, s.batch, {full.get(), 5, 0});
  const auto ref = gradients(*s.params);
  const StepResult r = run_step(*s.model, *s.params, s.batch, {&planned, 5, 0});
  CHECK(compare_gradients(*s.params, gradients(*s.params), ref, r.loss, reference.loss).bitwise);
  const SaveProfile profile = profile_saves(*s.model, *s.params, s.batch);
  REQUIRE(profile.copies_in_flight);
  CHECK(planned.predict(profile).device == r.activation_peak);
  // The planner's smallest plan with offloading keeps its budget (run_step throws over it).
  CheckOptions options;
  options.run.seed = 5;
  const CheckReport report = run_check(*s.model, *s.params, s.batch, {"budget:min:offload"}, options);
  CHECK(report.rows[0].vs_full.bitwise);
  CHECK(report.rows[0].step.activation_peak <= report.rows[0].predicted.device);
}

// revformer's block saves its first output (the second half's norm reads
// it), which is the next block's first input: the probe leaves it out of
// that block's moments, as it leaves out every other block's saves. Where
// the block before does not keep it (a segment, a drop), it is live beside
// the next block's forward all the same. A plain block after a segment was
// under-predicted by it (budget:min over its budget under --tp 2), which
// counting the first block's one storage twice (x1 = x2 = the embeddings)
// had hidden on every checkpointing strategy.
TEST_CASE("a block's input the block before saved is counted where that block does not keep it",
          "[planner][revformer]") {
  const double dropout = GENERATE(0.0, 0.1);
  INFO("dropout " << dropout);
  test::TinyModel s = test::tiny_model("revformer", 4, 3, dropout);
  const PlanPart segment0{0, 0, true, {}, {}, false}, plain1{1, 1, false, {"attention", "layer_norm"}, {}, false},
      segment23{2, 3, true, {}, {}, false}, plain2{2, 2, false, {}, {}, false}, segment3{3, 3, true, {}, {}, false};
  const std::vector<std::pair<std::string, Policy>> policies = {
      {"per-layer", plan_policy({segment0, {1, 1, true, {}, {}, false}, {2, 2, true, {}, {}, false}, segment3}, "per-layer")},
      {"segment, plain dropping, segment", plan_policy({segment0, plain1, segment23}, "mixed")},
      {"segment, plain, plain, segment", plan_policy({segment0, plain1, plain2, segment3}, "mixed")}};
  auto full = make_strategy("full");
  const StepResult reference = run_step(*s.model, *s.params, s.batch, {full.get(), 5, 0});
  const auto ref = gradients(*s.params);
  const SaveProfile profile = profile_saves(*s.model, *s.params, s.batch);
  CHECK(predict_policy(profile, Policy{}).device == reference.activation_peak);
  for (const auto& [name, policy] : policies) {
    INFO(name);
    PolicyStrategy planned(name, policy);
    const StepResult r = run_step(*s.model, *s.params, s.batch, {&planned, 5, 0});
    CHECK(compare_gradients(*s.params, gradients(*s.params), ref, r.loss, reference.loss).bitwise);
    CHECK(planned.predict(profile).device == r.activation_peak);
  }
}

TEST_CASE("bad budgets are one clear error", "[planner][errors]") {
  CHECK_THROWS_WITH(make_strategy("budget"), Catch::Contains("needs a budget"));
  CHECK_THROWS_WITH(make_strategy("budget:lots"), Catch::Contains("'lots' is not a positive size"));
  CHECK_THROWS_WITH(make_strategy("budget:0%"), Catch::Contains("not a percentage"));
  CHECK_THROWS_WITH(make_strategy("budget:-3MB"), Catch::Contains("not a positive size"));
  CHECK_THROWS_AS(make_strategy("budget:1G+offload"), UserError);
  test::TinyModel s = test::tiny_model("gpt2", 4, 3, 0.1);
  CheckOptions options;
  CHECK_THROWS_WITH(run_check(*s.model, *s.params, s.batch, {"budget:1KB"}, options),
                    Catch::Contains("no exact schedule fits") && Catch::Contains("the smallest feasible budget is"));
  current_tape().clear();
}

namespace {

// A random plan of the solver's space over blocks [first, last] (top level
// when `top`): plain blocks with random tag drops, segments with random
// inner plans.
std::vector<PlanPart> random_parts(std::mt19937_64& rng, int first, int last, bool top,
                                   const std::vector<std::string>& tags) {
  std::vector<PlanPart> parts;
  auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  for (int k = first; k <= last;) {
    const int room = top ? last : last - 1;  // a sub-segment ends before its span's end
    if (k <= room && coin(0.4)) {
      const int r = std::uniform_int_distribution<int>(k, room)(rng);
      parts.push_back({k, r, true, {}, coin(0.6) ? random_parts(rng, k, r, false, tags) : std::vector<PlanPart>{}, false});
      k = r + 1;
    } else {
      std::vector<std::string> drops;
      for (const auto& t : tags)
        if (coin(0.4)) drops.push_back(t);
      parts.push_back({k, k, false, drops, {}, false});
      ++k;
    }
  }
  return parts;
}

}  // namespace

// Any plan, not only the solver's: never under-predicted (a budget is a
// promise), bitwise full's. On these tiny sizes fixed working sets weigh
// more than in real ones, and the prediction may exceed the measurement by
// up to about 10% for plans that drop several tags inside recomputations.
TEST_CASE("random plans on real models are never under-predicted and are bitwise full's", "[planner][random-plans]") {
  for (const char* name : {"gpt2", "llama", "bert", "parallel"}) {
    test::TinyModel s = test::tiny_model(name, 4, 3, 0.1);
    const SaveProfile profile = profile_saves(*s.model, *s.params, s.batch);
    std::set<std::string> tag_set;
    for (const auto& b : profile.blocks)
      for (const auto& x : b.tensors)
        if (x.recomputable && !x.block_input) tag_set.insert(x.tag);
    const std::vector<std::string> tags(tag_set.begin(), tag_set.end());
    auto full = make_strategy("full");
    const StepResult reference = run_step(*s.model, *s.params, s.batch, {full.get(), 5, 0});
    std::mt19937_64 rng(42);
    for (int trial = 0; trial < 60; ++trial) {
      const auto parts = random_parts(rng, 0, 3, true, tags);
      PolicyStrategy plan("random", plan_policy(parts, "random"));
      const StepResult r = run_step(*s.model, *s.params, s.batch, {&plan, 5, 0});
      const std::int64_t predicted = plan.predict(profile).device;
      INFO(name << " plan " << summary(parts, profile) << ": measured " << r.activation_peak << ", predicted "
                << predicted);
      CHECK(std::memcmp(&r.loss, &reference.loss, sizeof r.loss) == 0);
      CHECK(r.activation_peak <= predicted);
      CHECK(double(predicted) <= 1.15 * double(r.activation_peak));
    }
  }
}

TEST_CASE("dropping a saved tensor lowers the forward peak only at moments when nothing else holds it",
          "[planner][moments]") {
  BlockSaves b;
  b.forward_peak = 1000;
  b.tensors = {{"gelu_tanh", {25}, 100, true}, {"attention", {12}, 50, true}};
  const std::vector<bool> none{false, false}, first{true, false}, second{false, true}, both{true, true};
  SECTION("without moments (a made-up profile) every drop frees its bytes at the peak") {
    CHECK(forward_peak_dropping(b, none) == 1000);
    CHECK(forward_peak_dropping(b, both) == 850);
  }
  SECTION("with them, a tensor the model's code still holds at the peak frees nothing there") {
    // At the peak (an all-reduce's buffers, say) the model still holds the second
    // tensor; at a later, lower moment neither is held but by its saved copy.
    b.forward_moments = {{1000, {0}}, {900, {0, 1}}};
    CHECK(forward_peak_dropping(b, none) == 1000);
    CHECK(forward_peak_dropping(b, first) == 900);
    CHECK(forward_peak_dropping(b, second) == 1000);
    CHECK(forward_peak_dropping(b, both) == 900);
    planner::ChainCosts c = planner::chain_costs(SaveProfile{{b}}, false);
    for (const auto& v : c.blocks[0].variants) {
      std::vector<bool> dropped{false, false};
      for (const auto& tag : v.tags) dropped[tag == "attention" ? 1 : 0] = true;
      CHECK(v.forward_peak == forward_peak_dropping(b, dropped));
    }
  }
}
