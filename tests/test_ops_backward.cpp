// Every op's backward against central finite differences in float64.
#include "autodiff/backend.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "catch.hpp"
#include "helpers.hpp"

using namespace remat;
using test::check_gradients;
using test::random_ids;
using test::random_leaf;
using Inputs = std::vector<Tensor>;

namespace {

void require_gradients(const std::function<Tensor(const Inputs&)>& f, const Inputs& inputs) {
  const auto r = check_gradients(f, inputs);
  INFO(r.where);
  CHECK(r.max_error < 1e-6);
}

}  // namespace

TEST_CASE("embedding backward, repeated ids accumulate", "[ops][gradcheck]") {
  Tensor ids = Tensor::from_host(std::vector<std::int32_t>{0, 3, 3, 1, 0, 3}, {2, 3});
  require_gradients([&](const Inputs& in) { return ops::embedding(in[0], ids); }, {random_leaf({5, 4}, 1)});
}

TEST_CASE("add backward, same shape and broadcast", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::add(in[0], in[1]); },
                    {random_leaf({2, 3, 4}, 1), random_leaf({2, 3, 4}, 2)});
  require_gradients([](const Inputs& in) { return ops::add(in[0], in[1]); },
                    {random_leaf({2, 3, 4}, 1), random_leaf({3, 4}, 2)});
}

TEST_CASE("add backward when both inputs are the same tensor", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::add(in[0], in[0]); }, {random_leaf({3, 4}, 1)});
}

TEST_CASE("linear backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::linear(in[0], in[1], in[2]); },
                    {random_leaf({2, 3, 6}, 1), random_leaf({5, 6}, 2), random_leaf({5}, 3)});
  require_gradients([](const Inputs& in) { return ops::linear(in[0], in[1]); },
                    {random_leaf({4, 6}, 1), random_leaf({5, 6}, 2)});
}

TEST_CASE("layer_norm backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::layer_norm(in[0], in[1], in[2], 1e-5); },
                    {random_leaf({3, 7}, 1, DType::f64, -2, 2), random_leaf({7}, 2), random_leaf({7}, 3)});
}

TEST_CASE("gelu_tanh backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::gelu_tanh(in[0]); }, {random_leaf({40}, 1, DType::f64, -4, 4)});
}

TEST_CASE("attention backward, causal and bidirectional, every kernel", "[ops][gradcheck]") {
  const auto kernel = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain);
  ops::AttentionKernelScope scope(kernel);
  for (bool causal : {true, false}) {
    INFO("causal " << causal << " kernel " << ops::attention_kernel_name(kernel));
    require_gradients([causal](const Inputs& in) { return ops::attention(in[0], 2, causal); },
                      {random_leaf({2, 4, 12}, 1, DType::f64, -1.5, 1.5)});
  }
}

TEST_CASE("cross_entropy backward", "[ops][gradcheck]") {
  Tensor targets = random_ids({2, 3}, 6, 5);
  require_gradients([&](const Inputs& in) { return ops::cross_entropy(in[0], targets); },
                    {random_leaf({2, 3, 6}, 1, DType::f64, -3, 3)});
}

TEST_CASE("rms_norm backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::rms_norm(in[0], in[1], 1e-5); },
                    {random_leaf({3, 7}, 1, DType::f64, -2, 2), random_leaf({7}, 2)});
}

TEST_CASE("rotary backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::rotary(in[0], 4); }, {random_leaf({2, 3, 8}, 1)});
}

TEST_CASE("gelu_erf, silu, swiglu and scale backward", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::gelu_erf(in[0]); }, {random_leaf({40}, 1, DType::f64, -4, 4)});
  require_gradients([](const Inputs& in) { return ops::silu(in[0]); }, {random_leaf({40}, 1, DType::f64, -4, 4)});
  require_gradients([](const Inputs& in) { return ops::swiglu(in[0], in[1]); },
                    {random_leaf({30}, 1, DType::f64, -4, 4), random_leaf({30}, 2)});
  require_gradients([](const Inputs& in) { return ops::scale(in[0], -0.7); }, {random_leaf({10}, 1)});
}

TEST_CASE("grouped-query attention backward, causal and bidirectional, every kernel", "[ops][gradcheck]") {
  const auto kernel = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain);
  ops::AttentionKernelScope scope(kernel);
  for (bool causal : {true, false})
    for (int kv : {1, 2}) {
      INFO("causal " << causal << " kv heads " << kv);
      require_gradients([causal, kv](const Inputs& in) { return ops::attention(in[0], in[1], in[2], 4, kv, causal); },
                        {random_leaf({2, 3, 8}, 1, DType::f64, -1.5, 1.5), random_leaf({2, 3, 2 * kv}, 2, DType::f64, -1.5, 1.5),
                         random_leaf({2, 3, 2 * kv}, 3)});
    }
}

TEST_CASE("cross-attention on packed keys and values backward, every kernel", "[ops][gradcheck]") {
  const auto kernel = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain);
  ops::AttentionKernelScope scope(kernel);
  for (bool causal : {false, true}) {
    INFO("causal " << causal << " kernel " << ops::attention_kernel_name(kernel));
    require_gradients([causal](const Inputs& in) { return ops::attention(in[0], in[1], 2, causal); },
                      {random_leaf({2, 3, 4}, 1, DType::f64, -1.5, 1.5), random_leaf({2, 3, 8}, 2, DType::f64, -1.5, 1.5)});
  }
}

TEST_CASE("an op whose inputs are one tensor gets one gradient buffer for them", "[ops][gradcheck]") {
  require_gradients([](const Inputs& in) { return ops::swiglu(in[0], in[0]); }, {random_leaf({20}, 1)});
  for (auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain}) {
    ops::AttentionKernelScope scope(kernel);
    require_gradients([](const Inputs& in) { return ops::attention(in[0], in[1], in[1], 2, 1, true); },
                      {random_leaf({1, 3, 4}, 1), random_leaf({1, 3, 2}, 2)});
  }
}

TEST_CASE("a chain of ops: gradients flow through a small block", "[ops][gradcheck]") {
  require_gradients(
      [](const Inputs& in) {
        Tensor h = ops::layer_norm(in[0], in[1], in[2], 1e-5);
        Tensor a = ops::attention(ops::linear(h, in[3]), 2, true);
        return ops::add(in[0], ops::gelu_tanh(a));
      },
      {random_leaf({1, 3, 4}, 1), random_leaf({4}, 2), random_leaf({4}, 3), random_leaf({12, 4}, 4)});
}

TEST_CASE("tensor parallelism's ops backward, in a group of one rank", "[ops][gradcheck][tp]") {
  // Across ranks they run under mpirun (tests/cli/tp_test.sh); here the
  // group is this process, where the sums over ranks are the identity.
  const RankGroup one{};
  if constexpr (!backend::kHostMemory) {  // a device build refuses the split ops in one line
    CHECK_THROWS_WITH(ops::all_reduce(random_leaf({2, 5}, 1), one), Catch::Contains("runs on the host backend only"));
    return;
  }
  require_gradients([&](const Inputs& in) { return ops::all_reduce(in[0], one); }, {random_leaf({2, 5}, 1)});
  require_gradients([&](const Inputs& in) { return ops::all_reduce_in_backward(in[0], one); },
                    {random_leaf({2, 5}, 2)});
  // A part of a table: rows [3, 8) of a vocabulary; other ids give zeros and no gradient.
  Tensor ids = Tensor::from_host(std::vector<std::int32_t>{0, 3, 7, 7, 9, 4}, {2, 3});
  require_gradients([&](const Inputs& in) { return ops::embedding_part(in[0], ids, 3, 10); }, {random_leaf({5, 4}, 3)});
  // The whole vocabulary in one part: the same loss and gradient as cross_entropy.
  Tensor targets = random_ids({2, 3}, 6, 5);
  require_gradients([&](const Inputs& in) { return ops::cross_entropy_parts(in[0], targets, 0, one); },
                    {random_leaf({2, 3, 6}, 4, DType::f64, -3, 3)});
  Tensor logits = random_leaf({2, 3, 6}, 4, DType::f64, -3, 3);
  CHECK(ops::cross_entropy_parts(logits, targets, 0, one).item() ==
        Approx(ops::cross_entropy(logits, targets).item()).epsilon(1e-14));
}

TEST_CASE("ring attention (context parallelism) backward, in a group of one rank", "[ops][gradcheck][cp]") {
  // Across ranks it runs under mpirun (tests/cli/cp_test.sh). Alone, a rank
  // holds the sequence's two chunks, so every step of the ring is here: a
  // chunk against itself (causal), the second against the first (whole),
  // the partial outputs merged and each row's <dO, O> given to backward.
  const RankGroup one{};
  if constexpr (!backend::kHostMemory) {
    CHECK_THROWS_WITH(ops::ring_attention(random_leaf({1, 4, 12}, 1), 2, one), Catch::Contains("host backend only"));
    return;
  }
  require_gradients([&](const Inputs& in) { return ops::ring_attention(in[0], 2, one); },
                    {random_leaf({2, 4, 12}, 1, DType::f64, -1.5, 1.5)});
  require_gradients([&](const Inputs& in) { return ops::ring_attention(in[0], in[1], in[2], 4, 2, one); },
                    {random_leaf({2, 6, 8}, 2, DType::f64, -1.5, 1.5), random_leaf({2, 6, 4}, 3, DType::f64, -1.5, 1.5),
                     random_leaf({2, 6, 4}, 4)});
  // The same values as causal attention over the whole sequence.
  const Tensor qkv = random_leaf({2, 6, 12}, 5, DType::f64, -1.5, 1.5);
  const auto ring = ops::ring_attention(qkv, 2, one).to_host_f64(), whole = ops::attention(qkv, 2, true).to_host_f64();
  REQUIRE(ring.size() == whole.size());
  for (std::size_t i = 0; i < ring.size(); ++i) CHECK(ring[i] == Approx(whole[i]).margin(1e-13));
  CHECK_THROWS_WITH(ops::ring_attention(random_leaf({1, 3, 12}, 6), 2, one), Catch::Contains("two chunks of equal length"));
  // Bidirectional (every chunk pair wholly), and a cross-attention's packed keys and values: the same values
  // as the whole attention, and their gradients.
  const RankGroup ring_of_one = RankGroup::context();
  const auto bidirectional = ops::ring_attention(qkv, 2, ring_of_one, false).to_host_f64();
  const auto whole_bidirectional = ops::attention(qkv, 2, false).to_host_f64();
  for (std::size_t i = 0; i < bidirectional.size(); ++i)
    CHECK(bidirectional[i] == Approx(whole_bidirectional[i]).margin(1e-13));
  require_gradients([&](const Inputs& in) { return ops::ring_attention(in[0], 2, ring_of_one, false); },
                    {random_leaf({2, 4, 12}, 7, DType::f64, -1.5, 1.5)});
  const Tensor q = random_leaf({2, 6, 4}, 8, DType::f64, -1.5, 1.5), kv = random_leaf({2, 6, 8}, 9, DType::f64, -1.5, 1.5);
  const auto cross = ops::ring_attention(q, kv, 2, ring_of_one).to_host_f64();
  const auto whole_cross = ops::attention(q, kv, 2, false).to_host_f64();
  for (std::size_t i = 0; i < cross.size(); ++i) CHECK(cross[i] == Approx(whole_cross[i]).margin(1e-13));
  require_gradients([&](const Inputs& in) { return ops::ring_attention(in[0], in[1], 2, ring_of_one); },
                    {random_leaf({2, 4, 4}, 10, DType::f64, -1.5, 1.5), random_leaf({2, 4, 8}, 11, DType::f64, -1.5, 1.5)});
  // Dropout on the probabilities: each chunk pair's mask its own, the same in backward (the step's stream
  // fixed, so every evaluation draws the same masks).
  const auto with_dropout = [&](const Inputs& in) {
    random_ops::begin_step(7, 0);
    return ops::ring_attention(in[0], 2, ring_of_one, true, 0.3);
  };
  require_gradients(with_dropout, {random_leaf({2, 4, 12}, 12, DType::f64, -1.5, 1.5)});
  CHECK(with_dropout({qkv}).to_host_f64() != ring);
  CHECK_THROWS_WITH(ops::ring_attention(qkv, 2, ring_of_one, true, 1.0), Catch::Contains("dropout 1.000000 outside [0, 1)"));
  ops::AttentionKernelScope plain(ops::AttentionKernel::plain);
  CHECK_THROWS_WITH(ops::ring_attention(qkv, 2, one), Catch::Contains("--attention plain with --cp: not yet"));
}

TEST_CASE("expert parallelism's exchange backward, in a group of one rank", "[ops][gradcheck][ep]") {
  // Across ranks under mpirun (tests/cli/ep_test.sh); here every expert is
  // this process's, and the exchange hands the rows to itself.
  const RankGroup one{};
  const Tensor probs = ops::softmax(random_leaf({6, 4}, 1, DType::f64, -2, 2));
  const ops::Routing route = ops::route_top_k(probs, 2);
  if constexpr (!backend::kHostMemory) {  // a device build refuses the exchange in one line
    CHECK_THROWS_WITH(ops::plan_expert_exchange(route, one), Catch::Contains("runs on the host backend only"));
    return;
  }
  const ops::ExpertExchange x = ops::plan_expert_exchange(route, one);
  CHECK(x.sent == std::vector<std::int64_t>{12});
  CHECK(x.local.offsets == route.offsets);
  require_gradients([&](const Inputs& in) { return ops::to_experts(in[0], x, one); }, {random_leaf({12, 3}, 2)});
  require_gradients([&](const Inputs& in) { return ops::from_experts(in[0], x, one); }, {random_leaf({12, 3}, 3)});
  CHECK_THROWS_WITH(ops::to_experts(random_leaf({11, 3}, 4), x, one), Catch::Contains("for 12 routed rows"));
}

TEST_CASE("embedding_part gives zero rows for ids outside its part", "[ops][tp]") {
  Tensor table = random_leaf({2, 3}, 5);
  Tensor ids = Tensor::from_host(std::vector<std::int32_t>{4, 5, 6, 7}, {4});
  const auto got = ops::embedding_part(table, ids, 5, 8).to_host_f64(), rows = table.to_host_f64();
  const std::vector<double> want = {0, 0, 0, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], 0, 0, 0};
  CHECK(got == want);
  CHECK_THROWS_WITH(ops::embedding_part(table, ids, 5, 7), Catch::Contains("1 id(s) outside [0, 7)"));
}
