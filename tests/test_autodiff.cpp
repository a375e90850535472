// The autodiff core: the tape, gradient accumulation, saved-tensor hooks,
// block regions, no-grad mode.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "helpers.hpp"

using namespace remat;
using test::random_leaf;
using test::random_tensor;

namespace {

// Counts what goes through it and keeps the tensors, like KeepHooks.
class CountingHooks : public SavedTensorHooks {
 public:
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    ++packed;
    bytes += std::int64_t(t.nbytes());
    tags.push_back(t.tag());
    return keep.pack(t);
  }
  int packed = 0;
  std::int64_t bytes = 0;
  std::vector<std::string> tags;
  KeepHooks keep;
};

}  // namespace

TEST_CASE("parameter gradients accumulate over backward calls until zero_grad", "[autodiff]") {
  Tensor w = random_leaf({3, 4}, 1);
  Tensor x = random_tensor({2, 4}, 2, DType::f64);
  backward(ops::linear(x, w), random_tensor({2, 3}, 3, DType::f64));
  const auto once = w.grad().to_host_f64();
  backward(ops::linear(x, w), random_tensor({2, 3}, 3, DType::f64));
  const auto twice = w.grad().to_host_f64();
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == test::Approx(2 * once[i]));
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("the tape is emptied by backward and intermediate gradients are freed", "[autodiff]") {
  Tensor w = random_leaf({4}, 1);
  Tensor h = ops::gelu_tanh(w);
  Tensor y = ops::gelu_tanh(h);
  CHECK(current_tape().size() == 2);
  backward(y, random_tensor({4}, 2, DType::f64));
  CHECK(current_tape().size() == 0);
  CHECK_FALSE(h.grad().defined());  // not a parameter: its gradient is gone
  CHECK(w.grad().defined());
}

TEST_CASE("a gradient handed to two inputs is not corrupted by later accumulation", "[autodiff]") {
  // y = (a + b) + a : a's gradient is 2 dy, b's is dy, though add hands the
  // same tensor to both inputs.
  Tensor a = random_leaf({5}, 1), b = random_leaf({5}, 2);
  Tensor dy = random_tensor({5}, 3, DType::f64);
  backward(ops::add(ops::add(a, b), a), dy);
  const auto g = dy.to_host_f64(), ga = a.grad().to_host_f64(), gb = b.grad().to_host_f64();
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(ga[i] == test::Approx(2 * g[i]));
    CHECK(gb[i] == test::Approx(g[i]));
  }
  CHECK(dy.to_host_f64() == g);  // the seed itself is untouched
}

TEST_CASE("no-grad mode records nothing and saves nothing", "[autodiff]") {
  CountingHooks hooks;
  SavedTensorHooksScope scope(hooks);
  NoGradScope no_grad;
  Tensor w = random_leaf({3}, 1);
  Tensor y = ops::gelu_tanh(w);
  CHECK_FALSE(y.requires_grad());
  CHECK(current_tape().size() == 0);
  CHECK(hooks.packed == 0);
}

TEST_CASE("ops save through the innermost hooks, tagged with the producing op's kind", "[autodiff][hooks]") {
  CountingHooks outer, inner;
  Tensor w = random_leaf({2, 3, 8}, 1);
  {
    SavedTensorHooksScope a(outer);
    {
      SavedTensorHooksScope b(inner);
      Tensor g = ops::gelu_tanh(w);   // saves w (a leaf)
      ops::gelu_tanh(g);              // saves g (an mlp activation)
    }
    ops::gelu_tanh(w);
  }
  CHECK(inner.packed == 2);
  CHECK(inner.tags == std::vector<std::string>{"leaf", "gelu_tanh"});
  CHECK(inner.bytes == 2 * 48 * 8);
  CHECK(outer.packed == 1);
  current_tape().clear();
}

TEST_CASE("plain attention saves its input and its probabilities as attention core", "[autodiff][hooks]") {
  ops::AttentionKernelScope plain(ops::AttentionKernel::plain);
  CountingHooks hooks;
  SavedTensorHooksScope scope(hooks);
  Tensor qkv = random_leaf({2, 4, 12}, 1, DType::f32);
  ops::attention(qkv, 2, true);
  CHECK(hooks.tags == std::vector<std::string>{"leaf", "softmax"});
  CHECK(hooks.bytes == (2 * 4 * 12 + 2 * 2 * 4 * 4) * 4);
  current_tape().clear();
}

TEST_CASE("fused attention saves its input and the rows' log-sum-exp, the team kernel its output too",
          "[autodiff][hooks]") {
  // The host kernel takes <dO, O> from whole rows of probabilities; the
  // team kernel (a GPU's) reads it from the output.
  for (auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::fused_team}) {
    const bool team = kernel == ops::AttentionKernel::fused_team;
    INFO(ops::attention_kernel_name(kernel));
    ops::AttentionKernelScope scope_kernel(kernel);
    CountingHooks hooks;
    SavedTensorHooksScope scope(hooks);
    Tensor qkv = random_leaf({2, 4, 12}, 1, DType::f32);
    ops::attention(qkv, 2, true);
    const auto want = team ? std::vector<std::string>{"leaf", "attention", "attention_lse"}
                           : std::vector<std::string>{"leaf", "attention_lse"};
    CHECK(hooks.tags == want);
    CHECK(hooks.bytes == (2 * 4 * 12 + (team ? 2 * 4 * 4 : 0) + 2 * 2 * 4) * 4);  // qkv, [out [2,4,4]], lse [2,2,4]
    current_tape().clear();
  }
}

TEST_CASE("blocks run through the innermost runner, plainly when there is none", "[autodiff][regions]") {
  struct Recorder : BlockRunner {
    std::vector<std::string> seen;
    Tensors run(const BlockInfo& info, const Tensors& in, const BlockBody& body) override {
      seen.push_back(info.name);
      return body(in);
    }
  } recorder;
  Tensor x = random_leaf({4}, 1);
  auto body = [](const Tensor& t) { return ops::gelu_tanh(t); };
  Tensor plain = run_block({0, 2, "b0"}, x, body);
  {
    BlockRunnerScope scope(recorder);
    Tensor y = run_block({1, 2, "b1"}, x, body);
    CHECK(y.to_host_f64() == plain.to_host_f64());
  }
  run_block({0, 2, "b0"}, x, body);
  CHECK(recorder.seen == std::vector<std::string>{"b1"});
  current_tape().clear();
}

TEST_CASE("a reversible block computes y1 = x1 + F(x2), y2 = x2 + G(y1)", "[autodiff][regions]") {
  Tensor x1 = random_tensor({4}, 1, DType::f64), x2 = random_tensor({4}, 2, DType::f64);
  ReversibleBody body{[](const Tensor& t) { return ops::gelu_tanh(t); },
                      [](const Tensor& t) { return ops::add(t, t); }};
  const Tensors y = run_reversible_block({0, 1, "r0"}, x1, x2, body);
  const auto a = x1.to_host_f64(), b = x2.to_host_f64(), y1 = y[0].to_host_f64(), y2 = y[1].to_host_f64();
  const auto f = ops::gelu_tanh(x2).to_host_f64();
  for (int i = 0; i < 4; ++i) {
    CHECK(y1[i] == test::Approx(a[i] + f[i]));
    CHECK(y2[i] == test::Approx(b[i] + 2 * y1[i]));
  }
}

TEST_CASE("backward rejects what it cannot seed", "[autodiff][errors]") {
  Tensor x = random_tensor({3}, 1, DType::f64);
  CHECK_THROWS_WITH(backward(x), test::Contains("shape [3]"));
  Tensor w = random_leaf({3}, 1);
  Tensor y = ops::gelu_tanh(w);
  CHECK_THROWS_WITH(backward(y, random_tensor({4}, 1, DType::f64)), test::Contains("gradient shape [4]"));
  current_tape().clear();
}
