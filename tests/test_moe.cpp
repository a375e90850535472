// The mixture-of-experts ops: routing (top-k, ties, the dispatch plan),
// their forwards against naive host loops, every differentiable one against
// float64 finite differences, and the routing check that catches a
// recomputation that chose other experts.
#include <algorithm>
#include <cmath>

#include "autodiff/ops/ops.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "helpers.hpp"

using namespace remat;
using test::check_gradients;
using test::random_leaf;
using test::random_tensor;
using Inputs = std::vector<Tensor>;
using ops::Routing;

namespace {

void require_moe_gradients(const std::function<Tensor(const Inputs&)>& f, const Inputs& inputs) {
  const auto r = check_gradients(f, inputs);
  INFO(r.where);
  CHECK(r.max_error < 1e-6);
}

Tensor router_probabilities(std::int64_t T, std::int64_t E, std::uint64_t seed, DType dt = DType::f64) {
  NoGradScope no_grad;
  return ops::softmax(random_tensor({T, E}, seed, dt, -2, 2));
}

}  // namespace

TEST_CASE("softmax over the last dimension", "[ops][moe][forward]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = random_tensor({3, 5}, 1, dt, -3, 3);
    const auto v = x.to_host_f64(), y = ops::softmax(x).to_host_f64();
    for (int r = 0; r < 3; ++r) {
      double m = -1e300, s = 0;
      for (int j = 0; j < 5; ++j) m = std::max(m, v[r * 5 + j]);
      for (int j = 0; j < 5; ++j) s += std::exp(v[r * 5 + j] - m);
      for (int j = 0; j < 5; ++j) CHECK(y[r * 5 + j] == test::Approx(std::exp(v[r * 5 + j] - m) / s).epsilon(1e-6));
    }
  }
}

TEST_CASE("top-k routing: most probable first, ties to the lower expert, rows grouped by expert", "[ops][moe]") {
  // Row 0 ties experts 1 and 3; row 2 ties all four.
  const std::vector<double> p = {0.1, 0.3, 0.3, 0.3,  //
                                 0.5, 0.1, 0.15, 0.25,  //
                                 0.25, 0.25, 0.25, 0.25};
  Tensor probs = Tensor::from_host(p, {3, 4});
  const Routing r = ops::route_top_k(probs, 2);
  CHECK(r.selected.to_host_i32() == std::vector<std::int32_t>{1, 2, 0, 3, 0, 1});
  CHECK(r.offsets == std::vector<std::int64_t>{0, 2, 4, 5, 6});
  // Expert 0: tokens 1, 2; expert 1: tokens 0, 2; expert 2: token 0; expert 3: token 1.
  CHECK(r.slots.to_host_i32() == std::vector<std::int32_t>{2, 4, 0, 5, 1, 3});
  CHECK(r.counts.to_host_f64() == std::vector<double>{2, 2, 1, 1});
  CHECK_THROWS_AS(ops::route_top_k(probs, 5), std::invalid_argument);
}

TEST_CASE("dispatch, grouped linear and combine compute the dense mixture", "[ops][moe][forward]") {
  const std::int64_t T = 6, D = 4, E = 3, F = 5;
  const int k = 2;
  Tensor x = random_tensor({T, D}, 1);
  const Routing r = ops::route_top_k(router_probabilities(T, E, 2), k);
  std::vector<Tensor> w;
  for (int e = 0; e < E; ++e) w.push_back(random_tensor({F, D}, 10 + e));
  Tensor gate = random_tensor({T, k}, 3);
  const Tensor y = ops::combine(ops::grouped_linear(ops::dispatch(x, r), w, r), gate, r, {T, F});
  // y[t] = sum_j gate[t, j] W_sel(t, j) x[t]
  const auto xv = x.to_host_f64(), gv = gate.to_host_f64(), yv = y.to_host_f64();
  const auto sel = r.selected.to_host_i32();
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t o = 0; o < F; ++o) {
      double want = 0;
      for (int j = 0; j < k; ++j) {
        const auto wv = w[std::size_t(sel[std::size_t(t * k + j)])].to_host_f64();
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += wv[std::size_t(o * D + d)] * xv[std::size_t(t * D + d)];
        want += gv[std::size_t(t * k + j)] * dot;
      }
      CHECK(yv[std::size_t(t * F + o)] == test::Approx(want).epsilon(1e-12));
    }
}

TEST_CASE("softmax, routing weights, dispatch, grouped linear, combine, row sums backward", "[ops][moe][gradcheck]") {
  const std::int64_t T = 5, D = 3, E = 4, F = 2;
  const int k = 2;
  const Routing r = ops::route_top_k(router_probabilities(T, E, 7), k);
  require_moe_gradients([](const Inputs& in) { return ops::softmax(in[0]); }, {random_leaf({3, 5}, 1, DType::f64, -2, 2)});
  // Probabilities near the routing's (positive, so the renormalisation is smooth).
  require_moe_gradients([&](const Inputs& in) { return ops::routing_weights(in[0], r); },
                    {random_leaf({T, E}, 2, DType::f64, 0.1, 1)});
  require_moe_gradients([&](const Inputs& in) { return ops::dispatch(in[0], r); }, {random_leaf({T, D}, 3)});
  require_moe_gradients([&](const Inputs& in) { return ops::grouped_linear(in[0], {in[1], in[2], in[3], in[4]}, r); },
                    {random_leaf({T * k, D}, 4), random_leaf({F, D}, 5), random_leaf({F, D}, 6),
                     random_leaf({F, D}, 7), random_leaf({F, D}, 8)});
  require_moe_gradients([&](const Inputs& in) { return ops::combine(in[0], in[1], r, {T, D}); },
                    {random_leaf({T * k, D}, 9), random_leaf({T, k}, 10)});
  require_moe_gradients([](const Inputs& in) { return ops::sum_rows(in[0]); }, {random_leaf({4, 3}, 11)});
  Tensor load = ops::expert_load(Tensor::zeros({2, E}, DType::f64), 1, r);
  require_moe_gradients([&](const Inputs& in) { return ops::load_balancing_loss(in[0], load, 2 * T); },
                    {random_leaf({E}, 12)});
}

TEST_CASE("an expert no token chose gets a zero gradient", "[ops][moe][gradcheck]") {
  // Expert 2 of 3 is never among the top 1.
  Tensor probs = Tensor::from_host(std::vector<double>{0.6, 0.3, 0.1, 0.2, 0.7, 0.1}, {2, 3});
  const Routing r = ops::route_top_k(probs, 1);
  REQUIRE(r.offsets == std::vector<std::int64_t>{0, 1, 2, 2});
  Tensor x = random_leaf({2, 3}, 1);
  std::vector<Tensor> w{random_leaf({2, 3}, 2), random_leaf({2, 3}, 3), random_leaf({2, 3}, 4)};
  const Tensor y = ops::grouped_linear(x, w, r);
  backward(y, Tensor::from_host(std::vector<double>(y.numel(), 1.0), y.shape()));
  CHECK(w[2].grad().to_host_f64() == std::vector<double>(6, 0.0));
  require_moe_gradients([&](const Inputs& in) { return ops::grouped_linear(in[0], {in[1], in[2], in[3]}, r); },
                    {random_leaf({2, 3}, 5), random_leaf({2, 3}, 6), random_leaf({2, 3}, 7), random_leaf({2, 3}, 8)});
}

TEST_CASE("a whole mixture-of-experts layer, routing included, against finite differences", "[ops][moe][gradcheck]") {
  const std::int64_t T = 6, D = 4, E = 4, F = 3;
  require_moe_gradients(
      [&](const Inputs& in) {
        const Tensor probs = ops::softmax(ops::linear(in[0], in[1]));
        const Routing r = ops::route_top_k(probs, 2);
        const Tensor xd = ops::dispatch(in[0], r);
        const Tensor h = ops::swiglu(ops::grouped_linear(xd, {in[2], in[3], in[4], in[5]}, r),
                                     ops::grouped_linear(xd, {in[5], in[4], in[3], in[2]}, r));
        const Tensor y = ops::combine(ops::grouped_linear(h, {in[6], in[6], in[7], in[7]}, r),
                                      ops::routing_weights(probs, r), r, {T, D});
        const Tensor load = ops::expert_load(Tensor::zeros({1, E}, DType::f64), 0, r);
        return ops::add(ops::sum_rows(y), ops::scale(ops::load_balancing_loss(ops::sum_rows(probs), load, T), 0.3));
      },
      {random_leaf({T, D}, 1), random_leaf({E, D}, 2), random_leaf({F, D}, 3), random_leaf({F, D}, 4),
       random_leaf({F, D}, 5), random_leaf({F, D}, 6), random_leaf({D, F}, 7), random_leaf({D, F}, 8)});
}

TEST_CASE("backward refuses dispatch slots that a recomputation routed differently", "[ops][moe][errors]") {
  const std::int64_t T = 4, D = 3, E = 3;
  Tensor x = random_leaf({T, D}, 1);
  Routing r = ops::route_top_k(router_probabilities(T, E, 2), 1);
  Tensor y = ops::combine(ops::dispatch(x, r), Tensor::from_host(std::vector<double>(T, 1.0), {T, 1}), r, {T, D});
  // What a recomputation that routed otherwise would hand backward: other slots in place of forward's.
  auto slots = r.slots.to_host_i32();
  std::reverse(slots.begin(), slots.end());
  Kokkos::deep_copy(r.slots.bytes(), Tensor::from_host(slots, {T, 1}).bytes());
  CHECK_THROWS_AS(backward(y, Tensor::from_host(std::vector<double>(y.numel(), 1.0), y.shape())), RecomputeMismatch);
}
