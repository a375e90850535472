// Every op on the build's execution space against the host reference, op by
// op, in the manner of ggml's test-backend-ops: one table, a row per op (and
// per attention kernel), the same float64 inputs given to the backend and to
// the naive host loops of reference_ops.cpp. The forward must agree to
// rounding, and the backward (the gradient of sum(w * y) for random w) must
// agree with central differences of the host reference: on a CUDA build this
// is the device against the host; on a host build, the threaded kernels and
// the BLAS against plain loops. A new op with no row fails the coverage case.
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/tags.hpp"
#include "autodiff/random.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "helpers.hpp"
#include "reference_ops.hpp"

using namespace remat;
namespace ref = remat::test::ref;
using ref::Vec;
using Inputs = std::vector<Tensor>;

namespace {

struct OpCase {
  std::string name;            // the row, as a failure names it
  std::string tag;             // the op's tag (autodiff/ops/tags.hpp)
  std::vector<Shape> inputs;   // float64 inputs, uniform in [-1, 1)
  int differentiable;          // the first this many inputs take gradients
  std::function<Tensor(const Inputs&)> backend;
  std::function<Vec(const std::vector<Vec>&)> host;
  std::vector<Vec> values = {};  // an input's values where random ones will not do
};

// A fixed routing of T tokens over E experts, top k: the same on both sides.
struct FixedRouting {
  std::int64_t T = 6, E = 4;
  int k = 2;
  Vec probs;
  ops::Routing backend;
  ref::Routing host;
  FixedRouting() {
    probs = ref::softmax(test::random_values(T * E, 77, -2, 2), E);
    NoGradScope no_grad;
    backend = ops::route_top_k(Tensor::from_host(probs, {T, E}), k);
    host = ref::route_top_k(probs, E, k);
  }
};

Vec scalar(double v) { return Vec{v}; }

std::vector<OpCase> cases() {
  const ref::Ids ids = {3, 0, 5, 5, 1, 2};
  std::vector<OpCase> c;
  c.push_back({"embedding", "embedding", {{7, 4}}, 1,
               [=](const Inputs& x) { return ops::embedding(x[0], Tensor::from_host(ids, {2, 3})); },
               [=](const std::vector<Vec>& x) { return ref::embedding(x[0], 4, ids); }});
  c.push_back({"add (broadcast)", "add", {{2, 3, 4}, {4}}, 2, [](const Inputs& x) { return ops::add(x[0], x[1]); },
               [](const std::vector<Vec>& x) { return ref::add(x[0], x[1]); }});
  c.push_back({"linear", "linear", {{2, 3, 5}, {4, 5}, {4}}, 3,
               [](const Inputs& x) { return ops::linear(x[0], x[1], x[2]); },
               [](const std::vector<Vec>& x) { return ref::linear(x[0], 5, x[1], 4, x[2]); }});
  c.push_back({"layer_norm", "layer_norm", {{3, 6}, {6}, {6}}, 3,
               [](const Inputs& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-5); },
               [](const std::vector<Vec>& x) { return ref::layer_norm(x[0], 6, x[1], x[2], 1e-5); }});
  c.push_back({"rms_norm", "rms_norm", {{3, 6}, {6}}, 2, [](const Inputs& x) { return ops::rms_norm(x[0], x[1], 1e-6); },
               [](const std::vector<Vec>& x) { return ref::rms_norm(x[0], 6, x[1], 1e-6); }});
  c.push_back({"gelu_tanh", "gelu_tanh", {{4, 5}}, 1, [](const Inputs& x) { return ops::gelu_tanh(x[0]); },
               [](const std::vector<Vec>& x) { return ref::gelu_tanh(x[0]); }});
  c.push_back({"gelu_erf", "gelu_erf", {{4, 5}}, 1, [](const Inputs& x) { return ops::gelu_erf(x[0]); },
               [](const std::vector<Vec>& x) { return ref::gelu_erf(x[0]); }});
  c.push_back({"silu", "silu", {{4, 5}}, 1, [](const Inputs& x) { return ops::silu(x[0]); },
               [](const std::vector<Vec>& x) { return ref::silu(x[0]); }});
  c.push_back({"swiglu", "swiglu", {{4, 5}, {4, 5}}, 2, [](const Inputs& x) { return ops::swiglu(x[0], x[1]); },
               [](const std::vector<Vec>& x) { return ref::swiglu(x[0], x[1]); }});
  c.push_back({"scale", "scale", {{4, 5}}, 1, [](const Inputs& x) { return ops::scale(x[0], -0.375); },
               [](const std::vector<Vec>& x) { return ref::scale(x[0], -0.375); }});
  c.push_back({"rotary", "rotary", {{2, 3, 8}}, 1, [](const Inputs& x) { return ops::rotary(x[0], 4, 500.0); },
               [](const std::vector<Vec>& x) { return ref::rotary(x[0], 3, 8, 4, 500.0); }});
  c.push_back({"dropout", "dropout", {{4, 8}}, 1,
               [](const Inputs& x) {
                 random_ops::begin_step(11, 3);
                 return ops::dropout(x[0], 0.25);
               },
               [](const std::vector<Vec>& x) {
                 random_ops::begin_step(11, 3);
                 return ref::dropout(x[0], 0.25, 11, random_ops::stream(random_ops::next_op()));
               }});
  c.push_back({"cross_entropy", "cross_entropy", {{2, 3, 7}}, 1,
               [=](const Inputs& x) { return ops::cross_entropy(x[0], Tensor::from_host(ids, {2, 3})); },
               [=](const std::vector<Vec>& x) { return scalar(ref::cross_entropy(x[0], 7, ids)); }});
  c.push_back({"softmax", "softmax", {{3, 5}}, 1, [](const Inputs& x) { return ops::softmax(x[0]); },
               [](const std::vector<Vec>& x) { return ref::softmax(x[0], 5); }});
  // Attention: B 2, S 5, H 2 heads of 3 (grouped: 1 kv head), every kernel.
  for (auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain}) {
    const std::string k = ops::attention_kernel_name(kernel);
    for (bool causal : {true, false}) {
      const std::string mask = causal ? ", causal" : "";
      c.push_back({"attention, packed, " + k + mask, "attention", {{2, 5, 18}}, 1,
                   [=](const Inputs& x) {
                     ops::AttentionKernelScope scope(kernel);
                     return ops::attention(x[0], 2, causal);
                   },
                   [=](const std::vector<Vec>& x) { return ref::attention(x[0], 2, 5, 6, 2, causal); }});
      c.push_back({"attention, grouped, " + k + mask, "attention", {{2, 5, 6}, {2, 5, 3}, {2, 5, 3}}, 3,
                   [=](const Inputs& x) {
                     ops::AttentionKernelScope scope(kernel);
                     return ops::attention(x[0], x[1], x[2], 2, 1, causal);
                   },
                   [=](const std::vector<Vec>& x) { return ref::attention_gqa(x[0], x[1], x[2], 2, 5, 2, 1, 3, causal); }});
    }
    c.push_back({"attention, cross (packed kv), " + k, "attention", {{2, 5, 6}, {2, 5, 12}}, 2,
                 [=](const Inputs& x) {
                   ops::AttentionKernelScope scope(kernel);
                   return ops::attention(x[0], x[1], 2, false);
                 },
                 [=](const std::vector<Vec>& x) {
                   Vec k, v;  // kv rows are [k | v]
                   for (std::size_t r = 0; r < x[1].size() / 12; ++r) {
                     k.insert(k.end(), x[1].begin() + long(r * 12), x[1].begin() + long(r * 12 + 6));
                     v.insert(v.end(), x[1].begin() + long(r * 12 + 6), x[1].begin() + long(r * 12 + 12));
                   }
                   return ref::attention_gqa(x[0], k, v, 2, 5, 2, 2, 3, false);
                 }});
  }
  // Mixture of experts on a fixed routing of 6 tokens over 4 experts, top 2
  // (held by the rows that use it, freed with the table).
  const auto routing = std::make_shared<const FixedRouting>();
  const FixedRouting& r = *routing;
  const std::int64_t T = r.T, E = r.E, TK = r.T * r.k;
  const int K = r.k;
  c.push_back({"routing (top-k, slots, counts)", "routing", {}, 0,
               [r = routing](const Inputs&) {
                 std::vector<double> out;
                 for (auto s : r->backend.selected.to_host_i32()) out.push_back(s);
                 for (auto s : r->backend.slots.to_host_i32()) out.push_back(s);
                 for (double n : r->backend.counts.to_host_f64()) out.push_back(n);
                 return Tensor::from_host(out, {std::int64_t(out.size())});
               },
               [r = routing](const std::vector<Vec>&) {
                 Vec out;
                 for (auto s : r->host.selected) out.push_back(s);
                 for (auto s : r->host.slots) out.push_back(s);
                 for (auto n : r->host.counts) out.push_back(double(n));
                 return out;
               }});
  c.push_back({"routing_weights", "routing_weights", {{T, E}}, 1,
               [r = routing](const Inputs& x) { return ops::routing_weights(x[0], r->backend); },
               [r = routing, E, K](const std::vector<Vec>& x) { return ref::routing_weights(x[0], E, r->host, K); },
               {r.probs}});
  c.push_back({"dispatch", "dispatch", {{T, 5}}, 1, [r = routing](const Inputs& x) { return ops::dispatch(x[0], r->backend); },
               [r = routing, K](const std::vector<Vec>& x) { return ref::dispatch(x[0], 5, r->host, K); }});
  c.push_back({"grouped_linear", "grouped_linear", {{TK, 5}, {3, 5}, {3, 5}, {3, 5}, {3, 5}}, 5,
               [r = routing](const Inputs& x) { return ops::grouped_linear(x[0], {x[1], x[2], x[3], x[4]}, r->backend); },
               [r = routing, K](const std::vector<Vec>& x) {
                 return ref::grouped_linear(x[0], 5, {x[1], x[2], x[3], x[4]}, 3, r->host, K);
               }});
  c.push_back({"combine", "combine", {{TK, 5}, {T, K}}, 2,
               [r = routing, T](const Inputs& x) { return ops::combine(x[0], x[1], r->backend, {T, 5}); },
               [r = routing, K](const std::vector<Vec>& x) { return ref::combine(x[0], 5, x[1], r->host, K); }});
  c.push_back({"sum_rows", "sum_rows", {{T, E}}, 1, [](const Inputs& x) { return ops::sum_rows(x[0]); },
               [E](const std::vector<Vec>& x) { return ref::sum_rows(x[0], E); }});
  c.push_back({"expert_load", "expert_load", {{3, E}}, 0,
               [r = routing](const Inputs& x) { return ops::expert_load(x[0], 1, r->backend); },
               [r = routing, E](const std::vector<Vec>& x) { return ref::expert_load(x[0], E, 1, r->host); }});
  c.push_back({"load_balancing_loss", "load_balancing_loss", {{E}, {3, E}}, 1,
               [T](const Inputs& x) { return ops::load_balancing_loss(x[0], x[1], 3 * T); },
               [T](const std::vector<Vec>& x) { return scalar(ref::load_balancing_loss(x[0], x[1], 3 * T)); }});
  return c;
}

double weighted(const Vec& y, const Vec& w) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}

}  // namespace

TEST_CASE("every op on this build's execution space agrees with the host reference, forward and backward",
          "[ops][backend]") {
  for (const OpCase& op : cases()) {
    INFO(op.name);
    Inputs inputs;
    std::vector<Vec> host;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const bool leaf = int(i) < op.differentiable;
      inputs.push_back(leaf ? test::random_leaf(op.inputs[i], 100 + i) : test::random_tensor(op.inputs[i], 100 + i));
      if (i < op.values.size() && !op.values[i].empty()) test::upload(inputs.back(), op.values[i]);
      host.push_back(inputs.back().to_host_f64());
    }
    const Tensor y = op.backend(inputs);
    const Vec want = op.host(host), got = y.to_host_f64();
    REQUIRE(got.size() == want.size());
    CHECK(test::max_abs_diff(got, want) < 1e-10);
    if (op.differentiable == 0) continue;

    // Backward: the backend's gradient of sum(w * y) against central
    // differences of the host reference, element by element.
    const Vec w = test::random_values(std::int64_t(want.size()), 5);
    backward(y, Tensor::from_host(w, y.shape()));
    std::vector<Vec> analytic;
    for (int i = 0; i < op.differentiable; ++i) {
      const Tensor g = inputs[std::size_t(i)].grad();
      analytic.push_back(g.defined() ? g.to_host_f64() : Vec(host[std::size_t(i)].size(), 0.0));
    }
    const double eps = 1e-6;
    for (std::size_t i = 0; i < analytic.size(); ++i)
      for (std::size_t j = 0; j < host[i].size(); ++j) {
        std::vector<Vec> plus = host, minus = host;
        plus[i][j] += eps;
        minus[i][j] -= eps;
        const double numeric = (weighted(op.host(plus), w) - weighted(op.host(minus), w)) / (2 * eps);
        INFO("input " << i << ", element " << j << ": backend " << analytic[i][j] << ", host " << numeric);
        REQUIRE(std::abs(analytic[i][j] - numeric) < 1e-6 * (1 + std::abs(numeric)));
      }
  }
}

TEST_CASE("the backend table has a row for every op", "[ops][backend]") {
  std::set<std::string> covered;
  for (const OpCase& op : cases()) covered.insert(op.tag);
  // Tags that are not ops of their own: a leaf, and the log-sum-exp the
  // fused attention kernels save beside their output.
  const std::set<std::string> not_ops = {"leaf", "attention_lse"};
  for (const auto& tag : builtin_tags()) {
    INFO(tag);
    CHECK((covered.count(tag) == 1 || not_ops.count(tag) == 1));
  }
}
