// Forward and backward of every op at gpt2 `small` shapes (B 8, S 256,
// D 256, H 8, V 256); elements or FLOPs per second as counters.
#include <benchmark/benchmark.h>

#include <functional>

#include "autodiff/elementwise.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/tape.hpp"

namespace {

using remat::DType;
using remat::Shape;
using remat::Tensor;
namespace ops = remat::ops;

constexpr std::int64_t B = 8, S = 256, D = 256, H = 8, V = 256;

Tensor leaf(const Shape& s) {
  Tensor t = Tensor::parameter(s, DType::f32, "bench");
  remat::fill(t, 0.01);
  return t;
}

Tensor ids(const Shape& s, std::int32_t limit) {
  std::vector<std::int32_t> v(std::size_t(remat::numel(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::int32_t(i * 7919 % std::size_t(limit));
  return Tensor::from_host(v, s);
}

// Times forward alone, or forward then backward, of `op` on fixed inputs.
void run(benchmark::State& state, const std::function<Tensor()>& op, double work_per_call, bool with_backward) {
  for (auto _ : state) {
    Tensor y = op();
    if (with_backward) {
      Tensor g = Tensor::empty(y.shape(), y.dtype(), "bench_grad");
      remat::fill(g, 1.0);
      remat::backward(y, g);
    } else {
      remat::current_tape().clear();
    }
    remat::ExecSpace().fence();
  }
  // The forward's work per call, so a forward+backward row shows what backward adds.
  state.counters["fwd_work/s"] = benchmark::Counter(work_per_call, benchmark::Counter::kIsIterationInvariantRate);
}

[[maybe_unused]] const bool registered_ops = [] {
  struct Case {
    const char* name;
    std::function<std::function<Tensor()>()> make;  // builds inputs once, returns the call
    double work;                                    // FLOPs for GEMM-bound ops, elements otherwise
  };
  static const std::vector<Case> cases = {
      {"embedding", [] { auto w = leaf({V, D}); auto t = ids({B, S}, V); return std::function<Tensor()>([=] { return ops::embedding(w, t); }); }, double(B * S * D)},
      {"add", [] { auto a = leaf({B, S, D}), b = leaf({B, S, D}); return std::function<Tensor()>([=] { return ops::add(a, b); }); }, double(B * S * D)},
      {"linear_D_4D", [] { auto x = leaf({B, S, D}), w = leaf({4 * D, D}), b = leaf({4 * D}); return std::function<Tensor()>([=] { return ops::linear(x, w, b); }); }, 2.0 * B * S * D * 4 * D},
      {"layer_norm", [] { auto x = leaf({B, S, D}), w = leaf({D}), b = leaf({D}); return std::function<Tensor()>([=] { return ops::layer_norm(x, w, b, 1e-5); }); }, double(B * S * D)},
      {"rms_norm", [] { auto x = leaf({B, S, D}), w = leaf({D}); return std::function<Tensor()>([=] { return ops::rms_norm(x, w, 1e-5); }); }, double(B * S * D)},
      {"gelu_tanh", [] { auto x = leaf({B, S, 4 * D}); return std::function<Tensor()>([=] { return ops::gelu_tanh(x); }); }, double(B * S * 4 * D)},
      {"gelu_erf", [] { auto x = leaf({B, S, 4 * D}); return std::function<Tensor()>([=] { return ops::gelu_erf(x); }); }, double(B * S * 4 * D)},
      {"swiglu", [] { auto a = leaf({B, S, 688}), b = leaf({B, S, 688}); return std::function<Tensor()>([=] { return ops::swiglu(a, b); }); }, double(B * S * 688)},
      {"silu", [] { auto x = leaf({B, S, 688}); return std::function<Tensor()>([=] { return ops::silu(x); }); }, double(B * S * 688)},
      {"scale", [] { auto x = leaf({B, S, D}); return std::function<Tensor()>([=] { return ops::scale(x, 0.5); }); }, double(B * S * D)},
      {"dropout", [] { auto x = leaf({B, S, D}); return std::function<Tensor()>([=] { return ops::dropout(x, 0.1); }); }, double(B * S * D)},
      {"rotary", [] { auto x = leaf({B, S, D}); return std::function<Tensor()>([=] { return ops::rotary(x, int(D / H)); }); }, double(B * S * D)},
      {"attention_causal", [] { auto qkv = leaf({B, S, 3 * D}); return std::function<Tensor()>([=] { return ops::attention(qkv, int(H), true); }); }, 4.0 * B * S * S * D},
      {"attention_bidirectional", [] { auto qkv = leaf({B, S, 3 * D}); return std::function<Tensor()>([=] { return ops::attention(qkv, int(H), false); }); }, 4.0 * B * S * S * D},
      {"attention_causal_plain", [] { auto qkv = leaf({B, S, 3 * D}); return std::function<Tensor()>([=] {
         ops::AttentionKernelScope plain(ops::AttentionKernel::plain);  // keeps the probabilities
         return ops::attention(qkv, int(H), true); }); }, 4.0 * B * S * S * D},
      {"attention_gqa", [] { auto q = leaf({B, S, D}), k = leaf({B, S, D / 4}), v = leaf({B, S, D / 4}); return std::function<Tensor()>([=] { return ops::attention(q, k, v, int(H), 2, true); }); }, 4.0 * B * S * S * D},
      {"cross_entropy", [] { auto z = leaf({B, S, V}); auto t = ids({B, S}, V); return std::function<Tensor()>([=] { return ops::cross_entropy(z, t); }); }, double(B * S * V)},
  };
  for (const auto& c : cases)
    for (bool bwd : {false, true}) {
      const std::string name = std::string("BM_op/") + c.name + (bwd ? "/forward+backward" : "/forward");
      benchmark::RegisterBenchmark(name.c_str(), [&c, bwd](benchmark::State& st) { run(st, c.make(), c.work, bwd); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  return true;
}();

}  // namespace
