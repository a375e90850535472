// The GEMM front door against raw cblas_sgemm in the same run: the ceiling
// for everything GEMM-bound, and the dispatch overhead on top of it.
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

}  // namespace

BENCHMARK(BM_cblas_sgemm)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gemm_dispatch)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
