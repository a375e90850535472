// Every zoo model: whole-model gradients against finite differences in
// float64, float32 against float64, and every strategy against full.
#include <cmath>
#include <fstream>
#include <map>
#include <filesystem>

#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

using namespace remat;

namespace {

std::string any_model() {
  static const auto names = models().names();
  return GENERATE_REF(from_range(names));
}

}  // namespace

TEST_CASE("every model's gradients match finite differences of the whole model in float64", "[zoo][gradcheck]") {
  const std::string name = any_model();
  INFO(name);
  const Sizes z = preset_sizes("tiny");
  const auto model = models().find(name).make(z);
  ParamStore p(model->params(), DType::f64);
  for (const auto& t : p.tensors())
    test::upload(t, test::random_values(t.numel(), std::hash<std::string>{}(t.label()), -0.3, 0.3));
  const Batch batch = random_batch(z.B, z.S, z.V, 5);
  p.zero_grad();
  backward(model->loss(p, batch));
  NoGradScope no_grad;
  double worst = 0;
  std::string where;
  for (std::size_t i = 0; i < p.tensors().size(); ++i) {
    const Tensor& t = p.tensors()[i];
    const auto grad = t.grad().to_host_f64();
    auto values = t.to_host_f64();
    for (std::int64_t j : {std::int64_t(0), t.numel() / 3, t.numel() - 1}) {
      const double keep = values[j], eps = 1e-6;
      values[j] = keep + eps;
      test::upload(t, values);
      const double plus = model->loss(p, batch).item();
      values[j] = keep - eps;
      test::upload(t, values);
      const double minus = model->loss(p, batch).item();
      values[j] = keep;
      test::upload(t, values);
      const double numeric = (plus - minus) / (2 * eps);
      const double err = std::abs(grad[j] - numeric) / (1e-3 + std::abs(numeric));
      if (err > worst) worst = err, where = p.names()[i] + "[" + std::to_string(j) + "]";
    }
  }
  INFO("worst at " << where);
  CHECK(worst < 1e-5);
}

TEST_CASE("every model in float32 agrees with float64 on the same weights", "[zoo]") {
  const std::string name = any_model();
  INFO(name);
  const Sizes z = preset_sizes("tiny");
  const auto model = models().find(name).make(z);
  ParamStore p32(model->params(), DType::f32), p64(model->params(), DType::f64);
  initialize(p32, 1, z.L);
  initialize(p64, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  NoGradScope no_grad;
  CHECK(model->loss(p32, batch).item() == test::Approx(model->loss(p64, batch).item()).epsilon(1e-6));
}

TEST_CASE("every model with every strategy: bitwise equal to full, reversible within 1e-4", "[zoo][strategies]") {
  const std::string name = any_model();
  const auto [layers, dropout] = GENERATE(std::pair<int, double>{0, 0.0}, std::pair<int, double>{0, 0.1},
                                          std::pair<int, double>{6, 0.0});
  INFO(name << " L " << layers << " dropout " << dropout);
  Sizes z = preset_sizes(layers ? "deep" : "tiny");
  if (layers) z.L = layers, z.S = z.S_max = 32, z.B = 2;
  z.dropout = dropout;
  const auto model = models().find(name).make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  const auto report = run_check(*model, params, random_batch(z.B, z.S, z.V, 1), strategies_for(name, "all"), {});
  for (const auto& row : report.rows) {
    INFO(row.strategy << ": max rel " << row.vs_full.max_rel << " at " << row.vs_full.worst);
    if (row.exact) {
      CHECK(row.vs_full.bitwise);
    } else {
      CHECK(row.vs_full.max_rel < 1e-4);
      REQUIRE(row.reconstruction);
      CHECK(row.reconstruction->max_rel < 1e-4);
    }
  }
}

TEST_CASE("reversible strategy only for reversible models, and its memory is flat in depth", "[zoo][reversible][slow]") {
  CHECK_THROWS_WITH(strategies_for("gpt2", "reversible"), test::Contains("only to reversible models (revformer)"));
  CHECK(strategies_for("revformer", "all").back() == "reversible");
  CHECK(strategies_for("gpt2", "all") == all_strategies());
  std::vector<std::int64_t> peaks;
  for (int L : {4, 8, 16, 32}) {
    Sizes z = preset_sizes("deep");
    z.L = L;
    const auto model = models().find("revformer").make(z);
    ParamStore params(model->params(), DType::f32);
    initialize(params, 1, L);
    const auto report = run_check(*model, params, random_batch(z.B, z.S, z.V, 1), {"reversible"}, {});
    peaks.push_back(report.rows[0].step.activation_peak);
    CHECK(report.rows[0].vs_full.max_rel < 1e-4);
  }
  const double slope = std::log(double(peaks.back()) / double(peaks.front())) / std::log(8.0);
  INFO("log-log slope " << slope);
  CHECK(std::abs(slope) < 0.05);
}

TEST_CASE("a parameter split over ranks and joined again is the whole, for every kind of split", "[zoo][tp]") {
  const Shape whole = {12, 8};
  std::vector<double> values(96);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = double(i);
  const int ranks = 4;
  const std::vector<std::pair<Split, Shape>> kinds = {
      {{0, 1, 0}, {3, 8}},    // rows (a column-parallel weight)
      {{0, 3, 0}, {3, 8}},    // rows of q | k | v alike
      {{1, 1, 0}, {12, 2}},   // columns (a row-parallel weight)
      {{0, 1, 2}, {6, 8}},    // two parts on four ranks (replicated key/value heads)
      {{-1, 1, 0}, {12, 8}},  // whole on every rank
  };
  for (const auto& [split, shape] : kinds) {
    INFO("split dim " << split.dim << " blocks " << split.blocks << " parts " << split.parts);
    const ParamSpec spec{"w", shape, Init::normal, split};
    std::vector<std::vector<double>> parts;
    for (int r = 0; r < ranks; ++r) parts.push_back(tp::part_values(values, spec, whole, RankGroup{ranks, r}));
    CHECK(tp::join_parts(parts, spec, whole) == values);
  }
  // Rank 1's rows of q | k | v: the second of each block's four.
  const ParamSpec qkv{"w", {3, 8}, Init::normal, {0, 3, 0}};
  const auto mine = tp::part_values(values, qkv, whole, RankGroup{ranks, 1});
  CHECK(mine[0] == 8);
  CHECK(mine[8] == 5 * 8);
  CHECK(mine[16] == 9 * 8);
  // Ranks 2 and 3 share the second of two parts.
  const ParamSpec kv{"w", {6, 8}, Init::normal, {0, 1, 2}};
  CHECK(tp::part_values(values, kv, whole, RankGroup{ranks, 2}) == tp::part_values(values, kv, whole, RankGroup{ranks, 3}));
  CHECK(tp::part_values(values, kv, whole, RankGroup{ranks, 2})[0] == 6 * 8);
  CHECK_THROWS_AS(tp::part_values(std::vector<double>(5), kv, whole, RankGroup{ranks, 0}), UserError);
}

TEST_CASE("llama with q/k/v biases (Qwen2): its biases are parameters with gradients, split with their rows under --tp",
          "[zoo][qwen2]") {
  Sizes z = preset_sizes("tiny");
  z.qkv_bias = true;
  const auto model = models().find("llama").make(z);
  std::vector<std::string> biases;
  for (const auto& spec : model->params())
    if (spec.name.size() > 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0) biases.push_back(spec.name);
  CHECK(biases.size() == 3 * std::size_t(z.L));
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  for (const auto& b : biases) test::upload(params[b], test::random_values(params[b].numel(), 3, -0.5, 0.5));
  auto full = make_strategy("full");
  forward_backward(*model, params, random_batch(z.B, z.S, z.V, 1), {full.get(), 1, 0});
  for (const auto& b : biases) {
    INFO(b);
    const auto g = params[b].grad().to_host_f64();
    CHECK(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; }));
  }
  // Under --tp each bias is split as its projection's rows are: whole heads
  // at --tp 2, the shared key/value head's whole at --tp 4 (Hkv 2).
  // tests/cli/tp_test.sh checks the gradients against one process.
  for (const int ranks : {2, 4}) {
    z.tp = {ranks, 1, false};
    CHECK_NOTHROW(tp::validate("llama", z));
    std::map<std::string, ParamSpec> specs;
    for (const auto& spec : models().find("llama").make(z)->params()) specs[spec.name] = spec;
    for (const auto& name : biases) {
      INFO(name << " at --tp " << ranks);
      const ParamSpec &bias = specs.at(name), &weight = specs.at(name.substr(0, name.size() - 4) + "weight");
      CHECK(bias.shape[0] == weight.shape[0]);
      CHECK((bias.split.dim == 0 && bias.split.parts == weight.split.parts && bias.split.blocks == weight.split.blocks));
    }
  }
}

// Each model's registration says how its layers split (ModelInfo::mlp_hidden,
// grouped_kv): gpt2's blocks split 4D hidden units and have a key/value head
// per head; llama's split F and group its key/value heads.
TEST_CASE("tensor parallelism checks each model's own hidden size and key/value heads", "[zoo][quick]") {
  Sizes z = preset_sizes("tiny");
  z.H = 4, z.Hkv = 2, z.D = 32, z.F = 90, z.V = 64;
  z.tp = {4, 0, false};
  CHECK_NOTHROW(tp::validate("gpt2", z));  // 4D = 128 splits; Hkv is not gpt2's
  CHECK_THROWS_WITH(tp::validate("llama", z), Catch::Contains("the MLP's hidden size = 90"));
  z.F = 96;
  CHECK_NOTHROW(tp::validate("llama", z));  // 4 ranks replicate 2 key/value heads
  z.Hkv = 3, z.H = 12;
  CHECK_THROWS_WITH(tp::validate("llama", z), Catch::Contains("neither divides the key/value heads Hkv = 3"));
  CHECK_THROWS_WITH(tp::validate("mixtral", z), Catch::Contains("neither divides the key/value heads Hkv = 3"));
  CHECK_NOTHROW(tp::validate("gpt2", z));
}

// Context parallelism (zoo/context_parallel.hpp): the refusals, and a rank's
// rows in the zig-zag order, at the whole sequence's positions.
TEST_CASE("context parallelism takes every model and dropout, refuses what it cannot split and gives each rank its zig-zag rows", "[zoo][quick][cp]") {
  Sizes z = preset_sizes("tiny");
  z.S = 16;
  z.cp = RankGroup::context(3);
  CHECK_THROWS_WITH(cp::validate("llama", z), Catch::Contains("S = 16 must be divisible by 6"));
  z.cp = RankGroup::context(2, 1);
  for (const std::string& model : models().names()) CHECK_NOTHROW(cp::validate(model, z));  // every zoo model splits so
  z.dropout = 0.1;
  CHECK_NOTHROW(cp::validate("llama", z));  // each rank's masks its own
  // Rank 1 of 2 holds chunks 1 and 2 of 4: rows 4..7 and 8..11 of each sequence.
  std::vector<std::int32_t> ids(32);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(i);
  const std::vector<std::int32_t> mine = cp::rows(Tensor::from_host(ids, {2, 16}), z.cp).to_host_i32();
  CHECK(mine == std::vector<std::int32_t>{4, 5, 6, 7, 8, 9, 10, 11, 20, 21, 22, 23, 24, 25, 26, 27});
  z.cp = RankGroup::context(2);  // rank 0: chunks 0 and 3
  CHECK(cp::positions(Tensor::from_host(std::vector<std::int32_t>(16), {2, 8}), z.cp, {}).to_host_i32() ==
        std::vector<std::int32_t>{0, 1, 2, 3, 12, 13, 14, 15});
  // Rotary positions of those rows: the whole sequence's rotation of the same rows.
  const std::vector<double> x = test::random_values(16 * 8, 5, -1, 1);
  std::vector<double> rows_of_x;
  for (int t : {0, 1, 2, 3, 12, 13, 14, 15}) rows_of_x.insert(rows_of_x.end(), x.begin() + t * 8, x.begin() + t * 8 + 8);
  const auto whole = ops::rotary(Tensor::from_host(x, {1, 16, 8}), 4).to_host_f64();
  const auto part = ops::rotary(Tensor::from_host(rows_of_x, {1, 8, 8}), 4, 10000.0, {}, z.cp).to_host_f64();
  for (int r = 0; r < 8; ++r)
    for (int e = 0; e < 8; ++e) CHECK(part[r * 8 + e] == whole[(r < 4 ? r : r + 8) * 8 + e]);
}
