// Gradient reduction, one mode alone: local accumulation of K micro-batches
// sums their gradients in micro-batch order, bitwise what adding each
// micro-batch's own gradients on the host in that order gives, and returns
// the summed loss; it communicates nothing. (The data-parallel and sharded
// modes need ranks: tests/cli/mpi_test.sh runs them against this one.)
#include "catch.hpp"
#include "datasets/batch_source.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "train/reduction.hpp"

using namespace remat;

TEST_CASE("local accumulation sums K micro-batches' gradients in order, bitwise", "[train][reduction]") {
  const int K = 3;
  test::TinyModel m = test::tiny_model("llama", 2, 7);
  auto strategy = make_strategy("per-layer");
  const auto source = make_batch_source("random", m.setup.sizes.B, m.setup.sizes.S, m.setup.sizes.V, 7);
  std::vector<Batch> batches;
  for (int k = 0; k < K; ++k) batches.push_back(source->next());

  // Each micro-batch alone, summed on the host in micro-batch order.
  std::vector<std::vector<float>> want;
  double want_loss = 0;
  for (int k = 0; k < K; ++k) {
    StepOptions o{strategy.get(), 1, std::uint64_t(k)};
    want_loss += run_step(*m.model, *m.params, batches[std::size_t(k)], o).loss;
    const auto g = gradients(*m.params);
    if (k == 0) want = g;
    else
      for (std::size_t i = 0; i < g.size(); ++i)
        for (std::size_t j = 0; j < g[i].size(); ++j) want[i][j] += g[i][j];
  }

  const auto reduction = make_reduction(*m.params, K, /*shard_params=*/false, ModelSetup{});
  REQUIRE(reduction->ranks() == 1);
  REQUIRE(reduction->micro_batches() == K);
  double loss = 0;
  for (int k = 0; k < K; ++k) {
    CHECK(reduction->micro_batch(k) == std::uint64_t(k));
    reduction->begin(k);
    StepOptions o{strategy.get(), 1, std::uint64_t(k)};
    o.zero_grad = reduction->zero_grad();
    reduction->add(k, run_step(*m.model, *m.params, batches[std::size_t(k)], o).loss);
  }
  loss = reduction->finish();
  CHECK(loss == want_loss);
  CHECK(gradients(*m.params) == want);
  CHECK(reduction->predicted_bytes(*strategy) == 0);
}

TEST_CASE("the data-parallel exchange is counted exactly: gradients and loss, to and from every other rank",
          "[train][reduction]") {
  test::TinyModel m = test::tiny_model("gpt2", 2, 1);
  std::int64_t trainable = 0;
  for (const auto& t : m.params->tensors()) trainable += t.numel();
  // Each round: 4 bytes a gradient value and 8 for the loss, sent to and
  // received from each of the other ranks.
  CHECK(data_parallel_bytes(*m.params, 4, 2) == 2 * 2 * 3 * (4 * trainable + 8));
  CHECK(data_parallel_bytes(*m.params, 1, 5) == 0);
}
