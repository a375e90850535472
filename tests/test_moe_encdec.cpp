// What mixtral and encdec ask of the strategies beyond the zoo-wide tests:
// a recomputation routes as the forward pass did (and one that does not is
// caught), memory that does not depend on how tokens are routed, a budget
// that holds for any batch, and an encoder output kept once for every
// decoder block.
#include <algorithm>

#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"

using namespace remat;

namespace {

// Every token the same: every position's hidden state is the same (its
// attention averages equal values), so every token goes to the same experts.
Batch constant_batch(const Sizes& z, std::int32_t token) {
  const std::vector<std::int32_t> ids(std::size_t(z.B) * std::size_t(z.S), token);
  return {Tensor::from_host(ids, {z.B, z.S}), Tensor::from_host(ids, {z.B, z.S})};
}

// Tokens per expert per layer, as the step records them.
std::vector<double> routed_rows(const StepResult& r) {
  for (const auto& s : r.stats)
    if (s.name == "expert_load") return s.values;
  return {};
}

}  // namespace

TEST_CASE("mixtral records its loss parts and routes each row to exactly K experts", "[zoo][moe]") {
  test::TinyModel m = test::tiny_model("mixtral", 3, 1);
  const Sizes& z = m.setup.sizes;
  const StepResult r = run_step(*m.model, *m.params, m.batch);
  REQUIRE(r.loss_parts.size() == 2);
  CHECK(r.loss_parts[0].first == "ce");
  CHECK(r.loss_parts[1].first == "aux");
  CHECK(r.loss == test::Approx(r.loss_parts[0].second + z.router_aux * r.loss_parts[1].second).epsilon(1e-6));
  const auto load = routed_rows(r);
  REQUIRE(load.size() == std::size_t(z.L * z.E));
  for (int l = 0; l < z.L; ++l) {
    double rows = 0;
    for (int e = 0; e < z.E; ++e) rows += load[std::size_t(l * z.E + e)];
    CHECK(rows == double(z.B) * z.S * z.K);
  }
}

TEST_CASE("a recomputed mixtral block routes as its forward pass did, and one that routes otherwise is an error",
          "[zoo][moe][strategies]") {
  test::TinyModel m = test::tiny_model("mixtral", 3, 1);
  const Sizes& z = m.setup.sizes;
  auto full = make_strategy("full");
  const StepResult reference = run_step(*m.model, *m.params, m.batch, {full.get(), 1, 0});
  const auto want = gradients(*m.params);
  auto per_layer = make_strategy("per-layer");
  const StepResult r = run_step(*m.model, *m.params, m.batch, {per_layer.get(), 1, 0});
  // Every block but the last is recomputed, routing included, and checked against forward's slots.
  CHECK(r.recomputed_ops.at("route_top_k") == z.L - 1);
  CHECK(r.loss == reference.loss);
  CHECK(gradients(*m.params) == want);

  // A recomputation that does not reproduce forward: the router's weights
  // change between forward and backward (as a nondeterministic block would
  // behave), so the recomputed blocks route otherwise.
  m.params->zero_grad();
  Tensor loss;
  {
    per_layer->begin_step();
    BlockRunnerScope runner(*per_layer);
    loss = m.model->loss(*m.params, m.batch);
  }
  for (int l = 0; l < z.L - 1; ++l) {
    const Tensor& gate = (*m.params)["layers." + std::to_string(l) + ".block_sparse_moe.gate.weight"];
    auto values = gate.to_host_f64();
    for (double& v : values) v = -v;  // the least probable experts become the most
    test::upload(gate, values);
  }
  CHECK_THROWS_AS(backward(loss), RecomputeMismatch);
}

TEST_CASE("mixtral's activation memory does not depend on the routing, and a budget holds for any batch",
          "[zoo][moe][memory]") {
  for (int k : {2, 1}) {
    test::TinyModel m = test::tiny_model("mixtral", 4, 1);
    Sizes z = m.setup.sizes;
    z.K = k;
    m.model = models().find("mixtral").make(z);
    const Batch skewed = constant_batch(z, 7);  // every token on the same K experts
    const std::vector<std::string> specs = {"full", "per-layer", "sqrt", "selective", "offload", "offload-checkpoint"};
    for (const auto& spec : specs) {
      auto s = make_strategy(spec);
      const StepResult spread = run_step(*m.model, *m.params, m.batch, {s.get(), 1, 0});
      const StepResult one = run_step(*m.model, *m.params, skewed, {s.get(), 1, 0});
      INFO("K " << k << ", " << spec);
      const auto a = routed_rows(spread), b = routed_rows(one);
      // The constant batch's rows all go to K experts of each layer.
      for (int l = 0; l < z.L; ++l) {
        const auto row = b.begin() + l * z.E;
        CHECK(std::count(row, row + z.E, 0.0) == z.E - k);
      }
      CHECK(a != b);
      CHECK(spread.activation_peak == one.activation_peak);
      CHECK(spread.offload_peak == one.offload_peak);
    }
    // Planned on the spread batch, run on the skewed one: the promise holds
    // (run_step throws if a plan passes its budget).
    auto plan = make_strategy("budget:min");
    prepare_strategy(*plan, *m.model, *m.params, m.batch, ops::AttentionKernel::fused, 1);
    const StepResult r = run_step(*m.model, *m.params, skewed, {plan.get(), 1, 0});
    CHECK(r.activation_peak <= plan->activation_budget());
  }
}

TEST_CASE("encdec keeps the encoder's output once for all decoder blocks, whatever the strategy",
          "[zoo][encdec][strategies]") {
  test::TinyModel m = test::tiny_model("encdec", 6, 1);  // 3 encoder and 3 decoder blocks
  const Sizes& z = m.setup.sizes;
  const std::int64_t hidden = std::int64_t(z.B) * z.S * z.D * 4;
  const std::vector<std::string> decoder = {"dec.h.0", "dec.h.1", "dec.h.2"};
  SECTION("a decoder block's checkpoint region keeps its own input, not the encoder's output too") {
    auto s = make_strategy("per-layer");
    s->trace().enabled = true;
    run_step(*m.model, *m.params, m.batch, {s.get(), 1, 0});
    for (const auto& region : s->trace().regions()) {
      INFO(region.name);
      if (region.name != "dec.h.2") CHECK(region.kept == hidden);  // the last block keeps what it saves
    }
  }
  SECTION("offloading moves what a decoder block saves, but the encoder's output stays") {
    auto s = make_strategy("offload");
    s->trace().enabled = true;
    run_step(*m.model, *m.params, m.batch, {s.get(), 1, 0});
    for (const auto& region : s->trace().regions())
      if (region.name == "dec.h.0" || region.name == "dec.h.1") {
        INFO(region.name);
        CHECK(region.kept == hidden);  // the cross-attention's keys and values read it
      }
  }
  SECTION("no checkpoint segment runs across the encoder-decoder boundary, and predictions hold") {
    // every:2 on 6 blocks makes segments [0, 1], [2, 3], [4, 5]: [2, 3] spans enc.h.2 and dec.h.0.
    const auto report = run_check(*m.model, *m.params, m.batch, {"every:2", "every:4", "sqrt", "budget:min"}, {});
    for (const auto& row : report.rows) {
      INFO(row.strategy);
      CHECK(row.vs_full.bitwise);
      CHECK(row.step.activation_peak == row.predicted.device);
    }
  }
}

TEST_CASE("mixtral and encdec: every strategy's peak is predicted to the byte", "[zoo][moe][encdec][memory][slow]") {
  for (const char* name : {"mixtral", "encdec"}) {
    test::TinyModel m = test::tiny_model(name, 4, 1, std::nullopt, "small");
    Sizes z = m.setup.sizes;  // small's widths, a shorter batch
    z.S = 32;
    z.B = 2;
    m.model = models().find(name).make(z);
    const Batch batch = random_batch(z.B, z.S, z.V, 3);
    const auto report = run_check(*m.model, *m.params, batch, strategies_for(name, "all,budget:auto"), {});
    for (const auto& row : report.rows) {
      INFO(name << " " << row.strategy);
      CHECK(row.vs_full.bitwise);
      CHECK(row.step.activation_peak == row.predicted.device);
    }
  }
}
