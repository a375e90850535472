// The GEMM front door against raw cblas_sgemm in the same run: the ceiling
// for everything GEMM-bound, and the dispatch overhead on top of it; and
// float32 against bfloat16 products at gpt2 small's shapes (docs/precision.md
// says which path a bf16 product takes on this CPU).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "autodiff/gemm.hpp"
#include "autodiff/tensor.hpp"

namespace {

void report(benchmark::State& state, double flops) {
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_cblas_sgemm(benchmark::State& state) {
  const int n = int(state.range(0));
  std::vector<float> a(std::size_t(n) * n, 0.5f), b(a), c(a);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  report(state, 2.0 * n * n * n);
}

void BM_gemm_dispatch(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  remat::Tensor a = remat::Tensor::zeros({n, n}, remat::DType::f32), b = a, c = a;
  for (auto _ : state) {
    using remat::MemSpace;
    remat::gemm::gemm(remat::ExecSpace(), remat::gemm::Op::N, remat::gemm::Op::N, 1.0f,
                      remat::gemm::matrix<MemSpace>(a.data<float>(), n, n, n),
                      remat::gemm::matrix<MemSpace>(b.data<float>(), n, n, n), 0.0f,
                      remat::gemm::matrix<MemSpace>(c.data<float>(), n, n, n));
    remat::ExecSpace().fence();
  }
  report(state, 2.0 * n * n * n);
}

// C[m, n] = A[m, k] B[k, n] through the front door, inputs of type T and the
// product of type C (bf16 -> bf16 for activations, bf16 -> float for weight
// gradients).
template <class T, class C>
void BM_gemm_precision(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  using remat::MemSpace;
  const auto t = remat::DTypeOf<T>::value, c_type = remat::DTypeOf<C>::value;
  remat::Tensor a = remat::Tensor::zeros({m, k}, t), b = remat::Tensor::zeros({k, n}, t);
  remat::Tensor c = remat::Tensor::zeros({m, n}, c_type);
  for (auto _ : state) {
    remat::gemm::gemm(remat::ExecSpace(), remat::gemm::Op::N, remat::gemm::Op::N, 1.0f,
                      remat::gemm::matrix<MemSpace>(a.data<T>(), m, k, k),
                      remat::gemm::matrix<MemSpace>(b.data<T>(), k, n, n), 0.0f,
                      remat::gemm::matrix<MemSpace>(c.data<C>(), m, n, n));
    remat::ExecSpace().fence();
  }
  report(state, 2.0 * double(m) * double(n) * double(k));
}

// gpt2 small (B 8 x S 256 = 2048 tokens, D 256, FFN 1024): the qkv, fc and
// proj products, and a weight gradient (dW = dy^T x: k is the tokens).
void gpt2_small_shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 768, 256})->Args({2048, 1024, 256})->Args({2048, 256, 1024})->Args({768, 256, 2048});
}

}  // namespace

BENCHMARK_TEMPLATE(BM_gemm_precision, float, float)->Apply(gpt2_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_gemm_precision, remat::bf16, remat::bf16)->Apply(gpt2_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_gemm_precision, remat::bf16, float)->Apply(gpt2_small_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_cblas_sgemm)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_dispatch)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
